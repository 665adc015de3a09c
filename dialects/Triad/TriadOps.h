//===- TriadOps.h - the triad model ops ---------------------------*- C++
//-*-===//
//
// Declares the ops of the `triad` dialect and the shape rules shared by their
// verifiers and builders.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECTS_TRIAD_TRIADOPS_H
#define TRIAD_DIALECTS_TRIAD_TRIADOPS_H

#include "dialects/Triad/TriadDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Triad/ShardingRule.h"

#include <optional>

namespace triad {
/// `op` rebuilt on other operands with other result types, its attributes
/// kept (except the layouts of its results) and no regions.
mlir::Operation *cloneWithTypes(mlir::OpBuilder &builder, mlir::Operation *op,
                                mlir::ValueRange operands,
                                mlir::TypeRange resultTypes);

/// The cost model's defaults (CostOpInterface): the elements of `op`'s
/// statically shaped tensor results; the bytes of its statically shaped
/// tensor operands and results.
double resultElements(mlir::Operation *op);
double tensorBytes(mlir::Operation *op);
/// The bytes of the statically shaped tensors among `types`.
double tensorBytes(mlir::TypeRange types);

/// The products an op runs on matrix units (CostOpInterface::
/// getContraction): `batch` independent products of an [m, k] matrix by a
/// [k, n] one, as the kernels run them (a weight shared by the batch
/// stacks its rows into one product). For attention, batch is samples x
/// query heads, m the queries, n the keys and k the head size.
struct Contraction {
  enum class Kind { Product, Attention, AttentionGrad };
  Kind kind;
  int64_t batch, m, n, k;
};
} // namespace triad

#include "dialects/Triad/TriadInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Triad/TriadOps.h.inc"

namespace triad {

/// Reports a shape error; returns the diagnostic so callers can stream more.
/// A null function means "do not report" (builders inferring a type).
using ShapeErrorFn = llvm::function_ref<mlir::InFlightDiagnostic()>;

/// The shape rules of the ops whose result type follows from their operands.
/// Each returns the result type, or failure after reporting through
/// `emitError` (when given) what disagrees, naming operand and dimension.
mlir::FailureOr<mlir::RankedTensorType>
inferEmbeddingType(mlir::RankedTensorType ids, mlir::RankedTensorType table,
                   ShapeErrorFn emitError);
mlir::FailureOr<mlir::RankedTensorType>
inferMatmulType(mlir::RankedTensorType lhs, mlir::RankedTensorType rhs,
                bool transposeLhs, bool transposeRhs, ShapeErrorFn emitError);
mlir::FailureOr<mlir::RankedTensorType>
inferTransposeType(mlir::RankedTensorType x, llvm::ArrayRef<int64_t> perm,
                   ShapeErrorFn emitError);
mlir::FailureOr<mlir::RankedTensorType>
inferSliceType(mlir::RankedTensorType x, llvm::ArrayRef<int64_t> offsets,
               llvm::ArrayRef<int64_t> sizes, ShapeErrorFn emitError);

/// A layer's name in traces and profiles: its kind and index, and
/// "backward" for the gradient's ("transformer 3", "head 0 backward").
std::string layerName(LayerOp layer);

/// The discardable attribute (a string) that keeps that name on an op
/// taken out of its layer (--triad-pipeline-materialize's stage functions).
inline constexpr llvm::StringLiteral kLayerNameAttr = "triad.layer_name";

/// The unit attribute of `@apply_step`'s argument that holds the step's
/// 1 / tokens, where the gradients arrive as token sums
/// (--triad-autodiff=fold-token-mean).
inline constexpr llvm::StringLiteral kMeanScaleAttrName = "triad.mean_scale";

} // namespace triad

#endif // TRIAD_DIALECTS_TRIAD_TRIADOPS_H
