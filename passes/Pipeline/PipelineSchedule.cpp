//===- PipelineSchedule.cpp - the per-rank pipeline schedule --------------===//
//
// Builds the schedule of the pipeline stages (the runtime's schedule
// library, which the runtime also uses to re-check a loaded plan), verifies
// it and records it on the module. See Passes.td.
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

FailureOr<schedule::Schedule> pipeline::readSchedule(ModuleOp module) {
  auto record = module->getAttrOfType<DictionaryAttr>(kScheduleAttr);
  if (!record)
    return emitError(module.getLoc(), "has no ")
           << kScheduleAttr << "; run --triad-pipeline-schedule first";
  auto name = record.getAs<StringAttr>("name");
  auto ranks = record.getAs<IntegerAttr>("ranks");
  auto microbatches = record.getAs<IntegerAttr>("microbatches");
  auto virtualStages = record.getAs<IntegerAttr>("virtual_stages");
  auto actions = record.getAs<ArrayAttr>("actions");
  if (!name || !ranks || !microbatches || !virtualStages || !actions)
    return emitError(module.getLoc(), "")
           << kScheduleAttr
           << " needs name, ranks, microbatches, virtual_stages and actions";
  schedule::Schedule result;
  result.name = name.str();
  result.ranks = ranks.getInt();
  result.microbatches = microbatches.getInt();
  result.virtualStages = virtualStages.getInt();
  if (result.ranks < 1 || result.microbatches < 1 || result.virtualStages < 1)
    return emitError(module.getLoc(), "")
           << kScheduleAttr
           << ": ranks, microbatches and virtual_stages must be positive";
  if (static_cast<int64_t>(actions.size()) != result.ranks)
    return emitError(module.getLoc(), "")
           << kScheduleAttr << " lists actions for " << actions.size()
           << " ranks, but has ranks = " << result.ranks;
  for (auto [rank, list] : llvm::enumerate(actions)) {
    auto tokens = dyn_cast<ArrayAttr>(list);
    if (!tokens)
      return emitError(module.getLoc(), "")
             << kScheduleAttr << ": the actions of rank " << rank
             << " are not a list of strings";
    std::vector<schedule::Action> &out = result.actions.emplace_back();
    for (Attribute token : tokens) {
      auto text = dyn_cast<StringAttr>(token);
      if (!text)
        return emitError(module.getLoc(), "")
               << kScheduleAttr << ": the actions of rank " << rank
               << " are not a list of strings";
      absl::StatusOr<schedule::Action> action =
          schedule::parseAction(text.getValue().str());
      if (!action.ok())
        return emitError(module.getLoc(), "")
               << kScheduleAttr << ", rank " << rank << ": "
               << std::string(action.status().message());
      out.push_back(*action);
    }
  }
  if (absl::Status status = schedule::verify(result); !status.ok())
    return emitError(module.getLoc(), "the ")
           << result.name
           << " schedule does not run: " << std::string(status.message());
  return result;
}

namespace {

struct PipelineSchedulePass
    : public triad::impl::PipelineScheduleBase<PipelineSchedulePass> {
  using PipelineScheduleBase::PipelineScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module->hasAttr(pipeline::kScheduleAttr)) {
      if (failed(pipeline::readSchedule(module)))
        signalPassFailure();
      return;
    }
    auto stages = module->getAttrOfType<ArrayAttr>(pipeline::kStagesAttr);
    auto step = module.lookupSymbol<func::FuncOp>("microbatch_step");
    auto mesh = module.getOps<dist::MeshOp>();
    if (!stages || !step || mesh.empty()) {
      emitError(module.getLoc(), "has no pipeline stages (")
          << pipeline::kStagesAttr << "); run --triad-pipeline-split first";
      return signalPassFailure();
    }
    int64_t ranks = (*mesh.begin()).getAxisSize("pp").value_or(1);
    int64_t microbatches = 1;
    if (auto count = step->getAttrOfType<IntegerAttr>("triad.microbatches"))
      microbatches = count.getInt();
    int64_t numStages = stages.size();
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
    if (absl::Status status = schedule::verify(*built); !status.ok()) {
      emitError(module.getLoc(), "the ")
          << name
          << " schedule does not run: " << std::string(status.message());
      return signalPassFailure();
    }
    Builder b(module.getContext());
    SmallVector<Attribute> actions;
    for (const std::vector<schedule::Action> &rank : built->actions) {
      SmallVector<Attribute> tokens;
      for (const schedule::Action &action : rank)
        tokens.push_back(b.getStringAttr(schedule::format(action)));
      actions.push_back(b.getArrayAttr(tokens));
    }
    module->setAttr(
        pipeline::kScheduleAttr,
        b.getDictionaryAttr(
            {b.getNamedAttr("name", b.getStringAttr(name)),
             b.getNamedAttr("ranks", b.getI64IntegerAttr(ranks)),
             b.getNamedAttr("microbatches", b.getI64IntegerAttr(microbatches)),
             b.getNamedAttr("virtual_stages",
                            b.getI64IntegerAttr(virtualStages)),
             b.getNamedAttr("actions", b.getArrayAttr(actions))}));
  }
};

} // namespace
