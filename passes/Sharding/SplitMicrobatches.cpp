//===- SplitMicrobatches.cpp - one microbatch's share of the batch --------===//
//
// Partitions @microbatch_step over a virtual mesh axis whose pieces are the
// microbatches of a step: the same sharding rules that split the batch over
// dp split it here, and the partial results are the step's accumulators'
// business, so no collective may appear.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/LayoutRules.h"
#include "passes/Sharding/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OwningOpRef.h"

namespace triad {
#define GEN_PASS_DEF_SPLITMICROBATCHES
#include "passes/Sharding/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;
using namespace triad::dist;
using namespace triad::sharding;

namespace {

struct SplitMicrobatchesPass
    : public triad::impl::SplitMicrobatchesBase<SplitMicrobatchesPass> {
  using SplitMicrobatchesBase::SplitMicrobatchesBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (microbatches < 1) {
      emitError(module.getLoc(), "microbatches must be at least 1");
      return signalPassFailure();
    }
    auto step = module.lookupSymbol<func::FuncOp>("microbatch_step");
    if (!step || step.isExternal()) {
      emitError(module.getLoc(), "needs @microbatch_step; run "
                                 "--triad-autodiff first");
      return signalPassFailure();
    }
    if (step->hasAttr("triad.microbatches")) {
      step.emitOpError("is already split into microbatches");
      return signalPassFailure();
    }
    if (microbatches == 1)
      return;
    for (BlockArgument arg : step.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!step.getArgAttr(arg.getArgNumber(), "triad.input") || !type ||
          type.getRank() == 0)
        continue;
      if (type.getDimSize(0) % microbatches != 0) {
        step.emitOpError("batch ")
            << type.getDimSize(0) << " of argument " << arg.getArgNumber()
            << " is not divisible by microbatches=" << microbatches.getValue();
        return signalPassFailure();
      }
    }

    // The virtual mesh lives only while the pass runs; its axis is the one
    // a dropout's batch_split names for the microbatches.
    OpBuilder builder(module.getContext());
    OwningOpRef<MeshOp> mesh =
        MeshOp::create(builder, module.getLoc(), "microbatches",
                       builder.getStrArrayAttr({DropoutOp::kMicrobatchAxis}),
                       builder.getDenseI64ArrayAttr({microbatches}));
    if (failed(propagateLayouts(module, *mesh, DropoutOp::kMicrobatchAxis,
                                {step})) ||
        failed(partitionFunction(module, *mesh, step, /*bucketBytes=*/1,
                                 /*allowCollectives=*/false)))
      return signalPassFailure();

    step->setAttr("triad.microbatches",
                  builder.getI64IntegerAttr(microbatches));
    // The virtual axis names nothing outside this pass.
    step.walk(
        [](Operation *op) { op->removeAttr(DistDialect::kLayoutsAttrName); });
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      step.removeArgAttr(i, DistDialect::kLayoutAttrName);
    for (unsigned i = 0; i < step.getNumResults(); ++i)
      step.removeResultAttr(i, StringAttr::get(module.getContext(),
                                               DistDialect::kLayoutAttrName));
  }
};

} // namespace
