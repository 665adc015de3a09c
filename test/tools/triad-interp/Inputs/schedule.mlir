// A learning-rate schedule that decays over the run (decay = -1).
func.func @lr(%step: tensor<f32>) -> tensor<f32> {
  %lr = triad.lr_schedule %step peak = 1.0 floor = 0.0 warmup = 0 decay = -1 : tensor<f32>
  return %lr : tensor<f32>
}
