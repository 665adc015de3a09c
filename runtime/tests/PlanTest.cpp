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

#include <gtest/gtest.h>

#include <functional>

using namespace triad::rt;
namespace fb = flatbuffers;

namespace {

/// The pieces of a small plan: y[2,4] = x[2,3] @ w[3,4] with w a parameter;
/// tests change a piece, then build.
struct PlanSpec {
  uint32_t version = kPlanVersion;
  int64_t seq = 3, vocab = 16, batch = 2, microbatches = 1;
  std::vector<std::pair<std::string, uint32_t>> mesh = {
      {"dp", 1}, {"tp", 1}, {"pp", 1}};
  uint64_t arena = 104;
  struct V {
    triad::plan::DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
  };
  std::vector<V> values = {{triad::plan::DType::F32, {2, 3}, 0, 24},
                           {triad::plan::DType::F32, {3, 4}, 24, 48},
                           {triad::plan::DType::F32, {2, 4}, 72, 32}};
  std::vector<int64_t> globalShape = {3, 4}, offsets = {0, 0};
  triad::plan::OpCode op = triad::plan::OpCode::Matmul;
  std::vector<uint32_t> inputs = {0, 1}, outputs = {2};
  std::vector<int64_t> ints = {0, 0};
  std::vector<double> floats = {};
  int functions = 1;

  std::string build() const {
    fb::FlatBufferBuilder b;
    std::vector<fb::Offset<triad::plan::Value>> valueOffsets;
    for (const V &v : values) {
      triad::plan::Region region(v.offset, v.bytes);
      valueOffsets.push_back(triad::plan::CreateValue(
          b, v.dtype, b.CreateVector(v.shape), &region));
    }
    auto init = triad::plan::CreateInit(b, triad::plan::InitKind::Normal, 0.02,
                                        0, 0.0, b.CreateString("w"));
    auto persistent = triad::plan::CreatePersistent(
        b, b.CreateString("w"), triad::plan::Role::Parameter, 1,
        b.CreateVector(globalShape), b.CreateVector(offsets), init);
    auto instr = triad::plan::CreateInstr(
        b, op, b.CreateVector(inputs), b.CreateVector(outputs),
        b.CreateVector(ints), b.CreateVector(floats));
    std::vector<fb::Offset<triad::plan::Function>> functionOffsets;
    for (int i = 0; i < functions; ++i)
      functionOffsets.push_back(triad::plan::CreateFunction(
          b, b.CreateString("forward"),
          b.CreateVector(std::vector<uint32_t>{0}),
          b.CreateVector(std::vector<uint32_t>{2}),
          b.CreateVector(std::vector<fb::Offset<triad::plan::Instr>>{instr})));
    auto program = triad::plan::CreateProgram(
        b, 0, arena, b.CreateVector(valueOffsets),
        b.CreateVector(
            std::vector<fb::Offset<triad::plan::Persistent>>{persistent}),
        b.CreateVector(functionOffsets));
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
  EXPECT_EQ(plan->root().programs()->Get(0)->values()->size(), 3u);
  std::string path = ::testing::TempDir() + "valid.plan";
  ASSERT_TRUE(writeFileAtomically(path, PlanSpec().build()).ok());
  EXPECT_TRUE(loadPlan(path).ok());
  EXPECT_FALSE(loadPlan(path + ".missing").ok());
}

TEST(Plan, TruncatedAndCorruptedFilesNeverCrash) {
  std::string bytes = PlanSpec().build();
  for (size_t length = 0; length < bytes.size(); ++length)
    EXPECT_FALSE(loadPlanFromBytes(bytes.substr(0, length), "t").ok())
        << "length " << length;
  // Random single- and multi-byte corruptions: each is rejected or, if the
  // corruption happens to leave a valid plan, passes every check.
  triad::rt::PhiloxKey key{1, 2};
  int rejected = 0;
  for (uint32_t trial = 0; trial < 5000; ++trial) {
    std::string copy = bytes;
    auto random = triad::rt::philox4x32({trial, 0, 0, 0}, key);
    for (int flip = 0; flip < 1 + static_cast<int>(random[3] % 3); ++flip) {
      size_t position = random[flip] % copy.size();
      copy[position] = static_cast<char>(random[(flip + 1) % 4] >> 8);
    }
    rejected += !loadPlanFromBytes(copy, "t").ok();
  }
  EXPECT_GT(rejected, 1000);
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
