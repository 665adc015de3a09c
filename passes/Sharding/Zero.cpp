//===- Zero.cpp - ZeRO: state, gradients, parameters split over dp -------===//
//
// Marks what ZeRO splits over the data-parallel ranks (`dist.zero`):
// stage 1 the optimizer state of every parameter, stage 2 also the
// gradients the microbatch step returns, stage 3 also the parameters.
// shard-propagate chooses the dimension (after the parameter's own layout)
// and partition inserts the reduce_scatter, all_slice and all_gather ops
// that follow.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/LayoutRules.h"
#include "passes/Sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace triad {
#define GEN_PASS_DEF_ZERO
#include "passes/Sharding/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;
using namespace triad::dist;
using namespace triad::sharding;

namespace {

struct ZeroPass : public triad::impl::ZeroBase<ZeroPass> {
  using ZeroBase::ZeroBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (zero < 0 || zero > 3) {
      emitError(module.getLoc(), "zero=")
          << zero.getValue() << " is not a ZeRO stage (0, 1, 2 or 3)";
      return signalPassFailure();
    }
    FailureOr<MeshOp> mesh = getOrCreateMesh(module, dp, tp, pp, order);
    if (failed(mesh))
      return signalPassFailure();
    int64_t replicas = mesh->getAxisSize("dp").value_or(1);
    if (zero == 0 || replicas == 1)
      return;
    // The split itself is chosen where the state is first read (by
    // shard-propagate), after the parameter's own layout: dp goes on the
    // first dimension that can take it.
    auto unit = UnitAttr::get(&getContext());
    for (auto state : module.getOps<StateOp>()) {
      if (!state.getOf() || state->hasAttr(DistDialect::kLayoutAttrName) ||
          state.getTensorType().getRank() == 0)
        continue;
      state->setAttr(DistDialect::kZeroAttrName, unit);
      ++numSharded;
    }
    if (zero < 2)
      return;
    // The gradients leave the microbatch step reduce-scattered: each rank
    // accumulates only the piece its optimizer state updates.
    auto microbatch = module.lookupSymbol<func::FuncOp>("microbatch_step");
    if (microbatch)
      for (unsigned i = 0; i < microbatch.getNumResults(); ++i)
        if (microbatch.getResultAttr(i, "triad.grad") &&
            cast<RankedTensorType>(microbatch.getResultTypes()[i]).getRank() >
                0) {
          microbatch.setResultAttr(i, DistDialect::kZeroAttrName, unit);
          ++numShardedGrads;
        }
    if (zero < 3)
      return;
    for (auto param : module.getOps<ParamOp>()) {
      if (param->hasAttr(DistDialect::kLayoutAttrName) ||
          param.getTensorType().getRank() == 0)
        continue;
      param->setAttr(DistDialect::kZeroAttrName, unit);
      ++numShardedParams;
    }
  }
};

} // namespace
