// --triad-partition: local types from the layouts, the collective each
// change of layout needs, the bucketed reduction of pending gradients, and
// the training step. Errors at ops are in triad-partition-invalid.mlir.
// RUN: triad-opt %s -split-input-file --triad-partition | FileCheck %s
// RUN: triad-opt %s -split-input-file '--triad-partition=bucket-bytes=80' | FileCheck %s --check-prefix=SMALL
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate=dp=2 --triad-partition | FileCheck %s --check-prefix=STEP
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate=dp=2 '--triad-partition=bucket-bytes=64' | FileCheck %s --check-prefix=BUCKETS
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-partition 2>&1 | FileCheck %s --check-prefix=NOMESH
// RUN: triad-opt %S/Inputs/zero-padded.mlir --triad-shard-propagate=dp=3 --triad-partition | FileCheck %s --check-prefix=PADDED

// Padded pieces (Inputs/zero-padded.mlir: ZeRO at dp=3): 32 rows in pieces
// of 11 and 5 in pieces of 2, sliced for the update and gathered back to
// the parameter's own size.
// PADDED: triad.get_param @m {{.*}} : tensor<11x8xf32>
// PADDED: dist.all_slice %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<32x8xf32> -> tensor<11x8xf32>
// PADDED: triad.adamw_update {{.*}} : tensor<11x8xf32>, tensor<11x8xf32>, tensor<11x8xf32>
// PADDED: dist.all_gather %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<11x8xf32> -> tensor<32x8xf32>
// PADDED: triad.get_param @b {{.*}} : tensor<2xf32>
// PADDED: dist.all_slice %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<5xf32> -> tensor<2xf32>
// PADDED: triad.adamw_update {{.*}} : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
// PADDED: triad.assign @b, %{{.*}} : tensor<2xf32>
// RUN: triad-opt %S/Inputs/zero-padded-tp.mlir '--triad-shard-propagate=dp=3 tp=2' --triad-partition | FileCheck %s --check-prefix=PADTP

// A padded split after tp (Inputs/zero-padded-tp.mlir): the rank's tp piece
// of 16 is sliced over dp into pieces of 6 for the update, and the updated
// piece gathered back to the tp piece of 16, not to the whole 32.
// PADTP: triad.get_param @bm {{.*}} : tensor<6xf32>
// PADTP: dist.all_slice %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<16xf32> -> tensor<6xf32>
// PADTP: triad.adamw_update {{.*}} : tensor<6xf32>, tensor<6xf32>, tensor<6xf32>
// PADTP: dist.all_gather %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<6xf32> -> tensor<16xf32>
// PADTP: triad.assign @b, %{{.*}} : tensor<16xf32>
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff '--triad-zero=zero=1 dp=2' --triad-shard-propagate=dp=2 --triad-partition | FileCheck %s --check-prefix=ZERO1

// ZeRO-1: a gradient whose optimizer state is split over dp is
// reduce-scattered at the apply step's entry straight into the state's
// pieces; the gradient norm sums the pieces (one scalar all-reduce) and the
// update reads the piece, with no all-reduce or slice of the gradient.
// ZERO1-LABEL: func.func @apply_step
// ZERO1-SAME: %[[W:[a-z0-9]+]]: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>, triad.grad = @wte}
// ZERO1-NEXT: %[[WP:.*]] = dist.reduce_scatter %[[W]] dim 0 over ["dp"] {{.*}}for the ZeRO piece of @wte entering @apply_step"} : tensor<16x8xf32> -> tensor<8x8xf32>
// ZERO1-NEXT: %[[GP:.*]] = dist.reduce_scatter %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<8xf32> -> tensor<4xf32>
// ZERO1-NOT: dist.all_reduce %[[W]]
// ZERO1: %[[SQ:.*]] = triad.sum_squares %[[WP]] {dist.layouts = [#dist.layout<partial = {dp}>]} : tensor<8x8xf32>
// ZERO1: dist.all_reduce %{{.*}} over ["dp"] {{.*}} : tensor<f32>
// ZERO1-NEXT: triad.clip_coefficient
// ZERO1-NOT: dist.all_slice %[[WP]]
// ZERO1: triad.adamw_update %{{.*}}, %[[WP]], {{.*}} : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
// ZERO1: dist.all_gather %{{.*}} dim 0 over ["dp"] {{.*}} : tensor<8x8xf32> -> tensor<16x8xf32>
// ZERO1: triad.adamw_update %{{.*}}, %[[GP]], {{.*}} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>

// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate=dp=2 '--triad-partition=bucket-bytes=0' 2>&1 | FileCheck %s --check-prefix=ZERO

// NOMESH: error: the module has no dist.mesh; run --triad-shard-propagate first
// ZERO: error: bucket-bytes must be at least 1

// The collective each change of layout needs: pending sums entering a
// function are all-reduced at its start, a pending sum before a nonlinear
// op is all-reduced, a split operand an op needs whole is all-gathered, and
// a whole operand an op needs split is sliced (no communication).
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

// -----

// A pending sum an op needs split over the same axis is reduce-scattered;
// each collective says why it is there.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reduce_scatter
// CHECK-SAME: (%[[K:[a-z0-9]+]]: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>},
// CHECK-SAME: %[[R:[a-z0-9]+]]: tensor<8x8xf32> {dist.layout = #dist.layout<{tp}, {}>},
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<2x8xf32> {dist.layout = #dist.layout<{tp}, {}>})
// CHECK-SAME: -> (tensor<2x8xf32> {dist.layout = #dist.layout<{tp}, {}>})
func.func @reduce_scatter(%k: tensor<4x16xf32> {dist.layout = #dist.layout<{}, {tp}>},
                          %r: tensor<16x8xf32> {dist.layout = #dist.layout<{tp}, {}>},
                          %s: tensor<4x8xf32> {dist.layout = #dist.layout<{tp}, {}>})
    -> (tensor<4x8xf32> {dist.layout = #dist.layout<{tp}, {}>}) {
  // CHECK: %[[E:.*]] = triad.matmul %[[K]], %[[R]] {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]} : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %e = triad.matmul %k, %r {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]} : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  // CHECK: %[[RS:.*]] = dist.reduce_scatter %[[E]] dim 0 over ["tp"]
  // CHECK-SAME: {dist.layouts = [#dist.layout<{tp}, {}>], dist.reason = "#dist.layout<{}, {}, partial = {tp}> to #dist.layout<{tp}, {}> for triad.mul"}
  // CHECK-SAME: : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK: triad.mul %[[RS]], %[[S]] {{.*}} : tensor<2x8xf32>
  %m = triad.mul %e, %s {dist.layouts = [#dist.layout<{tp}, {}>]} : tensor<4x8xf32>
  // CHECK-NOT: dist.all
  // CHECK: return
  return %m : tensor<4x8xf32>
}

// -----

// A value pending over two axes that its user wants split over one of them
// after its current split: all-reduced over the other, reduce-scattered
// over that one (a tensor-parallel gradient leaving the step under ZeRO-2).
// The collectives run right after the value is computed, not at the return.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 2, 2]
// CHECK-LABEL: func.func @reduce_then_scatter
// CHECK-SAME: -> (tensor<2x4xf32> {dist.layout = #dist.layout<{tp, dp}, {}>}, tensor<4x4xf32> {dist.layout = #dist.layout<{tp}, {}>})
func.func @reduce_then_scatter(%x: tensor<8x8x4xf32> {dist.layout = #dist.layout<{dp, pp}, {tp}, {}>})
    -> (tensor<8x4xf32> {dist.layout = #dist.layout<{tp, dp}, {}>}, tensor<8x4xf32> {dist.layout = #dist.layout<{tp}, {}>}) {
  // CHECK: %[[G:.*]] = triad.sum {{.*}} : tensor<2x4x4xf32> -> tensor<4x4xf32>
  %g = triad.sum %x dims = [0] {dist.layouts = [#dist.layout<{tp}, {}, partial = {dp, pp}>]} : tensor<8x8x4xf32> -> tensor<8x4xf32>
  // CHECK-NEXT: %[[SUM:.*]] = dist.all_reduce %[[G]] over ["pp"] {dist.layouts = [#dist.layout<{tp}, {}, partial = {dp}>]
  // CHECK-NEXT: %[[PIECE:.*]] = dist.reduce_scatter %[[SUM]] dim 0 over ["dp"] {dist.layouts = [#dist.layout<{tp, dp}, {}>]
  // CHECK-SAME: : tensor<4x4xf32> -> tensor<2x4xf32>
  // CHECK-NEXT: %[[WHOLE:.*]] = dist.all_reduce %[[G]] over ["dp", "pp"]
  // CHECK-NEXT: return %[[PIECE]], %[[WHOLE]]
  return %g, %g : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// A dimension whose split changes to other axes (or another order) is
// gathered down to the prefix it shares with its target, then sliced; every
// dimension is gathered before any is sliced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @resplit
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<2x8xf32> {{.*}}, %[[X:[a-z0-9]+]]: tensor<1x8xf32> {{.*}}, %[[W:[a-z0-9]+]]: tensor<4x6xf32> {{.*}}, %[[V:[a-z0-9]+]]: tensor<4x4xf32> {{.*}})
func.func @resplit(%a: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>},
                   %x: tensor<4x8xf32> {dist.layout = #dist.layout<{tp, dp}, {}>},
                   %w: tensor<8x6xf32> {dist.layout = #dist.layout<{dp}, {}>},
                   %v: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>}) -> tensor<4x8xf32> {
  // CHECK: %[[WHOLE:.*]] = dist.all_gather %[[X]] dim 0 over ["tp", "dp"] {{.*}} : tensor<1x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: %[[PIECE:.*]] = dist.all_slice %[[WHOLE]] dim 0 over ["dp"] {{.*}} : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK-NEXT: triad.mul %[[A]], %[[PIECE]]
  %m = triad.mul %a, %x {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<4x8xf32>
  // The contraction takes tp from the lhs: the rhs's rows move from dp to tp.
  // CHECK: %[[ROWS:.*]] = dist.all_gather %[[W]] dim 0 over ["dp"] {{.*}} : tensor<4x6xf32> -> tensor<8x6xf32>
  // CHECK-NEXT: %[[TP:.*]] = dist.all_slice %[[ROWS]] dim 0 over ["tp"] {{.*}} : tensor<8x6xf32> -> tensor<4x6xf32>
  // CHECK-NEXT: triad.matmul %[[V]], %[[TP]]
  %p = triad.matmul %v, %w {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]} : tensor<4x8xf32>, tensor<8x6xf32> -> tensor<4x6xf32>
  return %m : tensor<4x8xf32>
}

// -----

// Local types: split arguments shrink, a parameter keeps its global type
// and layout while its read is local, and ops that count heads or slice
// sizes get their local counts.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK: triad.param @w : tensor<16x32xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
triad.param @w : tensor<16x32xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
// CHECK-LABEL: func.func @local_types
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>}, %[[Q:[a-z0-9]+]]: tensor<1x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>}, %[[K:[a-z0-9]+]]: tensor<1x8x4xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>})
// CHECK-SAME: -> (tensor<2x8x16xf32>, tensor<1x8x8xf32>, tensor<1x8x8xf32>, tensor<2x8x8xf32>)
func.func @local_types(%x: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                       %q: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                       %k: tensor<2x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>})
    -> (tensor<4x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<4x8x8xf32>) {
  // CHECK-NOT: dist.all
  // CHECK: %[[W:.*]] = triad.get_param @w {dist.layouts = [#dist.layout<{}, {tp}>]} : tensor<16x16xf32>
  %w = triad.get_param @w {dist.layouts = [#dist.layout<{}, {tp}>]} : tensor<16x32xf32>
  // CHECK: triad.matmul %[[X]], %[[W]] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
  %a = triad.matmul %x, %w {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.attention %[[Q]], %[[K]], %[[K]] heads = 2 kv_heads = 1 mask = causal {{.*}} : tensor<1x8x8xf32>, tensor<1x8x4xf32>, tensor<1x8x4xf32>
  %t = triad.attention %q, %k, %k heads = 4 kv_heads = 2 mask = causal {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
  // CHECK: triad.rope %[[Q]] heads = 2 rotary_dim = 4 {{.*}} : tensor<1x8x8xf32>
  %r = triad.rope %q heads = 4 rotary_dim = 4 {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x16xf32>
  // CHECK: triad.slice %[[X]] offsets = [0, 0, 8] sizes = [2, 8, 8] {{.*}} : tensor<2x8x16xf32> -> tensor<2x8x8xf32>
  %s = triad.slice %x offsets = [0, 0, 8] sizes = [4, 8, 8] {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  // CHECK-NOT: dist.all
  return %a, %t, %r, %s : tensor<4x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<4x8x8xf32>
}

// -----

// Layers take local types inside and out.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%{{.*}}: tensor<2x8xf32> {dist.layout = #dist.layout<{dp}, {}>}) -> tensor<2x8xf32>
func.func @layer(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>}) -> tensor<4x8xf32> {
  // CHECK: triad.layer transformer 0 (%{{.*}}) {dist.layouts = [#dist.layout<{dp}, {}>]} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<2x8xf32>):
  // CHECK-NEXT: triad.relu {{.*}} : tensor<2x8xf32>
  %h = triad.layer transformer 0 (%x) {dist.layouts = [#dist.layout<{dp}, {}>]} : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %y = triad.relu %a {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<4x8xf32>
    triad.yield %y : tensor<4x8xf32>
  }
  return %h : tensor<4x8xf32>
}

// -----

// A dimension split over two axes is sliced and gathered over both at
// once.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @two_axes
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<1x8xf32> {{.*}}, %[[Z:[a-z0-9]+]]: tensor<4x8xf32> {{.*}})
func.func @two_axes(%a: tensor<4x8xf32> {dist.layout = #dist.layout<{dp, tp}, {}>},
                    %z: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}>}) -> tensor<3x8xf32> {
  // CHECK: %[[S:.*]] = dist.all_slice %[[Z]] dim 0 over ["dp", "tp"] {{.*}} : tensor<4x8xf32> -> tensor<1x8xf32>
  // CHECK: %[[M:.*]] = triad.mul %[[A]], %[[S]] {{.*}} : tensor<1x8xf32>
  %m = triad.mul %a, %z {dist.layouts = [#dist.layout<{dp, tp}, {}>]} : tensor<4x8xf32>
  // CHECK: %[[G:.*]] = dist.all_gather %[[M]] dim 0 over ["dp", "tp"] {{.*}} : tensor<1x8xf32> -> tensor<4x8xf32>
  // CHECK: triad.slice %[[G]] offsets = [1, 0] sizes = [3, 8]
  %s = triad.slice %m offsets = [1, 0] sizes = [3, 8] {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32> -> tensor<3x8xf32>
  return %s : tensor<3x8xf32>
}

// -----

// A split moved from one dimension to another is gathered and then sliced
// (no all_to_all is made yet).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @move_split
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<4x4xf32> {{.*}}, %[[X:[a-z0-9]+]]: tensor<2x8xf32> {{.*}})
func.func @move_split(%a: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>},
                      %x: tensor<4x8xf32> {dist.layout = #dist.layout<{tp}, {}>}) -> tensor<4x8xf32> {
  // CHECK: %[[G:.*]] = dist.all_gather %[[X]] dim 0 over ["tp"] {{.*}} : tensor<2x8xf32> -> tensor<4x8xf32>
  // CHECK: %[[S:.*]] = dist.all_slice %[[G]] dim 1 over ["tp"] {{.*}} : tensor<4x8xf32> -> tensor<4x4xf32>
  // CHECK: triad.mul %[[A]], %[[S]] {{.*}} : tensor<4x4xf32>
  %m = triad.mul %a, %x {dist.layouts = [#dist.layout<{}, {tp}>]} : tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}

// -----

// A pending sum over an axis of one rank needs no collective.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @one_rank
func.func @one_rank(%p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {pp}>}) -> tensor<4x8xf32> {
  // CHECK-NOT: dist.all
  // CHECK: triad.relu
  %y = triad.relu %p {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// The optimizer with ZeRO state: each rank updates its slice (the whole
// parameter and gradient are sliced), then the parameter (replicated over
// dp) is all-gathered before it is assigned; the state, split like the
// update, is assigned as it is.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
triad.param @w : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
triad.state @m : tensor<8x4xf32> init <zeros> of @w {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
// CHECK-LABEL: func.func @zero
func.func @zero(%g: tensor<8x4xf32> {dist.layout = #dist.layout<{}, {}>}, %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>) {
  // CHECK-DAG: %[[P:.*]] = triad.get_param @w {{.*}} : tensor<8x2xf32>
  // CHECK-DAG: %[[M:.*]] = triad.get_param @m {{.*}} : tensor<4x2xf32>
  %p = triad.get_param @w {dist.layouts = [#dist.layout<{}, {tp}>]} : tensor<8x4xf32>
  %m = triad.get_param @m {dist.layouts = [#dist.layout<{dp}, {tp}>]} : tensor<8x4xf32>
  // CHECK: %[[PS:.*]] = dist.all_slice %[[P]] dim 0 over ["dp"] {{.*}} : tensor<8x2xf32> -> tensor<4x2xf32>
  // CHECK: dist.all_slice %{{.*}} dim 0 over ["dp"]
  // CHECK: %[[GS:.*]] = dist.all_slice %{{.*}} dim 1 over ["tp"] {{.*}} : tensor<4x4xf32> -> tensor<4x2xf32>
  // CHECK: %[[NP:.*]], %[[NM:.*]], %{{.*}} = triad.adamw_update %[[PS]], %[[GS]], %[[M]], %[[M]], {{.*}} : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
  %np, %nm, %nv = triad.adamw_update %p, %g, %m, %m, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 {dist.layouts = [#dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>]} : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  // CHECK: %[[AG:.*]] = dist.all_gather %[[NP]] dim 0 over ["dp"] {{.*}}dist.reason = "#dist.layout<{dp}, {tp}> to #dist.layout<{}, {tp}> for triad.assign to w"} : tensor<4x2xf32> -> tensor<8x2xf32>
  // CHECK: triad.assign @w, %[[AG]] : tensor<8x2xf32>
  // CHECK-NEXT: triad.assign @m, %[[NM]] : tensor<4x2xf32>
  triad.assign @w, %np : tensor<8x4xf32>
  triad.assign @m, %nm : tensor<8x4xf32>
  return
}

// -----

// Pending gradient arguments (triad.grad) are reduced at the function's
// start in buckets of consecutive arguments pending over the same axes, at
// most bucket-bytes each; unused ones and sums over one rank are left
// alone; another pending argument is reduced where an op needs it.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @buckets
// CHECK-SAME: (%[[A:[a-z0-9]+]]: {{.*}}, %[[B:[a-z0-9]+]]: {{.*}}, %[[C:[a-z0-9]+]]: {{.*}}, %[[D:[a-z0-9]+]]: {{.*}}, %[[E:[a-z0-9]+]]: {{.*}}, %[[F:[a-z0-9]+]]: {{.*}}, %[[G:[a-z0-9]+]]: {{.*}}, %[[H:[a-z0-9]+]]: {{.*}}, %{{.*}}: {{.*}})
// CHECK-NEXT: dist.all_reduce %[[A]], %[[B]] over ["dp"] {{.*}}dist.reason = "gradients entering @buckets, partial over dp: 2 tensors in one bucket"} : tensor<16xf32>, tensor<8xf32>
// CHECK-NEXT: dist.all_reduce %[[C]] over ["tp"] {{.*}}dist.reason = "gradients entering @buckets, partial over tp: 1 tensor in one bucket"} : tensor<4xf32>
// CHECK-NEXT: dist.all_reduce %[[D]], %[[F]] over ["dp"] {{.*}} : tensor<4xf32>, tensor<16xf32>
// CHECK-NOT: dist.all_reduce
// SMALL-LABEL: func.func @buckets
// SMALL-NEXT: dist.all_reduce %arg0 over ["dp"] {{.*}} : tensor<16xf32>
// SMALL-NEXT: dist.all_reduce %arg1 over ["dp"] {{.*}} : tensor<8xf32>
// SMALL-NEXT: dist.all_reduce %arg2 over ["tp"] {{.*}} : tensor<4xf32>
// SMALL-NEXT: dist.all_reduce %arg3, %arg5 over ["dp"] {{.*}} : tensor<4xf32>, tensor<16xf32>
// SMALL-NOT: gradients entering @buckets
func.func @buckets(%a: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @a},
                   %b: tensor<8xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @b},
                   %c: tensor<4xf32> {dist.layout = #dist.layout<{}, partial = {tp}>, triad.grad = @c},
                   %d: tensor<4xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @d},
                   %unused: tensor<4xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @unused},
                   %f: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @f},
                   %g: tensor<4xf32> {dist.layout = #dist.layout<{}, partial = {pp}>, triad.grad = @g},
                   %h: tensor<4xf32> {dist.layout = #dist.layout<{}>, triad.grad = @h},
                   %other: tensor<4xf32> {dist.layout = #dist.layout<{}, partial = {dp}>}) -> tensor<f32> {
  %0 = triad.sum_squares %a {dist.layouts = [#dist.layout<>]} : tensor<16xf32>
  %1 = triad.sum_squares %b {dist.layouts = [#dist.layout<>]} : tensor<8xf32>
  %2 = triad.sum_squares %c {dist.layouts = [#dist.layout<>]} : tensor<4xf32>
  %3 = triad.sum_squares %d {dist.layouts = [#dist.layout<>]} : tensor<4xf32>
  %5 = triad.sum_squares %f {dist.layouts = [#dist.layout<>]} : tensor<16xf32>
  %6 = triad.sum_squares %g {dist.layouts = [#dist.layout<>]} : tensor<4xf32>
  %7 = triad.sum_squares %h {dist.layouts = [#dist.layout<>]} : tensor<4xf32>
  // CHECK: %[[OTHER:.*]] = dist.all_reduce %arg8 over ["dp"] {{.*}}for triad.relu
  // CHECK-NEXT: triad.relu %[[OTHER]]
  %8 = triad.relu %other {dist.layouts = [#dist.layout<{}>]} : tensor<4xf32>
  return %0 : tensor<f32>
}

// The training step on dp=2: each rank's microbatch step runs on half the
// batch without communicating; the apply step reduces the gradients once,
// in one bucket.
// STEP-LABEL: func.func @microbatch_step
// STEP-SAME: tensor<2x4xi32>
// STEP-SAME: tensor<2x4xi32>
// STEP-SAME: -> (tensor<f32> {{.*}}, tensor<16x8xf32> {{.*}}, tensor<8xf32> {{.*}})
// STEP: triad.embedding %{{.*}}, %{{.*}} {{.*}} : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
// STEP-NOT: dist.all
// STEP-LABEL: func.func @apply_step
// STEP: dist.all_reduce %arg0, %arg1 over ["dp"] {{.*}}dist.reason = "gradients entering @apply_step, partial over dp: 2 tensors in one bucket"
// STEP-NOT: dist.all_reduce

// A bucket holds at most bucket-bytes: the 512-byte and 32-byte gradients
// are reduced apart.
// BUCKETS-LABEL: func.func @apply_step
// BUCKETS: dist.all_reduce %arg0 over ["dp"]
// BUCKETS: dist.all_reduce %arg1 over ["dp"]
// BUCKETS-NOT: dist.all_reduce
