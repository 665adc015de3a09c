// The forward model of a tiny two-parameter network (embedding, RMS norm,
// tied output projection, cross entropy) with a batch of 4, for the
// sharding tests.
triad.param @wte : tensor<16x8xf32> init <normal, std = 0.02>
triad.param @g : tensor<8xf32> init <ones>

func.func @forward(%x: tensor<4x4xi32> {triad.input = "tokens"}, %y: tensor<4x4xi32> {triad.input = "labels"}) -> tensor<f32> {
  %h = triad.layer embedding 0 (%x) : (tensor<4x4xi32>) -> tensor<4x4x8xf32> {
  ^bb0(%ids: tensor<4x4xi32>):
    %t = triad.get_param @wte : tensor<16x8xf32>
    %e = triad.embedding %ids, %t : tensor<4x4xi32>, tensor<16x8xf32> -> tensor<4x4x8xf32>
    triad.yield %e : tensor<4x4x8xf32>
  }
  %loss = triad.layer head 0 (%h, %y) : (tensor<4x4x8xf32>, tensor<4x4xi32>) -> tensor<f32> {
  ^bb0(%a: tensor<4x4x8xf32>, %labels: tensor<4x4xi32>):
    %g = triad.get_param @g : tensor<8xf32>
    %n = triad.rms_norm %a, %g : tensor<4x4x8xf32>, tensor<8xf32>
    %t = triad.get_param @wte : tensor<16x8xf32>
    %l = triad.matmul %n, %t transpose_rhs : tensor<4x4x8xf32>, tensor<16x8xf32> -> tensor<4x4x16xf32>
    %c = triad.cross_entropy %l, %labels : tensor<4x4x16xf32>, tensor<4x4xi32> -> tensor<f32>
    triad.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}
