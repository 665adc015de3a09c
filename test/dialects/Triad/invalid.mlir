// Every verifier error of the triad dialect, one case per chunk.
// RUN: triad-opt %s -split-input-file -verify-diagnostics --allow-unregistered-dialect

// An unknown initialization kind.
// expected-error @+1 {{unknown init kind 'uniform' (expected normal, scaled_normal, zeros or ones)}}
triad.param @w : tensor<4xf32> init <uniform>

// -----

// An unknown field of an initialization.
// expected-error @+1 {{unknown init field 'mean' (expected std, value or layers)}}
triad.param @w : tensor<4xf32> init <normal, mean = 0.0>

// -----

// A normal initialization needs a positive std.
// expected-error @+1 {{init 'normal' needs a positive finite std, got 0}}
triad.param @w : tensor<4xf32> init <normal>

// -----

// Constants take no std.
// expected-error @+1 {{init 'zeros' takes no std}}
triad.param @w : tensor<4xf32> init <zeros, std = 0.1>

// -----

// The scaled normal needs the layer count.
// expected-error @+1 {{init 'scaled_normal' needs layers > 0, got 0}}
triad.param @w : tensor<4xf32> init <scaled_normal, std = 0.02>

// -----

// Only the scaled normal takes a layer count.
// expected-error @+1 {{init 'normal' takes no layers}}
triad.param @w : tensor<4xf32> init <normal, std = 0.02, layers = 4>

// -----

// Parameters have positive sizes.
// expected-error @+1 {{'triad.param' op parameter dim 1 has size 0; sizes must be positive}}
triad.param @w : tensor<4x0xf32> init <zeros>

// -----

// A padded parameter's unpadded shape has its rank and fits in it.
// expected-error @+1 {{'triad.param' op unpadded has 1 dimensions but the parameter has 2}}
triad.param @w : tensor<4x8xf32> unpadded [3] init <zeros>

// -----

// expected-error @+1 {{'triad.param' op unpadded dim 0 is 5; it must lie in [1, 4] (the padded size)}}
triad.param @w : tensor<4x8xf32> unpadded [5, 8] init <zeros>

// -----

// expected-error @+1 {{'triad.param' op unpadded dim 1 is 0; it must lie in [1, 8] (the padded size)}}
triad.param @w : tensor<4x8xf32> unpadded [4, 0] init <zeros>

// -----

// Parameters are floating-point tensors.
// expected-error @+1 {{'triad.param' op attribute 'type' failed to satisfy constraint}}
triad.param @w : tensor<4xi32> init <zeros>

// -----

// Parameters live at module level.
func.func @f() {
  // expected-error @+1 {{'triad.param' op expects parent op 'builtin.module'}}
  triad.param @w : tensor<4xf32> init <zeros>
  return
}

// -----

// A read of an undeclared parameter.
func.func @f() {
  // expected-error @+1 {{'triad.get_param' op refers to unknown parameter @missing}}
  %0 = triad.get_param @missing : tensor<4xf32>
  return
}

// -----

// A read with another type than the declaration.
triad.param @w : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{'triad.get_param' op result type 'tensor<8xf32>' does not match the declared type 'tensor<4xf32>' of parameter @w}}
  %0 = triad.get_param @w : tensor<8xf32>
  return
}

// -----

// The layer body binds one argument per input.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.layer' op body has 0 arguments but the layer has 1 inputs}}
  %0 = triad.layer transformer 0 (%x) : (tensor<4xf32>) -> tensor<4xf32> {
    %c = "test.value"() : () -> tensor<4xf32>
    triad.yield %c : tensor<4xf32>
  }
  return
}

// -----

// Body arguments have the types of the inputs.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.layer' op body argument 0 has type 'tensor<8xf32>' but input 0 has type 'tensor<4xf32>'}}
  %0 = triad.layer transformer 0 (%x) : (tensor<4xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    triad.yield %a : tensor<8xf32>
  }
  return
}

// -----

// The layer yields one value per result.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.layer' op yields 0 values but the layer has 1 results}}
  %0 = triad.layer transformer 0 (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    triad.yield
  }
  return
}

// -----

// Yielded values have the result types.
func.func @f(%x: tensor<4xf32>, %y: tensor<8xf32>) {
  // expected-error @+1 {{'triad.layer' op yielded value 0 has type 'tensor<4xf32>' but result 0 has type 'tensor<8xf32>'}}
  %0 = triad.layer transformer 0 (%x) : (tensor<4xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<4xf32>):
    triad.yield %a : tensor<4xf32>
  }
  return
}

// -----

// The layer body ends in triad.yield.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.layer' op body must end with 'triad.yield'}}
  %0 = triad.layer transformer 0 (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    "test.terminator"(%a) : (tensor<4xf32>) -> ()
  }
  return
}

// -----

// triad.yield only terminates layers.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.yield' op expects parent op 'triad.layer'}}
  triad.yield %x : tensor<4xf32>
}

// -----

// Embedding result: the id shape plus the hidden size.
func.func @f(%ids: tensor<8x64xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{'triad.embedding' op result type 'tensor<8x64x32xf32>' does not match the inferred type 'tensor<8x64x64xf32>'}}
  %0 = triad.embedding %ids, %t : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x32xf32>
  return
}

// -----

func.func @f(%ids: tensor<8x64xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{'triad.embedding' op vocab_split lists no mesh axes}}
  %0 = triad.embedding %ids, %t vocab_split [] : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
  return
}

// -----

func.func @f(%ids: tensor<8x64xi32>, %t: tensor<256x64xf32>) {
  // expected-error @+1 {{'triad.embedding' op vocab_split lists mesh axis 'tp' twice}}
  %0 = triad.embedding %ids, %t vocab_split ["tp", "tp"] : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
  return
}

// -----

// Embedding tables are matrices.
func.func @f(%ids: tensor<8x64xi32>, %t: tensor<256xf32>) {
  // expected-error @+1 {{'triad.embedding' op operand #1 must be 2D statically shaped tensor}}
  %0 = triad.embedding %ids, %t : tensor<8x64xi32>, tensor<256xf32> -> tensor<8x64x64xf32>
  return
}

// -----

// Matmul contracting dimensions agree.
func.func @f(%a: tensor<8x768xf32>, %b: tensor<512x64xf32>) {
  // expected-error @+1 {{'triad.matmul' op contracting dimension mismatch: lhs dim 1 is 768 but rhs dim 0 is 512}}
  %0 = triad.matmul %a, %b : tensor<8x768xf32>, tensor<512x64xf32> -> tensor<8x64xf32>
  return
}

// -----

// Transposes change which dimension contracts.
func.func @f(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  // expected-error @+1 {{'triad.matmul' op contracting dimension mismatch: lhs dim 0 is 8 but rhs dim 1 is 4}}
  %0 = triad.matmul %a, %b transpose_lhs transpose_rhs : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<16x16xf32>
  return
}

// -----

// Matmul operands are at least matrices.
func.func @f(%a: tensor<8xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{'triad.matmul' op lhs must have rank >= 2, got rank 1}}
  %0 = triad.matmul %a, %b : tensor<8xf32>, tensor<8x4xf32> -> tensor<4xf32>
  return
}

// -----

// The rhs is a matrix or has the rank of the lhs.
func.func @f(%a: tensor<2x4x8x16xf32>, %b: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'triad.matmul' op rhs must have rank 2 or the rank of lhs (4), got rank 3}}
  %0 = triad.matmul %a, %b : tensor<2x4x8x16xf32>, tensor<4x16x8xf32> -> tensor<2x4x8x8xf32>
  return
}

// -----

// Matmul operands share an element type.
func.func @f(%a: tensor<8x16xf32>, %b: tensor<16x8xbf16>) {
  // expected-error @+1 {{'triad.matmul' op element types differ: lhs has 'f32' but rhs has 'bf16'}}
  %0 = triad.matmul %a, %b : tensor<8x16xf32>, tensor<16x8xbf16> -> tensor<8x8xf32>
  return
}

// -----

// Batched matmul operands share their batch dimensions.
func.func @f(%a: tensor<4x8x16xf32>, %b: tensor<2x16x8xf32>) {
  // expected-error @+1 {{'triad.matmul' op batch dimension mismatch: lhs dim 0 is 4 but rhs dim 0 is 2}}
  %0 = triad.matmul %a, %b : tensor<4x8x16xf32>, tensor<2x16x8xf32> -> tensor<4x8x8xf32>
  return
}

// -----

// The matmul result has shape [B..., M, N].
func.func @f(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  // expected-error @+1 {{'triad.matmul' op result type 'tensor<8x8xf32>' does not match the inferred type 'tensor<8x4xf32>'}}
  %0 = triad.matmul %a, %b : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x8xf32>
  return
}

// -----

// Only the rhs of an add broadcasts.
func.func @f(%a: tensor<64xf32>, %b: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.add' op rhs has rank 2, more than lhs (1); only the rhs broadcasts}}
  %0 = triad.add %a, %b : tensor<64xf32>, tensor<8x64xf32>
  return
}

// -----

// The rhs of an add matches the trailing dimensions of the lhs.
func.func @f(%a: tensor<8x64x64xf32>, %b: tensor<32x64xf32>) {
  // expected-error @+1 {{'triad.add' op rhs dim 0 is 32 but lhs dim 1 is 64}}
  %0 = triad.add %a, %b : tensor<8x64x64xf32>, tensor<32x64xf32>
  return
}

// -----

// Elementwise multiplication takes one type.
func.func @f(%a: tensor<8x64xf32>, %b: tensor<8x32xf32>) {
  // expected-error @+1 {{'triad.mul' op requires the same type for all operands and results}}
  %0 = "triad.mul"(%a, %b) : (tensor<8x64xf32>, tensor<8x32xf32>) -> tensor<8x64xf32>
  return
}

// -----

// Bias size equals the last dimension.
func.func @f(%x: tensor<8x64xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'triad.bias_add' op bias dim 0 is 32 but x dim 1 is 64}}
  %0 = triad.bias_add %x, %b : tensor<8x64xf32>, tensor<32xf32>
  return
}

// -----

// A bias needs a dimension to add along.
func.func @f(%x: tensor<f32>, %b: tensor<1xf32>) {
  // expected-error @+1 {{'triad.bias_add' op x must have rank >= 1}}
  %0 = triad.bias_add %x, %b : tensor<f32>, tensor<1xf32>
  return
}

// -----

// Layer norm gamma covers the last dimension.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<32xf32>) {
  // expected-error @+1 {{'triad.layer_norm' op gamma dim 0 is 32 but x dim 1 is 64}}
  %0 = triad.layer_norm %x, %g : tensor<8x64xf32>, tensor<32xf32>
  return
}

// -----

// Layer norm beta covers the last dimension.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'triad.layer_norm' op beta dim 0 is 16 but x dim 1 is 64}}
  %0 = triad.layer_norm %x, %g, %b : tensor<8x64xf32>, tensor<64xf32>, tensor<16xf32>
  return
}

// -----

// Norm weights have the element type of x.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xbf16>) {
  // expected-error @+1 {{'triad.layer_norm' op gamma element type 'bf16' differs from x element type 'f32'}}
  %0 = triad.layer_norm %x, %g : tensor<8x64xf32>, tensor<64xbf16>
  return
}

// -----

// The norm epsilon is positive.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'triad.layer_norm' op epsilon must be positive and finite, got 0}}
  %0 = triad.layer_norm %x, %g {epsilon = 0.0 : f64} : tensor<8x64xf32>, tensor<64xf32>
  return
}

// -----

// RMS norm gamma covers the last dimension.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<32xf32>) {
  // expected-error @+1 {{'triad.rms_norm' op gamma dim 0 is 32 but x dim 1 is 64}}
  %0 = triad.rms_norm %x, %g : tensor<8x64xf32>, tensor<32xf32>
  return
}

// -----

// Attention operands are [batch, seq, heads * head_dim].
func.func @f(%q: tensor<64x64xf32>) {
  // expected-error @+1 {{'triad.attention' op q must have rank 3 [batch, seq, heads * head_dim], got rank 2}}
  %0 = triad.attention %q, %q, %q heads = 4 kv_heads = 4 mask = causal : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
  return
}

// -----

// q, k and v share an element type.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x64xbf16>) {
  // expected-error @+1 {{'triad.attention' op q, k and v must have one element type}}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xbf16>, tensor<2x8x64xbf16>
  return
}

// -----

// Heads divide the query width.
func.func @f(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op q dim 2 is 64, not divisible by heads = 3}}
  %0 = triad.attention %q, %q, %q heads = 3 kv_heads = 3 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// Key/value heads divide the heads.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x48xf32>) {
  // expected-error @+1 {{'triad.attention' op heads = 4 is not divisible by kv_heads = 3}}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 3 mask = causal : tensor<2x8x64xf32>, tensor<2x8x48xf32>, tensor<2x8x48xf32>
  return
}

// -----

// Keys have the batch of the queries.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<4x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op k dim 0 is 4 but q dim 0 is 2}}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<4x8x64xf32>, tensor<4x8x64xf32>
  return
}

// -----

// Keys are kv_heads heads wide.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op k dim 2 is 64 but kv_heads * head_dim is 2 * 16 = 32}}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 2 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// Values have the sequence of the keys.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x16x64xf32>, %v: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op v dim 1 is 8 but k dim 1 is 16}}
  %0 = triad.attention %q, %k, %v heads = 4 kv_heads = 4 mask = none : tensor<2x8x64xf32>, tensor<2x16x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// Masked attention is self-attention: keys and queries have one length.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x16x64xf32>) {
  // expected-error @+1 {{'triad.attention' op mask 'causal' needs k dim 1 (16) equal to q dim 1 (8)}}
  %0 = triad.attention %q, %k, %k heads = 4 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
  return
}

// -----

// The prefix mask needs the prefix lengths.
func.func @f(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op prefix_lengths must be given exactly when mask is 'prefix'}}
  %0 = triad.attention %q, %q, %q heads = 4 kv_heads = 4 mask = prefix : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// Prefix lengths only go with the prefix mask.
func.func @f(%q: tensor<2x8x64xf32>, %p: tensor<2xi32>) {
  // expected-error @+1 {{'triad.attention' op prefix_lengths must be given exactly when mask is 'prefix'}}
  %0 = triad.attention %q, %q, %q prefix(%p : tensor<2xi32>) heads = 4 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// One prefix length per sample.
func.func @f(%q: tensor<2x8x64xf32>, %p: tensor<3xi32>) {
  // expected-error @+1 {{'triad.attention' op prefix_lengths dim 0 is 3 but q dim 0 (batch) is 2}}
  %0 = triad.attention %q, %q, %q prefix(%p : tensor<3xi32>) heads = 4 kv_heads = 4 mask = prefix : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// One ALiBi slope per head.
func.func @f(%q: tensor<2x8x64xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'triad.attention' op alibi_slopes dim 0 is 8 but heads is 4}}
  %0 = triad.attention %q, %q, %q alibi(%s : tensor<8xf32>) heads = 4 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// The score scale is positive.
func.func @f(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op scale must be positive and finite, got -1}}
  %0 = triad.attention %q, %q, %q heads = 4 kv_heads = 4 mask = causal {scale = -1.0 : f64} : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// The head count is positive.
func.func @f(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention' op attribute 'heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = triad.attention %q, %q, %q heads = 0 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// RoPE applies to [batch, seq, heads * head_dim].
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.rope' op x must have rank 3 [batch, seq, heads * head_dim], got rank 2}}
  %0 = triad.rope %x heads = 4 rotary_dim = 4 : tensor<8x64xf32>
  return
}

// -----

// RoPE heads divide the width.
func.func @f(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.rope' op x dim 2 is 64, not divisible by heads = 5}}
  %0 = triad.rope %x heads = 5 rotary_dim = 4 : tensor<2x8x64xf32>
  return
}

// -----

// RoPE rotates pairs within one head.
func.func @f(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.rope' op rotary_dim = 5 must be even and at most head_dim = 16}}
  %0 = triad.rope %x heads = 4 rotary_dim = 5 : tensor<2x8x64xf32>
  return
}

// -----

// The RoPE base exceeds 1.
func.func @f(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.rope' op base must be finite and greater than 1, got 1}}
  %0 = triad.rope %x heads = 4 rotary_dim = 4 base = 1.0 : tensor<2x8x64xf32>
  return
}

// -----

// Reshapes keep the element count.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.reshape' op operand has 512 elements but the result has 256}}
  %0 = triad.reshape %x : tensor<8x64xf32> -> tensor<4x64xf32>
  return
}

// -----

// A permutation names every dimension.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'triad.transpose' op permutation has 2 entries but the operand has rank 3}}
  %0 = triad.transpose %x [1, 0] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  return
}

// -----

// Permutation entries are dimensions.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'triad.transpose' op permutation entry 2 is 3, outside [0, 3)}}
  %0 = triad.transpose %x [1, 0, 3] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  return
}

// -----

// Permutation entries are distinct.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'triad.transpose' op permutation entry 2 repeats dimension 1}}
  %0 = triad.transpose %x [1, 0, 1] : tensor<2x3x4xf32> -> tensor<3x2x3xf32>
  return
}

// -----

// The transpose result permutes the shape.
func.func @f(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'triad.transpose' op result type 'tensor<2x3x4xf32>' does not match the inferred type 'tensor<3x2x4xf32>'}}
  %0 = triad.transpose %x [1, 0, 2] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  return
}

// -----

// Slices give one offset and size per dimension.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.slice' op offsets and sizes need one entry per dimension (2), got 1 and 2}}
  %0 = triad.slice %x offsets = [0] sizes = [8, 64] : tensor<8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

// Slices stay inside the operand.
func.func @f(%x: tensor<66x64xf32>) {
  // expected-error @+1 {{'triad.slice' op slice of dim 0 at offset 4 with size 64 is outside [0, 66)}}
  %0 = triad.slice %x offsets = [4, 0] sizes = [64, 64] : tensor<66x64xf32> -> tensor<64x64xf32>
  return
}

// -----

// Slice sizes are positive.
func.func @f(%x: tensor<66x64xf32>) {
  // expected-error @+1 {{'triad.slice' op slice of dim 1 has size 0; sizes must be positive}}
  %0 = triad.slice %x offsets = [0, 0] sizes = [64, 0] : tensor<66x64xf32> -> tensor<64x0xf32>
  return
}

// -----

// The slice result has the slice's sizes.
func.func @f(%x: tensor<66x64xf32>) {
  // expected-error @+1 {{'triad.slice' op result type 'tensor<64x32xf32>' does not match the inferred type 'tensor<64x64xf32>'}}
  %0 = triad.slice %x offsets = [2, 0] sizes = [64, 64] : tensor<66x64xf32> -> tensor<64x32xf32>
  return
}

// -----

// A concatenation needs inputs.
func.func @f() {
  // expected-error @+1 {{'triad.concat' op needs at least one input}}
  %0 = "triad.concat"() {dim = 0 : i64} : () -> tensor<4xf32>
  return
}

// -----

// The concatenated dimension exists.
func.func @f(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'triad.concat' op dim = 2 is outside the rank 2}}
  %0 = triad.concat %a, %a dim = 2 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  return
}

// -----

// Concatenated inputs share an element type.
func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xbf16>) {
  // expected-error @+1 {{'triad.concat' op input 1 has element type 'bf16' but input 0 has 'f32'}}
  %0 = triad.concat %a, %b dim = 0 : tensor<4x8xf32>, tensor<4x8xbf16> -> tensor<8x8xf32>
  return
}

// -----

// Concatenated inputs share a rank.
func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8x1xf32>) {
  // expected-error @+1 {{'triad.concat' op input 1 has rank 3 but input 0 has rank 2}}
  %0 = triad.concat %a, %b dim = 0 : tensor<4x8xf32>, tensor<4x8x1xf32> -> tensor<8x8xf32>
  return
}

// -----

// Concatenated inputs agree off the joined dimension.
func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x6xf32>) {
  // expected-error @+1 {{'triad.concat' op input 1 dim 1 is 6 but input 0 dim 1 is 8}}
  %0 = triad.concat %a, %b dim = 0 : tensor<4x8xf32>, tensor<4x6xf32> -> tensor<8x8xf32>
  return
}

// -----

// The concatenation sums the joined dimension.
func.func @f(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'triad.concat' op result type 'tensor<4x8xf32>' does not match the inferred type 'tensor<8x8xf32>'}}
  %0 = triad.concat %a, %a dim = 0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

// A broadcast only adds leading dimensions.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.broadcast' op result rank 1 is below the operand rank 2}}
  %0 = triad.broadcast %x : tensor<8x64xf32> -> tensor<64xf32>
  return
}

// -----

// A broadcast keeps the operand's dimensions at the end.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.broadcast' op result dim 2 is 32 but operand dim 1 is 64 (it must be equal, or 1 in the operand)}}
  %0 = triad.broadcast %x : tensor<8x64xf32> -> tensor<2x8x32xf32>
  return
}

// -----

// A cast keeps the shape.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.cast' op requires the same shape for all operands and results}}
  %0 = triad.cast %x : tensor<8x64xf32> -> tensor<8x32xbf16>
  return
}

// -----

// Dropout probabilities lie in [0, 1).
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.dropout' op probability must be in [0, 1), got 1}}
  %0 = triad.dropout %x probability = 1.0 rng_stream = 0 : tensor<8x64xf32>
  return
}

// -----

// A dropout on a piece of the batch names its axes, each once, and has a
// batch dimension.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.dropout' op batch_split lists no mesh axes}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 batch_split [] : tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.dropout' op batch_split lists mesh axis 'dp' twice}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 batch_split ["dp", "dp"] : tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<f32>) {
  // expected-error @+1 {{'triad.dropout' op batch_split needs a batch dimension (x is a scalar)}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 batch_split ["dp"] : tensor<f32>
  return
}

// -----

// A dropout on a piece of the sequence names its axes, each once and none
// that splits the batch, and has a [batch, sequence, ...] operand.
func.func @f(%x: tensor<8x64x16xf32>) {
  // expected-error @+1 {{'triad.dropout' op seq_split lists no mesh axes}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 seq_split [] : tensor<8x64x16xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64x16xf32>) {
  // expected-error @+1 {{'triad.dropout' op seq_split lists mesh axis 'tp' twice}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 seq_split ["tp", "tp"] : tensor<8x64x16xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64x16xf32>) {
  // expected-error @+1 {{'triad.dropout' op seq_split lists mesh axis 'dp', which splits the batch}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 batch_split ["dp"] seq_split ["dp"] : tensor<8x64x16xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.dropout' op seq_split needs a [batch, sequence, ...] tensor of rank 3 or more, got rank 2}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 seq_split ["tp"] : tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<8x64x16xf32>) {
  // expected-error @+1 {{'triad.dropout' op seq_split cannot list the microbatch axis (it splits the batch)}}
  %0 = triad.dropout %x probability = 0.1 rng_stream = 0 seq_split ["microbatch"] : tensor<8x64x16xf32>
  return
}

// -----

// Cross-entropy logits have a vocab dimension.
func.func @f(%l: tensor<f32>, %y: tensor<i32>) {
  // expected-error @+1 {{'triad.cross_entropy' op logits must have rank >= 1 [..., vocab]}}
  %0 = triad.cross_entropy %l, %y : tensor<f32>, tensor<i32> -> tensor<f32>
  return
}

// -----

// The local form of a vocab-parallel cross entropy has both its lse and
// its vocab_split.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %lse: tensor<8x64x1xf32>) {
  // expected-error @+1 {{'triad.cross_entropy' op lse and vocab_split come together (the local form of a vocab-parallel cross entropy)}}
  %0 = "triad.cross_entropy"(%l, %y, %lse) : (tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32>) -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{'triad.cross_entropy_grad' op lse and vocab_split come together (the local form of a vocab-parallel cross entropy)}}
  %0 = "triad.cross_entropy_grad"(%l, %y, %d) {vocab_axes = ["tp"]} : (tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<f32>) -> tensor<8x64x256xf32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %lse: tensor<8x64x1xf32>) {
  // expected-error @+1 {{'triad.cross_entropy' op vocab_split lists no mesh axes}}
  %0 = triad.cross_entropy %l, %y lse %lse vocab_split [] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %lse: tensor<8x64x1xf32>) {
  // expected-error @+1 {{'triad.cross_entropy' op vocab_split lists mesh axis 'tp' twice}}
  %0 = triad.cross_entropy %l, %y lse %lse vocab_split ["tp", "tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
  return
}

// -----

// One log-sum-exp per token, with the logits' element type.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %lse: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.cross_entropy' op lse must be 'tensor<8x64x1xf32>' (the labels' shape and 1), got 'tensor<8x64xf32>'}}
  %0 = triad.cross_entropy %l, %y lse %lse vocab_split ["tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64xf32> -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %d: tensor<f32>, %lse: tensor<8x64x1xbf16>) {
  // expected-error @+1 {{'triad.cross_entropy_grad' op lse must be 'tensor<8x64x1xf32>' (the labels' shape and 1), got 'tensor<8x64x1xbf16>'}}
  %0 = triad.cross_entropy_grad %l, %y, %d lse %lse vocab_split ["tp"] : tensor<8x64x256xf32>, tensor<8x64xi32>, tensor<8x64x1xbf16>
  return
}

// -----

// logsumexp keeps the reduced last dimension with size 1.
func.func @f(%x: tensor<8x64x256xf32>) {
  // expected-error @+1 {{'triad.logsumexp' op result must have x's shape with a last dimension of 1, 'tensor<8x64x1xf32>', got 'tensor<8x64xf32>'}}
  %0 = triad.logsumexp %x : tensor<8x64x256xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @f(%x: tensor<f32>) {
  // expected-error @+1 {{'triad.logsumexp' op x must have rank >= 1}}
  %0 = triad.logsumexp %x : tensor<f32> -> tensor<f32>
  return
}

// -----

// Labels drop the vocab dimension of the logits.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64x256xi32>) {
  // expected-error @+1 {{'triad.cross_entropy' op labels have rank 3 but logits have rank 3; labels must have the shape of logits without the vocab dimension}}
  %0 = triad.cross_entropy %l, %y : tensor<8x64x256xf32>, tensor<8x64x256xi32> -> tensor<f32>
  return
}

// -----

// One label per token.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x32xi32>) {
  // expected-error @+1 {{'triad.cross_entropy' op labels dim 1 is 32 but logits dim 1 is 64}}
  %0 = triad.cross_entropy %l, %y : tensor<8x64x256xf32>, tensor<8x32xi32> -> tensor<f32>
  return
}

// -----

// The loss is an f32 scalar.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>) {
  // expected-error @+1 {{'triad.cross_entropy' op result #0 must be 0D statically shaped tensor of 32-bit float values}}
  %0 = triad.cross_entropy %l, %y : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<1xf32>
  return
}

// -----

// Reductions name at least one dimension.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.sum' op dims must not be empty}}
  %0 = triad.sum %x dims = [] : tensor<8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

// Reduced dimensions exist.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.mean' op dims entry 0 is 2, outside [0, 2)}}
  %0 = triad.mean %x dims = [2] : tensor<8x64xf32> -> tensor<8xf32>
  return
}

// -----

// Reduced dimensions are distinct.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.sum' op dims entry 1 repeats dimension 1}}
  %0 = triad.sum %x dims = [1, 1] : tensor<8x64xf32> -> tensor<8xf32>
  return
}

// -----

// The reduction result drops or keeps (as 1) the reduced dimensions.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.sum' op result type 'tensor<64xf32>' does not match the inferred type 'tensor<8xf32>'}}
  %0 = triad.sum %x dims = [1] : tensor<8x64xf32> -> tensor<64xf32>
  return
}

// -----

// Model tensors have static shapes.
func.func @f(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'triad.relu' op operand #0 must be statically shaped tensor}}
  %0 = triad.relu %x : tensor<?x64xf32>
  return
}

// -----

// Pads give one low and high entry per dimension.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.pad' op low and high need one entry per dimension (2), got 1 and 2}}
  %0 = triad.pad %x low = [1] high = [0, 0] : tensor<8x64xf32> -> tensor<9x64xf32>
  return
}

// -----

// Pads are not negative.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.pad' op padding of dim 1 is negative}}
  %0 = triad.pad %x low = [0, -1] high = [0, 0] : tensor<8x64xf32> -> tensor<8x63xf32>
  return
}

// -----

// The padded shape adds the padding.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.pad' op result type 'tensor<8x64xf32>' does not match the inferred type 'tensor<10x64xf32>'}}
  %0 = triad.pad %x low = [2, 0] high = [0, 0] : tensor<8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

// The embedding gradient takes dy of shape ids + [hidden].
func.func @f(%ids: tensor<8x64xi32>, %dy: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.embedding_grad' op dy has rank 2 but ids have rank 2; dy must have the shape of ids plus the hidden dimension}}
  %0 = triad.embedding_grad %ids, %dy : tensor<8x64xi32>, tensor<8x64xf32> -> tensor<256x64xf32>
  return
}

// -----

// dy follows the ids.
func.func @f(%ids: tensor<8x64xi32>, %dy: tensor<8x32x64xf32>) {
  // expected-error @+1 {{'triad.embedding_grad' op dy dim 1 is 32 but ids dim 1 is 64}}
  %0 = triad.embedding_grad %ids, %dy : tensor<8x64xi32>, tensor<8x32x64xf32> -> tensor<256x64xf32>
  return
}

// -----

// The table gradient has the hidden size of dy.
func.func @f(%ids: tensor<8x64xi32>, %dy: tensor<8x64x64xf32>) {
  // expected-error @+1 {{'triad.embedding_grad' op result dim 1 is 32 but dy's hidden dimension is 64}}
  %0 = triad.embedding_grad %ids, %dy : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<256x32xf32>
  return
}

// -----

// The table gradient has the element type of dy.
func.func @f(%ids: tensor<8x64xi32>, %dy: tensor<8x64x64xf32>) {
  // expected-error @+1 {{'triad.embedding_grad' op result element type 'bf16' differs from dy element type 'f32'}}
  %0 = triad.embedding_grad %ids, %dy : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<256x64xbf16>
  return
}

// -----

// A vocab-parallel piece of the table gradient names the axes it splits.
func.func @f(%ids: tensor<8x64xi32>, %dy: tensor<8x64x64xf32>) {
  // expected-error @+1 {{'triad.embedding_grad' op vocab_split lists mesh axis 'tp' twice}}
  %0 = triad.embedding_grad %ids, %dy vocab_split ["tp", "tp"] : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<128x64xf32>
  return
}

// -----

// The layer norm gradient checks gamma like the layer norm.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<32xf32>) {
  // expected-error @+1 {{'triad.layer_norm_grad' op gamma dim 0 is 32 but x dim 1 is 64}}
  %0:2 = triad.layer_norm_grad %x, %g, %x : tensor<8x64xf32>, tensor<32xf32>
  return
}

// -----

// The RMS norm gradient checks its epsilon.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'triad.rms_norm_grad' op epsilon must be positive and finite, got -1}}
  %0:2 = triad.rms_norm_grad %x, %g, %x {epsilon = -1.0 : f64} : tensor<8x64xf32>, tensor<64xf32>
  return
}

// -----

// The attention gradient checks its operands like the attention.
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention_grad' op k dim 2 is 64 but kv_heads * head_dim is 2 * 16 = 32}}
  %0:3 = triad.attention_grad %q, %k, %k, %q heads = 4 kv_heads = 2 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32> -> tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  return
}

// -----

// The RoPE gradient checks its attributes like RoPE.
func.func @f(%x: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.rope_grad' op rotary_dim = 18 must be even and at most head_dim = 16}}
  %0 = triad.rope_grad %x heads = 4 rotary_dim = 18 : tensor<2x8x64xf32>
  return
}

// -----

// The cross-entropy gradient checks labels like the cross-entropy.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x32xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{'triad.cross_entropy_grad' op labels dim 1 is 32 but logits dim 1 is 64}}
  %0 = triad.cross_entropy_grad %l, %y, %d : tensor<8x64x256xf32>, tensor<8x32xi32>
  return
}

// -----

// Attention gradients have the types of q, k and v.
func.func @f(%q: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'triad.attention_grad' op result types must be the types of q, k and v}}
  %0:3 = triad.attention_grad %q, %q, %q, %q heads = 4 kv_heads = 4 mask = causal : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32> -> tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>
  return
}

// -----

// An init field is given once.
// expected-error @+1 {{init field 'std' repeats}}
triad.param @w : tensor<4xf32> init <normal, std = 0.1, std = 0.2>

// -----

// Parameter names are not empty.
// expected-error @+1 {{'triad.param' op parameter name must not be empty}}
triad.param @"" : tensor<4xf32> init <zeros>

// -----

// Parameter element counts fit in int64.
// expected-error @+1 {{'triad.param' op parameter has more elements than int64 can count}}
triad.param @w : tensor<4294967296x4294967296xf32> init <zeros>

// -----

// Layers are parts of a function.
// expected-error @+1 {{'triad.layer' op expects parent op 'func.func'}}
"triad.layer"() ({
  "triad.yield"() : () -> ()
}) {kind = 1 : i32, index = 0 : i64} : () -> ()

// -----

// A function holds each layer once.
func.func @f(%x: tensor<4xf32>) {
  %0 = triad.layer transformer 0 (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    triad.yield %a : tensor<4xf32>
  }
  // expected-error @+1 {{'triad.layer' op duplicates transformer layer 0 of this function}}
  %1 = triad.layer transformer 0 (%0) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    triad.yield %a : tensor<4xf32>
  }
  return
}

// -----

// Scale factors are finite.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.scale' op factor must be finite, got INF}}
  %0 = triad.scale %x by 0x7FF0000000000000 : tensor<4xf32>
  return
}

// -----

// Norms need a dimension to normalize.
func.func @f(%x: tensor<f32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{'triad.layer_norm' op x must have rank >= 1}}
  %0 = triad.layer_norm %x, %g : tensor<f32>, tensor<1xf32>
  return
}

// -----

// The RMS norm epsilon is positive.
func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xf32>) {
  // expected-error @+1 {{'triad.rms_norm' op epsilon must be positive and finite, got 0}}
  %0 = triad.rms_norm %x, %g {epsilon = 0.0 : f64} : tensor<8x64xf32>, tensor<64xf32>
  return
}

// -----

// Reshapes of uncountable tensors are rejected.
func.func @f(%x: tensor<4611686018427387904x4xf32>) {
  // expected-error @+1 {{'triad.reshape' op element count overflows int64}}
  %0 = triad.reshape %x : tensor<4611686018427387904x4xf32> -> tensor<1xf32>
  return
}

// -----

// Concatenated sizes fit in int64.
func.func @f(%x: tensor<4611686018427387904xf32>) {
  // expected-error @+1 {{'triad.concat' op concatenated dim 0 overflows int64}}
  %0 = triad.concat %x, %x, %x dim = 0 : tensor<4611686018427387904xf32>, tensor<4611686018427387904xf32>, tensor<4611686018427387904xf32> -> tensor<1xf32>
  return
}

// -----

// A mean's result drops or keeps the reduced dimensions.
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'triad.mean' op result type 'tensor<8x1x1xf32>' does not match the inferred type 'tensor<8xf32>'}}
  %0 = triad.mean %x dims = [1] : tensor<8x64xf32> -> tensor<8x1x1xf32>
  return
}

// -----

// Assignments write declared symbols.
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.assign' op refers to unknown parameter @missing}}
  triad.assign @missing, %x : tensor<4xf32>
  return
}

// -----

// Assignments keep the declared type.
triad.state @s : tensor<4xf32> init <zeros>
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{'triad.assign' op value type 'tensor<8xf32>' does not match the declared type 'tensor<4xf32>' of @s}}
  triad.assign @s, %x : tensor<8xf32>
  return
}

// -----

// States can be read like parameters, with their declared type.
triad.state @s : tensor<4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{'triad.get_param' op result type 'tensor<3xf32>' does not match the declared type 'tensor<4xf32>' of parameter @s (nor is it a piece of it)}}
  %0 = triad.get_param @s : tensor<3xf32>
  return
}

// -----

// A padded piece has ceil(size / n) elements for some n: 11 of 32 (n = 3)
// is one, 12 of 32 is none.
triad.state @p : tensor<32xf32> init <zeros>
func.func @f() {
  %0 = triad.get_param @p : tensor<11xf32>
  // expected-error @+1 {{'triad.get_param' op result type 'tensor<12xf32>' does not match the declared type 'tensor<32xf32>' of parameter @p (nor is it a piece of it)}}
  %1 = triad.get_param @p : tensor<12xf32>
  return
}

// -----

// The peak learning rate is positive.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.lr_schedule' op peak must be positive and finite, got 0}}
  %0 = triad.lr_schedule %s peak = 0.0 floor = 0.0 warmup = 0 decay = 0 : tensor<f32>
  return
}

// -----

// The floor is at most the peak.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.lr_schedule' op floor must be in [0, peak], got 2}}
  %0 = triad.lr_schedule %s peak = 1.0 floor = 2.0 warmup = 0 decay = 0 : tensor<f32>
  return
}

// -----

// The decay ends after the warmup.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.lr_schedule' op decay (5) must be 0 (no decay) or end no earlier than the warmup (10)}}
  %0 = triad.lr_schedule %s peak = 1.0 floor = 0.0 warmup = 10 decay = 5 : tensor<f32>
  return
}

// -----

// A sum of squares' limit is positive.
func.func @f(%g: tensor<4xf32>) {
  // expected-error @+1 {{'triad.sum_squares' op limit must be positive, got 0}}
  %0 = triad.sum_squares %g limit = 0.0 : tensor<4xf32>
  return
}

// -----

// A decay is -1 (the run's length), 0 (none) or a step.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.lr_schedule' op decay must be -1 (the run's length), 0 (no decay) or a step, got -2}}
  %0 = triad.lr_schedule %s peak = 1.0 floor = 0.0 warmup = 0 decay = -2 : tensor<f32>
  return
}

// -----

// The clipping threshold is not negative.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.clip_coefficient' op max_norm must be finite and not negative, got -1}}
  %0:2 = triad.clip_coefficient %s max_norm = -1.0
  return
}

// -----

// AdamW moments are f32.
func.func @f(%p: tensor<4xbf16>, %s: tensor<f32>) {
  // expected-error @+1 {{'triad.adamw_update' op moments must be f32, got 'bf16'}}
  %0:3 = triad.adamw_update %p, %p, %p, %p, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.0 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>
  return
}

// -----

// AdamW betas lie in [0, 1).
func.func @f(%p: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'triad.adamw_update' op beta2 must be in [0, 1), got 1}}
  %0:3 = triad.adamw_update %p, %p, %p, %p, %s, %s, %s beta1 = 0.9 beta2 = 1.0 epsilon = 1.0e-8 weight_decay = 0.0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// AdamW epsilon is positive.
func.func @f(%p: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'triad.adamw_update' op epsilon must be positive, got 0}}
  %0:3 = triad.adamw_update %p, %p, %p, %p, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 0.0 weight_decay = 0.0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// Weight decay is not negative.
func.func @f(%p: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'triad.adamw_update' op weight_decay must be finite and not negative, got -1.000000e-01}}
  %0:3 = triad.adamw_update %p, %p, %p, %p, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = -0.1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

// The gradient has the parameter's shape.
func.func @f(%p: tensor<4xf32>, %g: tensor<8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'triad.adamw_update' op failed to verify that all of {param, grad, m} have same shape}}
  %0:3 = triad.adamw_update %p, %g, %p, %p, %s, %s, %s beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.0 : tensor<4xf32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

// Only constants take a value.
// expected-error @+1 {{init 'normal' takes no field 'value'}}
triad.param @w : tensor<4xf32> init <normal, value = 0.1>

// -----

// Constants take a value, not a std.
// expected-error @+1 {{init 'constant' takes no field 'std'}}
triad.state @s : tensor<f32> init <constant, std = 0.1>

// -----

// Constant values are finite.
// expected-error @+1 {{init 'constant' needs a finite value, got INF}}
triad.state @s : tensor<f32> init <constant, value = 0x7FF0000000000000>

// -----

// Loss scales grow.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.loss_scale_update' op growth must be at least 1, got 5.000000e-01}}
  %0:4 = triad.loss_scale_update %s, %s, %s growth_interval = 10 growth = 0.5 backoff = 0.5
  return
}

// -----

// Loss scales back off.
func.func @f(%s: tensor<f32>) {
  // expected-error @+1 {{'triad.loss_scale_update' op backoff must be in (0, 1], got 2.000000e+00}}
  %0:4 = triad.loss_scale_update %s, %s, %s growth_interval = 10 growth = 2.0 backoff = 2.0
  return
}

// -----

// A padded vocabulary has classes, no more than the whole vocabulary's
// columns.
func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>) {
  // expected-error @+1 {{'triad.cross_entropy' op classes must be positive, got 0}}
  %0 = triad.cross_entropy %l, %y classes 0 : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>, %y: tensor<8x64xi32>, %d: tensor<f32>) {
  // expected-error @+1 {{'triad.cross_entropy_grad' op classes (257) exceeds the vocabulary's 256 columns}}
  %0 = triad.cross_entropy_grad %l, %y, %d classes 257 : tensor<8x64x256xf32>, tensor<8x64xi32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>) {
  // expected-error @+1 {{'triad.logsumexp' op classes (300) exceeds the vocabulary's 256 columns}}
  %0 = triad.logsumexp %l classes 300 : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
  return
}

// -----

// A log-sum-exp over a piece places its columns with vocab_split, which
// only a padded vocabulary needs.
func.func @f(%l: tensor<8x64x256xf32>) {
  // expected-error @+1 {{'triad.logsumexp' op vocab_split places x's columns in a padded vocabulary and needs classes}}
  %0 = triad.logsumexp %l vocab_split ["tp"] : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
  return
}

// -----

func.func @f(%l: tensor<8x64x256xf32>) {
  // expected-error @+1 {{'triad.logsumexp' op vocab_split lists mesh axis 'tp' twice}}
  %0 = triad.logsumexp %l classes 300 vocab_split ["tp", "tp"] : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
  return
}
