// Round trip of every triad op, in the custom and in the generic form.
// RUN: triad-opt %s | triad-opt | FileCheck %s
// RUN: triad-opt %s --mlir-print-op-generic | triad-opt | FileCheck %s

// CHECK: triad.param @wte : tensor<256x64xf32> init <normal, std = 2.000000e-02>
triad.param @wte : tensor<256x64xf32> init <normal, std = 0.02>
// CHECK: triad.param @wo : tensor<64x64xf32> init <scaled_normal, std = 2.000000e-02, layers = 12>
triad.param @wo : tensor<64x64xf32> init <scaled_normal, std = 0.02, layers = 12>
// CHECK: triad.param @gamma : tensor<64xf32> init <ones>
triad.param @gamma : tensor<64xf32> init <ones>
// CHECK: triad.param @beta : tensor<64xf32> init <zeros>
triad.param @beta : tensor<64xf32> init <zeros>
// CHECK: triad.param @half : tensor<64x64xbf16> init <normal, std = 1.000000e+00>
triad.param @half : tensor<64x64xbf16> init <normal, std = 1.0>
// CHECK: triad.param @padded : tensor<256x64xf32> unpadded [255, 64] init <normal, std = 2.000000e-02>
triad.param @padded : tensor<256x64xf32> unpadded [255, 64] init <normal, std = 0.02>

// CHECK-LABEL: func.func @parts
func.func @parts(%ids: tensor<8x64xi32>, %labels: tensor<8x64xi32>) -> tensor<f32> {
  // CHECK: triad.layer embedding 0 (%{{.*}}) : (tensor<8x64xi32>) -> tensor<8x64x64xf32> {
  // CHECK-NEXT: ^bb0(%[[IDS:.*]]: tensor<8x64xi32>):
  %h = triad.layer embedding 0 (%ids) : (tensor<8x64xi32>) -> tensor<8x64x64xf32> {
  ^bb0(%x: tensor<8x64xi32>):
    // CHECK: %[[W:.*]] = triad.get_param @wte : tensor<256x64xf32>
    %w = triad.get_param @wte : tensor<256x64xf32>
    // CHECK: triad.embedding %[[IDS]], %[[W]] : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
    %e = triad.embedding %x, %w : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
    // A vocab-parallel piece: rows of this rank's index in its tp group.
    // CHECK: triad.embedding %[[IDS]], %[[W]] vocab_split ["tp"] : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
    %piece = triad.embedding %x, %w vocab_split ["tp"] : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
    // CHECK: triad.yield %{{.*}} : tensor<8x64x64xf32>
    triad.yield %e : tensor<8x64x64xf32>
  }
  // CHECK: triad.layer transformer 3 (%{{.*}}) : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32>
  %t = triad.layer transformer 3 (%h) : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32> {
  ^bb0(%x: tensor<8x64x64xf32>):
    triad.yield %x : tensor<8x64x64xf32>
  }
  // CHECK: triad.layer head 0 (%{{.*}}, %{{.*}}) : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<f32>
  %loss = triad.layer head 0 (%t, %labels) : (tensor<8x64x64xf32>, tensor<8x64xi32>) -> tensor<f32> {
  ^bb0(%x: tensor<8x64x64xf32>, %l: tensor<8x64xi32>):
    %w = triad.get_param @wte : tensor<256x64xf32>
    // CHECK: triad.matmul %{{.*}}, %{{.*}} transpose_rhs : tensor<8x64x64xf32>, tensor<256x64xf32> -> tensor<8x64x256xf32>
    %logits = triad.matmul %x, %w transpose_rhs : tensor<8x64x64xf32>, tensor<256x64xf32> -> tensor<8x64x256xf32>
    // CHECK: triad.cross_entropy %{{.*}}, %{{.*}} : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    %ce = triad.cross_entropy %logits, %l : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    // CHECK: triad.cross_entropy %{{.*}}, %{{.*}} {ignore_index = 0 : i64}
    %ce0 = triad.cross_entropy %logits, %l {ignore_index = 0} : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    // The vocab-parallel local form: this rank's columns and the whole
    // vocabulary's log-sum-exp per token.
    // CHECK: %[[LSE:.*]] = triad.logsumexp %{{.*}} : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    %lse = triad.logsumexp %logits : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    // CHECK: triad.cross_entropy %{{.*}}, %{{.*}} lse %[[LSE]] vocab_split ["tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
    %cep = triad.cross_entropy %logits, %l lse %lse vocab_split ["tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
    // CHECK: triad.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} lse %[[LSE]] vocab_split ["dp", "tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32>
    %dp = triad.cross_entropy_grad %logits, %l, %cep lse %lse vocab_split ["dp", "tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32>
    // A padded vocabulary: its classes, whole or in pieces.
    // CHECK: triad.cross_entropy %{{.*}}, %{{.*}} classes 255 : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    %cec = triad.cross_entropy %logits, %l classes 255 : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    // CHECK: triad.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} classes 255 : tensor<8x64x256xf32>, tensor<8x64xi32>
    %dc = triad.cross_entropy_grad %logits, %l, %cec classes 255 : tensor<8x64x256xf32>, tensor<8x64xi32>
    // CHECK: %[[OWN:.*]] = triad.logsumexp %{{.*}} classes 500 vocab_split ["tp"] : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    %own = triad.logsumexp %logits classes 500 vocab_split ["tp"] : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    // CHECK: triad.logsumexp %{{.*}} classes 255 : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    %whole = triad.logsumexp %logits classes 255 : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    // CHECK: triad.cross_entropy %{{.*}}, %{{.*}} lse %[[OWN]] vocab_split ["tp"] classes 500 : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
    %cpc = triad.cross_entropy %logits, %l lse %own vocab_split ["tp"] classes 500 : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
    triad.yield %ce : tensor<f32>
  }
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @arithmetic
func.func @arithmetic(%x: tensor<8x64x64xf32>, %b: tensor<64xf32>, %pos: tensor<64x64xf32>,
                      %w: tensor<64x256xf32>, %a: tensor<4x64x32xf32>, %bt: tensor<4x32x16xf32>,
                      %c: tensor<4x16x64xf32>) {
  // CHECK: triad.matmul %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<64x256xf32> -> tensor<8x64x256xf32>
  %0 = triad.matmul %x, %w : tensor<8x64x64xf32>, tensor<64x256xf32> -> tensor<8x64x256xf32>
  // CHECK: triad.matmul %{{.*}}, %{{.*}} : tensor<4x64x32xf32>, tensor<4x32x16xf32> -> tensor<4x64x16xf32>
  %1 = triad.matmul %a, %bt : tensor<4x64x32xf32>, tensor<4x32x16xf32> -> tensor<4x64x16xf32>
  // CHECK: triad.matmul %{{.*}}, %{{.*}} transpose_lhs transpose_rhs : tensor<4x64x32xf32>, tensor<4x16x64xf32> -> tensor<4x32x16xf32>
  %2 = triad.matmul %a, %c transpose_lhs transpose_rhs : tensor<4x64x32xf32>, tensor<4x16x64xf32> -> tensor<4x32x16xf32>
  // CHECK: triad.add %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<8x64x64xf32>
  %3 = triad.add %x, %x : tensor<8x64x64xf32>, tensor<8x64x64xf32>
  // CHECK: triad.add %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<64x64xf32>
  %4 = triad.add %x, %pos : tensor<8x64x64xf32>, tensor<64x64xf32>
  // CHECK: triad.mul %{{.*}}, %{{.*}} : tensor<8x64x64xf32>
  %5 = triad.mul %x, %x : tensor<8x64x64xf32>
  // CHECK: triad.scale %{{.*}} by 1.250000e-01 : tensor<8x64x64xf32>
  %6 = triad.scale %x by 0.125 : tensor<8x64x64xf32>
  // CHECK: triad.bias_add %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<64xf32>
  %7 = triad.bias_add %x, %b : tensor<8x64x64xf32>, tensor<64xf32>
  // CHECK: triad.gelu %{{.*}} : tensor<8x64x64xf32>
  %8 = triad.gelu %x : tensor<8x64x64xf32>
  // CHECK: triad.gelu %{{.*}} approximate = tanh : tensor<8x64x64xf32>
  %9 = triad.gelu %x approximate = tanh : tensor<8x64x64xf32>
  // CHECK: triad.fast_gelu %{{.*}} : tensor<8x64x64xf32>
  %10 = triad.fast_gelu %x : tensor<8x64x64xf32>
  // CHECK: triad.relu %{{.*}} : tensor<8x64x64xf32>
  %11 = triad.relu %x : tensor<8x64x64xf32>
  // CHECK: triad.silu %{{.*}} : tensor<8x64x64xf32>
  %12 = triad.silu %x : tensor<8x64x64xf32>
  // CHECK: triad.swiglu %{{.*}}, %{{.*}} : tensor<8x64x64xf32>
  %13 = triad.swiglu %x, %x : tensor<8x64x64xf32>
  // CHECK: triad.geglu %{{.*}}, %{{.*}} : tensor<8x64x64xf32>
  %14 = triad.geglu %x, %x : tensor<8x64x64xf32>
  // CHECK: triad.dropout %{{.*}} probability = 1.000000e-01 rng_stream = 7 : tensor<8x64x64xf32>
  %15 = triad.dropout %x probability = 0.1 rng_stream = 7 : tensor<8x64x64xf32>
  // CHECK: triad.dropout %{{.*}} probability = 1.000000e-01 rng_stream = 7 batch_split ["microbatch", "dp"] : tensor<8x64x64xf32>
  %16 = triad.dropout %x probability = 0.1 rng_stream = 7 batch_split ["microbatch", "dp"] : tensor<8x64x64xf32>
  // CHECK: triad.dropout %{{.*}} probability = 1.000000e-01 rng_stream = 7 batch_split ["dp"] seq_split ["tp"] : tensor<8x64x64xf32>
  %dropout_seq = triad.dropout %x probability = 0.1 rng_stream = 7 batch_split ["dp"] seq_split ["tp"] : tensor<8x64x64xf32>
  return
}

// CHECK-LABEL: func.func @norms_and_attention
func.func @norms_and_attention(%x: tensor<8x64x64xf32>, %kv: tensor<8x64x32xf32>,
                               %g: tensor<64xf32>, %plen: tensor<8xi32>,
                               %slopes: tensor<4xf32>) {
  // CHECK: triad.layer_norm %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<64xf32>, tensor<64xf32>
  %0 = triad.layer_norm %x, %g, %g : tensor<8x64x64xf32>, tensor<64xf32>, tensor<64xf32>
  // CHECK: triad.layer_norm %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f64} : tensor<8x64x64xf32>, tensor<64xf32>
  %1 = triad.layer_norm %x, %g {epsilon = 1.0e-3 : f64} : tensor<8x64x64xf32>, tensor<64xf32>
  // CHECK: triad.rms_norm %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<64xf32>
  %2 = triad.rms_norm %x, %g : tensor<8x64x64xf32>, tensor<64xf32>
  // CHECK: triad.attention %{{.*}}, %{{.*}}, %{{.*}} heads = 4 kv_heads = 2 mask = causal : tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>
  %3 = triad.attention %x, %kv, %kv heads = 4 kv_heads = 2 mask = causal : tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>
  // CHECK: triad.attention %{{.*}}, %{{.*}}, %{{.*}} prefix(%{{.*}} : tensor<8xi32>) heads = 4 kv_heads = 4 mask = prefix
  %4 = triad.attention %x, %x, %x prefix(%plen : tensor<8xi32>) heads = 4 kv_heads = 4 mask = prefix : tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>
  // CHECK: triad.attention %{{.*}}, %{{.*}}, %{{.*}} alibi(%{{.*}} : tensor<4xf32>) heads = 4 kv_heads = 4 mask = none {scale = 5.000000e-01 : f64}
  %5 = triad.attention %x, %x, %x alibi(%slopes : tensor<4xf32>) heads = 4 kv_heads = 4 mask = none {scale = 0.5 : f64} : tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>
  // CHECK: triad.rope %{{.*}} heads = 4 rotary_dim = 4 : tensor<8x64x64xf32>
  %6 = triad.rope %x heads = 4 rotary_dim = 4 : tensor<8x64x64xf32>
  // CHECK: triad.rope %{{.*}} heads = 4 rotary_dim = 16 base = 5.000000e+05 : tensor<8x64x64xf32>
  %7 = triad.rope %x heads = 4 rotary_dim = 16 base = 500000.0 : tensor<8x64x64xf32>
  return
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<8x64x64xf32>, %h: tensor<8x64x64xbf16>, %p: tensor<66x64xf32>) {
  // CHECK: triad.reshape %{{.*}} : tensor<8x64x64xf32> -> tensor<512x64xf32>
  %0 = triad.reshape %x : tensor<8x64x64xf32> -> tensor<512x64xf32>
  // CHECK: triad.transpose %{{.*}} [1, 0, 2] : tensor<8x64x64xf32> -> tensor<64x8x64xf32>
  %1 = triad.transpose %x [1, 0, 2] : tensor<8x64x64xf32> -> tensor<64x8x64xf32>
  // CHECK: triad.slice %{{.*}} offsets = [2, 0] sizes = [64, 64] : tensor<66x64xf32> -> tensor<64x64xf32>
  %2 = triad.slice %p offsets = [2, 0] sizes = [64, 64] : tensor<66x64xf32> -> tensor<64x64xf32>
  // CHECK: triad.concat %{{.*}}, %{{.*}} dim = 2 : tensor<8x64x64xf32>, tensor<8x64x64xf32> -> tensor<8x64x128xf32>
  %3 = triad.concat %x, %x dim = 2 : tensor<8x64x64xf32>, tensor<8x64x64xf32> -> tensor<8x64x128xf32>
  // CHECK: triad.broadcast %{{.*}} : tensor<64x64xf32> -> tensor<8x64x64xf32>
  %4 = triad.broadcast %2 : tensor<64x64xf32> -> tensor<8x64x64xf32>
  // CHECK: triad.cast %{{.*}} : tensor<8x64x64xbf16> -> tensor<8x64x64xf32>
  %5 = triad.cast %h : tensor<8x64x64xbf16> -> tensor<8x64x64xf32>
  // CHECK: triad.sum %{{.*}} dims = [2] : tensor<8x64x64xf32> -> tensor<8x64xf32>
  %6 = triad.sum %x dims = [2] : tensor<8x64x64xf32> -> tensor<8x64xf32>
  // CHECK: triad.mean %{{.*}} dims = [0, 1] : tensor<8x64x64xf32> -> tensor<1x1x64xf32>
  %7 = triad.mean %x dims = [0, 1] : tensor<8x64x64xf32> -> tensor<1x1x64xf32>
  // CHECK: triad.mean %{{.*}} dims = [0, 1, 2] : tensor<8x64x64xf32> -> tensor<f32>
  %8 = triad.mean %x dims = [0, 1, 2] : tensor<8x64x64xf32> -> tensor<f32>
  return
}

// CHECK-LABEL: func.func @gradients
func.func @gradients(%ids: tensor<8x64xi32>, %x: tensor<8x64x64xf32>, %kv: tensor<8x64x32xf32>,
                     %g: tensor<64xf32>, %plen: tensor<8xi32>, %slopes: tensor<4xf32>,
                     %logits: tensor<8x64x256xf32>, %dloss: tensor<f32>) {
  // CHECK: triad.embedding_grad %{{.*}}, %{{.*}} : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<256x64xf32>
  %0 = triad.embedding_grad %ids, %x : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<256x64xf32>
  // CHECK: triad.embedding_grad %{{.*}}, %{{.*}} of @wte vocab_split ["tp"] : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<128x64xf32>
  %piece = triad.embedding_grad %ids, %x of @wte vocab_split ["tp"] : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<128x64xf32>
  // CHECK: triad.activation_grad gelu_tanh %{{.*}}, %{{.*}} : tensor<8x64x64xf32>
  %1 = triad.activation_grad gelu_tanh %x, %x : tensor<8x64x64xf32>
  // CHECK: triad.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x64x64xf32>, tensor<64xf32>
  %2:2 = triad.layer_norm_grad %x, %g, %x : tensor<8x64x64xf32>, tensor<64xf32>
  // CHECK: triad.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f64} : tensor<8x64x64xf32>, tensor<64xf32>
  %3:2 = triad.rms_norm_grad %x, %g, %x {epsilon = 1.0e-3 : f64} : tensor<8x64x64xf32>, tensor<64xf32>
  // CHECK: triad.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} heads = 4 kv_heads = 2 mask = causal : tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32> -> tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>
  %4:3 = triad.attention_grad %x, %kv, %kv, %x heads = 4 kv_heads = 2 mask = causal : tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32> -> tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>
  // CHECK: triad.attention_grad %{{.*}}, %{{.*}}, %{{.*}} prefix(%{{.*}} : tensor<8xi32>) alibi(%{{.*}} : tensor<4xf32>), %{{.*}} heads = 4 kv_heads = 4 mask = prefix
  %5:3 = triad.attention_grad %x, %x, %x prefix(%plen : tensor<8xi32>) alibi(%slopes : tensor<4xf32>), %x heads = 4 kv_heads = 4 mask = prefix : tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32> -> tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>
  // CHECK: triad.rope_grad %{{.*}} heads = 4 rotary_dim = 8 : tensor<8x64x64xf32>
  %6 = triad.rope_grad %x heads = 4 rotary_dim = 8 : tensor<8x64x64xf32>
  // CHECK: triad.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<8x64x256xf32>, tensor<8x64xi32>
  %7 = triad.cross_entropy_grad %logits, %ids, %dloss : tensor<8x64x256xf32>, tensor<8x64xi32>
  // CHECK: triad.pad %{{.*}} low = [2, 0, 0] high = [0, 0, 1] : tensor<8x64x64xf32> -> tensor<10x64x65xf32>
  %8 = triad.pad %x low = [2, 0, 0] high = [0, 0, 1] : tensor<8x64x64xf32> -> tensor<10x64x65xf32>
  // CHECK: triad.broadcast %{{.*}} : tensor<8x1x64xf32> -> tensor<2x8x64x64xf32>
  %s = triad.sum %x dims = [1] : tensor<8x64x64xf32> -> tensor<8x1x64xf32>
  %9 = triad.broadcast %s : tensor<8x1x64xf32> -> tensor<2x8x64x64xf32>
  return
}

// CHECK: triad.state @opt.m : tensor<64x64xf32> init <zeros> of @wo
triad.state @opt.m : tensor<64x64xf32> init <zeros> of @wo
// CHECK: triad.state @opt.step : tensor<f32> init <zeros>
triad.state @opt.step : tensor<f32> init <zeros>

// CHECK-LABEL: func.func @optimizer
func.func @optimizer(%g: tensor<64x64xf32>) {
  // CHECK: %[[STEP:.*]] = triad.get_param @opt.step : tensor<f32>
  %step = triad.get_param @opt.step : tensor<f32>
  // CHECK: triad.lr_schedule %[[STEP]] peak = 1.000000e-03 floor = 1.000000e-04 warmup = 10 decay = 100 : tensor<f32>
  %lr = triad.lr_schedule %step peak = 1.0e-3 floor = 1.0e-4 warmup = 10 decay = 100 : tensor<f32>
  // CHECK: triad.lr_schedule %[[STEP]] peak = 1.000000e-03 floor = 0.000000e+00 warmup = 10 decay = -1 : tensor<f32>
  %lr_run = triad.lr_schedule %step peak = 1.0e-3 floor = 0.0 warmup = 10 decay = -1 : tensor<f32>
  // CHECK: triad.sum_squares %{{.*}} : tensor<64x64xf32>
  %ss = triad.sum_squares %g : tensor<64x64xf32>
  // CHECK: triad.sum_squares %{{.*}} limit = 1.637600e+04 : tensor<64x64xf32>
  %sl = triad.sum_squares %g limit = 16376.0 : tensor<64x64xf32>
  // CHECK: triad.clip_coefficient %{{.*}} max_norm = 1.000000e+00
  %coef, %norm = triad.clip_coefficient %ss max_norm = 1.0
  %p = triad.get_param @wo : tensor<64x64xf32>
  %m = triad.get_param @opt.m : tensor<64x64xf32>
  // CHECK: triad.adamw_update %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} beta1 = 9.000000e-01 beta2 = {{.*}} epsilon = 1.000000e-08 weight_decay = 1.000000e-01 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
  %p2, %m2, %v2 = triad.adamw_update %p, %g, %m, %m, %lr, %step, %coef beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1 : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
  // CHECK: triad.assign @wo, %{{.*}} : tensor<64x64xf32>
  triad.assign @wo, %p2 : tensor<64x64xf32>
  triad.assign @opt.m, %m2 : tensor<64x64xf32>
  return
}

// CHECK: triad.state @opt.scale : tensor<f32> init <constant, value = 1.024000e+03>
triad.state @opt.scale : tensor<f32> init <constant, value = 1024.0>

// CHECK-LABEL: func.func @loss_scaling
func.func @loss_scaling(%ss: tensor<f32>, %a: tensor<4xf16>, %b: tensor<4xf16>) {
  %scale = triad.get_param @opt.scale : tensor<f32>
  // CHECK: %[[SKIP:.*]], %{{.*}}, %{{.*}}, %{{.*}} = triad.loss_scale_update %{{.*}}, %{{.*}}, %{{.*}} growth_interval = 100 growth = 2.000000e+00 backoff = 5.000000e-01
  %skip, %scale2, %good2, %inv = triad.loss_scale_update %ss, %scale, %ss growth_interval = 100 growth = 2.0 backoff = 0.5
  // CHECK: triad.select %[[SKIP]], %{{.*}}, %{{.*}} : tensor<4xf16>
  %c = triad.select %skip, %a, %b : tensor<4xf16>
  return
}
