// The errors of --triad-partition at ops (its module-level errors are in
// triad-partition.mlir).
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-partition

// Every op that makes a value needs its layouts.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'triad.relu' op has no layouts; run --triad-shard-propagate first}}
  %y = triad.relu %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = triad.relu %x {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32>
  // expected-error @+1 {{'tensor.empty' op has no layouts; run --triad-shard-propagate first}}
  %z = tensor.empty() : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Only parameters are read in pieces; a constant is whole on every rank.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f() -> tensor<4x8xf32> {
  // expected-error @+1 {{'arith.constant' op cannot be split over the mesh}}
  %c = arith.constant {dist.layouts = [#dist.layout<{dp}, {}>]} dense<1.0> : tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

// A parameter read in pieces divides into them (only the innermost axis of
// a split may pad the pieces of the others, for the optimizer's update).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
triad.param @w : tensor<5x8xf32> init <zeros>
func.func @f() -> tensor<5x8xf32> {
  // expected-error @+1 {{'triad.get_param' op dimension 0 of 'tensor<5x8xf32>' is not divisible by the 4 ranks of its split axes (only the innermost axis of a split may pad)}}
  %w = triad.get_param @w {dist.layouts = [#dist.layout<{tp, dp}, {}>]} : tensor<5x8xf32>
  return %w : tensor<5x8xf32>
}

// -----

// Making a whole value pending is not supported.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>}) {
  %y = triad.relu %x {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8xf32>
  // expected-error @+1 {{cannot change layout #dist.layout<{}, {}> into #dist.layout<{}, {}, partial = {tp}> (not supported yet)}}
  return %y : tensor<4x8xf32>
}
