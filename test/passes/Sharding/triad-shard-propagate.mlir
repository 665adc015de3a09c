// RUN: triad-opt %s -split-input-file --triad-shard-propagate='dp=2 tp=2' | FileCheck %s
// RUN: not triad-opt %s -split-input-file --triad-shard-propagate='dp=2 tp=2 order=dp,dp,tp' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not triad-opt %s -split-input-file --triad-shard-propagate='dp=4' 2>&1 | FileCheck %s --check-prefix=MISMATCH
// RUN: not triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate='dp=3' 2>&1 | FileCheck %s --check-prefix=DP3
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate='dp=2' | FileCheck %s --check-prefix=STEP

// ORDER: error: order 'dp,dp,tp' must list dp, tp and pp once each
// DP3: error: 'func.func' op batch 4 of argument 0 is not divisible by dp=3
// MISMATCH: error: the module's mesh has dp=2 but the options ask for dp=4

// Matmul: a batch split passes through; a split contraction makes the
// result partial; a split weight column splits the result's features.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @matmul
func.func @matmul(%x: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                  %k: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                  %w: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp}>},
                  %r: tensor<16x32xf32> {dist.layout = #dist.layout<{tp}, {}>}) -> (tensor<4x8x32xf32>, tensor<4x8x32xf32>, tensor<4x8x32xf32>) {
  // CHECK: triad.matmul %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %a = triad.matmul %x, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %b = triad.matmul %k, %r : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.transpose %{{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]}
  %t = triad.transpose %r [1, 0] : tensor<16x32xf32> -> tensor<32x16xf32>
  // CHECK: triad.matmul %{{.*}} transpose_rhs {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %c = triad.matmul %k, %t transpose_rhs : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  return %a, %b, %c : tensor<4x8x32xf32>, tensor<4x8x32xf32>, tensor<4x8x32xf32>
}

// -----

// Elementwise ops pass splits through; add keeps a pending sum only when
// both sides have it, and reduces it otherwise; bias_add follows its input.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                       %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                       %q: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                       %z: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: triad.gelu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %g = triad.gelu %x : tensor<4x8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %s = triad.add %p, %q : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %m = triad.add %p, %z : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: triad.bias_add %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %y = triad.bias_add %g, %b : tensor<4x8xf32>, tensor<8xf32>
  return %g, %s, %m, %y : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Reductions: a summed split dimension leaves a pending sum, a kept one
// stays split; a mean and a normalization keep their dimensions whole.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>}, %g: tensor<8xf32>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<f32>) {
  // CHECK: triad.sum %{{.*}} {dist.layouts = [#dist.layout<{tp}, partial = {dp}>]}
  %s = triad.sum %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: triad.mean %{{.*}} {dist.layouts = [#dist.layout<{tp}>]}
  %m = triad.mean %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: triad.rms_norm %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}>]}
  %n = triad.rms_norm %x, %g : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: triad.sum_squares %{{.*}} {dist.layouts = [#dist.layout<partial = {dp, tp}>]}
  %q = triad.sum_squares %x : tensor<4x8xf32>
  return %s, %m, %n, %q : tensor<8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<f32>
}

// -----

// Shapes: a reshape merging the batch into rows keeps the batch split on
// the rows; a slice keeps its sliced dimension whole.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>})
    -> (tensor<32x16xf32>, tensor<4x8x8xf32>) {
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %r = triad.reshape %x : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.slice %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %s = triad.slice %x offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  return %r, %s : tensor<32x16xf32>, tensor<4x8x8xf32>
}

// -----

// Attention splits by batch and by heads (groups of query heads sharing a
// kv head); the sequence stays whole.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %k: tensor<2x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %s: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>})
    -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  // CHECK: triad.attention {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %a = triad.attention %q, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
  // CHECK: triad.attention {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %b = triad.attention %s, %s, %s heads = 2 kv_heads = 2 mask = causal : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  return %a, %b : tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// -----

// The loss over a split batch is partial (token-weighted); the vocabulary
// stays whole.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %labels: tensor<2x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                %seed: tensor<f32>) -> (tensor<f32>, tensor<2x8x16xf32>) {
  // CHECK: triad.cross_entropy {{.*}} {dist.layouts = [#dist.layout<partial = {dp}>]}
  %l = triad.cross_entropy %logits, %labels : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %d = triad.cross_entropy_grad %logits, %labels, %seed : tensor<2x8x16xf32>, tensor<2x8xi32>
  return %l, %d : tensor<f32>, tensor<2x8x16xf32>
}

// -----

// Rotary embeddings and their gradient split by batch and heads; gated
// activations and activation gradients pass splits through; dropout keeps
// its input whole (its mask is a function of the global element index).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @activations
func.func @activations(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>})
    -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  // CHECK: triad.rope {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %r = triad.rope %x heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  // CHECK: triad.rope_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %g = triad.rope_grad %x heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  // CHECK: triad.swiglu {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %s = triad.swiglu %x, %x : tensor<2x8x16xf32>
  // CHECK: triad.activation_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %a = triad.activation_grad gelu_tanh %x, %x : tensor<2x8x16xf32>
  // CHECK: triad.dropout {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %d = triad.dropout %x probability = 0.1 rng_stream = 7 : tensor<2x8x16xf32>
  return %r, %g, %s, %a, %d : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// -----

// Shape ops: concat keeps its dimension whole, pad its padded ones;
// broadcast splits the dimensions it keeps from its input.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @shapes2
func.func @shapes2(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                   %p: tensor<8x16xf32> {dist.layout = #dist.layout<{}, {tp}>})
    -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<4x10x16xf32>, tensor<2x8x16xf32>) {
  // CHECK: triad.concat {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %c = triad.concat %x, %x dim = 2 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x32xf32>
  // CHECK: triad.concat {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %c1 = triad.concat %x, %x dim = 2 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x32xf32>
  // CHECK: triad.pad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %q = triad.pad %x low = [2, 0, 0] high = [0, 2, 0] : tensor<2x8x16xf32> -> tensor<4x10x16xf32>
  // CHECK: triad.broadcast {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %b = triad.broadcast %p : tensor<8x16xf32> -> tensor<2x8x16xf32>
  return %c, %c1, %q, %b : tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<4x10x16xf32>, tensor<2x8x16xf32>
}

// -----

// Gradient rules: the embedding gradient over a split batch is partial; a
// normalization's input gradient keeps the batch split and its weight
// gradient is partial.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @gradients
func.func @gradients(%ids: tensor<2x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                     %x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                     %g: tensor<16xf32>) -> (tensor<32x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<16xf32>) {
  // CHECK: triad.embedding_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {dp}>]}
  %e = triad.embedding_grad %ids, %x : tensor<2x8xi32>, tensor<2x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.layer_norm_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %dx, %dg = triad.layer_norm_grad %x, %g, %x : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %rx, %rg = triad.rms_norm_grad %x, %g, %x : tensor<2x8x16xf32>, tensor<16xf32>
  return %e, %dx, %dg, %rx, %rg : tensor<32x16xf32>, tensor<2x8x16xf32>, tensor<16xf32>, tensor<2x8x16xf32>, tensor<16xf32>
}

// -----

// The optimizer update is elementwise: a split moment splits the update.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @adamw
func.func @adamw(%p: tensor<8x4xf32>, %g: tensor<8x4xf32>,
                 %m: tensor<8x4xf32> {dist.layout = #dist.layout<{dp}, {}>},
                 %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  // CHECK: triad.adamw_update {{.*}} {dist.layouts = [#dist.layout<{dp}, {}>, #dist.layout<{dp}, {}>, #dist.layout<{dp}, {}>]}
  %np, %nm, %nv = triad.adamw_update %p, %g, %m, %m, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  return %np, %nm, %nv : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// The training step of a small model (Inputs/step.mlir) on dp=2: tokens and
// labels split over dp, every weight gradient partial over dp, and the
// apply step's gradient arguments take those layouts.
// STEP: dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 1]
// STEP-LABEL: func.func @microbatch_step
// STEP-SAME: tensor<4x4xi32> {dist.layout = #dist.layout<{dp}, {}>, triad.input = "tokens"}
// STEP-SAME: tensor<f32> {dist.layout = #dist.layout<partial = {dp}>, triad.output = "loss"}
// STEP-SAME: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>, triad.grad = @wte}
// STEP-LABEL: func.func @apply_step
// STEP-SAME: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>, triad.grad = @wte}

// On the 1x1x1 mesh nothing is split or pending.
// ONE: dist.mesh @mesh axes ["dp", "pp", "tp"] = [1, 1, 1]
// ONE-NOT: {dp}
// ONE-NOT: partial
