//===- CudaKernels.cu - CUDA kernels of the Triad runtime -----------------===//
//
// See CudaKernels.h. Layout of this file: device helpers (activations,
// block reductions), then one section per group of entry points. Row
// kernels give one thread block to a row; reductions over rows (dgamma,
// dbias) first sum fixed chunks of rows into partials, then add the
// partials in chunk order, as the CPU kernels do, so that no result depends
// on scheduling. The kernels that have typed entry points are templates
// over their element access (CudaElementAccess.cuh), instantiated for the
// f32 entry points and the typed ones.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaKernels.h"

#include "runtime/init/PhiloxRounds.h"
#include "runtime/kernels/StepMath.h"
#include "runtime/kernels/cuda/CudaCheck.h"
#include "runtime/kernels/cuda/CudaElementAccess.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace triad::rt::cuda {

namespace {

using namespace element_access;

//===----------------------------------------------------------------------===//
// Launch configuration
//===----------------------------------------------------------------------===//

constexpr int kThreads = 256;
/// Blocks of a grid-stride elementwise kernel: enough to fill any GPU,
/// within the grid's x limit.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;
/// Rows per partial of the reductions over rows (as the CPU's kBlock).
constexpr int64_t kRowChunk = 64;
/// Elements per chunk of the kernels over many tensors.
constexpr int64_t kTensorChunk = 16384;

unsigned elementBlocks(int64_t count) {
  return static_cast<unsigned>(std::max<int64_t>(
      1, std::min(kMaxBlocks, (count + kThreads - 1) / kThreads)));
}

/// Elements of an elementwise kernel's thread per pass (forEachElement):
/// it issues the loads of all of them before its first store, so that each
/// thread has several loads in flight. One 2-byte load per thread at a time
/// keeps too few bytes in flight to reach an H100's memory bandwidth.
constexpr int kUnroll = 4;

/// Blocks of a kernel over `count` elements through forEachElement.
unsigned unrolledBlocks(int64_t count) {
  constexpr int64_t perBlock = int64_t{kThreads} * kUnroll;
  return static_cast<unsigned>(std::max<int64_t>(
      1, std::min(kMaxBlocks, (count + perBlock - 1) / perBlock)));
}

/// Threads of a row kernel: a multiple of the warp size, at most kThreads,
/// no more than the row has elements.
unsigned rowThreads(int64_t width) {
  return static_cast<unsigned>(std::min<int64_t>(
      kThreads, std::max<int64_t>(32, (width + 31) / 32 * 32)));
}

/// CUDA grids count blocks with 31 bits in x.
absl::Status checkGrid(int64_t blocks, const char *what) {
  if (blocks > 0x7fffffff)
    return absl::InvalidArgumentError(
        std::string(what) + " has more rows than one CUDA grid launches");
  return absl::OkStatus();
}

#define TRIAD_GRID_STRIDE(i, count)                                            \
  for (int64_t i =                                                             \
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;        \
       i < (count); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

/// For each element i < count, `store(i, value(i))`, the grid striding over
/// spans of kUnroll blocks' worth of elements: a thread takes elements
/// blockDim.x apart (a warp's accesses are contiguous) and computes all its
/// values before it stores any. Each element is read and written by one
/// thread, so a result may be one of the operands (in place).
template <typename Value, typename Store>
__device__ __forceinline__ void forEachElement(int64_t count, Value value,
                                               Store store) {
  using V = decltype(value(int64_t{0}));
  const int64_t step = static_cast<int64_t>(blockDim.x);
  for (int64_t base = blockIdx.x * step * kUnroll + threadIdx.x; base < count;
       base += static_cast<int64_t>(gridDim.x) * step * kUnroll) {
    V v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
      if (base + j * step < count)
        v[j] = value(base + j * step);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
      if (base + j * step < count)
        store(base + j * step, v[j]);
  }
}

/// i modulo `period` (a broadcast operand's index), in 32 bits where
/// `narrow` (every index fits them: the host's choice), which costs a
/// fraction of a 64-bit remainder.
__device__ __forceinline__ int64_t wrap(int64_t i, int64_t period,
                                        bool narrow) {
  if (narrow)
    return static_cast<uint32_t>(i) % static_cast<uint32_t>(period);
  return i % period;
}

/// Whether every index below `count` and `period` fit wrap's 32 bits.
bool narrowIndices(int64_t count, int64_t period) {
  return count <= int64_t{0xffffffff} && period <= int64_t{0xffffffff};
}

//===----------------------------------------------------------------------===//
// Activations: the formulas of CpuKernels.cpp
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float sigmoidf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float applyActivation(Activation kind, float x) {
  switch (kind) {
  case Activation::Gelu:
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  case Activation::GeluTanh: {
    const float c = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
  }
  case Activation::FastGelu:
    return x * sigmoidf(1.702f * x);
  case Activation::Relu:
    return x > 0.0f ? x : 0.0f;
  case Activation::Silu:
    return x * sigmoidf(x);
  }
  return x;
}

__device__ __forceinline__ float activationDerivative(Activation kind,
                                                      float x) {
  switch (kind) {
  case Activation::Gelu: {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;
    return cdf + x * pdf;
  }
  case Activation::GeluTanh: {
    const float c = 0.7978845608028654f;
    float t = tanhf(c * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
  }
  case Activation::FastGelu: {
    float s = sigmoidf(1.702f * x);
    return s + 1.702f * x * s * (1.0f - s);
  }
  case Activation::Relu:
    return x > 0.0f ? 1.0f : 0.0f;
  case Activation::Silu: {
    float s = sigmoidf(x);
    return s + x * s * (1.0f - s);
  }
  }
  return 1.0f;
}

//===----------------------------------------------------------------------===//
// Block reductions (fixed order for a given block size)
//===----------------------------------------------------------------------===//

template <typename T> __device__ __forceinline__ T warpSum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The sum of `v` over the block, returned to every thread. Every thread of
/// the block must call it (it synchronizes).
template <typename T> __device__ T blockSum(T v) {
  __shared__ T partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int warps = (blockDim.x + 31) >> 5;
  v = warpSum(v);
  __syncthreads(); // an earlier call may still read `partial`
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : T(0);
    v = warpSum(v);
    if (lane == 0)
      partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

__device__ float blockMax(float v) {
  __shared__ float partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int warps = (blockDim.x + 31) >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : -INFINITY;
    v = warpMax(v);
    if (lane == 0)
      partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

//===----------------------------------------------------------------------===//
// Elementwise kernels
//===----------------------------------------------------------------------===//

/// The stores of an Out accessor, for forEachElement.
template <typename Out> struct StoreTo {
  Out out;
  __device__ __forceinline__ void operator()(int64_t i, float v) const {
    out.store(i, v);
  }
};

/// out = lhs + rhs, rhs of the same shape (period == count: no remainder)
/// or repeating with `period`.
template <typename In, typename Out>
__global__ void addBroadcastKernel(In lhs, In rhs, Out out, int64_t count,
                                   int64_t period, bool narrow) {
  if (period == count)
    forEachElement(
        count, [&](int64_t i) { return lhs[i] + rhs[i]; }, StoreTo<Out>{out});
  else
    forEachElement(
        count, [&](int64_t i) { return lhs[i] + rhs[wrap(i, period, narrow)]; },
        StoreTo<Out>{out});
}

template <typename In, typename Out>
__global__ void mulKernel(In a, In b, Out out, int64_t count) {
  forEachElement(
      count, [&](int64_t i) { return a[i] * b[i]; }, StoreTo<Out>{out});
}

template <typename In, typename Out>
__global__ void scaleKernel(In x, float factor, Out out, int64_t count) {
  forEachElement(
      count, [&](int64_t i) { return x[i] * factor; }, StoreTo<Out>{out});
}

template <typename In, typename Out>
__global__ void scaleByKernel(In x, const float *factor, Out out,
                              int64_t count) {
  float f = *factor;
  forEachElement(
      count, [&](int64_t i) { return x[i] * f; }, StoreTo<Out>{out});
}

template <typename In, typename Out>
__global__ void accumulateKernel(Out acc, In x, const float *weight,
                                 int64_t count) {
  float w = *weight;
  // A multiply and an add, each rounded, as on the CPU (not a fused one).
  forEachElement(
      count,
      [&](int64_t i) { return __fadd_rn(acc.load(i), __fmul_rn(w, x[i])); },
      StoreTo<Out>{acc});
}

template <typename Out>
__global__ void fillKernel(Out out, float value, int64_t count) {
  forEachElement(
      count, [&](int64_t) { return value; }, StoreTo<Out>{out});
}

/// One element of the piece a thread (see initValues).
__global__ void initValuesKernel(float *out, int64_t count, InitPiece piece,
                                 bool normal, float fill, uint32_t key0,
                                 uint32_t key1, double stddev) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < count; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = e, index = 0;
    bool inside = true;
    for (int d = piece.dims - 1; d >= 0; --d) {
      int64_t c = rest % piece.local[d];
      rest /= piece.local[d];
      inside = inside && c < piece.inside[d];
      index += (c + piece.offsets[d]) * piece.globalStrides[d];
    }
    float value = 0.0f;
    if (inside && !normal) {
      value = fill;
    } else if (inside) {
      double even, odd;
      normalPair(key0, key1, static_cast<uint64_t>(index) / 2, even, odd);
      value = static_cast<float>(stddev * (index % 2 == 0 ? even : odd));
    }
    out[e] = value;
  }
}

template <typename From, typename To>
__global__ void castKernel(const From *x, To *out, int64_t count) {
  forEachElement(
      count, [&](int64_t i) { return convert<From, To>(x[i]); },
      [&](int64_t i, To v) { out[i] = v; });
}

//===----------------------------------------------------------------------===//
// Layout kernels
//===----------------------------------------------------------------------===//

/// The copy of elements of type T (uint16_t or uint32_t: the copy moves
/// bits, so 16-bit floats, f32 and i32 values alike).
template <typename T>
__global__ void stridedCopyKernel(const T *x, T *out, StridedCopy copy,
                                  int64_t count) {
  TRIAD_GRID_STRIDE(i, count) {
    int64_t rest = i, from = 0, to = copy.outOffset;
    bool inside = true;
    for (int d = copy.rank - 1; d >= 0; --d) {
      int64_t c = rest % copy.shape[d];
      rest /= copy.shape[d];
      int64_t source = c + copy.shift[d];
      inside = inside && source >= 0 && source < copy.bound[d];
      from += source * copy.xStrides[d];
      to += c * copy.outStrides[d];
    }
    out[to] = inside ? x[from] : T(0);
  }
}

/// The dimensions of a Sum: the kept ones (one output coordinate each) and
/// the summed ones, with their sizes and x strides.
struct SumLayout {
  int kept = 0, summed = 0;
  int64_t keptSize[kMaxRank], keptStride[kMaxRank];
  int64_t summedSize[kMaxRank], summedStride[kMaxRank];
  int64_t summedCount = 1;
};

/// Partial sums of a Sum over chunks of its summed elements: thread (c, i)
/// adds summed elements [c chunkRows, (c + 1) chunkRows) of output i, in
/// order, in double. With one chunk it writes the output itself; else
/// `partial[c count + i]`, which addPartialsKernel adds in chunk order
/// (the result depends on the shapes only, not on the launch). `rowMajor`:
/// the summed dimensions all come before the kept ones, so x is [summed,
/// count] and element r of output i is x[r count + i] (coalesced in i).
template <typename In, typename Out>
__global__ void reduceSumPartialKernel(In x, double *partial, Out out,
                                       SumLayout layout, int64_t count,
                                       int64_t chunks, int64_t chunkRows,
                                       bool rowMajor, double factor) {
  TRIAD_GRID_STRIDE(t, count * chunks) {
    int64_t i = t % count, c = t / count;
    int64_t begin = c * chunkRows;
    int64_t end = min(begin + chunkRows, layout.summedCount);
    double sum = 0.0;
    if (rowMajor) {
      for (int64_t r = begin; r < end; ++r)
        sum += x[r * count + i];
    } else {
      int64_t rest = i, base = 0;
      for (int d = layout.kept - 1; d >= 0; --d) {
        base += rest % layout.keptSize[d] * layout.keptStride[d];
        rest /= layout.keptSize[d];
      }
      for (int64_t r = begin; r < end; ++r) {
        int64_t left = r, offset = base;
        for (int d = layout.summed - 1; d >= 0; --d) {
          offset += left % layout.summedSize[d] * layout.summedStride[d];
          left /= layout.summedSize[d];
        }
        sum += x[offset];
      }
    }
    if (chunks == 1)
      out.store(i, static_cast<float>(sum * factor));
    else
      partial[c * count + i] = sum;
  }
}

//===----------------------------------------------------------------------===//
// Device scalars
//===----------------------------------------------------------------------===//

template <typename In, typename Out>
__global__ void selectKernel(const float *flag, In a, In b, Out out,
                             int64_t count) {
  In chosen = *flag != 0.0f ? a : b;
  forEachElement(
      count, [&](int64_t i) { return chosen[i]; }, StoreTo<Out>{out});
}

__global__ void learningRateKernel(const float *step, double peak, double floor,
                                   int64_t warmup, int64_t decay, float *out) {
  out[0] = stepmath::learningRate(step[0], peak, floor, warmup, decay);
}

__global__ void clipCoefficientKernel(const float *sumSquares, double maxNorm,
                                      float *coefficient, float *norm) {
  stepmath::Clip clip = stepmath::clipCoefficient(sumSquares[0], maxNorm);
  coefficient[0] = clip.coefficient;
  norm[0] = clip.norm;
}

__global__ void lossScaleUpdateKernel(const float *sumSquares,
                                      const float *scale, const float *good,
                                      double growth, double backoff,
                                      int64_t interval, float *skip,
                                      float *nextScale, float *nextGood,
                                      float *inverse) {
  stepmath::LossScale next = stepmath::lossScaleUpdate(
      sumSquares[0], scale[0], good[0], growth, backoff, interval);
  skip[0] = next.skip;
  nextScale[0] = next.scale;
  nextGood[0] = next.goodSteps;
  inverse[0] = next.inverse;
}

__global__ void reciprocalKernel(const float *x, float *out) {
  out[0] = stepmath::reciprocal(x[0]);
}

/// out = act(x [+ bias]) [* other] or, with `derivative`, act'(x [+ bias])
/// * other; bias has period `width` (null data: none), other may be null.
template <typename In, typename Out>
__global__ void activationKernel(Activation kind, In x, In bias, In other,
                                 Out out, int64_t count, int64_t width,
                                 bool derivative, bool narrow) {
  forEachElement(
      count,
      [&](int64_t i) {
        float v = bias.data ? x[i] + bias[wrap(i, width, narrow)] : x[i];
        float r = derivative ? activationDerivative(kind, v)
                             : applyActivation(kind, v);
        return other.data ? r * other[i] : r;
      },
      StoreTo<Out>{out});
}

/// The two results of gatedGradKernel at one element.
struct GatedGrads {
  float gate, up;
};

/// Every operand is read before either result is written, so that a
/// result may overwrite an operand of its type.
template <typename In, typename Out>
__global__ void gatedGradKernel(Activation kind, In gate, In up, In dy,
                                Out dgate, Out dup, int64_t count) {
  forEachElement(
      count,
      [&](int64_t i) {
        float g = gate[i], u = up[i], d = dy[i];
        return GatedGrads{activationDerivative(kind, g) * (u * d),
                          applyActivation(kind, g) * d};
      },
      [&](int64_t i, GatedGrads v) {
        dgate.store(i, v.gate);
        dup.store(i, v.up);
      });
}

/// The blocks of the kernels that sum chunks of rows column by column: 32
/// columns by 8 chunks, one warp a chunk (one warp a block left an SM
/// with a fraction of the warps it runs at once).
const dim3 kChunkBlock(32, 8);

/// Their grid: blocks of 32 columns by groups of kChunkBlock.y chunks of
/// rows (a kernel strides over the rest: gridDim.y is at most 65535).
dim3 columnChunkGrid(int64_t width, int64_t chunks) {
  int64_t groups = (chunks + kChunkBlock.y - 1) / kChunkBlock.y;
  return dim3(static_cast<unsigned>((width + 31) / 32),
              static_cast<unsigned>(std::min<int64_t>(groups, 65535)));
}

/// partial[chunk, c] = the sum over the rows of `chunk` (kRowChunk rows) of
/// values[r, c], in row order. Blocks of kChunkBlock: 32 columns, one
/// thread a column, by kChunkBlock.y chunks (one warp each), the grid's y
/// striding over groups of chunks (columnChunkGrid).
__global__ void columnChunkSumKernel(const float *values, double *partial,
                                     int64_t rows, int64_t width,
                                     int64_t chunks) {
  int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= width)
    return;
  for (int64_t chunk = blockIdx.y * blockDim.y + threadIdx.y; chunk < chunks;
       chunk += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    int64_t end = min(rows, (chunk + 1) * kRowChunk);
    double sum = 0.0;
#pragma unroll 8
    for (int64_t r = chunk * kRowChunk; r < end; ++r)
      sum += values[r * width + c];
    partial[chunk * width + c] = sum;
  }
}

/// target[c] (+)= factor times the partials of column c added in chunk
/// order.
template <typename Out>
__global__ void addPartialsKernel(const double *partial, Out target,
                                  int64_t chunks, int64_t width,
                                  bool accumulate, double factor = 1.0) {
  TRIAD_GRID_STRIDE(c, width) {
    double sum = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      sum += partial[chunk * width + c];
    float value = static_cast<float>(sum * factor);
    target.store(c, accumulate ? target.load(c) + value : value);
  }
}

//===----------------------------------------------------------------------===//
// Normalization kernels
//===----------------------------------------------------------------------===//

struct RowStatistics {
  double mean, inverse;
};

/// The norm kernels give a block to a row; thread t takes elements t + j
/// blockDim.x of it. Rows up to kNormHeld elements are held in registers,
/// kNormHeldPerThread elements a thread (RowShare<kNormHeldPerThread>), so
/// that a row is read from memory once; wider ones are read from memory on
/// each pass (RowShare<0>: any width, the registers a held row of 12,288
/// would take spilling to local memory instead).
constexpr int kNormHeldPerThread = 8;
constexpr int kNormHeldThreads = 512;
constexpr int64_t kNormHeld = int64_t{kNormHeldPerThread} * kNormHeldThreads;

/// Threads of a norm kernel's block for rows of `width`: a multiple of the
/// warp size, enough for kNormHeldPerThread elements each where the row is
/// held, kThreads where it is not.
unsigned normThreads(int64_t width) {
  if (width > kNormHeld)
    return kThreads;
  int64_t perWarp = int64_t{32} * kNormHeldPerThread;
  return static_cast<unsigned>(
      std::max<int64_t>(32, (width + perWarp - 1) / perWarp * 32));
}

/// Element j of the thread's share of a row of `width`, or -1 past its
/// end.
__device__ __forceinline__ int64_t shareIndex(int j, int64_t width) {
  int64_t i = threadIdx.x + j * static_cast<int64_t>(blockDim.x);
  return i < width ? i : -1;
}

/// The thread's share of one row: held in registers (K > 0 elements, the
/// row at most K blockDim.x wide), or read from memory each time (K == 0).
template <int K, typename In> struct RowShare {
  In row;
  float held[K > 0 ? K : 1];
  /// Loads a held share (0 past the row's end).
  __device__ __forceinline__ RowShare(In row, int64_t width) : row(row) {
    if constexpr (K > 0) {
#pragma unroll
      for (int j = 0; j < K; ++j) {
        int64_t i = shareIndex(j, width);
        held[j] = i >= 0 ? row[i] : 0.0f;
      }
    }
  }
  /// Element i of the row, the share's j-th (forEachInShare's pair).
  __device__ __forceinline__ float operator()(int j, int64_t i) const {
    if constexpr (K > 0)
      return held[j];
    else
      return row[i];
  }
};

/// f(j, i) for each element i of the thread's share of a row of `width`,
/// j its place in a RowShare<K>.
template <int K, typename F>
__device__ __forceinline__ void forEachInShare(int64_t width, F f) {
  if constexpr (K > 0) {
#pragma unroll
    for (int j = 0; j < K; ++j)
      if (int64_t i = shareIndex(j, width); i >= 0)
        f(j, i);
  } else {
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
      f(0, i);
  }
}

/// The mean (0 unless `center`) and 1 / sqrt(statistic + epsilon) of the
/// row the block's threads share in `x`, in double, as the CPU's
/// rowStatistics; every thread gets them.
template <int K, typename In>
__device__ RowStatistics rowStatistics(const RowShare<K, In> &x, int64_t width,
                                       float epsilon, bool center) {
  double mean = 0.0;
  if (center) {
    double sum = 0.0;
    forEachInShare<K>(width, [&](int j, int64_t i) { sum += x(j, i); });
    mean = blockSum(sum) / static_cast<double>(width);
  }
  double squares = 0.0;
  forEachInShare<K>(width, [&](int j, int64_t i) {
    double d = x(j, i) - mean;
    squares += d * d;
  });
  double statistic = blockSum(squares) / static_cast<double>(width);
  return {mean, 1.0 / sqrt(statistic + static_cast<double>(epsilon))};
}

/// The sums of a and b over the block, returned to every thread (one
/// reduction's synchronizations for both). Every thread must call it.
__device__ double2 blockSumPair(double a, double b) {
  __shared__ double2 partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int warps = (blockDim.x + 31) >> 5;
  a = warpSum(a);
  b = warpSum(b);
  __syncthreads(); // an earlier call may still read `partial`
  if (lane == 0)
    partial[warp] = make_double2(a, b);
  __syncthreads();
  if (warp == 0) {
    double2 p = lane < warps ? partial[lane] : make_double2(0.0, 0.0);
    a = warpSum(p.x);
    b = warpSum(p.y);
    if (lane == 0)
      partial[0] = make_double2(a, b);
  }
  __syncthreads();
  return partial[0];
}

/// One row of y (in place when y is x: every thread reads each of its
/// elements, held or not, after the statistics' reductions or before
/// them, and writes only its own).
template <int K, typename In, typename Out>
__global__ void __launch_bounds__(K > 0 ? kNormHeldThreads : kThreads)
    normKernel(In x, In gamma, In beta, Out y, int64_t width, float epsilon,
               bool center) {
  RowShare<K, In> in(x.at(blockIdx.x * width), width);
  Out out = y.at(blockIdx.x * width);
  RowStatistics stats = rowStatistics(in, width, epsilon, center);
  float inverse = static_cast<float>(stats.inverse);
  float mean = static_cast<float>(stats.mean);
  // Rounded operation by operation, as the CPU computes it: nvcc would
  // otherwise fuse the last multiply and add in some instantiations only.
  forEachInShare<K>(width, [&](int j, int64_t i) {
    out.store(i,
              __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(in(j, i), mean), inverse),
                                  gamma[i]),
                        beta.data ? beta[i] : 0.0f));
  });
}

/// dx of one row, and the row's statistics into `stats` (mean, inverse)
/// for the dgamma pass.
template <int K, typename In, typename Out>
__global__ void __launch_bounds__(K > 0 ? kNormHeldThreads : kThreads)
    normGradKernel(In x, In gamma, In dy, Out dx, double *stats, int64_t width,
                   float epsilon, bool center) {
  RowShare<K, In> in(x.at(blockIdx.x * width), width);
  RowShare<K, In> grad(dy.at(blockIdx.x * width), width);
  Out out = dx.at(blockIdx.x * width);
  RowStatistics s = rowStatistics(in, width, epsilon, center);
  double meanG = 0.0, meanGX = 0.0;
  forEachInShare<K>(width, [&](int j, int64_t i) {
    float xhat = static_cast<float>((in(j, i) - s.mean) * s.inverse);
    double g = static_cast<double>(grad(j, i)) * gamma[i];
    meanG += g;
    meanGX += g * xhat;
  });
  double2 sums = blockSumPair(meanG, meanGX);
  meanG = sums.x / static_cast<double>(width);
  meanGX = sums.y / static_cast<double>(width);
  forEachInShare<K>(width, [&](int j, int64_t i) {
    float xhat = static_cast<float>((in(j, i) - s.mean) * s.inverse);
    out.store(i, static_cast<float>(
                     s.inverse * (static_cast<double>(grad(j, i)) * gamma[i] -
                                  (center ? meanG : 0.0) - xhat * meanGX)));
  });
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = s.mean;
    stats[2 * blockIdx.x + 1] = s.inverse;
  }
}

/// partial[chunk, c] = the sum over the chunk's rows of dy * xhat. Blocks
/// as columnChunkSumKernel's.
template <typename In>
__global__ void normGammaChunkKernel(In x, In dy, const double *stats,
                                     double *partial, int64_t rows,
                                     int64_t width, int64_t chunks) {
  int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= width)
    return;
  for (int64_t chunk = blockIdx.y * blockDim.y + threadIdx.y; chunk < chunks;
       chunk += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    int64_t end = min(rows, (chunk + 1) * kRowChunk);
    double sum = 0.0;
#pragma unroll 8
    for (int64_t r = chunk * kRowChunk; r < end; ++r) {
      float xhat = static_cast<float>((x[r * width + c] - stats[2 * r]) *
                                      stats[2 * r + 1]);
      sum += static_cast<double>(dy[r * width + c]) * xhat;
    }
    partial[chunk * width + c] = sum;
  }
}

//===----------------------------------------------------------------------===//
// Embedding and cross-entropy kernels
//===----------------------------------------------------------------------===//

template <typename In, typename Out>
__global__ void embeddingKernel(const int32_t *ids, In table, Out out,
                                int64_t rows, int64_t hidden, int64_t firstRow,
                                int64_t vocab, uint32_t *flags) {
  int64_t t = blockIdx.x;
  int64_t id = ids[t], row = id - firstRow;
  Out target = out.at(t * hidden);
  bool bad = id < 0 || id >= vocab;
  if (bad || row < 0 || row >= rows) {
    for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x)
      target.store(h, 0.0f);
    if (bad && threadIdx.x == 0)
      atomicOr(flags, kBadTokenId);
    return;
  }
  In source = table.at(row * hidden);
  for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x)
    target.store(h, source[h]);
}

/// The embedding gradient's sort key of each token: the row of the piece
/// its id selects, or `rows` (sorted last, left out) for an id of another
/// piece or outside [0, vocab) (which raises kBadTokenId); the token's
/// index is its value.
__global__ void embeddingGradKeysKernel(const int32_t *ids, int64_t tokens,
                                        int64_t rows, int64_t firstRow,
                                        int64_t vocab, uint32_t *keys,
                                        int32_t *order, uint32_t *flags) {
  TRIAD_GRID_STRIDE(t, tokens) {
    int64_t id = ids[t];
    int64_t row = id - firstRow;
    if (id < 0 || id >= vocab)
      atomicOr(flags, kBadTokenId);
    keys[t] = id >= 0 && id < vocab && row >= 0 && row < rows
                  ? static_cast<uint32_t>(row)
                  : static_cast<uint32_t>(rows);
    order[t] = static_cast<int32_t>(t);
  }
}

/// With the tokens sorted by row (stably: each row's tokens in token
/// order), block p heads the run of sorted tokens p.. of one row when the
/// token before it has another row, and adds their dy rows into that row
/// of dtable in token order: the CPU kernel's order of additions, so the
/// sums are bitwise the same, with rows in parallel rather than tokens in
/// series.
template <typename In>
__global__ void embeddingGradRowsKernel(const uint32_t *keys,
                                        const int32_t *order, In dy,
                                        float *dtable, int64_t tokens,
                                        int64_t rows, int64_t hidden) {
  int64_t p = blockIdx.x;
  uint32_t row = keys[p];
  if (row >= static_cast<uint64_t>(rows) || (p > 0 && keys[p - 1] == row))
    return;
  float *target = dtable + static_cast<int64_t>(row) * hidden;
  for (int64_t h = threadIdx.x; h < hidden; h += blockDim.x) {
    float sum = target[h];
    for (int64_t q = p; q < tokens && keys[q] == row; ++q)
      sum += dy[static_cast<int64_t>(order[q]) * hidden + h];
    target[h] = sum;
  }
}

/// A vocab-parallel piece as the kernels take it (see VocabPiece): the
/// row's first `classes` columns are classes [first, first + classes) of a
/// vocabulary of `vocab`, the rest padding; `lse` has null data or one
/// value per row.
template <typename In> struct PieceColumns {
  In lse;
  int64_t first, vocab, classes;
};

/// The piece of rows of `columns` logits; no piece: the whole vocabulary,
/// no padding.
PieceColumns<F32In> pieceColumns(int64_t columns, const VocabPiece *piece) {
  int64_t classes = cpu::classColumns(columns, piece);
  if (!piece)
    return {{nullptr}, 0, columns, classes};
  return {{piece->lse}, piece->first, piece->vocab, classes};
}

template <typename Access>
PieceColumns<typename Access::In> pieceColumns(int64_t columns,
                                               const TypedVocabPiece *piece) {
  if (!piece)
    return {Access::in({nullptr, DType::F32}), 0, columns, columns};
  VocabPiece untyped{nullptr, piece->first, piece->vocab};
  return {Access::in(piece->lse), piece->first, piece->vocab,
          cpu::classColumns(columns, &untyped)};
}

/// log(sum(exp(row[:n]))) from the row's maximum, summed in double (the
/// CPU's rowLogSumExp), returned to every thread; minus infinity when n is
/// 0. Every thread of the block must call it (it synchronizes).
template <typename In> __device__ double rowLogSumExp(In row, int64_t n) {
  float maxLogit = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    maxLogit = fmaxf(maxLogit, row[j]);
  maxLogit = blockMax(maxLogit);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    sum += exp(static_cast<double>(row[j] - maxLogit));
  sum = blockSum(sum);
  return n ? maxLogit + log(sum) : -static_cast<double>(INFINITY);
}

template <typename In, typename Out>
__global__ void logSumExpKernel(In x, Out out, int64_t columns,
                                int64_t classes) {
  double lse = rowLogSumExp(x.at(blockIdx.x * columns), classes);
  if (threadIdx.x == 0)
    out.store(blockIdx.x, static_cast<float>(lse));
}

/// The loss of each row (double; 0 for ignored and bad rows and for labels
/// in another piece's columns) and whether it counts (every valid label
/// does, wherever it lies).
template <typename In>
__global__ void crossEntropyRowKernel(In logits, const int32_t *labels,
                                      int64_t columns, PieceColumns<In> piece,
                                      int32_t ignoreIndex, double *rowLoss,
                                      int32_t *rowCounted, uint32_t *flags) {
  int64_t r = blockIdx.x;
  int32_t label = labels[r];
  bool bad = label != ignoreIndex && (label < 0 || label >= piece.vocab);
  bool counts = label != ignoreIndex && !bad;
  int64_t column = static_cast<int64_t>(label) - piece.first;
  if (!counts || column < 0 || column >= piece.classes) {
    if (threadIdx.x == 0) {
      rowLoss[r] = 0.0;
      rowCounted[r] = counts ? 1 : 0;
      if (bad)
        atomicOr(flags, kBadLabel);
    }
    return;
  }
  In row = logits.at(r * columns);
  // The same branch for the whole block (rowLogSumExp synchronizes).
  double lse = piece.lse.data ? static_cast<double>(piece.lse[r])
                              : rowLogSumExp(row, piece.classes);
  if (threadIdx.x == 0) {
    rowLoss[r] = lse - row[column];
    rowCounted[r] = 1;
  }
}

/// loss[0] = the mean of the counted rows' losses, added in row order by
/// a single block.
__global__ void crossEntropyMeanKernel(const double *rowLoss,
                                       const int32_t *rowCounted, int64_t rows,
                                       float *loss) {
  // Each thread sums a contiguous run of rows; the runs are then added in
  // the block's fixed tree order.
  int64_t per = (rows + blockDim.x - 1) / blockDim.x;
  int64_t begin = threadIdx.x * per, end = min(rows, begin + per);
  double total = 0.0;
  int64_t count = 0;
  for (int64_t r = begin; r < end; ++r) {
    total += rowLoss[r];
    count += rowCounted[r];
  }
  total = blockSum(total);
  count = blockSum(count);
  if (threadIdx.x == 0)
    loss[0] =
        count ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

__global__ void countValidKernel(const int32_t *labels, int64_t count,
                                 int32_t ignoreIndex, float *out) {
  int64_t valid = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    valid += labels[i] != ignoreIndex;
  valid = blockSum(valid);
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(valid);
}

/// One row of dlogits; in place when dlogits == logits: each thread writes
/// only the columns it reads itself (the label's column too, so that its
/// element is rounded once to a 16-bit dlogits).
template <typename In, typename Out>
__global__ void crossEntropyGradKernel(In logits, const int32_t *labels,
                                       const float *dloss, const float *counted,
                                       Out dlogits, int64_t columns,
                                       PieceColumns<In> piece,
                                       int32_t ignoreIndex, uint32_t *flags) {
  int64_t r = blockIdx.x;
  int32_t label = labels[r];
  In row = logits.at(r * columns);
  Out out = dlogits.at(r * columns);
  if (label == ignoreIndex || label < 0 || label >= piece.vocab) {
    for (int64_t j = threadIdx.x; j < columns; j += blockDim.x)
      out.store(j, 0.0f);
    if (label != ignoreIndex && threadIdx.x == 0)
      atomicOr(flags, kBadLabel);
    return;
  }
  float count = *counted;
  float weight = count != 0.0f ? *dloss / count : 0.0f;
  int64_t classes = piece.classes;
  // The softmax is exp(logit - lse); without a piece's lse, the row's own
  // (the same branch for the whole block: rowLogSumExp synchronizes, after
  // every read of the row's classes). Padding columns (from `classes` on)
  // get a gradient of 0.
  float lse = piece.lse.data ? piece.lse[r]
                             : static_cast<float>(rowLogSumExp(row, classes));
  int64_t column = static_cast<int64_t>(label) - piece.first;
  for (int64_t j = threadIdx.x; j < columns; j += blockDim.x) {
    float g = 0.0f;
    if (j < classes) {
      // The product is rounded before the label's weight is subtracted
      // (never fused into one multiply-add), as the CPU kernel rounds it.
      g = __fmul_rn(expf(row[j] - lse), weight);
      if (j == column)
        g -= weight;
    }
    out.store(j, g);
  }
}

//===----------------------------------------------------------------------===//
// Kernels over many tensors: a chunk table, one block a chunk
//===----------------------------------------------------------------------===//

/// Every table the kernels over many tensors read (chunks, tensors) has no
/// padding bytes: it stays on the device by its bytes
/// (CudaContext::resident), which must be the same for the same tensors.
struct Chunk {
  int64_t tensor, begin, end;
};

/// A ConstSpan as sumSquaresChunkKernel reads it.
struct SquaresEntry {
  const void *data;
  int64_t type; // a DType
};

/// An AdamWTensor as adamwKernel reads it.
struct AdamWEntry {
  float *param;
  const void *grad;
  float *m, *v;
  void *rounded;                 // null: none
  int64_t gradType, roundedType; // DTypes
  double weightDecay;
};

__global__ void sumSquaresChunkKernel(const SquaresEntry *spans,
                                      const Chunk *chunks, double limit,
                                      double *partial) {
  Chunk chunk = chunks[blockIdx.x];
  SquaresEntry span = spans[chunk.tensor];
  TypedIn x{span.data, static_cast<DType>(span.type)};
  double sum = 0.0;
  for (int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += blockDim.x) {
    double value = x[i];
    // An element above the limit makes the sum +inf (f16 overflow).
    sum += fabs(value) > limit ? static_cast<double>(INFINITY) : value * value;
  }
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = sum;
}

/// out[0] = the sum of the partials (one per 16K elements), by one block:
/// each thread adds every blockDim.x-th partial in order, then blockSum's
/// fixed tree adds the threads' sums, so the result does not depend on
/// timing (the same bits every run), and a model of billions of elements
/// (a hundred thousand partials) is not added by one thread.
__global__ void sumPartialsKernel(const double *partial, int64_t count,
                                  float *out) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    sum += partial[i];
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(sum);
}

/// Each thread updates kAdamWUnroll elements a pass, blockDim.x apart
/// (coalesced), all of their loads issued before any store: the weight,
/// gradient and moments are separate arrays the compiler cannot prove
/// apart, so an element's weight read after its moments' stores, or the
/// next element's reads after this one's stores, would wait for memory
/// one element at a time. The arithmetic is the element-by-element
/// update's, in the same order.
constexpr int kAdamWUnroll = 4;

__global__ void adamwKernel(const AdamWEntry *tensors, const Chunk *chunks,
                            const float *lrPointer, const float *stepPointer,
                            const float *coefficientPointer, AdamWHyper hyper,
                            const float *skip) {
  if (skip && *skip != 0.0f)
    return;
  Chunk chunk = chunks[blockIdx.x];
  AdamWEntry t = tensors[chunk.tensor];
  TypedIn grad{t.grad, static_cast<DType>(t.gradType)};
  TypedOut rounded{t.rounded, static_cast<DType>(t.roundedType)};
  float weightDecay = static_cast<float>(t.weightDecay);
  float lr = *lrPointer, step = *stepPointer, coefficient = *coefficientPointer;
  float correction1 = 1.0f - powf(hyper.beta1, step);
  float correction2 = 1.0f - powf(hyper.beta2, step);
  int64_t stride = blockDim.x;
  for (int64_t first = chunk.begin + threadIdx.x; first < chunk.end;
       first += stride * kAdamWUnroll) {
    float g[kAdamWUnroll], m[kAdamWUnroll], v[kAdamWUnroll], p[kAdamWUnroll];
#pragma unroll
    for (int u = 0; u < kAdamWUnroll; ++u) {
      int64_t i = first + u * stride;
      if (i < chunk.end) {
        g[u] = grad[i];
        m[u] = t.m[i];
        v[u] = t.v[i];
        p[u] = t.param[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kAdamWUnroll; ++u) {
      int64_t i = first + u * stride;
      if (i >= chunk.end)
        break;
      float scaled = g[u] * coefficient;
      float moment = hyper.beta1 * m[u] + (1.0f - hyper.beta1) * scaled;
      float second =
          hyper.beta2 * v[u] + (1.0f - hyper.beta2) * scaled * scaled;
      t.m[i] = moment;
      t.v[i] = second;
      float update = (moment / correction1) /
                     (sqrtf(second / correction2) + hyper.epsilon);
      float updated = p[u] - (lr * update + lr * weightDecay * p[u]);
      t.param[i] = updated;
      if (t.rounded)
        rounded.store(i, updated);
    }
  }
}

/// Cuts tensors of `counts` elements into chunks of kTensorChunk.
std::vector<Chunk> chunkTable(const std::vector<int64_t> &counts) {
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < counts.size(); ++t)
    for (int64_t begin = 0; begin < counts[t]; begin += kTensorChunk)
      chunks.push_back({static_cast<int64_t>(t), begin,
                        std::min(counts[t], begin + kTensorChunk)});
  return chunks;
}

/// Uploads `tensors` and the chunk table into one scratch allocation, with
/// `extra` more bytes after them; returns their device copies.
template <typename Tensor> struct Uploaded {
  Tensor *tensors;
  Chunk *chunks;
  void *extra;
};
/// The tensor and chunk tables on the device, resident in the context
/// (the same tables come back every step), and `extra` bytes of scratch.
template <typename Tensor>
absl::StatusOr<Uploaded<Tensor>>
upload(CudaContext &context, const std::vector<Tensor> &tensors,
       const std::vector<Chunk> &chunks, size_t extra) {
  size_t tensorBytes = alignScratch(tensors.size() * sizeof(Tensor));
  size_t chunkBytes = chunks.size() * sizeof(Chunk);
  std::vector<char> table(tensorBytes + chunkBytes, 0);
  std::memcpy(table.data(), tensors.data(), tensors.size() * sizeof(Tensor));
  std::memcpy(table.data() + tensorBytes, chunks.data(), chunkBytes);
  absl::StatusOr<const void *> resident =
      context.resident(table.data(), table.size());
  if (!resident.ok())
    return resident.status();
  void *scratch = nullptr;
  if (extra > 0) {
    absl::StatusOr<void *> got = context.scratch(extra);
    if (!got.ok())
      return got.status();
    scratch = *got;
  }
  auto *base = static_cast<char *>(const_cast<void *>(*resident));
  return Uploaded<Tensor>{reinterpret_cast<Tensor *>(base),
                          reinterpret_cast<Chunk *>(base + tensorBytes),
                          scratch};
}

/// activationKernel over `count` elements (In and Out: F32In and F32Out,
/// or TypedIn and TypedOut).
template <typename In, typename Out>
absl::Status elementwise(CudaContext &context, Activation kind, In x, In bias,
                         In other, Out out, int64_t count, int64_t width,
                         bool derivative) {
  if (count == 0)
    return absl::OkStatus();
  activationKernel<In, Out>
      <<<unrolledBlocks(count), kThreads, 0, context.stream()>>>(
          kind, x, bias, other, out, count, width, derivative,
          narrowIndices(count, width));
  TRIAD_CUDA_CHECK_LAUNCH("activationKernel");
  return absl::OkStatus();
}

/// No operand (activationKernel's bias and other).
constexpr Operand kAbsent{nullptr, DType::F32};

/// normKernel, the row held (K > 0) or read each pass (K == 0).
template <int K, typename In, typename Out>
absl::Status launchNorm(CudaContext &context, In x, In gamma, In beta, Out y,
                        int64_t rows, int64_t width, float epsilon,
                        bool center) {
  normKernel<K, In, Out>
      <<<static_cast<unsigned>(rows), normThreads(width), 0,
         context.stream()>>>(x, gamma, beta, y, width, epsilon, center);
  TRIAD_CUDA_CHECK_LAUNCH("normKernel");
  return absl::OkStatus();
}

template <typename In, typename Out>
absl::Status norm(CudaContext &context, In x, In gamma, In beta, Out y,
                  int64_t rows, int64_t width, float epsilon, bool center) {
  if (rows == 0 || width == 0)
    return absl::OkStatus();
  if (absl::Status s = checkGrid(rows, "a norm"); !s.ok())
    return s;
  if (width <= kNormHeld)
    return launchNorm<kNormHeldPerThread>(context, x, gamma, beta, y, rows,
                                          width, epsilon, center);
  return launchNorm<0>(context, x, gamma, beta, y, rows, width, epsilon,
                       center);
}

template <typename In, typename Out>
absl::Status normGrad(CudaContext &context, In x, In gamma, In dy, Out dx,
                      Out dgamma, int64_t rows, int64_t width, float epsilon,
                      bool center) {
  if (rows == 0 || width == 0)
    return absl::OkStatus();
  if (absl::Status s = checkGrid(rows, "a norm gradient"); !s.ok())
    return s;
  int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  size_t statsBytes = alignScratch(sizeof(double) * 2 * rows);
  absl::StatusOr<void *> scratch =
      context.scratch(statsBytes + sizeof(double) * chunks * width);
  if (!scratch.ok())
    return scratch.status();
  double *stats = static_cast<double *>(*scratch);
  double *partial =
      reinterpret_cast<double *>(static_cast<char *>(*scratch) + statsBytes);
  if (width <= kNormHeld)
    normGradKernel<kNormHeldPerThread, In, Out>
        <<<static_cast<unsigned>(rows), normThreads(width), 0,
           context.stream()>>>(x, gamma, dy, dx, stats, width, epsilon, center);
  else
    normGradKernel<0, In, Out>
        <<<static_cast<unsigned>(rows), normThreads(width), 0,
           context.stream()>>>(x, gamma, dy, dx, stats, width, epsilon, center);
  TRIAD_CUDA_CHECK_LAUNCH("normGradKernel");
  normGammaChunkKernel<In>
      <<<columnChunkGrid(width, chunks), kChunkBlock, 0, context.stream()>>>(
          x, dy, stats, partial, rows, width, chunks);
  TRIAD_CUDA_CHECK_LAUNCH("normGammaChunkKernel");
  addPartialsKernel<Out>
      <<<elementBlocks(width), kThreads, 0, context.stream()>>>(
          partial, dgamma, chunks, width, /*accumulate=*/true);
  TRIAD_CUDA_CHECK_LAUNCH("addPartialsKernel");
  return absl::OkStatus();
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// Returns after launching `kernel` over `count` elements on `blocks(count)`
/// blocks (none for none).
#define TRIAD_LAUNCH_OVER(stream, blocks, kernel, count, ...)                  \
  do {                                                                         \
    if ((count) == 0)                                                          \
      return absl::OkStatus();                                                 \
    kernel<<<blocks(count), kThreads, 0, stream>>>(__VA_ARGS__);               \
    TRIAD_CUDA_CHECK_LAUNCH(#kernel);                                          \
    return absl::OkStatus();                                                   \
  } while (false)

/// A grid-stride kernel, one element a thread a pass.
#define TRIAD_LAUNCH_ELEMENTWISE_ON(stream, kernel, count, ...)                \
  TRIAD_LAUNCH_OVER(stream, elementBlocks, kernel, count, __VA_ARGS__)

#define TRIAD_LAUNCH_ELEMENTWISE(kernel, count, ...)                           \
  TRIAD_LAUNCH_ELEMENTWISE_ON(context.stream(), kernel, count, __VA_ARGS__)

/// A kernel over elements through forEachElement.
#define TRIAD_LAUNCH_UNROLLED_ON(stream, kernel, count, ...)                   \
  TRIAD_LAUNCH_OVER(stream, unrolledBlocks, kernel, count, __VA_ARGS__)

#define TRIAD_LAUNCH_UNROLLED(kernel, count, ...)                              \
  TRIAD_LAUNCH_UNROLLED_ON(context.stream(), kernel, count, __VA_ARGS__)

absl::Status addBroadcast(CudaContext &context, const float *lhs,
                          const float *rhs, float *out, int64_t count,
                          int64_t period) {
  if (period <= 0)
    return absl::InvalidArgumentError("addBroadcast: the period must be > 0");
  TRIAD_LAUNCH_UNROLLED((addBroadcastKernel<F32In, F32Out>), count, F32In{lhs},
                        F32In{rhs}, F32Out{out}, count, period,
                        narrowIndices(count, period));
}

absl::Status mul(CudaContext &context, const float *a, const float *b,
                 float *out, int64_t count) {
  TRIAD_LAUNCH_UNROLLED((mulKernel<F32In, F32Out>), count, F32In{a}, F32In{b},
                        F32Out{out}, count);
}

absl::Status scale(CudaContext &context, const float *x, float factor,
                   float *out, int64_t count) {
  TRIAD_LAUNCH_UNROLLED((scaleKernel<F32In, F32Out>), count, F32In{x}, factor,
                        F32Out{out}, count);
}

absl::Status scaleBy(CudaContext &context, const float *x, const float *factor,
                     float *out, int64_t count) {
  TRIAD_LAUNCH_UNROLLED((scaleByKernel<F32In, F32Out>), count, F32In{x}, factor,
                        F32Out{out}, count);
}

absl::Status accumulate(CudaContext &context, float *acc, const float *x,
                        const float *weight, int64_t count) {
  TRIAD_LAUNCH_UNROLLED((accumulateKernel<F32In, F32Out>), count, F32Out{acc},
                        F32In{x}, weight, count);
}

absl::Status fill(CudaContext &context, float *out, float value,
                  int64_t count) {
  TRIAD_LAUNCH_UNROLLED(fillKernel<F32Out>, count, F32Out{out}, value, count);
}

absl::Status initValues(CudaContext &context, float *out,
                        const InitPiece &piece, bool normal, float fill,
                        uint32_t key0, uint32_t key1, double stddev) {
  if (piece.dims < 0 || piece.dims > kInitDims)
    return absl::InvalidArgumentError(
        "initValues: a piece of more than 8 dimensions");
  int64_t count = 1;
  for (int d = 0; d < piece.dims; ++d) {
    if (piece.local[d] < 0)
      return absl::InvalidArgumentError("initValues: a negative size");
    count *= piece.local[d];
  }
  TRIAD_LAUNCH_ELEMENTWISE(initValuesKernel, count, out, count, piece, normal,
                           fill, key0, key1, stddev);
}

absl::Status cast(CudaContext &context, const void *x, DType from, void *out,
                  DType to, int64_t count) {
  return cast(context.stream(), x, from, out, to, count);
}

absl::Status cast(cudaStream_t stream, const void *x, DType from, void *out,
                  DType to, int64_t count) {
  const auto *f32In = static_cast<const float *>(x);
  auto *f32Out = static_cast<float *>(out);
  if (from == DType::F32 && to == DType::F32)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<float, float>), count, f32In,
                             f32Out, count);
  if (from == DType::F32 && to == DType::BF16)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<float, __nv_bfloat16>), count,
                             f32In, static_cast<__nv_bfloat16 *>(out), count);
  if (from == DType::F32 && to == DType::F16)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<float, __half>), count, f32In,
                             static_cast<__half *>(out), count);
  if (from == DType::BF16 && to == DType::F32)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<__nv_bfloat16, float>), count,
                             static_cast<const __nv_bfloat16 *>(x), f32Out,
                             count);
  if (from == DType::F16 && to == DType::F32)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<__half, float>), count,
                             static_cast<const __half *>(x), f32Out, count);
  if (from == DType::F32 && to == DType::I32)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<float, int32_t>), count, f32In,
                             static_cast<int32_t *>(out), count);
  if (from == DType::I32 && to == DType::F32)
    TRIAD_LAUNCH_UNROLLED_ON(stream, (castKernel<int32_t, float>), count,
                             static_cast<const int32_t *>(x), f32Out, count);
  return absl::UnimplementedError(
      "cast: only f32 to and from bf16, f16 and i32 (and f32 to f32)");
}

absl::Status activation(CudaContext &context, Activation kind, const float *x,
                        float *out, int64_t count) {
  return elementwise(context, kind, F32In{x}, F32In{nullptr}, F32In{nullptr},
                     F32Out{out}, count, 1, false);
}

absl::Status activationGrad(CudaContext &context, Activation kind,
                            const float *x, const float *dy, float *dx,
                            int64_t count) {
  return elementwise(context, kind, F32In{x}, F32In{nullptr}, F32In{dy},
                     F32Out{dx}, count, 1, true);
}

absl::Status gated(CudaContext &context, Activation kind, const float *gate,
                   const float *up, float *out, int64_t count) {
  return elementwise(context, kind, F32In{gate}, F32In{nullptr}, F32In{up},
                     F32Out{out}, count, 1, false);
}

absl::Status gatedGrad(CudaContext &context, Activation kind, const float *gate,
                       const float *up, const float *dy, float *dgate,
                       float *dup, int64_t count) {
  TRIAD_LAUNCH_UNROLLED((gatedGradKernel<F32In, F32Out>), count, kind,
                        F32In{gate}, F32In{up}, F32In{dy}, F32Out{dgate},
                        F32Out{dup}, count);
}

absl::Status biasActivation(CudaContext &context, Activation kind,
                            const float *x, const float *bias, float *out,
                            int64_t rows, int64_t width) {
  return elementwise(context, kind, F32In{x}, F32In{bias}, F32In{nullptr},
                     F32Out{out}, rows * width, width, false);
}

absl::Status biasActivationGrad(CudaContext &context, Activation kind,
                                const float *x, const float *bias,
                                const float *dy, float *dx, float *dbias,
                                int64_t rows, int64_t width) {
  if (width == 0)
    return absl::OkStatus();
  if (absl::Status s =
          elementwise(context, kind, F32In{x}, F32In{bias}, F32In{dy},
                      F32Out{dx}, rows * width, width, true);
      !s.ok())
    return s;
  int64_t chunks = std::max<int64_t>(1, (rows + kRowChunk - 1) / kRowChunk);
  absl::StatusOr<void *> scratch =
      context.scratch(sizeof(double) * chunks * width);
  if (!scratch.ok())
    return scratch.status();
  auto *partial = static_cast<double *>(*scratch);
  columnChunkSumKernel<<<columnChunkGrid(width, chunks), kChunkBlock, 0,
                         context.stream()>>>(dx, partial, rows, width, chunks);
  TRIAD_CUDA_CHECK_LAUNCH("columnChunkSumKernel");
  addPartialsKernel<F32Out>
      <<<elementBlocks(width), kThreads, 0, context.stream()>>>(
          partial, F32Out{dbias}, chunks, width, /*accumulate=*/false);
  TRIAD_CUDA_CHECK_LAUNCH("addPartialsKernel");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Elementwise, each operand in its own type
//===----------------------------------------------------------------------===//

absl::Status addBroadcast(CudaContext &context, Operand lhs, Operand rhs,
                          Result out, int64_t count, int64_t period) {
  if (period <= 0)
    return absl::InvalidArgumentError("addBroadcast: the period must be > 0");
  if (absl::Status s =
          checkFloatTypes("addBroadcast", {lhs.type, rhs.type, out.type});
      !s.ok())
    return s;
  return withAccess({lhs.type, rhs.type, out.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED((addBroadcastKernel<typename A::In, typename A::Out>),
                          count, A::in(lhs), A::in(rhs), A::out(out), count,
                          period, narrowIndices(count, period));
  });
}

absl::Status mul(CudaContext &context, Operand a, Operand b, Result out,
                 int64_t count) {
  if (absl::Status s = checkFloatTypes("mul", {a.type, b.type, out.type});
      !s.ok())
    return s;
  return withAccess({a.type, b.type, out.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED((mulKernel<typename A::In, typename A::Out>), count,
                          A::in(a), A::in(b), A::out(out), count);
  });
}

absl::Status scale(CudaContext &context, Operand x, float factor, Result out,
                   int64_t count) {
  if (absl::Status s = checkFloatTypes("scale", {x.type, out.type}); !s.ok())
    return s;
  return withAccess({x.type, out.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED((scaleKernel<typename A::In, typename A::Out>), count,
                          A::in(x), factor, A::out(out), count);
  });
}

/// activationKernel on typed operands (absent ones kAbsent).
absl::Status typedElementwise(CudaContext &context, Activation kind, Operand x,
                              Operand bias, Operand other, Result out,
                              int64_t count, int64_t width, bool derivative) {
  return withAccess(
      {x.type, bias.type, other.type, out.type}, [&](auto access) {
        using A = decltype(access);
        return elementwise(context, kind, A::in(x), A::in(bias), A::in(other),
                           A::out(out), count, width, derivative);
      });
}

absl::Status activation(CudaContext &context, Activation kind, Operand x,
                        Result out, int64_t count) {
  if (absl::Status s = checkFloatTypes("activation", {x.type, out.type});
      !s.ok())
    return s;
  return typedElementwise(context, kind, x, kAbsent, kAbsent, out, count, 1,
                          false);
}

absl::Status activationGrad(CudaContext &context, Activation kind, Operand x,
                            Operand dy, Result dx, int64_t count) {
  if (absl::Status s =
          checkFloatTypes("activationGrad", {x.type, dy.type, dx.type});
      !s.ok())
    return s;
  return typedElementwise(context, kind, x, kAbsent, dy, dx, count, 1, true);
}

absl::Status gated(CudaContext &context, Activation kind, Operand gate,
                   Operand up, Result out, int64_t count) {
  if (absl::Status s = checkFloatTypes("gated", {gate.type, up.type, out.type});
      !s.ok())
    return s;
  return typedElementwise(context, kind, gate, kAbsent, up, out, count, 1,
                          false);
}

absl::Status gatedGrad(CudaContext &context, Activation kind, Operand gate,
                       Operand up, Operand dy, Result dgate, Result dup,
                       int64_t count) {
  if (absl::Status s = checkFloatTypes(
          "gatedGrad", {gate.type, up.type, dy.type, dgate.type, dup.type});
      !s.ok())
    return s;
  return withAccess({gate.type, up.type, dy.type, dgate.type, dup.type},
                    [&](auto access) {
                      using A = decltype(access);
                      TRIAD_LAUNCH_UNROLLED(
                          (gatedGradKernel<typename A::In, typename A::Out>),
                          count, kind, A::in(gate), A::in(up), A::in(dy),
                          A::out(dgate), A::out(dup), count);
                    });
}

absl::Status biasActivation(CudaContext &context, Activation kind, Operand x,
                            Operand bias, Result out, int64_t rows,
                            int64_t width) {
  if (absl::Status s =
          checkFloatTypes("biasActivation", {x.type, bias.type, out.type});
      !s.ok())
    return s;
  return typedElementwise(context, kind, x, bias, kAbsent, out, rows * width,
                          width, false);
}

absl::Status scaleBy(CudaContext &context, Operand x, const float *factor,
                     Result out, int64_t count) {
  if (absl::Status s = checkFloatTypes("scaleBy", {x.type, out.type}); !s.ok())
    return s;
  return withAccess({x.type, out.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED((scaleByKernel<typename A::In, typename A::Out>),
                          count, A::in(x), factor, A::out(out), count);
  });
}

absl::Status accumulate(CudaContext &context, Result acc, Operand x,
                        const float *weight, int64_t count) {
  if (absl::Status s = checkFloatTypes("accumulate", {acc.type, x.type});
      !s.ok())
    return s;
  return withAccess({acc.type, x.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED((accumulateKernel<typename A::In, typename A::Out>),
                          count, A::out(acc), A::in(x), weight, count);
  });
}

absl::Status fill(CudaContext &context, Result out, float value,
                  int64_t count) {
  if (absl::Status s = checkFloatTypes("fill", {out.type}); !s.ok())
    return s;
  return withAccess({out.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED(fillKernel<typename A::Out>, count, A::out(out),
                          value, count);
  });
}

absl::Status select(CudaContext &context, const float *flag, Operand a,
                    Operand b, Result out, int64_t count) {
  if (absl::Status s = checkFloatTypes("select", {a.type, b.type, out.type});
      !s.ok())
    return s;
  return withAccess({a.type, b.type, out.type}, [&](auto access) {
    using A = decltype(access);
    TRIAD_LAUNCH_UNROLLED((selectKernel<typename A::In, typename A::Out>),
                          count, flag, A::in(a), A::in(b), A::out(out), count);
  });
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

absl::Status layerNorm(CudaContext &context, const float *x, const float *gamma,
                       const float *beta, float *y, int64_t rows, int64_t width,
                       float epsilon) {
  return norm(context, F32In{x}, F32In{gamma}, F32In{beta}, F32Out{y}, rows,
              width, epsilon, true);
}

absl::Status layerNormGrad(CudaContext &context, const float *x,
                           const float *gamma, const float *dy, float *dx,
                           float *dgamma, int64_t rows, int64_t width,
                           float epsilon) {
  return normGrad(context, F32In{x}, F32In{gamma}, F32In{dy}, F32Out{dx},
                  F32Out{dgamma}, rows, width, epsilon, true);
}

absl::Status rmsNorm(CudaContext &context, const float *x, const float *gamma,
                     float *y, int64_t rows, int64_t width, float epsilon) {
  return norm(context, F32In{x}, F32In{gamma}, F32In{nullptr}, F32Out{y}, rows,
              width, epsilon, false);
}

absl::Status rmsNormGrad(CudaContext &context, const float *x,
                         const float *gamma, const float *dy, float *dx,
                         float *dgamma, int64_t rows, int64_t width,
                         float epsilon) {
  return normGrad(context, F32In{x}, F32In{gamma}, F32In{dy}, F32Out{dx},
                  F32Out{dgamma}, rows, width, epsilon, false);
}

absl::Status layerNorm(CudaContext &context, Operand x, Operand gamma,
                       Operand beta, Result y, int64_t rows, int64_t width,
                       float epsilon) {
  std::initializer_list<DType> types = {x.type, gamma.type, beta.type, y.type};
  if (absl::Status s = checkFloatTypes("layerNorm", types); !s.ok())
    return s;
  return withAccess(types, [&](auto access) {
    using A = decltype(access);
    return norm(context, A::in(x), A::in(gamma), A::in(beta), A::out(y), rows,
                width, epsilon, true);
  });
}

namespace {
/// The gradient of a layer norm (`centered`) or RMS norm, typed.
absl::Status typedNormGrad(const char *name, CudaContext &context, Operand x,
                           Operand gamma, Operand dy, Result dx, Result dgamma,
                           int64_t rows, int64_t width, float epsilon,
                           bool centered) {
  std::initializer_list<DType> types = {x.type, gamma.type, dy.type, dx.type,
                                        dgamma.type};
  if (absl::Status s = checkFloatTypes(name, types); !s.ok())
    return s;
  return withAccess(types, [&](auto access) {
    using A = decltype(access);
    return normGrad(context, A::in(x), A::in(gamma), A::in(dy), A::out(dx),
                    A::out(dgamma), rows, width, epsilon, centered);
  });
}
} // namespace

absl::Status layerNormGrad(CudaContext &context, Operand x, Operand gamma,
                           Operand dy, Result dx, Result dgamma, int64_t rows,
                           int64_t width, float epsilon) {
  return typedNormGrad("layerNormGrad", context, x, gamma, dy, dx, dgamma, rows,
                       width, epsilon, /*centered=*/true);
}

absl::Status rmsNorm(CudaContext &context, Operand x, Operand gamma, Result y,
                     int64_t rows, int64_t width, float epsilon) {
  std::initializer_list<DType> types = {x.type, gamma.type, y.type};
  if (absl::Status s = checkFloatTypes("rmsNorm", types); !s.ok())
    return s;
  return withAccess(types, [&](auto access) {
    using A = decltype(access);
    return norm(context, A::in(x), A::in(gamma), A::in(kAbsent), A::out(y),
                rows, width, epsilon, false);
  });
}

absl::Status rmsNormGrad(CudaContext &context, Operand x, Operand gamma,
                         Operand dy, Result dx, Result dgamma, int64_t rows,
                         int64_t width, float epsilon) {
  return typedNormGrad("rmsNormGrad", context, x, gamma, dy, dx, dgamma, rows,
                       width, epsilon, /*centered=*/false);
}

//===----------------------------------------------------------------------===//
// Embeddings and the loss
//===----------------------------------------------------------------------===//

namespace {

__global__ void checkPrefixLengthsKernel(const int32_t *lengths, int64_t batch,
                                         int64_t keySeq, uint32_t *flags) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       b < batch; b += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (lengths[b] < 0 || lengths[b] > keySeq)
      atomicOr(flags, kBadPrefixLength);
}

template <typename In, typename Out>
absl::Status launchEmbedding(CudaContext &context, const int32_t *ids, In table,
                             Out out, int64_t tokens, int64_t rows,
                             int64_t hidden, int64_t firstRow, int64_t vocab) {
  if (tokens == 0)
    return absl::OkStatus();
  if (absl::Status s = checkGrid(tokens, "an embedding"); !s.ok())
    return s;
  embeddingKernel<In, Out>
      <<<static_cast<unsigned>(tokens), rowThreads(hidden), 0,
         context.stream()>>>(ids, table, out, rows, hidden, firstRow,
                             vocab < 0 ? rows : vocab, context.errorFlags());
  TRIAD_CUDA_CHECK_LAUNCH("embeddingKernel");
  return absl::OkStatus();
}

/// The key bits of the embedding gradient's sort: enough for rows 0..rows
/// (`rows` marks a token left out).
int embeddingGradSortBits(int64_t rows) {
  int bits = 1;
  while (bits < 32 && (uint64_t{1} << bits) <= static_cast<uint64_t>(rows))
    ++bits;
  return bits;
}

/// The scratch launchEmbeddingGrad needs: the keys and token indices,
/// unsorted and sorted, and CUB's sort (`sortBytes` of it).
struct EmbeddingGradScratch {
  size_t keyBytes = 0, sortBytes = 0;
  size_t total() const { return 4 * keyBytes + alignScratch(sortBytes); }
};
absl::StatusOr<EmbeddingGradScratch>
embeddingGradScratch(CudaContext &context, int64_t tokens, int64_t rows) {
  if (absl::Status s = checkGrid(tokens, "an embedding gradient"); !s.ok())
    return s;
  if (tokens > INT32_MAX || rows >= UINT32_MAX)
    return absl::InvalidArgumentError(
        "an embedding gradient has more tokens or rows than its sort takes");
  EmbeddingGradScratch need;
  need.keyBytes = alignScratch(sizeof(uint32_t) * std::max<int64_t>(tokens, 1));
  TRIAD_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      nullptr, need.sortBytes, static_cast<const uint32_t *>(nullptr),
      static_cast<uint32_t *>(nullptr), static_cast<const int32_t *>(nullptr),
      static_cast<int32_t *>(nullptr), static_cast<int>(tokens), 0,
      embeddingGradSortBits(rows), context.stream()));
  return need;
}

/// dtable (f32) += dy's rows by id (embeddingGradAccumulate): the tokens'
/// rows as keys, sorted stably with CUB's radix sort (only the key bits a
/// row needs), then one block per run of a row. `scratch` holds `need`
/// (embeddingGradScratch), carved by the caller from its one scratch.
template <typename In>
absl::Status
launchEmbeddingGrad(CudaContext &context, const int32_t *ids, In dy,
                    float *dtable, int64_t tokens, int64_t rows, int64_t hidden,
                    int64_t firstRow, int64_t vocab,
                    const EmbeddingGradScratch &need, void *scratch) {
  if (tokens == 0)
    return absl::OkStatus();
  char *base = static_cast<char *>(scratch);
  size_t keyBytes = need.keyBytes, sortBytes = need.sortBytes;
  auto *keys = reinterpret_cast<uint32_t *>(base);
  auto *sortedKeys = reinterpret_cast<uint32_t *>(base + keyBytes);
  auto *order = reinterpret_cast<int32_t *>(base + 2 * keyBytes);
  auto *sortedOrder = reinterpret_cast<int32_t *>(base + 3 * keyBytes);
  void *sortScratch = base + 4 * keyBytes;
  // The keys kernel checks the ids (as the CPU does, rows of no width
  // included).
  embeddingGradKeysKernel<<<elementBlocks(tokens), kThreads, 0,
                            context.stream()>>>(ids, tokens, rows, firstRow,
                                                vocab < 0 ? rows : vocab, keys,
                                                order, context.errorFlags());
  TRIAD_CUDA_CHECK_LAUNCH("embeddingGradKeysKernel");
  if (hidden == 0)
    return absl::OkStatus();
  TRIAD_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      sortScratch, sortBytes, keys, sortedKeys, order, sortedOrder,
      static_cast<int>(tokens), 0, embeddingGradSortBits(rows),
      context.stream()));
  // CUB's launches, counted as one.
  ++issueCounts().kernels;
  embeddingGradRowsKernel<In><<<static_cast<unsigned>(tokens),
                                rowThreads(hidden), 0, context.stream()>>>(
      sortedKeys, sortedOrder, dy, dtable, tokens, rows, hidden);
  TRIAD_CUDA_CHECK_LAUNCH("embeddingGradRowsKernel");
  return absl::OkStatus();
}

template <typename In>
absl::Status launchCrossEntropy(CudaContext &context, In logits,
                                const int32_t *labels, float *loss,
                                int64_t rows, int64_t vocab,
                                int32_t ignoreIndex, PieceColumns<In> columns) {
  if (absl::Status s = checkGrid(rows, "a cross entropy"); !s.ok())
    return s;
  size_t lossBytes = alignScratch(sizeof(double) * std::max<int64_t>(rows, 1));
  absl::StatusOr<void *> scratch =
      context.scratch(lossBytes + sizeof(int32_t) * std::max<int64_t>(rows, 1));
  if (!scratch.ok())
    return scratch.status();
  auto *rowLoss = static_cast<double *>(*scratch);
  auto *rowCounted =
      reinterpret_cast<int32_t *>(static_cast<char *>(*scratch) + lossBytes);
  if (rows > 0) {
    crossEntropyRowKernel<In>
        <<<static_cast<unsigned>(rows), rowThreads(columns.classes), 0,
           context.stream()>>>(logits, labels, vocab, columns, ignoreIndex,
                               rowLoss, rowCounted, context.errorFlags());
    TRIAD_CUDA_CHECK_LAUNCH("crossEntropyRowKernel");
  }
  crossEntropyMeanKernel<<<1, kThreads, 0, context.stream()>>>(
      rowLoss, rowCounted, rows, loss);
  TRIAD_CUDA_CHECK_LAUNCH("crossEntropyMeanKernel");
  return absl::OkStatus();
}

template <typename In, typename Out>
absl::Status launchCrossEntropyGrad(CudaContext &context, In logits,
                                    const int32_t *labels, const float *dloss,
                                    Out dlogits, int64_t rows, int64_t vocab,
                                    int32_t ignoreIndex,
                                    PieceColumns<In> columns) {
  if (rows == 0)
    return absl::OkStatus();
  if (absl::Status s = checkGrid(rows, "a cross entropy gradient"); !s.ok())
    return s;
  absl::StatusOr<void *> scratch = context.scratch(sizeof(float));
  if (!scratch.ok())
    return scratch.status();
  auto *counted = static_cast<float *>(*scratch);
  countValidKernel<<<1, kThreads, 0, context.stream()>>>(labels, rows,
                                                         ignoreIndex, counted);
  TRIAD_CUDA_CHECK_LAUNCH("countValidKernel");
  crossEntropyGradKernel<In, Out>
      <<<static_cast<unsigned>(rows), rowThreads(vocab), 0, context.stream()>>>(
          logits, labels, dloss, counted, dlogits, vocab, columns, ignoreIndex,
          context.errorFlags());
  TRIAD_CUDA_CHECK_LAUNCH("crossEntropyGradKernel");
  return absl::OkStatus();
}

template <typename In, typename Out>
absl::Status launchLogSumExp(CudaContext &context, In x, Out out, int64_t rows,
                             int64_t columns, int64_t classes) {
  if (classes < 0 || classes > columns)
    return absl::InvalidArgumentError(
        "logSumExp: the classes must be among the row's columns");
  if (rows == 0)
    return absl::OkStatus();
  if (absl::Status s = checkGrid(rows, "a log-sum-exp"); !s.ok())
    return s;
  logSumExpKernel<In, Out><<<static_cast<unsigned>(rows), rowThreads(classes),
                             0, context.stream()>>>(x, out, columns, classes);
  TRIAD_CUDA_CHECK_LAUNCH("logSumExpKernel");
  return absl::OkStatus();
}

} // namespace

absl::Status checkPrefixLengths(CudaContext &context, const int32_t *lengths,
                                int64_t batch, int64_t keySeq) {
  if (batch <= 0)
    return absl::OkStatus();
  checkPrefixLengthsKernel<<<elementBlocks(batch), kThreads, 0,
                             context.stream()>>>(lengths, batch, keySeq,
                                                 context.errorFlags());
  TRIAD_CUDA_CHECK_LAUNCH("checkPrefixLengthsKernel");
  return absl::OkStatus();
}

absl::Status embedding(CudaContext &context, const int32_t *ids,
                       const float *table, float *out, int64_t tokens,
                       int64_t rows, int64_t hidden, int64_t firstRow,
                       int64_t vocab) {
  return launchEmbedding(context, ids, F32In{table}, F32Out{out}, tokens, rows,
                         hidden, firstRow, vocab);
}

absl::Status embeddingGradAccumulate(CudaContext &context, const int32_t *ids,
                                     const float *dy, float *dtable,
                                     int64_t tokens, int64_t rows,
                                     int64_t hidden, int64_t firstRow,
                                     int64_t vocab) {
  absl::StatusOr<EmbeddingGradScratch> need =
      embeddingGradScratch(context, tokens, rows);
  if (!need.ok())
    return need.status();
  absl::StatusOr<void *> scratch = context.scratch(need->total());
  if (!scratch.ok())
    return scratch.status();
  return launchEmbeddingGrad(context, ids, F32In{dy}, dtable, tokens, rows,
                             hidden, firstRow, vocab, *need, *scratch);
}

absl::Status embedding(CudaContext &context, const int32_t *ids, Operand table,
                       Result out, int64_t tokens, int64_t rows, int64_t hidden,
                       int64_t firstRow, int64_t vocab) {
  if (absl::Status s = checkFloatTypes("embedding", {table.type, out.type});
      !s.ok())
    return s;
  return withAccess({table.type, out.type}, [&](auto access) {
    using A = decltype(access);
    return launchEmbedding(context, ids, A::in(table), A::out(out), tokens,
                           rows, hidden, firstRow, vocab);
  });
}

absl::Status embeddingGrad(CudaContext &context, const int32_t *ids, Operand dy,
                           Result dtable, int64_t tokens, int64_t rows,
                           int64_t hidden, int64_t firstRow, int64_t vocab) {
  if (absl::Status s = checkFloatTypes("embeddingGrad", {dy.type, dtable.type});
      !s.ok())
    return s;
  int64_t count = rows * hidden;
  // The rows sum in f32 where they are kept: dtable itself, or scratch
  // that is rounded into a 16-bit dtable once every token is added. One
  // scratch holds those sums and the sort's.
  absl::StatusOr<EmbeddingGradScratch> need =
      embeddingGradScratch(context, tokens, rows);
  if (!need.ok())
    return need.status();
  size_t sumBytes =
      dtable.type == DType::F32
          ? 0
          : alignScratch(sizeof(float) * std::max<int64_t>(count, 1));
  absl::StatusOr<void *> scratch = context.scratch(sumBytes + need->total());
  if (!scratch.ok())
    return scratch.status();
  float *sums = dtable.type == DType::F32 ? static_cast<float *>(dtable.data)
                                          : static_cast<float *>(*scratch);
  if (absl::Status s = fill(context, sums, 0.0f, count); !s.ok())
    return s;
  absl::Status summed = withAccess({dy.type}, [&](auto access) {
    using A = decltype(access);
    return launchEmbeddingGrad(context, ids, A::in(dy), sums, tokens, rows,
                               hidden, firstRow, vocab, *need,
                               static_cast<char *>(*scratch) + sumBytes);
  });
  if (!summed.ok() || dtable.type == DType::F32)
    return summed;
  return cast(context, sums, DType::F32, dtable.data, dtable.type, count);
}

absl::Status crossEntropy(CudaContext &context, const float *logits,
                          const int32_t *labels, float *loss, int64_t rows,
                          int64_t vocab, int32_t ignoreIndex,
                          const VocabPiece *piece) {
  return launchCrossEntropy(context, F32In{logits}, labels, loss, rows, vocab,
                            ignoreIndex, pieceColumns(vocab, piece));
}

absl::Status crossEntropyGrad(CudaContext &context, const float *logits,
                              const int32_t *labels, const float *dloss,
                              float *dlogits, int64_t rows, int64_t vocab,
                              int32_t ignoreIndex, const VocabPiece *piece) {
  return launchCrossEntropyGrad(context, F32In{logits}, labels, dloss,
                                F32Out{dlogits}, rows, vocab, ignoreIndex,
                                pieceColumns(vocab, piece));
}

absl::Status logSumExp(CudaContext &context, const float *x, float *out,
                       int64_t rows, int64_t columns, int64_t classes) {
  return launchLogSumExp(context, F32In{x}, F32Out{out}, rows, columns,
                         classes);
}

absl::Status crossEntropy(CudaContext &context, Operand logits,
                          const int32_t *labels, float *loss, int64_t rows,
                          int64_t vocab, int32_t ignoreIndex,
                          const TypedVocabPiece *piece) {
  DType lse = piece ? piece->lse.type : DType::F32;
  if (absl::Status s = checkFloatTypes("crossEntropy", {logits.type, lse});
      !s.ok())
    return s;
  return withAccess({logits.type, lse}, [&](auto access) {
    using A = decltype(access);
    return launchCrossEntropy(context, A::in(logits), labels, loss, rows, vocab,
                              ignoreIndex, pieceColumns<A>(vocab, piece));
  });
}

absl::Status crossEntropyGrad(CudaContext &context, Operand logits,
                              const int32_t *labels, const float *dloss,
                              Result dlogits, int64_t rows, int64_t vocab,
                              int32_t ignoreIndex,
                              const TypedVocabPiece *piece) {
  DType lse = piece ? piece->lse.type : DType::F32;
  std::initializer_list<DType> types = {logits.type, lse, dlogits.type};
  if (absl::Status s = checkFloatTypes("crossEntropyGrad", types); !s.ok())
    return s;
  return withAccess(types, [&](auto access) {
    using A = decltype(access);
    return launchCrossEntropyGrad(context, A::in(logits), labels, dloss,
                                  A::out(dlogits), rows, vocab, ignoreIndex,
                                  pieceColumns<A>(vocab, piece));
  });
}

absl::Status logSumExp(CudaContext &context, Operand x, Result out,
                       int64_t rows, int64_t columns, int64_t classes) {
  if (absl::Status s = checkFloatTypes("logSumExp", {x.type, out.type});
      !s.ok())
    return s;
  return withAccess({x.type, out.type}, [&](auto access) {
    using A = decltype(access);
    return launchLogSumExp(context, A::in(x), A::out(out), rows, columns,
                           classes);
  });
}

absl::Status countValid(CudaContext &context, const int32_t *labels,
                        int64_t count, int32_t ignoreIndex, float *out) {
  countValidKernel<<<1, kThreads, 0, context.stream()>>>(labels, count,
                                                         ignoreIndex, out);
  TRIAD_CUDA_CHECK_LAUNCH("countValidKernel");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Gradient norm and optimizer
//===----------------------------------------------------------------------===//

absl::Status sumSquares(CudaContext &context,
                        const std::vector<ConstSpan> &spans, float *out,
                        double limit) {
  std::vector<int64_t> counts;
  std::vector<SquaresEntry> entries;
  for (const ConstSpan &span : spans) {
    if (absl::Status s = checkFloatTypes("sumSquares", {span.type}); !s.ok())
      return s;
    counts.push_back(span.count);
    entries.push_back({span.data, static_cast<int64_t>(span.type)});
  }
  std::vector<Chunk> chunks = chunkTable(counts);
  if (chunks.size() > 0x7fffffffu)
    return absl::InvalidArgumentError("sumSquares: too many elements");
  absl::StatusOr<Uploaded<SquaresEntry>> device =
      upload(context, entries, chunks,
             sizeof(double) * std::max<size_t>(1, chunks.size()));
  if (!device.ok())
    return device.status();
  auto *partial = static_cast<double *>(device->extra);
  if (!chunks.empty()) {
    sumSquaresChunkKernel<<<static_cast<unsigned>(chunks.size()), kThreads, 0,
                            context.stream()>>>(device->tensors, device->chunks,
                                                limit, partial);
    TRIAD_CUDA_CHECK_LAUNCH("sumSquaresChunkKernel");
  }
  sumPartialsKernel<<<1, kThreads, 0, context.stream()>>>(
      partial, static_cast<int64_t>(chunks.size()), out);
  TRIAD_CUDA_CHECK_LAUNCH("sumPartialsKernel");
  return absl::OkStatus();
}

absl::Status adamw(CudaContext &context,
                   const std::vector<AdamWTensor> &tensors, const float *lr,
                   const float *step, const float *coefficient,
                   const AdamWHyper &hyper, const float *skip) {
  std::vector<int64_t> counts;
  std::vector<AdamWEntry> entries;
  for (const AdamWTensor &tensor : tensors) {
    if (absl::Status s = checkFloatTypes("adamw", {tensor.grad.type}); !s.ok())
      return s;
    if (tensor.rounded.data && tensor.rounded.type != DType::BF16 &&
        tensor.rounded.type != DType::F16)
      return absl::InvalidArgumentError(
          std::string("adamw: the rounded parameter is ") +
          dtypeName(tensor.rounded.type) + ", not bf16 or f16");
    counts.push_back(tensor.count);
    entries.push_back({tensor.param, tensor.grad.data, tensor.m, tensor.v,
                       tensor.rounded.data,
                       static_cast<int64_t>(tensor.grad.type),
                       static_cast<int64_t>(tensor.rounded.type),
                       static_cast<double>(tensor.weightDecay)});
  }
  std::vector<Chunk> chunks = chunkTable(counts);
  if (chunks.empty())
    return absl::OkStatus();
  if (chunks.size() > 0x7fffffffu)
    return absl::InvalidArgumentError("adamw: too many elements");
  absl::StatusOr<Uploaded<AdamWEntry>> device =
      upload(context, entries, chunks, 0);
  if (!device.ok())
    return device.status();
  adamwKernel<<<static_cast<unsigned>(chunks.size()), kThreads, 0,
                context.stream()>>>(device->tensors, device->chunks, lr, step,
                                    coefficient, hyper, skip);
  TRIAD_CUDA_CHECK_LAUNCH("adamwKernel");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

absl::Status stridedCopy(CudaContext &context, const void *x, void *out,
                         const StridedCopy &copy) {
  return stridedCopy(context.stream(), x, out, copy);
}

absl::Status stridedCopy(cudaStream_t stream, const void *x, void *out,
                         const StridedCopy &copy) {
  if (copy.rank < 0 || copy.rank > kMaxRank)
    return absl::InvalidArgumentError(
        "stridedCopy: more dimensions than kMaxRank");
  if (copy.elementBytes != 2 && copy.elementBytes != 4)
    return absl::InvalidArgumentError(
        "stridedCopy: elements of 2 or 4 bytes, not " +
        std::to_string(copy.elementBytes));
  int64_t count = 1;
  for (int d = 0; d < copy.rank; ++d)
    count *= copy.shape[d];
  if (copy.elementBytes == 2)
    TRIAD_LAUNCH_ELEMENTWISE_ON(stream, stridedCopyKernel<uint16_t>, count,
                                static_cast<const uint16_t *>(x),
                                static_cast<uint16_t *>(out), copy, count);
  TRIAD_LAUNCH_ELEMENTWISE_ON(stream, stridedCopyKernel<uint32_t>, count,
                              static_cast<const uint32_t *>(x),
                              static_cast<uint32_t *>(out), copy, count);
}

namespace {

template <typename In, typename Out>
absl::Status
launchReduceSum(CudaContext &context, In x, const std::vector<int64_t> &xShape,
                Out out, const std::vector<int64_t> &outShape, double factor) {
  if (xShape.size() > static_cast<size_t>(kMaxRank) ||
      outShape.size() > xShape.size())
    return absl::InvalidArgumentError(
        "reduceSum: the result must have no more dimensions than x, and x "
        "at most kMaxRank");
  size_t lead = xShape.size() - outShape.size();
  std::vector<int64_t> strides(xShape.size(), 1);
  for (int64_t d = static_cast<int64_t>(xShape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * xShape[d + 1];
  SumLayout layout;
  int64_t count = 1;
  for (size_t d = 0; d < xShape.size(); ++d) {
    bool kept = d >= lead && outShape[d - lead] != 1;
    if (kept && outShape[d - lead] != xShape[d])
      return absl::InvalidArgumentError(
          "reduceSum: a kept dimension differs from x's");
    if (kept) {
      layout.keptSize[layout.kept] = xShape[d];
      layout.keptStride[layout.kept++] = strides[d];
      count *= xShape[d];
    } else {
      layout.summedSize[layout.summed] = xShape[d];
      layout.summedStride[layout.summed++] = strides[d];
      layout.summedCount *= xShape[d];
    }
  }
  if (count == 0)
    return absl::OkStatus();
  // A bias gradient sums [8192, 4096] into 4096 outputs: one thread per
  // output leaves the GPU idle (it was half of a GPT-2-medium step on an
  // H100), so the summed elements split into chunks until about 2^18
  // threads run, each chunk at least 32 elements long.
  constexpr int64_t kTargetThreads = int64_t{1} << 18, kMinChunkRows = 32;
  int64_t rows = layout.summedCount;
  int64_t chunks = std::max<int64_t>(
      1, std::min((kTargetThreads + count - 1) / count,
                  (rows + kMinChunkRows - 1) / kMinChunkRows));
  int64_t chunkRows = rows == 0 ? 1 : (rows + chunks - 1) / chunks;
  chunks = rows == 0 ? 1 : (rows + chunkRows - 1) / chunkRows;
  // Kept dimensions after every summed one: x is [rows, count].
  bool rowMajor = true;
  for (size_t d = 0, seenKept = 0; d < xShape.size(); ++d) {
    bool kept = d >= lead && outShape[d - lead] != 1;
    if (kept)
      seenKept = 1;
    else if (seenKept && xShape[d] != 1)
      rowMajor = false;
  }
  double *partial = nullptr;
  if (chunks > 1) {
    absl::StatusOr<void *> scratch =
        context.scratch(static_cast<size_t>(chunks * count) * sizeof(double));
    if (!scratch.ok())
      return scratch.status();
    partial = static_cast<double *>(*scratch);
  }
  reduceSumPartialKernel<In, Out>
      <<<elementBlocks(count * chunks), kThreads, 0, context.stream()>>>(
          x, partial, out, layout, count, chunks, chunkRows, rowMajor, factor);
  TRIAD_CUDA_CHECK_LAUNCH("reduceSumPartialKernel");
  if (chunks == 1)
    return absl::OkStatus();
  TRIAD_LAUNCH_ELEMENTWISE(addPartialsKernel<Out>, count, partial, out, chunks,
                           count, /*accumulate=*/false, factor);
}

} // namespace

absl::Status reduceSum(CudaContext &context, const float *x,
                       const std::vector<int64_t> &xShape, float *out,
                       const std::vector<int64_t> &outShape, double factor) {
  return launchReduceSum(context, F32In{x}, xShape, F32Out{out}, outShape,
                         factor);
}

absl::Status reduceSum(CudaContext &context, Operand x,
                       const std::vector<int64_t> &xShape, Result out,
                       const std::vector<int64_t> &outShape, double factor) {
  if (absl::Status s = checkFloatTypes("reduceSum", {x.type, out.type});
      !s.ok())
    return s;
  return withAccess({x.type, out.type}, [&](auto access) {
    using A = decltype(access);
    return launchReduceSum(context, A::in(x), xShape, A::out(out), outShape,
                           factor);
  });
}

//===----------------------------------------------------------------------===//
// Device scalars
//===----------------------------------------------------------------------===//

absl::Status select(CudaContext &context, const float *flag, const float *a,
                    const float *b, float *out, int64_t count) {
  TRIAD_LAUNCH_UNROLLED((selectKernel<F32In, F32Out>), count, flag, F32In{a},
                        F32In{b}, F32Out{out}, count);
}

absl::Status learningRate(CudaContext &context, const float *step, double peak,
                          double floor, int64_t warmup, int64_t decay,
                          float *out) {
  learningRateKernel<<<1, 1, 0, context.stream()>>>(step, peak, floor, warmup,
                                                    decay, out);
  TRIAD_CUDA_CHECK_LAUNCH("learningRateKernel");
  return absl::OkStatus();
}

absl::Status clipCoefficient(CudaContext &context, const float *sumSquares,
                             double maxNorm, float *coefficient, float *norm) {
  clipCoefficientKernel<<<1, 1, 0, context.stream()>>>(sumSquares, maxNorm,
                                                       coefficient, norm);
  TRIAD_CUDA_CHECK_LAUNCH("clipCoefficientKernel");
  return absl::OkStatus();
}

absl::Status lossScaleUpdate(CudaContext &context, const float *sumSquares,
                             const float *scale, const float *good,
                             double growth, double backoff, int64_t interval,
                             float *skip, float *nextScale, float *nextGood,
                             float *inverse) {
  lossScaleUpdateKernel<<<1, 1, 0, context.stream()>>>(
      sumSquares, scale, good, growth, backoff, interval, skip, nextScale,
      nextGood, inverse);
  TRIAD_CUDA_CHECK_LAUNCH("lossScaleUpdateKernel");
  return absl::OkStatus();
}

absl::Status reciprocal(CudaContext &context, const float *x, float *out) {
  reciprocalKernel<<<1, 1, 0, context.stream()>>>(x, out);
  TRIAD_CUDA_CHECK_LAUNCH("reciprocalKernel");
  return absl::OkStatus();
}

} // namespace triad::rt::cuda
