//===- CudaAttention.cu - attention, rope and dropout on CUDA -------------===//
//
// See CudaAttention.h.
//
// Attention is tiled in the manner of FlashAttention-2, in fp32 on the CUDA
// cores (TF32 tensor cores would not stay within 1e-5 of the CPU backend).
// Every kernel has 4 warps; what a block owns depends on the kernel:
//
//   forward    a tile of query rows of one (sample, head); each warp owns
//              kRows rows and keeps their running maximum, running sum
//              and output accumulator in registers, its lanes splitting
//              the keys of a tile for the scores and the head dimension
//              for the accumulator. K and V tiles stream through shared
//              memory; the probabilities of a tile go through the warp's
//              slice of shared memory into the P.V product. Under the
//              causal mask the loop stops at the tile's last row, so tiles
//              above the diagonal are never loaded.
//   dQ         the same tiling; it recomputes P from the row statistics
//              and accumulates dS.K for its rows over the key tiles.
//   dK, dV     a tile of keys of one (sample, kv head); each warp owns
//              kRows keys, lanes split the query rows of a tile. It loops
//              over the query heads sharing the kv head and, for each, over
//              the query tiles that may see its keys, in order.
//
// The backward gets no forward output, so it first runs the forward kernel
// in a statistics mode that writes, per (sample, head, query row), the
// row's maximum score, the inverse of its softmax sum and D = dout . out
// (the rowsum of P * dP) into context scratch; dQ and dK/dV read them.
// Every sum runs in a fixed order (a lane's keys or rows in order, warp
// reductions by butterfly, whose result every lane gets bit for bit), and
// every output element is written by one thread: no atomics, so results
// are deterministic. Softmax sums accumulate in double, as on the CPU.
//
// Shared memory rows that lanes read at different rows with float4 loads
// have an odd number of float4s, so that the 8 lanes of a quarter warp hit
// distinct banks; head dimensions that are not a multiple of 4 are padded
// with zeros (which add nothing to the products).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaAttention.h"

#include "runtime/kernels/cuda/CudaCheck.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace triad::rt::cuda {

namespace {

using cpu::Mask;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
/// Grid-stride elementwise kernels (rope, dropout).
constexpr int kElementThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

unsigned elementBlocks(int64_t count) {
  return static_cast<unsigned>(std::max<int64_t>(
      1,
      std::min(kMaxBlocks, (count + kElementThreads - 1) / kElementThreads)));
}

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

//===----------------------------------------------------------------------===//
// Attention: shared device code
//===----------------------------------------------------------------------===//

/// What every attention kernel reads. `paddedDim` is headDim rounded up to
/// a multiple of 4 (the width of the shared-memory tiles).
struct AttentionParams {
  const float *q, *k, *v;
  const int32_t *prefixLengths;
  const float *alibiSlopes;
  int64_t querySeq, keySeq;
  int heads, kvHeads, headDim, paddedDim;
  Mask mask;
  float scale;
};

/// Per (sample, head, query row), at index (b * heads + h) * querySeq + i:
/// the row's maximum score, 1 / its softmax sum, and dout . out.
struct RowStats {
  float *max, *inverse, *delta;
};

/// The mask of one sample.
struct Visibility {
  Mask mask;
  int64_t prefix, keySeq;

  /// Whether query row i sees key j (as the CPU's attentionWeights).
  __device__ bool sees(int64_t i, int64_t j) const {
    return j < keySeq && (mask == Mask::None || j <= i ||
                          (mask == Mask::Prefix && j < prefix));
  }
  /// Keys [0, result) hold every key rows before `rowEnd` see (the CPU's
  /// visibleKeys): the causal mask stops at the diagonal.
  __device__ int64_t keyEnd(int64_t rowEnd) const {
    if (mask == Mask::None)
      return keySeq;
    int64_t end = mask == Mask::Prefix && prefix > rowEnd ? prefix : rowEnd;
    return min64(end, keySeq);
  }
  /// Rows before the result see no key at or after `keyBegin`.
  __device__ int64_t firstRow(int64_t keyBegin) const {
    if (mask == Mask::None || (mask == Mask::Prefix && keyBegin < prefix))
      return 0;
    return keyBegin;
  }
};

__device__ Visibility visibility(const AttentionParams &p, int64_t b) {
  return {p.mask,
          p.mask == Mask::Prefix ? static_cast<int64_t>(p.prefixLengths[b]) : 0,
          p.keySeq};
}

/// The score of row i and key j from their dot product, as the CPU forms
/// it: scale * (q . k), minus slope * (i - j) with ALiBi.
__device__ __forceinline__ float score(float dot, float scale, bool alibi,
                                       float slope, int64_t i, int64_t j) {
  float s = dot * scale;
  if (alibi)
    s -= slope * static_cast<float>(i - j);
  return s;
}

/// acc += a . b, in a fixed order (every kernel forms a score's dot
/// product with the same calls, so the backward recomputes the forward's
/// scores bit for bit).
__device__ __forceinline__ void dot4(float &acc, const float4 &a,
                                     const float4 &b) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  acc = fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float lane4(const float4 &v, int index) {
  return index == 0 ? v.x : index == 1 ? v.y : index == 2 ? v.z : v.w;
}

__device__ __forceinline__ float warpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The sum over the warp; every lane gets the same bits (each butterfly
/// step adds the same two values on both lanes).
template <typename T> __device__ __forceinline__ T warpSum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// The stride, in float4s, of a shared tile whose rows lanes read at
/// different rows with float4 loads: odd, so a quarter warp's loads hit
/// distinct banks.
__host__ __device__ constexpr int oddStride4(int paddedDim) {
  return (paddedDim / 4) | 1;
}

/// Copies `rows` rows of a tile (row r at src + r * srcStride, `width`
/// floats) into shared rows of `stride` floats, columns [0, paddedWidth);
/// rows from `validRows` on and columns from `width` on get zeros. Every
/// thread of the block takes part.
__device__ void loadTile(float *dst, int stride, const float *src,
                         int64_t srcStride, int rows, int validRows, int width,
                         int paddedWidth) {
  for (int index = threadIdx.x; index < rows * paddedWidth;
       index += blockDim.x) {
    int r = index / paddedWidth, c = index - r * paddedWidth;
    dst[r * stride + c] =
        r < validRows && c < width ? src[r * srcStride + c] : 0.0f;
  }
}

/// Where the rows of one (sample, head) start in a packed tensor and how
/// far apart they are.
struct HeadRows {
  const float *base;
  int64_t stride;
};

__device__ __forceinline__ HeadRows headRows(const float *tensor, int64_t b,
                                             int64_t seq, int headCount,
                                             int head, int headDim) {
  int64_t stride = static_cast<int64_t>(headCount) * headDim;
  return {tensor + b * seq * stride + static_cast<int64_t>(head) * headDim,
          stride};
}

//===----------------------------------------------------------------------===//
// Attention: tile shapes
//===----------------------------------------------------------------------===//

/// Tile shapes of the kernels of one head-dimension class (headDim <=
/// kMaxD): rows per warp and keys (or queries) per lane. Chosen so that a
/// thread's accumulators stay within about 64 registers and a block's
/// shared memory within about 120 KiB.
struct TileShape {
  int forwardRows, forwardKeysPerLane;
  int queryRows, queryKeysPerLane;
  int keyRows, keyQueriesPerLane;
};

template <int kMaxD> constexpr TileShape kTiles = {8, 2, 8, 2, 8, 2};
template <> constexpr TileShape kTiles<128> = {8, 2, 8, 1, 4, 1};
template <> constexpr TileShape kTiles<256> = {8, 1, 4, 1, 4, 1};

/// Shared memory of each kernel, in floats, for a padded head dimension.
constexpr size_t forwardShared(int rows, int keysPerLane, int paddedDim) {
  size_t blockRows = kWarps * rows, blockKeys = 32 * keysPerLane;
  return blockRows * paddedDim + blockKeys * 4 * oddStride4(paddedDim) +
         blockKeys * paddedDim + blockRows * blockKeys;
}
constexpr size_t queryGradShared(int rows, int keysPerLane, int paddedDim) {
  size_t blockRows = kWarps * rows, blockKeys = 32 * keysPerLane;
  return 2 * blockRows * paddedDim + 2 * blockKeys * 4 * oddStride4(paddedDim) +
         blockRows * blockKeys;
}
constexpr size_t keyGradShared(int rows, int queriesPerLane, int paddedDim) {
  size_t blockKeys = kWarps * rows, blockRows = 32 * queriesPerLane;
  return 2 * blockKeys * paddedDim + 2 * blockRows * 4 * oddStride4(paddedDim) +
         2 * blockKeys * blockRows;
}

//===----------------------------------------------------------------------===//
// Attention: forward (and the backward's row statistics)
//===----------------------------------------------------------------------===//

/// One block per (query tile, head, sample): grid (tiles, heads, batch).
/// Without kStats it writes `out`; with kStats it writes only `stats`, D
/// from `dout`.
template <int kMaxD, int kRows, int kKeysPerLane, bool kStats>
__global__ void __launch_bounds__(kThreads)
    attentionForwardKernel(AttentionParams p, float *out, const float *dout,
                           RowStats stats) {
  constexpr int kBlockRows = kWarps * kRows;
  constexpr int kBlockKeys = 32 * kKeysPerLane;
  constexpr int kColumns = kMaxD / 32;
  extern __shared__ float4 shared[];
  const int dp = p.paddedDim, dp4 = dp / 4, ks4 = oddStride4(dp);
  float4 *qs = shared;                  // [kBlockRows][dp4]
  float4 *ks = qs + kBlockRows * dp4;   // [kBlockKeys][ks4]
  float4 *vs4 = ks + kBlockKeys * ks4;  // [kBlockKeys][dp4]
  float4 *ps4 = vs4 + kBlockKeys * dp4; // [kBlockRows][kBlockKeys / 4]
  const float *vs = reinterpret_cast<const float *>(vs4);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int kvHead = h / (p.heads / p.kvHeads);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const Visibility visible = visibility(p, b);
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  const int64_t rowEnd = min64(p.querySeq, row0 + kBlockRows);
  const int64_t keyEnd = visible.keyEnd(rowEnd);

  HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
  HeadRows kRowsOf = headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  HeadRows vRowsOf = headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  loadTile(reinterpret_cast<float *>(qs), dp, qRows.base + row0 * qRows.stride,
           qRows.stride, kBlockRows, static_cast<int>(rowEnd - row0), p.headDim,
           dp);

  float rowMax[kRows];
  double rowSum[kRows]; // this lane's keys' share of the row's sum
  float acc[kRows][kColumns];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    rowMax[r] = -INFINITY;
    rowSum[r] = 0.0;
#pragma unroll
    for (int t = 0; t < kColumns; ++t)
      acc[r][t] = 0.0f;
  }
  const float4 *myQ = qs + warp * kRows * dp4;
  float *myP = reinterpret_cast<float *>(ps4) + warp * kRows * kBlockKeys;

  for (int64_t key0 = 0; key0 < keyEnd; key0 += kBlockKeys) {
    const int keys = static_cast<int>(min64(kBlockKeys, keyEnd - key0));
    __syncthreads(); // the previous tile's readers are done
    loadTile(reinterpret_cast<float *>(ks), 4 * ks4,
             kRowsOf.base + key0 * kRowsOf.stride, kRowsOf.stride, kBlockKeys,
             keys, p.headDim, dp);
    loadTile(reinterpret_cast<float *>(vs4), dp,
             vRowsOf.base + key0 * vRowsOf.stride, vRowsOf.stride, kBlockKeys,
             keys, p.headDim, dp);
    __syncthreads();

    // Scores of the warp's rows and the lane's keys lane + 32 u.
    float s[kRows][kKeysPerLane];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u)
        s[r][u] = 0.0f;
    for (int c = 0; c < dp4; ++c) {
      float4 kv[kKeysPerLane];
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u)
        kv[u] = ks[(lane + 32 * u) * ks4 + c];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float4 qv = myQ[r * dp4 + c];
#pragma unroll
        for (int u = 0; u < kKeysPerLane; ++u)
          dot4(s[r][u], qv, kv[u]);
      }
    }

    // Online softmax: rescale the row's sums to the new maximum.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t i = row0 + warp * kRows + r;
      float tileMax = -INFINITY;
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        const int64_t j = key0 + lane + 32 * u;
        s[r][u] = i < p.querySeq && j < keyEnd && visible.sees(i, j)
                      ? score(s[r][u], p.scale, alibi, slope, i, j)
                      : -INFINITY;
        tileMax = fmaxf(tileMax, s[r][u]);
      }
      const float newMax = fmaxf(rowMax[r], warpMax(tileMax));
      // A row that has seen no key yet has nothing to rescale.
      const float correction =
          newMax == -INFINITY ? 1.0f : expf(rowMax[r] - newMax);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        float e = s[r][u] == -INFINITY ? 0.0f : expf(s[r][u] - newMax);
        myP[r * kBlockKeys + lane + 32 * u] = e;
        sum += e;
      }
      rowSum[r] = rowSum[r] * correction + sum;
      rowMax[r] = newMax;
#pragma unroll
      for (int t = 0; t < kColumns; ++t)
        acc[r][t] *= correction;
    }
    __syncwarp();

    // acc += P V over the tile's keys (masked keys have P = 0, and V's rows
    // past the tile's keys are zeros).
    const float4 *myP4 = reinterpret_cast<const float4 *>(myP);
    const int keys4 = (keys + 3) / 4;
    for (int c4 = 0; c4 < keys4; ++c4) {
      float4 pv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        pv[r] = myP4[r * (kBlockKeys / 4) + c4];
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int d = lane + 32 * t;
        if (d >= dp)
          continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float value = vs[(4 * c4 + e) * dp + d];
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            acc[r][t] = fmaf(lane4(pv[r], e), value, acc[r][t]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = row0 + warp * kRows + r;
    if (i >= p.querySeq) // the same for the whole warp
      break;
    const double total = warpSum(rowSum[r]);
    const float inverse = total > 0.0 ? static_cast<float>(1.0 / total) : 0.0f;
    const int64_t offset = i * qRows.stride;
    if constexpr (!kStats) {
      float *o = out + (qRows.base - p.q) + offset;
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int d = lane + 32 * t;
        if (d < p.headDim)
          o[d] = acc[r][t] * inverse;
      }
    } else {
      const float *g = dout + (qRows.base - p.q) + offset;
      float delta = 0.0f;
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int d = lane + 32 * t;
        if (d < p.headDim)
          delta = fmaf(acc[r][t] * inverse, g[d], delta);
      }
      delta = warpSum(delta);
      if (lane == 0) {
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
template <int kMaxD, int kRows, int kKeysPerLane>
__global__ void __launch_bounds__(kThreads)
    attentionGradQueryKernel(AttentionParams p, const float *dout,
                             RowStats stats, float *dq) {
  constexpr int kBlockRows = kWarps * kRows;
  constexpr int kBlockKeys = 32 * kKeysPerLane;
  constexpr int kColumns = kMaxD / 32;
  extern __shared__ float4 shared[];
  const int dp = p.paddedDim, dp4 = dp / 4, ks4 = oddStride4(dp);
  float4 *qs = shared;                  // [kBlockRows][dp4]
  float4 *dos = qs + kBlockRows * dp4;  // [kBlockRows][dp4]
  float4 *ks = dos + kBlockRows * dp4;  // [kBlockKeys][ks4]
  float4 *vs = ks + kBlockKeys * ks4;   // [kBlockKeys][ks4]
  float4 *dss4 = vs + kBlockKeys * ks4; // [kBlockRows][kBlockKeys / 4]
  const float *ksf = reinterpret_cast<const float *>(ks);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z;
  const int h = blockIdx.y;
  const int kvHead = h / (p.heads / p.kvHeads);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const Visibility visible = visibility(p, b);
  const bool alibi = p.alibiSlopes != nullptr;
  const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
  const int64_t rowEnd = min64(p.querySeq, row0 + kBlockRows);
  const int64_t keyEnd = visible.keyEnd(rowEnd);

  HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
  HeadRows doRows = headRows(dout, b, p.querySeq, p.heads, h, p.headDim);
  HeadRows kRowsOf = headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  HeadRows vRowsOf = headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int validRows = static_cast<int>(rowEnd - row0);
  loadTile(reinterpret_cast<float *>(qs), dp, qRows.base + row0 * qRows.stride,
           qRows.stride, kBlockRows, validRows, p.headDim, dp);
  loadTile(reinterpret_cast<float *>(dos), dp,
           doRows.base + row0 * doRows.stride, doRows.stride, kBlockRows,
           validRows, p.headDim, dp);

  float rowMax[kRows], rowInverse[kRows], rowDelta[kRows];
  float acc[kRows][kColumns];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = row0 + warp * kRows + r;
    const int64_t index = (b * p.heads + h) * p.querySeq + i;
    const bool valid = i < p.querySeq;
    rowMax[r] = valid ? stats.max[index] : 0.0f;
    rowInverse[r] = valid ? stats.inverse[index] : 0.0f;
    rowDelta[r] = valid ? stats.delta[index] : 0.0f;
#pragma unroll
    for (int t = 0; t < kColumns; ++t)
      acc[r][t] = 0.0f;
  }
  const float4 *myQ = qs + warp * kRows * dp4;
  const float4 *myDO = dos + warp * kRows * dp4;
  float *myDS = reinterpret_cast<float *>(dss4) + warp * kRows * kBlockKeys;

  for (int64_t key0 = 0; key0 < keyEnd; key0 += kBlockKeys) {
    const int keys = static_cast<int>(min64(kBlockKeys, keyEnd - key0));
    __syncthreads();
    loadTile(reinterpret_cast<float *>(ks), 4 * ks4,
             kRowsOf.base + key0 * kRowsOf.stride, kRowsOf.stride, kBlockKeys,
             keys, p.headDim, dp);
    loadTile(reinterpret_cast<float *>(vs), 4 * ks4,
             vRowsOf.base + key0 * vRowsOf.stride, vRowsOf.stride, kBlockKeys,
             keys, p.headDim, dp);
    __syncthreads();

    // Scores and dP = dO . V of the warp's rows and the lane's keys.
    float s[kRows][kKeysPerLane], dpv[kRows][kKeysPerLane];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u)
        s[r][u] = dpv[r][u] = 0.0f;
    for (int c = 0; c < dp4; ++c) {
      float4 kv[kKeysPerLane], vv[kKeysPerLane];
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        kv[u] = ks[(lane + 32 * u) * ks4 + c];
        vv[u] = vs[(lane + 32 * u) * ks4 + c];
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float4 qv = myQ[r * dp4 + c], dov = myDO[r * dp4 + c];
#pragma unroll
        for (int u = 0; u < kKeysPerLane; ++u) {
          dot4(s[r][u], qv, kv[u]);
          dot4(dpv[r][u], dov, vv[u]);
        }
      }
    }

    // dS = P (dP - D) * scale, P recomputed from the row's statistics.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t i = row0 + warp * kRows + r;
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        const int64_t j = key0 + lane + 32 * u;
        float ds = 0.0f;
        if (i < p.querySeq && j < keyEnd && visible.sees(i, j)) {
          float prob =
              expf(score(s[r][u], p.scale, alibi, slope, i, j) - rowMax[r]) *
              rowInverse[r];
          ds = prob * (dpv[r][u] - rowDelta[r]) * p.scale;
        }
        myDS[r * kBlockKeys + lane + 32 * u] = ds;
      }
    }
    __syncwarp();

    // acc += dS K over the tile's keys.
    const float4 *myDS4 = reinterpret_cast<const float4 *>(myDS);
    const int keys4 = (keys + 3) / 4;
    for (int c4 = 0; c4 < keys4; ++c4) {
      float4 dsv[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        dsv[r] = myDS4[r * (kBlockKeys / 4) + c4];
#pragma unroll
      for (int t = 0; t < kColumns; ++t) {
        const int d = lane + 32 * t;
        if (d >= dp)
          continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float value = ksf[(4 * c4 + e) * 4 * ks4 + d];
#pragma unroll
          for (int r = 0; r < kRows; ++r)
            acc[r][t] = fmaf(lane4(dsv[r], e), value, acc[r][t]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = row0 + warp * kRows + r;
    if (i >= p.querySeq)
      break;
    float *target = dq + (qRows.base - p.q) + i * qRows.stride;
#pragma unroll
    for (int t = 0; t < kColumns; ++t) {
      const int d = lane + 32 * t;
      if (d < p.headDim)
        target[d] = acc[r][t];
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention: dK and dV
//===----------------------------------------------------------------------===//

/// dk and dv for one (key tile, kv head, sample): grid (tiles, kvHeads,
/// batch). Sums over the query heads of the kv head, then over the query
/// tiles, in order.
template <int kMaxD, int kRows, int kQueriesPerLane>
__global__ void __launch_bounds__(kThreads)
    attentionGradKeyValueKernel(AttentionParams p, const float *dout,
                                RowStats stats, float *dk, float *dv) {
  constexpr int kBlockKeys = kWarps * kRows;
  constexpr int kBlockRows = 32 * kQueriesPerLane;
  constexpr int kColumns = kMaxD / 32;
  extern __shared__ float4 shared[];
  const int dp = p.paddedDim, dp4 = dp / 4, qs4 = oddStride4(dp);
  float4 *ks = shared;                 // [kBlockKeys][dp4]
  float4 *vs = ks + kBlockKeys * dp4;  // [kBlockKeys][dp4]
  float4 *qs = vs + kBlockKeys * dp4;  // [kBlockRows][qs4]
  float4 *dos = qs + kBlockRows * qs4; // [kBlockRows][qs4]
  float4 *ps4 = dos + kBlockRows * qs4;
  float4 *dss4 = ps4 + kBlockKeys * (kBlockRows / 4);
  const float *qsf = reinterpret_cast<const float *>(qs);
  const float *dosf = reinterpret_cast<const float *>(dos);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z;
  const int kvHead = blockIdx.y;
  const int group = p.heads / p.kvHeads;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kBlockKeys;
  const Visibility visible = visibility(p, b);
  const bool alibi = p.alibiSlopes != nullptr;

  HeadRows kRowsOf = headRows(p.k, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  HeadRows vRowsOf = headRows(p.v, b, p.keySeq, p.kvHeads, kvHead, p.headDim);
  const int keys = static_cast<int>(min64(kBlockKeys, p.keySeq - key0));
  loadTile(reinterpret_cast<float *>(ks), dp,
           kRowsOf.base + key0 * kRowsOf.stride, kRowsOf.stride, kBlockKeys,
           keys, p.headDim, dp);
  loadTile(reinterpret_cast<float *>(vs), dp,
           vRowsOf.base + key0 * vRowsOf.stride, vRowsOf.stride, kBlockKeys,
           keys, p.headDim, dp);

  float accK[kRows][kColumns], accV[kRows][kColumns];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kColumns; ++t)
      accK[r][t] = accV[r][t] = 0.0f;
  const float4 *myK = ks + warp * kRows * dp4;
  const float4 *myV = vs + warp * kRows * dp4;
  float *myP = reinterpret_cast<float *>(ps4) + warp * kRows * kBlockRows;
  float *myDS = reinterpret_cast<float *>(dss4) + warp * kRows * kBlockRows;
  const int64_t firstRow = visible.firstRow(key0);

  for (int g = 0; g < group; ++g) {
    const int h = kvHead * group + g;
    const float slope = alibi ? p.alibiSlopes[h] : 0.0f;
    HeadRows qRows = headRows(p.q, b, p.querySeq, p.heads, h, p.headDim);
    HeadRows doRows = headRows(dout, b, p.querySeq, p.heads, h, p.headDim);
    const int64_t statsBase = (b * p.heads + h) * p.querySeq;
    for (int64_t row0 = firstRow; row0 < p.querySeq; row0 += kBlockRows) {
      const int rows = static_cast<int>(min64(kBlockRows, p.querySeq - row0));
      __syncthreads(); // the previous tile's readers are done
      loadTile(reinterpret_cast<float *>(qs), 4 * qs4,
               qRows.base + row0 * qRows.stride, qRows.stride, kBlockRows, rows,
               p.headDim, dp);
      loadTile(reinterpret_cast<float *>(dos), 4 * qs4,
               doRows.base + row0 * doRows.stride, doRows.stride, kBlockRows,
               rows, p.headDim, dp);
      __syncthreads();

      // Scores and dP of the warp's keys and the lane's rows lane + 32 u.
      float s[kRows][kQueriesPerLane], dpv[kRows][kQueriesPerLane];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int u = 0; u < kQueriesPerLane; ++u)
          s[r][u] = dpv[r][u] = 0.0f;
      for (int c = 0; c < dp4; ++c) {
        float4 qv[kQueriesPerLane], dov[kQueriesPerLane];
#pragma unroll
        for (int u = 0; u < kQueriesPerLane; ++u) {
          qv[u] = qs[(lane + 32 * u) * qs4 + c];
          dov[u] = dos[(lane + 32 * u) * qs4 + c];
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float4 kv = myK[r * dp4 + c], vv = myV[r * dp4 + c];
#pragma unroll
          for (int u = 0; u < kQueriesPerLane; ++u) {
            dot4(s[r][u], qv[u], kv);
            dot4(dpv[r][u], dov[u], vv);
          }
        }
      }

      // P and dS = P (dP - D) * scale from the rows' statistics.
#pragma unroll
      for (int u = 0; u < kQueriesPerLane; ++u) {
        const int64_t i = row0 + lane + 32 * u;
        const bool validRow = i < p.querySeq;
        const float rowMax = validRow ? stats.max[statsBase + i] : 0.0f;
        const float rowInverse = validRow ? stats.inverse[statsBase + i] : 0.0f;
        const float rowDelta = validRow ? stats.delta[statsBase + i] : 0.0f;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int64_t j = key0 + warp * kRows + r;
          float prob = 0.0f, ds = 0.0f;
          if (validRow && visible.sees(i, j)) {
            prob = expf(score(s[r][u], p.scale, alibi, slope, i, j) - rowMax) *
                   rowInverse;
            ds = prob * (dpv[r][u] - rowDelta) * p.scale;
          }
          myP[r * kBlockRows + lane + 32 * u] = prob;
          myDS[r * kBlockRows + lane + 32 * u] = ds;
        }
      }
      __syncwarp();

      // dV += P^T dO and dK += dS^T Q over the tile's rows.
      const float4 *myP4 = reinterpret_cast<const float4 *>(myP);
      const float4 *myDS4 = reinterpret_cast<const float4 *>(myDS);
      const int rows4 = (rows + 3) / 4;
      for (int c4 = 0; c4 < rows4; ++c4) {
        float4 pv[kRows], dsv[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          pv[r] = myP4[r * (kBlockRows / 4) + c4];
          dsv[r] = myDS4[r * (kBlockRows / 4) + c4];
        }
#pragma unroll
        for (int t = 0; t < kColumns; ++t) {
          const int d = lane + 32 * t;
          if (d >= dp)
            continue;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = 4 * c4 + e;
            const float gradOut = dosf[row * 4 * qs4 + d];
            const float query = qsf[row * 4 * qs4 + d];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              accV[r][t] = fmaf(lane4(pv[r], e), gradOut, accV[r][t]);
              accK[r][t] = fmaf(lane4(dsv[r], e), query, accK[r][t]);
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t j = key0 + warp * kRows + r;
    if (j >= p.keySeq)
      break;
    const int64_t offset = (kRowsOf.base - p.k) + j * kRowsOf.stride;
#pragma unroll
    for (int t = 0; t < kColumns; ++t) {
      const int d = lane + 32 * t;
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

/// Launches `kernel` with `sharedBytes` of dynamic shared memory (raising
/// the kernel's limit past the default 48 KiB where needed).
template <typename... Params, typename... Args>
absl::Status launch(CudaContext &context, void (*kernel)(Params...),
                    const char *name, dim3 grid, size_t sharedBytes,
                    Args... args) {
  if (sharedBytes > 48 * 1024)
    TRIAD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(sharedBytes)));
  kernel<<<grid, kThreads, sharedBytes, context.stream()>>>(args...);
  TRIAD_CUDA_CHECK_LAUNCH(name);
  return absl::OkStatus();
}

/// Checks the shape and pointers; the parameters of the kernels.
absl::Status attentionParams(const char *what, const float *q, const float *k,
                             const float *v, const int32_t *prefixLengths,
                             const float *alibiSlopes,
                             const cpu::AttentionShape &s,
                             AttentionParams &params) {
  auto invalid = [&](const std::string &why) {
    return absl::InvalidArgumentError(std::string(what) + ": " + why);
  };
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
            static_cast<int>((s.headDim + 3) / 4 * 4),
            s.mask,
            s.scale};
  return absl::OkStatus();
}

unsigned tiles(int64_t count, int tile) {
  return static_cast<unsigned>((count + tile - 1) / tile);
}

/// The forward (or, with `stats`, the backward's row statistics) for
/// head dimensions up to kMaxD.
template <int kMaxD>
absl::Status forward(CudaContext &context, const AttentionParams &params,
                     int64_t batch, float *out, const float *dout,
                     const RowStats *stats) {
  constexpr TileShape t = kTiles<kMaxD>;
  dim3 grid(tiles(params.querySeq, kWarps * t.forwardRows),
            static_cast<unsigned>(params.heads), static_cast<unsigned>(batch));
  size_t bytes =
      sizeof(float) *
      forwardShared(t.forwardRows, t.forwardKeysPerLane, params.paddedDim);
  if (stats)
    return launch(context,
                  attentionForwardKernel<kMaxD, t.forwardRows,
                                         t.forwardKeysPerLane, true>,
                  "attentionForwardKernel (statistics)", grid, bytes, params,
                  out, dout, *stats);
  return launch(
      context,
      attentionForwardKernel<kMaxD, t.forwardRows, t.forwardKeysPerLane, false>,
      "attentionForwardKernel", grid, bytes, params, out, dout, RowStats{});
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
  dim3 queryGrid(tiles(params.querySeq, kWarps * t.queryRows),
                 static_cast<unsigned>(params.heads),
                 static_cast<unsigned>(batch));
  if (absl::Status s = launch(
          context,
          attentionGradQueryKernel<kMaxD, t.queryRows, t.queryKeysPerLane>,
          "attentionGradQueryKernel", queryGrid,
          sizeof(float) * queryGradShared(t.queryRows, t.queryKeysPerLane,
                                          params.paddedDim),
          params, dout, stats, dq);
      !s.ok())
    return s;
  if (params.keySeq == 0)
    return absl::OkStatus();
  dim3 keyGrid(tiles(params.keySeq, kWarps * t.keyRows),
               static_cast<unsigned>(params.kvHeads),
               static_cast<unsigned>(batch));
  return launch(
      context,
      attentionGradKeyValueKernel<kMaxD, t.keyRows, t.keyQueriesPerLane>,
      "attentionGradKeyValueKernel", keyGrid,
      sizeof(float) *
          keyGradShared(t.keyRows, t.keyQueriesPerLane, params.paddedDim),
      params, dout, stats, dk, dv);
}

//===----------------------------------------------------------------------===//
// Rope and dropout kernels
//===----------------------------------------------------------------------===//

/// One block per row (grid-stride over rows): threads take the rotated
/// pairs (i, i + half), each computing its angle once for every head, then
/// the elements past the rotated ones. Each element is read and written by
/// one thread, so out may be x. The angle is in double and the rotation
/// rounds every product (no fused multiply-add), as on the CPU.
__global__ void ropeKernel(const float *x, float *out, int64_t rows,
                           int64_t seq, int heads, int headDim, int rotaryDim,
                           float base, float direction) {
  const int half = rotaryDim / 2, rest = headDim - 2 * half;
  const int64_t width = static_cast<int64_t>(heads) * headDim;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const double position = static_cast<double>(row % seq);
    const float *in = x + row * width;
    float *o = out + row * width;
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
        o[at] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(bValue, sn));
        o[at + half] = __fadd_rn(__fmul_rn(bValue, c), __fmul_rn(a, sn));
      }
    }
    for (int e = threadIdx.x; e < heads * rest; e += blockDim.x) {
      const int64_t at =
          static_cast<int64_t>(e / rest) * headDim + 2 * half + e % rest;
      o[at] = in[at];
    }
  }
}

/// The Philox4x32-10 generator of runtime/init/Philox.cpp, for the device
/// (the same constants and rounds; the tests check the masks match).
struct Philox {
  uint32_t c0, c1, c2, c3;
};

__device__ __forceinline__ uint32_t philoxFirstWord(Philox counter,
                                                    uint32_t key0,
                                                    uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    const uint64_t product0 = static_cast<uint64_t>(0xD2511F53u) * counter.c0;
    const uint64_t product1 = static_cast<uint64_t>(0xCD9E8D57u) * counter.c2;
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter.c1 ^ key0,
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter.c3 ^ key1,
               static_cast<uint32_t>(product0)};
  }
  return counter.c0;
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

/// Element i is kept when dropoutUniform(seed, step, stream, first + i) >=
/// probability: the uniform is (bits + 0.5) / 2^32 in double, as
/// uint32ToOpenUnit forms it, so the comparison is the CPU's exactly.
__global__ void dropoutKernel(const float *x, float *out, int64_t count,
                              double probability, float keepScale, uint64_t key,
                              uint64_t step, uint64_t first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t index = first + static_cast<uint64_t>(i);
    const uint32_t bits = philoxFirstWord(
        {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
         static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
        static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
    const double uniform =
        (static_cast<double>(bits) + 0.5) * (1.0 / 4294967296.0);
    out[i] = uniform >= probability ? x[i] * keepScale : 0.0f;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

absl::Status attention(CudaContext &context, const float *q, const float *k,
                       const float *v, const int32_t *prefixLengths,
                       const float *alibiSlopes, float *out,
                       const cpu::AttentionShape &shape) {
  AttentionParams params;
  if (absl::Status s = attentionParams("attention", q, k, v, prefixLengths,
                                       alibiSlopes, shape, params);
      !s.ok())
    return s;
  if (shape.batch == 0 || shape.querySeq == 0)
    return absl::OkStatus();
  if (shape.headDim <= 32)
    return forward<32>(context, params, shape.batch, out, nullptr, nullptr);
  if (shape.headDim <= 64)
    return forward<64>(context, params, shape.batch, out, nullptr, nullptr);
  if (shape.headDim <= 128)
    return forward<128>(context, params, shape.batch, out, nullptr, nullptr);
  return forward<256>(context, params, shape.batch, out, nullptr, nullptr);
}

absl::Status attentionGrad(CudaContext &context, const float *q, const float *k,
                           const float *v, const int32_t *prefixLengths,
                           const float *alibiSlopes, const float *dout,
                           float *dq, float *dk, float *dv,
                           const cpu::AttentionShape &shape) {
  AttentionParams params;
  if (absl::Status s = attentionParams("attentionGrad", q, k, v, prefixLengths,
                                       alibiSlopes, shape, params);
      !s.ok())
    return s;
  if (shape.batch == 0)
    return absl::OkStatus();
  if (shape.querySeq == 0) {
    // No query sees a key: dk and dv are zeros (dq is empty).
    size_t bytes = sizeof(float) * shape.batch * shape.keySeq * shape.kvHeads *
                   shape.headDim;
    TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dk, 0, bytes, context.stream()));
    TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dv, 0, bytes, context.stream()));
    return absl::OkStatus();
  }
  const size_t rows = shape.batch * shape.heads * shape.querySeq;
  const size_t piece = alignScratch(sizeof(float) * rows);
  absl::StatusOr<void *> scratch = context.scratch(3 * piece);
  if (!scratch.ok())
    return scratch.status();
  char *base = static_cast<char *>(*scratch);
  RowStats stats{reinterpret_cast<float *>(base),
                 reinterpret_cast<float *>(base + piece),
                 reinterpret_cast<float *>(base + 2 * piece)};
  if (shape.headDim <= 32)
    return backward<32>(context, params, shape.batch, dout, stats, dq, dk, dv);
  if (shape.headDim <= 64)
    return backward<64>(context, params, shape.batch, dout, stats, dq, dk, dv);
  if (shape.headDim <= 128)
    return backward<128>(context, params, shape.batch, dout, stats, dq, dk, dv);
  return backward<256>(context, params, shape.batch, dout, stats, dq, dk, dv);
}

absl::Status rope(CudaContext &context, const float *x, float *out,
                  int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
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
  ropeKernel<<<blocks, threads, 0, context.stream()>>>(
      x, out, rows, seq, static_cast<int>(heads), static_cast<int>(headDim),
      static_cast<int>(rotaryDim), base, direction);
  TRIAD_CUDA_CHECK_LAUNCH("ropeKernel");
  return absl::OkStatus();
}

absl::Status dropout(CudaContext &context, const float *x, float *out,
                     int64_t count, double probability, uint64_t seed,
                     uint64_t step, uint64_t stream, uint64_t first) {
  if (count < 0)
    return absl::InvalidArgumentError("dropout: negative count");
  if (count == 0)
    return absl::OkStatus();
  // The CPU's scale, rounded the same way.
  const float keepScale = static_cast<float>(1.0 / (1.0 - probability));
  dropoutKernel<<<elementBlocks(count), kElementThreads, 0, context.stream()>>>(
      x, out, count, probability, keepScale, dropoutKey(seed, stream), step,
      first);
  TRIAD_CUDA_CHECK_LAUNCH("dropoutKernel");
  return absl::OkStatus();
}

} // namespace triad::rt::cuda
