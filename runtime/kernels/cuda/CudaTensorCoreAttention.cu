//===- CudaTensorCoreAttention.cu - attention on tensor cores -------------===//
//
// Attention forward and backward with 16-bit products on tensor cores, in
// the manner of FlashAttention-2: q, k, v and dout are rounded to bf16 or
// f16 as their tiles load into shared memory, every product is an
// mma.sync m16n8k16 with f32 sums, the probabilities are rounded to the
// 16-bit type before their product with v (and the score gradients before
// theirs with q and k), and softmax runs in f32. For a bf16 or f16 plan the
// operands are 16-bit values already, so only the probabilities and score
// gradients round; this is the arithmetic of PyTorch's and cuDNN's fused
// attention in 16 bits. The kernels read their tensors either as f32
// (rounded as their tiles load, the results written in f32) or in the
// products' own 16-bit type (a 16-bit plan's values as they are, each
// result rounded once as it is stored): since rounding a widened 16-bit
// value gives it back, and a result rounds the f32 value the f32 store
// would write, the two give the same bits as widening the operands first
// and rounding the results after.
//
// Every kernel has 4 warps; a block owns 64 rows (query rows for the
// forward and dq, keys for dk and dv) and each warp 16 of them, one mma
// tile high. A warp's scores against a tile of 64 columns stay in its
// registers (8 accumulator tiles of 16 x 8), where the softmax runs (a
// row's maximum and sum over the 4 lanes that hold it) and from where the
// probabilities, rounded and packed, are the operand of the next product:
//
//   forward    query rows of one (sample, head), by key tiles; the output
//              accumulates in registers, rescaled by each tile's new row
//              maximum (online softmax). With `stats` it writes the
//              backward's row statistics instead of the output: the
//              maximum, 1 / the softmax sum, and dout . out.
//   dq         the same tiling; dS . K accumulates in registers.
//   dk, dv     keys of one (sample, kv head), by the query tiles of each
//              query head that shares the kv head, in order; P^T . dout
//              and dS^T . q accumulate in registers.
//
// Operand tiles come from shared memory through ldmatrix (transposed where
// the product reads a tile down its columns). Sums run in a fixed order and
// every output element is written by one thread: no atomics, so results do
// not depend on timing. The kernels need compute capability 8.0 (bf16
// mma); tensorCoresTake says no on older devices, and the f32 kernels of
// CudaAttention.cu run instead.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaAttentionCommon.cuh"
#include "runtime/kernels/cuda/CudaElementAccess.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace triad::rt::cuda::attention_detail {

namespace {

using element_access::convert;

/// Rows of a block, and keys (or query rows) of a tile.
constexpr int kTile = 64;
/// Rows of a warp: one mma tile high.
constexpr int kWarpRows = 16;
static_assert(kWarps * kWarpRows == kTile, "the warps cover a block's rows");
/// The 8-column accumulator tiles of a warp's row of a score tile.
constexpr int kScoreTiles = kTile / 8;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TRIAD_TENSOR_CORES 1
#else
#define TRIAD_TENSOR_CORES 0
#endif

/// Two floats rounded to T and packed in one register, the first in the
/// low half (an mma operand's lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&pair);
}
template <>
__device__ __forceinline__ uint32_t pack<__half>(float lo, float hi) {
  __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&pair);
}

/// The shared-memory row stride of a 16-bit tile of kD columns, in
/// elements: 8 more than its width, so that the 8 rows an ldmatrix reads
/// start 16 bytes apart in the banks (no conflicts) and every row starts
/// 16-byte aligned, as ldmatrix needs.
template <int kD> constexpr int kStride = kD + 8;
template <int kD> constexpr size_t kTileElements = size_t{kTile} * kStride<kD>;

//===----------------------------------------------------------------------===//
// Warp-level products (mma.sync m16n8k16, f32 accumulators)
//===----------------------------------------------------------------------===//
//
// The layouts are the PTX ISA's for mma.m16n8k16 with 16-bit operands: lane
// l is in group g = l / 4 at position t = l % 4. An accumulator tile (16 x 8
// f32) holds in c[0], c[1] row g, columns 2t and 2t + 1, and in c[2], c[3]
// row g + 8, the same columns. The A operand (16 x 16) holds in a[0] row g,
// columns 2t and 2t + 1, in a[1] row g + 8, in a[2] and a[3] the same at
// columns 8 on; the B operand (16 x 8) in b[0] rows 2t and 2t + 1 of
// column g, in b[1] rows 8 on. So the accumulators of two neighbouring
// 8-column tiles are, rounded and packed, the A operand of the product
// that follows (a probability tile times v, as FlashAttention-2 does).

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Four 8 x 8 matrices of 16-bit elements: lanes 8i to 8i + 7 give the
/// addresses of matrix i's rows, and each lane gets, of matrix i, row l / 4,
/// columns 2 (l % 4) and 2 (l % 4) + 1 in r[i] (or, transposed, rows 2 (l %
/// 4) and 2 (l % 4) + 1 of column l / 4).
__device__ __forceinline__ void loadMatrices(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(p))
               : "memory");
}
__device__ __forceinline__ void loadMatricesTransposed(uint32_t (&r)[4],
                                                       const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, "
               "%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(p))
               : "memory");
}

/// c += a . b for one 16 x 8 tile.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4],
                                                   const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, "
      "%2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void
mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, "
      "%2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// The A operand of rows [0, 16) and columns [0, 16) of a row-major tile.
template <typename T>
__device__ __forceinline__ void loadA(uint32_t (&a)[4], const T *tile,
                                      int stride) {
  const int lane = threadIdx.x % 32;
  loadMatrices(a, tile + (lane % 16) * stride + lane / 16 * 8);
}

/// The B operands of two 8-column tiles, b[0..1] and b[2..3], where B's
/// column n is row n of `tile` (rows [0, 16), columns [0, 16) as B's
/// rows): a product with rows of keys (or queries) as its columns.
template <typename T>
__device__ __forceinline__ void loadBRows(uint32_t (&b)[4], const T *tile,
                                          int stride) {
  const int lane = threadIdx.x % 32;
  loadMatrices(b,
               tile + (lane % 8 + lane / 16 * 8) * stride + lane / 8 % 2 * 8);
}

/// The B operands of two 8-column tiles, b[0..1] and b[2..3], where B is
/// rows [0, 16) and columns [0, 16) of a row-major `tile` as it stands.
template <typename T>
__device__ __forceinline__ void loadBColumns(uint32_t (&b)[4], const T *tile,
                                             int stride) {
  const int lane = threadIdx.x % 32;
  loadMatricesTransposed(b, tile + (lane % 8 + lane / 8 % 2 * 8) * stride +
                                lane / 16 * 8);
}

/// s[n] = the products of the warp's 16 rows of `rows` (a row-major tile of
/// kD columns) with rows [8n, 8n + 8) of `columns` (the same), over kD:
/// dot products of 16 rows against the 64 rows of a tile.
template <typename T, int kD>
__device__ __forceinline__ void dotRows(float (&s)[kScoreTiles][4],
                                        const T *rows, const T *columns) {
#pragma unroll
  for (int n = 0; n < kScoreTiles; ++n)
    s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    uint32_t a[4];
    loadA(a, rows + k * 16, kStride<kD>);
#pragma unroll
    for (int n = 0; n < kScoreTiles; n += 2) {
      uint32_t b[4];
      loadBRows(b, columns + n * 8 * kStride<kD> + k * 16, kStride<kD>);
      mma<T>(s[n], a, b[0], b[1]);
      mma<T>(s[n + 1], a, b[2], b[3]);
    }
  }
}

/// acc += p . tile, where p is a warp's 16 x 64 accumulator tiles (rounded
/// to T here) and `tile` a row-major 64 x kD tile.
template <typename T, int kD>
__device__ __forceinline__ void accumulate(float (&acc)[kD / 8][4],
                                           const float (&p)[kScoreTiles][4],
                                           const T *tile) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    const uint32_t a[4] = {pack<T>(p[2 * k][0], p[2 * k][1]),
                           pack<T>(p[2 * k][2], p[2 * k][3]),
                           pack<T>(p[2 * k + 1][0], p[2 * k + 1][1]),
                           pack<T>(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
    for (int n = 0; n < kD / 8; n += 2) {
      uint32_t b[4];
      loadBColumns(b, tile + k * 16 * kStride<kD> + n * 8, kStride<kD>);
      mma<T>(acc[n], a, b[0], b[1]);
      mma<T>(acc[n + 1], a, b[2], b[3]);
    }
  }
}

/// Copies rows [0, validRows) of a tile (row r at src + r * srcStride, its
/// first `width` columns) into shared memory as T, row r at dst + r *
/// kStride; other rows and the columns from `width` to kD are zeros. The
/// tile is stored as S: f32 (rounded to T here) or T itself (its bits
/// copied). With `vector` (width a multiple of 4, rows aligned to 4
/// elements of S) it reads 4 elements at once. Every thread of the block
/// takes part.
template <typename T, int kD, typename S>
__device__ __forceinline__ void loadTile(T *dst, const S *src,
                                         int64_t srcStride, int validRows,
                                         int width, bool vector) {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, T>,
                "tiles are stored as f32 or as the products' type");
  constexpr int kQuads = kD / 4;
#pragma unroll 4
  for (int unit = threadIdx.x; unit < kTile * kQuads; unit += kThreads) {
    const int r = unit / kQuads, c = 4 * (unit % kQuads);
    uint2 packed = {0u, 0u}; // zeros in either 16-bit type
    if constexpr (std::is_same_v<S, float>) {
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
      packed = {pack<T>(x[0], x[1]), pack<T>(x[2], x[3])};
    } else {
      if (r < validRows) {
        const auto *row =
            reinterpret_cast<const uint16_t *>(src + r * srcStride);
        if (vector) {
          if (c < width)
            packed = *reinterpret_cast<const uint2 *>(row + c);
        } else {
          uint32_t bits[4] = {0u, 0u, 0u, 0u};
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (c + e < width)
              bits[e] = row[c + e];
          packed = {bits[0] | bits[1] << 16, bits[2] | bits[3] << 16};
        }
      }
    }
    *reinterpret_cast<uint2 *>(dst + r * kStride<kD> + c) = packed;
  }
}

/// An element of a stored tensor (f32, or a 16-bit type) as f32, and an
/// f32 value stored in the tensor's type (rounded to nearest even, as
/// cast rounds).
template <typename S> __device__ __forceinline__ float widen(S x) {
  if constexpr (std::is_same_v<S, float>)
    return x;
  else
    return convert<S, float>(x);
}
template <typename S> __device__ __forceinline__ S narrow(float x) {
  if constexpr (std::is_same_v<S, float>)
    return x;
  else
    return convert<float, S>(x);
}

/// Where the rows of one (sample, head) start in a packed tensor of
/// element type S and how far apart they are (HeadRows, of any type).
template <typename S> struct RowsOf {
  const S *base;
  int64_t stride;
};
template <typename S>
__device__ __forceinline__ RowsOf<S> rowsOf(const S *tensor, int64_t b,
                                            int64_t seq, int headCount,
                                            int head, int headDim) {
  int64_t stride = static_cast<int64_t>(headCount) * headDim;
  return {tensor + b * seq * stride + static_cast<int64_t>(head) * headDim,
          stride};
}

/// The two rows of a warp's tile that a lane holds (g and g + 8) and its
/// first column in each 8-column tile (2t).
struct LaneTile {
  int row, column;
};
__device__ __forceinline__ LaneTile laneTile() {
  const int lane = threadIdx.x % 32;
  return {lane / 4, 2 * (lane % 4)};
}

/// Writes a warp's 16 x kD accumulators, times `factor`, to dst (the warp's
/// row r at dst + r * stride, of element type S): rows [0, validRows),
/// columns [0, width).
template <int kD, typename S>
__device__ __forceinline__ void storeRows(const float (&acc)[kD / 8][4], S *dst,
                                          int64_t stride, int validRows,
                                          int width, float factor) {
  const LaneTile lane = laneTile();
#pragma unroll
  for (int n = 0; n < kD / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = lane.row + e / 2 * 8, d = 8 * n + lane.column + e % 2;
      if (r < validRows && d < width)
        dst[r * stride + d] = narrow<S>(acc[n][e] * factor);
    }
}

/// The sum (or maximum) over the 4 lanes that hold a row.
__device__ __forceinline__ float rowSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float rowMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
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
  return sizeof(T) * 3 * kTileElements<kD>;
}

/// The tensors of one call, of element type S (f32 or the products' type);
/// those a kernel does not use are null.
template <typename S> struct Tensors {
  const S *q, *k, *v, *dout;
  S *out, *dq, *dk, *dv;
};

/// Grid: (query tiles, heads, batch). Lane (g, t) of warp w holds query
/// rows 16 w + g and 16 w + g + 8 of the block: their running maxima and
/// (its share of the) sums, and their output accumulators.
template <typename T, typename S, int kD, bool kStats>
__global__ void __launch_bounds__(kThreads)
    tensorCoreForwardKernel(AttentionParams p, Tensors<S> x, RowStats stats) {
#if TRIAD_TENSOR_CORES
  extern __shared__ __align__(128) unsigned char shared[];
  T *qTile = reinterpret_cast<T *>(shared);
  T *kTileShared = qTile + kTileElements<kD>;
  T *vTile = kTileShared + kTileElements<kD>;

  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int kvHead = h / (p.heads / p.kvHeads);
  const Visibility vis = visibility(p, b);
  const RowsOf<S> qRows = rowsOf(x.q, b, p.querySeq, p.heads, h, p.headDim);
  const RowsOf<S> kRows =
      rowsOf(x.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const RowsOf<S> vRows =
      rowsOf(x.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  loadTile<T, kD>(qTile, qRows.base + row0 * qRows.stride, qRows.stride,
                  static_cast<int>(min64(kTile, p.querySeq - row0)), p.headDim,
                  p.vector);

  const int warp = threadIdx.x / 32;
  const LaneTile lane = laneTile();
  const int64_t firstRow = row0 + warp * kWarpRows + lane.row;
  const int64_t rowOf[2] = {firstRow, firstRow + 8};
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  float acc[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n)
    acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float runningMax[2] = {-INFINITY, -INFINITY}, runningSum[2] = {0.0f, 0.0f};
  const int64_t keyEnd = vis.keyEnd(min64(row0 + kTile, p.querySeq));
  for (int64_t key0 = 0; key0 < keyEnd; key0 += kTile) {
    const int validKeys = static_cast<int>(min64(kTile, p.keySeq - key0));
    __syncthreads(); // the last tile's keys and values are used up
    loadTile<T, kD>(kTileShared, kRows.base + key0 * kRows.stride, kRows.stride,
                    validKeys, p.headDim, p.vector);
    loadTile<T, kD>(vTile, vRows.base + key0 * vRows.stride, vRows.stride,
                    validKeys, p.headDim, p.vector);
    __syncthreads();
    float s[kScoreTiles][4];
    dotRows<T, kD>(s, qTile + warp * kWarpRows * kStride<kD>, kTileShared);
    // Online softmax over the lane's columns of its two rows.
    float tileMax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = rowOf[e / 2], j = key0 + 8 * n + lane.column + e % 2;
        s[n][e] = i < p.querySeq && vis.sees(i, j)
                      ? score(s[n][e], p.scale, alibi, slope, i, j)
                      : -INFINITY;
        tileMax[e / 2] = fmaxf(tileMax[e / 2], s[n][e]);
      }
    float base[2], rescale[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float newMax = fmaxf(runningMax[r], rowMax(tileMax[r]));
      base[r] = newMax == -INFINITY ? 0.0f : newMax;
      rescale[r] = __expf(runningMax[r] - base[r]);
      runningMax[r] = newMax;
    }
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = __expf(s[n][e] - base[e / 2]);
        sum[e / 2] += s[n][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      runningSum[r] = runningSum[r] * rescale[r] + sum[r];
#pragma unroll
    for (int n = 0; n < kD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[n][e] *= rescale[e / 2];
    accumulate<T, kD>(acc, s, vTile);
  }
  const int64_t offset = qRows.base - x.q;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = rowSum(runningSum[r]);
    const float inverse = total > 0.0f ? 1.0f / total : 0.0f;
    const int64_t i = rowOf[r];
    if constexpr (!kStats) {
      if (i < p.querySeq)
#pragma unroll
        for (int n = 0; n < kD / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int d = 8 * n + lane.column + e;
            if (d < p.headDim)
              x.out[offset + i * qRows.stride + d] =
                  narrow<S>(acc[n][2 * r + e] * inverse);
          }
    } else {
      float delta = 0.0f;
      if (i < p.querySeq)
#pragma unroll
        for (int n = 0; n < kD / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int d = 8 * n + lane.column + e;
            if (d < p.headDim)
              delta += widen(x.dout[offset + i * qRows.stride + d]) *
                       (acc[n][2 * r + e] * inverse);
          }
      delta = rowSum(delta);
      if (lane.column == 0 && i < p.querySeq) {
        const int64_t at = (b * p.heads + h) * p.querySeq + i;
        stats.max[at] = runningMax[r] == -INFINITY ? 0.0f : runningMax[r];
        stats.inverse[at] = inverse;
        stats.delta[at] = delta;
      }
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
  return sizeof(T) * 4 * kTileElements<kD>;
}

/// Grid: (query tiles, heads, batch). Lanes hold rows as in the forward.
template <typename T, typename S, int kD>
__global__ void __launch_bounds__(kThreads)
    tensorCoreGradQueryKernel(AttentionParams p, Tensors<S> x, RowStats stats) {
#if TRIAD_TENSOR_CORES
  extern __shared__ __align__(128) unsigned char shared[];
  T *qTile = reinterpret_cast<T *>(shared);
  T *doTile = qTile + kTileElements<kD>;
  T *kTileShared = doTile + kTileElements<kD>;
  T *vTile = kTileShared + kTileElements<kD>;

  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int kvHead = h / (p.heads / p.kvHeads);
  const Visibility vis = visibility(p, b);
  const RowsOf<S> qRows = rowsOf(x.q, b, p.querySeq, p.heads, h, p.headDim);
  const RowsOf<S> kRows =
      rowsOf(x.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const RowsOf<S> vRows =
      rowsOf(x.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int64_t rowOffset = (qRows.base - x.q) + row0 * qRows.stride;
  const int validRows = static_cast<int>(min64(kTile, p.querySeq - row0));
  loadTile<T, kD>(qTile, x.q + rowOffset, qRows.stride, validRows, p.headDim,
                  p.vector);
  loadTile<T, kD>(doTile, x.dout + rowOffset, qRows.stride, validRows,
                  p.headDim, p.vector);

  const int warp = threadIdx.x / 32;
  const LaneTile lane = laneTile();
  const int64_t firstRow = row0 + warp * kWarpRows + lane.row;
  const int64_t rowOf[2] = {firstRow, firstRow + 8};
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  float rowMaxOf[2] = {0.0f, 0.0f}, inverseOf[2] = {0.0f, 0.0f},
        deltaOf[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (rowOf[r] < p.querySeq) {
      const int64_t at = (b * p.heads + h) * p.querySeq + rowOf[r];
      rowMaxOf[r] = stats.max[at];
      inverseOf[r] = stats.inverse[at];
      deltaOf[r] = stats.delta[at];
    }
  float acc[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n)
    acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const int64_t keyEnd = vis.keyEnd(min64(row0 + kTile, p.querySeq));
  for (int64_t key0 = 0; key0 < keyEnd; key0 += kTile) {
    const int validKeys = static_cast<int>(min64(kTile, p.keySeq - key0));
    __syncthreads();
    loadTile<T, kD>(kTileShared, kRows.base + key0 * kRows.stride, kRows.stride,
                    validKeys, p.headDim, p.vector);
    loadTile<T, kD>(vTile, vRows.base + key0 * vRows.stride, vRows.stride,
                    validKeys, p.headDim, p.vector);
    __syncthreads();
    // P from the scores, dP = dout . V^T, then dS = P (dP - D).
    float s[kScoreTiles][4], dp[kScoreTiles][4];
    dotRows<T, kD>(s, qTile + warp * kWarpRows * kStride<kD>, kTileShared);
    dotRows<T, kD>(dp, doTile + warp * kWarpRows * kStride<kD>, vTile);
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int64_t i = rowOf[r], j = key0 + 8 * n + lane.column + e % 2;
        const float probability =
            i < p.querySeq && vis.sees(i, j)
                ? __expf(score(s[n][e], p.scale, alibi, slope, i, j) -
                         rowMaxOf[r]) *
                      inverseOf[r]
                : 0.0f;
        s[n][e] = probability * (dp[n][e] - deltaOf[r]);
      }
    accumulate<T, kD>(acc, s, kTileShared);
  }
  storeRows<kD>(acc, x.dq + rowOffset + warp * kWarpRows * qRows.stride,
                qRows.stride, warpRows(p.querySeq, row0, warp), p.headDim,
                p.scale);
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// Backward: dk and dv
//===----------------------------------------------------------------------===//

template <typename T, int kD> constexpr size_t keyGradBytes() {
  return sizeof(T) * 4 * kTileElements<kD> + sizeof(float) * 3 * kTile;
}

/// Grid: (key tiles, kv heads, batch). Lane (g, t) of warp w holds keys 16
/// w + g and 16 w + g + 8 of the block, and the transposed scores of those
/// keys against a query tile.
template <typename T, typename S, int kD>
__global__ void __launch_bounds__(kThreads)
    tensorCoreGradKeyValueKernel(AttentionParams p, Tensors<S> x,
                                 RowStats stats) {
#if TRIAD_TENSOR_CORES
  extern __shared__ __align__(128) unsigned char shared[];
  T *kTileShared = reinterpret_cast<T *>(shared);
  T *vTile = kTileShared + kTileElements<kD>;
  T *qTile = vTile + kTileElements<kD>;
  T *doTile = qTile + kTileElements<kD>;
  float *tileMax = reinterpret_cast<float *>(doTile + kTileElements<kD>);
  float *tileInverse = tileMax + kTile;
  float *tileDelta = tileInverse + kTile;

  const int64_t b = blockIdx.z;
  const int kvHead = blockIdx.y;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const Visibility vis = visibility(p, b);
  const RowsOf<S> kRows =
      rowsOf(x.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const RowsOf<S> vRows =
      rowsOf(x.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int blockKeys = static_cast<int>(min64(kTile, p.keySeq - key0));
  loadTile<T, kD>(kTileShared, kRows.base + key0 * kRows.stride, kRows.stride,
                  blockKeys, p.headDim, p.vector);
  loadTile<T, kD>(vTile, vRows.base + key0 * vRows.stride, vRows.stride,
                  blockKeys, p.headDim, p.vector);

  const int warp = threadIdx.x / 32;
  const LaneTile lane = laneTile();
  const int64_t firstKey = key0 + warp * kWarpRows + lane.row;
  const int64_t keyOf[2] = {firstKey, firstKey + 8};
  const bool alibi = p.alibiSlopes != nullptr;
  const T *warpKeys = kTileShared + warp * kWarpRows * kStride<kD>;
  const T *warpValues = vTile + warp * kWarpRows * kStride<kD>;
  float dkAcc[kD / 8][4], dvAcc[kD / 8][4];
#pragma unroll
  for (int n = 0; n < kD / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[n][e] = dvAcc[n][e] = 0.0f;
  const int group = p.heads / p.kvHeads;
  const int64_t firstTile = vis.firstRow(key0) / kTile * kTile;
  for (int g = 0; g < group; ++g) {
    const int h = kvHead * group + g;
    const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
    const RowsOf<S> qRows = rowsOf(x.q, b, p.querySeq, p.heads, h, p.headDim);
    for (int64_t row0 = firstTile; row0 < p.querySeq; row0 += kTile) {
      const int validRows = static_cast<int>(min64(kTile, p.querySeq - row0));
      const int64_t rowOffset = (qRows.base - x.q) + row0 * qRows.stride;
      __syncthreads(); // the last query tile is used up
      loadTile<T, kD>(qTile, x.q + rowOffset, qRows.stride, validRows,
                      p.headDim, p.vector);
      loadTile<T, kD>(doTile, x.dout + rowOffset, qRows.stride, validRows,
                      p.headDim, p.vector);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const int64_t at = (b * p.heads + h) * p.querySeq + row0 + r;
        const bool valid = r < validRows;
        tileMax[r] = valid ? stats.max[at] : 0.0f;
        tileInverse[r] = valid ? stats.inverse[at] : 0.0f;
        tileDelta[r] = valid ? stats.delta[at] : 0.0f;
      }
      __syncthreads();
      // P^T from the transposed scores K . q^T; dV += P^T . dout.
      float pt[kScoreTiles][4];
      dotRows<T, kD>(pt, warpKeys, qTile);
#pragma unroll
      for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int column = 8 * n + lane.column + e % 2;
          const int64_t i = row0 + column, j = keyOf[e / 2];
          pt[n][e] = column < validRows && vis.sees(i, j)
                         ? __expf(score(pt[n][e], p.scale, alibi, slope, i, j) -
                                  tileMax[column]) *
                               tileInverse[column]
                         : 0.0f;
        }
      accumulate<T, kD>(dvAcc, pt, doTile);
      // dP^T = V . dout^T, dS^T = P^T (dP^T - D); dK += dS^T . q.
      float dst[kScoreTiles][4];
      dotRows<T, kD>(dst, warpValues, doTile);
#pragma unroll
      for (int n = 0; n < kScoreTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int column = 8 * n + lane.column + e % 2;
          dst[n][e] = pt[n][e] * (dst[n][e] - tileDelta[column]);
        }
      accumulate<T, kD>(dkAcc, dst, qTile);
    }
  }
  const int validKeys = warpRows(p.keySeq, key0, warp);
  const int64_t keyOffset =
      (kRows.base - x.k) + (key0 + warp * kWarpRows) * kRows.stride;
  storeRows<kD>(dvAcc, x.dv + keyOffset, kRows.stride, validKeys, p.headDim,
                1.0f);
  storeRows<kD>(dkAcc, x.dk + keyOffset, kRows.stride, validKeys, p.headDim,
                p.scale);
#else
  __trap();
#endif
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

template <typename T, typename S, int kD>
absl::Status forwardOf(CudaContext &context, const AttentionParams &params,
                       int64_t batch, const Tensors<S> &x,
                       const RowStats *stats) {
  dim3 grid(tiles(params.querySeq, kTile), static_cast<unsigned>(params.heads),
            static_cast<unsigned>(batch));
  constexpr size_t bytes = forwardBytes<T, kD>();
  if (stats)
    return launch(context, tensorCoreForwardKernel<T, S, kD, true>,
                  "tensorCoreForwardKernel (statistics)", grid, bytes, params,
                  x, *stats);
  return launch(context, tensorCoreForwardKernel<T, S, kD, false>,
                "tensorCoreForwardKernel", grid, bytes, params, x, RowStats{});
}

template <typename T, typename S, int kD>
absl::Status backwardOf(CudaContext &context, const AttentionParams &params,
                        int64_t batch, const Tensors<S> &x,
                        const RowStats &stats) {
  if (absl::Status s = forwardOf<T, S, kD>(context, params, batch, x, &stats);
      !s.ok())
    return s;
  dim3 queryGrid(tiles(params.querySeq, kTile),
                 static_cast<unsigned>(params.heads),
                 static_cast<unsigned>(batch));
  if (absl::Status s = launch(context, tensorCoreGradQueryKernel<T, S, kD>,
                              "tensorCoreGradQueryKernel", queryGrid,
                              queryGradBytes<T, kD>(), params, x, stats);
      !s.ok())
    return s;
  if (params.keySeq == 0)
    return absl::OkStatus();
  dim3 keyGrid(tiles(params.keySeq, kTile),
               static_cast<unsigned>(params.kvHeads),
               static_cast<unsigned>(batch));
  return launch(context, tensorCoreGradKeyValueKernel<T, S, kD>,
                "tensorCoreGradKeyValueKernel", keyGrid, keyGradBytes<T, kD>(),
                params, x, stats);
}

/// A type to dispatch on (the element type tensors are stored in).
template <typename S> struct Stored { using type = S; };

/// The tensors of `tensors` as S.
template <typename S> Tensors<S> tensorsAs(const TensorCoreTensors &tensors) {
  return {
      static_cast<const S *>(tensors.q), static_cast<const S *>(tensors.k),
      static_cast<const S *>(tensors.v), static_cast<const S *>(tensors.dout),
      static_cast<S *>(tensors.out),     static_cast<S *>(tensors.dq),
      static_cast<S *>(tensors.dk),      static_cast<S *>(tensors.dv)};
}

/// The launches for the head-dimension class (32, 64 or 128) of a shape
/// tensorCoresTake took, on tensors stored as f32 or as T.
template <typename T>
absl::Status forwardByHead(CudaContext &context, const AttentionParams &params,
                           int64_t batch, const TensorCoreTensors &tensors,
                           const RowStats *stats) {
  auto run = [&](auto stored) -> absl::Status {
    using S = typename decltype(stored)::type;
    Tensors<S> x = tensorsAs<S>(tensors);
    return byHeadClass<128>(params.headDim, [&](auto width) {
      return forwardOf<T, S, decltype(width)::value>(context, params, batch, x,
                                                     stats);
    });
  };
  if (tensors.storage == DType::F32)
    return run(Stored<float>{});
  return run(Stored<T>{});
}

template <typename T>
absl::Status backwardByHead(CudaContext &context, const AttentionParams &params,
                            int64_t batch, const TensorCoreTensors &tensors,
                            const RowStats &stats) {
  auto run = [&](auto stored) -> absl::Status {
    using S = typename decltype(stored)::type;
    Tensors<S> x = tensorsAs<S>(tensors);
    return byHeadClass<128>(params.headDim, [&](auto width) {
      return backwardOf<T, S, decltype(width)::value>(context, params, batch, x,
                                                      stats);
    });
  };
  if (tensors.storage == DType::F32)
    return run(Stored<float>{});
  return run(Stored<T>{});
}

/// InvalidArgument unless the tensors are stored as f32 or as `products`.
absl::Status checkStorage(const TensorCoreTensors &tensors, DType products) {
  if (tensors.storage == DType::F32 || tensors.storage == products)
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      "tensor-core attention reads f32 tensors or tensors of its products' "
      "type");
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
                               DType products, const TensorCoreTensors &tensors,
                               const RowStats *stats) {
  if (absl::Status s = checkStorage(tensors, products); !s.ok())
    return s;
  if (products == DType::BF16)
    return forwardByHead<__nv_bfloat16>(context, params, batch, tensors, stats);
  return forwardByHead<__half>(context, params, batch, tensors, stats);
}

absl::Status tensorCoreBackward(CudaContext &context,
                                const AttentionParams &params, int64_t batch,
                                DType products,
                                const TensorCoreTensors &tensors,
                                const RowStats &stats) {
  if (absl::Status s = checkStorage(tensors, products); !s.ok())
    return s;
  if (products == DType::BF16)
    return backwardByHead<__nv_bfloat16>(context, params, batch, tensors,
                                         stats);
  return backwardByHead<__half>(context, params, batch, tensors, stats);
}

} // namespace triad::rt::cuda::attention_detail
