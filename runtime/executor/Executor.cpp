//===- Executor.cpp - what every backend's executor shares ----------------===//
//
// Creation checks, initialization at global indices, the run loop with its
// collectives and transfers in flight, and the helpers that read a plan
// instruction's attributes the same way on every backend.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/Executor.h"

#include "runtime/init/Init.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace triad::rt {

namespace {

int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

std::vector<int64_t> shapeOf(const plan::Value &value) {
  return value.shape() ? std::vector<int64_t>(value.shape()->begin(),
                                              value.shape()->end())
                       : std::vector<int64_t>{};
}

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t size : shape)
    n *= size;
  return n;
}

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> result(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    result[i] = result[i + 1] * shape[i + 1];
  return result;
}

cpu::Activation activationOf(int64_t kind) {
  switch (static_cast<plan::ActivationCode>(kind)) {
  case plan::ActivationCode::Gelu:
    return cpu::Activation::Gelu;
  case plan::ActivationCode::GeluTanh:
    return cpu::Activation::GeluTanh;
  case plan::ActivationCode::FastGelu:
    return cpu::Activation::FastGelu;
  case plan::ActivationCode::Relu:
    return cpu::Activation::Relu;
  case plan::ActivationCode::Silu:
    return cpu::Activation::Silu;
  }
  return cpu::Activation::Silu; // the contract admits no other kind
}

/// The first LrSchedule of `program`, or null.
static const plan::Instr *firstSchedule(const plan::Program &program) {
  if (program.functions())
    for (const plan::Function *function : *program.functions())
      if (function->body())
        for (const plan::Instr *instr : *function->body())
          if (instr->op() == plan::OpCode::LrSchedule && instr->floats() &&
              instr->floats()->size() > 1 && instr->ints() &&
              instr->ints()->size() > 1)
            return instr;
  return nullptr;
}

Executor::~Executor() = default;

absl::StatusOr<const plan::Program *>
Executor::findProgram(const LoadedPlan &plan, uint32_t pipelineRank,
                      const ExecutorOptions &options, const char *backend,
                      bool sixteenBit) {
  if (options.peakLearningRate && !(*options.peakLearningRate > 0.0 &&
                                    std::isfinite(*options.peakLearningRate)))
    return absl::InvalidArgumentError(
        absl::StrCat("the learning rate must be positive and finite, got ",
                     *options.peakLearningRate));
  const plan::Program *program = nullptr;
  for (const plan::Program *candidate : *plan.root().programs())
    if (candidate->pipeline_rank() == pipelineRank)
      program = candidate;
  if (!program)
    return absl::NotFoundError(absl::StrCat(
        "the plan has no program for pipeline rank ", pipelineRank));
  if (options.runSteps && *options.runSteps < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "the run's last step must be positive, got ", *options.runSteps));
  if (const plan::Instr *instr = firstSchedule(*program);
      instr && instr->ints()->Get(1) == plan::kDecayOverRun &&
      !options.runSteps)
    return absl::InvalidArgumentError(
        "the plan's learning rate decays over the run (decay-steps=-1, the "
        "default), but the run's last step was not given");
  for (size_t i = 0; i < program->values()->size(); ++i) {
    plan::DType dtype = program->values()->Get(i)->dtype();
    if (dtype != plan::DType::F32 && dtype != plan::DType::I32 && !sixteenBit)
      return absl::UnimplementedError(absl::StrCat(
          "the ", backend, " backend runs f32 plans; value ", i, " is ",
          plan::EnumNameDType(dtype), " (compile with dtype=f32)"));
  }
  return program;
}

absl::Status Executor::connect() {
  const plan::Plan &root = plan->root();
  uint32_t groups = root.groups() ? root.groups()->size() : 0;
  if (options.communicator) {
    Communicator &comm = *options.communicator;
    if (comm.worldSize() != meshSize(root) || comm.groupCount() != groups ||
        comm.worldRank() < 0 || comm.worldRank() >= comm.worldSize())
      return absl::FailedPreconditionError(
          absl::StrCat("the communicator (rank ", comm.worldRank(), " of ",
                       comm.worldSize(), ", ", comm.groupCount(),
                       " groups) is not one for this plan's mesh of ",
                       meshSize(root), " ranks and ", groups, " groups"));
    communicator = &comm;
    rank = comm.worldRank();
  } else {
    ownCommunicator = std::make_unique<LocalCommunicator>(groups);
    communicator = ownCommunicator.get();
  }
  meshPosition = meshCoordinates(root, rank);
  return checkCollectives();
}

absl::Status Executor::checkCollectives() const {
  const plan::Plan &root = plan->root();
  for (const plan::Function *function : *program->functions()) {
    if (!function->body())
      continue;
    for (size_t i = 0; i < function->body()->size(); ++i) {
      const plan::Instr *instr = function->body()->Get(i);
      plan::OpCode op = instr->op();
      std::string where =
          absl::StrCat("function '", function->name()->str(), "', instruction ",
                       i, " (", plan::EnumNameOpCode(op), ")");
      if (isTransfer(op)) {
        int64_t peer = instr->ints()->Get(0);
        if (!options.communicator)
          return absl::FailedPreconditionError(absl::StrCat(
              where, " transfers ", op == plan::OpCode::Send ? "to" : "from",
              " pipeline rank ", peer,
              ", but this executor has no communicator (run the plan's ",
              meshSize(root), " ranks under mpirun)"));
        uint32_t standsAt = pipelineRankAt(root, meshPosition);
        if (standsAt != program->pipeline_rank())
          return absl::FailedPreconditionError(absl::StrCat(
              where, ": world rank ", rank, " is at pipeline rank ", standsAt,
              " of the mesh but runs the program of pipeline rank ",
              program->pipeline_rank()));
        continue;
      }
      if (!isCollective(op))
        continue;
      uint32_t group = static_cast<uint32_t>(instr->ints()->Get(0));
      int64_t members = groupSize(root, group);
      if (!options.communicator && members > 1)
        return absl::FailedPreconditionError(absl::StrCat(
            where, " runs over group ", group, " of ", members,
            " ranks, but this executor has no communicator (run the plan's ",
            meshSize(root), " ranks under mpirun)"));
      if (options.communicator && communicator->groupSize(group) != members)
        return absl::InternalError(absl::StrCat(
            where, ": the communicator's group ", group, " has ",
            communicator->groupSize(group), " members, the plan's ", members));
    }
  }
  return absl::OkStatus();
}

SliceBox Executor::sliceBox(const plan::Persistent &p) const {
  return triad::rt::sliceBox(plan->root(), *program, p, meshPosition);
}

absl::StatusOr<Executor::InitDraw>
Executor::initDraw(const plan::Persistent &p) const {
  const plan::Init *init = p.init();
  if (value(p.value()).dtype() == plan::DType::I32)
    return absl::InvalidArgumentError(absl::StrCat(
        "persistent tensor '", p.name()->str(), "' is not a float tensor"));
  InitDraw draw;
  draw.local = shapeOf(value(p.value()));
  std::vector<int64_t> global(p.global_shape()->begin(),
                              p.global_shape()->end());
  draw.globalStrides = rowMajorStrides(global);
  SliceBox box = sliceBox(p);
  draw.offsets = box.offsets;
  draw.inside = box.sizes;
  switch (init->kind()) {
  case plan::InitKind::Zeros:
  case plan::InitKind::Ones:
  case plan::InitKind::Constant:
    draw.fill = init->kind() == plan::InitKind::Zeros ? 0.0f
                : init->kind() == plan::InitKind::Ones
                    ? 1.0f
                    : static_cast<float>(init->value());
    break;
  case plan::InitKind::Normal:
  case plan::InitKind::ScaledNormal:
    draw.normal = true;
    draw.stddev = init->std();
    if (init->kind() == plan::InitKind::ScaledNormal)
      draw.stddev /= std::sqrt(2.0 * static_cast<double>(init->layers()));
    draw.key = parameterKey(seed, init->stream()->string_view());
    break;
  }
  return draw;
}

absl::Status Executor::initialValues(const plan::Persistent &p,
                                     float *data) const {
  absl::StatusOr<InitDraw> draw = initDraw(p);
  if (!draw.ok())
    return draw.status();
  const std::vector<int64_t> &local = draw->local;
  if (!draw->normal) {
    std::fill_n(data, elementCount(local), draw->fill);
  } else {
    // Each local element draws at its global index. A local row (the
    // innermost dimension) is contiguous in the global tensor too, so it is
    // one run of indices; rows go to the threads (the values do not depend
    // on who draws them).
    const std::vector<int64_t> &globalStrides = draw->globalStrides;
    const std::vector<int64_t> &offsets = draw->offsets;
    int64_t row = local.empty() ? 1 : local.back();
    int64_t rows = row == 0 ? 0 : elementCount(local) / row;
    std::vector<int64_t> outer(local.begin(),
                               local.empty() ? local.end() : local.end() - 1);
    std::vector<int64_t> outerStrides = rowMajorStrides(outer);
    double stddev = draw->stddev;
    PhiloxKey key = draw->key;
#pragma omp parallel for schedule(dynamic, 64) if (rows * row > (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      int64_t index = local.empty() ? 0 : offsets.back() * globalStrides.back();
      for (size_t d = 0; d < outer.size(); ++d)
        index +=
            ((r / outerStrides[d]) % outer[d] + offsets[d]) * globalStrides[d];
      fillNormal(key, stddev, static_cast<uint64_t>(index),
                 static_cast<uint64_t>(row), data + r * row);
    }
  }
  // The padding of a padded piece (what lies outside the tensor) is zero,
  // whatever the init.
  if (draw->inside != local)
    forEachIndex(local, [&](int64_t linear, const std::vector<int64_t> &c) {
      for (size_t d = 0; d < c.size(); ++d)
        if (c[d] >= draw->inside[d]) {
          data[linear] = 0.0f;
          return;
        }
    });
  return absl::OkStatus();
}

const plan::Persistent *
Executor::f32Member(const std::vector<const plan::Persistent *> &group) const {
  for (const plan::Persistent *p : group)
    if (!isSixteenBit(p->value()))
      return p;
  return nullptr;
}

void Executor::endPhase(const char *name,
                        std::chrono::steady_clock::time_point &began) {
  auto now = std::chrono::steady_clock::now();
  addPhase(name, std::chrono::duration<double>(now - began).count());
  began = now;
}

std::vector<std::vector<const plan::Persistent *>>
Executor::initGroups() const {
  std::vector<std::vector<const plan::Persistent *>> groups;
  if (!program->persistent())
    return groups;
  // What a tensor's initial values depend on (initialValues).
  using Key = std::tuple<int, double, double, int64_t, std::string,
                         std::vector<int64_t>, std::vector<int64_t>,
                         std::vector<int64_t>, std::vector<int64_t>>;
  std::map<Key, size_t> groupOf;
  for (const plan::Persistent *p : *program->persistent()) {
    const plan::Init *init = p->init();
    // (An i32 tensor stays, for initialValues to refuse.)
    if (init->kind() == plan::InitKind::Zeros &&
        value(p->value()).dtype() != plan::DType::I32)
      continue;
    SliceBox box = sliceBox(*p);
    Key key{static_cast<int>(init->kind()),
            init->value(),
            init->std(),
            init->layers(),
            init->stream() ? init->stream()->str() : "",
            std::vector<int64_t>(p->global_shape()->begin(),
                                 p->global_shape()->end()),
            box.offsets,
            box.sizes,
            shapeOf(value(p->value()))};
    auto [it, added] = groupOf.try_emplace(std::move(key), groups.size());
    if (added)
      groups.emplace_back();
    groups[it->second].push_back(p);
  }
  return groups;
}

const plan::Persistent *
Executor::findPersistent(const std::string &name) const {
  if (program->persistent())
    for (const plan::Persistent *p : *program->persistent())
      if (p->name()->str() == name)
        return p;
  return nullptr;
}

absl::StatusOr<std::vector<float>>
Executor::readPersistent(const std::string &name) {
  const plan::Persistent *p = findPersistent(name);
  if (!p)
    return absl::NotFoundError(
        absl::StrCat("the program has no persistent tensor '", name, "'"));
  if (absl::Status status = finish(); !status.ok())
    return status;
  HostTensor tensor;
  tensor.dtype = value(p->value()).dtype();
  tensor.shape = shapeOf(value(p->value()));
  if (absl::Status status = readValue(p->value(), tensor); !status.ok())
    return status;
  return std::move(tensor.floats);
}

absl::Status Executor::writePersistent(const std::string &name,
                                       const std::vector<float> &values) {
  const plan::Persistent *p = findPersistent(name);
  if (!p)
    return absl::NotFoundError(
        absl::StrCat("the program has no persistent tensor '", name, "'"));
  HostTensor tensor;
  tensor.shape = shapeOf(value(p->value()));
  if (static_cast<int64_t>(values.size()) != elementCount(tensor.shape))
    return absl::InvalidArgumentError(absl::StrCat(
        "persistent tensor '", name, "' holds ", elementCount(tensor.shape),
        " elements here, not ", values.size()));
  tensor.floats = values;
  if (absl::Status status = finish(); !status.ok())
    return status;
  return writeValue(p->value(), tensor);
}

absl::StatusOr<std::vector<HostTensor>>
Executor::run(const std::string &name, const std::vector<HostTensor> &args,
              uint64_t step, std::vector<InstructionTime> *times,
              uint32_t microbatchIndex, uint32_t slotIndex) {
  if (std::optional<uint32_t> index = functionIndex(name))
    return run(*index, args, step, times, microbatchIndex, slotIndex);
  return absl::NotFoundError(
      absl::StrCat("the program has no function '", name, "'"));
}

std::optional<uint32_t> Executor::functionIndex(std::string_view name) const {
  for (uint32_t index = 0; index < program->functions()->size(); ++index)
    if (program->functions()->Get(index)->name()->string_view() == name)
      return index;
  return std::nullopt;
}

absl::StatusOr<std::vector<HostTensor>>
Executor::run(uint32_t index, const std::vector<HostTensor> &args,
              uint64_t step, std::vector<InstructionTime> *times,
              uint32_t microbatchIndex, uint32_t slotIndex) {
  if (index >= program->functions()->size())
    return absl::NotFoundError(
        absl::StrCat("the program has no function ", index));
  int64_t begin = nowNanos(), syncedBefore = work.syncNanos,
          issuedBefore = issuedWork();
  absl::StatusOr<std::vector<HostTensor>> results =
      runCall(index, args, step, times, microbatchIndex, slotIndex);
  work.launches += issuedWork() - issuedBefore;
  work.callNanos += nowNanos() - begin - (work.syncNanos - syncedBefore);
  return results;
}

absl::StatusOr<std::vector<HostTensor>>
Executor::runCall(uint32_t index, const std::vector<HostTensor> &args,
                  uint64_t step, std::vector<InstructionTime> *times,
                  uint32_t microbatchIndex, uint32_t slotIndex) {
  const plan::Function &function = *program->functions()->Get(index);
  std::string name = function.name()->str();
  if (slotIndex >= (slotsOf(*program, function) > 0 ? kMaxSlots : 1))
    return absl::InvalidArgumentError(
        absl::StrCat("function '", name, "' has no slot ", slotIndex));
  size_t expected = function.args() ? function.args()->size() : 0;
  if (args.size() != expected)
    return absl::InvalidArgumentError(
        absl::StrCat("function '", name, "' takes ", expected,
                     " arguments, got ", args.size()));
  for (size_t i = 0; i < expected; ++i) {
    const plan::Value &slot = value(function.args()->Get(i));
    const HostTensor &arg = args[i];
    int64_t n = elementCount(shapeOf(slot));
    // Float values (16-bit ones too) take floats, i32 ones ints.
    bool floatArg = slot.dtype() != plan::DType::I32;
    if (arg.dtype != slot.dtype() || arg.shape != shapeOf(slot) ||
        static_cast<int64_t>(floatArg ? arg.floats.size() : arg.ints.size()) !=
            n)
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " of '", name, "' does not match its value"));
  }
  running = &function;
  microbatch = microbatchIndex;
  slot = slotIndex;
  auto failed = [&](std::optional<size_t> i, const absl::Status &status) {
    // Buffers of collectives in flight stay untouched until they complete.
    waitForAll(nullptr).IgnoreError();
    settleCounted(false).IgnoreError();
    // The failed call's device times are not reported with a later step.
    deviceSpans(nullptr).IgnoreError();
    std::string where = absl::StrCat("function '", name, "'");
    if (i)
      absl::StrAppend(&where, ", instruction ", *i, " (",
                      plan::EnumNameOpCode(function.body()->Get(*i)->op()),
                      ")");
    return absl::Status(status.code(),
                        absl::StrCat(where, ": ", status.message()));
  };
  // A timed call runs instruction by instruction (each one timed).
  CallKey key{index, slot, evaluating};
  CallMode mode = times ? CallMode::Direct : callMode(key);
  // Collectives and transfers of earlier calls may still use the
  // arguments' bytes. A recorded call can wait for nothing started outside
  // it, so it starts after everything in flight that touches any of its
  // values, and after every collective (which may share staging with its
  // own); transfers on other bytes (a pipeline's other slots) stay in
  // flight.
  ++calls;
  if (absl::Status status =
          mode == CallMode::Direct
              ? waitFor(nullptr, function.args(), times)
              : waitWhere(
                    [&](const InFlight &c) {
                      if (!isTransfer(c.op))
                        return true;
                      for (uint32_t v : touchedBy(index))
                        if (overlaps(v, c.outBegin, c.outEnd) ||
                            overlaps(v, c.xBegin, c.xEnd))
                          return true;
                      return false;
                    },
                    times);
      !status.ok())
    return failed(std::nullopt, status);
  for (size_t i = 0; i < expected; ++i)
    if (absl::Status status = writeValue(function.args()->Get(i), args[i]);
        !status.ok())
      return status;
  if (absl::Status status = beginCall(step, microbatch); !status.ok())
    return failed(std::nullopt, status);
  std::optional<size_t> at;
  absl::Status status;
  if (mode == CallMode::Replay) {
    status = replay(key);
  } else {
    bool recorded = false;
    if (mode == CallMode::Record) {
      absl::StatusOr<bool> made = record(function, key, step, at);
      if (made.ok())
        recorded = *made;
      else
        status = made.status();
    }
    // A call whose recording failed runs as any other (nothing of the
    // recording ran).
    if (status.ok() && !recorded) {
      at.reset();
      status = runBody(function, step, times, at);
    }
  }
  if (!status.ok())
    return failed(at, status);
  // What is still in flight may stay so, but for what the results are
  // read from; the host then needs the device's work done.
  std::vector<HostTensor> results;
  if (!function.results() || function.results()->size() == 0)
    return results;
  status = waitFor(function.results(), nullptr, times);
  if (absl::Status settled = settleCounted(false); status.ok())
    status = settled;
  if (!status.ok())
    return failed(std::nullopt, status);
  for (uint32_t index : *function.results()) {
    HostTensor result;
    result.dtype = value(index).dtype();
    result.shape = shapeOf(value(index));
    if (absl::Status read = readValue(index, result); !read.ok())
      return read;
    results.push_back(std::move(result));
  }
  return results;
}

absl::StatusOr<bool> Executor::record(const plan::Function &function,
                                      const CallKey &key, uint64_t step,
                                      std::optional<size_t> &at) {
  absl::Status body = startRecording();
  if (body.ok())
    body = runBody(function, step, nullptr, at);
  // What the call started joins it before the recording ends (what it did
  // not start, on bytes it does not touch, stays in flight).
  uint64_t call = calls;
  auto startedHere = [call](const InFlight &c) { return c.call == call; };
  if (body.ok())
    body = waitWhere(startedHere, nullptr);
  // Recorded, not run: nothing it started is in flight.
  if (!body.ok())
    inFlight.erase(
        std::remove_if(inFlight.begin(), inFlight.end(), startedHere),
        inFlight.end());
  return endRecording(key, body);
}

absl::Status Executor::runBody(const plan::Function &function, uint64_t step,
                               std::vector<InstructionTime> *times,
                               std::optional<size_t> &at) {
  if (!function.body())
    return absl::OkStatus();
  for (size_t i = 0; i < function.body()->size(); ++i) {
    at = i;
    const plan::Instr *instr = function.body()->Get(i);
    if (options.progress)
      options.progress->instruction(i, plan::EnumNameOpCode(instr->op()));
    if (absl::Status status = waitFor(instr->inputs(), instr->outputs(), times);
        !status.ok())
      return status;
    int64_t begin = times ? nowNanos() : 0;
    // Timed on the device, an instruction is marked there and not waited
    // for; otherwise its time is that of its work, waited for.
    bool onDevice = times && timesOnDevice();
    if (onDevice)
      timing = Timing{instr, i, &function, microbatch};
    absl::Status status;
    if (isCollective(instr->op()) || isTransfer(instr->op())) {
      // Starting one may block too (a blocking collective, a staged
      // copy): the watchdog sees it as a wait.
      const WaitPeers *peers = options.progress ? peersOf(*instr) : nullptr;
      status = waitRecorded(
          {isTransfer(instr->op()) ? "the transfer" : "the collective", i,
           plan::EnumNameOpCode(instr->op()), peers, function.name()->c_str(),
           microbatch},
          [&] {
            return isCollective(instr->op()) ? startCollective(*instr, i)
                                             : startTransfer(*instr, i);
          });
    } else {
      status = execute(*instr, step);
    }
    timing.reset();
    if (status.ok() && times && !onDevice)
      status = settleCounted(true);
    if (!status.ok())
      return status;
    if (times)
      times->push_back({instr->op(), begin, nowNanos(), false, instr, i,
                        &function, microbatch});
  }
  at.reset();
  return absl::OkStatus();
}

absl::Status Executor::finish(std::vector<InstructionTime> *times) {
  int64_t begin = nowNanos(), issuedBefore = issuedWork();
  running = nullptr;
  absl::Status status = waitForAll(times);
  if (absl::Status settled = settle(false); status.ok())
    status = settled;
  // Everything has ended: the device's times are known.
  if (absl::Status spans = deviceSpans(status.ok() ? times : nullptr);
      status.ok())
    status = spans;
  work.launches += issuedWork() - issuedBefore;
  work.syncNanos += nowNanos() - begin;
  return status;
}

absl::Status Executor::settleCounted(bool timed) {
  int64_t begin = nowNanos();
  absl::Status status = settle(timed);
  work.syncNanos += nowNanos() - begin;
  return status;
}

void Executor::drainInFlight() { waitForAll(nullptr).IgnoreError(); }

TensorCollective Executor::describeCollective(const plan::Instr &instr,
                                              const float *x, float *out,
                                              size_t pair) const {
  TensorCollective collective;
  collective.group = static_cast<uint32_t>(instr.ints()->Get(0));
  collective.x = x;
  collective.xShape = shapeOf(value(instr.inputs()->Get(pair)));
  collective.out = out;
  collective.outShape = shapeOf(value(instr.outputs()->Get(pair)));
  switch (instr.op()) {
  case plan::OpCode::AllGather:
    collective.kind = CollectiveKind::AllGather;
    collective.dim = instr.ints()->Get(1 + pair);
    break;
  case plan::OpCode::ReduceScatter:
    collective.kind = CollectiveKind::ReduceScatter;
    collective.dim = instr.ints()->Get(1 + pair);
    break;
  case plan::OpCode::AllToAll:
    collective.kind = CollectiveKind::AllToAll;
    collective.dim = instr.ints()->Get(1);
    collective.concatDim = instr.ints()->Get(2);
    break;
  default:
    collective.kind = CollectiveKind::AllReduce;
    break;
  }
  return collective;
}

Executor::Transfer Executor::describeTransfer(const plan::Instr &instr) const {
  bool send = instr.op() == plan::OpCode::Send;
  uint32_t data = send ? instr.inputs()->Get(0) : instr.outputs()->Get(0);
  return {send, data,
          pipelinePeerRank(plan->root(), meshPosition, instr.ints()->Get(0)),
          instr.ints()->Get(1), elementCount(shapeOf(value(data)))};
}

absl::Status Executor::track(std::optional<PendingCollective> collective,
                             std::unique_ptr<CommRequest> transfer,
                             const plan::Instr &instr, size_t index,
                             std::optional<uint32_t> x,
                             std::optional<uint32_t> out) {
  const WaitPeers *peers = options.progress ? peersOf(instr) : nullptr;
  auto range = [&](std::optional<uint32_t> v) -> std::pair<uint64_t, uint64_t> {
    if (!v)
      return {0, 0};
    return {offsetOf(*v), offsetOf(*v) + value(*v).region()->bytes()};
  };
  auto [xBegin, xEnd] = range(x);
  auto [outBegin, outEnd] = range(out);
  InFlight started{std::move(collective),
                   std::move(transfer),
                   instr.op(),
                   index,
                   xBegin,
                   xEnd,
                   outBegin,
                   outEnd,
                   peers,
                   running,
                   microbatch,
                   calls};
  if (!options.overlapCollectives)
    return waitRecorded(waitOf(started), [&] { return started.wait(); });
  inFlight.push_back(std::move(started));
  return absl::OkStatus();
}

Wait Executor::waitOf(const InFlight &c) const {
  return {isTransfer(c.op) ? "the transfer" : "the collective",
          c.instruction,
          plan::EnumNameOpCode(c.op),
          c.peers,
          c.function->name()->c_str(),
          c.microbatch};
}

template <typename Fn>
absl::Status Executor::waitRecorded(const Wait &what, Fn wait) {
  if (!options.progress)
    return wait();
  options.progress->beginWait(what);
  absl::Status status = wait();
  options.progress->endWait();
  return status;
}

const WaitPeers *Executor::peersOf(const plan::Instr &instr) {
  bool transfer = isTransfer(instr.op());
  int64_t key = transfer ? describeTransfer(instr).peer : instr.ints()->Get(0);
  auto [it, inserted] = peerNames.try_emplace({transfer, key});
  if (!inserted)
    return &it->second;
  if (transfer) {
    it->second = {absl::StrCat("rank ", key), {key}};
    return &it->second;
  }
  // The world ranks of this rank's instance of the group: those with its
  // coordinates on every other axis.
  const plan::Plan &root = plan->root();
  auto group = static_cast<uint32_t>(key);
  int64_t color = groupPosition(root, group, meshPosition).color;
  std::vector<int64_t> ranks;
  for (int64_t r = 0, world = meshSize(root); r < world; ++r)
    if (groupPosition(root, group, meshCoordinates(root, r)).color == color)
      ranks.push_back(r);
  it->second.text = absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                 absl::StrJoin(ranks, ", "));
  it->second.ranks = std::move(ranks);
  return &it->second;
}

bool Executor::overlaps(uint32_t index, uint64_t begin, uint64_t end) const {
  // The value's bytes are those of the running call's slot.
  uint64_t bytes = value(index).region()->bytes(), offset = offsetOf(index);
  return bytes > 0 && begin < end && offset < end && begin < offset + bytes;
}

absl::Status Executor::waitFor(const flatbuffers::Vector<uint32_t> *reads,
                               const flatbuffers::Vector<uint32_t> *writes,
                               std::vector<InstructionTime> *times, bool all) {
  // An entry's bytes are those of its own call's slot.
  return waitWhere(
      [&](const InFlight &c) {
        if (all)
          return true;
        if (reads)
          for (uint32_t index : *reads)
            if (overlaps(index, c.outBegin, c.outEnd))
              return true;
        if (writes)
          for (uint32_t index : *writes)
            if (overlaps(index, c.outBegin, c.outEnd) ||
                overlaps(index, c.xBegin, c.xEnd))
              return true;
        return false;
      },
      times);
}

const std::vector<uint32_t> &Executor::touchedBy(uint32_t function) {
  auto [it, inserted] = touched.try_emplace(function);
  if (!inserted)
    return it->second;
  std::vector<uint32_t> &values = it->second;
  forEachValueOf(*program->functions()->Get(function),
                 [&](uint32_t index) { values.push_back(index); });
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

template <typename MustWait>
absl::Status Executor::waitWhere(MustWait mustWait,
                                 std::vector<InstructionTime> *times) {
  absl::Status result;
  for (size_t i = 0; i < inFlight.size();) {
    InFlight &c = inFlight[i];
    if (!mustWait(c)) {
      ++i;
      continue;
    }
    int64_t begin = nowNanos();
    absl::Status status = waitRecorded(waitOf(c), [&] { return c.wait(); });
    int64_t end = nowNanos();
    if (isTransfer(c.op))
      transferWaiting += end - begin;
    if (times)
      times->push_back({c.op, begin, end, /*wait=*/true, nullptr, c.instruction,
                        c.function, c.microbatch});
    if (!status.ok() && result.ok()) {
      std::string what =
          absl::StrCat(isTransfer(c.op) ? "the transfer of instruction "
                                        : "the collective of instruction ",
                       c.instruction, " (", plan::EnumNameOpCode(c.op), ")");
      if (c.function != running || c.microbatch != microbatch)
        absl::StrAppend(&what, " of call ", c.function->name()->str(),
                        " (microbatch ", c.microbatch, ")");
      result = absl::Status(status.code(),
                            absl::StrCat(what, ": ", status.message()));
    }
    inFlight.erase(inFlight.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return result;
}

std::optional<cpu::VocabPiece> Executor::vocabPiece(const plan::Instr &instr,
                                                    size_t groupInt,
                                                    int64_t columns,
                                                    const float *lse) const {
  const flatbuffers::Vector<int64_t> *ints = instr.ints();
  size_t count = ints ? ints->size() : 0;
  int64_t group = count > groupInt ? ints->Get(groupInt) : -1;
  std::optional<int64_t> classes;
  if (count > groupInt + 1)
    classes = ints->Get(groupInt + 1);
  if (group < 0)
    return classes ? std::optional<cpu::VocabPiece>(
                         cpu::VocabPiece{nullptr, 0, *classes})
                   : std::nullopt;
  GroupPosition position =
      groupPosition(plan->root(), static_cast<uint32_t>(group), meshPosition);
  return cpu::VocabPiece{lse, position.member * columns,
                         classes.value_or(position.size * columns)};
}

Executor::MatmulDims Executor::matmulDims(const plan::Instr &instr) const {
  std::vector<int64_t> a = shapeOf(value(instr.inputs()->Get(0))),
                       b = shapeOf(value(instr.inputs()->Get(1)));
  plan::MatmulAttrs attrs = plan::matmulAttrs(*instr.ints());
  bool ta = attrs.transposeA, tb = attrs.transposeB;
  size_t r = a.size();
  MatmulDims dims{elementCount(std::vector<int64_t>(a.begin(), a.end() - 2)),
                  ta ? a[r - 1] : a[r - 2],
                  tb ? b[b.size() - 2] : b[b.size() - 1],
                  ta ? a[r - 2] : a[r - 1],
                  ta,
                  tb,
                  b.size() == r && r > 2};
  dims.epilogue = attrs.epilogue;
  dims.activation = attrs.activation();
  dims.gradient = attrs.gradient();
  if (attrs.hasBias())
    dims.bias = instr.inputs()->Get(2);
  if (dims.gradient)
    dims.activationInput = instr.inputs()->Get(2);
  if (attrs.accumulates())
    dims.weight = instr.inputs()->Get(3);
  if (attrs.hasAddend())
    dims.addend = instr.inputs()->Get(instr.inputs()->size() - 1);
  if (instr.outputs()->size() == 2)
    (dims.gradient ? dims.biasGrad : dims.preActivation) =
        instr.outputs()->Get(1);
  return dims;
}

bool Executor::resultOverlapsOperand(const plan::Instr &instr,
                                     bool inPlace) const {
  for (uint32_t out : *instr.outputs())
    for (uint32_t in : *instr.inputs())
      if (!(inPlace && out == in) && mayOverlap(value(out), value(in)))
        return true;
  return false;
}

bool Executor::isSixteenBit(uint32_t index) const {
  plan::DType dtype = value(index).dtype();
  return dtype == plan::DType::BF16 || dtype == plan::DType::F16;
}

std::vector<uint32_t>
Executor::sixteenBitOperands(const plan::Instr &instr) const {
  std::vector<uint32_t> sixteen;
  for (const auto *list : {instr.inputs(), instr.outputs()})
    if (list)
      for (uint32_t index : *list)
        if (isSixteenBit(index) &&
            std::find(sixteen.begin(), sixteen.end(), index) == sixteen.end())
          sixteen.push_back(index);
  return sixteen;
}

std::string Executor::describe(const plan::Instr &instr) const {
  if (instr.op() == plan::OpCode::Matmul) {
    MatmulDims d = matmulDims(instr);
    static constexpr const char *kEpilogues[] = {
        "",
        " + bias",
        " + bias, gelu_tanh",
        " + bias, relu",
        " * gelu_tanh'",
        ", weighted into its accumulator",
        " + addend",
        " + bias + addend"};
    static_assert(std::size(kEpilogues) == plan::kLastEpilogueCode + 1);
    return absl::StrCat(d.m, "x", d.k, d.transposeA ? "^T" : "", " . ", d.k,
                        "x", d.n, d.transposeB ? "^T" : "", ", batch ", d.batch,
                        d.rhsBatched ? " (both batched)" : "",
                        kEpilogues[static_cast<int>(d.epilogue)],
                        d.biasGrad ? ", bias gradient" : "");
  }
  auto operands = [&](const flatbuffers::Vector<uint32_t> *indices) {
    std::string text;
    if (indices)
      for (uint32_t index : *indices) {
        const plan::Value &v = value(index);
        absl::StrAppend(&text, text.empty() ? "" : " ",
                        absl::AsciiStrToLower(plan::EnumNameDType(v.dtype())),
                        "[", absl::StrJoin(shapeOf(v), ","), "]");
      }
    return text;
  };
  return absl::StrCat(operands(instr.inputs()), " -> ",
                      operands(instr.outputs()));
}

Executor::EmbeddingRows
Executor::embeddingRows(const plan::Instr &instr) const {
  // Embedding reads the table; EmbeddingGrad writes its gradient.
  std::vector<int64_t> table = shapeOf(value(
      instr.op() == plan::OpCode::EmbeddingGrad ? instr.outputs()->Get(0)
                                                : instr.inputs()->Get(1)));
  EmbeddingRows rows{table[0], table[1], 0, table[0]};
  if (instr.ints() && instr.ints()->size() == 1) {
    GroupPosition position =
        groupPosition(plan->root(), static_cast<uint32_t>(instr.ints()->Get(0)),
                      meshPosition);
    rows.firstRow = position.member * table[0];
    rows.vocab = position.size * table[0];
  }
  return rows;
}

Executor::AttentionCall
Executor::attentionCall(const plan::Instr &instr) const {
  plan::AttentionAttrs attrs =
      plan::attentionAttrs(*instr.ints(), *instr.floats());
  std::vector<int64_t> q = shapeOf(value(instr.inputs()->Get(0))),
                       k = shapeOf(value(instr.inputs()->Get(1)));
  AttentionCall call;
  call.shape = {q[0],
                q[1],
                k[1],
                attrs.heads,
                attrs.kvHeads,
                q[2] / attrs.heads,
                attrs.mask == plan::MaskCode::Causal   ? cpu::Mask::Causal
                : attrs.mask == plan::MaskCode::Prefix ? cpu::Mask::Prefix
                                                       : cpu::Mask::None,
                static_cast<float>(attrs.scale)};
  uint32_t next = 3;
  if (attrs.hasPrefix)
    call.prefix = instr.inputs()->Get(next++);
  if (attrs.hasSlopes)
    call.slopes = instr.inputs()->Get(next++);
  if (instr.op() == plan::OpCode::AttentionGrad)
    call.dout = instr.inputs()->Get(next);
  return call;
}

absl::Status Executor::checkPrefixLengths(const int32_t *lengths,
                                          const cpu::AttentionShape &shape) {
  for (int64_t b = 0; b < shape.batch; ++b)
    if (lengths[b] < 0 || lengths[b] > shape.keySeq)
      return absl::InvalidArgumentError(
          absl::StrCat("prefix length ", lengths[b], " of sample ", b,
                       " is outside [0, ", shape.keySeq, "]"));
  return absl::OkStatus();
}

Executor::SliceView Executor::allSliceView(const plan::Instr &instr) const {
  GroupPosition position = groupPosition(
      plan->root(), static_cast<uint32_t>(instr.ints()->Get(0)), meshPosition);
  std::vector<int64_t> x = shapeOf(value(instr.inputs()->Get(0)));
  std::vector<int64_t> out = shapeOf(value(instr.outputs()->Get(0)));
  int64_t dim = instr.ints()->Get(1);
  int64_t outer = 1, inner = 4;
  for (int64_t d = 0; d < dim; ++d)
    outer *= x[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < x.size(); ++d)
    inner *= x[d];
  int64_t piece = out[dim], first = position.member * piece;
  int64_t valid = std::clamp<int64_t>(x[dim] - first, 0, piece);
  return {outer, x[dim] * inner, std::min(first, x[dim]) * inner, piece * inner,
          valid * inner};
}

DropoutPiece Executor::dropoutPiece(const plan::Instr &instr,
                                    uint64_t *perMicrobatch) const {
  plan::DropoutAttrs attrs = plan::dropoutAttrs(*instr.ints(), *instr.floats());
  DropoutPiece piece;
  piece.first = attrs.firstIndex;
  auto position = [&](int64_t group) {
    return groupPosition(plan->root(), static_cast<uint32_t>(group),
                         meshPosition);
  };
  auto shape = shapeOf(value(instr.outputs()->Get(0)));
  // A sample's rows here, and in the whole sequence.
  int64_t pieces = 1;
  if (attrs.seqGroup >= 0) {
    GroupPosition seq = position(attrs.seqGroup);
    uint64_t rows = static_cast<uint64_t>(elementCount(shape) / shape[0]);
    pieces = seq.size;
    piece.run = rows;
    piece.stride = rows * static_cast<uint64_t>(pieces);
    piece.first += static_cast<uint64_t>(seq.member) * rows;
  }
  if (perMicrobatch)
    *perMicrobatch = 0;
  if (instr.ints()->size() < 4)
    return piece;
  int64_t microbatches = attrs.microbatches;
  int64_t member = attrs.group < 0 ? 0 : position(attrs.group).member;
  auto sampleElements = static_cast<uint64_t>(pieces * elementCount(shape));
  uint64_t moved = microbatches > 1 ? sampleElements : 0;
  if (perMicrobatch)
    *perMicrobatch = moved;
  piece.first += static_cast<uint64_t>(member * microbatches) * sampleElements +
                 (perMicrobatch ? 0 : microbatch * moved);
  return piece;
}

plan::LrScheduleAttrs Executor::schedule(const plan::Instr &instr) const {
  plan::LrScheduleAttrs attrs =
      plan::lrScheduleAttrs(*instr.ints(), *instr.floats());
  if (options.peakLearningRate) {
    attrs.floor = attrs.floor * *options.peakLearningRate / attrs.peak;
    attrs.peak = *options.peakLearningRate;
  }
  // findProgram refused a decay over the run without the run's steps.
  if (attrs.decaySteps == plan::kDecayOverRun)
    attrs.decaySteps = options.runSteps.value_or(0);
  return attrs;
}

std::optional<plan::LrScheduleAttrs> Executor::lrSchedule() const {
  if (const plan::Instr *instr = firstSchedule(*program))
    return schedule(*instr);
  return std::nullopt;
}

std::optional<double> Executor::peakLearningRate() const {
  if (std::optional<plan::LrScheduleAttrs> attrs = lrSchedule())
    return attrs->peak;
  return std::nullopt;
}

std::map<std::string, double> Executor::hyperparameters() const {
  std::map<std::string, double> found;
  if (std::optional<plan::LrScheduleAttrs> schedule = lrSchedule()) {
    found["warmup"] = static_cast<double>(schedule->warmupSteps);
    found["decay_steps"] = static_cast<double>(schedule->decaySteps);
    found["min_lr"] = schedule->floor;
  }
  if (!program->functions())
    return found;
  for (const plan::Function *function : *program->functions()) {
    if (!function->body())
      continue;
    for (const plan::Instr *instr : *function->body()) {
      switch (instr->op()) {
      case plan::OpCode::AdamW: {
        plan::AdamWAttrs adam = plan::adamWAttrs(*instr->floats());
        found["beta1"] = adam.beta1;
        found["beta2"] = adam.beta2;
        found["epsilon"] = adam.epsilon;
        double &decay = found["weight_decay"];
        for (size_t i = 3; i < instr->floats()->size(); ++i)
          decay = std::max(decay, instr->floats()->Get(i));
        break;
      }
      case plan::OpCode::ClipCoefficient:
        found["clip_norm"] = instr->floats()->Get(0);
        break;
      default:
        break;
      }
    }
  }
  return found;
}

} // namespace triad::rt
