//===- TriadShapes.cpp - shape rules of the triad ops ---------------------===//
//
// The result-type rules shared by op verifiers (which report what disagrees)
// and builders (which infer the result type).
//
//===----------------------------------------------------------------------===//

#include "dialects/Triad/TriadOps.h"

#include "llvm/ADT/SmallBitVector.h"

using namespace mlir;
using namespace triad;

namespace {
/// Forwards to the error callback when there is one; a silent failure
/// otherwise (builders).
struct ShapeError {
  ShapeErrorFn emitError;
  FailureOr<RankedTensorType>
  operator()(llvm::function_ref<void(InFlightDiagnostic &)> describe) const {
    if (emitError) {
      InFlightDiagnostic diag = emitError();
      describe(diag);
    }
    return failure();
  }
};
} // namespace

FailureOr<RankedTensorType> triad::inferEmbeddingType(RankedTensorType ids,
                                                      RankedTensorType table,
                                                      ShapeErrorFn emitError) {
  ShapeError fail{emitError};
  if (table.getRank() != 2)
    return fail([&](InFlightDiagnostic &d) {
      d << "table must have rank 2 [vocab, hidden], got rank "
        << table.getRank();
    });
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  return RankedTensorType::get(shape, table.getElementType());
}

FailureOr<RankedTensorType> triad::inferMatmulType(RankedTensorType lhs,
                                                   RankedTensorType rhs,
                                                   bool transposeLhs,
                                                   bool transposeRhs,
                                                   ShapeErrorFn emitError) {
  ShapeError fail{emitError};
  int64_t lhsRank = lhs.getRank(), rhsRank = rhs.getRank();
  if (lhsRank < 2)
    return fail([&](InFlightDiagnostic &d) {
      d << "lhs must have rank >= 2, got rank " << lhsRank;
    });
  if (rhsRank != 2 && rhsRank != lhsRank)
    return fail([&](InFlightDiagnostic &d) {
      d << "rhs must have rank 2 or the rank of lhs (" << lhsRank
        << "), got rank " << rhsRank;
    });
  if (lhs.getElementType() != rhs.getElementType())
    return fail([&](InFlightDiagnostic &d) {
      d << "element types differ: lhs has " << lhs.getElementType()
        << " but rhs has " << rhs.getElementType();
    });
  int64_t lhsRowDim = transposeLhs ? lhsRank - 1 : lhsRank - 2;
  int64_t lhsContractDim = transposeLhs ? lhsRank - 2 : lhsRank - 1;
  int64_t rhsContractDim = transposeRhs ? rhsRank - 1 : rhsRank - 2;
  int64_t rhsColDim = transposeRhs ? rhsRank - 2 : rhsRank - 1;
  int64_t lhsK = lhs.getDimSize(lhsContractDim);
  int64_t rhsK = rhs.getDimSize(rhsContractDim);
  if (lhsK != rhsK)
    return fail([&](InFlightDiagnostic &d) {
      d << "contracting dimension mismatch: lhs dim " << lhsContractDim
        << " is " << lhsK << " but rhs dim " << rhsContractDim << " is "
        << rhsK;
    });
  if (rhsRank == lhsRank) {
    for (int64_t i = 0; i < lhsRank - 2; ++i) {
      if (lhs.getDimSize(i) != rhs.getDimSize(i))
        return fail([&](InFlightDiagnostic &d) {
          d << "batch dimension mismatch: lhs dim " << i << " is "
            << lhs.getDimSize(i) << " but rhs dim " << i << " is "
            << rhs.getDimSize(i);
        });
    }
  }
  SmallVector<int64_t> shape(lhs.getShape().take_front(lhsRank - 2));
  shape.push_back(lhs.getDimSize(lhsRowDim));
  shape.push_back(rhs.getDimSize(rhsColDim));
  return RankedTensorType::get(shape, lhs.getElementType());
}

FailureOr<RankedTensorType> triad::inferTransposeType(RankedTensorType x,
                                                      ArrayRef<int64_t> perm,
                                                      ShapeErrorFn emitError) {
  ShapeError fail{emitError};
  int64_t rank = x.getRank();
  if (static_cast<int64_t>(perm.size()) != rank)
    return fail([&](InFlightDiagnostic &d) {
      d << "permutation has " << perm.size()
        << " entries but the operand has rank " << rank;
    });
  llvm::SmallBitVector seen(rank);
  SmallVector<int64_t> shape;
  for (auto [i, p] : llvm::enumerate(perm)) {
    if (p < 0 || p >= rank)
      return fail([&](InFlightDiagnostic &d) {
        d << "permutation entry " << i << " is " << p << ", outside [0, "
          << rank << ")";
      });
    if (seen.test(p))
      return fail([&](InFlightDiagnostic &d) {
        d << "permutation entry " << i << " repeats dimension " << p;
      });
    seen.set(p);
    shape.push_back(x.getDimSize(p));
  }
  return RankedTensorType::get(shape, x.getElementType());
}

FailureOr<RankedTensorType> triad::inferSliceType(RankedTensorType x,
                                                  ArrayRef<int64_t> offsets,
                                                  ArrayRef<int64_t> sizes,
                                                  ShapeErrorFn emitError) {
  ShapeError fail{emitError};
  int64_t rank = x.getRank();
  if (static_cast<int64_t>(offsets.size()) != rank ||
      static_cast<int64_t>(sizes.size()) != rank)
    return fail([&](InFlightDiagnostic &d) {
      d << "offsets and sizes need one entry per dimension (" << rank
        << "), got " << offsets.size() << " and " << sizes.size();
    });
  for (int64_t i = 0; i < rank; ++i) {
    if (sizes[i] <= 0)
      return fail([&](InFlightDiagnostic &d) {
        d << "slice of dim " << i << " has size " << sizes[i]
          << "; sizes must be positive";
      });
    if (offsets[i] < 0 || offsets[i] > x.getDimSize(i) - sizes[i])
      return fail([&](InFlightDiagnostic &d) {
        d << "slice of dim " << i << " at offset " << offsets[i]
          << " with size " << sizes[i] << " is outside [0, " << x.getDimSize(i)
          << ")";
      });
  }
  return RankedTensorType::get(sizes, x.getElementType());
}
