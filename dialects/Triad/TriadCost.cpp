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

double triad::tensorBytes(TypeRange types) {
  double total = 0;
  for (Type type : types)
    total += bytes(type);
  return total;
}

double triad::tensorBytes(Operation *op) {
  return tensorBytes(op->getOperandTypes()) + tensorBytes(op->getResultTypes());
}

/// Two operations (a multiply and an add) per product term: M N K per
/// matrix of the batch.
double MatmulOp::getFlops() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  int64_t k = lhs.getDimSize(lhs.getRank() - (getTransposeLhs() ? 2 : 1));
  return 2.0 * elements(getType()) * static_cast<double>(k);
}

/// The product as the kernels run it: `batch` products of [m, k] by
/// [k, n], except that a weight shared by the batch (a 2-d rhs, lhs not
/// transposed) stacks the batch's rows into one product.
std::optional<Contraction> MatmulOp::getContraction() {
  auto lhs = cast<RankedTensorType>(getLhs().getType());
  auto result = cast<RankedTensorType>(getType());
  int64_t rank = result.getRank();
  int64_t m = result.getDimSize(rank - 2), n = result.getDimSize(rank - 1);
  int64_t k = lhs.getDimSize(lhs.getRank() - (getTransposeLhs() ? 2 : 1));
  int64_t batch = 1;
  for (int64_t size : result.getShape().drop_back(2))
    batch *= size;
  if (cast<RankedTensorType>(getRhs().getType()).getRank() == 2 &&
      !getTransposeLhs()) {
    m *= batch;
    batch = 1;
  }
  return Contraction{Contraction::Kind::Product, batch, m, n, k};
}

namespace {
/// Attention's products over q [batch, seq, heads * d] and k [batch, kv
/// seq, kv heads * d]: per sample and query head, scores of [seq, d] by
/// [d, kv seq].
Contraction attentionShape(Value q, Value k, int64_t heads,
                           Contraction::Kind kind) {
  auto qType = cast<RankedTensorType>(q.getType());
  auto kType = cast<RankedTensorType>(k.getType());
  int64_t rank = qType.getRank();
  int64_t batch = heads;
  for (int64_t size : qType.getShape().drop_back(2))
    batch *= size;
  return Contraction{kind, batch, qType.getDimSize(rank - 2),
                     kType.getDimSize(kType.getRank() - 2),
                     qType.getDimSize(rank - 1) / heads};
}
} // namespace

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

std::optional<Contraction> AttentionOp::getContraction() {
  return attentionShape(getQ(), getK(), getHeads(),
                        Contraction::Kind::Attention);
}

/// Five products of the forward's size each, where the forward has two:
/// the scores again (the softmax is recomputed, FlashAttention-2's
/// backward), then the gradients of v, of the probabilities, of q and of
/// k.
double AttentionGradOp::getFlops() {
  auto q = cast<RankedTensorType>(getQ().getType());
  double seq = q.getRank() >= 2 ? q.getDimSize(q.getRank() - 2) : 1;
  return 2.5 * 4.0 * elements(q) * seq;
}

std::optional<Contraction> AttentionGradOp::getContraction() {
  return attentionShape(getQ(), getK(), getHeads(),
                        Contraction::Kind::AttentionGrad);
}

/// A reshape is a view of its operand's bytes (the lowering gives it the
/// same storage): it computes and moves nothing.
double ReshapeOp::getFlops() { return 0; }
double ReshapeOp::getBytes() { return 0; }
