// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 | FileCheck %s
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=1 | FileCheck %s --check-prefix=ONE
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=3 2>&1 | FileCheck %s --check-prefix=THREE
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not triad-opt %S/Inputs/step.mlir --triad-split-microbatches=microbatches=2 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-split-microbatches=microbatches=2 --triad-split-microbatches=microbatches=2 2>&1 | FileCheck %s --check-prefix=TWICE

// The microbatch step runs on half the batch (4 -> 2 samples), records how
// many calls make a step, and leaves no layout behind; the apply step, the
// parameters and the gradients' shapes are unchanged.
// CHECK-NOT: dist.
// CHECK-LABEL: func.func @microbatch_step
// CHECK-SAME: (%{{.*}}: tensor<2x4xi32> {triad.input = "tokens"}, %{{.*}}: tensor<2x4xi32> {triad.input = "labels"})
// CHECK-SAME: -> (tensor<f32> {triad.output = "loss"}, tensor<16x8xf32> {triad.grad = @wte}, tensor<8xf32> {triad.grad = @g})
// CHECK-SAME: attributes {triad.microbatches = 2 : i64}
// CHECK: triad.embedding %{{.*}}, %{{.*}} : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
// CHECK: triad.cross_entropy %{{.*}}, %{{.*}} : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
// CHECK-LABEL: func.func @apply_step
// CHECK-SAME: tensor<16x8xf32> {triad.grad = @wte}

// One microbatch changes nothing (the lowering's default is one call).
// ONE-LABEL: func.func @microbatch_step
// ONE-SAME: tensor<4x4xi32>
// ONE-NOT: triad.microbatches

// THREE: error: 'func.func' op batch 4 of argument 0 is not divisible by microbatches=3
// ZERO: error: microbatches must be at least 1
// NOSTEP: error: needs @microbatch_step; run --triad-autodiff first
// TWICE: error: 'func.func' op is already split into microbatches
