// ZeRO at dp=3 over tensors no dimension of which 3 divides: each state
// tensor takes a padded split of its largest dimension (pieces of
// ceil(size / 3)), and the update runs on the padded pieces.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [3, 1, 1]
triad.param @w : tensor<32x8xf32> init <zeros>
triad.state @m : tensor<32x8xf32> init <zeros> of @w {dist.zero}
triad.state @v : tensor<32x8xf32> init <zeros> of @w {dist.zero}
triad.param @b : tensor<5xf32> init <zeros> {dist.zero}
triad.state @bm : tensor<5xf32> init <zeros> of @b {dist.zero}
triad.state @bv : tensor<5xf32> init <zeros> of @b {dist.zero}
func.func @apply_step(%g: tensor<32x8xf32>, %gb: tensor<5xf32>, %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>) -> tensor<f32> {
  %p = triad.get_param @w : tensor<32x8xf32>
  %m = triad.get_param @m : tensor<32x8xf32>
  %v = triad.get_param @v : tensor<32x8xf32>
  %np, %nm, %nv = triad.adamw_update %p, %g, %m, %v, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<32x8xf32>, tensor<32x8xf32>, tensor<32x8xf32>
  triad.assign @w, %np : tensor<32x8xf32>
  triad.assign @m, %nm : tensor<32x8xf32>
  triad.assign @v, %nv : tensor<32x8xf32>
  %pb = triad.get_param @b : tensor<5xf32>
  %mb = triad.get_param @bm : tensor<5xf32>
  %vb = triad.get_param @bv : tensor<5xf32>
  %npb, %nmb, %nvb = triad.adamw_update %pb, %gb, %mb, %vb, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.0 : tensor<5xf32>, tensor<5xf32>, tensor<5xf32>
  triad.assign @b, %npb : tensor<5xf32>
  triad.assign @bm, %nmb : tensor<5xf32>
  triad.assign @bv, %nvb : tensor<5xf32>
  %s = triad.sum_squares %npb : tensor<5xf32>
  return %s : tensor<f32>
}
