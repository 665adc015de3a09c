//===- CpuExecutorTest.cpp - the CPU executor on small plans --------------===//
//
// Small plans built by hand run on the CPU executor and match the
// reference interpreter's kernels; persistent tensors start from the
// runtime's init at their global indices; bad data and calls are errors.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CpuExecutor.h"
#include "runtime/kernels/cpu/HalfFloat.h"
#include "triad/Interpreter/Kernels.h"

#include "runtime/init/Init.h"
#include "runtime/tests/PlanBuilder.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace triad::rt;
namespace ref = triad::interp;
using triad::plan::DType;
using triad::plan::OpCode;

namespace {

using triad::rt::tests::PlanBuilder;

ref::Tensor random(std::vector<int64_t> shape, uint64_t stream) {
  ref::Tensor t(shape);
  auto key = parameterKey(stream, "executor");
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data[i] = static_cast<float>(standardNormal(key, i));
  return t;
}

HostTensor host(const ref::Tensor &t) {
  HostTensor h;
  h.shape = t.shape;
  h.floats.assign(t.data.begin(), t.data.end());
  return h;
}

HostTensor hostInts(std::vector<int64_t> shape, std::vector<int32_t> data) {
  HostTensor h;
  h.dtype = DType::I32;
  h.shape = shape;
  h.ints = data;
  return h;
}

void expectNear(const HostTensor &actual, const ref::Tensor &expected) {
  ASSERT_EQ(actual.shape, expected.shape);
  for (size_t i = 0; i < actual.floats.size(); ++i)
    EXPECT_NEAR(actual.floats[i], expected.data[i],
                1e-5 * (1.0 + std::abs(expected.data[i])))
        << "element " << i;
}

CpuExecutor makeExecutor(const std::string &bytes, LoadedPlan &holder) {
  auto plan = loadPlanFromBytes(bytes, "test.plan");
  EXPECT_TRUE(plan.ok()) << plan.status();
  holder = std::move(*plan);
  auto executor = CpuExecutor::create(holder, 0, 9);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return std::move(*executor);
}

TEST(CpuExecutor, EmbeddingMatmulAndLoss) {
  PlanBuilder b;
  uint32_t ids = b.value(DType::I32, {2, 3});
  uint32_t labels = b.value(DType::I32, {2, 3});
  uint32_t table = b.value(DType::F32, {16, 4});
  uint32_t hidden = b.value(DType::F32, {2, 3, 4});
  uint32_t logits = b.value(DType::F32, {2, 3, 16});
  uint32_t loss = b.value(DType::F32, {});
  b.persistent("wte", table, {16, 4}, {0, 0}, 0.5);
  b.instr(OpCode::Embedding, {ids, table}, {hidden});
  b.instr(OpCode::Matmul, {hidden, table}, {logits}, {0, 1});
  b.instr(OpCode::CrossEntropy, {logits, labels}, {loss}, {-100});
  LoadedPlan holder;
  CpuExecutor executor =
      makeExecutor(b.build({ids, labels}, {logits, loss}), holder);
  std::vector<int32_t> idValues = {1, 5, 15, 0, 2, 2},
                       labelValues = {5, 15, 0, -100, 2, 7};
  auto results = executor.run(
      "f", {hostInts({2, 3}, idValues), hostInts({2, 3}, labelValues)});
  ASSERT_TRUE(results.ok()) << results.status();

  // The same computation in the interpreter, from the same initial table.
  ref::Tensor weights({16, 4});
  for (int64_t i = 0; i < 64; ++i) {
    float v;
    fillNormal(9, "wte", 0.5, i, 1, &v);
    weights.data[i] = v;
  }
  ref::Tensor idTensor({2, 3},
                       std::vector<double>(idValues.begin(), idValues.end()));
  ref::Tensor labelTensor(
      {2, 3}, std::vector<double>(labelValues.begin(), labelValues.end()));
  ref::Tensor expectedLogits =
      ref::matmul(*ref::embedding(idTensor, weights), weights, false, true);
  expectNear((*results)[0], expectedLogits);
  double expectedLoss = *ref::crossEntropy(expectedLogits, labelTensor, -100);
  EXPECT_NEAR((*results)[1].floats[0], expectedLoss, 1e-5 * expectedLoss);

  // A token outside the vocabulary is an error naming the instruction.
  auto bad = executor.run("f", {hostInts({2, 3}, {1, 16, 0, 0, 0, 0}),
                                hostInts({2, 3}, labelValues)});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "function 'f', instruction 0 (Embedding): a token id is outside "
            "the vocabulary");
  EXPECT_FALSE(executor.run("f", {}).ok());
  EXPECT_FALSE(executor.run("g", {}).ok());
}

// A shard of a parameter starts from the single-device values at its
// global indices.
TEST(CpuExecutor, ShardsStartFromTheGlobalInit) {
  PlanBuilder b;
  uint32_t shard = b.value(DType::F32, {2, 3});
  b.persistent("w", shard, {4, 6}, {1, 3}, 0.02);
  LoadedPlan holder;
  CpuExecutor executor = makeExecutor(b.build({}, {}), holder);
  float *data = *executor.persistent("w");
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      float expected;
      fillNormal(9, "w", 0.02, (r + 1) * 6 + (c + 3), 1, &expected);
      EXPECT_EQ(data[r * 3 + c], expected);
    }
  EXPECT_FALSE(executor.persistent("v").ok());
}

TEST(CpuExecutor, ShapeOps) {
  PlanBuilder b;
  uint32_t x = b.value(DType::F32, {2, 3, 4});
  uint32_t t = b.value(DType::F32, {4, 2, 3});
  uint32_t s = b.value(DType::F32, {1, 2, 3});
  uint32_t p = b.value(DType::F32, {2, 5, 4});
  uint32_t c = b.value(DType::F32, {2, 3, 8});
  uint32_t r = b.value(DType::F32, {3, 1});
  uint32_t bc = b.value(DType::F32, {2, 3, 4});
  uint32_t sum = b.value(DType::F32, {3, 1});
  b.instr(OpCode::Transpose, {x}, {t}, {2, 0, 1});
  b.instr(OpCode::Slice, {x}, {s}, {1, 1, 1, 1, 2, 3});
  b.instr(OpCode::Pad, {x}, {p}, {0, 1, 0, 0, 1, 0});
  b.instr(OpCode::Concat, {x, x}, {c}, {2});
  b.instr(OpCode::Broadcast, {r}, {bc});
  b.instr(OpCode::Sum, {bc}, {sum}, {}, {0.5});
  LoadedPlan holder;
  CpuExecutor executor =
      makeExecutor(b.build({x, r}, {t, s, p, c, bc, sum}), holder);
  ref::Tensor xs = random({2, 3, 4}, 1), rs = random({3, 1}, 2);
  auto results = executor.run("f", {host(xs), host(rs)});
  ASSERT_TRUE(results.ok()) << results.status();
  expectNear((*results)[0], ref::transpose(xs, {2, 0, 1}));
  expectNear((*results)[1], ref::slice(xs, {1, 1, 1}, {1, 2, 3}));
  expectNear((*results)[2], ref::pad(xs, {0, 1, 0}, {0, 1, 0}));
  expectNear((*results)[3], ref::concat({&xs, &xs}, 2));
  ref::Tensor broadcast = ref::broadcast(rs, {2, 3, 4});
  expectNear((*results)[4], broadcast);
  expectNear((*results)[5], ref::scale(rs, 4.0)); // 8 copies, times 0.5
}

// Sum's shapes: over leading dimensions (bias gradients), trailing ones,
// inner ones and with the rank dropped, each against the interpreter.
TEST(CpuExecutor, SumOverAnyDimensions) {
  PlanBuilder b;
  uint32_t x = b.value(DType::F32, {2, 3, 4});
  uint32_t lead = b.value(DType::F32, {1, 1, 4});
  uint32_t dropped = b.value(DType::F32, {4});
  uint32_t trail = b.value(DType::F32, {2, 1, 1});
  uint32_t inner = b.value(DType::F32, {2, 1, 4});
  b.instr(OpCode::Sum, {x}, {lead}, {}, {1.0});
  b.instr(OpCode::Sum, {x}, {dropped}, {}, {0.5});
  b.instr(OpCode::Sum, {x}, {trail}, {}, {1.0});
  b.instr(OpCode::Sum, {x}, {inner}, {}, {1.0});
  LoadedPlan holder;
  CpuExecutor executor =
      makeExecutor(b.build({x}, {lead, dropped, trail, inner}), holder);
  ref::Tensor xs = random({2, 3, 4}, 3);
  auto results = executor.run("f", {host(xs)});
  ASSERT_TRUE(results.ok()) << results.status();
  expectNear((*results)[0], ref::reduce(xs, {0, 1}, true, false));
  expectNear((*results)[1],
             ref::scale(ref::reduce(xs, {0, 1}, false, false), 0.5));
  expectNear((*results)[2], ref::reduce(xs, {1, 2}, true, false));
  expectNear((*results)[3], ref::reduce(xs, {1}, true, false));
}

/// 16-bit values are stored as such and every kernel computes in f32: an
/// argument is rounded where it is written, the kernel reads it widened,
/// and its result is rounded once, to nearest even.
TEST(CpuExecutor, StoresSixteenBitValuesAndComputesInF32) {
  for (DType type : {DType::BF16, DType::F16}) {
    bool bf16 = type == DType::BF16;
    auto round = [&](float v) {
      return bf16 ? triad::rt::cpu::fromBf16(triad::rt::cpu::toBf16(v))
                  : triad::rt::cpu::fromF16(triad::rt::cpu::toF16(v));
    };
    PlanBuilder b;
    uint32_t x = b.value(type, {4}), y = b.value(type, {4}),
             wide = b.value(DType::F32, {4});
    const double third = 1.0 / 3.0;
    b.instr(OpCode::Scale, {x}, {y}, {}, {third});
    b.instr(OpCode::Cast, {y}, {wide});
    LoadedPlan holder;
    CpuExecutor executor = makeExecutor(b.build({x}, {y, wide}), holder);
    HostTensor arg;
    arg.dtype = type;
    arg.shape = {4};
    arg.floats = {1.0f, 3.0f, 1e-3f, -70000.0f};
    auto results = executor.run("f", {arg});
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t i = 0; i < 4; ++i) {
      float want = round(round(arg.floats[i]) * static_cast<float>(third));
      EXPECT_EQ((*results)[0].floats[i], want) << i;
      EXPECT_EQ((*results)[1].floats[i], want) << i;
    }
    // -70000 is beyond f16's range: its infinity, a third of which stays.
    if (!bf16) {
      EXPECT_TRUE(std::isinf((*results)[0].floats[3]));
    }
  }
}

TEST(CpuExecutor, RejectsWhatTheCpuBackendCannotRun) {
  PlanBuilder b;
  uint32_t x = b.value(DType::F32, {2});
  b.instr(OpCode::Scale, {x}, {x}, {}, {2.0});
  auto plan = loadPlanFromBytes(b.build({x}, {x}), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto executor = CpuExecutor::create(*plan, 3, 1);
  ASSERT_FALSE(executor.ok());
  EXPECT_NE(executor.status().message().find("no program for pipeline rank 3"),
            std::string::npos)
      << executor.status();
}

} // namespace
