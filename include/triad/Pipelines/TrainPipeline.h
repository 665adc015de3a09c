//===- TrainPipeline.h - the whole compilation as one pipeline ----*- C++
//-*-===//
//
// `--triad-train-pipeline="dp=.. tp=.. pp=.. ..."`: from the forward model
// to the per-rank rt programs (DESIGN.md section 4, item 7).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PIPELINES_TRAINPIPELINE_H
#define TRIAD_PIPELINES_TRAINPIPELINE_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace triad {

struct TrainPipelineOptions
    : public mlir::PassPipelineOptions<TrainPipelineOptions> {
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data-parallel replicas"),
                     llvm::cl::init(1)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel ranks"),
                     llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("Pipeline stages"),
                     llvm::cl::init(1)};
  Option<int64_t> zero{*this, "zero",
                       llvm::cl::desc("ZeRO stage: 0 (none), 1 (optimizer "
                                      "state), 2 (+ gradients), 3 (+ "
                                      "parameters), sharded over dp"),
                       llvm::cl::init(0)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1 "
                     "(zero-bubble)"),
      llvm::cl::init("1f1b")};
  Option<int64_t> microbatches{
      *this, "microbatches",
      llvm::cl::desc("Microbatches per data-parallel replica and step"),
      llvm::cl::init(1)};
  Option<int64_t> virtualStages{
      *this, "virtual-stages",
      llvm::cl::desc("Stages per pipeline rank (interleaved schedule)"),
      llvm::cl::init(1)};
  Option<std::string> stages{
      *this, "stages",
      llvm::cl::desc("Transformer layers per pipeline stage by hand, comma "
                     "separated (default: balanced by cost)"),
      llvm::cl::init("")};
  Option<bool> sp{*this, "sp",
                  llvm::cl::desc("Sequence parallelism along with tp"),
                  llvm::cl::init(false)};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("Activation recomputation: none, selective, full"),
      llvm::cl::init("none")};
  Option<std::string> order{
      *this, "order",
      llvm::cl::desc("Mesh axes from slowest to fastest varying across "
                     "ranks"),
      llvm::cl::init("dp,pp,tp")};
  Option<std::string> dtype{
      *this, "dtype",
      llvm::cl::desc("Parameter element type the model must have (f32, "
                     "bf16, f16); empty: whatever it has"),
      llvm::cl::init("")};
  Option<double> lr{*this, "lr", llvm::cl::desc("Peak learning rate"),
                    llvm::cl::init(3.0e-4)};
  Option<double> minLr{*this, "min-lr",
                       llvm::cl::desc("Learning rate at the end of decay"),
                       llvm::cl::init(0.0)};
  Option<int64_t> warmup{*this, "warmup", llvm::cl::desc("Linear warmup steps"),
                         llvm::cl::init(0)};
  Option<int64_t> decaySteps{
      *this, "decay-steps",
      llvm::cl::desc("Step at which cosine decay reaches min-lr: -1 "
                     "(default) the run's last step (triad-run's --steps), "
                     "0 no decay"),
      llvm::cl::init(-1)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("AdamW weight decay"),
                             llvm::cl::init(0.1)};
  Option<double> clipNorm{*this, "clip-norm",
                          llvm::cl::desc("Global gradient norm clip (0: off)"),
                          llvm::cl::init(1.0)};
  Option<double> lossScale{
      *this, "loss-scale",
      llvm::cl::desc("f16 models: the dynamic loss scale's first value"),
      llvm::cl::init(65536.0)};
  Option<std::string> gradAccumulation{
      *this, "grad-accumulation",
      llvm::cl::desc("16-bit models: sum gradients in f32 (default) or in "
                     "the parameter's type (param)"),
      llvm::cl::init("f32")};
  Option<int64_t> bucketBytes{
      *this, "bucket-bytes",
      llvm::cl::desc("Most bytes of gradients one collective reduces (the "
                     "data-parallel all-reduces, ZeRO's reduce-scatters) and "
                     "of parameters one all-gather moves: smaller buckets "
                     "start during the backward pass sooner"),
      llvm::cl::init(25 * 1024 * 1024)};
  Option<bool> overlapGradReduce{
      *this, "overlap-grad-reduce",
      llvm::cl::desc("All-reduce each bucket of gradients in the last "
                     "microbatch's backward pass as soon as it is complete, "
                     "not in the apply step"),
      llvm::cl::init(true)};
  Option<int64_t> vocabMultiple{
      *this, "vocab-multiple",
      llvm::cl::desc("Pad the loss's vocabulary to a multiple of this times "
                     "tp (Megatron's make-vocab-size-divisible-by), for "
                     "aligned output-layer products; the losses do not "
                     "change"),
      llvm::cl::init(1)};
  Option<bool> fuseEpilogues{
      *this, "fuse-epilogues",
      llvm::cl::desc("Lower each linear layer's product, bias and tanh GELU "
                     "or ReLU as one matmul with an epilogue"),
      llvm::cl::init(true)};
  Option<bool> foldTokenMean{
      *this, "fold-token-mean",
      llvm::cl::desc("Fold the step's 1 / tokens into the gradient norm and "
                     "the clipping coefficient instead of dividing every "
                     "gradient by the step's token count "
                     "(--triad-autodiff=fold-token-mean; not with f16 loss "
                     "scaling)"),
      llvm::cl::init(true)};
  Option<bool> fuseOptimizer{
      *this, "fuse-optimizer",
      llvm::cl::desc("Run the optimizer step in few kernels "
                     "(--triad-fuse-optimizer): the gradient norm as one "
                     "sum of squares, every parameter's update and rounding "
                     "as one adamw"),
      llvm::cl::init(true)};
  Option<bool> fuseGradAccumulation{
      *this, "fuse-grad-accumulation",
      llvm::cl::desc("Add each weight gradient's product to its gradient "
                     "accumulator in its matmul (--triad-fuse-products="
                     "accumulate), without storing it rounded to 16 bits "
                     "first"),
      llvm::cl::init(true)};
  Option<bool> fuseProductAdds{
      *this, "fuse-product-adds",
      llvm::cl::desc("Add a product's result to the tensor an add adds it "
                     "to (a residual, another product's gradient of the "
                     "same input) in its matmul (--triad-fuse-products="
                     "adds), without storing it rounded to 16 bits first"),
      llvm::cl::init(true)};
  Option<std::string> costReport{
      *this, "cost-report",
      llvm::cl::desc("Write the partitioned program's cost report "
                     "(--triad-cost-report, every op) to this file"),
      llvm::cl::init("")};
  Option<std::string> stageReport{
      *this, "stage-report",
      llvm::cl::desc("Write the pipeline stages (pp > 1; the "
                     "triad-pipeline-split's report: layers, rank, FLOPs, "
                     "bytes) to this file"),
      llvm::cl::init("")};
};

/// Adds the passes of the training pipeline to `pm` (a module pass
/// manager). Options that are invalid or not supported yet add a pass that
/// fails with a message saying why.
void buildTrainPipeline(mlir::OpPassManager &pm,
                        const TrainPipelineOptions &options);

/// Registers --triad-train-pipeline.
void registerTrainPipeline();

} // namespace triad

#endif // TRIAD_PIPELINES_TRAINPIPELINE_H
