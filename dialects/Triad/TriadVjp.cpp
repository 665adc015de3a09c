//===- TriadVjp.cpp - gradient rules of the triad ops ---------------------===//
//
// The VjpOpInterface of every differentiable forward op: the gradients of
// its operands, built from the gradients of its results out of forward ops
// and the gradient ops. Each rule is checked against finite differences in
// test/Unit/Passes/AutodiffTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "dialects/Triad/TriadOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace triad;

namespace {

RankedTensorType tensorTypeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// The adjoint of NumPy broadcasting: sums `grad` over the dimensions that
/// broadcasting `target`'s shape to grad's shape added or expanded.
Value sumToShape(OpBuilder &b, Location loc, Value grad,
                 RankedTensorType target) {
  RankedTensorType type = tensorTypeOf(grad);
  if (type == target)
    return grad;
  int64_t offset = type.getRank() - target.getRank();
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d < offset ||
        (target.getDimSize(d - offset) == 1 && type.getDimSize(d) != 1))
      dims.push_back(d);
  Value sum = grad;
  if (!dims.empty()) {
    SmallVector<int64_t> kept;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (!llvm::is_contained(dims, d))
        kept.push_back(type.getDimSize(d));
    auto sumType = RankedTensorType::get(kept, type.getElementType());
    sum = SumOp::create(b, loc, sumType, grad, b.getDenseI64ArrayAttr(dims));
  }
  if (tensorTypeOf(sum) != target)
    sum = ReshapeOp::create(b, loc, target, sum);
  return sum;
}

/// Swaps the last two dimensions.
Value transposeLastTwo(OpBuilder &b, Location loc, Value x) {
  int64_t rank = tensorTypeOf(x).getRank();
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    perm.push_back(d);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return TransposeOp::create(b, loc, x, perm);
}

/// Collapses all but the last dimension: [B..., M, K] -> [B...*M, K].
Value flattenRows(OpBuilder &b, Location loc, Value x) {
  RankedTensorType type = tensorTypeOf(x);
  if (type.getRank() == 2)
    return x;
  int64_t last = type.getDimSize(type.getRank() - 1);
  auto flat = RankedTensorType::get({type.getNumElements() / last, last},
                                    type.getElementType());
  return ReshapeOp::create(b, loc, flat, x);
}

Value mul(OpBuilder &b, Location loc, Value x, Value y) {
  return MulOp::create(b, loc, x.getType(), x, y);
}

} // namespace

//===----------------------------------------------------------------------===//
// Linear algebra and elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (getVocabAxes())
    return emitOpError("is a vocab-parallel local form, which autodiff does "
                       "not differentiate (differentiate before partitioning)");
  // The table's parameter, when it is one, decides how its gradient is
  // split (shard-propagate).
  FlatSymbolRefAttr param;
  if (auto get = getTable().getDefiningOp<GetParamOp>())
    param = get.getNameAttr();
  Value grad = EmbeddingGradOp::create(b, getLoc(), getTable().getType(),
                                       getIds(), resultGrads[0], param,
                                       /*vocab_axes=*/nullptr);
  operandGrads.append({Value(), grad});
  return success();
}

LogicalResult MatmulOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value a = getLhs(), w = getRhs(), dy = resultGrads[0];
  bool ta = getTransposeLhs(), tb = getTransposeRhs();
  bool broadcastRhs =
      getRhs().getType().getRank() == 2 && getLhs().getType().getRank() > 2;
  if (!broadcastRhs) {
    // Same batch dimensions on both sides: one batched product each.
    Value da = ta ? MatmulOp::create(b, loc, w, dy, tb, true)
                  : MatmulOp::create(b, loc, dy, w, false, !tb);
    Value dw = tb ? MatmulOp::create(b, loc, dy, a, true, ta)
                  : MatmulOp::create(b, loc, a, dy, !ta, false);
    operandGrads.append({da, dw});
    return success();
  }
  // A 2-D rhs shared by every batch: its gradient sums over the batch, a
  // product of the flattened operands.
  Value daRows = MatmulOp::create(b, loc, dy, w, false, !tb);
  Value da = ta ? transposeLastTwo(b, loc, daRows) : daRows;
  Value rows = flattenRows(b, loc, ta ? transposeLastTwo(b, loc, a) : a);
  Value dyRows = flattenRows(b, loc, dy);
  Value dw = tb ? MatmulOp::create(b, loc, dyRows, rows, true, false)
                : MatmulOp::create(b, loc, rows, dyRows, true, false);
  operandGrads.append({da, dw});
  return success();
}

LogicalResult AddOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  operandGrads.append({dy, sumToShape(b, getLoc(), dy, getRhs().getType())});
  return success();
}

LogicalResult MulOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  operandGrads.append(
      {mul(b, getLoc(), dy, getRhs()), mul(b, getLoc(), dy, getLhs())});
  return success();
}

LogicalResult ScaleOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      ScaleOp::create(b, getLoc(), resultGrads[0], getFactorAttr()));
  return success();
}

LogicalResult BiasAddOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  operandGrads.append({dy, sumToShape(b, getLoc(), dy, getBias().getType())});
  return success();
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

static Value activationGrad(OpBuilder &b, Location loc, ActivationKind kind,
                            Value x, Value dy) {
  return ActivationGradOp::create(b, loc, x.getType(), kind, x, dy);
}

LogicalResult GeluOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  ActivationKind kind = getApproximate() == GeluApproximation::tanh
                            ? ActivationKind::gelu_tanh
                            : ActivationKind::gelu;
  operandGrads.push_back(
      activationGrad(b, getLoc(), kind, getX(), resultGrads[0]));
  return success();
}

LogicalResult FastGeluOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(activationGrad(b, getLoc(), ActivationKind::fast_gelu,
                                        getX(), resultGrads[0]));
  return success();
}

LogicalResult ReluOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(activationGrad(b, getLoc(), ActivationKind::relu,
                                        getX(), resultGrads[0]));
  return success();
}

LogicalResult SiluOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(activationGrad(b, getLoc(), ActivationKind::silu,
                                        getX(), resultGrads[0]));
  return success();
}

LogicalResult SwigluOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value dy = resultGrads[0];
  Value dGate = activationGrad(b, loc, ActivationKind::silu, getGate(),
                               mul(b, loc, dy, getUp()));
  Value activated = SiluOp::create(b, loc, getGate());
  operandGrads.append({dGate, mul(b, loc, dy, activated)});
  return success();
}

LogicalResult GegluOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value dy = resultGrads[0];
  Value dGate = activationGrad(b, loc, ActivationKind::gelu, getGate(),
                               mul(b, loc, dy, getUp()));
  Value activated = GeluOp::create(b, loc, getGate(), GeluApproximation::none);
  operandGrads.append({dGate, mul(b, loc, dy, activated)});
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization, attention and positions
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  auto grads = LayerNormGradOp::create(b, getLoc(), getX(), getGamma(), dy,
                                       getEpsilonAttr());
  operandGrads.append({grads.getDx(), grads.getDgamma()});
  if (getBeta())
    operandGrads.push_back(sumToShape(b, getLoc(), dy, getBeta().getType()));
  return success();
}

LogicalResult RmsNormOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  auto grads = RmsNormGradOp::create(b, getLoc(), getX(), getGamma(),
                                     resultGrads[0], getEpsilonAttr());
  operandGrads.append({grads.getDx(), grads.getDgamma()});
  return success();
}

LogicalResult AttentionOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  auto grads = AttentionGradOp::create(
      b, getLoc(), getQ().getType(), getK().getType(), getV().getType(), getQ(),
      getK(), getV(), getPrefixLengths(), getAlibiSlopes(), resultGrads[0],
      getHeadsAttr(), getKvHeadsAttr(), getMaskAttr(), getScaleAttr());
  operandGrads.append({grads.getDq(), grads.getDk(), grads.getDv()});
  // Prefix lengths and ALiBi slopes are constants of the mask.
  if (getPrefixLengths())
    operandGrads.push_back(Value());
  if (getAlibiSlopes())
    operandGrads.push_back(Value());
  return success();
}

LogicalResult RopeOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(RopeGradOp::create(b, getLoc(), resultGrads[0],
                                            getHeadsAttr(), getRotaryDimAttr(),
                                            getBaseAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      ReshapeOp::create(b, getLoc(), getX().getType(), resultGrads[0]));
  return success();
}

LogicalResult TransposeOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = static_cast<int64_t>(i);
  operandGrads.push_back(
      TransposeOp::create(b, getLoc(), resultGrads[0], inverse));
  return success();
}

LogicalResult SliceOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  SmallVector<int64_t> high;
  for (auto [d, size] : llvm::enumerate(getX().getType().getShape()))
    high.push_back(size - getOffsets()[d] - getSizes()[d]);
  operandGrads.push_back(PadOp::create(b, getLoc(), getX().getType(),
                                       resultGrads[0], getOffsetsAttr(),
                                       b.getDenseI64ArrayAttr(high)));
  return success();
}

LogicalResult PadOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(SliceOp::create(b, getLoc(), resultGrads[0], getLow(),
                                         getX().getType().getShape()));
  return success();
}

LogicalResult ConcatOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  int64_t dim = getDim(), offset = 0;
  for (Value input : getInputs()) {
    RankedTensorType type = tensorTypeOf(input);
    SmallVector<int64_t> offsets(type.getRank(), 0);
    offsets[dim] = offset;
    operandGrads.push_back(
        SliceOp::create(b, getLoc(), resultGrads[0], offsets, type.getShape()));
    offset += type.getDimSize(dim);
  }
  return success();
}

LogicalResult BroadcastOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      sumToShape(b, getLoc(), resultGrads[0], getX().getType()));
  return success();
}

LogicalResult CastOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  if (!isa<FloatType>(getX().getType().getElementType()) ||
      !isa<FloatType>(getType().getElementType())) {
    operandGrads.push_back(Value());
    return success();
  }
  operandGrads.push_back(
      CastOp::create(b, getLoc(), getX().getType(), resultGrads[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Dropout, loss and reductions
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  // The same mask (same stream, same step) scales the gradient.
  operandGrads.push_back(DropoutOp::create(
      b, getLoc(), resultGrads[0], getProbabilityAttr(), getRngStreamAttr()));
  return success();
}

LogicalResult CrossEntropyOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (getVocabAxes())
    return emitOpError("is a vocab-parallel local form, which autodiff does "
                       "not differentiate (differentiate before partitioning)");
  Value grad = CrossEntropyGradOp::create(
      b, getLoc(), getLogits().getType(), getLogits(), getLabels(),
      resultGrads[0], /*lse=*/Value(), getIgnoreIndexAttr(),
      /*vocab_axes=*/ArrayAttr(), getClassesAttr());
  operandGrads.append({grad, Value()});
  return success();
}

/// The adjoint of a reduction: the gradient, with the reduced dimensions
/// restored as size 1, broadcast back over them (and divided by the count
/// for a mean).
static Value expandReduction(OpBuilder &b, Location loc, Value grad,
                             RankedTensorType input, ArrayRef<int64_t> dims,
                             bool mean) {
  SmallVector<int64_t> kept(input.getShape());
  int64_t count = 1;
  for (int64_t d : dims) {
    kept[d] = 1;
    count *= input.getDimSize(d);
  }
  auto keptType = RankedTensorType::get(kept, input.getElementType());
  Value expanded = grad;
  if (tensorTypeOf(grad) != keptType)
    expanded = ReshapeOp::create(b, loc, keptType, grad);
  expanded = BroadcastOp::create(b, loc, input, expanded);
  if (mean)
    expanded = ScaleOp::create(
        b, loc, expanded, b.getF64FloatAttr(1.0 / static_cast<double>(count)));
  return expanded;
}

LogicalResult SumOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(expandReduction(b, getLoc(), resultGrads[0],
                                         getX().getType(), getDims(), false));
  return success();
}

LogicalResult MeanOp::buildVjp(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(expandReduction(b, getLoc(), resultGrads[0],
                                         getX().getType(), getDims(), true));
  return success();
}
