//===- Passes.td - automatic differentiation ---------------*- tablegen -*-===//
//
// Builds the training step from the forward model (DESIGN.md section 4,
// pass 1).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_AUTODIFF_PASSES_TD
#define TRIAD_PASSES_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def Autodiff : Pass<"triad-autodiff", "::mlir::ModuleOp"> {
  let summary = "Builds the training step: microbatch step (forward, loss, "
                "backward) and apply step (AdamW)";
  let description = [{
    From a forward function that returns a scalar f32 loss, builds
    `@microbatch_step` with the same arguments, returning the loss and one
    gradient per parameter (in declaration order, each result marked
    `triad.grad = @param`). The forward function is left as it is.

    Gradients come from the ops' gradient rules (the VjpOpInterface), in
    reverse order; a value used several times sums its gradients; integer
    values get none. Each forward `triad.layer` gets a `backward` twin that
    takes the gradients of the layer's results and returns the gradients of
    its inputs and of the parameters it reads, so pipeline stages and the
    memory planner see the per-layer structure of the backward pass too.
    Tied parameters read by several layers add their gradients.

    What a backward layer needs from its forward layer is chosen by
    `recompute`:
    - `none`: the forward layer also returns every intermediate value the
      gradient rules read (parameters and constants are read again);
    - `selective`: the same, except the attention core, which the backward
      layer recomputes from the saved queries, keys and values;
    - `full`: only the layer inputs are kept; the backward layer recomputes
      the whole forward layer first.
    All three give the same gradients.

    It also builds `@apply_step`, which takes one gradient per parameter
    (the mean-loss gradient of the whole optimizer step; accumulating
    microbatches weights each by its share of the step's non-ignored
    tokens) and updates the parameters with AdamW: it increments
    `@optimizer.step`, computes the learning rate (linear warmup, cosine
    decay to `min-lr`), clips the gradients to a global norm of `clip-norm`
    (each gradient contributes its sum of squares, so sharded gradients can
    reduce their parts), updates the f32 moments `@adam.m.*`/`@adam.v.*`
    (declared as `triad.state ... of @param`) and the parameters, with
    decoupled weight decay on every parameter of rank 2 or more (norm
    weights and biases are not decayed). It returns the gradient norm, the
    learning rate and whether the step was skipped.

    With `fold-token-mean`, `@apply_step` takes the gradients as sums over
    the step's tokens and, as its last argument (marked `triad.mean_scale`),
    the step's 1 / tokens: the mean gradient is that factor times the sum,
    so the sum of squares is scaled by its square and the clipping
    coefficient AdamW applies by the factor itself, and no gradient is
    divided on its own (a read and a write of every gradient less). With
    loss scaling (f16) the option does nothing: the overflow check compares
    each mean gradient element with f16's range.

    Mixed precision: a bf16 or f16 parameter is updated through an f32
    master copy (`@master.*`, state of the parameter, starting from its
    values) and written back rounded. With f16 parameters the backward pass
    starts from `@loss_scale` (initially `loss-scale`, 2^16 by default)
    instead of 1; the apply step
    unscales the gradients, and when their scaled norm overflowed it skips
    the step (every value is kept) and halves the scale, which doubles again
    after 1000 good steps. Where the step's loss is the mean of
    `loss-pieces` microbatch losses (microbatches times data-parallel
    ranks, as the train pipeline sets it), each backward starts from
    `@loss_scale / loss-pieces`: a piece's scaled gradients are then its
    share of the step's, as large per token as on one rank with one
    microbatch, so a mesh overflows where one rank does and not before; the
    apply step unscales by `loss-pieces / @loss_scale`. The summed scaled
    gradients' norm is taken with `limit = 65504 / loss-pieces`: an element
    that would not fit f16 in one rank's gradient of the whole step
    overflows the step on every mesh too.

    A parameter the loss does not depend on, a function without a scalar
    loss, an op without a gradient rule or an invalid optimizer option is an
    error that names it.

    Before:

    ```mlir
    func.func @forward(%x: tensor<2x4xi32>, %y: tensor<2x4xi32>) -> tensor<f32> {
      %h = triad.layer embedding 0 (%x) : ... { ... }
      %loss = triad.layer head 0 (%h, %y) : ... -> tensor<f32> { ... }
      return %loss : tensor<f32>
    }
    ```

    After (`@forward` unchanged):

    ```mlir
    func.func @microbatch_step(%x: tensor<2x4xi32>, %y: tensor<2x4xi32>)
        -> (tensor<f32>, tensor<16x8xf32> {triad.grad = @wte}) {
      %h = triad.layer embedding 0 (%x) : ... { ... }
      %loss, %saved = triad.layer head 0 (%h, %y) : ... { ... }
      %one = arith.constant dense<1.0> : tensor<f32>
      %dh, %dw1 = triad.layer head 0 backward (%saved, %one) : ... { ... }
      %dw0 = triad.layer embedding 0 backward (%x, %dh) : ... { ... }
      %dw = triad.add %dw1, %dw0 : ...
      return %loss, %dw : tensor<f32>, tensor<16x8xf32>
    }
    ```
  }];
  let options = [
    Option<"functionName", "function", "std::string", "\"forward\"",
           "The forward function to differentiate">,
    Option<"stepName", "step", "std::string", "\"microbatch_step\"",
           "Name of the function to create">,
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "What the backward pass recomputes: none, selective or full">,
    Option<"applyName", "apply", "std::string", "\"apply_step\"",
           "Name of the optimizer step function to create">,
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"",
           "The optimizer (adamw)">,
    Option<"lr", "lr", "double", "3.0e-4", "Peak learning rate">,
    Option<"minLr", "min-lr", "double", "0.0",
           "Learning rate at the end of the cosine decay">,
    Option<"warmup", "warmup", "int64_t", "0",
           "Steps of linear learning-rate warmup">,
    Option<"decaySteps", "decay-steps", "int64_t", "-1",
           "Step at which the cosine decay reaches min-lr: -1 (default) the "
           "run's last step (triad-run's --steps), 0 no decay">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.95", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double", "1.0e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.1",
           "Decoupled weight decay of parameters of rank 2 or more">,
    Option<"clipNorm", "clip-norm", "double", "1.0",
           "Global gradient-norm clipping threshold (0: no clipping)">,
    Option<"lossScale", "loss-scale", "double", "65536.0",
           "f16 models: the dynamic loss scale's first value (at least 1)">,
    Option<"lossPieces", "loss-pieces", "int64_t", "1",
           "f16 models: how many microbatch losses (microbatches times "
           "data-parallel ranks) the step's loss is the token-weighted mean "
           "of; each backward starts from loss-scale / loss-pieces">,
    Option<"foldTokenMean", "fold-token-mean", "bool", "false",
           "The apply step takes the gradients' token sums and the step's "
           "1 / tokens (its last argument, triad.mean_scale) and folds that "
           "factor into the gradient norm and the clipping coefficient, "
           "instead of taking mean gradients (not with f16 loss scaling)">,
    Option<"gradAccumulation", "grad-accumulation", "std::string",
           "\"f32\"",
           "16-bit models: the type gradients are summed in over "
           "microbatches and data-parallel ranks: f32 (default, Megatron's "
           "main_grad) or param (the parameter's own type: 2 bytes less "
           "per parameter, rounded at every sum)">,
  ];
  let dependentDialects = ["::triad::TriadDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // TRIAD_PASSES_AUTODIFF_PASSES_TD
