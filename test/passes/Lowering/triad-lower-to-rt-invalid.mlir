// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=pp=2 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff '--triad-lower-to-rt=order=dp,dp,tp' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=dtype=bf16 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: triad-gen --preset tiny --layers 1 --dtype f16 | not triad-opt --triad-train-pipeline 2>&1 | FileCheck %s --check-prefix=F16
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-lower-to-rt

// MESH: error: has no pipe.schedule; run --triad-pipeline-schedule first
// ORDER: error: order 'dp,dp,tp' must list dp, tp and pp once each
// DTYPE: error: 'triad.param' op is f32 but the pipeline asks for dtype=bf16; generate the model with that dtype
// NOSTEP: error: needs @microbatch_step and @apply_step; run --triad-autodiff first
// F16: error: 'triad.get_param' op has a value of type 'tensor<256x64xf16>'; the runtime runs static f32 tensors (and i32 token ids) only, so bf16 and f16 models do not lower yet

// Only splat f32 constants become fill kernels.
triad.param @w : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  // expected-error@+1 {{'arith.constant' op is not a splat f32 tensor; only those lower to the runtime}}
  %g = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  return %loss, %g : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}

// -----

// The runtime feeds tokens and labels only.
triad.param @w : tensor<2xf32> init <zeros>
// expected-error@+1 {{'func.func' op argument 1 is neither tokens nor labels (triad.input); the runtime feeds only those}}
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32>) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}

// -----

// The token count that weighs the microbatches comes from the loss.
triad.param @w : tensor<2xf32> init <zeros>
// expected-error@+1 {{'func.func' op computes no triad.cross_entropy loss}}
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %s = triad.sum_squares %w : tensor<2xf32>
  return %s, %w : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}

// -----

// Every argument of the apply step is a gradient the microbatch step makes.
triad.param @w : tensor<2xf32> init <zeros>
triad.param @u : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
// expected-error@+1 {{'func.func' op argument 0 is not the gradient of a parameter microbatch_step returns}}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @u}) {
  return
}

// -----

// A declared step has nothing to lower.
triad.param @w : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
// expected-error@+1 {{'func.func' op is only declared; lowering needs its body}}
func.func private @apply_step(tensor<2xf32> {triad.grad = @w})

// -----

// Each gradient is normalized once: one apply argument per gradient.
triad.param @w : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
// expected-error@+1 {{'func.func' op argument 1 repeats the gradient of @w}}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}, %h: tensor<2xf32> {triad.grad = @w}) {
  return
}
