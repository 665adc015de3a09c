// Round trip of the dist dialect, in the custom and in the generic form: the
// mesh, layouts (every shape of the syntax) on parameters, state, function
// arguments and results and op results, and every collective.
// RUN: triad-opt %s -split-input-file | triad-opt -split-input-file | FileCheck %s
// RUN: triad-opt %s -split-input-file --mlir-print-op-generic | triad-opt -split-input-file | FileCheck %s

// CHECK: dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]

// A column-parallel weight, ZeRO state split over two axes on two
// dimensions, a dimension split over two axes (tp outermost), a replicated
// scalar.
// CHECK: triad.param @w : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
triad.param @w : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
// CHECK: triad.state @m : tensor<8x4xf32> init <zeros> of @w {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
triad.state @m : tensor<8x4xf32> init <zeros> of @w {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
// CHECK: triad.param @b : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}>}
triad.param @b : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}>}
// CHECK: triad.param @rows : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{dp, tp}, {}>}
triad.param @rows : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{dp, tp}, {}>}
// CHECK: triad.state @step : tensor<f32> init <zeros> {dist.layout = #dist.layout<>}
triad.state @step : tensor<f32> init <zeros> {dist.layout = #dist.layout<>}
// An axis of one rank may split a dimension of any size.
// CHECK: triad.param @odd : tensor<3xf32> init <zeros> {dist.layout = #dist.layout<{pp}>}
triad.param @odd : tensor<3xf32> init <zeros> {dist.layout = #dist.layout<{pp}>}
// A ZeRO-3 parameter.
// CHECK: triad.param @z : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{dp}>, dist.zero}
triad.param @z : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{dp}>, dist.zero}

// A gradient ZeRO-2 reduce-scatters over dp.
// CHECK-LABEL: func.func @zero_grad
// CHECK-SAME: -> (tensor<8xf32> {dist.layout = #dist.layout<{dp}>, dist.zero})
func.func @zero_grad(%g: tensor<8xf32>) -> (tensor<8xf32> {dist.layout = #dist.layout<{dp}>, dist.zero}) {
  return %g : tensor<8xf32>
}

// CHECK-LABEL: func.func @layouts
// CHECK-SAME: (%{{.*}}: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>}, %{{.*}}: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>}, %{{.*}}: tensor<4x8xf32> {dist.layout = #dist.layout<{dp, tp}, {}, partial = {pp}>}, %{{.*}}: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}>})
// CHECK-SAME: -> (tensor<f32> {dist.layout = #dist.layout<>}, tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>})
func.func @layouts(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>},
                   %s: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>},
                   %y: tensor<4x8xf32> {dist.layout = #dist.layout<{dp, tp}, {}, partial = {pp}>},
                   %z: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {}>})
    -> (tensor<f32> {dist.layout = #dist.layout<>}, tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>}) {
  // CHECK: triad.sum_squares %{{.*}} {dist.layouts = [#dist.layout<partial = {dp}>], dist.reason = "why"}
  %q = triad.sum_squares %x {dist.layouts = [#dist.layout<partial = {dp}>], dist.reason = "why"} : tensor<4x8xf32>
  // CHECK: triad.relu %{{.*}} {dist.layouts = [#dist.layout<{dp, tp}, {}, partial = {pp}>]}
  %r = triad.relu %y {dist.layouts = [#dist.layout<{dp, tp}, {}, partial = {pp}>]} : tensor<4x8xf32>
  // One layout per result, rank 0 included.
  // CHECK: triad.clip_coefficient %{{.*}} max_norm = 1.000000e+00 {dist.layouts = [#dist.layout<>, #dist.layout<partial = {tp}>]}
  %c:2 = triad.clip_coefficient %q max_norm = 1.0 {dist.layouts = [#dist.layout<>, #dist.layout<partial = {tp}>]}
  // CHECK: %{{.*}}:2 = dist.all_reduce %{{.*}}, %{{.*}} over ["dp", "tp"] : tensor<f32>, tensor<f32>
  %a:2 = dist.all_reduce %q, %s over ["dp", "tp"] : tensor<f32>, tensor<f32>
  return %a#0, %r : tensor<f32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x2xf32>, tensor<4x8xf32>) {
  // CHECK: dist.all_gather %{{.*}} dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  %g = dist.all_gather %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  // CHECK: dist.reduce_scatter %{{.*}} dim 0 over ["tp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  %s = dist.reduce_scatter %x dim 0 over ["tp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK: dist.all_slice %{{.*}} dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  %k = dist.all_slice %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK: dist.all_to_all %{{.*}} split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  %a = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  // CHECK: dist.all_reduce %{{.*}} over ["tp"] {dist.reason = "a pending sum"} : tensor<4x8xf32>
  %r = dist.all_reduce %x over ["tp"] {dist.reason = "a pending sum"} : tensor<4x8xf32>
  // A group over several axes has the product of their sizes.
  // CHECK: dist.all_gather %{{.*}} dim 0 over ["dp", "tp"] {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32> -> tensor<16x8xf32>
  %gg = dist.all_gather %x dim 0 over ["dp", "tp"] {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32> -> tensor<16x8xf32>
  // CHECK: dist.reduce_scatter %{{.*}} dim 1 over ["tp", "dp"] : tensor<4x8xf32> -> tensor<4x2xf32>
  %ss = dist.reduce_scatter %x dim 1 over ["tp", "dp"] : tensor<4x8xf32> -> tensor<4x2xf32>
  // An axis of one rank changes no shape.
  // CHECK: dist.all_gather %{{.*}} dim 1 over ["pp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  %p = dist.all_gather %x dim 1 over ["pp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %g, %s, %k, %a, %r, %gg, %ss, %p : tensor<8x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x2xf32>, tensor<4x8xf32>
}

// -----

// Padded pieces: ZeRO's split of a dimension the group does not divide
// (state marked dist.zero may declare it; pieces of ceil(size / ranks)).
// CHECK: dist.mesh @mesh axes ["dp", "pp", "tp"] = [3, 1, 1]
dist.mesh @mesh axes ["dp", "pp", "tp"] = [3, 1, 1]
// CHECK: triad.state @m : tensor<32x5xf32> init <zeros> {dist.layout = #dist.layout<{dp}, {}>, dist.zero}
triad.state @m : tensor<32x5xf32> init <zeros> {dist.layout = #dist.layout<{dp}, {}>, dist.zero}
// CHECK-LABEL: func.func @padded
func.func @padded(%x: tensor<32x5xf32>) -> (tensor<11x5xf32>, tensor<32x5xf32>, tensor<32x2xf32>) {
  // CHECK: dist.all_slice %{{.*}} dim 0 over ["dp"] : tensor<32x5xf32> -> tensor<11x5xf32>
  %k = dist.all_slice %x dim 0 over ["dp"] : tensor<32x5xf32> -> tensor<11x5xf32>
  // CHECK: dist.all_gather %{{.*}} dim 0 over ["dp"] : tensor<11x5xf32> -> tensor<32x5xf32>
  %g = dist.all_gather %k dim 0 over ["dp"] : tensor<11x5xf32> -> tensor<32x5xf32>
  // CHECK: dist.reduce_scatter %{{.*}} dim 1 over ["dp"] : tensor<32x5xf32> -> tensor<32x2xf32>
  %s = dist.reduce_scatter %x dim 1 over ["dp"] : tensor<32x5xf32> -> tensor<32x2xf32>
  return %k, %g, %s : tensor<11x5xf32>, tensor<32x5xf32>, tensor<32x2xf32>
}

// -----

// A padded split after another axis: tp's pieces of 16 are split over dp
// into pieces of ceil(16 / 3) = 6 (a column-parallel bias's ZeRO state).
// CHECK: dist.mesh @mesh axes ["dp", "pp", "tp"] = [3, 1, 2]
dist.mesh @mesh axes ["dp", "pp", "tp"] = [3, 1, 2]
// CHECK: triad.state @b : tensor<32xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}>, dist.zero}
triad.state @b : tensor<32xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}>, dist.zero}
// CHECK-LABEL: func.func @nested
func.func @nested(%x: tensor<16xf32>) -> tensor<16xf32> {
  // CHECK: dist.all_slice %{{.*}} dim 0 over ["dp"] : tensor<16xf32> -> tensor<6xf32>
  %k = dist.all_slice %x dim 0 over ["dp"] : tensor<16xf32> -> tensor<6xf32>
  // CHECK: dist.all_gather %{{.*}} dim 0 over ["dp"] : tensor<6xf32> -> tensor<16xf32>
  %g = dist.all_gather %k dim 0 over ["dp"] : tensor<6xf32> -> tensor<16xf32>
  return %g : tensor<16xf32>
}
