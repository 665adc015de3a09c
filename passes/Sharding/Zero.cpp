//===- Zero.cpp - optimizer state sharded over data-parallel ranks --------===//
//
// ZeRO stage 1: the optimizer state of every parameter gets a layout split
// along its first dimension over dp, which propagation and partitioning
// turn into a sharded update and an all_gather of the parameters.
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
    for (auto state : module.getOps<StateOp>()) {
      if (!state.getOf() || state->hasAttr(DistDialect::kLayoutAttrName))
        continue;
      RankedTensorType type = state.getTensorType();
      if (type.getRank() == 0 || type.getDimSize(0) % replicas != 0)
        continue;
      state->setAttr(
          DistDialect::kLayoutAttrName,
          LayoutAttr::getSplit(&getContext(), type.getRank(), 0, {"dp"}));
      ++numSharded;
    }
  }
};

} // namespace
