//===- CudaAttention.cu - attention, rope and dropout on CUDA -------------===//
//
// See CudaAttention.h.
//
// Attention is tiled in the manner of FlashAttention-2, in fp32 on the CUDA
// cores (TF32 tensor cores would not stay within 1e-5 of the CPU backend).
// Every kernel has 4 warps, and every product in it is a register-tiled
// matrix product over shared memory (tileProduct): each thread owns a few
// rows by 4 or 8 columns of the block's tile, so one float4 read of each
// operand feeds 8 to 32 fused multiply-adds. What a block owns depends on
// the kernel:
//
//   forward    a tile of query rows of one (sample, head), by key tiles;
//              each thread keeps the running maximum, running sum and
//              output accumulator of its rows in registers. K and V tiles
//              stream through shared memory; the probabilities of a tile
//              go through shared memory into the P.V product. Under the
//              causal mask the loop stops at the tile's last row, so tiles
//              above the diagonal are never loaded.
//   dQ         the same tiling; it recomputes P from the row statistics
//              and accumulates dS.K for its rows over the key tiles.
//   dK, dV     a tile of keys of one (sample, kv head), by query tiles; it
//              loops over the query heads sharing the kv head and, for
//              each, over the query tiles that may see its keys, in order.
//
// Operands of score dot products sit transposed in shared memory (head
// dimension major), so every kernel forms a score with the same fused
// multiply-adds in the same order and the backward recomputes the
// forward's scores bit for bit. The backward gets no forward output, so it
// first runs the forward kernel in a statistics mode that writes, per
// (sample, head, query row), the row's maximum score, the inverse of its
// softmax sum and D = dout . out (the rowsum of P * dP) into context
// scratch; dQ and dK/dV read them. Every sum runs in a fixed order (a
// thread's columns in order, reductions over the 8 lanes that share rows
// by butterfly, whose result every lane gets bit for bit), and every
// output element is written by one thread: no atomics, so results are
// deterministic. Softmax sums accumulate in double, as on the CPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaAttention.h"

#include "runtime/init/PhiloxRounds.h"
#include "runtime/kernels/cuda/CudaAttentionCommon.cuh"
#include "runtime/kernels/cuda/CudaCheck.h"
#include "runtime/kernels/cuda/CudaElementAccess.cuh"

#include <cuda_runtime.h>

#include "absl/status/statusor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace triad::rt::cuda {

namespace {

using namespace attention_detail;
using namespace element_access;

/// Grid-stride elementwise kernels (rope, dropout).
constexpr int kElementThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

unsigned elementBlocks(int64_t count) {
  return static_cast<unsigned>(std::max<int64_t>(
      1,
      std::min(kMaxBlocks, (count + kElementThreads - 1) / kElementThreads)));
}

/// The maximum and the sum over the 8 lanes of an aligned group (lanes
/// 8g to 8g + 7), which share rows in every kernel; every lane of the group
/// gets the same bits (each butterfly step combines the same two values on
/// both lanes). Every lane of the warp must call them.
__device__ __forceinline__ float groupMax(float v) {
  for (int offset = 4; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <typename T> __device__ __forceinline__ T groupSum(T v) {
  for (int offset = 4; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Copies the kRows rows of a tile (row r at src + r * srcStride, columns
/// [0, width), width <= kWidth) into shared memory, natural (row r at dst +
/// r * kWidth, columns from `width` on zeros) or kTransposed (column c at
/// dst + c * stride, for c < width); rows from `validRows` on get zeros.
/// Every thread of the block takes part. Each thread first reads a batch of
/// its elements, then writes them, so that the reads wait for memory once
/// rather than one after another; with `vector` (width a multiple of 4 and
/// rows 16-byte aligned) it reads float4s. Transposed, the lanes of a warp
/// take consecutive rows, so their writes hit distinct banks when `stride`
/// is 4 more than a multiple of 32.
template <int kRows, int kWidth, bool kTransposed>
__device__ __forceinline__ void
loadTile(float *dst, int stride, const float *src, int64_t srcStride,
         int validRows, int width, bool vector) {
  static_assert(kRows * kWidth % (4 * kThreads) == 0,
                "every thread copies whole float4s");
  if (vector) {
    constexpr int kColumns = kWidth / 4; // float4s of a row
    constexpr int kCount = kRows * kColumns / kThreads;
    constexpr int kBatch = kCount < 8 ? kCount : 8;
    static_assert(kCount % kBatch == 0, "whole batches");
#pragma unroll 1
    for (int first = 0; first < kCount; first += kBatch) {
      float4 values[kBatch];
#pragma unroll
      for (int e = 0; e < kBatch; ++e) {
        const int unit = (first + e) * kThreads + threadIdx.x;
        const int r = kTransposed ? unit % kRows : unit / kColumns;
        const int c = 4 * (kTransposed ? unit / kRows : unit % kColumns);
        values[e] =
            r < validRows && c < width
                ? *reinterpret_cast<const float4 *>(src + r * srcStride + c)
                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int e = 0; e < kBatch; ++e) {
        const int unit = (first + e) * kThreads + threadIdx.x;
        const int r = kTransposed ? unit % kRows : unit / kColumns;
        const int c = 4 * (kTransposed ? unit / kRows : unit % kColumns);
        if constexpr (kTransposed) {
          if (c < width) {
            dst[c * stride + r] = values[e].x;
            dst[(c + 1) * stride + r] = values[e].y;
            dst[(c + 2) * stride + r] = values[e].z;
            dst[(c + 3) * stride + r] = values[e].w;
          }
        } else {
          *reinterpret_cast<float4 *>(dst + r * kWidth + c) = values[e];
        }
      }
    }
  } else {
    constexpr int kCount = kRows * kWidth / kThreads;
    constexpr int kBatch = kCount < 8 ? kCount : 8;
    static_assert(kCount % kBatch == 0, "whole batches");
#pragma unroll 1
    for (int first = 0; first < kCount; first += kBatch) {
      float values[kBatch];
#pragma unroll
      for (int e = 0; e < kBatch; ++e) {
        const int unit = (first + e) * kThreads + threadIdx.x;
        const int r = kTransposed ? unit % kRows : unit / kWidth;
        const int c = kTransposed ? unit / kRows : unit % kWidth;
        values[e] = r < validRows && c < width ? src[r * srcStride + c] : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < kBatch; ++e) {
        const int unit = (first + e) * kThreads + threadIdx.x;
        const int r = kTransposed ? unit % kRows : unit / kWidth;
        const int c = kTransposed ? unit / kRows : unit % kWidth;
        if constexpr (kTransposed) {
          if (c < width)
            dst[c * stride + r] = values[e];
        } else {
          dst[r * kWidth + c] = values[e];
        }
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention: thread tiles
//===----------------------------------------------------------------------===//

/// How the 128 threads of a block split a tile of kM rows by kN columns
/// (queries by keys, or keys by queries): lane l of warp w owns the kR rows
/// from w * 4 kR + (l / 8) kR, and the columns 32 u + 4 (l % 8) + [0, 4)
/// for u < kU. The 8 lanes that share rows are an aligned group of the
/// warp. An accumulator over the head dimension splits its columns the same
/// way (columnOf), kMaxD / 32 groups of 4 per thread.
template <int kR, int kU> struct ThreadTile {
  static constexpr int kM = kWarps * 4 * kR;
  static constexpr int kN = 32 * kU;
  /// Row strides of transposed tiles of kM and of kN columns: 4 more than
  /// a multiple of 32 (see loadTile), and a multiple of 4 (float4
  /// reads).
  static constexpr int kMStride = kM + 4;
  static constexpr int kNStride = kN + 4;
};

/// The first of the thread's kR rows within its block's tile.
template <int kR> __device__ __forceinline__ int firstRowOfThread() {
  return threadIdx.x / 32 * 4 * kR + threadIdx.x % 32 / 8 * kR;
}

/// The column (score or head dimension) of a thread's c-th column, for the
/// lane group position `group` = lane % 8.
__device__ __forceinline__ int columnOf(int c, int group) {
  return 32 * (c / 4) + 4 * group + c % 4;
}

template <int kR>
__device__ __forceinline__ void loadRows(float (&a)[kR], const float *p) {
  if constexpr (kR == 4) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
  } else if constexpr (kR == 2) {
    const float2 v = *reinterpret_cast<const float2 *>(p);
    a[0] = v.x, a[1] = v.y;
  } else {
    static_assert(kR == 1, "rows per thread are 1, 2 or 4");
    a[0] = *p;
  }
}

template <int kR>
__device__ __forceinline__ void storeRows(float *p, const float (&a)[kR]) {
  if constexpr (kR == 4) {
    *reinterpret_cast<float4 *>(p) = make_float4(a[0], a[1], a[2], a[3]);
  } else if constexpr (kR == 2) {
    *reinterpret_cast<float2 *>(p) = make_float2(a[0], a[1]);
  } else {
    static_assert(kR == 1, "rows per thread are 1, 2 or 4");
    *p = a[0];
  }
}

/// acc[r][c] += sum over k < depth, in order, of a[k][row0 + r] *
/// b[k][columnOf(c, group)]: `a` holds rows of `aStride` floats, `b` of
/// `bStride`. Every product of the kernels is one call: a score's dot
/// product over the head dimension (with transposed tiles, the same fused
/// multiply-adds in the same order in every kernel, so the backward
/// recomputes the forward's scores bit for bit), and the products of
/// probabilities or score gradients with a natural tile.
template <int kR, int kU>
__device__ __forceinline__ void
tileProduct(float (&acc)[kR][4 * kU], const float *a, int aStride,
            const float *b, int bStride, int row0, int group, int depth) {
#pragma unroll 4
  for (int k = 0; k < depth; ++k) {
    float rows[kR];
    loadRows<kR>(rows, a + k * aStride + row0);
    float4 columns[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      columns[u] = *reinterpret_cast<const float4 *>(b + k * bStride + 32 * u +
                                                     4 * group);
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        acc[r][4 * u] = fmaf(rows[r], columns[u].x, acc[r][4 * u]);
        acc[r][4 * u + 1] = fmaf(rows[r], columns[u].y, acc[r][4 * u + 1]);
        acc[r][4 * u + 2] = fmaf(rows[r], columns[u].z, acc[r][4 * u + 2]);
        acc[r][4 * u + 3] = fmaf(rows[r], columns[u].w, acc[r][4 * u + 3]);
      }
  }
}

template <int kR, int kC>
__device__ __forceinline__ void zero(float (&acc)[kR][kC]) {
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int c = 0; c < kC; ++c)
      acc[r][c] = 0.0f;
}

/// Stores column c of a thread's [kR][kC] values at p[columnOf(c) *
/// stride + row0] (a transposed tile: the thread's rows are contiguous).
template <int kR, int kC>
__device__ __forceinline__ void storeColumns(float *p, int stride, int row0,
                                             int group,
                                             const float (&values)[kR][kC]) {
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    float column[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      column[r] = values[r][c];
    storeRows<kR>(p + columnOf(c, group) * stride + row0, column);
  }
}

/// Shared memory of each kernel, in floats.
template <int kMaxD, int kR, int kU> constexpr size_t forwardShared() {
  using T = ThreadTile<kR, kU>;
  return size_t{kMaxD} * T::kMStride + size_t{kMaxD} * T::kNStride +
         size_t{T::kN} * kMaxD + size_t{T::kN} * T::kMStride;
}
template <int kMaxD, int kR, int kU> constexpr size_t queryGradShared() {
  using T = ThreadTile<kR, kU>;
  return 2 * size_t{kMaxD} * T::kMStride + 2 * size_t{kMaxD} * T::kNStride +
         size_t{T::kN} * kMaxD + size_t{T::kN} * T::kMStride;
}
template <int kMaxD, int kR, int kU> constexpr size_t keyGradShared() {
  using T = ThreadTile<kR, kU>;
  return 2 * size_t{kMaxD} * T::kMStride + 2 * size_t{kMaxD} * T::kNStride +
         2 * size_t{T::kN} * kMaxD + 2 * size_t{T::kN} * T::kMStride;
}

/// The thread tiles (rows per thread, column groups per thread) of each
/// kernel for a head-dimension class: accumulators within about 64
/// registers a thread, shared memory within about 120 KiB a block (two
/// blocks an SM) up to head dimension 128.
struct TileShape {
  int forwardRows, forwardColumns;
  int queryRows, queryColumns;
  int keyRows, keyColumns;
};
template <int kMaxD> constexpr TileShape kTiles = {4, 2, 4, 2, 4, 2};
template <> constexpr TileShape kTiles<64> = {4, 2, 4, 2, 4, 1};
template <> constexpr TileShape kTiles<128> = {4, 1, 2, 1, 2, 1};
template <> constexpr TileShape kTiles<256> = {2, 1, 1, 1, 1, 1};

//===----------------------------------------------------------------------===//
// Attention: forward (and the backward's row statistics)
//===----------------------------------------------------------------------===//

/// One block per (query tile, head, sample): grid (tiles, heads, batch).
/// Without kStats it writes `out`; with kStats it writes only `stats`, D
/// from `dout`.
template <int kMaxD, int kR, int kU, bool kStats>
__global__ void __launch_bounds__(kThreads)
    attentionForwardKernel(AttentionParams p, float *out, const float *dout,
                           RowStats stats) {
  using Tile = ThreadTile<kR, kU>;
  constexpr int kM = Tile::kM, kN = Tile::kN;
  constexpr int kMStride = Tile::kMStride, kNStride = Tile::kNStride;
  constexpr int kCols = 4 * kU, kHeadCols = kMaxD / 8;
  extern __shared__ float4 shared[];
  float *qt = reinterpret_cast<float *>(shared); // [kMaxD][kMStride]
  float *kt = qt + kMaxD * kMStride;             // [kMaxD][kNStride]
  float *vn = kt + kMaxD * kNStride;             // [kN][kMaxD]
  float *pt = vn + kN * kMaxD;                   // [kN][kMStride]

  const int group = threadIdx.x % 8, row0 = firstRowOfThread<kR>();
  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int kvHead = h / (p.heads / p.kvHeads);
  const int64_t tileRow = static_cast<int64_t>(blockIdx.x) * kM;
  const Visibility visible = visibility(p, b);
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  const int64_t rowEnd = min64(p.querySeq, tileRow + kM);
  const int64_t keyEnd = visible.keyEnd(rowEnd);

  HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
  HeadRows kRowsOf = headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  HeadRows vRowsOf = headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  loadTile<kM, kMaxD, true>(qt, kMStride, qRows.base + tileRow * qRows.stride,
                            qRows.stride, static_cast<int>(rowEnd - tileRow),
                            p.headDim, p.vector);

  float rowMax[kR];
  double rowSum[kR]; // this thread's keys' share of the row's sum
  float acc[kR][kHeadCols];
  zero(acc);
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    rowMax[r] = -INFINITY;
    rowSum[r] = 0.0;
  }

  for (int64_t key0 = 0; key0 < keyEnd; key0 += kN) {
    const int keys = static_cast<int>(min64(kN, keyEnd - key0));
    __syncthreads(); // the previous tile's readers are done
    loadTile<kN, kMaxD, true>(kt, kNStride,
                              kRowsOf.base + key0 * kRowsOf.stride,
                              kRowsOf.stride, keys, p.headDim, p.vector);
    loadTile<kN, kMaxD, false>(vn, 0, vRowsOf.base + key0 * vRowsOf.stride,
                               vRowsOf.stride, keys, p.headDim, p.vector);
    __syncthreads();

    float s[kR][kCols];
    zero(s);
    tileProduct<kR, kU>(s, qt, kMStride, kt, kNStride, row0, group, p.headDim);

    // Online softmax: rescale the row's sums to the new maximum; s becomes
    // the unnormalized probabilities.
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t i = tileRow + row0 + r;
      float tileMax = -INFINITY;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int64_t j = key0 + columnOf(c, group);
        s[r][c] = i < p.querySeq && j < keyEnd && visible.sees(i, j)
                      ? score(s[r][c], p.scale, alibi, slope, i, j)
                      : -INFINITY;
        tileMax = fmaxf(tileMax, s[r][c]);
      }
      const float newMax = fmaxf(rowMax[r], groupMax(tileMax));
      // A row that has seen no key yet has nothing to rescale.
      const float correction =
          newMax == -INFINITY ? 1.0f : expf(rowMax[r] - newMax);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        s[r][c] = s[r][c] == -INFINITY ? 0.0f : expf(s[r][c] - newMax);
        sum += s[r][c];
      }
      rowSum[r] = rowSum[r] * correction + sum;
      rowMax[r] = newMax;
#pragma unroll
      for (int t = 0; t < kHeadCols; ++t)
        acc[r][t] *= correction;
    }
    // The probabilities go through shared memory to the lanes of the group
    // (the same warp), which own the same rows.
    storeColumns(pt, kMStride, row0, group, s);
    __syncwarp();
    // acc += P V over the tile's keys (masked keys have P = 0, and V's rows
    // past the tile's keys are zeros).
    tileProduct<kR, kMaxD / 32>(acc, pt, kMStride, vn, kMaxD, row0, group,
                                keys);
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t i = tileRow + row0 + r;
    const bool valid = i < p.querySeq; // the same for the lanes of a group
    const double total = groupSum(rowSum[r]);
    const float inverse = total > 0.0 ? static_cast<float>(1.0 / total) : 0.0f;
    const int64_t offset = (qRows.base - p.q) + i * qRows.stride;
    if constexpr (!kStats) {
#pragma unroll
      for (int t = 0; t < kHeadCols; ++t) {
        const int d = columnOf(t, group);
        if (valid && d < p.headDim)
          out[offset + d] = acc[r][t] * inverse;
      }
    } else {
      float delta = 0.0f;
#pragma unroll
      for (int t = 0; t < kHeadCols; ++t) {
        const int d = columnOf(t, group);
        if (valid && d < p.headDim)
          delta = fmaf(acc[r][t] * inverse, dout[offset + d], delta);
      }
      delta = groupSum(delta);
      if (valid && group == 0) {
        const int64_t index = (b * p.heads + h) * p.querySeq + i;
        stats.max[index] = rowMax[r];
        stats.inverse[index] = inverse;
        stats.delta[index] = delta;
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention: dQ
//===----------------------------------------------------------------------===//

/// dq for one (query tile, head, sample): grid (tiles, heads, batch).
template <int kMaxD, int kR, int kU>
__global__ void __launch_bounds__(kThreads)
    attentionGradQueryKernel(AttentionParams p, const float *dout,
                             RowStats stats, float *dq) {
  using Tile = ThreadTile<kR, kU>;
  constexpr int kM = Tile::kM, kN = Tile::kN;
  constexpr int kMStride = Tile::kMStride, kNStride = Tile::kNStride;
  constexpr int kCols = 4 * kU, kHeadCols = kMaxD / 8;
  extern __shared__ float4 shared[];
  float *qt = reinterpret_cast<float *>(shared); // [kMaxD][kMStride]
  float *dot = qt + kMaxD * kMStride;            // [kMaxD][kMStride]
  float *kt = dot + kMaxD * kMStride;            // [kMaxD][kNStride]
  float *vt = kt + kMaxD * kNStride;             // [kMaxD][kNStride]
  float *kn = vt + kMaxD * kNStride;             // [kN][kMaxD]
  float *dst = kn + kN * kMaxD;                  // [kN][kMStride]

  const int group = threadIdx.x % 8, row0 = firstRowOfThread<kR>();
  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int kvHead = h / (p.heads / p.kvHeads);
  const int64_t tileRow = static_cast<int64_t>(blockIdx.x) * kM;
  const Visibility visible = visibility(p, b);
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  const int64_t rowEnd = min64(p.querySeq, tileRow + kM);
  const int64_t keyEnd = visible.keyEnd(rowEnd);

  HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
  HeadRows doRows = headRows(dout, b, p.querySeq, p.heads, h, p.headDim);
  HeadRows kRowsOf = headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  HeadRows vRowsOf = headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int validRows = static_cast<int>(rowEnd - tileRow);
  loadTile<kM, kMaxD, true>(qt, kMStride, qRows.base + tileRow * qRows.stride,
                            qRows.stride, validRows, p.headDim, p.vector);
  loadTile<kM, kMaxD, true>(dot, kMStride,
                            doRows.base + tileRow * doRows.stride,
                            doRows.stride, validRows, p.headDim, p.vector);

  float rowMax[kR], rowInverse[kR], rowDelta[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t i = tileRow + row0 + r;
    const int64_t index = (b * p.heads + h) * p.querySeq + i;
    const bool valid = i < p.querySeq;
    rowMax[r] = valid ? stats.max[index] : 0.0f;
    rowInverse[r] = valid ? stats.inverse[index] : 0.0f;
    rowDelta[r] = valid ? stats.delta[index] : 0.0f;
  }
  float acc[kR][kHeadCols];
  zero(acc);

  for (int64_t key0 = 0; key0 < keyEnd; key0 += kN) {
    const int keys = static_cast<int>(min64(kN, keyEnd - key0));
    __syncthreads();
    loadTile<kN, kMaxD, true>(kt, kNStride,
                              kRowsOf.base + key0 * kRowsOf.stride,
                              kRowsOf.stride, keys, p.headDim, p.vector);
    loadTile<kN, kMaxD, true>(vt, kNStride,
                              vRowsOf.base + key0 * vRowsOf.stride,
                              vRowsOf.stride, keys, p.headDim, p.vector);
    loadTile<kN, kMaxD, false>(kn, 0, kRowsOf.base + key0 * kRowsOf.stride,
                               kRowsOf.stride, keys, p.headDim, p.vector);
    __syncthreads();

    // Scores and dP = dO . V of the thread's rows and keys.
    float s[kR][kCols], dpv[kR][kCols];
    zero(s);
    zero(dpv);
    tileProduct<kR, kU>(s, qt, kMStride, kt, kNStride, row0, group, p.headDim);
    tileProduct<kR, kU>(dpv, dot, kMStride, vt, kNStride, row0, group,
                        p.headDim);

    // dS = P (dP - D) * scale, P recomputed from the row's statistics; s
    // becomes dS.
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t i = tileRow + row0 + r;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int64_t j = key0 + columnOf(c, group);
        float ds = 0.0f;
        if (i < p.querySeq && j < keyEnd && visible.sees(i, j)) {
          float prob =
              expf(score(s[r][c], p.scale, alibi, slope, i, j) - rowMax[r]) *
              rowInverse[r];
          ds = prob * (dpv[r][c] - rowDelta[r]) * p.scale;
        }
        s[r][c] = ds;
      }
    }
    storeColumns(dst, kMStride, row0, group, s);
    __syncwarp();
    // acc += dS K over the tile's keys.
    tileProduct<kR, kMaxD / 32>(acc, dst, kMStride, kn, kMaxD, row0, group,
                                keys);
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t i = tileRow + row0 + r;
    if (i >= p.querySeq)
      break;
    float *target = dq + (qRows.base - p.q) + i * qRows.stride;
#pragma unroll
    for (int t = 0; t < kHeadCols; ++t) {
      const int d = columnOf(t, group);
      if (d < p.headDim)
        target[d] = acc[r][t];
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention: dK and dV
//===----------------------------------------------------------------------===//

/// dk and dv for one (key tile, kv head, sample): grid (tiles, kvHeads,
/// batch). The thread tile's rows are keys and its columns query rows.
/// Sums over the query heads of the kv head, then over the query tiles, in
/// order.
template <int kMaxD, int kR, int kU>
__global__ void __launch_bounds__(kThreads)
    attentionGradKeyValueKernel(AttentionParams p, const float *dout,
                                RowStats stats, float *dk, float *dv) {
  using Tile = ThreadTile<kR, kU>;
  constexpr int kM = Tile::kM, kN = Tile::kN;
  constexpr int kMStride = Tile::kMStride, kNStride = Tile::kNStride;
  constexpr int kCols = 4 * kU, kHeadCols = kMaxD / 8;
  extern __shared__ float4 shared[];
  float *kt = reinterpret_cast<float *>(shared); // [kMaxD][kMStride]
  float *vt = kt + kMaxD * kMStride;             // [kMaxD][kMStride]
  float *qt = vt + kMaxD * kMStride;             // [kMaxD][kNStride]
  float *dot = qt + kMaxD * kNStride;            // [kMaxD][kNStride]
  float *qn = dot + kMaxD * kNStride;            // [kN][kMaxD]
  float *don = qn + kN * kMaxD;                  // [kN][kMaxD]
  float *pq = don + kN * kMaxD;                  // [kN][kMStride]
  float *dsq = pq + kN * kMStride;               // [kN][kMStride]

  const int group = threadIdx.x % 8, row0 = firstRowOfThread<kR>();
  const int64_t b = blockIdx.z;
  const int kvHead = blockIdx.y;
  const int heads = p.heads / p.kvHeads;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kM;
  const Visibility visible = visibility(p, b);
  const bool alibi = p.alibiSlopes != nullptr;

  HeadRows kRowsOf = headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  HeadRows vRowsOf = headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int keys = static_cast<int>(min64(kM, p.keySeq - key0));
  loadTile<kM, kMaxD, true>(kt, kMStride, kRowsOf.base + key0 * kRowsOf.stride,
                            kRowsOf.stride, keys, p.headDim, p.vector);
  loadTile<kM, kMaxD, true>(vt, kMStride, vRowsOf.base + key0 * vRowsOf.stride,
                            vRowsOf.stride, keys, p.headDim, p.vector);

  float accK[kR][kHeadCols], accV[kR][kHeadCols];
  zero(accK);
  zero(accV);
  const int64_t firstRow = visible.firstRow(key0);

  for (int g = 0; g < heads; ++g) {
    const int h = kvHead * heads + g;
    const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
    HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
    HeadRows doRows = headRows(dout, b, p.querySeq, p.heads, h, p.headDim);
    const int64_t statsBase = (b * p.heads + h) * p.querySeq;
    for (int64_t query0 = firstRow; query0 < p.querySeq; query0 += kN) {
      const int rows = static_cast<int>(min64(kN, p.querySeq - query0));
      __syncthreads(); // the previous tile's readers are done
      loadTile<kN, kMaxD, true>(qt, kNStride,
                                qRows.base + query0 * qRows.stride,
                                qRows.stride, rows, p.headDim, p.vector);
      loadTile<kN, kMaxD, true>(dot, kNStride,
                                doRows.base + query0 * doRows.stride,
                                doRows.stride, rows, p.headDim, p.vector);
      loadTile<kN, kMaxD, false>(qn, 0, qRows.base + query0 * qRows.stride,
                                 qRows.stride, rows, p.headDim, p.vector);
      loadTile<kN, kMaxD, false>(don, 0, doRows.base + query0 * doRows.stride,
                                 doRows.stride, rows, p.headDim, p.vector);
      __syncthreads();

      // Scores and dP of the thread's keys and query rows.
      float s[kR][kCols], dpv[kR][kCols];
      zero(s);
      zero(dpv);
      tileProduct<kR, kU>(s, kt, kMStride, qt, kNStride, row0, group,
                          p.headDim);
      tileProduct<kR, kU>(dpv, vt, kMStride, dot, kNStride, row0, group,
                          p.headDim);

      // P and dS = P (dP - D) * scale from the rows' statistics; s becomes
      // P and dpv dS.
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int64_t i = query0 + columnOf(c, group);
        const bool validRow = i < p.querySeq;
        const float rowMax = validRow ? stats.max[statsBase + i] : 0.0f;
        const float rowInverse = validRow ? stats.inverse[statsBase + i] : 0.0f;
        const float rowDelta = validRow ? stats.delta[statsBase + i] : 0.0f;
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const int64_t j = key0 + row0 + r;
          float prob = 0.0f, ds = 0.0f;
          if (validRow && visible.sees(i, j)) {
            prob = expf(score(s[r][c], p.scale, alibi, slope, i, j) - rowMax) *
                   rowInverse;
            ds = prob * (dpv[r][c] - rowDelta) * p.scale;
          }
          s[r][c] = prob;
          dpv[r][c] = ds;
        }
      }
      storeColumns(pq, kMStride, row0, group, s);
      storeColumns(dsq, kMStride, row0, group, dpv);
      __syncwarp();
      // dV += P^T dO and dK += dS^T Q over the tile's query rows.
      tileProduct<kR, kMaxD / 32>(accV, pq, kMStride, don, kMaxD, row0, group,
                                  rows);
      tileProduct<kR, kMaxD / 32>(accK, dsq, kMStride, qn, kMaxD, row0, group,
                                  rows);
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t j = key0 + row0 + r;
    if (j >= p.keySeq)
      break;
    const int64_t offset = (kRowsOf.base - p.k) + j * kRowsOf.stride;
#pragma unroll
    for (int t = 0; t < kHeadCols; ++t) {
      const int d = columnOf(t, group);
      if (d < p.headDim) {
        dk[offset + d] = accK[r][t];
        dv[offset + d] = accV[r][t];
      }
    }
  }
}
//===----------------------------------------------------------------------===//
// Attention: launches
//===----------------------------------------------------------------------===//

/// The backward's row statistics, three floats per (sample, head, query
/// row), in context scratch.
absl::StatusOr<RowStats> rowStatsScratch(CudaContext &context,
                                         const cpu::AttentionShape &shape) {
  const size_t rows = shape.batch * shape.heads * shape.querySeq;
  const size_t piece = alignScratch(sizeof(float) * rows);
  absl::StatusOr<void *> scratch = context.scratch(3 * piece);
  if (!scratch.ok())
    return scratch.status();
  char *base = static_cast<char *>(*scratch);
  return RowStats{reinterpret_cast<float *>(base),
                  reinterpret_cast<float *>(base + piece),
                  reinterpret_cast<float *>(base + 2 * piece)};
}

/// Checks the shape and pointers; the parameters of the kernels.
absl::Status attentionParams(const char *what, const float *q, const float *k,
                             const float *v, const int32_t *prefixLengths,
                             const float *alibiSlopes,
                             const cpu::AttentionShape &s, DType products,
                             AttentionParams &params) {
  auto invalid = [&](const std::string &why) {
    return absl::InvalidArgumentError(std::string(what) + ": " + why);
  };
  if (products == DType::I32)
    return invalid("products are f32, bf16 or f16, not i32");
  if (s.batch < 0 || s.querySeq < 0 || s.keySeq < 0)
    return invalid("negative sizes");
  if (s.heads < 1 || s.kvHeads < 1 || s.heads % s.kvHeads != 0)
    return invalid("the heads must be a positive multiple of the kv heads");
  if (s.headDim < 1 || s.headDim > kMaxAttentionHeadDim)
    return invalid("the head dimension must be in [1, " +
                   std::to_string(kMaxAttentionHeadDim) + "], not " +
                   std::to_string(s.headDim));
  // Grids count heads in y and samples in z (at most 65535 each), query
  // and key tiles (of at least 16) in x (at most 2^31 - 1).
  if (s.batch > 65535 || s.heads > 65535)
    return invalid("more samples or heads than one launch holds");
  if (s.querySeq / 16 >= 0x7fffffff || s.keySeq / 16 >= 0x7fffffff)
    return invalid("sequences too long for one launch");
  if (s.mask == Mask::Prefix && !prefixLengths && s.batch > 0)
    return invalid("the prefix mask needs prefix lengths");
  params = {q,
            k,
            v,
            prefixLengths,
            alibiSlopes,
            s.querySeq,
            s.keySeq,
            static_cast<int>(s.heads),
            static_cast<int>(s.kvHeads),
            static_cast<int>(s.headDim),
            s.mask,
            s.scale,
            s.headDim % 4 == 0 && aligned16(q) && aligned16(k) && aligned16(v)};
  return absl::OkStatus();
}

/// The forward (or, with `stats`, the backward's row statistics) for
/// head dimensions up to kMaxD.
template <int kMaxD>
absl::Status forward(CudaContext &context, const AttentionParams &params,
                     int64_t batch, float *out, const float *dout,
                     const RowStats *stats) {
  constexpr TileShape t = kTiles<kMaxD>;
  constexpr int kR = t.forwardRows, kU = t.forwardColumns;
  dim3 grid(tiles(params.querySeq, ThreadTile<kR, kU>::kM),
            static_cast<unsigned>(params.heads), static_cast<unsigned>(batch));
  constexpr size_t bytes = sizeof(float) * forwardShared<kMaxD, kR, kU>();
  if (stats)
    return launch(context, attentionForwardKernel<kMaxD, kR, kU, true>,
                  "attentionForwardKernel (statistics)", grid, bytes, params,
                  out, dout, *stats);
  return launch(context, attentionForwardKernel<kMaxD, kR, kU, false>,
                "attentionForwardKernel", grid, bytes, params, out, dout,
                RowStats{});
}

template <int kMaxD>
absl::Status backward(CudaContext &context, const AttentionParams &params,
                      int64_t batch, const float *dout, const RowStats &stats,
                      float *dq, float *dk, float *dv) {
  constexpr TileShape t = kTiles<kMaxD>;
  if (absl::Status s =
          forward<kMaxD>(context, params, batch, nullptr, dout, &stats);
      !s.ok())
    return s;
  constexpr int kQR = t.queryRows, kQU = t.queryColumns;
  dim3 queryGrid(tiles(params.querySeq, ThreadTile<kQR, kQU>::kM),
                 static_cast<unsigned>(params.heads),
                 static_cast<unsigned>(batch));
  if (absl::Status s =
          launch(context, attentionGradQueryKernel<kMaxD, kQR, kQU>,
                 "attentionGradQueryKernel", queryGrid,
                 sizeof(float) * queryGradShared<kMaxD, kQR, kQU>(), params,
                 dout, stats, dq);
      !s.ok())
    return s;
  if (params.keySeq == 0)
    return absl::OkStatus();
  constexpr int kKR = t.keyRows, kKU = t.keyColumns;
  dim3 keyGrid(tiles(params.keySeq, ThreadTile<kKR, kKU>::kM),
               static_cast<unsigned>(params.kvHeads),
               static_cast<unsigned>(batch));
  return launch(context, attentionGradKeyValueKernel<kMaxD, kKR, kKU>,
                "attentionGradKeyValueKernel", keyGrid,
                sizeof(float) * keyGradShared<kMaxD, kKR, kKU>(), params, dout,
                stats, dk, dv);
}

//===----------------------------------------------------------------------===//
// Rope and dropout kernels
//===----------------------------------------------------------------------===//

/// One block per row (grid-stride over rows): threads take the rotated
/// pairs (i, i + half), each computing its angle once for every head, then
/// the elements past the rotated ones. Each element is read and written by
/// one thread, so out may be x. The angle is in double and the rotation
/// rounds every product (no fused multiply-add), as on the CPU. In and Out
/// as for the kernels of CudaKernels.cu (CudaElementAccess.cuh).
template <typename In, typename Out>
__global__ void ropeKernel(In x, Out out, int64_t rows, int64_t seq, int heads,
                           int headDim, int rotaryDim, float base,
                           float direction) {
  const int half = rotaryDim / 2, rest = headDim - 2 * half;
  const int64_t width = static_cast<int64_t>(heads) * headDim;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double position = static_cast<double>(row % seq);
    const In in = x.at(row * width);
    const Out o = out.at(row * width);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      double frequency =
          pow(static_cast<double>(base),
              -2.0 * static_cast<double>(i) / static_cast<double>(rotaryDim));
      double sine, cosine;
      sincos(position * frequency, &sine, &cosine);
      const float c = static_cast<float>(cosine);
      const float sn = __fmul_rn(direction, static_cast<float>(sine));
      for (int h = 0; h < heads; ++h) {
        const int64_t at = static_cast<int64_t>(h) * headDim + i;
        const float a = in[at], bValue = in[at + half];
        o.store(at, __fsub_rn(__fmul_rn(a, c), __fmul_rn(bValue, sn)));
        o.store(at + half, __fadd_rn(__fmul_rn(bValue, c), __fmul_rn(a, sn)));
      }
    }
    for (int e = threadIdx.x; e < heads * rest; e += blockDim.x) {
      const int64_t at =
          static_cast<int64_t>(e / rest) * headDim + 2 * half + e % rest;
      o.store(at, in[at]);
    }
  }
}

/// The first word of the Philox4x32-10 block of `counter` (PhiloxRounds.h,
/// the host's generator).
__device__ __forceinline__ uint32_t philoxFirstWord(PhiloxWords counter,
                                                    uint32_t key0,
                                                    uint32_t key1) {
  return philoxRounds(counter, key0, key1).w0;
}

/// SplitMix64's finalizer, as in runtime/init/Init.cpp.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The Philox key of dropoutUniform (runtime/init/Init.cpp) for (seed,
/// stream), as a 64-bit word (low half first).
constexpr uint64_t dropoutKey(uint64_t seed, uint64_t stream) {
  return mix64(mix64(seed ^ 0xD1B54A32D192ED03ull) + stream);
}

/// Element i is kept when dropoutUniform(seed, step, stream, global index
/// of i) >= probability, the global index being DropoutPiece::globalIndex's
/// (first + (i / run) * stride + i % run): the uniform is (bits + 0.5) /
/// 2^32 in double (openUnit), so the comparison is the
/// CPU's exactly. With `call.words`, the step and the microbatch are read
/// there (a replayed call's), the microbatch moving `first`.
template <typename In, typename Out>
__global__ void dropoutKernel(In x, Out out, int64_t count, double probability,
                              float keepScale, uint64_t key, uint64_t step,
                              uint64_t first, uint64_t run, uint64_t stride,
                              DropoutCall call) {
  if (call.words) {
    step = call.words[0];
    first += call.words[1] * call.perMicrobatch;
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t local = static_cast<uint64_t>(i);
    const uint64_t index = first + (local / run) * stride + local % run;
    const uint32_t bits = philoxFirstWord(
        {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
         static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
        static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
    const double uniform = openUnit(bits);
    out.store(i, uniform >= probability ? x[i] * keepScale : 0.0f);
  }
}

template <typename In, typename Out>
absl::Status launchRope(CudaContext &context, In x, Out out, int64_t batch,
                        int64_t seq, int64_t heads, int64_t headDim,
                        int64_t rotaryDim, float base, float direction) {
  if (batch < 0 || seq < 0 || heads < 0 || headDim < 0)
    return absl::InvalidArgumentError("rope: negative sizes");
  if (rotaryDim < 0 || rotaryDim > headDim)
    return absl::InvalidArgumentError(
        "rope: the rotary dimension must be in [0, headDim]");
  if (heads * headDim > 0x7fffffff)
    return absl::InvalidArgumentError("rope: rows too wide");
  const int64_t rows = batch * seq;
  if (rows == 0 || heads * headDim == 0)
    return absl::OkStatus();
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(rows, kMaxBlocks));
  const int64_t work = std::max<int64_t>(rotaryDim / 2, headDim - rotaryDim);
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>(
      kElementThreads, std::max<int64_t>(32, (work + 31) / 32 * 32)));
  ropeKernel<In, Out><<<blocks, threads, 0, context.stream()>>>(
      x, out, rows, seq, static_cast<int>(heads), static_cast<int>(headDim),
      static_cast<int>(rotaryDim), base, direction);
  TRIAD_CUDA_CHECK_LAUNCH("ropeKernel");
  return absl::OkStatus();
}

template <typename In, typename Out>
absl::Status launchDropout(CudaContext &context, In x, Out out, int64_t count,
                           double probability, uint64_t seed, uint64_t step,
                           uint64_t stream, DropoutPiece piece,
                           DropoutCall call) {
  if (piece.run == 0)
    return absl::InvalidArgumentError("dropout: a piece of empty runs");
  if (count < 0)
    return absl::InvalidArgumentError("dropout: negative count");
  if (count == 0)
    return absl::OkStatus();
  // The CPU's scale, rounded the same way.
  const float keepScale = static_cast<float>(1.0 / (1.0 - probability));
  dropoutKernel<In, Out>
      <<<elementBlocks(count), kElementThreads, 0, context.stream()>>>(
          x, out, count, probability, keepScale, dropoutKey(seed, stream), step,
          piece.first, piece.run, piece.stride, call);
  TRIAD_CUDA_CHECK_LAUNCH("dropoutKernel");
  return absl::OkStatus();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

absl::Status attention(CudaContext &context, const float *q, const float *k,
                       const float *v, const int32_t *prefixLengths,
                       const float *alibiSlopes, float *out,
                       const cpu::AttentionShape &shape, DType products) {
  AttentionParams params;
  if (absl::Status s = attentionParams("attention", q, k, v, prefixLengths,
                                       alibiSlopes, shape, products, params);
      !s.ok())
    return s;
  if (shape.batch == 0 || shape.querySeq == 0)
    return absl::OkStatus();
  if (tensorCoresTake(shape, products)) {
    TensorCoreTensors tensors;
    tensors.q = q;
    tensors.k = k;
    tensors.v = v;
    tensors.out = out;
    return tensorCoreForward(context, params, shape.batch, products, tensors,
                             nullptr);
  }
  return byHeadClass<256>(shape.headDim, [&](auto width) {
    return forward<decltype(width)::value>(context, params, shape.batch, out,
                                           nullptr, nullptr);
  });
}

absl::Status attentionGrad(CudaContext &context, const float *q, const float *k,
                           const float *v, const int32_t *prefixLengths,
                           const float *alibiSlopes, const float *dout,
                           float *dq, float *dk, float *dv,
                           const cpu::AttentionShape &shape, DType products) {
  AttentionParams params;
  if (absl::Status s = attentionParams("attentionGrad", q, k, v, prefixLengths,
                                       alibiSlopes, shape, products, params);
      !s.ok())
    return s;
  params.vector = params.vector && aligned16(dout);
  if (shape.batch == 0)
    return absl::OkStatus();
  if (shape.querySeq == 0) {
    // No query sees a key: dk and dv are zeros (dq is empty).
    size_t bytes = sizeof(float) * shape.batch * shape.keySeq * shape.kvHeads *
                   shape.headDim;
    issueCounts().copies += 2;
    TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dk, 0, bytes, context.stream()));
    TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dv, 0, bytes, context.stream()));
    return absl::OkStatus();
  }
  absl::StatusOr<RowStats> scratchStats = rowStatsScratch(context, shape);
  if (!scratchStats.ok())
    return scratchStats.status();
  const RowStats &stats = *scratchStats;
  if (tensorCoresTake(shape, products)) {
    TensorCoreTensors tensors;
    tensors.q = q;
    tensors.k = k;
    tensors.v = v;
    tensors.dout = dout;
    tensors.dq = dq;
    tensors.dk = dk;
    tensors.dv = dv;
    return tensorCoreBackward(context, params, shape.batch, products, tensors,
                              stats);
  }
  return byHeadClass<256>(shape.headDim, [&](auto width) {
    return backward<decltype(width)::value>(context, params, shape.batch, dout,
                                            stats, dq, dk, dv);
  });
}

bool attentionTakes16Bit(const cpu::AttentionShape &shape, DType type) {
  return tensorCoresTake(shape, type);
}

namespace {

/// The type every float tensor of a typed attention call has: F32, BF16 or
/// F16, or an InvalidArgument error naming `what` when they differ (the
/// tensor-core kernels read and write one type).
absl::StatusOr<DType> commonType(const char *what,
                                 std::initializer_list<DType> types) {
  DType type = *types.begin();
  for (DType other : types)
    if (other != type || other == DType::I32)
      return absl::InvalidArgumentError(
          std::string(what) +
          ": q, k, v, dout and the results must have one float type");
  return type;
}

/// Tiles of 16-bit tensors load 4 elements (8 bytes) at a time where the
/// head dimension and every tensor allow it.
bool vector16(int64_t headDim, std::initializer_list<const void *> tensors) {
  if (headDim % 4 != 0)
    return false;
  for (const void *tensor : tensors)
    if (reinterpret_cast<uintptr_t>(tensor) % 8 != 0)
      return false;
  return true;
}

absl::Status notTaken(const char *what, const cpu::AttentionShape &shape,
                      DType type) {
  return absl::UnimplementedError(
      std::string(what) +
      ": 16-bit tensors run on tensor cores only (compute "
      "capability 8.0 and a head dimension that is a "
      "multiple of 16 up to 128, not " +
      std::to_string(shape.headDim) + "); widen them to f32 first");
}

} // namespace

absl::Status attention(CudaContext &context, Operand q, Operand k, Operand v,
                       const int32_t *prefixLengths, const float *alibiSlopes,
                       Result out, const cpu::AttentionShape &shape) {
  absl::StatusOr<DType> type =
      commonType("attention", {q.type, k.type, v.type, out.type});
  if (!type.ok())
    return type.status();
  if (*type == DType::F32)
    return attention(context, static_cast<const float *>(q.data),
                     static_cast<const float *>(k.data),
                     static_cast<const float *>(v.data), prefixLengths,
                     alibiSlopes, static_cast<float *>(out.data), shape);
  AttentionParams params;
  if (absl::Status s =
          attentionParams("attention", nullptr, nullptr, nullptr, prefixLengths,
                          alibiSlopes, shape, *type, params);
      !s.ok())
    return s;
  if (!tensorCoresTake(shape, *type))
    return notTaken("attention", shape, *type);
  params.vector = vector16(shape.headDim, {q.data, k.data, v.data});
  if (shape.batch == 0 || shape.querySeq == 0)
    return absl::OkStatus();
  TensorCoreTensors tensors;
  tensors.storage = *type;
  tensors.q = q.data;
  tensors.k = k.data;
  tensors.v = v.data;
  tensors.out = out.data;
  return tensorCoreForward(context, params, shape.batch, *type, tensors,
                           nullptr);
}

absl::Status attentionGrad(CudaContext &context, Operand q, Operand k,
                           Operand v, const int32_t *prefixLengths,
                           const float *alibiSlopes, Operand dout, Result dq,
                           Result dk, Result dv,
                           const cpu::AttentionShape &shape) {
  absl::StatusOr<DType> type =
      commonType("attentionGrad", {q.type, k.type, v.type, dout.type, dq.type,
                                   dk.type, dv.type});
  if (!type.ok())
    return type.status();
  if (*type == DType::F32)
    return attentionGrad(
        context, static_cast<const float *>(q.data),
        static_cast<const float *>(k.data), static_cast<const float *>(v.data),
        prefixLengths, alibiSlopes, static_cast<const float *>(dout.data),
        static_cast<float *>(dq.data), static_cast<float *>(dk.data),
        static_cast<float *>(dv.data), shape);
  AttentionParams params;
  if (absl::Status s =
          attentionParams("attentionGrad", nullptr, nullptr, nullptr,
                          prefixLengths, alibiSlopes, shape, *type, params);
      !s.ok())
    return s;
  if (!tensorCoresTake(shape, *type))
    return notTaken("attentionGrad", shape, *type);
  params.vector = vector16(shape.headDim, {q.data, k.data, v.data, dout.data});
  if (shape.batch == 0)
    return absl::OkStatus();
  if (shape.querySeq == 0) {
    // No query sees a key: dk and dv are zeros (dq is empty).
    size_t bytes =
        2 * shape.batch * shape.keySeq * shape.kvHeads * shape.headDim;
    issueCounts().copies += 2;
    TRIAD_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(dk.data, 0, bytes, context.stream()));
    TRIAD_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(dv.data, 0, bytes, context.stream()));
    return absl::OkStatus();
  }
  absl::StatusOr<RowStats> stats = rowStatsScratch(context, shape);
  if (!stats.ok())
    return stats.status();
  TensorCoreTensors tensors;
  tensors.storage = *type;
  tensors.q = q.data;
  tensors.k = k.data;
  tensors.v = v.data;
  tensors.dout = dout.data;
  tensors.dq = dq.data;
  tensors.dk = dk.data;
  tensors.dv = dv.data;
  return tensorCoreBackward(context, params, shape.batch, *type, tensors,
                            *stats);
}

absl::Status rope(CudaContext &context, const float *x, float *out,
                  int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                  int64_t rotaryDim, float base, float direction) {
  return launchRope(context, F32In{x}, F32Out{out}, batch, seq, heads, headDim,
                    rotaryDim, base, direction);
}

absl::Status dropout(CudaContext &context, const float *x, float *out,
                     int64_t count, double probability, uint64_t seed,
                     uint64_t step, uint64_t stream, DropoutPiece piece,
                     DropoutCall call) {
  return launchDropout(context, F32In{x}, F32Out{out}, count, probability, seed,
                       step, stream, piece, call);
}

absl::Status rope(CudaContext &context, Operand x, Result out, int64_t batch,
                  int64_t seq, int64_t heads, int64_t headDim,
                  int64_t rotaryDim, float base, float direction) {
  if (absl::Status s = checkFloatTypes("rope", {x.type, out.type}); !s.ok())
    return s;
  return withAccess({x.type, out.type}, [&](auto access) {
    using A = decltype(access);
    return launchRope(context, A::in(x), A::out(out), batch, seq, heads,
                      headDim, rotaryDim, base, direction);
  });
}

absl::Status dropout(CudaContext &context, Operand x, Result out, int64_t count,
                     double probability, uint64_t seed, uint64_t step,
                     uint64_t stream, DropoutPiece piece, DropoutCall call) {
  if (absl::Status s = checkFloatTypes("dropout", {x.type, out.type}); !s.ok())
    return s;
  return withAccess({x.type, out.type}, [&](auto access) {
    using A = decltype(access);
    return launchDropout(context, A::in(x), A::out(out), count, probability,
                         seed, step, stream, piece, call);
  });
}

} // namespace triad::rt::cuda
