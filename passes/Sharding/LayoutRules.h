//===- LayoutRules.h - layouts of an op's values from its rule ----*- C++
//-*-===//
//
// Shared by the sharding passes: given the layouts of an op's operands,
// its sharding rule decides which factors are split over which mesh axes,
// the layouts the operands must have (a collective makes them so when they
// differ) and the layouts of the results.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_PASSES_SHARDING_LAYOUTRULES_H
#define TRIAD_PASSES_SHARDING_LAYOUTRULES_H

#include "dialects/Dist/DistDialect.h"
#include "dialects/Triad/TriadOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace triad::sharding {

struct LayoutDecision {
  /// The layout each operand must have when the op runs.
  llvm::SmallVector<dist::LayoutAttr> operands;
  llvm::SmallVector<dist::LayoutAttr> results;
  /// Per factor of the rule, the number of pieces it is split into, and
  /// the mesh axes that split it.
  llvm::SmallVector<int64_t> factorParts;
  llvm::SmallVector<llvm::SmallVector<llvm::StringRef>> factorAxes;
  /// A split an operand asked for that its factor's size does not allow:
  /// (operand, dimension, ranks), or none.
  std::optional<std::tuple<unsigned, int64_t, int64_t>> indivisible;
};

/// Decides the layouts of `op` from `operandLayouts` (one per operand). A
/// factor is split over the axes of the first operand dimension that splits
/// it, unless it is whole, the axes are taken or do not divide it: then
/// that operand is gathered. Operands marked in `parameters` (reads of
/// parameters) come first, then dimensions of factors a result keeps, then
/// the rest, each group in operand order. A partial operand stays partial
/// where the op is linear in it; otherwise it is reduced first: with
/// `scatterDim`, a pending activation ([batch, seq, hidden]) is
/// reduce-scattered along the factor of its dimension `scatterDim` when the
/// op can split that factor (sequence parallelism scatters along the
/// sequence, dimension 1).
///
/// `resultSplits` split factors that no operand has (the new dimensions of
/// a broadcast) over the given axes, where those are free and divide them:
/// each rank makes its own piece, with no communication.
using FactorSplit = std::pair<int64_t, llvm::SmallVector<llvm::StringRef>>;
LayoutDecision decideLayouts(const ShardingRule &rule,
                             llvm::ArrayRef<dist::LayoutAttr> operandLayouts,
                             dist::MeshOp mesh, mlir::MLIRContext *context,
                             llvm::ArrayRef<bool> parameters = {},
                             std::optional<int64_t> scatterDim = {},
                             llvm::ArrayRef<FactorSplit> resultSplits = {});

/// The splits `resultLayouts` (an op's recorded result layouts) give the
/// factors no operand of `rule` has, for decideLayouts' `resultSplits`.
llvm::SmallVector<FactorSplit>
resultOnlySplits(const ShardingRule &rule,
                 llvm::ArrayRef<dist::LayoutAttr> resultLayouts);

/// Whether `value` is a read of a parameter, directly or through the
/// collectives partitioning put on it.
bool readsParameter(mlir::Value value);

/// A replicated layout for `type` (rank 0 for non-tensors).
dist::LayoutAttr replicatedFor(mlir::Type type);

/// Whether some dimension of `layout` is split over `axis`.
bool splitsOver(dist::LayoutAttr layout, llvm::StringRef axis);

/// Whether `layout` splits or reduces over an axis of more than one rank.
bool isDistributed(dist::LayoutAttr layout, dist::MeshOp mesh);

/// `layout` of a tensor of `type` with the data-parallel axis `dp` added
/// to the first dimension whose size divides by the ranks of its axes with
/// `dp` appended (ZeRO's split of optimizer state, gradients and
/// parameters); where none divides, a padded split over `dp` of the largest
/// dimension no other axis splits, or, when other axes split every
/// dimension, of the largest of their pieces (`dp` innermost). Unchanged
/// when `dp` already splits a dimension or has one rank, or when every
/// piece has one element.
dist::LayoutAttr zeroShardedLayout(dist::LayoutAttr layout,
                                   mlir::RankedTensorType type,
                                   dist::MeshOp mesh);

/// `layout` with the data-parallel axis `dp` removed from every split: the
/// whole tensor a ZeRO-3 parameter is gathered into before use.
dist::LayoutAttr withoutZeroSplit(dist::LayoutAttr layout);

/// The module's mesh; when it has none, one named @mesh with axes dp, tp
/// and pp of the given sizes in `order` (slowest first). Errors (at the
/// module) when `order` does not list the three axes once each, or a size
/// is below 1, or an existing mesh disagrees with the sizes.
mlir::FailureOr<dist::MeshOp> getOrCreateMesh(mlir::ModuleOp module, int64_t dp,
                                              int64_t tp, int64_t pp,
                                              llvm::StringRef order);

/// Gives every tensor value of the module's functions a layout on `mesh`
/// (shard-propagate): the data arguments split their batch over
/// `batchAxis`. `funcs` are the functions, the microbatch step first. With
/// `sequenceSplit`, activations between forward layers are split along
/// their sequence over tp (sequence parallelism).
mlir::LogicalResult propagateLayouts(mlir::ModuleOp module, dist::MeshOp mesh,
                                     llvm::StringRef batchAxis,
                                     llvm::ArrayRef<mlir::func::FuncOp> funcs,
                                     bool sequenceSplit = false);

/// Rewrites `func` to local shapes on `mesh` with the collectives its
/// layouts need (partition); returns the number of collectives inserted.
/// Without `allowCollectives`, needing one is an error that says so. With
/// `sequenceSplit`, pending sums are reduce-scattered along the sequence
/// as shard-propagate decided with `sequenceSplit`.
mlir::FailureOr<int64_t>
partitionFunction(mlir::ModuleOp module, dist::MeshOp mesh,
                  mlir::func::FuncOp func, int64_t bucketBytes,
                  bool allowCollectives, bool sequenceSplit = false);

} // namespace triad::sharding

#endif // TRIAD_PASSES_SHARDING_LAYOUTRULES_H
