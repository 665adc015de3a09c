// A small function for triad-interp: a linear layer, a softmax loss.
triad.param @w : tensor<2x3xf32> init <ones>
func.func @forward(%x: tensor<2x2xf32>, %labels: tensor<2xi32>) -> (tensor<2x3xf32>, tensor<f32>) {
  %w = triad.get_param @w : tensor<2x3xf32>
  %y = triad.matmul %x, %w : tensor<2x2xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %loss = triad.cross_entropy %y, %labels : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
  return %y, %loss : tensor<2x3xf32>, tensor<f32>
}
func.func @ids(%t: tensor<2xi32>) -> tensor<2x3xf32> {
  %w = triad.get_param @w : tensor<2x3xf32>
  %s = triad.slice %w offsets = [0, 0] sizes = [2, 3] : tensor<2x3xf32> -> tensor<2x3xf32>
  %e = triad.embedding %t, %s : tensor<2xi32>, tensor<2x3xf32> -> tensor<2x3xf32>
  return %e : tensor<2x3xf32>
}
func.func @unsupported(%x: tensor<2xf32>) -> tensor<2xf32> {
  %y = arith.addf %x, %x : tensor<2xf32>
  return %y : tensor<2xf32>
}
