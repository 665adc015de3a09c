//===- Backends.h - an executor for a backend named at run time --*- C++
//-*-===//
//
// The one place that knows which backends this build of the runtime has:
// the CPU always, CUDA where the toolkit was found when it was built. A
// tool or the trainer names the backend (`--device=cpu|cuda`) and gets an
// Executor; asking for CUDA from a build without it is an error that says
// so, not a silent fall back to the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_EXECUTOR_BACKENDS_H
#define TRIAD_RUNTIME_EXECUTOR_BACKENDS_H

#include "runtime/comm/AsyncWait.h"
#include "runtime/executor/Executor.h"
#include "runtime/kernels/AttentionKernel.h"
#include "runtime/kernels/GeluGradRoute.h"
#include "runtime/kernels/MatmulPrecision.h"
#include "runtime/kernels/cpu/Bf16Products.h"

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include <chrono>
#include <memory>

namespace triad::rt {

enum class Backend { Cpu, Cuda };

/// "cpu" or "cuda".
const char *backendName(Backend backend);
/// The backend named `name` ("cpu" or "cuda"), or InvalidArgument.
absl::StatusOr<Backend> parseBackend(absl::string_view name);
/// Whether this build has the backend (the CUDA one needs the toolkit at
/// build time; a GPU is checked only when an executor is created).
bool backendBuilt(Backend backend);

struct DeviceOptions {
  Backend backend = Backend::Cpu;
  /// CUDA: the device ordinal, or -1 for the rank's local rank (on its
  /// node) modulo the node's GPUs, so that ranks spread over the GPUs and
  /// several ranks may share one.
  int cudaDevice = -1;
  /// CUDA: how f32 matrix products compute (see MatmulPrecision.h); any
  /// choice but F32 uses tensor cores, faster and no longer within 1e-5 of
  /// the CPU.
  MatmulPrecision matmulPrecision = MatmulPrecision::F32;
  /// CUDA: what runs a 16-bit plan's attention (AttentionKernel.h): cuDNN's
  /// fused attention where it takes the call (the default), always, or
  /// never (Triad's kernels, whose bits do not depend on timing).
  AttentionKernel cudaAttention = AttentionKernel::Auto;
  /// CUDA: how a product fused with the tanh GELU's gradient runs
  /// (GeluGradRoute.h).
  GeluGradRoute cudaGeluGrad = GeluGradRoute::Fused;
  /// CUDA: how many of cuBLASLt's algorithms are timed for each product
  /// shape on its first call (1: its heuristic's first, no timing; see
  /// cuda::ContextOptions::matmulCandidates).
  int cudaMatmulCandidates = 1;
  /// CUDA: record each call once as a CUDA graph and replay it
  /// (CudaExecutor's recordCalls).
  bool cudaGraphs = false;
  /// CUDA: draw the initial values on the host and copy them (what the CPU
  /// backend holds bit for bit) rather than on the GPU (CudaExecutor's
  /// hostInit).
  bool cudaHostInit = false;
  /// CUDA: collectives and transfers through NCCL on device buffers
  /// (one GPU per rank); otherwise staged through host memory for the
  /// job's communicator (MPI), which lets ranks share a GPU.
  bool nccl = false;
  /// With NCCL: how long the host waits for device work that includes
  /// NCCL's before it aborts the communicators and fails (0: no limit).
  /// triad-run sets it from --timeout, its watchdog's; NCCL's own errors
  /// (a peer that died) end the wait at once.
  std::chrono::milliseconds ncclTimeout = kDefaultCommTimeout;
  /// CPU: which kernel multiplies bf16 operands (kernels/cpu/
  /// Bf16Products.h).
  cpu::Bf16ProductKernel cpuBf16Products = cpu::Bf16ProductKernel::Auto;
};

/// The executor of `pipelineRank`'s program on `device` (see
/// CpuExecutor::create and CudaExecutor::create).
absl::StatusOr<std::unique_ptr<Executor>>
createExecutor(const LoadedPlan &plan, uint32_t pipelineRank, uint64_t seed,
               const ExecutorOptions &options, const DeviceOptions &device);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_BACKENDS_H
