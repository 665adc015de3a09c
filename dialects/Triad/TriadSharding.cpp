//===- TriadSharding.cpp - sharding rules of the triad ops ----------------===//
//
// The ShardingRuleOpInterface of every computing op: its factors, which
// of them must stay whole and where it is linear. Ops whose attributes
// count heads or slice sizes also build their local form.
//
//===----------------------------------------------------------------------===//

#include "dialects/Triad/TriadOps.h"

#include <numeric>

#include "mlir/IR/Builders.h"

#include <type_traits>

using namespace mlir;
using namespace triad;

using Linearity = ShardingRule::Linearity;
static constexpr int64_t kNone = ShardingRule::kNoFactor;

Operation *triad::cloneWithTypes(OpBuilder &builder, Operation *op,
                                 ValueRange operands, TypeRange resultTypes) {
  OperationState state(op->getLoc(), op->getName());
  state.addOperands(operands);
  state.addTypes(resultTypes);
  for (NamedAttribute attr : op->getAttrs())
    if (attr.getName().getValue() != "dist.layouts")
      state.addAttribute(attr.getName(), attr.getValue());
  return builder.create(state);
}

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<ShapedType>(value.getType()).getShape();
}

/// One new factor per dimension of `shape`.
SmallVector<int64_t> newFactors(ShardingRule &rule, ArrayRef<int64_t> shape,
                                bool whole = false) {
  SmallVector<int64_t> factors;
  for (int64_t size : shape)
    factors.push_back(rule.addFactor(size, whole));
  return factors;
}

/// The factors of the trailing `rank` dimensions of `factors`.
SmallVector<int64_t> trailing(ArrayRef<int64_t> factors, int64_t rank) {
  return SmallVector<int64_t>(factors.drop_front(factors.size() - rank));
}

/// Ops whose operands share the trailing dimensions of the first result
/// (same shape, a trailing vector such as a bias, or a scalar), one factor
/// per dimension of the result.
ShardingRule elementwise(Operation *op, Linearity linearity = Linearity::None,
                         ArrayRef<unsigned> linearOperands = {}) {
  ShardingRule rule;
  SmallVector<int64_t> factors = newFactors(rule, shapeOf(op->getResult(0)));
  for (Value operand : op->getOperands())
    rule.addOperand(trailing(factors, shapeOf(operand).size()));
  for (Value result : op->getResults())
    rule.addResult(trailing(factors, shapeOf(result).size()));
  rule.linearity = linearity;
  rule.linearOperands.assign(linearOperands.begin(), linearOperands.end());
  return rule;
}

/// Marks the factors of the last `count` dimensions of `factors` whole.
void keepWhole(ShardingRule &rule, ArrayRef<int64_t> factors, int64_t count) {
  for (int64_t factor : factors.take_back(count))
    rule.wholeFactors[factor] = true;
}

/// Normalizations over the last dimension: x[..., h], vectors [h].
ShardingRule normalization(Operation *op, Linearity linearity = Linearity::None,
                           ArrayRef<unsigned> linearOperands = {}) {
  ShardingRule rule = elementwise(op, linearity, linearOperands);
  keepWhole(rule, rule.results[0], 1);
  return rule;
}

/// Attention-like ops: [batch, seq, heads * head_dim] tensors split by
/// batch and by groups of heads (a query group shares one kv head, so the
/// kv heads count the groups); the sequence stays whole.
ShardingRule attentionRule(Operation *op, int64_t kvHeads, Value prefix,
                           Value slopes) {
  ShardingRule rule;
  ArrayRef<int64_t> q = shapeOf(op->getOperand(0));
  int64_t batch = rule.addFactor(q[0]);
  int64_t seq = rule.addFactor(q[1], /*whole=*/true);
  int64_t groups = rule.addFactor(kvHeads);
  for (Value operand : op->getOperands()) {
    if (operand == prefix)
      rule.addOperand({batch});
    else if (operand == slopes)
      rule.addOperand({groups});
    else
      rule.addOperand({batch, seq, groups});
  }
  for (unsigned i = 0; i < op->getNumResults(); ++i)
    rule.addResult({batch, seq, groups});
  return rule;
}

/// The number of pieces of the head-group factor of an attention-like op.
int64_t headParts(ArrayRef<int64_t> factorParts) {
  return factorParts.size() > 2 ? factorParts[2] : 1;
}

} // namespace

//===----------------------------------------------------------------------===//
// Embedding and matmul
//===----------------------------------------------------------------------===//

/// The mesh axes that split the vocabulary of an embedding or a cross
/// entropy, whose factors are those of the `tokens` (ids or labels)
/// dimensions, then the vocabulary; none where it is whole.
static ArrayRef<StringRef>
vocabSplitAxes(Value tokens, ArrayRef<int64_t> factorParts,
               ArrayRef<SmallVector<StringRef>> factorAxes) {
  int64_t vocab = cast<RankedTensorType>(tokens.getType()).getRank();
  if (factorParts[vocab] == 1)
    return {};
  return factorAxes[vocab];
}

// The vocabulary is a contraction (the lookup is one-hot(ids) x table):
// split, each piece looks up the ids in its rows and the result is a
// pending sum over the splitting axes (vocab-parallel embedding). Tensor
// parallelism splits the table along its vocabulary where tp divides it,
// tied or not (see shard-propagate).
ShardingRule EmbeddingOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> ids = newFactors(rule, shapeOf(getIds()));
  ArrayRef<int64_t> table = shapeOf(getTable());
  // A local form already holds one piece of the vocabulary.
  int64_t vocab =
      rule.addFactor(table[0], /*whole=*/getVocabAxes().has_value());
  int64_t hidden = rule.addFactor(table[1]);
  rule.addOperand(ids);
  rule.addOperand({vocab, hidden});
  SmallVector<int64_t> result = ids;
  result.push_back(hidden);
  rule.addResult(result);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {1};
  rule.tensorParallelSplits = {{1, 0}};
  return rule;
}

Operation *EmbeddingOp::buildLocal(OpBuilder &builder, ValueRange operands,
                                   TypeRange resultTypes,
                                   ArrayRef<int64_t> factorParts,
                                   ArrayRef<SmallVector<StringRef>> factorAxes,
                                   LocalCollectives &) {
  auto local =
      cast<EmbeddingOp>(cloneWithTypes(builder, *this, operands, resultTypes));
  ArrayRef<StringRef> axes = vocabSplitAxes(getIds(), factorParts, factorAxes);
  if (!axes.empty())
    local.setVocabAxesAttr(builder.getStrArrayAttr(axes));
  return local;
}

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  int64_t rank = lhs.size();
  SmallVector<int64_t> batch = newFactors(rule, lhs.take_front(rank - 2));
  int64_t rowDim = getTransposeLhs() ? rank - 1 : rank - 2;
  int64_t row = rule.addFactor(lhs[rowDim]);
  int64_t contract =
      rule.addFactor(lhs[getTransposeLhs() ? rank - 2 : rank - 1]);
  int64_t rhsRank = rhs.size();
  int64_t col =
      rule.addFactor(rhs[getTransposeRhs() ? rhsRank - 2 : rhsRank - 1]);
  SmallVector<int64_t> lhsDims = batch;
  lhsDims.append(getTransposeLhs() ? SmallVector<int64_t>{contract, row}
                                   : SmallVector<int64_t>{row, contract});
  SmallVector<int64_t> rhsDims =
      rhsRank == rank ? batch : SmallVector<int64_t>();
  rhsDims.append(getTransposeRhs() ? SmallVector<int64_t>{col, contract}
                                   : SmallVector<int64_t>{contract, col});
  SmallVector<int64_t> result = batch;
  result.append({row, col});
  rule.addOperand(lhsDims);
  rule.addOperand(rhsDims);
  rule.addResult(result);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0, 1};
  return rule;
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

ShardingRule AddOp::getShardingRule() {
  return elementwise(*this, Linearity::Joint);
}
ShardingRule MulOp::getShardingRule() {
  return elementwise(*this, Linearity::Each, {0, 1});
}
ShardingRule ScaleOp::getShardingRule() {
  return elementwise(*this, Linearity::Each, {0});
}
ShardingRule BiasAddOp::getShardingRule() {
  return elementwise(*this, Linearity::Joint);
}
ShardingRule GeluOp::getShardingRule() { return elementwise(*this); }
ShardingRule FastGeluOp::getShardingRule() { return elementwise(*this); }
ShardingRule ReluOp::getShardingRule() { return elementwise(*this); }
ShardingRule SiluOp::getShardingRule() { return elementwise(*this); }
ShardingRule SwigluOp::getShardingRule() { return elementwise(*this); }
ShardingRule GegluOp::getShardingRule() { return elementwise(*this); }
ShardingRule CastOp::getShardingRule() {
  // A widening cast is exact, so a pending sum passes through it and is
  // reduced in the wider type (16-bit gradients sum in f32); a narrowing
  // one would round the pieces before their sum.
  auto width = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementTypeBitWidth();
  };
  bool widening = getX().getType() != getType() &&
                  isa<FloatType>(getElementTypeOrSelf(getX().getType())) &&
                  isa<FloatType>(getElementTypeOrSelf(getType())) &&
                  width(getX()) < width(getResult());
  ShardingRule rule =
      widening ? elementwise(*this, Linearity::Each, {0}) : elementwise(*this);
  // Zero casts to zero: ZeRO's padded pieces (an f32 master piece rounded
  // to its 16-bit parameter) cast as they are.
  rule.acceptsPadding = true;
  return rule;
}
ShardingRule ActivationGradOp::getShardingRule() {
  return elementwise(*this, Linearity::Each, {1});
}
ShardingRule SelectOp::getShardingRule() {
  // Choosing between zeros gives zeros: f16's skip-or-update of ZeRO's
  // padded pieces selects as it is.
  ShardingRule rule = elementwise(*this);
  rule.acceptsPadding = true;
  return rule;
}
ShardingRule AdamWUpdateOp::getShardingRule() {
  // Zero parameter, gradient and moments stay zero: padded pieces update.
  ShardingRule rule = elementwise(*this);
  rule.acceptsPadding = true;
  return rule;
}

// Dropout's mask is a function of the global element index. A piece of the
// batch (the leading dimension) is a contiguous run of global indices that
// its local form finds from its index (batch_split); in a tensor of rank 3
// or more, a piece of the sequence (dimension 1) is a run per sample, at a
// stride the local form finds from its index too (seq_split). Other pieces
// would be runs within runs, so the remaining dimensions stay whole.
ShardingRule DropoutOp::getShardingRule() {
  ShardingRule rule = elementwise(*this);
  ArrayRef<int64_t> factors = rule.results[0];
  if (!factors.empty())
    keepWhole(rule, factors, factors.size() - (factors.size() >= 3 ? 2 : 1));
  return rule;
}

Operation *DropoutOp::buildLocal(OpBuilder &builder, ValueRange operands,
                                 TypeRange resultTypes,
                                 ArrayRef<int64_t> factorParts,
                                 ArrayRef<SmallVector<StringRef>> factorAxes,
                                 LocalCollectives &) {
  auto local =
      cast<DropoutOp>(cloneWithTypes(builder, *this, operands, resultTypes));
  if (getType().getRank() == 0)
    return local;
  ArrayRef<int64_t> factors = getShardingRule().results[0];
  // A local form split again (microbatches first, then dp) adds its axes.
  auto addAxes = [&](std::optional<ArrayAttr> previous, int64_t factor) {
    SmallVector<StringRef> axes;
    if (previous)
      llvm::append_range(axes, previous->getAsValueRange<StringAttr>());
    llvm::append_range(axes, factorAxes[factor]);
    return builder.getStrArrayAttr(axes);
  };
  if (factorParts[factors[0]] != 1)
    local.setBatchAxesAttr(addAxes(getBatchAxes(), factors[0]));
  if (factors.size() >= 3 && factorParts[factors[1]] != 1)
    local.setSeqAxesAttr(addAxes(getSeqAxes(), factors[1]));
  return local;
}

//===----------------------------------------------------------------------===//
// Normalization, attention, rotary embeddings
//===----------------------------------------------------------------------===//

ShardingRule LayerNormOp::getShardingRule() { return normalization(*this); }
ShardingRule RmsNormOp::getShardingRule() { return normalization(*this); }

// dx keeps the leading factors; dgamma has only the hidden one, so a split
// batch makes it partial.
static ShardingRule normalizationGrad(Operation *op) {
  ShardingRule rule;
  SmallVector<int64_t> factors = newFactors(rule, shapeOf(op->getOperand(0)));
  rule.wholeFactors[factors.back()] = true;
  rule.addOperand(factors);
  rule.addOperand({factors.back()});
  rule.addOperand(factors);
  rule.addResult(factors);
  rule.addResult({factors.back()});
  rule.linearity = Linearity::Each;
  rule.linearOperands = {2};
  return rule;
}
ShardingRule LayerNormGradOp::getShardingRule() {
  return normalizationGrad(*this);
}
ShardingRule RmsNormGradOp::getShardingRule() {
  return normalizationGrad(*this);
}

ShardingRule AttentionOp::getShardingRule() {
  return attentionRule(*this, getKvHeads(), getPrefixLengths(),
                       getAlibiSlopes());
}

/// `op` on local pieces with its head counts divided among the pieces of
/// the head-group factor.
template <typename AttentionLikeOp>
static Operation *withLocalHeads(OpBuilder &builder, AttentionLikeOp op,
                                 ValueRange operands, TypeRange resultTypes,
                                 ArrayRef<int64_t> factorParts) {
  Operation *local = cloneWithTypes(builder, op, operands, resultTypes);
  auto attention = cast<AttentionLikeOp>(local);
  int64_t parts = headParts(factorParts);
  attention.setHeads(op.getHeads() / parts);
  if constexpr (std::is_same_v<AttentionLikeOp, AttentionOp> ||
                std::is_same_v<AttentionLikeOp, AttentionGradOp>)
    attention.setKvHeads(op.getKvHeads() / parts);
  return local;
}

Operation *AttentionOp::buildLocal(OpBuilder &builder, ValueRange operands,
                                   TypeRange resultTypes,
                                   ArrayRef<int64_t> factorParts,
                                   ArrayRef<SmallVector<StringRef>> factorAxes,
                                   LocalCollectives &) {
  return withLocalHeads(builder, *this, operands, resultTypes, factorParts);
}

ShardingRule AttentionGradOp::getShardingRule() {
  ShardingRule rule =
      attentionRule(*this, getKvHeads(), getPrefixLengths(), getAlibiSlopes());
  rule.linearity = Linearity::Each;
  rule.linearOperands = {getNumOperands() - 1};
  return rule;
}

Operation *AttentionGradOp::buildLocal(
    OpBuilder &builder, ValueRange operands, TypeRange resultTypes,
    ArrayRef<int64_t> factorParts, ArrayRef<SmallVector<StringRef>> factorAxes,
    LocalCollectives &) {
  return withLocalHeads(builder, *this, operands, resultTypes, factorParts);
}

// Rotary embeddings rotate each head's features by the position, linearly:
// the sequence stays whole, heads split.
static ShardingRule ropeRule(Operation *op, int64_t heads) {
  ShardingRule rule;
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0));
  int64_t batch = rule.addFactor(x[0]);
  int64_t seq = rule.addFactor(x[1], /*whole=*/true);
  int64_t groups = rule.addFactor(heads);
  rule.addOperand({batch, seq, groups});
  rule.addResult({batch, seq, groups});
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  return rule;
}

ShardingRule RopeOp::getShardingRule() { return ropeRule(*this, getHeads()); }

Operation *RopeOp::buildLocal(OpBuilder &builder, ValueRange operands,
                              TypeRange resultTypes,
                              ArrayRef<int64_t> factorParts,
                              ArrayRef<SmallVector<StringRef>> factorAxes,
                              LocalCollectives &) {
  return withLocalHeads(builder, *this, operands, resultTypes, factorParts);
}

ShardingRule RopeGradOp::getShardingRule() {
  return ropeRule(*this, getHeads());
}

Operation *RopeGradOp::buildLocal(OpBuilder &builder, ValueRange operands,
                                  TypeRange resultTypes,
                                  ArrayRef<int64_t> factorParts,
                                  ArrayRef<SmallVector<StringRef>> factorAxes,
                                  LocalCollectives &) {
  return withLocalHeads(builder, *this, operands, resultTypes, factorParts);
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

// A reshape groups the dimensions of its input and result into runs of
// equal products (merging [b, s] into [b*s], or splitting it back). Only the
// outermost dimension of a run (of more than one element) carries a factor:
// splitting it splits the run's leading dimension on both sides into the
// same contiguous pieces. Other dimensions of a run stay whole.
ShardingRule ReshapeOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getX()), out = shapeOf(getResult());
  SmallVector<int64_t> inDims(in.size(), kNone), outDims(out.size(), kNone);
  size_t i = 0, o = 0;
  while (i < in.size() && o < out.size()) {
    int64_t inProduct = in[i], outProduct = out[o];
    size_t iEnd = i + 1, oEnd = o + 1;
    while (inProduct != outProduct) {
      if (inProduct < outProduct && iEnd < in.size())
        inProduct *= in[iEnd++];
      else if (outProduct < inProduct && oEnd < out.size())
        outProduct *= out[oEnd++];
      else
        break;
    }
    // The run's leading dimensions of more than one element carry the
    // factor; a split into n pieces is contiguous on both sides only when
    // n divides both, so the factor's size is their common divisor (a run
    // without one stays whole).
    size_t iLead = i, oLead = o;
    while (iLead + 1 < iEnd && in[iLead] == 1)
      ++iLead;
    while (oLead + 1 < oEnd && out[oLead] == 1)
      ++oLead;
    int64_t common = std::gcd(in[iLead], out[oLead]);
    int64_t factor = rule.addFactor(common, /*whole=*/common == 1);
    inDims[iLead] = factor;
    outDims[oLead] = factor;
    i = iEnd;
    o = oEnd;
  }
  rule.addOperand(inDims);
  rule.addResult(outDims);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  return rule;
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> in = newFactors(rule, shapeOf(getX()));
  SmallVector<int64_t> out;
  for (int64_t dim : getPermutation())
    out.push_back(in[dim]);
  rule.addOperand(in);
  rule.addResult(out);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  return rule;
}

// Sliced dimensions stay whole; the others pass through.
ShardingRule SliceOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getX());
  SmallVector<int64_t> dims;
  for (auto [dim, size] : llvm::enumerate(in))
    dims.push_back(rule.addFactor(size, getOffsets()[dim] != 0 ||
                                            getSizes()[dim] != size));
  rule.addOperand(dims);
  rule.addResult(dims);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  return rule;
}

Operation *SliceOp::buildLocal(OpBuilder &builder, ValueRange operands,
                               TypeRange resultTypes, ArrayRef<int64_t>,
                               ArrayRef<SmallVector<StringRef>>,
                               LocalCollectives &) {
  Operation *local = cloneWithTypes(builder, *this, operands, resultTypes);
  cast<SliceOp>(local).setSizes(cast<ShapedType>(resultTypes[0]).getShape());
  return local;
}

ShardingRule ConcatOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> dims = newFactors(rule, shapeOf(getResult()));
  rule.wholeFactors[dims[getDim()]] = true;
  for (unsigned i = 0; i < getInputs().size(); ++i)
    rule.addOperand(dims);
  rule.addResult(dims);
  rule.linearity = Linearity::Joint;
  return rule;
}

// Dimensions of the result that repeat the input (new leading ones, or
// ones expanded from 1) have no factor in the input: splitting them keeps
// the input whole.
ShardingRule BroadcastOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getX()), out = shapeOf(getResult());
  SmallVector<int64_t> outDims = newFactors(rule, out);
  SmallVector<int64_t> inDims;
  size_t offset = out.size() - in.size();
  for (auto [dim, size] : llvm::enumerate(in))
    inDims.push_back(size == out[offset + dim] ? outDims[offset + dim] : kNone);
  rule.addOperand(inDims);
  rule.addResult(outDims);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  // A new leading dimension may be the batch: each piece of the batch makes
  // its own samples' copies.
  if (offset > 0)
    rule.batchFactors = {outDims[0]};
  return rule;
}

ShardingRule PadOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getX()), out = shapeOf(getResult());
  SmallVector<int64_t> inDims, outDims;
  for (auto [dim, size] : llvm::enumerate(in)) {
    if (size == out[dim]) {
      int64_t factor = rule.addFactor(size);
      inDims.push_back(factor);
      outDims.push_back(factor);
    } else {
      inDims.push_back(rule.addFactor(size, /*whole=*/true));
      outDims.push_back(rule.addFactor(out[dim], /*whole=*/true));
    }
  }
  rule.addOperand(inDims);
  rule.addResult(outDims);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  return rule;
}

//===----------------------------------------------------------------------===//
// Reductions and losses
//===----------------------------------------------------------------------===//

/// A reduction over `dims` of `x`: the reduced dimensions are factors the
/// result lacks (a split one leaves the result partial) or, with
/// `wholeReduced`, stay whole.
static ShardingRule reductionRule(Value x, Value result, ArrayRef<int64_t> dims,
                                  bool wholeReduced) {
  ShardingRule rule;
  SmallVector<int64_t> in, out;
  // A result of x's rank keeps the reduced dimensions, of size 1.
  bool keepsDims = shapeOf(result).size() == shapeOf(x).size();
  for (auto [dim, size] : llvm::enumerate(shapeOf(x))) {
    bool reduced = llvm::is_contained(dims, static_cast<int64_t>(dim));
    in.push_back(rule.addFactor(size, reduced && wholeReduced));
    if (!reduced)
      out.push_back(in.back());
    else if (keepsDims)
      out.push_back(kNone);
  }
  rule.addOperand(in);
  rule.addResult(out);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {0};
  return rule;
}

ShardingRule SumOp::getShardingRule() {
  return reductionRule(getX(), getResult(), getDims(),
                       /*wholeReduced=*/false);
}

// A mean divides by the global count of its dimensions: they stay whole.
ShardingRule MeanOp::getShardingRule() {
  return reductionRule(getX(), getResult(), getDims(),
                       /*wholeReduced=*/true);
}

/// The factors of cross entropy: one per token dimension of the logits
/// (the labels' dimensions) and the vocabulary, last. Split along the
/// vocabulary, the op is vocab-parallel: its local form combines the
/// pieces of the softmax denominator itself (`combinedFactors`). A local
/// form holds one piece already: its vocabulary stays whole.
static std::pair<SmallVector<int64_t>, SmallVector<int64_t>>
crossEntropyFactors(ShardingRule &rule, ArrayRef<int64_t> logits,
                    bool localForm) {
  SmallVector<int64_t> tokens = newFactors(rule, logits.drop_back());
  // The loss takes whole sequences: a piece's loss is weighted by its own
  // count of tokens when the step combines pieces, which is right for
  // pieces the backward keeps apart (microbatches, data-parallel ranks)
  // but not for sequence pieces whose gradients tensor-parallel layers mix
  // (sequence parallelism gathers the sequence before the loss).
  for (int64_t factor : ArrayRef<int64_t>(tokens).drop_front())
    rule.wholeFactors[factor] = true;
  SmallVector<int64_t> logitDims = tokens;
  int64_t vocab = rule.addFactor(logits.back(), /*whole=*/localForm);
  logitDims.push_back(vocab);
  rule.combinedFactors.push_back(vocab);
  return {tokens, logitDims};
}

/// The operands of a cross entropy's local form after `dloss`: its `lse`,
/// per token.
static void addLseOperand(ShardingRule &rule, Value lse,
                          ArrayRef<int64_t> tokens) {
  if (!lse)
    return;
  SmallVector<int64_t> dims(tokens);
  dims.push_back(kNone);
  rule.addOperand(dims);
}

/// The log-sum-exp over the whole vocabulary of `logits`, a piece split
/// along its vocabulary over `axes`: each piece's own (over its columns
/// that are `classes` of a padded vocabulary), gathered over the group,
/// and the log-sum-exp of those.
static Value vocabLogSumExp(OpBuilder &builder, Location loc, Value logits,
                            ArrayRef<StringRef> axes, IntegerAttr classes,
                            LocalCollectives &collectives) {
  auto type = cast<RankedTensorType>(logits.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = 1;
  auto lseType = type.clone(shape);
  Value piece = LogSumExpOp::create(builder, loc, lseType, logits, classes,
                                    classes ? builder.getStrArrayAttr(axes)
                                            : ArrayAttr());
  Value gathered = collectives.allGather(
      builder, loc, piece, type.getRank() - 1, axes,
      "vocab-parallel cross entropy: the log-sum-exp of each piece of the "
      "vocabulary");
  return LogSumExpOp::create(builder, loc, lseType, gathered,
                             /*classes=*/IntegerAttr(),
                             /*vocab_axes=*/ArrayAttr());
}

// The loss is the mean over the tokens of the batch; split by samples or
// positions, each piece's loss is its own tokens' mean, partial in the
// token-weighted sense: the step combines pieces (microbatches and
// data-parallel ranks alike) weighted by their counts of non-ignored
// labels.
ShardingRule CrossEntropyOp::getShardingRule() {
  ShardingRule rule;
  auto [tokens, logitDims] = crossEntropyFactors(rule, shapeOf(getLogits()),
                                                 getVocabAxes().has_value());
  rule.addOperand(logitDims);
  rule.addOperand(tokens);
  addLseOperand(rule, getLse(), tokens);
  rule.addResult({});
  return rule;
}

// Split along the vocabulary, each rank's local form sums its labels'
// terms and the pieces are added up over the group: the loss is whole
// again (Megatron's vocab-parallel cross entropy, with the log-sum-exp
// pieces gathered rather than the maximum and sum reduced apart).
Operation *
CrossEntropyOp::buildLocal(OpBuilder &builder, ValueRange operands,
                           TypeRange resultTypes, ArrayRef<int64_t> factorParts,
                           ArrayRef<SmallVector<StringRef>> factorAxes,
                           LocalCollectives &collectives) {
  ArrayRef<StringRef> axes =
      vocabSplitAxes(getLabels(), factorParts, factorAxes);
  if (axes.empty())
    return cloneWithTypes(builder, *this, operands, resultTypes);
  Value lse = vocabLogSumExp(builder, getLoc(), operands[0], axes,
                             getClassesAttr(), collectives);
  Value piece = CrossEntropyOp::create(
      builder, getLoc(), resultTypes[0], operands[0], operands[1], lse,
      getIgnoreIndexAttr(), builder.getStrArrayAttr(axes), getClassesAttr());
  return collectives
      .allReduce(builder, getLoc(), piece, axes,
                 "vocab-parallel cross entropy: the loss of each piece of "
                 "the vocabulary")
      .getDefiningOp();
}

// The gradient of a piece's mean loss: partial in the same token-weighted
// sense as the loss.
ShardingRule CrossEntropyGradOp::getShardingRule() {
  ShardingRule rule;
  auto [tokens, logitDims] = crossEntropyFactors(rule, shapeOf(getLogits()),
                                                 getVocabAxes().has_value());
  rule.addOperand(logitDims);
  rule.addOperand(tokens);
  rule.addOperand({});
  addLseOperand(rule, getLse(), tokens);
  rule.addResult(logitDims);
  rule.linearity = Linearity::Each;
  rule.linearOperands = {2};
  return rule;
}

Operation *CrossEntropyGradOp::buildLocal(
    OpBuilder &builder, ValueRange operands, TypeRange resultTypes,
    ArrayRef<int64_t> factorParts, ArrayRef<SmallVector<StringRef>> factorAxes,
    LocalCollectives &collectives) {
  ArrayRef<StringRef> axes =
      vocabSplitAxes(getLabels(), factorParts, factorAxes);
  if (axes.empty())
    return cloneWithTypes(builder, *this, operands, resultTypes);
  // The backward recomputes the log-sum-exp (one pass over the piece and
  // a gather of one value per token) rather than keep the loss's.
  Value lse = vocabLogSumExp(builder, getLoc(), operands[0], axes,
                             getClassesAttr(), collectives);
  return CrossEntropyGradOp::create(
      builder, getLoc(), resultTypes[0], operands[0], operands[1], operands[2],
      lse, getIgnoreIndexAttr(), builder.getStrArrayAttr(axes),
      getClassesAttr());
}

// The last dimension is reduced (kept with size 1) and not linear: it
// stays whole.
ShardingRule LogSumExpOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(getX());
  SmallVector<int64_t> dims = newFactors(rule, shape.drop_back());
  SmallVector<int64_t> in = dims;
  in.push_back(rule.addFactor(shape.back(), /*whole=*/true));
  dims.push_back(kNone);
  rule.addOperand(in);
  rule.addResult(dims);
  return rule;
}

// The vocabulary is a dimension of the result only: split (as the table's
// parameter is, see shard-propagate), each piece scatters the ids of its
// rows and skips the others, with no communication.
ShardingRule EmbeddingGradOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> ids = newFactors(rule, shapeOf(getIds()));
  ArrayRef<int64_t> table = shapeOf(getResult());
  int64_t vocab =
      rule.addFactor(table[0], /*whole=*/getVocabAxes().has_value());
  int64_t hidden = rule.addFactor(table[1]);
  SmallVector<int64_t> dy = ids;
  dy.push_back(hidden);
  rule.addOperand(ids);
  rule.addOperand(dy);
  rule.addResult({vocab, hidden});
  rule.linearity = Linearity::Each;
  rule.linearOperands = {1};
  if (std::optional<StringRef> table = getTable())
    rule.parameterSplits = {{vocab, *table, 0}};
  return rule;
}

Operation *EmbeddingGradOp::buildLocal(
    OpBuilder &builder, ValueRange operands, TypeRange resultTypes,
    ArrayRef<int64_t> factorParts, ArrayRef<SmallVector<StringRef>> factorAxes,
    LocalCollectives &) {
  auto local = cast<EmbeddingGradOp>(
      cloneWithTypes(builder, *this, operands, resultTypes));
  ArrayRef<StringRef> axes = vocabSplitAxes(getIds(), factorParts, factorAxes);
  if (!axes.empty())
    local.setVocabAxesAttr(builder.getStrArrayAttr(axes));
  return local;
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

// Squares do not sum over pending sums: a partial operand is reduced first;
// a split one leaves a partial sum of squares.
ShardingRule SumSquaresOp::getShardingRule() {
  ShardingRule rule;
  rule.addOperand(newFactors(rule, shapeOf(getX())));
  rule.addResult({});
  // Padding's zeros add nothing to the sum.
  rule.acceptsPadding = true;
  return rule;
}

ShardingRule LrScheduleOp::getShardingRule() { return elementwise(*this); }
ShardingRule ClipCoefficientOp::getShardingRule() { return elementwise(*this); }
ShardingRule LossScaleUpdateOp::getShardingRule() { return elementwise(*this); }
