//===- DistDialect.h - the dist mesh and layout dialect ------------*- C++
//-*-===//
//
// Declares the `dist` dialect (L2): the device mesh, tensor layouts over it
// and the collectives between layouts.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECTS_DIST_DISTDIALECT_H
#define TRIAD_DIALECTS_DIST_DISTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Dist/DistDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Dist/DistAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Dist/DistOps.h.inc"

namespace triad::dist {

/// Checks `layout` against `mesh` and, when `globalType` is given, against
/// the global tensor type it lays out: as many dimensions, axes of the
/// mesh, no axis twice, every split dimension divisible by its axes. With
/// `allowPadded`, the innermost axis of a dimension's split need not divide
/// the pieces of the axes before it (a padded split: ZeRO's pieces), which
/// must divide the dimension. Reports through `emitError`.
mlir::LogicalResult
verifyLayout(LayoutAttr layout, MeshOp mesh, mlir::RankedTensorType globalType,
             llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
             bool allowPadded = false);

/// The size of each of `parts` pieces of a dimension of `size`: the pieces
/// of a padded split have ceil(size / parts) elements, the last ones
/// zero-padded past `size`. The same for a split over several axes whose
/// innermost pads the pieces of the others: ceil(ceil(size / a) / b) is
/// ceil(size / (a b)).
int64_t pieceSize(int64_t size, int64_t parts);

/// The local type of a rank's piece of `globalType` under `layout` (a
/// padded split's piece size where a split does not divide).
mlir::RankedTensorType localType(mlir::RankedTensorType globalType,
                                 LayoutAttr layout, MeshOp mesh);

/// The layouts of `op`'s results (`dist.layouts`), or an empty list.
llvm::SmallVector<LayoutAttr> getResultLayouts(mlir::Operation *op);
void setResultLayouts(mlir::Operation *op, llvm::ArrayRef<LayoutAttr> layouts);

} // namespace triad::dist

#endif // TRIAD_DIALECTS_DIST_DISTDIALECT_H
