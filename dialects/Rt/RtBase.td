//===- RtBase.td - rt dialect, enums and types -------------*- tablegen -*-===//
//
// The `rt` dialect's definition, its enums (the runtime's kernels, the
// roles of persistent tensors) and its buffer type constraint.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_RT_BASE_TD
#define TRIAD_DIALECT_RT_BASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"

def Rt_Dialect : Dialect {
  let name = "rt";
  let cppNamespace = "::triad::rt";
  let summary = "Per-rank runtime programs: the plan file as IR";
  let description = [{
    A `rt.program` is what one pipeline rank runs: `rt.buffer`s at static
    byte offsets in the rank's arena (a memref type gives the element type
    and local shape), `rt.persistent` tensors kept between steps, `rt.func`s
    whose bodies are `rt.kernel` calls, and one `rt.step` listing the calls
    of an optimizer step. The module's `rt.plan` op carries what all ranks
    share: the mesh and the shape of the training data.
  }];
  let dependentDialects = ["::triad::TriadDialect"];
}

class Rt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Rt_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

// The runtime's kernels, in the order and with the names of plan.fbs's
// OpCode (the exporter checks the correspondence at compile time). Operand
// conventions are documented in plan.fbs.
def Rt_OpCode : I32EnumAttr<"OpCode", "runtime kernel", [
    I32EnumAttrCase<"Embedding", 0, "embedding">,
    I32EnumAttrCase<"EmbeddingGrad", 1, "embedding_grad">,
    I32EnumAttrCase<"Matmul", 2, "matmul">,
    I32EnumAttrCase<"Add", 3, "add">,
    I32EnumAttrCase<"Mul", 4, "mul">,
    I32EnumAttrCase<"Scale", 5, "scale">,
    I32EnumAttrCase<"Activation", 6, "activation">,
    I32EnumAttrCase<"ActivationGrad", 7, "activation_grad">,
    I32EnumAttrCase<"Gated", 8, "gated">,
    I32EnumAttrCase<"LayerNorm", 9, "layer_norm">,
    I32EnumAttrCase<"LayerNormGrad", 10, "layer_norm_grad">,
    I32EnumAttrCase<"RmsNorm", 11, "rms_norm">,
    I32EnumAttrCase<"RmsNormGrad", 12, "rms_norm_grad">,
    I32EnumAttrCase<"Attention", 13, "attention">,
    I32EnumAttrCase<"AttentionGrad", 14, "attention_grad">,
    I32EnumAttrCase<"Rope", 15, "rope">,
    I32EnumAttrCase<"Copy", 16, "copy">,
    I32EnumAttrCase<"Transpose", 17, "transpose">,
    I32EnumAttrCase<"Slice", 18, "slice">,
    I32EnumAttrCase<"Pad", 19, "pad">,
    I32EnumAttrCase<"Concat", 20, "concat">,
    I32EnumAttrCase<"Broadcast", 21, "broadcast">,
    I32EnumAttrCase<"Sum", 22, "sum">,
    I32EnumAttrCase<"Cast", 23, "cast">,
    I32EnumAttrCase<"Dropout", 24, "dropout">,
    I32EnumAttrCase<"CrossEntropy", 25, "cross_entropy">,
    I32EnumAttrCase<"CrossEntropyGrad", 26, "cross_entropy_grad">,
    I32EnumAttrCase<"Fill", 27, "fill">,
    I32EnumAttrCase<"SumSquares", 28, "sum_squares">,
    I32EnumAttrCase<"ClipCoefficient", 29, "clip_coefficient">,
    I32EnumAttrCase<"LrSchedule", 30, "lr_schedule">,
    I32EnumAttrCase<"AdamW", 31, "adamw">,
    I32EnumAttrCase<"Select", 32, "select">,
    I32EnumAttrCase<"LossScaleUpdate", 33, "loss_scale_update">,
    I32EnumAttrCase<"CountValid", 34, "count_valid">,
    I32EnumAttrCase<"Accumulate", 35, "accumulate">,
    I32EnumAttrCase<"Reciprocal", 36, "reciprocal">,
    I32EnumAttrCase<"ScaleBy", 37, "scale_by">,
    I32EnumAttrCase<"AllReduce", 38, "all_reduce">,
    I32EnumAttrCase<"AllGather", 39, "all_gather">,
    I32EnumAttrCase<"ReduceScatter", 40, "reduce_scatter">,
    I32EnumAttrCase<"AllToAll", 41, "all_to_all">,
    I32EnumAttrCase<"AllSlice", 42, "all_slice">,
    I32EnumAttrCase<"Send", 43, "send">,
    I32EnumAttrCase<"Recv", 44, "recv">,
    I32EnumAttrCase<"LogSumExp", 45, "logsumexp">,
    I32EnumAttrCase<"Values", 46, "values">
  ]> {
  let cppNamespace = "::triad::rt";
}

def Rt_Role : I32EnumAttr<"Role", "role of a persistent tensor", [
    I32EnumAttrCase<"Parameter", 0, "parameter">,
    I32EnumAttrCase<"State", 1, "state">,
    I32EnumAttrCase<"Accumulator", 2, "accumulator">
  ]> {
  let cppNamespace = "::triad::rt";
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Rt_Buffer : Type<And<[StaticShapeMemRefOf<[F32, BF16, F16, I32]>.predicate,
                          CPred<"::llvm::cast<::mlir::MemRefType>($_self).getLayout().isIdentity()">]>,
                     "statically shaped, contiguous memref of f32, bf16, f16 or i32",
                     "::mlir::MemRefType">;

#endif // TRIAD_DIALECT_RT_BASE_TD
