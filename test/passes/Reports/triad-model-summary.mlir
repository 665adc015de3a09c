// The model summary lists every part with the parameters it reads, counts a
// parameter read by several parts once, and reports unused parameters; the
// IR passes through unchanged.
// RUN: triad-opt %s --triad-model-summary -o %t | FileCheck %s
// RUN: triad-opt %t | FileCheck %s --check-prefix=IR

// CHECK-LABEL: model summary: @forward (3 parts, 1 transformer layers)
// CHECK-NEXT:   part                       params    ops
// CHECK-NEXT:   embedding 0                   256      2
// CHECK-NEXT:   transformer 0                  64      3
// CHECK-NEXT:   head 0                          0      4
// CHECK-NEXT:   total                         320      9
// CHECK-NEXT:   parameters: 328 elements, 1296 bytes (f32: 320, bf16: 8)
// CHECK-NEXT:   unused parameters: 1

// IR: triad.param @wte
// IR: func.func @forward

triad.param @wte : tensor<16x16xf32> init <normal, std = 0.02>
triad.param @w : tensor<4x16xf32> init <normal, std = 0.02>
triad.param @unused : tensor<8xbf16> init <zeros>

func.func @forward(%ids: tensor<2x4xi32>, %labels: tensor<2x4xi32>) -> tensor<f32> {
  %h = triad.layer embedding 0 (%ids) : (tensor<2x4xi32>) -> tensor<2x4x16xf32> {
  ^bb0(%x: tensor<2x4xi32>):
    %t = triad.get_param @wte : tensor<16x16xf32>
    %e = triad.embedding %x, %t : tensor<2x4xi32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
    triad.yield %e : tensor<2x4x16xf32>
  }
  %y = triad.layer transformer 0 (%h) : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
  ^bb0(%x: tensor<2x4x16xf32>):
    %w = triad.get_param @w : tensor<4x16xf32>
    %p = triad.add %x, %w : tensor<2x4x16xf32>, tensor<4x16xf32>
    %r = triad.relu %p : tensor<2x4x16xf32>
    triad.yield %r : tensor<2x4x16xf32>
  }
  %loss = triad.layer head 0 (%y, %labels) : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32> {
  ^bb0(%x: tensor<2x4x16xf32>, %l: tensor<2x4xi32>):
    %t = triad.get_param @wte : tensor<16x16xf32>
    %s = triad.scale %x by 0.5 : tensor<2x4x16xf32>
    %logits = triad.matmul %s, %t transpose_rhs : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
    %ce = triad.cross_entropy %logits, %l : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
    triad.yield %ce : tensor<f32>
  }
  return %loss : tensor<f32>
}
