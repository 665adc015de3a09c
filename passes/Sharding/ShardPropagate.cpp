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
#include "llvm/ADT/StringMap.h"

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
  Propagation(ModuleOp module, MeshOp mesh, StringRef batchAxis)
      : module(module), mesh(mesh), batchAxis(batchAxis) {}

  LogicalResult run(func::FuncOp func,
                    const llvm::StringMap<LayoutAttr> &gradLayouts) {
    for (BlockArgument arg : func.getArguments())
      if (failed(seedArgument(func, arg, gradLayouts)))
        return failure();
    if (failed(propagate(func.getBody().front())))
      return failure();
    Operation *terminator = func.getBody().front().getTerminator();
    for (auto [index, value] : llvm::enumerate(terminator->getOperands()))
      func.setResultAttr(index, DistDialect::kLayoutAttrName, layoutOf(value));
    return success();
  }

private:
  LayoutAttr layoutOf(Value value) {
    auto it = layouts.find(value);
    return it != layouts.end() ? it->second : replicatedFor(value.getType());
  }

  /// The data arguments split their batch over dp; a gradient argument has
  /// its layout from the microbatch step; a layout written on an argument
  /// is kept.
  LogicalResult seedArgument(func::FuncOp func, BlockArgument arg,
                             const llvm::StringMap<LayoutAttr> &gradLayouts) {
    unsigned index = arg.getArgNumber();
    if (auto given = func.getArgAttrOfType<LayoutAttr>(
            index, DistDialect::kLayoutAttrName)) {
      layouts[arg] = given;
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
    if (failed(verifyLayout(
            layout, mesh, dyn_cast<RankedTensorType>(arg.getType()),
            [&] { return func.emitOpError("argument ") << index << ": "; })))
      return failure();
    layouts[arg] = layout;
    func.setArgAttr(index, DistDialect::kLayoutAttrName, layout);
    return success();
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
      Operation *symbol = SymbolTable::lookupSymbolIn(module, get.getName());
      auto declared =
          symbol
              ? symbol->getAttrOfType<LayoutAttr>(DistDialect::kLayoutAttrName)
              : LayoutAttr();
      results.push_back(declared ? declared : replicatedFor(get.getType()));
    } else if (auto layer = dyn_cast<LayerOp>(op)) {
      Block &body = layer.getBody().front();
      for (auto [arg, input] :
           llvm::zip(body.getArguments(), layer.getInputs()))
        layouts[arg] = layoutOf(input);
      if (failed(propagate(body)))
        return failure();
      for (Value value : body.getTerminator()->getOperands())
        results.push_back(layoutOf(value));
    } else if (auto sharded = dyn_cast<ShardingRuleOpInterface>(op)) {
      SmallVector<LayoutAttr> operands;
      for (Value operand : op.getOperands())
        operands.push_back(layoutOf(operand));
      LayoutDecision decision = decideLayouts(sharded.getShardingRule(),
                                              operands, mesh, op.getContext());
      results = decision.results;
    } else if (op.getNumRegions() != 0 ||
               llvm::any_of(
                   op.getResultTypes(),
                   [](Type type) { return isa<RankedTensorType>(type); }) &&
                   !op.hasTrait<OpTrait::ConstantLike>()) {
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

  ModuleOp module;
  MeshOp mesh;
  StringRef batchAxis;
  DenseMap<Value, LayoutAttr> layouts;
};

} // namespace

LogicalResult triad::sharding::propagateLayouts(ModuleOp module, MeshOp mesh,
                                                StringRef batchAxis,
                                                ArrayRef<func::FuncOp> funcs) {
  llvm::StringMap<LayoutAttr> gradLayouts;
  for (func::FuncOp func : funcs) {
    if (func.isExternal())
      continue;
    Propagation propagation(module, mesh, batchAxis);
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
          failed(verifyLayout(layout, *mesh,
                              dyn_cast<RankedTensorType>(type.getValue()),
                              [&] { return op.emitOpError(); })))
        return signalPassFailure();
    }

    // The microbatch step first: its gradients seed the apply step.
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    std::stable_partition(funcs.begin(), funcs.end(), [](func::FuncOp func) {
      return func.getSymName() == "microbatch_step";
    });
    if (failed(propagateLayouts(module, *mesh, "dp", funcs)))
      return signalPassFailure();
  }
};

} // namespace
