// Bad option values are errors.
// RUN: not triad-opt %s --triad-autodiff=recompute=sometimes 2>&1 | FileCheck %s
// CHECK: error: unknown recompute mode 'sometimes' (expected none, selective or full)
// RUN: not triad-opt %s --triad-autodiff=function=missing 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: no function @missing to differentiate
triad.param @w : tensor<4xf32> init <ones>
func.func @forward() -> tensor<f32> {
  %w = triad.get_param @w : tensor<4xf32>
  %s = triad.sum %w dims = [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
