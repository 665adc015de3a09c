//===- ShardingRule.h - how an op's computation splits over a mesh -*- C++
//-*-===//
//
// The sharding rule of a triad op, in factors: every dimension of every
// operand and result is one factor of the op's iteration space (or none),
// and dimensions that share a factor are split together. Splitting a factor
// over mesh axes splits each dimension it maps to; a result without that
// factor (a contraction, a sum, the loss over a split batch) becomes partial
// over those axes. `Whole` factors (a normalized dimension, the sequence of
// attention, a sliced dimension) must not be split: the sharding passes
// gather them first.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_DIALECTS_TRIAD_SHARDINGRULE_H
#define TRIAD_DIALECTS_TRIAD_SHARDINGRULE_H

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <utility>

namespace triad {

class ShardingRule {
public:
  /// A dimension that belongs to no factor (a broadcast dimension, or one
  /// the op cannot split): it must stay whole.
  static constexpr int64_t kNoFactor = -1;

  enum class Linearity {
    /// A partial operand must be reduced before the op.
    None,
    /// The results are linear in each operand listed in `linearOperands`
    /// while the others are fixed: one partial operand among them passes
    /// its partial axes on (matmul, mul, a gradient rule in its dy).
    Each,
    /// The results are linear in all tensor operands together: operands
    /// partial over the same axes pass them on (add, concat).
    Joint,
  };

  /// Adds a factor of `size` elements; `whole` factors are never split.
  int64_t addFactor(int64_t size, bool whole = false) {
    sizes.push_back(size);
    wholeFactors.push_back(whole);
    return sizes.size() - 1;
  }
  void addOperand(llvm::ArrayRef<int64_t> dims) {
    operands.emplace_back(dims.begin(), dims.end());
  }
  void addResult(llvm::ArrayRef<int64_t> dims) {
    results.emplace_back(dims.begin(), dims.end());
  }

  llvm::SmallVector<int64_t> sizes;
  llvm::SmallVector<bool> wholeFactors;
  /// Per operand and result, the factor of each dimension.
  llvm::SmallVector<llvm::SmallVector<int64_t>> operands, results;
  Linearity linearity = Linearity::None;
  llvm::SmallVector<unsigned> linearOperands;
  /// Megatron's tensor parallelism where it does not follow from the
  /// contraction pattern: (operand, dimension) of a weight to split over tp
  /// when the op is its first reader (the embedding's vocabulary rows).
  llvm::SmallVector<std::pair<unsigned, int64_t>> tensorParallelSplits;
  /// Factors whose split the op's local form completes itself, through the
  /// collectives it builds (`LocalCollectives`): a result without such a
  /// factor is whole, not pending over its axes (the loss of a
  /// vocab-parallel cross entropy).
  llvm::SmallVector<int64_t> combinedFactors;

  /// Factors of the results only (no operand has them: each rank can make
  /// any piece of them without communication) and the split they take when
  /// it is free. A batch factor splits as the step's batch when its size is
  /// the batch's (a broadcast repeating a tensor for every sample); a
  /// parameter factor splits as dimension `dim` of parameter `param` is
  /// (an embedding's gradient takes its table's vocabulary split).
  llvm::SmallVector<int64_t> batchFactors;
  struct ParameterSplit {
    int64_t factor;
    llvm::StringRef param;
    int64_t dim;
  };
  llvm::SmallVector<ParameterSplit> parameterSplits;

  /// The op computes correctly on zero-padded pieces: zeros in every
  /// operand's padding give zeros in the results' padding and add nothing
  /// to a reduction (the optimizer update, a sum of squares). Its factors
  /// may then take a padded split over one axis (ZeRO's pieces of a
  /// dimension the data-parallel ranks do not divide).
  bool acceptsPadding = false;
};

/// The collectives a local form needs within its own computation (the
/// vocab-parallel cross entropy combines the pieces of its softmax
/// denominator): the op says what it needs, the partition pass builds it
/// on the mesh. Each returns the collective's result.
class LocalCollectives {
public:
  virtual ~LocalCollectives() = default;
  /// The pieces of `value` of every rank of the group over `axes`,
  /// concatenated along `dim` in the group's order. `reason` says why, for
  /// the communication report.
  virtual mlir::Value allGather(mlir::OpBuilder &builder, mlir::Location loc,
                                mlir::Value value, int64_t dim,
                                llvm::ArrayRef<llvm::StringRef> axes,
                                llvm::StringRef reason) = 0;
  /// The sum of `value` over the ranks of the group over `axes`.
  virtual mlir::Value allReduce(mlir::OpBuilder &builder, mlir::Location loc,
                                mlir::Value value,
                                llvm::ArrayRef<llvm::StringRef> axes,
                                llvm::StringRef reason) = 0;
};

} // namespace triad

#endif // TRIAD_DIALECTS_TRIAD_SHARDINGRULE_H
