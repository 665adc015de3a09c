// RUN: triad-opt %s -split-input-file --triad-partition | FileCheck %s
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate=dp=2 --triad-partition | FileCheck %s --check-prefix=STEP
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate=dp=2 '--triad-partition=bucket-bytes=64' | FileCheck %s --check-prefix=BUCKETS
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-partition 2>&1 | FileCheck %s --check-prefix=NOMESH
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate=dp=2 '--triad-partition=bucket-bytes=0' 2>&1 | FileCheck %s --check-prefix=ZERO

// NOMESH: error: the module has no dist.mesh; run --triad-shard-propagate first
// ZERO: error: bucket-bytes must be at least 1

// Local shapes, and the collective each change of layout needs: pending
// sums entering a function are all-reduced at its start, a pending sum
// before a nonlinear op is all-reduced, a split operand an op needs whole is
// all-gathered, and a whole operand an op needs split is sliced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @collectives
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4x4xf32> {{.*}}, %[[P:[a-z0-9]+]]: tensor<4x8xf32> {{.*}}, %[[S:[a-z0-9]+]]: tensor<2x8xf32> {{.*}}, %[[W:[a-z0-9]+]]: tensor<4x8xf32>, %[[H:[a-z0-9]+]]: tensor<4x8xf32>)
// CHECK-SAME: -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>, tensor<4x8xf32>)
func.func @collectives(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>},
                       %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                       %s: tensor<4x8xf32> {dist.layout = #dist.layout<{tp}, {}>},
                       %w: tensor<4x8xf32>,
                       %h: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: %[[R:.*]] = dist.all_reduce %[[P]] over ["tp"] {{.*}} : tensor<4x8xf32>
  // CHECK: triad.gelu %[[R]] {{.*}} : tensor<4x8xf32>
  %g = triad.gelu %p {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32>
  // CHECK: %[[D:.*]] = triad.scale %[[S]]
  // CHECK: %[[E:.*]] = triad.sum %[[D]] dims = [0] {{.*}} : tensor<2x8xf32> -> tensor<8xf32>
  // CHECK: %[[F:.*]] = dist.all_reduce %[[E]] over ["tp"] {{.*}} : tensor<8xf32>
  // CHECK: triad.relu %[[F]]
  %d = triad.scale %s by 2.0 {dist.layouts = [#dist.layout<{tp}, {}>]} : tensor<4x8xf32>
  %e = triad.sum %d dims = [0] {dist.layouts = [#dist.layout<{}, partial = {tp}>]} : tensor<4x8xf32> -> tensor<8xf32>
  %f = triad.relu %e {dist.layouts = [#dist.layout<{}>]} : tensor<8xf32>
  %fb = triad.broadcast %f {dist.layouts = [#dist.layout<{}, {}>]} : tensor<8xf32> -> tensor<4x8xf32>
  %w2 = triad.sum %w dims = [0] {dist.layouts = [#dist.layout<{}>]} : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: %[[G:.*]] = dist.all_gather %[[X]] dim 1 over ["tp"] {{.*}} : tensor<4x4xf32> -> tensor<4x8xf32>
  // CHECK: triad.rms_norm %[[G]]
  %n = triad.rms_norm %x, %w2 {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: %[[K:.*]] = dist.all_slice %[[H]] dim 0 over ["tp"] {{.*}} : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK: triad.mul %[[S]], %[[K]] {{.*}} : tensor<2x8xf32>
  %m = triad.mul %s, %h {dist.layouts = [#dist.layout<{tp}, {}>]} : tensor<4x8xf32>
  return %g, %n, %m, %fb : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// The training step on dp=2: each rank's microbatch step runs on half the
// batch without communicating; the apply step reduces the gradients once,
// in one bucket.
// STEP-LABEL: func.func @microbatch_step
// STEP-SAME: tensor<2x4xi32>
// STEP-NOT: dist.all
// STEP-LABEL: func.func @apply_step
// STEP: dist.all_reduce %arg0, %arg1 over ["dp"] {{.*}}dist.reason = "gradients entering @apply_step, partial over dp: 2 tensors in one bucket"
// STEP-NOT: dist.all_reduce

// A bucket holds at most bucket-bytes: the 512-byte and 32-byte gradients
// are reduced apart.
// BUCKETS-LABEL: func.func @apply_step
// BUCKETS: dist.all_reduce %arg0 over ["dp"]
// BUCKETS: dist.all_reduce %arg1 over ["dp"]
