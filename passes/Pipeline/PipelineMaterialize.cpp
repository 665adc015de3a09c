//===- PipelineMaterialize.cpp - one function per stage and work ----------===//
//
// Cuts @microbatch_step, whose ops --triad-pipeline-split assigned to
// stages, into the functions the schedule calls: per stage, its forward,
// its backward (or zero-bubble's two halves) and its sends and receives,
// with what one function keeps for a later one made explicit (pipe.stash,
// pipe.unstash). See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <set>

namespace triad {
#define GEN_PASS_DEF_PIPELINEMATERIALIZE
#include "passes/Pipeline/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;
using pipe::StageWork;

namespace {

/// The microbatch step cut into pipeline stages (--triad-pipeline-split's
/// `pipe.stage` and `pipe.transfer`), checked and indexed.
struct StagedStep {
  /// A leaf is an op other than a layer or a terminator, in program order,
  /// with its stage and phase.
  struct Leaf {
    Operation *op;
    int64_t stage;
    bool backward;
  };
  /// A returned gradient (or, for a tied parameter, one of its parts) and
  /// the step's result it belongs to.
  struct GradPart {
    unsigned result;
    Value value;
  };

  static FailureOr<StagedStep> build(func::FuncOp microbatch,
                                     int64_t numStages);

  /// The value a layer argument or result stands for.
  Value resolve(Value value) const {
    for (auto it = alias.find(value); it != alias.end(); it = alias.find(value))
      value = it->second;
    return value;
  }
  /// The leaf computing `value`, or null (a function argument).
  const Leaf *producer(Value value) const {
    Operation *def = resolve(value).getDefiningOp();
    auto it = def ? leafIndex.find(def) : leafIndex.end();
    return it == leafIndex.end() ? nullptr : &leaves[it->second];
  }
  /// The leaves of a stage's forward or backward, constants left out (each
  /// function makes the constants it reads).
  ArrayRef<const Leaf *> phase(int64_t stage, bool backward) const {
    auto it = phases.find({stage, backward});
    return it == phases.end() ? ArrayRef<const Leaf *>() : it->second;
  }
  /// The values stage `to` reads from stage `from`, in the order of their
  /// pipe.transfer ops.
  ArrayRef<Value> transfer(int64_t from, int64_t to) const {
    auto it = transfers.find({from, to});
    return it == transfers.end() ? ArrayRef<Value>() : it->second;
  }

  std::vector<Leaf> leaves;
  DenseMap<Operation *, size_t> leafIndex;
  DenseMap<Value, Value> alias;
  std::map<std::pair<int64_t, bool>, SmallVector<const Leaf *>> phases;
  std::map<std::pair<int64_t, int64_t>, SmallVector<Value>> transfers;
  /// Per stage, the backward leaves the gradient it sends back needs
  /// (zero-bubble's B); the rest are its weight gradient (W).
  std::map<int64_t, llvm::DenseSet<Operation *>> inputGradient;
  SmallVector<GradPart> gradParts;
  Value lossValue;
  unsigned lossResult = 0;
};

FailureOr<StagedStep> StagedStep::build(func::FuncOp microbatch,
                                        int64_t numStages) {
  // The leaves (ops other than layers and terminators) in program order,
  // each with its stage and phase; layer arguments and results are aliases
  // of the values they bind.
  StagedStep step;
  std::vector<Leaf> &leaves = step.leaves;
  Block &stepBlock = microbatch.getBody().front();
  Operation *terminator = stepBlock.getTerminator();
  auto resolve = [&](Value value) { return step.resolve(value); };
  auto producer = [&](Value value) { return step.producer(value); };
  auto addLeaf = [&](Operation *op, int64_t stage, bool backward) {
    step.leafIndex[op] = leaves.size();
    leaves.push_back({op, stage, backward});
  };
  // The values each stage reads from another (pipe.transfer: activations
  // from the stage before, gradients from the stage after), in the order
  // of the transfers.
  llvm::DenseSet<std::pair<Value, int64_t>> received;
  for (Operation &op : stepBlock) {
    if (&op == terminator || op.hasAttr(pipe::PipeDialect::kTiedAttrName))
      continue;
    if (auto transfer = dyn_cast<pipe::TransferOp>(op)) {
      Value value = resolve(transfer.getInput());
      const Leaf *from = producer(value);
      int64_t fromStage = transfer.getFrom(), toStage = transfer.getTo();
      if (!from || from->stage != fromStage)
        return transfer.emitOpError("moves a value from stage ")
               << fromStage << ", which "
               << (from ? "stage " + std::to_string(from->stage)
                        : std::string("no stage"))
               << " computes";
      if (toStage != fromStage + (from->backward ? -1 : 1))
        return transfer.emitOpError("moves a ")
               << (from->backward ? "gradient" : "forward value")
               << " from stage " << fromStage << " to stage " << toStage
               << "; activations go to the next stage, gradients to the "
                  "previous one";
      if (toStage >= numStages)
        return transfer.emitOpError("moves a value to stage ")
               << toStage << " of " << numStages;
      step.alias[transfer.getResult()] = transfer.getInput();
      if (received.insert({value, toStage}).second)
        step.transfers[{fromStage, toStage}].push_back(value);
      continue;
    }
    auto stage =
        op.getAttrOfType<IntegerAttr>(pipe::PipeDialect::kStageAttrName);
    if (!stage || stage.getInt() < 0 || stage.getInt() >= numStages)
      return op.emitOpError("has no pipeline stage below ")
             << numStages << " (" << pipe::PipeDialect::kStageAttrName
             << "); run --triad-pipeline-split for the schedule's stages";
    if (auto layer = dyn_cast<LayerOp>(op)) {
      Block &body = layer.getBody().front();
      for (auto [arg, operand] :
           llvm::zip(body.getArguments(), layer.getOperands()))
        step.alias[arg] = operand;
      for (auto [result, value] :
           llvm::zip(layer.getResults(), body.getTerminator()->getOperands()))
        step.alias[result] = value;
      for (Operation &inner : body)
        if (!isa<YieldOp>(inner))
          addLeaf(&inner, stage.getInt(), layer.getBackward());
      continue;
    }
    bool backward = llvm::any_of(op.getOperands(), [&](Value operand) {
      const Leaf *from = producer(operand);
      return from && from->backward;
    });
    addLeaf(&op, stage.getInt(), backward);
  }
  // Every value read across stages came through a transfer.
  for (const Leaf &leaf : leaves)
    for (Value operand : leaf.op->getOperands()) {
      Value value = resolve(operand);
      const Leaf *from = producer(value);
      if (!from || from->stage == leaf.stage ||
          isa<arith::ConstantOp>(from->op))
        continue;
      if (!received.contains({value, leaf.stage}))
        return leaf.op->emitOpError("on pipeline stage ")
               << leaf.stage << " reads a value of stage " << from->stage
               << " that no pipe.transfer brings to it";
    }

  // What the step returns: the loss, and each gradient (or, for a tied
  // parameter, its parts) with the stage that computes it.
  for (auto [index, value] : llvm::enumerate(terminator->getOperands())) {
    auto param =
        microbatch.getResultAttrOfType<FlatSymbolRefAttr>(index, "triad.grad");
    Operation *def = value.getDefiningOp();
    if (param && def && def->hasAttr(pipe::PipeDialect::kTiedAttrName)) {
      for (Value part : def->getOperands()) {
        if (!producer(part))
          return def->emitOpError("sums a gradient part no stage computes");
        step.gradParts.push_back({static_cast<unsigned>(index), resolve(part)});
      }
      continue;
    }
    const Leaf *from = producer(value);
    if (param) {
      if (!from)
        return microbatch.emitOpError("returns the gradient of ")
               << param << ", which no pipeline stage computes";
      step.gradParts.push_back({static_cast<unsigned>(index), resolve(value)});
      continue;
    }
    auto name =
        microbatch.getResultAttrOfType<StringAttr>(index, "triad.output");
    if (name && name.getValue() == "loss") {
      if (!from)
        return microbatch.emitOpError("returns a loss no stage computes");
      step.lossValue = resolve(value);
      step.lossResult = index;
    }
  }
  if (!step.lossValue)
    return microbatch.emitOpError("returns no result marked triad.output = "
                                  "\"loss\"");

  // Each stage's phases, and the input-gradient part of its backward.
  for (const Leaf &leaf : leaves)
    if (!isa<arith::ConstantOp>(leaf.op))
      step.phases[{leaf.stage, leaf.backward}].push_back(&leaf);
  for (int64_t stage = 1; stage < numStages; ++stage) {
    llvm::DenseSet<Operation *> &needed = step.inputGradient[stage];
    SmallVector<Value> work(step.transfer(stage, stage - 1));
    while (!work.empty()) {
      const Leaf *from = producer(work.pop_back_val());
      if (!from || from->stage != stage || !from->backward ||
          !needed.insert(from->op).second)
        continue;
      for (Value operand : from->op->getOperands())
        work.push_back(resolve(operand));
    }
  }
  // Moved, not copied: `phases` points into `leaves`.
  return std::move(step);
}

/// The order a stage's functions are built in: each reads only what the
/// functions before it keep.
constexpr StageWork kWorkOrder[] = {
    StageWork::recv_activation, StageWork::forward,
    StageWork::send_activation, StageWork::recv_gradient,
    StageWork::backward,        StageWork::backward_input,
    StageWork::backward_weight, StageWork::send_gradient};

bool isSend(StageWork work) {
  return work == StageWork::send_activation || work == StageWork::send_gradient;
}
bool isRecv(StageWork work) {
  return work == StageWork::recv_activation || work == StageWork::recv_gradient;
}

/// Builds the functions of one stage.
class StageMaterializer {
public:
  StageMaterializer(const StagedStep &step, func::FuncOp microbatch,
                    int64_t stage, std::set<StageWork> works)
      : step(step), microbatch(microbatch), stage(stage),
        works(std::move(works)) {}

  /// Adds the stage's functions before the microbatch step; returns how
  /// many values it keeps from one function for another.
  FailureOr<int64_t> run(SmallVectorImpl<func::FuncOp> &functions);

private:
  /// The stage the transfers of `work` go to or come from.
  int64_t peer(StageWork work) const {
    bool activation = work == StageWork::send_activation ||
                      work == StageWork::recv_activation;
    return activation == isSend(work) ? stage + 1 : stage - 1;
  }
  /// The values `work` sends or receives, in transfer order.
  ArrayRef<Value> transferred(StageWork work) const {
    return isSend(work) ? step.transfer(stage, peer(work))
                        : step.transfer(peer(work), stage);
  }
  /// The leaves `work` computes (worked out once, in run()).
  ArrayRef<const StagedStep::Leaf *> leaves(StageWork work) const {
    auto it = leafLists.find(work);
    return it == leafLists.end()
               ? ArrayRef<const StagedStep::Leaf *>()
               : ArrayRef<const StagedStep::Leaf *>(it->second);
  }
  SmallVector<const StagedStep::Leaf *> selectLeaves(StageWork work) const;
  bool isStepArgument(Value value) const {
    auto arg = dyn_cast<BlockArgument>(value);
    return arg && arg.getOwner() == &microbatch.getBody().front();
  }
  bool isLabels(BlockArgument arg) const {
    auto kind = microbatch.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        "triad.input");
    return kind && kind.getValue() == "labels";
  }
  /// The values `work` reads that an earlier function of the stage makes
  /// (constants are made where they are read; the forward takes the data
  /// arguments); an error where it reads what no function makes.
  FailureOr<llvm::SetVector<Value>> outsideReads(StageWork work) const;
  func::FuncOp build(OpBuilder &b, StageWork work,
                     const llvm::SetVector<Value> &reads);

  const StagedStep &step;
  mutable func::FuncOp microbatch;
  int64_t stage;
  std::set<StageWork> works;
  /// The function of the stage that makes each value it computes or
  /// receives.
  DenseMap<Value, StageWork> owner;
  /// The values kept for a later function, with their stash index.
  llvm::MapVector<Value, int64_t> stash;
  std::map<StageWork, SmallVector<const StagedStep::Leaf *>> leafLists;
};

SmallVector<const StagedStep::Leaf *>
StageMaterializer::selectLeaves(StageWork work) const {
  if (work == StageWork::forward)
    return SmallVector<const StagedStep::Leaf *>(step.phase(stage, false));
  if (work != StageWork::backward && work != StageWork::backward_input &&
      work != StageWork::backward_weight)
    return {};
  SmallVector<const StagedStep::Leaf *> ops(step.phase(stage, true));
  if (work != StageWork::backward) {
    auto it = step.inputGradient.find(stage);
    bool wantInput = work == StageWork::backward_input;
    llvm::erase_if(ops, [&](const StagedStep::Leaf *leaf) {
      bool input =
          it != step.inputGradient.end() && it->second.contains(leaf->op);
      return input != wantInput;
    });
  }
  return ops;
}

FailureOr<llvm::SetVector<Value>>
StageMaterializer::outsideReads(StageWork work) const {
  llvm::SetVector<Value> reads;
  auto read = [&](Value value, Operation *where) -> LogicalResult {
    if (value.getDefiningOp<arith::ConstantOp>() ||
        (work == StageWork::forward && isStepArgument(value)))
      return success();
    auto it = owner.find(value);
    if (it == owner.end())
      return where->emitOpError("on pipeline stage ")
             << stage << " reads a value that the stage neither computes "
             << "nor receives in the schedule's "
             << pipe::stringifyStageWork(work);
    if (it->second != work)
      reads.insert(value);
    return success();
  };
  for (const StagedStep::Leaf *leaf : leaves(work))
    for (Value operand : leaf->op->getOperands())
      if (failed(read(step.resolve(operand), leaf->op)))
        return failure();
  if (isSend(work))
    for (Value value : transferred(work))
      if (failed(read(value, microbatch)))
        return failure();
  return reads;
}

func::FuncOp StageMaterializer::build(OpBuilder &b, StageWork work,
                                      const llvm::SetVector<Value> &reads) {
  Location loc = microbatch.getLoc();
  ArrayRef<const StagedStep::Leaf *> ops = leaves(work);
  Block &stepBlock = microbatch.getBody().front();

  // The forward takes the data arguments it reads, and always the labels
  // (whose count weighs the microbatch).
  SmallVector<BlockArgument> args;
  if (work == StageWork::forward) {
    llvm::DenseSet<Value> read;
    for (const StagedStep::Leaf *leaf : ops)
      for (Value operand : leaf->op->getOperands())
        read.insert(step.resolve(operand));
    for (const auto &entry : stash)
      read.insert(entry.first);
    for (BlockArgument arg : stepBlock.getArguments())
      if (read.contains(arg) || isLabels(arg))
        args.push_back(arg);
  }
  // It returns the loss and the gradients (or parts) it completes, with
  // the step's result attributes.
  SmallVector<std::pair<Value, unsigned>> returned;
  auto owns = [&](Value value) {
    auto it = owner.find(value);
    return it != owner.end() && it->second == work;
  };
  if (owns(step.lossValue))
    returned.push_back({step.lossValue, step.lossResult});
  for (const StagedStep::GradPart &part : step.gradParts)
    if (owns(part.value))
      returned.push_back({part.value, part.result});

  SmallVector<Type> argTypes, resultTypes;
  for (BlockArgument arg : args)
    argTypes.push_back(arg.getType());
  for (auto &entry : returned)
    resultTypes.push_back(entry.first.getType());
  auto function =
      b.create<func::FuncOp>(loc, pipe::stageFunctionName(work, stage),
                             b.getFunctionType(argTypes, resultTypes));
  function->setAttr(pipe::PipeDialect::kStageAttrName,
                    b.getI64IntegerAttr(stage));
  function->setAttr(pipe::PipeDialect::kWorkAttrName,
                    b.getStringAttr(pipe::stringifyStageWork(work)));
  for (auto [index, arg] : llvm::enumerate(args))
    function.setArgAttrs(index, microbatch.getArgAttrDict(arg.getArgNumber()));
  for (auto [index, entry] : llvm::enumerate(returned))
    function.setResultAttrs(index, microbatch.getResultAttrDict(entry.second));

  Block *entry = function.addEntryBlock();
  OpBuilder body = OpBuilder::atBlockEnd(entry);
  IRMapping map;
  for (auto [arg, mine] : llvm::zip(args, entry->getArguments()))
    map.map(arg, mine);
  for (Value value : reads)
    map.map(value, body.create<pipe::UnstashOp>(loc, value.getType(),
                                                stash.lookup(value)));
  if (isRecv(work))
    for (Value value : transferred(work))
      map.map(value, body.create<pipe::RecvTensorOp>(loc, value.getType(),
                                                     peer(work)));
  for (const StagedStep::Leaf *leaf : ops) {
    for (Value operand : leaf->op->getOperands()) {
      Value value = step.resolve(operand);
      if (!map.contains(value))
        map.map(value, body.clone(*value.getDefiningOp())->getResult(0));
      map.map(operand, map.lookup(value));
    }
    Operation *clone = body.clone(*leaf->op, map);
    clone->removeAttr(pipe::PipeDialect::kStageAttrName);
    // An op of a layer keeps the layer's name, for the lowering's traces.
    if (auto layer = dyn_cast<LayerOp>(leaf->op->getParentOp()))
      clone->setAttr(kLayerNameAttr,
                     OpBuilder(clone).getStringAttr(layerName(layer)));
  }
  if (isSend(work))
    for (Value value : transferred(work))
      body.create<pipe::SendTensorOp>(loc, map.lookup(value), peer(work));
  for (auto [value, index] : stash)
    if (owns(value) || (work == StageWork::forward && isStepArgument(value)))
      body.create<pipe::StashOp>(loc, map.lookup(value), index);
  SmallVector<Value> results;
  for (auto &entry : returned)
    results.push_back(map.lookup(entry.first));
  body.create<func::ReturnOp>(loc, results);
  return function;
}

FailureOr<int64_t>
StageMaterializer::run(SmallVectorImpl<func::FuncOp> &functions) {
  if (works.count(StageWork::backward) &&
      (works.count(StageWork::backward_input) ||
       works.count(StageWork::backward_weight)))
    return microbatch.emitOpError("pipeline stage ")
           << stage << " is scheduled both whole and split into "
           << "zero-bubble's halves; a stage's backward runs one way";

  // Who makes each value: its computing function, its receiving one, the
  // forward for the data arguments. (The schedule's verifier has checked
  // that every stage runs its forward and backward for every microbatch,
  // so every leaf lands in a function.)
  for (StageWork work : works)
    leafLists[work] = selectLeaves(work);
  for (StageWork work : works) {
    for (const StagedStep::Leaf *leaf : leaves(work))
      for (Value result : leaf->op->getResults())
        owner[result] = work;
    if (isRecv(work))
      for (Value value : transferred(work))
        owner[value] = work;
  }
  for (BlockArgument arg : microbatch.getBody().front().getArguments())
    owner[arg] = StageWork::forward;

  // What each function reads from an earlier one is kept for it.
  std::map<StageWork, llvm::SetVector<Value>> reads;
  for (StageWork work : kWorkOrder) {
    if (!works.count(work))
      continue;
    FailureOr<llvm::SetVector<Value>> outside = outsideReads(work);
    if (failed(outside))
      return failure();
    for (Value value : *outside)
      stash.insert({value, static_cast<int64_t>(stash.size())});
    reads[work] = std::move(*outside);
  }

  OpBuilder b(microbatch);
  for (StageWork work : kWorkOrder) {
    if (!works.count(work))
      continue;
    // A stage with nothing of this work to do (the first stage's input
    // gradient: it sends nothing back) gets no function.
    bool empty = isSend(work) || isRecv(work) ? transferred(work).empty()
                                              : leaves(work).empty();
    if (empty && reads[work].empty())
      continue;
    functions.push_back(build(b, work, reads[work]));
  }
  return static_cast<int64_t>(stash.size());
}

struct PipelineMaterializePass
    : public triad::impl::PipelineMaterializeBase<PipelineMaterializePass> {
  using PipelineMaterializeBase::PipelineMaterializeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto function : module.getOps<func::FuncOp>())
      if (pipe::stageFunctionOf(function)) {
        function.emitOpError("is a stage function already; the module's "
                             "stages are materialized");
        return signalPassFailure();
      }
    auto microbatch = module.lookupSymbol<func::FuncOp>("microbatch_step");
    if (!microbatch || microbatch.isExternal()) {
      emitError(module.getLoc(), "needs @microbatch_step cut into stages; "
                                 "run --triad-autodiff, "
                                 "--triad-pipeline-split and "
                                 "--triad-pipeline-schedule first");
      return signalPassFailure();
    }
    FailureOr<schedule::Schedule> schedule = pipe::readSchedule(module);
    if (failed(schedule))
      return signalPassFailure();
    int64_t microbatches = 1;
    if (auto count =
            microbatch->getAttrOfType<IntegerAttr>("triad.microbatches"))
      microbatches = count.getInt();
    if (schedule->microbatches != microbatches) {
      emitError(module.getLoc(), "the pipeline schedule runs ")
          << schedule->microbatches << " microbatches, but the step is "
          << "split into " << microbatches;
      return signalPassFailure();
    }
    int64_t numStages = schedule->stages();
    FailureOr<StagedStep> step = StagedStep::build(microbatch, numStages);
    if (failed(step))
      return signalPassFailure();

    // The works the schedule calls, per stage.
    std::map<int64_t, std::set<StageWork>> works;
    for (const std::vector<schedule::Action> &actions : schedule->actions)
      for (const schedule::Action &action : actions)
        if (std::optional<StageWork> work = pipe::stageWorkOf(action))
          works[action.stage].insert(*work);
    SmallVector<func::FuncOp> functions;
    for (int64_t stage = 0; stage < numStages; ++stage) {
      StageMaterializer materializer(*step, microbatch, stage, works[stage]);
      FailureOr<int64_t> kept = materializer.run(functions);
      if (failed(kept))
        return signalPassFailure();
      numStashed += *kept;
    }
    numFunctions += functions.size();
    microbatch.erase();
  }
};

} // namespace
