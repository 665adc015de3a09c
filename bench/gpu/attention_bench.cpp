//===- attention_bench.cpp - Triad's CUDA attention, timed ----------------===//
//
// Times the CUDA backend's attention forward and forward + backward
// (causal) on one shape with CUDA events: the median of --repeats runs
// after --warmup, printed as one JSON line for bench/gpu/run.sh, which
// times PyTorch's scaled_dot_product_attention on the same shape beside it
// (attention_peer.py). A benchmark, not a test. What runs:
//   - f32 tensors (--storage f32, the default): Triad's kernels, with
//     --products f32 on the CUDA cores, or bf16 or f16 on tensor cores
//     ("triad");
//   - tensors of the --products type (--storage 16, as a 16-bit plan holds
//     them): Triad's typed tensor-core kernels ("triad-typed"), or with
//     --route cudnn cuDNN's fused attention ("cudnn").
//
//   attention_bench --batch 4 --heads 16 --seq 2048 --head-dim 64 \
//                   [--products bf16 [--storage 16 [--route cudnn]]]
//
//===----------------------------------------------------------------------===//

#include "bench/gpu/GpuBench.h"
#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudaKernels.h"
#include "runtime/kernels/cuda/CudnnAttention.h"

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
using triad::bench::check;
using triad::bench::fail;
using triad::bench::medianMillis;

} // namespace

int main(int argc, char **argv) {
  int64_t batch = 4, heads = 16, seq = 2048, headDim = 64;
  int warmup = 3, repeats = 10;
  cuda::DType products = cuda::DType::F32;
  std::string productsName = "f32", storage = "f32", route = "triad";
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help") {
      std::printf("attention_bench [--batch B] [--heads H] [--seq S] "
                  "[--head-dim D] [--warmup N] [--repeats N] "
                  "[--products f32|bf16|f16] [--storage f32|16] "
                  "[--route triad|cudnn]\n");
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
    if (flag == "--storage" || flag == "--route") {
      std::string value = argv[++i];
      bool known = flag == "--storage" ? value == "f32" || value == "16"
                                       : value == "triad" || value == "cudnn";
      if (!known)
        fail(flag +
             (flag == "--storage" ? " is f32 or 16" : " is triad or cudnn") +
             ", not '" + value + "'");
      (flag == "--storage" ? storage : route) = value;
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
  bool sixteen = storage == "16";
  if (sixteen && products == cuda::DType::F32)
    fail("--storage 16 holds the tensors in the --products type: bf16 or f16");
  if (route == "cudnn" && !sixteen)
    fail("--route cudnn takes 16-bit tensors: --storage 16");
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
  // Every tensor in the storage type: f32, or the products' 16-bit type
  // (cast on the device from the f32 values).
  cuda::DType type = sixteen ? products : cuda::DType::F32;
  size_t elementBytes = sixteen ? 2 : 4;
  absl::StatusOr<cuda::DeviceBuffer> staging =
      cuda::DeviceBuffer::allocate(elements * sizeof(float));
  check(staging.status(), "allocating");
  check(
      ctx.copyToDevice(staging->data(), host.data(), elements * sizeof(float)),
      "copying");
  std::vector<cuda::DeviceBuffer> buffers;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<cuda::DeviceBuffer> buffer =
        cuda::DeviceBuffer::allocate(elements * elementBytes);
    check(buffer.status(), "allocating");
    check(cuda::cast(ctx, staging->data(), cuda::DType::F32, buffer->data(),
                     type, static_cast<int64_t>(elements)),
          "converting");
    buffers.push_back(std::move(*buffer));
  }
  cpu::AttentionShape shape{batch,
                            seq,
                            seq,
                            heads,
                            heads,
                            headDim,
                            cpu::Mask::Causal,
                            static_cast<float>(1.0 / std::sqrt(headDim))};
  auto in = [&](int i) { return cuda::Operand{buffers[i].data(), type}; };
  auto result = [&](int i) { return cuda::Result{buffers[i].data(), type}; };
  cuda::AttentionRouter router(route == "cudnn" ? AttentionKernel::Cudnn
                                                : AttentionKernel::Triad);
  std::function<void()> forward, both;
  if (!sixteen) {
    float *q = buffers[0].as<float>(), *k = buffers[1].as<float>(),
          *v = buffers[2].as<float>(), *out = buffers[3].as<float>(),
          *dout = buffers[4].as<float>(), *dq = buffers[5].as<float>(),
          *dk = buffers[6].as<float>(), *dv = buffers[7].as<float>();
    forward = [&, q, k, v, out] {
      check(
          cuda::attention(ctx, q, k, v, nullptr, nullptr, out, shape, products),
          "attention");
    };
    both = [&, q, k, v, dout, dq, dk, dv] {
      forward();
      check(cuda::attentionGrad(ctx, q, k, v, nullptr, nullptr, dout, dq, dk,
                                dv, shape, products),
            "attentionGrad");
    };
  } else {
    // Through the router: cuDNN under --route cudnn (a call it does not
    // take is an error), Triad's typed kernels otherwise.
    forward = [&] {
      check(router.attention(ctx, in(0), in(1), in(2), nullptr, nullptr,
                             result(3), shape),
            "attention");
    };
    both = [&] {
      forward();
      check(router.attentionGrad(ctx, in(0), in(1), in(2), nullptr, nullptr,
                                 in(4), result(5), result(6), result(7), shape),
            "attentionGrad");
    };
  }
  double forwardMs = medianMillis(ctx, warmup, repeats, forward);
  double bothMs = medianMillis(ctx, warmup, repeats, both);
  const char *impl = !sixteen           ? "triad"
                     : route == "cudnn" ? "cudnn"
                                        : "triad-typed";
  std::printf("{\"impl\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, "
              "\"heads\": %lld, \"seq\": %lld, \"head_dim\": %lld, "
              "\"forward_ms\": %.4f, \"forward_backward_ms\": %.4f}\n",
              impl, productsName.c_str(), static_cast<long long>(batch),
              static_cast<long long>(heads), static_cast<long long>(seq),
              static_cast<long long>(headDim), forwardMs, bothMs);
  return 0;
}
