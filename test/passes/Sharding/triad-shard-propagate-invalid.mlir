// Every error of --triad-shard-propagate: its options, the mesh, data that
// does not divide, ops it cannot place.
// RUN: triad-opt %s -split-input-file -verify-diagnostics --triad-shard-propagate='dp=2 tp=2'
// RUN: not triad-opt %S/Inputs/step.mlir --triad-shard-propagate='dp=2 tp=2 order=dp,dp,tp' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not triad-opt %S/Inputs/step.mlir --triad-shard-propagate='order=dp,tp' 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not triad-opt %S/Inputs/step.mlir --triad-shard-propagate='order=dp,pp,sp' 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not triad-opt %S/Inputs/step.mlir --triad-shard-propagate='dp=0' 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: not triad-opt %s -split-input-file --triad-shard-propagate='dp=4' 2>&1 | FileCheck %s --check-prefix=MISMATCH
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate='dp=3' 2>&1 | FileCheck %s --check-prefix=DP3

// TWICE: error: order 'dp,dp,tp' must list dp, tp and pp once each
// MISSING: error: order 'dp,tp' must list dp, tp and pp once each
// UNKNOWN: error: order 'dp,pp,sp' must list dp, tp and pp once each
// SIZE: error: dp, tp and pp must be at least 1
// MISMATCH: error: the module's mesh has dp=2 but the options ask for dp=4
// DP3: error: 'func.func' op batch 4 of argument 0 is not divisible by dp=3

// A data argument's batch divides by dp.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// expected-error @+1 {{'func.func' op batch 3 of argument 1 is not divisible by dp=2}}
func.func @microbatch_step(%x: tensor<4x8xi32> {triad.input = "tokens"},
                           %y: tensor<3x8xi32> {triad.input = "labels"}) {
  return
}

// -----

// An op without a sharding rule that makes a tensor cannot be placed.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f() -> tensor<4xf32> {
  // expected-error @+1 {{'tensor.empty' op has no sharding rule; the sharding passes cannot place it on the mesh}}
  %0 = tensor.empty() : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'arith.addf' op has no sharding rule; the sharding passes cannot place it on the mesh}}
  %0 = arith.addf %x, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// tp must divide the kv heads: one kv head cannot split over 2 ranks.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%q: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>}, %k: tensor<2x8x4xf32>) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{'triad.attention' op cannot split dimension 2 of operand 0 ('tensor<2x8x16xf32>') over 2 ranks: its size (1 for this op) is not divisible}}
  %a = triad.attention %q, %k, %k heads = 4 kv_heads = 1 mask = causal : tensor<2x8x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>
  return %a : tensor<2x8x16xf32>
}

// -----

// ... nor the heads of rotary embeddings.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>}) -> tensor<2x8x16xf32> {
  // expected-error @+1 {{'triad.rope' op cannot split dimension 2 of operand 0 ('tensor<2x8x16xf32>') over 2 ranks: its size (1 for this op) is not divisible}}
  %r = triad.rope %x heads = 1 rotary_dim = 4 : tensor<2x8x16xf32>
  return %r : tensor<2x8x16xf32>
}

// -----

// A split written on an argument divides the dimension it splits.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
func.func @f(%x: tensor<3x8xf32> {dist.layout = #dist.layout<{dp}, {}>}) -> tensor<3x8xf32> {
  // expected-error @+1 {{'triad.relu' op cannot split dimension 0 of operand 0 ('tensor<3x8xf32>') over 2 ranks: its size (3 for this op) is not divisible}}
  %y = triad.relu %x : tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// The apply step's gradient takes the layout the microbatch step returns it
// with, which must fit its type.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
triad.param @w : tensor<8xf32> init <zeros>
func.func @microbatch_step(%x: tensor<4x8xf32> {triad.input = "tokens"}) -> (tensor<8xf32> {triad.grad = @w}) {
  %s = triad.sum %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  return %s : tensor<8xf32>
}
// expected-error @+1 {{'func.func' op argument 0: layout has 1 dimensions but the tensor 'tensor<2x4xf32>' has 2}}
func.func @apply_step(%g: tensor<2x4xf32> {triad.grad = @w}) {
  return
}
