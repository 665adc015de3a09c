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
};

/// Builds `@<name>(grads...) -> (grad_norm, lr)`: one AdamW step over every
/// parameter, with its moments and step counter declared as `triad.state`.
LogicalResult buildApplyStep(ModuleOp module, StringRef name,
                             ArrayRef<ParamOp> params,
                             const AdamWOptions &options) {
  MLIRContext *context = module.getContext();
  Location loc = module.getLoc();
  auto scalar = RankedTensorType::get({}, Float32Type::get(context));
  OpBuilder b(context);

  // State symbols, after the last declaration.
  Operation *lastDecl = nullptr;
  for (Operation &op : module.getBody()->getOperations())
    if (isa<ParamOp, StateOp>(op))
      lastDecl = &op;
  if (lastDecl)
    b.setInsertionPointAfter(lastDecl);
  else
    b.setInsertionPointToStart(module.getBody());
  auto zeros =
      InitAttr::get(context, InitKind::zeros, APFloat(0.0), /*layers=*/0);
  auto declare = [&](const Twine &symbol, RankedTensorType type,
                     FlatSymbolRefAttr of) -> FailureOr<StateOp> {
    std::string text = symbol.str();
    if (module.lookupSymbol(text))
      return module.emitError("cannot declare the optimizer state @")
             << text << ": the module already has a symbol of that name";
    return StateOp::create(b, loc, text, type, zeros, of);
  };
  FailureOr<StateOp> stepState = declare("optimizer.step", scalar, nullptr);
  if (failed(stepState))
    return failure();
  SmallVector<std::pair<StateOp, StateOp>> moments;
  for (ParamOp param : params) {
    auto type = RankedTensorType::get(param.getTensorType().getShape(),
                                      Float32Type::get(context));
    auto of = FlatSymbolRefAttr::get(param.getSymNameAttr());
    FailureOr<StateOp> m = declare("adam.m." + param.getSymName(), type, of);
    if (failed(m))
      return failure();
    FailureOr<StateOp> v = declare("adam.v." + param.getSymName(), type, of);
    if (failed(v))
      return failure();
    moments.push_back({*m, *v});
  }

  SmallVector<Type> gradTypes;
  for (ParamOp param : params)
    gradTypes.push_back(param.getTensorType());
  b.setInsertionPointToEnd(module.getBody());
  auto apply = func::FuncOp::create(
      b, loc, name, b.getFunctionType(gradTypes, {scalar, scalar}));
  for (auto [i, param] : llvm::enumerate(params))
    apply.setArgAttr(i, "triad.grad",
                     FlatSymbolRefAttr::get(ParamOp(param).getSymNameAttr()));
  apply.setResultAttr(0, "triad.output", b.getStringAttr("grad_norm"));
  apply.setResultAttr(1, "triad.output", b.getStringAttr("lr"));
  Block *body = apply.addEntryBlock();
  b.setInsertionPointToStart(body);

  auto read = [&](StringRef symbol, Type type) -> Value {
    return GetParamOp::create(b, loc, type, symbol);
  };
  Value one = arith::ConstantOp::create(
      b, loc, scalar, DenseElementsAttr::get(scalar, b.getF32FloatAttr(1.0)));
  Value step =
      AddOp::create(b, loc, scalar, read(stepState->getSymName(), scalar), one);
  AssignOp::create(b, loc, stepState->getSymName(), step);
  Value lr = LrScheduleOp::create(
      b, loc, scalar, step, b.getF64FloatAttr(options.lr),
      b.getF64FloatAttr(options.minLr), b.getI64IntegerAttr(options.warmup),
      b.getI64IntegerAttr(std::max(options.decaySteps, options.warmup)));
  Value total;
  for (Value grad : body->getArguments()) {
    Value squares = SumSquaresOp::create(b, loc, scalar, grad);
    total = total ? AddOp::create(b, loc, scalar, total, squares).getResult()
                  : squares;
  }
  auto clip = ClipCoefficientOp::create(b, loc, scalar, scalar, total,
                                        b.getF64FloatAttr(options.clipNorm));
  for (auto [constParam, state, grad] :
       llvm::zip(params, moments, body->getArguments())) {
    ParamOp param = constParam;
    RankedTensorType type = param.getTensorType();
    RankedTensorType momentType = state.first.getTensorType();
    double decay = type.getRank() >= 2 ? options.weightDecay : 0.0;
    Value value = read(param.getSymName(), type);
    Value m = read(state.first.getSymName(), momentType);
    Value v = read(state.second.getSymName(), momentType);
    auto update = AdamWUpdateOp::create(
        b, loc, type, momentType, momentType, value, grad, m, v, lr, step,
        clip.getCoefficient(), b.getF64FloatAttr(options.beta1),
        b.getF64FloatAttr(options.beta2), b.getF64FloatAttr(options.epsilon),
        b.getF64FloatAttr(decay));
    AssignOp::create(b, loc, param.getSymName(), update.getNewParam());
    AssignOp::create(b, loc, state.first.getSymName(), update.getNewM());
    AssignOp::create(b, loc, state.second.getSymName(), update.getNewV());
  }
  func::ReturnOp::create(b, loc, ValueRange{clip.getNorm(), lr});
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
    if (!(minLr >= 0.0 && minLr <= lr))
      return fail() << "min-lr must be in [0, lr], got " << num(minLr);
    if (warmup < 0 || decaySteps < 0)
      return fail() << "warmup and decay-steps must not be negative";
    if (decaySteps > 0 && decaySteps < warmup)
      return fail() << "decay-steps (" << decaySteps.getValue()
                    << ") must not end before the warmup (" << warmup.getValue()
                    << ")";
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

    OpBuilder b(ret);
    Value one = arith::ConstantOp::create(
        b, ret.getLoc(), scalarF32,
        DenseElementsAttr::get(scalarF32, b.getF32FloatAttr(1.0)));
    DenseMap<Value, Value> grads{{loss, one}};
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

    AdamWOptions options{lr,          minLr,    beta1,  beta2,     epsilon,
                         weightDecay, clipNorm, warmup, decaySteps};
    if (failed(buildApplyStep(module, applyName,
                              llvm::to_vector(module.getOps<ParamOp>()),
                              options)))
      return signalPassFailure();
  }
};

} // namespace
