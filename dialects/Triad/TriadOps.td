//===- TriadOps.td - triad model ops -----------------------*- tablegen -*-===//
//
// Forward ops of the `triad` dialect. Shapes are global (the whole batch of
// one optimizer step); the sharding passes later rewrite them to local shapes.
// Ops whose result type follows from their operands have builders that infer
// it; the verifier checks it with a message naming the operand and dimension.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_TRIAD_OPS_TD
#define TRIAD_DIALECT_TRIAD_OPS_TD

include "TriadBase.td"
include "TriadInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Triad_Op<string mnemonic, list<Trait> traits = []>
    : Op<Triad_Dialect, mnemonic, traits>;

// Ops that compute on tensors have a sharding rule (the
// ShardingRuleOpInterface, implemented in TriadSharding.cpp).
defvar Triad_Sharded = DeclareOpInterfaceMethods<Triad_ShardingRuleOpInterface>;
defvar Triad_ShardedWithLocalForm = DeclareOpInterfaceMethods<
    Triad_ShardingRuleOpInterface, ["buildLocal"]>;

// The cost of an op that has no gradient rule of its own (the gradient
// ops, the optimizer's): the CostOpInterface with the defaults, or the
// methods named in `cost`.
class Triad_Costed<list<string> cost = []>
    : DeclareOpInterfaceMethods<Triad_CostOpInterface, cost>;

// An op with a gradient rule (the VjpOpInterface, implemented in
// TriadVjp.cpp).
// Differentiable ops also have a cost (the CostOpInterface); `cost` names
// the cost methods the op overrides (in TriadCost.cpp).
class Triad_DiffOp<string mnemonic, list<Trait> traits = [],
                   list<string> cost = []>
    : Triad_Op<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Triad_VjpOpInterface>, Triad_Sharded,
         DeclareOpInterfaceMethods<Triad_CostOpInterface, cost>])>;

// A differentiable op whose local form has other attributes than its
// global one (heads, slice sizes): it builds it itself.
class Triad_DiffOpWithLocalForm<string mnemonic, list<Trait> traits = [],
                                list<string> cost = []>
    : Triad_Op<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Triad_VjpOpInterface>,
         Triad_ShardedWithLocalForm,
         DeclareOpInterfaceMethods<Triad_CostOpInterface, cost>])>;

//===----------------------------------------------------------------------===//
// Parameters and model structure
//===----------------------------------------------------------------------===//

def Triad_ParamOp : Triad_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "Declares a trainable parameter";
  let description = [{
    A module-level parameter of the model: its name (a symbol), its global
    tensor type and how its elements are initialized. Values of the
    parameter are obtained with `triad.get_param`. The IR never holds the
    weights themselves, only their shapes.

    Example:

    ```mlir
    triad.param @embed.wte : tensor<256x64xf32> init <normal, std = 2.000000e-02>
    triad.param @head.norm.bias : tensor<64xf32> init <zeros>
    ```

    A parameter padded for tensor parallelism (`triad-pad-vocab`) declares
    its padded type and, as `unpadded`, the shape of the model's tensor,
    which it holds at its leading indices. The padding is zero: its
    elements never reach the loss. Initialization draws each element at its
    index in the unpadded shape, and checkpoints hold the unpadded tensor,
    so a padded and an unpadded run of the model start equal and share
    checkpoints:

    ```mlir
    triad.param @embed.wte : tensor<256x64xf32> unpadded [255, 64] init <normal, std = 2.000000e-02>
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    TypeAttrOf<Triad_FloatTensor>:$type,
    Triad_InitAttr:$init,
    OptionalAttr<DenseI64ArrayAttr>:$unpadded
  );
  let assemblyFormat = [{
    $sym_name `:` $type (`unpadded` $unpadded^)? `init` $init attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Number of elements of the model's tensor (without padding).
    int64_t getNumElements() {
      int64_t count = 1;
      for (int64_t size : getUnpaddedShape())
        count *= size;
      return count;
    }
    /// The shape of the model's tensor: `unpadded` when the parameter is
    /// padded, its type's shape otherwise.
    ::llvm::ArrayRef<int64_t> getUnpaddedShape() {
      if (auto unpadded = getUnpaddedAttr())
        return unpadded.asArrayRef();
      return getTensorType().getShape();
    }
  }];
}

def Triad_GetParamOp : Triad_Op<"get_param", [
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Reads the value of a parameter";
  let description = [{
    Produces the current value of the parameter (`triad.param`) or training
    state (`triad.state`) named `name`. The result type must equal the
    declared type.

    Example:

    ```mlir
    %w = triad.get_param @layers.0.attn.wq : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Triad_LayerOp : Triad_Op<"layer", [
    IsolatedFromAbove, SingleBlock, RecursiveMemoryEffects,
    HasParent<"::mlir::func::FuncOp">]> {
  let summary = "One part of the model: the embedding, a transformer layer or the head";
  let description = [{
    Makes the layer structure of the model explicit: the ops of transformer
    layer `index` (or of the embedding, or of the head that computes the
    loss) live in the body of one `triad.layer`, a part of a function; a
    function holds each (kind, index) once, and once more marked `backward`
    for the part's gradient computation after autodiff. The body is
    isolated from
    above: activations enter as operands (bound to the block arguments) and
    leave through `triad.yield`; parameters are read by symbol. Pipeline
    stages, recomputation and the cost model all work on these units.

    Example:

    ```mlir
    %h1 = triad.layer transformer 0 (%h0) : (tensor<8x64x64xf32>) -> tensor<8x64x64xf32> {
    ^bb0(%x: tensor<8x64x64xf32>):
      %w = triad.get_param @layers.0.mlp.fc1 : tensor<64x64xf32>
      %y = triad.matmul %x, %w : tensor<8x64x64xf32>, tensor<64x64xf32> -> tensor<8x64x64xf32>
      triad.yield %y : tensor<8x64x64xf32>
    }
    ```
  }];
  let arguments = (ins
    Triad_LayerKind:$kind,
    ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
    UnitAttr:$backward,
    Variadic<Triad_AnyTensor>:$inputs
  );
  let results = (outs Variadic<Triad_AnyTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind $index (`backward` $backward^)? ` ` `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Triad_YieldOp : Triad_Op<"yield", [
    Pure, Terminator, HasParent<"LayerOp">]> {
  let summary = "Returns the results of a `triad.layer`";
  let description = [{
    Terminates the body of a `triad.layer`; its operands become the layer's
    results and must match their types.

    Example:

    ```mlir
    triad.yield %y : tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Triad_AnyTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Linear algebra and elementwise arithmetic
//===----------------------------------------------------------------------===//

def Triad_EmbeddingOp : Triad_DiffOpWithLocalForm<"embedding", [Pure],
                                                  ["getBytes"]> {
  let summary = "Looks up rows of an embedding table";
  let description = [{
    `result[i..., :] = table[ids[i...], :]`: for an id tensor of shape
    `[d0, ..., dn]` and a table `[vocab, hidden]`, the result has shape
    `[d0, ..., dn, hidden]` and the table's element type. Ids outside
    `[0, vocab)` are invalid input.

    With `vocab_split`, the op is the local form of a vocab-parallel
    embedding (Megatron's VocabParallelEmbedding), which the partition
    builds when the table is split along the vocabulary: the table holds
    rows `[m * vocab, (m + 1) * vocab)` of the whole vocabulary, `m` being
    this rank's index in its group over the listed mesh axes; ids outside
    those rows give rows of zeros, so the sum of the results over the group
    is the whole lookup.

    Example:

    ```mlir
    %e = triad.embedding %ids, %wte : tensor<8x64xi32>, tensor<256x64xf32> -> tensor<8x64x64xf32>
    %p = triad.embedding %ids, %piece vocab_split ["tp"] : tensor<8x64xi32>, tensor<128x64xf32> -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Triad_IdTensor:$ids, Triad_FloatMatrix:$table,
                       OptionalAttr<StrArrayAttr>:$vocab_axes);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $table (`vocab_split` $vocab_axes^)? attr-dict `:` type($ids) `,`
    type($table) `->` type($result)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$ids, "::mlir::Value":$table)>];
  let hasVerifier = 1;
}

def Triad_MatmulOp : Triad_DiffOp<"matmul", [Pure],
    ["getFlops", "getContraction"]> {
  let summary = "Batched matrix multiplication with optional transposes";
  let description = [{
    Multiplies the matrices held in the last two dimensions of `lhs` and
    `rhs`. `lhs` has shape `[B..., M, K]` (`[B..., K, M]` with
    `transpose_lhs`); `rhs` has shape `[K, N]` (`[N, K]` with
    `transpose_rhs`), broadcast over the batch dimensions `B...`, or
    `[B..., K, N]` with the same batch dimensions as `lhs`. The result is
    `[B..., M, N]`. All element types are equal; accumulation is in at least
    fp32.

    Example:

    ```mlir
    // Activations times a weight matrix, and logits against a tied embedding.
    %y = triad.matmul %x, %w : tensor<8x64x64xf32>, tensor<64x256xf32> -> tensor<8x64x256xf32>
    %l = triad.matmul %x, %wte transpose_rhs : tensor<8x64x64xf32>, tensor<256x64xf32> -> tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$lhs,
    Triad_FloatTensor:$rhs,
    UnitAttr:$transpose_lhs,
    UnitAttr:$transpose_rhs
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_lhs` $transpose_lhs^)? (`transpose_rhs` $transpose_rhs^)?
    attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs,
                                 CArg<"bool", "false">:$transposeLhs,
                                 CArg<"bool", "false">:$transposeRhs)>];
  let hasVerifier = 1;
}

class Triad_SameTypeBinaryOp<string mnemonic, string summaryText,
                             string descriptionText>
    : Triad_DiffOp<mnemonic, [Pure, Commutative, SameOperandsAndResultType]> {
  let summary = summaryText;
  let description = descriptionText;
  let arguments = (ins Triad_FloatTensor:$lhs, Triad_FloatTensor:$rhs);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Triad_AddOp : Triad_DiffOp<"add", [Pure, AllTypesMatch<["lhs", "result"]>,
                                   AllElementTypesMatch<["lhs", "rhs"]>]> {
  let summary = "Elementwise addition, broadcasting the right operand";
  let description = [{
    `result = lhs + rhs`. `rhs` has the shape of `lhs` or of its trailing
    dimensions, and is broadcast over the leading ones (for example a
    `[seq, hidden]` position embedding added to `[batch, seq, hidden]`
    activations). The result has the type of `lhs`.

    Example:

    ```mlir
    %r = triad.add %x, %y : tensor<8x64x64xf32>, tensor<8x64x64xf32>
    %p = triad.add %x, %pos : tensor<8x64x64xf32>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$lhs, Triad_FloatTensor:$rhs);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
  let hasVerifier = 1;
}

def Triad_MulOp : Triad_SameTypeBinaryOp<"mul", "Elementwise multiplication", [{
    `result = lhs * rhs` for operands and result of one type.

    Example:

    ```mlir
    %p = triad.mul %a, %b : tensor<8x64x256xf32>
    ```
  }]>;

def Triad_ScaleOp : Triad_DiffOp<"scale", [Pure, SameOperandsAndResultType]> {
  let summary = "Multiplies a tensor by a constant";
  let description = [{
    `result = factor * x`, for example the `alpha * x` of DeepNorm's
    residual connection.

    Example:

    ```mlir
    %y = triad.scale %x by 1.183216e+01 : tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$x, F64Attr:$factor);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$x `by` $factor attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Triad_BiasAddOp : Triad_DiffOp<"bias_add", [Pure, AllTypesMatch<["x", "result"]>,
                                            AllElementTypesMatch<["x", "bias"]>]> {
  let summary = "Adds a bias vector along the last dimension";
  let description = [{
    `result[..., j] = x[..., j] + bias[j]`; `bias` has one dimension, equal
    to the last dimension of `x`.

    Example:

    ```mlir
    %y = triad.bias_add %x, %b : tensor<8x64x256xf32>, tensor<256xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$x, Triad_FloatVector:$bias);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$x `,` $bias attr-dict `:` type($x) `,` type($bias)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

class Triad_UnaryOp<string mnemonic, list<Trait> traits = []>
    : Triad_DiffOp<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])> {
  let arguments = (ins Triad_FloatTensor:$x);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($result)";
}

def Triad_GeluOp : Triad_DiffOp<"gelu", [Pure, SameOperandsAndResultType]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `x * Phi(x)` with the exact normal CDF (`approximate = none`, the
    default), or its tanh approximation
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`
    (`approximate = tanh`, GPT-2's `gelu_new`).

    Example:

    ```mlir
    %y = triad.gelu %x : tensor<8x64x256xf32>
    %z = triad.gelu %x approximate = tanh : tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$x,
    DefaultValuedAttr<Triad_GeluApproximation,
                      "::triad::GeluApproximation::none">:$approximate
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$x (`approximate` `=` $approximate^)? attr-dict `:` type($result)";
}

def Triad_FastGeluOp : Triad_UnaryOp<"fast_gelu"> {
  let summary = "Sigmoid approximation of GELU";
  let description = [{
    `x * sigmoid(1.702 * x)`, the fast GELU used by CodeGeeX.

    Example:

    ```mlir
    %y = triad.fast_gelu %x : tensor<8x64x256xf32>
    ```
  }];
}

def Triad_ReluOp : Triad_UnaryOp<"relu"> {
  let summary = "Rectified linear unit";
  let description = [{
    `max(x, 0)`.

    Example:

    ```mlir
    %y = triad.relu %x : tensor<8x64x256xf32>
    ```
  }];
}

def Triad_SiluOp : Triad_UnaryOp<"silu"> {
  let summary = "Sigmoid linear unit";
  let description = [{
    `x * sigmoid(x)`.

    Example:

    ```mlir
    %y = triad.silu %x : tensor<8x64x256xf32>
    ```
  }];
}

class Triad_GatedOp<string mnemonic>
    : Triad_DiffOp<mnemonic, [Pure, SameOperandsAndResultType]> {
  let arguments = (ins Triad_FloatTensor:$gate, Triad_FloatTensor:$up);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
}

def Triad_SwigluOp : Triad_GatedOp<"swiglu"> {
  let summary = "SwiGLU gating";
  let description = [{
    `silu(gate) * up`, the gated unit of LLaMA's MLP. Gate and up are the
    two projections of the MLP input, so each can be split over tensor
    parallel ranks along the inner dimension.

    Example:

    ```mlir
    %h = triad.swiglu %gate, %up : tensor<8x64x172xf32>
    ```
  }];
}

def Triad_GegluOp : Triad_GatedOp<"geglu"> {
  let summary = "GeGLU gating";
  let description = [{
    `gelu(gate) * up` with the exact GELU, the gated unit of GLM-130B's MLP.

    Example:

    ```mlir
    %h = triad.geglu %gate, %up : tensor<8x64x172xf32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Normalization, attention and positions
//===----------------------------------------------------------------------===//

def Triad_LayerNormOp : Triad_DiffOp<"layer_norm", [
    Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * gamma + beta`, with the mean and the
    (biased) variance over the last dimension. `gamma` and the optional
    `beta` are vectors of the size of the last dimension; without `beta` no
    bias is added.

    Example:

    ```mlir
    %y = triad.layer_norm %x, %g, %b : tensor<8x64x64xf32>, tensor<64xf32>, tensor<64xf32>
    %z = triad.layer_norm %x, %g {epsilon = 1.000000e-06 : f64} : tensor<8x64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$x,
    Triad_FloatVector:$gamma,
    Optional<Triad_FloatVector>:$beta,
    DefaultValuedAttr<F64Attr, "1e-5">:$epsilon
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $gamma (`,` $beta^)? attr-dict `:` type($x) `,` type($gamma) (`,` type($beta)^)?
  }];
  let hasVerifier = 1;
}

def Triad_RmsNormOp : Triad_DiffOp<"rms_norm", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "Root-mean-square normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * gamma` over the last dimension, as in
    LLaMA.

    Example:

    ```mlir
    %y = triad.rms_norm %x, %g : tensor<8x64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$x,
    Triad_FloatVector:$gamma,
    DefaultValuedAttr<F64Attr, "1e-5">:$epsilon
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$x `,` $gamma attr-dict `:` type($x) `,` type($gamma)";
  let hasVerifier = 1;
}

def Triad_AttentionOp : Triad_DiffOpWithLocalForm<"attention", [
    Pure, AttrSizedOperandSegments, AllTypesMatch<["q", "result"]>],
    ["getFlops", "getContraction"]> {
  let summary = "Fused multi-head scaled dot-product attention";
  let description = [{
    Multi-head attention over packed heads: `q` is `[batch, seq, heads * d]`,
    `k` and `v` are `[batch, seq, kv_heads * d]`, and the result has the type
    of `q`. Query head `h` attends with key/value head
    `h / (heads / kv_heads)` (grouped-query attention; `kv_heads = heads` is
    ordinary multi-head attention, `kv_heads = 1` multi-query attention).
    Scores are `scale * q . k` (default `scale = 1 / sqrt(d)`), plus
    `-slope[h] * (i - j)` when ALiBi slopes (`[heads]`, f32) are given, then
    masked and normalized with a softmax over the keys:

    - `causal`: query `i` sees keys `j <= i`;
    - `prefix`: query `i` of sample `b` sees keys `j <= i` and all keys
      `j < prefix_lengths[b]` (`[batch]`, i32), GLM's bidirectional prefix;
    - `none`: every key.

    Example:

    ```mlir
    %o = triad.attention %q, %k, %v heads = 4 kv_heads = 2 mask = causal
        : tensor<8x64x64xf32>, tensor<8x64x32xf32>, tensor<8x64x32xf32>
    %p = triad.attention %q, %k, %v prefix(%plen : tensor<8xi32>)
        heads = 4 kv_heads = 4 mask = prefix
        : tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$q,
    Triad_FloatTensor:$k,
    Triad_FloatTensor:$v,
    Optional<Triad_IdVector>:$prefix_lengths,
    Optional<Triad_VectorF32Tensor>:$alibi_slopes,
    ConfinedAttr<I64Attr, [IntPositive]>:$heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$kv_heads,
    Triad_MaskKind:$mask,
    OptionalAttr<F64Attr>:$scale
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v
    (`prefix` `(` $prefix_lengths^ `:` type($prefix_lengths) `)`)?
    (`alibi` `(` $alibi_slopes^ `:` type($alibi_slopes) `)`)?
    `heads` `=` $heads `kv_heads` `=` $kv_heads `mask` `=` $mask
    attr-dict `:` type($q) `,` type($k) `,` type($v)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Size of one head (the last dimension of q divided by heads).
    int64_t getHeadDim();
    /// The score scale actually applied: the attribute, else 1/sqrt(d).
    double getEffectiveScale();
  }];
}

def Triad_RopeOp : Triad_DiffOpWithLocalForm<"rope", [Pure, SameOperandsAndResultType]> {
  let summary = "Rotary position embedding";
  let description = [{
    Rotates the first `rotary_dim` dimensions of every head of
    `x : [batch, seq, heads * d]` by position-dependent angles
    (GPT-NeoX/LLaMA "rotate half" form): for `i < rotary_dim / 2`, the pair
    `(x[i], x[i + rotary_dim / 2])` at position `p` turns by
    `p * base^(-2i / rotary_dim)`. The remaining `d - rotary_dim`
    dimensions pass through (GPT-NeoX's rotary fraction of 0.25).

    Example:

    ```mlir
    %q2 = triad.rope %q heads = 4 rotary_dim = 4 base = 1.000000e+04 : tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$x,
    ConfinedAttr<I64Attr, [IntPositive]>:$heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$rotary_dim,
    DefaultValuedAttr<F64Attr, "10000.0">:$base
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $x `heads` `=` $heads `rotary_dim` `=` $rotary_dim (`base` `=` $base^)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

def Triad_ReshapeOp : Triad_DiffOp<"reshape", [Pure,
    AllElementTypesMatch<["x", "result"]>], ["getFlops", "getBytes"]> {
  let summary = "Reinterprets a tensor with another shape";
  let description = [{
    Same elements in row-major order, another shape with the same number of
    elements.

    Example:

    ```mlir
    %y = triad.reshape %x : tensor<8x64x64xf32> -> tensor<512x64xf32>
    ```
  }];
  let arguments = (ins Triad_AnyTensor:$x);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def Triad_TransposeOp : Triad_DiffOp<"transpose", [Pure, AllElementTypesMatch<["x", "result"]>]> {
  let summary = "Permutes the dimensions of a tensor";
  let description = [{
    `result.shape[i] = x.shape[permutation[i]]`.

    Example:

    ```mlir
    %y = triad.transpose %x [1, 0, 2] : tensor<8x64x32xf32> -> tensor<64x8x32xf32>
    ```
  }];
  let arguments = (ins Triad_AnyTensor:$x, DenseI64ArrayAttr:$permutation);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = "$x $permutation attr-dict `:` type($x) `->` type($result)";
  let builders = [OpBuilder<(ins "::mlir::Value":$x,
                                 "::llvm::ArrayRef<int64_t>":$permutation)>];
  let hasVerifier = 1;
}

def Triad_SliceOp : Triad_DiffOpWithLocalForm<"slice", [Pure, AllElementTypesMatch<["x", "result"]>]> {
  let summary = "Extracts a static rectangular slice";
  let description = [{
    `result[i...] = x[offsets + i...]`; the result's shape is `sizes`, and
    `offsets + sizes` stays within `x` in every dimension.

    Example:

    ```mlir
    // Rows 2 .. 65 of OPT's learned position table.
    %p = triad.slice %wpe offsets = [2, 0] sizes = [64, 64] : tensor<66x64xf32> -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Triad_AnyTensor:$x, DenseI64ArrayAttr:$offsets,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = [{
    $x `offsets` `=` $offsets `sizes` `=` $sizes attr-dict `:` type($x) `->` type($result)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x,
                                 "::llvm::ArrayRef<int64_t>":$offsets,
                                 "::llvm::ArrayRef<int64_t>":$sizes)>];
  let hasVerifier = 1;
}

def Triad_ConcatOp : Triad_DiffOp<"concat", [Pure]> {
  let summary = "Concatenates tensors along one dimension";
  let description = [{
    Joins the inputs along `dim`; all other dimensions and the element type
    agree.

    Example:

    ```mlir
    %y = triad.concat %a, %b dim = 2 : tensor<8x64x32xf32>, tensor<8x64x32xf32> -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Triad_AnyTensor>:$inputs,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = [{
    $inputs `dim` `=` $dim attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Triad_BroadcastOp : Triad_DiffOp<"broadcast", [Pure, AllElementTypesMatch<["x", "result"]>]> {
  let summary = "Broadcasts a tensor to a larger shape";
  let description = [{
    NumPy-style broadcasting: the shapes align at their trailing dimensions;
    each dimension of `x` equals the result's or is 1 (and is repeated), and
    the result's extra leading dimensions repeat `x` (for example a
    per-position `[seq, hidden]` tensor repeated for every sample of the
    batch, or a `[8, 1, 64]` reduction expanded back to `[8, 64, 64]`).

    Example:

    ```mlir
    %y = triad.broadcast %x : tensor<64x64xf32> -> tensor<8x64x64xf32>
    %z = triad.broadcast %s : tensor<8x1x64xf32> -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Triad_AnyTensor:$x);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def Triad_PadOp : Triad_DiffOp<"pad", [Pure, AllElementTypesMatch<["x", "result"]>]> {
  let summary = "Pads a tensor with zeros";
  let description = [{
    Surrounds `x` with `low[i]` zeros before and `high[i]` zeros after it in
    every dimension `i`; the result's dimension `i` is
    `low[i] + x.shape[i] + high[i]`. It is the gradient of `triad.slice`.

    Example:

    ```mlir
    %y = triad.pad %x low = [2, 0] high = [0, 0] : tensor<64x64xf32> -> tensor<66x64xf32>
    ```
  }];
  let arguments = (ins Triad_AnyTensor:$x, DenseI64ArrayAttr:$low,
                       DenseI64ArrayAttr:$high);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = [{
    $x `low` `=` $low `high` `=` $high attr-dict `:` type($x) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Triad_CastOp : Triad_DiffOp<"cast", [Pure, SameOperandsAndResultShape]> {
  let summary = "Converts the element type";
  let description = [{
    Converts every element to the result's element type (round to nearest
    even for narrowing float conversions).

    Example:

    ```mlir
    %y = triad.cast %x : tensor<8x64x64xbf16> -> tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins Triad_AnyTensor:$x);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Regularization, loss and reductions
//===----------------------------------------------------------------------===//

def Triad_DropoutOp : Triad_DiffOpWithLocalForm<"dropout", [Pure, SameOperandsAndResultType]> {
  let summary = "Deterministic inverted dropout";
  let description = [{
    Zeroes each element with probability `probability` and scales the rest
    by `1 / (1 - probability)`. The mask is a function of (seed, step,
    `rng_stream`, global element index) through a counter-based generator,
    so it is the same on every mesh; `rng_stream` must be unique per
    dropout op in the model.

    Its local form on a piece of the batch (the leading dimension split
    over data-parallel axes or into microbatches; the other dimensions are
    kept whole) lists the splitting axes in `batch_split`: the piece's
    elements are those of samples `(index over the real mesh axes) *
    microbatches + microbatch` onwards, `microbatch` being the virtual axis
    of `--triad-split-microbatches`, so that each element keeps its global
    index.

    A tensor of rank 3 or more ([batch, sequence, ...], as sequence
    parallelism splits the residual stream) may also be split along its
    sequence (dimension 1); its local form lists those axes in `seq_split`.
    Each sample's piece of the sequence is then a run of global indices
    that starts `(index over the seq_split axes) * local sequence` rows into
    the sample, so that dropout runs on the piece without gathering the
    sequence. The dimensions after the sequence stay whole.

    Example:

    ```mlir
    %y = triad.dropout %x probability = 1.000000e-01 rng_stream = 3 : tensor<8x64x64xf32>
    %z = triad.dropout %x probability = 1.000000e-01 rng_stream = 3 batch_split ["microbatch", "dp"] : tensor<8x64x64xf32>
    %s = triad.dropout %x probability = 1.000000e-01 rng_stream = 3 seq_split ["tp"] : tensor<8x32x64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$x,
    F64Attr:$probability,
    ConfinedAttr<I64Attr, [IntNonNegative]>:$rng_stream,
    OptionalAttr<StrArrayAttr>:$batch_axes,
    OptionalAttr<StrArrayAttr>:$seq_axes
  );
  let results = (outs Triad_FloatTensor:$result);
  let builders = [
    OpBuilder<(ins "::mlir::Value":$x, "::mlir::FloatAttr":$probability,
                   "::mlir::IntegerAttr":$rng_stream), [{
      build($_builder, $_state, x, probability, rng_stream, ::mlir::ArrayAttr(),
            ::mlir::ArrayAttr());
    }]>
  ];
  let assemblyFormat = [{
    $x `probability` `=` $probability `rng_stream` `=` $rng_stream
    (`batch_split` $batch_axes^)? (`seq_split` $seq_axes^)? attr-dict `:`
    type($result)
  }];
  let extraClassDeclaration = [{
    /// The virtual mesh axis whose pieces are the microbatches of a step
    /// (--triad-split-microbatches).
    static constexpr ::llvm::StringLiteral kMicrobatchAxis = "microbatch";
    /// batch_split without the virtual microbatch axis: the mesh axes whose
    /// group index numbers the piece (none without batch_split).
    ::llvm::SmallVector<::llvm::StringRef> getBatchMeshAxes();
    /// Whether batch_split cuts the batch into the step's microbatches.
    bool splitsIntoMicrobatches();
  }];
  let hasVerifier = 1;
}

def Triad_CrossEntropyOp : Triad_DiffOpWithLocalForm<"cross_entropy", [Pure]> {
  let summary = "Mean softmax cross-entropy over non-ignored tokens";
  let description = [{
    For logits `[d0, ..., dn, vocab]` and labels `[d0, ..., dn]` (i32),
    computes `-log softmax(logits)[label]` per token and returns its mean
    over the tokens whose label is not `ignore_index` (default -100) as an
    f32 scalar. A batch whose labels are all ignored has loss 0.

    With `lse` and `vocab_split`, the op is the local form of a
    vocab-parallel cross entropy (as in Megatron), which the partition
    builds when the logits are split along the vocabulary: the logits hold
    columns `[m * vocab, (m + 1) * vocab)` of the whole vocabulary, `m`
    being this rank's index in its group over the listed mesh axes, and
    `lse` (`[d0, ..., dn, 1]`) is each token's log-sum-exp over the whole
    vocabulary. The result is the sum, over the tokens whose label lies in
    this rank's columns, of `lse - logit[label]`, divided by the count of
    all non-ignored tokens: the sum of the results over the group is the
    loss.

    With `classes`, the vocabulary is padded (`triad-pad-vocab`): only the
    first `classes` columns of the whole vocabulary are classes, the others
    take no part in the softmax, and labels must lie below `classes`.

    Example:

    ```mlir
    %loss = triad.cross_entropy %logits, %labels : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    %part = triad.cross_entropy %piece, %labels lse %lse vocab_split ["tp"]
        : tensor<8x64x128xf32>, tensor<8x64xi32>, tensor<8x64x1xf32> -> tensor<f32>
    %padded = triad.cross_entropy %logits, %labels classes 255
        : tensor<8x64x256xf32>, tensor<8x64xi32> -> tensor<f32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$logits,
    Triad_IdTensor:$labels,
    Optional<Triad_FloatTensor>:$lse,
    DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
    OptionalAttr<StrArrayAttr>:$vocab_axes,
    OptionalAttr<I64Attr>:$classes
  );
  let results = (outs Triad_ScalarF32Tensor:$loss);
  let assemblyFormat = [{
    $logits `,` $labels (`lse` $lse^ `vocab_split` $vocab_axes)?
    (`classes` $classes^)? attr-dict `:`
    type($logits) `,` type($labels) (`,` type($lse)^)? `->` type($loss)
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits,
                                 "::mlir::Value":$labels,
                                 "int64_t":$ignoreIndex)>];
  let hasVerifier = 1;
}

def Triad_LogSumExpOp : Triad_Op<"logsumexp", [Triad_Sharded, Pure, Triad_Costed<>,
    AllElementTypesMatch<["x", "result"]>]> {
  let summary = "Log of the sum of exponentials over the last dimension";
  let description = [{
    `result[i..., 0] = log(sum_j exp(x[i..., j]))`, computed stably (from
    the row's maximum); the last dimension is kept with size 1. The
    vocab-parallel cross entropy combines the pieces of its softmax
    denominator with it: each rank's log-sum-exp over its columns,
    gathered, and the log-sum-exp of those.

    Example:

    ```mlir
    %lse = triad.logsumexp %logits : tensor<8x64x256xf32> -> tensor<8x64x1xf32>
    %own = triad.logsumexp %piece classes 255 vocab_split ["tp"]
        : tensor<8x64x128xf32> -> tensor<8x64x1xf32>
    ```

    With `classes`, only the columns whose index in the whole vocabulary
    is below `classes` are summed (a padded vocabulary); with
    `vocab_split` as well, `x` holds the columns `[m * n, (m + 1) * n)` of
    the whole, `m` being this rank's index in its group over the listed
    mesh axes and `n` the last dimension of `x`. A row with no such column
    has a log-sum-exp of minus infinity.
  }];
  let arguments = (ins
    Triad_FloatTensor:$x,
    OptionalAttr<I64Attr>:$classes,
    OptionalAttr<StrArrayAttr>:$vocab_axes
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $x (`classes` $classes^)? (`vocab_split` $vocab_axes^)? attr-dict `:`
    type($x) `->` type($result)
  }];
  let hasVerifier = 1;
}

class Triad_ReduceOp<string mnemonic, string what>
    : Triad_DiffOp<mnemonic, [Pure, AllElementTypesMatch<["x", "result"]>]> {
  let summary = "Reduces dimensions by their " # what;
  let description = [{
    Reduces `x` over the listed dimensions (each once, in range). The result
    either drops them or, with the same rank as `x`, keeps them with size 1.

    Example:

    ```mlir
    %s = triad.}] # mnemonic # [{ %x dims = [2] : tensor<8x64x64xf32> -> tensor<8x64xf32>
    %k = triad.}] # mnemonic # [{ %x dims = [0, 1] : tensor<8x64x64xf32> -> tensor<1x1x64xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$x, DenseI64ArrayAttr:$dims);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$x `dims` `=` $dims attr-dict `:` type($x) `->` type($result)";
  let hasVerifier = 1;
}

def Triad_SumOp : Triad_ReduceOp<"sum", "sum">;
def Triad_MeanOp : Triad_ReduceOp<"mean", "mean">;

//===----------------------------------------------------------------------===//
// Gradient ops
//
// The vector-Jacobian products that are not compositions of forward ops.
// Each takes the forward inputs it needs and the gradient of the forward
// result, and recomputes what it needs (softmax statistics, normalization
// statistics) rather than reading saved intermediates.
//===----------------------------------------------------------------------===//

def Triad_EmbeddingGradOp : Triad_Op<"embedding_grad",
    [Triad_ShardedWithLocalForm, Pure, Triad_Costed<>]> {
  let summary = "Gradient of an embedding table";
  let description = [{
    `result[v, :] = sum of dy[i..., :] over the positions i... where
    ids[i...] = v`: the scatter-add that is the gradient of
    `triad.embedding` with respect to its table. The result has the shape of
    the table. `of` names the parameter that table is (autodiff records it
    when the table is a parameter read): the gradient is split along the
    vocabulary as that parameter is, so a vocab-parallel table's gradient
    is computed in pieces, never whole.

    With `vocab_split`, the op is the local form of such a piece: the result
    holds rows `[m * vocab, (m + 1) * vocab)` of the whole vocabulary, `m`
    being this rank's index in the group of the listed mesh axes, and ids of
    other pieces add nothing.

    Example:

    ```mlir
    %dw = triad.embedding_grad %ids, %dy of @wte : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<256x64xf32>
    %piece = triad.embedding_grad %ids, %dy of @wte vocab_split ["tp"] : tensor<8x64xi32>, tensor<8x64x64xf32> -> tensor<128x64xf32>
    ```
  }];
  let arguments = (ins Triad_IdTensor:$ids, Triad_FloatTensor:$dy,
                       OptionalAttr<FlatSymbolRefAttr>:$table,
                       OptionalAttr<StrArrayAttr>:$vocab_axes);
  let results = (outs Triad_FloatMatrix:$result);
  let assemblyFormat = [{
    $ids `,` $dy (`of` $table^)? (`vocab_split` $vocab_axes^)? attr-dict `:`
    type($ids) `,` type($dy) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Triad_ActivationGradOp : Triad_Op<"activation_grad", [Triad_Sharded,
    Pure, SameOperandsAndResultType, Triad_Costed<>]> {
  let summary = "Gradient of an elementwise activation";
  let description = [{
    `result = f'(x) * dy` for the activation `f` named by `kind` (gelu,
    gelu_tanh, fast_gelu, relu, silu; relu'(0) = 0).

    Example:

    ```mlir
    %dx = triad.activation_grad gelu %x, %dy : tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins Triad_ActivationKind:$kind, Triad_FloatTensor:$x,
                       Triad_FloatTensor:$dy);
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = "$kind $x `,` $dy attr-dict `:` type($result)";
}

def Triad_LayerNormGradOp : Triad_Op<"layer_norm_grad", [Triad_Sharded,
    Pure, Triad_Costed<>, AllTypesMatch<["x", "dy", "dx"]>, AllTypesMatch<["gamma", "dgamma"]>]> {
  let summary = "Gradient of layer normalization";
  let description = [{
    The gradients of `triad.layer_norm` (same `epsilon`) with respect to `x`
    and `gamma`, given the gradient `dy` of its result. The gradient of
    `beta` is the sum of `dy` over all but the last dimension and is not
    computed here.

    Example:

    ```mlir
    %dx, %dg = triad.layer_norm_grad %x, %g, %dy : tensor<8x64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$x, Triad_FloatVector:$gamma,
                       Triad_FloatTensor:$dy,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs Triad_FloatTensor:$dx, Triad_FloatVector:$dgamma);
  let assemblyFormat = [{
    $x `,` $gamma `,` $dy attr-dict `:` type($x) `,` type($gamma)
  }];
  let hasVerifier = 1;
}

def Triad_RmsNormGradOp : Triad_Op<"rms_norm_grad", [Triad_Sharded,
    Pure, Triad_Costed<>, AllTypesMatch<["x", "dy", "dx"]>, AllTypesMatch<["gamma", "dgamma"]>]> {
  let summary = "Gradient of RMS normalization";
  let description = [{
    The gradients of `triad.rms_norm` (same `epsilon`) with respect to `x`
    and `gamma`, given the gradient `dy` of its result.

    Example:

    ```mlir
    %dx, %dg = triad.rms_norm_grad %x, %g, %dy : tensor<8x64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$x, Triad_FloatVector:$gamma,
                       Triad_FloatTensor:$dy,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs Triad_FloatTensor:$dx, Triad_FloatVector:$dgamma);
  let assemblyFormat = [{
    $x `,` $gamma `,` $dy attr-dict `:` type($x) `,` type($gamma)
  }];
  let hasVerifier = 1;
}

def Triad_AttentionGradOp : Triad_Op<"attention_grad", [Triad_ShardedWithLocalForm,
    Pure, Triad_Costed<["getFlops", "getContraction"]>, AttrSizedOperandSegments, AllTypesMatch<["q", "dout"]>]> {
  let summary = "Gradient of fused attention";
  let description = [{
    The gradients of `triad.attention` (same operands and attributes) with
    respect to `q`, `k` and `v`, given the gradient `dout` of its result. The
    softmax is recomputed from `q` and `k`, so no score matrix is kept
    between forward and backward. With grouped-query attention the
    gradients of a key/value head sum over the query heads that share it.

    Example:

    ```mlir
    %dq, %dk, %dv = triad.attention_grad %q, %k, %v, %do heads = 4 kv_heads = 4 mask = causal
        : tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>
        -> tensor<8x64x64xf32>, tensor<8x64x64xf32>, tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$q,
    Triad_FloatTensor:$k,
    Triad_FloatTensor:$v,
    Optional<Triad_IdVector>:$prefix_lengths,
    Optional<Triad_VectorF32Tensor>:$alibi_slopes,
    Triad_FloatTensor:$dout,
    ConfinedAttr<I64Attr, [IntPositive]>:$heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$kv_heads,
    Triad_MaskKind:$mask,
    OptionalAttr<F64Attr>:$scale
  );
  let results = (outs Triad_FloatTensor:$dq, Triad_FloatTensor:$dk,
                      Triad_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v
    (`prefix` `(` $prefix_lengths^ `:` type($prefix_lengths) `)`)?
    (`alibi` `(` $alibi_slopes^ `:` type($alibi_slopes) `)`)?
    `,` $dout
    `heads` `=` $heads `kv_heads` `=` $kv_heads `mask` `=` $mask
    attr-dict `:` type($q) `,` type($k) `,` type($v)
    `->` type($dq) `,` type($dk) `,` type($dv)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The score scale actually applied: the attribute, else 1/sqrt(d).
    double getEffectiveScale();
  }];
}

def Triad_RopeGradOp : Triad_Op<"rope_grad", [Triad_ShardedWithLocalForm, Pure,
    SameOperandsAndResultType, Triad_Costed<>]> {
  let summary = "Gradient of the rotary position embedding";
  let description = [{
    The gradient of `triad.rope` (same attributes) with respect to its
    input: each rotation is orthogonal, so this rotates `dy` back by the
    same angles.

    Example:

    ```mlir
    %dx = triad.rope_grad %dy heads = 4 rotary_dim = 16 : tensor<8x64x64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$dy,
    ConfinedAttr<I64Attr, [IntPositive]>:$heads,
    ConfinedAttr<I64Attr, [IntPositive]>:$rotary_dim,
    DefaultValuedAttr<F64Attr, "10000.0">:$base
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $dy `heads` `=` $heads `rotary_dim` `=` $rotary_dim (`base` `=` $base^)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def Triad_CrossEntropyGradOp : Triad_Op<"cross_entropy_grad", [
    Triad_ShardedWithLocalForm, Pure, Triad_Costed<>, AllTypesMatch<["logits", "result"]>]> {
  let summary = "Gradient of the mean cross-entropy";
  let description = [{
    The gradient of `triad.cross_entropy` (same `ignore_index`) with respect
    to the logits, scaled by the scalar gradient `dloss` of the loss:
    `(softmax(logits[t]) - onehot(labels[t])) * dloss / n` for the `n`
    tokens whose label is not ignored, and 0 for ignored tokens.

    With `lse` and `vocab_split`, the op is the local form over this rank's
    columns of the vocabulary, as for `triad.cross_entropy`: the softmax
    is `exp(logits - lse)` and the one-hot term falls on the label's column
    where it lies in this rank's piece. With `classes`, the columns that
    are not classes get a gradient of 0.

    Example:

    ```mlir
    %dl = triad.cross_entropy_grad %logits, %labels, %dloss
        : tensor<8x64x256xf32>, tensor<8x64xi32>
    %dp = triad.cross_entropy_grad %piece, %labels, %dloss lse %lse vocab_split ["tp"]
        : tensor<8x64x128xf32>, tensor<8x64xi32>, tensor<8x64x1xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$logits,
    Triad_IdTensor:$labels,
    Triad_ScalarF32Tensor:$dloss,
    Optional<Triad_FloatTensor>:$lse,
    DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
    OptionalAttr<StrArrayAttr>:$vocab_axes,
    OptionalAttr<I64Attr>:$classes
  );
  let results = (outs Triad_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $dloss (`lse` $lse^ `vocab_split` $vocab_axes)?
    (`classes` $classes^)?
    attr-dict `:` type($logits) `,` type($labels) (`,` type($lse)^)?
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$logits,
                                 "::mlir::Value":$labels,
                                 "::mlir::Value":$dloss,
                                 "int64_t":$ignoreIndex)>];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Training state and the optimizer
//===----------------------------------------------------------------------===//

def Triad_StateOp : Triad_Op<"state", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "Declares training state that is not trained";
  let description = [{
    A module-level tensor the training step keeps between steps without
    differentiating it: optimizer moments, fp32 master weights, the step
    counter, the loss scale. `of` names the parameter the state belongs to
    (so that sharding can split it like its parameter, ZeRO); counters have
    none. A state of a parameter with a random init draws the parameter's
    values in the parameter's precision (a master copy starts equal to its
    parameter). It is read with `triad.get_param` and written with
    `triad.assign`.

    Example:

    ```mlir
    triad.state @adam.m.embed.wte : tensor<256x64xf32> init <zeros> of @embed.wte
    triad.state @optimizer.step : tensor<f32> init <zeros>
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    TypeAttrOf<Triad_FloatTensor>:$type,
    Triad_InitAttr:$init,
    OptionalAttr<FlatSymbolRefAttr>:$of
  );
  let assemblyFormat = "$sym_name `:` $type `init` $init (`of` $of^)? attr-dict";
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Triad_AssignOp : Triad_Op<"assign", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemWrite]>]> {
  let summary = "Writes a new value of a parameter or a state";
  let description = [{
    Replaces the value of the `triad.param` or `triad.state` named `name`
    with `value`, of the declared type. Later reads (`triad.get_param`) in
    this or any later call see the new value; the apply step of training
    ends with one assignment per updated tensor.

    Example:

    ```mlir
    triad.assign @embed.wte, %updated : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, Triad_FloatTensor:$value);
  let assemblyFormat = "$name `,` $value attr-dict `:` type($value)";
}

def Triad_LrScheduleOp : Triad_Op<"lr_schedule", [Triad_Sharded, Pure]> {
  let summary = "Learning rate: linear warmup, then cosine decay to a floor";
  let description = [{
    The learning rate at optimizer step `step` (a scalar counting from 1):
    `peak * step / warmup` during the first `warmup` steps, then a cosine
    from `peak` down to `floor` over the steps up to `decay` (measured from
    the start), and `floor` after that. `decay = 0` means no decay: `peak`
    after the warmup; `decay = -1` decays over the run, whose last step the
    runtime knows (triad-run's `--steps`).

    Example:

    ```mlir
    %lr = triad.lr_schedule %step peak = 3.0e-4 floor = 3.0e-5 warmup = 100 decay = 10000 : tensor<f32>
    ```
  }];
  let arguments = (ins
    Triad_ScalarF32Tensor:$step,
    F64Attr:$peak,
    F64Attr:$floor,
    ConfinedAttr<I64Attr, [IntNonNegative]>:$warmup,
    I64Attr:$decay
  );
  let results = (outs Triad_ScalarF32Tensor:$lr);
  let assemblyFormat = [{
    $step `peak` `=` $peak `floor` `=` $floor `warmup` `=` $warmup `decay` `=` $decay attr-dict `:` type($lr)
  }];
  let hasVerifier = 1;
}

def Triad_SumSquaresOp : Triad_Op<"sum_squares", [Triad_Sharded, Pure,
    Triad_Costed<>]> {
  let summary = "Sum of the squares of a tensor's elements";
  let description = [{
    `sum(x^2)` accumulated in at least f32, as an f32 scalar. Summed over
    all gradients it gives the squared global norm; each shard of a
    sharded gradient contributes its part, to be reduced across shards.

    With `limit`, an element of magnitude above it makes the result +inf:
    f16's loss scaling uses it so that a step whose summed scaled gradient
    would not fit f16 overflows on every mesh, as it does where one
    microbatch's f16 gradient is the whole step's.

    Example:

    ```mlir
    %s = triad.sum_squares %g : tensor<64x256xf32>
    %t = triad.sum_squares %g limit = 1.637600e+04 : tensor<64x256xf32>
    ```
  }];
  let arguments = (ins Triad_FloatTensor:$x, OptionalAttr<F64Attr>:$limit);
  let results = (outs Triad_ScalarF32Tensor:$result);
  let assemblyFormat = "$x (`limit` `=` $limit^)? attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Triad_ClipCoefficientOp : Triad_Op<"clip_coefficient", [Triad_Sharded, Pure]> {
  let summary = "Global-norm gradient clipping coefficient";
  let description = [{
    From the squared global gradient norm `sum_squares`, returns the norm
    `sqrt(sum_squares)` and the factor `min(1, max_norm / (norm + 1e-6))`
    that scales every gradient so that their global norm is at most
    `max_norm` (1 when `max_norm` is 0: no clipping).

    Example:

    ```mlir
    %coef, %norm = triad.clip_coefficient %total max_norm = 1.0
    ```
  }];
  let arguments = (ins Triad_ScalarF32Tensor:$sum_squares, F64Attr:$max_norm);
  let results = (outs Triad_ScalarF32Tensor:$coefficient,
                      Triad_ScalarF32Tensor:$norm);
  let assemblyFormat = "$sum_squares `max_norm` `=` $max_norm attr-dict";
  let hasVerifier = 1;
}

def Triad_AdamWUpdateOp : Triad_Op<"adamw_update", [Triad_Sharded,
    Pure, Triad_Costed<>, AllTypesMatch<["param", "new_param"]>,
    AllTypesMatch<["m", "v", "new_m", "new_v"]>,
    AllShapesMatch<["param", "grad", "m"]>]> {
  let summary = "One AdamW step of one parameter";
  let description = [{
    With `g = grad * coefficient` (the clipping factor) and `t = step`:
    `m' = beta1 m + (1 - beta1) g`, `v' = beta2 v + (1 - beta2) g^2`, and
    `param' = param - lr (m' / (1 - beta1^t)) / (sqrt(v' / (1 - beta2^t)) +
    epsilon) - lr weight_decay param` (decoupled weight decay). The moments
    are f32 whatever the parameter's type.

    Example:

    ```mlir
    %p2, %m2, %v2 = triad.adamw_update %p, %g, %m, %v, %lr, %step, %coef
        beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-8 weight_decay = 0.1
        : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins
    Triad_FloatTensor:$param,
    Triad_FloatTensor:$grad,
    Triad_FloatTensor:$m,
    Triad_FloatTensor:$v,
    Triad_ScalarF32Tensor:$lr,
    Triad_ScalarF32Tensor:$step,
    Triad_ScalarF32Tensor:$coefficient,
    F64Attr:$beta1,
    F64Attr:$beta2,
    F64Attr:$epsilon,
    F64Attr:$weight_decay
  );
  let results = (outs Triad_FloatTensor:$new_param, Triad_FloatTensor:$new_m,
                      Triad_FloatTensor:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $lr `,` $step `,` $coefficient
    `beta1` `=` $beta1 `beta2` `=` $beta2 `epsilon` `=` $epsilon
    `weight_decay` `=` $weight_decay attr-dict
    `:` type($param) `,` type($grad) `,` type($m)
  }];
  let hasVerifier = 1;
}

def Triad_SelectOp : Triad_Op<"select", [Triad_Sharded,
    Pure, AllTypesMatch<["on_true", "on_false", "result"]>]> {
  let summary = "Chooses one of two tensors by a scalar condition";
  let description = [{
    `on_true` when the f32 scalar `condition` is not zero, else `on_false`
    (for example the values before a skipped optimizer step).

    Example:

    ```mlir
    %p = triad.select %skip, %old, %new : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Triad_ScalarF32Tensor:$condition,
                       Triad_AnyTensor:$on_true, Triad_AnyTensor:$on_false);
  let results = (outs Triad_AnyTensor:$result);
  let assemblyFormat = [{
    $condition `,` $on_true `,` $on_false attr-dict `:` type($result)
  }];
}

def Triad_LossScaleUpdateOp : Triad_Op<"loss_scale_update", [Triad_Sharded, Pure]> {
  let summary = "Dynamic loss scaling for f16 training";
  let description = [{
    Given the sum of squares of the step's scaled gradients, the current
    loss `scale` and the number of good steps since it last changed:
    when the sum is not finite (a gradient overflowed), `skip` is 1, the
    scale is multiplied by `backoff` (at least 1) and the count restarts;
    otherwise `skip` is 0 and the count grows, and after `growth_interval`
    good steps the scale is multiplied by `growth`. `inverse` is 1 / scale
    of this step, to unscale the gradients.

    Example:

    ```mlir
    %skip, %scale2, %good2, %inverse = triad.loss_scale_update %ss, %scale, %good
        growth_interval = 1000 growth = 2.0 backoff = 0.5
    ```
  }];
  let arguments = (ins
    Triad_ScalarF32Tensor:$sum_squares,
    Triad_ScalarF32Tensor:$scale,
    Triad_ScalarF32Tensor:$good_steps,
    ConfinedAttr<I64Attr, [IntPositive]>:$growth_interval,
    F64Attr:$growth,
    F64Attr:$backoff
  );
  let results = (outs Triad_ScalarF32Tensor:$skip,
                      Triad_ScalarF32Tensor:$new_scale,
                      Triad_ScalarF32Tensor:$new_good_steps,
                      Triad_ScalarF32Tensor:$inverse);
  let assemblyFormat = [{
    $sum_squares `,` $scale `,` $good_steps `growth_interval` `=` $growth_interval
    `growth` `=` $growth `backoff` `=` $backoff attr-dict
  }];
  let hasVerifier = 1;
}

#endif // TRIAD_DIALECT_TRIAD_OPS_TD
