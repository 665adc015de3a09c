// Per-op coverage of --triad-shard-propagate: every triad op with a sharding
// rule (forward, gradient and optimizer ops), called once per layout class
// of its operands on a 2x1x2 mesh: replicated, each splittable dimension
// split over dp, over tp, over both on different dimensions and over
// {tp, dp} on one dimension, a dimension the rule keeps whole given split
// (gathered: whole in the result), and pending sums where the op is linear
// in them (passed on) and where it is not (reduced first). The rule
// families are in triad-shard-propagate.mlir.
// RUN: triad-opt %s -split-input-file --triad-shard-propagate | FileCheck %s

// matmul: batch and row splits pass to the result, a weight's column split
// splits its features, a split contraction leaves a pending sum, one pending
// operand passes its sum on and two are reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @matmul(
func.func @matmul(%r: tensor<4x8x16xf32>,
                  %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                  %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                  %k: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                  %b2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}, {}>},
                  %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                  %w: tensor<16x32xf32>,
                  %wc: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp}>},
                  %wk: tensor<16x32xf32> {dist.layout = #dist.layout<{tp}, {}>},
                  %wkd: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {}>},
                  %wp: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                  %wt: tensor<32x16xf32> {dist.layout = #dist.layout<{tp}, {}>},
                  %lt: tensor<4x16x8xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                  %bb: tensor<4x16x32xf32> {dist.layout = #dist.layout<{dp}, {}, {}>}) {
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.matmul %r, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.matmul %b, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %2 = triad.matmul %s, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %3 = triad.matmul %r, %wc : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %4 = triad.matmul %b, %wc : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{tp, dp}, {}, {}>]}
  %5 = triad.matmul %b2, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.matmul %k, %wk : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %7 = triad.matmul %k, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %8 = triad.matmul %r, %wkd : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // Both contractions are split, over different axes: the lhs's tp wins.
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %9 = triad.matmul %k, %wkd : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // Rows and columns both want tp: the rows take it, the columns gather.
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %10 = triad.matmul %s, %wc : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>]}
  %11 = triad.matmul %p, %w : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %12 = triad.matmul %r, %wp : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %13 = triad.matmul %p, %wp : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>]}
  %14 = triad.matmul %p, %wc : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %15 = triad.matmul %b, %wt transpose_rhs : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %16 = triad.matmul %lt, %w transpose_lhs : tensor<4x16x8xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.matmul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %17 = triad.matmul %r, %bb : tensor<4x8x16xf32>, tensor<4x16x32xf32> -> tensor<4x8x32xf32>
  return
}

// -----

// add: splits of either operand (a broadcast trailing operand included)
// pass; a pending sum passes only when both operands have it over the same
// axes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @add(
func.func @add(%r: tensor<4x8x16xf32>,
               %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
               %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
               %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
               %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
               %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
               %q: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
               %pd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
               %pos: tensor<8x16xf32> {dist.layout = #dist.layout<{tp}, {}>},
               %v: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
               %vp: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {tp}>}) {
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.add %r, %r : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.add %b, %r : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.add %r, %h : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %3 = triad.add %bh, %r : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %4 = triad.add %s2, %r : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %5 = triad.add %b, %h : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.add %p, %q : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %7 = triad.add %p, %r : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %8 = triad.add %p, %pd : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}, {}>]}
  %9 = triad.add %b, %pos : tensor<4x8x16xf32>, tensor<8x16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %10 = triad.add %r, %v : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %11 = triad.add %p, %vp : tensor<4x8x16xf32>, tensor<16xf32>
  // The lhs's {tp, dp} takes dp: the rhs's batch split is gathered.
  // CHECK: triad.add {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %12 = triad.add %s2, %b : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  return
}

// -----

// mul: splits pass; it is linear in each operand, so one pending operand
// passes its sum on (unless a split takes its axis) and two are reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @mul(
func.func @mul(%r: tensor<4x8x16xf32>,
               %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
               %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
               %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
               %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
               %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
               %q: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
               %pd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.mul %r, %r : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.mul %b, %r : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.mul %r, %h : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %3 = triad.mul %bh, %r : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %4 = triad.mul %s2, %r : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %5 = triad.mul %b, %h : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.mul %p, %r : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %7 = triad.mul %r, %p : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %8 = triad.mul %p, %q : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %9 = triad.mul %p, %h : tensor<4x8x16xf32>
  // CHECK: triad.mul {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>]}
  %10 = triad.mul %pd, %h : tensor<4x8x16xf32>
  return
}

// -----

// scale: splits pass and a pending sum passes (it is linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @scale(
func.func @scale(%r: tensor<4x8x16xf32>,
                 %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                 %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                 %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                 %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.scale {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.scale %r by 2.0 : tensor<4x8x16xf32>
  // CHECK: triad.scale {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.scale %bh by 2.0 : tensor<4x8x16xf32>
  // CHECK: triad.scale {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.scale %s2 by 2.0 : tensor<4x8x16xf32>
  // CHECK: triad.scale {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %3 = triad.scale %p by 2.0 : tensor<4x8x16xf32>
  // CHECK: triad.scale {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]}
  %4 = triad.scale %bp by 2.0 : tensor<4x8x16xf32>
  return
}

// -----

// bias_add: the bias splits with the last dimension; a pending sum passes
// only when the bias has it too.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @bias_add(
func.func @bias_add(%r: tensor<4x8x16xf32>,
                    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                    %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                    %h2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                    %g: tensor<16xf32>,
                    %gt: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
                    %gp: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {tp}>}) {
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.bias_add %r, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.bias_add %b, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.bias_add %h, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %3 = triad.bias_add %r, %gt : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %4 = triad.bias_add %b, %gt : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]}
  %5 = triad.bias_add %h2, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.bias_add %p, %gp : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %7 = triad.bias_add %p, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.bias_add {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %8 = triad.bias_add %bh, %gp : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// gelu: splits pass; a pending sum is reduced (it is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @gelu(
func.func @gelu(%r: tensor<4x8x16xf32>,
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.gelu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.gelu %r : tensor<4x8x16xf32>
  // CHECK: triad.gelu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.gelu %bh : tensor<4x8x16xf32>
  // CHECK: triad.gelu {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.gelu %s2 approximate = tanh : tensor<4x8x16xf32>
  // CHECK: triad.gelu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.gelu %p : tensor<4x8x16xf32>
  // CHECK: triad.gelu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %4 = triad.gelu %bp approximate = tanh : tensor<4x8x16xf32>
  return
}

// -----

// fast_gelu: splits pass; a pending sum is reduced (it is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @fast_gelu(
func.func @fast_gelu(%r: tensor<4x8x16xf32>,
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.fast_gelu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.fast_gelu %r : tensor<4x8x16xf32>
  // CHECK: triad.fast_gelu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.fast_gelu %bh : tensor<4x8x16xf32>
  // CHECK: triad.fast_gelu {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.fast_gelu %s2 : tensor<4x8x16xf32>
  // CHECK: triad.fast_gelu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.fast_gelu %p : tensor<4x8x16xf32>
  // CHECK: triad.fast_gelu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %4 = triad.fast_gelu %bp : tensor<4x8x16xf32>
  return
}

// -----

// relu: splits pass; a pending sum is reduced (it is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @relu(
func.func @relu(%r: tensor<4x8x16xf32>,
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.relu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.relu %r : tensor<4x8x16xf32>
  // CHECK: triad.relu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.relu %bh : tensor<4x8x16xf32>
  // CHECK: triad.relu {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.relu %s2 : tensor<4x8x16xf32>
  // CHECK: triad.relu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.relu %p : tensor<4x8x16xf32>
  // CHECK: triad.relu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %4 = triad.relu %bp : tensor<4x8x16xf32>
  return
}

// -----

// silu: splits pass; a pending sum is reduced (it is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @silu(
func.func @silu(%r: tensor<4x8x16xf32>,
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.silu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.silu %r : tensor<4x8x16xf32>
  // CHECK: triad.silu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.silu %bh : tensor<4x8x16xf32>
  // CHECK: triad.silu {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.silu %s2 : tensor<4x8x16xf32>
  // CHECK: triad.silu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.silu %p : tensor<4x8x16xf32>
  // CHECK: triad.silu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %4 = triad.silu %bp : tensor<4x8x16xf32>
  return
}

// -----

// cast: splits pass (any element types); a pending sum is reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @cast(
func.func @cast(%r: tensor<4x8x16xf32>,
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.cast {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.cast %r : tensor<4x8x16xf32> -> tensor<4x8x16xbf16>
  // CHECK: triad.cast {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.cast %bh : tensor<4x8x16xf32> -> tensor<4x8x16xf16>
  // CHECK: triad.cast {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.cast %s2 : tensor<4x8x16xf32> -> tensor<4x8x16xbf16>
  // CHECK: triad.cast {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.cast %p : tensor<4x8x16xf32> -> tensor<4x8x16xbf16>
  // CHECK: triad.cast {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %4 = triad.cast %bp : tensor<4x8x16xf32> -> tensor<4x8x16xf16>
  return
}

// -----

// dropout: its mask is a function of the global element index, so only the
// batch (a contiguous run of indices) and, from rank 3 on, the sequence (a
// run per sample, as sequence parallelism splits it) stay split; every
// other dimension is gathered, and a pending sum is reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @dropout(
func.func @dropout(%r: tensor<4x8x16xf32>,
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>},
    %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
    %m: tensor<32x16xf32> {dist.layout = #dist.layout<{dp}, {tp}>}) {
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.dropout %r probability = 0.1 rng_stream = 1 : tensor<4x8x16xf32>
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.dropout %bh probability = 0.1 rng_stream = 2 : tensor<4x8x16xf32>
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %2 = triad.dropout %s2 probability = 0.1 rng_stream = 3 : tensor<4x8x16xf32>
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.dropout %p probability = 0.1 rng_stream = 4 : tensor<4x8x16xf32>
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %4 = triad.dropout %bp probability = 0.1 rng_stream = 5 : tensor<4x8x16xf32>
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}, {}>]}
  %5 = triad.dropout %bs probability = 0.1 rng_stream = 6 : tensor<4x8x16xf32>
  // A matrix's second dimension is not a sequence: it is gathered.
  // CHECK: triad.dropout {{.*}}{dist.layouts = [#dist.layout<{dp}, {}>]}
  %6 = triad.dropout %m probability = 0.1 rng_stream = 7 : tensor<32x16xf32>
  return
}

// -----

// swiglu: gate and up split alike (the first operand's split of a dimension
// wins); a pending operand is reduced (it is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @swiglu(
func.func @swiglu(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %pd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.swiglu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.swiglu %r, %r : tensor<4x8x16xf32>
  // CHECK: triad.swiglu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.swiglu %bh, %bh : tensor<4x8x16xf32>
  // CHECK: triad.swiglu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %2 = triad.swiglu %b, %h : tensor<4x8x16xf32>
  // CHECK: triad.swiglu {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %3 = triad.swiglu %s2, %bh : tensor<4x8x16xf32>
  // CHECK: triad.swiglu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %4 = triad.swiglu %p, %r : tensor<4x8x16xf32>
  // CHECK: triad.swiglu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %5 = triad.swiglu %r, %pd : tensor<4x8x16xf32>
  return
}

// -----

// geglu: gate and up split alike (the first operand's split of a dimension
// wins); a pending operand is reduced (it is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @geglu(
func.func @geglu(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %pd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.geglu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.geglu %r, %r : tensor<4x8x16xf32>
  // CHECK: triad.geglu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.geglu %bh, %bh : tensor<4x8x16xf32>
  // CHECK: triad.geglu {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %2 = triad.geglu %b, %h : tensor<4x8x16xf32>
  // CHECK: triad.geglu {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %3 = triad.geglu %s2, %bh : tensor<4x8x16xf32>
  // CHECK: triad.geglu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %4 = triad.geglu %p, %r : tensor<4x8x16xf32>
  // CHECK: triad.geglu {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %5 = triad.geglu %r, %pd : tensor<4x8x16xf32>
  return
}

// -----

// activation_grad: x and dy split alike; it is linear in dy, whose pending
// sum passes (unless x's split takes its axis), and not in x.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @activation_grad(
func.func @activation_grad(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %pd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.activation_grad gelu %r, %r : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.activation_grad gelu_tanh %bh, %bh : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %2 = triad.activation_grad fast_gelu %b, %h : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %3 = triad.activation_grad relu %s2, %r : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %4 = triad.activation_grad silu %r, %p : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>]}
  %5 = triad.activation_grad silu %h, %pd : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %6 = triad.activation_grad silu %h, %p : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %7 = triad.activation_grad gelu %p, %r : tensor<4x8x16xf32>
  // CHECK: triad.activation_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %8 = triad.activation_grad gelu %pd, %p : tensor<4x8x16xf32>
  return
}

// -----

// select: both choices split alike, the scalar condition is replicated, and
// pending sums (of a choice or of the condition) are reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @select(
func.func @select(%c: tensor<f32>,
    %cp: tensor<f32> {dist.layout = #dist.layout<partial = {dp}>},
    %r: tensor<16x32xf32>,
    %b: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {}>},
    %bh: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
    %c2: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp, dp}>},
    %p: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>}) {
  // CHECK: triad.select {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %0 = triad.select %c, %r, %r : tensor<16x32xf32>
  // CHECK: triad.select {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %1 = triad.select %c, %bh, %r : tensor<16x32xf32>
  // CHECK: triad.select {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}>]}
  %2 = triad.select %c, %r, %c2 : tensor<16x32xf32>
  // on_true's dp split takes dp: on_false's {tp, dp} columns are gathered.
  // CHECK: triad.select {{.*}}{dist.layouts = [#dist.layout<{dp}, {}>]}
  %3 = triad.select %c, %b, %c2 : tensor<16x32xf32>
  // CHECK: triad.select {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %4 = triad.select %c, %p, %p : tensor<16x32xf32>
  // CHECK: triad.select {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %5 = triad.select %cp, %bh, %bh : tensor<16x32xf32>
  return
}

// -----

// layer_norm: batch and sequence splits pass, the normalized (last) dimension
// is gathered (of x and of the weights), and a pending sum is reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @layer_norm(
func.func @layer_norm(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
    %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %g: tensor<16xf32>,
    %gt: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
    %gp: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {dp}>}) {
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.layer_norm %r, %g, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.layer_norm %b, %g, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %2 = triad.layer_norm %s, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}, {}>]}
  %3 = triad.layer_norm %bs, %g, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %4 = triad.layer_norm %s2, %g, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %5 = triad.layer_norm %bh, %g, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %6 = triad.layer_norm %b, %gt, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %7 = triad.layer_norm %p, %g, %g : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %8 = triad.layer_norm %b, %gp : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// rms_norm: batch and sequence splits pass, the normalized (last) dimension
// is gathered (of x and of the weights), and a pending sum is reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rms_norm(
func.func @rms_norm(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
    %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %g: tensor<16xf32>,
    %gt: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
    %gp: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {dp}>}) {
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.rms_norm %r, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.rms_norm %b, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %2 = triad.rms_norm %s, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}, {}>]}
  %3 = triad.rms_norm %bs, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %4 = triad.rms_norm %s2, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %5 = triad.rms_norm %bh, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %6 = triad.rms_norm %b, %gt : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %7 = triad.rms_norm %p, %g : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %8 = triad.rms_norm %b, %gp : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// layer_norm_grad: dx keeps x's batch and sequence splits and dgamma is pending
// over them; the normalized dimension is gathered; it is linear in dy,
// whose pending sum passes to both results, and not in x or gamma.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @layer_norm_grad(
func.func @layer_norm_grad(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
    %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %g: tensor<16xf32>,
    %gt: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
    %gp: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {dp}>}) {
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}>]}
  %0:2 = triad.layer_norm_grad %r, %g, %r : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %1:2 = triad.layer_norm_grad %b, %g, %b : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>, #dist.layout<{}, partial = {tp}>]}
  %2:2 = triad.layer_norm_grad %s, %g, %r : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}, {}>, #dist.layout<{}, partial = {dp, tp}>]}
  %3:2 = triad.layer_norm_grad %bs, %g, %bs : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>, #dist.layout<{}, partial = {tp, dp}>]}
  %4:2 = triad.layer_norm_grad %s2, %g, %s2 : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %5:2 = triad.layer_norm_grad %bh, %gt, %bh : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>, #dist.layout<{}, partial = {tp}>]}
  %6:2 = triad.layer_norm_grad %r, %g, %p : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>, #dist.layout<{}, partial = {tp, dp}>]}
  %7:2 = triad.layer_norm_grad %b, %g, %p : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}>]}
  %8:2 = triad.layer_norm_grad %p, %g, %r : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.layer_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}>]}
  %9:2 = triad.layer_norm_grad %r, %gp, %r : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// rms_norm_grad: dx keeps x's batch and sequence splits and dgamma is pending
// over them; the normalized dimension is gathered; it is linear in dy,
// whose pending sum passes to both results, and not in x or gamma.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rms_norm_grad(
func.func @rms_norm_grad(%r: tensor<4x8x16xf32>,
    %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
    %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
    %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
    %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
    %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
    %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
    %g: tensor<16xf32>,
    %gt: tensor<16xf32> {dist.layout = #dist.layout<{tp}>},
    %gp: tensor<16xf32> {dist.layout = #dist.layout<{}, partial = {dp}>}) {
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}>]}
  %0:2 = triad.rms_norm_grad %r, %g, %r : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %1:2 = triad.rms_norm_grad %b, %g, %b : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>, #dist.layout<{}, partial = {tp}>]}
  %2:2 = triad.rms_norm_grad %s, %g, %r : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}, {}>, #dist.layout<{}, partial = {dp, tp}>]}
  %3:2 = triad.rms_norm_grad %bs, %g, %bs : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>, #dist.layout<{}, partial = {tp, dp}>]}
  %4:2 = triad.rms_norm_grad %s2, %g, %s2 : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{}, partial = {dp}>]}
  %5:2 = triad.rms_norm_grad %bh, %gt, %bh : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>, #dist.layout<{}, partial = {tp}>]}
  %6:2 = triad.rms_norm_grad %r, %g, %p : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>, #dist.layout<{}, partial = {tp, dp}>]}
  %7:2 = triad.rms_norm_grad %b, %g, %p : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}>]}
  %8:2 = triad.rms_norm_grad %p, %g, %r : tensor<4x8x16xf32>, tensor<16xf32>
  // CHECK: triad.rms_norm_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}>]}
  %9:2 = triad.rms_norm_grad %r, %gp, %r : tensor<4x8x16xf32>, tensor<16xf32>
  return
}

// -----

// attention: the batch and the head groups (q and k/v split alike, prefix
// lengths with the batch, ALiBi slopes with the heads) split, {tp, dp} too
// where the groups allow; the sequence is gathered; pending sums reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention(
func.func @attention(%q: tensor<4x8x16xf32>, %k: tensor<4x8x8xf32>,
                     %qb: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                     %qh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                     %kh: tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                     %qbh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %qb2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}, {}>},
                     %qh2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                     %qs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                     %qp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                     %kp: tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                     %plen: tensor<4xi32> {dist.layout = #dist.layout<{dp}>},
                     %slopes: tensor<4xf32> {dist.layout = #dist.layout<{tp}>}) {
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.attention %qb, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.attention %qh, %kh, %kh heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %3 = triad.attention %q, %kh, %k heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %4 = triad.attention %qbh, %kh, %kh heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{tp, dp}, {}, {}>]}
  %5 = triad.attention %qb2, %k, %k heads = 4 kv_heads = 2 mask = none : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]}
  %6 = triad.attention %qh2, %qh2, %qh2 heads = 4 kv_heads = 4 mask = causal : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %7 = triad.attention %qs, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // Attention is not linear in q, k or v: pending sums are reduced.
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %8 = triad.attention %qp, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %9 = triad.attention %q, %k, %kp heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %10 = triad.attention %q, %k, %k prefix(%plen : tensor<4xi32>) heads = 4 kv_heads = 2 mask = prefix : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %11 = triad.attention %q, %k, %k alibi(%slopes : tensor<4xf32>) heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  return
}

// -----

// attention_grad: dq, dk and dv split like q, k and v (batch, head groups);
// the sequence is gathered.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @attention_grad(
func.func @attention_grad(%q: tensor<4x8x16xf32>, %k: tensor<4x8x8xf32>,
                     %qb: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                     %qh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                     %kh: tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                     %qbh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                     %qb2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}, {}>},
                     %qh2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                     %qs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                     %qp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                     %dp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>},
                     %plen: tensor<4xi32> {dist.layout = #dist.layout<{dp}>},
                     %slopes: tensor<4xf32> {dist.layout = #dist.layout<{tp}>}) {
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}, {}, {}>, #dist.layout<{}, {}, {}>]}
  %0:3 = triad.attention_grad %q, %k, %k, %q heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{dp}, {}, {}>, #dist.layout<{dp}, {}, {}>]}
  %1:3 = triad.attention_grad %qb, %k, %k, %qb heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>, #dist.layout<{}, {}, {tp}>, #dist.layout<{}, {}, {tp}>]}
  %2:3 = triad.attention_grad %qh, %kh, %kh, %qh heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>, #dist.layout<{dp}, {}, {tp}>, #dist.layout<{dp}, {}, {tp}>]}
  %3:3 = triad.attention_grad %qbh, %kh, %kh, %q heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{tp, dp}, {}, {}>, #dist.layout<{tp, dp}, {}, {}>, #dist.layout<{tp, dp}, {}, {}>]}
  %4:3 = triad.attention_grad %qb2, %k, %k, %qb2 heads = 4 kv_heads = 2 mask = none : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>, #dist.layout<{}, {}, {tp, dp}>, #dist.layout<{}, {}, {tp, dp}>]}
  %5:3 = triad.attention_grad %qh2, %qh2, %qh2, %qh2 heads = 4 kv_heads = 4 mask = causal : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{dp}, {}, {}>, #dist.layout<{dp}, {}, {}>]}
  %6:3 = triad.attention_grad %qs, %k, %k, %qs heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // Linear in dout: its pending sum passes to dq, dk and dv, unless a
  // split takes its axis; a pending q is reduced.
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {dp}>, #dist.layout<{}, {}, {}, partial = {dp}>, #dist.layout<{}, {}, {}, partial = {dp}>]}
  %7:3 = triad.attention_grad %q, %k, %k, %dp heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}, partial = {dp}>, #dist.layout<{}, {}, {tp}, partial = {dp}>, #dist.layout<{}, {}, {tp}, partial = {dp}>]}
  %8:3 = triad.attention_grad %qh, %kh, %kh, %dp heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>, #dist.layout<{}, {}, {tp}>, #dist.layout<{}, {}, {tp}>]}
  %9:3 = triad.attention_grad %qh, %kh, %kh, %qp heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>, #dist.layout<{}, {}, {}>, #dist.layout<{}, {}, {}>]}
  %10:3 = triad.attention_grad %qp, %k, %k, %q heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>, #dist.layout<{dp}, {}, {}>, #dist.layout<{dp}, {}, {}>]}
  %11:3 = triad.attention_grad %q, %k, %k prefix(%plen : tensor<4xi32>), %q heads = 4 kv_heads = 2 mask = prefix : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  // CHECK: triad.attention_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>, #dist.layout<{}, {}, {tp}>, #dist.layout<{}, {}, {tp}>]}
  %12:3 = triad.attention_grad %q, %k, %k alibi(%slopes : tensor<4xf32>), %q heads = 4 kv_heads = 2 mask = causal : tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32> -> tensor<4x8x16xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>
  return
}

// -----

// rope: batch and heads split (over {tp, dp} too), the sequence is gathered
// (positions are global), and a pending sum passes (it is linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rope(
func.func @rope(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %h2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.rope %r heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.rope %b heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.rope %h heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %3 = triad.rope %bh heads = 4 rotary_dim = 2 base = 5.0e+05 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]}
  %4 = triad.rope %h2 heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %5 = triad.rope %s heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.rope %p heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]}
  %7 = triad.rope %bp heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  return
}

// -----

// rope_grad: as rope: batch and heads split, the sequence is gathered, and a
// pending dy passes (it is linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @rope_grad(
func.func @rope_grad(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %h2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.rope_grad %r heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.rope_grad %b heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.rope_grad %h heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %3 = triad.rope_grad %bh heads = 4 rotary_dim = 2 base = 5.0e+05 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]}
  %4 = triad.rope_grad %h2 heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %5 = triad.rope_grad %s heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.rope_grad %p heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  // CHECK: triad.rope_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]}
  %7 = triad.rope_grad %bp heads = 4 rotary_dim = 4 : tensor<4x8x16xf32>
  return
}

// -----

// reshape: the outermost dimension of each run of merged or split dimensions
// keeps its split on both sides, inner ones are gathered, and a pending sum
// passes (it is linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reshape(
func.func @reshape(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %b2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}, {}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %rows: tensor<32x16xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
                %rows2: tensor<32x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}>},
                %rows3: tensor<8x16xf32> {dist.layout = #dist.layout<{dp}, {}>}) {
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %0 = triad.reshape %r : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}>]}
  %1 = triad.reshape %bh : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // Only the outermost dimension of a merged run carries a factor: the
  // split sequence is gathered.
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %2 = triad.reshape %s : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{tp, dp}, {}>]}
  %3 = triad.reshape %b2 : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %4 = triad.reshape %rows : tensor<32x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{tp, dp}, {}, {}>]}
  %5 = triad.reshape %rows2 : tensor<32x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}, {}>]}
  %6 = triad.reshape %h : tensor<4x8x16xf32> -> tensor<4x8x4x4xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{}, {tp}>]}
  %7 = triad.reshape %s : tensor<4x8x16xf32> -> tensor<4x128xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %8 = triad.reshape %h : tensor<4x8x16xf32> -> tensor<4x128xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %9 = triad.reshape %p : tensor<4x8x16xf32> -> tensor<32x16xf32>
  // CHECK: triad.reshape {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %10 = triad.reshape %rows3 : tensor<8x16xf32> -> tensor<2x4x16xf32>
  return
}

// -----

// transpose: splits follow their dimensions and a pending sum passes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @transpose(
func.func @transpose(%r: tensor<4x8x16xf32>,
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %bp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.transpose {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.transpose %r [1, 0, 2] : tensor<4x8x16xf32> -> tensor<8x4x16xf32>
  // CHECK: triad.transpose {{.*}}{dist.layouts = [#dist.layout<{}, {dp}, {tp}>]}
  %1 = triad.transpose %bh [1, 0, 2] : tensor<4x8x16xf32> -> tensor<8x4x16xf32>
  // CHECK: triad.transpose {{.*}}{dist.layouts = [#dist.layout<{tp}, {dp}, {}>]}
  %2 = triad.transpose %bh [2, 0, 1] : tensor<4x8x16xf32> -> tensor<16x4x8xf32>
  // CHECK: triad.transpose {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]}
  %3 = triad.transpose %s2 [0, 2, 1] : tensor<4x8x16xf32> -> tensor<4x16x8xf32>
  // CHECK: triad.transpose {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %4 = triad.transpose %p [2, 1, 0] : tensor<4x8x16xf32> -> tensor<16x8x4xf32>
  // CHECK: triad.transpose {{.*}}{dist.layouts = [#dist.layout<{}, {dp}, {}, partial = {tp}>]}
  %5 = triad.transpose %bp [1, 0, 2] : tensor<4x8x16xf32> -> tensor<8x4x16xf32>
  return
}

// -----

// slice: sliced dimensions are gathered, whole ones keep their splits
// ({tp, dp} too), and a pending sum passes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @slice(
func.func @slice(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.slice %r offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.slice %bh offsets = [0, 0, 0] sizes = [4, 8, 16] : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %2 = triad.slice %bh offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %3 = triad.slice %bh offsets = [0, 0, 0] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %4 = triad.slice %b offsets = [1, 0, 0] sizes = [2, 8, 16] : tensor<4x8x16xf32> -> tensor<2x8x16xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %5 = triad.slice %s2 offsets = [0, 2, 0] sizes = [4, 4, 16] : tensor<4x8x16xf32> -> tensor<4x4x16xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %6 = triad.slice %s2 offsets = [0, 0, 4] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.slice {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %7 = triad.slice %p offsets = [0, 0, 8] sizes = [4, 8, 8] : tensor<4x8x16xf32> -> tensor<4x8x8xf32>
  return
}

// -----

// concat: the concatenated dimension is gathered, the others split (the
// first input deciding); a pending sum passes only when every input has it.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @concat(
func.func @concat(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %h: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %q: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %pd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {dp}>}) {
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.concat %r, %r dim = 2 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.concat %bh, %bh dim = 2 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %2 = triad.concat %bh, %r dim = 1 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x16x16xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %3 = triad.concat %b, %h, %r dim = 1 : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x24x16xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %4 = triad.concat %s2, %r dim = 0 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<8x8x16xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %5 = triad.concat %s2, %s2 dim = 1 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x16x16xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.concat %p, %q dim = 2 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %7 = triad.concat %p, %r dim = 2 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x32xf32>
  // CHECK: triad.concat {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %8 = triad.concat %p, %pd dim = 2 : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x32xf32>
  return
}

// -----

// broadcast: the dimensions taken from the input keep its splits ({tp, dp}
// too), repeated ones are whole, and a pending sum passes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @broadcast(
func.func @broadcast(%r: tensor<8x16xf32>,
                %s: tensor<8x16xf32> {dist.layout = #dist.layout<{tp}, {}>},
                %h: tensor<8x16xf32> {dist.layout = #dist.layout<{}, {tp}>},
                %s2: tensor<8x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}>},
                %p: tensor<8x16xf32> {dist.layout = #dist.layout<{}, {}, partial = {tp}>},
                %k: tensor<4x1x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %v: tensor<16xf32> {dist.layout = #dist.layout<{tp}>}) {
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.broadcast %r : tensor<8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %1 = triad.broadcast %s : tensor<8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %2 = triad.broadcast %h : tensor<8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}, {}>]}
  %3 = triad.broadcast %s2 : tensor<8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %4 = triad.broadcast %p : tensor<8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %5 = triad.broadcast %k : tensor<4x1x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.broadcast {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp}>]}
  %6 = triad.broadcast %v : tensor<16xf32> -> tensor<4x8x16xf32>
  return
}

// -----

// pad: padded dimensions are gathered, the others keep their splits, and a
// pending sum passes (it pads with zeros).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @pad(
func.func @pad(%r: tensor<4x8x16xf32>,
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                %h2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {tp, dp}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.pad %r low = [0, 2, 0] high = [0, 0, 0] : tensor<4x8x16xf32> -> tensor<4x10x16xf32>
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %1 = triad.pad %bh low = [0, 2, 0] high = [0, 0, 0] : tensor<4x8x16xf32> -> tensor<4x10x16xf32>
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %2 = triad.pad %bh low = [0, 0, 0] high = [0, 0, 2] : tensor<4x8x16xf32> -> tensor<4x8x18xf32>
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %3 = triad.pad %s2 low = [0, 1, 0] high = [0, 1, 0] : tensor<4x8x16xf32> -> tensor<4x10x16xf32>
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {tp, dp}>]}
  %4 = triad.pad %h2 low = [1, 0, 0] high = [1, 0, 0] : tensor<4x8x16xf32> -> tensor<6x8x16xf32>
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %5 = triad.pad %bh low = [0, 0, 0] high = [0, 0, 0] : tensor<4x8x16xf32> -> tensor<4x8x16xf32>
  // CHECK: triad.pad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %6 = triad.pad %p low = [0, 2, 0] high = [0, 0, 0] : tensor<4x8x16xf32> -> tensor<4x10x16xf32>
  return
}

// -----

// sum: kept dimensions keep their splits, a split summed dimension leaves
// the result pending over its axes, and a pending input passes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @sum(
func.func @sum(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                %sp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {dp}, {}, partial = {tp}>}) {
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %0 = triad.sum %r dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{dp}, {}>]}
  %1 = triad.sum %b dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %2 = triad.sum %s dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, partial = {tp}>]}
  %3 = triad.sum %bs dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp, dp}>]}
  %4 = triad.sum %s2 dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{tp}, partial = {dp}>]}
  %5 = triad.sum %bh dims = [0, 1] : tensor<4x8x16xf32> -> tensor<16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<partial = {dp, tp}>]}
  %6 = triad.sum %bh dims = [0, 1, 2] : tensor<4x8x16xf32> -> tensor<f32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %7 = triad.sum %p dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.sum {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp, dp}>]}
  %8 = triad.sum %sp dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  return
}

// -----

// mean: kept dimensions keep their splits, averaged dimensions are gathered
// (it divides by the global count), and a pending input passes.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @mean(
func.func @mean(%r: tensor<4x8x16xf32>,
                %b: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                %s: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                %bs: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {tp}, {}>},
                %s2: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp, dp}, {}>},
                %bh: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                %p: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %0 = triad.mean %r dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<{dp}, {}>]}
  %1 = triad.mean %b dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %2 = triad.mean %s dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<{dp}, {}>]}
  %3 = triad.mean %bs dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}>]}
  %4 = triad.mean %s2 dims = [2] : tensor<4x8x16xf32> -> tensor<4x8xf32>
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<>]}
  %5 = triad.mean %bh dims = [0, 1, 2] : tensor<4x8x16xf32> -> tensor<f32>
  // CHECK: triad.mean {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %6 = triad.mean %p dims = [1] : tensor<4x8x16xf32> -> tensor<4x16xf32>
  return
}

// -----

// sum_squares: each split leaves the scalar pending over its axes; a pending
// input is reduced first (squares do not sum over pending sums).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @sum_squares(
func.func @sum_squares(%r: tensor<16x32xf32>,
    %b: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {}>},
    %bh: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
    %c2: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp, dp}>},
    %gp: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>},
    %hp: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp}, partial = {dp}>}) {
  // CHECK: triad.sum_squares {{.*}}{dist.layouts = [#dist.layout<>]}
  %0 = triad.sum_squares %r : tensor<16x32xf32>
  // CHECK: triad.sum_squares {{.*}}{dist.layouts = [#dist.layout<partial = {dp}>]}
  %1 = triad.sum_squares %b : tensor<16x32xf32>
  // CHECK: triad.sum_squares {{.*}}{dist.layouts = [#dist.layout<partial = {dp, tp}>]}
  %2 = triad.sum_squares %bh : tensor<16x32xf32>
  // CHECK: triad.sum_squares {{.*}}{dist.layouts = [#dist.layout<partial = {tp, dp}>]}
  %3 = triad.sum_squares %c2 : tensor<16x32xf32>
  // CHECK: triad.sum_squares {{.*}}{dist.layouts = [#dist.layout<>]}
  %4 = triad.sum_squares %gp : tensor<16x32xf32>
  // The pending dp sum is reduced; the tp split leaves a pending tp sum.
  // CHECK: triad.sum_squares {{.*}}{dist.layouts = [#dist.layout<partial = {tp}>]}
  %5 = triad.sum_squares %hp : tensor<16x32xf32>
  return
}

// -----

// lr_schedule: a replicated scalar; a pending step is reduced.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @lr_schedule(
func.func @lr_schedule(%s: tensor<f32>,
    %sp: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>}) {
  // CHECK: triad.lr_schedule {{.*}}{dist.layouts = [#dist.layout<>]}
  %0 = triad.lr_schedule %s peak = 3.0e-4 floor = 3.0e-5 warmup = 10 decay = 100 : tensor<f32>
  // CHECK: triad.lr_schedule {{.*}}{dist.layouts = [#dist.layout<>]}
  %1 = triad.lr_schedule %sp peak = 3.0e-4 floor = 3.0e-5 warmup = 10 decay = 100 : tensor<f32>
  return
}

// -----

// clip_coefficient: replicated scalars; a pending sum of squares (the norm
// of split gradients) is reduced before the square root.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @clip_coefficient(
func.func @clip_coefficient(%s: tensor<f32>,
    %sp: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>}) {
  // CHECK: triad.clip_coefficient {{.*}}{dist.layouts = [#dist.layout<>, #dist.layout<>]}
  %0:2 = triad.clip_coefficient %s max_norm = 1.0
  // CHECK: triad.clip_coefficient {{.*}}{dist.layouts = [#dist.layout<>, #dist.layout<>]}
  %1:2 = triad.clip_coefficient %sp max_norm = 1.0
  return
}

// -----

// loss_scale_update: four replicated scalars; a pending sum of squares is
// reduced before the overflow test.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @loss_scale_update(
func.func @loss_scale_update(%s: tensor<f32>,
    %sp: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>}) {
  // CHECK: triad.loss_scale_update {{.*}}{dist.layouts = [#dist.layout<>, #dist.layout<>, #dist.layout<>, #dist.layout<>]}
  %0:4 = triad.loss_scale_update %s, %s, %s growth_interval = 100 growth = 2.0 backoff = 0.5
  // CHECK: triad.loss_scale_update {{.*}}{dist.layouts = [#dist.layout<>, #dist.layout<>, #dist.layout<>, #dist.layout<>]}
  %1:4 = triad.loss_scale_update %sp, %s, %s growth_interval = 100 growth = 2.0 backoff = 0.5
  return
}

// -----

// adamw_update: param, grad and moments split alike (the param's split of a
// dimension wins unless another operand's extends it), the scalars are replicated, and a pending gradient or
// scalar is reduced (the update is not linear).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @adamw_update(
func.func @adamw_update(%r: tensor<16x32xf32>,
    %bh: tensor<16x32xf32> {dist.layout = #dist.layout<{dp}, {tp}>},
    %c2: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp, dp}>},
    %h: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp}>},
    %hp: tensor<16x32xf32> {dist.layout = #dist.layout<{}, {tp}, partial = {dp}>},
    %s: tensor<f32>,
    %sp: tensor<f32> {dist.layout = #dist.layout<partial = {dp, tp}>}) {
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{}, {}>, #dist.layout<{}, {}>, #dist.layout<{}, {}>]}
  %0:3 = triad.adamw_update %r, %r, %r, %r, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{}, {tp}>, #dist.layout<{}, {tp}>, #dist.layout<{}, {tp}>]}
  %1:3 = triad.adamw_update %h, %h, %h, %h, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>, #dist.layout<{dp}, {tp}>]}
  %2:3 = triad.adamw_update %bh, %bh, %bh, %bh, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}>, #dist.layout<{}, {tp, dp}>, #dist.layout<{}, {tp, dp}>]}
  %3:3 = triad.adamw_update %c2, %r, %c2, %c2, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  // The moments' finer {tp, dp} extends the param's tp split and wins: the
  // param is sliced (no communication) rather than the moments gathered.
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{}, {tp, dp}>, #dist.layout<{}, {tp, dp}>, #dist.layout<{}, {tp, dp}>]}
  %4:3 = triad.adamw_update %h, %r, %c2, %r, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{}, {tp}>, #dist.layout<{}, {tp}>, #dist.layout<{}, {tp}>]}
  %5:3 = triad.adamw_update %h, %hp, %h, %h, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  // CHECK: triad.adamw_update {{.*}}{dist.layouts = [#dist.layout<{}, {}>, #dist.layout<{}, {}>, #dist.layout<{}, {}>]}
  %6:3 = triad.adamw_update %r, %r, %r, %r, %sp, %s, %sp beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  return
}

// -----

// reshape: a split passes only where both sides cut into the same contiguous
// pieces (2x3 to 3x2 over 2 ranks would cut a row in half: gathered), and a
// size-1 dimension neither carries nor blocks a split.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [1, 1, 2]
// CHECK-LABEL: func.func @reshape_contiguous
func.func @reshape_contiguous(%x: tensor<2x3xf32> {dist.layout = #dist.layout<{tp}, {}>},
                              %y: tensor<4x16xf32> {dist.layout = #dist.layout<{}, {tp}>},
                              %z: tensor<4x1x16xf32> {dist.layout = #dist.layout<{}, {}, {tp}>}) {
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{}, {}>]} : tensor<2x3xf32> -> tensor<3x2xf32>
  %0 = triad.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{}, {}, {tp}>]} : tensor<4x16xf32> -> tensor<4x1x16xf32>
  %1 = triad.reshape %y : tensor<4x16xf32> -> tensor<4x1x16xf32>
  // CHECK: triad.reshape %{{.*}} {dist.layouts = [#dist.layout<{}, {tp}>]} : tensor<4x1x16xf32> -> tensor<4x16xf32>
  %2 = triad.reshape %z : tensor<4x1x16xf32> -> tensor<4x16xf32>
  return
}

// -----

// sum and mean that keep the reduced dimensions (of size 1): the result has
// the input's rank, the kept dimensions whole; a sum over a split dimension
// is pending, a mean's reduced dimensions are gathered.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @reductions_keeping_dims
func.func @reductions_keeping_dims(%x: tensor<4x8xf32> {dist.layout = #dist.layout<{dp}, {tp}>}) {
  // CHECK: triad.sum %{{.*}} dims = [1] {dist.layouts = [#dist.layout<{dp}, {}, partial = {tp}>]} : tensor<4x8xf32> -> tensor<4x1xf32>
  %0 = triad.sum %x dims = [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  // CHECK: triad.mean %{{.*}} dims = [0] {dist.layouts = [#dist.layout<{}, {tp}>]} : tensor<4x8xf32> -> tensor<1x8xf32>
  %1 = triad.mean %x dims = [0] : tensor<4x8xf32> -> tensor<1x8xf32>
  return
}

// -----

// embedding: the ids' splits pass to the rows of the result; a table split
// along its vocabulary leaves the result pending over those axes (each
// piece looks up its rows: vocab-parallel), one split on its hidden
// dimension splits the result's; a pending table is reduced where dp is
// taken by the ids, and an axis the ids already use gathers the vocabulary.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @embedding(
func.func @embedding(%ids: tensor<4x8xi32>,
                     %idsb: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                     %idss: tensor<4x8xi32> {dist.layout = #dist.layout<{}, {tp}>},
                     %idsbd: tensor<4x8xi32> {dist.layout = #dist.layout<{tp, dp}, {}>},
                     %t: tensor<16x8xf32>,
                     %tv: tensor<16x8xf32> {dist.layout = #dist.layout<{tp}, {}>},
                     %th: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {tp}>},
                     %tvd: tensor<16x8xf32> {dist.layout = #dist.layout<{tp, dp}, {}>},
                     %tp: tensor<16x8xf32> {dist.layout = #dist.layout<{}, {}, partial = {dp}>}) {
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %0 = triad.embedding %ids, %t : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.embedding %idsb, %t : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %2 = triad.embedding %idss, %t : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{tp, dp}, {}, {}>]}
  %3 = triad.embedding %idsbd, %t : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp}>]}
  %4 = triad.embedding %ids, %tv : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}, partial = {tp}>]}
  %5 = triad.embedding %idsb, %tv : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %6 = triad.embedding %idsb, %th : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}, partial = {tp, dp}>]}
  %7 = triad.embedding %ids, %tvd : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %8 = triad.embedding %idsb, %tp : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  // CHECK: triad.embedding {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, {}>]}
  %9 = triad.embedding %idss, %tv : tensor<4x8xi32>, tensor<16x8xf32> -> tensor<4x8x8xf32>
  return
}
// -----

// embedding_grad: the ids' and dy's batch split leaves the table's gradient
// pending over it (a scatter-add over the batch), dy's hidden split splits
// the result's, and a pending dy passes its sum on (linear in dy).
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @embedding_grad(
func.func @embedding_grad(%ids: tensor<4x8xi32>,
                          %idsb: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                          %idss: tensor<4x8xi32> {dist.layout = #dist.layout<{}, {tp}>},
                          %dy: tensor<4x8x8xf32>,
                          %dyb: tensor<4x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                          %dyh: tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {tp}>},
                          %dybh: tensor<4x8x8xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                          %dyp: tensor<4x8x8xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>}) {
  // CHECK: triad.embedding_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}>]}
  %0 = triad.embedding_grad %ids, %dy : tensor<4x8xi32>, tensor<4x8x8xf32> -> tensor<16x8xf32>
  // CHECK: triad.embedding_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {dp}>]}
  %1 = triad.embedding_grad %idsb, %dyb : tensor<4x8xi32>, tensor<4x8x8xf32> -> tensor<16x8xf32>
  // CHECK: triad.embedding_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %2 = triad.embedding_grad %idss, %dy : tensor<4x8xi32>, tensor<4x8x8xf32> -> tensor<16x8xf32>
  // CHECK: triad.embedding_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp}>]}
  %3 = triad.embedding_grad %ids, %dyh : tensor<4x8xi32>, tensor<4x8x8xf32> -> tensor<16x8xf32>
  // CHECK: triad.embedding_grad {{.*}}{dist.layouts = [#dist.layout<{}, {tp}, partial = {dp}>]}
  %4 = triad.embedding_grad %idsb, %dybh : tensor<4x8xi32>, tensor<4x8x8xf32> -> tensor<16x8xf32>
  // CHECK: triad.embedding_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, partial = {tp}>]}
  %5 = triad.embedding_grad %ids, %dyp : tensor<4x8xi32>, tensor<4x8x8xf32> -> tensor<16x8xf32>
  return
}
// -----

// cross_entropy and its gradient: a batch split leaves the loss pending
// (token-weighted) over it; the sequence stays whole (gathered); a split
// vocabulary stays split (vocab-parallel: the local form combines the
// pieces, so the loss is not pending over tp); pending logits are reduced
// first. The gradient keeps the batch and vocabulary splits of the logits.
// A local form (lse, vocab_split) holds one piece: its vocabulary stays
// whole.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @cross_entropy(
func.func @cross_entropy(%l: tensor<4x8x16xf32>,
                         %lb: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                         %ls: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {tp}, {}>},
                         %lv: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>},
                         %lbd: tensor<4x8x16xf32> {dist.layout = #dist.layout<{tp, dp}, {}, {}>},
                         %lp: tensor<4x8x16xf32> {dist.layout = #dist.layout<{}, {}, {}, partial = {tp}>},
                         %y: tensor<4x8xi32>,
                         %yb: tensor<4x8xi32> {dist.layout = #dist.layout<{dp}, {}>},
                         %d: tensor<f32>,
                         %dp: tensor<f32> {dist.layout = #dist.layout<partial = {dp}>},
                         %lse: tensor<4x8x1xf32> {dist.layout = #dist.layout<{dp}, {}, {}>}) {
  // CHECK: triad.cross_entropy {{.*}}{dist.layouts = [#dist.layout<>]}
  %0 = triad.cross_entropy %l, %y : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy {{.*}}{dist.layouts = [#dist.layout<partial = {dp}>]}
  %1 = triad.cross_entropy %lb, %yb : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy {{.*}}{dist.layouts = [#dist.layout<>]}
  %2 = triad.cross_entropy %ls, %y : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy {{.*}}{dist.layouts = [#dist.layout<partial = {dp}>]}
  %3 = triad.cross_entropy %lv, %yb : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy {{.*}}{dist.layouts = [#dist.layout<partial = {tp, dp}>]}
  %4 = triad.cross_entropy %lbd, %y : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy {{.*}}{dist.layouts = [#dist.layout<>]}
  %5 = triad.cross_entropy %lp, %y : tensor<4x8x16xf32>, tensor<4x8xi32> -> tensor<f32>
  // CHECK: triad.cross_entropy_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %6 = triad.cross_entropy_grad %lb, %yb, %d : tensor<4x8x16xf32>, tensor<4x8xi32>
  // CHECK: triad.cross_entropy_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {tp}>]}
  %7 = triad.cross_entropy_grad %lv, %yb, %d : tensor<4x8x16xf32>, tensor<4x8xi32>
  // CHECK: triad.cross_entropy_grad {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %8 = triad.cross_entropy_grad %lb, %yb, %dp : tensor<4x8x16xf32>, tensor<4x8xi32>
  // CHECK: triad.cross_entropy_grad {{.*}}{dist.layouts = [#dist.layout<{}, {}, {}>]}
  %9 = triad.cross_entropy_grad %l, %y, %d : tensor<4x8x16xf32>, tensor<4x8xi32>
  // CHECK: triad.cross_entropy {{.*}}vocab_split ["tp"] {dist.layouts = [#dist.layout<partial = {dp}>]}
  %10 = triad.cross_entropy %lv, %yb lse %lse vocab_split ["tp"] : tensor<4x8x16xf32>, tensor<4x8xi32>, tensor<4x8x1xf32> -> tensor<f32>
  // CHECK: triad.cross_entropy_grad {{.*}}vocab_split ["tp"] {dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %11 = triad.cross_entropy_grad %lv, %yb, %d lse %lse vocab_split ["tp"] : tensor<4x8x16xf32>, tensor<4x8xi32>, tensor<4x8x1xf32>
  return
}

// -----

// logsumexp: the reduced last dimension stays whole (gathered); the others
// keep their splits.
dist.mesh @mesh axes ["dp", "pp", "tp"] = [2, 1, 2]
// CHECK-LABEL: func.func @logsumexp(
func.func @logsumexp(%lb: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {}>},
                     %lv: tensor<4x8x16xf32> {dist.layout = #dist.layout<{dp}, {}, {tp}>}) {
  // CHECK: triad.logsumexp {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %0 = triad.logsumexp %lb : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
  // CHECK: triad.logsumexp {{.*}}{dist.layouts = [#dist.layout<{dp}, {}, {}>]}
  %1 = triad.logsumexp %lv : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
  return
}
