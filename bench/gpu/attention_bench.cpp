//===- attention_bench.cpp - Triad's CUDA attention, timed ----------------===//
//
// Times the CUDA backend's attention forward and forward + backward
// (causal, f32 tensors; --products f32 on the CUDA cores, or bf16 or f16 on
// tensor cores) on one shape with CUDA events: the median of --repeats runs
// after --warmup, printed as one JSON line for bench/gpu/run.sh, which
// times PyTorch's scaled_dot_product_attention on the same shape beside it
// (attention_peer.py). A benchmark, not a test.
//
//   attention_bench --batch 4 --heads 16 --seq 2048 --head-dim 64 \
//                   [--products bf16]
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace triad::rt;

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "attention_bench: error: %s\n", message.c_str());
  std::exit(1);
}

void check(const absl::Status &status, const char *what) {
  if (!status.ok())
    fail(std::string(what) + ": " + std::string(status.message()));
}

void checkCuda(cudaError_t error, const char *what) {
  if (error != cudaSuccess)
    fail(std::string(what) + ": " + cudaGetErrorString(error));
}

/// The median milliseconds of `run` over `repeats` runs after `warmup`.
double medianMillis(cuda::CudaContext &context, int warmup, int repeats,
                    const std::function<void()> &run) {
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

} // namespace

int main(int argc, char **argv) {
  int64_t batch = 4, heads = 16, seq = 2048, headDim = 64;
  int warmup = 3, repeats = 10;
  cuda::DType products = cuda::DType::F32;
  std::string productsName = "f32";
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help") {
      std::printf("attention_bench [--batch B] [--heads H] [--seq S] "
                  "[--head-dim D] [--warmup N] [--repeats N] "
                  "[--products f32|bf16|f16]\n");
      return 0;
    }
    if (i + 1 >= argc)
      fail("flag " + flag + " needs a value");
    if (flag == "--products") {
      productsName = argv[++i];
      if (productsName == "f32")
        products = cuda::DType::F32;
      else if (productsName == "bf16")
        products = cuda::DType::BF16;
      else if (productsName == "f16")
        products = cuda::DType::F16;
      else
        fail("--products is f32, bf16 or f16, not '" + productsName + "'");
      continue;
    }
    long long value = std::atoll(argv[++i]);
    if (value < 1)
      fail("flag " + flag + " needs a positive value");
    if (flag == "--batch")
      batch = value;
    else if (flag == "--heads")
      heads = value;
    else if (flag == "--seq")
      seq = value;
    else if (flag == "--head-dim")
      headDim = value;
    else if (flag == "--warmup")
      warmup = static_cast<int>(value);
    else if (flag == "--repeats")
      repeats = static_cast<int>(value);
    else
      fail("unknown flag " + flag + " (see --help)");
  }
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> context =
      cuda::CudaContext::create();
  check(context.status(), "the CUDA context");
  cuda::CudaContext &ctx = **context;
  size_t elements = static_cast<size_t>(batch * seq * heads * headDim);
  std::vector<float> host(elements);
  std::mt19937 generator(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float &value : host)
    value = normal(generator);
  std::vector<cuda::DeviceBuffer> buffers;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<cuda::DeviceBuffer> buffer =
        cuda::DeviceBuffer::allocate(elements * sizeof(float));
    check(buffer.status(), "allocating");
    check(
        ctx.copyToDevice(buffer->data(), host.data(), elements * sizeof(float)),
        "copying");
    buffers.push_back(std::move(*buffer));
  }
  float *q = buffers[0].as<float>(), *k = buffers[1].as<float>(),
        *v = buffers[2].as<float>(), *out = buffers[3].as<float>(),
        *dout = buffers[4].as<float>(), *dq = buffers[5].as<float>(),
        *dk = buffers[6].as<float>(), *dv = buffers[7].as<float>();
  cpu::AttentionShape shape{batch,
                            seq,
                            seq,
                            heads,
                            heads,
                            headDim,
                            cpu::Mask::Causal,
                            static_cast<float>(1.0 / std::sqrt(headDim))};
  auto forward = [&] {
    check(cuda::attention(ctx, q, k, v, nullptr, nullptr, out, shape, products),
          "attention");
  };
  auto both = [&] {
    forward();
    check(cuda::attentionGrad(ctx, q, k, v, nullptr, nullptr, dout, dq, dk, dv,
                              shape, products),
          "attentionGrad");
  };
  double forwardMs = medianMillis(ctx, warmup, repeats, forward);
  double bothMs = medianMillis(ctx, warmup, repeats, both);
  std::printf("{\"impl\": \"triad\", \"dtype\": \"%s\", \"batch\": %lld, "
              "\"heads\": %lld, \"seq\": %lld, \"head_dim\": %lld, "
              "\"forward_ms\": %.4f, \"forward_backward_ms\": %.4f}\n",
              productsName.c_str(), static_cast<long long>(batch),
              static_cast<long long>(heads), static_cast<long long>(seq),
              static_cast<long long>(headDim), forwardMs, bothMs);
  return 0;
}
