//===- Zero.cpp - optimizer state sharded over data-parallel ranks --------===//
//
// ZeRO stage 1: the optimizer state of every parameter is marked to be
// split over dp, which propagation (choosing the dimension after the
// parameter's own layout) and partitioning turn into a sharded update and
// an all_gather of the parameters.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/LayoutRules.h"
#include "passes/Sharding/Passes.h"

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
    if (zero > 1) {
      emitError(module.getLoc(), "zero=")
          << zero.getValue()
          << " is not supported yet (sharded gradients and parameters); "
             "use zero=0 or zero=1";
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
    for (auto state : module.getOps<StateOp>()) {
      if (!state.getOf() || state->hasAttr(DistDialect::kLayoutAttrName) ||
          state.getTensorType().getRank() == 0)
        continue;
      state->setAttr(DistDialect::kZeroAttrName, UnitAttr::get(&getContext()));
      ++numSharded;
    }
  }
};

} // namespace
