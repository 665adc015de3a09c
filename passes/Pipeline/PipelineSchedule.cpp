//===- PipelineSchedule.cpp - the per-rank pipeline schedule --------------===//
//
// Builds the schedule of the pipeline stages (the runtime's schedule
// library, which the runtime also uses to re-check a loaded plan), verifies
// it and records it on the module as a pipe.schedule. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

namespace triad {
#define GEN_PASS_DEF_PIPELINESCHEDULE
#include "passes/Pipeline/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

struct PipelineSchedulePass
    : public triad::impl::PipelineScheduleBase<PipelineSchedulePass> {
  using PipelineScheduleBase::PipelineScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t numStages = llvm::range_size(module.getOps<pipe::StageOp>());
    if (!module.getOps<pipe::ScheduleOp>().empty()) {
      // Written by hand: its verifier has checked it.
      FailureOr<schedule::Schedule> given = pipe::readSchedule(module);
      if (failed(given))
        return signalPassFailure();
      if (numStages && numStages != given->stages()) {
        emitError(module.getLoc(), "has ")
            << numStages << " pipeline stages, but its pipe.schedule runs "
            << given->stages();
        return signalPassFailure();
      }
      return;
    }
    auto step = module.lookupSymbol<func::FuncOp>("microbatch_step");
    auto mesh = module.getOps<dist::MeshOp>();
    if (!numStages || !step || mesh.empty()) {
      emitError(module.getLoc(), "has no pipeline stages (pipe.stage); run "
                                 "--triad-pipeline-split first");
      return signalPassFailure();
    }
    int64_t ranks = (*mesh.begin()).getAxisSize("pp").value_or(1);
    int64_t microbatches = 1;
    if (auto count = step->getAttrOfType<IntegerAttr>("triad.microbatches"))
      microbatches = count.getInt();
    if (numStages % ranks != 0) {
      emitError(module.getLoc(), "has ")
          << numStages << " pipeline stages for " << ranks
          << " pipeline ranks; every rank needs as many";
      return signalPassFailure();
    }
    int64_t virtualStages = numStages / ranks;
    if (virtualStages > 1 && schedule != "interleaved") {
      emitError(module.getLoc(), "has ")
          << virtualStages << " stages per pipeline rank, which only the "
          << "interleaved schedule runs (got schedule=" << schedule << ")";
      return signalPassFailure();
    }
    std::string name =
        schedule == "zero-bubble" ? std::string("zb-h1") : schedule.getValue();
    absl::StatusOr<schedule::Schedule> built =
        schedule::build(name, ranks, microbatches, virtualStages);
    if (!built.ok()) {
      emitError(module.getLoc(), "schedule=")
          << schedule << ": " << std::string(built.status().message());
      return signalPassFailure();
    }
    // The op's verifier checks the schedule (after this pass).
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    pipe::ScheduleOp::createFrom(b, module.getLoc(), *built);
  }
};

} // namespace
