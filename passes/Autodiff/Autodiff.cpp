//===- Autodiff.cpp - builds the microbatch training step -----------------===//
//
// Implements --triad-autodiff: reverse-mode differentiation of a forward
// function through the ops' gradient rules (VjpOpInterface), one backward
// layer per forward layer, with the recompute policy deciding which forward
// values each backward layer receives and which it recomputes.
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/Passes.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cstdio>

namespace triad {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Autodiff/Passes.h.inc"
} // namespace triad

using namespace mlir;
using namespace triad;

namespace {

enum class Recompute { None, Selective, Full };

bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

/// Parameter gradients by parameter name, in the order first reached.
using ParamGrads = llvm::MapVector<StringAttr, Value>;

class Differentiator {
public:
  explicit Differentiator(Recompute recompute) : recompute(recompute) {}

  /// Reverse-mode over `ops` (in forward order, one block): reads the
  /// gradients of their results from `grads`, adds those of their operands
  /// to it and those of parameters to `paramGrads`, building at `b`.
  LogicalResult backprop(ArrayRef<Operation *> ops,
                         DenseMap<Value, Value> &grads, ParamGrads &paramGrads,
                         OpBuilder &b);

private:
  /// Adds `grad` to the gradient of `value`.
  void accumulate(DenseMap<Value, Value> &grads, Value value, Value grad,
                  OpBuilder &b);
  void accumulateParam(ParamGrads &paramGrads, StringAttr name, Value grad,
                       OpBuilder &b);
  /// Builds the backward twin of a forward layer (see the pass description)
  /// and rewrites the forward layer to return what the twin receives.
  LogicalResult backpropLayer(LayerOp forward, ArrayRef<Value> resultGrads,
                              DenseMap<Value, Value> &grads,
                              ParamGrads &paramGrads, OpBuilder &b);
  /// Whether the backward layer receives this recomputable forward op's
  /// results from the forward layer instead of recomputing them.
  bool saves(Operation *op) const {
    if (isa<GetParamOp, arith::ConstantOp>(op))
      return false; // free to read again
    switch (recompute) {
    case Recompute::None:
      return true;
    case Recompute::Selective:
      return !isa<AttentionOp>(op);
    case Recompute::Full:
      return false;
    }
    return true;
  }

  Recompute recompute;
};

void Differentiator::accumulate(DenseMap<Value, Value> &grads, Value value,
                                Value grad, OpBuilder &b) {
  auto [it, inserted] = grads.try_emplace(value, grad);
  if (!inserted)
    it->second =
        AddOp::create(b, grad.getLoc(), grad.getType(), it->second, grad);
}

void Differentiator::accumulateParam(ParamGrads &paramGrads, StringAttr name,
                                     Value grad, OpBuilder &b) {
  auto [it, inserted] = paramGrads.insert({name, grad});
  if (!inserted)
    it->second =
        AddOp::create(b, grad.getLoc(), grad.getType(), it->second, grad);
}

LogicalResult Differentiator::backprop(ArrayRef<Operation *> ops,
                                       DenseMap<Value, Value> &grads,
                                       ParamGrads &paramGrads, OpBuilder &b) {
  for (Operation *op : llvm::reverse(ops)) {
    SmallVector<Value> resultGrads;
    bool needed = false;
    for (Value result : op->getResults()) {
      resultGrads.push_back(grads.lookup(result));
      needed |= static_cast<bool>(resultGrads.back());
    }
    if (!needed)
      continue;
    if (auto get = dyn_cast<GetParamOp>(op)) {
      accumulateParam(paramGrads, get.getNameAttr().getAttr(), resultGrads[0],
                      b);
      continue;
    }
    if (auto layer = dyn_cast<LayerOp>(op)) {
      if (failed(backpropLayer(layer, resultGrads, grads, paramGrads, b)))
        return failure();
      continue;
    }
    auto vjp = dyn_cast<VjpOpInterface>(op);
    if (!vjp)
      return op->emitOpError("has no gradient rule; autodiff cannot "
                             "differentiate through it");
    SmallVector<Value> operandGrads;
    if (failed(vjp.buildVjp(b, resultGrads, operandGrads)))
      return failure();
    if (operandGrads.size() != op->getNumOperands())
      return op->emitOpError("gradient rule returned ")
             << operandGrads.size() << " gradients for " << op->getNumOperands()
             << " operands";
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad && isFloatTensor(operand))
        accumulate(grads, operand, grad, b);
  }
  return success();
}

LogicalResult Differentiator::backpropLayer(LayerOp forward,
                                            ArrayRef<Value> resultGrads,
                                            DenseMap<Value, Value> &grads,
                                            ParamGrads &paramGrads,
                                            OpBuilder &b) {
  Location loc = forward.getLoc();
  Block &forwardBody = forward.getBody().front();
  unsigned numInputs = forward.getInputs().size();

  // Where each block argument of the backward body comes from, outside the
  // layer: a forward input, a result gradient, or (savedIndex >= 0) a value
  // the forward layer will return.
  struct Source {
    Value value;
    int savedIndex = -1;
  };
  SmallVector<Source> sources;
  for (Value input : forward.getInputs())
    sources.push_back({input});
  SmallVector<unsigned> gradResults;
  for (auto [i, grad] : llvm::enumerate(resultGrads))
    if (grad) {
      gradResults.push_back(i);
      sources.push_back({grad});
    }

  // The body: a clone of the forward body (recomputation), then the
  // reverse sweep over the clones. It is built in a provisional backward
  // layer whose results are known only at the end.
  SmallVector<Value> provisionalInputs;
  for (const Source &source : sources)
    provisionalInputs.push_back(source.value);
  auto provisional = LayerOp::create(b, loc, TypeRange{}, forward.getKindAttr(),
                                     forward.getIndexAttr(), b.getUnitAttr(),
                                     provisionalInputs);
  Block *body = new Block();
  provisional.getBody().push_back(body);
  for (const Source &source : sources)
    body->addArgument(source.value.getType(), loc);
  OpBuilder inner = OpBuilder::atBlockEnd(body);
  IRMapping mapping;
  for (unsigned i = 0; i < numInputs; ++i)
    mapping.map(forwardBody.getArgument(i), body->getArgument(i));
  SmallVector<Operation *> clones;
  llvm::SmallPtrSet<Operation *, 32> cloneSet;
  DenseMap<Value, Value> original; // clone result -> forward value
  for (Operation &op : forwardBody.without_terminator()) {
    Operation *clone = inner.clone(op, mapping);
    clones.push_back(clone);
    cloneSet.insert(clone);
    for (auto [from, to] : llvm::zip(op.getResults(), clone->getResults()))
      original[to] = from;
  }
  DenseMap<Value, Value> innerGrads;
  auto yield = cast<YieldOp>(forwardBody.getTerminator());
  for (auto [k, i] : llvm::enumerate(gradResults))
    accumulate(innerGrads, mapping.lookup(yield.getValues()[i]),
               body->getArgument(numInputs + k), inner);
  ParamGrads layerParams;
  if (failed(backprop(clones, innerGrads, layerParams, inner))) {
    provisional.erase();
    return failure();
  }

  SmallVector<unsigned> inputsWithGrads;
  SmallVector<Value> outputs;
  for (unsigned i = 0; i < numInputs; ++i)
    if (Value grad = innerGrads.lookup(body->getArgument(i))) {
      inputsWithGrads.push_back(i);
      outputs.push_back(grad);
    }
  for (auto &entry : layerParams)
    outputs.push_back(entry.second);
  YieldOp::create(inner, loc, outputs);

  // The recompute policy: clone results that the gradient ops read and the
  // policy saves become block arguments fed by the forward layer.
  SmallVector<Value> saved; // forward values, in the forward body
  for (Operation *clone : clones) {
    if (!saves(clone))
      continue;
    for (Value result : clone->getResults()) {
      bool readByGradient = llvm::any_of(result.getUsers(), [&](Operation *u) {
        return !cloneSet.contains(u);
      });
      if (!readByGradient)
        continue;
      BlockArgument arg = body->addArgument(result.getType(), loc);
      result.replaceAllUsesWith(arg);
      sources.push_back({Value(), static_cast<int>(saved.size())});
      saved.push_back(original.lookup(result));
    }
  }
  for (Operation *clone : llvm::reverse(clones))
    if (clone->use_empty())
      clone->erase();
  for (int i = static_cast<int>(numInputs) - 1; i >= 0; --i)
    if (body->getArgument(i).use_empty()) {
      body->eraseArgument(i);
      sources.erase(sources.begin() + i);
    }

  // The forward layer returns the saved values as extra results.
  OpBuilder before(forward);
  SmallVector<Type> forwardTypes(forward.getResultTypes());
  for (Value value : saved)
    forwardTypes.push_back(value.getType());
  auto newForward = LayerOp::create(
      before, loc, forwardTypes, forward.getKindAttr(), forward.getIndexAttr(),
      forward.getBackwardAttr(), forward.getInputs());
  newForward.getBody().takeBody(forward.getBody());
  yield.getValuesMutable().append(saved);
  forward.replaceAllUsesWith(
      newForward.getResults().take_front(forward.getNumResults()));
  forward.erase();

  SmallVector<Value> operands;
  for (const Source &source : sources)
    operands.push_back(
        source.savedIndex < 0
            ? source.value
            : newForward.getResult(resultGrads.size() + source.savedIndex));
  SmallVector<Type> outputTypes;
  for (Value output : outputs)
    outputTypes.push_back(output.getType());
  OpBuilder atProvisional(provisional);
  auto backward =
      LayerOp::create(atProvisional, loc, outputTypes, newForward.getKindAttr(),
                      newForward.getIndexAttr(), b.getUnitAttr(), operands);
  backward.getBody().takeBody(provisional.getBody());
  provisional.erase();

  for (auto [k, i] : llvm::enumerate(inputsWithGrads))
    accumulate(grads, newForward.getInputs()[i], backward.getResult(k), b);
  for (auto [k, entry] : llvm::enumerate(layerParams))
    accumulateParam(paramGrads, entry.first,
                    backward.getResult(inputsWithGrads.size() + k), b);
  return success();
}

/// AdamW hyperparameters of the apply step.
struct AdamWOptions {
  double lr, minLr, beta1, beta2, epsilon, weightDecay, clipNorm;
  int64_t warmup, decaySteps;
  /// 16-bit parameters' gradients arrive in their own type (the
  /// grad-accumulation=param option) rather than in f32.
  bool sixteenBitGrads = false;
  /// The gradients arrive as token sums with the step's 1 / tokens (the
  /// fold-token-mean option), not as means.
  bool foldTokenMean = false;
};

/// Declares `triad.state` symbols after the module's last declaration,
/// refusing names that are taken.
class StateDeclarer {
public:
  explicit StateDeclarer(ModuleOp module) : module(module), b(module) {
    Operation *last = nullptr;
    for (Operation &op : module.getBody()->getOperations())
      if (isa<ParamOp, StateOp>(op))
        last = &op;
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPointToStart(module.getBody());
  }

  FailureOr<StateOp> declare(const Twine &symbol, RankedTensorType type,
                             InitAttr init, FlatSymbolRefAttr of = nullptr) {
    std::string text = symbol.str();
    if (module.lookupSymbol(text))
      return module.emitError("cannot declare the training state @")
             << text << ": the module already has a symbol of that name";
    return StateOp::create(b, module.getLoc(), text, type, init, of);
  }

private:
  ModuleOp module;
  OpBuilder b;
};

InitAttr constantInit(MLIRContext *context, InitKind kind, double value = 0) {
  return InitAttr::get(context, kind, APFloat(value), /*layers=*/0);
}

/// The loss-scaling state of f16 training, and the number of microbatch
/// losses the step's loss is the mean of (each backward starts from
/// scale / pieces).
struct LossScaling {
  StateOp scale, goodSteps;
  int64_t pieces = 1;
};

/// Builds `@<name>(grads...) -> (grad_norm, lr, skipped)`: one AdamW step
/// over every parameter (through an f32 master copy for f16/bf16
/// parameters), with its moments, master weights and step counter declared
/// as `triad.state`; with loss scaling, a step whose scaled gradients
/// overflowed changes nothing but the scale.
LogicalResult buildApplyStep(ModuleOp module, StringRef name,
                             ArrayRef<ParamOp> params,
                             const AdamWOptions &options,
                             std::optional<LossScaling> lossScaling) {
  MLIRContext *context = module.getContext();
  Location loc = module.getLoc();
  auto f32 = Float32Type::get(context);
  auto scalar = RankedTensorType::get({}, f32);
  StateDeclarer states(module);
  InitAttr zeros = constantInit(context, InitKind::zeros);

  FailureOr<StateOp> stepState =
      states.declare("optimizer.step", scalar, zeros);
  if (failed(stepState))
    return failure();
  struct ParamState {
    ParamOp param;
    StateOp m, v;
    std::optional<StateOp> master;
  };
  SmallVector<ParamState> paramStates;
  for (ParamOp param : params) {
    auto type = RankedTensorType::get(param.getTensorType().getShape(), f32);
    auto of = FlatSymbolRefAttr::get(param.getSymNameAttr());
    FailureOr<StateOp> m =
        states.declare("adam.m." + param.getSymName(), type, zeros, of);
    if (failed(m))
      return failure();
    FailureOr<StateOp> v =
        states.declare("adam.v." + param.getSymName(), type, zeros, of);
    if (failed(v))
      return failure();
    ParamState state{param, *m, *v, std::nullopt};
    if (!param.getTensorType().getElementType().isF32()) {
      FailureOr<StateOp> master = states.declare("master." + param.getSymName(),
                                                 type, param.getInit(), of);
      if (failed(master))
        return failure();
      state.master = *master;
    }
    paramStates.push_back(state);
  }

  OpBuilder b(context);
  // Gradients arrive in f32 whatever the parameter's type (the microbatch
  // step widens 16-bit ones: Megatron's main_grad), so that their sum over
  // microbatches and data-parallel ranks rounds once, in f32; with
  // grad-accumulation=param a 16-bit parameter's arrive in its type, summed
  // and rounded in it, and the norm and AdamW read them as they are
  // (widening each element as they compute in f32, which is exact: the
  // same numbers as widened copies, without an f32 copy of every gradient
  // live at once).
  SmallVector<Type> gradTypes;
  for (ParamOp param : params)
    gradTypes.push_back(
        options.sixteenBitGrads
            ? param.getTensorType()
            : RankedTensorType::get(param.getTensorType().getShape(), f32));
  // Folding the token mean: a last argument, the step's 1 / tokens, scales
  // the norm and the clipping coefficient instead of every gradient (not
  // under loss scaling, whose overflow check reads each mean gradient).
  bool foldMean = options.foldTokenMean && !lossScaling;
  SmallVector<Type> argTypes(gradTypes);
  if (foldMean)
    argTypes.push_back(scalar);
  b.setInsertionPointToEnd(module.getBody());
  // f16's dynamic loss scale is a fourth result, for the log.
  SmallVector<Type> resultTypes(lossScaling ? 4 : 3, scalar);
  auto apply = func::FuncOp::create(b, loc, name,
                                    b.getFunctionType(argTypes, resultTypes));
  for (auto [i, param] : llvm::enumerate(params))
    apply.setArgAttr(i, "triad.grad",
                     FlatSymbolRefAttr::get(ParamOp(param).getSymNameAttr()));
  if (foldMean)
    apply.setArgAttr(params.size(), kMeanScaleAttrName, b.getUnitAttr());
  apply.setResultAttr(0, "triad.output", b.getStringAttr("grad_norm"));
  apply.setResultAttr(1, "triad.output", b.getStringAttr("lr"));
  apply.setResultAttr(2, "triad.output", b.getStringAttr("skipped"));
  if (lossScaling)
    apply.setResultAttr(3, "triad.output", b.getStringAttr("loss_scale"));
  Block *body = apply.addEntryBlock();
  b.setInsertionPointToStart(body);

  auto read = [&](StringRef symbol, Type type) -> Value {
    return GetParamOp::create(b, loc, type, symbol);
  };
  auto constant = [&](double value) -> Value {
    return arith::ConstantOp::create(
        b, loc, scalar,
        DenseElementsAttr::get(scalar, b.getF32FloatAttr(value)));
  };
  auto mul = [&](Value x, Value y) -> Value {
    return MulOp::create(b, loc, x.getType(), x, y);
  };

  SmallVector<Value> grads(body->getArguments().take_front(params.size()));
  Value meanScale = foldMean ? body->getArguments().back() : Value();

  Value oldStep = read(stepState->getSymName(), scalar);
  Value step = AddOp::create(b, loc, scalar, oldStep, constant(1.0));
  Value lr = LrScheduleOp::create(
      b, loc, scalar, step, b.getF64FloatAttr(options.lr),
      b.getF64FloatAttr(options.minLr), b.getI64IntegerAttr(options.warmup),
      b.getI64IntegerAttr(options.decaySteps));
  // With loss scaling, a gradient element above f16's range (65504) once
  // the pieces are added (each piece starts from scale / pieces) makes the
  // sum infinite: the step overflows on every mesh where one rank's single
  // f16 gradient of the whole step would.
  FloatAttr limit;
  if (lossScaling)
    limit =
        b.getF64FloatAttr(65504.0 / static_cast<double>(lossScaling->pieces));
  Value total;
  for (Value grad : grads) {
    Value squares = SumSquaresOp::create(b, loc, scalar, grad, limit);
    total = total ? AddOp::create(b, loc, scalar, total, squares).getResult()
                  : squares;
  }

  // Loss scaling: unscale the norm and the gradients by 1 / scale, and skip
  // the step when they overflowed.
  Value skip = constant(0.0), unscale, newScale;
  if (lossScaling) {
    auto update = LossScaleUpdateOp::create(
        b, loc, scalar, scalar, scalar, scalar, total,
        read(lossScaling->scale.getSymName(), scalar),
        read(lossScaling->goodSteps.getSymName(), scalar),
        b.getI64IntegerAttr(1000), b.getF64FloatAttr(2.0),
        b.getF64FloatAttr(0.5));
    AssignOp::create(b, loc, lossScaling->scale.getSymName(),
                     update.getNewScale());
    newScale = update.getNewScale();
    AssignOp::create(b, loc, lossScaling->goodSteps.getSymName(),
                     update.getNewGoodSteps());
    skip = update.getSkip();
    unscale = update.getInverse();
    if (lossScaling->pieces != 1)
      unscale =
          mul(unscale, constant(static_cast<double>(lossScaling->pieces)));
    total = mul(total, mul(unscale, unscale));
  }
  // The mean gradient is scale x the sum: its norm's square is scale^2
  // times the sum's, and AdamW reads sum x (coefficient x scale).
  if (meanScale)
    total = mul(total, mul(meanScale, meanScale));
  auto clip = ClipCoefficientOp::create(b, loc, scalar, scalar, total,
                                        b.getF64FloatAttr(options.clipNorm));
  Value coefficient = clip.getCoefficient();
  if (unscale)
    coefficient = mul(coefficient, unscale);
  if (meanScale)
    coefficient = mul(coefficient, meanScale);
  auto keepUnlessSkipped = [&](Value old, Value updated) -> Value {
    if (!lossScaling)
      return updated;
    return SelectOp::create(b, loc, updated.getType(), skip, old, updated);
  };
  AssignOp::create(b, loc, stepState->getSymName(),
                   keepUnlessSkipped(oldStep, step));

  for (auto [state, grad] : llvm::zip(paramStates, grads)) {
    RankedTensorType type = state.param.getTensorType();
    RankedTensorType wide = state.m.getTensorType();
    StringRef weights =
        state.master ? state.master->getSymName() : state.param.getSymName();
    Value value = read(weights, wide);
    Value m = read(state.m.getSymName(), wide);
    Value v = read(state.v.getSymName(), wide);
    double decay = type.getRank() >= 2 ? options.weightDecay : 0.0;
    auto update = AdamWUpdateOp::create(
        b, loc, wide, wide, wide, value, grad, m, v, lr, step, coefficient,
        b.getF64FloatAttr(options.beta1), b.getF64FloatAttr(options.beta2),
        b.getF64FloatAttr(options.epsilon), b.getF64FloatAttr(decay));
    AssignOp::create(b, loc, weights,
                     keepUnlessSkipped(value, update.getNewParam()));
    AssignOp::create(b, loc, state.m.getSymName(),
                     keepUnlessSkipped(m, update.getNewM()));
    AssignOp::create(b, loc, state.v.getSymName(),
                     keepUnlessSkipped(v, update.getNewV()));
    // The low-precision parameter: its master rounded, or kept as it was.
    if (state.master) {
      Value old = read(state.param.getSymName(), type);
      Value rounded = CastOp::create(b, loc, type, update.getNewParam());
      AssignOp::create(b, loc, state.param.getSymName(),
                       keepUnlessSkipped(old, rounded));
    }
  }
  SmallVector<Value> results = {clip.getNorm(), lr, skip};
  if (newScale)
    results.push_back(newScale);
  func::ReturnOp::create(b, loc, results);
  return success();
}

struct AutodiffPass : public triad::impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  /// Checks the optimizer options; reports the first bad one.
  LogicalResult checkOptimizerOptions(ModuleOp module) {
    auto fail = [&]() {
      return module.emitError("invalid --triad-autodiff option: ");
    };
    auto num = [](double value) {
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%g", value);
      return std::string(buffer);
    };
    if (optimizer != "adamw")
      return fail() << "unknown optimizer '" << optimizer
                    << "' (expected adamw)";
    if (!(lr > 0.0) || !std::isfinite(lr))
      return fail() << "lr must be positive, got " << num(lr);
    // The step holds them in f32: a larger value would become infinite
    // (and print as INF, which the IR cannot read back).
    constexpr double kF32Max = 3.4028234663852886e38;
    for (auto [name, value] : {std::pair<const char *, double>{"lr", lr},
                               {"weight-decay", weightDecay},
                               {"clip-norm", clipNorm},
                               {"epsilon", epsilon},
                               {"loss-scale", lossScale}})
      if (value > kF32Max)
        return fail() << name << " must be at most " << num(kF32Max)
                      << " (the largest f32), got " << num(value);
    if (!(lossScale >= 1.0))
      return fail() << "loss-scale must be at least 1, got " << num(lossScale);
    if (lossPieces < 1)
      return fail() << "loss-pieces must be at least 1, got "
                    << lossPieces.getValue();
    if (gradAccumulation != "f32" && gradAccumulation != "param")
      return fail() << "grad-accumulation must be f32 or param, got '"
                    << gradAccumulation << "'";
    if (!(minLr >= 0.0 && minLr <= lr))
      return fail() << "min-lr must be in [0, lr], got " << num(minLr);
    if (warmup < 0)
      return fail() << "warmup must not be negative, got " << warmup.getValue();
    if (decaySteps < -1)
      return fail() << "decay-steps must be -1 (the run's length), 0 (no "
                       "decay) or a step, got "
                    << decaySteps.getValue();
    if (decaySteps > 0 && decaySteps < warmup)
      return fail() << "decay-steps (" << decaySteps.getValue()
                    << ") must be 0 (no decay) or end no earlier than the "
                       "warmup ("
                    << warmup.getValue() << ")";
    if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
      return fail() << "beta1 and beta2 must be in [0, 1), got " << num(beta1)
                    << " and " << num(beta2);
    if (!(epsilon > 0.0))
      return fail() << "epsilon must be positive, got " << num(epsilon);
    if (!(weightDecay >= 0.0) || !std::isfinite(weightDecay))
      return fail() << "weight-decay must not be negative, got "
                    << num(weightDecay);
    if (!(clipNorm >= 0.0) || !std::isfinite(clipNorm))
      return fail() << "clip-norm must not be negative (0 disables clipping), "
                       "got "
                    << num(clipNorm);
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Recompute> mode =
        llvm::StringSwitch<std::optional<Recompute>>(recompute)
            .Case("none", Recompute::None)
            .Case("selective", Recompute::Selective)
            .Case("full", Recompute::Full)
            .Default(std::nullopt);
    if (!mode) {
      module.emitError("unknown recompute mode '")
          << recompute << "' (expected none, selective or full)";
      return signalPassFailure();
    }
    auto forward = module.lookupSymbol<func::FuncOp>(functionName);
    if (!forward) {
      module.emitError("no function @") << functionName << " to differentiate";
      return signalPassFailure();
    }
    if (failed(checkOptimizerOptions(module)))
      return signalPassFailure();
    for (const std::string &name : {stepName.getValue(), applyName.getValue()})
      if (module.lookupSymbol(name)) {
        forward.emitError("cannot create @")
            << name << ": the module already has a symbol of that name";
        return signalPassFailure();
      }
    auto scalarF32 = RankedTensorType::get({}, Float32Type::get(&getContext()));
    FunctionType type = forward.getFunctionType();
    if (type.getNumResults() != 1 || type.getResult(0) != scalarF32) {
      forward.emitError("autodiff needs a function that returns one scalar "
                        "loss (tensor<f32>); @")
          << functionName << " returns " << type.getResults();
      return signalPassFailure();
    }

    auto step = cast<func::FuncOp>(forward->clone());
    step.setSymName(stepName);
    module.insert(std::next(Block::iterator(forward)), step);

    auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
    Value loss = ret.getOperand(0);
    SmallVector<Operation *> forwardOps;
    for (Operation &op : step.getBody().front().without_terminator())
      forwardOps.push_back(&op);

    // f16 parameters train with dynamic loss scaling: the backward pass
    // starts from the loss scale instead of 1.
    std::optional<LossScaling> lossScaling;
    if (llvm::any_of(module.getOps<ParamOp>(), [](ParamOp param) {
          return param.getTensorType().getElementType().isF16();
        })) {
      StateDeclarer states(module);
      FailureOr<StateOp> scale = states.declare(
          "loss_scale", scalarF32,
          constantInit(&getContext(), InitKind::constant, lossScale));
      FailureOr<StateOp> good =
          failed(scale)
              ? FailureOr<StateOp>(failure())
              : states.declare("loss_scale.good_steps", scalarF32,
                               constantInit(&getContext(), InitKind::zeros));
      if (failed(good)) {
        step.erase();
        return signalPassFailure();
      }
      lossScaling = LossScaling{*scale, *good, lossPieces};
    }

    OpBuilder b(ret);
    Value seed;
    if (lossScaling) {
      seed = GetParamOp::create(b, ret.getLoc(), scalarF32,
                                lossScaling->scale.getSymName());
      if (lossPieces != 1)
        seed = ScaleOp::create(
            b, ret.getLoc(), seed,
            b.getF64FloatAttr(1.0 / static_cast<double>(lossPieces)));
    } else {
      seed = arith::ConstantOp::create(
          b, ret.getLoc(), scalarF32,
          DenseElementsAttr::get(scalarF32, b.getF32FloatAttr(1.0)));
    }
    DenseMap<Value, Value> grads{{loss, seed}};
    ParamGrads paramGrads;
    if (failed(
            Differentiator(*mode).backprop(forwardOps, grads, paramGrads, b))) {
      step.erase();
      return signalPassFailure();
    }

    // The forward layers were rebuilt with extra results: read the loss
    // again.
    SmallVector<Value> results{ret.getOperand(0)};
    SmallVector<StringAttr> names;
    bool unused = false;
    for (auto param : module.getOps<ParamOp>()) {
      Value grad = paramGrads.lookup(param.getSymNameAttr());
      if (!grad) {
        param.emitError("parameter @")
            << param.getSymName() << " does not affect the loss of @"
            << functionName << "; it has no gradient";
        unused = true;
        continue;
      }
      // 16-bit gradients leave the step in f32, to be summed over
      // microbatches and ranks in f32 (see buildApplyStep), unless
      // grad-accumulation=param keeps them in their type.
      auto gradType = cast<RankedTensorType>(grad.getType());
      if (!gradType.getElementType().isF32() && gradAccumulation == "f32")
        grad = CastOp::create(
            b, ret.getLoc(),
            RankedTensorType::get(gradType.getShape(), b.getF32Type()), grad);
      results.push_back(grad);
      names.push_back(param.getSymNameAttr());
    }
    if (unused) {
      step.erase();
      return signalPassFailure();
    }
    func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    SmallVector<Type> resultTypes;
    for (Value result : results)
      resultTypes.push_back(result.getType());
    step.setFunctionType(
        FunctionType::get(&getContext(), type.getInputs(), resultTypes));
    step.setResultAttr(0, "triad.output", b.getStringAttr("loss"));
    for (auto [i, name] : llvm::enumerate(names))
      step.setResultAttr(i + 1, "triad.grad", FlatSymbolRefAttr::get(name));

    AdamWOptions options{
        lr,           minLr,    beta1,  beta2,      epsilon,
        weightDecay,  clipNorm, warmup, decaySteps, gradAccumulation == "param",
        foldTokenMean};
    if (failed(buildApplyStep(module, applyName,
                              llvm::to_vector(module.getOps<ParamOp>()),
                              options, lossScaling)))
      return signalPassFailure();
  }
};

} // namespace
