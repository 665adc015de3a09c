//===- CudaCheck.h - CUDA and cuBLASLt errors as absl::Status ----*- C++
//-*-===//
//
// Every call into the CUDA runtime or cuBLASLt goes through one of the
// macros below: a failure becomes an absl::Status that names the call, the
// error's name and its description, and returns from the enclosing function
// (which returns absl::Status or absl::StatusOr). Kernel launches are
// checked with TRIAD_CUDA_CHECK_LAUNCH right after the launch.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDACHECK_H
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDACHECK_H

#include "absl/status/status.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace triad::rt::cuda {

/// OK for cudaSuccess; otherwise an error naming `call`.
absl::Status cudaStatus(cudaError_t error, const char *call);
/// OK for CUBLAS_STATUS_SUCCESS; otherwise an error naming `call`.
absl::Status cublasStatus(cublasStatus_t status, const char *call);
/// The error of the last kernel launch (cudaGetLastError), naming
/// `kernel`: a bad launch configuration, no kernel image for this GPU.
absl::Status launchStatus(const char *kernel);

} // namespace triad::rt::cuda

#define TRIAD_CUDA_RETURN_IF_ERROR(call)                                       \
  do {                                                                         \
    if (::absl::Status triadCudaStatus_ =                                      \
            ::triad::rt::cuda::cudaStatus((call), #call);                      \
        !triadCudaStatus_.ok())                                                \
      return triadCudaStatus_;                                                 \
  } while (false)

#define TRIAD_CUBLAS_RETURN_IF_ERROR(call)                                     \
  do {                                                                         \
    if (::absl::Status triadCublasStatus_ =                                    \
            ::triad::rt::cuda::cublasStatus((call), #call);                    \
        !triadCublasStatus_.ok())                                              \
      return triadCublasStatus_;                                               \
  } while (false)

/// Right after a kernel launch: returns the launch's error, if any.
#define TRIAD_CUDA_CHECK_LAUNCH(kernel)                                        \
  do {                                                                         \
    if (::absl::Status triadLaunchStatus_ =                                    \
            ::triad::rt::cuda::launchStatus(kernel);                           \
        !triadLaunchStatus_.ok())                                              \
      return triadLaunchStatus_;                                               \
  } while (false)

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDACHECK_H
