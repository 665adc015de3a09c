//===- ExecutorTest.cpp - the CPU executor's step operations --------------===//
//
// The operations of gradient accumulation (CountValid, Accumulate,
// Reciprocal, ScaleBy), accumulators starting from zero, the learning-rate
// override and instruction timing, on plans built by hand. The kernels
// against the reference interpreter are in test/Unit/Kernels (they need the
// compiler's interpreter); this file runs with the runtime alone.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CpuExecutor.h"
#include "runtime/init/Init.h"
#include "runtime/kernels/cpu/HalfFloat.h"
#include "runtime/tests/PlanBuilder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

using namespace triad::rt;
using tests::PlanBuilder;
using triad::plan::DType;
using triad::plan::InitKind;
using triad::plan::OpCode;
using triad::plan::Role;

namespace {

HostTensor floats(std::vector<int64_t> shape, std::vector<float> data) {
  HostTensor h;
  h.shape = shape;
  h.floats = data;
  return h;
}

/// `value` rounded to bf16 (to nearest even) and widened back.
float roundedToBf16(float value) {
  uint16_t bits;
  float back;
  cpu::narrow(true, &value, &bits, 1);
  cpu::widen(true, &bits, &back, 1);
  return back;
}

HostTensor ints(std::vector<int64_t> shape, std::vector<int32_t> data) {
  HostTensor h;
  h.dtype = DType::I32;
  h.shape = shape;
  h.ints = data;
  return h;
}

/// `n` values spread evenly over [-width / 2, width / 2), from a linear
/// congruential generator advanced from `state`.
std::vector<float> uniform(size_t n, uint32_t &state, float width) {
  std::vector<float> values(n);
  for (float &v : values) {
    state = state * 1664525u + 1013904223u;
    v = width *
        (static_cast<float>(state >> 8) / static_cast<float>(1 << 24) - 0.5f);
  }
  return values;
}

struct Loaded {
  LoadedPlan plan;
  std::unique_ptr<CpuExecutor> executor;
};

Loaded load(const std::string &bytes, ExecutorOptions options = {}) {
  Loaded loaded;
  auto plan = loadPlanFromBytes(bytes, "test.plan");
  EXPECT_TRUE(plan.ok()) << plan.status();
  loaded.plan = std::move(*plan);
  auto executor = CpuExecutor::create(loaded.plan, 0, 5, options);
  EXPECT_TRUE(executor.ok()) << executor.status();
  loaded.executor = std::make_unique<CpuExecutor>(std::move(*executor));
  return loaded;
}

/// Start-up, phase by phase (triad-run's "ready in" line): the setup, the
/// arena and the initial values, in that order.
TEST(CpuExecutorSteps, StartUpIsTimedPhaseByPhase) {
  PlanBuilder b;
  uint32_t w = b.value(DType::F32, {64, 32});
  b.persistent("w", w, Role::Parameter, InitKind::Normal, 0.02);
  b.function("f", {});
  b.results({w}, {});
  Loaded loaded = load(b.build());
  std::vector<std::string> names;
  for (const Executor::StartupPhase &phase : loaded.executor->startupPhases()) {
    names.push_back(phase.name);
    EXPECT_GE(phase.seconds, 0.0) << phase.name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"setup", "arena", "initial values"}));
}

TEST(CpuExecutorSteps, AccumulationOps) {
  PlanBuilder b;
  uint32_t labels = b.value(DType::I32, {2, 3});
  uint32_t x = b.value(DType::F32, {2, 2});
  uint32_t acc = b.value(DType::F32, {2, 2});
  uint32_t count = b.value(DType::F32, {});
  uint32_t inverse = b.value(DType::F32, {});
  uint32_t scaled = b.value(DType::F32, {2, 2});
  uint32_t zero = b.value(DType::F32, {});
  uint32_t inverseOfZero = b.value(DType::F32, {});
  b.persistent("acc", acc, Role::Accumulator, InitKind::Zeros);
  b.function("f", {labels, x});
  b.instr(OpCode::CountValid, {labels}, {count}, {-100});
  b.instr(OpCode::Accumulate, {acc, x, count}, {acc});
  b.instr(OpCode::Reciprocal, {count}, {inverse});
  b.instr(OpCode::ScaleBy, {acc, inverse}, {scaled});
  b.instr(OpCode::Fill, {}, {zero}, {}, {0.0});
  b.instr(OpCode::Reciprocal, {zero}, {inverseOfZero});
  b.instr(OpCode::ScaleBy, {x, count}, {x}); // in place
  b.results({count, inverse, scaled, inverseOfZero, acc, x}, {});
  Loaded loaded = load(b.build());
  float *stored = *loaded.executor->persistent("acc");
  EXPECT_EQ(std::vector<float>(stored, stored + 4),
            std::vector<float>(4, 0.0f));

  auto results =
      loaded.executor->run("f", {ints({2, 3}, {1, -100, 3, 4, -100, -7}),
                                 floats({2, 2}, {1, 2, 3, 4})});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].floats, std::vector<float>{4.0f});
  EXPECT_EQ((*results)[1].floats, std::vector<float>{0.25f});
  EXPECT_EQ((*results)[2].floats, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ((*results)[3].floats, std::vector<float>{0.0f});
  EXPECT_EQ((*results)[4].floats, (std::vector<float>{4, 8, 12, 16}));
  EXPECT_EQ((*results)[5].floats, (std::vector<float>{4, 8, 12, 16}));

  // The accumulator keeps its sum across calls.
  results = loaded.executor->run(
      "f", {ints({2, 3}, {-100, -100, -100, -100, -100, 0}),
            floats({2, 2}, {1, 1, 1, 1})});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[4].floats, (std::vector<float>{5, 9, 13, 17}));
}

TEST(CpuExecutorSteps, SumSquaresWithALimit) {
  // Without a limit the plain sum; with one, +inf when an element's
  // magnitude is above it (f16 loss scaling's overflow check).
  PlanBuilder b;
  uint32_t x = b.value(DType::F32, {3});
  uint32_t plain = b.value(DType::F32, {});
  uint32_t limited = b.value(DType::F32, {});
  uint32_t tight = b.value(DType::F32, {});
  b.function("f", {x});
  b.instr(OpCode::SumSquares, {x}, {plain});
  b.instr(OpCode::SumSquares, {x}, {limited}, {}, {4.0});
  b.instr(OpCode::SumSquares, {x}, {tight}, {}, {3.5});
  b.results({plain, limited, tight}, {});
  Loaded loaded = load(b.build());
  auto results = loaded.executor->run("f", {floats({3}, {1, -4, 2})});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].floats, std::vector<float>{21.0f});
  EXPECT_EQ((*results)[1].floats, std::vector<float>{21.0f}); // 4 is not above
  EXPECT_EQ((*results)[2].floats,
            std::vector<float>{std::numeric_limits<float>::infinity()});
}

TEST(CpuExecutorSteps, SumSquaresOverSeveralTensors) {
  // f32 and bf16 tensors summed into one result, each read in its type; a
  // limit applies to every element of every tensor.
  PlanBuilder b;
  uint32_t x = b.value(DType::F32, {3});
  uint32_t y = b.value(DType::BF16, {2});
  uint32_t both = b.value(DType::F32, {});
  uint32_t limited = b.value(DType::F32, {});
  b.function("f", {x, y});
  b.instr(OpCode::SumSquares, {x, y}, {both});
  b.instr(OpCode::SumSquares, {x, y}, {limited}, {}, {5.0});
  b.results({both, limited}, {});
  Loaded loaded = load(b.build());
  HostTensor y16 = floats({2}, {0.5f, -6.0f});
  y16.dtype = DType::BF16;
  auto results = loaded.executor->run("f", {floats({3}, {1, -4, 2}), y16});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].floats, std::vector<float>{57.25f});
  EXPECT_EQ((*results)[1].floats,
            std::vector<float>{std::numeric_limits<float>::infinity()});
}

/// Runs function "f" of both plans on `args`; expects them to give the same
/// results, bit for bit, and returns the first one's.
std::vector<HostTensor> sameResults(Loaded &a, Loaded &b,
                                    const std::vector<HostTensor> &args) {
  auto got = a.executor->run("f", args);
  auto want = b.executor->run("f", args);
  EXPECT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(want.ok()) << want.status();
  if (!got.ok() || !want.ok())
    return {};
  EXPECT_EQ(got->size(), want->size());
  for (size_t i = 0; i < std::min(got->size(), want->size()); ++i)
    EXPECT_EQ((*got)[i].floats, (*want)[i].floats) << "result " << i;
  return *got;
}

TEST(CpuExecutorSteps, AdamWOverTensorsIsEachTensorsUpdateAndCast) {
  // Three tensors (one with a bf16 gradient) in one AdamW that also
  // rounds each parameter, against one AdamW per tensor followed by a
  // Cast: the same bits.
  const std::vector<std::vector<int64_t>> shapes = {{4, 3}, {5}, {2, 2}};
  const DType gradTypes[] = {DType::F32, DType::BF16, DType::F32};
  const DType roundTypes[] = {DType::BF16, DType::F16, DType::BF16};
  const double decays[] = {0.1, 0.0, 0.3};
  auto build = [&](bool fused) {
    PlanBuilder b;
    std::vector<uint32_t> args, results, outs;
    std::vector<uint32_t> inputs;
    std::vector<double> floats = {0.9, 0.95, 1e-8};
    for (size_t t = 0; t < shapes.size(); ++t) {
      uint32_t p = b.value(DType::F32, shapes[t]);
      uint32_t g = b.value(gradTypes[t], shapes[t]);
      uint32_t m = b.value(DType::F32, shapes[t]);
      uint32_t v = b.value(DType::F32, shapes[t]);
      uint32_t rounded = b.value(roundTypes[t], shapes[t]);
      args.insert(args.end(), {p, g, m, v});
      inputs.insert(inputs.end(), {p, g, m, v});
      outs.insert(outs.end(), {p, m, v, rounded});
      results.insert(results.end(), {p, m, v, rounded});
      floats.push_back(decays[t]);
    }
    uint32_t lr = b.value(DType::F32, {});
    uint32_t step = b.value(DType::F32, {});
    uint32_t coefficient = b.value(DType::F32, {});
    args.insert(args.end(), {lr, step, coefficient});
    b.function("f", args);
    if (fused) {
      inputs.insert(inputs.end(), {lr, step, coefficient});
      b.instr(OpCode::AdamW, inputs, outs, {}, floats);
    } else {
      for (size_t t = 0; t < shapes.size(); ++t) {
        b.instr(OpCode::AdamW,
                {inputs[4 * t], inputs[4 * t + 1], inputs[4 * t + 2],
                 inputs[4 * t + 3], lr, step, coefficient},
                {outs[4 * t], outs[4 * t + 1], outs[4 * t + 2]}, {},
                {0.9, 0.95, 1e-8, decays[t]});
        b.instr(OpCode::Cast, {outs[4 * t]}, {outs[4 * t + 3]});
      }
    }
    b.results(results, {});
    return b.build();
  };
  uint32_t state = 7;
  std::vector<HostTensor> args;
  for (const std::vector<int64_t> &shape : shapes) {
    size_t n = 1;
    for (int64_t size : shape)
      n *= static_cast<size_t>(size);
    args.push_back(floats(shape, uniform(n, state, 2.0f)));
    args.push_back(floats(shape, uniform(n, state, 1.0f)));
    args.back().dtype = gradTypes[args.size() / 4];
    args.push_back(floats(shape, uniform(n, state, 0.1f)));
    std::vector<float> v = uniform(n, state, 0.1f);
    for (float &value : v)
      value *= value;
    args.push_back(floats(shape, v));
  }
  for (float scalar : {1e-2f, 3.0f, 0.7f})
    args.push_back(floats({}, {scalar}));
  Loaded fused = load(build(true)), separate = load(build(false));
  std::vector<HostTensor> got = sameResults(fused, separate, args);
  // The update moved the parameters.
  ASSERT_FALSE(got.empty());
  EXPECT_NE(got[0].floats, args[0].floats);
}

TEST(CpuExecutorSteps, AdamWWithASkipFlagWritesNothingOnASkippedStep) {
  // One tensor in place with its rounded copy: a flag of 0 updates as
  // without the flag, any other value leaves every output as it was.
  auto build = [](bool flagged) {
    PlanBuilder b;
    uint32_t p = b.value(DType::F32, {6});
    uint32_t g = b.value(DType::F32, {6});
    uint32_t m = b.value(DType::F32, {6});
    uint32_t v = b.value(DType::F32, {6});
    uint32_t w = b.value(DType::BF16, {6});
    uint32_t lr = b.value(DType::F32, {});
    uint32_t step = b.value(DType::F32, {});
    uint32_t coefficient = b.value(DType::F32, {});
    uint32_t skip = b.value(DType::F32, {});
    b.function("f", {p, g, m, v, w, lr, step, coefficient, skip});
    std::vector<uint32_t> inputs = {p, g, m, v, lr, step, coefficient};
    if (flagged)
      inputs.push_back(skip);
    b.instr(OpCode::AdamW, inputs, {p, m, v, w}, {}, {0.9, 0.95, 1e-8, 0.1});
    b.results({p, m, v, w}, {});
    return b.build();
  };
  uint32_t state = 11;
  std::vector<HostTensor> args;
  for (int i = 0; i < 4; ++i) {
    std::vector<float> values = uniform(6, state, 1.0f);
    if (i == 3)
      for (float &value : values)
        value *= value;
    args.push_back(floats({6}, values));
  }
  HostTensor w16 = floats({6}, {1, 2, 3, 4, 5, 6});
  w16.dtype = DType::BF16;
  args.push_back(w16);
  for (float scalar : {1e-2f, 2.0f, 0.5f, 0.0f})
    args.push_back(floats({}, {scalar}));
  Loaded flagged = load(build(true)), plain = load(build(false));
  std::vector<HostTensor> updated = sameResults(flagged, plain, args);
  ASSERT_FALSE(updated.empty());
  EXPECT_NE(updated[0].floats, args[0].floats);
  args.back() = floats({}, {1.0f});
  auto skipped = flagged.executor->run("f", args);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ((*skipped)[0].floats, args[0].floats);
  EXPECT_EQ((*skipped)[1].floats, args[2].floats);
  EXPECT_EQ((*skipped)[2].floats, args[3].floats);
  EXPECT_EQ((*skipped)[3].floats, args[4].floats);
}

TEST(CpuExecutorSteps, AParameterAndItsMasterCopyStartFromOneDraw) {
  // A bf16 parameter and its f32 master copy (drawn from the parameter's
  // stream) start from the same values, drawn once: the master holds the
  // draws, the parameter them rounded; a tensor of the same init but its
  // own stream draws its own; zeros stay zeros.
  PlanBuilder b;
  uint32_t w = b.value(DType::BF16, {3, 5});
  uint32_t master = b.value(DType::F32, {3, 5});
  uint32_t other = b.value(DType::F32, {3, 5});
  uint32_t acc = b.value(DType::F32, {3, 5});
  b.persistent("w", w, Role::Parameter, InitKind::Normal, 0.5);
  b.masterOf("master.w", master, "w", 0.5);
  b.persistent("u", other, Role::Parameter, InitKind::Normal, 0.5);
  b.persistent("grad.w", acc, Role::Accumulator, InitKind::Zeros);
  b.function("f", {});
  b.instr(OpCode::Copy, {w}, {w});
  b.results({}, {});
  Loaded loaded = load(b.build());
  std::vector<float> drawn(15);
  fillNormal(/*seed=*/5, "w", 0.5, 0, 15, drawn.data());
  auto read = [&](const std::string &name) {
    absl::StatusOr<std::vector<float>> values =
        loaded.executor->readPersistent(name);
    EXPECT_TRUE(values.ok()) << values.status();
    return values.ok() ? *values : std::vector<float>{};
  };
  EXPECT_EQ(read("master.w"), drawn);
  std::vector<float> rounded = read("w");
  ASSERT_EQ(rounded.size(), drawn.size());
  for (size_t i = 0; i < drawn.size(); ++i)
    EXPECT_EQ(rounded[i], cpu::fromBf16(cpu::toBf16(drawn[i])))
        << "element " << i;
  EXPECT_NE(read("u"), drawn);
  EXPECT_EQ(read("grad.w"), std::vector<float>(15, 0.0f));
}

TEST(CpuExecutorSteps, LearningRateOverride) {
  PlanBuilder b;
  uint32_t step = b.value(DType::F32, {});
  uint32_t lr = b.value(DType::F32, {});
  b.function("f", {step});
  b.instr(OpCode::LrSchedule, {step}, {lr}, {2, 10}, {0.1, 0.01});
  b.results({lr}, {"lr"});
  auto lrAt = [&](CpuExecutor &executor, float at) {
    auto results = executor.run("f", {floats({}, {at})});
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() ? (*results)[0].floats[0] : -1.0f;
  };
  Loaded plain = load(b.build());
  EXPECT_FLOAT_EQ(lrAt(*plain.executor, 1), 0.05f);  // warmup
  EXPECT_FLOAT_EQ(lrAt(*plain.executor, 10), 0.01f); // floor
  ExecutorOptions options;
  options.peakLearningRate = 0.4;
  Loaded overridden = load(b.build(), options);
  EXPECT_FLOAT_EQ(lrAt(*overridden.executor, 1), 0.2f);
  EXPECT_FLOAT_EQ(lrAt(*overridden.executor, 2), 0.4f);
  EXPECT_FLOAT_EQ(lrAt(*overridden.executor, 6), 0.22f); // half way
  EXPECT_FLOAT_EQ(lrAt(*overridden.executor, 10), 0.04f);

  for (double bad : {0.0, -1.0, std::nan("")}) {
    options.peakLearningRate = bad;
    auto executor = CpuExecutor::create(plain.plan, 0, 1, options);
    ASSERT_FALSE(executor.ok());
    EXPECT_NE(executor.status().message().find(
                  "the learning rate must be positive and finite"),
              std::string::npos);
  }
}

TEST(CpuExecutorSteps, ScheduleOverTheRun) {
  // decay -1: the cosine ends at the run's last step, which the options
  // give; a plan with such a schedule is refused without it.
  PlanBuilder b;
  uint32_t step = b.value(DType::F32, {});
  uint32_t lr = b.value(DType::F32, {});
  b.function("f", {step});
  b.instr(OpCode::LrSchedule, {step}, {lr}, {0, -1}, {0.1, 0.0});
  b.results({lr}, {"lr"});
  std::string bytes = b.build();
  auto plan = loadPlanFromBytes(bytes, "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto refused = CpuExecutor::create(*plan, 0, 1, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "decays over the run (decay-steps=-1, the default), but the "
                "run's last step was not given"),
            std::string::npos)
      << refused.status();
  ExecutorOptions options;
  options.runSteps = 0;
  EXPECT_FALSE(CpuExecutor::create(*plan, 0, 1, options).ok());
  options.runSteps = 10;
  Loaded loaded = load(bytes, options);
  auto lrAt = [&](float at) {
    auto results = loaded.executor->run("f", {floats({}, {at})});
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() ? (*results)[0].floats[0] : -1.0f;
  };
  EXPECT_FLOAT_EQ(lrAt(5), 0.05f); // half way
  EXPECT_FLOAT_EQ(lrAt(10), 0.0f);
  EXPECT_EQ(loaded.executor->hyperparameters().at("decay_steps"), 10.0);
}

TEST(CpuExecutorSteps, RunsFunctionsByIndexAndTimesInstructions) {
  PlanBuilder b;
  uint32_t x = b.value(DType::F32, {3});
  b.function("first");
  b.instr(OpCode::Fill, {}, {x}, {}, {2.0});
  b.function("second");
  b.instr(OpCode::Scale, {x}, {x}, {}, {3.0});
  b.instr(OpCode::Scale, {x}, {x}, {}, {0.5});
  b.results({x}, {});
  Loaded loaded = load(b.build());
  ASSERT_TRUE(loaded.executor->run(0, {}).ok());
  std::vector<InstructionTime> times;
  auto results = loaded.executor->run(1, {}, 0, &times);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].floats, (std::vector<float>{3, 3, 3}));
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[0].op, OpCode::Scale);
  EXPECT_LE(times[0].beginNanos, times[0].endNanos);
  EXPECT_LE(times[0].endNanos, times[1].beginNanos);
  EXPECT_FALSE(loaded.executor->run(2, {}).ok());
}

TEST(CpuExecutorSteps, SlottedValuesKeepOneCopyPerSlot) {
  // A stage's forward keeps a value for its backward, one copy per
  // microbatch in flight: the call's slot picks the copy.
  PlanBuilder b;
  uint32_t kept = b.slottedValue(DType::F32, {3}, 2);
  uint32_t doubled = b.value(DType::F32, {3});
  b.function("forward", {kept});
  b.instr(OpCode::Scale, {kept}, {kept}, {}, {10.0});
  b.function("backward");
  b.instr(OpCode::Scale, {kept}, {doubled}, {}, {2.0});
  b.results({doubled}, {});
  Loaded loaded = load(b.build());
  ASSERT_TRUE(loaded.executor
                  ->run(0, {floats({3}, {1, 2, 3})}, 0, nullptr,
                        /*microbatch=*/0, /*slot=*/0)
                  .ok());
  ASSERT_TRUE(loaded.executor
                  ->run(0, {floats({3}, {4, 5, 6})}, 0, nullptr,
                        /*microbatch=*/1, /*slot=*/1)
                  .ok());
  auto first = loaded.executor->run(1, {}, 0, nullptr, 0, 0);
  auto second = loaded.executor->run(1, {}, 0, nullptr, 1, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)[0].floats, (std::vector<float>{20, 40, 60}));
  EXPECT_EQ((*second)[0].floats, (std::vector<float>{80, 100, 120}));
  // Slot 2 of a value with 2 copies is its copy 0.
  auto wrapped = loaded.executor->run(1, {}, 0, nullptr, 2, 2);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ((*wrapped)[0].floats, (std::vector<float>{20, 40, 60}));
  auto outside = loaded.executor->run(1, {}, 0, nullptr, 0, 1u << 16);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("has no slot 65536"),
            std::string::npos)
      << outside.status();
}

TEST(CpuExecutorSteps, FusedEpiloguesGiveTheBitsOfTheUnfusedKernels) {
  // x [2, 3, 8] . w [8, 16] + bias, then the activation: as one fused
  // product, and as the product, Add and Activation kernels.
  uint32_t state = 12345;
  std::vector<float> x = uniform(48, state, 1.0f),
                     w = uniform(128, state, 1.0f),
                     bias = uniform(16, state, 1.0f);
  struct Case {
    triad::plan::EpilogueCode epilogue;
    int64_t activation; // -1: none
    bool keep;
  };
  for (Case c : {Case{triad::plan::EpilogueCode::Bias, -1, false},
                 Case{triad::plan::EpilogueCode::BiasGeluTanh, 1, true},
                 Case{triad::plan::EpilogueCode::BiasGeluTanh, 1, false},
                 Case{triad::plan::EpilogueCode::BiasRelu, 3, true}}) {
    PlanBuilder b;
    uint32_t vx = b.value(DType::F32, {2, 3, 8});
    uint32_t vw = b.value(DType::F32, {8, 16});
    uint32_t vb = b.value(DType::F32, {16});
    uint32_t product = b.value(DType::F32, {2, 3, 16});
    uint32_t sum = b.value(DType::F32, {2, 3, 16});
    uint32_t y = b.value(DType::F32, {2, 3, 16});
    uint32_t fusedY = b.value(DType::F32, {2, 3, 16});
    uint32_t fusedSum = b.value(DType::F32, {2, 3, 16});
    b.function("unfused", {vx, vw, vb});
    b.instr(OpCode::Matmul, {vx, vw}, {product}, {0, 0});
    b.instr(OpCode::Add, {product, vb}, {sum});
    if (c.activation >= 0) {
      b.instr(OpCode::Activation, {sum}, {y}, {c.activation});
      b.results({y, sum}, {});
    } else {
      b.results({sum, sum}, {});
    }
    b.function("fused", {vx, vw, vb});
    std::vector<uint32_t> outputs = {fusedY};
    if (c.keep)
      outputs.push_back(fusedSum);
    b.instr(OpCode::Matmul, {vx, vw, vb}, outputs,
            {0, 0, static_cast<int64_t>(c.epilogue)});
    b.results({fusedY, c.keep ? fusedSum : fusedY}, {});
    Loaded loaded = load(b.build());
    std::vector<HostTensor> args = {floats({2, 3, 8}, x), floats({8, 16}, w),
                                    floats({16}, bias)};
    auto unfused = loaded.executor->run("unfused", args);
    auto fused = loaded.executor->run("fused", args);
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    ASSERT_TRUE(fused.ok()) << fused.status();
    std::string what =
        "epilogue " + std::to_string(static_cast<int>(c.epilogue));
    EXPECT_EQ((*fused)[0].floats, (*unfused)[0].floats) << what;
    if (c.keep)
      EXPECT_EQ((*fused)[1].floats, (*unfused)[1].floats) << what;
  }
}

TEST(CpuExecutorSteps, GeluGradientEpilogueGivesTheBitsOfTheUnfusedKernels) {
  // dy [2, 3, 8] . w [16, 8]^T, then the tanh GELU's gradient at its input
  // [2, 3, 16] and that summed over the rows (the bias gradient): as one
  // fused product, and as the Matmul, ActivationGrad and Sum kernels. In
  // f32 every bit agrees; in bf16 the fused product rounds once, after the
  // epilogue, where the unfused kernels round the product, its gradient
  // and their sum: within a few bf16 roundings of the magnitudes summed.
  uint32_t state = 777;
  std::vector<float> dy = uniform(48, state, 4.0f),
                     w = uniform(128, state, 4.0f),
                     pre = uniform(96, state, 4.0f);
  const int64_t code =
      static_cast<int64_t>(triad::plan::EpilogueCode::GeluTanhGrad);
  const int64_t geluTanh = 1;
  PlanBuilder b;
  uint32_t vdy = b.value(DType::F32, {2, 3, 8});
  uint32_t vw = b.value(DType::F32, {16, 8});
  uint32_t vpre = b.value(DType::F32, {2, 3, 16});
  // Per type: the product, its gradient, the bias gradient, and the fused
  // kernel's two results (and one without the bias gradient).
  struct Values {
    uint32_t dy, w, pre, product, grad, biasGrad, fusedGrad, fusedBiasGrad,
        onlyGrad;
  };
  auto values = [&](DType type) {
    Values v;
    v.dy = type == DType::F32 ? vdy : b.value(type, {2, 3, 8});
    v.w = type == DType::F32 ? vw : b.value(type, {16, 8});
    v.pre = type == DType::F32 ? vpre : b.value(type, {2, 3, 16});
    v.product = b.value(type, {2, 3, 16});
    v.grad = b.value(type, {2, 3, 16});
    v.biasGrad = b.value(type, {1, 1, 16});
    v.fusedGrad = b.value(type, {2, 3, 16});
    v.fusedBiasGrad = b.value(type, {16});
    v.onlyGrad = b.value(type, {2, 3, 16});
    return v;
  };
  Values f32 = values(DType::F32), bf16 = values(DType::BF16);
  for (const auto &[name, v] :
       {std::pair{"f32", f32}, std::pair{"bf16", bf16}}) {
    b.function(std::string("unfused ") + name, {vdy, vw, vpre});
    if (v.dy != vdy)
      for (auto [from, to] :
           {std::pair{vdy, v.dy}, std::pair{vw, v.w}, std::pair{vpre, v.pre}})
        b.instr(OpCode::Cast, {from}, {to});
    b.instr(OpCode::Matmul, {v.dy, v.w}, {v.product}, {0, 1});
    b.instr(OpCode::ActivationGrad, {v.pre, v.product}, {v.grad}, {geluTanh});
    b.instr(OpCode::Sum, {v.grad}, {v.biasGrad}, {}, {1.0});
    b.results({v.grad, v.biasGrad}, {});
    b.function(std::string("fused ") + name, {vdy, vw, vpre});
    if (v.dy != vdy)
      for (auto [from, to] :
           {std::pair{vdy, v.dy}, std::pair{vw, v.w}, std::pair{vpre, v.pre}})
        b.instr(OpCode::Cast, {from}, {to});
    b.instr(OpCode::Matmul, {v.dy, v.w, v.pre}, {v.fusedGrad, v.fusedBiasGrad},
            {0, 1, code});
    b.instr(OpCode::Matmul, {v.dy, v.w, v.pre}, {v.onlyGrad}, {0, 1, code});
    b.results({v.fusedGrad, v.fusedBiasGrad, v.onlyGrad}, {});
  }
  Loaded loaded = load(b.build());
  std::vector<HostTensor> args = {floats({2, 3, 8}, dy), floats({16, 8}, w),
                                  floats({2, 3, 16}, pre)};
  for (const char *name : {"f32", "bf16"}) {
    auto unfused = loaded.executor->run(std::string("unfused ") + name, args);
    auto fused = loaded.executor->run(std::string("fused ") + name, args);
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    ASSERT_TRUE(fused.ok()) << fused.status();
    const std::vector<float> &grad = (*unfused)[0].floats,
                             &biasGrad = (*unfused)[1].floats;
    ASSERT_EQ(grad.size(), 96u);
    ASSERT_EQ((*fused)[1].floats.size(), 16u);
    // The gradient epilogue is the same with or without the bias gradient.
    EXPECT_EQ((*fused)[2].floats, (*fused)[0].floats) << name;
    if (std::string(name) == "f32") {
      EXPECT_EQ((*fused)[0].floats, grad);
      EXPECT_EQ((*fused)[1].floats, biasGrad);
      continue;
    }
    // bf16: 2^-8 relative per rounding; the bias gradient's error is at
    // most the roundings of the terms it adds, relative to their sizes.
    for (size_t i = 0; i < grad.size(); ++i)
      EXPECT_NEAR((*fused)[0].floats[i], grad[i],
                  3 * std::ldexp(std::fabs(grad[i]), -8) + 1e-6)
          << "element " << i;
    for (size_t j = 0; j < 16; ++j) {
      double magnitude = 0.0;
      for (size_t row = 0; row < 6; ++row)
        magnitude += std::fabs(grad[row * 16 + j]);
      EXPECT_NEAR((*fused)[1].floats[j], biasGrad[j],
                  3 * std::ldexp(magnitude, -8) + 1e-6)
          << "bias gradient " << j;
    }
    // The rounding does differ somewhere: the bf16 path ran.
    EXPECT_NE((*fused)[0].floats, grad);
  }
}

TEST(CpuExecutorSteps, AccumulatingEpilogueAddsTheWeightedProduct) {
  // acc [8, 4] += w * a [6, 8]^T . b [6, 4]: as one product with the
  // accumulating epilogue, and as the Matmul and Accumulate kernels. In f32
  // every bit agrees (the same product, multiply and add); with bf16
  // operands the fused product is added unrounded, where the unfused one
  // is rounded to bf16 first: the fused result is the f32 reference's.
  uint32_t state = 4242;
  std::vector<float> a = uniform(48, state, 2.0f),
                     bm = uniform(24, state, 2.0f),
                     acc = uniform(32, state, 2.0f);
  const float weight = 0.75f;
  const int64_t code =
      static_cast<int64_t>(triad::plan::EpilogueCode::Accumulate);
  PlanBuilder b;
  uint32_t va = b.value(DType::F32, {6, 8}), vb = b.value(DType::F32, {6, 4});
  uint32_t vacc = b.value(DType::F32, {8, 4}), vw = b.value(DType::F32, {});
  for (DType type : {DType::F32, DType::BF16}) {
    std::string name = type == DType::F32 ? "f32" : "bf16";
    uint32_t ta = va, tb = vb;
    uint32_t product = b.value(type, {8, 4});
    for (bool fused : {false, true}) {
      b.function((fused ? "fused " : "unfused ") + name, {va, vb, vacc, vw});
      if (type != DType::F32) {
        ta = b.value(type, {6, 8});
        tb = b.value(type, {6, 4});
        b.instr(OpCode::Cast, {va}, {ta});
        b.instr(OpCode::Cast, {vb}, {tb});
      }
      if (fused) {
        b.instr(OpCode::Matmul, {ta, tb, vacc, vw}, {vacc}, {1, 0, code});
      } else {
        b.instr(OpCode::Matmul, {ta, tb}, {product}, {1, 0});
        b.instr(OpCode::Accumulate, {vacc, product, vw}, {vacc});
      }
      b.results({vacc}, {});
    }
  }
  Loaded loaded = load(b.build());
  std::vector<HostTensor> args = {floats({6, 8}, a), floats({6, 4}, bm),
                                  floats({8, 4}, acc), floats({}, {weight})};
  for (const char *name : {"f32", "bf16"}) {
    auto unfused = loaded.executor->run(std::string("unfused ") + name, args);
    auto fused = loaded.executor->run(std::string("fused ") + name, args);
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    ASSERT_TRUE(fused.ok()) << fused.status();
    const std::vector<float> &got = (*fused)[0].floats,
                             &kernels = (*unfused)[0].floats;
    ASSERT_EQ(got.size(), 32u);
    if (std::string(name) == "f32") {
      EXPECT_EQ(got, kernels);
      continue;
    }
    // The reference: the bf16 operands' product in double, weighted and
    // added to acc.
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double product = 0.0;
        for (int64_t k = 0; k < 6; ++k)
          product += static_cast<double>(roundedToBf16(a[k * 8 + i])) *
                     roundedToBf16(bm[k * 4 + j]);
        double want = acc[i * 4 + j] + weight * product;
        EXPECT_NEAR(got[i * 4 + j], want, 1e-5 * (std::fabs(want) + 1.0))
            << "element " << i << ", " << j;
      }
    // The unfused kernels round the product to bf16 first: the fused
    // result differs from theirs somewhere.
    EXPECT_NE(got, kernels);
  }
}

TEST(CpuExecutorSteps, AddingEpiloguesGiveTheBitsOfTheAdd) {
  // x [2, 3, 8] . w [8, 16] (+ bias) + r: as one product with an adding
  // epilogue (6, or 7 after the bias), and as the product (with its bias
  // epilogue) and an Add kernel, with the product on either side of the
  // add: f32 results have the same bits.
  uint32_t state = 99;
  std::vector<float> x = uniform(48, state, 1.0f),
                     w = uniform(128, state, 1.0f),
                     bias = uniform(16, state, 1.0f),
                     r = uniform(96, state, 1.0f);
  for (bool biased : {false, true}) {
    PlanBuilder b;
    uint32_t vx = b.value(DType::F32, {2, 3, 8}),
             vw = b.value(DType::F32, {8, 16});
    uint32_t vb = b.value(DType::F32, {16}),
             vr = b.value(DType::F32, {2, 3, 16});
    uint32_t product = b.value(DType::F32, {2, 3, 16});
    uint32_t left = b.value(DType::F32, {2, 3, 16}),
             right = b.value(DType::F32, {2, 3, 16}),
             fused = b.value(DType::F32, {2, 3, 16});
    std::vector<uint32_t> operands = {vx, vw};
    if (biased)
      operands.push_back(vb);
    std::vector<int64_t> productInts = {0, 0};
    if (biased)
      productInts.push_back(
          static_cast<int64_t>(triad::plan::EpilogueCode::Bias));
    b.function("unfused", {vx, vw, vb, vr});
    b.instr(OpCode::Matmul, operands, {product}, productInts);
    b.instr(OpCode::Add, {product, vr}, {left});
    b.instr(OpCode::Add, {vr, product}, {right});
    b.results({left, right}, {});
    b.function("fused", {vx, vw, vb, vr});
    std::vector<uint32_t> inputs = operands;
    inputs.push_back(vr);
    b.instr(OpCode::Matmul, inputs, {fused},
            {0, 0,
             static_cast<int64_t>(biased ? triad::plan::EpilogueCode::BiasAddend
                                         : triad::plan::EpilogueCode::Addend)});
    b.results({fused}, {});
    Loaded loaded = load(b.build());
    std::vector<HostTensor> args = {floats({2, 3, 8}, x), floats({8, 16}, w),
                                    floats({16}, bias), floats({2, 3, 16}, r)};
    auto unfused = loaded.executor->run("unfused", args);
    auto got = loaded.executor->run("fused", args);
    ASSERT_TRUE(unfused.ok()) << unfused.status();
    ASSERT_TRUE(got.ok()) << got.status();
    std::string what = biased ? "after the bias" : "alone";
    EXPECT_EQ((*got)[0].floats, (*unfused)[0].floats) << what;
    EXPECT_EQ((*got)[0].floats, (*unfused)[1].floats) << what;
  }
}

TEST(CpuExecutorSteps, AccumulatingEpilogueIntoA16BitAccumulator) {
  // grad-accumulation=param: bf16 operands added to a bf16 accumulator,
  // the sum rounded once (the widened accumulator plus the weighted f32
  // product, rounded to bf16).
  uint32_t state = 31;
  std::vector<float> a = uniform(48, state, 2.0f),
                     bm = uniform(24, state, 2.0f),
                     acc = uniform(32, state, 2.0f);
  const float weight = 1.5f;
  for (float &v : a)
    v = roundedToBf16(v);
  for (float &v : bm)
    v = roundedToBf16(v);
  for (float &v : acc)
    v = roundedToBf16(v);
  PlanBuilder b;
  uint32_t va = b.value(DType::BF16, {6, 8}), vb = b.value(DType::BF16, {6, 4});
  uint32_t vacc = b.value(DType::BF16, {8, 4}), vw = b.value(DType::F32, {});
  b.function("f", {va, vb, vacc, vw});
  b.instr(OpCode::Matmul, {va, vb, vacc, vw}, {vacc},
          {1, 0, static_cast<int64_t>(triad::plan::EpilogueCode::Accumulate)});
  b.results({vacc}, {});
  Loaded loaded = load(b.build());
  std::vector<HostTensor> args = {floats({6, 8}, a), floats({6, 4}, bm),
                                  floats({8, 4}, acc), floats({}, {weight})};
  for (size_t i = 0; i < 3; ++i)
    args[i].dtype = DType::BF16;
  auto got = loaded.executor->run("f", args);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ((*got)[0].floats.size(), 32u);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double product = 0.0;
      for (int64_t k = 0; k < 6; ++k)
        product += static_cast<double>(a[k * 8 + i]) * bm[k * 4 + j];
      float want =
          roundedToBf16(acc[i * 4 + j] + weight * static_cast<float>(product));
      EXPECT_NEAR((*got)[0].floats[i * 4 + j], want,
                  std::ldexp(std::fabs(want), -8) + 1e-6)
          << "element " << i << ", " << j;
    }
}

/// Runs function "f" of the plan `build(type)` makes, once in `half` (its
/// first `sixteen` arguments of that type) and once in f32, on `args`
/// rounded to `half` as the 16-bit plan stores them: each 16-bit result
/// must be the f32 plan's rounded once, each f32 one the f32 plan's.
void expectTheWidenedBits(const std::function<std::string(DType)> &build,
                          std::vector<HostTensor> args, size_t sixteen,
                          DType half) {
  bool bf16 = half == DType::BF16;
  auto round = [&](std::vector<float> &values) {
    std::vector<uint16_t> bits(values.size());
    cpu::narrow(bf16, values.data(), bits.data(), bits.size());
    cpu::widen(bf16, bits.data(), values.data(), bits.size());
  };
  for (size_t a = 0; a < sixteen; ++a)
    round(args[a].floats);
  Loaded halfPlan = load(build(half)), wide = load(build(DType::F32));
  std::vector<HostTensor> halfArgs = args;
  for (size_t a = 0; a < sixteen; ++a)
    halfArgs[a].dtype = half;
  auto got = halfPlan.executor->run("f", halfArgs);
  auto want = wide.executor->run("f", args);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t r = 0; r < got->size(); ++r) {
    std::vector<float> expected = (*want)[r].floats;
    if ((*got)[r].dtype != DType::F32)
      round(expected);
    const std::vector<float> &values = (*got)[r].floats;
    ASSERT_EQ(values.size(), expected.size());
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(values[i], expected[i]) << "result " << r << ", element " << i;
  }
}

TEST(CpuExecutorSteps, SixteenBitElementwiseKernelsGiveTheWidenedBits) {
  // Add (broadcast and whole), Mul, Activation, ActivationGrad and Gated on
  // bf16 and f16 values (converted a chunk at a time, cpu::StoredIn; 15,000
  // elements are several chunks), an f32 bias added to them, a result
  // written over its operand, layer and RMS norms and their gradients (a
  // row at a time), sums over leading dimensions (a block of columns at a
  // time, to 16-bit and f32 results) and casts to and from f32: the bits
  // of the f32 kernels on the widened values, rounded once.
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(half == DType::BF16 ? "bf16" : "f16");
    const std::vector<int64_t> shape = {3, 5000}, row = {5000};
    const int64_t n = 15000;
    // One plan in `type`, one in f32 on the same (rounded) values.
    auto build = [&](DType type) {
      PlanBuilder b;
      uint32_t x = b.value(type, shape), y = b.value(type, shape),
               bias = b.value(type, row), wideBias = b.value(DType::F32, row);
      std::vector<uint32_t> results;
      auto result = [&] {
        results.push_back(b.value(type, shape));
        return results.back();
      };
      b.function("f", {x, y, bias, wideBias});
      b.instr(OpCode::Add, {x, bias}, {result()});
      b.instr(OpCode::Add, {x, wideBias}, {result()});
      b.instr(OpCode::Add, {x, y}, {result()});
      b.instr(OpCode::Mul, {x, y}, {result()});
      b.instr(OpCode::Activation, {x}, {result()}, {0}); // erf GELU
      b.instr(OpCode::ActivationGrad, {x, y}, {result()}, {1});
      b.instr(OpCode::Gated, {x, y}, {result()}, {4}); // SwiGLU
      // Norms (a row at a time), with 16-bit and f32 gammas and betas.
      b.instr(OpCode::LayerNorm, {x, bias, wideBias}, {result()}, {}, {1e-5});
      b.instr(OpCode::RmsNorm, {x, bias}, {result()}, {}, {1e-5});
      uint32_t dgamma = b.value(type, row),
               wideDgamma = b.value(DType::F32, row);
      b.instr(OpCode::LayerNormGrad, {x, bias, y}, {result(), dgamma}, {},
              {1e-5});
      b.instr(OpCode::RmsNormGrad, {x, wideBias, y}, {result(), wideDgamma}, {},
              {1e-5});
      results.insert(results.end(), {dgamma, wideDgamma});
      b.instr(OpCode::Mul, {y, x}, {y}); // in place
      results.push_back(y);
      uint32_t sum = b.value(type, row), lead = b.value(type, {1, 5000}),
               wideSum = b.value(DType::F32, row);
      b.instr(OpCode::Sum, {x}, {sum}, {}, {0.5});
      b.instr(OpCode::Sum, {x}, {lead}, {}, {1.0});
      b.instr(OpCode::Sum, {x}, {wideSum}, {}, {1.0});
      uint32_t widened = b.value(DType::F32, shape),
               rounded = b.value(type, row);
      b.instr(OpCode::Cast, {x}, {widened});
      b.instr(OpCode::Cast, {wideBias}, {rounded});
      results.insert(results.end(), {sum, lead, wideSum, widened, rounded});
      b.results(results, {});
      return b.build();
    };
    uint32_t state = 99;
    std::vector<HostTensor> args = {floats(shape, uniform(n, state, 6.0f)),
                                    floats(shape, uniform(n, state, 6.0f)),
                                    floats(row, uniform(5000, state, 2.0f)),
                                    floats(row, uniform(5000, state, 2.0f))};
    expectTheWidenedBits(build, args, 3, half);
  }
}

// Attention and its gradient on bf16 and f16 values (each (sample, head)
// widened into dense buffers, cpu::attention on StoredIn): the bits of the
// f32 kernels on the widened values, rounded once; grouped-query heads
// (dk and dv summed over a group before they are rounded), a causal mask
// and more query rows than one block, and an ALiBi bias.
TEST(CpuExecutorSteps, SixteenBitAttentionGivesTheWidenedBits) {
  const int64_t batch = 2, seq = 70, heads = 4, kvHeads = 2, headDim = 8;
  const std::vector<int64_t> queries = {batch, seq, heads * headDim},
                             keys = {batch, seq, kvHeads * headDim},
                             slopesShape = {heads};
  for (DType half : {DType::BF16, DType::F16}) {
    for (bool alibi : {false, true}) {
      SCOPED_TRACE(testing::Message() << (half == DType::BF16 ? "bf16" : "f16")
                                      << (alibi ? ", ALiBi" : ""));
      auto build = [&](DType type) {
        PlanBuilder b;
        uint32_t q = b.value(type, queries), k = b.value(type, keys),
                 v = b.value(type, keys), dout = b.value(type, queries),
                 slopes = b.value(DType::F32, slopesShape);
        uint32_t out = b.value(type, queries), dq = b.value(type, queries),
                 dk = b.value(type, keys), dv = b.value(type, keys);
        std::vector<int64_t> ints = {
            heads, kvHeads, static_cast<int64_t>(triad::plan::MaskCode::Causal),
            0, alibi ? 1 : 0};
        std::vector<uint32_t> inputs = {q, k, v};
        if (alibi)
          inputs.push_back(slopes);
        b.function("f", {q, k, v, dout, slopes});
        b.instr(OpCode::Attention, inputs, {out}, ints, {0.35});
        inputs.push_back(dout); // the gradient's last operand
        b.instr(OpCode::AttentionGrad, inputs, {dq, dk, dv}, ints, {0.35});
        b.results({out, dq, dk, dv}, {});
        return b.build();
      };
      uint32_t state = 7;
      std::vector<HostTensor> args = {
          floats(queries, uniform(batch * seq * heads * headDim, state, 2.0f)),
          floats(keys, uniform(batch * seq * kvHeads * headDim, state, 2.0f)),
          floats(keys, uniform(batch * seq * kvHeads * headDim, state, 2.0f)),
          floats(queries, uniform(batch * seq * heads * headDim, state, 2.0f)),
          floats(slopesShape, {0.5f, 0.25f, 0.125f, 0.0625f})};
      expectTheWidenedBits(build, args, 4, half);
    }
  }
}

} // namespace
