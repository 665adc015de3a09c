//===- Backends.cpp - an executor for a backend named at run time ---------===//

#include "runtime/executor/Backends.h"

#include "runtime/executor/CpuExecutor.h"
#if TRIAD_HAVE_CUDA
#include "runtime/executor/CudaExecutor.h"
#include "runtime/kernels/cuda/CudaContext.h"
#endif

#include "absl/strings/str_cat.h"

#include <cstdlib>
#include <string>

namespace triad::rt {

namespace {

#if TRIAD_HAVE_CUDA
/// The rank's index among the ranks of its node, as the launchers export
/// it (Open MPI, Slurm, MPICH, torchrun), or -1 when none does.
int localRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                           "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name)) {
      char *end = nullptr;
      long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0 && rank < (1 << 20))
        return static_cast<int>(rank);
    }
  return -1;
}
#endif

} // namespace

const char *backendName(Backend backend) {
  return backend == Backend::Cuda ? "cuda" : "cpu";
}

absl::StatusOr<Backend> parseBackend(absl::string_view name) {
  if (name == "cpu")
    return Backend::Cpu;
  if (name == "cuda")
    return Backend::Cuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", name, "' (expected cpu or cuda)"));
}

bool backendBuilt(Backend backend) {
#if TRIAD_HAVE_CUDA
  return true;
#else
  return backend == Backend::Cpu;
#endif
}

absl::StatusOr<std::unique_ptr<Executor>>
createExecutor(const LoadedPlan &plan, uint32_t pipelineRank, uint64_t seed,
               const ExecutorOptions &options, const DeviceOptions &device) {
  if (device.backend == Backend::Cpu && device.nccl)
    return absl::InvalidArgumentError(
        "NCCL moves device buffers: it needs the CUDA backend");
  if (device.backend == Backend::Cpu && device.cudaGraphs)
    return absl::InvalidArgumentError(
        "CUDA graphs record GPU work: they need the CUDA backend");
  if (device.backend == Backend::Cpu && device.cudaHostInit)
    return absl::InvalidArgumentError(
        "--cuda-init chooses where a GPU's initial values are drawn: it "
        "needs the CUDA backend");
  if (device.backend == Backend::Cpu) {
    absl::StatusOr<CpuExecutor> executor = CpuExecutor::create(
        plan, pipelineRank, seed, options, device.cpuBf16Products);
    if (!executor.ok())
      return executor.status();
    return std::make_unique<CpuExecutor>(std::move(*executor));
  }
#if TRIAD_HAVE_CUDA
  cuda::ContextOptions context;
  context.matmulPrecision = device.matmulPrecision;
  context.attention = device.cudaAttention;
  context.geluGrad = device.cudaGeluGrad;
  context.matmulCandidates = device.cudaMatmulCandidates;
  context.device = device.cudaDevice;
  if (context.device < 0) {
    absl::StatusOr<int> count = cuda::deviceCount();
    if (!count.ok())
      return count.status();
    if (*count == 0)
      return absl::FailedPreconditionError(
          "--device=cuda: this machine has no GPU (or no NVIDIA driver)");
    int local = localRank();
    if (local < 0 && options.communicator)
      local = static_cast<int>(options.communicator->worldRank());
    context.device = std::max(local, 0) % *count;
  }
  absl::StatusOr<std::unique_ptr<CudaExecutor>> executor = CudaExecutor::create(
      plan, pipelineRank, seed, options, context, device.nccl,
      device.ncclTimeout, device.cudaGraphs, device.cudaHostInit);
  if (!executor.ok())
    return executor.status();
  return std::unique_ptr<Executor>(std::move(*executor));
#else
  return absl::UnimplementedError(
      "this build of the runtime has no CUDA backend: the CUDA toolkit was "
      "not found when it was built (rebuild where nvcc and cuBLASLt are "
      "installed)");
#endif
}

} // namespace triad::rt
