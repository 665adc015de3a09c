//===- PlanTest.cpp - loading and verifying plan files --------------------===//
//
// A valid plan loads; every truncation and thousands of random corruptions
// of it are errors or still-valid plans, never crashes (this test also runs
// under AddressSanitizer); every semantic check has a case.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include "runtime/init/Philox.h"
#include "runtime/plan/Mesh.h"
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
  uint32_t pipelineRank = 0;
  int64_t seq = 3, vocab = 16, batch = 2, microbatches = 1;
  int64_t paddedVocab = 0;
  std::vector<std::pair<std::string, uint32_t>> mesh = {
      {"dp", 1}, {"tp", 1}, {"pp", 1}};
  uint64_t arena = 136;
  struct V {
    triad::plan::DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
    uint32_t slots = 0;
    uint64_t stride = 0;
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
  /// The step: (function, microbatch, slot) calls.
  struct Call {
    uint32_t function, microbatch, slot = 0;
  };
  std::vector<Call> calls;
  /// Plan.groups, and the DimSplit axes of the persistent tensor 'w'.
  std::vector<std::vector<std::string>> groups;
  std::vector<std::vector<std::string>> split;
  /// The padded shape of 'w' (none when empty).
  std::vector<int64_t> paddedShape;
  /// The functions' layer names and spans (none when unset).
  std::optional<std::vector<std::string>> layerNames;
  std::optional<std::vector<uint32_t>> layerSpans;

  std::string build() const {
    fb::FlatBufferBuilder b;
    std::vector<fb::Offset<triad::plan::Value>> valueOffsets;
    for (const V &v : values) {
      triad::plan::Region region(v.offset, v.bytes);
      valueOffsets.push_back(triad::plan::CreateValue(
          b, v.dtype, b.CreateVector(v.shape), &region, v.slots, v.stride));
    }
    auto init =
        triad::plan::CreateInit(b, initKind, 0.02, 0, 0.0, b.CreateString("w"));
    std::vector<fb::Offset<triad::plan::DimSplit>> splitOffsets;
    for (const std::vector<std::string> &axes : split)
      splitOffsets.push_back(
          triad::plan::CreateDimSplit(b, b.CreateVectorOfStrings(axes)));
    auto persistent = triad::plan::CreatePersistent(
        b, b.CreateString("w"), role, 1, b.CreateVector(globalShape),
        b.CreateVector(offsets), init, b.CreateVector(splitOffsets),
        paddedShape.empty() ? 0 : b.CreateVector(paddedShape));
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
          b.CreateVector(std::vector<fb::Offset<triad::plan::Instr>>{instr}),
          layerNames ? b.CreateVectorOfStrings(*layerNames) : 0,
          layerSpans ? b.CreateVector(*layerSpans) : 0));
    std::vector<triad::plan::Call> step;
    for (const Call &call : calls)
      step.emplace_back(call.function, call.microbatch, call.slot);
    auto program = triad::plan::CreateProgram(
        b, pipelineRank, arena, b.CreateVector(valueOffsets),
        b.CreateVector(
            std::vector<fb::Offset<triad::plan::Persistent>>{persistent}),
        b.CreateVector(functionOffsets), b.CreateVectorOfStructs(step));
    std::vector<fb::Offset<triad::plan::MeshAxis>> axes;
    for (const auto &[name, size] : mesh)
      axes.push_back(
          triad::plan::CreateMeshAxis(b, b.CreateString(name), size));
    std::vector<fb::Offset<triad::plan::Group>> groupOffsets;
    for (const std::vector<std::string> &group : groups)
      groupOffsets.push_back(
          triad::plan::CreateGroup(b, b.CreateVectorOfStrings(group)));
    auto plan = triad::plan::CreatePlan(
        b, version, b.CreateVector(axes),
        b.CreateVector(std::vector<fb::Offset<triad::plan::Program>>{program}),
        seq, vocab, batch, microbatches, b.CreateVector(groupOffsets),
        /*schedule=*/0, /*virtual_stages=*/0, paddedVocab);
    triad::plan::FinishPlanBuffer(b, plan);
    return sealPlan(std::string(
        reinterpret_cast<const char *>(b.GetBufferPointer()), b.GetSize()));
  }
};

std::string loadError(const PlanSpec &spec) {
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  return plan.ok() ? "" : std::string(plan.status().message());
}

/// A 2 x 2 mesh (dp x tp) with the group [tp] and, besides the values of
/// PlanSpec, value 6 f32 [4, 3], value 7 f32 [2, 6], value 8 f32 [2, 3] on
/// value 0's bytes and value 9 f32 [4, 3] overlapping them; the instruction
/// is `op` from `in` to `out` with `ints`.
void collective(PlanSpec &s, triad::plan::OpCode op, uint32_t in, uint32_t out,
                std::vector<int64_t> ints) {
  s.mesh = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
  s.groups = {{"tp"}};
  s.values.push_back({triad::plan::DType::F32, {4, 3}, 136, 48});
  s.values.push_back({triad::plan::DType::F32, {2, 6}, 184, 48});
  s.values.push_back({triad::plan::DType::F32, {2, 3}, 0, 24});
  s.values.push_back({triad::plan::DType::F32, {4, 3}, 0, 48});
  s.arena = 232;
  s.op = op;
  s.inputs = {in};
  s.outputs = {out};
  s.ints = std::move(ints);
}

/// Besides the values of PlanSpec: an AdamW over two f32 [2] tensors
/// (values 6-9 and 10-13: param, grad, m, v) in place, with lr, step and
/// coefficient (values 14-16) and, with `rounded`, bf16 copies of the
/// parameters (values 17 and 18).
void twoTensorAdamW(PlanSpec &s, bool rounded) {
  using triad::plan::DType;
  uint64_t offset = 136;
  for (int i = 0; i < 8; ++i, offset += 8)
    s.values.push_back({DType::F32, {2}, offset, 8});
  for (int i = 0; i < 3; ++i, offset += 4)
    s.values.push_back({DType::F32, {}, offset, 4});
  s.op = triad::plan::OpCode::AdamW;
  s.inputs = {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  s.outputs = {6, 8, 9, 10, 12, 13};
  s.ints = {};
  s.floats = {0.9, 0.95, 1e-8, 0.1, 0.0};
  if (rounded) {
    for (int i = 0; i < 2; ++i, offset += 4)
      s.values.push_back({DType::BF16, {2}, offset, 4});
    s.outputs = {6, 8, 9, 17, 10, 12, 13, 18};
  }
  s.arena = offset;
}

TEST(Plan, AdamWOverTensorsLoads) {
  for (bool rounded : {false, true}) {
    PlanSpec spec;
    twoTensorAdamW(spec, rounded);
    EXPECT_EQ(loadError(spec), "") << "rounded " << rounded;
  }
  // Not in place: the results are other values.
  PlanSpec copies;
  twoTensorAdamW(copies, false);
  copies.values.push_back({triad::plan::DType::F32, {2}, copies.arena, 8});
  copies.arena += 8;
  copies.outputs[0] = 17;
  EXPECT_EQ(loadError(copies), "");
  // With a skip flag.
  PlanSpec skips;
  twoTensorAdamW(skips, true);
  skips.values.push_back({triad::plan::DType::F32, {}, skips.arena, 4});
  skips.arena += 4;
  skips.inputs.push_back(19);
  EXPECT_EQ(loadError(skips), "");
}

TEST(Plan, CollectivesLoad) {
  using triad::plan::OpCode;
  struct Case {
    OpCode op;
    uint32_t in, out;
    std::vector<int64_t> ints;
  };
  const Case cases[] = {
      {OpCode::AllReduce, 0, 0, {0}},
      {OpCode::AllReduce, 2, 2, {1}},
      {OpCode::AllReduce, 0, 0, {2}},
      {OpCode::AllGather, 0, 6, {0, 0}},
      {OpCode::AllGather, 0, 7, {0, 1}},
      {OpCode::ReduceScatter, 6, 0, {0, 0}},
      {OpCode::ReduceScatter, 7, 0, {0, 1}},
      {OpCode::AllToAll, 6, 7, {0, 0, 1}},
      {OpCode::AllToAll, 7, 6, {0, 1, 0}},
      {OpCode::AllToAll, 6, 9, {1, 0, 0}},
      {OpCode::AllSlice, 6, 0, {0, 0}},
      {OpCode::AllSlice, 7, 0, {0, 1}},
  };
  for (const Case &c : cases) {
    PlanSpec spec;
    collective(spec, c.op, c.in, c.out, c.ints);
    // Group 1 is the whole mesh (4 members, dp slowest); group 2 is over
    // the axis of size 1 (one member).
    spec.groups = {{"tp"}, {"dp", "tp"}, {"pp"}};
    EXPECT_EQ(loadError(spec), "") << triad::plan::EnumNameOpCode(c.op);
  }
  // A function's instructions may name their layer.
  PlanSpec layers;
  layers.layerNames = {{"transformer 0"}};
  layers.layerSpans = {{0, 1}};
  EXPECT_EQ(loadError(layers), "");
  // A bucket: two all-gathers of one piece, along dimensions 0 and 1.
  PlanSpec bucket;
  collective(bucket, OpCode::AllGather, 0, 6, {0, 0, 1});
  bucket.inputs = {0, 0};
  bucket.outputs = {6, 7};
  EXPECT_EQ(loadError(bucket), "");
  // Slicing moves no data and also takes token ids (sequence parallelism
  // slices them along the sequence).
  PlanSpec ids;
  collective(ids, OpCode::AllSlice, 4, 10, {0, 0});
  ids.values.push_back({triad::plan::DType::I32, {1, 3}, 0, 12});
  EXPECT_EQ(loadError(ids), "");
  PlanSpec spec;
  collective(spec, OpCode::AllReduce, 0, 0, {1});
  spec.groups = {{"tp"}, {"dp", "tp"}, {"pp"}};
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(groupSize(plan->root(), 0), 2);
  EXPECT_EQ(groupSize(plan->root(), 1), 4);
  EXPECT_EQ(groupSize(plan->root(), 2), 1);
}

/// The mesh dp 2 x pp 2 (pipeline rank 0's program); the instruction is
/// `op` (Send of `data`, or Recv into it) with `ints` (peer, tag).
void transfer(PlanSpec &s, triad::plan::OpCode op, uint32_t data,
              std::vector<int64_t> ints) {
  s.mesh = {{"dp", 2}, {"pp", 2}};
  s.op = op;
  s.inputs.clear();
  s.outputs.clear();
  (op == triad::plan::OpCode::Send ? s.inputs : s.outputs) = {data};
  s.ints = std::move(ints);
}

TEST(Plan, TransfersLoad) {
  using triad::plan::OpCode;
  PlanSpec send;
  transfer(send, OpCode::Send, 0, {1, 0});
  EXPECT_EQ(loadError(send), "");
  PlanSpec recv;
  transfer(recv, OpCode::Recv, 3, {1, kMaxTransferTag});
  EXPECT_EQ(loadError(recv), "");
  // Pipeline rank 1 of three receives from 2 and sends to 0.
  for (auto [op, peer] : {std::pair{OpCode::Recv, 2}, {OpCode::Send, 0}}) {
    PlanSpec spec;
    transfer(spec, op, 2, {peer, 5});
    spec.mesh = {{"pp", 3}, {"tp", 2}};
    spec.pipelineRank = 1;
    EXPECT_EQ(loadError(spec), "") << triad::plan::EnumNameOpCode(op);
  }
}

/// Two pipeline ranks of one microbatch under 1F1B, as the compiler emits
/// them: each transfer action has a function of its own, forward and
/// backward passes compute (a scale) without transferring; `edit` changes
/// the plan before it is built.
std::string scheduledPlan(
    const std::function<void(triad::rt::tests::PlanBuilder &, int)> &edit =
        [](triad::rt::tests::PlanBuilder &, int) {}) {
  using triad::plan::DType;
  using triad::plan::OpCode;
  triad::rt::tests::PlanBuilder b;
  b.mesh = {{"pp", 2}};
  b.schedule = "1f1b";
  // Rank 0: F0.0 send-act0.0>1 recv-grad0.0<1 B0.0 reduce-grads optimizer
  uint32_t x = b.value(DType::F32, {2, 3}), g = b.value(DType::F32, {2, 3});
  b.function("forward");
  b.instr(OpCode::Scale, {x}, {x}, {}, {2.0});
  b.function("send_act");
  b.instr(OpCode::Send, {x}, {}, {1, 0});
  b.function("recv_grad");
  b.instr(OpCode::Recv, {}, {g}, {1, 1});
  b.function("backward");
  b.instr(OpCode::Scale, {g}, {g}, {}, {2.0});
  b.actions({"F0.0", "send-act0.0>1", "recv-grad0.0<1", "B0.0", "reduce-grads",
             "optimizer"});
  for (int call = 0; call < 4; ++call)
    b.call(call, 0, call);
  edit(b, 0);
  // Rank 1: recv-act1.0<0 F1.0 B1.0 send-grad1.0>0 reduce-grads optimizer
  b.program(1);
  x = b.value(DType::F32, {2, 3});
  b.function("recv_act");
  b.instr(OpCode::Recv, {}, {x}, {0, 0});
  b.function("forward");
  b.instr(OpCode::Scale, {x}, {x}, {}, {2.0});
  b.function("send_grad");
  b.instr(OpCode::Send, {x}, {}, {0, 1});
  b.actions({"recv-act1.0<0", "F1.0", "B1.0", "send-grad1.0>0", "reduce-grads",
             "optimizer"});
  b.call(0, 0, 0);
  b.call(1, 0, 1);
  b.call(2, 0, 3);
  edit(b, 1);
  return b.build();
}

std::string scheduleError(
    const std::function<void(triad::rt::tests::PlanBuilder &, int)> &edit) {
  auto plan = loadPlanFromBytes(scheduledPlan(edit), "s.plan");
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST(Plan, PipelineScheduleLoads) {
  auto plan = loadPlanFromBytes(scheduledPlan(), "s.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->root().schedule()->str(), "1f1b");
  EXPECT_EQ(plan->root().programs()->Get(1)->actions()->size(), 6u);
}

// The loader re-checks a pipelined plan's schedule and the step's calls
// against it: a hand-edited or corrupted plan is refused before it runs.
TEST(Plan, PipelineScheduleIsChecked) {
  using Builder = triad::rt::tests::PlanBuilder;
  struct Case {
    std::string what;
    std::function<void(Builder &, int)> edit;
    std::string error;
  };
  const std::string prefix = "invalid plan 's.plan': ";
  std::vector<Case> cases = {
      {"deadlock: rank 0 waits for the gradient before sending",
       [](Builder &b, int rank) {
         if (rank != 0)
           return;
         b.clearSteps();
         b.actions({"F0.0", "recv-grad0.0<1", "send-act0.0>1", "B0.0",
                    "reduce-grads", "optimizer"});
         for (auto [function, action] :
              {std::pair{0, 0}, {2, 1}, {1, 2}, {3, 3}})
           b.call(function, 0, action);
       },
       "pipeline schedule '1f1b' (2 ranks, 1 microbatch) deadlocks: rank 0 "
       "is stuck at recv gradient of microbatch 0 from rank 1 (stage 1 -> "
       "0); rank 1 is stuck at recv activation of microbatch 0 from rank 0 "
       "(stage 0 -> 1)"},
      {"a malformed action",
       [](Builder &b, int rank) {
         if (rank == 1)
           b.actions({"recv-act1.0<0", "F1", "B1.0", "send-grad1.0>0",
                      "reduce-grads", "optimizer"});
       },
       "program of pipeline rank 1: schedule action 'F1': expected "
       "<stage>.<microbatch> after the kind"},
      {"a program without actions",
       [](Builder &b, int rank) {
         if (rank == 1)
           b.clearActions();
       },
       "program of pipeline rank 1: it lists no schedule actions"},
      {"calls out of the schedule's order",
       [](Builder &b, int rank) {
         if (rank == 0)
           b.call(0, 0, 0);
       },
       "program of pipeline rank 0: step call 4 ('forward') performs action "
       "0; calls follow the 6 actions in order, each at most once"},
      {"a call whose microbatch is not its action's",
       [](Builder &b, int rank) {
         if (rank != 0)
           return;
         b.microbatches = 2;
         b.clearSteps();
         b.call(0, 1, 0);
       },
       "program of pipeline rank 0: step call 0 ('forward') reads microbatch "
       "1 but performs F0.0"},
      {"more pipeline ranks than programs",
       [](Builder &b, int rank) {
         if (rank == 1)
           b.mesh = {{"pp", 3}};
       },
       "the mesh has pp = 3 but the plan has 2 programs"},
      {"a transfer in the call of a compute action",
       [](Builder &b, int rank) {
         if (rank == 1) {
           b.function("extra");
           b.instr(triad::plan::OpCode::Send, {0}, {}, {0, 2});
           b.call(3, 0, 4);
         }
       },
       "program of pipeline rank 1: step call 3 ('extra') performs "
       "reduce-grads but transfers data"},
      {"a transfer action's call that transfers the other way",
       [](Builder &b, int rank) {
         if (rank != 1)
           return;
         b.clearSteps();
         b.call(1, 0, 1);
         b.call(0, 0, 3);
       },
       "program of pipeline rank 1: step call 1 ('recv_act') performs "
       "send-grad1.0>0 but does not only send"},
      {"a receive the step never makes",
       [](Builder &b, int rank) {
         if (rank != 1)
           return;
         b.clearSteps();
         b.call(1, 0, 1);
         b.call(2, 0, 3);
       },
       "the step sends the activation of stage 0, microbatch 0, from "
       "pipeline rank 0 to 1, but the receiver's step never receives it"},
      {"a receive with another tag than its send",
       [](Builder &b, int rank) {
         if (rank != 1)
           return;
         b.function("recv_act_tag7");
         b.instr(triad::plan::OpCode::Recv, {}, {0}, {0, 7});
         b.clearSteps();
         b.call(3, 0, 0);
         b.call(1, 0, 1);
         b.call(2, 0, 3);
       },
       "the step sends the activation of stage 0, microbatch 0, from "
       "pipeline rank 0 to 1 in messages whose tags or sizes differ from "
       "those received"},
      {"a call that transfers outside the schedule's actions",
       [](Builder &b, int rank) {
         if (rank == 1)
           b.call(0, 0, -1);
       },
       "program of pipeline rank 1: step call 3 ('recv_act') transfers "
       "data outside the schedule's actions"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(scheduleError(c.edit), prefix + c.error) << c.what;
}

TEST(Plan, ScheduleNeedsAPipeline) {
  triad::rt::tests::PlanBuilder b;
  b.schedule = "1f1b";
  auto plan = loadPlanFromBytes(b.build({}, {}), "s.plan");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "invalid plan 's.plan': the plan has a pipeline schedule but no "
            "'pp' axis above 1");
}

TEST(Plan, ActionsNeedASchedule) {
  auto plan = loadPlanFromBytes(
      scheduledPlan([](triad::rt::tests::PlanBuilder &b, int rank) {
        if (rank == 1)
          b.schedule.clear();
      }),
      "s.plan");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "invalid plan 's.plan': the plan lists schedule actions but names "
            "no schedule");
}

/// A vocab-parallel Embedding on dp 1 x tp 2 with the group [tp]: ids
/// (value 4, i32 [2, 3]) into a table piece (value 1, [3, 4]) giving value
/// 6 (f32 [2, 3, 4]); `ints` are the instruction's.
PlanSpec vocabParallelEmbedding(std::vector<int64_t> ints) {
  PlanSpec s;
  s.mesh = {{"dp", 1}, {"tp", 2}, {"pp", 1}};
  s.groups = {{"tp"}};
  s.values.push_back({triad::plan::DType::F32, {2, 3, 4}, 136, 96});
  s.arena = 232;
  s.op = triad::plan::OpCode::Embedding;
  s.inputs = {4, 1};
  s.outputs = {6};
  s.ints = std::move(ints);
  s.args = {4};
  s.results = {6};
  return s;
}

TEST(Plan, VocabParallelEmbedding) {
  EXPECT_EQ(loadError(vocabParallelEmbedding({})), "");
  EXPECT_EQ(loadError(vocabParallelEmbedding({0})), "");
  EXPECT_EQ(loadError(vocabParallelEmbedding({1})),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (Embedding): group 1 is not one of the 1 "
            "communicator groups");
  // Two pieces of 3 rows need a vocabulary of at least 5 ids, padded to 6
  // (a multiple of tp).
  PlanSpec padded = vocabParallelEmbedding({0});
  padded.vocab = 5;
  EXPECT_EQ(loadError(padded), "");
  PlanSpec small = vocabParallelEmbedding({0});
  small.vocab = 4;
  EXPECT_EQ(
      loadError(small),
      "invalid plan 'test.plan': program 0, function 'forward', "
      "instruction 0 (Embedding): the table has more rows than the vocabulary");
  EXPECT_NE(loadError(vocabParallelEmbedding({0, 0})), "");
  // A vocabulary padded beyond a multiple of tp (vocab-multiple) says so in
  // the header, which allows that many rows.
  PlanSpec beyond = vocabParallelEmbedding({0});
  beyond.vocab = 3;
  EXPECT_NE(loadError(beyond), "");
  beyond.paddedVocab = 6;
  EXPECT_EQ(loadError(beyond), "");
  beyond.paddedVocab = 4;
  EXPECT_EQ(loadError(beyond),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (Embedding): the table has more rows than the "
            "vocabulary");
}

/// The gradient of a table piece of 3 rows on a tp=2 mesh: EmbeddingGrad of
/// ids (value 4) and dy (value 6) into value 7 with `ints`.
PlanSpec vocabParallelEmbeddingGrad(std::vector<int64_t> ints) {
  PlanSpec s = vocabParallelEmbedding(std::move(ints));
  s.values.push_back({triad::plan::DType::F32, {3, 4}, 232, 48});
  s.arena = 280;
  s.op = triad::plan::OpCode::EmbeddingGrad;
  s.inputs = {4, 6};
  s.outputs = {7};
  s.args = {4, 6};
  s.results = {7};
  return s;
}

TEST(Plan, VocabParallelEmbeddingGrad) {
  EXPECT_EQ(loadError(vocabParallelEmbeddingGrad({})), "");
  EXPECT_EQ(loadError(vocabParallelEmbeddingGrad({0})), "");
  EXPECT_EQ(loadError(vocabParallelEmbeddingGrad({1})),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (EmbeddingGrad): group 1 is not one of the 1 "
            "communicator groups");
  PlanSpec small = vocabParallelEmbeddingGrad({0});
  small.vocab = 4;
  EXPECT_EQ(loadError(small),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (EmbeddingGrad): the result has more rows than the "
            "vocabulary");
  EXPECT_NE(loadError(vocabParallelEmbeddingGrad({0, 0})), "");
}

/// A Values writing value 2 ([2, 4]) with `floats`.
PlanSpec valuesInto(std::vector<double> floats, uint32_t output = 2) {
  PlanSpec s;
  s.op = triad::plan::OpCode::Values;
  s.inputs = {};
  s.outputs = {output};
  s.ints = {};
  s.floats = std::move(floats);
  s.results = {output};
  return s;
}

TEST(Plan, ValuesListEveryElement) {
  EXPECT_EQ(loadError(valuesInto({1, 2, 3, 4, 5, 6, 7, 8})), "");
  const std::string where = "invalid plan 'test.plan': program 0, function "
                            "'forward', instruction 0 (Values): ";
  EXPECT_EQ(loadError(valuesInto({1, 2, 3})),
            where + "expects 0 inputs, 1 outputs, 0 ints and 8 floats; has "
                    "0, 1, 0 and 3");
  EXPECT_EQ(loadError(valuesInto({1, 2, 3, 4, 5, 6}, 4)),
            where + "writes an f32 tensor");
}

/// A Dropout of value 0 ([2, 3]) into value 2's region seen as [2, 3]
/// (value 6), on dp 2 with the group [dp] and 2 microbatches; `ints` are
/// the instruction's.
PlanSpec batchPieceDropout(std::vector<int64_t> ints) {
  PlanSpec s;
  s.mesh = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
  s.groups = {{"dp"}};
  s.batch = 8;
  s.microbatches = 2;
  s.values.push_back({triad::plan::DType::F32, {2, 3}, 72, 24});
  s.op = triad::plan::OpCode::Dropout;
  s.inputs = {0};
  s.outputs = {6};
  s.ints = std::move(ints);
  s.floats = {0.1};
  s.args = {0};
  s.results = {6};
  return s;
}

TEST(Plan, DropoutOnAPieceOfTheBatch) {
  EXPECT_EQ(loadError(batchPieceDropout({3, 0})), "");
  EXPECT_EQ(loadError(batchPieceDropout({3, 0, 0, 2})), "");
  EXPECT_EQ(loadError(batchPieceDropout({3, 0, -1, 2})), "");
  EXPECT_EQ(loadError(batchPieceDropout({3, 0, 0, 1})), "");
  const std::string where = "invalid plan 'test.plan': program 0, function "
                            "'forward', instruction 0 (Dropout): ";
  EXPECT_EQ(loadError(batchPieceDropout({3, 0, 1, 2})),
            where + "group 1 is not one of the 1 communicator groups");
  EXPECT_EQ(loadError(batchPieceDropout({3, 0, 0, 4})),
            where + "a piece of one of 4 microbatches, but the step has 2");
  EXPECT_NE(loadError(batchPieceDropout({3, 0, 0})), "");
  EXPECT_NE(loadError(batchPieceDropout({3, -1})), "");
  EXPECT_EQ(loadError(batchPieceDropout({3, 0, 0, 0})),
            where + "a piece of one of 0 microbatches");
}

/// A Dropout of value 0 seen as `shape` (6 elements) into value 2's region
/// seen as `shape` (value 6), on dp 2 x tp 2 with the groups [dp] and [tp]
/// and 2 microbatches; `ints` are the instruction's.
PlanSpec sequencePieceDropout(std::vector<int64_t> ints,
                              std::vector<int64_t> shape = {1, 2, 3}) {
  PlanSpec s = batchPieceDropout(std::move(ints));
  s.mesh = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
  s.groups = {{"dp"}, {"tp"}};
  s.values.front().shape = shape;
  s.values.back().shape = shape;
  return s;
}

TEST(Plan, DropoutOnAPieceOfTheSequence) {
  EXPECT_EQ(loadError(sequencePieceDropout({3, 0, 0, 2, 1})), "");
  EXPECT_EQ(loadError(sequencePieceDropout({3, 0, -1, 1, 1})), "");
  const std::string where = "invalid plan 'test.plan': program 0, function "
                            "'forward', instruction 0 (Dropout): ";
  EXPECT_EQ(loadError(sequencePieceDropout({3, 0, 0, 2, 2})),
            where + "group 2 is not one of the 2 communicator groups");
  EXPECT_EQ(loadError(sequencePieceDropout({3, 0, 0, 2, -1})),
            where + "group -1 is not one of the 2 communicator groups");
  EXPECT_EQ(loadError(sequencePieceDropout({3, 0, 0, 2, 1}, {2, 3})),
            where + "a piece of the sequence needs a [batch, sequence, ...] "
                    "value of rank 3 or more, got rank 2");
}

/// The local form of a vocab-parallel CrossEntropy on dp 1 x tp 2 with the
/// group [tp]: logits (value 6, f32 [2, 3, 4], this rank's columns), labels
/// (value 4) and the log-sum-exp over the whole vocabulary (value 7, f32
/// [2, 3, 1]) giving the piece's loss (value 5); `ints` are the
/// instruction's.
PlanSpec vocabParallelLoss(std::vector<int64_t> ints) {
  PlanSpec s;
  s.mesh = {{"dp", 1}, {"tp", 2}, {"pp", 1}};
  s.groups = {{"tp"}};
  s.values.push_back({triad::plan::DType::F32, {2, 3, 4}, 136, 96});
  s.values.push_back({triad::plan::DType::F32, {2, 3, 1}, 232, 24});
  s.arena = 256;
  s.op = triad::plan::OpCode::CrossEntropy;
  s.inputs = {6, 4, 7};
  s.outputs = {5};
  s.ints = std::move(ints);
  s.args = {6, 4, 7};
  s.results = {5};
  return s;
}

TEST(Plan, VocabParallelCrossEntropy) {
  EXPECT_EQ(loadError(vocabParallelLoss({-100, 0})), "");
  std::string prefix = "invalid plan 'test.plan': program 0, function "
                       "'forward', instruction 0 (CrossEntropy): ";
  EXPECT_EQ(loadError(vocabParallelLoss({-100, 1})),
            prefix + "group 1 is not one of the 1 communicator groups");
  // The log-sum-exp is read with the group: without it, too few ints.
  EXPECT_NE(loadError(vocabParallelLoss({-100})), "");
  PlanSpec flat = vocabParallelLoss({-100, 0});
  flat.values[7].shape = {2, 3};
  flat.values[7].bytes = 24;
  EXPECT_EQ(loadError(flat),
            prefix + "lse must have shape [2, 3, 1] and the logits' element "
                     "type");
  // Two pieces of 4 columns need a vocabulary of at least 7, padded to 8,
  // and then name their classes.
  PlanSpec small = vocabParallelLoss({-100, 0});
  small.vocab = 6;
  EXPECT_EQ(loadError(small),
            prefix + "the logits have more columns than the vocabulary");
  PlanSpec padded = vocabParallelLoss({-100, 0, 7});
  padded.vocab = 7;
  EXPECT_EQ(loadError(padded), "");
  padded.ints = {-100, 0, 8};
  EXPECT_EQ(loadError(padded), prefix + "classes 8 must lie in [1, 7]");
  padded.ints = {-100, 0, 0};
  EXPECT_EQ(loadError(padded), prefix + "classes 0 must lie in [1, 7]");
  // The group of a local form comes with its lse, both or neither.
  padded.ints = {-100, -1, 7};
  EXPECT_EQ(loadError(padded),
            prefix + "a group (the local form of a vocab-parallel loss) "
                     "comes with lse, and lse with a group");
  // Whole padded logits of 4 columns: at most 4 classes.
  PlanSpec whole = vocabParallelLoss({-100, -1, 3});
  whole.vocab = 7;
  whole.inputs = whole.args = {6, 4};
  EXPECT_EQ(loadError(whole), "");
  whole.ints = {-100, -1, 5};
  EXPECT_EQ(loadError(whole), prefix + "classes 5 must lie in [1, 4]");
  whole.ints = {-100, 0, 3};
  EXPECT_EQ(loadError(whole),
            prefix + "a group (the local form of a vocab-parallel loss) "
                     "comes with lse, and lse with a group");
  // The gradient's local form reads dloss, then the log-sum-exp.
  PlanSpec grad = vocabParallelLoss({-100, 0});
  grad.op = triad::plan::OpCode::CrossEntropyGrad;
  grad.values.push_back({triad::plan::DType::F32, {2, 3, 4}, 256, 96});
  grad.arena = 352;
  grad.inputs = {6, 4, 5, 7};
  grad.outputs = {8};
  grad.args = {6, 4, 5, 7};
  grad.results = {8};
  EXPECT_EQ(loadError(grad), "");
}

TEST(Plan, LogSumExp) {
  PlanSpec s;
  s.values.push_back({triad::plan::DType::F32, {2, 1}, 136, 8});
  s.arena = 144;
  s.op = triad::plan::OpCode::LogSumExp;
  s.ints = {};
  s.inputs = {0};
  s.outputs = {6};
  s.args = {0};
  s.results = {6};
  EXPECT_EQ(loadError(s), "");
  s.values[6].shape = {2};
  EXPECT_EQ(loadError(s),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (LogSumExp): result must have shape [2, 1] and "
            "x's element type");
  // A padded vocabulary's [group (-1: none), classes]: x (value 0) holds 3
  // columns of a vocabulary of 16.
  s.values[6].shape = {2, 1};
  s.ints = {-1, 3};
  EXPECT_EQ(loadError(s), "");
  s.ints = {-1, 4};
  EXPECT_EQ(loadError(s),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (LogSumExp): classes 4 must lie in [1, 3]");
  s.ints = {0, 3};
  EXPECT_EQ(loadError(s),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (LogSumExp): group 0 is not one of the 0 "
            "communicator groups");
  s.ints = {3};
  EXPECT_NE(loadError(s), "");
}

TEST(Plan, PipelinePeersShareTheOtherCoordinates) {
  // Ranks of dp 2 x pp 2 x tp 2: the peer of (dp 1, pp 0, tp 1) = rank 5 at
  // pipeline rank 1 is (dp 1, pp 1, tp 1) = rank 7.
  PlanSpec spec;
  spec.mesh = {{"dp", 2}, {"pp", 2}, {"tp", 2}};
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Plan &root = plan->root();
  EXPECT_EQ(pipelinePeerRank(root, meshCoordinates(root, 5), 1), 7);
  EXPECT_EQ(pipelinePeerRank(root, meshCoordinates(root, 7), 0), 5);
  EXPECT_EQ(pipelinePeerRank(root, meshCoordinates(root, 2), 0), 0);
}

TEST(Plan, MeshCoordinatesAndGroups) {
  PlanSpec spec;
  spec.mesh = {{"dp", 2}, {"pp", 1}, {"tp", 3}};
  spec.batch = 2;
  spec.groups = {{"tp"}, {"dp"}, {"tp", "dp"}, {"dp", "tp"}};
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Plan &root = plan->root();
  // Row-major: the last axis varies fastest.
  EXPECT_EQ(meshCoordinates(root, 0), (MeshCoordinates{0, 0, 0}));
  EXPECT_EQ(meshCoordinates(root, 2), (MeshCoordinates{0, 0, 2}));
  EXPECT_EQ(meshCoordinates(root, 4), (MeshCoordinates{1, 0, 1}));
  for (int64_t rank = 0; rank < 6; ++rank)
    EXPECT_EQ(worldRankAt(root, meshCoordinates(root, rank)), rank);
  EXPECT_EQ(coordinateOn(root, meshCoordinates(root, 4), "dp"), 1);
  EXPECT_EQ(coordinateOn(root, meshCoordinates(root, 4), "ep"), 0);
  EXPECT_EQ(pipelineRankAt(root, meshCoordinates(root, 5)), 0u);
  // Rank 4 = (dp 1, tp 1): in [tp] member 1 of the group of color dp = 1;
  // in [dp] member 1 of color tp = 1; in [tp, dp] member 1 * 2 + 1; in
  // [dp, tp] member 1 * 3 + 1; both whole-mesh groups have one color.
  MeshCoordinates rank4 = meshCoordinates(root, 4);
  auto position = [&](uint32_t group) {
    GroupPosition p = groupPosition(root, group, rank4);
    return std::vector<int64_t>{p.size, p.member, p.color};
  };
  EXPECT_EQ(position(0), (std::vector<int64_t>{3, 1, 1}));
  EXPECT_EQ(position(1), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(position(2), (std::vector<int64_t>{6, 3, 0}));
  EXPECT_EQ(position(3), (std::vector<int64_t>{6, 4, 0}));
}

TEST(Plan, SplitPersistentsHaveOffsetsPerRank) {
  // w [3, 4] on each rank of a dp 2 x tp 2 mesh: its columns split over
  // tp, its rows over nothing (global [3, 8]).
  PlanSpec spec;
  spec.mesh = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
  spec.globalShape = {3, 8};
  spec.split = {{}, {"tp"}};
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Plan &root = plan->root();
  const triad::plan::Program &program = *root.programs()->Get(0);
  const triad::plan::Persistent &w = *program.persistent()->Get(0);
  std::vector<std::vector<int64_t>> offsets;
  for (int64_t rank = 0; rank < 4; ++rank)
    offsets.push_back(
        sliceBox(root, program, w, meshCoordinates(root, rank)).offsets);
  EXPECT_EQ(offsets, (std::vector<std::vector<int64_t>>{
                         {0, 0}, {0, 4}, {0, 0}, {0, 4}}));
  // Over [dp, tp] (dp slowest) the columns of [3, 16] go to ranks in order.
  spec.globalShape = {3, 16};
  spec.split = {{}, {"dp", "tp"}};
  plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Program &program2 = *plan->root().programs()->Get(0);
  EXPECT_EQ(sliceBox(plan->root(), program2, *program2.persistent()->Get(0),
                     meshCoordinates(plan->root(), 2))
                .offsets,
            (std::vector<int64_t>{0, 8}));
}

TEST(Plan, NestedPaddedSplitsTakePiecesOfPieces) {
  // ZeRO's piece of a tensor-parallel bias that dp does not divide: the 22
  // columns split over tp (pieces of 11), each tp piece over dp = 3 in
  // pieces of ceil(11 / 3) = 4, the last of each holding 3 columns and one
  // of padding.
  PlanSpec spec;
  spec.mesh = {{"dp", 3}, {"tp", 2}, {"pp", 1}};
  spec.batch = 6;
  spec.globalShape = {3, 22};
  spec.split = {{}, {"tp", "dp"}};
  auto plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Plan &root = plan->root();
  const triad::plan::Program &program = *root.programs()->Get(0);
  std::vector<std::vector<int64_t>> offsets, sizes;
  for (int64_t rank = 0; rank < 6; ++rank) {
    SliceBox box = sliceBox(root, program, *program.persistent()->Get(0),
                            meshCoordinates(root, rank));
    offsets.push_back(box.offsets);
    sizes.push_back(box.sizes);
  }
  // Ranks in mesh order (dp slowest): (dp 0, tp 0), (dp 0, tp 1), ...
  EXPECT_EQ(offsets, (std::vector<std::vector<int64_t>>{
                         {0, 0}, {0, 11}, {0, 4}, {0, 15}, {0, 8}, {0, 19}}));
  EXPECT_EQ(sizes, (std::vector<std::vector<int64_t>>{
                       {3, 4}, {3, 4}, {3, 4}, {3, 4}, {3, 3}, {3, 3}}));
  // A single padded axis clips at the global shape: 10 columns over dp = 3
  // in pieces of 4 (the padded shape, 12, is what they tile).
  spec.globalShape = {3, 10};
  spec.paddedShape = {3, 12};
  spec.split = {{}, {"dp"}};
  plan = loadPlanFromBytes(spec.build(), "test.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const triad::plan::Program &single = *plan->root().programs()->Get(0);
  SliceBox last = sliceBox(plan->root(), single, *single.persistent()->Get(0),
                           meshCoordinates(plan->root(), 4));
  EXPECT_EQ(last.offsets, (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(last.sizes, (std::vector<int64_t>{3, 2}));
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

/// The FlatBuffer inside sealed plan bytes.
std::string unsealed(const std::string &sealed) {
  return sealed.substr(0, sealed.size() - kPlanSealBytes);
}

/// Every truncation of `bytes` (sealed) is rejected; random single- and
/// multi-byte corruptions (a fixed seed) of its FlatBuffer, sealed again
/// so that the structure and semantic checks see them, are each rejected
/// or, if the corruption happens to leave a valid plan, pass every check.
/// Returns the rejections.
int corruptAndLoad(const std::string &bytes, uint32_t trials) {
  for (size_t length = 0; length < bytes.size(); ++length)
    EXPECT_FALSE(loadPlanFromBytes(bytes.substr(0, length), "t").ok())
        << "length " << length;
  std::string inner = unsealed(bytes);
  triad::rt::PhiloxKey key{1, 2};
  int rejected = 0;
  for (uint32_t trial = 0; trial < trials; ++trial) {
    std::string copy = inner;
    auto random = triad::rt::philox4x32({trial, 0, 0, 0}, key);
    for (int flip = 0; flip < 1 + static_cast<int>(random[3] % 3); ++flip) {
      size_t position = random[flip] % copy.size();
      copy[position] = static_cast<char>(random[(flip + 1) % 4] >> 8);
    }
    rejected += !loadPlanFromBytes(sealPlan(copy), "t").ok();
  }
  return rejected;
}

TEST(Plan, TheSealRefusesEveryFlipCutAndAppendedByte) {
  // 1,000 random single-byte changes of a sealed training plan, anywhere
  // in the file: every one is refused, before the plan is read.
  std::string bytes = tests::buildTrainingPlan({});
  ASSERT_TRUE(loadPlanFromBytes(bytes, "t").ok());
  triad::rt::PhiloxKey key{3, 4};
  int refused = 0;
  for (uint32_t trial = 0; trial < 1000; ++trial) {
    std::string copy = bytes;
    auto random = triad::rt::philox4x32({trial, 0, 0, 0}, key);
    size_t position = random[0] % copy.size();
    char changed = static_cast<char>(random[1] % 255 + 1);
    copy[position] = static_cast<char>(copy[position] ^ changed);
    absl::StatusOr<LoadedPlan> loaded = loadPlanFromBytes(copy, "t");
    refused += !loaded.ok();
  }
  EXPECT_EQ(refused, 1000);
  absl::Status flipped = [&] {
    std::string copy = bytes;
    copy[copy.size() / 2] ^= 1;
    return loadPlanFromBytes(copy, "flip.plan").status();
  }();
  EXPECT_EQ(flipped.message(),
            "invalid plan 'flip.plan': the file is corrupt (its checksum does "
            "not match its contents)");
  // Bytes after the seal, and the FlatBuffer alone (an older export).
  for (const std::string &bad : {bytes + "x", unsealed(bytes)})
    EXPECT_NE(loadPlanFromBytes(bad, "t").status().message().find(
                  "does not end in the plan's seal"),
              std::string::npos);
}

/// Groups, every collective and a split persistent tensor on a 2 x 2 mesh.
std::string collectivesPlan() {
  using triad::plan::DType;
  using triad::plan::OpCode;
  tests::PlanBuilder b;
  b.mesh = {{"dp", 2}, {"tp", 2}};
  b.groups = {{"tp"}, {"dp", "tp"}};
  uint32_t w = b.value(DType::F32, {4, 3});
  b.splitPersistent("w", w, triad::plan::Role::Parameter,
                    triad::plan::InitKind::Normal, 0.5, {{"dp"}, {"tp"}});
  uint32_t x = b.value(DType::F32, {2, 4, 3}),
           gathered = b.value(DType::F32, {2, 8, 3}),
           scattered = b.value(DType::F32, {2, 1, 3}),
           exchanged = b.value(DType::F32, {2, 2, 6});
  b.function("f", {x});
  b.instr(OpCode::AllReduce, {x}, {x}, {1});
  b.instr(OpCode::AllGather, {x}, {gathered}, {0, 1});
  b.instr(OpCode::ReduceScatter, {x}, {scattered}, {1, 1});
  b.instr(OpCode::AllToAll, {x}, {exchanged}, {0, 1, 2});
  b.results({gathered, scattered, exchanged}, {});
  return b.build();
}

/// A stage's functions with values kept between calls in 3 slots, called
/// for 3 microbatches, each on its slot.
std::string slottedPlan() {
  using triad::plan::DType;
  using triad::plan::OpCode;
  tests::PlanBuilder b;
  b.batch = 6;
  b.microbatches = 3;
  uint32_t tokens = b.slottedValue(DType::I32, {2, 4}, 3);
  uint32_t kept = b.slottedValue(DType::F32, {2, 4}, 3);
  uint32_t scratch = b.value(DType::F32, {2, 4});
  uint32_t forward =
      b.function("forward", {tokens}, {triad::plan::ArgKind::Tokens});
  b.instr(OpCode::Fill, {}, {kept}, {}, {1.0});
  uint32_t backward = b.function("backward");
  b.instr(OpCode::Scale, {kept}, {scratch}, {}, {2.0});
  for (uint32_t m = 0; m < 3; ++m)
    b.call(forward, m, m);
  for (uint32_t m = 0; m < 3; ++m)
    b.call(backward, m, m);
  return b.build();
}

TEST(Plan, SlottedPlanLoads) {
  EXPECT_EQ(loadPlanFromBytes(slottedPlan(), "s").status(), absl::OkStatus());
}

TEST(Plan, ManyTablesVerifyWhenTheFileHoldsThem) {
  // More tables than FlatBuffers' default limit of a million: the limit
  // follows from the file's size.
  using triad::plan::DType;
  using triad::plan::OpCode;
  tests::PlanBuilder b;
  uint32_t x = b.value(DType::F32, {});
  b.function("fill");
  for (int i = 0; i < 1'100'000; ++i)
    b.instr(OpCode::Fill, {}, {x}, {}, {1.0});
  EXPECT_EQ(loadPlanFromBytes(b.build(), "many").status(), absl::OkStatus());
}

TEST(Plan, TruncatedAndCorruptedFilesNeverCrash) {
  EXPECT_GT(corruptAndLoad(PlanSpec().build(), 5000), 1000);
  EXPECT_EQ(loadPlanFromBytes(collectivesPlan(), "c").status(),
            absl::OkStatus());
  EXPECT_GT(corruptAndLoad(collectivesPlan(), 5000), 1000);
  // A whole training step: several functions, argument kinds, result names
  // and the step's calls.
  EXPECT_GT(corruptAndLoad(tests::buildTrainingPlan({}), 5000), 1000);
  // Slotted values and the calls' slots.
  EXPECT_GT(corruptAndLoad(slottedPlan(), 5000), 1000);
  EXPECT_EQ(loadError(PlanSpec()), "");
  std::string notPlan = "definitely not a plan file";
  EXPECT_NE(loadPlanFromBytes(notPlan, "t")
                .status()
                .message()
                .find("not a Triad plan file"),
            std::string::npos);
}

TEST(Plan, SlottedValuesOfOneStrideOverlapOnlyAtTheSameSlot) {
  // x and the result both have 2 copies 48 bytes apart: a call works on
  // copy k of both, which never share bytes, though x's second copy lies
  // on the result's first.
  PlanSpec s;
  collective(s, triad::plan::OpCode::AllGather, 0, 6, {0, 0});
  s.values[0].offset = 88;
  for (uint32_t v : {0u, 6u}) {
    s.values[v].slots = 2;
    s.values[v].stride = 48;
  }
  EXPECT_EQ(loadError(s), "");
}

/// Attention of q = k = v (value 6, [1, 2, 4]) into value 7 with `ints`
/// (heads, kv_heads, mask, has_prefix, has_slopes).
PlanSpec attentionWith(std::vector<int64_t> ints) {
  PlanSpec s;
  s.values.push_back({triad::plan::DType::F32, {1, 2, 4}, 136, 32});
  s.values.push_back({triad::plan::DType::F32, {1, 2, 4}, 168, 32});
  s.arena = 200;
  s.op = triad::plan::OpCode::Attention;
  s.inputs = {6, 6, 6};
  s.outputs = {7};
  s.ints = std::move(ints);
  s.floats = {0.5};
  s.results = {7};
  return s;
}

TEST(Plan, AttentionFlagsAreZeroOrOne) {
  EXPECT_EQ(loadError(attentionWith({2, 2, 0, 0, 0})), "");
  EXPECT_EQ(loadError(attentionWith({2, 2, 0, 7, 0})),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (Attention): flag has_prefix is 7; flags are 0 or "
            "1");
  EXPECT_EQ(loadError(attentionWith({2, 2, 0, 0, -3})),
            "invalid plan 'test.plan': program 0, function 'forward', "
            "instruction 0 (Attention): flag has_slopes is -3; flags are 0 or "
            "1");
  EXPECT_NE(loadError(attentionWith({2, 2, 3, 0, 0}))
                .find("instruction 0 (Attention): unknown mask 3 (0 to 2)"),
            std::string::npos);
  EXPECT_NE(loadError(attentionWith({2, 2, 1, 0, 0}))
                .find("invalid heads, kv_heads or mask"),
            std::string::npos);
}

/// The instruction becomes a fused product with epilogue `code`: value 6
/// is a bias f32 [4], value 7 a spare f32 [2, 4] (a pre-activation).
void fusedProduct(PlanSpec &s, int64_t code) {
  s.values.push_back({triad::plan::DType::F32, {4}, 136, 16});
  s.values.push_back({triad::plan::DType::F32, {2, 4}, 152, 32});
  s.arena = 184;
  s.inputs = {0, 1, 6};
  s.ints = {0, 0, code};
}

TEST(Plan, FusedProductsLoad) {
  for (int64_t code : {1, 2, 3}) {
    PlanSpec spec;
    fusedProduct(spec, code);
    EXPECT_EQ(loadError(spec), "") << "epilogue " << code;
  }
  PlanSpec keeps;
  fusedProduct(keeps, 2);
  keeps.outputs = {2, 7};
  EXPECT_EQ(loadError(keeps), "");
  // The GELU's gradient: the activation's input (value 7) a third input,
  // the bias gradient (value 6) an optional second output.
  PlanSpec gradient;
  fusedProduct(gradient, 4);
  gradient.inputs = {0, 1, 7};
  EXPECT_EQ(loadError(gradient), "");
  gradient.outputs = {2, 6};
  EXPECT_EQ(loadError(gradient), "");
}

TEST(Plan, ProductsThatAddLoadWhereTheirBytesAllow) {
  // x [2, 3] . w [3, 4] -> c [2, 4] (value 2, bytes 72 to 104), with the
  // accumulating epilogue (c its accumulator, value 3 the weight) or an
  // addend (value 7, bytes 152 to 184; after the bias, value 6).
  PlanSpec accumulating;
  fusedProduct(accumulating, 5);
  accumulating.inputs = {0, 1, 2, 3};
  EXPECT_EQ(loadError(accumulating), "");
  PlanSpec added;
  fusedProduct(added, 6);
  added.inputs = {0, 1, 7};
  EXPECT_EQ(loadError(added), "");
  PlanSpec biased;
  fusedProduct(biased, 7);
  biased.inputs = {0, 1, 6, 7};
  EXPECT_EQ(loadError(biased), "");
  // The addend's very bytes (another value over c's): cuBLASLt reads C
  // where it writes D.
  PlanSpec same = added;
  same.values.push_back({triad::plan::DType::F32, {2, 4}, 72, 32});
  same.inputs = {0, 1, 8};
  EXPECT_EQ(loadError(same), "");
  // Part of them: refused.
  PlanSpec partly = added;
  partly.values.push_back({triad::plan::DType::F32, {2, 4}, 88, 32});
  partly.inputs = {0, 1, 8};
  EXPECT_NE(loadError(partly).find("the result's bytes partly overlap the "
                                   "addend's"),
            std::string::npos)
      << loadError(partly);
  // A result that is the product's own rhs (x [2, 2] . c [2, 4] -> c):
  // refused, as the result over its bytes under another value is.
  PlanSpec ownRhs = biased;
  ownRhs.values[0] = {triad::plan::DType::F32, {2, 2}, 0, 16};
  ownRhs.inputs = {0, 2, 6, 7};
  EXPECT_NE(loadError(ownRhs).find("the result's bytes overlap input 1 of "
                                   "the product"),
            std::string::npos)
      << loadError(ownRhs);
  // An accumulator over an operand's bytes (w's, 24 to 72): refused.
  PlanSpec overOperand = accumulating;
  overOperand.values.push_back({triad::plan::DType::F32, {2, 4}, 40, 32});
  overOperand.inputs = {0, 1, 8, 3};
  overOperand.outputs = {8};
  overOperand.results = {8};
  EXPECT_NE(loadError(overOperand)
                .find("the result's bytes overlap input 1 "
                      "of the product"),
            std::string::npos)
      << loadError(overOperand);
}

TEST(Plan, SemanticChecksSayWhatIsWrong) {
  struct Case {
    const char *what;
    std::function<void(PlanSpec &)> change;
    const char *expected;
  };
  const Case cases[] = {
      {"version", [](PlanSpec &s) { s.version = 99; },
       "plan format version 99 is not the runtime's (4)"},
      {"microbatches", [](PlanSpec &s) { s.microbatches = 3; },
       "microbatches must divide batch"},
      {"padded vocabulary below the vocabulary",
       [](PlanSpec &s) { s.paddedVocab = 8; },
       "the padded vocabulary 8 is not a multiple of tp (1) from the "
       "vocabulary (16) up to 2^31 - 1"},
      {"padded vocabulary not a multiple of tp",
       [](PlanSpec &s) {
         s.mesh[1].second = 2;
         s.paddedVocab = 17;
       },
       "the padded vocabulary 17 is not a multiple of tp (2)"},
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
      {"transpose flag", [](PlanSpec &s) { s.ints = {956301312, 0}; },
       "instruction 0 (Matmul): flag transpose_a is 956301312; flags are 0 "
       "or 1"},
      {"negative transpose flag", [](PlanSpec &s) { s.ints = {0, -1}; },
       "flag transpose_b is -1; flags are 0 or 1"},
      {"arity", [](PlanSpec &s) { s.ints = {0}; },
       "expects 2 inputs, 1 outputs, 2 ints and 0 floats; has 2, 1, 1 and 0"},
      {"unknown epilogue", [](PlanSpec &s) { fusedProduct(s, 9); },
       "instruction 0 (Matmul): unknown epilogue 9 (0 to 7)"},
      {"epilogue without a bias",
       [](PlanSpec &s) {
         fusedProduct(s, 1);
         s.inputs = {0, 1};
       },
       "instruction 0 (Matmul): expects 3 inputs, 1 outputs, 3 ints and 0 "
       "floats; has 2, 1, 3 and 0"},
      {"bias shape",
       [](PlanSpec &s) {
         fusedProduct(s, 1);
         s.inputs = {0, 1, 3};
       },
       "instruction 0 (Matmul): the bias must be [4] (the result's last "
       "dimension), f32 or of the result's type"},
      {"pre-activation without an activation",
       [](PlanSpec &s) {
         fusedProduct(s, 1);
         s.outputs = {2, 7};
       },
       "instruction 0 (Matmul): only an epilogue with an activation writes a "
       "pre-activation, and only a gradient epilogue a bias gradient (a "
       "second output)"},
      {"gradient epilogue's input shape",
       [](PlanSpec &s) {
         fusedProduct(s, 4);
         s.inputs = {0, 1, 6};
       },
       "instruction 0 (Matmul): the activation's input must have the "
       "result's shape [2, 4] and element type"},
      {"gradient epilogue over its input",
       [](PlanSpec &s) {
         fusedProduct(s, 4);
         s.inputs = {0, 1, 7};
         s.outputs = {7};
       },
       "instruction 0 (Matmul): the result must not overwrite the "
       "activation's input (the product is written before the input is "
       "read)"},
      {"bias gradient shape",
       [](PlanSpec &s) {
         fusedProduct(s, 4);
         s.inputs = {0, 1, 7};
         s.outputs = {2, 0};
       },
       "instruction 0 (Matmul): the bias gradient must be [4] (the result's "
       "last dimension), f32 or of the result's type"},
      {"pre-activation shape",
       [](PlanSpec &s) {
         fusedProduct(s, 3);
         s.outputs = {2, 0};
       },
       "instruction 0 (Matmul): the pre-activation must have the result's "
       "shape [2, 4] and element type"},
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
       "accumulator 'w' must be a float tensor (f32, bf16 or f16) and start "
       "from zeros"},
      {"accumulator dtype",
       [](PlanSpec &s) {
         s.role = triad::plan::Role::Accumulator;
         s.initKind = triad::plan::InitKind::Zeros;
         s.values[1].dtype = triad::plan::DType::I32;
       },
       "accumulator 'w' must be a float tensor (f32, bf16 or f16) and start "
       "from zeros"},
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
      {"prefix lengths per position",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {triad::plan::ArgKind::PrefixLengths};
       },
       "argument 0 (PrefixLengths) must be i32 of shape [2] (microbatch "
       "samples) but is I32 [2, 3]"},
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
      // Slots: the copies of a value a pipeline stage keeps between calls.
      {"stride without slots", [](PlanSpec &s) { s.values[0].stride = 64; },
       "value 0 has a slot stride of 64 but no slots"},
      {"slots overlapping",
       [](PlanSpec &s) {
         s.values[0].slots = 2;
         s.values[0].stride = 16;
       },
       "value 0 has 2 slots 16 bytes apart; slots are at most 65536, at "
       "least the value's 24 bytes apart and a multiple of its 4-byte "
       "elements"},
      {"stride misaligned",
       [](PlanSpec &s) {
         s.values[0].slots = 2;
         s.values[0].stride = 26;
       },
       "a multiple of its 4-byte elements"},
      {"too many slots",
       [](PlanSpec &s) {
         s.values[0].slots = (1u << 16) + 1;
         s.values[0].stride = 24;
       },
       "value 0 has 65537 slots"},
      {"slots outside the arena",
       [](PlanSpec &s) {
         s.values[2].slots = 3;
         s.values[2].stride = 32;
       },
       "value 2 (bytes 72..104 in 3 slots 32 bytes apart) lies outside the "
       "arena of 136 bytes"},
      {"huge stride",
       [](PlanSpec &s) {
         s.values[0].slots = 3;
         s.values[0].stride = uint64_t(1) << 62;
       },
       "value 0 (bytes 0..24 in 3 slots 4611686018427387904 bytes apart) "
       "lies outside the arena"},
      {"slotted persistent",
       [](PlanSpec &s) {
         s.values[1].slots = 1;
         s.values[1].stride = 48;
       },
       "persistent tensor 'w' has slots; one copy lives between steps"},
      {"slot of an unslotted call",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {triad::plan::ArgKind::Tokens};
         s.calls = {{0, 0, 1}};
       },
       "program 0: step call 0 of 'forward' works on slot 1, outside [0, 1)"},
      {"slot outside the slots",
       [](PlanSpec &s) {
         s.args = {4};
         s.argKinds = {triad::plan::ArgKind::Tokens};
         s.values[0].slots = 2;
         s.values[0].stride = 136;
         s.arena = 136 + 136;
         s.calls = {{0, 0, 1}, {0, 0, 65536}};
       },
       "program 0: step call 1 of 'forward' works on slot 65536, outside [0, "
       "65536)"},
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
       "instruction 0 (Accumulate): the accumulator must be f32 or of the "
       "added value's type"},
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
      // Communicator groups.
      {"group without axes", [](PlanSpec &s) { s.groups = {{}}; },
       "group 0 [] names no mesh axis"},
      {"group of no axis",
       [](PlanSpec &s) {
         s.groups = {{"tp"}, {"ep"}};
       },
       "group 1 [ep] names 'ep', which is no mesh axis"},
      {"group axis twice",
       [](PlanSpec &s) {
         s.groups = {{"tp", "dp", "tp"}};
       },
       "group 0 [tp, dp, tp] names axis 'tp' twice"},
      {"group twice",
       [](PlanSpec &s) {
         s.groups = {{"dp", "tp"}, {"tp"}, {"dp", "tp"}};
       },
       "group 2 [dp, tp] is listed twice"},
      // Split persistent tensors.
      {"split entries", [](PlanSpec &s) { s.split = {{"tp"}}; },
       "persistent tensor 'w' has 1 split entries for 2 dimensions"},
      {"split over no axis",
       [](PlanSpec &s) {
         s.split = {{"ep"}, {}};
       },
       "persistent tensor 'w' is split over 'ep', which is no mesh axis or "
       "is named twice"},
      {"split over an axis twice",
       [](PlanSpec &s) {
         s.split = {{"tp"}, {"tp"}};
       },
       "persistent tensor 'w' is split over 'tp', which is no mesh axis or "
       "is named twice"},
      {"split beyond the global shape",
       [](PlanSpec &s) {
         s.mesh[1].second = 2;
         s.split = {{}, {"tp"}};
       },
       "persistent tensor 'w': its slice lies outside its global shape"},
      // A padded tensor's pieces tile its padded shape, which holds the
      // global shape.
      {"split beyond the padded shape",
       [](PlanSpec &s) {
         s.mesh[1].second = 2;
         s.split = {{}, {"tp"}};
         s.globalShape = {3, 7};
         s.paddedShape = {3, 7};
       },
       "persistent tensor 'w': its slice lies outside its padded shape"},
      // A split over several axes: the outer ones tile the dimension, the
      // innermost pads their pieces.
      {"nested split whose outer pieces do not tile",
       [](PlanSpec &s) {
         s.mesh = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
         s.split = {{}, {"tp", "dp"}};
         s.globalShape = {3, 9};
       },
       "persistent tensor 'w': its slice lies outside its global shape"},
      {"nested split with a piece too large",
       [](PlanSpec &s) {
         s.mesh = {{"dp", 2}, {"tp", 2}, {"pp", 1}};
         s.split = {{}, {"tp", "dp"}};
         s.globalShape = {3, 10};
       },
       "persistent tensor 'w': dimension 1 holds 4 elements, more than a "
       "piece of 5 split 2 ways"},
      // Layer spans (for traces) lie in order inside the body.
      {"layer names without spans",
       [](PlanSpec &s) { s.layerNames = {{"transformer 0"}}; },
       "function 'forward': has 1 layer names but 0 layer span bounds (two "
       "per layer)"},
      {"layer span past the body",
       [](PlanSpec &s) {
         s.layerNames = {{"transformer 0"}};
         s.layerSpans = {{0, 2}};
       },
       "function 'forward': layer 'transformer 0' spans [0, 2), which does "
       "not follow the layer before it inside the body's 1 instructions"},
      {"padded shape smaller than the global",
       [](PlanSpec &s) { s.paddedShape = {3, 3}; },
       "persistent tensor 'w': padded dimension 1 (3) is smaller than its "
       "global size 4"},
      {"padded shape of another rank",
       [](PlanSpec &s) { s.paddedShape = {3}; },
       "persistent tensor 'w' has a padded shape of rank 1, not 2"},
      // Collectives.
      {"collective of integers",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 4, 4, {0});
       },
       "instruction 0 (AllReduce): collectives run on float values of one "
       "element type"},
      {"collective into integers",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 4, {0, 0});
       },
       "instruction 0 (AllGather): collectives run on float values of one "
       "element type"},
      {"slice of floats into integers",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllSlice, 0, 4, {0, 0});
       },
       "instruction 0 (AllSlice): collectives run on float values of one "
       "element type (all_slice "
       "also on i32 ids)"},
      {"collective of two inputs",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 0, 0, {0});
         s.inputs = {0, 1};
       },
       "instruction 0 (AllReduce): expects 1 input, 1 output and 1 int "
       "(group); has 2, 1 and 1"},
      {"collective of two outputs",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::ReduceScatter, 6, 0, {0, 0});
         s.outputs = {0, 8};
       },
       "instruction 0 (ReduceScatter): expects N inputs, N outputs (N >= 1) "
       "and N + 1 ints (group, then one dimension per input); has 1, 2 and "
       "2"},
      {"bucket whose outputs overlap",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 6, {0, 0, 0});
         s.inputs = {0, 0};
         s.outputs = {6, 6};
       },
       "instruction 0 (AllGather): output 0 of the bucket overlaps the input "
       "or output of tensor 1"},
      {"adamw whose tensors share bytes",
       [](PlanSpec &s) {
         twoTensorAdamW(s, false);
         s.values[13].offset = s.values[8].offset + 4;
       },
       "instruction 0 (AdamW): output 1 of the update overlaps an operand "
       "of tensor 1"},
      {"adamw whose copy overlaps its own gradient",
       [](PlanSpec &s) {
         twoTensorAdamW(s, true);
         s.values[17].offset = s.values[7].offset;
       },
       "instruction 0 (AdamW): output 3 overlaps another operand of tensor "
       "0 of the update"},
      {"adamw whose new parameter half overlaps its parameter",
       [](PlanSpec &s) {
         twoTensorAdamW(s, false);
         s.values.push_back({triad::plan::DType::F32, {2}, s.values[10].offset + 4,
                             8});
         s.outputs[3] = 17;
       },
       "instruction 0 (AdamW): output 3 overlaps another operand of tensor "
       "1 of the update"},
      {"adamw writing over its learning rate",
       [](PlanSpec &s) {
         twoTensorAdamW(s, false);
         s.values[14].offset = s.values[12].offset;
       },
       "instruction 0 (AdamW): output 4 of the update overlaps its lr, step, "
       "coefficient or skip flag"},
      {"adamw writing over its skip flag",
       [](PlanSpec &s) {
         twoTensorAdamW(s, false);
         s.values.push_back({triad::plan::DType::F32, {}, s.values[9].offset,
                             4});
         s.inputs.push_back(17);
       },
       "instruction 0 (AdamW): output 2 of the update overlaps its lr, step, "
       "coefficient or skip flag"},
      {"adamw with a weight decay too few",
       [](PlanSpec &s) {
         twoTensorAdamW(s, false);
         s.floats.pop_back();
       },
       "instruction 0 (AdamW): expects 4 N + 3 or 4 N + 4 inputs"},
      {"bucket with a tensor of the wrong shape",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 6, {0, 0, 0});
         s.inputs = {0, 0};
         s.outputs = {6, 7};
       },
       "instruction 0 (AllGather), tensor 1 of its bucket: the result must "
       "have shape [4, 3] (x [2, 3] over 2 members), not [2, 6]"},
      {"gather without a dimension",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 6, {0});
       },
       "instruction 0 (AllGather): expects N inputs, N outputs (N >= 1) and "
       "N + 1 ints (group, then one dimension per input); has 1, 1 and 1"},
      {"all-to-all without a concat dimension",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllToAll, 6, 7, {0, 0});
       },
       "expects 1 input, 1 output and 3 ints (group, split_dim, concat_dim); "
       "has 1, 1 and 2"},
      {"group out of range",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 0, 0, {1});
       },
       "instruction 0 (AllReduce): group 1 is not one of the plan's 1 groups"},
      {"negative group",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 0, 0, {-1});
       },
       "group -1 is not one of the plan's 1 groups"},
      {"plan without groups",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 0, 0, {0});
         s.groups.clear();
       },
       "group 0 is not one of the plan's 0 groups"},
      {"gather dimension out of range",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 6, {0, 2});
       },
       "instruction 0 (AllGather): dimension 2 is outside x's rank 2"},
      {"negative scatter dimension",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::ReduceScatter, 6, 0, {0, -1});
       },
       "instruction 0 (ReduceScatter): dimension -1 is outside x's rank 2"},
      {"all-to-all concat dimension out of range",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllToAll, 6, 7, {0, 0, 5});
       },
       "instruction 0 (AllToAll): dimension 5 is outside x's rank 2"},
      {"all-reduce shape",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 0, 2, {0});
       },
       "instruction 0 (AllReduce): the result must have shape [2, 3] (x "
       "[2, 3] over 2 members), not [2, 4]"},
      {"gather shape",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 6, {0, 1});
       },
       "instruction 0 (AllGather): the result must have shape [2, 6] (x "
       "[2, 3] over 2 members), not [4, 3]"},
      // An odd size splits into padded pieces of ceil(3 / 2) = 2.
      {"padded scatter of the wrong size",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::ReduceScatter, 0, 2, {0, 1});
       },
       "instruction 0 (ReduceScatter): the result must have shape [2, 2] (x "
       "[2, 3] over 2 members), not [2, 4]"},
      {"scatter shape",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::ReduceScatter, 6, 2, {0, 0});
       },
       "instruction 0 (ReduceScatter): the result must have shape [2, 3] (x "
       "[4, 3] over 2 members), not [2, 4]"},
      {"padded slice of the wrong size",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllSlice, 0, 2, {0, 1});
       },
       "instruction 0 (AllSlice): the result must have shape [2, 2] (x "
       "[2, 3] over 2 members), not [2, 4]"},
      {"slice shape",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllSlice, 7, 2, {0, 1});
       },
       "instruction 0 (AllSlice): the result must have shape [2, 3] (x [2, "
       "6] over 2 members), not [2, 4]"},
      {"slice without a dimension",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllSlice, 6, 0, {0});
       },
       "instruction 0 (AllSlice): expects 1 input, 1 output and 2 ints "
       "(group, dim); has 1, 1 and 1"},
      {"slice in place",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllSlice, 9, 0, {0, 0});
       },
       "instruction 0 (AllSlice): the result's bytes overlap x's (only "
       "AllReduce works in place)"},
      {"all-to-all of an odd size",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllToAll, 0, 7, {0, 1, 0});
       },
       "instruction 0 (AllToAll): x [2, 3] does not split into 2 pieces "
       "along dimension 1"},
      {"all-to-all shape",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllToAll, 6, 7, {0, 0, 0});
       },
       "instruction 0 (AllToAll): the result must have shape [4, 3] (x [4, "
       "3] over 2 members), not [2, 6]"},
      {"all-reduce onto another value's bytes",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllReduce, 0, 8, {0});
       },
       "instruction 0 (AllReduce): the result's bytes overlap x's (an "
       "in-place all-reduce names the same value twice)"},
      {"gather onto a copy of x's bytes",
       [](PlanSpec &s) {
         // Slot 1 of the result lies on x (one copy): some call would
         // read what it writes.
         collective(s, triad::plan::OpCode::AllGather, 0, 6, {0, 0});
         s.values[0].offset = 184;
         s.values[6].slots = 2;
         s.values[6].stride = 48;
       },
       "instruction 0 (AllGather): the result's bytes overlap x's (only "
       "AllReduce works in place)"},
      {"gather in place",
       [](PlanSpec &s) {
         collective(s, triad::plan::OpCode::AllGather, 0, 9, {0, 0});
       },
       "instruction 0 (AllGather): the result's bytes overlap x's (only "
       "AllReduce works in place)"},
      // Transfers.
      {"send with an output",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Send, 0, {1, 0});
         s.outputs = {2};
       },
       "instruction 0 (Send): expects 1 inputs, 0 outputs, 2 ints and 0 "
       "floats; has 1, 1, 2 and 0"},
      {"recv with an input",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Recv, 2, {1, 0});
         s.inputs = {0};
       },
       "instruction 0 (Recv): expects 0 inputs, 1 outputs, 2 ints and 0 "
       "floats; has 1, 1, 2 and 0"},
      {"transfer without a tag",
       [](PlanSpec &s) { transfer(s, triad::plan::OpCode::Send, 0, {1}); },
       "instruction 0 (Send): expects 1 inputs, 0 outputs, 2 ints and 0 "
       "floats; has 1, 0, 1 and 0"},
      {"transfer of integers",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Recv, 4, {1, 0});
       },
       "instruction 0 (Recv): transfers move float values; value 4 is I32"},
      {"transfer without a pipeline axis",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Send, 0, {1, 0});
         s.mesh = {{"dp", 2}, {"tp", 2}};
       },
       "instruction 0 (Send): transfers run between pipeline ranks, but the "
       "mesh has no axis 'pp'"},
      {"peer beyond the pipeline",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Send, 0, {2, 0});
       },
       "instruction 0 (Send): peer pipeline rank 2 is outside [0, 2) (the "
       "mesh axis 'pp')"},
      {"negative peer",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Recv, 2, {-1, 0});
       },
       "instruction 0 (Recv): peer pipeline rank -1 is outside [0, 2)"},
      {"transfer to itself",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Send, 0, {1, 0});
         s.pipelineRank = 1;
       },
       "program 0, function 'forward', instruction 0 (Send): peer pipeline "
       "rank 1 is the program's own"},
      {"negative tag",
       [](PlanSpec &s) {
         transfer(s, triad::plan::OpCode::Send, 0, {1, -3});
       },
       "instruction 0 (Send): tag -3 is outside [0, 32767]"},
      {"tag beyond MPI's",
       [](PlanSpec
              &s) { transfer(s, triad::plan::OpCode::Recv, 2, {1, 32768}); },
       "instruction 0 (Recv): tag 32768 is outside [0, 32767]"},
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
