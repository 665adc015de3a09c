//===- PipeDialect.cpp - pipeline stages and schedules --------------------===//
//
// The verifiers of the stage, transfer and schedule ops (the schedule's is
// the static deadlock check, shared with the runtime), the discardable
// attributes' checks, and the conversions between action ops and the
// runtime's schedule actions.
//
//===----------------------------------------------------------------------===//

#include "dialects/Pipe/PipeDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"

#include <limits>

using namespace mlir;
using namespace triad;
using namespace triad::pipe;

#include "dialects/Pipe/PipeDialect.cpp.inc"
#include "dialects/Pipe/PipeEnums.cpp.inc"
#include "dialects/Pipe/PipeInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/Pipe/PipeOps.cpp.inc"

void PipeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Pipe/PipeOps.cpp.inc"
      >();
}

LogicalResult PipeDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kStageAttrName) {
    auto stage = dyn_cast<IntegerAttr>(attr.getValue());
    if (!stage || !stage.getType().isInteger(64) || stage.getInt() < 0)
      return op->emitOpError() << "'" << kStageAttrName
                               << "' must be a non-negative i64 stage index";
    return success();
  }
  if (attr.getName() == kTiedAttrName) {
    auto stages = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!stages || stages.size() < 2 || stages[0] < 0 ||
        !llvm::is_sorted(stages.asArrayRef(), std::less_equal<int64_t>()) ||
        llvm::adjacent_find(stages.asArrayRef()) != stages.asArrayRef().end())
      return op->emitOpError()
             << "'" << kTiedAttrName
             << "' must list at least two distinct stages in ascending order";
    if (op->getNumResults() != 1)
      return op->emitOpError()
             << "'" << kTiedAttrName
             << "' marks the one result summing a tied parameter's gradient";
    return success();
  }
  if (attr.getName() == kWorkAttrName) {
    auto work = dyn_cast<StringAttr>(attr.getValue());
    if (!work || !symbolizeStageWork(work.getValue()))
      return op->emitOpError()
             << "'" << kWorkAttrName
             << "' must name a stage function's work (forward, backward, "
                "backward_input, backward_weight, send_activation, "
                "recv_activation, send_gradient or recv_gradient)";
    if (!op->hasAttr(kStageAttrName))
      return op->emitOpError()
             << "has '" << kWorkAttrName << "' but no '" << kStageAttrName
             << "': a stage function names its stage";
    return success();
  }
  return op->emitOpError() << "has unknown pipe attribute '"
                           << attr.getName().getValue() << "'";
}

//===----------------------------------------------------------------------===//
// Stages and transfers
//===----------------------------------------------------------------------===//

LogicalResult StageOp::verify() {
  if (getLayers().empty())
    return emitOpError("stage ") << getIndex() << " has no layers";
  if (getRank() > getIndex())
    return emitOpError("stage ")
           << getIndex() << " cannot run on pipeline rank " << getRank()
           << ": stage s runs on rank s mod pp";
  return success();
}

LogicalResult TransferOp::verify() {
  // Both are non-negative: the difference cannot overflow.
  int64_t from = getFrom(), to = getTo();
  if (to - from != 1 && from - to != 1)
    return emitOpError("moves a value from stage ")
           << from << " to stage " << to
           << "; values cross one stage boundary at a time (activations to "
              "the next stage, gradients to the previous one)";
  return success();
}

//===----------------------------------------------------------------------===//
// Stage functions
//===----------------------------------------------------------------------===//

std::optional<StageWork> pipe::stageWorkOf(const schedule::Action &action) {
  using schedule::ActionKind;
  bool gradient = action.direction == schedule::Direction::Gradient;
  switch (action.kind) {
  case ActionKind::Forward:
    return StageWork::forward;
  case ActionKind::Backward:
    return StageWork::backward;
  case ActionKind::BackwardInput:
    return StageWork::backward_input;
  case ActionKind::BackwardWeight:
    return StageWork::backward_weight;
  case ActionKind::Send:
    return gradient ? StageWork::send_gradient : StageWork::send_activation;
  case ActionKind::Recv:
    return gradient ? StageWork::recv_gradient : StageWork::recv_activation;
  case ActionKind::ReduceGradients:
  case ActionKind::Optimizer:
    return std::nullopt;
  }
  return std::nullopt;
}

std::string pipe::stageFunctionName(StageWork work, int64_t stage) {
  // Transfers go by short names, as traces and hang reports print them.
  StringRef name = stringifyStageWork(work);
  switch (work) {
  case StageWork::send_activation:
    name = "send_act";
    break;
  case StageWork::recv_activation:
    name = "recv_act";
    break;
  case StageWork::send_gradient:
    name = "send_grad";
    break;
  case StageWork::recv_gradient:
    name = "recv_grad";
    break;
  default:
    break;
  }
  return (name + "_s" + Twine(stage)).str();
}

std::optional<std::pair<int64_t, StageWork>>
pipe::stageFunctionOf(Operation *function) {
  if (!function)
    return std::nullopt;
  auto stage =
      function->getAttrOfType<IntegerAttr>(PipeDialect::kStageAttrName);
  auto work = function->getAttrOfType<StringAttr>(PipeDialect::kWorkAttrName);
  if (!stage || !work)
    return std::nullopt;
  std::optional<StageWork> kind = symbolizeStageWork(work.getValue());
  if (!kind)
    return std::nullopt;
  return std::make_pair(stage.getInt(), *kind);
}

/// The stage and work of the stage function around `op`, or an error
/// saying where the op belongs.
static FailureOr<std::pair<int64_t, StageWork>> enclosingStage(Operation *op) {
  std::optional<std::pair<int64_t, StageWork>> where =
      stageFunctionOf(op->getParentOp());
  if (!where)
    return op->emitOpError("belongs in a stage function (a function with '")
           << PipeDialect::kStageAttrName << "' and '"
           << PipeDialect::kWorkAttrName << "')";
  return *where;
}

LogicalResult StashOp::verify() {
  FailureOr<std::pair<int64_t, StageWork>> where = enclosingStage(*this);
  if (failed(where))
    return failure();
  StageWork work = where->second;
  if (work == StageWork::send_activation || work == StageWork::send_gradient)
    return emitOpError("in a ")
           << stringifyStageWork(work)
           << " function: a send function only reads kept values";
  return success();
}

LogicalResult UnstashOp::verify() {
  FailureOr<std::pair<int64_t, StageWork>> where = enclosingStage(*this);
  if (failed(where))
    return failure();
  StageWork work = where->second;
  if (work == StageWork::recv_activation || work == StageWork::recv_gradient)
    return emitOpError("in a ")
           << stringifyStageWork(work)
           << " function: a receive function only keeps what it receives";
  return success();
}

/// A transfer op of stage function `where` with stage `peer`: the function
/// must be a send (or receive) in the direction of `peer`.
static LogicalResult verifyTransfer(Operation *op, bool send, int64_t peer) {
  FailureOr<std::pair<int64_t, StageWork>> where = enclosingStage(op);
  if (failed(where))
    return failure();
  auto [stage, work] = *where;
  StageWork activation =
      send ? StageWork::send_activation : StageWork::recv_activation;
  StageWork gradient =
      send ? StageWork::send_gradient : StageWork::recv_gradient;
  if (work != activation && work != gradient)
    return op->emitOpError("in a ")
           << stringifyStageWork(work) << " function; it belongs in a "
           << stringifyStageWork(activation) << " or "
           << stringifyStageWork(gradient) << " function";
  // Activations go to the next stage, gradients to the previous one.
  int64_t expected = (work == activation) == send ? stage + 1 : stage - 1;
  if (peer != expected)
    return op->emitOpError("of stage ")
           << stage << "'s " << stringifyStageWork(work) << " function "
           << (send ? "sends to" : "receives from") << " stage " << peer
           << "; it " << (send ? "sends to" : "receives from") << " stage "
           << expected;
  return success();
}

LogicalResult SendTensorOp::verify() {
  return verifyTransfer(*this, /*send=*/true, getStage());
}

LogicalResult RecvTensorOp::verify() {
  return verifyTransfer(*this, /*send=*/false, getStage());
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

/// The runtime's schedules count in int: a larger number would be checked
/// as another one.
static LogicalResult verifyFitsInt(Operation *op) {
  for (NamedAttribute attr : op->getAttrs())
    if (auto value = dyn_cast<IntegerAttr>(attr.getValue()))
      if (value.getValue().getSExtValue() > std::numeric_limits<int>::max())
        return op->emitOpError("'")
               << attr.getName().getValue() << "' is " << value.getInt()
               << "; schedules count stages, microbatches and ranks up to "
               << std::numeric_limits<int>::max();
  return success();
}

schedule::Action pipe::transferAction(bool send, Direction direction, int stage,
                                      int microbatch, int peer) {
  bool gradient = direction == Direction::gradient;
  schedule::Direction what = gradient ? schedule::Direction::Gradient
                                      : schedule::Direction::Activation;
  // Activations flow to the next stage, gradients to the previous one.
  int peerStage = send != gradient ? stage + 1 : stage - 1;
  return send
             ? schedule::Action::send(what, stage, microbatch, peerStage, peer)
             : schedule::Action::recv(what, stage, microbatch, peerStage, peer);
}

Operation *pipe::buildAction(OpBuilder &b, Location loc,
                             const schedule::Action &action) {
  using schedule::ActionKind;
  int64_t s = action.stage, i = action.microbatch;
  Direction direction = action.direction == schedule::Direction::Gradient
                            ? Direction::gradient
                            : Direction::activation;
  switch (action.kind) {
  case ActionKind::Forward:
    return ForwardOp::create(b, loc, s, i);
  case ActionKind::Backward:
    return BackwardOp::create(b, loc, s, i);
  case ActionKind::BackwardInput:
    return BackwardInputOp::create(b, loc, s, i);
  case ActionKind::BackwardWeight:
    return BackwardWeightOp::create(b, loc, s, i);
  case ActionKind::Send:
    return SendOp::create(b, loc, direction, s, i, action.peer);
  case ActionKind::Recv:
    return RecvOp::create(b, loc, direction, s, i, action.peer);
  case ActionKind::ReduceGradients:
    return ReduceGradientsOp::create(b, loc);
  case ActionKind::Optimizer:
    return OptimizerOp::create(b, loc);
  }
  llvm_unreachable("unknown schedule action");
}

schedule::Schedule ScheduleOp::getSchedule() {
  schedule::Schedule result;
  result.name = getName().str();
  result.microbatches = static_cast<int>(getMicrobatches());
  result.virtualStages = static_cast<int>(getVirtualStages());
  for (auto rank : getBody().front().getOps<RankOp>()) {
    std::vector<schedule::Action> &actions = result.actions.emplace_back();
    for (auto action : rank.getBody().front().getOps<ActionOpInterface>())
      actions.push_back(action.getAction());
  }
  result.ranks = static_cast<int>(result.actions.size());
  return result;
}

ScheduleOp ScheduleOp::createFrom(OpBuilder &builder, Location loc,
                                  const schedule::Schedule &schedule) {
  auto op = ScheduleOp::create(builder, loc, schedule.name,
                               schedule.microbatches, schedule.virtualStages);
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&op.getBody().emplaceBlock());
  for (auto [rank, actions] : llvm::enumerate(schedule.actions)) {
    auto rankOp = RankOp::create(builder, loc, rank);
    OpBuilder::InsertionGuard inner(builder);
    builder.setInsertionPointToStart(&rankOp.getBody().emplaceBlock());
    for (const schedule::Action &action : actions)
      buildAction(builder, loc, action);
  }
  return op;
}

LogicalResult ScheduleOp::verifyRegions() {
  if (failed(verifyFitsInt(*this)))
    return failure();
  int64_t expected = 0;
  for (Operation &op : getBody().front()) {
    auto rank = dyn_cast<RankOp>(op);
    if (!rank)
      return op.emitOpError("is not a pipe.rank; a schedule lists the "
                            "actions of each pipeline rank in pipe.rank ops");
    if (static_cast<int64_t>(rank.getRank()) != expected)
      return rank.emitOpError("lists rank ")
             << rank.getRank() << " where rank " << expected
             << " comes next (ranks are listed in order from 0)";
    ++expected;
  }
  if (expected == 0)
    return emitOpError("lists no pipeline ranks");
  if (absl::Status status = schedule::verify(getSchedule()); !status.ok())
    return emitOpError() << std::string(status.message());
  return success();
}

LogicalResult RankOp::verify() {
  for (Operation &op : getBody().front()) {
    if (!isa<ActionOpInterface>(op))
      return op.emitOpError("is not a pipeline action (forward, backward, "
                            "send, recv, ...) of a pipe.rank");
    if (failed(verifyFitsInt(&op)))
      return failure();
  }
  return verifyFitsInt(*this);
}

FailureOr<schedule::Schedule> pipe::readSchedule(ModuleOp module) {
  auto schedules = module.getOps<ScheduleOp>();
  if (schedules.empty())
    return emitError(module.getLoc(), "has no pipe.schedule; run "
                                      "--triad-pipeline-schedule first");
  if (std::next(schedules.begin()) != schedules.end())
    return emitError(module.getLoc(), "has more than one pipe.schedule");
  // The op's verifier has checked it.
  return (*schedules.begin()).getSchedule();
}
