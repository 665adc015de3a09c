//===- CudaElementAccess.cuh - how kernels read and write elements -*- C++
//-*-===//
//
// The element access that the CUDA kernels are templates over, so that one
// kernel body serves the f32 entry points and the typed ones (operands and
// results each of its own type: CudaKernels.h's Operand and Result).
// F32In and F32Out are plain f32 loads and stores; TypedIn and TypedOut
// switch on the tensor's type (the same for every thread of a launch, so
// the branch never diverges), widening as they read (exact) and rounding
// to nearest even as they write, as cast does. Both hand the kernel f32
// values, so its arithmetic is the same whichever it is instantiated with:
// a typed kernel gives the bits of casting its 16-bit operands to f32,
// running the f32 kernel and casting its results back. Internal to the
// kernels' .cu files.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDAELEMENTACCESS_CUH
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDAELEMENTACCESS_CUH

#include "runtime/kernels/cuda/CudaKernels.h"

#include "absl/status/status.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace triad::rt::cuda::element_access {

template <typename From, typename To> __device__ To convert(From x);
template <> __device__ __forceinline__ float convert(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 convert(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half convert(float x) {
  return __float2half_rn(x);
}
template <> __device__ __forceinline__ float convert(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <> __device__ __forceinline__ float convert(__half x) {
  return __half2float(x);
}
template <> __device__ __forceinline__ int32_t convert(float x) {
  return static_cast<int32_t>(x); // toward zero, as std::trunc
}
template <> __device__ __forceinline__ float convert(int32_t x) {
  return static_cast<float>(x);
}

/// The bytes of one element of a float type.
__host__ __device__ __forceinline__ int64_t floatBytes(DType type) {
  return type == DType::F32 ? 4 : 2;
}

// The accessors. `at(offset)` is the tensor from element `offset` on (a
// row of a row kernel); null `data` stands for an absent operand.

struct F32In {
  const float *data;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return data[i];
  }
  __device__ __forceinline__ F32In at(int64_t offset) const {
    return {data + offset};
  }
};

struct F32Out {
  float *data;
  __device__ __forceinline__ void store(int64_t i, float v) const {
    data[i] = v;
  }
  /// What the tensor holds (kernels that add to their result).
  __device__ __forceinline__ float load(int64_t i) const { return data[i]; }
  __device__ __forceinline__ F32Out at(int64_t offset) const {
    return {data + offset};
  }
};

struct TypedIn {
  const void *data;
  DType type;
  __device__ __forceinline__ float operator[](int64_t i) const {
    switch (type) {
    case DType::BF16:
      return convert<__nv_bfloat16, float>(
          static_cast<const __nv_bfloat16 *>(data)[i]);
    case DType::F16:
      return convert<__half, float>(static_cast<const __half *>(data)[i]);
    default:
      return static_cast<const float *>(data)[i];
    }
  }
  __device__ __forceinline__ TypedIn at(int64_t offset) const {
    return {static_cast<const char *>(data) + offset * floatBytes(type), type};
  }
};

struct TypedOut {
  void *data;
  DType type;
  __device__ __forceinline__ void store(int64_t i, float v) const {
    switch (type) {
    case DType::BF16:
      static_cast<__nv_bfloat16 *>(data)[i] = convert<float, __nv_bfloat16>(v);
      break;
    case DType::F16:
      static_cast<__half *>(data)[i] = convert<float, __half>(v);
      break;
    default:
      static_cast<float *>(data)[i] = v;
      break;
    }
  }
  __device__ __forceinline__ float load(int64_t i) const {
    return TypedIn{data, type}[i];
  }
  __device__ __forceinline__ TypedOut at(int64_t offset) const {
    return {static_cast<char *>(data) + offset * floatBytes(type), type};
  }
};

/// The accessors of the f32 kernels and of the typed ones, for the host
/// side of an entry point (see withAccess).
struct F32Access {
  using In = F32In;
  using Out = F32Out;
  static In in(Operand operand) {
    return {static_cast<const float *>(operand.data)};
  }
  static Out out(Result result) { return {static_cast<float *>(result.data)}; }
};

struct TypedAccess {
  using In = TypedIn;
  using Out = TypedOut;
  static In in(Operand operand) { return {operand.data, operand.type}; }
  static Out out(Result result) { return {result.data, result.type}; }
};

/// `launch(access)` with F32Access when every type in `types` is F32 (a
/// typed entry point then runs the f32 kernel itself, without the switch
/// on each element's type), else with TypedAccess.
template <typename Launch>
absl::Status withAccess(std::initializer_list<DType> types, Launch launch) {
  for (DType type : types)
    if (type != DType::F32)
      return launch(TypedAccess{});
  return launch(F32Access{});
}

/// OK when every type is F32, BF16 or F16, the types the typed kernels
/// read and write.
inline absl::Status checkFloatTypes(const char *what,
                                    std::initializer_list<DType> types) {
  for (DType type : types)
    if (type != DType::F32 && type != DType::BF16 && type != DType::F16)
      return absl::InvalidArgumentError(
          std::string(what) +
          ": operands and results must be f32, bf16 or f16");
  return absl::OkStatus();
}

} // namespace triad::rt::cuda::element_access

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDAELEMENTACCESS_CUH
