//===- Passes.td - lowering to per-rank runtime programs ---*- tablegen -*-===//
//
// From the training step to the `rt` dialect (DESIGN.md section 4, pass 6),
// and the memory report read off the result.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_LOWERING_PASSES_TD
#define TRIAD_PASSES_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToRt : Pass<"triad-lower-to-rt", "::mlir::ModuleOp"> {
  let summary = "Lowers the training step to one rt.program per pipeline "
                "rank with a static memory plan";
  let description = [{
    Takes the module built by `--triad-autodiff` (`@microbatch_step`,
    `@apply_step`, parameters and training state) and replaces it with an
    `rt.plan` and one `rt.program` holding:

    - a persistent buffer per parameter and state, and an accumulator per
      gradient plus the step's loss sum and token count;
    - `@begin_step`, which zeroes the accumulators;
    - `@microbatch_step(tokens, labels)`: the forward and backward kernels
      with the layers flattened; the microbatch's count of non-ignored labels
      weighs its mean loss and each gradient as soon as the gradient is
      complete (`accumulate`), so the step's result is the mean over all its
      tokens whatever the number of microbatches;
    - `@apply_step`: divides the accumulators by the step's token count and
      runs the optimizer, updating parameters and state in place wherever no
      later kernel reads their old value (else it copies);
    - `rt.step`: begin, every microbatch, apply.

    Buffers are placed by a liveness-based memory plan: values whose
    lifetimes do not overlap share bytes, a reshape is a view of its input,
    and persistent tensors sit at fixed offsets below the temporaries.

    Before:

    ```mlir
    func.func @microbatch_step(%tokens: tensor<8x64xi32> {triad.input = "tokens"}, ...)
        -> (tensor<f32> {triad.output = "loss"}, tensor<256x64xf32> {triad.grad = @embed.wte}, ...)
    func.func @apply_step(%g0: tensor<256x64xf32> {triad.grad = @embed.wte}, ...) -> ...
    ```

    After:

    ```mlir
    rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 64 vocab 256 batch 8 microbatches 1
    rt.program @rank0 pipeline_rank 0 arena 1234567 {
      %0 = rt.buffer 0 : memref<256x64xf32>
      rt.persistent "embed.wte" parameter %0 global [256, 64] offsets [0, 0] init <normal, std = 2.000000e-02> : memref<256x64xf32>
      ...
      rt.func @microbatch_step args(%t, %l : memref<8x64xi32>, memref<8x64xi32>) kinds ["tokens", "labels"] results() names [] {
        rt.kernel count_valid(%l) -> (%n) ints [-100] : (memref<8x64xi32>) -> (memref<f32>)
        ...
      }
      rt.step [@begin_step, @microbatch_step, @apply_step] microbatches [0, 0, 0]
    }
    ```

    The mesh is the module's `dist.mesh` (from `--triad-shard-propagate`),
    or one built from the options. Collectives become kernels on
    communicator groups (`rt.plan ... groups`); an all_reduce of a gradient
    accumulator runs in place. Where the batch is split, the step's loss
    sum and token count are all-reduced before the division. The number of
    microbatch calls per step is `@microbatch_step`'s `triad.microbatches`
    (from `--triad-split-microbatches`).

    Under a pipeline (pp > 1) the step comes as the stage functions of
    `--triad-pipeline-materialize`, and each pipeline rank's program lowers
    them as they are: each is one `rt.func`, lowered at its first action
    and called by `rt.step` at every action of the rank's schedule, with
    the microbatch and the slot it works on. `pipe.stash` and
    `pipe.unstash` name one buffer, which gets as many copies (`slots N
    stride S`) as microbatches live in it at once; `pipe.send_tensor` and
    `pipe.recv_tensor` become point-to-point kernels (one tag per sending
    stage and direction); a forward counts its microbatch's labels, and
    every loss and gradient a stage function returns is weighed into its
    accumulator. The apply step exchanges a tied gradient's parts between
    the stages that hold them and reduces the loss and the gradient norm
    over `pp`.

    All-gathers and reduce-scatters over one group go in buckets of at most
    `bucket-bytes` (ZeRO's: the reduce-scatters of the gradients entering
    the apply step, the all-gathers of the updated parameters, which sink
    past the updates that follow them): one kernel with an input and an
    output per tensor, which the runtime moves as one collective.

    With `overlap-grad-reduce` (on by default), the in-place all-reduces of
    the gradient accumulators move from the start of the apply step into
    the backward of the step's last microbatch: each bucket (one
    `dist.all_reduce`) right after the accumulate that completes its last
    gradient, so that the buckets of the last layers reduce while the
    backward pass of the first ones runs, as PyTorch's DDP does. With one
    microbatch that is the microbatch step; with several, the step calls
    `@last_microbatch_step`, a copy of the microbatch step with the
    all-reduces (and its own temporaries), for the last one. Under a
    pipeline, the rank's last call before the apply step holds them (a
    copy of its function, `@backward_s0_last`, `@send_grad_s1_last`, where
    that is called more than once): the first stage's last backward right
    after each bucket is complete, a later stage's after it sends its last
    gradient, never before a transfer (NCCL runs a rank's collectives and
    transfers in order on one stream). One more function per rank, whatever
    the count, made only where data-parallel gradients move. An accumulator
    the apply step touches first (a tied embedding's parts exchanged
    between stages) is reduced in the apply step as before. The sums are the same; the
    accumulators of a bucket still lie side by side and move as one
    collective.

    A linear layer's product, bias and activation become one kernel
    (`fuse-epilogues`, on by default): a `triad.matmul` whose only use is
    the add of a bias vector of its last dimension lowers to a `matmul`
    with the bias as a third input and an epilogue code as its third int
    (`runtime/plan/KernelCodes.h`: 1 bias, 2 bias and tanh GELU, 3 bias and
    ReLU). The activation joins only where it is the tanh GELU or ReLU, the
    activations cuBLASLt's epilogues compute with the unfused kernels'
    formula (not the erf GELU, SiLU or the fast GELU); where the backward
    also reads the biased sum, the kernel writes it as a second result.
    The product (and a sum only the activation reads) gets no buffer:

    ```mlir
    rt.kernel matmul(%x, %w1, %b1) -> (%h, %pre) ints [0, 0, 2] : ...
    ```
  }];
  let options = [
    Option<"dp", "dp", "int64_t", "1", "Data-parallel replicas">,
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline stages">,
    Option<"order", "order", "std::string", "\"dp,pp,tp\"",
           "Mesh axes from slowest to fastest varying across ranks">,
    Option<"dtype", "dtype", "std::string", "\"\"",
           "Expected parameter element type (f32, bf16, f16); empty: the model's">,
    Option<"bucketBytes", "bucket-bytes", "int64_t", "25 * 1024 * 1024",
           "Most bytes of tensors one bucketed all_gather or reduce_scatter "
           "moves">,
    Option<"fuseEpilogues", "fuse-epilogues", "bool", "true",
           "Lower a product with its bias add, and the tanh GELU or ReLU "
           "that follows, as one matmul with an epilogue">,
    Option<"overlapGradReduce", "overlap-grad-reduce", "bool", "true",
           "All-reduce each bucket of gradients in the last microbatch's "
           "backward pass, as soon as its last gradient is accumulated, "
           "instead of at the start of the apply step">,
  ];
  let statistics = [
    Statistic<"numKernels", "kernels", "Kernel calls emitted">,
    Statistic<"numInPlace", "in-place-updates",
              "Persistent updates written in place">,
    Statistic<"numCopies", "persistent-copies",
              "Persistent updates that needed a copy">,
    Statistic<"arenaBytes", "arena-bytes", "Bytes of the arena">,
    Statistic<"numFusedEpilogues", "fused-epilogues",
              "Products lowered with their bias (and activation)">,
  ];
  let dependentDialects = ["::triad::rt::RtDialect", "::triad::dist::DistDialect"];
}

def FuseProducts : Pass<"triad-fuse-products", "::mlir::ModuleOp"> {
  let summary = "Adds to lowered products' results in their matmul";
  let description = [{
    Rewrites the kernels of every `rt.func` so that a product's result is
    not stored only for one kernel to add it to another tensor:

    - a weight gradient's product that only an `accumulate` adds to its
      gradient accumulator becomes one `matmul` with the accumulating
      epilogue (5) at the accumulate's place, reading the accumulator and
      the weight: `matmul(a, b, acc, w) -> (acc) ints [ta, tb, 5]`;
    - a product (with its bias or none) that only an `add` adds to a tensor
      of its shape and type becomes one `matmul` with an adding epilogue
      (6, or 7 after a bias) at the add's place, reading that tensor: a
      residual connection's add after its layer's output projection, or
      the sum of the gradients of one input of several products (attention's
      query, key and value projections).

    The product is not rounded to a 16-bit type before it is added, as the
    kernels rounded it (f32 programs keep their bits). The memory plan is
    kept: a rewrite applies only where no kernel between the two writes
    over the product's operands, nothing reads the product's bytes through
    another buffer, and the result's bytes are apart from the operands'
    (an addend's too, or exactly its). Each function's layer spans follow
    its kernels.

    Before:

    ```mlir
    rt.kernel matmul(%x, %wo, %bo) -> (%t) ints [0, 0, 1] : ...
    rt.kernel add(%residual, %t) -> (%h) : ...
    rt.kernel matmul(%dy, %h1) -> (%g) ints [1, 0] : ...
    rt.kernel accumulate(%acc, %g, %count) -> (%acc) : ...
    ```

    After:

    ```mlir
    rt.kernel matmul(%x, %wo, %bo, %residual) -> (%h) ints [0, 0, 7] : ...
    rt.kernel matmul(%dy, %h1, %acc, %count) -> (%acc) ints [1, 0, 5] : ...
    ```

    `--triad-train-pipeline` runs it after `--triad-lower-to-rt`, its
    `accumulate` and `adds` as `fuse-grad-accumulation` and
    `fuse-product-adds`.
  }];
  let options = [
    Option<"accumulate", "accumulate", "bool", /*default=*/"true",
           "Add weight gradients' products to their accumulators in their "
           "matmul">,
    Option<"adds", "adds", "bool", /*default=*/"true",
           "Add a product's addend (a residual, another product's gradient "
           "of the same input) in its matmul">,
  ];
  let statistics = [
    Statistic<"numAccumulatesFused", "accumulates-fused",
              "Products added to their accumulators by their matmul">,
    Statistic<"numAddsFused", "adds-fused",
              "Products added to an addend by their matmul">,
  ];
  let dependentDialects = ["::triad::rt::RtDialect"];
}

def FuseOptimizer : Pass<"triad-fuse-optimizer", "::mlir::ModuleOp"> {
  let summary = "Runs the lowered optimizer step in few kernels";
  let description = [{
    Rewrites the kernels of every `rt.func` without layer spans (the apply
    step; the forward and backward are left alone) so that the runtime
    launches few kernels for the optimizer step, with the same arithmetic:

    - a tree of `add` kernels totalling `sum_squares` kernels (the
      gradient norm's square) becomes one `sum_squares` over every tensor,
      at the root's place (the sums accumulate in double, as each tensor's
      did);
    - an `adamw` whose new parameter a later `cast` rounds to bf16 or f16
      writes the rounded copy itself, as a fourth output;
    - under f16 loss scaling, an `adamw` into temporaries that `select`
      kernels keep or drop (`select(skip, old, new) -> old` for the
      parameter, its moments and its rounded copy) becomes one `adamw` in
      place that reads the skip flag and writes nothing on a skipped step;
    - consecutive `adamw` kernels with the same lr, step, coefficient,
      betas and epsilon become one kernel over all their tensors, each with
      its own weight decay, split wherever a tensor's results would share
      bytes with another's operands.

    The memory plan is kept: a rewrite applies only where no kernel it
    crosses writes over what it moves (a buffer's arena bytes), and the
    partial sums' buffers go.

    Before:

    ```mlir
    rt.kernel sum_squares(%g0) -> (%s0) : (memref<64x32xf32>) -> memref<f32>
    rt.kernel sum_squares(%g1) -> (%s1) : (memref<32xf32>) -> memref<f32>
    rt.kernel add(%s0, %s1) -> (%t) : (memref<f32>, memref<f32>) -> memref<f32>
    ...
    rt.kernel adamw(%p0, %g0, %m0, %v0, %lr, %step, %c) -> (%p0, %m0, %v0) floats [0.9, 0.95, 1.0e-08, 0.1] : ...
    rt.kernel cast(%p0) -> (%w0) : (memref<64x32xf32>) -> memref<64x32xbf16>
    rt.kernel adamw(%p1, %g1, %m1, %v1, %lr, %step, %c) -> (%p1, %m1, %v1) floats [0.9, 0.95, 1.0e-08, 0.0] : ...
    rt.kernel cast(%p1) -> (%w1) : (memref<32xf32>) -> memref<32xbf16>
    ```

    After:

    ```mlir
    rt.kernel sum_squares(%g0, %g1) -> (%t) : (memref<64x32xf32>, memref<32xf32>) -> memref<f32>
    ...
    rt.kernel adamw(%p0, %g0, %m0, %v0, %p1, %g1, %m1, %v1, %lr, %step, %c)
        -> (%p0, %m0, %v0, %w0, %p1, %m1, %v1, %w1)
        floats [0.9, 0.95, 1.0e-08, 0.1, 0.0] : ...
    ```

    `--triad-train-pipeline` runs it after `--triad-lower-to-rt` unless
    `fuse-optimizer=false`.
  }];
  let statistics = [
    Statistic<"numSquaresFused", "squares-fused",
              "Trees of sums of squares made one kernel">,
    Statistic<"numSkipsFused", "skips-fused",
              "f16 updates whose selects became adamw's skip flag">,
    Statistic<"numRoundingFused", "rounding-fused",
              "Casts of updated parameters written by their adamw">,
    Statistic<"numUpdateGroups", "update-groups",
              "adamw kernels over several tensors">,
    Statistic<"numTensorsGrouped", "tensors-grouped",
              "Tensors updated by those kernels">,
  ];
  let dependentDialects = ["::triad::rt::RtDialect"];
}

def MemoryReport : Pass<"triad-memory-report", "::mlir::ModuleOp"> {
  let summary = "Prints the bytes each rank needs, from the compiled plan";
  let description = [{
    For every `rt.program` (run it after `--triad-lower-to-rt` or
    `--triad-train-pipeline`), prints the exact bytes of parameters,
    optimizer state, gradient accumulators, activations and other
    temporaries at their peak (the most bytes live at once in any function),
    kernel workspace, and the arena that holds them all, before anything
    runs. The IR is not changed. Output goes to stdout, or to `file`.

    ```
    triad memory report: rank 0 (pipeline rank 0)
      parameters          105.2 KiB   107,776 B
      ...
    ```
  }];
  let options = [
    Option<"file", "file", "std::string", "\"-\"",
           "Where to write the report ('-': stdout)">,
  ];
}

def CommReport : Pass<"triad-comm-report", "::mlir::ModuleOp"> {
  let summary = "Lists every collective of one optimizer step, from the "
                "compiled plan";
  let description = [{
    For every `rt.program` (run it after `--triad-lower-to-rt` or
    `--triad-train-pipeline`), prints each collective kernel with the
    function that runs it and how often one step calls that function (once
    per microbatch for `@microbatch_step`), its communicator group and
    ranks, the bytes of the tensor it moves, and why the sharding passes put
    it there (the layout change and the op that needed it). Totals per
    group close the report. The IR is not changed. Output goes to stdout,
    or to `file`.

    ```
    triad comm report: program @rank0 (pipeline rank 0), one optimizer step
      function         calls  collective     group    ranks          bytes  why
      apply_step           1  all_reduce     dp           2             68  the step's loss sum and token count, partial over dp
      apply_step           1  all_reduce     dp           2        482,304  gradients entering @apply_step, partial over dp: 36 tensors in one bucket
      total over dp              482,372 B per step
    ```
  }];
  let options = [
    Option<"file", "file", "std::string", "\"-\"",
           "Where to write the report ('-': stdout)">,
  ];
}

#endif // TRIAD_PASSES_LOWERING_PASSES_TD
