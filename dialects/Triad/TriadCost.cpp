//===- TriadCost.cpp - the cost model of the triad ops --------------------===//
//
// FLOPs and bytes per op (CostOpInterface): the defaults, and the
// contractions that override them.
//
//===----------------------------------------------------------------------===//

#include "dialects/Triad/TriadOps.h"

using namespace mlir;
using namespace triad;

namespace {

/// Elements of a statically shaped tensor type; 0 for anything else.
double elements(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape()
             ? static_cast<double>(tensor.getNumElements())
             : 0;
}

double bytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  unsigned bits = tensor.getElementTypeBitWidth();
  return elements(type) * ((bits + 7) / 8);
}

} // namespace

double triad::resultElements(Operation *op) {
  double total = 0;
  for (Type type : op->getResultTypes())
    total += elements(type);
  return total;
}

double triad::tensorBytes(Operation *op) {
  double total = 0;
  for (Type type : op->getOperandTypes())
    total += bytes(type);
  for (Type type : op->getResultTypes())
    total += bytes(type);
  return total;
}

/// Two operations (a multiply and an add) per product term: M N K per
/// matrix of the batch.
double MatmulOp::getFlops() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  int64_t k = lhs.getDimSize(lhs.getRank() - (getTransposeLhs() ? 2 : 1));
  return 2.0 * elements(getType()) * static_cast<double>(k);
}

/// The two products (scores = q k^T, out = p v): 2 x 2 x batch x seq x seq
/// x heads x head_dim, that is 4 x (elements of q) x seq; the softmax is
/// small beside them. A causal mask would halve the useful work, but the
/// kernels compute whole tiles, so it is counted whole.
double AttentionOp::getFlops() {
  auto q = cast<RankedTensorType>(getQ().getType());
  double seq = q.getRank() >= 2 ? q.getDimSize(q.getRank() - 2) : 1;
  return 4.0 * elements(q) * seq;
}

/// A gather reads the ids and one table row per id (the result's size),
/// not the whole table, and writes the result.
double EmbeddingOp::getBytes() {
  return bytes(getIds().getType()) + 2 * bytes(getType());
}
