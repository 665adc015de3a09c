//===- GpuBench.h - what the GPU benchmarks share -------------------------===//
//
// Error exits and CUDA-event timing for the GPU benchmarks of bench/gpu
// (attention_bench.cpp, kernel_bench.cpp): header-only, each benchmark one
// translation unit.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_BENCH_GPU_GPUBENCH_H
#define TRIAD_BENCH_GPU_GPUBENCH_H

#include "runtime/kernels/cuda/CudaContext.h"

#include "absl/status/status.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace triad::bench {

/// Prints "PROGRAM: error: MESSAGE" and exits with status 1.
[[noreturn]] inline void fail(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", program_invocation_short_name,
               message.c_str());
  std::exit(1);
}

inline void check(const absl::Status &status, const char *what) {
  if (!status.ok())
    fail(std::string(what) + ": " + std::string(status.message()));
}

inline void checkCuda(cudaError_t error, const char *what) {
  if (error != cudaSuccess)
    fail(std::string(what) + ": " + cudaGetErrorString(error));
}

/// The median milliseconds of `run` on the context's stream over `repeats`
/// runs after `warmup`, each timed with CUDA events.
inline double medianMillis(rt::cuda::CudaContext &context, int warmup,
                           int repeats, const std::function<void()> &run) {
  cudaEvent_t begin, end;
  checkCuda(cudaEventCreate(&begin), "cudaEventCreate");
  checkCuda(cudaEventCreate(&end), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i)
    run();
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    checkCuda(cudaEventRecord(begin, context.stream()), "cudaEventRecord");
    run();
    checkCuda(cudaEventRecord(end, context.stream()), "cudaEventRecord");
    checkCuda(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  check(context.synchronize(), "the kernels");
  std::sort(times.begin(), times.end());
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return times[times.size() / 2];
}

} // namespace triad::bench

#endif // TRIAD_BENCH_GPU_GPUBENCH_H
