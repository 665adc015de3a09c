// --triad-split-microbatches: the microbatch step on one microbatch's share
// of the batch, the rest of the module unchanged, and its errors.
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 | FileCheck %s
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 | FileCheck %s --check-prefix=NODIST
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=4 | FileCheck %s --check-prefix=FOUR
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=1 | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-split-microbatches=microbatches=2 | FileCheck %s --check-prefix=HAND
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=3 2>&1 | FileCheck %s --check-prefix=THREE
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not triad-opt %S/Inputs/step.mlir --triad-split-microbatches=microbatches=2 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 --triad-split-microbatches=microbatches=2 2>&1 | FileCheck %s --check-prefix=TWICE

// THREE: error: 'func.func' op batch 4 of argument 0 is not divisible by microbatches=3
// ZERO: error: microbatches must be at least 1
// NOSTEP: error: needs @microbatch_step; run --triad-autodiff first
// TWICE: error: 'func.func' op is already split into microbatches

// The microbatch step of Inputs/step.mlir runs on half the batch (4 -> 2
// samples) inside and out, records how many calls make a step, and leaves
// no layout or mesh behind; the parameters, the gradients' shapes, @forward
// and @apply_step are unchanged.
// NODIST-NOT: dist.
// CHECK: triad.param @wte : tensor<16x8xf32>
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.*}}: tensor<4x4xi32> {triad.input = "tokens"}, %{{.*}}: tensor<4x4xi32> {triad.input = "labels"})
// CHECK-NOT: triad.microbatches
// CHECK-LABEL: func.func @microbatch_step
// CHECK-SAME: (%{{.*}}: tensor<2x4xi32> {triad.input = "tokens"}, %{{.*}}: tensor<2x4xi32> {triad.input = "labels"})
// CHECK-SAME: -> (tensor<f32> {triad.output = "loss"}, tensor<16x8xf32> {triad.grad = @wte}, tensor<8xf32> {triad.grad = @g})
// CHECK-SAME: attributes {triad.microbatches = 2 : i64}
// CHECK: triad.layer embedding 0 (%{{.*}}) : (tensor<2x4xi32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<2x4xi32>):
// CHECK: triad.embedding %{{.*}}, %{{.*}} : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
// CHECK: triad.cross_entropy %{{.*}}, %{{.*}} : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
// CHECK: triad.reshape %{{.*}} : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK: triad.matmul %{{.*}}, %{{.*}} transpose_lhs : tensor<8x16xf32>, tensor<8x8xf32> -> tensor<16x8xf32>
// CHECK: triad.embedding_grad %{{.*}}, %{{.*}} : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
// CHECK-LABEL: func.func @apply_step
// CHECK-SAME: (%{{.*}}: tensor<16x8xf32> {triad.grad = @wte}, %{{.*}}: tensor<8xf32> {triad.grad = @g})
// CHECK-NOT: triad.microbatches
// CHECK: triad.sum_squares %{{.*}} : tensor<16x8xf32>
// CHECK: triad.adamw_update {{.*}} : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>

// Four microbatches of one sample each.
// FOUR-LABEL: func.func @microbatch_step
// FOUR-SAME: (%{{.*}}: tensor<1x4xi32> {triad.input = "tokens"}, %{{.*}}: tensor<1x4xi32> {triad.input = "labels"})
// FOUR-SAME: attributes {triad.microbatches = 4 : i64}

// One microbatch changes nothing (the lowering's default is one call).
// ONE-LABEL: func.func @microbatch_step
// ONE-SAME: tensor<4x4xi32>
// ONE-NOT: triad.microbatches

// A step by hand: only the data arguments (triad.input) with a batch
// split; other arguments, a weight gradient and a loss summed over the
// batch keep their shapes (each microbatch's result is a term of the
// step's accumulated sum).
triad.param @w : tensor<8x8xf32> init <zeros>
// HAND-LABEL: func.func @microbatch_step
// HAND-SAME: (%[[X:[a-z0-9]+]]: tensor<2x8xf32> {triad.input = "tokens"}, %[[B:[a-z0-9]+]]: tensor<8xf32>, %{{.*}}: tensor<f32> {triad.input = "scale"})
// HAND-SAME: -> (tensor<2x8xf32> {triad.output = "h"}, tensor<8x8xf32> {triad.grad = @w}, tensor<f32> {triad.output = "loss"})
// HAND-SAME: attributes {triad.microbatches = 2 : i64}
func.func @microbatch_step(%x: tensor<4x8xf32> {triad.input = "tokens"}, %bias: tensor<8xf32>, %s: tensor<f32> {triad.input = "scale"})
    -> (tensor<4x8xf32> {triad.output = "h"}, tensor<8x8xf32> {triad.grad = @w}, tensor<f32> {triad.output = "loss"}) {
  // HAND: %[[W:.*]] = triad.get_param @w : tensor<8x8xf32>
  %w = triad.get_param @w : tensor<8x8xf32>
  // HAND: %[[H:.*]] = triad.matmul %[[X]], %[[W]] : tensor<2x8xf32>, tensor<8x8xf32> -> tensor<2x8xf32>
  %h = triad.matmul %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  // HAND: %[[HB:.*]] = triad.bias_add %[[H]], %[[B]] : tensor<2x8xf32>, tensor<8xf32>
  %b = triad.bias_add %h, %bias : tensor<4x8xf32>, tensor<8xf32>
  // HAND: triad.matmul %[[X]], %[[HB]] transpose_lhs : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<8x8xf32>
  %g = triad.matmul %x, %b transpose_lhs : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  // HAND: triad.sum %[[HB]] dims = [0, 1] : tensor<2x8xf32> -> tensor<f32>
  %l = triad.sum %b dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  return %b, %g, %l : tensor<4x8xf32>, tensor<8x8xf32>, tensor<f32>
}
// HAND-LABEL: func.func @apply_step
// HAND-SAME: tensor<8x8xf32> {triad.grad = @w}
func.func @apply_step(%g: tensor<8x8xf32> {triad.grad = @w}) {
  return
}

// -----

// A step that needs the whole batch at once cannot be split: a mean over
// the batch divides by its global size.
func.func @microbatch_step(%x: tensor<4x8xf32> {triad.input = "tokens"}) -> (tensor<8xf32> {triad.output = "loss"}) {
  // expected-error @+1 {{needs communication between the pieces of mesh axis 'microbatch' (from #dist.layout<{microbatch}, {}> to #dist.layout<{}, {}>), which cannot have any}}
  %m = triad.mean %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  return %m : tensor<8xf32>
}

// -----

// Nor can a sum over the batch be used inside the step.
func.func @microbatch_step(%x: tensor<4x8xf32> {triad.input = "tokens"}) -> (tensor<4x8xf32> {triad.output = "loss"}) {
  %p = triad.sum %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // expected-error @+1 {{needs communication between the pieces of mesh axis 'microbatch' (from #dist.layout<{}, partial = {microbatch}> to #dist.layout<{}>), which cannot have any}}
  %r = triad.bias_add %x, %p : tensor<4x8xf32>, tensor<8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// A broadcast to the batch (CodeGeeX's top-query layer repeats its learned
// queries for every sample) makes only its microbatch's copies: the new
// dimension splits like the batch, with no communication.
// HAND-LABEL: func.func @microbatch_step
// HAND-SAME: (%[[TOK:[a-z0-9]+]]: tensor<2x4x8xf32> {triad.input = "tokens"})
func.func @microbatch_step(%x: tensor<4x4x8xf32> {triad.input = "tokens"}) -> (tensor<4x4x8xf32> {triad.output = "h"}) {
  %q = triad.get_param @q : tensor<4x8xf32>
  // HAND: %[[Q:.*]] = triad.broadcast %{{.*}} : tensor<4x8xf32> -> tensor<2x4x8xf32>
  %b = triad.broadcast %q : tensor<4x8xf32> -> tensor<4x4x8xf32>
  // HAND: triad.add %[[Q]], %[[TOK]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %h = triad.add %b, %x : tensor<4x4x8xf32>, tensor<4x4x8xf32>
  return %h : tensor<4x4x8xf32>
}
triad.param @q : tensor<4x8xf32> init <zeros>
