//===- Trainer.cpp - optimizer steps of a plan on a token corpus ----------===//

#include "runtime/train/Trainer.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/plan/Mesh.h"
#include "runtime/schedule/Schedule.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <set>

namespace triad::rt {

namespace {

int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool checkpointed(const plan::Persistent &p) {
  return p.role() == plan::Role::Parameter || p.role() == plan::Role::State;
}

/// The f32 master copy of a 16-bit parameter is checkpointed as
/// "master.<parameter>".
constexpr absl::string_view kMasterPrefix = "master.";

/// f16's dynamic loss scale: a run in another precision neither needs nor
/// provides it (an f16 plan starts it afresh from a checkpoint without).
bool isLossScaleState(absl::string_view name) {
  return name == "loss_scale" || name == "loss_scale.good_steps";
}

/// Which checkpoint tensor restores the plan's tensor `name`, across
/// precisions: a parameter takes the f32 master copy where the checkpoint
/// has one and the plan does not (an f32 run resuming a 16-bit one), and a
/// master copy the parameter where the checkpoint has no master (a 16-bit
/// run resuming an f32 one). Empty when nothing restores it.
std::string sourceOf(const std::string &name,
                     const std::set<std::string> &planTensors,
                     const std::set<std::string> &saved) {
  std::string master = absl::StrCat(kMasterPrefix, name);
  if (!planTensors.count(master) && saved.count(master))
    return master;
  if (saved.count(name))
    return name;
  if (absl::StartsWith(name, kMasterPrefix)) {
    std::string parameter(name.substr(kMasterPrefix.size()));
    if (saved.count(parameter))
      return parameter;
  }
  return {};
}

/// The part of a local slice (at `offsets`, of shape `local`) inside the
/// global shape: a padded tensor's slice may reach into its padding, which
/// checkpoints never hold. A size of 0 when the slice is all padding.
const plan::Program *programOfRank(const plan::Plan &plan, uint32_t rank) {
  for (const plan::Program *program : *plan.programs())
    if (program->pipeline_rank() == rank)
      return program;
  return nullptr;
}

} // namespace

std::vector<Trainer::CallLabel>
Trainer::labelCalls(const plan::Program &program) {
  std::vector<CallLabel> labels(program.step() ? program.step()->size() : 0);
  const auto *callActions = program.call_actions();
  if (!callActions)
    return labels;
  for (size_t i = 0; i < labels.size(); ++i) {
    int32_t index = callActions->Get(i);
    if (index < 0)
      continue;
    // The loader has parsed and checked every action.
    labels[i].token = program.actions()->Get(index)->str();
    switch (schedule::parseAction(labels[i].token)->kind) {
    case schedule::ActionKind::Forward:
      labels[i].category = "forward";
      break;
    case schedule::ActionKind::Backward:
    case schedule::ActionKind::BackwardInput:
    case schedule::ActionKind::BackwardWeight:
      labels[i].category = "backward";
      break;
    case schedule::ActionKind::Send:
    case schedule::ActionKind::Recv:
      labels[i].category = "transfer";
      break;
    case schedule::ActionKind::ReduceGradients:
    case schedule::ActionKind::Optimizer:
      labels[i].category = "optimizer";
      break;
    }
  }
  return labels;
}

Trainer::Trainer(const LoadedPlan &plan, Sampler sampler,
                 std::unique_ptr<Executor> exec,
                 std::unique_ptr<Communicator> ownCommunicator,
                 const TrainerOptions &options,
                 std::optional<int32_t> prefixIgnoreIndex)
    : plan(&plan), sampler(sampler), exec(std::move(exec)),
      ownCommunicator(std::move(ownCommunicator)),
      communicator(options.communicator ? options.communicator
                                        : this->ownCommunicator.get()),
      options(options),
      dpRank(coordinateOn(plan.root(), this->exec->coordinates(), "dp")),
      dpSize(meshAxisSize(plan.root(), "dp")), epochNanos(nowNanos()),
      callLabels(labelCalls(this->exec->programOf())),
      prefixIgnoreIndex(prefixIgnoreIndex) {}

namespace {

/// Whether a function of any program takes prefix lengths: then the model
/// is a prefix LM, and every pipeline rank hides the same labels (each
/// counts the step's tokens from its own).
bool takesPrefixLengths(const plan::Plan &plan) {
  for (const plan::Program *program : *plan.programs())
    for (const plan::Function *function : *program->functions())
      if (function->arg_kinds())
        for (plan::ArgKind kind : *function->arg_kinds())
          if (kind == plan::ArgKind::PrefixLengths)
            return true;
  return false;
}

/// The loss's ignore index: that of the CountValid that counts the labels.
absl::StatusOr<int32_t> ignoreIndexOf(const plan::Program &program) {
  for (const plan::Function *function : *program.functions())
    if (function->body())
      for (const plan::Instr *instr : *function->body())
        if (instr->op() == plan::OpCode::CountValid && instr->ints() &&
            instr->ints()->size() == 1)
          return static_cast<int32_t>(instr->ints()->Get(0));
  return absl::InvalidArgumentError(
      "the plan trains a prefix LM but counts no labels (CountValid), so "
      "the runtime cannot tell which label value to hide in the prefix");
}

} // namespace

absl::StatusOr<Trainer> Trainer::create(const LoadedPlan &plan,
                                        const TokenFile &data,
                                        const TrainerOptions &options) {
  return createWith(plan, &data, options);
}

absl::StatusOr<Trainer> Trainer::create(const LoadedPlan &plan,
                                        const TrainerOptions &options) {
  return createWith(plan, nullptr, options);
}

absl::StatusOr<Trainer> Trainer::createWith(const LoadedPlan &plan,
                                            const TokenFile *data,
                                            const TrainerOptions &options) {
  int64_t worldRank =
      options.communicator ? options.communicator->worldRank() : 0;
  if (worldRank < 0 || worldRank >= meshSize(plan.root()))
    return absl::InvalidArgumentError(absl::StrCat(
        "world rank ", worldRank, " is outside the plan's mesh of ",
        meshSize(plan.root()), " ranks"));
  uint32_t pipelineRank =
      pipelineRankAt(plan.root(), meshCoordinates(plan.root(), worldRank));
  const plan::Program *program = programOfRank(plan.root(), pipelineRank);
  if (!program)
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan has no program for pipeline rank ", pipelineRank));
  if (!program->step() || program->step()->size() == 0)
    return absl::InvalidArgumentError(
        "the plan's program has no step (Program.step) to train with; "
        "recompile it with a compiler that emits one");
  absl::StatusOr<Sampler> sampler =
      data ? Sampler::create(*data, plan.root().seq(), options.seed)
           : Sampler::withoutData(plan.root().seq(), options.seed);
  if (!sampler.ok())
    return sampler.status();
  std::unique_ptr<Communicator> own;
  if (!options.communicator) {
    uint32_t groups = plan.root().groups() ? plan.root().groups()->size() : 0;
    own = std::make_unique<LocalCommunicator>(groups);
  }
  ExecutorOptions executorOptions;
  executorOptions.peakLearningRate = options.learningRate;
  executorOptions.runSteps = options.runSteps;
  executorOptions.communicator = options.communicator;
  executorOptions.overlapCollectives = options.overlapCollectives;
  executorOptions.progress = options.progress;
  executorOptions.deviceTimes = options.trace && options.deviceTimes;
  absl::StatusOr<std::unique_ptr<Executor>> exec = createExecutor(
      plan, pipelineRank, options.seed, executorOptions, options.device);
  if (!exec.ok())
    return exec.status();
  std::optional<int32_t> prefixIgnoreIndex;
  if (takesPrefixLengths(plan.root())) {
    absl::StatusOr<int32_t> ignore = ignoreIndexOf(*program);
    if (!ignore.ok())
      return ignore.status();
    prefixIgnoreIndex = *ignore;
  }
  Trainer trainer(plan, *sampler, std::move(*exec), std::move(own), options,
                  prefixIgnoreIndex);
  // The trace's time 0 is the end of a barrier of every rank, so that the
  // ranks' events line up in one timeline (to the barrier's skew, a few
  // microseconds on one machine), whatever each rank's clock reads.
  if (options.trace) {
    if (absl::Status status = trainer.communicator->barrier(); !status.ok())
      return status;
    trainer.epochNanos = nowNanos();
  }
  return trainer;
}

bool Trainer::savesSlice(const plan::Persistent &p) const {
  const plan::Plan &root = plan->root();
  std::vector<bool> keeps(root.mesh()->size(), false);
  int64_t pp = meshAxisIndex(root, "pp");
  if (pp >= 0)
    keeps[pp] = true;
  if (p.split())
    for (const plan::DimSplit *split : *p.split())
      if (split->axes())
        for (const flatbuffers::String *axis : *split->axes())
          keeps[meshAxisIndex(root, axis->string_view())] = true;
  for (size_t i = 0; i < keeps.size(); ++i)
    if (!keeps[i] && exec->coordinates()[i] != 0)
      return false;
  // A tensor several pipeline ranks hold (the tied embedding of the first
  // and the last stage) is saved by the first of them.
  uint32_t own = exec->programOf().pipeline_rank();
  for (const plan::Program *other : *root.programs())
    if (other->pipeline_rank() < own && other->persistent())
      for (const plan::Persistent *q : *other->persistent())
        if (q->name()->string_view() == p.name()->string_view())
          return false;
  return true;
}

std::vector<HostTensor> Trainer::callArguments(const Sampler &from,
                                               uint64_t step,
                                               const plan::Call &call) {
  const plan::Plan &root = plan->root();
  const plan::Function &function =
      *exec->programOf().functions()->Get(call.function());
  std::vector<HostTensor> args;
  if (!function.arg_kinds() || function.arg_kinds()->size() == 0)
    return args;
  int64_t samples = microbatchSamples(root), seq = root.seq();
  HostTensor tokens, labels, prefixLengths;
  tokens.dtype = labels.dtype = prefixLengths.dtype = plan::DType::I32;
  tokens.shape = labels.shape = {samples, seq};
  tokens.ints.resize(samples * seq);
  labels.ints.resize(samples * seq);
  prefixLengths.shape = {samples};
  prefixLengths.ints.resize(samples);
  // This data-parallel replica's share of the global batch, and the
  // call's microbatch of it.
  uint64_t first =
      static_cast<uint64_t>(dpRank * (root.batch() / dpSize) +
                            static_cast<int64_t>(call.microbatch()) * samples);
  from.fill(step, first, samples, tokens.ints.data(), labels.ints.data());
  if (prefixIgnoreIndex)
    from.fillPrefixes(step, first, samples, prefixLengths.ints.data(),
                      labels.ints.data(), *prefixIgnoreIndex);
  for (plan::ArgKind kind : *function.arg_kinds())
    args.push_back(kind == plan::ArgKind::Tokens   ? tokens
                   : kind == plan::ArgKind::Labels ? labels
                                                   : prefixLengths);
  return args;
}

absl::StatusOr<StepResult> Trainer::step() {
  if (!sampler.hasData())
    return absl::FailedPreconditionError(
        "this trainer was made without training data; it evaluates and "
        "samples only");
  const plan::Plan &root = plan->root();
  const plan::Program &program = exec->programOf();
  StepResult result;
  result.step = completed + 1;
  if (options.progress)
    options.progress->beginStep(result.step);
  result.tokens = root.batch() * root.seq();
  // Whether this step is in the trace's window.
  bool traced = options.trace && result.step >= options.traceFirstStep &&
                result.step <= options.traceLastStep;
  auto micros = [&](int64_t nanos) { return (nanos - epochNanos) / 1000.0; };

  std::vector<InstructionTime> times;
  int64_t stepBegin = nowNanos();
  Executor::HostWork workBefore = exec->hostWork();
  // Under a pipeline: the span of the transfer calls since the last
  // compute call (idle time).
  std::optional<int64_t> idleBegin;
  int64_t idleEnd = 0;
  std::string idleWhat;
  auto endIdle = [&] {
    if (!idleBegin)
      return;
    result.idleSeconds += (idleEnd - *idleBegin) / 1e9;
    if (traced)
      result.events.push_back({absl::StrCat("idle (", idleWhat, ")"), "idle",
                               micros(*idleBegin),
                               (idleEnd - *idleBegin) / 1000.0});
    idleBegin.reset();
    idleWhat.clear();
  };
  // What a wait names as the call that started what it waited for: its
  // schedule action, or its function and microbatch.
  auto callName = [&](const plan::Function *function, uint32_t microbatch) {
    for (size_t i = 0; i < program.step()->size(); ++i) {
      const plan::Call *call = program.step()->Get(i);
      if (program.functions()->Get(call->function()) == function &&
          call->microbatch() == microbatch && !callLabels[i].token.empty())
        return callLabels[i].token;
    }
    return absl::StrCat(function->name()->str(), " mb ", microbatch);
  };
  // The model layer of an instruction (waited for), from its function's
  // spans.
  auto layerOf = [](const InstructionTime &time) -> std::string {
    const auto *names = time.function->layer_names();
    const auto *spans = time.function->layer_spans();
    if (!names || !spans)
      return {};
    for (size_t l = 0; l < names->size(); ++l)
      if (time.index >= spans->Get(2 * l) && time.index < spans->Get(2 * l + 1))
        return names->Get(l)->str();
    return {};
  };
  auto traceTimes = [&] {
    for (const InstructionTime &time : times) {
      TraceEvent event{
          time.wait ? absl::StrCat("wait ", plan::EnumNameOpCode(time.op))
                    : std::string(plan::EnumNameOpCode(time.op)),
          "instruction",
          micros(time.beginNanos),
          (time.endNanos - time.beginNanos) / 1000.0,
          time.instr ? exec->describe(*time.instr)
                     : absl::StrCat(callName(time.function, time.microbatch),
                                    ", instruction ", time.index),
          layerOf(time)};
      if (time.onDevice) {
        event.category = time.communication ? "device communication" : "device";
        event.call = callName(time.function, time.microbatch);
        event.instruction = static_cast<int64_t>(time.index);
      }
      result.events.push_back(std::move(event));
    }
  };
  for (size_t callIndex = 0; callIndex < program.step()->size(); ++callIndex) {
    const plan::Call *call = program.step()->Get(callIndex);
    const plan::Function &function =
        *program.functions()->Get(call->function());
    std::vector<HostTensor> args = callArguments(sampler, result.step, *call);
    times.clear();
    if (options.progress)
      options.progress->beginCall(function.name()->c_str(), call->microbatch());
    int64_t callBegin = nowNanos(), waitedBefore = exec->transferWaitNanos();
    absl::StatusOr<std::vector<HostTensor>> outputs =
        exec->run(call->function(), args, result.step,
                  traced ? &times : nullptr, call->microbatch(), call->slot());
    if (!outputs.ok())
      return absl::Status(
          outputs.status().code(),
          absl::StrCat("step ", result.step, ": ", outputs.status().message()));
    int64_t callEnd = nowNanos();
    if (function.result_names())
      for (size_t i = 0; i < function.result_names()->size(); ++i)
        result.results[function.result_names()->Get(i)->str()] =
            (*outputs)[i].floats.at(0);
    const std::string &category = callLabels[callIndex].category,
                      &token = callLabels[callIndex].token;
    if (category == "transfer") {
      if (!idleBegin)
        idleBegin = callBegin;
      idleEnd = callEnd;
      absl::StrAppend(&idleWhat, idleWhat.empty() ? "" : " ", token);
    } else {
      endIdle();
      // A transfer call returns once its transfers are posted; the call
      // that reads what they receive (or writes what they send) waits.
      result.idleSeconds += (exec->transferWaitNanos() - waitedBefore) / 1e9;
    }
    if (traced) {
      std::string name = function.name()->str();
      if (!token.empty())
        name = absl::StrCat(token, " ", name);
      else if (!args.empty())
        absl::StrAppend(&name, " mb ", call->microbatch());
      result.events.push_back(
          {name, category, micros(callBegin), (callEnd - callBegin) / 1000.0});
      traceTimes();
    }
  }
  endIdle();
  // What the calls left in flight (a pipeline's last sends) ends with the
  // step, and a GPU's queued work with it.
  if (options.progress)
    options.progress->phase("completing the step's transfers");
  times.clear();
  int64_t waitedBefore = exec->transferWaitNanos();
  if (absl::Status status = exec->finish(traced ? &times : nullptr);
      !status.ok())
    return absl::Status(status.code(), absl::StrCat("step ", result.step, ": ",
                                                    status.message()));
  result.idleSeconds += (exec->transferWaitNanos() - waitedBefore) / 1e9;
  if (traced)
    traceTimes();
  int64_t stepEnd = nowNanos();
  const Executor::HostWork &workAfter = exec->hostWork();
  result.hostSeconds = (workAfter.callNanos - workBefore.callNanos) / 1e9;
  result.syncSeconds = (workAfter.syncNanos - workBefore.syncNanos) / 1e9;
  result.launches = workAfter.launches - workBefore.launches;
  result.seconds = (stepEnd - stepBegin) / 1e9;
  if (traced)
    result.events.insert(result.events.begin(),
                         {absl::StrCat("step ", result.step), "step",
                          micros(stepBegin), (stepEnd - stepBegin) / 1000.0});
  auto named = [&](const char *name) {
    auto it = result.results.find(name);
    return it == result.results.end() ? StepResult::kMissing : it->second;
  };
  result.loss = named("loss");
  result.gradNorm = named("grad_norm");
  result.lr = named("lr");
  result.skipped =
      result.results.count("skipped") && result.results["skipped"] != 0.0;
  completed = result.step;
  consumed += static_cast<uint64_t>(root.batch());
  return result;
}

absl::StatusOr<Trainer::Evaluation> Trainer::evaluate(const TokenFile &data,
                                                      int64_t batches) {
  const plan::Plan &root = plan->root();
  const plan::Program &program = exec->programOf();
  if (batches < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("evaluation needs at least one batch, got ", batches));
  absl::StatusOr<Sampler> evalSampler =
      Sampler::create(data, root.seq(), options.seed);
  if (!evalSampler.ok())
    return evalSampler.status();
  // Whether this rank is the first of the ranks splitting a layer, and of
  // the pipeline ranks (see the sums below).
  bool firstOfLayer = coordinateOn(root, exec->coordinates(), "tp") == 0,
       firstStage = coordinateOn(root, exec->coordinates(), "pp") == 0;
  // The forward pass alone: without a pipeline the plan's eval_step in
  // place of each microbatch step (the microbatch step's forward, dropout
  // off); under one, the schedule's forward and activation-transfer calls
  // (the others' backward and gradient transfers skipped alike on every
  // rank keep the transfers paired, in their order).
  std::optional<uint32_t> evalStep = exec->functionIndex("eval_step");
  auto forwardCall = [&](size_t index, const plan::Function &function) {
    const CallLabel &label = callLabels[index];
    if (label.token.empty())
      return function.name()->string_view() != "apply_step";
    absl::StatusOr<schedule::Action> action =
        schedule::parseAction(label.token);
    switch (action->kind) {
    case schedule::ActionKind::Forward:
      return true;
    case schedule::ActionKind::Send:
    case schedule::ActionKind::Recv:
      return action->direction == schedule::Direction::Activation;
    default:
      return false;
    }
  };
  // Dropout keeps everything, under a pipeline's forward stage functions
  // too.
  exec->setEvaluating(true);
  absl::Cleanup training = [&] { exec->setEvaluating(false); };
  int64_t begin = nowNanos();
  double lossSum = 0, tokenCount = 0;
  for (int64_t b = 0; b < batches; ++b) {
    uint64_t step = static_cast<uint64_t>(b) + 1;
    for (size_t index = 0; index < program.step()->size(); ++index) {
      const plan::Call *call = program.step()->Get(index);
      uint32_t called = call->function();
      const plan::Function *function = program.functions()->Get(called);
      if (!forwardCall(index, *function))
        continue;
      // The microbatch step, or the copy of it the last microbatch calls
      // (where the gradients are reduced in its backward).
      if (evalStep &&
          (function->name()->string_view() == "microbatch_step" ||
           function->name()->string_view() == "last_microbatch_step")) {
        called = *evalStep;
        function = program.functions()->Get(called);
      }
      std::vector<HostTensor> args = callArguments(*evalSampler, step, *call);
      if (options.progress)
        options.progress->beginCall(function->name()->c_str(),
                                    call->microbatch());
      absl::StatusOr<std::vector<HostTensor>> outputs =
          exec->run(called, args, completed + 1, nullptr, call->microbatch(),
                    call->slot());
      if (!outputs.ok())
        return absl::Status(outputs.status().code(),
                            absl::StrCat("evaluation batch ", b + 1, ": ",
                                         outputs.status().message()));
    }
    // This rank's sums over its microbatches. The loss sum is replicated
    // over the ranks splitting a layer (counted on the first of them) and
    // kept by the last pipeline stage only (the others hold 0); every
    // pipeline rank counts the same tokens (counted on the first).
    absl::StatusOr<std::vector<float>> sum = exec->readPersistent("loss.sum");
    absl::StatusOr<std::vector<float>> count =
        exec->readPersistent("loss.tokens");
    if (!sum.ok())
      return sum.status();
    if (!count.ok())
      return count.status();
    if (firstOfLayer) {
      lossSum += sum->at(0);
      if (firstStage)
        tokenCount += count->at(0);
    }
  }
  absl::StatusOr<double> totalLoss = communicator->worldSum(lossSum);
  if (!totalLoss.ok())
    return totalLoss.status();
  absl::StatusOr<double> totalTokens = communicator->worldSum(tokenCount);
  if (!totalTokens.ok())
    return totalTokens.status();
  Evaluation evaluation;
  evaluation.tokens = static_cast<int64_t>(*totalTokens);
  evaluation.loss =
      *totalTokens > 0 ? *totalLoss / *totalTokens : StepResult::kMissing;
  evaluation.seconds = (nowNanos() - begin) / 1e9;
  return evaluation;
}

absl::StatusOr<std::vector<float>>
Trainer::nextTokenLogits(const std::vector<int32_t> &context) {
  const plan::Plan &root = plan->root();
  const plan::Program &program = exec->programOf();
  std::optional<uint32_t> index = exec->functionIndex("logits_step");
  if (!index)
    return absl::FailedPreconditionError(
        "the plan has no logits_step to sample with: sampling needs a plan "
        "without a pipeline or tensor parallelism (compile the model for one "
        "rank; a checkpoint of any mesh loads there)");
  if (context.empty())
    return absl::InvalidArgumentError("sampling needs at least one token");
  int64_t samples = microbatchSamples(root), seq = root.seq(),
          vocab = root.vocab();
  for (int32_t id : context)
    if (id < 0 || id >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
  // The last seq tokens of the context, in the first sample's row.
  int64_t length = std::min<int64_t>(seq, context.size());
  const plan::Function &function = *program.functions()->Get(*index);
  std::vector<HostTensor> args;
  for (size_t a = 0; a < function.arg_kinds()->size(); ++a) {
    HostTensor arg;
    arg.dtype = plan::DType::I32;
    if (function.arg_kinds()->Get(a) == plan::ArgKind::PrefixLengths) {
      arg.shape = {samples};
      arg.ints.assign(samples, 0); // causal
    } else {
      arg.shape = {samples, seq};
      arg.ints.assign(samples * seq, 0);
      if (function.arg_kinds()->Get(a) == plan::ArgKind::Tokens)
        std::copy(context.end() - length, context.end(), arg.ints.begin());
    }
    args.push_back(std::move(arg));
  }
  exec->setEvaluating(true);
  absl::Cleanup training = [&] { exec->setEvaluating(false); };
  absl::StatusOr<std::vector<HostTensor>> outputs =
      exec->run(*index, args, completed + 1, nullptr, 0, 0);
  if (!outputs.ok())
    return outputs.status();
  const HostTensor &logits = outputs->at(0);
  int64_t columns = logits.shape.back();
  if (logits.shape.size() != 3 || columns < vocab ||
      static_cast<int64_t>(logits.floats.size()) != samples * seq * columns)
    return absl::InternalError("logits_step returned logits of another shape");
  auto first = logits.floats.begin() + (length - 1) * columns;
  return std::vector<float>(first, first + vocab);
}

namespace {
bool allFinite(const std::vector<float> &values) {
  return std::all_of(values.begin(), values.end(),
                     [](float v) { return std::isfinite(v); });
}
} // namespace

std::string Trainer::firstNonFiniteParameter() {
  const plan::Program &program = exec->programOf();
  if (program.persistent())
    for (const plan::Persistent *p : *program.persistent()) {
      if (p->role() != plan::Role::Parameter)
        continue;
      absl::StatusOr<std::vector<float>> values =
          exec->readPersistent(p->name()->str());
      if (values.ok() && !allFinite(*values))
        return p->name()->str();
    }
  return "";
}

absl::Status Trainer::save(const std::string &dir) {
  if (options.progress)
    options.progress->phase("saving a checkpoint");
  std::vector<TensorSlice> slices;
  // Every slice's values, read from the executor (its arena may be on a
  // GPU), and the slices of padded tensors without their padding. Deques:
  // the slices point into them as they grow.
  std::deque<absl::StatusOr<std::vector<float>>> held;
  std::deque<std::vector<float>> packed;
  absl::Status finite;
  const plan::Program &program = exec->programOf();
  if (program.persistent())
    for (const plan::Persistent *p : *program.persistent()) {
      if (!checkpointed(*p) || !savesSlice(*p))
        continue;
      absl::StatusOr<std::vector<float>> &values =
          held.emplace_back(exec->readPersistent(p->name()->str()));
      if (!values.ok())
        return values.status();
      if (finite.ok() && p->role() == plan::Role::Parameter &&
          !allFinite(*values))
        finite = absl::FailedPreconditionError(absl::StrCat(
            "step ", completed, ": parameter '", p->name()->str(),
            "' is not finite after the update (a lower --lr, or gradient "
            "clipping, usually helps)"));
      TensorSlice slice;
      slice.name = p->name()->str();
      slice.dtype = DType::F32;
      slice.globalShape.assign(p->global_shape()->begin(),
                               p->global_shape()->end());
      SliceBox box = exec->sliceBox(*p);
      slice.offsets = std::move(box.offsets);
      slice.sizes = std::move(box.sizes);
      std::vector<int64_t> local = shapeOf(*program.values()->Get(p->value()));
      slice.data = values->data();
      if (elementCount(slice.sizes) == 0)
        continue; // all padding
      if (slice.sizes != local) {
        std::vector<float> &inside =
            packed.emplace_back(elementCount(slice.sizes));
        std::vector<int64_t> origin(local.size(), 0);
        copyBox(values->data(), local, origin, inside.data(), slice.sizes,
                origin, slice.sizes, sizeof(float));
        slice.data = inside.data();
      }
      slices.push_back(std::move(slice));
    }
  // A non-finite state is saved by no rank.
  if (absl::Status status = communicator->agree(finite); !status.ok())
    return status;
  int64_t rank = communicator->worldRank();
  CheckpointInfo info;
  info.step = completed;
  info.seed = options.seed;
  info.dataPosition = consumed;
  info.worldSize = communicator->worldSize();
  for (const plan::MeshAxis *axis : *plan->root().mesh())
    info.mesh.emplace_back(axis->name()->str(), axis->size());
  info.peakLearningRate = exec->peakLearningRate();
  info.hyperparameters = exec->hyperparameters();
  // Every shard is on disk (or every rank knows one is not) before rank 0
  // checks them all and moves `latest`.
  if (absl::Status status = communicator->agree(
          writeCheckpointShard(dir, completed, rank, slices, stampOf(info)));
      !status.ok())
    return status;
  absl::Status committed;
  if (rank == 0)
    committed = commitCheckpoint(dir, info);
  return communicator->agree(committed);
}

absl::Status Trainer::load(const std::string &dir,
                           std::optional<uint64_t> step) {
  if (options.progress)
    options.progress->phase("loading a checkpoint");
  std::vector<std::pair<std::string, std::vector<float>>> restored;
  absl::StatusOr<CheckpointInfo> info = read(dir, restored, step);
  // Every rank changes its tensors only when every rank could read them.
  if (absl::Status status = communicator->agree(info.status()); !status.ok())
    return status;
  for (auto &[name, values] : restored)
    if (absl::Status status = exec->writePersistent(name, values); !status.ok())
      return status;
  completed = info->step;
  consumed = info->dataPosition;
  return absl::OkStatus();
}

absl::Status Trainer::initFrom(const std::string &dir) {
  if (options.progress)
    options.progress->phase("loading a checkpoint's weights");
  std::vector<std::pair<std::string, std::vector<float>>> restored;
  absl::StatusOr<CheckpointInfo> info =
      read(dir, restored, std::nullopt, /*weightsOnly=*/true);
  if (absl::Status status = communicator->agree(info.status()); !status.ok())
    return status;
  for (auto &[name, values] : restored)
    if (absl::Status status = exec->writePersistent(name, values); !status.ok())
      return status;
  return absl::OkStatus();
}

absl::StatusOr<CheckpointInfo>
Trainer::read(const std::string &dir,
              std::vector<std::pair<std::string, std::vector<float>>> &restored,
              std::optional<uint64_t> step, bool weightsOnly) {
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::open(dir, step);
  if (!reader.ok())
    return reader.status();
  auto refuse = [&](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", dir, "' (step ", reader->info().step,
                     ") does not fit this plan: ", what));
  };
  if (!weightsOnly && reader->info().seed != options.seed)
    return refuse(absl::StrCat("it was saved with seed ", reader->info().seed,
                               ", this run uses ", options.seed));
  // Every tensor the checkpoint holds must be one the plan has (on some
  // pipeline rank), or the checkpoint is of another model; a checkpoint of
  // another precision may add master copies and f16's loss scale.
  std::set<std::string> known;
  for (const plan::Program *program : *plan->root().programs())
    if (program->persistent())
      for (const plan::Persistent *p : *program->persistent())
        if (checkpointed(*p))
          known.insert(p->name()->str());
  std::vector<std::string> names = reader->tensorNames();
  std::set<std::string> saved(names.begin(), names.end());
  for (const std::string &name : names) {
    bool masterOfKnown =
        absl::StartsWith(name, kMasterPrefix) &&
        known.count(std::string(name.substr(kMasterPrefix.size())));
    if (!known.count(name) && !masterOfKnown && !isLossScaleState(name))
      return refuse(absl::StrCat("it holds tensor '", name,
                                 "', which the plan does not have"));
  }
  // Read everything before changing anything.
  const plan::Program &program = exec->programOf();
  if (program.persistent())
    for (const plan::Persistent *p : *program.persistent()) {
      if (!checkpointed(*p))
        continue;
      if (weightsOnly && p->role() != plan::Role::Parameter &&
          !absl::StartsWith(p->name()->str(), kMasterPrefix))
        continue;
      std::vector<int64_t> global(p->global_shape()->begin(),
                                  p->global_shape()->end());
      // A padded piece reads what lies inside the tensor; its padding stays
      // zero.
      auto [offsets, sizes] = exec->sliceBox(*p);
      std::vector<int64_t> local = shapeOf(*program.values()->Get(p->value()));
      std::string source = sourceOf(p->name()->str(), known, saved);
      // An f16 run resuming another precision starts its loss scale anew.
      if (source.empty() && isLossScaleState(p->name()->str()))
        continue;
      if (source.empty())
        source = p->name()->str(); // (the read says it is missing)
      std::vector<float> values(static_cast<size_t>(elementCount(local)), 0.0f);
      std::vector<float> inside(static_cast<size_t>(elementCount(sizes)));
      if (elementCount(sizes) > 0)
        if (absl::Status status = reader->read(source, DType::F32, global,
                                               offsets, sizes, inside.data());
            !status.ok())
          return status.code() == absl::StatusCode::kDataLoss
                     ? absl::DataLossError(absl::StrCat(
                           "checkpoint '", dir, "' (step ", reader->info().step,
                           ") is damaged: ", status.message()))
                     : refuse(status.message());
      std::vector<int64_t> origin(local.size(), 0);
      copyBox(inside.data(), sizes, origin, values.data(), local, origin, sizes,
              sizeof(float));
      restored.emplace_back(p->name()->str(), std::move(values));
    }
  return reader->info();
}

} // namespace triad::rt
