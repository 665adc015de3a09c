//===- PipelineSplit.cpp - layers to pipeline stages ----------------------===//
//
// Cuts the forward layers of the microbatch step into contiguous pipeline
// stages (balanced by an IR cost estimate, or as given by hand) and records
// each top-level op's stage. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "dialects/Triad/TriadOps.h"
#include "passes/Sharding/LayoutRules.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ToolOutputFile.h"

#include <limits>
#include <map>
#include <set>

namespace triad {
#define GEN_PASS_DEF_PIPELINESPLIT
#include "passes/Pipeline/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

/// A layer's forward FLOPs and bytes (the ops' cost model), and its cost
/// for the balance: per op, max(FLOPs, bytes x flopsPerByte).
struct LayerCost {
  double flops = 0, bytes = 0, cost = 0;
};

LayerCost layerCost(LayerOp layer, double flopsPerByte) {
  LayerCost total;
  layer.getBody().walk([&](CostOpInterface op) {
    double flops = op.getFlops(), bytes = op.getBytes();
    total.flops += flops;
    total.bytes += bytes;
    total.cost += std::max(flops, bytes * flopsPerByte);
  });
  return total;
}

/// The contiguous cut of `costs` into `stages` non-empty pieces whose
/// largest sum is smallest (the first such cut, scanning cut points from
/// the left): the first layer index of every stage.
SmallVector<int64_t> balancedCut(ArrayRef<double> costs, int64_t stages) {
  int64_t n = costs.size();
  SmallVector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest largest-stage cost of layers [0, i) in s stages.
  std::vector<std::vector<double>> best(stages + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> from(stages + 1,
                                         std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= n; ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        double cost = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (cost < best[s][i]) {
          best[s][i] = cost;
          from[s][i] = j;
        }
      }
  SmallVector<int64_t> firsts(stages);
  for (int64_t s = stages, i = n; s > 0; --s) {
    firsts[s - 1] = from[s][i];
    i = from[s][i];
  }
  return firsts;
}

/// Whether `op` widens a float tensor (a 16-bit gradient to f32): exact,
/// so a sum may be taken before or after it.
bool isWideningCast(Operation *op) {
  auto cast = dyn_cast<CastOp>(op);
  if (!cast)
    return false;
  auto from = dyn_cast<FloatType>(getElementTypeOrSelf(cast.getX().getType()));
  auto to = dyn_cast<FloatType>(getElementTypeOrSelf(cast.getType()));
  return from && to && from.getWidth() < to.getWidth();
}

/// The single-operand linear ops (all_reduce, reduce_scatter, a widening
/// cast) that carry `op`'s result, one after the other, to the function's
/// return: empty when the result goes anywhere else.
SmallVector<Operation *> collectiveChain(Operation *op, Operation *terminator) {
  SmallVector<Operation *> chain;
  Value value = op->getResult(0);
  while (value.hasOneUse()) {
    Operation *user = *value.getUsers().begin();
    if (user == terminator)
      return chain;
    if (!(isa<dist::AllReduceOp, dist::ReduceScatterOp>(user) ||
          isWideningCast(user)) ||
        user->getNumOperands() != 1)
      break;
    chain.push_back(user);
    value = user->getResult(0);
  }
  return {};
}

/// Routes every value a top-level op of `step` reads from another stage
/// through a pipe.transfer on the reader's stage (one per value and
/// reading stage, before the first reader). Constants are left alone (each
/// stage makes its own), and so are the tied sums, which read the parts of
/// several stages by design.
LogicalResult insertTransfers(func::FuncOp step) {
  auto stageOf = [](Operation *op) {
    return op->getAttrOfType<IntegerAttr>(pipe::PipeDialect::kStageAttrName)
        .getInt();
  };
  Operation *terminator = step.getBody().front().getTerminator();
  llvm::DenseMap<std::pair<Value, int64_t>, Value> received;
  for (Operation &op : llvm::make_early_inc_range(
           step.getBody().front().without_terminator())) {
    if (op.hasAttr(pipe::PipeDialect::kTiedAttrName) ||
        isa<pipe::TransferOp>(op))
      continue;
    int64_t to = stageOf(&op);
    for (OpOperand &operand : op.getOpOperands()) {
      Operation *producer = operand.get().getDefiningOp();
      if (!producer || producer == terminator ||
          !producer->hasAttr(pipe::PipeDialect::kStageAttrName) ||
          isa<arith::ConstantOp>(producer))
        continue;
      int64_t from = stageOf(producer);
      if (from == to)
        continue;
      if (from + 1 != to && to + 1 != from)
        return op.emitOpError("on pipeline stage ")
               << to << " reads a value of stage " << from
               << "; values cross one stage boundary at a time (activations "
                  "to the next stage, gradients to the previous one)";
      Value &copy = received[{operand.get(), to}];
      if (!copy) {
        OpBuilder b(&op);
        copy = pipe::TransferOp::create(b, op.getLoc(), operand.get().getType(),
                                        operand.get(), from, to);
      }
      operand.set(copy);
    }
  }
  return success();
}

struct PipelineSplitPass
    : public triad::impl::PipelineSplitBase<PipelineSplitPass> {
  using PipelineSplitBase::PipelineSplitBase;

  void runOnOperation() override;

  /// The first layer index of every stage from the `stages` option, or an
  /// error at `step`.
  FailureOr<SmallVector<int64_t>>
  manualCut(func::FuncOp step, ArrayRef<LayerOp> layers, int64_t numStages);
};

FailureOr<SmallVector<int64_t>>
PipelineSplitPass::manualCut(func::FuncOp step, ArrayRef<LayerOp> layers,
                             int64_t numStages) {
  SmallVector<StringRef> pieces;
  StringRef(stages).split(pieces, ',');
  if (static_cast<int64_t>(pieces.size()) != numStages)
    return step.emitOpError("stages=")
           << stages << " lists " << pieces.size() << " stages, but pp x "
           << "virtual-stages makes " << numStages;
  int64_t transformers = llvm::count_if(layers, [](LayerOp layer) {
    return layer.getKind() == LayerKind::transformer;
  });
  // Layers before the first transformer layer join stage 0, those after
  // the last one join the last stage.
  int64_t leading = 0;
  while (leading < static_cast<int64_t>(layers.size()) &&
         LayerOp(layers[leading]).getKind() != LayerKind::transformer)
    ++leading;
  SmallVector<int64_t> firsts;
  int64_t next = leading, total = 0;
  for (auto [s, piece] : llvm::enumerate(pieces)) {
    int64_t count;
    if (piece.trim().getAsInteger(10, count) || count < 0)
      return step.emitOpError("stages=")
             << stages << ": '" << piece
             << "' is not a count of transformer layers";
    firsts.push_back(s == 0 ? 0 : next);
    next += count;
    total += count;
  }
  if (total != transformers)
    return step.emitOpError("stages=")
           << stages << " places " << total << " transformer layers, but the "
           << "model has " << transformers;
  for (int64_t s = 0; s < numStages; ++s) {
    int64_t end =
        s + 1 < numStages ? firsts[s + 1] : static_cast<int64_t>(layers.size());
    if (end <= firsts[s])
      return step.emitOpError("stages=")
             << stages << " leaves stage " << s << " without a layer";
  }
  return firsts;
}

void PipelineSplitPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = module.getContext();
  FailureOr<dist::MeshOp> mesh =
      sharding::getOrCreateMesh(module, dp, tp, pp, order);
  if (failed(mesh))
    return signalPassFailure();
  auto step = module.lookupSymbol<func::FuncOp>("microbatch_step");
  if (!step || step.isExternal()) {
    emitError(module.getLoc(),
              "needs @microbatch_step; run --triad-autodiff first");
    return signalPassFailure();
  }
  if (!module.getOps<pipe::StageOp>().empty()) {
    emitError(module.getLoc(), "is already cut into pipeline stages "
                               "(it has pipe.stage ops)");
    return signalPassFailure();
  }
  if (!(flopsPerByte >= 0)) {
    emitError(module.getLoc(), "flops-per-byte must not be negative");
    return signalPassFailure();
  }
  int64_t ranks = mesh->getAxisSize("pp").value_or(1);
  if (virtualStages < 1) {
    emitError(module.getLoc(), "virtual-stages=")
        << static_cast<int64_t>(virtualStages) << " must be at least 1";
    return signalPassFailure();
  }
  int64_t numStages = ranks * virtualStages;

  // The forward layers in order, and each (kind, index)'s stage.
  SmallVector<LayerOp> layers;
  for (auto layer : step.getBody().getOps<LayerOp>())
    if (!layer.getBackward())
      layers.push_back(layer);
  if (numStages > static_cast<int64_t>(layers.size())) {
    step.emitOpError("cannot be cut into ")
        << numStages << " pipeline stages (pp=" << ranks
        << " x virtual-stages=" << static_cast<int64_t>(virtualStages)
        << "): it has only " << layers.size()
        << " layers (the embedding, the transformer layers and the head)";
    return signalPassFailure();
  }
  SmallVector<LayerCost> layerCosts;
  SmallVector<double> costs;
  for (LayerOp layer : layers) {
    layerCosts.push_back(layerCost(layer, flopsPerByte));
    costs.push_back(layerCosts.back().cost);
  }
  SmallVector<int64_t> firsts;
  if (stages.empty()) {
    firsts = balancedCut(costs, numStages);
  } else {
    FailureOr<SmallVector<int64_t>> cut = manualCut(step, layers, numStages);
    if (failed(cut))
      return signalPassFailure();
    firsts = *cut;
  }

  std::map<std::pair<LayerKind, int64_t>, int64_t> stageOfLayer;
  SmallVector<SmallVector<Attribute>> names(numStages);
  SmallVector<LayerCost> stageCosts(numStages);
  for (auto [i, layer] : llvm::enumerate(layers)) {
    int64_t stage =
        llvm::upper_bound(firsts, static_cast<int64_t>(i)) - firsts.begin() - 1;
    stageOfLayer[{layer.getKind(), layer.getIndex()}] = stage;
    names[stage].push_back(StringAttr::get(ctx, layerName(layer)));
    stageCosts[stage].flops += layerCosts[i].flops;
    stageCosts[stage].bytes += layerCosts[i].bytes;
  }

  // Every top-level op's stage: layers by their (kind, index); other ops by
  // the stage of the values they read.
  auto stageAttr = [&](int64_t stage) {
    return IntegerAttr::get(IntegerType::get(ctx, 64), stage);
  };
  auto stageOf = [](Operation *op) -> std::optional<int64_t> {
    if (auto attr =
            op->getAttrOfType<IntegerAttr>(pipe::PipeDialect::kStageAttrName))
      return attr.getInt();
    return std::nullopt;
  };
  Operation *terminator = step.getBody().front().getTerminator();
  SmallVector<Operation *> unplaced;
  // Tied sums that feed collectives before the return (ZeRO-2's
  // reduce-scatter of the gradient), and those collectives.
  SmallVector<std::pair<Operation *, SmallVector<Operation *>>> distribute;
  llvm::DenseSet<Operation *> skip;
  for (Operation &op : step.getBody().front()) {
    if (&op == terminator || skip.contains(&op))
      continue;
    op.removeAttr(pipe::PipeDialect::kStageAttrName);
    op.removeAttr(pipe::PipeDialect::kTiedAttrName);
    if (auto layer = dyn_cast<LayerOp>(op)) {
      auto it = stageOfLayer.find({layer.getKind(), layer.getIndex()});
      if (it == stageOfLayer.end()) {
        layer.emitOpError("is a backward layer without its forward layer");
        return signalPassFailure();
      }
      op.setAttr(pipe::PipeDialect::kStageAttrName, stageAttr(it->second));
      continue;
    }
    std::set<int64_t> read;
    for (Value operand : op.getOperands())
      if (Operation *producer = operand.getDefiningOp()) {
        if (std::optional<int64_t> stage = stageOf(producer))
          read.insert(*stage);
        else if (producer->hasAttr(pipe::PipeDialect::kTiedAttrName)) {
          op.emitOpError("reads the sum of a tied parameter's gradient "
                         "parts, which no single pipeline stage holds");
          return signalPassFailure();
        }
      }
    if (read.empty()) {
      unplaced.push_back(&op);
      continue;
    }
    if (read.size() == 1) {
      op.setAttr(pipe::PipeDialect::kStageAttrName, stageAttr(*read.begin()));
      continue;
    }
    // Values of several stages meet only in the sum of a tied parameter's
    // gradient, which the step returns.
    bool returned = llvm::all_of(
        op.getUsers(), [&](Operation *user) { return user == terminator; });
    SmallVector<Operation *> chain;
    if (isa<AddOp>(op))
      chain = collectiveChain(&op, terminator);
    if (isa<AddOp>(op) && (returned || !chain.empty()) && !op.use_empty()) {
      SmallVector<int64_t> tied(read.begin(), read.end());
      op.setAttr(pipe::PipeDialect::kTiedAttrName,
                 DenseI64ArrayAttr::get(ctx, tied));
      if (!chain.empty()) {
        distribute.push_back({&op, chain});
        skip.insert(chain.begin(), chain.end());
      }
      continue;
    }
    InFlightDiagnostic diag = op.emitOpError("reads values of pipeline stages");
    for (int64_t stage : read)
      diag << " " << stage;
    diag << "; only the sum of a tied parameter's gradient may";
    return signalPassFailure();
  }
  // A collective (or widening cast) of a tied sum is a sum of the
  // collectives of its parts (they are linear): each part's stage runs its
  // own, and the tied sum adds their results (in f32 for 16-bit parts).
  for (auto &[sum, chain] : distribute) {
    OpBuilder b(terminator);
    SmallVector<Value> parts;
    for (Value operand : sum->getOperands()) {
      Value part = operand;
      Attribute stage =
          operand.getDefiningOp()->getAttr(pipe::PipeDialect::kStageAttrName);
      for (Operation *collective : chain) {
        Operation *clone = b.clone(*collective);
        clone->setOperand(0, part);
        clone->setAttr(pipe::PipeDialect::kStageAttrName, stage);
        part = clone->getResult(0);
      }
      parts.push_back(part);
    }
    Operation *newSum = b.clone(*sum);
    newSum->setOperands(parts);
    newSum->getResult(0).setType(parts.front().getType());
    if (Attribute layouts =
            chain.back()->getAttr(dist::DistDialect::kLayoutsAttrName))
      newSum->setAttr(dist::DistDialect::kLayoutsAttrName, layouts);
    chain.back()->getResult(0).replaceAllUsesWith(newSum->getResult(0));
    for (Operation *collective : llvm::reverse(chain))
      collective->erase();
    sum->erase();
  }
  // Ops that read no staged value (constants) run on the stage of their
  // first staged user.
  for (Operation *op : llvm::reverse(unplaced)) {
    std::optional<int64_t> stage;
    for (Operation *user : op->getUsers())
      if ((stage = stageOf(user)))
        break;
    if (!stage) {
      if (op->use_empty() || llvm::all_of(op->getUsers(), [&](Operation *u) {
            return u == terminator;
          })) {
        op->emitOpError("is not read by any pipeline stage");
        return signalPassFailure();
      }
      stage = 0;
    }
    op->setAttr(pipe::PipeDialect::kStageAttrName, stageAttr(*stage));
  }

  if (failed(insertTransfers(step)))
    return signalPassFailure();

  OpBuilder b(ctx);
  b.setInsertionPoint(step);
  SmallVector<pipe::StageOp> stageOps;
  for (int64_t s = 0; s < numStages; ++s)
    stageOps.push_back(pipe::StageOp::create(
        b, module.getLoc(), s, s % ranks, ArrayAttr::get(ctx, names[s]),
        static_cast<int64_t>(stageCosts[s].flops),
        static_cast<int64_t>(stageCosts[s].bytes)));
  this->numStages = numStages;
  if (!report.empty()) {
    std::string message;
    std::unique_ptr<llvm::ToolOutputFile> output =
        openOutputFile(report, &message);
    if (!output) {
      emitError(module.getLoc(), "cannot write the stage report: ") << message;
      return signalPassFailure();
    }
    for (pipe::StageOp stage : stageOps) {
      stage.print(output->os());
      output->os() << "\n";
    }
    output->keep();
  }
}

} // namespace
