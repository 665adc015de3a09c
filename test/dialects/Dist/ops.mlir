// RUN: triad-opt %s | triad-opt | FileCheck %s
// RUN: triad-opt %s --mlir-print-op-generic | triad-opt | FileCheck %s

// The mesh, layouts on parameters, arguments, results and op results, and
// every collective, printed back as written.

// CHECK: dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]

// CHECK: triad.param @w : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
triad.param @w : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
// CHECK: triad.state @m : tensor<8x4xf32> init <zeros> of @w {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
triad.state @m : tensor<8x4xf32> init <zeros> of @w {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
// CHECK: triad.param @b : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}>}
triad.param @b : tensor<8xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}>}

// CHECK-LABEL: func.func @layouts
// CHECK-SAME: (%{{.*}}: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>}, %{{.*}}: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>})
// CHECK-SAME: -> (tensor<f32> {dist.layout = #dist.layout<>})
func.func @layouts(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>},
                   %s: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>})
    -> (tensor<f32> {dist.layout = #dist.layout<>}) {
  // CHECK: triad.sum_squares %{{.*}} {dist.layouts = [#dist.layout<partial = {dp}>], dist.reason = "why"}
  %q = triad.sum_squares %x {dist.layouts = [#dist.layout<partial = {dp}>], dist.reason = "why"} : tensor<4x8xf32>
  %r:2 = dist.all_reduce %q, %s over ["dp", "tp"] : tensor<f32>, tensor<f32>
  return %r#0 : tensor<f32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<8x4xf32>) {
  // CHECK: dist.all_gather %{{.*}} dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  %g = dist.all_gather %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  // CHECK: dist.reduce_scatter %{{.*}} dim 0 over ["tp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  %s = dist.reduce_scatter %x dim 0 over ["tp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK: dist.all_slice %{{.*}} dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  %k = dist.all_slice %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  // CHECK: dist.all_to_all %{{.*}} split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  %a = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %g, %s, %k, %a : tensor<8x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<8x4xf32>
}
