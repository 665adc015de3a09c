//===- PlanBuilder.h - small plans built by hand for tests ------*- C++ -*-===//
//
// Tests of the loader, the executor and the trainer build plans value by
// value and instruction by instruction: `PlanBuilder` writes programs
// (pipeline rank 0, and more after `program`) with any number of functions
// and a step, and
// `buildTrainingPlan` writes a complete one, a two-parameter language model
// with dropout, AdamW and gradient accumulation over the step's microbatches,
// shaped like what the compiler emits.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TESTS_PLANBUILDER_H
#define TRIAD_RUNTIME_TESTS_PLANBUILDER_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace triad::rt::tests {

class PlanBuilder {
public:
  int64_t seq = 4, vocab = 16, batch = 2, microbatches = 1;
  std::vector<std::pair<std::string, uint32_t>> mesh = {{"dp", 1}};
  /// Plan.groups: the mesh axes of each communicator group.
  std::vector<std::vector<std::string>> groups;
  /// Plan.schedule and Plan.virtual_stages (a pipelined plan); none when
  /// empty.
  std::string schedule;
  uint32_t virtualStages = 1;

  /// Finishes the current program and starts the one of `pipelineRank`:
  /// later values, persistent tensors, functions and calls are its own.
  void program(uint32_t pipelineRank) {
    finished.push_back({rank, std::move(values), std::move(persistents),
                        std::move(functions), std::move(step), arena,
                        std::move(actionTokens), std::move(callActions)});
    values.clear();
    persistents.clear();
    functions.clear();
    step.clear();
    actionTokens.reset();
    callActions.clear();
    arena = 0;
    rank = pipelineRank;
  }

  /// A new value in its own 64-byte aligned region.
  uint32_t value(plan::DType dtype, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t size : shape)
      count *= size;
    values.push_back({dtype, shape, arena, static_cast<uint64_t>(4 * count)});
    arena += (4 * count + 63) / 64 * 64;
    return static_cast<uint32_t>(values.size() - 1);
  }

  /// A new value with `slots` copies (Value.slots), each in its own 64-byte
  /// aligned region `stride` bytes after the last (by default, right after).
  uint32_t slottedValue(plan::DType dtype, std::vector<int64_t> shape,
                        uint32_t slots, uint64_t stride = 0) {
    uint32_t v = value(dtype, std::move(shape));
    if (stride == 0)
      stride = (values[v].bytes + 63) / 64 * 64;
    values[v].slots = slots;
    values[v].stride = stride;
    arena = values[v].offset + slots * stride;
    return v;
  }

  /// A parameter slice starting from a normal init of `stddev`.
  void persistent(const std::string &name, uint32_t v,
                  std::vector<int64_t> global, std::vector<int64_t> offsets,
                  double stddev) {
    persistents.push_back({name, v, plan::Role::Parameter,
                           plan::InitKind::Normal, stddev, global, offsets});
  }

  /// A whole persistent tensor (its global shape is its value's).
  void persistent(const std::string &name, uint32_t v, plan::Role role,
                  plan::InitKind kind, double parameter = 0.0) {
    persistents.push_back({name, v, role, kind, parameter, values[v].shape,
                           std::vector<int64_t>(values[v].shape.size(), 0)});
  }

  /// A parameter whose value holds its `global` shape padded to the
  /// value's (Persistent.padded_shape): the elements past `global` lie
  /// outside the tensor.
  void paddedParameter(const std::string &name, uint32_t v,
                       std::vector<int64_t> global, double stddev) {
    persistents.push_back({name, v, plan::Role::Parameter,
                           plan::InitKind::Normal, stddev, std::move(global),
                           std::vector<int64_t>(values[v].shape.size(), 0)});
    persistents.back().padded = values[v].shape;
  }

  /// A whole state tensor drawn as `of` is (a master copy of parameter
  /// `of`, from its stream).
  void masterOf(const std::string &name, uint32_t v, const std::string &of,
                double stddev) {
    persistent(name, v, plan::Role::State, plan::InitKind::Normal, stddev);
    persistents.back().stream = of;
  }

  /// A persistent tensor split over mesh axes: `split[d]` lists the axes
  /// that cut dimension d (DimSplit); its global shape is the local one
  /// times the pieces.
  void splitPersistent(const std::string &name, uint32_t v, plan::Role role,
                       plan::InitKind kind, double parameter,
                       std::vector<std::vector<std::string>> split) {
    std::vector<int64_t> global = values[v].shape;
    for (size_t d = 0; d < split.size(); ++d)
      for (const std::string &axis : split[d])
        for (const auto &[meshAxis, size] : mesh)
          if (meshAxis == axis)
            global[d] *= size;
    persistents.push_back({name, v, role, kind, parameter, global,
                           std::vector<int64_t>(global.size(), 0),
                           std::move(split)});
  }

  /// Starts function `name`; later instructions go to it. Without a call,
  /// they go to a function "f".
  uint32_t function(const std::string &name, std::vector<uint32_t> args = {},
                    std::vector<plan::ArgKind> kinds = {}) {
    functions.push_back({name, args, kinds, {}, {}, {}});
    return static_cast<uint32_t>(functions.size() - 1);
  }

  /// The results of the current function.
  void results(std::vector<uint32_t> values, std::vector<std::string> names) {
    current().results = std::move(values);
    current().resultNames = std::move(names);
  }

  void instr(plan::OpCode op, std::vector<uint32_t> in,
             std::vector<uint32_t> out, std::vector<int64_t> ints = {},
             std::vector<double> floats = {}) {
    current().instrs.push_back({op, in, out, ints, floats});
  }

  void call(uint32_t function, uint32_t microbatch = 0, uint32_t slot = 0) {
    step.push_back({function, microbatch, slot});
  }

  /// The current program's schedule actions (Program.actions); calls made
  /// with `action` give Program.call_actions.
  void actions(std::vector<std::string> tokens) {
    actionTokens = std::move(tokens);
  }
  void call(uint32_t function, uint32_t microbatch, int32_t action) {
    call(function, microbatch, 0u);
    callActions.push_back(action);
  }
  /// Drops the current program's calls, or its actions (and the calls'
  /// action indices).
  void clearSteps() {
    step.clear();
    callActions.clear();
  }
  void clearActions() {
    actionTokens.reset();
    callActions.clear();
  }

  /// One function "f" with these arguments and unnamed results.
  std::string build(std::vector<uint32_t> args, std::vector<uint32_t> results,
                    int64_t vocabulary = 16) {
    current().args = std::move(args);
    current().results = std::move(results);
    vocab = vocabulary;
    return build();
  }

  std::string build() {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<plan::Program>> programs;
    for (const Program &p : finished)
      programs.push_back(buildProgram(b, p.rank, p.values, p.persistents,
                                      p.functions, p.step, p.arena,
                                      p.actionTokens, p.callActions));
    programs.push_back(buildProgram(b, rank, values, persistents, functions,
                                    step, arena, actionTokens, callActions));
    std::vector<flatbuffers::Offset<plan::MeshAxis>> axes;
    for (const auto &[name, size] : mesh)
      axes.push_back(plan::CreateMeshAxis(b, b.CreateString(name), size));
    std::vector<flatbuffers::Offset<plan::Group>> gs;
    for (const std::vector<std::string> &group : groups)
      gs.push_back(plan::CreateGroup(b, b.CreateVectorOfStrings(group)));
    auto root = plan::CreatePlan(
        b, kPlanVersion, b.CreateVector(axes), b.CreateVector(programs), seq,
        vocab, batch, microbatches, b.CreateVector(gs),
        schedule.empty() ? 0 : b.CreateString(schedule), virtualStages);
    plan::FinishPlanBuffer(b, root);
    return sealPlan(std::string(
        reinterpret_cast<const char *>(b.GetBufferPointer()), b.GetSize()));
  }

private:
  struct Call {
    uint32_t function, microbatch, slot;
  };
  struct V;
  struct P;
  struct F;

  static flatbuffers::Offset<plan::Program>
  buildProgram(flatbuffers::FlatBufferBuilder &b, uint32_t pipelineRank,
               const std::vector<V> &values, const std::vector<P> &persistents,
               const std::vector<F> &functions, const std::vector<Call> &step,
               uint64_t arena,
               const std::optional<std::vector<std::string>> &actionTokens,
               const std::vector<int32_t> &callActions) {
    std::vector<flatbuffers::Offset<plan::Value>> vs;
    for (const V &v : values) {
      plan::Region region(v.offset, v.bytes);
      vs.push_back(plan::CreateValue(b, v.dtype, b.CreateVector(v.shape),
                                     &region, v.slots, v.stride));
    }
    std::vector<flatbuffers::Offset<plan::Persistent>> ps;
    for (const P &p : persistents) {
      bool normal = p.kind == plan::InitKind::Normal;
      auto init = plan::CreateInit(
          b, p.kind, normal ? p.parameter : 0.0, 0, normal ? 0.0 : p.parameter,
          b.CreateString(p.stream.empty() ? p.name : p.stream));
      std::vector<flatbuffers::Offset<plan::DimSplit>> split;
      for (const std::vector<std::string> &axes : p.split)
        split.push_back(plan::CreateDimSplit(b, b.CreateVectorOfStrings(axes)));
      ps.push_back(plan::CreatePersistent(
          b, b.CreateString(p.name), p.role, p.value, b.CreateVector(p.global),
          b.CreateVector(p.offsets), init, b.CreateVector(split),
          p.padded.empty() ? 0 : b.CreateVector(p.padded)));
    }
    std::vector<flatbuffers::Offset<plan::Function>> fs;
    for (const F &f : functions) {
      std::vector<flatbuffers::Offset<plan::Instr>> is;
      for (const I &i : f.instrs)
        is.push_back(plan::CreateInstr(
            b, i.op, b.CreateVector(i.in), b.CreateVector(i.out),
            b.CreateVector(i.ints), b.CreateVector(i.floats)));
      std::vector<flatbuffers::Offset<flatbuffers::String>> names;
      for (const std::string &name : f.resultNames)
        names.push_back(b.CreateString(name));
      fs.push_back(plan::CreateFunction(
          b, b.CreateString(f.name), b.CreateVector(f.args),
          b.CreateVector(f.kinds), b.CreateVector(f.results),
          b.CreateVector(names), b.CreateVector(is)));
    }
    std::vector<plan::Call> calls;
    for (const Call &call : step)
      calls.emplace_back(call.function, call.microbatch, call.slot);
    return plan::CreateProgram(
        b, pipelineRank, arena, b.CreateVector(vs), b.CreateVector(ps),
        b.CreateVector(fs), b.CreateVectorOfStructs(calls),
        actionTokens ? b.CreateVectorOfStrings(*actionTokens) : 0,
        actionTokens ? b.CreateVector(callActions) : 0);
  }

  struct V {
    plan::DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
    uint32_t slots = 0;
    uint64_t stride = 0;
  };
  struct P {
    std::string name;
    uint32_t value;
    plan::Role role;
    plan::InitKind kind;
    double parameter;
    std::vector<int64_t> global, offsets;
    std::vector<std::vector<std::string>> split = {};
    /// The init's stream: the tensor's name unless set.
    std::string stream = {};
    /// The padded shape (Persistent.padded_shape), or none.
    std::vector<int64_t> padded = {};
  };
  struct I {
    plan::OpCode op;
    std::vector<uint32_t> in, out;
    std::vector<int64_t> ints;
    std::vector<double> floats;
  };
  struct F {
    std::string name;
    std::vector<uint32_t> args;
    std::vector<plan::ArgKind> kinds;
    std::vector<uint32_t> results;
    std::vector<std::string> resultNames;
    std::vector<I> instrs;
  };

  F &current() {
    if (functions.empty())
      function("f");
    return functions.back();
  }

  /// A program that `program` finished.
  struct Program {
    uint32_t rank;
    std::vector<V> values;
    std::vector<P> persistents;
    std::vector<F> functions;
    std::vector<Call> step;
    uint64_t arena;
    std::optional<std::vector<std::string>> actionTokens;
    std::vector<int32_t> callActions;
  };

  std::vector<Program> finished;
  uint32_t rank = 0;
  std::vector<V> values;
  std::vector<P> persistents;
  std::vector<F> functions;
  std::vector<Call> step;
  uint64_t arena = 0;
  std::optional<std::vector<std::string>> actionTokens;
  std::vector<int32_t> callActions;
};

/// The shape of the plan `buildTrainingPlan` writes.
struct TrainingPlanSpec {
  int64_t seq = 8, vocab = 32, hidden = 8, batch = 4, microbatches = 2;
  std::vector<std::pair<std::string, uint32_t>> mesh = {
      {"dp", 1}, {"tp", 1}, {"pp", 1}};
  /// Names of the two parameters (tests rename one).
  std::string embedding = "wte", output = "wout";
  double dropout = 0.1;
  double lr = 0.05, minLr = 0.005;
  int64_t warmup = 2, decay = 50;
  /// Elements of an extra parameter (with zero gradients) that makes
  /// checkpoints large; 0 for none.
  int64_t ballast = 0;
  /// The apply step's all-reduces over [dp] even where dp is 1 (a group of
  /// one, whose collectives leave the values as they are): a backend's
  /// collectives then run on one rank.
  bool dpCollectives = false;
};

/// batch / (dp * microbatches), as the plan's loader computes it.
inline int64_t microbatchSamplesOf(const TrainingPlanSpec &spec) {
  int64_t dp = 1;
  for (const auto &[name, size] : spec.mesh)
    if (name == "dp")
      dp = size;
  return spec.batch / dp / spec.microbatches;
}

/// A language model: logits = dropout(wte[tokens]) @ wout, mean
/// cross-entropy; the gradients of each microbatch accumulate weighted by
/// its label count, and the apply step divides by the total, clips the
/// global norm to 1 and runs AdamW with a warmup and cosine schedule. With
/// dp > 1 (or dpCollectives) the apply step first all-reduces the sums over
/// [dp] (group 0). The
/// step: begin_step, microbatch_step per microbatch, apply_step; its named
/// results are "loss", "grad_norm", "lr", "skipped" and "tokens".
inline std::string buildTrainingPlan(const TrainingPlanSpec &spec) {
  using plan::DType;
  using plan::InitKind;
  using plan::OpCode;
  using plan::Role;
  PlanBuilder b;
  b.seq = spec.seq;
  b.vocab = spec.vocab;
  b.batch = spec.batch;
  b.microbatches = spec.microbatches;
  b.mesh = spec.mesh;
  int64_t mb = microbatchSamplesOf(spec), s = spec.seq, v = spec.vocab,
          h = spec.hidden;

  uint32_t wte = b.value(DType::F32, {v, h}),
           wout = b.value(DType::F32, {h, v});
  b.persistent(spec.embedding, wte, {v, h}, {0, 0}, 0.5);
  b.persistent(spec.output, wout, {h, v}, {0, 0}, 0.5);
  struct Trained {
    std::string name;
    uint32_t param, grad, m, v;
  };
  std::vector<Trained> trained;
  auto states = [&](const std::string &name, uint32_t param,
                    std::vector<int64_t> shape) {
    Trained t{name, param, b.value(DType::F32, shape),
              b.value(DType::F32, shape), b.value(DType::F32, shape)};
    b.persistent("grad." + name, t.grad, Role::Accumulator, InitKind::Zeros);
    b.persistent("adam.m." + name, t.m, Role::State, InitKind::Zeros);
    b.persistent("adam.v." + name, t.v, Role::State, InitKind::Zeros);
    trained.push_back(t);
  };
  states(spec.embedding, wte, {v, h});
  states(spec.output, wout, {h, v});
  uint32_t ballast = 0;
  if (spec.ballast > 0) {
    ballast = b.value(DType::F32, {spec.ballast});
    b.persistent("ballast", ballast, {spec.ballast}, {0}, 1.0);
    states("ballast", ballast, {spec.ballast});
  }
  uint32_t lossSum = b.value(DType::F32, {}),
           countSum = b.value(DType::F32, {});
  b.persistent("loss.sum", lossSum, Role::Accumulator, InitKind::Zeros);
  b.persistent("count.sum", countSum, Role::Accumulator, InitKind::Zeros);
  uint32_t stepCounter = b.value(DType::F32, {});
  b.persistent("optimizer.step", stepCounter, Role::State, InitKind::Zeros);

  uint32_t begin = b.function("begin_step");
  for (uint32_t acc : {trained[0].grad, trained[1].grad, lossSum, countSum})
    b.instr(OpCode::Fill, {}, {acc}, {}, {0.0});
  if (spec.ballast > 0)
    b.instr(OpCode::Fill, {}, {trained[2].grad}, {}, {0.0});

  uint32_t tokens = b.value(DType::I32, {mb, s}),
           labels = b.value(DType::I32, {mb, s});
  uint32_t micro = b.function("microbatch_step", {tokens, labels},
                              {plan::ArgKind::Tokens, plan::ArgKind::Labels});
  uint32_t hiddenValue = b.value(DType::F32, {mb, s, h}),
           dropped = b.value(DType::F32, {mb, s, h}),
           logits = b.value(DType::F32, {mb, s, v}),
           loss = b.value(DType::F32, {}), one = b.value(DType::F32, {}),
           dlogits = b.value(DType::F32, {mb, s, v}),
           flatHidden = b.value(DType::F32, {mb * s, h}),
           flatDlogits = b.value(DType::F32, {mb * s, v}),
           dwout = b.value(DType::F32, {h, v}),
           ddropped = b.value(DType::F32, {mb, s, h}),
           dhidden = b.value(DType::F32, {mb, s, h}),
           dwte = b.value(DType::F32, {v, h}), count = b.value(DType::F32, {});
  b.instr(OpCode::Embedding, {tokens, wte}, {hiddenValue});
  b.instr(OpCode::Dropout, {hiddenValue}, {dropped}, {3, 0}, {spec.dropout});
  b.instr(OpCode::Matmul, {dropped, wout}, {logits}, {0, 0});
  b.instr(OpCode::CrossEntropy, {logits, labels}, {loss}, {-100});
  b.instr(OpCode::Fill, {}, {one}, {}, {1.0});
  b.instr(OpCode::CrossEntropyGrad, {logits, labels, one}, {dlogits}, {-100});
  b.instr(OpCode::Copy, {dropped}, {flatHidden});
  b.instr(OpCode::Copy, {dlogits}, {flatDlogits});
  b.instr(OpCode::Matmul, {flatHidden, flatDlogits}, {dwout}, {1, 0});
  b.instr(OpCode::Matmul, {dlogits, wout}, {ddropped}, {0, 1});
  b.instr(OpCode::Dropout, {ddropped}, {dhidden}, {3, 0}, {spec.dropout});
  b.instr(OpCode::EmbeddingGrad, {tokens, dhidden}, {dwte});
  b.instr(OpCode::CountValid, {labels}, {count}, {-100});
  b.instr(OpCode::Accumulate, {lossSum, loss, count}, {lossSum});
  b.instr(OpCode::Accumulate, {trained[0].grad, dwte, count},
          {trained[0].grad});
  b.instr(OpCode::Accumulate, {trained[1].grad, dwout, count},
          {trained[1].grad});
  b.instr(OpCode::Accumulate, {countSum, count, one}, {countSum});

  uint32_t apply = b.function("apply_step");
  // Data parallel: the sums over each replica's microbatches become sums
  // over the global batch (in place, over the group [dp]).
  if (spec.dpCollectives ||
      microbatchSamplesOf(spec) * spec.microbatches != spec.batch) {
    b.groups = {{"dp"}};
    for (uint32_t acc : {lossSum, countSum})
      b.instr(OpCode::AllReduce, {acc}, {acc}, {0});
    for (const Trained &t : trained)
      b.instr(OpCode::AllReduce, {t.grad}, {t.grad}, {0});
  }
  uint32_t inverse = b.value(DType::F32, {}),
           meanLoss = b.value(DType::F32, {}), total = b.value(DType::F32, {}),
           squares = b.value(DType::F32, {}),
           coefficient = b.value(DType::F32, {}),
           norm = b.value(DType::F32, {}), unit = b.value(DType::F32, {}),
           nextStep = b.value(DType::F32, {}), lr = b.value(DType::F32, {}),
           skipped = b.value(DType::F32, {});
  b.instr(OpCode::Reciprocal, {countSum}, {inverse});
  b.instr(OpCode::ScaleBy, {lossSum, inverse}, {meanLoss});
  b.instr(OpCode::Fill, {}, {total}, {}, {0.0});
  for (const Trained &t : trained) {
    b.instr(OpCode::ScaleBy, {t.grad, inverse}, {t.grad});
    b.instr(OpCode::SumSquares, {t.grad}, {squares});
    b.instr(OpCode::Add, {total, squares}, {total});
  }
  b.instr(OpCode::ClipCoefficient, {total}, {coefficient, norm}, {}, {1.0});
  b.instr(OpCode::Fill, {}, {unit}, {}, {1.0});
  b.instr(OpCode::Add, {stepCounter, unit}, {nextStep});
  b.instr(OpCode::Copy, {nextStep}, {stepCounter});
  b.instr(OpCode::LrSchedule, {nextStep}, {lr}, {spec.warmup, spec.decay},
          {spec.lr, spec.minLr});
  for (const Trained &t : trained)
    b.instr(OpCode::AdamW,
            {t.param, t.grad, t.m, t.v, lr, nextStep, coefficient},
            {t.param, t.m, t.v}, {}, {0.9, 0.95, 1e-8, 0.01});
  b.instr(OpCode::Fill, {}, {skipped}, {}, {0.0});
  b.results({meanLoss, norm, lr, skipped, countSum},
            {"loss", "grad_norm", "lr", "skipped", "tokens"});

  b.call(begin);
  for (int64_t i = 0; i < spec.microbatches; ++i)
    b.call(micro, static_cast<uint32_t>(i));
  b.call(apply);
  return b.build();
}

} // namespace triad::rt::tests

#endif // TRIAD_RUNTIME_TESTS_PLANBUILDER_H
