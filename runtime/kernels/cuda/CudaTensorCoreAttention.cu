//===- CudaTensorCoreAttention.cu - attention on tensor cores -------------===//
//
// Attention forward and backward with 16-bit products on tensor cores, in
// the manner of FlashAttention-2: q, k, v and dout are rounded to bf16 or
// f16 as their tiles load into shared memory, every product is a WMMA
// 16x16x16 product with f32 sums, the probabilities are rounded to the
// 16-bit type before their product with v (and the score gradients before
// theirs with q and k), and softmax runs in f32. For a bf16 or f16 plan the
// operands are 16-bit values already, so only the probabilities and score
// gradients round; this is the arithmetic of PyTorch's and cuDNN's fused
// attention in 16 bits.
//
// Every kernel has 4 warps; a block owns 64 rows (query rows for the
// forward and dq, keys for dk and dv) and each warp 16 of them, one WMMA
// tile high. Per tile of 64 columns a warp forms its 16 x 64 scores (or
// transposed scores) in f32 shared memory; its 32 lanes then own one row
// half each (lane l: row l % 16, the columns of parity l / 16) for the
// softmax, and write the 16-bit probabilities (or score gradients) that the
// next product reads:
//
//   forward    query rows of one (sample, head), by key tiles; the output
//              accumulates in f32 shared memory, rescaled by each tile's
//              new row maximum (online softmax). With `stats` it writes
//              the backward's row statistics instead of the output: the
//              maximum, 1 / the softmax sum, and dout . out.
//   dq         the same tiling; dS . K accumulates in registers.
//   dk, dv     keys of one (sample, kv head), by the query tiles of each
//              query head that shares the kv head, in order; P^T . dout
//              and dS^T . q accumulate in registers.
//
// Sums run in a fixed order and every output element is written by one
// thread: no atomics, so results do not depend on timing. The kernels
// need compute capability 8.0 (bf16 WMMA); tensorCoresTake says no on
// older devices, and the f32 kernels of CudaAttention.cu run instead.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaAttentionCommon.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>

namespace triad::rt::cuda::attention_detail {

namespace {

namespace wmma = nvcuda::wmma;

/// Rows of a block, and columns of a score tile.
constexpr int kTile = 64;
/// Rows of a warp: one WMMA tile.
constexpr int kWarpRows = 16;
static_assert(kWarps * kWarpRows == kTile, "the warps cover a block's rows");
/// The columns of a score tile a lane owns (every other one).
constexpr int kLaneColumns = kTile / 2;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TRIAD_TENSOR_CORES 1
#else
#define TRIAD_TENSOR_CORES 0
#endif

template <typename T> __device__ __forceinline__ T rounded(float x);
template <> __device__ __forceinline__ __nv_bfloat16 rounded(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half rounded(float x) {
  return __float2half_rn(x);
}

/// Shared-memory row strides, in elements: 16-bit tiles of kD columns and
/// of kTile columns are 8 elements (16 bytes) wider than their rows, f32
/// tiles 4 floats, so consecutive rows start on different banks while
/// every 16 x 16 fragment starts 32-byte aligned, as WMMA needs.
template <int kD> struct Strides {
  static constexpr int kHead = kD + 8;       // 16-bit [row][kD]
  static constexpr int kScore16 = kTile + 8; // 16-bit [row][kTile]
  static constexpr int kScore32 = kTile + 4; // f32 [row][kTile]
  static constexpr int kHead32 = kD + 4;     // f32 [row][kD]
  static constexpr size_t kHeadTile = size_t{kTile} * kHead;
  static constexpr size_t kScoreTile16 = size_t{kTile} * kScore16;
  static constexpr size_t kScoreTile32 = size_t{kTile} * kScore32;
  static constexpr size_t kHeadTile32 = size_t{kTile} * kHead32;
};

using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// The lane's row within its warp's 16, and which columns it owns (those of
/// parity `half`).
struct LaneRow {
  int row, half;
};
__device__ __forceinline__ LaneRow laneRow() {
  const int lane = threadIdx.x % 32;
  return {lane % kWarpRows, lane / kWarpRows};
}

/// Copies rows [0, validRows) of a tile (row r at src + r * srcStride, its
/// first `width` columns) into shared memory as T, row r at dst + r *
/// stride; other rows and the columns from `width` to kD are zeros. With
/// `vector` (width a multiple of 4, rows 16-byte aligned) it reads float4s.
/// Every thread of the block takes part.
template <typename T, int kD>
__device__ __forceinline__ void loadTile(T *dst, int stride, const float *src,
                                         int64_t srcStride, int validRows,
                                         int width, bool vector) {
  constexpr int kQuads = kD / 4;
#pragma unroll 4
  for (int unit = threadIdx.x; unit < kTile * kQuads; unit += kThreads) {
    const int r = unit / kQuads, c = 4 * (unit % kQuads);
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (r < validRows) {
      const float *row = src + r * srcStride;
      if (vector) {
        if (c < width) {
          const float4 v = *reinterpret_cast<const float4 *>(row + c);
          x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (c + e < width)
            x[e] = row[c + e];
      }
    }
    T *to = dst + r * stride + c;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      to[e] = rounded<T>(x[e]);
  }
}

/// out[16][kTile] (f32, stride kScore32) = a[16][kD] . b[kTile][kD]^T, the
/// dot products of 16 rows of `a` with kTile rows of `b` (16-bit tiles of
/// stride kHead): scores of query rows against keys, or transposed.
template <typename T, int kD>
__device__ __forceinline__ void dotRows(float *out, const T *a, const T *b) {
  using S = Strides<kD>;
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    Accumulator acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < kD / 16; ++k) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> x;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> y;
      wmma::load_matrix_sync(x, a + k * 16, S::kHead);
      wmma::load_matrix_sync(y, b + n * 16 * S::kHead + k * 16, S::kHead);
      wmma::mma_sync(acc, x, y, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, S::kScore32,
                            wmma::mem_row_major);
  }
}

/// acc[16][kD] += a[16][kTile] (16-bit, stride kScore16) . b[kTile][kD]
/// (16-bit, stride kHead), kD / 16 fragments of 16 columns.
template <typename T, int kD>
__device__ __forceinline__ void accumulate(Accumulator (&acc)[kD / 16],
                                           const T *a, const T *b) {
  using S = Strides<kD>;
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> x;
    wmma::load_matrix_sync(x, a + k * 16, S::kScore16);
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> y;
      wmma::load_matrix_sync(y, b + k * 16 * S::kHead + n * 16, S::kHead);
      wmma::mma_sync(acc[n], x, y, acc[n]);
    }
  }
}

/// Writes a warp's accumulated 16 rows of kD columns, times `factor`, to
/// dst (row r at dst + r * stride), rows [0, validRows) and columns [0,
/// width) only, through the warp's 16 rows of f32 staging (stride
/// kScore32), 64 columns at a time.
template <int kD>
__device__ __forceinline__ void
storeRows(Accumulator (&acc)[kD / 16], float *staging, float *dst,
          int64_t stride, int validRows, int width, float factor) {
  using S = Strides<kD>;
  const LaneRow lane = laneRow();
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::store_matrix_sync(staging + n % 4 * 16, acc[n], S::kScore32,
                            wmma::mem_row_major);
    if (n % 4 == 3 || n == kD / 16 - 1) {
      __syncwarp();
      const int first = n / 4 * 64, columns = (n % 4 + 1) * 16;
      if (lane.row < validRows)
        for (int c = lane.half; c < columns; c += 2)
          if (first + c < width)
            dst[lane.row * stride + first + c] =
                staging[lane.row * S::kScore32 + c] * factor;
      __syncwarp();
    }
  }
}

/// The rows of a 64-row block that fall in [0, count), for warp `warp`.
__device__ __forceinline__ int warpRows(int64_t count, int64_t blockRow0,
                                        int warp) {
  const int64_t rows = count - blockRow0 - warp * kWarpRows;
  return rows < 0 ? 0 : rows > kWarpRows ? kWarpRows : static_cast<int>(rows);
}

//===----------------------------------------------------------------------===//
// Forward (and the backward's row statistics)
//===----------------------------------------------------------------------===//

template <typename T, int kD> constexpr size_t forwardBytes() {
  using S = Strides<kD>;
  return sizeof(T) * (3 * S::kHeadTile + S::kScoreTile16) +
         sizeof(float) * (S::kScoreTile32 + S::kHeadTile32);
}

/// Grid: (query tiles, heads, batch).
template <typename T, int kD, bool kStats>
__global__ void __launch_bounds__(kThreads)
    tensorCoreForwardKernel(AttentionParams p, float *out, const float *dout,
                            RowStats stats) {
#if TRIAD_TENSOR_CORES
  using S = Strides<kD>;
  extern __shared__ __align__(128) unsigned char shared[];
  T *qTile = reinterpret_cast<T *>(shared);
  T *kTileShared = qTile + S::kHeadTile;
  T *vTile = kTileShared + S::kHeadTile;
  T *pTile = vTile + S::kHeadTile;
  float *sTile = reinterpret_cast<float *>(pTile + S::kScoreTile16);
  float *oTile = sTile + S::kScoreTile32;

  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int kvHead = h / (p.heads / p.kvHeads);
  const Visibility vis = visibility(p, b);
  const HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
  const HeadRows kRows =
      headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const HeadRows vRows =
      headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  loadTile<T, kD>(
      qTile, S::kHead, qRows.base + row0 * qRows.stride, qRows.stride,
      static_cast<int>(min64(kTile, p.querySeq - row0)), p.headDim, p.vector);
  for (int e = threadIdx.x; e < static_cast<int>(S::kHeadTile32); e += kThreads)
    oTile[e] = 0.0f;

  const int warp = threadIdx.x / 32;
  const LaneRow lane = laneRow();
  const int row = warp * kWarpRows + lane.row;
  const int64_t i = row0 + row;
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  float *warpScores = sTile + warp * kWarpRows * S::kScore32;
  float runningMax = -INFINITY, runningSum = 0.0f;
  const int64_t keyEnd = vis.keyEnd(min64(row0 + kTile, p.querySeq));
  for (int64_t key0 = 0; key0 < keyEnd; key0 += kTile) {
    const int validKeys = static_cast<int>(min64(kTile, p.keySeq - key0));
    __syncthreads(); // the last tile's keys and values are used up
    loadTile<T, kD>(kTileShared, S::kHead, kRows.base + key0 * kRows.stride,
                    kRows.stride, validKeys, p.headDim, p.vector);
    loadTile<T, kD>(vTile, S::kHead, vRows.base + key0 * vRows.stride,
                    vRows.stride, validKeys, p.headDim, p.vector);
    __syncthreads();
    dotRows<T, kD>(warpScores, qTile + warp * kWarpRows * S::kHead,
                   kTileShared);
    __syncwarp();
    // Online softmax over the lane's half of its row.
    const float *dots = sTile + row * S::kScore32;
    float scores[kLaneColumns];
    float tileMax = -INFINITY;
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const int column = 2 * c + lane.half;
      const int64_t j = key0 + column;
      scores[c] = i < p.querySeq && vis.sees(i, j)
                      ? score(dots[column], p.scale, alibi, slope, i, j)
                      : -INFINITY;
      tileMax = fmaxf(tileMax, scores[c]);
    }
    tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 16));
    const float newMax = fmaxf(runningMax, tileMax);
    const float base = newMax == -INFINITY ? 0.0f : newMax;
    const float rescale = __expf(runningMax - base);
    T *probabilities = pTile + row * S::kScore16;
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const float e = __expf(scores[c] - base);
      sum += e;
      probabilities[2 * c + lane.half] = rounded<T>(e);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    runningSum = runningSum * rescale + sum;
    runningMax = newMax;
    float *o = oTile + row * S::kHead32;
    for (int d = lane.half; d < kD; d += 2)
      o[d] *= rescale;
    __syncwarp();
    // O += P . V for the warp's rows, in shared memory.
    float *warpOut = oTile + warp * kWarpRows * S::kHead32;
    const T *warpP = pTile + warp * kWarpRows * S::kScore16;
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      Accumulator acc;
      wmma::load_matrix_sync(acc, warpOut + n * 16, S::kHead32,
                             wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kTile / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> x;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> y;
        wmma::load_matrix_sync(x, warpP + k * 16, S::kScore16);
        wmma::load_matrix_sync(y, vTile + k * 16 * S::kHead + n * 16, S::kHead);
        wmma::mma_sync(acc, x, y, acc);
      }
      wmma::store_matrix_sync(warpOut + n * 16, acc, S::kHead32,
                              wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads(); // with no key tile, the zeroed output of other threads
  const float inverse = runningSum > 0.0f ? 1.0f / runningSum : 0.0f;
  const float *o = oTile + row * S::kHead32;
  const int64_t offset = (qRows.base - p.q) + i * qRows.stride;
  if constexpr (!kStats) {
    if (i < p.querySeq)
      for (int d = lane.half; d < p.headDim; d += 2)
        out[offset + d] = o[d] * inverse;
  } else {
    float delta = 0.0f;
    if (i < p.querySeq)
      for (int d = lane.half; d < p.headDim; d += 2)
        delta += dout[offset + d] * (o[d] * inverse);
    delta += __shfl_xor_sync(0xffffffffu, delta, 16);
    if (lane.half == 0 && i < p.querySeq) {
      const int64_t at = (b * p.heads + h) * p.querySeq + i;
      stats.max[at] = runningMax == -INFINITY ? 0.0f : runningMax;
      stats.inverse[at] = inverse;
      stats.delta[at] = delta;
    }
  }
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// Backward: dq
//===----------------------------------------------------------------------===//

template <typename T, int kD> constexpr size_t queryGradBytes() {
  using S = Strides<kD>;
  return sizeof(T) * (4 * S::kHeadTile + S::kScoreTile16) +
         sizeof(float) * S::kScoreTile32;
}

/// Grid: (query tiles, heads, batch).
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    tensorCoreGradQueryKernel(AttentionParams p, const float *dout,
                              RowStats stats, float *dq) {
#if TRIAD_TENSOR_CORES
  using S = Strides<kD>;
  extern __shared__ __align__(128) unsigned char shared[];
  T *qTile = reinterpret_cast<T *>(shared);
  T *doTile = qTile + S::kHeadTile;
  T *kTileShared = doTile + S::kHeadTile;
  T *vTile = kTileShared + S::kHeadTile;
  T *dsTile = vTile + S::kHeadTile;
  float *sTile = reinterpret_cast<float *>(dsTile + S::kScoreTile16);

  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int kvHead = h / (p.heads / p.kvHeads);
  const Visibility vis = visibility(p, b);
  const HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
  const HeadRows kRows =
      headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const HeadRows vRows =
      headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int64_t rowOffset = (qRows.base - p.q) + row0 * qRows.stride;
  const int validRows = static_cast<int>(min64(kTile, p.querySeq - row0));
  loadTile<T, kD>(qTile, S::kHead, p.q + rowOffset, qRows.stride, validRows,
                  p.headDim, p.vector);
  loadTile<T, kD>(doTile, S::kHead, dout + rowOffset, qRows.stride, validRows,
                  p.headDim, p.vector);

  const int warp = threadIdx.x / 32;
  const LaneRow lane = laneRow();
  const int row = warp * kWarpRows + lane.row;
  const int64_t i = row0 + row;
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  float rowMax = 0.0f, rowInverse = 0.0f, rowDelta = 0.0f;
  if (i < p.querySeq) {
    const int64_t at = (b * p.heads + h) * p.querySeq + i;
    rowMax = stats.max[at];
    rowInverse = stats.inverse[at];
    rowDelta = stats.delta[at];
  }
  float *warpScores = sTile + warp * kWarpRows * S::kScore32;
  const float *scores = sTile + row * S::kScore32;
  T *gradients = dsTile + row * S::kScore16;
  Accumulator acc[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n)
    wmma::fill_fragment(acc[n], 0.0f);
  const int64_t keyEnd = vis.keyEnd(min64(row0 + kTile, p.querySeq));
  for (int64_t key0 = 0; key0 < keyEnd; key0 += kTile) {
    const int validKeys = static_cast<int>(min64(kTile, p.keySeq - key0));
    __syncthreads();
    loadTile<T, kD>(kTileShared, S::kHead, kRows.base + key0 * kRows.stride,
                    kRows.stride, validKeys, p.headDim, p.vector);
    loadTile<T, kD>(vTile, S::kHead, vRows.base + key0 * vRows.stride,
                    vRows.stride, validKeys, p.headDim, p.vector);
    __syncthreads();
    const T *warpQ = qTile + warp * kWarpRows * S::kHead;
    dotRows<T, kD>(warpScores, warpQ, kTileShared);
    __syncwarp();
    float probability[kLaneColumns];
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const int column = 2 * c + lane.half;
      const int64_t j = key0 + column;
      probability[c] =
          i < p.querySeq && vis.sees(i, j)
              ? __expf(score(scores[column], p.scale, alibi, slope, i, j) -
                       rowMax) *
                    rowInverse
              : 0.0f;
    }
    __syncwarp();
    // dP = dout . V^T, then dS = P (dP - D), rounded for dS . K.
    dotRows<T, kD>(warpScores, doTile + warp * kWarpRows * S::kHead, vTile);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kLaneColumns; ++c) {
      const int column = 2 * c + lane.half;
      gradients[column] =
          rounded<T>(probability[c] * (scores[column] - rowDelta));
    }
    __syncwarp();
    accumulate<T, kD>(acc, dsTile + warp * kWarpRows * S::kScore16,
                      kTileShared);
  }
  storeRows<kD>(acc, warpScores,
                dq + rowOffset + warp * kWarpRows * qRows.stride, qRows.stride,
                warpRows(p.querySeq, row0, warp), p.headDim, p.scale);
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// Backward: dk and dv
//===----------------------------------------------------------------------===//

template <typename T, int kD> constexpr size_t keyGradBytes() {
  using S = Strides<kD>;
  return sizeof(T) * (4 * S::kHeadTile + 2 * S::kScoreTile16) +
         sizeof(float) * (S::kScoreTile32 + 3 * kTile);
}

/// Grid: (key tiles, kv heads, batch).
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    tensorCoreGradKeyValueKernel(AttentionParams p, const float *dout,
                                 RowStats stats, float *dk, float *dv) {
#if TRIAD_TENSOR_CORES
  using S = Strides<kD>;
  extern __shared__ __align__(128) unsigned char shared[];
  T *kTileShared = reinterpret_cast<T *>(shared);
  T *vTile = kTileShared + S::kHeadTile;
  T *qTile = vTile + S::kHeadTile;
  T *doTile = qTile + S::kHeadTile;
  T *pTile = doTile + S::kHeadTile;
  T *dsTile = pTile + S::kScoreTile16;
  float *sTile = reinterpret_cast<float *>(dsTile + S::kScoreTile16);
  float *tileMax = sTile + S::kScoreTile32;
  float *tileInverse = tileMax + kTile;
  float *tileDelta = tileInverse + kTile;

  const int64_t b = blockIdx.z;
  const int kvHead = blockIdx.y;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const Visibility vis = visibility(p, b);
  const HeadRows kRows =
      headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const HeadRows vRows =
      headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  loadTile<T, kD>(kTileShared, S::kHead, kRows.base + key0 * kRows.stride,
                  kRows.stride, static_cast<int>(min64(kTile, p.keySeq - key0)),
                  p.headDim, p.vector);
  loadTile<T, kD>(vTile, S::kHead, vRows.base + key0 * vRows.stride,
                  vRows.stride, static_cast<int>(min64(kTile, p.keySeq - key0)),
                  p.headDim, p.vector);

  const int warp = threadIdx.x / 32;
  const LaneRow lane = laneRow();
  const int keyRow = warp * kWarpRows + lane.row;
  const int64_t j = key0 + keyRow;
  const bool alibi = p.alibiSlopes != nullptr;
  float *warpScores = sTile + warp * kWarpRows * S::kScore32;
  const float *scores = sTile + keyRow * S::kScore32;
  T *probabilities = pTile + keyRow * S::kScore16;
  T *gradients = dsTile + keyRow * S::kScore16;
  Accumulator dkAcc[kD / 16], dvAcc[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::fill_fragment(dkAcc[n], 0.0f);
    wmma::fill_fragment(dvAcc[n], 0.0f);
  }
  const int group = p.heads / p.kvHeads;
  const int64_t firstTile = vis.firstRow(key0) / kTile * kTile;
  for (int g = 0; g < group; ++g) {
    const int h = kvHead * group + g;
    const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
    const HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
    for (int64_t row0 = firstTile; row0 < p.querySeq; row0 += kTile) {
      const int validRows = static_cast<int>(min64(kTile, p.querySeq - row0));
      const int64_t rowOffset = (qRows.base - p.q) + row0 * qRows.stride;
      __syncthreads(); // the last query tile is used up
      loadTile<T, kD>(qTile, S::kHead, p.q + rowOffset, qRows.stride, validRows,
                      p.headDim, p.vector);
      loadTile<T, kD>(doTile, S::kHead, dout + rowOffset, qRows.stride,
                      validRows, p.headDim, p.vector);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const int64_t at = (b * p.heads + h) * p.querySeq + row0 + r;
        const bool valid = r < validRows;
        tileMax[r] = valid ? stats.max[at] : 0.0f;
        tileInverse[r] = valid ? stats.inverse[at] : 0.0f;
        tileDelta[r] = valid ? stats.delta[at] : 0.0f;
      }
      __syncthreads();
      // P^T from the transposed scores K . q^T.
      dotRows<T, kD>(warpScores, kTileShared + warp * kWarpRows * S::kHead,
                     qTile);
      __syncwarp();
      float probability[kLaneColumns];
#pragma unroll
      for (int c = 0; c < kLaneColumns; ++c) {
        const int column = 2 * c + lane.half;
        const int64_t i = row0 + column;
        probability[c] =
            column < validRows && vis.sees(i, j)
                ? __expf(score(scores[column], p.scale, alibi, slope, i, j) -
                         tileMax[column]) *
                      tileInverse[column]
                : 0.0f;
        probabilities[column] = rounded<T>(probability[c]);
      }
      __syncwarp();
      // dP^T = V . dout^T, then dS^T = P^T (dP^T - D).
      dotRows<T, kD>(warpScores, vTile + warp * kWarpRows * S::kHead, doTile);
      __syncwarp();
#pragma unroll
      for (int c = 0; c < kLaneColumns; ++c) {
        const int column = 2 * c + lane.half;
        gradients[column] =
            rounded<T>(probability[c] * (scores[column] - tileDelta[column]));
      }
      __syncwarp();
      accumulate<T, kD>(dvAcc, pTile + warp * kWarpRows * S::kScore16, doTile);
      accumulate<T, kD>(dkAcc, dsTile + warp * kWarpRows * S::kScore16, qTile);
    }
  }
  const int validKeys = warpRows(p.keySeq, key0, warp);
  const int64_t keyOffset =
      (kRows.base - p.k) + (key0 + warp * kWarpRows) * kRows.stride;
  storeRows<kD>(dvAcc, warpScores, dv + keyOffset, kRows.stride, validKeys,
                p.headDim, 1.0f);
  storeRows<kD>(dkAcc, warpScores, dk + keyOffset, kRows.stride, validKeys,
                p.headDim, p.scale);
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

template <typename T, int kD>
absl::Status forwardOf(CudaContext &context, const AttentionParams &params,
                       int64_t batch, float *out, const float *dout,
                       const RowStats *stats) {
  dim3 grid(tiles(params.querySeq, kTile), static_cast<unsigned>(params.heads),
            static_cast<unsigned>(batch));
  constexpr size_t bytes = forwardBytes<T, kD>();
  if (stats)
    return launch(context, tensorCoreForwardKernel<T, kD, true>,
                  "tensorCoreForwardKernel (statistics)", grid, bytes, params,
                  out, dout, *stats);
  return launch(context, tensorCoreForwardKernel<T, kD, false>,
                "tensorCoreForwardKernel", grid, bytes, params, out, dout,
                RowStats{});
}

template <typename T, int kD>
absl::Status backwardOf(CudaContext &context, const AttentionParams &params,
                        int64_t batch, const float *dout, const RowStats &stats,
                        float *dq, float *dk, float *dv) {
  if (absl::Status s =
          forwardOf<T, kD>(context, params, batch, nullptr, dout, &stats);
      !s.ok())
    return s;
  dim3 queryGrid(tiles(params.querySeq, kTile),
                 static_cast<unsigned>(params.heads),
                 static_cast<unsigned>(batch));
  if (absl::Status s = launch(context, tensorCoreGradQueryKernel<T, kD>,
                              "tensorCoreGradQueryKernel", queryGrid,
                              queryGradBytes<T, kD>(), params, dout, stats, dq);
      !s.ok())
    return s;
  if (params.keySeq == 0)
    return absl::OkStatus();
  dim3 keyGrid(tiles(params.keySeq, kTile),
               static_cast<unsigned>(params.kvHeads),
               static_cast<unsigned>(batch));
  return launch(context, tensorCoreGradKeyValueKernel<T, kD>,
                "tensorCoreGradKeyValueKernel", keyGrid, keyGradBytes<T, kD>(),
                params, dout, stats, dk, dv);
}

/// The launches for the head-dimension class (32, 64 or 128) of a shape
/// tensorCoresTake took.
template <typename T>
absl::Status forwardByHead(CudaContext &context, const AttentionParams &params,
                           int64_t batch, float *out, const float *dout,
                           const RowStats *stats) {
  if (params.headDim <= 32)
    return forwardOf<T, 32>(context, params, batch, out, dout, stats);
  if (params.headDim <= 64)
    return forwardOf<T, 64>(context, params, batch, out, dout, stats);
  return forwardOf<T, 128>(context, params, batch, out, dout, stats);
}

template <typename T>
absl::Status backwardByHead(CudaContext &context, const AttentionParams &params,
                            int64_t batch, const float *dout,
                            const RowStats &stats, float *dq, float *dk,
                            float *dv) {
  if (params.headDim <= 32)
    return backwardOf<T, 32>(context, params, batch, dout, stats, dq, dk, dv);
  if (params.headDim <= 64)
    return backwardOf<T, 64>(context, params, batch, dout, stats, dq, dk, dv);
  return backwardOf<T, 128>(context, params, batch, dout, stats, dq, dk, dv);
}

} // namespace

bool tensorCoresTake(const cpu::AttentionShape &shape, DType products) {
  if (products != DType::BF16 && products != DType::F16)
    return false;
  if (shape.headDim % 16 != 0 || shape.headDim > 128)
    return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess)
    return false;
  return major >= 8;
}

absl::Status tensorCoreForward(CudaContext &context,
                               const AttentionParams &params, int64_t batch,
                               DType products, float *out, const float *dout,
                               const RowStats *stats) {
  if (products == DType::BF16)
    return forwardByHead<__nv_bfloat16>(context, params, batch, out, dout,
                                        stats);
  return forwardByHead<__half>(context, params, batch, out, dout, stats);
}

absl::Status tensorCoreBackward(CudaContext &context,
                                const AttentionParams &params, int64_t batch,
                                DType products, const float *dout,
                                const RowStats &stats, float *dq, float *dk,
                                float *dv) {
  if (products == DType::BF16)
    return backwardByHead<__nv_bfloat16>(context, params, batch, dout, stats,
                                         dq, dk, dv);
  return backwardByHead<__half>(context, params, batch, dout, stats, dq, dk,
                                dv);
}

} // namespace triad::rt::cuda::attention_detail
