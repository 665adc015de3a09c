//===- ShardPropagate.cpp - a layout for every value ----------------------===//
//
// Gives every tensor value of the module's functions a layout on the mesh,
// op by op in program order, from the sharding rules of the ops. Data
// arguments start split over dp, parameters with their declared layouts,
// and the gradients of the apply step with the layouts the microbatch step
// returns them with.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/LayoutRules.h"
#include "passes/Sharding/Passes.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace triad {
#define GEN_PASS_DEF_SHARDPROPAGATE
#include "passes/Sharding/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;
using namespace triad::dist;
using namespace triad::sharding;

namespace {

class Propagation {
public:
  /// With `gatherZeroParams`, reads of ZeRO-3 parameters are laid out
  /// whole over dp (the microbatch step computes with gathered weights);
  /// without, as they are stored (the apply step updates the pieces).
  Propagation(ModuleOp module, MeshOp mesh, StringRef batchAxis,
              llvm::StringSet<> &readParams, bool gatherZeroParams,
              bool sequenceSplit)
      : module(module), symbols(module), mesh(mesh), batchAxis(batchAxis),
        readParams(readParams), gatherZeroParams(gatherZeroParams),
        sequenceSplit(sequenceSplit) {}

  LogicalResult run(func::FuncOp func,
                    const llvm::StringMap<LayoutAttr> &gradLayouts) {
    current = func;
    batch.reset();
    for (BlockArgument arg : func.getArguments())
      if (failed(seedArgument(func, arg, gradLayouts)))
        return failure();
    // The step's batch: the first dimension of its data arguments, and the
    // axes splitting it.
    for (BlockArgument arg : func.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (func.getArgAttr(arg.getArgNumber(), "triad.input") && type &&
          type.getRank() >= 1 && layouts.count(arg)) {
        batch = {type.getDimSize(0), layouts[arg].getSplitAxes(0)};
        break;
      }
    }
    if (failed(propagate(func.getBody().front())))
      return failure();
    Operation *terminator = func.getBody().front().getTerminator();
    for (auto [index, value] : llvm::enumerate(terminator->getOperands()))
      func.setResultAttr(index, DistDialect::kLayoutAttrName,
                         resultLayout(func, index, value));
    return success();
  }

private:
  LayoutAttr layoutOf(Value value) {
    auto it = layouts.find(value);
    return it != layouts.end() ? it->second : replicatedFor(value.getType());
  }

  /// The layout `func` returns `value` with as its result `index`: the
  /// value's own, except for a gradient ZeRO shards (`dist.zero`, stage 2),
  /// which leaves the step reduced over dp and split like its parameter's
  /// optimizer state (so the update needs no more communication).
  LayoutAttr resultLayout(func::FuncOp func, unsigned index, Value value) {
    LayoutAttr layout = layoutOf(value);
    auto param =
        func.getResultAttrOfType<FlatSymbolRefAttr>(index, "triad.grad");
    if (!param || !func.getResultAttr(index, DistDialect::kZeroAttrName) ||
        !llvm::is_contained(layout.getPartialAxes(), "dp"))
      return layout;
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type)
      return layout;
    Operation *symbol = symbols.lookup(param.getValue());
    auto declared =
        symbol ? symbol->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName)
               : LayoutAttr();
    LayoutAttr sharded = zeroShardedLayout(declared ? withoutZeroSplit(declared)
                                                    : replicatedFor(type),
                                           type, mesh);
    return splitsOver(sharded, "dp") ? sharded : layout;
  }

  /// The data arguments split their batch over dp; a gradient argument has
  /// its layout from the microbatch step; a layout written on an argument
  /// is kept.
  LogicalResult seedArgument(func::FuncOp func, BlockArgument arg,
                             const llvm::StringMap<LayoutAttr> &gradLayouts) {
    unsigned index = arg.getArgNumber();
    if (auto given = func.getArgAttrOfType<LayoutAttr>(
            index, DistDialect::kLayoutAttrName)) {
      layouts[arg] = reducedAtEntry(func, index, given);
      return success();
    }
    LayoutAttr layout = replicatedFor(arg.getType());
    int64_t ranks = mesh.getAxisSize(batchAxis).value_or(1);
    if (func.getArgAttr(index, "triad.input") && layout.getRank() > 0 &&
        ranks > 1) {
      int64_t samples = cast<RankedTensorType>(arg.getType()).getDimSize(0);
      if (samples % ranks != 0)
        return func.emitOpError("batch ")
               << samples << " of argument " << index << " is not divisible by "
               << batchAxis << "=" << ranks;
      layout = layout.withSplit(0, {batchAxis});
    }
    if (auto grad =
            func.getArgAttrOfType<FlatSymbolRefAttr>(index, "triad.grad")) {
      auto it = gradLayouts.find(grad.getValue());
      if (it != gradLayouts.end())
        layout = it->second;
    }
    // A gradient ZeRO shards may come padded.
    if (failed(verifyLayout(
            layout, mesh, dyn_cast<RankedTensorType>(arg.getType()),
            [&] { return func.emitOpError("argument ") << index << ": "; },
            /*allowPadded=*/true)))
      return failure();
    layouts[arg] = reducedAtEntry(func, index, layout);
    func.setArgAttr(index, DistDialect::kLayoutAttrName, layout);
    return success();
  }

  /// The layout a function computes with from its argument `index` laid
  /// out as `layout`: a pending gradient is reduced where the function
  /// starts (--triad-partition does it, once per step, in buckets).
  LayoutAttr reducedAtEntry(func::FuncOp func, unsigned index,
                            LayoutAttr layout) {
    return func.getArgAttr(index, "triad.grad") &&
                   mesh.getGroupSize(layout.getPartialAxes()) > 1
               ? layout.withPartial({})
               : layout;
  }

  LogicalResult propagate(Block &block) {
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>())
        continue;
      if (failed(propagate(op)))
        return failure();
    }
    return success();
  }

  LogicalResult propagate(Operation &op) {
    SmallVector<LayoutAttr> results;
    if (auto get = dyn_cast<GetParamOp>(op)) {
      Operation *symbol = symbols.lookup(get.getName());
      auto declared =
          symbol
              ? symbol->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName)
              : LayoutAttr();
      // The first read of a parameter without a layout may still choose
      // one: its first user's.
      if (symbol && !declared && readParams.insert(get.getName()).second)
        adoptable[get.getResult()] = symbol;
      readParams.insert(get.getName());
      // A ZeRO-3 parameter is kept split over dp and gathered whole for
      // the microbatch step's computations.
      if (declared && gatherZeroParams && isa<ParamOp>(symbol) &&
          symbol->hasAttr(DistDialect::kZeroAttrName))
        declared = withoutZeroSplit(declared);
      results.push_back(declared ? declared : replicatedFor(get.getType()));
    } else if (auto layer = dyn_cast<LayerOp>(op)) {
      Block &body = layer.getBody().front();
      for (auto [arg, input] :
           llvm::zip(body.getArguments(), layer.getInputs()))
        layouts[arg] = layoutOf(input);
      if (failed(propagate(body)))
        return failure();
      for (auto [result, value] :
           llvm::zip(layer.getResults(), body.getTerminator()->getOperands())) {
        FailureOr<LayoutAttr> layout =
            layer.getBackward()
                ? activationGradient(cast<OpResult>(result), layoutOf(value))
                : sequenceParallel(
                      layer, cast<OpResult>(result),
                      savedActivation(cast<OpResult>(result), layoutOf(value)));
        if (failed(layout))
          return failure();
        results.push_back(*layout);
      }
    } else if (auto sharded = dyn_cast<ShardingRuleOpInterface>(op)) {
      SmallVector<LayoutAttr> operands;
      for (Value operand : op.getOperands())
        operands.push_back(layoutOf(operand));
      ShardingRule rule = sharded.getShardingRule();
      seedTensorParallel(op, rule, operands);
      SmallVector<bool> parameters = llvm::map_to_vector(
          op.getOperands(), [](Value v) { return readsParameter(v); });
      std::optional<int64_t> scatterDim;
      if (sequenceSplit)
        scatterDim = 1;
      SmallVector<FactorSplit> resultSplits = resultOnlyHints(rule);
      LayoutDecision decision =
          decideLayouts(rule, operands, mesh, op.getContext(), parameters,
                        scatterDim, resultSplits);
      if (decision.indivisible) {
        auto [operand, dim, ranks] = *decision.indivisible;
        // A parameter is named: its dimension is a size of the model the
        // user chose (an MLP width, a vocabulary).
        auto param = op.getOperand(operand).getDefiningOp<GetParamOp>();
        InFlightDiagnostic error = op.emitOpError("cannot split dimension ");
        error << dim << " of operand " << operand << " (";
        if (param)
          error << "parameter @" << param.getName() << ", ";
        error << op.getOperand(operand).getType() << ") over " << ranks
              << " ranks: its size (" << rule.sizes[rule.operands[operand][dim]]
              << " for this op) is not divisible";
        return error;
      }
      FailureOr<bool> changed = adoptParameterLayouts(op, operands, decision);
      if (failed(changed))
        return failure();
      if (*changed) {
        // ZeRO split a state further: decide again with its layout.
        for (auto [index, operand] : llvm::enumerate(op.getOperands()))
          operands[index] = layoutOf(operand);
        decision = decideLayouts(rule, operands, mesh, op.getContext(),
                                 parameters, scatterDim, resultSplits);
      }
      results = decision.results;
    } else if (op.getNumRegions() != 0 ||
               (llvm::any_of(
                    op.getResultTypes(),
                    [](Type type) { return isa<RankedTensorType>(type); }) &&
                !op.hasTrait<OpTrait::ConstantLike>())) {
      return op.emitOpError("has no sharding rule; the sharding passes "
                            "cannot place it on the mesh");
    } else {
      for (Value result : op.getResults())
        results.push_back(replicatedFor(result.getType()));
    }
    for (auto [result, layout] : llvm::zip(op.getResults(), results))
      layouts[result] = layout;
    if (op.getNumResults() != 0)
      setResultLayouts(&op, results);
    return success();
  }

  /// An activation gradient one backward layer passes to another
  /// ([batch, seq, hidden]) is whole when it crosses: a pending sum (the
  /// input gradient of a vocab-parallel output layer) is reduced once at
  /// the layer's end, as Megatron reduces the input gradient of a
  /// column-parallel layer, rather than by each of its users in the next
  /// layer (the branch's first matmul and the residual sum alike). Under
  /// sequence parallelism it is reduce-scattered into sequence pieces.
  LayoutAttr activationGradient(OpResult result, LayoutAttr layout) {
    auto type = activationType(result);
    if (!type || layout.getPartialAxes().empty() ||
        llvm::none_of(result.getUsers(), [](Operation *user) {
          auto layer = dyn_cast<LayerOp>(user);
          return layer && layer.getBackward();
        }))
      return layout;
    SmallVector<StringRef> pending = layout.getPartialAxes();
    LayoutAttr whole = layout.withPartial({});
    if (!sequenceSplit || !llvm::is_contained(pending, "tp") ||
        splitsOver(layout, "tp"))
      return whole;
    SmallVector<StringRef> axes = sequenceAxesWithTp(layout);
    if (type.getDimSize(1) % mesh.getGroupSize(axes) != 0)
      return whole;
    return whole.withSplit(1, axes);
  }

  /// A forward layer's result that a backward layer reads (an activation
  /// the autodiff saved, or the next layer's input, which its backward
  /// twin reads again) leaves the layer reduced. A pending sum (a residual
  /// stream summed before one all-reduce, for the norm that reads it) is
  /// reduced by the forward anyway, but a backward reading it pending
  /// would reduce it a second time; the partition reuses the forward's
  /// collective where the layer already reduced it.
  LayoutAttr savedActivation(OpResult result, LayoutAttr layout) {
    if (layout.getPartialAxes().empty() ||
        llvm::none_of(result.getUsers(), [](Operation *user) {
          auto layer = dyn_cast<LayerOp>(user);
          return layer && layer.getBackward();
        }))
      return layout;
    return layout.withPartial({});
  }

  /// The type of `value` where it is an activation ([batch, seq, hidden]
  /// floats), else null.
  static RankedTensorType activationType(Value value) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || type.getRank() != 3 || !isa<FloatType>(type.getElementType()))
      return {};
    return type;
  }

  /// The axes of `layout`'s sequence split with tp added innermost.
  static SmallVector<StringRef> sequenceAxesWithTp(LayoutAttr layout) {
    SmallVector<StringRef> axes = layout.getSplitAxes(1);
    axes.push_back("tp");
    return axes;
  }

  /// Sequence parallelism: an activation one forward layer passes to
  /// another ([batch, seq, hidden], whole over tp) is split along its
  /// sequence over tp, except the head's input, which is gathered. The layers'
  /// rules then keep the norms, dropout and residual sums split, gather the
  /// sequence before the weights split over tp (which take precedence) and
  /// reduce-scatter their pending sums back into sequence pieces, as
  /// Megatron-LM does by hand.
  FailureOr<LayoutAttr> sequenceParallel(LayerOp layer, OpResult result,
                                         LayoutAttr layout) {
    int64_t ranks = mesh.getAxisSize("tp").value_or(1);
    auto type = activationType(result);
    auto feeds = [&](auto predicate) {
      return llvm::any_of(result.getUsers(), [&](Operation *user) {
        auto layer = dyn_cast<LayerOp>(user);
        return layer && !layer.getBackward() && predicate(layer);
      });
    };
    if (!sequenceSplit || ranks <= 1 || !type ||
        !layout.getPartialAxes().empty())
      return layout;
    // The head's loss takes whole sequences: its input is gathered once,
    // before the output layer, rather than the logits after it.
    if (feeds([](LayerOp user) { return user.getKind() == LayerKind::head; }))
      return layout.withSplit(
          1, llvm::to_vector(llvm::make_filter_range(
                 layout.getSplitAxes(1),
                 [](StringRef axis) { return axis != "tp"; })));
    if (!feeds([](LayerOp) { return true; }) || splitsOver(layout, "tp"))
      return layout;
    SmallVector<StringRef> axes = sequenceAxesWithTp(layout);
    if (type.getDimSize(1) % mesh.getGroupSize(axes) != 0)
      return layer.emitOpError("sequence parallelism cannot split the "
                               "sequence of result ")
             << result.getResultNumber() << " (" << type
             << ") over tp=" << ranks << ": " << type.getDimSize(1)
             << " is not divisible";
    return layout.withSplit(1, axes);
  }

  /// Megatron's tensor parallelism from one choice: a weight (a
  /// parameter read here first, without a layout) that an op contracts
  /// with another operand and whose other dimension only the result has
  /// (the weight of a linear layer fed by replicated activations) has that
  /// output dimension split over tp. Its consumers follow from the rules:
  /// biases, activations and attention heads split alike, and the next
  /// weight contracted with the split features is split on its input
  /// dimension (its result partial over tp).
  void seedTensorParallel(Operation &op, const ShardingRule &rule,
                          SmallVectorImpl<LayoutAttr> &operands) {
    if (mesh.getAxisSize("tp").value_or(1) <= 1)
      return;
    // A weight already contracted with features split over tp follows the
    // rule (row parallel); one whose factors tp splits nowhere yet is
    // seeded (an activation's sequence split over tp gives way to it).
    auto tpOnFactorOf = [&](ArrayRef<int64_t> weightFactors) {
      for (auto [index, layout] : llvm::enumerate(operands))
        for (int64_t dim = 0; dim < layout.getRank(); ++dim)
          if (llvm::is_contained(layout.getSplitAxes(dim), "tp") &&
              dim < (int64_t)rule.operands[index].size() &&
              llvm::is_contained(weightFactors, rule.operands[index][dim]))
            return true;
      return false;
    };
    // The op's own choice first (the embedding's vocabulary rows), for a
    // parameter whose dimension tp divides. A tied output layer, which
    // multiplies the same table, then gives logits split along the
    // vocabulary, which the vocab-parallel cross entropy takes as they
    // are. (`--triad-pad-vocab` pads a vocabulary tp does not divide
    // beforehand; one it could not pad stays whole.)
    int64_t tp = mesh.getAxisSize("tp").value_or(1);
    for (auto [index, dim] : rule.tensorParallelSplits) {
      Value operand = op.getOperand(index);
      auto it = adoptable.find(operand);
      auto type = dyn_cast<RankedTensorType>(operand.getType());
      if (it == adoptable.end() || !type ||
          tpOnFactorOf(rule.operands[index]) || type.getDimSize(dim) % tp != 0)
        continue;
      operands[index] = operands[index].withSplit(dim, {"tp"});
      return;
    }
    for (auto [index, operand] : llvm::enumerate(op.getOperands())) {
      if (!adoptable.count(operand) || rule.operands[index].size() != 2 ||
          tpOnFactorOf(rule.operands[index]))
        continue;
      auto inOthers = [&](int64_t factor) {
        for (auto [other, dims] : llvm::enumerate(rule.operands))
          if (other != index && llvm::is_contained(dims, factor))
            return true;
        return false;
      };
      auto inResults = [&](int64_t factor) {
        return llvm::any_of(rule.results, [&](ArrayRef<int64_t> dims) {
          return llvm::is_contained(dims, factor);
        });
      };
      for (int64_t dim = 0; dim < 2; ++dim) {
        int64_t out = rule.operands[index][dim];
        int64_t in = rule.operands[index][1 - dim];
        if (out == ShardingRule::kNoFactor || in == ShardingRule::kNoFactor ||
            rule.wholeFactors[out] || !inResults(out) || inOthers(out) ||
            !inOthers(in) || inResults(in))
          continue;
        operands[index] = operands[index].withSplit(dim, {"tp"});
        return;
      }
    }
  }

  /// A first read of a parameter takes the layout its user needs; ZeRO
  /// state (`dist.zero`) also splits over dp, on the first dimension that
  /// can take it. Returns whether a ZeRO split changed an operand's layout
  /// from the decision's.
  FailureOr<bool> adoptParameterLayouts(Operation &op,
                                        ArrayRef<LayoutAttr> operands,
                                        LayoutDecision &decision) {
    bool changed = false;
    for (auto [index, operand] : llvm::enumerate(op.getOperands())) {
      auto it = adoptable.find(operand);
      if (it == adoptable.end())
        continue;
      Operation *symbol = it->second;
      adoptable.erase(it);
      auto type = dyn_cast<RankedTensorType>(
          symbol->getAttrOfType<TypeAttr>("type").getValue());
      LayoutAttr wanted = decision.operands[index].withPartial({});
      LayoutAttr stored = wanted;
      if (symbol->hasAttr(DistDialect::kZeroAttrName)) {
        stored = zeroShardedLayout(wanted, type, mesh);
        // ZeRO-3 parameters are computed with whole in the microbatch step
        // (gathered from the stored pieces); sharded state is updated in
        // its pieces, which the op must now decide with.
        bool gathered = gatherZeroParams && isa<ParamOp>(symbol);
        if (!gathered && stored != wanted) {
          wanted = stored;
          changed = true;
        }
      }
      if (!isDistributed(stored, mesh))
        continue;
      if (failed(verifyLayout(
              stored, mesh, type, [&] { return symbol->emitOpError(); },
              symbol->hasAttr(DistDialect::kZeroAttrName))))
        return failure();
      symbol->setAttr(DistDialect::kLayoutAttrName, stored);
      layouts[operand] = wanted;
      setResultLayouts(operand.getDefiningOp(), {wanted});
    }
    return changed;
  }

  /// The splits a rule's result-only factors ask for (its batch and
  /// parameter factors): a factor of the step's batch size splits as the
  /// batch (CodeGeeX's top-query layer repeats its learned queries for
  /// every sample: each rank makes only its samples' copies), one tied to a
  /// parameter's dimension splits as that dimension does without ZeRO's
  /// split (an embedding's gradient keeps its table's vocabulary split, so
  /// each rank scatters only its rows).
  SmallVector<FactorSplit> resultOnlyHints(const ShardingRule &rule) {
    SmallVector<FactorSplit> splits;
    if (batch && !batch->second.empty())
      for (int64_t factor : rule.batchFactors)
        if (rule.sizes[factor] == batch->first)
          splits.push_back({factor, batch->second});
    for (const ShardingRule::ParameterSplit &hint : rule.parameterSplits) {
      auto param = dyn_cast_or_null<ParamOp>(symbols.lookup(hint.param));
      auto declared =
          param ? param->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName)
                : LayoutAttr();
      if (!declared || hint.dim >= declared.getRank() ||
          param.getTensorType().getDimSize(hint.dim) != rule.sizes[hint.factor])
        continue;
      ArrayRef<StringRef> axes =
          withoutZeroSplit(declared).getSplitAxes(hint.dim);
      if (!axes.empty())
        splits.push_back({hint.factor, SmallVector<StringRef>(axes)});
    }
    return splits;
  }

  ModuleOp module;
  /// The module's parameters and state, indexed once (a module-level
  /// lookup scans).
  SymbolTable symbols;
  MeshOp mesh;
  /// The function being propagated.
  func::FuncOp current;
  /// The size of the current function's batch and the axes splitting it.
  std::optional<std::pair<int64_t, SmallVector<StringRef>>> batch;
  StringRef batchAxis;
  llvm::StringSet<> &readParams;
  bool gatherZeroParams;
  bool sequenceSplit;
  DenseMap<Value, LayoutAttr> layouts;
  /// Reads of parameters whose layout their first user still chooses.
  DenseMap<Value, Operation *> adoptable;
};

} // namespace

LogicalResult triad::sharding::propagateLayouts(ModuleOp module, MeshOp mesh,
                                                StringRef batchAxis,
                                                ArrayRef<func::FuncOp> funcs,
                                                bool sequenceSplit) {
  llvm::StringMap<LayoutAttr> gradLayouts;
  llvm::StringSet<> readParams;
  for (func::FuncOp func : funcs) {
    if (func.isExternal())
      continue;
    Propagation propagation(module, mesh, batchAxis, readParams,
                            func.getSymName() != "apply_step", sequenceSplit);
    if (failed(propagation.run(func, gradLayouts)))
      return failure();
    if (func.getSymName() != "microbatch_step")
      continue;
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (auto grad =
              func.getResultAttrOfType<FlatSymbolRefAttr>(i, "triad.grad"))
        gradLayouts[grad.getValue()] = func.getResultAttrOfType<LayoutAttr>(
            i, DistDialect::kLayoutAttrName);
  }
  return success();
}

namespace {

/// The layout propagation recorded for `value`.
LayoutAttr recordedLayout(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto layout = func ? func.getArgAttrOfType<LayoutAttr>(
                             arg.getArgNumber(), DistDialect::kLayoutAttrName)
                       : LayoutAttr();
    return layout ? layout : replicatedFor(value.getType());
  }
  SmallVector<LayoutAttr> layouts = getResultLayouts(value.getDefiningOp());
  unsigned index = cast<OpResult>(value).getResultNumber();
  return index < layouts.size() ? layouts[index]
                                : replicatedFor(value.getType());
}

/// Regroups every sum of scalars (a tree of single-use triad.add ops, such
/// as the global gradient norm's sum of squares) whose terms are pending
/// over different mesh axes: the terms pending over the same axes are
/// added first, so that each group is reduced once, instead of every
/// partial term being reduced on its own before it meets a replicated one.
void groupPendingSums(func::FuncOp func, MeshOp mesh) {
  auto isScalarAdd = [](Operation *op) {
    auto add = dyn_cast_or_null<AddOp>(op);
    return add && cast<RankedTensorType>(add.getType()).getRank() == 0 &&
           add.getLhs().getType() == add.getRhs().getType();
  };
  SmallVector<AddOp> roots;
  func.walk([&](AddOp add) {
    bool inner = add->hasOneUse() && isScalarAdd(*add->user_begin());
    if (isScalarAdd(add) && !inner)
      roots.push_back(add);
  });
  for (AddOp root : roots) {
    SmallVector<Value> leaves;
    SmallVector<Operation *> tree;
    std::function<void(Value)> collect = [&](Value value) {
      Operation *def = value.getDefiningOp();
      if (isScalarAdd(def) && value.hasOneUse()) {
        tree.push_back(def);
        collect(def->getOperand(0));
        collect(def->getOperand(1));
        return;
      }
      leaves.push_back(value);
    };
    tree.push_back(root);
    collect(root.getLhs());
    collect(root.getRhs());
    // Terms by the layout of their group's sum: pending over their axes,
    // or replicated when those axes have one rank.
    llvm::MapVector<LayoutAttr, SmallVector<Value>> groups;
    for (Value leaf : leaves) {
      SmallVector<StringRef> axes = recordedLayout(leaf).getPartialAxes();
      if (mesh.getGroupSize(axes) <= 1)
        axes.clear();
      groups[LayoutAttr::getReplicated(func.getContext(), 0).withPartial(axes)]
          .push_back(leaf);
    }
    if (groups.size() < 2)
      continue;
    OpBuilder builder(root);
    auto sum = [&](Value lhs, Value rhs, LayoutAttr layout) -> Value {
      auto add = AddOp::create(builder, root.getLoc(), lhs.getType(), lhs, rhs);
      setResultLayouts(add, {layout});
      return add;
    };
    Value total;
    for (auto &[layout, terms] : groups) {
      Value group = terms.front();
      for (Value term : llvm::drop_begin(terms))
        group = sum(group, term, layout);
      total =
          total ? sum(total, group, recordedLayout(root.getResult())) : group;
    }
    root.getResult().replaceAllUsesWith(total);
    for (Operation *op : tree)
      op->dropAllReferences();
    for (Operation *op : tree)
      op->erase();
  }
}

struct ShardPropagatePass
    : public triad::impl::ShardPropagateBase<ShardPropagatePass> {
  using ShardPropagateBase::ShardPropagateBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshOp> mesh = getOrCreateMesh(module, dp, tp, pp, order);
    if (failed(mesh))
      return signalPassFailure();

    // Declared layouts of parameters and state must fit their shapes.
    for (Operation &op : *module.getBody()) {
      auto layout = op.getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName);
      auto type = op.getAttrOfType<TypeAttr>("type");
      if (layout && type &&
          failed(verifyLayout(
              layout, *mesh, dyn_cast<RankedTensorType>(type.getValue()),
              [&] { return op.emitOpError(); },
              op.hasAttr(DistDialect::kZeroAttrName))))
        return signalPassFailure();
    }

    // The microbatch step first: its gradients seed the apply step.
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    std::stable_partition(funcs.begin(), funcs.end(), [](func::FuncOp func) {
      return func.getSymName() == "microbatch_step";
    });
    if (failed(propagateLayouts(module, *mesh, "dp", funcs, sp)))
      return signalPassFailure();
    for (func::FuncOp func : funcs)
      groupPendingSums(func, *mesh);
  }
};

} // namespace
