// Every error of --triad-autodiff.
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-autodiff --allow-unregistered-dialect

// The function to differentiate returns a scalar loss.
// expected-error @+1 {{autodiff needs a function that returns one scalar loss (tensor<f32>); @forward returns 'tensor<4xf32>'}}
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A parameter the loss does not depend on is named.
triad.param @used : tensor<4xf32> init <ones>
// expected-error @+1 {{parameter @unused does not affect the loss of @forward; it has no gradient}}
triad.param @unused : tensor<4xf32> init <ones>
func.func @forward() -> tensor<f32> {
  %w = triad.get_param @used : tensor<4xf32>
  %s = triad.sum %w dims = [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// An op without a gradient rule on the path to the loss is named.
triad.param @w : tensor<4xf32> init <ones>
func.func @forward() -> tensor<f32> {
  %w = triad.get_param @w : tensor<4xf32>
  // expected-error @+1 {{'test.opaque' op has no gradient rule; autodiff cannot differentiate through it}}
  %o = "test.opaque"(%w) : (tensor<4xf32>) -> tensor<4xf32>
  %s = triad.sum %o dims = [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// A vocab-parallel local form comes from partitioning, after autodiff.
triad.param @w : tensor<4x2xf32> init <ones>
func.func @forward(%ids: tensor<3xi32>) -> tensor<f32> {
  %w = triad.get_param @w : tensor<4x2xf32>
  // expected-error @+1 {{'triad.embedding' op is a vocab-parallel local form, which autodiff does not differentiate (differentiate before partitioning)}}
  %e = triad.embedding %ids, %w vocab_split ["tp"] : tensor<3xi32>, tensor<4x2xf32> -> tensor<3x2xf32>
  %s = triad.sum %e dims = [0, 1] : tensor<3x2xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// The function to differentiate exists.
// expected-error @+1 {{no function @forward to differentiate}}
module {
  func.func @other() {
    return
  }
}

// -----

// The step function's name is free.
triad.param @w : tensor<4xf32> init <ones>
// expected-error @+1 {{cannot create @microbatch_step: the module already has a symbol of that name}}
func.func @forward() -> tensor<f32> {
  %w = triad.get_param @w : tensor<4xf32>
  %s = triad.sum %w dims = [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
func.func @microbatch_step() {
  return
}

// -----

// Nor does the local form of a vocab-parallel cross entropy.
func.func @forward(%x: tensor<3x4xf32>, %y: tensor<3xi32>, %lse: tensor<3x1xf32>) -> tensor<f32> {
  // expected-error @+1 {{'triad.cross_entropy' op is a vocab-parallel local form, which autodiff does not differentiate (differentiate before partitioning)}}
  %l = triad.cross_entropy %x, %y lse %lse vocab_split ["tp"] : tensor<3x4xf32>, tensor<3xi32>, tensor<3x1xf32> -> tensor<f32>
  return %l : tensor<f32>
}
