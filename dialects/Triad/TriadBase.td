//===- TriadBase.td - triad dialect, enums and attributes --*- tablegen -*-===//
//
// The `triad` dialect describes the forward graph of a transformer (L0) and,
// later, its training step (L1). This file holds the dialect definition, its
// enums, attributes and the type constraints shared by the ops.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECT_TRIAD_BASE_TD
#define TRIAD_DIALECT_TRIAD_BASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"

def Triad_Dialect : Dialect {
  let name = "triad";
  let cppNamespace = "::triad";
  let summary = "Transformer model graphs for distributed training";
  let description = [{
    The `triad` dialect holds a transformer model as the training compiler
    sees it: ranked tensors with global shapes, parameters as module-level
    symbols with their initialization, and the layer structure made explicit
    with `triad.layer` regions (embedding, transformer layer i, head). Every
    op verifies its shapes and element types; the sharding, pipeline and
    lowering passes all work on this form.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let useDefaultAttributePrinterParser = 1;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

// Model tensors have static shapes: the memory plan and the sharding rules
// are computed at compile time.
class Triad_StaticTensorOf<list<Type> elementTypes, list<int> ranks = []>
    : Type<And<[StaticShapeTensorOf<elementTypes>.predicate,
                !if(!empty(ranks), CPred<"true">, HasAnyRankOfPred<ranks>)]>,
           !if(!empty(ranks), "",
               !interleave(ranks, "/") # "D ") #
           "statically shaped tensor of " #
           AnyTypeOf<elementTypes>.summary # " values",
           "::mlir::RankedTensorType">;

def Triad_FloatTensor : Triad_StaticTensorOf<[F32, BF16, F16]>;
def Triad_FloatVector : Triad_StaticTensorOf<[F32, BF16, F16], [1]>;
def Triad_FloatMatrix : Triad_StaticTensorOf<[F32, BF16, F16], [2]>;
def Triad_IdTensor : Triad_StaticTensorOf<[I32]>;
def Triad_IdVector : Triad_StaticTensorOf<[I32], [1]>;
def Triad_AnyTensor : Triad_StaticTensorOf<[F32, BF16, F16, I32]>;
def Triad_ScalarF32Tensor : Triad_StaticTensorOf<[F32], [0]> {
  let builderCall = "::mlir::RankedTensorType::get({}, $_builder.getF32Type())";
}
def Triad_VectorF32Tensor : Triad_StaticTensorOf<[F32], [1]>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Triad_InitKind : I32EnumAttr<"InitKind", "parameter initialization", [
    I32EnumAttrCase<"normal", 0>,
    I32EnumAttrCase<"scaled_normal", 1>,
    I32EnumAttrCase<"zeros", 2>,
    I32EnumAttrCase<"ones", 3>,
    I32EnumAttrCase<"constant", 4>,
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::triad";
}

def Triad_LayerKind : I32EnumAttr<"LayerKind", "part of the model", [
    I32EnumAttrCase<"embedding", 0>,
    I32EnumAttrCase<"transformer", 1>,
    I32EnumAttrCase<"head", 2>,
  ]> {
  let cppNamespace = "::triad";
}

def Triad_MaskKind : I32EnumAttr<"MaskKind", "attention mask", [
    I32EnumAttrCase<"causal", 0>,
    I32EnumAttrCase<"prefix", 1>,
    I32EnumAttrCase<"none", 2>,
  ]> {
  let cppNamespace = "::triad";
}

def Triad_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "approximation of the GELU activation", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"tanh", 1>,
  ]> {
  let cppNamespace = "::triad";
}

def Triad_ActivationKind : I32EnumAttr<"ActivationKind",
    "elementwise activation whose derivative activation_grad applies", [
    I32EnumAttrCase<"gelu", 0>,
    I32EnumAttrCase<"gelu_tanh", 1>,
    I32EnumAttrCase<"fast_gelu", 2>,
    I32EnumAttrCase<"relu", 3>,
    I32EnumAttrCase<"silu", 4>,
  ]> {
  let cppNamespace = "::triad";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Triad_InitAttr : AttrDef<Triad_Dialect, "Init"> {
  let mnemonic = "init";
  let summary = "How a parameter's elements are initialized";
  let description = [{
    The initialization of a parameter, evaluated per element from
    (seed, parameter name, global element index) by a counter-based
    generator, so that every slice of the tensor gets the same values on
    every mesh.

    - `normal, std = S`: normal with mean 0 and standard deviation S.
    - `scaled_normal, std = S, layers = L`: GPT-2's initialization of the
      residual output projections, normal with std S / sqrt(2 * L).
    - `zeros`, `ones`, `constant, value = C`: constants (the last for
      training state such as the initial loss scale).

    Example:

    ```mlir
    triad.param @layers.0.attn.wo : tensor<64x64xf32>
        init <scaled_normal, std = 2.000000e-02, layers = 2>
    ```
  }];
  let parameters = (ins
    "::triad::InitKind":$kind,
    APFloatParameter<"standard deviation (normal kinds) or value (constant)">:$std,
    "int64_t":$layers
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The standard deviation actually applied to the elements (normal kinds).
    double getEffectiveStd() const;
    /// The value of every element (constant kinds: zeros, ones, constant).
    double getConstantValue() const;
  }];
}

#endif // TRIAD_DIALECT_TRIAD_BASE_TD
