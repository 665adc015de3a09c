//===- PlanTest.cpp - loading and verifying plan files --------------------===//
//
// A valid plan loads; every truncation and thousands of random corruptions
// of it are errors or still-valid plans, never crashes (this test also runs
// under AddressSanitizer); every semantic check has a case.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include "runtime/init/Philox.h"
#include "runtime/support/Files.h"
#include "runtime/tests/PlanBuilder.h"

#include <gtest/gtest.h>

#include <functional>

using namespace triad::rt;
namespace fb = flatbuffers;

namespace {

/// The pieces of a small plan: y[2,4] = x[2,3] @ w[3,4] with w a parameter,
/// and spare values (an f32 scalar, i32 [2, 3] and another f32 scalar) for
/// other instructions; tests change a piece, then build.
struct PlanSpec {
  uint32_t version = kPlanVersion;
  int64_t seq = 3, vocab = 16, batch = 2, microbatches = 1;
  std::vector<std::pair<std::string, uint32_t>> mesh = {
      {"dp", 1}, {"tp", 1}, {"pp", 1}};
  uint64_t arena = 136;
  struct V {
    triad::plan::DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
  };
  std::vector<V> values = {{triad::plan::DType::F32, {2, 3}, 0, 24},
                           {triad::plan::DType::F32, {3, 4}, 24, 48},
                           {triad::plan::DType::F32, {2, 4}, 72, 32},
                           {triad::plan::DType::F32, {}, 104, 4},
                           {triad::plan::DType::I32, {2, 3}, 108, 24},
                           {triad::plan::DType::F32, {}, 132, 4}};
  std::vector<int64_t> globalShape = {3, 4}, offsets = {0, 0};
  triad::plan::Role role = triad::plan::Role::Parameter;
  triad::plan::InitKind initKind = triad::plan::InitKind::Normal;
  triad::plan::OpCode op = triad::plan::OpCode::Matmul;
  std::vector<uint32_t> inputs = {0, 1}, outputs = {2};
  std::vector<int64_t> ints = {0, 0};
  std::vector<double> floats = {};
  int functions = 1;
  std::vector<uint32_t> args = {0}, results = {2};
  std::vector<triad::plan::ArgKind> argKinds;
  std::vector<std::string> resultNames;
  /// The step: (function, microbatch) calls.
  std::vector<std::pair<uint32_t, uint32_t>> calls;

  std::string build() const {
    fb::FlatBufferBuilder b;
    std::vector<fb::Offset<triad::plan::Value>> valueOffsets;
    for (const V &v : values) {
      triad::plan::Region region(v.offset, v.bytes);
      valueOffsets.push_back(triad::plan::CreateValue(
          b, v.dtype, b.CreateVector(v.shape), &region));
    }
    auto init =
        triad::plan::CreateInit(b, initKind, 0.02, 0, 0.0, b.CreateString("w"));
    auto persistent = triad::plan::CreatePersistent(
        b, b.CreateString("w"), role, 1, b.CreateVector(globalShape),
        b.CreateVector(offsets), init);
    auto instr = triad::plan::CreateInstr(
        b, op, b.CreateVector(inputs), b.CreateVector(outputs),
        b.CreateVector(ints), b.CreateVector(floats));
    std::vector<fb::Offset<triad::plan::Function>> functionOffsets;
    std::vector<fb::Offset<fb::String>> names;
    for (const std::string &name : resultNames)
      names.push_back(b.CreateString(name));
    for (int i = 0; i < functions; ++i)
      functionOffsets.push_back(triad::plan::CreateFunction(
          b, b.CreateString("forward"), b.CreateVector(args),
          b.CreateVector(argKinds), b.CreateVector(results),
          b.CreateVector(names),
          b.CreateVector(std::vector<fb::Offset<triad::plan::Instr>>{instr})));
    std::vector<triad::plan::Call> step;
    for (const auto &[function, microbatch] : calls)
      step.emplace_back(function, microbatch);
    auto program = triad::plan::CreateProgram(
        b, 0, arena, b.CreateVector(valueOffsets),
        b.CreateVector(
            std::vector<fb::Offset<triad::plan::Persistent>>{persistent}),
        b.CreateVector(functionOffsets), b.CreateVectorOfStructs(step));
    std::vector<fb::Offset<triad::plan::MeshAxis>> axes;
    for (const auto &[name, size] : mesh)
      axes.push_back(
          triad::plan::CreateMeshAxis(b, b.CreateString(name), size));
    auto plan = triad::plan::CreatePlan(
        b, version, b.CreateVector(axes),
        b.CreateVector(std::vector<fb::Offset<triad::plan::Program>>{program}),
        seq, vocab, batch, microbatches);
    triad::plan::FinishPlanBuffer(b, plan);
    return std::string(reinterpret_cast<const char *>(b.GetBufferPointer()),
                       b.GetSize());
  }
};

std::string loadError(const PlanSpec &spec) {
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST(Plan, ValidPlanLoads) {
  auto plan = loadPlanFromBytes(PlanSpec().build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->root().programs()->Get(0)->values()->size(), 6u);
  std::string path = ::testing::TempDir() + "valid.plan";
  ASSERT_TRUE(writeFileAtomically(path, PlanSpec().build()).ok());
  EXPECT_TRUE(loadPlan(path).ok());
  EXPECT_FALSE(loadPlan(path + ".missing").ok());
}

TEST(Plan, TrainingPlanLoads) {
  auto plan = loadPlanFromBytes(tests::buildTrainingPlan({}), "training.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Program &program = *plan->root().programs()->Get(0);
  ASSERT_EQ(program.step()->size(), 4u);
  EXPECT_EQ(program.step()->Get(2)->microbatch(), 1u);
  EXPECT_EQ(microbatchSamples(plan->root()), 2);
  EXPECT_EQ(meshSize(plan->root()), 1);
  EXPECT_EQ(meshAxisSize(plan->root(), "tp"), 1);
  EXPECT_EQ(meshAxisSize(plan->root(), "ep"), 1);
}

/// Every truncation of `bytes` is rejected; random single- and multi-byte
/// corruptions (a fixed seed) are each rejected or, if the corruption
/// happens to leave a valid plan, pass every check. Returns the rejections.
int corruptAndLoad(const std::string &bytes, uint32_t trials) {
  for (size_t length = 0; length < bytes.size(); ++length)
    EXPECT_FALSE(loadPlanFromBytes(bytes.substr(0, length), "t").ok())
        << "length " << length;
  triad::rt::PhiloxKey key{1, 2};
  int rejected = 0;
  for (uint32_t trial = 0; trial < trials; ++trial) {
    std::string copy = bytes;
    auto random = triad::rt::philox4x32({trial, 0, 0, 0}, key);
    for (int flip = 0; flip < 1 + static_cast<int>(random[3] % 3); ++flip) {
      size_t position = random[flip] % copy.size();
      copy[position] = static_cast<char>(random[(flip + 1) % 4] >> 8);
    }
    rejected += !loadPlanFromBytes(copy, "t").ok();
  }
  return rejected;
}

TEST(Plan, TruncatedAndCorruptedFilesNeverCrash) {
  EXPECT_GT(corruptAndLoad(PlanSpec().build(), 5000), 1000);
  // A whole training step: several functions, argument kinds, result names
  // and the step's calls.
  EXPECT_GT(corruptAndLoad(tests::buildTrainingPlan({}), 5000), 1000);
  EXPECT_EQ(loadError(PlanSpec()), "");
  std::string notPlan = "definitely not a plan file";
  EXPECT_NE(loadPlanFromBytes(notPlan, "t")
                .status()
                .message()
                .find("not a Triad plan file"),
            std::string::npos);
}

TEST(Plan, SemanticChecksSayWhatIsWrong) {
  struct Case {
    const char *what;
    std::function<void(PlanSpec &)> change;
    const char *expected;
  };
  const Case cases[] = {
      {"version", [](PlanSpec &s) { s.version = 99; },
       "plan format version 99 is not the runtime's (1)"},
      {"microbatches", [](PlanSpec &s) { s.microbatches = 3; },
       "microbatches must divide batch"},
      {"empty axis", [](PlanSpec &s) { s.mesh[1].second = 0; },
       "mesh axis 'tp' is empty or repeated"},
      {"repeated axis", [](PlanSpec &s) { s.mesh[1].first = "dp"; },
       "mesh axis 'dp' is empty or repeated"},
      {"outside the arena", [](PlanSpec &s) { s.arena = 100; },
       "program 0: value 2 (bytes 72..104) lies outside the arena of 100 "
       "bytes"},
      {"huge offset",
       [](PlanSpec &s) { s.values[2].offset = ~uint64_t(0) - 8; },
       "lies outside the arena"},
      {"small region", [](PlanSpec &s) { s.values[1].bytes = 40; },
       "value 1 needs 48 bytes but its region has 40"},
      {"misaligned", [](PlanSpec &s) { s.values[0].offset = 2; },
       "value 0 is not aligned to its 4-byte elements"},
      {"unknown dtype",
       [](PlanSpec &s) {
         s.values[0].dtype = static_cast<triad::plan::DType>(9);
       },
       "value 0 has an unknown element type"},
      {"negative size",
       [](PlanSpec &s) {
         s.values[0].shape = {-2, 3};
       },
       "value 0 has an invalid shape"},
      {"slice outside",
       [](PlanSpec &s) {
         s.offsets = {1, 0};
       },
       "persistent tensor 'w': its slice lies outside its global shape"},
      {"bad input index",
       [](PlanSpec &s) {
         s.inputs = {0, 7};
       },
       "instruction 0 (Matmul): input 7 is not a value"},
      {"contraction",
       [](PlanSpec &s) {
         s.values[1].shape = {2, 4};
         s.values[1].bytes = 48;
       },
       "instruction 0 (Matmul): contracting sizes differ: 3 and 2"},
      {"result shape",
       [](PlanSpec &s) {
         s.values[2].shape = {2, 2};
       },
       "result must have shape [2, 4]"},
      {"arity", [](PlanSpec &s) { s.ints = {0}; },
       "expects 2 inputs, 1 outputs, 2 ints and 0 floats; has 2, 1, 1 and 0"},
      {"unknown op",
       [](PlanSpec &s) { s.op = static_cast<triad::plan::OpCode>(999); },
       "unknown op code 999"},
      {"duplicate function", [](PlanSpec &s) { s.functions = 2; },
       "function 'forward' appears twice"},
      {"non-finite attribute",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Scale;
         s.inputs = {2};
         s.ints = {};
         s.floats = {std::nan("")};
       },
       "a float attribute is not finite"},
      // Persistent roles.
      {"unknown role",
       [](PlanSpec &s) { s.role = static_cast<triad::plan::Role>(7); },
       "persistent tensor 'w' has an unknown role"},
      {"accumulator init",
       [](PlanSpec &s) { s.role = triad::plan::Role::Accumulator; },
       "accumulator 'w' must be f32 and start from zeros"},
      {"accumulator dtype",
       [](PlanSpec &s) {
         s.role = triad::plan::Role::Accumulator;
         s.initKind = triad::plan::InitKind::Zeros;
         s.values[1].dtype = triad::plan::DType::I32;
       },
       "accumulator 'w' must be f32 and start from zeros"},
      // Argument kinds.
      {"kinds count",
       [](PlanSpec &s) {
         s.argKinds = {triad::plan::ArgKind::Tokens,
                       triad::plan::ArgKind::Labels};
       },
       "function 'forward': has 1 arguments but 2 argument kinds"},
      {"unknown kind",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {static_cast<triad::plan::ArgKind>(5)};
       },
       "argument 0 has an unknown kind 5"},
      {"token dtype",
       [](PlanSpec &s) { s.argKinds = {triad::plan::ArgKind::Tokens}; },
       "argument 0 (Tokens) must be i32 of shape [2, 3] (microbatch samples, "
       "seq) but is F32 [2, 3]"},
      {"label shape",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {triad::plan::ArgKind::Labels};
         s.microbatches = 2;
       },
       "argument 0 (Labels) must be i32 of shape [1, 3]"},
      {"label shape with dp",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {triad::plan::ArgKind::Labels};
         s.mesh[0].second = 2;
       },
       "argument 0 (Labels) must be i32 of shape [1, 3]"},
      {"batch over dp and microbatches",
       [](PlanSpec &s) {
         s.mesh[0].second = 2;
         s.microbatches = 2;
       },
       "a batch of 2 does not split into dp = 2 replicas of 2 microbatches"},
      // Result names.
      {"names count",
       [](PlanSpec &s) {
         s.resultNames = {"loss", "lr"};
       },
       "function 'forward': has 1 results but 2 result names"},
      {"empty name",
       [](PlanSpec &s) {
         s.results = {3};
         s.resultNames = {""};
       },
       "result 0 is unnamed or its name '' appears twice"},
      {"repeated name",
       [](PlanSpec &s) {
         s.results = {3, 5};
         s.resultNames = {"loss", "loss"};
       },
       "result 1 is unnamed or its name 'loss' appears twice"},
      {"named tensor", [](PlanSpec &s) { s.resultNames = {"loss"}; },
       "result 'loss' must be an f32 scalar (the runtime logs it) but is F32 "
       "[2, 4]"},
      {"named integer",
       [](PlanSpec &s) {
         s.results = {4};
         s.resultNames = {"tokens"};
       },
       "result 'tokens' must be an f32 scalar (the runtime logs it) but is "
       "I32 [2, 3]"},
      // The step.
      {"call of no function",
       [](PlanSpec &s) {
         s.calls = {{1, 0}};
       },
       "program 0: step call 0 names function 1 of 1"},
      {"call of a microbatch",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {triad::plan::ArgKind::Tokens};
         s.calls = {{0, 0}, {0, 1}};
       },
       "program 0: step call 1 of 'forward' reads microbatch 1 of 1"},
      {"call without kinds",
       [](PlanSpec &s) {
         s.calls = {{0, 0}};
       },
       "step call 0 of 'forward': the runtime cannot fill its arguments, "
       "which have no kinds"},
      // The accumulation ops.
      {"count of floats",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::CountValid;
         s.inputs = {0};
         s.outputs = {3};
         s.ints = {-100};
       },
       "instruction 0 (CountValid): labels must be i32"},
      {"count into a tensor",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::CountValid;
         s.inputs = {4};
         s.outputs = {0};
         s.ints = {-100};
       },
       "instruction 0 (CountValid): value 0 must be an f32 scalar"},
      {"count without ignore index",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::CountValid;
         s.inputs = {4};
         s.outputs = {3};
         s.ints = {};
       },
       "expects 1 inputs, 1 outputs, 1 ints and 0 floats"},
      {"ignore index range",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::CountValid;
         s.inputs = {4};
         s.outputs = {3};
         s.ints = {int64_t(1) << 40};
       },
       "the ignore index does not fit in i32"},
      {"accumulate elsewhere",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Accumulate;
         s.inputs = {2, 2, 3};
         s.outputs = {0};
         s.ints = {};
       },
       "instruction 0 (Accumulate): the result must be the accumulator "
       "(input 0) itself"},
      {"accumulate shapes",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Accumulate;
         s.inputs = {2, 0, 3};
         s.outputs = {2};
         s.ints = {};
       },
       "instruction 0 (Accumulate): operand shapes differ: [2, 4] and [2, 3]"},
      {"accumulate weight",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Accumulate;
         s.inputs = {2, 2, 0};
         s.outputs = {2};
         s.ints = {};
       },
       "instruction 0 (Accumulate): value 0 must be an f32 scalar"},
      {"accumulate into integers",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Accumulate;
         s.inputs = {4, 0, 3};
         s.outputs = {4};
         s.ints = {};
       },
       "instruction 0 (Accumulate): the accumulator must be f32"},
      {"accumulate integers",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Accumulate;
         s.inputs = {0, 4, 3};
         s.outputs = {0};
         s.ints = {};
       },
       "instruction 0 (Accumulate): value 4 must be a float tensor"},
      {"reciprocal of a tensor",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Reciprocal;
         s.inputs = {0};
         s.outputs = {3};
         s.ints = {};
       },
       "instruction 0 (Reciprocal): value 0 must be an f32 scalar"},
      {"reciprocal arity",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::Reciprocal;
         s.inputs = {3, 5};
         s.outputs = {3};
         s.ints = {};
       },
       "expects 1 inputs, 1 outputs, 0 ints and 0 floats; has 2, 1, 0 and 0"},
      {"scale by a tensor",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::ScaleBy;
         s.inputs = {2, 0};
         s.outputs = {2};
         s.ints = {};
       },
       "instruction 0 (ScaleBy): value 0 must be an f32 scalar"},
      {"scale into another shape",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::ScaleBy;
         s.inputs = {2, 3};
         s.outputs = {0};
         s.ints = {};
       },
       "instruction 0 (ScaleBy): the result must have the type of x"},
      {"scale integers",
       [](PlanSpec &s) {
         s.op = triad::plan::OpCode::ScaleBy;
         s.inputs = {4, 3};
         s.outputs = {4};
         s.ints = {};
       },
       "instruction 0 (ScaleBy): value 4 must be a float tensor"},
  };
  for (const Case &c : cases) {
    PlanSpec spec;
    c.change(spec);
    std::string error = loadError(spec);
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << c.what << ": got '" << error << "'";
    EXPECT_NE(error.find("invalid plan 'test.plan'"), std::string::npos)
        << c.what;
  }
}

} // namespace
