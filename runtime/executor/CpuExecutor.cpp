//===- CpuExecutor.cpp - runs a verified plan program on the CPU ----------===//
//
// One case per plan op code, mapping the instruction's values and
// attributes (as Plan.cpp checks them) onto the CPU kernels. The shape
// manipulations (transpose, slice, pad, concat, broadcast, sum) are strided
// copies written here.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CpuExecutor.h"

#include "runtime/init/Init.h"
#include "runtime/kernels/cpu/CpuKernels.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace triad::rt {

namespace {

using Shape = std::vector<int64_t>;

Shape shapeOf(const plan::Value &value) {
  return value.shape() ? Shape(value.shape()->begin(), value.shape()->end())
                       : Shape{};
}

int64_t count(const Shape &shape) {
  int64_t n = 1;
  for (int64_t size : shape)
    n *= size;
  return n;
}

Shape strides(const Shape &shape) {
  Shape result(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    result[i] = result[i + 1] * shape[i + 1];
  return result;
}

/// Calls `visit(linear, coordinates)` for every element of `shape`.
template <typename Fn> void forEachIndex(const Shape &shape, Fn visit) {
  int64_t total = count(shape);
  Shape coords(shape.size(), 0);
  for (int64_t linear = 0; linear < total; ++linear) {
    visit(linear, coords);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++coords[d] < shape[d])
        break;
      coords[d] = 0;
    }
  }
}

bool isCollective(plan::OpCode op) {
  return op == plan::OpCode::AllReduce || op == plan::OpCode::AllGather ||
         op == plan::OpCode::ReduceScatter || op == plan::OpCode::AllToAll;
}

bool isTransfer(plan::OpCode op) {
  return op == plan::OpCode::Send || op == plan::OpCode::Recv;
}

int64_t nowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

cpu::Activation activationOf(int64_t kind) {
  switch (kind) {
  case 0:
    return cpu::Activation::Gelu;
  case 1:
    return cpu::Activation::GeluTanh;
  case 2:
    return cpu::Activation::FastGelu;
  case 3:
    return cpu::Activation::Relu;
  default:
    return cpu::Activation::Silu;
  }
}

} // namespace

absl::StatusOr<CpuExecutor> CpuExecutor::create(const LoadedPlan &plan,
                                                uint32_t pipelineRank,
                                                uint64_t seed,
                                                ExecutorOptions options) {
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
  for (size_t i = 0; i < program->values()->size(); ++i) {
    plan::DType dtype = program->values()->Get(i)->dtype();
    if (dtype != plan::DType::F32 && dtype != plan::DType::I32)
      return absl::UnimplementedError(absl::StrCat(
          "the CPU backend runs f32 plans; value ", i, " is ",
          plan::EnumNameDType(dtype), " (compile with dtype=f32)"));
  }
  CpuExecutor executor(plan, *program, options);
  const plan::Plan &root = plan.root();
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
    executor.communicator = &comm;
    executor.rank = comm.worldRank();
  } else {
    executor.ownCommunicator = std::make_unique<LocalCommunicator>(groups);
    executor.communicator = executor.ownCommunicator.get();
  }
  executor.meshPosition = meshCoordinates(root, executor.rank);
  if (absl::Status status = executor.checkCollectives(); !status.ok())
    return status;
  size_t bytes = std::max<uint64_t>(program->arena_bytes(), 64);
  executor.arena.reset(static_cast<std::byte *>(
      ::operator new(bytes, std::align_val_t(64), std::nothrow)));
  if (!executor.arena)
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the program's arena of ", bytes, " bytes"));
  std::memset(executor.arena.get(), 0, bytes);
  if (absl::Status status = executor.initialize(seed); !status.ok())
    return status;
  return executor;
}

float *CpuExecutor::f32(uint32_t index) {
  return reinterpret_cast<float *>(arena.get() +
                                   value(index).region()->offset());
}

int32_t *CpuExecutor::i32(uint32_t index) {
  return reinterpret_cast<int32_t *>(arena.get() +
                                     value(index).region()->offset());
}

absl::Status CpuExecutor::checkCollectives() const {
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

std::vector<int64_t>
CpuExecutor::sliceOffsets(const plan::Persistent &p) const {
  return triad::rt::sliceOffsets(plan->root(), *program, p, meshPosition);
}

absl::Status CpuExecutor::initialize(uint64_t runSeed) {
  seed = runSeed;
  if (!program->persistent())
    return absl::OkStatus();
  for (const plan::Persistent *p : *program->persistent()) {
    const plan::Init *init = p->init();
    float *data = f32(p->value());
    Shape local = shapeOf(value(p->value()));
    if (value(p->value()).dtype() != plan::DType::F32)
      return absl::InvalidArgumentError(absl::StrCat(
          "persistent tensor '", p->name()->str(), "' is not f32"));
    Shape global(p->global_shape()->begin(), p->global_shape()->end());
    Shape offsets = sliceOffsets(*p);
    switch (init->kind()) {
    case plan::InitKind::Zeros:
    case plan::InitKind::Ones:
    case plan::InitKind::Constant: {
      float fill = init->kind() == plan::InitKind::Zeros ? 0.0f
                   : init->kind() == plan::InitKind::Ones
                       ? 1.0f
                       : static_cast<float>(init->value());
      std::fill_n(data, count(local), fill);
      break;
    }
    case plan::InitKind::Normal:
    case plan::InitKind::ScaledNormal: {
      double stddev = init->std();
      if (init->kind() == plan::InitKind::ScaledNormal)
        stddev /= std::sqrt(2.0 * static_cast<double>(init->layers()));
      // Each local element draws at its global index.
      Shape globalStrides = strides(global);
      std::string stream = init->stream()->str();
      forEachIndex(local, [&](int64_t linear, const Shape &coords) {
        int64_t index = 0;
        for (size_t d = 0; d < coords.size(); ++d)
          index += (coords[d] + offsets[d]) * globalStrides[d];
        fillNormal(seed, stream, stddev, static_cast<uint64_t>(index), 1,
                   data + linear);
      });
      break;
    }
    }
    // The padding of a padded tensor (beyond its global shape) is zero,
    // whatever the init.
    if (p->padded_shape()) {
      forEachIndex(local, [&](int64_t linear, const Shape &coords) {
        for (size_t d = 0; d < coords.size(); ++d)
          if (coords[d] + offsets[d] >= global[d]) {
            data[linear] = 0.0f;
            return;
          }
      });
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float *> CpuExecutor::persistent(const std::string &name) {
  if (program->persistent())
    for (const plan::Persistent *p : *program->persistent())
      if (p->name()->str() == name)
        return f32(p->value());
  return absl::NotFoundError(
      absl::StrCat("the program has no persistent tensor '", name, "'"));
}

absl::StatusOr<std::vector<HostTensor>>
CpuExecutor::run(const std::string &name, const std::vector<HostTensor> &args,
                 uint64_t step, std::vector<InstructionTime> *times) {
  for (const plan::Function *candidate : *program->functions())
    if (candidate->name()->str() == name)
      return run(*candidate, args, step, times);
  return absl::NotFoundError(
      absl::StrCat("the program has no function '", name, "'"));
}

absl::StatusOr<std::vector<HostTensor>>
CpuExecutor::run(uint32_t index, const std::vector<HostTensor> &args,
                 uint64_t step, std::vector<InstructionTime> *times) {
  if (index >= program->functions()->size())
    return absl::NotFoundError(
        absl::StrCat("the program has no function ", index));
  return run(*program->functions()->Get(index), args, step, times);
}

absl::StatusOr<std::vector<HostTensor>>
CpuExecutor::run(const plan::Function &function,
                 const std::vector<HostTensor> &args, uint64_t step,
                 std::vector<InstructionTime> *times) {
  std::string name = function.name()->str();
  size_t expected = function.args() ? function.args()->size() : 0;
  if (args.size() != expected)
    return absl::InvalidArgumentError(
        absl::StrCat("function '", name, "' takes ", expected,
                     " arguments, got ", args.size()));
  for (size_t i = 0; i < expected; ++i) {
    uint32_t index = function.args()->Get(i);
    const plan::Value &slot = value(index);
    const HostTensor &arg = args[i];
    int64_t n = count(shapeOf(slot));
    bool f32Arg = slot.dtype() == plan::DType::F32;
    if (arg.dtype != slot.dtype() || arg.shape != shapeOf(slot) ||
        static_cast<int64_t>(f32Arg ? arg.floats.size() : arg.ints.size()) != n)
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " of '", name, "' does not match its value"));
    if (f32Arg)
      std::copy_n(arg.floats.data(), n, f32(index));
    else
      std::copy_n(arg.ints.data(), n, i32(index));
  }
  auto now = nowNanos;
  auto failed = [&](size_t i, const plan::Instr &instr,
                    const absl::Status &status) {
    // Buffers of collectives in flight stay untouched until they complete.
    waitFor(nullptr, nullptr).IgnoreError();
    return absl::Status(status.code(),
                        absl::StrCat("function '", name, "', instruction ", i,
                                     " (", plan::EnumNameOpCode(instr.op()),
                                     "): ", status.message()));
  };
  if (function.body())
    for (size_t i = 0; i < function.body()->size(); ++i) {
      const plan::Instr *instr = function.body()->Get(i);
      if (!inFlight.empty())
        if (absl::Status status = waitFor(instr, times); !status.ok())
          return failed(i, *instr, status);
      int64_t begin = times ? now() : 0;
      absl::Status status = isCollective(instr->op())
                                ? startCollective(*instr, i)
                            : isTransfer(instr->op()) ? startTransfer(*instr, i)
                                                      : execute(*instr, step);
      if (!status.ok())
        return failed(i, *instr, status);
      if (times)
        times->push_back({instr->op(), begin, now()});
    }
  if (absl::Status status = waitFor(nullptr, times); !status.ok())
    return absl::Status(status.code(), absl::StrCat("function '", name,
                                                    "': ", status.message()));
  std::vector<HostTensor> results;
  if (function.results())
    for (uint32_t index : *function.results()) {
      HostTensor result;
      result.dtype = value(index).dtype();
      result.shape = shapeOf(value(index));
      int64_t n = count(result.shape);
      if (result.dtype == plan::DType::F32)
        result.floats.assign(f32(index), f32(index) + n);
      else
        result.ints.assign(i32(index), i32(index) + n);
      results.push_back(std::move(result));
    }
  return results;
}

absl::Status CpuExecutor::startCollective(const plan::Instr &instr,
                                          size_t index) {
  uint32_t x = instr.inputs()->Get(0), out = instr.outputs()->Get(0);
  TensorCollective collective;
  collective.group = static_cast<uint32_t>(instr.ints()->Get(0));
  collective.x = f32(x);
  collective.xShape = shapeOf(value(x));
  collective.out = f32(out);
  collective.outShape = shapeOf(value(out));
  switch (instr.op()) {
  case plan::OpCode::AllGather:
    collective.kind = CollectiveKind::AllGather;
    collective.dim = instr.ints()->Get(1);
    break;
  case plan::OpCode::ReduceScatter:
    collective.kind = CollectiveKind::ReduceScatter;
    collective.dim = instr.ints()->Get(1);
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
  absl::StatusOr<PendingCollective> pending =
      triad::rt::startCollective(*communicator, collective);
  if (!pending.ok())
    return pending.status();
  if (!options.overlapCollectives)
    return pending->wait();
  const plan::Region &xRegion = *value(x).region(),
                     &outRegion = *value(out).region();
  inFlight.push_back({std::move(*pending), nullptr, instr.op(), index,
                      xRegion.offset(), xRegion.offset() + xRegion.bytes(),
                      outRegion.offset(),
                      outRegion.offset() + outRegion.bytes()});
  return absl::OkStatus();
}

absl::Status CpuExecutor::startTransfer(const plan::Instr &instr,
                                        size_t index) {
  bool send = instr.op() == plan::OpCode::Send;
  uint32_t data = send ? instr.inputs()->Get(0) : instr.outputs()->Get(0);
  int64_t peer = pipelinePeerRank(plan->root(), meshPosition,
                                  instr.ints()->Get(0)),
          tag = instr.ints()->Get(1), elements = count(shapeOf(value(data)));
  absl::StatusOr<std::unique_ptr<CommRequest>> request =
      send ? communicator->startSend(f32(data), elements, peer, tag)
           : communicator->startRecv(f32(data), elements, peer, tag);
  if (!request.ok())
    return request.status();
  if (!options.overlapCollectives)
    return (*request)->wait();
  const plan::Region &region = *value(data).region();
  uint64_t begin = region.offset(), end = region.offset() + region.bytes();
  inFlight.push_back({std::nullopt, std::move(*request), instr.op(), index,
                      send ? begin : 0, send ? end : 0, send ? 0 : begin,
                      send ? 0 : end});
  return absl::OkStatus();
}

absl::Status CpuExecutor::waitFor(const plan::Instr *instr,
                                  std::vector<InstructionTime> *times) {
  auto overlaps = [&](uint32_t index, uint64_t begin, uint64_t end) {
    const plan::Region &region = *value(index).region();
    return region.bytes() > 0 && begin < end && region.offset() < end &&
           begin < region.offset() + region.bytes();
  };
  auto mustWait = [&](const InFlight &c) {
    if (!instr)
      return true;
    if (instr->inputs())
      for (uint32_t index : *instr->inputs())
        if (overlaps(index, c.outBegin, c.outEnd))
          return true;
    if (instr->outputs())
      for (uint32_t index : *instr->outputs())
        if (overlaps(index, c.outBegin, c.outEnd) ||
            overlaps(index, c.xBegin, c.xEnd))
          return true;
    return false;
  };
  absl::Status result;
  for (size_t i = 0; i < inFlight.size();) {
    if (!mustWait(inFlight[i])) {
      ++i;
      continue;
    }
    int64_t begin = times ? nowNanos() : 0;
    absl::Status status = inFlight[i].wait();
    if (times)
      times->push_back({inFlight[i].op, begin, nowNanos(), /*wait=*/true});
    if (!status.ok() && result.ok())
      result = absl::Status(status.code(),
                            absl::StrCat(isTransfer(inFlight[i].op)
                                             ? "the transfer of instruction "
                                             : "the collective of instruction ",
                                         inFlight[i].instruction, " (",
                                         plan::EnumNameOpCode(inFlight[i].op),
                                         "): ", status.message()));
    inFlight.erase(inFlight.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return result;
}

std::optional<cpu::VocabPiece> CpuExecutor::vocabPiece(const plan::Instr &instr,
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

absl::Status CpuExecutor::execute(const plan::Instr &instr, uint64_t step) {
  auto in = [&](size_t i) { return instr.inputs()->Get(i); };
  auto out = [&](size_t i) { return instr.outputs()->Get(i); };
  auto intAt = [&](size_t i) { return instr.ints()->Get(i); };
  auto floatAt = [&](size_t i) { return instr.floats()->Get(i); };
  auto shape = [&](uint32_t index) { return shapeOf(value(index)); };
  auto n = [&](uint32_t index) { return count(shape(index)); };
  auto badIds = [](const char *what) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", what, " is outside the vocabulary"));
  };
  // Element-wise copy into the value `target` of whatever `source` says for
  // each target coordinate (-1: zero), for f32 or i32 values alike.
  auto gather = [&](uint32_t source, uint32_t target,
                    auto sourceIndex /* (coords) -> int64_t */) {
    bool floats = value(target).dtype() == plan::DType::F32;
    forEachIndex(shape(target), [&](int64_t linear, const Shape &coords) {
      int64_t from = sourceIndex(coords);
      if (floats)
        f32(target)[linear] = from < 0 ? 0.0f : f32(source)[from];
      else
        i32(target)[linear] = from < 0 ? 0 : i32(source)[from];
    });
  };

  switch (instr.op()) {
  case plan::OpCode::Embedding: {
    Shape table = shape(in(1));
    // A vocab-parallel piece holds the rows of this rank's index in its
    // group.
    int64_t firstRow = 0, vocab = table[0];
    if (instr.ints() && instr.ints()->size() == 1) {
      GroupPosition position = groupPosition(
          plan->root(), static_cast<uint32_t>(intAt(0)), meshPosition);
      firstRow = position.member * table[0];
      vocab = position.size * table[0];
    }
    if (!cpu::embedding(i32(in(0)), f32(in(1)), f32(out(0)), n(in(0)), table[0],
                        table[1], firstRow, vocab))
      return badIds("token id");
    return absl::OkStatus();
  }
  case plan::OpCode::EmbeddingGrad: {
    Shape table = shape(out(0));
    std::fill_n(f32(out(0)), count(table), 0.0f);
    if (!cpu::embeddingGradAccumulate(i32(in(0)), f32(in(1)), f32(out(0)),
                                      n(in(0)), table[0], table[1]))
      return badIds("token id");
    return absl::OkStatus();
  }
  case plan::OpCode::Matmul: {
    Shape a = shape(in(0)), b = shape(in(1));
    bool ta = intAt(0) != 0, tb = intAt(1) != 0;
    size_t r = a.size();
    int64_t m = ta ? a[r - 1] : a[r - 2], k = ta ? a[r - 2] : a[r - 1];
    int64_t ncols = tb ? b[b.size() - 2] : b[b.size() - 1];
    int64_t batch = count(Shape(a.begin(), a.end() - 2));
    cpu::matmul(f32(in(0)), f32(in(1)), f32(out(0)), batch, m, ncols, k, ta, tb,
                b.size() == r && r > 2);
    return absl::OkStatus();
  }
  case plan::OpCode::Add:
    cpu::addBroadcast(f32(in(0)), f32(in(1)), f32(out(0)), n(out(0)), n(in(1)));
    return absl::OkStatus();
  case plan::OpCode::Mul:
    cpu::mul(f32(in(0)), f32(in(1)), f32(out(0)), n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Scale:
    cpu::scale(f32(in(0)), static_cast<float>(floatAt(0)), f32(out(0)),
               n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Activation:
    cpu::activation(activationOf(intAt(0)), f32(in(0)), f32(out(0)), n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::ActivationGrad:
    cpu::activationGrad(activationOf(intAt(0)), f32(in(0)), f32(in(1)),
                        f32(out(0)), n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Gated:
    cpu::gated(activationOf(intAt(0)), f32(in(0)), f32(in(1)), f32(out(0)),
               n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm: {
    Shape x = shape(in(0));
    int64_t width = x.back(), rows = count(x) / width;
    float epsilon = static_cast<float>(floatAt(0));
    if (instr.op() == plan::OpCode::LayerNorm)
      cpu::layerNorm(f32(in(0)), f32(in(1)),
                     instr.inputs()->size() == 3 ? f32(in(2)) : nullptr,
                     f32(out(0)), rows, width, epsilon);
    else
      cpu::rmsNorm(f32(in(0)), f32(in(1)), f32(out(0)), rows, width, epsilon);
    return absl::OkStatus();
  }
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad: {
    Shape x = shape(in(0));
    int64_t width = x.back(), rows = count(x) / width;
    float epsilon = static_cast<float>(floatAt(0));
    std::fill_n(f32(out(1)), width, 0.0f);
    if (instr.op() == plan::OpCode::LayerNormGrad)
      cpu::layerNormGrad(f32(in(0)), f32(in(1)), f32(in(2)), f32(out(0)),
                         f32(out(1)), rows, width, epsilon);
    else
      cpu::rmsNormGrad(f32(in(0)), f32(in(1)), f32(in(2)), f32(out(0)),
                       f32(out(1)), rows, width, epsilon);
    return absl::OkStatus();
  }
  case plan::OpCode::Attention:
  case plan::OpCode::AttentionGrad: {
    Shape q = shape(in(0)), k = shape(in(1));
    int64_t heads = intAt(0), kvHeads = intAt(1), mask = intAt(2);
    bool hasPrefix = intAt(3) != 0, hasSlopes = intAt(4) != 0;
    cpu::AttentionShape s{q[0],
                          q[1],
                          k[1],
                          heads,
                          kvHeads,
                          q[2] / heads,
                          mask == 0   ? cpu::Mask::Causal
                          : mask == 1 ? cpu::Mask::Prefix
                                      : cpu::Mask::None,
                          static_cast<float>(floatAt(0))};
    size_t next = 3;
    const int32_t *prefix = nullptr;
    if (hasPrefix) {
      prefix = i32(in(next++));
      for (int64_t b = 0; b < q[0]; ++b)
        if (prefix[b] < 0 || prefix[b] > k[1])
          return absl::InvalidArgumentError(
              absl::StrCat("prefix length ", prefix[b], " of sample ", b,
                           " is outside [0, ", k[1], "]"));
    }
    const float *slopes = hasSlopes ? f32(in(next++)) : nullptr;
    if (instr.op() == plan::OpCode::Attention)
      cpu::attention(f32(in(0)), f32(in(1)), f32(in(2)), prefix, slopes,
                     f32(out(0)), s);
    else
      cpu::attentionGrad(f32(in(0)), f32(in(1)), f32(in(2)), prefix, slopes,
                         f32(in(next)), f32(out(0)), f32(out(1)), f32(out(2)),
                         s);
    return absl::OkStatus();
  }
  case plan::OpCode::Rope: {
    Shape x = shape(in(0));
    int64_t heads = intAt(0);
    cpu::rope(f32(in(0)), f32(out(0)), x[0], x[1], heads, x[2] / heads,
              intAt(1), static_cast<float>(floatAt(0)),
              static_cast<float>(floatAt(1)));
    return absl::OkStatus();
  }
  case plan::OpCode::Copy:
    if (in(0) != out(0))
      std::memmove(f32(out(0)), f32(in(0)), 4 * n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Cast: {
    plan::DType from = value(in(0)).dtype(), to = value(out(0)).dtype();
    int64_t size = n(out(0));
    if (from == to) {
      if (in(0) != out(0))
        std::memmove(f32(out(0)), f32(in(0)), 4 * size);
    } else if (to == plan::DType::I32) {
      for (int64_t i = 0; i < size; ++i)
        i32(out(0))[i] = static_cast<int32_t>(std::trunc(f32(in(0))[i]));
    } else {
      for (int64_t i = 0; i < size; ++i)
        f32(out(0))[i] = static_cast<float>(i32(in(0))[i]);
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Transpose: {
    Shape inStrides = strides(shape(in(0)));
    gather(in(0), out(0), [&](const Shape &coords) {
      int64_t from = 0;
      for (size_t d = 0; d < coords.size(); ++d)
        from += coords[d] * inStrides[intAt(d)];
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Slice: {
    Shape x = shape(in(0)), inStrides = strides(x);
    gather(in(0), out(0), [&](const Shape &coords) {
      int64_t from = 0;
      for (size_t d = 0; d < coords.size(); ++d)
        from += (coords[d] + intAt(d)) * inStrides[d];
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Pad: {
    Shape x = shape(in(0)), inStrides = strides(x);
    gather(in(0), out(0), [&](const Shape &coords) -> int64_t {
      int64_t from = 0;
      for (size_t d = 0; d < coords.size(); ++d) {
        int64_t c = coords[d] - intAt(d);
        if (c < 0 || c >= x[d])
          return -1;
        from += c * inStrides[d];
      }
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Concat: {
    int64_t dim = intAt(0), offset = 0;
    Shape result = shape(out(0)), outStrides = strides(result);
    bool floats = value(out(0)).dtype() == plan::DType::F32;
    for (size_t i = 0; i < instr.inputs()->size(); ++i) {
      uint32_t part = in(i);
      forEachIndex(shape(part), [&](int64_t linear, const Shape &coords) {
        int64_t to = 0;
        for (size_t d = 0; d < coords.size(); ++d)
          to += (coords[d] + (static_cast<int64_t>(d) == dim ? offset : 0)) *
                outStrides[d];
        if (floats)
          f32(out(0))[to] = f32(part)[linear];
        else
          i32(out(0))[to] = i32(part)[linear];
      });
      offset += shape(part)[dim];
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Broadcast: {
    Shape x = shape(in(0)), inStrides = strides(x);
    size_t lead = shape(out(0)).size() - x.size();
    gather(in(0), out(0), [&](const Shape &coords) {
      int64_t from = 0;
      for (size_t d = 0; d < x.size(); ++d)
        if (x[d] != 1)
          from += coords[lead + d] * inStrides[d];
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Sum: {
    // Reduce x to the result's shape (broadcast's adjoint), times a factor.
    Shape x = shape(in(0)), result = shape(out(0)),
          outStrides = strides(result);
    size_t lead = x.size() - result.size();
    std::vector<double> sums(static_cast<size_t>(count(result)), 0.0);
    // The common reductions are over leading dimensions (a bias gradient:
    // result [1, .., 1, x's trailing sizes]) or trailing ones (result [x's
    // leading sizes, 1, .., 1]): contiguous loops, added in the same order
    // as the general case below.
    size_t ones = 0;
    while (ones < result.size() && result[ones] == 1)
      ++ones;
    bool leading = std::equal(result.begin() + ones, result.end(),
                              x.begin() + lead + ones);
    size_t kept = 0;
    while (kept < result.size() && result[kept] == x[lead + kept])
      ++kept;
    bool trailing =
        lead == 0 && std::all_of(result.begin() + kept, result.end(),
                                 [](int64_t d) { return d == 1; });
    const float *data = f32(in(0));
    int64_t total = count(x), width = count(result);
    if (leading) {
      for (int64_t row = 0; row < total / width; ++row)
        for (int64_t j = 0; j < width; ++j)
          sums[j] += data[row * width + j];
    } else if (trailing) {
      int64_t chunk = total / width;
      for (int64_t i = 0; i < width; ++i)
        for (int64_t j = 0; j < chunk; ++j)
          sums[i] += data[i * chunk + j];
    } else
      forEachIndex(x, [&](int64_t linear, const Shape &coords) {
        int64_t to = 0;
        for (size_t d = 0; d < result.size(); ++d)
          if (result[d] != 1)
            to += coords[lead + d] * outStrides[d];
        sums[to] += f32(in(0))[linear];
      });
    for (size_t i = 0; i < sums.size(); ++i)
      f32(out(0))[i] = static_cast<float>(sums[i] * floatAt(0));
    return absl::OkStatus();
  }
  case plan::OpCode::Dropout:
    cpu::dropout(f32(in(0)), f32(out(0)), n(out(0)), floatAt(0), seed, step,
                 static_cast<uint64_t>(intAt(0)),
                 static_cast<uint64_t>(intAt(1)));
    return absl::OkStatus();
  case plan::OpCode::CrossEntropy:
  case plan::OpCode::CrossEntropyGrad: {
    bool grad = instr.op() == plan::OpCode::CrossEntropyGrad;
    Shape logits = shape(in(0));
    int64_t vocab = logits.back();
    bool hasLse = instr.inputs()->size() == (grad ? 4u : 3u);
    std::optional<cpu::VocabPiece> piece =
        vocabPiece(instr, 1, vocab, hasLse ? f32(in(grad ? 3 : 2)) : nullptr);
    const cpu::VocabPiece *pieceOrNull = piece ? &*piece : nullptr;
    auto ignore = static_cast<int32_t>(intAt(0));
    if (grad) {
      if (!cpu::crossEntropyGrad(f32(in(0)), i32(in(1)), f32(out(0)), n(in(1)),
                                 vocab, ignore, f32(in(2))[0], pieceOrNull))
        return badIds("label");
      return absl::OkStatus();
    }
    int64_t counted = 0;
    float loss = cpu::crossEntropy(f32(in(0)), i32(in(1)), n(in(1)), vocab,
                                   ignore, &counted, pieceOrNull);
    if (counted < 0)
      return badIds("label");
    f32(out(0))[0] = loss;
    return absl::OkStatus();
  }
  case plan::OpCode::LogSumExp: {
    int64_t columns = shape(in(0)).back();
    std::optional<cpu::VocabPiece> piece =
        vocabPiece(instr, 0, columns, nullptr);
    cpu::logSumExp(f32(in(0)), f32(out(0)), n(out(0)), columns,
                   cpu::classColumns(columns, piece ? &*piece : nullptr));
    return absl::OkStatus();
  }
  case plan::OpCode::Fill:
    std::fill_n(f32(out(0)), n(out(0)), static_cast<float>(floatAt(0)));
    return absl::OkStatus();
  case plan::OpCode::SumSquares:
    f32(out(0))[0] = static_cast<float>(cpu::sumSquares(f32(in(0)), n(in(0))));
    return absl::OkStatus();
  case plan::OpCode::ClipCoefficient: {
    double norm = std::sqrt(static_cast<double>(f32(in(0))[0]));
    double maxNorm = floatAt(0);
    f32(out(0))[0] = static_cast<float>(
        maxNorm == 0.0 ? 1.0 : std::min(1.0, maxNorm / (norm + 1e-6)));
    f32(out(1))[0] = static_cast<float>(norm);
    return absl::OkStatus();
  }
  case plan::OpCode::LrSchedule: {
    double stepValue = f32(in(0))[0], peak = floatAt(0), floor = floatAt(1);
    if (options.peakLearningRate) {
      floor *= *options.peakLearningRate / peak;
      peak = *options.peakLearningRate;
    }
    int64_t warmup = intAt(0), decay = intAt(1);
    double lr = peak;
    if (warmup > 0 && stepValue <= static_cast<double>(warmup))
      lr = peak * stepValue / static_cast<double>(warmup);
    else if (decay != 0 && decay <= warmup)
      lr = floor;
    else if (decay != 0) {
      double progress =
          std::min(1.0, std::max(0.0, (stepValue - warmup) /
                                          static_cast<double>(decay - warmup)));
      lr = floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
    }
    f32(out(0))[0] = static_cast<float>(lr);
    return absl::OkStatus();
  }
  case plan::OpCode::AdamW: {
    int64_t size = n(in(0));
    // The kernel works in place: bring the inputs to the outputs first.
    for (size_t i : {0, 2, 3})
      if (in(i) != out(i == 0 ? 0 : i - 1))
        std::memmove(f32(out(i == 0 ? 0 : i - 1)), f32(in(i)), 4 * size);
    cpu::adamw(f32(out(0)), f32(in(1)), f32(out(1)), f32(out(2)), size,
               f32(in(4))[0], f32(in(5))[0], f32(in(6))[0],
               static_cast<float>(floatAt(0)), static_cast<float>(floatAt(1)),
               static_cast<float>(floatAt(2)), static_cast<float>(floatAt(3)));
    return absl::OkStatus();
  }
  case plan::OpCode::Select: {
    uint32_t chosen = f32(in(0))[0] != 0.0f ? in(1) : in(2);
    if (chosen != out(0))
      std::memmove(f32(out(0)), f32(chosen), 4 * n(out(0)));
    return absl::OkStatus();
  }
  case plan::OpCode::LossScaleUpdate: {
    double sumSquares = f32(in(0))[0], scale = f32(in(1))[0],
           good = f32(in(2))[0];
    bool finite = std::isfinite(sumSquares);
    double next = scale, goodNext = good + 1.0;
    if (!finite) {
      next = std::max(1.0, scale * floatAt(1));
      goodNext = 0.0;
    } else if (goodNext >= static_cast<double>(intAt(0))) {
      next = scale * floatAt(0);
      goodNext = 0.0;
    }
    f32(out(0))[0] = finite ? 0.0f : 1.0f;
    f32(out(1))[0] = static_cast<float>(next);
    f32(out(2))[0] = static_cast<float>(goodNext);
    f32(out(3))[0] = static_cast<float>(1.0 / scale);
    return absl::OkStatus();
  }
  case plan::OpCode::CountValid:
    f32(out(0))[0] = static_cast<float>(
        cpu::countValid(i32(in(0)), n(in(0)), static_cast<int32_t>(intAt(0))));
    return absl::OkStatus();
  case plan::OpCode::Accumulate: {
    float weight = f32(in(2))[0];
    cpu::accumulate(f32(out(0)), f32(in(1)), weight, n(out(0)));
    return absl::OkStatus();
  }
  case plan::OpCode::Reciprocal: {
    float x = f32(in(0))[0];
    f32(out(0))[0] = x == 0.0f ? 0.0f : 1.0f / x;
    return absl::OkStatus();
  }
  case plan::OpCode::ScaleBy: {
    float factor = f32(in(1))[0];
    cpu::scale(f32(in(0)), factor, f32(out(0)), n(out(0)));
    return absl::OkStatus();
  }
  case plan::OpCode::AllSlice: {
    // This member's piece of x along dim, as a view [outer, pieces, run]:
    // no communication, the member index comes from the mesh.
    uint32_t group = static_cast<uint32_t>(intAt(0));
    int64_t dim = intAt(1);
    GroupPosition position = groupPosition(plan->root(), group, meshPosition);
    Shape x = shape(in(0));
    int64_t outer = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= x[d];
    // Elements of 4 bytes: f32 values or i32 token ids.
    int64_t run = outer == 0 ? 0 : count(x) / outer / position.size * 4;
    const std::byte *source = reinterpret_cast<const std::byte *>(f32(in(0)));
    std::byte *target = reinterpret_cast<std::byte *>(f32(out(0)));
    for (int64_t i = 0; i < outer; ++i)
      std::memcpy(target + i * run,
                  source + (i * position.size + position.member) * run,
                  static_cast<size_t>(run));
    return absl::OkStatus();
  }
  case plan::OpCode::AllReduce:
  case plan::OpCode::AllGather:
  case plan::OpCode::ReduceScatter:
  case plan::OpCode::AllToAll:
  case plan::OpCode::Send:
  case plan::OpCode::Recv:
    return absl::InternalError(
        "collectives and transfers run through startCollective and "
        "startTransfer");
  }
  return absl::InternalError("unknown op code");
}

} // namespace triad::rt
