//===- Passes.td - sharding passes ------------------------*- tablegen -*-===//
//
// From the training step on global shapes to per-rank computations on a
// device mesh (DESIGN.md section 4, passes 2-4).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_SHARDING_PASSES_TD
#define TRIAD_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def PadVocab : Pass<"triad-pad-vocab", "::mlir::ModuleOp"> {
  let summary = "Pads the vocabulary to a multiple of tp (times `multiple`)";
  let description = [{
    Megatron's vocabulary padding, on the forward model (before
    `--triad-autodiff`): where `tp` does not divide the vocabulary of a
    `triad.cross_entropy`, the parameters whose rows or columns are its
    vocabulary grow to the next multiple of `tp`, so that tensor
    parallelism can split the embedding table, the output layer and the
    logits along the vocabulary.

    The vocabulary is found from the loss backwards: the logits, the
    elementwise ops between them and the loss, the `triad.matmul` that
    makes them and the parameter (read with `triad.get_param`) that gives
    them their vocabulary dimension, a `triad.bias_add`'s bias too. Such a
    parameter may otherwise only be read as a `triad.embedding` table
    (tied embeddings), along the same dimension. A table only read by
    `triad.embedding` whose rows `tp` does not divide is padded too.

    With `multiple` above 1 (Megatron's `make-vocab-size-divisible-by`),
    a loss's vocabulary grows to a multiple of `multiple` times `tp` even on
    one rank, so that the output layer's products have aligned dimensions
    (a 16-bit product over GPT-2's 50,257 classes runs on a GPU's tensor
    cores at a fraction of their rate); tables only looked up are still
    padded to a multiple of `tp` alone.

    A padded parameter keeps its model shape as `unpadded`: its padding is
    zero, initialization and checkpoints see only the unpadded tensor. The
    cross entropy gets `classes` (the vocabulary before padding): padded
    columns take no part in the loss, and their gradient is 0, so the
    padding stays zero through training and the losses equal the unpadded
    model's. A vocabulary that is reached in any other way (another user of
    the logits, a parameter read otherwise) is left as it is: tensor
    parallelism then keeps it whole.

    Before (tp=2):

    ```mlir
    triad.param @embed.wte : tensor<255x64xf32> init <normal, std = 2.000000e-02>
    %l = triad.matmul %x, %t transpose_rhs : tensor<8x64x64xf32>, tensor<255x64xf32> -> tensor<8x64x255xf32>
    %c = triad.cross_entropy %l, %labels : tensor<8x64x255xf32>, tensor<8x64xi32> -> tensor<f32>
    ```

    After:

    ```mlir
    triad.param @embed.wte : tensor<256x64xf32> unpadded [255, 64] init <normal, std = 2.000000e-02>
    %l = triad.matmul %x, %t transpose_rhs : tensor<8x64x64xf32>, tensor<256x64xf32> -> tensor<8x64x256xf32>
    %c = triad.cross_entropy %l, %labels classes 255 : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks">,
    Option<"multiple", "multiple", "int64_t", "1",
           "Pad a loss's vocabulary to a multiple of this times tp">,
  ];
  let statistics = [
    Statistic<"numPadded", "padded-params", "Parameters padded">,
  ];
}

def SplitMicrobatches : Pass<"triad-split-microbatches", "::mlir::ModuleOp"> {
  let summary = "Rewrites the microbatch step to one microbatch's share of "
                "the batch";
  let description = [{
    The model IR's batch is the global batch of one optimizer step; the
    runtime calls `@microbatch_step` once per microbatch. This pass
    partitions `@microbatch_step` over a virtual mesh axis of `microbatches`
    pieces that run one after the other: the token and label arguments
    split their batch, every op gets its local shapes from its sharding
    rule, and the results that become partial (the loss, the weight
    gradients) are what the step's accumulation sums. A function that
    would need communication between microbatches is an error. Runs before
    `--triad-shard-propagate`, which then splits each microbatch over `dp`.

    Before (microbatches=2):

    ```mlir
    func.func @microbatch_step(%tokens: tensor<8x64xi32> {triad.input = "tokens"}, ...)
    ```

    After:

    ```mlir
    func.func @microbatch_step(%tokens: tensor<4x64xi32> {triad.input = "tokens"}, ...)
    ```
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", "1",
           "Microbatches per optimizer step">,
  ];
  let dependentDialects = ["::triad::dist::DistDialect"];
}

def ShardPropagate : Pass<"triad-shard-propagate", "::mlir::ModuleOp"> {
  let summary = "Gives every value of the training step a layout on the mesh";
  let description = [{
    Declares the module's `dist.mesh` from the options (unless the module
    already has one), then gives every tensor value of every function a
    `#dist.layout`, op by op in program order, from the op's sharding rule
    (the ShardingRuleOpInterface):

    - the token and label arguments split their batch dimension over `dp`;
    - parameters and state have the layout written on them by hand
      (`dist.layout`), else they are replicated;
    - an op's operand layouts decide which of its factors are split; its
      results are split along those factors and partial over the axes of
      split factors they lack (a weight gradient summed over a split
      batch is partial over `dp`);
    - the gradients `@apply_step` takes have the layouts `@microbatch_step`
      returns them with;
    - with `sp` (sequence parallelism, Megatron-LM's), an activation one
      forward layer passes to the next is split along its sequence over
      `tp`: norms, dropout and residual sums run on sequence pieces, the
      sequence is gathered before the weights split over `tp` (a
      parameter's split always wins over an activation's) and pending sums
      are reduce-scattered back into pieces.

    When two operands ask for the same mesh axis on different factors, the
    parameters' splits are taken first, then splits of factors a result
    keeps (a split reduced factor would leave a pending sum to
    communicate); the other operand is gathered.

    Layouts go into `dist.layouts` on each op and `dist.layout` on function
    arguments and results; shapes stay global. Axes of one rank split
    nothing, so on the 1x1x1 mesh every value is replicated.

    Before (dp=2):

    ```mlir
    func.func @microbatch_step(%tokens: tensor<8x64xi32> {triad.input = "tokens"}, ...)
      %w = triad.get_param @embed.wte : tensor<256x64xf32>
      %x = triad.embedding %tokens, %w : ...
    ```

    After:

    ```mlir
    dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 1]
    func.func @microbatch_step(%tokens: tensor<8x64xi32> {dist.layout = #dist.layout<{dp}, {}>, ...}, ...)
      %w = triad.get_param @embed.wte {dist.layouts = [#dist.layout<{}, {}>]} : tensor<256x64xf32>
      %x = triad.embedding %tokens, %w {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : ...
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "Data-parallel replicas">,
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline stages">,
    Option<"order", "order", "std::string", "\"dp,pp,tp\"",
           "Mesh axes from slowest to fastest varying across ranks">,
    Option<"sp", "sp", "bool", "false",
           "Sequence parallelism: split the activations between layers "
           "along the sequence over tp">,
  ];
  let dependentDialects = ["::triad::dist::DistDialect"];
}

def Zero : Pass<"triad-zero", "::mlir::ModuleOp"> {
  let summary = "Shards optimizer state, gradients and parameters over the "
                "data-parallel ranks (ZeRO stages 1-3)";
  let description = [{
    Marks with `dist.zero` what ZeRO splits over `dp`; `--triad-shard-propagate`
    chooses the dimension (the parameter's own layout with `dp` added on the
    first dimension that can take it) and `--triad-partition` inserts the
    collectives that follow. Nothing whose dimensions `dp` does not divide is
    split, and a layout given by hand is kept.

    - Stage 1: every optimizer state tensor kept for a parameter (the AdamW
      moments, `triad.state ... of @param`). Each data-parallel rank keeps and
      updates 1/dp of it: it updates its slice of every parameter
      (`dist.all_slice`, no communication) and the parameters are
      all-gathered after the update.
    - Stage 2: also the gradients `@microbatch_step` returns (`dist.zero` on
      its results). Each microbatch's gradient is reduce-scattered over `dp`
      where the backward completes it, so each rank accumulates only the
      1/dp its optimizer state updates, and the step's all_reduce of the
      gradients is gone.
    - Stage 3: also the parameters (`dist.zero` on `triad.param`). Each rank
      stores 1/dp of every parameter and updates it in place; the
      microbatch step all-gathers a parameter before each use, in forward
      and again in backward, and the gathered copy is a temporary freed
      after its last use.

    Before (zero=3, dp=2):

    ```mlir
    triad.param @w : tensor<4x8xf32> init <zeros>
    triad.state @m.w : tensor<4x8xf32> init <zeros> of @w
    func.func @microbatch_step(...) -> (..., tensor<4x8xf32> {triad.grad = @w})
    ```

    After:

    ```mlir
    triad.param @w : tensor<4x8xf32> init <zeros> {dist.zero}
    triad.state @m.w : tensor<4x8xf32> init <zeros> of @w {dist.zero}
    func.func @microbatch_step(...) -> (..., tensor<4x8xf32> {dist.zero, triad.grad = @w})
    ```
  }];
  let options = [
    Option<"zero", "zero", "int64_t", "0", "ZeRO stage (0-3)">,
    Option<"dp", "dp", "int64_t", "1", "Data-parallel replicas">,
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline stages">,
    Option<"order", "order", "std::string", "\"dp,pp,tp\"",
           "Mesh axes from slowest to fastest varying across ranks">,
  ];
  let statistics = [
    Statistic<"numSharded", "sharded-states", "Optimizer states split over dp">,
    Statistic<"numShardedGrads", "sharded-gradients",
              "Gradients reduce-scattered over dp">,
    Statistic<"numShardedParams", "sharded-params", "Parameters split over dp">,
  ];
  let dependentDialects = ["::triad::dist::DistDialect"];
}

def Partition : Pass<"triad-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrites the training step to one rank's local shapes and "
                "inserts the collectives the layouts require";
  let description = [{
    Reads the layouts `--triad-shard-propagate` chose and rewrites every
    op to the local shapes of one rank (the op's sharding rule builds its
    local form), inserting a collective wherever a value's layout differs
    from the one its user needs:

    - partial to replicated: `dist.all_reduce`;
    - partial to split: `dist.reduce_scatter` (after a `dist.all_reduce`
      over the pending axes that the target does not split over);
    - split to replicated: `dist.all_gather`;
    - replicated to split: `dist.all_slice` (no communication).

    Gradients that reach `@apply_step` partial are reduced once, at its
    start, in buckets of at most `bucket-bytes` bytes (one `dist.all_reduce`
    per bucket), after every microbatch has been accumulated; a gradient
    whose parameter's optimizer state ZeRO splits (ZeRO-1) is instead
    reduce-scattered there straight into the state's pieces (after a
    bucketed all-reduce over the pending axes its pieces do not split), so
    that the update and the gradient norm read pieces. A result
    returned in another layout than it is computed in (a ZeRO-2 gradient)
    is changed right after it is computed, so the collective overlaps with
    the rest of the function. Parameters keep their global types and
    layouts; a read yields the rank's stored piece, gathered right there
    when its users want it whole (ZeRO-3). The values the functions compute
    with are local.

    Before (dp=2, after shard-propagate):

    ```mlir
    func.func @apply_step(%g: tensor<64xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @b})
      %s = triad.sum_squares %g : tensor<64xf32>
    ```

    After:

    ```mlir
    func.func @apply_step(%g: tensor<64xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @b})
      %r = dist.all_reduce %g over ["dp"] : tensor<64xf32>
      %s = triad.sum_squares %r : tensor<64xf32>
    ```
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25 * 1024 * 1024",
           "Largest bucket of gradients reduced by one collective">,
    Option<"sp", "sp", "bool", "false",
           "Sequence parallelism (as given to --triad-shard-propagate): "
           "pending sums an op must reduce are reduce-scattered along the "
           "sequence">,
  ];
  let statistics = [
    Statistic<"numCollectives", "collectives", "Collectives inserted">,
  ];
  let dependentDialects = ["::triad::dist::DistDialect"];
}

#endif // TRIAD_PASSES_SHARDING_PASSES_TD
