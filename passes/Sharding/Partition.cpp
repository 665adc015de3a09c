//===- Partition.cpp - local shapes and collectives -----------------------===//
//
// Rewrites every op of the module's functions to one rank's local shapes,
// following the layouts shard-propagate chose, and inserts a collective
// wherever a value's layout differs from the one its user needs. Partial
// function arguments (gradients entering the apply step) are reduced once
// at the function's start: in buckets, or reduce-scattered into the pieces
// of their ZeRO-split optimizer state.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/LayoutRules.h"
#include "passes/Sharding/Passes.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"

namespace triad {
#define GEN_PASS_DEF_PARTITION
#include "passes/Sharding/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;
using namespace triad::dist;
using namespace triad::sharding;

namespace {

class Partitioner : public LocalCollectives {
public:
  Partitioner(ModuleOp module, MeshOp mesh, int64_t bucketBytes,
              bool allowCollectives, bool sequenceSplit)
      : module(module), symbols(module), mesh(mesh),
        builder(module.getContext()), bucketBytes(bucketBytes),
        allowCollectives(allowCollectives), sequenceSplit(sequenceSplit) {}

  LogicalResult run(func::FuncOp func) {
    Block &entry = func.getBody().front();
    // Rules read global shapes: take them all before any op turns local.
    func.walk([&](ShardingRuleOpInterface op) {
      rules.try_emplace(op, op.getShardingRule());
    });
    for (BlockArgument arg : func.getArguments()) {
      LayoutAttr layout = func.getArgAttrOfType<LayoutAttr>(
          arg.getArgNumber(), DistDialect::kLayoutAttrName);
      if (!layout)
        layout = replicatedFor(arg.getType());
      layouts[arg] = layout;
      if (auto tensor = dyn_cast<RankedTensorType>(arg.getType()))
        arg.setType(localType(tensor, layout, mesh));
    }
    reduceArgumentsAtEntry(func);
    if (failedCollective || failed(partition(entry)))
      return failure();

    // The results keep the layouts propagation gave them. A collective
    // that changes one runs right after the value is computed, so that it
    // can overlap with the rest of the function.
    Operation *terminator = entry.getTerminator();
    // Where the collectives of a value returned twice go: after the last
    // ones inserted for it, so they run in the order of the results.
    DenseMap<Value, Operation *> insertedAfter;
    for (OpOperand &operand : terminator->getOpOperands()) {
      auto wanted = func.getResultAttrOfType<LayoutAttr>(
          operand.getOperandNumber(), DistDialect::kLayoutAttrName);
      if (!wanted)
        continue;
      Value returned = operand.get();
      if (Operation *last = insertedAfter.lookup(returned))
        builder.setInsertionPointAfter(last);
      else
        builder.setInsertionPointAfterValue(returned);
      FailureOr<Value> value =
          reshard(operand.get(), wanted, terminator->getLoc(),
                  ("result " + Twine(operand.getOperandNumber()) + " of @" +
                   func.getSymName())
                      .str());
      if (failed(value))
        return failure();
      if (*value != returned)
        insertedAfter[returned] = value->getDefiningOp();
      operand.set(*value);
    }
    func.setType(FunctionType::get(func.getContext(), entry.getArgumentTypes(),
                                   terminator->getOperandTypes()));
    return success();
  }

  int64_t collectives = 0;

  /// The collectives of local forms that communicate within their
  /// computation (LocalCollectives).
  Value allGather(OpBuilder &b, Location loc, Value value, int64_t dim,
                  ArrayRef<StringRef> axes, StringRef reason) override {
    auto type = cast<RankedTensorType>(value.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] *= mesh.getGroupSize(axes);
    return stampLocal(AllGatherOp::create(b, loc, type.clone(shape), value, dim,
                                          b.getStrArrayAttr(axes)),
                      reason);
  }
  Value allReduce(OpBuilder &b, Location loc, Value value,
                  ArrayRef<StringRef> axes, StringRef reason) override {
    return stampLocal(AllReduceOp::create(b, loc, TypeRange{value.getType()},
                                          ValueRange{value},
                                          b.getStrArrayAttr(axes)),
                      reason);
  }

private:
  Value stampLocal(Operation *collective, StringRef reason) {
    (void)checkCollectiveAllowed(collective->getLoc(), reason);
    ++collectives;
    collective->setAttr(DistDialect::kReasonAttrName,
                        StringAttr::get(collective->getContext(), reason));
    return collective->getResult(0);
  }

  bool failedCollective = false;
  LayoutAttr layoutOf(Value value) {
    auto it = layouts.find(value);
    return it != layouts.end() ? it->second : replicatedFor(value.getType());
  }

  /// The layout of the ZeRO-split optimizer state of each parameter (the
  /// pieces its update runs on), by parameter name.
  llvm::StringMap<LayoutAttr> zeroPieceLayouts() {
    llvm::StringMap<LayoutAttr> pieces;
    for (auto state : module.getOps<StateOp>()) {
      auto layout =
          state->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName);
      if (state.getOf() && layout && state->hasAttr(DistDialect::kZeroAttrName))
        pieces.try_emplace(*state.getOf(), layout);
    }
    return pieces;
  }

  /// Reduces the partial gradient arguments (`triad.grad`) of `func` at its
  /// start. A gradient whose parameter's optimizer state ZeRO splits is
  /// reduce-scattered straight into that state's pieces (the update reads
  /// no more of it, and the gradient norm sums the pieces): the least
  /// data-parallel traffic, where an all-reduce and a local slice would
  /// send twice the bytes. The axes it is pending over that its pieces do
  /// not split (tp, for a norm's gradient under tensor parallelism), and
  /// every axis of the other gradients, are all-reduced first: one
  /// all_reduce per bucket of consecutive arguments pending over the same
  /// axes. Other pending arguments are reduced where an op needs them
  /// reduced, as propagation decided.
  void reduceArgumentsAtEntry(func::FuncOp func) {
    Block &entry = func.getBody().front();
    builder.setInsertionPointToStart(&entry);
    llvm::StringMap<LayoutAttr> pieces = zeroPieceLayouts();
    SmallVector<Value> bucket;
    SmallVector<StringRef> bucketAxes;
    int64_t bytes = 0;
    // What each argument is after the all-reduces (the argument itself
    // where it has none).
    DenseMap<Value, Value> reduced;
    auto flush = [&] {
      if (bucket.empty())
        return;
      LayoutAttr before = layoutOf(bucket[0]);
      if (failed(checkCollectiveAllowed(
              func.getLoc(), before,
              before.withPartial(
                  withoutAxes(before.getPartialAxes(), bucketAxes)))))
        return;
      auto reduce = AllReduceOp::create(builder, func.getLoc(),
                                        ValueRange(bucket).getTypes(), bucket,
                                        builder.getStrArrayAttr(bucketAxes));
      ++collectives;
      reduce->setAttr(DistDialect::kReasonAttrName,
                      builder.getStringAttr(
                          "gradients entering @" + func.getSymName().str() +
                          ", partial over " + llvm::join(bucketAxes, ",") +
                          ": " + std::to_string(bucket.size()) +
                          (bucket.size() == 1 ? " tensor" : " tensors") +
                          " in one bucket"));
      for (auto [arg, result] : llvm::zip(bucket, reduce.getResults())) {
        arg.replaceAllUsesExcept(result, reduce);
        LayoutAttr layout = layoutOf(arg);
        layouts[result] = layout.withPartial(
            withoutAxes(layout.getPartialAxes(), bucketAxes));
        reduced[arg] = result;
      }
      setResultLayouts(
          reduce, llvm::map_to_vector(reduce.getResults(), [&](Value result) {
            return layoutOf(result);
          }));
      bucket.clear();
      bytes = 0;
    };
    SmallVector<std::pair<BlockArgument, StringRef>> intoPieces;
    for (BlockArgument arg : func.getArguments()) {
      LayoutAttr layout = layoutOf(arg);
      SmallVector<StringRef> axes = layout.getPartialAxes();
      auto grad = func.getArgAttrOfType<FlatSymbolRefAttr>(arg.getArgNumber(),
                                                           "triad.grad");
      if (mesh.getGroupSize(axes) <= 1 || arg.use_empty() || !grad)
        continue;
      if (LayoutAttr piece = pieces.lookup(grad.getValue())) {
        intoPieces.push_back({arg, grad.getValue()});
        // The axes its pieces split are reduce-scattered into them.
        llvm::erase_if(axes,
                       [&](StringRef axis) { return splitsOver(piece, axis); });
        if (mesh.getGroupSize(axes) <= 1)
          continue;
      }
      auto tensor = cast<RankedTensorType>(arg.getType());
      int64_t size = tensor.getNumElements() *
                     std::max<int64_t>(1, tensor.getElementTypeBitWidth() / 8);
      if (!bucket.empty() && (axes != bucketAxes || bytes + size > bucketBytes))
        flush();
      bucket.push_back(arg);
      bucketAxes = axes;
      bytes += size;
    }
    flush();
    for (auto [arg, param] : intoPieces) {
      Value value = reduced.lookup(arg);
      if (failed(reduceIntoPiece(value ? value : arg, pieces.lookup(param),
                                 param, func)))
        return;
    }
  }

  /// `axes` without those in `remove`, in order.
  static SmallVector<StringRef> withoutAxes(ArrayRef<StringRef> axes,
                                            ArrayRef<StringRef> remove) {
    SmallVector<StringRef> kept;
    for (StringRef axis : axes)
      if (!llvm::is_contained(remove, axis))
        kept.push_back(axis);
    return kept;
  }

  /// Replaces `value`, a gradient pending over the axes its pieces split,
  /// by its reduced piece in `piece` (its parameter's ZeRO state layout),
  /// reduced at the function's entry.
  LogicalResult reduceIntoPiece(Value value, LayoutAttr piece, StringRef param,
                                func::FuncOp func) {
    SmallVector<OpOperand *> uses = llvm::map_to_vector(
        value.getUses(), [](OpOperand &use) { return &use; });
    Operation *symbol = symbols.lookup(param);
    auto global = symbol
                      ? dyn_cast<RankedTensorType>(
                            symbol->getAttrOfType<TypeAttr>("type").getValue())
                      : RankedTensorType();
    FailureOr<Value> reduced = reshard(
        value, piece, func.getLoc(),
        ("the ZeRO piece of @" + param + " entering @" + func.getSymName())
            .str(),
        global);
    if (failed(reduced)) {
      failedCollective = true;
      return failure();
    }
    for (OpOperand *use : uses)
      use->set(*reduced);
    return success();
  }

  LogicalResult checkCollectiveAllowed(Location loc, LayoutAttr from,
                                       LayoutAttr to) {
    if (allowCollectives)
      return success();
    std::string change;
    llvm::raw_string_ostream(change) << "from " << from << " to " << to;
    return checkCollectiveAllowed(loc, change);
  }

  /// Refuses a collective, for `why`, where the mesh cannot have any.
  LogicalResult checkCollectiveAllowed(Location loc, StringRef why) {
    if (allowCollectives)
      return success();
    failedCollective = true;
    return emitError(loc, "needs communication between the pieces of mesh "
                          "axis '")
           << llvm::join(mesh.getAxes().getAsValueRange<StringAttr>(), ",")
           << "' (" << why << "), which cannot have any";
  }

  /// `value` (local, laid out as recorded) in layout `to`, reusing the
  /// collectives an earlier user in the same block already needed for it (the
  /// sequence gathered once for the three projections of attention).
  /// `global`, where known, is the value's global type: gathering a padded
  /// split (ZeRO's pieces of a dimension dp does not divide) restores its
  /// size from it.
  FailureOr<Value> reshard(Value value, LayoutAttr to, Location loc,
                           StringRef user, RankedTensorType global = {}) {
    if (layoutOf(value) == to)
      return value;
    Block *block = builder.getInsertionBlock();
    auto point = builder.getInsertionPoint();
    auto it = resharded.find({value, to});
    if (it != resharded.end()) {
      Operation *earlier = it->second.getDefiningOp();
      if (earlier->getBlock() == block && point != block->end() &&
          earlier->isBeforeInBlock(&*point))
        return it->second;
    }
    FailureOr<Value> result = reshardAnew(value, to, loc, user, global);
    if (succeeded(result) && *result != value)
      resharded[{value, to}] = *result;
    return result;
  }

  /// `value` in layout `to`, through new collectives.
  FailureOr<Value> reshardAnew(Value value, LayoutAttr to, Location loc,
                               StringRef user, RankedTensorType global) {
    LayoutAttr from = layoutOf(value);
    std::string why;
    llvm::raw_string_ostream(why) << from << " to " << to << " for " << user;
    auto stamp = [&](Value collective) {
      collective.getDefiningOp()->setAttr(DistDialect::kReasonAttrName,
                                          builder.getStringAttr(why));
    };
    auto fail = [&]() {
      return emitError(loc, "cannot change layout ")
             << from << " into " << to << " (not supported yet)";
    };
    SmallVector<StringRef> keep = to.getPartialAxes(), reduce;
    for (StringRef axis : from.getPartialAxes()) {
      if (!llvm::is_contained(keep, axis))
        reduce.push_back(axis);
    }
    for (StringRef axis : keep)
      if (!llvm::is_contained(from.getPartialAxes(), axis))
        return fail();
    LayoutAttr current = from;
    if (!reduce.empty()) {
      current = current.withPartial(keep);
      if (mesh.getGroupSize(reduce) > 1) {
        if (failed(checkCollectiveAllowed(loc, from, to)))
          return failure();
        // Axes that the target splits a dimension over, after that
        // dimension's current split, are reduce-scattered there; the rest
        // are all-reduced first.
        std::optional<int64_t> scatterDim;
        SmallVector<StringRef> scatterAxes;
        for (int64_t dim = 0; dim < to.getRank() && !scatterDim; ++dim) {
          SmallVector<StringRef> have = from.getSplitAxes(dim);
          SmallVector<StringRef> want = to.getSplitAxes(dim);
          if (want.size() <= have.size() ||
              ArrayRef<StringRef>(want).take_front(have.size()) !=
                  ArrayRef<StringRef>(have))
            continue;
          ArrayRef<StringRef> suffix =
              ArrayRef<StringRef>(want).drop_front(have.size());
          if (mesh.getGroupSize(suffix) > 1 &&
              llvm::all_of(suffix, [&](StringRef axis) {
                return llvm::is_contained(reduce, axis);
              })) {
            scatterDim = dim;
            scatterAxes.assign(suffix.begin(), suffix.end());
          }
        }
        SmallVector<StringRef> sum = llvm::to_vector(
            llvm::make_filter_range(reduce, [&](StringRef axis) {
              return !llvm::is_contained(scatterAxes, axis);
            }));
        LayoutAttr reduced = from.withPartial(
            llvm::to_vector(llvm::concat<StringRef>(keep, scatterAxes)));
        if (mesh.getGroupSize(sum) > 1) {
          value = AllReduceOp::create(builder, loc, TypeRange{value.getType()},
                                      ValueRange{value},
                                      builder.getStrArrayAttr(sum))
                      .getResult(0);
          ++collectives;
          stamp(value);
          setResultLayouts(value.getDefiningOp(),
                           {scatterDim ? reduced : current});
          layouts[value] = scatterDim ? reduced : current;
        }
        if (scatterDim) {
          auto type = cast<RankedTensorType>(value.getType());
          SmallVector<int64_t> shape(type.getShape());
          shape[*scatterDim] =
              pieceSize(shape[*scatterDim], mesh.getGroupSize(scatterAxes));
          value = ReduceScatterOp::create(builder, loc, type.clone(shape),
                                          value, *scatterDim,
                                          builder.getStrArrayAttr(scatterAxes));
          current =
              current.withSplit(*scatterDim, to.getSplitAxes(*scatterDim));
          ++collectives;
          stamp(value);
          setResultLayouts(value.getDefiningOp(), {current});
        }
      }
      layouts[value] = current;
    }
    // The axes listed last split innermost: dropping a suffix is an
    // all_gather over it, adding one an all_slice. A dimension whose axes
    // change otherwise (another axis, or another order) is gathered down to
    // the prefix it shares with its target, then sliced. Every dimension is
    // gathered before any is sliced, so that an axis moving from one
    // dimension to another is free when it is sliced.
    auto commonPrefix = [](ArrayRef<StringRef> a, ArrayRef<StringRef> b) {
      size_t n = 0;
      while (n < a.size() && n < b.size() && a[n] == b[n])
        ++n;
      return n;
    };
    auto change = [&](int64_t dim, ArrayRef<StringRef> keep,
                      ArrayRef<StringRef> axes, bool gather) {
      current = current.withSplit(dim, keep);
      if (mesh.getGroupSize(axes) > 1) {
        if (failed(checkCollectiveAllowed(loc, from, to)))
          return failure();
        auto type = cast<RankedTensorType>(value.getType());
        SmallVector<int64_t> shape(type.getShape());
        if (gather) {
          // A padded split gathers back to its dimension's size, not to
          // the group's padded total.
          shape[dim] = global ? pieceSize(global.getDimSize(dim),
                                          mesh.getGroupSize(keep))
                              : shape[dim] * mesh.getGroupSize(axes);
          value = AllGatherOp::create(builder, loc, type.clone(shape), value,
                                      dim, builder.getStrArrayAttr(axes));
          ++collectives;
        } else {
          shape[dim] = pieceSize(shape[dim], mesh.getGroupSize(axes));
          value = AllSliceOp::create(builder, loc, type.clone(shape), value,
                                     dim, builder.getStrArrayAttr(axes));
        }
        stamp(value);
        setResultLayouts(value.getDefiningOp(), {current});
      }
      layouts[value] = current;
      return success();
    };
    for (int64_t dim = 0; dim < to.getRank(); ++dim) {
      SmallVector<StringRef> have = current.getSplitAxes(dim);
      SmallVector<StringRef> want = to.getSplitAxes(dim);
      size_t shared = commonPrefix(have, want);
      if (shared < have.size() &&
          failed(change(dim, ArrayRef<StringRef>(have).take_front(shared),
                        ArrayRef<StringRef>(have).drop_front(shared),
                        /*gather=*/true)))
        return failure();
    }
    for (int64_t dim = 0; dim < to.getRank(); ++dim) {
      SmallVector<StringRef> have = current.getSplitAxes(dim);
      SmallVector<StringRef> want = to.getSplitAxes(dim);
      if (want.size() > have.size() &&
          failed(change(dim, want,
                        ArrayRef<StringRef>(want).drop_front(have.size()),
                        /*gather=*/false)))
        return failure();
    }
    layouts[value] = to;
    return value;
  }

  /// A read of a parameter yields the rank's stored piece of it; where the
  /// read's users want another layout (a ZeRO-3 parameter gathered whole
  /// for the microbatch step), collectives right after the read make it.
  LogicalResult partitionGetParam(GetParamOp get, LayoutAttr wanted) {
    Operation *symbol = symbols.lookup(get.getName());
    auto tensor = cast<RankedTensorType>(get.getType());
    auto stored =
        symbol ? symbol->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName)
               : LayoutAttr();
    if (!stored)
      stored = replicatedFor(tensor);
    // ZeRO's pieces may be padded: those it stores, and those the
    // optimizer update reads (decided by shard-propagate).
    if (failed(verifyLayout(
            stored, mesh, tensor, [&] { return get.emitOpError(); },
            symbol && symbol->hasAttr(DistDialect::kZeroAttrName))) ||
        failed(verifyLayout(
            wanted, mesh, tensor, [&] { return get.emitOpError(); },
            /*allowPadded=*/true)))
      return failure();
    SmallVector<OpOperand *> uses = llvm::map_to_vector(
        get.getResult().getUses(), [](OpOperand &use) { return &use; });
    get.getResult().setType(localType(tensor, stored, mesh));
    layouts[get.getResult()] = stored;
    setResultLayouts(get, {stored});
    builder.setInsertionPointAfter(get);
    FailureOr<Value> value =
        reshard(get.getResult(), wanted, get.getLoc(),
                ("triad.get_param @" + get.getName()).str(), tensor);
    if (failed(value))
      return failure();
    for (OpOperand *use : uses)
      use->set(*value);
    return success();
  }

  LogicalResult partition(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(block))
      if (failed(partition(op)))
        return failure();
    return success();
  }

  LogicalResult partition(Operation &op) {
    // Collectives are this pass's own, already local.
    if (isa<DistDialect>(op.getDialect()))
      return success();
    SmallVector<LayoutAttr> resultLayouts = getResultLayouts(&op);
    if (resultLayouts.size() != op.getNumResults() && op.getNumResults() != 0)
      return op.emitOpError("has no layouts; run --triad-shard-propagate "
                            "first");
    builder.setInsertionPoint(&op);

    if (auto assign = dyn_cast<AssignOp>(op)) {
      Operation *symbol = symbols.lookup(assign.getName());
      auto declared =
          symbol
              ? symbol->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName)
              : LayoutAttr();
      auto global =
          symbol ? dyn_cast<RankedTensorType>(
                       symbol->getAttrOfType<TypeAttr>("type").getValue())
                 : RankedTensorType();
      FailureOr<Value> value = reshard(
          assign.getValue(),
          declared ? declared : replicatedFor(assign.getValue().getType()),
          op.getLoc(), ("triad.assign to " + assign.getName()).str(), global);
      if (failed(value))
        return failure();
      assign.getValueMutable().assign(*value);
      return success();
    }
    if (auto layer = dyn_cast<LayerOp>(op)) {
      Block &body = layer.getBody().front();
      for (auto [arg, input] :
           llvm::zip(body.getArguments(), layer.getInputs())) {
        arg.setType(input.getType());
        layouts[arg] = layoutOf(input);
      }
      if (failed(partition(body)))
        return failure();
      // The layer's results have the layouts propagation recorded on it
      // (sequence parallelism splits some): the yielded values are changed
      // into them at the end of the layer.
      Operation *yield = body.getTerminator();
      builder.setInsertionPoint(yield);
      SmallVector<LayoutAttr> yielded;
      for (auto [index, result] : llvm::enumerate(layer.getResults())) {
        OpOperand &operand = yield->getOpOperand(index);
        LayoutAttr wanted = index < resultLayouts.size()
                                ? resultLayouts[index]
                                : layoutOf(operand.get());
        FailureOr<Value> value =
            reshard(operand.get(), wanted, yield->getLoc(),
                    ("result " + Twine(index) + " of layer " +
                     stringifyLayerKind(layer.getKind()) + " " +
                     Twine(layer.getIndex()))
                        .str());
        if (failed(value))
          return failure();
        operand.set(*value);
        result.setType(value->getType());
        layouts[result] = wanted;
        yielded.push_back(wanted);
      }
      setResultLayouts(layer, yielded);
      return success();
    }
    if (auto get = dyn_cast<GetParamOp>(op))
      return partitionGetParam(get, resultLayouts.front());
    auto sharded = dyn_cast<ShardingRuleOpInterface>(op);
    if (!sharded) {
      // Constants: replicated.
      for (auto [result, layout] : llvm::zip(op.getResults(), resultLayouts)) {
        if (auto tensor = dyn_cast<RankedTensorType>(result.getType())) {
          if (failed(verifyLayout(layout, mesh, tensor,
                                  [&] { return op.emitOpError(); })))
            return failure();
          if (isDistributed(layout, mesh))
            return op.emitOpError("cannot be split over the mesh");
        }
        layouts[result] = layout;
      }
      return success();
    }

    SmallVector<LayoutAttr> operandLayouts;
    for (Value operand : op.getOperands())
      operandLayouts.push_back(layoutOf(operand));
    SmallVector<bool> parameters = llvm::map_to_vector(
        op.getOperands(), [](Value v) { return readsParameter(v); });
    std::optional<int64_t> scatterDim;
    if (sequenceSplit)
      scatterDim = 1;
    // A new dimension the propagation split keeps its split.
    LayoutDecision decision = decideLayouts(
        rules.at(&op), operandLayouts, mesh, op.getContext(), parameters,
        scatterDim, resultOnlySplits(rules.at(&op), getResultLayouts(&op)));
    SmallVector<Value> operands;
    for (auto [operand, wanted] :
         llvm::zip(op.getOperands(), decision.operands)) {
      FailureOr<Value> value =
          reshard(operand, wanted, op.getLoc(), op.getName().getStringRef());
      if (failed(value))
        return failure();
      operands.push_back(*value);
    }
    SmallVector<Type> types;
    for (auto [result, layout] : llvm::zip(op.getResults(), decision.results)) {
      auto tensor = cast<RankedTensorType>(result.getType());
      if (failed(verifyLayout(
              layout, mesh, tensor, [&] { return op.emitOpError(); },
              rules.at(&op).acceptsPadding)))
        return failure();
      types.push_back(localType(tensor, layout, mesh));
    }
    Operation *local =
        sharded.buildLocal(builder, operands, types, decision.factorParts,
                           decision.factorAxes, *this);
    if (failedCollective)
      return failure();
    setResultLayouts(local, decision.results);
    for (auto [result, layout] :
         llvm::zip(local->getResults(), decision.results))
      layouts[result] = layout;
    op.replaceAllUsesWith(local->getResults());
    op.erase();
    return success();
  }

  ModuleOp module;
  /// The module's parameters and state, indexed once (a module-level
  /// lookup scans).
  SymbolTable symbols;
  MeshOp mesh;
  OpBuilder builder;
  int64_t bucketBytes;
  bool allowCollectives;
  bool sequenceSplit;
  DenseMap<Value, LayoutAttr> layouts;
  /// Values already changed into a layout, by (value, layout).
  DenseMap<std::pair<Value, Attribute>, Value> resharded;
  DenseMap<Operation *, ShardingRule> rules;
};

} // namespace

FailureOr<int64_t>
triad::sharding::partitionFunction(ModuleOp module, MeshOp mesh,
                                   func::FuncOp func, int64_t bucketBytes,
                                   bool allowCollectives, bool sequenceSplit) {
  Partitioner partitioner(module, mesh, bucketBytes, allowCollectives,
                          sequenceSplit);
  if (failed(partitioner.run(func)))
    return failure();
  return partitioner.collectives;
}

namespace {

struct PartitionPass : public triad::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MeshOp mesh = MeshOp::lookup(module);
    if (!mesh) {
      emitError(module.getLoc(), "the module has no dist.mesh; run "
                                 "--triad-shard-propagate first");
      return signalPassFailure();
    }
    if (bucketBytes < 1) {
      emitError(module.getLoc(), "bucket-bytes must be at least 1");
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      FailureOr<int64_t> collectives =
          partitionFunction(module, mesh, func, bucketBytes, true, sp);
      if (failed(collectives))
        return signalPassFailure();
      numCollectives += *collectives;
    }
  }
};

} // namespace
