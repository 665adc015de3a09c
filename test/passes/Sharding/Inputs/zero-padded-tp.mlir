// ZeRO at dp=3 over a bias that tp already splits (a column-parallel
// layer's): no dimension is left for dp, so dp splits each tp piece of 16
// further, padded (pieces of ceil(16 / 3) = 6), and the update runs on them.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [3, 1, 2]
triad.param @b : tensor<32xf32> init <zeros> {dist.layout = #dist.layout<{tp}>}
triad.state @bm : tensor<32xf32> init <zeros> of @b {dist.zero}
triad.state @bv : tensor<32xf32> init <zeros> of @b {dist.zero}
func.func @apply_step(%gb: tensor<32xf32> {dist.layout = #dist.layout<{tp}>}, %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>) {
  %pb = triad.get_param @b : tensor<32xf32>
  %mb = triad.get_param @bm : tensor<32xf32>
  %vb = triad.get_param @bv : tensor<32xf32>
  %npb, %nmb, %nvb = triad.adamw_update %pb, %gb, %mb, %vb, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.0 : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
  triad.assign @b, %npb : tensor<32xf32>
  triad.assign @bm, %nmb : tensor<32xf32>
  triad.assign @bv, %nvb : tensor<32xf32>
  return
}
