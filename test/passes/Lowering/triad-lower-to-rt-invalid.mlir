// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=pp=2 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff '--triad-lower-to-rt=order=dp,dp,tp' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=dtype=bf16 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt=bucket-bytes=0 2>&1 | FileCheck %s --check-prefix=BUCKET
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-lower-to-rt

// Pipelined steps: the stage functions of --triad-pipeline-materialize
// (edited output on a 2-layer model at pp=2), or a step never cut into them.
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 2 --seq 8 --batch 4 --vocab 64 | triad-opt --triad-autodiff --triad-pipeline-split=pp=2 --triad-pipeline-schedule -o %t.pipe.mlir
// RUN: triad-opt %t.pipe.mlir --triad-pipeline-materialize -o %t.stages.mlir
// RUN: not triad-opt %t.pipe.mlir --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=WHOLE
// RUN: sed 's/@microbatch_step(/@unused_step(/' %t.pipe.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=NO-STAGES
// RUN: sed '/@send_act_s0/,/return/ s/pipe.unstash 0 :/pipe.unstash 40 :/' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=UNKEPT
// RUN: sed '/@send_act_s0/,/return/ s/tensor<4x8x32xf32>/tensor<4x8x16xf32>/g' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=KEPT-TYPE
// RUN: sed '/@forward_s0/,/return/ s/ as 2 :/ as 0 :/' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=KEPT-TWICE
// RUN: sed 's/@forward_s1(%arg0: tensor<4x8xi32> {triad.input = "labels"}/@forward_s1(%arg0: tensor<4x8xi32> {triad.input = "tokens"}/' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=NO-LABELS
// RUN: sed 's/{triad.output = "loss"}) attributes {pipe.stage = 1/{triad.output = "lost"}) attributes {pipe.stage = 1/' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=RESULT
// RUN: sed '/@send_act_s0/,/return/ { s/@send_act_s0() attributes/@send_act_s0() -> tensor<4x8x32xf32> attributes/; s/return$/return %0 : tensor<4x8x32xf32>/; }' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=SEND-RESULT
// RUN: sed 's/attributes {pipe.stage = 1 : i64, pipe.work = "forward"}/attributes {pipe.stage = 7 : i64, pipe.work = "forward"}/' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: sed '/func.func @backward_s1/ s/pipe.work = "backward"/pipe.work = "forward"/' %t.stages.mlir | not triad-opt --triad-lower-to-rt 2>&1 | FileCheck %s --check-prefix=REPEAT

// MESH: error: has no pipe.schedule; run --triad-pipeline-schedule first
// ORDER: error: order 'dp,dp,tp' must list dp, tp and pp once each
// DTYPE: error: 'triad.param' op is f32 but the pipeline asks for dtype=bf16; generate the model with that dtype
// A bucket holds at least a byte.
// BUCKET: error: bucket-bytes must be at least 1, not 0
// NOSTEP: error: needs @microbatch_step and @apply_step; run --triad-autodiff first
// WHOLE: error: 'func.func' op is still whole; run --triad-pipeline-materialize to cut it into the schedule's stage functions
// NO-STAGES: error: has no stage functions; run --triad-pipeline-materialize after --triad-pipeline-schedule
// UNKEPT: error: 'pipe.unstash' op reads kept value 40, which no earlier function of pipeline stage 0 keeps
// KEPT-TYPE: error: 'pipe.unstash' op reads kept value 0 as 'tensor<4x8x16xf32>', but pipeline stage 0 keeps a 'memref<4x8x32xf32>' there
// KEPT-TWICE: error: 'pipe.stash' op keeps value 0, which pipeline stage 0 keeps already
// NO-LABELS: error: 'func.func' op takes no labels argument; a forward counts its microbatch's tokens
// RESULT: error: 'func.func' op result 0 is neither a gradient nor the loss
// SEND-RESULT: error: 'func.func' op returns values; a send_activation function returns none
// STAGE: error: 'func.func' op is a function of pipeline stage 7, but the schedule runs 2 stages
// REPEAT: error: 'func.func' op repeats the forward function of pipeline stage 1

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

// The step's 1 / tokens, which an apply step that folds the token mean
// takes, is an f32 scalar.
triad.param @w : tensor<2xf32> init <zeros>
func.func @microbatch_step(%x: tensor<1x2xi32> {triad.input = "tokens"}, %y: tensor<1x2xi32> {triad.input = "labels"}) -> (tensor<f32> {triad.output = "loss"}, tensor<2xf32> {triad.grad = @w}) {
  %w = triad.get_param @w : tensor<2xf32>
  %l = triad.broadcast %w : tensor<2xf32> -> tensor<1x2x2xf32>
  %loss = triad.cross_entropy %l, %y : tensor<1x2x2xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss, %w : tensor<f32>, tensor<2xf32>
}
// expected-error@+1 {{'func.func' op argument 1 (the step's 1 / tokens) must be an f32 scalar}}
func.func @apply_step(%g: tensor<2xf32> {triad.grad = @w}, %mean: tensor<2xf32> {triad.mean_scale}) {
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
