// The layouts --triad-shard-propagate gives, from layouts written on function
// arguments and parameters: the sharding rule of every triad op, the data
// arguments, parameters, ZeRO state, the gradients of the apply step, the
// mesh. Its errors are in triad-shard-propagate-invalid.mlir.
// RUN: triad-opt %s -split-input-file --triad-shard-propagate='dp=2 tp=2' | FileCheck %s
// RUN: triad-opt %s -split-input-file '--triad-shard-propagate=dp=2 tp=2 order=tp,dp,pp' | FileCheck %s --check-prefix=ORDER
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate | FileCheck %s --check-prefix=ONE
// RUN: triad-opt %S/Inputs/step.mlir --triad-autodiff --triad-shard-propagate='dp=2' | FileCheck %s --check-prefix=STEP
// RUN: triad-opt %S/Inputs/zero-padded.mlir --triad-shard-propagate='dp=3' | FileCheck %s --check-prefix=PADDED
// RUN: triad-gen --preset llama2-7b --layers 1 --hidden 32 --heads 4 --ffn 64 --vocab 256 --seq 16 --batch 4 | triad-opt --triad-autodiff '--triad-shard-propagate=tp=2' | FileCheck %s --check-prefix=SAVED

// A layer's result that a backward layer reads leaves the layer reduced: in
// the forward function alone, the vocab-parallel embedding hands the first
// layer its pending sum (the layer reduces it for its norm); in the
// microbatch step, where the first layer's backward twin reads the same
// value, the embedding reduces it (once, not in the forward and again in
// the backward).
// SAVED-LABEL: func.func @forward
// SAVED: triad.layer embedding 0 (%arg0) {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
// SAVED: triad.layer transformer 0 (%0) {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
// SAVED-LABEL: func.func @microbatch_step
// SAVED: triad.layer embedding 0 (%arg0) {dist.layouts = [#dist.layout<{}, {}, {}>]}
// SAVED: triad.layer transformer 0 (%0) {dist.layouts = [#dist.layout<{}, {}, {}>,

// ZeRO where dp=3 divides no dimension: a padded split of the largest
// dimension (Inputs/zero-padded.mlir), which the update and the sum of
// squares (they compute on zero-padded pieces) take.
// PADDED: triad.state @m : tensor<32x8xf32> init <zeros> of @w {dist.layout = #dist.layout<{dp}, {}>, dist.zero}
// PADDED: triad.param @b : tensor<5xf32> init <zeros> {dist.layout = #dist.layout<{dp}>, dist.zero}
// PADDED: triad.get_param @w {dist.layouts = [#dist.layout<{}, {}>]}
// PADDED: triad.adamw_update {{.*}} {dist.layouts = [#dist.layout<{dp}, {}>, #dist.layout<{dp}, {}>, #dist.layout<{dp}, {}>]} : tensor<32x8xf32>
// PADDED: triad.adamw_update {{.*}} {dist.layouts = [#dist.layout<{dp}>, #dist.layout<{dp}>, #dist.layout<{dp}>]} : tensor<5xf32>
// PADDED: triad.sum_squares {{.*}} {dist.layouts = [#dist.layout<partial = {dp}>]} : tensor<5xf32>
// RUN: triad-opt %S/Inputs/zero-padded-tp.mlir '--triad-shard-propagate=dp=3 tp=2' | FileCheck %s --check-prefix=PADTP

// ZeRO over a bias tp already splits (Inputs/zero-padded-tp.mlir): dp=3
// splits each tp piece further, padded, and the update takes that layout.
// PADTP: triad.state @bm : tensor<32xf32> init <zeros> of @b {dist.layout = #dist.layout<{tp, dp}>, dist.zero}
// PADTP: triad.adamw_update {{.*}} {dist.layouts = [#dist.layout<{tp, dp}>, #dist.layout<{tp, dp}>, #dist.layout<{tp, dp}>]} : tensor<32xf32>

// The pass declares the mesh when the module has none, in the order asked
// for; the data arguments (triad.input) split their batch over dp, scalars
// and other arguments stay replicated, and results take their values'
// layouts.
// CHECK: dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// ORDER: dist.mesh @mesh axes ["tp", "dp", "pp"] = [2, 2, 1]
// CHECK-LABEL: func.func @data
// CHECK-SAME: (%{{.*}}: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>, triad.input = "tokens"}
// CHECK-SAME: %{{.*}}: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>, triad.input = "labels"}
// CHECK-SAME: %{{.*}}: tensor<f32> {dist.layout = #dist.layout<>, triad.input = "scale"}
// CHECK-SAME: %{{.*}}: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}>})
// CHECK-SAME: -> (tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>}, tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}>})
func.func @data(%tokens: tensor<4x8xi32> {triad.input = "tokens"},
                %labels: tensor<4x8xi32> {triad.input = "labels"},
                %scale: tensor<f32> {triad.input = "scale"},
                %other: tensor<4x8xf32>) -> (tensor<4x8xi32>, tensor<4x8xf32>) {
  return %labels, %other : tensor<4x8xi32>, tensor<4x8xf32>
}

// -----

// A layout written on an argument is kept, on a data argument too.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @given
// CHECK-SAME: tensor<4x8xi32> {dist.layout = #dist.layout<{}, {tp}>, triad.input = "tokens"}
// CHECK-SAME: tensor<4x8xf32> {dist.layout = #dist.layout<{tp}, {}, partial = {dp}>}
func.func @given(%tokens: tensor<4x8xi32> {dist.layout = #dist.layout<{}, {tp}>, triad.input = "tokens"},
                 %x: tensor<4x8xf32> {dist.layout = #dist.layout<{tp}, {}, partial = {dp}>}) {
  return
}

// -----

// Embedding: the ids' splits pass to the rows, a table split on its hidden
// dimension splits the result's, a table split on its vocabulary leaves the
// result pending over those axes (vocab-parallel: each piece looks up its
// rows), and a pending sum in the table passes through (the op is linear in
// it).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @embedding
func.func @embedding(%ids: tensor<2x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                     %hidden: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {tp}>},
                     %vocab: tensor<16x8xf32> {dist.layout = #dist.layout<{tp}, {}>},
                     %pending: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>}) {
  // CHECK: triad.embedding %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %a = triad.embedding %ids, %hidden : tensor<2x8xi32>, tensor<16x8xf32> -> tensor<2x8x8xf32>
  // CHECK: triad.embedding %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]}
  %b = triad.embedding %ids, %vocab : tensor<2x8xi32>, tensor<16x8xf32> -> tensor<2x8x8xf32>
  // CHECK: triad.embedding %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]}
  %c = triad.embedding %ids, %pending : tensor<2x8xi32>, tensor<16x8xf32> -> tensor<2x8x8xf32>
  return
}

// -----

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

// Matmul with a transposed lhs (its contraction is dimension -2) and a
// batched rhs; the first operand to split a factor decides, except that a
// factor the result keeps takes an axis before a contraction does, and a
// pending sum passes through.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @matmul_transposed_batched
func.func @matmul_transposed_batched(
    %at: tensor<4x16x8xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
    %rows: tensor<4x16x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %a: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
    %b: tensor<4x16x32xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %w: tensor<16x32xf32>,
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.matmul %{{.*}} transpose_lhs {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %0 = triad.matmul %at, %w transpose_lhs : tensor<4x16x8xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // The rows take tp, so the rhs's columns are gathered.
  // CHECK: triad.matmul %{{.*}} transpose_lhs {dist.layouts = [#dist.layout<{dp}, {tp}, {}>]}
  %1 = triad.matmul %rows, %b transpose_lhs : tensor<4x16x8xf32>, tensor<4x16x32xf32> -> tensor<4x8x32xf32>
  // The batch and the columns come from the rhs; the lhs's split
  // contraction would want tp too, and is gathered instead of leaving a
  // pending sum.
  // CHECK: triad.matmul %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %2 = triad.matmul %a, %b : tensor<4x8x16xf32>, tensor<4x16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %3 = triad.matmul %p, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  return
}

// -----

// add and bias_add keep a pending sum only when every operand has it over
// the same axes, and reduce it otherwise; a trailing vector operand splits
// with the dimensions it shares.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @add
func.func @add(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
               %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
               %q: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
               %d: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>},
               %z: tensor<4x8xf32>,
               %b: tensor<8xf32> {dist.layout = #dist.layout<{tp}>},
               %pb: tensor<8xf32> {dist.layout = #dist.layout<{}, partial = {tp}>}) {
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %0 = triad.add %p, %q : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %1 = triad.add %p, %z : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %2 = triad.add %p, %d : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %3 = triad.add %x, %z : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]}
  %4 = triad.add %z, %b : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: triad.add %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %5 = triad.add %p, %pb : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: triad.bias_add %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %6 = triad.bias_add %x, %b : tensor<4x8xf32>, tensor<8xf32>
  // CHECK: triad.bias_add %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %7 = triad.bias_add %p, %pb : tensor<4x8xf32>, tensor<8xf32>
  // The pending sum meets a bias split over its own axis: it is reduced.
  // CHECK: triad.bias_add %{{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]}
  %8 = triad.bias_add %p, %b : tensor<4x8xf32>, tensor<8xf32>
  return
}

// -----

// mul and scale are linear in each operand: one pending operand passes its
// sum on, two are reduced first, and so is one whose axis another
// operand's split takes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @mul_scale
func.func @mul_scale(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                     %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                     %z: tensor<4x8xf32>) {
  // CHECK: triad.mul %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %0 = triad.mul %x, %z : tensor<4x8xf32>
  // CHECK: triad.mul %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %1 = triad.mul %z, %p : tensor<4x8xf32>
  // CHECK: triad.mul %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %2 = triad.mul %p, %p : tensor<4x8xf32>
  // CHECK: triad.mul %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %3 = triad.mul %p, %x : tensor<4x8xf32>
  // CHECK: triad.scale %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %4 = triad.scale %p by 2.0 : tensor<4x8xf32>
  // CHECK: triad.scale %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %5 = triad.scale %x by 2.0 : tensor<4x8xf32>
  return
}

// -----

// Activations, gated ones and casts pass splits through and reduce pending
// sums (they are not linear); an activation's gradient is linear in dy.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @activations
func.func @activations(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                       %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                       %d: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>},
                       %r: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {tp}>},
                       %z: tensor<4x8xf32>,
                       %h: tensor<4x8xbf16> {dist.layout = #dist.layout<{dp}, {tp}>}) {
  // CHECK: triad.gelu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %0 = triad.gelu %x : tensor<4x8xf32>
  // CHECK: triad.gelu %{{.*}} approximate = tanh {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %1 = triad.gelu %x approximate = tanh : tensor<4x8xf32>
  // CHECK: triad.fast_gelu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %2 = triad.fast_gelu %x : tensor<4x8xf32>
  // CHECK: triad.relu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %3 = triad.relu %x : tensor<4x8xf32>
  // CHECK: triad.silu %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %4 = triad.silu %p : tensor<4x8xf32>
  // CHECK: triad.relu %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %5 = triad.relu %p : tensor<4x8xf32>
  // CHECK: triad.swiglu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %6 = triad.swiglu %z, %x : tensor<4x8xf32>
  // CHECK: triad.geglu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %7 = triad.geglu %x, %z : tensor<4x8xf32>
  // CHECK: triad.swiglu %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %8 = triad.swiglu %p, %z : tensor<4x8xf32>
  // CHECK: triad.cast %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %9 = triad.cast %h : tensor<4x8xbf16> -> tensor<4x8xf32>
  // CHECK: triad.activation_grad relu %{{.*}} {dist.layouts = [#dist.layout<{}, {tp}, partial = {dp}>]}
  %10 = triad.activation_grad relu %r, %d : tensor<4x8xf32>
  // CHECK: triad.activation_grad silu %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %11 = triad.activation_grad silu %d, %x : tensor<4x8xf32>
  // dy's sum is over tp, which x's split takes: it is reduced.
  // CHECK: triad.activation_grad gelu_tanh %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %12 = triad.activation_grad gelu_tanh %x, %p : tensor<4x8xf32>
  return
}

// -----

// Dropout keeps its input whole but for the batch (its mask is a function of
// the global element index, and a piece of the batch is a run of them).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @dropout
func.func @dropout(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>}) -> tensor<2x8x16xf32> {
  // CHECK: triad.dropout {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %d = triad.dropout %x probability = 0.1 rng_stream = 7 : tensor<2x8x16xf32>
  return %d : tensor<2x8x16xf32>
}

// -----

// Normalizations keep their normalized (hidden) dimension whole: a split
// one is gathered, the other dimensions pass, and a pending input is
// reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @normalization
func.func @normalization(%rows: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                         %hidden: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                         %p: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                         %g: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
                         %b: tensor<16xf32>) {
  // CHECK: triad.layer_norm %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}, {}>]}
  %0 = triad.layer_norm %rows, %g, %b : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.layer_norm %hidden, %b : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %2 = triad.rms_norm %hidden, %g : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.rms_norm %p, %b : tensor<2x8x16xf32>, tensor<16xf32>
  return
}

// -----

// Normalization gradients: dx keeps the splits of the rows, dgamma (summed
// over the rows) is partial over their axes, and both pass on a pending dy.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @normalization_grad
func.func @normalization_grad(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                              %xs: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                              %r: tensor<2x8x16xf32>,
                              %dy: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                              %g: tensor<16xf32>) {
  // CHECK: triad.layer_norm_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %0:2 = triad.layer_norm_grad %x, %g, %x : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %1:2 = triad.rms_norm_grad %x, %g, %x : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}, {}>, #dist.layout<{}, partial = {dp, tp}>]}
  %2:2 = triad.layer_norm_grad %xs, %g, %xs : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>, #dist.layout<{}, partial = {tp}>]}
  %3:2 = triad.rms_norm_grad %r, %g, %dy : tensor<2x8x16xf32>, tensor<16xf32>
  return
}

// -----

// Attention splits by batch and by groups of query heads sharing a kv head
// (the prefix lengths with the batch, the ALiBi slopes with the heads); a
// split sequence is gathered and a pending input reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %k: tensor<2x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %s: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                     %p: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                     %r: tensor<2x8x16xf32>,
                     %plen: tensor<2xi32> {dist.layout = #dist.layout<{dp}>},
                     %slopes: tensor<4xf32> {dist.layout = #dist.layout<{tp}>}) {
  // CHECK: triad.attention {{.*}} heads = 4 kv_heads = 2 mask = causal {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
  // CHECK: triad.attention {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %1 = triad.attention %s, %s, %s heads = 2 kv_heads = 2 mask = causal : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: triad.attention {{.*}} prefix({{.*}}) {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %2 = triad.attention %r, %r, %r prefix(%plen : tensor<2xi32>) heads = 4 kv_heads = 4 mask = prefix : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: triad.attention {{.*}} alibi({{.*}}) {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %3 = triad.attention %r, %r, %r alibi(%slopes : tensor<4xf32>) heads = 4 kv_heads = 4 mask = none : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: triad.attention {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %4 = triad.attention %p, %r, %r heads = 4 kv_heads = 4 mask = causal : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  return
}

// -----

// Attention's gradient follows the same rule for its three results, and is
// linear in dy.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention_grad
func.func @attention_grad(%q: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                          %k: tensor<2x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                          %s: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                          %dy: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                          %r: tensor<2x8x16xf32>, %rk: tensor<2x8x8xf32>) {
  // CHECK: triad.attention_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>, #dist.layout<{dp}, {}, {tp}>, #dist.layout<{dp}, {}, {tp}>]}
  %0:3 = triad.attention_grad %q, %k, %k, %q heads = 4 kv_heads = 2 mask = causal : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32> -> tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
  // CHECK: triad.attention_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}, {}, {}>, #dist.layout<{}, {}, {}>]}
  %1:3 = triad.attention_grad %s, %s, %s, %s heads = 4 kv_heads = 4 mask = causal : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: triad.attention_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>, #dist.layout<{}, {}, {}, partial = {dp}>, #dist.layout<{}, {}, {}, partial = {dp}>]}
  %2:3 = triad.attention_grad %r, %rk, %rk, %dy heads = 4 kv_heads = 2 mask = causal : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32> -> tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
  return
}

// -----

// Rotary embeddings and their gradient split by batch and heads, gather a
// split sequence, and are linear in their input.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rope
func.func @rope(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %s: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                %p: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.rope {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %0 = triad.rope %x heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  // CHECK: triad.rope_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.rope_grad %x heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  // CHECK: triad.rope {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %2 = triad.rope %s heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  // CHECK: triad.rope {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %3 = triad.rope %p heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  // CHECK: triad.rope_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %4 = triad.rope_grad %p heads = 4 rotary_dim = 4 : tensor<2x8x16xf32>
  return
}

// -----

// Reshapes: merging the batch into rows keeps the batch split on the rows
// and splitting the rows back keeps it on the batch; only the outermost
// dimension of a merged run keeps its split; pending sums pass.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reshape
func.func @reshape(%x: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                   %seq: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                   %rows: tensor<32x16xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                   %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]} : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %0 = triad.reshape %x : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<32x16xf32> -> tensor<4x8x16xf32>
  %1 = triad.reshape %rows : tensor<32x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %2 = triad.reshape %seq : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // Splitting the hidden dimension into heads keeps tp on the heads.
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}, {}>]} : tensor<4x8x16xf32> -> tensor<4x8x4x4xf32>
  %3 = triad.reshape %x : tensor<4x8x16xf32> -> tensor<4x8x4x4xf32>
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<4x8x16xf32> -> tensor<4x128xf32>
  %4 = triad.reshape %x : tensor<4x8x16xf32> -> tensor<4x128xf32>
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {dp}>]} : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %5 = triad.reshape %p : tensor<4x8x16xf32> -> tensor<32x16xf32>
  return
}

// -----

// Transpose permutes the splits; slice keeps a sliced dimension whole and
// passes the others (a full-size one included).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @transpose_slice
func.func @transpose_slice(%x: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                           %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.transpose %{{.*}} {dist.layouts = [#dist.layout<{}, {dp}, {tp}>]}
  %0 = triad.transpose %x [1, 0, 2] : tensor<4x8x16xf32> -> tensor<8x4x16xf32>
  // CHECK: triad.transpose %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %1 = triad.transpose %p [2, 1, 0] : tensor<4x8x16xf32> -> tensor<16x8x4xf32>
  // CHECK: triad.slice %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %2 = triad.slice %x offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.slice %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %3 = triad.slice %x offsets = [2, 0, 0] sizes = [2, 8, 16] : tensor<4x8x16xf32> -> tensor<2x8x16xf32>
  // CHECK: triad.slice %{{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %4 = triad.slice %x offsets = [0, 0, 0] sizes = [4, 8, 16] : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.slice %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %5 = triad.slice %p offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  return
}

// -----

// Concat keeps its dimension whole and passes a sum pending in every
// input; pad keeps its padded dimensions whole (it pads with zeros, so it
// is linear); broadcast splits the dimensions it takes from its input.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @concat_pad_broadcast
func.func @concat_pad_broadcast(%x: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                                %y: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                                %p: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                                %m: tensor<8x16xf32> {dist.layout = #dist.layout<{}, {tp}>},
                                %v: tensor<1x16xf32> {dist.layout = #dist.layout<{}, {tp}>}) {
  // CHECK: triad.concat {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %0 = triad.concat %x, %x dim = 2 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x32xf32>
  // The first input's split of the hidden dimension takes tp.
  // CHECK: triad.concat {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %1 = triad.concat %x, %y dim = 0 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.concat {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %2 = triad.concat %p, %p dim = 1 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x16x16xf32>
  // Only one input is pending: it is reduced.
  // CHECK: triad.concat {{.*}} {dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %3 = triad.concat %p, %y dim = 0 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.pad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %4 = triad.pad %x low = [2, 0, 0] high = [0, 2, 0] : tensor<2x8x16xf32> -> tensor<4x10x16xf32>
  // CHECK: triad.pad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %5 = triad.pad %x low = [0, 0, 0] high = [0, 0, 2] : tensor<2x8x16xf32> -> tensor<2x8x18xf32>
  // CHECK: triad.pad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %6 = triad.pad %p low = [0, 1, 0] high = [0, 0, 0] : tensor<2x8x16xf32> -> tensor<2x9x16xf32>
  // CHECK: triad.broadcast {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %7 = triad.broadcast %m : tensor<8x16xf32> -> tensor<2x8x16xf32>
  // A dimension expanded from 1 has nothing to split.
  // CHECK: triad.broadcast {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %8 = triad.broadcast %v : tensor<1x16xf32> -> tensor<2x8x16xf32>
  return
}

// -----

// Reductions: a summed split dimension leaves a pending sum, a kept one
// stays split; a mean keeps its dimensions whole (it divides by their
// global size); both pass a pending input; the sum of squares is partial
// over every split and reduces a pending input first.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                      %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>}) {
  // CHECK: triad.sum %{{.*}} {dist.layouts = [#dist.layout<{tp}, partial = {dp}>]}
  %0 = triad.sum %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: triad.sum %{{.*}} {dist.layouts = [#dist.layout<{dp}, partial = {tp}>]}
  %1 = triad.sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  // CHECK: triad.sum %{{.*}} {dist.layouts = [#dist.layout<partial = {dp, tp}>]}
  %2 = triad.sum %x dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  // CHECK: triad.sum %{{.*}} {dist.layouts = [#dist.layout<{}, partial = {dp}>]}
  %3 = triad.sum %p dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: triad.mean %{{.*}} {dist.layouts = [#dist.layout<{tp}>]}
  %4 = triad.mean %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: triad.mean %{{.*}} {dist.layouts = [#dist.layout<>]}
  %5 = triad.mean %x dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  // CHECK: triad.mean %{{.*}} {dist.layouts = [#dist.layout<{}, partial = {dp}>]}
  %6 = triad.mean %p dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  // CHECK: triad.sum_squares %{{.*}} {dist.layouts = [#dist.layout<partial = {dp, tp}>]}
  %7 = triad.sum_squares %x : tensor<4x8xf32>
  // CHECK: triad.sum_squares %{{.*}} {dist.layouts = [#dist.layout<>]}
  %8 = triad.sum_squares %p : tensor<4x8xf32>
  return
}

// -----

// The loss over split samples is partial (token-weighted); positions stay
// whole; a split vocabulary stays split (vocab-parallel), the loss whole
// over it; the loss gradient keeps the sample split and is linear in the
// incoming gradient. The embedding gradient over a split batch is partial.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %tokens: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                %vocab: tensor<2x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                %labels: tensor<2x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                %whole: tensor<2x8xi32>,
                %seed: tensor<f32>,
                %pseed: tensor<f32> {dist.layout = #dist.layout<partial = {dp}>},
                %ids: tensor<2x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                %dx: tensor<2x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>}) {
  // CHECK: triad.cross_entropy {{.*}} {dist.layouts = [#dist.layout<partial = {dp}>]}
  %0 = triad.cross_entropy %logits, %labels : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<f32>
  // Positions stay whole: logits split along the sequence are gathered.
  // CHECK: triad.cross_entropy {{.*}} {dist.layouts = [#dist.layout<partial = {dp}>]}
  %1 = triad.cross_entropy %tokens, %labels : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy {{.*}} {dist.layouts = [#dist.layout<partial = {dp}>]}
  %2 = triad.cross_entropy %vocab, %labels : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy_grad {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %3 = triad.cross_entropy_grad %logits, %labels, %seed : tensor<2x8x16xf32>, tensor<2x8xi32>
  // Split along the vocabulary, the gradient stays split (vocab-parallel).
  // CHECK: triad.cross_entropy_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>]}
  %4 = triad.cross_entropy_grad %vocab, %whole, %pseed : tensor<2x8x16xf32>, tensor<2x8xi32>
  // CHECK: triad.embedding_grad {{.*}} {dist.layouts = [#dist.layout<{}, {tp}, partial = {dp}>]}
  %5 = triad.embedding_grad %ids, %dx : tensor<2x8xi32>, tensor<2x8x16xf32> -> tensor<32x16xf32>
  return
}

// -----

// The optimizer's ops: the update is elementwise (a split moment splits
// it); the schedule, clipping and loss scaling work on replicated scalars
// (a pending input is reduced); select splits like its tensors.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @optimizer
func.func @optimizer(%p: tensor<8x4xf32>, %g: tensor<8x4xf32>,
                     %m: tensor<8x4xf32> {dist.layout = #dist.layout<{dp}, {}>},
                     %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>,
                     %ss: tensor<f32> {dist.layout = #dist.layout<partial = {tp}>},
                     %x: tensor<8x4xf32> {dist.layout = #dist.layout<{dp}, {tp}>}) {
  // CHECK: triad.adamw_update {{.*}} {dist.layouts = [#dist.layout<{dp}, {}>, #dist.layout<{dp}, {}>, #dist.layout<{dp}, {}>]}
  %np, %nm, %nv = triad.adamw_update %p, %g, %m, %m, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  // CHECK: triad.lr_schedule {{.*}} {dist.layouts = [#dist.layout<>]}
  %l = triad.lr_schedule %ss peak = 1.0e-3 floor = 1.0e-4 warmup = 10 decay = 100 : tensor<f32>
  // CHECK: triad.clip_coefficient {{.*}} {dist.layouts = [#dist.layout<>, #dist.layout<>]}
  %c:2 = triad.clip_coefficient %ss max_norm = 1.0
  // CHECK: triad.loss_scale_update {{.*}} {dist.layouts = [#dist.layout<>, #dist.layout<>, #dist.layout<>, #dist.layout<>]}
  %s:4 = triad.loss_scale_update %ss, %step, %step growth_interval = 100 growth = 2.0 backoff = 0.5
  // CHECK: triad.select {{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %x2 = triad.select %c#0, %x, %p : tensor<8x4xf32>
  return
}

// -----

// Constants are replicated.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @constants
func.func @constants(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>}) -> tensor<4x8xf32> {
  // CHECK: arith.constant {dist.layouts = [#dist.layout<{}, {}>]} dense<1.000000e+00> : tensor<4x8xf32>
  %c = arith.constant dense<1.0> : tensor<4x8xf32>
  // CHECK: triad.mul %{{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %y = triad.mul %c, %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A parameter's layout written by hand is what every read gets; the first
// user of a parameter without one does not change it.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: triad.param @given.w
// CHECK-SAME: {dist.layout = #dist.layout<{tp}, {}>}
triad.param @given.w : tensor<16x32xf32> init <zeros> {dist.layout = #dist.layout<{tp}, {}>}
// CHECK-LABEL: func.func @given_param
func.func @given_param(%x: tensor<4x16xf32> {dist.layout = #dist.layout<{dp}, {}>}) -> (tensor<4x32xf32>, tensor<f32>) {
  // CHECK: triad.get_param @given.w {dist.layouts = [#dist.layout<{tp}, {}>]}
  %w = triad.get_param @given.w : tensor<16x32xf32>
  // CHECK: triad.matmul {{.*}} {dist.layouts = [#dist.layout<{dp}, {}, partial = {tp}>]}
  %y = triad.matmul %x, %w : tensor<4x16xf32>, tensor<16x32xf32> -> tensor<4x32xf32>
  // CHECK: triad.get_param @given.w {dist.layouts = [#dist.layout<{tp}, {}>]}
  %w2 = triad.get_param @given.w : tensor<16x32xf32>
  // CHECK: triad.sum_squares {{.*}} {dist.layouts = [#dist.layout<partial = {tp}>]}
  %n = triad.sum_squares %w2 : tensor<16x32xf32>
  return %y, %n : tensor<4x32xf32>, tensor<f32>
}

// -----

// Megatron's tensor parallelism from unannotated weights (tp > 1): the
// first linear layer's weight splits its output features, its bias and
// activation follow, the second weight splits its input features and its
// result is partial over tp. Each parameter keeps the layout of its first
// read.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: triad.param @mlp.fc1
// CHECK-SAME: {dist.layout = #dist.layout<{}, {tp}>}
// CHECK-NEXT: triad.param @mlp.b1
// CHECK-SAME: {dist.layout = #dist.layout<{tp}>}
// CHECK-NEXT: triad.param @mlp.fc2
// CHECK-SAME: {dist.layout = #dist.layout<{tp}, {}>}
triad.param @mlp.fc1 : tensor<8x32xf32> init <zeros>
triad.param @mlp.b1 : tensor<32xf32> init <zeros>
triad.param @mlp.fc2 : tensor<32x8xf32> init <zeros>
// CHECK-LABEL: func.func @mlp
func.func @mlp(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<f32>) {
  // CHECK: triad.get_param @mlp.fc1 {dist.layouts = [#dist.layout<{}, {tp}>]}
  %w1 = triad.get_param @mlp.fc1 : tensor<8x32xf32>
  // CHECK: triad.matmul {{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]}
  %h = triad.matmul %x, %w1 : tensor<4x8xf32>, tensor<8x32xf32> -> tensor<4x32xf32>
  // CHECK: triad.get_param @mlp.b1 {dist.layouts = [#dist.layout<{tp}>]}
  %b1 = triad.get_param @mlp.b1 : tensor<32xf32>
  // CHECK: triad.bias_add {{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]}
  %hb = triad.bias_add %h, %b1 : tensor<4x32xf32>, tensor<32xf32>
  // CHECK: triad.gelu {{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]}
  %g = triad.gelu %hb : tensor<4x32xf32>
  // CHECK: triad.get_param @mlp.fc2 {dist.layouts = [#dist.layout<{tp}, {}>]}
  %w2 = triad.get_param @mlp.fc2 : tensor<32x8xf32>
  // CHECK: triad.matmul {{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %y = triad.matmul %g, %w2 : tensor<4x32xf32>, tensor<32x8xf32> -> tensor<4x8xf32>
  // CHECK: triad.get_param @mlp.fc1 {dist.layouts = [#dist.layout<{}, {tp}>]}
  %again = triad.get_param @mlp.fc1 : tensor<8x32xf32>
  %n = triad.sum_squares %again : tensor<8x32xf32>
  return %y, %n : tensor<4x8xf32>, tensor<f32>
}

// -----

// Tensor parallelism splits an embedding table along its vocabulary
// (vocab-parallel), tied or not: the output layer's product with a tied
// table gives logits split along the vocabulary. A vocabulary tp does not
// divide stays whole.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: triad.param @emb.untied
// CHECK-SAME: {dist.layout = #dist.layout<{tp}, {}>}
// CHECK-NEXT: triad.param @emb.tied
// CHECK-SAME: {dist.layout = #dist.layout<{tp}, {}>}
// CHECK-NEXT: triad.param @emb.odd
// CHECK-NOT: dist.layout
// CHECK: func.func @lookups
triad.param @emb.untied : tensor<16x8xf32> init <zeros>
triad.param @emb.tied : tensor<16x8xf32> init <zeros>
triad.param @emb.odd : tensor<15x8xf32> init <zeros>
func.func @lookups(%ids: tensor<4x8xi32>) -> (tensor<4x8x8xf32>, tensor<4x8x16xf32>, tensor<4x8x8xf32>) {
  // CHECK: triad.embedding {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %u = triad.get_param @emb.untied : tensor<16x8xf32>
  %a = triad.embedding %ids, %u : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %t = triad.get_param @emb.tied : tensor<16x8xf32>
  %b = triad.embedding %ids, %t : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  %t2 = triad.get_param @emb.tied : tensor<16x8xf32>
  // CHECK: triad.matmul {{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %logits = triad.matmul %b, %t2 transpose_rhs : tensor<4x8x8xf32>, tensor<16x8xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.embedding {{.*}} {dist.layouts = [#dist.layout<{}, {}, {}>]}
  %o = triad.get_param @emb.odd : tensor<15x8xf32>
  %c = triad.embedding %ids, %o : tensor<4x8xi32>, tensor<15x8xf32> -> tensor<4x8x8xf32>
  return %a, %logits, %c : tensor<4x8x8xf32>, tensor<4x8x16xf32>, tensor<4x8x8xf32>
}

// -----

// ZeRO state (dist.zero) takes its parameter's split and adds dp on the
// first dimension that can take it; other state takes its first user's.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: triad.param @zero.w
// CHECK-SAME: {dist.layout = #dist.layout<{}, {tp}>}
// CHECK-NEXT: triad.state @zero.m
// CHECK-SAME: {dist.layout = #dist.layout<{dp}, {tp}>, dist.zero}
// CHECK-NEXT: triad.state @zero.v
// CHECK-SAME: {dist.layout = #dist.layout<{}, {tp}>}
triad.param @zero.w : tensor<8x4xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
triad.state @zero.m : tensor<8x4xf32> init <zeros> of @zero.w {dist.zero}
triad.state @zero.v : tensor<8x4xf32> init <zeros> of @zero.w
// CHECK-LABEL: func.func @zero
func.func @zero(%g: tensor<8x4xf32>, %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>) {
  %p = triad.get_param @zero.w : tensor<8x4xf32>
  // CHECK: triad.get_param @zero.m {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %m = triad.get_param @zero.m : tensor<8x4xf32>
  %v = triad.get_param @zero.v : tensor<8x4xf32>
  // CHECK: triad.adamw_update {{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>]}
  %np, %nm, %nv = triad.adamw_update %p, %g, %m, %v, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  triad.assign @zero.w, %np : tensor<8x4xf32>
  triad.assign @zero.m, %nm : tensor<8x4xf32>
  triad.assign @zero.v, %nv : tensor<8x4xf32>
  return
}

// -----

// The training step by hand: @microbatch_step is propagated first wherever
// it is, values flow into and out of layers, and @apply_step's gradient
// arguments take the layouts @microbatch_step returns the gradients with.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
triad.param @step.w : tensor<8x8xf32> init <zeros> {dist.layout = #dist.layout<{}, {tp}>}
// CHECK-LABEL: func.func @apply_step
// CHECK-SAME: tensor<8x8xf32> {dist.layout = #dist.layout<{}, {tp}, partial = {dp}>, triad.grad = @step.w}
func.func @apply_step(%g: tensor<8x8xf32> {triad.grad = @step.w}) {
  return
}
// CHECK-LABEL: func.func @microbatch_step
// CHECK-SAME: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {}>, triad.input = "tokens"}
// CHECK-SAME: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>}
// CHECK-SAME: tensor<8x8xf32> {dist.layout = #dist.layout<{}, {tp}, partial = {dp}>, triad.grad = @step.w}
func.func @microbatch_step(%x: tensor<4x8xf32> {triad.input = "tokens"}) -> (tensor<4x8xf32>, tensor<8x8xf32> {triad.grad = @step.w}) {
  // CHECK: triad.layer transformer 0 {{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %h = triad.layer transformer 0 (%x) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %w = triad.get_param @step.w : tensor<8x8xf32>
    // CHECK: triad.matmul {{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>]}
    %y = triad.matmul %a, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
    triad.yield %y : tensor<4x8xf32>
  }
  // CHECK: triad.matmul {{.*}} transpose_lhs {dist.layouts = [#dist.layout<{}, {tp}, partial = {dp}>]}
  %g = triad.matmul %x, %h transpose_lhs : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  return %h, %g : tensor<4x8xf32>, tensor<8x8xf32>
}

// The training step of a small model (Inputs/step.mlir) on dp=2: tokens and
// labels split over dp, the loss and every weight gradient partial over
// dp, and the apply step's gradient arguments take those layouts.
// STEP: dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 1]
// STEP-LABEL: func.func @microbatch_step
// STEP-SAME: tensor<4x4xi32> {dist.layout = #dist.layout<{dp}, {}>, triad.input = "tokens"}
// STEP-SAME: tensor<4x4xi32> {dist.layout = #dist.layout<{dp}, {}>, triad.input = "labels"}
// STEP-SAME: tensor<f32> {dist.layout = #dist.layout<partial = {dp}>, triad.output = "loss"}
// STEP-SAME: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>, triad.grad = @wte}
// STEP-SAME: tensor<8xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @g}
// STEP: triad.embedding_grad {{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {dp}>]}
// STEP-LABEL: func.func @apply_step
// STEP-SAME: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>, triad.grad = @wte}
// STEP-SAME: tensor<8xf32> {dist.layout = #dist.layout<{}, partial = {dp}>, triad.grad = @g}

// On the 1x1x1 mesh nothing is split or pending.
// ONE: dist.mesh @mesh axes ["dp", "pp", "tp"] = [1, 1, 1]
// ONE-NOT: {dp}
// ONE-NOT: partial

// -----

// A sum of scalars whose terms are pending over different axes (the global
// gradient norm under tp) is regrouped: the pending terms are added first,
// so that one all_reduce serves them all, then the replicated ones.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @grouped_sum
// CHECK-SAME: (%[[A:[a-z0-9]+]]: tensor<f32> {{.*}}, %[[B:[a-z0-9]+]]: tensor<f32> {{.*}}, %[[C:[a-z0-9]+]]: tensor<f32> {{.*}}, %[[D:[a-z0-9]+]]: tensor<f32> {{.*}})
func.func @grouped_sum(%a: tensor<f32> {dist.layout = #dist.layout<partial = {tp}>},
                       %b: tensor<f32>,
                       %c: tensor<f32> {dist.layout = #dist.layout<partial = {tp}>},
                       %d: tensor<f32>) -> tensor<f32> {
  // CHECK: %[[AC:.*]] = triad.add %[[A]], %[[C]] {dist.layouts = [#dist.layout<partial = {tp}>]}
  // CHECK: %[[BD:.*]] = triad.add %[[B]], %[[D]] {dist.layouts = [#dist.layout<>]}
  // CHECK: %[[ALL:.*]] = triad.add %[[AC]], %[[BD]] {dist.layouts = [#dist.layout<>]}
  // CHECK: return %[[ALL]]
  %0 = triad.add %a, %b : tensor<f32>, tensor<f32>
  %1 = triad.add %0, %c : tensor<f32>, tensor<f32>
  %2 = triad.add %1, %d : tensor<f32>, tensor<f32>
  return %2 : tensor<f32>
}

// -----

// A pending gradient argument is reduced where the function starts (by
// --triad-partition, in buckets), so the function computes with it whole;
// another pending argument stays pending through linear ops. Partition
// then needs no other collective than the entry's to give the results
// these layouts.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
triad.param @w : tensor<4x8xf32> init <zeros>
// CHECK-LABEL: func.func @pending_arguments
// CHECK-SAME: -> (tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}>}, tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>})
func.func @pending_arguments(%g: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>, triad.grad = @w},
                             %p: tensor<4x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: triad.scale %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]}
  %0 = triad.scale %g by 2.0 : tensor<4x8xf32>
  // CHECK: triad.scale %{{.*}} {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %1 = triad.scale %p by 2.0 : tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}
