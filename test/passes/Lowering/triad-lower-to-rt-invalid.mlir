// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=pp=2 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff '--triad-lower-to-rt=order=dp,dp,tp' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=dtype=bf16 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-lower-to-rt

// Pipelined steps whose stage transfers do not fit their stages (edited
// output of split and schedule on a 2-layer model at pp=2).
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 64 | triad-opt --triad-autodiff --triad-pipeline-split=pp=2 --triad-pipeline-schedule -o %t.pipe.mlir
// RUN: sed 's/%2 = pipe.transfer %1#0 from 0 to 1/%2 = pipe.transfer %1#0 from 1 to 0/' %t.pipe.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=FROM
// RUN: sed 's/%7 = pipe.transfer %6#0 from 1 to 0/%7 = pipe.transfer %6#0 from 1 to 2/' %t.pipe.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=DIRECTION
// RUN: sed '/%2 = pipe.transfer/d; s/(%2)/(%1#0)/; s/(%2, /(%1#0, /' %t.pipe.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=UNSENT
// RUN: sed 's/triad.layer transformer 0 (%0) {pipe.stage = 0 : i64}/triad.layer transformer 0 (%0) {pipe.stage = 1 : i64}/; s/%2 = pipe.transfer %1#0 from 0 to 1/%2 = pipe.transfer %1#0 from 1 to 2/' %t.pipe.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=BEYOND
// RUN: sed 's/{pipe.stage = 1 : i64}/{pipe.stage = 5 : i64}/' %t.pipe.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=STAGE

// MESH: error: has no pipe.schedule; run --triad-pipeline-schedule first
// ORDER: error: order 'dp,dp,tp' must list dp, tp and pp once each
// DTYPE: error: 'triad.param' op is f32 but the pipeline asks for dtype=bf16; generate the model with that dtype
// NOSTEP: error: needs @microbatch_step and @apply_step; run --triad-autodiff first
// FROM: error: 'pipe.transfer' op moves a value from stage 1, which stage 0 computes
// DIRECTION: error: 'pipe.transfer' op moves a gradient from stage 1 to stage 2; activations go to the next stage, gradients to the previous one
// UNSENT: error: 'triad.layer_norm' op on pipeline stage 1 reads a value of stage 0 that no pipe.transfer brings to it
// BEYOND: error: 'pipe.transfer' op moves a value to stage 2 of 2
// STAGE: error: 'triad.layer' op has no pipeline stage below 2 (pipe.stage); run --triad-pipeline-split for the schedule's stages

// Only f32 constants become fill or values kernels.
triad.param @w : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  // expected-error@+1 {{'arith.constant' op is not an f32 tensor; only those lower to the runtime}}
  %c = arith.constant dense<[1, 2]> : tensor<2xi32>
  %g = triad.cast %c : tensor<2xi32> -> tensor<2xf32>
  return %loss, %g : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}

// -----

// The runtime holds f32, bf16, f16 and i32 tensors only.
triad.param @w : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  // expected-error@+1 {{'arith.constant' op has a value of type 'tensor<2xf64>'; the runtime runs static f32, bf16 and f16 tensors (and i32 token ids) only}}
  %c = arith.constant dense<1.0> : tensor<2xf64>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}

// -----

// The runtime feeds tokens, labels and prefix lengths only.
triad.param @w : tensor<2xf32> init <zeros>
// expected-error@+1 {{'func.func' op argument 1 is neither tokens, labels nor prefix_lengths (triad.input); the runtime feeds only those}}
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

// -----

// A prefix LM's prefix lengths are one i32 per sample.
triad.param @w : tensor<2xf32> init <zeros>
// expected-error@+1 {{'func.func' op argument 2 (prefix_lengths) must be i32 [batch], got 'tensor<1x2xi32>'}}
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}, %p: tensor<1x2xi32> {triad.input = "prefix_lengths"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}

// -----

// The prefix lengths cover the tokens' samples.
triad.param @w : tensor<2xf32> init <zeros>
// expected-error@+1 {{'func.func' op prefix_lengths hold 3 samples but the tokens 1}}
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}, %p: tensor<3xi32> {triad.input = "prefix_lengths"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}) {
  return
}
