// Per-op coverage of --triad-partition after --triad-shard-propagate, for the
// ops whose local form is more than a clone on smaller types or that need
// collectives around them: local shapes and attributes (head counts, slice
// sizes) and the all_gather, all_reduce, reduce_scatter and all_slice each
// op's rule asks for, on a 2x1x2 mesh. Pending function arguments are
// reduced at entry, so pending sums here come from ops inside the
// functions.
// RUN: triad-opt %s -split-input-file --triad-shard-propagate --triad-partition | FileCheck %s

// embedding: a table split along its vocabulary becomes the vocab-parallel
// local form (each rank looks up the ids in its rows; the others give
// zeros), whose pending sum is all-reduced for a nonlinear user; a table
// split on its hidden dimension needs nothing.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @embedding(
// CHECK-SAME: %[[IDS:[a-z0-9]+]]: tensor<2x8xi32> {{.*}}, %[[V:[a-z0-9]+]]: tensor<8x8xf32> {{.*}}, %[[H:[a-z0-9]+]]: tensor<16x4xf32>
// CHECK: %[[E:.*]] = triad.embedding %[[IDS]], %[[V]] vocab_split ["tp"] {dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]} : tensor<2x8xi32>, tensor<8x8xf32> -> tensor<2x8x8xf32>
// CHECK: %[[AR:.*]] = dist.all_reduce %[[E]] over ["tp"] {{.*}} : tensor<2x8x8xf32>
// CHECK: triad.gelu %[[AR]] {{.*}} : tensor<2x8x8xf32>
// CHECK: triad.embedding %[[IDS]], %[[H]] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8xi32>, tensor<16x4xf32> -> tensor<2x8x4xf32>
func.func @embedding(%ids: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                     %vocab: tensor<16x8xf32> {dist.layout = #dist.layout<{tp}, {}>},
                     %hidden: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {tp}>}) {
  %0 = triad.embedding %ids, %vocab : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  %1 = triad.gelu %0 : tensor<4x8x8xf32>
  %2 = triad.embedding %ids, %hidden : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  return
}

// -----

// matmul: a column-parallel weight splits the features, a row-parallel one
// leaves a pending sum, reduce-scattered for a user split along the sequence
// and all-reduced for a nonlinear one.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @matmul(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x8x16xf32> {{.*}}, %[[W1:[a-z0-9]+]]: tensor<16x16xf32> {{.*}}, %[[W2:[a-z0-9]+]]: tensor<16x16xf32> {{.*}}, %[[Y:[a-z0-9]+]]: tensor<2x4x16xf32>
// CHECK: %[[H:.*]] = triad.matmul %[[X]], %[[W1]] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[O:.*]] = triad.matmul %[[H]], %[[W2]] {dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]} : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[RS:.*]] = dist.reduce_scatter %[[O]] dim 1 over ["tp"] {{.*}} : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// CHECK: triad.mul %[[RS]], %[[Y]] {{.*}} : tensor<2x4x16xf32>
// CHECK: %[[AR:.*]] = dist.all_reduce %[[O]] over ["tp"] {{.*}} : tensor<2x8x16xf32>
// CHECK: triad.gelu %[[AR]] {{.*}} : tensor<2x8x16xf32>
func.func @matmul(%x: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                  %w1: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp}>},
                  %w2: tensor<32x16xf32> {dist.layout = #dist.layout<{tp}, {}>},
                  %y: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>}) {
  %0 = triad.matmul %x, %w1 : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  %1 = triad.matmul %0, %w2 : tensor<4x8x32xf32>, tensor<32x16xf32> -> tensor<4x8x16xf32>
  %2 = triad.mul %1, %y : tensor<4x8x16xf32>
  %3 = triad.gelu %1 : tensor<4x8x16xf32>
  return
}

// -----

// attention: heads and kv_heads are divided by the pieces of the head groups
// (over tp, over {tp, dp}), the other attributes stay; a split sequence is
// all-gathered; prefix lengths are sliced with the batch, ALiBi slopes with
// the heads.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[K:[a-z0-9]+]]: tensor<2x8x4xf32> {{.*}}, %[[QS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[KR:[a-z0-9]+]]: tensor<4x8x8xf32> {{.*}}, %[[QH2:[a-z0-9]+]]: tensor<4x8x4xf32> {{.*}}, %[[PLEN:[a-z0-9]+]]: tensor<4xi32> {{.*}}, %[[SLOPES:[a-z0-9]+]]: tensor<4xf32>
// CHECK: triad.attention %[[Q]], %[[K]], %[[K]] heads = 2 kv_heads = 1 mask = causal {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>
// CHECK: %[[SEQ:.*]] = dist.all_gather %[[QS]] dim 1 over ["tp"] {{.*}} : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[KB:.*]] = dist.all_slice %[[KR]] dim 0 over ["dp"] {{.*}} : tensor<4x8x8xf32> -> tensor<2x8x8xf32>
// CHECK: triad.attention %[[SEQ]], %[[KB]], %[[KB]] heads = 4 kv_heads = 2 mask = causal {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
// CHECK: triad.attention %[[QH2]], %[[QH2]], %[[QH2]] heads = 1 kv_heads = 1 mask = none {dist.layouts = [#dist.layout<{}, {}, {tp, dp}>], scale = 5.000000e-01 : f64} : tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>
// CHECK: %[[PL:.*]] = dist.all_slice %[[PLEN]] dim 0 over ["dp"] {{.*}} : tensor<4xi32> -> tensor<2xi32>
// CHECK: %[[SL:.*]] = dist.all_slice %[[SLOPES]] dim 0 over ["tp"] {{.*}} : tensor<4xf32> -> tensor<2xf32>
// CHECK: triad.attention %[[Q]], %[[K]], %[[K]] prefix(%[[PL]] : tensor<2xi32>) alibi(%[[SL]] : tensor<2xf32>) heads = 2 kv_heads = 1 mask = prefix {{.*}} : tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>
func.func @attention(%q: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %k: tensor<4x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %qs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                     %kr: tensor<4x8x8xf32>,
                     %qh2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                     %plen: tensor<4xi32>,
                     %slopes: tensor<4xf32>) {
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  %1 = triad.attention %qs, %kr, %kr heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  %2 = triad.attention %qh2, %qh2, %qh2 heads = 4 kv_heads = 4 mask = none {scale = 5.000000e-01 : f64} : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
  %3 = triad.attention %q, %k, %k prefix(%plen : tensor<4xi32>) alibi(%slopes : tensor<4xf32>) heads = 4 kv_heads = 2 mask = prefix : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  return
}

// -----

// attention_grad: local head counts as in attention; a dout pending over tp
// is reduce-scattered into the heads' tp split, one pending over dp passes
// to dq, dk and dv (and leaves the function pending).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention_grad(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[K:[a-z0-9]+]]: tensor<2x8x4xf32> {{.*}}, %[[A:[a-z0-9]+]]: tensor<4x8x8xf32> {{.*}}, %[[W:[a-z0-9]+]]: tensor<8x16xf32> {{.*}}, %[[QH:[a-z0-9]+]]: tensor<4x8x8xf32> {{.*}}, %[[KH:[a-z0-9]+]]: tensor<4x8x4xf32> {{.*}}, %[[C:[a-z0-9]+]]: tensor<4x8x8xf32> {{.*}}, %[[V:[a-z0-9]+]]: tensor<8x16xf32> {{.*}}, %[[QH2:[a-z0-9]+]]: tensor<4x8x4xf32>
// CHECK-SAME: -> (tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {tp}, partial = {dp}>}, tensor<4x8x4xf32> {dist.layout = #dist.layout<{}, {}, {tp}, partial = {dp}>}, tensor<4x8x4xf32> {dist.layout = #dist.layout<{}, {}, {tp}, partial = {dp}>})
// CHECK: %[[DT:.*]] = triad.matmul %[[A]], %[[W]] {dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
// CHECK: %[[RS:.*]] = dist.reduce_scatter %[[DT]] dim 2 over ["tp"] {{.*}} : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
// CHECK: %[[DTB:.*]] = dist.all_slice %[[RS]] dim 0 over ["dp"] {{.*}} : tensor<4x8x8xf32> -> tensor<2x8x8xf32>
// CHECK: triad.attention_grad %[[Q]], %[[K]], %[[K]], %[[DTB]] heads = 2 kv_heads = 1 mask = causal {dist.layouts = [#dist.layout<{dp}, {}, {tp}>, #dist.layout<{dp}, {}, {tp}>, #dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32> -> tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>
// CHECK: %[[DD:.*]] = triad.matmul %[[C]], %[[V]] {dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
// CHECK: %[[DDH:.*]] = dist.all_slice %[[DD]] dim 2 over ["tp"] {dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>]{{.*}} : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = triad.attention_grad %[[QH]], %[[KH]], %[[KH]], %[[DDH]] heads = 2 kv_heads = 1 mask = causal {dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>, #dist.layout<{}, {}, {tp}, partial = {dp}>, #dist.layout<{}, {}, {tp}, partial = {dp}>]}
// CHECK: triad.attention_grad %[[QH2]], %[[QH2]], %[[QH2]], %[[QH2]] heads = 1 kv_heads = 1 mask = causal {{.*}} : tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32> -> tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>
// CHECK-NOT: dist.all
// CHECK: return %[[DQ]], %[[DK]], %[[DV]]
func.func @attention_grad(%q: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                          %k: tensor<4x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                          %a: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                          %w: tensor<16x16xf32> {dist.layout = #dist.layout<{tp}, {}>},
                          %qh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                          %kh: tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                          %c: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {dp}>},
                          %v: tensor<16x16xf32> {dist.layout = #dist.layout<{dp}, {}>},
                          %qh2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>})
    -> (tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>) {
  %dt = triad.matmul %a, %w : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
  %0:3 = triad.attention_grad %q, %k, %k, %dt heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  %dd = triad.matmul %c, %v : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
  %1:3 = triad.attention_grad %qh, %kh, %kh, %dd heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  %2:3 = triad.attention_grad %qh2, %qh2, %qh2, %qh2 heads = 4 kv_heads = 4 mask = causal : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
  return %1#0, %1#1, %1#2 : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
}

// -----

// rope: heads are divided by the pieces of the head split (rotary_dim and
// base stay: they are per head); a split sequence is all-gathered.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rope(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[H2:[a-z0-9]+]]: tensor<4x8x4xf32> {{.*}}, %[[S:[a-z0-9]+]]: tensor<4x4x16xf32>
// CHECK: triad.rope %[[BH]] heads = 2 rotary_dim = 4 {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32>
// CHECK: triad.rope %[[H2]] heads = 1 rotary_dim = 2 base = 5.000000e+05 {dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]} : tensor<4x8x4xf32>
// CHECK: %[[SEQ:.*]] = dist.all_gather %[[S]] dim 1 over ["tp"] {{.*}} : tensor<4x4x16xf32> -> tensor<4x8x16xf32>
// CHECK: triad.rope %[[SEQ]] heads = 4 rotary_dim = 4 {dist.layouts = [#dist.layout<{}, {}, {}>]} : tensor<4x8x16xf32>
func.func @rope(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %h2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>}) {
  %0 = triad.rope %bh heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  %1 = triad.rope %h2 heads = 4 rotary_dim = 2 base = 5.0e+05 : tensor<4x8x16xf32>
  %2 = triad.rope %s heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  return
}

// -----

// rope_grad: heads are divided by the pieces of the head split (rotary_dim and
// base stay: they are per head); a split sequence is all-gathered.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rope_grad(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[H2:[a-z0-9]+]]: tensor<4x8x4xf32> {{.*}}, %[[S:[a-z0-9]+]]: tensor<4x4x16xf32>
// CHECK: triad.rope_grad %[[BH]] heads = 2 rotary_dim = 4 {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32>
// CHECK: triad.rope_grad %[[H2]] heads = 1 rotary_dim = 2 base = 5.000000e+05 {dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]} : tensor<4x8x4xf32>
// CHECK: %[[SEQ:.*]] = dist.all_gather %[[S]] dim 1 over ["tp"] {{.*}} : tensor<4x4x16xf32> -> tensor<4x8x16xf32>
// CHECK: triad.rope_grad %[[SEQ]] heads = 4 rotary_dim = 4 {dist.layouts = [#dist.layout<{}, {}, {}>]} : tensor<4x8x16xf32>
func.func @rope_grad(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %h2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                     %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>}) {
  %0 = triad.rope_grad %bh heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  %1 = triad.rope_grad %h2 heads = 4 rotary_dim = 2 base = 5.0e+05 : tensor<4x8x16xf32>
  %2 = triad.rope_grad %s heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  return
}

// -----

// slice: sizes become the local sizes of the result, offsets stay (sliced
// dimensions are whole); a split sliced dimension is all-gathered first.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @slice(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[S2:[a-z0-9]+]]: tensor<4x2x16xf32>
// CHECK: %[[G:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: triad.slice %[[G]] offsets = [0, 0, 8] sizes = [2, 8, 8] {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32> -> tensor<2x8x8xf32>
// CHECK: triad.slice %[[BH]] offsets = [0, 2, 0] sizes = [2, 4, 8] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32> -> tensor<2x4x8xf32>
// CHECK: triad.slice %[[S2]] offsets = [1, 0, 4] sizes = [2, 2, 8] {dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]} : tensor<4x2x16xf32> -> tensor<2x2x8xf32>
func.func @slice(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                 %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>}) {
  %0 = triad.slice %bh offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  %1 = triad.slice %bh offsets = [0, 2, 0] sizes = [4, 4, 16] : tensor<4x8x16xf32> -> tensor<4x4x16xf32>
  %2 = triad.slice %s2 offsets = [1, 0, 4] sizes = [2, 8, 8] : tensor<4x8x16xf32> -> tensor<2x8x8xf32>
  return
}

// -----

// reshape: local shapes on both sides (the leading dimension of a run split
// into the same pieces); an inner dimension of a run is all-gathered.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reshape(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[S:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[ROWS:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK: triad.reshape %[[BH]] {dist.layouts = [#dist.layout<{dp}, {tp}>]} : tensor<2x8x8xf32> -> tensor<16x8xf32>
// CHECK: triad.reshape %[[BH]] {dist.layouts = [#dist.layout<{dp}, {}, {tp}, {}>]} : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
// CHECK: triad.reshape %[[S]] {dist.layouts = [#dist.layout<{dp}, {tp}>]} : tensor<2x4x16xf32> -> tensor<2x64xf32>
// CHECK: %[[G:.*]] = dist.all_gather %[[S]] dim 1 over ["tp"] {{.*}} : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// CHECK: triad.reshape %[[G]] {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<2x8x16xf32> -> tensor<16x16xf32>
// CHECK: triad.reshape %[[ROWS]] {dist.layouts = [#dist.layout<{tp, dp}, {}, {}>]} : tensor<8x16xf32> -> tensor<1x8x16xf32>
func.func @reshape(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                   %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                   %rows: tensor<32x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}>}) {
  %0 = triad.reshape %bh : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %1 = triad.reshape %bh : tensor<4x8x16xf32> -> tensor<4x8x4x4xf32>
  %2 = triad.reshape %s : tensor<4x8x16xf32> -> tensor<4x128xf32>
  %3 = triad.reshape %s : tensor<4x8x16xf32> -> tensor<32x16xf32>
  %4 = triad.reshape %rows : tensor<32x16xf32> -> tensor<4x8x16xf32>
  return
}

// -----

// transpose: the local result is the permuted local input, no collective.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @transpose(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[S2:[a-z0-9]+]]: tensor<4x2x16xf32>
// CHECK-NOT: dist.all
// CHECK: triad.transpose %[[BH]] [1, 0, 2] {dist.layouts = [#dist.layout<{}, {dp}, {tp}>]} : tensor<2x8x8xf32> -> tensor<8x2x8xf32>
// CHECK: triad.transpose %[[BH]] [2, 0, 1] {dist.layouts = [#dist.layout<{tp}, {dp}, {}>]} : tensor<2x8x8xf32> -> tensor<8x2x8xf32>
// CHECK: triad.transpose %[[S2]] [0, 2, 1] {dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]} : tensor<4x2x16xf32> -> tensor<4x16x2xf32>
func.func @transpose(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>}) {
  %0 = triad.transpose %bh [1, 0, 2] : tensor<4x8x16xf32> -> tensor<8x4x16xf32>
  %1 = triad.transpose %bh [2, 0, 1] : tensor<4x8x16xf32> -> tensor<16x4x8xf32>
  %2 = triad.transpose %s2 [0, 2, 1] : tensor<4x8x16xf32> -> tensor<4x16x8xf32>
  return
}

// -----

// concat: a split concatenated dimension is all-gathered; inputs whole where
// the first input is split are sliced to its pieces.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @concat(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[R:[a-z0-9]+]]: tensor<4x8x16xf32> {{.*}}, %[[H:[a-z0-9]+]]: tensor<4x8x8xf32>
// CHECK: %[[G:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: triad.concat %[[G]], %[[G]] dim = 2 {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x32xf32>
// CHECK: %[[RB:.*]] = dist.all_slice %[[R]] dim 0 over ["dp"] {{.*}} : tensor<4x8x16xf32> -> tensor<2x8x16xf32>
// CHECK: %[[RBH:.*]] = dist.all_slice %[[RB]] dim 2 over ["tp"] {{.*}} : tensor<2x8x16xf32> -> tensor<2x8x8xf32>
// CHECK: %[[HB:.*]] = dist.all_slice %[[H]] dim 0 over ["dp"] {{.*}} : tensor<4x8x8xf32> -> tensor<2x8x8xf32>
// CHECK: triad.concat %[[BH]], %[[RBH]], %[[HB]] dim = 1 {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32> -> tensor<2x24x8xf32>
func.func @concat(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                  %r: tensor<4x8x16xf32>,
                  %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>}) {
  %0 = triad.concat %bh, %bh dim = 2 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x32xf32>
  %1 = triad.concat %bh, %r, %h dim = 1 : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x24x16xf32>
  return
}

// -----

// pad: local shapes with the padding unchanged; a split padded dimension is
// all-gathered first.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @pad(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32>
// CHECK: triad.pad %[[BH]] low = [0, 2, 0] high = [0, 0, 0] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32> -> tensor<2x10x8xf32>
// CHECK: %[[G:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: triad.pad %[[G]] low = [0, 0, 1] high = [0, 0, 1] {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32> -> tensor<2x8x18xf32>
func.func @pad(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>}) {
  %0 = triad.pad %bh low = [0, 2, 0] high = [0, 0, 0] : tensor<4x8x16xf32> -> tensor<4x10x16xf32>
  %1 = triad.pad %bh low = [0, 0, 1] high = [0, 0, 1] : tensor<4x8x16xf32> -> tensor<4x8x18xf32>
  return
}

// -----

// broadcast: local shapes; repeated dimensions are whole, so a user split on
// one slices the broadcast result.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @broadcast(
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<4x16xf32> {{.*}}, %[[K:[a-z0-9]+]]: tensor<2x1x8xf32> {{.*}}, %[[B:[a-z0-9]+]]: tensor<2x8x16xf32>
// CHECK: %[[E:.*]] = triad.broadcast %[[S]] {dist.layouts = [#dist.layout<{}, {tp}, {}>]} : tensor<4x16xf32> -> tensor<4x4x16xf32>
// CHECK: triad.broadcast %[[K]] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x1x8xf32> -> tensor<2x8x8xf32>
// CHECK: %[[BS:.*]] = dist.all_slice %[[B]] dim 1 over ["tp"] {{.*}} : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// CHECK: %[[EB:.*]] = dist.all_slice %[[E]] dim 0 over ["dp"] {{.*}} : tensor<4x4x16xf32> -> tensor<2x4x16xf32>
// CHECK: triad.add %[[BS]], %[[EB]] {{.*}} : tensor<2x4x16xf32>, tensor<2x4x16xf32>
func.func @broadcast(%s: tensor<8x16xf32> {dist.layout = #dist.layout<{tp}, {}>},
                     %k: tensor<4x1x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>}) {
  %0 = triad.broadcast %s : tensor<8x16xf32> -> tensor<4x8x16xf32>
  %1 = triad.broadcast %k : tensor<4x1x16xf32> -> tensor<4x8x16xf32>
  %2 = triad.add %b, %0 : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  return
}

// -----

// sum: sums the local pieces; a split summed dimension leaves a pending sum,
// all-reduced before a nonlinear user.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @sum(
// CHECK-SAME: %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32>
// CHECK: %[[S:.*]] = triad.sum %[[BS]] dims = [1] {dist.layouts = [#dist.layout<{dp}, {}, partial = {tp}>]} : tensor<2x4x16xf32> -> tensor<2x16xf32>
// CHECK: %[[R:.*]] = dist.all_reduce %[[S]] over ["tp"] {{.*}} : tensor<2x16xf32>
// CHECK: triad.gelu %[[R]]
// CHECK: %[[T:.*]] = triad.sum %[[BH]] dims = [0, 1] {dist.layouts = [#dist.layout<{tp}, partial = {dp}>]} : tensor<2x8x8xf32> -> tensor<8xf32>
// CHECK: %[[U:.*]] = dist.all_reduce %[[T]] over ["dp"] {{.*}} : tensor<8xf32>
// CHECK: triad.relu %[[U]]
func.func @sum(%bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
               %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>}) {
  %0 = triad.sum %bs dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  %1 = triad.gelu %0 : tensor<4x16xf32>
  %2 = triad.sum %bh dims = [0, 1] : tensor<4x8x16xf32> -> tensor<16xf32>
  %3 = triad.relu %2 : tensor<16xf32>
  return
}

// -----

// mean: a split averaged dimension is all-gathered first; a pending input
// passes and is all-reduced after the mean, on the smaller result.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @mean(
// CHECK-SAME: %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[A:[a-z0-9]+]]: tensor<4x8x8xf32> {{.*}}, %[[W:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK: %[[G:.*]] = dist.all_gather %[[BS]] dim 1 over ["tp"] {{.*}} : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// CHECK: triad.mean %[[G]] dims = [1] {dist.layouts = [#dist.layout<{dp}, {}>]} : tensor<2x8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[P:.*]] = triad.matmul %[[A]], %[[W]]
// CHECK: %[[M:.*]] = triad.mean %[[P]] dims = [2] {dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]} : tensor<4x8x16xf32> -> tensor<4x8xf32>
// CHECK: %[[R:.*]] = dist.all_reduce %[[M]] over ["tp"] {{.*}} : tensor<4x8xf32>
// CHECK: triad.gelu %[[R]]
func.func @mean(%bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                %a: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                %w: tensor<16x16xf32> {dist.layout = #dist.layout<{tp}, {}>}) {
  %0 = triad.mean %bs dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  %p = triad.matmul %a, %w : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
  %1 = triad.mean %p dims = [2] : tensor<4x8x16xf32> -> tensor<4x8xf32>
  %2 = triad.gelu %1 : tensor<4x8xf32>
  return
}

// -----

// layer_norm: a split normalized dimension of x and of the weights is
// all-gathered, other splits stay local, and a pending input is all-reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<8xf32> {{.*}}, %[[BETA:[a-z0-9]+]]: tensor<16xf32>
// CHECK: %[[X:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: %[[GW:.*]] = dist.all_gather %[[G]] dim 0 over ["tp"] {{.*}} : tensor<8xf32> -> tensor<16xf32>
// CHECK: triad.layer_norm %[[X]], %[[GW]], %[[BETA]] {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>
// CHECK: triad.layer_norm %[[BS]], %[[BETA]], %[[BETA]] {dist.layouts = [#dist.layout<{dp}, {tp}, {}>], epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>
// CHECK: %[[P:.*]] = triad.matmul
// CHECK: %[[R:.*]] = dist.all_reduce %[[P]] over ["tp"] {{.*}} : tensor<4x8x16xf32>
// CHECK: triad.layer_norm %[[R]], %[[BETA]] {dist.layouts = [#dist.layout<{}, {}, {}>]} : tensor<4x8x16xf32>, tensor<16xf32>
func.func @layer_norm(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                      %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                      %g: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
                      %beta: tensor<16xf32>,
                      %a: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                      %w: tensor<16x16xf32> {dist.layout = #dist.layout<{tp}, {}>}) {
  %0 = triad.layer_norm %bh, %g, %beta : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  %1 = triad.layer_norm %bs, %beta, %beta {epsilon = 1.0e-06 : f64} : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  %p = triad.matmul %a, %w : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
  %2 = triad.layer_norm %p, %beta : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// rms_norm: a split normalized dimension of x and of the weights is
// all-gathered, other splits stay local, and a pending input is all-reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rms_norm(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<8xf32> {{.*}}, %[[BETA:[a-z0-9]+]]: tensor<16xf32>
// CHECK: %[[X:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: %[[GW:.*]] = dist.all_gather %[[G]] dim 0 over ["tp"] {{.*}} : tensor<8xf32> -> tensor<16xf32>
// CHECK: triad.rms_norm %[[X]], %[[GW]] {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32>, tensor<16xf32>
// CHECK: triad.rms_norm %[[BS]], %[[BETA]] {dist.layouts = [#dist.layout<{dp}, {tp}, {}>], epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x16xf32>, tensor<16xf32>
// CHECK: %[[P:.*]] = triad.matmul
// CHECK: %[[R:.*]] = dist.all_reduce %[[P]] over ["tp"] {{.*}} : tensor<4x8x16xf32>
// CHECK: triad.rms_norm %[[R]], %[[BETA]] {dist.layouts = [#dist.layout<{}, {}, {}>]} : tensor<4x8x16xf32>, tensor<16xf32>
func.func @rms_norm(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                    %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                    %g: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
                    %beta: tensor<16xf32>,
                    %a: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                    %w: tensor<16x16xf32> {dist.layout = #dist.layout<{tp}, {}>}) {
  %0 = triad.rms_norm %bh, %g : tensor<4x8x16xf32>, tensor<16xf32>
  %1 = triad.rms_norm %bs, %beta {epsilon = 1.0e-06 : f64} : tensor<4x8x16xf32>, tensor<16xf32>
  %p = triad.matmul %a, %w : tensor<4x8x16xf32>, tensor<16x16xf32> -> tensor<4x8x16xf32>
  %2 = triad.rms_norm %p, %beta : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// layer_norm_grad: a split normalized dimension is all-gathered; dx keeps the
// local rows and dgamma, pending over the row splits, is all-reduced for a
// nonlinear user.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @layer_norm_grad(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<16xf32>
// CHECK: %[[X:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: triad.layer_norm_grad %[[X]], %[[G]], %[[X]] {dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]} : tensor<2x8x16xf32>, tensor<16xf32>
// CHECK: %[[DX:.*]], %[[DG:.*]] = triad.layer_norm_grad %[[BS]], %[[G]], %[[BS]] {dist.layouts = [#dist.layout<{dp}, {tp}, {}>, #dist.layout<{}, partial = {dp, tp}>]} : tensor<2x4x16xf32>, tensor<16xf32>
// CHECK: %[[R:.*]] = dist.all_reduce %[[DG]] over ["dp", "tp"] {{.*}} : tensor<16xf32>
// CHECK: triad.gelu %[[R]]
func.func @layer_norm_grad(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                           %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                           %g: tensor<16xf32>) {
  %0:2 = triad.layer_norm_grad %bh, %g, %bh : tensor<4x8x16xf32>, tensor<16xf32>
  %1:2 = triad.layer_norm_grad %bs, %g, %bs : tensor<4x8x16xf32>, tensor<16xf32>
  %2 = triad.gelu %1#1 : tensor<16xf32>
  return
}

// -----

// rms_norm_grad: a split normalized dimension is all-gathered; dx keeps the
// local rows and dgamma, pending over the row splits, is all-reduced for a
// nonlinear user.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rms_norm_grad(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32> {{.*}}, %[[G:[a-z0-9]+]]: tensor<16xf32>
// CHECK: %[[X:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: triad.rms_norm_grad %[[X]], %[[G]], %[[X]] {dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]} : tensor<2x8x16xf32>, tensor<16xf32>
// CHECK: %[[DX:.*]], %[[DG:.*]] = triad.rms_norm_grad %[[BS]], %[[G]], %[[BS]] {dist.layouts = [#dist.layout<{dp}, {tp}, {}>, #dist.layout<{}, partial = {dp, tp}>]} : tensor<2x4x16xf32>, tensor<16xf32>
// CHECK: %[[R:.*]] = dist.all_reduce %[[DG]] over ["dp", "tp"] {{.*}} : tensor<16xf32>
// CHECK: triad.gelu %[[R]]
func.func @rms_norm_grad(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                         %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                         %g: tensor<16xf32>) {
  %0:2 = triad.rms_norm_grad %bh, %g, %bh : tensor<4x8x16xf32>, tensor<16xf32>
  %1:2 = triad.rms_norm_grad %bs, %g, %bs : tensor<4x8x16xf32>, tensor<16xf32>
  %2 = triad.gelu %1#1 : tensor<16xf32>
  return
}

// -----

// dropout: runs on its piece of the batch and of the sequence (its local
// form names the axes that split each), every other split dimension
// all-gathered; a whole batch has no batch_split.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @dropout(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[R:[a-z0-9]+]]: tensor<4x8x16xf32>{{.*}}, %[[BS:[a-z0-9]+]]: tensor<2x4x16xf32>
// CHECK-NOT: dim 0 over
// CHECK: %[[W:.*]] = dist.all_gather %[[BH]] dim 2 over ["tp"] {{.*}} : tensor<2x8x8xf32> -> tensor<2x8x16xf32>
// CHECK: triad.dropout %[[W]] probability = 1.000000e-01 rng_stream = 1 batch_split ["dp"] {dist.layouts = [#dist.layout<{dp}, {}, {}>]} : tensor<2x8x16xf32>
// CHECK: triad.dropout %[[R]] probability = 1.000000e-01 rng_stream = 2 {dist.layouts = [#dist.layout<{}, {}, {}>]} : tensor<4x8x16xf32>
// CHECK-NOT: dist.all_gather
// CHECK: triad.dropout %[[BS]] probability = 1.000000e-01 rng_stream = 3 batch_split ["dp"] seq_split ["tp"] {dist.layouts = [#dist.layout<{dp}, {tp}, {}>]} : tensor<2x4x16xf32>
func.func @dropout(%bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                   %r: tensor<4x8x16xf32>,
                   %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>}) {
  %0 = triad.dropout %bh probability = 0.1 rng_stream = 1 : tensor<4x8x16xf32>
  %1 = triad.dropout %r probability = 0.1 rng_stream = 2 : tensor<4x8x16xf32>
  %2 = triad.dropout %bs probability = 0.1 rng_stream = 3 : tensor<4x8x16xf32>
  return
}

// -----

// sum_squares: sums the local piece; the pending scalar is all-reduced over
// both axes before it is added to a replicated one.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @sum_squares(
// CHECK-SAME: %[[BH:[a-z0-9]+]]: tensor<8x16xf32> {{.*}}, %[[R:[a-z0-9]+]]: tensor<16x32xf32>
// CHECK: %[[S:.*]] = triad.sum_squares %[[BH]] {dist.layouts = [#dist.layout<partial = {dp, tp}>]} : tensor<8x16xf32>
// CHECK: %[[T:.*]] = triad.sum_squares %[[R]] {dist.layouts = [#dist.layout<>]} : tensor<16x32xf32>
// CHECK: %[[A:.*]] = dist.all_reduce %[[S]] over ["dp", "tp"] {{.*}} : tensor<f32>
// CHECK: %[[SUM:.*]] = triad.add %[[A]], %[[T]]
// CHECK: triad.clip_coefficient %[[SUM]] max_norm = 1.000000e+00 {dist.layouts = [#dist.layout<>, #dist.layout<>]}
func.func @sum_squares(%bh: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                       %r: tensor<16x32xf32>) {
  %0 = triad.sum_squares %bh : tensor<16x32xf32>
  %1 = triad.sum_squares %r : tensor<16x32xf32>
  %2 = triad.add %0, %1 : tensor<f32>, tensor<f32>
  %3:2 = triad.clip_coefficient %2 max_norm = 1.0
  return
}

// -----

// adamw_update: updates the local pieces; a gradient pending over dp is
// reduce-scattered into the parameter's dp split (ZeRO-2's reduction), and
// replicated moments are sliced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @adamw_update(
// CHECK-SAME: %[[P:[a-z0-9]+]]: tensor<8x16xf32> {{.*}}, %[[A:[a-z0-9]+]]: tensor<16x4xf32> {{.*}}, %[[B:[a-z0-9]+]]: tensor<4x16xf32> {{.*}}, %[[M:[a-z0-9]+]]: tensor<16x32xf32> {{.*}}, %[[LR:[a-z0-9]+]]: tensor<f32> {{.*}}, %[[STEP:[a-z0-9]+]]: tensor<f32> {{.*}}, %[[COEF:[a-z0-9]+]]: tensor<f32>
// CHECK: %[[G:.*]] = triad.matmul %[[A]], %[[B]] {dist.layouts = [#dist.layout<{}, {tp}, partial = {dp}>]} : tensor<16x4xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
// CHECK: %[[GS:.*]] = dist.reduce_scatter %[[G]] dim 0 over ["dp"] {{.*}} : tensor<16x16xf32> -> tensor<8x16xf32>
// CHECK: %[[MB:.*]] = dist.all_slice %[[M]] dim 0 over ["dp"] {{.*}} : tensor<16x32xf32> -> tensor<8x32xf32>
// CHECK: %[[MS:.*]] = dist.all_slice %[[MB]] dim 1 over ["tp"] {{.*}} : tensor<8x32xf32> -> tensor<8x16xf32>
// CHECK: triad.adamw_update %[[P]], %[[GS]], %[[MS]], %[[MS]], %[[LR]], %[[STEP]], %[[COEF]] {{.*}} {dist.layouts = [#dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>]} : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
func.func @adamw_update(%p: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                        %a: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {dp}>},
                        %b: tensor<8x32xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                        %m: tensor<16x32xf32>,
                        %lr: tensor<f32>, %step: tensor<f32>, %coef: tensor<f32>) {
  %g = triad.matmul %a, %b : tensor<16x8xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
  %0:3 = triad.adamw_update %p, %g, %m, %m, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  return
}

// -----

// cross_entropy and its gradient on logits split along the vocabulary
// become the vocab-parallel local forms: each piece's log-sum-exp per token
// is gathered over tp and combined into the whole vocabulary's, the loss's
// pieces are all-reduced (the loss is whole over tp, pending over dp only),
// and the gradient stays split along the vocabulary. Whole logits need
// nothing.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @cross_entropy(
// CHECK-SAME: %[[L:[a-z0-9]+]]: tensor<2x8x8xf32> {{.*}}, %[[Y:[a-z0-9]+]]: tensor<2x8xi32> {{.*}}, %[[D:[a-z0-9]+]]: tensor<f32> {{.*}}, %[[W:[a-z0-9]+]]: tensor<2x8x16xf32>
// CHECK: %[[PIECE:.*]] = triad.logsumexp %[[L]] : tensor<2x8x8xf32> -> tensor<2x8x1xf32>
// CHECK: %[[ALL:.*]] = dist.all_gather %[[PIECE]] dim 2 over ["tp"] {dist.reason = "vocab-parallel cross entropy: the log-sum-exp of each piece of the vocabulary"} : tensor<2x8x1xf32> -> tensor<2x8x2xf32>
// CHECK: %[[LSE:.*]] = triad.logsumexp %[[ALL]] : tensor<2x8x2xf32> -> tensor<2x8x1xf32>
// CHECK: %[[PART:.*]] = triad.cross_entropy %[[L]], %[[Y]] lse %[[LSE]] vocab_split ["tp"] : tensor<2x8x8xf32>, tensor<2x8xi32>, tensor<2x8x1xf32> -> tensor<f32>
// CHECK: dist.all_reduce %[[PART]] over ["tp"] {dist.layouts = [#dist.layout<partial = {dp}>], dist.reason = "vocab-parallel cross entropy: the loss of each piece of the vocabulary"} : tensor<f32>
// CHECK: %[[GPIECE:.*]] = triad.logsumexp %[[L]]
// CHECK: %[[GALL:.*]] = dist.all_gather %[[GPIECE]] dim 2 over ["tp"]
// CHECK: %[[GLSE:.*]] = triad.logsumexp %[[GALL]]
// CHECK: triad.cross_entropy_grad %[[L]], %[[Y]], %[[D]] lse %[[GLSE]] vocab_split ["tp"] {dist.layouts = [#dist.layout<{dp}, {}, {tp}>]} : tensor<2x8x8xf32>, tensor<2x8xi32>, tensor<2x8x1xf32>
// CHECK-NOT: dist.
// CHECK: triad.cross_entropy %[[W]], %[[Y]] {dist.layouts = [#dist.layout<partial = {dp}>]} : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<f32>
func.func @cross_entropy(%logits: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                         %labels: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                         %dloss: tensor<f32>,
                         %whole: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>}) {
  %0 = triad.cross_entropy %logits, %labels : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  %1 = triad.cross_entropy_grad %logits, %labels, %dloss : tensor<4x8x16xf32>, tensor<4x8xi32>
  %2 = triad.cross_entropy %whole, %labels : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  return
}
