//===- kernel_bench.cpp - Triad's memory-bound CUDA kernels, timed --------===//
//
// Times the CUDA backend's element-wise, norm, reduction and loss kernels
// on the shapes of one transformer layer's step (the 1.3 B model's by
// default: 8192 tokens, hidden 2048, MLP 8192, GPT-2's vocabulary) with
// CUDA events: the median of --repeats runs after --warmup, one JSON line
// a kernel with the bytes it must move at the least (its operands read
// once, its results written once), for bench/gpu/run.sh, which times the
// same operations in PyTorch beside it (kernel_peer.py) and prints both
// as GB/s. A benchmark, not a test.
//
//   kernel_bench [--rows 8192] [--hidden 2048] [--ffn 8192] \
//                [--vocab 50257] [--dtype bf16|f16|f32]
//
//===----------------------------------------------------------------------===//

#include "bench/gpu/GpuBench.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace triad::rt;
using triad::bench::check;
using triad::bench::fail;
using triad::bench::medianMillis;

/// A device tensor of `count` elements of `type` holding values spread
/// evenly over [-scale, scale) by a hash of their index (the logits are
/// 400 million values: a normal draw of each would take seconds), converted
/// on the device.
class Tensor {
public:
  Tensor(cuda::CudaContext &context, int64_t count, cuda::DType type,
         float scale = 1.0f)
      : count(count), type(type) {
    size_t bytes = static_cast<size_t>(count) * elementBytes(type);
    absl::StatusOr<cuda::DeviceBuffer> allocated =
        cuda::DeviceBuffer::allocate(bytes);
    check(allocated.status(), "allocating");
    buffer = std::move(*allocated);
    std::vector<float> host(static_cast<size_t>(count));
    for (size_t i = 0; i < host.size(); ++i) {
      uint32_t h = static_cast<uint32_t>(i) * 2654435761u + 12345u;
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      host[i] = scale * (static_cast<float>(h >> 8) * 0x1p-23f - 1.0f);
    }
    absl::StatusOr<cuda::DeviceBuffer> staging =
        cuda::DeviceBuffer::allocate(host.size() * sizeof(float));
    check(staging.status(), "allocating");
    check(context.copyToDevice(staging->data(), host.data(),
                               host.size() * sizeof(float)),
          "copying");
    check(cuda::cast(context, staging->data(), cuda::DType::F32, buffer.data(),
                     type, count),
          "converting");
    check(context.synchronize(), "converting");
  }
  static size_t elementBytes(cuda::DType type) {
    return type == cuda::DType::F32 ? 4 : 2;
  }
  cuda::Operand in() const { return {buffer.data(), type}; }
  cuda::Result out() const { return {buffer.data(), type}; }
  double bytes() const {
    return static_cast<double>(count) * static_cast<double>(elementBytes(type));
  }
  float *f32() const { return buffer.as<float>(); }

  int64_t count;
  cuda::DType type;
  cuda::DeviceBuffer buffer;
};

long long positive(const char *flag, const char *text) {
  char *end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 1)
    fail(std::string(flag) + " needs a positive integer, not '" + text + "'");
  return value;
}

} // namespace

int main(int argc, char **argv) {
  int64_t rows = 8192, hidden = 2048, ffn = 8192, vocab = 50257;
  int warmup = 3, repeats = 20;
  std::string dtypeName = "bf16";
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help") {
      std::printf(
          "kernel_bench [--rows N] [--hidden N] [--ffn N] [--vocab N] "
          "[--dtype bf16|f16|f32] [--warmup N] [--repeats N]\n\n"
          "Times Triad's memory-bound CUDA kernels on one layer's shapes "
          "(rows: tokens of a step) and prints a JSON line a kernel.\n");
      return 0;
    }
    if (i + 1 >= argc)
      fail("flag " + flag + " needs a value (see --help)");
    const char *value = argv[++i];
    if (flag == "--dtype") {
      dtypeName = value;
      if (dtypeName != "bf16" && dtypeName != "f16" && dtypeName != "f32")
        fail("--dtype is bf16, f16 or f32, not '" + dtypeName + "'");
    } else if (flag == "--rows")
      rows = positive(argv[i - 1], value);
    else if (flag == "--hidden")
      hidden = positive(argv[i - 1], value);
    else if (flag == "--ffn")
      ffn = positive(argv[i - 1], value);
    else if (flag == "--vocab")
      vocab = positive(argv[i - 1], value);
    else if (flag == "--warmup")
      warmup = static_cast<int>(positive(argv[i - 1], value));
    else if (flag == "--repeats")
      repeats = static_cast<int>(positive(argv[i - 1], value));
    else
      fail("unknown flag " + flag + " (see --help)");
  }
  cuda::DType dtype = dtypeName == "bf16"  ? cuda::DType::BF16
                      : dtypeName == "f16" ? cuda::DType::F16
                                           : cuda::DType::F32;
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> created =
      cuda::CudaContext::create();
  check(created.status(), "the CUDA context");
  cuda::CudaContext &context = **created;

  const cuda::DType f32 = cuda::DType::F32;
  const float epsilon = 1e-5f;
  // Activations [rows, hidden], MLP activations [rows, ffn], a weight and
  // its f32 gradient accumulator [hidden, ffn], the logits [rows, vocab].
  Tensor x(context, rows * hidden, dtype), y(context, rows * hidden, dtype),
      z(context, rows * hidden, dtype), bias(context, hidden, dtype),
      gamma(context, hidden, dtype), beta(context, hidden, dtype),
      dgamma(context, hidden, dtype), mlp(context, rows * ffn, dtype),
      dmlp(context, rows * ffn, dtype), mlpOut(context, rows * ffn, dtype),
      columnSums(context, ffn, dtype), master(context, hidden * ffn, f32),
      weight(context, hidden * ffn, dtype), grad(context, hidden * ffn, dtype),
      accumulator(context, hidden * ffn, f32),
      logits(context, rows * vocab, dtype, 0.1f), scalars(context, 2, f32);
  check(cuda::fill(context, scalars.f32(), 1.0f, 2), "fill");
  absl::StatusOr<cuda::DeviceBuffer> labelBuffer =
      cuda::DeviceBuffer::allocate(static_cast<size_t>(rows) * sizeof(int32_t));
  check(labelBuffer.status(), "allocating");
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    labels[r] = static_cast<int32_t>((r * 7919) % vocab);
  check(context.copyToDevice(labelBuffer->data(), labels.data(),
                             labels.size() * sizeof(int32_t)),
        "copying");
  const int32_t *labelData = labelBuffer->as<int32_t>();

  struct Case {
    const char *name;
    std::string shape;
    double bytes;
    std::function<absl::Status()> run;
  };
  auto shape = [](int64_t a, int64_t b) {
    return std::to_string(a) + "x" + std::to_string(b);
  };
  std::vector<Case> cases = {
      {"add", shape(rows, hidden), 3 * x.bytes(),
       [&] {
         return cuda::addBroadcast(context, x.in(), y.in(), z.out(), x.count,
                                   x.count);
       }},
      {"add-bias", shape(rows, hidden), 2 * x.bytes(),
       [&] {
         return cuda::addBroadcast(context, x.in(), bias.in(), z.out(), x.count,
                                   hidden);
       }},
      {"gelu-tanh-grad", shape(rows, ffn), 3 * mlp.bytes(),
       [&] {
         return cuda::activationGrad(context, cuda::Activation::GeluTanh,
                                     mlp.in(), dmlp.in(), mlpOut.out(),
                                     mlp.count);
       }},
      {"cast-f32", shape(hidden, ffn), master.bytes() + weight.bytes(),
       [&] {
         return cuda::cast(context, master.f32(), f32, weight.buffer.data(),
                           dtype, master.count);
       }},
      {"fill-f32", shape(hidden, ffn), accumulator.bytes(),
       [&] {
         return cuda::fill(context, accumulator.out(), 0.0f, accumulator.count);
       }},
      {"accumulate-f32", shape(hidden, ffn),
       2 * accumulator.bytes() + grad.bytes(),
       [&] {
         return cuda::accumulate(context, accumulator.out(), grad.in(),
                                 scalars.f32(), grad.count);
       }},
      {"layer-norm", shape(rows, hidden), 2 * x.bytes(),
       [&] {
         return cuda::layerNorm(context, x.in(), gamma.in(), beta.in(), z.out(),
                                rows, hidden, epsilon);
       }},
      {"layer-norm-grad", shape(rows, hidden), 3 * x.bytes(),
       [&] {
         return cuda::layerNormGrad(context, x.in(), gamma.in(), y.in(),
                                    z.out(), dgamma.out(), rows, hidden,
                                    epsilon);
       }},
      {"bias-grad", shape(rows, ffn), mlp.bytes(),
       [&] {
         return cuda::reduceSum(context, mlp.in(), {rows, ffn},
                                columnSums.out(), {ffn}, 1.0);
       }},
      // The loss and its gradient, written over the logits (as a plan does).
      {"cross-entropy-fwd-bwd", shape(rows, vocab), 3 * logits.bytes(),
       [&] {
         if (absl::Status s =
                 cuda::crossEntropy(context, logits.in(), labelData,
                                    scalars.f32(), rows, vocab, -100);
             !s.ok())
           return s;
         return cuda::crossEntropyGrad(context, logits.in(), labelData,
                                       scalars.f32() + 1, logits.out(), rows,
                                       vocab, -100);
       }},
  };
  for (const Case &c : cases) {
    double ms =
        medianMillis(context, warmup, repeats, [&] { check(c.run(), c.name); });
    std::printf("{\"impl\": \"triad\", \"kernel\": \"%s\", \"dtype\": \"%s\", "
                "\"shape\": \"%s\", \"bytes\": %.0f, \"ms\": %.4f}\n",
                c.name, dtypeName.c_str(), c.shape.c_str(), c.bytes, ms);
    std::fflush(stdout);
  }
  return 0;
}
