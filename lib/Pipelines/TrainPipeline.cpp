//===- TrainPipeline.cpp - the whole compilation as one pipeline ----------===//

#include "triad/Pipelines/TrainPipeline.h"

#include "dialects/Triad/TriadOps.h"
#include "passes/Autodiff/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Reports/Passes.h"
#include "passes/Sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace {

/// Stands in for the pipeline when its options are invalid: fails with the
/// reason, before any pass changes the IR.
struct RejectPipelinePass
    : PassWrapper<RejectPipelinePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RejectPipelinePass)
  explicit RejectPipelinePass(std::string reason) : reason(std::move(reason)) {}
  StringRef getArgument() const override {
    return "triad-reject-train-pipeline";
  }
  void runOnOperation() override {
    emitError(getOperation().getLoc(), "--triad-train-pipeline: ") << reason;
    signalPassFailure();
  }
  std::string reason;
};

/// Checks the options against the model before any pass changes it, so
/// that an error names the numbers the user gave (after the microbatch
/// split, the batch a later pass sees is already a piece of it).
struct CheckModelPass : PassWrapper<CheckModelPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CheckModelPass)
  CheckModelPass(int64_t dp, int64_t tp, int64_t microbatches)
      : dp(dp), tp(tp), microbatches(microbatches) {}
  StringRef getArgument() const override {
    return "triad-check-train-pipeline";
  }
  void runOnOperation() override {
    // Tensor parallelism splits attention by heads: tp must divide them,
    // and the kv heads (grouped-query attention) too.
    WalkResult heads = getOperation().walk([&](triad::AttentionOp op) {
      for (auto [count, what] :
           {std::pair<int64_t, const char *>{op.getHeads(), "attention heads"},
            {op.getKvHeads(), "kv heads"}}) {
        if (count % tp == 0)
          continue;
        op.emitError("--triad-train-pipeline: tp=")
            << tp << " does not divide the model's " << count << " " << what
            << " (tensor parallelism splits attention by heads); choose a tp "
               "that divides "
            << count;
        signalPassFailure();
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (heads.wasInterrupted())
      return;
    getOperation().walk([&](func::FuncOp func) {
      for (BlockArgument arg : func.getArguments()) {
        auto type = dyn_cast<RankedTensorType>(arg.getType());
        if (!func.getArgAttr(arg.getArgNumber(), "triad.input") || !type ||
            type.getRank() < 1 || type.isDynamicDim(0))
          continue;
        int64_t batch = type.getDimSize(0), pieces = dp * microbatches;
        if (batch % pieces == 0)
          continue;
        func.emitError("--triad-train-pipeline: the global batch of ")
            << batch << " sequences does not split into dp=" << dp
            << " replicas x microbatches=" << microbatches << " (" << pieces
            << " pieces); choose dp and microbatches whose product divides "
            << batch << ", or generate the model with --batch a multiple of "
            << pieces;
        signalPassFailure();
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
  }
  int64_t dp, tp, microbatches;
};

/// Why the options cannot compile, or "" when they can.
std::string checkOptions(const triad::TrainPipelineOptions &o) {
  std::string text;
  llvm::raw_string_ostream os(text);
  if (o.dp < 1 || o.tp < 1 || o.pp < 1)
    os << "dp, tp and pp must be at least 1 (got dp=" << o.dp << " tp=" << o.tp
       << " pp=" << o.pp << ")";
  else if (o.bucketBytes < 1)
    os << "bucket-bytes=" << o.bucketBytes << " must be at least 1";
  else if (o.vocabMultiple < 1 || o.vocabMultiple > 65536)
    os << "vocab-multiple=" << o.vocabMultiple
       << " must be between 1 and 65536";
  else if (o.zero < 0 || o.zero > 3)
    os << "zero=" << o.zero << " is not a ZeRO stage (0, 1, 2 or 3)";
  else if (!llvm::is_contained(
               {"gpipe", "1f1b", "interleaved", "zb-h1", "zero-bubble"},
               o.schedule.getValue()))
    os << "schedule '" << o.schedule
       << "' is unknown (gpipe, 1f1b, interleaved, zb-h1 or zero-bubble, "
          "the same as zb-h1)";
  else if (o.microbatches < 1)
    os << "microbatches=" << o.microbatches << " must be at least 1";
  else if (o.virtualStages < 1)
    os << "virtual-stages=" << o.virtualStages << " must be at least 1";
  else if (o.virtualStages > 1 && o.schedule != "interleaved")
    os << "virtual-stages=" << o.virtualStages << " needs schedule=interleaved";
  else if (!llvm::is_contained({"none", "selective", "full"},
                               o.recompute.getValue()))
    os << "recompute '" << o.recompute
       << "' is unknown (none, selective or full)";
  else if (!o.dtype.empty() &&
           !llvm::is_contained({"f32", "bf16", "f16"}, o.dtype.getValue()))
    os << "dtype '" << o.dtype << "' is unknown (f32, bf16 or f16)";
  else if (o.virtualStages > 1 && o.pp < 2)
    os << "virtual-stages=" << o.virtualStages
       << " interleaves the stages of several pipeline ranks and needs pp > 1";
  else if (!o.stages.empty() && o.pp < 2)
    os << "stages=" << o.stages << " cuts the model for a pipeline and needs "
       << "pp > 1";
  else if (!o.stageReport.empty() && o.pp < 2)
    os << "stage-report=" << o.stageReport
       << " writes a pipeline's stages and needs pp > 1";
  else if (o.sp && o.tp < 2)
    os << "sp (sequence parallelism) splits the sequence over tp and needs "
          "tp > 1 (got tp="
       << o.tp << ")";
  return text;
}

/// The options of a pass that takes the mesh (dp, tp, pp, order).
template <typename PassOptions>
PassOptions meshOptions(const triad::TrainPipelineOptions &options) {
  PassOptions mesh;
  mesh.dp = options.dp;
  mesh.tp = options.tp;
  mesh.pp = options.pp;
  mesh.order = options.order;
  return mesh;
}

} // namespace

void triad::buildTrainPipeline(OpPassManager &pm,
                               const TrainPipelineOptions &options) {
  if (std::string reason = checkOptions(options); !reason.empty()) {
    pm.addPass(std::make_unique<RejectPipelinePass>(reason));
    return;
  }
  pm.addPass(std::make_unique<CheckModelPass>(options.dp, options.tp,
                                              options.microbatches));
  // The vocabulary grows to a multiple of tp before the gradients and the
  // optimizer state are built from the parameters' shapes.
  PadVocabOptions pad;
  pad.tp = options.tp;
  pad.multiple = options.vocabMultiple;
  pm.addPass(createPadVocab(pad));
  AutodiffOptions autodiff;
  autodiff.recompute = options.recompute;
  autodiff.lr = options.lr;
  autodiff.minLr = options.minLr;
  autodiff.warmup = options.warmup;
  autodiff.decaySteps = options.decaySteps;
  autodiff.weightDecay = options.weightDecay;
  autodiff.clipNorm = options.clipNorm;
  autodiff.lossScale = options.lossScale;
  // f16: each microbatch of each data-parallel rank backpropagates its share
  // of the step's loss, as one rank's single microbatch would.
  autodiff.lossPieces = options.microbatches * options.dp;
  autodiff.gradAccumulation = options.gradAccumulation;
  autodiff.foldTokenMean = options.foldTokenMean;
  pm.addPass(createAutodiff(autodiff));
  SplitMicrobatchesOptions split;
  split.microbatches = options.microbatches;
  pm.addPass(createSplitMicrobatches(split));
  auto zero = meshOptions<ZeroOptions>(options);
  zero.zero = options.zero;
  pm.addPass(createZero(zero));
  auto propagate = meshOptions<ShardPropagateOptions>(options);
  propagate.sp = options.sp;
  pm.addPass(createShardPropagate(propagate));
  PartitionOptions partition;
  partition.sp = options.sp;
  partition.bucketBytes = options.bucketBytes;
  pm.addPass(createPartition(partition));
  // The partition inserts the collectives each use needs; where several
  // uses in a layer need the same one (the gathered input of the query,
  // key and value products' weight gradients under sequence parallelism),
  // one is enough.
  pm.addPass(mlir::createCSEPass());
  // The ops as a rank runs them, forward and backward layer by layer,
  // before the pipeline passes take the layers apart.
  if (!options.costReport.empty()) {
    CostReportOptions report;
    report.file = options.costReport;
    report.ops = true;
    report.fusedEpilogues = options.fuseEpilogues;
    pm.addPass(createCostReport(report));
  }
  if (options.pp > 1) {
    auto split = meshOptions<PipelineSplitOptions>(options);
    split.virtualStages = options.virtualStages;
    split.stages = options.stages;
    split.report = options.stageReport;
    pm.addPass(createPipelineSplit(split));
    PipelineScheduleOptions schedule;
    schedule.schedule = options.schedule;
    pm.addPass(createPipelineSchedule(schedule));
    pm.addPass(createPipelineMaterialize());
  }
  auto lower = meshOptions<LowerToRtOptions>(options);
  lower.dtype = options.dtype;
  lower.fuseEpilogues = options.fuseEpilogues;
  lower.bucketBytes = options.bucketBytes;
  lower.overlapGradReduce = options.overlapGradReduce;
  pm.addPass(createLowerToRt(lower));
  if (options.fuseGradAccumulation || options.fuseProductAdds) {
    FuseProductsOptions fuse;
    fuse.accumulate = options.fuseGradAccumulation;
    fuse.adds = options.fuseProductAdds;
    pm.addPass(createFuseProducts(fuse));
  }
  if (options.fuseOptimizer)
    pm.addPass(createFuseOptimizer());
}

void triad::registerTrainPipeline() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "triad-train-pipeline",
      "Compiles the forward model into per-rank rt programs: autodiff, "
      "microbatch split, ZeRO, sharding (data, tensor and sequence parallel), "
      "lowering "
      "to rt",
      buildTrainPipeline);
}
