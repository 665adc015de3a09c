//===- CudaAttentionCommon.cuh - what the attention kernels share -*- C++
//-*-===//
//
// The parameters, masks and launch helper that the CUDA attention kernels
// share: the f32 kernels of CudaAttention.cu and the tensor-core kernels of
// CudaTensorCoreAttention.cu. Internal to those two files.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDAATTENTIONCOMMON_CUH
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDAATTENTIONCOMMON_CUH

#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cuda/CudaCheck.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include "absl/status/status.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace triad::rt::cuda::attention_detail {

using cpu::Mask;

/// Every attention kernel runs 4 warps a block.
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

/// What every attention kernel reads. (The tensor-core kernels take their
/// tensors from TensorCoreTensors and leave q, k and v alone.)
struct AttentionParams {
  const float *q, *k, *v;
  const int32_t *prefixLengths;
  const float *alibiSlopes;
  int64_t querySeq, keySeq;
  int heads, kvHeads, headDim;
  Mask mask;
  float scale;
  /// Tiles load 4 elements at a time: headDim is a multiple of 4 and the
  /// tensors (dout too, in the backward) are aligned to 4 elements (16
  /// bytes for f32, 8 for 16-bit tensors).
  bool vector;
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

__device__ inline Visibility visibility(const AttentionParams &p, int64_t b) {
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

/// Launches `kernel` with `sharedBytes` of dynamic shared memory (raising
/// the kernel's limit past the default 48 KiB where needed).
template <typename... Params, typename... Args>
absl::Status launch(CudaContext &context, void (*kernel)(Params...),
                    const char *name, dim3 grid, size_t sharedBytes,
                    Args... args) {
  int limit = 0;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             context.options().device));
  if (sharedBytes > static_cast<size_t>(limit))
    return absl::UnimplementedError(
        std::string(name) + " needs " + std::to_string(sharedBytes / 1024) +
        " KiB of shared memory a block for this head dimension; this GPU "
        "offers " +
        std::to_string(limit / 1024) + " KiB");
  if (sharedBytes > 48 * 1024)
    TRIAD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(sharedBytes)));
  kernel<<<grid, kThreads, sharedBytes, context.stream()>>>(args...);
  TRIAD_CUDA_CHECK_LAUNCH(name);
  return absl::OkStatus();
}

inline bool aligned16(const void *pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

inline unsigned tiles(int64_t count, int tile) {
  return static_cast<unsigned>((count + tile - 1) / tile);
}

//===----------------------------------------------------------------------===//
// The tensor-core kernels (CudaTensorCoreAttention.cu)
//===----------------------------------------------------------------------===//

/// Whether the tensor-core kernels take a shape whose products are in
/// `products`: BF16 or F16, and head dimensions that are multiples of 16
/// up to 128.
bool tensorCoresTake(const cpu::AttentionShape &shape, DType products);

/// The tensors of a tensor-core call, every one stored in `storage`: F32
/// (each tile rounded to the products' type as it loads, the results
/// written in f32) or the products' own 16-bit type (read as they are,
/// each result rounded once to it from the f32 value an f32 result would
/// hold: the same bits as widening the operands, running on f32 tensors
/// and rounding the results). Those a call does not use are null.
struct TensorCoreTensors {
  DType storage = DType::F32;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  void *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

/// The forward, or with `stats` the backward's row statistics (then `out`
/// is not written and dout . out goes to stats->delta), on tensor cores:
/// q, k and v are rounded to `products`, and so are the probabilities
/// before their product with v; every sum is in f32. Needs
/// tensorCoresTake; tensors stored in another type than f32 or `products`
/// are an InvalidArgument error.
absl::Status tensorCoreForward(CudaContext &context,
                               const AttentionParams &params, int64_t batch,
                               DType products, const TensorCoreTensors &tensors,
                               const RowStats *stats);

/// The gradients on tensor cores (dq, dk and dv of `tensors`): the row
/// statistics (tensorCoreForward), then dq, and dk with dv, each written
/// by one kernel in a fixed order. Operands are rounded to `products` as
/// in the forward, the score gradients too before their products with q
/// and k.
absl::Status tensorCoreBackward(CudaContext &context,
                                const AttentionParams &params, int64_t batch,
                                DType products,
                                const TensorCoreTensors &tensors,
                                const RowStats &stats);

/// `launch(std::integral_constant<int, D>{})` for the head-dimension class
/// D of `headDim`: the smallest of 32, 64, 128 and `kWidest` holding it
/// (the kernels are compiled for those widths).
template <int kWidest, typename Launch>
absl::Status byHeadClass(int64_t headDim, Launch launch) {
  if (headDim <= 32)
    return launch(std::integral_constant<int, 32>{});
  if (headDim <= 64)
    return launch(std::integral_constant<int, 64>{});
  if constexpr (kWidest > 128)
    if (headDim > 128)
      return launch(std::integral_constant<int, kWidest>{});
  return launch(std::integral_constant<int, 128>{});
}

} // namespace triad::rt::cuda::attention_detail

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDAATTENTIONCOMMON_CUH
