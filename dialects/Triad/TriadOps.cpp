//===- TriadOps.cpp - the triad model ops ---------------------------------===//
//
// Verifiers and builders of the `triad` ops. Verifier messages name the op
// (through emitOpError), the operand and the dimension that disagree.
//
//===----------------------------------------------------------------------===//

#include "dialects/Triad/TriadOps.h"

#include "llvm/ADT/StringSet.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace triad;

#include "dialects/Triad/TriadInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/Triad/TriadOps.cpp.inc"

/// Checks that an op's declared result type equals the type its shape rule
/// infers; reports both otherwise.
static LogicalResult verifyInferredType(Operation *op,
                                        FailureOr<RankedTensorType> inferred,
                                        Type actual) {
  if (failed(inferred))
    return failure();
  if (*inferred != actual)
    return op->emitOpError("result type ")
           << actual << " does not match the inferred type " << *inferred;
  return success();
}

static RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Result type of a builder whose shape rule failed: the type of `fallback`,
/// so that the verifier later reports the real problem instead of a crash.
static Type typeOrFallback(FailureOr<RankedTensorType> inferred,
                           Value fallback) {
  return succeeded(inferred) ? Type(*inferred) : fallback.getType();
}

/// The element count of a static shape, or nullopt when it overflows int64.
static std::optional<int64_t> elementCount(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    if (llvm::MulOverflow(count, size, count))
      return std::nullopt;
  return count;
}

//===----------------------------------------------------------------------===//
// ParamOp and GetParamOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getSymName().empty())
    return emitOpError("parameter name must not be empty");
  for (auto [i, size] : llvm::enumerate(getTensorType().getShape()))
    if (size <= 0)
      return emitOpError("parameter dim ")
             << i << " has size " << size << "; sizes must be positive";
  if (!elementCount(getTensorType().getShape()))
    return emitOpError("parameter has more elements than int64 can count");
  if (DenseI64ArrayAttr unpadded = getUnpaddedAttr()) {
    ArrayRef<int64_t> shape = getTensorType().getShape();
    if (unpadded.size() != static_cast<int64_t>(shape.size()))
      return emitOpError("unpadded has ")
             << unpadded.size() << " dimensions but the parameter has "
             << shape.size();
    for (auto [i, size] : llvm::enumerate(unpadded.asArrayRef()))
      if (size <= 0 || size > shape[i])
        return emitOpError("unpadded dim ")
               << i << " is " << size << "; it must lie in [1, " << shape[i]
               << "] (the padded size)";
  }
  return success();
}

/// The declared type of the parameter or state `name`, or failure after
/// reporting an unknown symbol.
static FailureOr<Type> declaredType(Operation *op, FlatSymbolRefAttr name,
                                    SymbolTableCollection &symbolTable) {
  Operation *symbol = symbolTable.lookupNearestSymbolFrom(op, name);
  if (auto param = dyn_cast_or_null<ParamOp>(symbol))
    return param.getType();
  if (auto state = dyn_cast_or_null<StateOp>(symbol))
    return state.getType();
  return op->emitOpError("refers to unknown parameter ") << name;
}

/// Whether `type` is `declared` or one rank's piece of it after
/// partitioning: the same element type and rank, every dimension dividing
/// the declared one or, for a padded split, a piece of ceil(size / n) for
/// some n (its last pieces zero-padded past the end).
static bool isPieceOf(Type type, Type declared) {
  if (type == declared)
    return true;
  auto piece = dyn_cast<RankedTensorType>(type);
  auto whole = dyn_cast<RankedTensorType>(declared);
  if (!piece || !whole || piece.getElementType() != whole.getElementType() ||
      piece.getRank() != whole.getRank())
    return false;
  for (auto [p, w] : llvm::zip(piece.getShape(), whole.getShape())) {
    if (p <= 0 || p > w)
      return false;
    // ceil(w / n) == p for n = ceil(w / p).
    int64_t n = (w + p - 1) / p;
    if (w % p != 0 && (w + n - 1) / n != p)
      return false;
  }
  return true;
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<Type> type = declaredType(*this, getNameAttr(), symbolTable);
  if (failed(type))
    return failure();
  if (!isPieceOf(getType(), *type))
    return emitOpError("result type ")
           << getType() << " does not match the declared type " << *type
           << " of parameter " << getNameAttr() << " (nor is it a piece of it)";
  return success();
}

LogicalResult AssignOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<Type> type = declaredType(*this, getNameAttr(), symbolTable);
  if (failed(type))
    return failure();
  if (!isPieceOf(getValue().getType(), *type))
    return emitOpError("value type ")
           << getValue().getType() << " does not match the declared type "
           << *type << " of " << getNameAttr() << " (nor is it a piece of it)";
  return success();
}

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

std::string triad::layerName(LayerOp layer) {
  return (stringifyLayerKind(layer.getKind()) + " " + Twine(layer.getIndex()) +
          (layer.getBackward() ? " backward" : ""))
      .str();
}

LogicalResult LayerOp::verify() {
  // Each part of the model appears once in its function.
  for (Operation *op = getOperation()->getPrevNode(); op;
       op = op->getPrevNode()) {
    auto earlier = dyn_cast<LayerOp>(op);
    if (earlier && earlier.getKind() == getKind() &&
        earlier.getIndex() == getIndex() &&
        earlier.getBackward() == getBackward())
      return emitOpError("duplicates ")
             << (getBackward() ? "backward " : "")
             << stringifyLayerKind(getKind()) << " layer " << getIndex()
             << " of this function";
  }
  return success();
}

LogicalResult LayerOp::verifyRegions() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("body has ")
           << body.getNumArguments() << " arguments but the layer has "
           << getInputs().size() << " inputs";
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(body.getArgumentTypes(), getInputs()))) {
    auto [argType, input] = pair;
    if (argType != input.getType())
      return emitOpError("body argument ")
             << i << " has type " << argType << " but input " << i
             << " has type " << input.getType();
  }
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with 'triad.yield'");
  if (yield.getValues().size() != getNumResults())
    return emitOpError("yields ")
           << yield.getValues().size() << " values but the layer has "
           << getNumResults() << " results";
  for (auto [i, pair] : llvm::enumerate(
           llvm::zip(yield.getValues().getTypes(), getResultTypes()))) {
    auto [yieldType, resultType] = pair;
    if (yieldType != resultType)
      return emitOpError("yielded value ")
             << i << " has type " << yieldType << " but result " << i
             << " has type " << resultType;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp and MatmulOp
//===----------------------------------------------------------------------===//

void EmbeddingOp::build(OpBuilder &builder, OperationState &state, Value ids,
                        Value table) {
  auto type =
      inferEmbeddingType(tensorType(ids), tensorType(table), /*emitError=*/{});
  build(builder, state, typeOrFallback(type, table), ids, table,
        /*vocab_axes=*/nullptr);
}

/// A vocab-parallel local form's `vocab_split` lists mesh axes, each once.
static LogicalResult verifyVocabAxes(Operation *op,
                                     std::optional<ArrayAttr> axes) {
  if (!axes)
    return success();
  if (axes->empty())
    return op->emitOpError("vocab_split lists no mesh axes");
  llvm::StringSet<> seen;
  for (StringRef axis : axes->getAsValueRange<StringAttr>())
    if (!seen.insert(axis).second)
      return op->emitOpError("vocab_split lists mesh axis '")
             << axis << "' twice";
  return success();
}

LogicalResult EmbeddingOp::verify() {
  if (failed(verifyVocabAxes(*this, getVocabAxes())))
    return failure();
  return verifyInferredType(*this,
                            inferEmbeddingType(getIds().getType(),
                                               getTable().getType(),
                                               [&] { return emitOpError(); }),
                            getType());
}

void MatmulOp::build(OpBuilder &builder, OperationState &state, Value lhs,
                     Value rhs, bool transposeLhs, bool transposeRhs) {
  auto type = inferMatmulType(tensorType(lhs), tensorType(rhs), transposeLhs,
                              transposeRhs, /*emitError=*/{});
  build(builder, state, typeOrFallback(type, lhs), lhs, rhs, transposeLhs,
        transposeRhs);
}

LogicalResult MatmulOp::verify() {
  return verifyInferredType(
      *this,
      inferMatmulType(getLhs().getType(), getRhs().getType(), getTransposeLhs(),
                      getTransposeRhs(), [&] { return emitOpError(); }),
      getType());
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult AddOp::verify() {
  ArrayRef<int64_t> lhs = getLhs().getType().getShape();
  ArrayRef<int64_t> rhs = getRhs().getType().getShape();
  if (rhs.size() > lhs.size())
    return emitOpError("rhs has rank ")
           << rhs.size() << ", more than lhs (" << lhs.size()
           << "); only the rhs broadcasts";
  size_t offset = lhs.size() - rhs.size();
  for (auto [i, size] : llvm::enumerate(rhs))
    if (size != lhs[offset + i])
      return emitOpError("rhs dim ") << i << " is " << size << " but lhs dim "
                                     << offset + i << " is " << lhs[offset + i];
  return success();
}

LogicalResult ScaleOp::verify() {
  double factor = getFactor().convertToDouble();
  if (!std::isfinite(factor))
    return emitOpError("factor must be finite, got ") << factor;
  return success();
}

LogicalResult BiasAddOp::verify() {
  RankedTensorType x = getX().getType();
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1");
  int64_t last = x.getDimSize(x.getRank() - 1);
  int64_t bias = getBias().getType().getDimSize(0);
  if (bias != last)
    return emitOpError("bias dim 0 is ")
           << bias << " but x dim " << x.getRank() - 1 << " is " << last;
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Checks a normalization weight (gamma or beta) against the normalized
/// (last) dimension of x.
static LogicalResult verifyNormWeight(Operation *op, StringRef name,
                                      RankedTensorType x,
                                      RankedTensorType weight) {
  if (x.getRank() < 1)
    return op->emitOpError("x must have rank >= 1");
  int64_t last = x.getDimSize(x.getRank() - 1);
  if (weight.getDimSize(0) != last)
    return op->emitOpError()
           << name << " dim 0 is " << weight.getDimSize(0) << " but x dim "
           << x.getRank() - 1 << " is " << last;
  if (weight.getElementType() != x.getElementType())
    return op->emitOpError()
           << name << " element type " << weight.getElementType()
           << " differs from x element type " << x.getElementType();
  return success();
}

static LogicalResult verifyEpsilon(Operation *op, double epsilon) {
  if (!(epsilon > 0.0) || !std::isfinite(epsilon))
    return op->emitOpError("epsilon must be positive and finite, got ")
           << epsilon;
  return success();
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNormWeight(*this, "gamma", getX().getType(),
                              getGamma().getType())))
    return failure();
  if (getBeta() && failed(verifyNormWeight(*this, "beta", getX().getType(),
                                           getBeta().getType())))
    return failure();
  return verifyEpsilon(*this, getEpsilon().convertToDouble());
}

LogicalResult RmsNormOp::verify() {
  if (failed(verifyNormWeight(*this, "gamma", getX().getType(),
                              getGamma().getType())))
    return failure();
  return verifyEpsilon(*this, getEpsilon().convertToDouble());
}

//===----------------------------------------------------------------------===//
// AttentionOp and RopeOp
//===----------------------------------------------------------------------===//

int64_t AttentionOp::getHeadDim() {
  return getQ().getType().getDimSize(2) / getHeads();
}

/// The attention scale: the attribute when given, else 1/sqrt(head_dim).
static double effectiveScale(std::optional<APFloat> scale, RankedTensorType q,
                             int64_t heads) {
  if (scale)
    return scale->convertToDouble();
  return 1.0 / std::sqrt(static_cast<double>(q.getDimSize(2) / heads));
}

double AttentionOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQ().getType(), getHeads());
}

double AttentionGradOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQ().getType(), getHeads());
}

/// Shared by attention and its gradient: shapes of q, k, v, the mask
/// operands and the attributes.
static LogicalResult verifyAttention(Operation *op, RankedTensorType q,
                                     RankedTensorType k, RankedTensorType v,
                                     Value prefixLengths, Value alibiSlopes,
                                     int64_t heads, int64_t kvHeads,
                                     MaskKind mask,
                                     std::optional<APFloat> scale) {
  for (auto [name, type] :
       {std::pair<StringRef, RankedTensorType>{"q", q}, {"k", k}, {"v", v}})
    if (type.getRank() != 3)
      return op->emitOpError()
             << name
             << " must have rank 3 [batch, seq, heads * head_dim], got rank "
             << type.getRank();
  if (k.getElementType() != q.getElementType() ||
      v.getElementType() != q.getElementType())
    return op->emitOpError("q, k and v must have one element type");
  if (q.getDimSize(2) % heads != 0)
    return op->emitOpError("q dim 2 is ")
           << q.getDimSize(2) << ", not divisible by heads = " << heads;
  if (heads % kvHeads != 0)
    return op->emitOpError("heads = ")
           << heads << " is not divisible by kv_heads = " << kvHeads;
  int64_t headDim = q.getDimSize(2) / heads;
  for (auto [name, type] :
       {std::pair<StringRef, RankedTensorType>{"k", k}, {"v", v}}) {
    if (type.getDimSize(0) != q.getDimSize(0))
      return op->emitOpError() << name << " dim 0 is " << type.getDimSize(0)
                               << " but q dim 0 is " << q.getDimSize(0);
    if (type.getDimSize(2) != kvHeads * headDim)
      return op->emitOpError()
             << name << " dim 2 is " << type.getDimSize(2)
             << " but kv_heads * head_dim is " << kvHeads << " * " << headDim
             << " = " << kvHeads * headDim;
  }
  if (v.getDimSize(1) != k.getDimSize(1))
    return op->emitOpError("v dim 1 is ")
           << v.getDimSize(1) << " but k dim 1 is " << k.getDimSize(1);
  if (mask != MaskKind::none && k.getDimSize(1) != q.getDimSize(1))
    return op->emitOpError("mask '")
           << stringifyMaskKind(mask) << "' needs k dim 1 (" << k.getDimSize(1)
           << ") equal to q dim 1 (" << q.getDimSize(1) << ")";
  if ((mask == MaskKind::prefix) != static_cast<bool>(prefixLengths))
    return op->emitOpError("prefix_lengths must be given exactly when mask "
                           "is 'prefix'");
  if (prefixLengths) {
    int64_t size = tensorType(prefixLengths).getDimSize(0);
    if (size != q.getDimSize(0))
      return op->emitOpError("prefix_lengths dim 0 is ")
             << size << " but q dim 0 (batch) is " << q.getDimSize(0);
  }
  if (alibiSlopes) {
    int64_t size = tensorType(alibiSlopes).getDimSize(0);
    if (size != heads)
      return op->emitOpError("alibi_slopes dim 0 is ")
             << size << " but heads is " << heads;
  }
  if (scale) {
    double value = scale->convertToDouble();
    if (!(value > 0.0) || !std::isfinite(value))
      return op->emitOpError("scale must be positive and finite, got ")
             << value;
  }
  return success();
}

LogicalResult AttentionOp::verify() {
  return verifyAttention(*this, getQ().getType(), getK().getType(),
                         getV().getType(), getPrefixLengths(), getAlibiSlopes(),
                         getHeads(), getKvHeads(), getMask(), getScale());
}

LogicalResult AttentionGradOp::verify() {
  if (getDq().getType() != getQ().getType() ||
      getDk().getType() != getK().getType() ||
      getDv().getType() != getV().getType())
    return emitOpError("result types must be the types of q, k and v");
  return verifyAttention(*this, getQ().getType(), getK().getType(),
                         getV().getType(), getPrefixLengths(), getAlibiSlopes(),
                         getHeads(), getKvHeads(), getMask(), getScale());
}

/// Shared by the rotary embedding and its gradient.
static LogicalResult verifyRope(Operation *op, RankedTensorType x,
                                int64_t heads, int64_t rotaryDim, double base) {
  if (x.getRank() != 3)
    return op->emitOpError("x must have rank 3 [batch, seq, heads * "
                           "head_dim], got rank ")
           << x.getRank();
  if (x.getDimSize(2) % heads != 0)
    return op->emitOpError("x dim 2 is ")
           << x.getDimSize(2) << ", not divisible by heads = " << heads;
  int64_t headDim = x.getDimSize(2) / heads;
  if (rotaryDim % 2 != 0 || rotaryDim > headDim)
    return op->emitOpError("rotary_dim = ")
           << rotaryDim << " must be even and at most head_dim = " << headDim;
  if (!(base > 1.0) || !std::isfinite(base))
    return op->emitOpError("base must be finite and greater than 1, got ")
           << base;
  return success();
}

LogicalResult RopeOp::verify() {
  return verifyRope(*this, getX().getType(), getHeads(), getRotaryDim(),
                    getBase().convertToDouble());
}

LogicalResult RopeGradOp::verify() {
  return verifyRope(*this, getDy().getType(), getHeads(), getRotaryDim(),
                    getBase().convertToDouble());
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  std::optional<int64_t> in = elementCount(getX().getType().getShape());
  std::optional<int64_t> out = elementCount(getType().getShape());
  if (!in || !out)
    return emitOpError("element count overflows int64");
  if (*in != *out)
    return emitOpError("operand has ")
           << *in << " elements but the result has " << *out;
  return success();
}

void TransposeOp::build(OpBuilder &builder, OperationState &state, Value x,
                        ArrayRef<int64_t> permutation) {
  auto type = inferTransposeType(tensorType(x), permutation, /*emitError=*/{});
  build(builder, state, typeOrFallback(type, x), x,
        builder.getDenseI64ArrayAttr(permutation));
}

LogicalResult TransposeOp::verify() {
  return verifyInferredType(*this,
                            inferTransposeType(getX().getType(),
                                               getPermutation(),
                                               [&] { return emitOpError(); }),
                            getType());
}

void SliceOp::build(OpBuilder &builder, OperationState &state, Value x,
                    ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes) {
  auto type = inferSliceType(tensorType(x), offsets, sizes, /*emitError=*/{});
  build(builder, state, typeOrFallback(type, x), x,
        builder.getDenseI64ArrayAttr(offsets),
        builder.getDenseI64ArrayAttr(sizes));
}

LogicalResult SliceOp::verify() {
  return verifyInferredType(*this,
                            inferSliceType(getX().getType(), getOffsets(),
                                           getSizes(),
                                           [&] { return emitOpError(); }),
                            getType());
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  RankedTensorType first = tensorType(getInputs().front());
  int64_t rank = first.getRank();
  int64_t dim = getDim();
  if (dim >= rank)
    return emitOpError("dim = ") << dim << " is outside the rank " << rank;
  SmallVector<int64_t> shape(first.getShape());
  shape[dim] = 0;
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    RankedTensorType type = tensorType(input);
    if (type.getElementType() != first.getElementType())
      return emitOpError("input ")
             << i << " has element type " << type.getElementType()
             << " but input 0 has " << first.getElementType();
    if (type.getRank() != rank)
      return emitOpError("input ") << i << " has rank " << type.getRank()
                                   << " but input 0 has rank " << rank;
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && type.getDimSize(d) != first.getDimSize(d))
        return emitOpError("input ")
               << i << " dim " << d << " is " << type.getDimSize(d)
               << " but input 0 dim " << d << " is " << first.getDimSize(d);
    if (llvm::AddOverflow(shape[dim], type.getDimSize(dim), shape[dim]))
      return emitOpError("concatenated dim ") << dim << " overflows int64";
  }
  return verifyInferredType(
      *this, RankedTensorType::get(shape, first.getElementType()), getType());
}

LogicalResult BroadcastOp::verify() {
  ArrayRef<int64_t> in = getX().getType().getShape();
  ArrayRef<int64_t> out = getType().getShape();
  if (out.size() < in.size())
    return emitOpError("result rank ")
           << out.size() << " is below the operand rank " << in.size();
  size_t offset = out.size() - in.size();
  for (auto [i, size] : llvm::enumerate(in))
    if (size != 1 && out[offset + i] != size)
      return emitOpError("result dim ")
             << offset + i << " is " << out[offset + i] << " but operand dim "
             << i << " is " << size << " (it must be equal, or 1 in the "
             << "operand)";
  return success();
}

LogicalResult PadOp::verify() {
  RankedTensorType x = getX().getType();
  int64_t rank = x.getRank();
  if (static_cast<int64_t>(getLow().size()) != rank ||
      static_cast<int64_t>(getHigh().size()) != rank)
    return emitOpError("low and high need one entry per dimension (")
           << rank << "), got " << getLow().size() << " and "
           << getHigh().size();
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (getLow()[i] < 0 || getHigh()[i] < 0)
      return emitOpError("padding of dim ") << i << " is negative";
    shape.push_back(getLow()[i] + x.getDimSize(i) + getHigh()[i]);
  }
  return verifyInferredType(
      *this, RankedTensorType::get(shape, x.getElementType()), getType());
}

//===----------------------------------------------------------------------===//
// Dropout, loss and reductions
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::verify() {
  double p = getProbability().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return emitOpError("probability must be in [0, 1), got ") << p;
  // An axis splits one dimension at most.
  llvm::StringSet<> batchAxes;
  auto checkAxes = [&](std::optional<ArrayAttr> axes, StringRef name,
                       llvm::StringSet<> &seen) -> LogicalResult {
    if (!axes)
      return success();
    if (axes->empty())
      return emitOpError() << name << " lists no mesh axes";
    for (StringRef axis : axes->getAsValueRange<StringAttr>()) {
      if (!seen.insert(axis).second)
        return emitOpError()
               << name << " lists mesh axis '" << axis << "' twice";
      if (&seen != &batchAxes && batchAxes.contains(axis))
        return emitOpError() << name << " lists mesh axis '" << axis
                             << "', which splits the batch";
    }
    return success();
  };
  llvm::StringSet<> seqAxes;
  if (failed(checkAxes(getBatchAxes(), "batch_split", batchAxes)) ||
      failed(checkAxes(getSeqAxes(), "seq_split", seqAxes)))
    return failure();
  int64_t rank = getX().getType().getRank();
  if (getBatchAxes() && rank == 0)
    return emitOpError("batch_split needs a batch dimension (x is a "
                       "scalar)");
  if (getSeqAxes() && rank < 3)
    return emitOpError("seq_split needs a [batch, sequence, ...] tensor of "
                       "rank 3 or more, got rank ")
           << rank;
  if (std::optional<ArrayAttr> seq = getSeqAxes())
    if (llvm::is_contained(seq->getAsValueRange<StringAttr>(), kMicrobatchAxis))
      return emitOpError("seq_split cannot list the microbatch axis (it "
                         "splits the batch)");
  return success();
}

SmallVector<StringRef> DropoutOp::getBatchMeshAxes() {
  SmallVector<StringRef> axes;
  if (std::optional<ArrayAttr> batch = getBatchAxes())
    for (StringRef axis : batch->getAsValueRange<StringAttr>())
      if (axis != kMicrobatchAxis)
        axes.push_back(axis);
  return axes;
}

bool DropoutOp::splitsIntoMicrobatches() {
  std::optional<ArrayAttr> batch = getBatchAxes();
  return batch && llvm::is_contained(batch->getAsValueRange<StringAttr>(),
                                     kMicrobatchAxis);
}

/// A padded vocabulary's `classes` count at least one class and, when `x`
/// holds the whole vocabulary (not a vocab_split piece), no more than its
/// last dimension.
static LogicalResult verifyClasses(Operation *op, RankedTensorType x,
                                   std::optional<int64_t> classes, bool piece) {
  if (!classes)
    return success();
  if (*classes < 1)
    return op->emitOpError("classes must be positive, got ") << *classes;
  int64_t vocab = x.getRank() ? x.getShape().back() : 0;
  if (!piece && *classes > vocab)
    return op->emitOpError("classes (")
           << *classes << ") exceeds the vocabulary's " << vocab << " columns";
  return success();
}

/// Shared by the cross-entropy and its gradient: labels have the shape of
/// the logits without the vocabulary dimension; a local form's `lse` has the
/// labels' shape and 1, and its `vocab_split` lists mesh axes once each.
static LogicalResult verifyCrossEntropy(Operation *op, RankedTensorType logits,
                                        RankedTensorType labels, Value lse,
                                        std::optional<ArrayAttr> vocabAxes,
                                        std::optional<int64_t> classes) {
  if (logits.getRank() < 1)
    return op->emitOpError("logits must have rank >= 1 [..., vocab]");
  if (failed(verifyClasses(op, logits, classes, vocabAxes.has_value())))
    return failure();
  if (labels.getRank() != logits.getRank() - 1)
    return op->emitOpError("labels have rank ")
           << labels.getRank() << " but logits have rank " << logits.getRank()
           << "; labels must have the shape of logits without the vocab "
              "dimension";
  for (int64_t i = 0; i < labels.getRank(); ++i)
    if (labels.getDimSize(i) != logits.getDimSize(i))
      return op->emitOpError("labels dim ")
             << i << " is " << labels.getDimSize(i) << " but logits dim " << i
             << " is " << logits.getDimSize(i);
  if (static_cast<bool>(lse) != vocabAxes.has_value())
    return op->emitOpError("lse and vocab_split come together (the local "
                           "form of a vocab-parallel cross entropy)");
  if (!lse)
    return success();
  if (failed(verifyVocabAxes(op, vocabAxes)))
    return failure();
  SmallVector<int64_t> expected(labels.getShape());
  expected.push_back(1);
  auto type = cast<RankedTensorType>(lse.getType());
  if (type.getShape() != ArrayRef<int64_t>(expected) ||
      type.getElementType() != logits.getElementType())
    return op->emitOpError("lse must be ")
           << RankedTensorType::get(expected, logits.getElementType())
           << " (the labels' shape and 1), got " << type;
  return success();
}

void CrossEntropyOp::build(OpBuilder &builder, OperationState &state,
                           Value logits, Value labels, int64_t ignoreIndex) {
  build(builder, state, RankedTensorType::get({}, builder.getF32Type()), logits,
        labels, /*lse=*/Value(), builder.getI64IntegerAttr(ignoreIndex),
        /*vocab_axes=*/nullptr, /*classes=*/nullptr);
}

LogicalResult CrossEntropyOp::verify() {
  return verifyCrossEntropy(*this, getLogits().getType(), getLabels().getType(),
                            getLse(), getVocabAxes(), getClasses());
}

void CrossEntropyGradOp::build(OpBuilder &builder, OperationState &state,
                               Value logits, Value labels, Value dloss,
                               int64_t ignoreIndex) {
  build(builder, state, logits.getType(), logits, labels, dloss,
        /*lse=*/Value(), builder.getI64IntegerAttr(ignoreIndex),
        /*vocab_axes=*/nullptr, /*classes=*/nullptr);
}

LogicalResult CrossEntropyGradOp::verify() {
  return verifyCrossEntropy(*this, getLogits().getType(), getLabels().getType(),
                            getLse(), getVocabAxes(), getClasses());
}

LogicalResult LogSumExpOp::verify() {
  RankedTensorType x = getX().getType(), result = getResult().getType();
  if (x.getRank() < 1)
    return emitOpError("x must have rank >= 1");
  SmallVector<int64_t> expected(x.getShape());
  expected.back() = 1;
  if (result.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result must have x's shape with a last dimension of "
                       "1, ")
           << RankedTensorType::get(expected, x.getElementType()) << ", got "
           << result;
  if (getVocabAxes() && !getClasses())
    return emitOpError("vocab_split places x's columns in a padded "
                       "vocabulary and needs classes");
  if (failed(verifyVocabAxes(*this, getVocabAxes())))
    return failure();
  return verifyClasses(*this, x, getClasses(), getVocabAxes().has_value());
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::verify() {
  if (failed(verifyVocabAxes(*this, getVocabAxes())))
    return failure();
  RankedTensorType ids = getIds().getType(), dy = getDy().getType();
  RankedTensorType table = getType();
  if (dy.getRank() != ids.getRank() + 1)
    return emitOpError("dy has rank ")
           << dy.getRank() << " but ids have rank " << ids.getRank()
           << "; dy must have the shape of ids plus the hidden dimension";
  for (int64_t i = 0; i < ids.getRank(); ++i)
    if (dy.getDimSize(i) != ids.getDimSize(i))
      return emitOpError("dy dim ")
             << i << " is " << dy.getDimSize(i) << " but ids dim " << i
             << " is " << ids.getDimSize(i);
  int64_t hidden = dy.getDimSize(dy.getRank() - 1);
  if (table.getDimSize(1) != hidden)
    return emitOpError("result dim 1 is ")
           << table.getDimSize(1) << " but dy's hidden dimension is " << hidden;
  if (table.getElementType() != dy.getElementType())
    return emitOpError("result element type ")
           << table.getElementType() << " differs from dy element type "
           << dy.getElementType();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNormWeight(*this, "gamma", getX().getType(),
                              getGamma().getType())))
    return failure();
  return verifyEpsilon(*this, getEpsilon().convertToDouble());
}

LogicalResult RmsNormGradOp::verify() {
  if (failed(verifyNormWeight(*this, "gamma", getX().getType(),
                              getGamma().getType())))
    return failure();
  return verifyEpsilon(*this, getEpsilon().convertToDouble());
}

/// Shared verifier of the reductions: `dims` unique and in range, and the
/// result either drops them or keeps them with size 1.
static LogicalResult verifyReduction(Operation *op, RankedTensorType x,
                                     ArrayRef<int64_t> dims,
                                     RankedTensorType result) {
  int64_t rank = x.getRank();
  if (dims.empty())
    return op->emitOpError("dims must not be empty");
  llvm::SmallBitVector reduced(rank);
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (d < 0 || d >= rank)
      return op->emitOpError("dims entry ")
             << i << " is " << d << ", outside [0, " << rank << ")";
    if (reduced.test(d))
      return op->emitOpError("dims entry ") << i << " repeats dimension " << d;
    reduced.set(d);
  }
  bool keepDims = result.getRank() == rank;
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced.test(d))
      shape.push_back(x.getDimSize(d));
    else if (keepDims)
      shape.push_back(1);
  }
  return verifyInferredType(
      op, RankedTensorType::get(shape, x.getElementType()), result);
}

LogicalResult SumOp::verify() {
  return verifyReduction(*this, getX().getType(), getDims(), getType());
}

LogicalResult MeanOp::verify() {
  return verifyReduction(*this, getX().getType(), getDims(), getType());
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

LogicalResult LrScheduleOp::verify() {
  double peak = getPeak().convertToDouble(),
         floor = getFloor().convertToDouble();
  if (!(peak > 0.0) || !std::isfinite(peak))
    return emitOpError("peak must be positive and finite, got ") << peak;
  if (!(floor >= 0.0 && floor <= peak))
    return emitOpError("floor must be in [0, peak], got ") << floor;
  int64_t decay = getDecayAttr().getInt();
  if (decay < -1)
    return emitOpError("decay must be -1 (the run's length), 0 (no decay) "
                       "or a step, got ")
           << decay;
  if (decay > 0 && decay < static_cast<int64_t>(getWarmup()))
    return emitOpError("decay (")
           << decay << ") must be 0 (no decay) or end no earlier than "
           << "the warmup (" << getWarmup() << ")";
  return success();
}

LogicalResult SumSquaresOp::verify() {
  if (FloatAttr limit = getLimitAttr();
      limit && !(limit.getValueAsDouble() > 0.0))
    return emitOpError("limit must be positive, got ")
           << limit.getValueAsDouble();
  return success();
}

LogicalResult ClipCoefficientOp::verify() {
  double maxNorm = getMaxNorm().convertToDouble();
  if (!(maxNorm >= 0.0) || !std::isfinite(maxNorm))
    return emitOpError("max_norm must be finite and not negative, got ")
           << maxNorm;
  return success();
}

LogicalResult AdamWUpdateOp::verify() {
  if (!getM().getType().getElementType().isF32())
    return emitOpError("moments must be f32, got ")
           << getM().getType().getElementType();
  for (auto [name, value] :
       {std::pair<StringRef, double>{"beta1", getBeta1().convertToDouble()},
        {"beta2", getBeta2().convertToDouble()}})
    if (!(value >= 0.0 && value < 1.0))
      return emitOpError() << name << " must be in [0, 1), got " << value;
  double epsilon = getEpsilon().convertToDouble();
  if (!(epsilon > 0.0) || !std::isfinite(epsilon))
    return emitOpError("epsilon must be positive, got ") << epsilon;
  double decay = getWeightDecay().convertToDouble();
  if (!(decay >= 0.0) || !std::isfinite(decay))
    return emitOpError("weight_decay must be finite and not negative, got ")
           << decay;
  return success();
}

LogicalResult LossScaleUpdateOp::verify() {
  double growth = getGrowth().convertToDouble();
  double backoff = getBackoff().convertToDouble();
  if (!(growth >= 1.0) || !std::isfinite(growth))
    return emitOpError("growth must be at least 1, got ") << growth;
  if (!(backoff > 0.0 && backoff <= 1.0))
    return emitOpError("backoff must be in (0, 1], got ") << backoff;
  return success();
}
