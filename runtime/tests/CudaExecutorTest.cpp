//===- CudaExecutorTest.cpp - the CUDA executor against the CPU one -------===//
//
// The same plans run on both executors and must agree: the layout ops
// (strided copies and sums) and the optimizer's device scalars exactly,
// since both compute them with the same formulas in the same order, in
// f32 and in 16 bits (whose layout ops move 2-byte elements, launching no
// widening kernel); a 16-bit step, whose kernels the CUDA executor runs on
// its 16-bit values, bit for bit as on f32 copies and within 16-bit
// roundings of the CPU; a 16-bit attention and its gradient on tensor
// cores without f32 copies, within their rounding of the CPU's, and through
// cuDNN's fused attention within the same of Triad's kernels (and
// --cuda-attention=cudnn an error where cuDNN does not take it); the
// device work of a call counted by kind, and a training step's launches
// and host time reported; a
// whole training plan (dropout, gradient accumulation over microbatches,
// clipping, AdamW) within 1e-5 relative over several steps, directly and
// through NCCL; every collective through NCCL (f32, bf16 and f16; packed
// pieces, buckets) exactly; a checkpoint saved from the GPU resumes on the
// CPU with the same losses; a bad token id is an error of the function
// that read it where that function returns results, and of finish where
// it does not (a call without results does not wait for the GPU); a
// receive staged through the host outlives its call as on the CPU; an
// all-slice of a tensor above 2 GiB copies its piece; a wait for NCCL past
// its timeout aborts the communicators.
//
// Without a GPU every test but the last skips with "no CUDA device on
// this machine" (ctest's SKIP_REGULAR_EXPRESSION); the last checks that
// creating the executor then fails with a message that says so.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CudaExecutor.h"
#include "runtime/executor/CpuExecutor.h"
#include "runtime/init/Philox.h"
#include "runtime/plan/KernelCodes.h"
#include "runtime/support/Files.h"
#include "runtime/tests/HeldTransfers.h"
#include "runtime/tests/PlanBuilder.h"
#include "runtime/train/Trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

using namespace triad::rt;
namespace plan = triad::plan;
using triad::plan::OpCode;
using triad::rt::tests::PlanBuilder;

namespace {

bool haveGpu() {
  absl::StatusOr<int> count = cuda::deviceCount();
  return count.ok() && *count > 0;
}

/// Skips the test where the machine has no GPU; a failure to count them (a
/// driver older than the runtime, say) fails it.
#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    absl::StatusOr<int> count = cuda::deviceCount();                           \
    ASSERT_TRUE(count.ok()) << count.status();                                 \
    if (*count == 0)                                                           \
      GTEST_SKIP() << "no CUDA device on this machine";                        \
  } while (false)

HostTensor floats(std::vector<int64_t> shape, uint32_t seed) {
  HostTensor t;
  t.shape = shape;
  int64_t n = elementCount(shape);
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    t.floats.push_back(normal(generator));
  return t;
}

HostTensor scalar(float value) {
  HostTensor t;
  t.shape = {};
  t.floats = {value};
  return t;
}

/// Runs function "f" of `bytes` with `args` on the CPU executor and, where
/// there is a GPU, on the CUDA one (its collectives through NCCL with
/// `nccl`): the plan and the CPU half are checked on every machine. With
/// `recordCalls`, the GPU runs "f" three times (kernel by kernel, recorded
/// as a CUDA graph, replayed), each giving the first's bits, and the last
/// is returned.
struct BothResults {
  std::vector<HostTensor> cpu, gpu;
};
BothResults runBoth(const std::string &bytes,
                    const std::vector<HostTensor> &args,
                    ExecutorOptions options = {}, bool nccl = false,
                    cuda::ContextOptions context = {},
                    bool recordCalls = false) {
  BothResults results;
  absl::StatusOr<LoadedPlan> plan = loadPlanFromBytes(bytes, "test.plan");
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok())
    return results;
  absl::StatusOr<CpuExecutor> cpu = CpuExecutor::create(*plan, 0, 5, options);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  if (!cpu.ok())
    return results;
  absl::StatusOr<std::vector<HostTensor>> onCpu = cpu->run("f", args);
  EXPECT_TRUE(onCpu.ok()) << onCpu.status();
  if (onCpu.ok())
    results.cpu = std::move(*onCpu);
  if (!haveGpu())
    return results;
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu = CudaExecutor::create(
      *plan, 0, 5, options, context, nccl, kDefaultCommTimeout, recordCalls);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!gpu.ok())
    return results;
  for (int call = 0; call < (recordCalls ? 3 : 1); ++call) {
    absl::StatusOr<std::vector<HostTensor>> onGpu = (*gpu)->run("f", args);
    EXPECT_TRUE(onGpu.ok()) << onGpu.status();
    if (!onGpu.ok())
      return results;
    if (call > 0)
      for (size_t r = 0; r < onGpu->size(); ++r)
        EXPECT_EQ((*onGpu)[r].floats, results.gpu[r].floats)
            << "call " << call << ", result " << r;
    results.gpu = std::move(*onGpu);
  }
  if (recordCalls) {
    EXPECT_EQ((*gpu)->recordedCalls(), 1u);
    EXPECT_EQ((*gpu)->callsNotRecorded(), std::vector<std::string>{});
  }
  return results;
}

/// The kernels one run of function "f" of `bytes` with `args` launches on
/// the GPU (-1, and a failure, when it cannot run).
int64_t kernelsOfARun(const std::string &bytes,
                      const std::vector<HostTensor> &args,
                      cuda::ContextOptions context = {}) {
  absl::StatusOr<LoadedPlan> loaded = loadPlanFromBytes(bytes, "test.plan");
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      loaded.ok()
          ? CudaExecutor::create(*loaded, 0, 5, {}, context)
          : absl::StatusOr<std::unique_ptr<CudaExecutor>>(loaded.status());
  if (!gpu.ok()) {
    ADD_FAILURE() << gpu.status();
    return -1;
  }
  int64_t before = cuda::issueCounts().kernels;
  if (absl::StatusOr<std::vector<HostTensor>> results = (*gpu)->run("f", args);
      !results.ok()) {
    ADD_FAILURE() << results.status();
    return -1;
  }
  return cuda::issueCounts().kernels - before;
}

/// Every result bit-identical (NaN equal to NaN).
void expectIdentical(const BothResults &results) {
  ASSERT_FALSE(results.cpu.empty());
  ASSERT_EQ(results.cpu.size(), results.gpu.size());
  for (size_t r = 0; r < results.cpu.size(); ++r) {
    const HostTensor &a = results.cpu[r], &b = results.gpu[r];
    ASSERT_EQ(a.shape, b.shape) << "result " << r;
    ASSERT_EQ(a.floats.size(), b.floats.size()) << "result " << r;
    ASSERT_EQ(a.ints, b.ints) << "result " << r;
    for (size_t i = 0; i < a.floats.size(); ++i)
      if (!(std::isnan(a.floats[i]) && std::isnan(b.floats[i])))
        EXPECT_EQ(a.floats[i], b.floats[i])
            << "result " << r << ", element " << i;
  }
}

TEST(CudaExecutor, LayoutOpsMatchTheCpuExactly) {
  PlanBuilder b;
  uint32_t x = b.value(plan::DType::F32, {2, 3, 4});
  uint32_t t = b.value(plan::DType::F32, {4, 2, 3});
  uint32_t s = b.value(plan::DType::F32, {1, 2, 3});
  uint32_t p = b.value(plan::DType::F32, {2, 5, 4});
  uint32_t c = b.value(plan::DType::F32, {2, 3, 8});
  uint32_t r = b.value(plan::DType::F32, {3, 1});
  uint32_t bc = b.value(plan::DType::F32, {2, 3, 4});
  uint32_t lead = b.value(plan::DType::F32, {1, 1, 4});
  uint32_t dropped = b.value(plan::DType::F32, {4});
  uint32_t trail = b.value(plan::DType::F32, {2, 1, 1});
  uint32_t inner = b.value(plan::DType::F32, {2, 1, 4});
  uint32_t ids = b.value(plan::DType::I32, {2, 3, 4});
  uint32_t back = b.value(plan::DType::F32, {2, 3, 4});
  uint32_t idsT = b.value(plan::DType::I32, {4, 2, 3});
  uint32_t copy = b.value(plan::DType::F32, {2, 3, 4});
  uint32_t listed = b.value(plan::DType::F32, {2, 2});
  b.instr(OpCode::Transpose, {x}, {t}, {2, 0, 1});
  b.instr(OpCode::Slice, {x}, {s}, {1, 1, 1, 1, 2, 3});
  b.instr(OpCode::Pad, {x}, {p}, {0, 1, 0, 0, 1, 0});
  b.instr(OpCode::Concat, {x, x}, {c}, {2});
  b.instr(OpCode::Broadcast, {r}, {bc});
  b.instr(OpCode::Sum, {x}, {lead}, {}, {1.0});
  b.instr(OpCode::Sum, {x}, {dropped}, {}, {0.5});
  b.instr(OpCode::Sum, {x}, {trail}, {}, {1.0});
  b.instr(OpCode::Sum, {x}, {inner}, {}, {1.0});
  b.instr(OpCode::Scale, {x}, {copy}, {}, {3.0});
  b.instr(OpCode::Cast, {copy}, {ids});
  b.instr(OpCode::Cast, {ids}, {back});
  b.instr(OpCode::Transpose, {ids}, {idsT}, {2, 0, 1});
  b.instr(OpCode::Copy, {x}, {copy});
  b.instr(OpCode::Values, {}, {listed}, {}, {1.5, -2.0, 0.25, 1e-3});
  BothResults results =
      runBoth(b.build({x, r}, {t, s, p, c, bc, lead, dropped, trail, inner, ids,
                               back, idsT, copy, listed}),
              {floats({2, 3, 4}, 1), floats({3, 1}, 2)});
  SKIP_WITHOUT_GPU();
  expectIdentical(results);
}

/// The layout ops of a 16-bit plan move their elements as they are (2-byte
/// strided copies, no f32 copies): bit for bit the CPU's (which widens,
/// copies and rounds back, exactly), odd sizes and offsets included. The
/// function's kernels are its strided copies alone, one per op and one
/// per part of a concat: no widening or rounding kernel runs.
TEST(CudaExecutor, SixteenBitLayoutOpsMatchTheCpuExactly) {
  using plan::DType;
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(half == DType::BF16 ? "bf16" : "f16");
    PlanBuilder b;
    uint32_t x = b.value(half, {3, 5, 7});
    uint32_t y = b.value(half, {3, 5, 3});
    uint32_t r = b.value(half, {5, 1});
    uint32_t t = b.value(half, {7, 3, 5});
    uint32_t s = b.value(half, {2, 3, 5});
    uint32_t p = b.value(half, {4, 6, 9});
    uint32_t c = b.value(half, {3, 5, 10});
    uint32_t bc = b.value(half, {3, 5, 7});
    uint32_t copy = b.value(half, {3, 5, 7});
    b.instr(OpCode::Transpose, {x}, {t}, {2, 0, 1});
    b.instr(OpCode::Slice, {x}, {s}, {1, 1, 1, 2, 3, 5});
    b.instr(OpCode::Pad, {x}, {p}, {1, 0, 1, 0, 1, 1});
    b.instr(OpCode::Concat, {x, y}, {c}, {2});
    b.instr(OpCode::Broadcast, {r}, {bc});
    b.instr(OpCode::Copy, {x}, {copy});
    HostTensor xArg = floats({3, 5, 7}, 21), yArg = floats({3, 5, 3}, 22),
               rArg = floats({5, 1}, 23);
    xArg.dtype = yArg.dtype = rArg.dtype = half;
    std::string bytes = b.build({x, y, r}, {t, s, p, c, bc, copy});
    BothResults results = runBoth(bytes, {xArg, yArg, rArg});
    SKIP_WITHOUT_GPU();
    expectIdentical(results);

    EXPECT_EQ(kernelsOfARun(bytes, {xArg, yArg, rArg}), 6)
        << "a layout op of 16-bit values widened them";
  }
}

/// A plan of one attention and its gradient of `type`: function "f" takes
/// q, k, v and dout ([batch, seq, heads x headDim], k and v over `kvHeads`)
/// and returns out, dq, dk and dv.
std::string attentionPlan(plan::DType type, int64_t batch, int64_t seq,
                          int64_t heads, int64_t kvHeads, int64_t headDim,
                          plan::MaskCode mask, double scale) {
  PlanBuilder b;
  std::vector<int64_t> queries = {batch, seq, heads * headDim},
                       keys = {batch, seq, kvHeads * headDim};
  uint32_t q = b.value(type, queries), k = b.value(type, keys),
           v = b.value(type, keys), dout = b.value(type, queries);
  uint32_t out = b.value(type, queries), dq = b.value(type, queries),
           dk = b.value(type, keys), dv = b.value(type, keys);
  std::vector<int64_t> ints = {heads, kvHeads, static_cast<int64_t>(mask), 0,
                               0};
  b.instr(OpCode::Attention, {q, k, v}, {out}, ints, {scale});
  b.instr(OpCode::AttentionGrad, {q, k, v, dout}, {dq, dk, dv}, ints, {scale});
  return b.build({q, k, v, dout}, {out, dq, dk, dv});
}

/// Random arguments of attentionPlan, rounded to `type` as they are
/// written (seeds `seed` to seed + 3).
std::vector<HostTensor> attentionArgs(plan::DType type, int64_t batch,
                                      int64_t seq, int64_t heads,
                                      int64_t kvHeads, int64_t headDim,
                                      uint32_t seed) {
  std::vector<int64_t> queries = {batch, seq, heads * headDim},
                       keys = {batch, seq, kvHeads * headDim};
  std::vector<HostTensor> args = {floats(queries, seed), floats(keys, seed + 1),
                                  floats(keys, seed + 2),
                                  floats(queries, seed + 3)};
  for (HostTensor &arg : args)
    arg.dtype = type;
  return args;
}

/// A 16-bit plan's attention and its gradient run on their values as they
/// are (the tensor cores in the plan's type, no f32 copies: one kernel for
/// the forward, three for the gradient), grouped-query heads and a causal
/// mask, against the CPU's exact f32 attention on widened values: within
/// the rounding of the probabilities and score gradients to the 16-bit
/// type (CudaAttentionTest's tolerance, 2e-2 of the largest element for
/// bf16 and 5e-3 for f16, with as much of the element itself), which also
/// covers the two results' rounding to the type (an ulp: 2^-8 and 2^-11).
/// The kernels' bits against the f32 route are CudaAttentionTest's. These
/// are Triad's own kernels (--cuda-attention=triad); cuDNN's route is the
/// next test's.
TEST(CudaExecutor, SixteenBitAttentionRunsOnItsValuesAsTheyAre) {
  using plan::DType;
  cuda::ContextOptions triad;
  triad.attention = AttentionKernel::Triad;
  const int64_t batch = 2, seq = 24, heads = 4, kvHeads = 2, headDim = 16;
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(half == DType::BF16 ? "bf16" : "f16");
    std::string bytes = attentionPlan(half, batch, seq, heads, kvHeads, headDim,
                                      plan::MaskCode::Causal, 0.25);
    std::vector<HostTensor> args =
        attentionArgs(half, batch, seq, heads, kvHeads, headDim, 31);
    BothResults results = runBoth(bytes, args, {}, false, triad);
    SKIP_WITHOUT_GPU();
    ASSERT_EQ(results.cpu.size(), 4u);
    ASSERT_EQ(results.gpu.size(), 4u);
    const double tolerance = half == DType::BF16 ? 2e-2 : 5e-3;
    const char *names[] = {"out", "dq", "dk", "dv"};
    for (size_t r = 0; r < 4; ++r) {
      const std::vector<float> &gpu = results.gpu[r].floats,
                               &cpu = results.cpu[r].floats;
      ASSERT_EQ(gpu.size(), cpu.size()) << names[r];
      double largest = 0.0;
      for (float x : cpu)
        largest = std::max(largest, std::fabs(static_cast<double>(x)));
      for (size_t i = 0; i < gpu.size(); ++i)
        EXPECT_LE(std::fabs(static_cast<double>(gpu[i]) - cpu[i]),
                  tolerance * (largest + std::fabs(cpu[i])))
            << names[r] << ", element " << i << ": gpu " << gpu[i] << ", cpu "
            << cpu[i];
    }
    EXPECT_EQ(kernelsOfARun(bytes, args, triad), 1 + 3)
        << "attention widened its 16-bit values";
  }
}

/// A 16-bit attention and its gradient of one kv head per two heads (8
/// over 4) and a causal mask, and 8 heads of their own without a mask, as
/// a 16-bit plan's: routed through cuDNN's fused attention
/// (--cuda-attention=cudnn, so that a refusal fails with its reason), the
/// route counted once for each, and their results within CudnnAttentionTest's
/// tolerance (2e-2 of the largest element for bf16, 5e-3 for f16, plus as
/// much of the element: about ten times the rounding of the probabilities
/// and score gradients that both routes make) of the same plan through
/// Triad's kernels and of the CPU's. cuDNN's executions count as one
/// kernel each: the forward's one, the gradient's two (its forward with
/// statistics, then the gradient): nothing widened.
TEST(CudaExecutor, SixteenBitAttentionThroughCudnnMatchesTriads) {
  using plan::DType;
  const int64_t batch = 2, seq = 128, heads = 8, headDim = 64;
  cuda::ContextOptions cudnn, triad;
  cudnn.attention = AttentionKernel::Cudnn;
  triad.attention = AttentionKernel::Triad;
  for (DType half : {DType::BF16, DType::F16})
    for (int64_t kvHeads : {4, 8}) {
      plan::MaskCode mask =
          kvHeads == 4 ? plan::MaskCode::Causal : plan::MaskCode::None;
      SCOPED_TRACE(testing::Message()
                   << (half == DType::BF16 ? "bf16" : "f16") << ", " << heads
                   << " heads over " << kvHeads);
      std::string bytes =
          attentionPlan(half, batch, seq, heads, kvHeads, headDim, mask, 0.125);
      std::vector<HostTensor> args =
          attentionArgs(half, batch, seq, heads, kvHeads, headDim, 41);
      cuda::AttentionRouteCounts before = cuda::attentionRouteCounts();
      BothResults throughCudnn = runBoth(bytes, args, {}, false, cudnn);
      SKIP_WITHOUT_GPU();
      EXPECT_EQ(cuda::attentionRouteCounts().cudnnForward,
                before.cudnnForward + 1);
      EXPECT_EQ(cuda::attentionRouteCounts().cudnnBackward,
                before.cudnnBackward + 1);
      BothResults throughTriad = runBoth(bytes, args, {}, false, triad);
      ASSERT_EQ(throughCudnn.gpu.size(), 4u);
      ASSERT_EQ(throughTriad.gpu.size(), 4u);
      const double tolerance = half == DType::BF16 ? 2e-2 : 5e-3;
      const char *names[] = {"out", "dq", "dk", "dv"};
      for (size_t r = 0; r < 4; ++r)
        for (const std::vector<float> *want :
             {&throughTriad.gpu[r].floats, &throughCudnn.cpu[r].floats}) {
          const std::vector<float> &got = throughCudnn.gpu[r].floats;
          ASSERT_EQ(got.size(), want->size()) << names[r];
          double largest = 0.0;
          for (float x : *want)
            largest = std::max(largest, std::fabs(static_cast<double>(x)));
          for (size_t i = 0; i < got.size(); ++i)
            EXPECT_LE(std::fabs(static_cast<double>(got[i]) - (*want)[i]),
                      tolerance * (largest + std::fabs((*want)[i])))
                << names[r] << ", element " << i << ": cuDNN " << got[i] << ", "
                << (want == &throughTriad.gpu[r].floats ? "Triad" : "cpu")
                << " " << (*want)[i];
        }
      EXPECT_EQ(kernelsOfARun(bytes, args, cudnn), 1 + 2);
    }
}

/// --cuda-attention=cudnn on an attention cuDNN does not take (a prefix
/// mask, in bf16) or that runs on f32 values (an f32 plan's) fails the
/// function with an error that names the flag and the reason; under auto
/// the same plans run Triad's kernels.
TEST(CudaExecutor, TheCudnnChoiceRefusesAnAttentionCudnnDoesNotTake) {
  using plan::DType;
  const int64_t batch = 2, seq = 16, heads = 2, headDim = 16;
  for (DType type : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(type == DType::BF16 ? "bf16, prefix mask" : "f32");
    plan::MaskCode mask =
        type == DType::BF16 ? plan::MaskCode::Prefix : plan::MaskCode::Causal;
    PlanBuilder b;
    std::vector<int64_t> shape = {batch, seq, heads * headDim};
    uint32_t q = b.value(type, shape), out = b.value(type, shape);
    uint32_t prefix = b.value(DType::I32, {batch});
    std::vector<uint32_t> inputs = {q, q, q};
    std::vector<uint32_t> args = {q};
    if (mask == plan::MaskCode::Prefix) {
      inputs.push_back(prefix);
      args.push_back(prefix);
    }
    b.instr(OpCode::Attention, inputs, {out},
            {heads, heads, static_cast<int64_t>(mask),
             mask == plan::MaskCode::Prefix ? 1 : 0, 0},
            {0.25});
    std::string bytes = b.build(args, {out});
    std::vector<HostTensor> values = {floats(shape, 51)};
    values[0].dtype = type;
    if (mask == plan::MaskCode::Prefix) {
      HostTensor lengths;
      lengths.dtype = DType::I32;
      lengths.shape = {batch};
      lengths.ints = {4, 16};
      values.push_back(lengths);
    }
    SKIP_WITHOUT_GPU();
    absl::StatusOr<LoadedPlan> loaded = loadPlanFromBytes(bytes, "test.plan");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    for (AttentionKernel kernel :
         {AttentionKernel::Cudnn, AttentionKernel::Auto}) {
      cuda::ContextOptions context;
      context.attention = kernel;
      absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
          CudaExecutor::create(*loaded, 0, 5, {}, context);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      cuda::AttentionRouteCounts before = cuda::attentionRouteCounts();
      absl::StatusOr<std::vector<HostTensor>> results =
          (*gpu)->run("f", values);
      if (kernel == AttentionKernel::Auto) {
        EXPECT_TRUE(results.ok()) << results.status();
        EXPECT_EQ(cuda::attentionRouteCounts().triadForward,
                  before.triadForward + 1);
        continue;
      }
      ASSERT_FALSE(results.ok());
      std::string message(results.status().message());
      EXPECT_NE(message.find("--cuda-attention=cudnn"), std::string::npos)
          << message;
      EXPECT_NE(message.find(type == DType::BF16 ? "prefix masks" : "f32"),
                std::string::npos)
          << message;
    }
  }
}

/// The executor counts the device work of its calls (every kernel launch,
/// cuBLASLt product, copy and memset) and the host's time in them, apart
/// from the time they wait for the GPU: a function of one product, one
/// element-wise kernel and one copy, whose results are read.
TEST(CudaExecutor, CountsTheWorkItIssues) {
  SKIP_WITHOUT_GPU();
  PlanBuilder b;
  uint32_t a = b.value(plan::DType::F32, {8, 16});
  uint32_t w = b.value(plan::DType::F32, {16, 4});
  uint32_t product = b.value(plan::DType::F32, {8, 4});
  uint32_t scaled = b.value(plan::DType::F32, {8, 4});
  uint32_t copied = b.value(plan::DType::F32, {8, 4});
  b.instr(OpCode::Matmul, {a, w}, {product}, {0, 0});
  b.instr(OpCode::Scale, {product}, {scaled}, {}, {2.0});
  b.instr(OpCode::Copy, {scaled}, {copied});
  absl::StatusOr<LoadedPlan> loaded =
      loadPlanFromBytes(b.build({a, w}, {copied}), "test.plan");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::create(*loaded, 0, 5);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CudaExecutor &executor = **gpu;
  Executor::HostWork before = executor.hostWork();
  cuda::IssueCounts issued = cuda::issueCounts();
  ASSERT_TRUE(executor.run("f", {floats({8, 16}, 1), floats({16, 4}, 2)}).ok());
  ASSERT_TRUE(executor.finish().ok());
  const cuda::IssueCounts &now = cuda::issueCounts();
  EXPECT_EQ(now.matmuls - issued.matmuls, 1);
  EXPECT_EQ(now.kernels - issued.kernels, 1);
  // Two arguments in, the copy, the result out and the flags of each of
  // the two synchronizations (the results' and finish's).
  EXPECT_EQ(now.copies - issued.copies, 2 + 1 + 1 + 2 * 2);
  EXPECT_EQ(now.ncclCalls, issued.ncclCalls);
  const Executor::HostWork &after = executor.hostWork();
  EXPECT_EQ(after.launches - before.launches, now.total() - issued.total());
  EXPECT_GT(after.callNanos, before.callNanos);
  EXPECT_GT(after.syncNanos, before.syncNanos);
}

/// A 16-bit plan's element-wise instructions (which the CUDA executor runs
/// on the 16-bit values as they are) against the CPU's (which widens them
/// and rounds back): of one 16-bit type and mixed with f32. Sums,
/// products and scaling agree exactly; activations within bf16's and
/// f16's rounding of the CPU's and CUDA's slightly different exp and erf.
TEST(CudaExecutor, SixteenBitElementwiseMatchesTheCpu) {
  using plan::DType;
  for (DType half : {DType::BF16, DType::F16}) {
    PlanBuilder b;
    const int64_t rows = 7, width = 33;
    uint32_t x = b.value(half, {rows, width}), y = b.value(half, {rows, width});
    uint32_t wide = b.value(DType::F32, {rows, width}),
             bias = b.value(DType::F32, {width});
    uint32_t sum = b.value(half, {rows, width}),
             broadcastSum = b.value(half, {rows, width}),
             mixedSum = b.value(DType::F32, {rows, width}),
             product = b.value(half, {rows, width}),
             mixedProduct = b.value(half, {rows, width}),
             scaled = b.value(half, {rows, width}),
             widened = b.value(DType::F32, {rows, width});
    uint32_t act = b.value(half, {rows, width}),
             actGrad = b.value(half, {rows, width}),
             gated = b.value(half, {rows, width}),
             mixedGated = b.value(DType::F32, {rows, width});
    int64_t silu = static_cast<int64_t>(plan::ActivationCode::Silu),
            gelu = static_cast<int64_t>(plan::ActivationCode::Gelu);
    b.instr(OpCode::Add, {x, y}, {sum});
    b.instr(OpCode::Add, {x, bias}, {broadcastSum});
    b.instr(OpCode::Add, {wide, y}, {mixedSum});
    b.instr(OpCode::Mul, {x, y}, {product});
    b.instr(OpCode::Mul, {wide, y}, {mixedProduct});
    b.instr(OpCode::Scale, {x}, {scaled}, {}, {0.37});
    b.instr(OpCode::Scale, {x}, {widened}, {}, {-1.5});
    b.instr(OpCode::Activation, {x}, {act}, {gelu});
    b.instr(OpCode::ActivationGrad, {x, y}, {actGrad}, {silu});
    b.instr(OpCode::Gated, {x, y}, {gated}, {silu});
    b.instr(OpCode::Gated, {x, wide}, {mixedGated}, {gelu});
    HostTensor xArg = floats({rows, width}, 11),
               yArg = floats({rows, width}, 12);
    xArg.dtype = yArg.dtype = half; // rounded to it as they are written
    BothResults results =
        runBoth(b.build({x, y, wide, bias},
                        {sum, broadcastSum, mixedSum, product, mixedProduct,
                         scaled, widened, act, actGrad, gated, mixedGated}),
                {xArg, yArg, floats({rows, width}, 13), floats({width}, 14)});
    SKIP_WITHOUT_GPU();
    ASSERT_EQ(results.cpu.size(), 11u);
    ASSERT_EQ(results.gpu.size(), 11u);
    const char *name = half == DType::BF16 ? "bf16" : "f16";
    for (size_t r = 0; r < 11; ++r) {
      const std::vector<float> &a = results.cpu[r].floats,
                               &g = results.gpu[r].floats;
      ASSERT_EQ(a.size(), g.size());
      // Results 7 and on come from activations: a 16-bit ulp apart at most.
      double rel = r < 7 ? 0.0 : (half == DType::BF16 ? 1e-2 : 2e-3);
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_LE(std::fabs(a[i] - g[i]),
                  rel * std::fabs(a[i]) + (r < 7 ? 0.0 : 1e-6))
            << name << " result " << r << ", element " << i << ": cpu " << a[i]
            << ", gpu " << g[i];
    }
  }
}

/// Builds a 16-bit step of a small language model by hand, every
/// instruction of it one the CUDA executor runs on 16-bit values: the
/// forward pass (embedding, rope, layer and RMS norms, GELU, dropout, the
/// output product and bias, the loss and the rows' log-sum-exp) and the
/// backward pass (the loss gradient, the bias gradient's sum, the product
/// back, dropout, both norm gradients, rope back, the embedding gradient),
/// then the optimizer step's kernels on a 16-bit accumulator (Copy,
/// Accumulate, ScaleBy, Fill, Select, as with grad-accumulation=param).
/// With `widened`, each of those instructions instead reads f32 casts of
/// its 16-bit values and writes f32 results that are cast back: the
/// widening, f32 kernel and rounding that the CUDA executor's typed
/// kernels must match bit for bit.
class SixteenBitStep {
public:
  static constexpr int64_t kBatch = 2, kSeq = 8, kVocab = 40, kHidden = 64,
                           kHeads = 4;

  SixteenBitStep(plan::DType half, bool widened)
      : half(half), widened(widened) {}

  std::string build() {
    using plan::DType;
    const std::vector<int64_t> rows = {kBatch, kSeq},
                               hidden = {kBatch, kSeq, kHidden},
                               logitsShape = {kBatch, kSeq, kVocab},
                               table = {kVocab, kHidden};
    uint32_t tokens = value(DType::I32, rows), labels = value(DType::I32, rows);
    uint32_t wte = value(half, table), gamma = value(half, {kHidden}),
             beta = value(half, {kHidden}),
             wout = value(half, {kHidden, kVocab}),
             bias = value(half, {kVocab});
    int64_t gelu = static_cast<int64_t>(plan::ActivationCode::Gelu);
    std::vector<int64_t> ropeInts = {kHeads, kHidden / kHeads};
    // Forward.
    uint32_t e = value(half, hidden), r = value(half, hidden),
             n = value(half, hidden), q = value(half, hidden),
             g = value(half, hidden), s = value(half, hidden),
             d = value(half, hidden), logits = value(half, logitsShape),
             biased = value(half, logitsShape), loss = value(DType::F32, {}),
             lse = value(half, {kBatch, kSeq, 1});
    run(OpCode::Embedding, {tokens, wte}, {e});
    run(OpCode::Rope, {e}, {r}, ropeInts, {10000.0, 1.0});
    run(OpCode::LayerNorm, {r, gamma, beta}, {n}, {}, {1e-5});
    run(OpCode::RmsNorm, {r, gamma}, {q}, {}, {1e-5});
    run(OpCode::Activation, {q}, {g}, {gelu});
    run(OpCode::Add, {n, g}, {s});
    run(OpCode::Dropout, {s}, {d}, {3, 0}, {0.25});
    b.instr(OpCode::Matmul, {d, wout}, {logits}, {0, 0});
    run(OpCode::Add, {logits, bias}, {biased});
    run(OpCode::CrossEntropy, {biased, labels}, {loss}, {-100});
    run(OpCode::LogSumExp, {biased}, {lse});
    // Backward.
    uint32_t one = value(DType::F32, {}), dlogits = value(half, logitsShape),
             dbias = value(half, {kVocab}), dd = value(half, hidden),
             ds = value(half, hidden), dn = value(half, hidden),
             dq = value(half, hidden), dgammaLayer = value(half, {kHidden}),
             dgammaRms = value(half, {kHidden}), dr = value(half, hidden),
             de = value(half, hidden), dwte = value(half, table);
    b.instr(OpCode::Fill, {}, {one}, {}, {1.0});
    run(OpCode::CrossEntropyGrad, {biased, labels, one}, {dlogits}, {-100});
    run(OpCode::Sum, {dlogits}, {dbias}, {}, {1.0});
    b.instr(OpCode::Matmul, {dlogits, wout}, {dd}, {0, 1});
    run(OpCode::Dropout, {dd}, {ds}, {3, 0}, {0.25});
    run(OpCode::LayerNormGrad, {r, gamma, ds}, {dn, dgammaLayer}, {}, {1e-5});
    run(OpCode::RmsNormGrad, {r, gamma, ds}, {dq, dgammaRms}, {}, {1e-5});
    run(OpCode::Add, {dn, dq}, {dr});
    run(OpCode::Rope, {dr}, {de}, ropeInts, {10000.0, -1.0});
    run(OpCode::EmbeddingGrad, {tokens, de}, {dwte});
    // The optimizer step's kernels on a 16-bit accumulator.
    uint32_t acc = value(half, table), scale = value(DType::F32, {}),
             flag = value(DType::F32, {}), filled = value(half, {kVocab}),
             chosen = value(half, table);
    b.instr(OpCode::Copy, {wte}, {acc});
    run(OpCode::Accumulate, {acc, dwte, one}, {acc});
    b.instr(OpCode::Fill, {}, {scale}, {}, {0.375});
    run(OpCode::ScaleBy, {acc, scale}, {acc});
    run(OpCode::Fill, {}, {filled}, {}, {0.1});
    b.instr(OpCode::Fill, {}, {flag}, {}, {1.0});
    run(OpCode::Select, {flag, acc, wte}, {chosen});
    return b.build({tokens, labels, wte, gamma, beta, wout, bias},
                   {loss, lse, biased, dlogits, dbias, dgammaLayer, dgammaRms,
                    dwte, acc, filled, chosen},
                   kVocab);
  }

  /// The arguments of the step's function.
  std::vector<HostTensor> args() const {
    HostTensor tokens, labels;
    tokens.dtype = labels.dtype = plan::DType::I32;
    tokens.shape = labels.shape = {kBatch, kSeq};
    for (int64_t i = 0; i < kBatch * kSeq; ++i) {
      tokens.ints.push_back(static_cast<int32_t>((i * 7 + 3) % kVocab));
      labels.ints.push_back(static_cast<int32_t>((i * 11 + 5) % kVocab));
    }
    labels.ints[4] = -100;
    std::vector<HostTensor> all = {tokens, labels};
    // wte, gamma, beta, wout and bias; wout and bias small enough that
    // the softmax is not one-hot.
    const std::vector<std::pair<std::vector<int64_t>, float>> tensors = {
        {{kVocab, kHidden}, 1.0f},
        {{kHidden}, 1.0f},
        {{kHidden}, 1.0f},
        {{kHidden, kVocab}, 0.125f},
        {{kVocab}, 0.1f}};
    uint32_t seed = 20;
    for (const auto &[shape, scale] : tensors) {
      HostTensor t = floats(shape, seed++);
      for (float &v : t.floats)
        v *= scale;
      t.dtype = half; // rounded to it as it is written
      all.push_back(t);
    }
    return all;
  }

  /// The names of the step's results, in order.
  static const std::vector<std::string> &resultNames() {
    static const std::vector<std::string> names = {"loss",
                                                   "log-sum-exp",
                                                   "biased logits",
                                                   "dlogits",
                                                   "dbias",
                                                   "layer norm dgamma",
                                                   "rms norm dgamma",
                                                   "dwte",
                                                   "accumulator",
                                                   "filled",
                                                   "selected"};
    return names;
  }

private:
  uint32_t value(plan::DType dtype, std::vector<int64_t> shape) {
    uint32_t index = b.value(dtype, shape);
    types.push_back(dtype);
    shapes.push_back(std::move(shape));
    return index;
  }

  /// `op` as it is, or (widened) on f32 copies of its 16-bit values, an
  /// operand that is also a result (an update in place) one copy.
  void run(OpCode op, std::vector<uint32_t> in, std::vector<uint32_t> out,
           std::vector<int64_t> ints = {}, std::vector<double> floats = {}) {
    if (!widened) {
      b.instr(op, in, out, ints, floats);
      return;
    }
    std::map<uint32_t, uint32_t> copies;
    auto wide = [&](uint32_t index, bool read) {
      if (types[index] != half)
        return index;
      auto [at, added] = copies.emplace(index, 0);
      if (added) {
        at->second = value(plan::DType::F32, shapes[index]);
        if (read)
          b.instr(OpCode::Cast, {index}, {at->second});
      }
      return at->second;
    };
    std::vector<uint32_t> wideIn, wideOut;
    for (uint32_t index : in)
      wideIn.push_back(wide(index, true));
    for (uint32_t index : out)
      wideOut.push_back(wide(index, false));
    b.instr(op, wideIn, wideOut, ints, floats);
    for (size_t i = 0; i < out.size(); ++i)
      if (wideOut[i] != out[i])
        b.instr(OpCode::Cast, {wideOut[i]}, {out[i]});
  }

  plan::DType half;
  bool widened;
  PlanBuilder b;
  std::vector<plan::DType> types;
  std::vector<std::vector<int64_t>> shapes;
};

/// Every result with the same bits (`what` names the two runs).
void expectSameBits(const std::vector<HostTensor> &a,
                    const std::vector<HostTensor> &b, const std::string &what) {
  const std::vector<std::string> &names = SixteenBitStep::resultNames();
  ASSERT_EQ(a.size(), names.size()) << what;
  ASSERT_EQ(b.size(), names.size()) << what;
  for (size_t r = 0; r < names.size(); ++r) {
    ASSERT_EQ(a[r].floats.size(), b[r].floats.size()) << what;
    for (size_t i = 0; i < a[r].floats.size(); ++i)
      EXPECT_EQ(std::memcmp(&a[r].floats[i], &b[r].floats[i], sizeof(float)), 0)
          << what << ", " << names[r] << ", element " << i << ": "
          << a[r].floats[i] << " and " << b[r].floats[i];
  }
}

/// A 16-bit step (SixteenBitStep) on the GPU: its results are those of the
/// same step with every kernel on f32 copies, bit for bit (the typed
/// kernels keep the f32 kernels' arithmetic and round each result once),
/// and those of the CPU backend within a few 16-bit roundings of each
/// result's largest value (the products and the CPU's exp and erf round
/// differently in the last bit, and the backward pass carries such a
/// difference on). On the CPU, which runs every kernel on f32 copies, the
/// two steps agree bit for bit: the check of the reference itself.
TEST(CudaExecutor, SixteenBitStepRunsOnItsValuesAsTheyAre) {
  using plan::DType;
  for (DType half : {DType::BF16, DType::F16}) {
    std::string name = half == DType::BF16 ? "bf16" : "f16";
    SixteenBitStep step(half, /*widened=*/false),
        reference(half, /*widened=*/true);
    std::vector<HostTensor> args = step.args();
    BothResults results = runBoth(step.build(), args);
    BothResults wide = runBoth(reference.build(), args);
    expectSameBits(results.cpu, wide.cpu,
                   name + " on the CPU, as it is and widened");
    if (!haveGpu())
      continue;
    expectSameBits(results.gpu, wide.gpu,
                   name + " on the GPU, typed and widened");
    const std::vector<std::string> &names = SixteenBitStep::resultNames();
    ASSERT_EQ(results.gpu.size(), names.size()) << name;
    double rel = half == DType::BF16 ? 5e-2 : 1e-2;
    for (size_t r = 0; r < names.size(); ++r) {
      const std::vector<float> &gpu = results.gpu[r].floats,
                               &cpu = results.cpu[r].floats;
      ASSERT_EQ(gpu.size(), cpu.size()) << name << " " << names[r];
      double largest = 0.0;
      for (float v : cpu)
        largest = std::max(largest, std::fabs(static_cast<double>(v)));
      for (size_t i = 0; i < gpu.size(); ++i)
        EXPECT_LE(std::fabs(static_cast<double>(gpu[i]) - cpu[i]),
                  rel * largest)
            << name << " " << names[r] << ", element " << i << ": gpu "
            << gpu[i] << ", cpu " << cpu[i];
    }
  }
  SKIP_WITHOUT_GPU();
}

TEST(CudaExecutor, StepScalarsMatchTheCpuExactly) {
  PlanBuilder b;
  uint32_t step = b.value(plan::DType::F32, {});
  uint32_t sumSquares = b.value(plan::DType::F32, {});
  uint32_t scale = b.value(plan::DType::F32, {});
  uint32_t good = b.value(plan::DType::F32, {});
  uint32_t warm = b.value(plan::DType::F32, {}),
           cosine = b.value(plan::DType::F32, {}),
           flat = b.value(plan::DType::F32, {});
  uint32_t coefficient = b.value(plan::DType::F32, {}),
           norm = b.value(plan::DType::F32, {});
  uint32_t unclipped = b.value(plan::DType::F32, {}),
           unclippedNorm = b.value(plan::DType::F32, {});
  uint32_t skip = b.value(plan::DType::F32, {}),
           nextScale = b.value(plan::DType::F32, {}),
           nextGood = b.value(plan::DType::F32, {}),
           inverse = b.value(plan::DType::F32, {});
  uint32_t inverseStep = b.value(plan::DType::F32, {}),
           inverseZero = b.value(plan::DType::F32, {}),
           zero = b.value(plan::DType::F32, {});
  uint32_t x = b.value(plan::DType::F32, {5}),
           y = b.value(plan::DType::F32, {5}),
           chosen = b.value(plan::DType::F32, {5}),
           scaled = b.value(plan::DType::F32, {5}),
           acc = b.value(plan::DType::F32, {5});
  uint32_t labels = b.value(plan::DType::I32, {6}),
           valid = b.value(plan::DType::F32, {});
  b.instr(OpCode::LrSchedule, {step}, {warm}, {10, 100}, {1e-3, 1e-4});
  b.instr(OpCode::LrSchedule, {step}, {cosine}, {2, 100}, {1e-3, 1e-4});
  b.instr(OpCode::LrSchedule, {step}, {flat}, {0, 0}, {1e-3, 1e-4});
  b.instr(OpCode::ClipCoefficient, {sumSquares}, {coefficient, norm}, {},
          {1.0});
  b.instr(OpCode::ClipCoefficient, {sumSquares}, {unclipped, unclippedNorm}, {},
          {0.0});
  b.instr(OpCode::LossScaleUpdate, {sumSquares, scale, good},
          {skip, nextScale, nextGood, inverse}, {3}, {2.0, 0.5});
  b.instr(OpCode::Reciprocal, {step}, {inverseStep});
  b.instr(OpCode::Fill, {}, {zero}, {}, {0.0});
  b.instr(OpCode::Reciprocal, {zero}, {inverseZero});
  b.instr(OpCode::Select, {skip, x, y}, {chosen});
  b.instr(OpCode::ScaleBy, {x, coefficient}, {scaled});
  b.instr(OpCode::Fill, {}, {acc}, {}, {0.25});
  b.instr(OpCode::Accumulate, {acc, y, norm}, {acc});
  b.instr(OpCode::CountValid, {labels}, {valid}, {-100});
  std::string bytes =
      b.build({step, sumSquares, scale, good, x, y, labels},
              {warm, cosine, flat, coefficient, norm, unclipped, unclippedNorm,
               skip, nextScale, nextGood, inverse, inverseStep, inverseZero,
               chosen, scaled, acc, valid});
  HostTensor labelValues;
  labelValues.dtype = plan::DType::I32;
  labelValues.shape = {6};
  labelValues.ints = {1, -100, 3, 4, -100, 0};
  for (float stepValue : {3.0f, 57.0f, 140.0f})
    for (float squares : {0.25f, 9.0f, std::numeric_limits<float>::infinity()})
      for (float goodSteps : {0.0f, 2.0f}) {
        SCOPED_TRACE(testing::Message() << "step " << stepValue << ", sum "
                                        << squares << ", good " << goodSteps);
        BothResults results =
            runBoth(bytes, {scalar(stepValue), scalar(squares), scalar(1024.0f),
                            scalar(goodSteps), floats({5}, 3), floats({5}, 4),
                            labelValues});
        if (haveGpu())
          expectIdentical(results);
      }
  // The learning-rate override scales the floor alike on both.
  ExecutorOptions options;
  options.peakLearningRate = 3e-4;
  BothResults results =
      runBoth(bytes,
              {scalar(57.0f), scalar(1.0f), scalar(8.0f), scalar(0.0f),
               floats({5}, 5), floats({5}, 6), labelValues},
              options);
  SKIP_WITHOUT_GPU();
  expectIdentical(results);
}

const std::string &corpusPath() {
  static const std::string path = [] {
    std::string bytes;
    PhiloxKey key{5, 6};
    for (uint32_t i = 0; i < 4000; ++i) {
      auto token = static_cast<uint16_t>(philox4x32({i, 0, 0, 0}, key)[0] % 32);
      bytes.push_back(static_cast<char>(token & 0xff));
      bytes.push_back(static_cast<char>(token >> 8));
    }
    std::string file = ::testing::TempDir() + "triad-cuda-corpus-" +
                       std::to_string(getpid()) + ".bin";
    EXPECT_TRUE(writeFileAtomically(file, bytes).ok());
    return file;
  }();
  return path;
}

struct Training {
  LoadedPlan plan;
  std::unique_ptr<TokenFile> data;
  std::unique_ptr<Trainer> trainer;

  /// With `traceOnDevice`, every step is traced, its instructions timed on
  /// the device (TrainerOptions::deviceTimes).
  static std::unique_ptr<Training> create(Backend backend, bool nccl = false,
                                          bool graphs = false,
                                          bool traceOnDevice = false) {
    auto run = std::make_unique<Training>();
    tests::TrainingPlanSpec spec;
    // Through NCCL, the apply step's collectives run over groups of one.
    spec.dpCollectives = nccl;
    absl::StatusOr<LoadedPlan> plan =
        loadPlanFromBytes(tests::buildTrainingPlan(spec), "training.plan");
    EXPECT_TRUE(plan.ok()) << plan.status();
    run->plan = std::move(*plan);
    absl::StatusOr<TokenFile> data =
        TokenFile::open(corpusPath(), TokenWidth::U16, spec.vocab);
    EXPECT_TRUE(data.ok()) << data.status();
    run->data = std::make_unique<TokenFile>(std::move(*data));
    TrainerOptions options;
    options.seed = 11;
    options.device.backend = backend;
    options.device.nccl = nccl;
    options.device.cudaGraphs = graphs;
    options.trace = options.deviceTimes = traceOnDevice;
    options.traceLastStep = 1000;
    absl::StatusOr<Trainer> trainer =
        Trainer::create(run->plan, *run->data, options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok())
      return nullptr;
    run->trainer = std::make_unique<Trainer>(std::move(*trainer));
    return run;
  }

  std::vector<StepResult> steps(int count) {
    std::vector<StepResult> results;
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<StepResult> result = trainer->step();
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok())
        break;
      results.push_back(*result);
    }
    return results;
  }
};

void expectSameSteps(const std::vector<StepResult> &a,
                     const std::vector<StepResult> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_NEAR(a[i].loss, b[i].loss, 1e-5 * std::fabs(a[i].loss))
        << "step " << a[i].step;
    EXPECT_NEAR(a[i].gradNorm, b[i].gradNorm, 1e-5 * std::fabs(a[i].gradNorm))
        << "step " << a[i].step;
    EXPECT_EQ(a[i].lr, b[i].lr) << "step " << a[i].step;
  }
}

TEST(CudaExecutor, TrainsLikeTheCpu) {
  std::unique_ptr<Training> cpu = Training::create(Backend::Cpu);
  ASSERT_TRUE(cpu);
  std::vector<StepResult> expected = cpu->steps(6);
  ASSERT_EQ(expected.size(), 6u);
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Training> gpu = Training::create(Backend::Cuda);
  ASSERT_TRUE(gpu);
  EXPECT_STREQ(gpu->trainer->executor().backend(), "cuda");
  std::vector<StepResult> trained = gpu->steps(6);
  expectSameSteps(expected, trained);
  // Each step reports the device work it issued and the host's time in
  // its calls, apart from its waits for the GPU; the CPU issues none.
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_EQ(expected[i].launches, 0);
    EXPECT_GT(trained[i].launches, 0) << "step " << i + 1;
    EXPECT_GT(trained[i].hostSeconds, 0.0);
    EXPECT_GT(trained[i].syncSeconds, 0.0);
    EXPECT_LE(trained[i].hostSeconds + trained[i].syncSeconds,
              trained[i].seconds);
    // Every step runs the same instructions (the first also uploads the
    // tables its kernels keep resident).
    if (i > 0)
      EXPECT_EQ(trained[i].launches, trained.back().launches);
  }
  for (const char *name : {"wte", "wout", "adam.m.wte", "adam.v.wout"}) {
    absl::StatusOr<std::vector<float>> a =
        cpu->trainer->executor().readPersistent(name);
    absl::StatusOr<std::vector<float>> b =
        gpu->trainer->executor().readPersistent(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i)
      EXPECT_NEAR((*a)[i], (*b)[i], 1e-5 * (1.0 + std::fabs((*a)[i])))
          << name << "[" << i << "]";
  }
}

// The same on one rank through NCCL (its communicators over groups of one:
// what runs here is the bootstrap and the device-buffer collectives).
TEST(CudaExecutor, TrainsLikeTheCpuThroughNccl) {
  std::unique_ptr<Training> cpu = Training::create(Backend::Cpu);
  ASSERT_TRUE(cpu);
  std::vector<StepResult> expected = cpu->steps(4);
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Training> gpu = Training::create(Backend::Cuda, true);
  ASSERT_TRUE(gpu);
  expectSameSteps(expected, gpu->steps(4));
}

/// Traced steps timed on the device (triad-run's --trace-device) train as
/// untraced ones and give every instruction one span on the device, on the
/// host's clock: within its step and, on the compute stream, one after the
/// other (a stream runs its work in order). The collectives (NCCL on one rank)
/// have theirs on the communication stream.
void expectDeviceSpans(bool nccl) {
  std::unique_ptr<Training> plain = Training::create(Backend::Cuda, nccl);
  std::unique_ptr<Training> traced =
      Training::create(Backend::Cuda, nccl, false, /*traceOnDevice=*/true);
  ASSERT_TRUE(plain && traced);
  std::vector<StepResult> expected = plain->steps(3);
  std::vector<StepResult> steps = traced->steps(3);
  ASSERT_EQ(steps.size(), 3u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].loss, expected[i].loss) << "step " << i + 1;
    EXPECT_EQ(steps[i].gradNorm, expected[i].gradNorm) << "step " << i + 1;
    const std::vector<TraceEvent> &events = steps[i].events;
    ASSERT_FALSE(events.empty());
    const TraceEvent &step = events.front();
    ASSERT_EQ(step.category, "step");
    std::vector<const TraceEvent *> compute;
    size_t communication = 0, instructions = 0;
    for (const TraceEvent &event : events) {
      if (event.category == "instruction" && event.name.rfind("wait ", 0) != 0)
        ++instructions;
      if (event.category != "device" &&
          event.category != "device communication")
        continue;
      EXPECT_FALSE(event.call.empty()) << event.name;
      EXPECT_GE(event.instruction, 0) << event.name;
      EXPECT_GE(event.durationMicros, 0.0) << event.name;
      // Within the step (to the clocks' tie, a few microseconds).
      EXPECT_GE(event.beginMicros, step.beginMicros - 50) << event.name;
      EXPECT_LE(event.beginMicros + event.durationMicros,
                step.beginMicros + step.durationMicros + 50)
          << event.name;
      if (event.category == "device")
        compute.push_back(&event);
      else
        ++communication;
    }
    EXPECT_EQ(compute.size() + communication, instructions)
        << "step " << i + 1 << ": one device span per instruction";
    if (nccl)
      EXPECT_GT(communication, 0u) << "step " << i + 1;
    else
      EXPECT_EQ(communication, 0u) << "step " << i + 1;
    std::sort(compute.begin(), compute.end(),
              [](const TraceEvent *a, const TraceEvent *b) {
                return a->beginMicros < b->beginMicros;
              });
    for (size_t k = 1; k < compute.size(); ++k)
      EXPECT_GE(compute[k]->beginMicros, compute[k - 1]->beginMicros +
                                             compute[k - 1]->durationMicros -
                                             1.0)
          << "step " << i + 1 << ": " << compute[k - 1]->name << " and "
          << compute[k]->name << " overlap on one stream";
  }
}

TEST(CudaExecutor, TracedStepsTimeEachInstructionOnTheDevice) {
  SKIP_WITHOUT_GPU();
  expectDeviceSpans(/*nccl=*/false);
}

TEST(CudaExecutor, TracedStepsTimeCollectivesOnTheCommunicationStream) {
  SKIP_WITHOUT_GPU();
  expectDeviceSpans(/*nccl=*/true);
}

/// Steps whose calls are recorded once as CUDA graphs and replayed give the
/// bits of the steps run kernel by kernel (dropout's masks drawn for each
/// replayed call's step and microbatch, read from the device), with far
/// fewer launches once recorded: the first step runs kernel by kernel, the
/// second records each function (begin_step, microbatch_step, apply_step),
/// and the later ones replay, one launch per call and no kernel outside
/// the graphs.
void expectGraphsGiveTheSameBits(bool nccl) {
  std::unique_ptr<Training> direct = Training::create(Backend::Cuda, nccl);
  std::unique_ptr<Training> graphs =
      Training::create(Backend::Cuda, nccl, /*graphs=*/true);
  ASSERT_TRUE(direct && graphs);
  std::vector<StepResult> expected = direct->steps(6);
  // Each function's first call runs kernel by kernel and its second is
  // recorded (microbatch_step's in step 1, the others' in step 2): from
  // step 3 on no kernel or product is launched but from the graphs, one
  // per call (begin_step, two microbatches, apply_step).
  std::vector<StepResult> replayed = graphs->steps(2);
  for (int step = 3; step <= 6; ++step) {
    cuda::IssueCounts before = cuda::issueCounts();
    std::vector<StepResult> one = graphs->steps(1);
    ASSERT_EQ(one.size(), 1u);
    replayed.push_back(one[0]);
    const cuda::IssueCounts &after = cuda::issueCounts();
    EXPECT_EQ(after.graphs - before.graphs, 4) << "step " << step;
    EXPECT_EQ(after.kernels - before.kernels, 0) << "step " << step;
    EXPECT_EQ(after.matmuls - before.matmuls, 0) << "step " << step;
    EXPECT_LT(one[0].launches, expected[step - 1].launches) << "step " << step;
  }
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(replayed.size(), 6u);
  auto &executor = static_cast<CudaExecutor &>(graphs->trainer->executor());
  EXPECT_EQ(executor.callsNotRecorded(), std::vector<std::string>{});
  EXPECT_EQ(executor.recordedCalls(), 3u);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(replayed[i].loss, expected[i].loss) << "step " << i + 1;
    EXPECT_EQ(replayed[i].gradNorm, expected[i].gradNorm) << "step " << i + 1;
    EXPECT_EQ(replayed[i].lr, expected[i].lr) << "step " << i + 1;
  }
  for (const char *name : {"wte", "wout", "adam.m.wte", "adam.v.wout"}) {
    absl::StatusOr<std::vector<float>> a =
        direct->trainer->executor().readPersistent(name);
    absl::StatusOr<std::vector<float>> b =
        graphs->trainer->executor().readPersistent(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(*a, *b) << name;
  }
}

TEST(CudaExecutor, RecordedCallsGiveTheBitsOfDirectOnes) {
  SKIP_WITHOUT_GPU();
  expectGraphsGiveTheSameBits(/*nccl=*/false);
}

// (Over NCCL on one rank the training plan has no collective: the NCCL
// communicators exist but the recordings hold no NCCL call; the collectives
// are recorded below.)
TEST(CudaExecutor, RecordedCallsThroughNcclGiveTheBitsOfDirectOnes) {
  SKIP_WITHOUT_GPU();
  expectGraphsGiveTheSameBits(/*nccl=*/true);
}

/// The plan's collectives through NCCL on one rank (groups of one member,
/// but the bootstrap, the staging, the packing of pieces along inner
/// dimensions and the two streams of a larger job) against the CPU's:
/// bit for bit, since over one member every collective moves values
/// unchanged, and f32 pieces pass through f32 staging exactly. Each
/// collective's output is read, and one's input overwritten, right after
/// it, so an ordering between the compute stream and the communication
/// stream that is missing shows as wrong values. `half` (BF16, F16) makes
/// the collectives' tensors 16-bit (widened to f32, moved and rounded back
/// on the communication stream); an f32 bucket runs beside them.
std::string collectivePlan(plan::DType half) {
  PlanBuilder b;
  b.groups = {{"dp"}};
  uint32_t x = b.value(half, {4, 6}), w = b.value(plan::DType::F32, {4, 6});
  uint32_t y = b.value(half, {4, 6}), gathered = b.value(half, {4, 6}),
           scattered = b.value(half, {4, 6}), cube = b.value(half, {2, 4, 3}),
           swapped = b.value(half, {2, 4, 3}), sum = b.value(half, {2, 4, 3});
  uint32_t wGathered = b.value(plan::DType::F32, {4, 6}),
           v = b.value(plan::DType::F32, {4, 6}),
           vGathered = b.value(plan::DType::F32, {4, 6});
  // A product rounded to 16 bits, reduced in place.
  b.instr(OpCode::Scale, {x}, {y}, {}, {0.37});
  b.instr(OpCode::AllReduce, {y}, {y}, {0});
  // Pieces along dimension 1 (packed into blocks and joined back).
  b.instr(OpCode::AllGather, {y}, {gathered}, {0, 1});
  b.instr(OpCode::ReduceScatter, {gathered}, {scattered}, {0, 1});
  b.instr(OpCode::Copy, {scattered}, {cube});
  // Split along 1 and joined along 2: packed on both sides.
  b.instr(OpCode::AllToAll, {cube}, {swapped}, {0, 1, 2});
  // The all-to-all's output read at once; the all-gather's input
  // overwritten while the later collectives may still run.
  b.instr(OpCode::Add, {swapped, cube}, {sum});
  b.instr(OpCode::Scale, {x}, {y}, {}, {-2.0});
  // An f32 bucket of two all-gathers along dimension 1.
  b.instr(OpCode::Scale, {w}, {v}, {}, {3.0});
  b.instr(OpCode::AllGather, {w, v}, {wGathered, vGathered}, {0, 1, 1});
  b.instr(OpCode::Add, {wGathered, wGathered}, {w});
  return b.build(
      {x, w}, {y, gathered, scattered, swapped, sum, wGathered, vGathered, w});
}

TEST(CudaExecutor, CollectivesThroughNcclMatchTheCpuExactly) {
  using plan::DType;
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (bool overlap : {true, false}) {
      SCOPED_TRACE(testing::Message()
                   << plan::EnumNameDType(dtype)
                   << (overlap ? ", overlapped" : ", one at a time"));
      HostTensor x = floats({4, 6}, 21), w = floats({4, 6}, 22);
      x.dtype = dtype; // rounded to it as it is written
      ExecutorOptions options;
      options.overlapCollectives = overlap;
      BothResults results =
          runBoth(collectivePlan(dtype), {x, w}, options, /*nccl=*/true);
      ASSERT_EQ(results.cpu.size(), 8u);
      if (haveGpu())
        expectIdentical(results);
    }
  SKIP_WITHOUT_GPU();
}

/// The same with the call recorded as a CUDA graph (its NCCL calls, and
/// the packing and widening around them, on the communication stream
/// joined to the compute stream) and replayed.
TEST(CudaExecutor, RecordedCollectivesThroughNcclMatchTheCpuExactly) {
  using plan::DType;
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::F32, DType::BF16})
    for (bool overlap : {true, false}) {
      SCOPED_TRACE(testing::Message()
                   << plan::EnumNameDType(dtype)
                   << (overlap ? ", overlapped" : ", one at a time"));
      HostTensor x = floats({4, 6}, 21), w = floats({4, 6}, 22);
      x.dtype = dtype;
      ExecutorOptions options;
      options.overlapCollectives = overlap;
      BothResults results =
          runBoth(collectivePlan(dtype), {x, w}, options, /*nccl=*/true, {},
                  /*recordCalls=*/true);
      ASSERT_EQ(results.cpu.size(), 8u);
      if (haveGpu())
        expectIdentical(results);
    }
  SKIP_WITHOUT_GPU();
}

/// A bucket of all-gathers or reduce-scatters over NCCL is one NCCL group
/// (one operation, not one per tensor): its tensors are packed into pieces
/// (dimension 1) and widened (16-bit) each into its own part of the
/// staging buffers before it, and unpacked and rounded back after it. On
/// one rank the results are the CPU's bits, for f32, bf16 and f16 buckets
/// mixing dimensions 0 and 1.
TEST(CudaExecutor, ABucketIsOneNcclGroup) {
  using plan::DType;
  for (DType type : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(plan::EnumNameDType(type));
    PlanBuilder b;
    b.groups = {{"dp"}};
    uint32_t x = b.value(type, {4, 6}), w = b.value(type, {3, 5});
    uint32_t y = b.value(type, {4, 6}), v = b.value(type, {3, 5}),
             gy = b.value(type, {4, 6}), gv = b.value(type, {3, 5}),
             sy = b.value(type, {4, 6}), sv = b.value(type, {3, 5});
    b.instr(OpCode::Scale, {x}, {y}, {}, {0.37});
    b.instr(OpCode::Scale, {w}, {v}, {}, {-1.5});
    b.instr(OpCode::AllGather, {y, v}, {gy, gv}, {0, 1, 0});
    b.instr(OpCode::ReduceScatter, {gy, gv}, {sy, sv}, {0, 0, 1});
    std::string bytes = b.build({x, w}, {gy, gv, sy, sv});
    HostTensor hx = floats({4, 6}, 41), hw = floats({3, 5}, 42);
    hx.dtype = hw.dtype = type;
    BothResults results = runBoth(bytes, {hx, hw}, {}, /*nccl=*/true);
    ASSERT_EQ(results.cpu.size(), 4u);
    if (!haveGpu())
      continue;
    expectIdentical(results);
    absl::StatusOr<LoadedPlan> loaded = loadPlanFromBytes(bytes, "test.plan");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
        CudaExecutor::create(*loaded, 0, 5, {}, {}, /*nccl=*/true);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    cuda::IssueCounts issued = cuda::issueCounts();
    ASSERT_TRUE((*gpu)->run("f", {hx, hw}).ok());
    ASSERT_TRUE((*gpu)->finish().ok());
    // The two buckets, one group each.
    EXPECT_EQ(cuda::issueCounts().ncclCalls - issued.ncclCalls, 2);
  }
  SKIP_WITHOUT_GPU();
}

// A wait for NCCL's work polls: past its timeout it aborts the
// communicators, and every later call fails with the reason.
TEST(NcclCommunicator, AWaitThatTimesOutAbortsEveryCommunicator) {
  SKIP_WITHOUT_GPU();
  LocalCommunicator host(/*groups=*/2);
  absl::StatusOr<std::unique_ptr<nccl::NcclCommunicator>> comm =
      nccl::NcclCommunicator::create(host, std::chrono::milliseconds(100),
                                     {"[dp]", "[tp]"});
  ASSERT_TRUE(comm.ok()) << comm.status();
  // Device work that never completes, as when a peer has died mid-way.
  absl::Status waited = (*comm)->wait("a collective whose peer never comes",
                                      [] { return false; });
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_NE(waited.message().find("a collective whose peer never comes did "
                                  "not complete within 100 ms"),
            std::string::npos)
      << waited;
  EXPECT_NE(waited.message().find("NCCL's communicators were aborted"),
            std::string::npos)
      << waited;
  EXPECT_TRUE((*comm)->aborted());
  // Every later call says why it cannot run.
  absl::Status after =
      (*comm)->allReduceSum(1, nullptr, nullptr, 0, /*stream=*/nullptr);
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  EXPECT_NE(after.message().find("aborted after an earlier failure: a "
                                 "collective whose peer never comes"),
            std::string::npos)
      << after;
}

TEST(NcclBootstrap, UniqueIdsSurviveTheFloatRoundTrip) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>((i * 37 + 200) % 256);
  std::vector<float> values = nccl::idToFloats(id);
  ASSERT_EQ(values.size(), sizeof(id.internal));
  for (float v : values)
    EXPECT_TRUE(v >= 0.0f && v <= 255.0f && v == std::floor(v));
  ncclUniqueId back = nccl::idFromFloats(values.data());
  EXPECT_EQ(std::memcmp(id.internal, back.internal, sizeof(id.internal)), 0);
}

TEST(CudaExecutor, CheckpointsMoveBetweenBackends) {
  SKIP_WITHOUT_GPU();
  std::string dir = ::testing::TempDir() + "triad-cuda-checkpoint-" +
                    std::to_string(getpid());
  ASSERT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  std::unique_ptr<Training> straight = Training::create(Backend::Cpu);
  ASSERT_TRUE(straight);
  std::vector<StepResult> expected = straight->steps(6);
  std::unique_ptr<Training> gpu = Training::create(Backend::Cuda);
  ASSERT_TRUE(gpu);
  gpu->steps(3);
  ASSERT_TRUE(gpu->trainer->save(dir).ok());
  std::unique_ptr<Training> resumed = Training::create(Backend::Cpu);
  ASSERT_TRUE(resumed);
  absl::Status loaded = resumed->trainer->load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded;
  expectSameSteps(std::vector<StepResult>(expected.begin() + 3, expected.end()),
                  resumed->steps(3));
  // And back onto the GPU.
  std::unique_ptr<Training> back = Training::create(Backend::Cuda);
  ASSERT_TRUE(back);
  loaded = back->trainer->load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded;
  expectSameSteps(std::vector<StepResult>(expected.begin() + 3, expected.end()),
                  back->steps(3));
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
}

/// A plan of one function, "f", that looks 3 token ids up in a table of 4
/// rows of 2, returning the rows or (without `returnsRows`) nothing.
absl::StatusOr<LoadedPlan> embeddingLookup(bool returnsRows) {
  PlanBuilder b;
  uint32_t ids = b.value(plan::DType::I32, {3});
  uint32_t table = b.value(plan::DType::F32, {4, 2});
  uint32_t out = b.value(plan::DType::F32, {3, 2});
  b.persistent("table", table, {4, 2}, {0, 0}, 0.5);
  b.instr(OpCode::Embedding, {ids, table}, {out});
  return loadPlanFromBytes(b.build({ids}, returnsRows
                                              ? std::vector<uint32_t>{out}
                                              : std::vector<uint32_t>{}),
                           "test.plan");
}

/// The token ids embeddingLookup's function takes.
HostTensor tokenIds(std::vector<int32_t> ids) {
  HostTensor tensor;
  tensor.dtype = plan::DType::I32;
  tensor.shape = {static_cast<int64_t>(ids.size())};
  tensor.ints = std::move(ids);
  return tensor;
}

TEST(CudaExecutor, ABadTokenIdFailsTheFunction) {
  absl::StatusOr<LoadedPlan> plan = embeddingLookup(/*returnsRows=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::create(*plan, 0, 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<std::vector<HostTensor>> result =
      (*gpu)->run("f", {tokenIds({0, 4, 1})});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("token id is outside"),
            std::string::npos)
      << result.status();
  // The executor goes on: a good call after it works.
  EXPECT_TRUE((*gpu)->run("f", {tokenIds({0, 3, 1})}).ok());
}

// An all-slice along the first dimension of a tensor above 2 GiB (a
// 128k x 8192 f32 embedding is 4 GiB): one row of the two-dimensional copy,
// whose pitch would be the whole tensor, which cudaMemcpy2DAsync refuses
// above 2 GiB (memPitch), so a plain copy. Rank 0 of tp=2 (AllSlice needs
// no communicator) takes the first half of a 3 GiB tensor broadcast from a
// column of small integers; each row of its piece sums to its value times
// the columns, exactly. GPU only: the tensors take 4.5 GiB.
TEST(CudaExecutor, AllSliceAboveTwoGiBCopiesItsPiece) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 24576, columns = 32768; // 3 GiB of f32
  PlanBuilder b;
  b.mesh = {{"dp", 1}, {"tp", 2}};
  b.groups = {{"tp"}};
  uint32_t column = b.value(plan::DType::F32, {rows, 1});
  uint32_t whole = b.value(plan::DType::F32, {rows, columns});
  uint32_t piece = b.value(plan::DType::F32, {rows / 2, columns});
  uint32_t sums = b.value(plan::DType::F32, {rows / 2, 1});
  b.instr(OpCode::Broadcast, {column}, {whole});
  b.instr(OpCode::AllSlice, {whole}, {piece}, {0, 0});
  b.instr(OpCode::Sum, {piece}, {sums}, {}, {1.0});
  absl::StatusOr<LoadedPlan> loaded =
      loadPlanFromBytes(b.build({column}, {sums}), "test.plan");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::create(*loaded, 0, 5, {}, {});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  HostTensor values;
  values.shape = {rows, 1};
  for (int64_t r = 0; r < rows; ++r)
    values.floats.push_back(static_cast<float>(r % 7 - 3));
  absl::StatusOr<std::vector<HostTensor>> results = (*gpu)->run("f", {values});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->at(0).shape, (std::vector<int64_t>{rows / 2, 1}));
  for (int64_t r = 0; r < rows / 2; ++r)
    ASSERT_EQ(results->at(0).floats[r],
              static_cast<float>(columns * (r % 7 - 3)))
        << "row " << r;
}

// A prefix length outside [0, keys] fails the function on both backends:
// the CPU checks the lengths on the host, the GPU on the device (the host
// does not wait for the GPU to read them), reported when the host waits.
TEST(CudaExecutor, ABadPrefixLengthFailsTheFunction) {
  using plan::DType;
  const int64_t batch = 2, seq = 8, heads = 2, headDim = 8;
  PlanBuilder b;
  std::vector<int64_t> shape = {batch, seq, heads * headDim};
  uint32_t q = b.value(DType::F32, shape), out = b.value(DType::F32, shape);
  uint32_t prefix = b.value(DType::I32, {batch});
  b.instr(OpCode::Attention, {q, q, q, prefix}, {out},
          {heads, heads, static_cast<int64_t>(plan::MaskCode::Prefix), 1, 0},
          {0.25});
  absl::StatusOr<LoadedPlan> plan =
      loadPlanFromBytes(b.build({q, prefix}, {out}), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto withLengths = [&](std::vector<int32_t> lengths) {
    HostTensor ids;
    ids.dtype = DType::I32;
    ids.shape = {batch};
    ids.ints = std::move(lengths);
    return std::vector<HostTensor>{floats(shape, 61), ids};
  };
  absl::StatusOr<CpuExecutor> cpu = CpuExecutor::create(*plan, 0, 5);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<HostTensor>> onCpu =
      cpu->run("f", withLengths({3, 9}));
  ASSERT_FALSE(onCpu.ok());
  EXPECT_NE(onCpu.status().message().find(
                "prefix length 9 of sample 1 is outside [0, 8]"),
            std::string::npos)
      << onCpu.status();
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::create(*plan, 0, 5);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (std::vector<int32_t> bad :
       {std::vector<int32_t>{3, 9}, std::vector<int32_t>{-1, 8}}) {
    absl::StatusOr<std::vector<HostTensor>> result =
        (*gpu)->run("f", withLengths(bad));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find("a prefix length is outside"),
              std::string::npos)
        << result.status();
  }
  // The executor goes on: good lengths (0 and all the keys included) give
  // the CPU's results.
  BothResults both = runBoth(b.build({q, prefix}, {out}), withLengths({0, 8}));
  ASSERT_EQ(both.gpu.size(), 1u);
  EXPECT_TRUE((*gpu)->run("f", withLengths({0, 8})).ok());
  for (size_t i = 0; i < both.cpu[0].floats.size(); ++i)
    EXPECT_NEAR(both.gpu[0].floats[i], both.cpu[0].floats[i],
                1e-5 * (1.0 + std::fabs(both.cpu[0].floats[i])))
        << "element " << i;
}

// A call without results returns with its kernels queued: a bad token id
// is found when the host next waits for the GPU, here at finish.
TEST(CudaExecutor, ACallWithoutResultsDoesNotWaitForTheGpu) {
  absl::StatusOr<LoadedPlan> plan = embeddingLookup(/*returnsRows=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::create(*plan, 0, 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE((*gpu)->run("f", {tokenIds({0, 4, 1})}).ok());
  absl::Status finished = (*gpu)->finish();
  EXPECT_EQ(finished.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(finished.message().find("token id is outside"), std::string::npos)
      << finished;
  EXPECT_TRUE((*gpu)->finish().ok());
}

// Transfers staged through the host (the MPI path) stay in flight across
// calls as on the CPU (InFlightTest.cpp): a receive is copied to the device
// by the call that reads its slot, not by one on the other slot.
/// With `graphs`, calls are recorded as CUDA graphs where they can be:
/// those with a transfer never are (and say why); a recorded call leaves
/// a receive on bytes it does not touch in flight, and waits for one on
/// bytes it reads.
void expectStagedReceivesOutliveTheirCalls(bool graphs) {
  absl::StatusOr<LoadedPlan> plan =
      loadPlanFromBytes(tests::inFlightPlan(), "in-flight.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  tests::HeldTransfers comm;
  ExecutorOptions options;
  options.communicator = &comm;
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu = CudaExecutor::create(
      *plan, 1, 1, options, {}, false, kDefaultCommTimeout, graphs);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CudaExecutor &executor = **gpu;
  ASSERT_TRUE(executor.run("recv", {}, 0, nullptr, 0, 0).ok());
  ASSERT_TRUE(executor.run("recv", {}, 0, nullptr, 1, 1).ok());
  ASSERT_EQ(comm.started.size(), 2u);
  EXPECT_FALSE(comm.started[0]->waited || comm.started[1]->waited);
  comm.started[0]->payload = {1, 2, 3, 4};
  comm.started[1]->payload = {5, 6, 7, 8};
  auto used = executor.run("use", {}, 0, nullptr, 1, 1);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ((*used)[0].floats, (std::vector<float>{10, 12, 14, 16}));
  EXPECT_FALSE(comm.started[0]->waited);
  ASSERT_TRUE(executor.run("fill", {}, 0, nullptr, 2, 1).ok());
  used = executor.run("use", {}, 0, nullptr, 0, 0);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ((*used)[0].floats, (std::vector<float>{2, 4, 6, 8}));
  // A send takes its data to the host as it starts.
  ASSERT_TRUE(executor.run("prepare", {}, 0, nullptr, 0, 0).ok());
  ASSERT_TRUE(executor.run("send", {}, 0, nullptr, 0, 0).ok());
  ASSERT_TRUE(executor.run("overwrite", {}, 0, nullptr, 0, 0).ok());
  ASSERT_TRUE(executor.finish().ok());
  EXPECT_EQ(comm.started.back()->sent, (std::vector<float>(4, 7.0f)));
  if (!graphs) {
    EXPECT_TRUE(executor.callsNotRecorded().empty());
    return;
  }
  // A receive on slot 0 in flight. The first call of "use" on slot 1 ran
  // kernel by kernel; the second is recorded, the third replayed (slot 1
  // holds fill's -1s), neither waiting for the receive, whose bytes they
  // do not touch.
  ASSERT_TRUE(executor.run("recv", {}, 0, nullptr, 0, 0).ok());
  size_t pending = comm.started.size() - 1;
  for (int call = 0; call < 2; ++call) {
    used = executor.run("use", {}, 0, nullptr, 1, 1);
    ASSERT_TRUE(used.ok()) << used.status();
    EXPECT_EQ((*used)[0].floats, (std::vector<float>(4, -2.0f)));
  }
  EXPECT_FALSE(comm.started[pending]->waited);
  // Recording "use" on slot 0 waits for the receive first.
  comm.started[pending]->payload = {3, 4, 5, 6};
  used = executor.run("use", {}, 0, nullptr, 0, 0);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_TRUE(comm.started[pending]->waited);
  EXPECT_EQ((*used)[0].floats, (std::vector<float>{6, 8, 10, 12}));
  EXPECT_EQ(executor.recordedCalls(), 2u);
  ASSERT_TRUE(executor.finish().ok());
  // recv on slots 0 and 1, and send.
  std::vector<std::string> notRecorded = executor.callsNotRecorded();
  ASSERT_EQ(notRecorded.size(), 3u);
  for (const std::string &line : notRecorded)
    EXPECT_NE(line.find("another pipeline stage"), std::string::npos) << line;
  EXPECT_EQ(notRecorded[0].find("function 'recv'"), 0u) << notRecorded[0];
}

TEST(CudaExecutor, AStagedReceiveOutlivesItsCall) {
  SKIP_WITHOUT_GPU();
  expectStagedReceivesOutliveTheirCalls(/*graphs=*/false);
}

TEST(CudaExecutor, CallsWithTransfersAreNotRecorded) {
  SKIP_WITHOUT_GPU();
  expectStagedReceivesOutliveTheirCalls(/*graphs=*/true);
}

/// Start-up, phase by phase (triad-run's "ready in" line): the setup (the
/// GPU's context), the arena and the initial values drawn on the GPU; or,
/// drawn on the host, the draws and the copies to the GPU.
TEST(CudaExecutor, StartUpIsTimedPhaseByPhase) {
  SKIP_WITHOUT_GPU();
  PlanBuilder b;
  uint32_t w = b.value(plan::DType::F32, {64, 32});
  b.persistent("w", w, plan::Role::Parameter, plan::InitKind::Normal, 0.02);
  b.instr(OpCode::Scale, {w}, {w}, {}, {2.0});
  absl::StatusOr<LoadedPlan> plan =
      loadPlanFromBytes(b.build({}, {w}), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (bool hostInit : {false, true}) {
    absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu = CudaExecutor::create(
        *plan, 0, 1, {}, {}, /*nccl=*/false, kDefaultCommTimeout,
        /*recordCalls=*/false, hostInit);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    std::vector<std::string> names;
    for (const Executor::StartupPhase &phase : (*gpu)->startupPhases()) {
      names.push_back(phase.name);
      EXPECT_GE(phase.seconds, 0.0) << phase.name;
    }
    EXPECT_EQ(
        names,
        hostInit ? (std::vector<std::string>{"setup", "arena", "initial values",
                                             "copies to the GPU"})
                 : (std::vector<std::string>{"setup", "arena",
                                             "initial values on the GPU"}));
  }
}

/// Initial values drawn on the GPU are the host's (the CPU backend's, and
/// the CUDA executor's with hostInit) up to the last bit of a rare element:
/// the same Philox bits and Box-Muller transform, the device's log, sin and
/// cos. Fills and a padded piece's padding are exact; so is every element
/// drawn on the host and copied. Covered: a whole tensor, a piece starting
/// at an odd global index, a padded piece, a scalar, fills, a bf16
/// parameter with its f32 master (drawn into the master, rounded into the
/// parameter), bf16 and f16 ones without (drawn into a temporary), and an
/// f32 tensor with an f32 copy (a device copy).
TEST(CudaExecutor, InitialValuesDrawnOnTheGpuAreTheHosts) {
  PlanBuilder b;
  auto parameter = [&](const char *name, plan::DType type,
                       std::vector<int64_t> shape, plan::InitKind kind,
                       double value) {
    uint32_t v = b.value(type, std::move(shape));
    b.persistent(name, v, plan::Role::Parameter, kind, value);
    return v;
  };
  const auto f32 = plan::DType::F32, bf16 = plan::DType::BF16;
  const auto normal = plan::InitKind::Normal;
  uint32_t whole = parameter("whole", f32, {64, 48}, normal, 0.02);
  uint32_t odd = b.value(f32, {3, 5});
  b.persistent("odd", odd, {9, 5}, {1, 0}, 1.0); // from global index 5
  uint32_t padded = b.value(f32, {12, 7});
  b.paddedParameter("padded", padded, {10, 7}, 0.5); // rows 10, 11 outside
  parameter("scalar", f32, {}, normal, 1.0);
  parameter("ones", f32, {5}, plan::InitKind::Ones, 0.0);
  parameter("constant", f32, {3}, plan::InitKind::Constant, 0.25);
  parameter("half", bf16, {16, 8}, normal, 0.5);
  b.masterOf("master.half", b.value(f32, {16, 8}), "half", 0.5);
  parameter("lone", bf16, {6, 10}, normal, 0.5);
  parameter("lone.f16", plan::DType::F16, {5, 9}, normal, 0.5);
  // Two f32 members of one draw: the second a device copy of the first.
  parameter("twin", f32, {7, 4}, normal, 0.5);
  b.masterOf("master.twin", b.value(f32, {7, 4}), "twin", 0.5);
  b.instr(OpCode::Scale, {whole}, {whole}, {}, {1.0});
  absl::StatusOr<LoadedPlan> plan =
      loadPlanFromBytes(b.build({}, {whole}), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<CpuExecutor> cpu = CpuExecutor::create(*plan, 0, 5, {});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<std::vector<float>> rows = cpu->readPersistent("padded");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(std::vector<float>(rows->begin() + 70, rows->end()),
            std::vector<float>(14, 0.0f));
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> onGpu =
      CudaExecutor::create(*plan, 0, 5);
  absl::StatusOr<std::unique_ptr<CudaExecutor>> onHost =
      CudaExecutor::create(*plan, 0, 5, {}, {}, /*nccl=*/false,
                           kDefaultCommTimeout, /*recordCalls=*/false,
                           /*hostInit=*/true);
  ASSERT_TRUE(onGpu.ok()) << onGpu.status();
  ASSERT_TRUE(onHost.ok()) << onHost.status();
  int64_t elements = 0, lastBits = 0;
  for (const char *name :
       {"whole", "odd", "padded", "scalar", "ones", "constant", "half",
        "master.half", "lone", "lone.f16", "twin", "master.twin"}) {
    absl::StatusOr<std::vector<float>> want = cpu->readPersistent(name),
                                       copied = (*onHost)->readPersistent(name),
                                       drawn = (*onGpu)->readPersistent(name);
    ASSERT_TRUE(want.ok() && copied.ok() && drawn.ok()) << name;
    EXPECT_EQ(*copied, *want) << name << ": drawn on the host and copied";
    ASSERT_EQ(drawn->size(), want->size()) << name;
    bool fill = std::string(name) == "ones" || std::string(name) == "constant";
    for (size_t i = 0; i < want->size(); ++i) {
      float a = (*want)[i], g = (*drawn)[i];
      ++elements;
      if (a == g)
        continue;
      ++lastBits;
      EXPECT_FALSE(fill) << name << "[" << i << "]";
      EXPECT_NE(a, 0.0f) << name << "[" << i << "]: padding is zero";
      // One step of the value's type (a bf16 parameter rounds the draw).
      // (f16 has 10 mantissa bits, bf16 7.)
      std::string what = name;
      float step = std::fabs(a) * (what == "half" || what == "lone" ? 1.0f / 128
                                   : what == "lone.f16" ? 1.0f / 1024
                                                        : 1.2e-7f);
      EXPECT_LE(std::fabs(a - g), step) << name << "[" << i << "]";
    }
  }
  // Elements whose draws differ in the last bit are rare.
  EXPECT_LE(lastBits, elements / 100) << lastBits << " of " << elements;
}

TEST(CudaExecutorWithoutGpu, CreatingOneSaysThereIsNoGpu) {
  absl::StatusOr<int> count = cuda::deviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  if (*count > 0)
    GTEST_SKIP() << "this machine has a GPU";
  PlanBuilder b;
  uint32_t x = b.value(plan::DType::F32, {2});
  b.instr(OpCode::Scale, {x}, {x}, {}, {2.0});
  absl::StatusOr<LoadedPlan> plan =
      loadPlanFromBytes(b.build({x}, {x}), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::create(*plan, 0, 1);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gpu.status().message().find("no GPU"), std::string::npos)
      << gpu.status();
}

/// Each of the `count` GPU results within `tolerance(r)` of the CPU's,
/// relative to 1 + |value|.
template <typename Tolerance>
void expectNearEach(const BothResults &both, size_t count,
                    Tolerance tolerance) {
  ASSERT_EQ(both.cpu.size(), count);
  ASSERT_EQ(both.gpu.size(), count);
  for (size_t r = 0; r < count; ++r) {
    const std::vector<float> &want = both.cpu[r].floats,
                             &got = both.gpu[r].floats;
    ASSERT_EQ(got.size(), want.size()) << "result " << r;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], tolerance(r) * (1.0 + std::fabs(want[i])))
          << "result " << r << ", element " << i;
  }
}

/// The tanh GELU's gradient epilogue (the backward of a fused linear
/// layer) through the executor: the gradient and the bias gradient of an
/// f32 product and of a bf16 one (bf16 bias gradient, and f32), against
/// the CPU's within 1e-4 (cuBLASLt's own derivative) and a bf16 rounding.
/// Without a GPU the CPU half runs alone.
TEST(CudaExecutor, GeluGradientProductsMatchTheCpu) {
  using plan::DType;
  using plan::EpilogueCode;
  const int64_t code = static_cast<int64_t>(EpilogueCode::GeluTanhGrad);
  PlanBuilder b;
  const int64_t rows = 24, k = 32, n = 40;
  uint32_t dy = b.value(DType::F32, {2, rows / 2, k}),
           w = b.value(DType::F32, {n, k}),
           pre = b.value(DType::F32, {2, rows / 2, n});
  uint32_t dy16 = b.value(DType::BF16, {2, rows / 2, k}),
           w16 = b.value(DType::BF16, {n, k}),
           pre16 = b.value(DType::BF16, {2, rows / 2, n});
  uint32_t grad = b.value(DType::F32, {2, rows / 2, n}),
           biasGrad = b.value(DType::F32, {n}),
           grad16 = b.value(DType::BF16, {2, rows / 2, n}),
           biasGrad16 = b.value(DType::BF16, {n}),
           gradWide = b.value(DType::BF16, {2, rows / 2, n}),
           biasGradWide = b.value(DType::F32, {n});
  b.instr(OpCode::Matmul, {dy, w, pre}, {grad, biasGrad}, {0, 1, code});
  for (auto [from, to] :
       {std::pair{dy, dy16}, std::pair{w, w16}, std::pair{pre, pre16}})
    b.instr(OpCode::Cast, {from}, {to});
  b.instr(OpCode::Matmul, {dy16, w16, pre16}, {grad16, biasGrad16},
          {0, 1, code});
  b.instr(OpCode::Matmul, {dy16, w16, pre16}, {gradWide, biasGradWide},
          {0, 1, code});
  std::vector<uint32_t> results = {grad,       biasGrad, grad16,
                                   biasGrad16, gradWide, biasGradWide};
  BothResults both = runBoth(b.build({dy, w, pre}, results),
                             {floats({2, rows / 2, k}, 71), floats({n, k}, 72),
                              floats({2, rows / 2, n}, 73)});
  ASSERT_EQ(both.cpu.size(), results.size());
  if (both.gpu.empty())
    return;
  // A bias gradient sums 24 rows of its terms.
  expectNearEach(both, results.size(), [](size_t r) {
    return (r < 2 ? 1e-4 : 1e-2) * (r % 2 == 1 ? 24 : 1);
  });
}

/// Products with fused epilogues (the compiler's fused linear layers): the
/// CUDA executor's cuBLASLt epilogues give the CPU's product, bias and
/// activation, and the pre-activation each keeps, within 1e-4 relative
/// (cuBLASLt's GELU is its own tanh approximation), for f32 and for a bf16
/// product with an f32 bias (within a bf16 rounding: both add the bias
/// before the one rounding). Without a GPU the CPU half runs alone.
TEST(CudaExecutor, FusedProductsMatchTheCpu) {
  using plan::DType;
  using plan::EpilogueCode;
  PlanBuilder b;
  const int64_t rows = 24, k = 32, n = 40;
  uint32_t x = b.value(DType::F32, {2, rows / 2, k}),
           w = b.value(DType::F32, {k, n}), bias = b.value(DType::F32, {n});
  uint32_t x16 = b.value(DType::BF16, {rows, k}),
           w16 = b.value(DType::BF16, {k, n});
  uint32_t biased = b.value(DType::F32, {2, rows / 2, n}),
           gelu = b.value(DType::F32, {2, rows / 2, n}),
           geluInput = b.value(DType::F32, {2, rows / 2, n}),
           relu = b.value(DType::F32, {2, rows / 2, n}),
           reluInput = b.value(DType::F32, {2, rows / 2, n}),
           biased16 = b.value(DType::BF16, {rows, n});
  b.instr(OpCode::Matmul, {x, w, bias}, {biased},
          {0, 0, static_cast<int64_t>(EpilogueCode::Bias)});
  b.instr(OpCode::Matmul, {x, w, bias}, {gelu, geluInput},
          {0, 0, static_cast<int64_t>(EpilogueCode::BiasGeluTanh)});
  b.instr(OpCode::Matmul, {x, w, bias}, {relu, reluInput},
          {0, 0, static_cast<int64_t>(EpilogueCode::BiasRelu)});
  b.instr(OpCode::Cast, {x}, {x16});
  b.instr(OpCode::Cast, {w}, {w16});
  b.instr(OpCode::Matmul, {x16, w16, bias}, {biased16},
          {0, 0, static_cast<int64_t>(EpilogueCode::Bias)});
  std::vector<uint32_t> results = {biased, gelu,      geluInput,
                                   relu,   reluInput, biased16};
  BothResults both = runBoth(
      b.build({x, w, bias}, results),
      {floats({2, rows / 2, k}, 31), floats({k, n}, 32), floats({n}, 33)});
  ASSERT_EQ(both.cpu.size(), results.size());
  // On the CPU the fused forms are the unfused kernels' arithmetic.
  for (size_t i = 0; i < both.cpu[1].floats.size(); ++i) {
    EXPECT_EQ(both.cpu[2].floats[i], both.cpu[0].floats[i]);
    EXPECT_EQ(both.cpu[4].floats[i], both.cpu[0].floats[i]);
    EXPECT_EQ(both.cpu[3].floats[i], std::max(both.cpu[0].floats[i], 0.0f));
  }
  if (both.gpu.empty())
    return;
  expectNearEach(both, results.size(), [&](size_t r) {
    return r == results.size() - 1 ? 1e-2 : 1e-4;
  });
}

} // namespace
