//===- Interpreter.cpp - reference interpreter of the triad dialect -------===//
//
// Walks a function op by op, keeping one float64 tensor per SSA value, and
// dispatches each op on its class to the kernel that defines it.
//
//===----------------------------------------------------------------------===//

#include "triad/Interpreter/Interpreter.h"

#include "triad/Interpreter/Kernels.h"

#include "dialects/Dist/DistDialect.h"
#include "dialects/Triad/TriadOps.h"
#include "runtime/init/Init.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace triad::interp {

double roundTo(Type type, double value) {
  if (type.isF32())
    return static_cast<double>(static_cast<float>(value));
  if (type.isBF16() || type.isF16()) {
    APFloat rounded(value);
    bool losesInfo = false;
    rounded.convert(cast<FloatType>(type).getFloatSemantics(),
                    APFloat::rmNearestTiesToEven, &losesInfo);
    return rounded.convertToDouble();
  }
  return value;
}

double initialValue(Attribute init, uint64_t seed, StringRef parameter,
                    uint64_t index) {
  auto spec = cast<InitAttr>(init);
  if (spec.getKind() != InitKind::normal &&
      spec.getKind() != InitKind::scaled_normal)
    return spec.getConstantValue();
  float value = 0.0f;
  rt::fillNormal(seed, std::string_view(parameter.data(), parameter.size()),
                 spec.getEffectiveStd(), index, 1, &value);
  return value;
}

Interpreter::Interpreter(ModuleOp module, InterpreterOptions options)
    : module(module), options(options) {}

/// The initial value of a declared tensor: its init spec drawn from the
/// stream `stream`, rounded to `precision` (the element type of the tensor,
/// or of the parameter a state copies) and then to its element type.
static Tensor initialTensor(RankedTensorType type, Attribute init,
                            uint64_t seed, StringRef stream, Type precision,
                            ArrayRef<int64_t> unpadded) {
  Tensor value(type.getShape());
  // Each element draws at its index in the unpadded tensor (row-major
  // strides of that shape); padding is 0.
  std::vector<int64_t> strides(unpadded.size(), 1);
  for (int64_t d = static_cast<int64_t>(unpadded.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * unpadded[d + 1];
  for (int64_t i = 0; i < value.numElements(); ++i) {
    int64_t index = 0, rest = i;
    bool padding = false;
    for (int64_t d = value.rank() - 1; d >= 0; --d) {
      int64_t coordinate = rest % value.dim(d);
      rest /= value.dim(d);
      padding = padding || coordinate >= unpadded[d];
      index += coordinate * strides[d];
    }
    value.data[i] =
        padding ? 0.0
                : roundTo(type.getElementType(),
                          roundTo(precision,
                                  initialValue(init, seed, stream, index)));
  }
  return value;
}

/// `rank`'s index in its group over `axes` of `mesh` (the first listed axis
/// slowest), as the collectives and split layouts count pieces.
static int64_t groupIndex(dist::MeshOp mesh, int64_t rank,
                          ArrayRef<StringRef> axes) {
  // This rank's coordinate on each axis (the last axis varies fastest).
  llvm::StringMap<int64_t> coordinate;
  int64_t rest = rank;
  for (int64_t i = mesh.getSizes().size() - 1; i >= 0; --i) {
    coordinate[cast<StringAttr>(mesh.getAxes()[i]).getValue()] =
        rest % mesh.getSizes()[i];
    rest /= mesh.getSizes()[i];
  }
  int64_t index = 0;
  for (StringRef axis : axes)
    index =
        index * mesh.getAxisSize(axis).value_or(1) + coordinate.lookup(axis);
  return index;
}

/// This rank's piece of `value` when `symbol` declares a split layout on
/// the module's mesh; `value` itself otherwise.
static Tensor localPiece(Operation *symbol, Tensor value, int64_t rank) {
  auto layout = symbol->getAttrOfType<dist::LayoutAttr>(
      dist::DistDialect::kLayoutAttrName);
  dist::MeshOp mesh = dist::MeshOp::lookup(symbol);
  if (!layout || !mesh)
    return value;
  std::vector<int64_t> offsets(value.rank(), 0), sizes(value.shape);
  for (int64_t dim = 0; dim < layout.getRank() && dim < value.rank(); ++dim) {
    SmallVector<StringRef> axes = layout.getSplitAxes(dim);
    sizes[dim] /= mesh.getGroupSize(axes);
    offsets[dim] = groupIndex(mesh, rank, axes) * sizes[dim];
  }
  return slice(value, offsets, sizes);
}

void Interpreter::initializeParameters() {
  params.clear();
  llvm::StringMap<ParamOp> declared;
  for (auto param : module.getOps<ParamOp>()) {
    Type elementType = param.getTensorType().getElementType();
    declared[param.getSymName()] = param;
    params[param.getSymName()] =
        localPiece(param,
                   initialTensor(param.getTensorType(), param.getInit(),
                                 options.seed, param.getSymName(), elementType,
                                 param.getUnpaddedShape()),
                   options.rank);
  }
  // A state of a parameter draws from the parameter's stream and precision:
  // a master copy starts equal to its parameter.
  for (auto state : module.getOps<StateOp>()) {
    StringRef stream = state.getSymName();
    Type precision = state.getTensorType().getElementType();
    // The state of a padded parameter is padded alike.
    ArrayRef<int64_t> unpadded = state.getTensorType().getShape();
    if (state.getOf()) {
      stream = state.getOfAttr().getValue();
      if (ParamOp param = declared.lookup(stream)) {
        precision = param.getTensorType().getElementType();
        unpadded = param.getUnpaddedShape();
      }
    }
    params[state.getSymName()] =
        localPiece(state,
                   initialTensor(state.getTensorType(), state.getInit(),
                                 options.seed, stream, precision, unpadded),
                   options.rank);
  }
}

FailureOr<std::vector<Tensor>> Interpreter::call(StringRef name,
                                                 ArrayRef<Tensor> args) {
  auto func = module.lookupSymbol<func::FuncOp>(name);
  if (!func)
    return module.emitError("no function @") << name << " to interpret";
  if (func.isExternal())
    return func.emitError("cannot interpret the external function @") << name;
  FunctionType type = func.getFunctionType();
  if (type.getNumInputs() != args.size())
    return func.emitError("@") << name << " takes " << type.getNumInputs()
                               << " arguments, got " << args.size();
  for (auto [i, pair] : llvm::enumerate(llvm::zip(type.getInputs(), args))) {
    auto [argType, arg] = pair;
    auto tensorType = dyn_cast<RankedTensorType>(argType);
    if (!tensorType || tensorType.getShape() != ArrayRef(arg.shape))
      return func.emitError("argument ")
             << i << " of @" << name << " has type " << argType
             << " but the given value has shape [" << arg.shapeString() << "]";
  }
  return runRegion(func.getBody(), args);
}

FailureOr<std::vector<Tensor>> Interpreter::runRegion(Region &region,
                                                      ArrayRef<Tensor> args) {
  Block &block = region.front();
  llvm::DenseMap<Value, Tensor> values;
  for (auto [arg, value] : llvm::zip(block.getArguments(), args))
    values[arg] = value;
  for (Operation &op : block) {
    SmallVector<const Tensor *> operands;
    for (Value operand : op.getOperands()) {
      auto it = values.find(operand);
      if (it == values.end())
        return op.emitError("operand is not a value the interpreter computed");
      operands.push_back(&it->second);
    }
    if (op.hasTrait<OpTrait::IsTerminator>()) {
      std::vector<Tensor> results;
      for (const Tensor *operand : operands)
        results.push_back(*operand);
      return results;
    }
    FailureOr<std::vector<Tensor>> results = evaluate(&op, operands);
    if (failed(results))
      return failure();
    for (auto [result, value] : llvm::zip(op.getResults(), *results)) {
      if (options.nativePrecision)
        if (auto type = dyn_cast<RankedTensorType>(result.getType()))
          for (double &element : value.data)
            element = roundTo(type.getElementType(), element);
      values[result] = std::move(value);
    }
  }
  return region.getParentOp()->emitError("region has no terminator");
}

static Mask toMask(MaskKind kind) {
  switch (kind) {
  case MaskKind::causal:
    return Mask::Causal;
  case MaskKind::prefix:
    return Mask::Prefix;
  case MaskKind::none:
    return Mask::None;
  }
  return Mask::None;
}

static Activation toActivation(ActivationKind kind) {
  switch (kind) {
  case ActivationKind::gelu:
    return Activation::Gelu;
  case ActivationKind::gelu_tanh:
    return Activation::GeluTanh;
  case ActivationKind::fast_gelu:
    return Activation::FastGelu;
  case ActivationKind::relu:
    return Activation::Relu;
  case ActivationKind::silu:
    return Activation::Silu;
  }
  return Activation::Relu;
}

/// Wraps a kernel's data-dependent error as a diagnostic at `op`.
template <typename T>
static FailureOr<T> check(Operation *op, llvm::Expected<T> result) {
  if (!result)
    return op->emitError() << llvm::toString(result.takeError());
  return std::move(*result);
}

FailureOr<std::vector<Tensor>>
Interpreter::evaluate(Operation *op, ArrayRef<const Tensor *> in) {
  using Result = FailureOr<std::vector<Tensor>>;
  auto one = [](Tensor t) -> Result {
    return std::vector<Tensor>{std::move(t)};
  };
  auto oneOrError = [&](llvm::Expected<Tensor> t) -> Result {
    FailureOr<Tensor> checked = check(op, std::move(t));
    if (failed(checked))
      return failure();
    return one(std::move(*checked));
  };
  auto resultShape = [&]() {
    return cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  };

  // A vocab-parallel local form holds `size` rows or columns of the
  // vocabulary from this rank's index in its group over `axes` on; a
  // padded vocabulary has `classes` of them.
  auto vocabPiece =
      [&](std::optional<ArrayAttr> axes, int64_t size, const Tensor *lse,
          std::optional<int64_t> classes =
              std::nullopt) -> FailureOr<std::optional<VocabPiece>> {
    if (!axes)
      return classes
                 ? std::optional<VocabPiece>(VocabPiece{nullptr, 0, *classes})
                 : std::optional<VocabPiece>();
    dist::MeshOp mesh = dist::MeshOp::lookup(op);
    if (!mesh)
      return op->emitOpError("has vocab_split but the module has no "
                             "dist.mesh");
    SmallVector<StringRef> names(axes->getAsValueRange<StringAttr>());
    return std::optional<VocabPiece>(
        VocabPiece{lse, groupIndex(mesh, options.rank, names) * size,
                   classes.value_or(size * mesh.getGroupSize(names))});
  };

  if (isa<dist::DistDialect>(op->getDialect())) {
    if (!options.collectives)
      return op->emitError("is a collective; run the module on its mesh "
                           "(MeshInterpreter)");
    return options.collectives(op, in);
  }

  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case([&](GetParamOp get) -> Result {
        auto it = params.find(get.getName());
        if (it == params.end())
          return get.emitError("parameter ")
                 << get.getNameAttr()
                 << " has no value (initializeParameters() not called?)";
        return one(it->second);
      })
      .Case([&](LayerOp layer) -> Result {
        std::vector<Tensor> args;
        for (const Tensor *t : in)
          args.push_back(*t);
        return runRegion(layer.getBody(), args);
      })
      .Case([&](arith::ConstantOp constant) -> Result {
        auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
        if (!dense)
          return constant.emitError("only dense tensor constants can be "
                                    "interpreted");
        Tensor value(dense.getType().getShape());
        if (dense.getElementType().isIntOrIndex()) {
          int64_t i = 0;
          for (const APInt &v : dense.getValues<APInt>())
            value.data[i++] = static_cast<double>(v.getSExtValue());
        } else {
          int64_t i = 0;
          for (const APFloat &v : dense.getValues<APFloat>())
            value.data[i++] = v.convertToDouble();
        }
        return one(std::move(value));
      })
      .Case([&](func::CallOp callOp) -> Result {
        std::vector<Tensor> args;
        for (const Tensor *t : in)
          args.push_back(*t);
        return call(callOp.getCallee(), args);
      })
      .Case([&](EmbeddingOp e) -> Result {
        FailureOr<std::optional<VocabPiece>> piece =
            vocabPiece(e.getVocabAxes(), in[1]->dim(0), nullptr);
        if (failed(piece))
          return failure();
        if (!*piece)
          return oneOrError(embedding(*in[0], *in[1]));
        return oneOrError(
            embedding(*in[0], *in[1], (*piece)->first, (*piece)->vocab));
      })
      .Case([&](MatmulOp m) {
        return one(
            matmul(*in[0], *in[1], m.getTransposeLhs(), m.getTransposeRhs()));
      })
      .Case([&](AddOp) { return one(add(*in[0], *in[1])); })
      .Case([&](MulOp) { return one(mul(*in[0], *in[1])); })
      .Case([&](ScaleOp s) {
        return one(scale(*in[0], s.getFactor().convertToDouble()));
      })
      .Case([&](BiasAddOp) { return one(biasAdd(*in[0], *in[1])); })
      .Case([&](GeluOp g) {
        return one(gelu(*in[0], g.getApproximate() == GeluApproximation::tanh));
      })
      .Case([&](FastGeluOp) { return one(fastGelu(*in[0])); })
      .Case([&](ReluOp) { return one(relu(*in[0])); })
      .Case([&](SiluOp) { return one(silu(*in[0])); })
      .Case([&](SwigluOp) { return one(swiglu(*in[0], *in[1])); })
      .Case([&](GegluOp) { return one(geglu(*in[0], *in[1])); })
      .Case([&](LayerNormOp n) {
        return one(layerNorm(*in[0], *in[1], n.getBeta() ? in[2] : nullptr,
                             n.getEpsilon().convertToDouble()));
      })
      .Case([&](RmsNormOp n) {
        return one(rmsNorm(*in[0], *in[1], n.getEpsilon().convertToDouble()));
      })
      .Case([&](AttentionOp a) {
        const Tensor *prefix = a.getPrefixLengths() ? in[3] : nullptr;
        const Tensor *slopes =
            a.getAlibiSlopes() ? in[a.getPrefixLengths() ? 4 : 3] : nullptr;
        return oneOrError(attention(
            *in[0], *in[1], *in[2], prefix, slopes, a.getHeads(),
            a.getKvHeads(), toMask(a.getMask()), a.getEffectiveScale()));
      })
      .Case([&](RopeOp r) {
        return one(rope(*in[0], r.getHeads(), r.getRotaryDim(),
                        r.getBase().convertToDouble()));
      })
      .Case([&](ReshapeOp) { return one(reshape(*in[0], resultShape())); })
      .Case([&](TransposeOp t) {
        return one(transpose(*in[0], t.getPermutation()));
      })
      .Case([&](SliceOp s) {
        return one(slice(*in[0], s.getOffsets(), s.getSizes()));
      })
      .Case([&](ConcatOp c) {
        return one(concat(SmallVector<const Tensor *>(in), c.getDim()));
      })
      .Case([&](BroadcastOp) { return one(broadcast(*in[0], resultShape())); })
      .Case([&](CastOp c) {
        // A cast rounds to its element type whatever the precision mode.
        Tensor value = *in[0];
        Type target = c.getType().getElementType();
        for (double &v : value.data)
          v = target.isInteger(32) ? std::trunc(v) : roundTo(target, v);
        return one(std::move(value));
      })
      .Case([&](DropoutOp d) -> Result {
        // A piece of the sequence is a run per sample (rows `index * local
        // sequence` onwards of each), a sample being `pieces` local ones.
        rt::DropoutPiece piece;
        int64_t pieces = 1;
        if (std::optional<ArrayAttr> seqAxes = d.getSeqAxes()) {
          dist::MeshOp mesh = dist::MeshOp::lookup(op);
          if (!mesh)
            return op->emitOpError("has seq_split but the module has no "
                                   "dist.mesh");
          SmallVector<StringRef> axes(seqAxes->getAsValueRange<StringAttr>());
          for (StringRef axis : axes)
            pieces *= mesh.getAxisSize(axis).value_or(1);
          ArrayRef<int64_t> shape = in[0]->shape;
          int64_t rows = 1;
          for (int64_t dim : shape.drop_front(1))
            rows *= dim;
          piece.run = static_cast<uint64_t>(rows);
          piece.stride = static_cast<uint64_t>(rows * pieces);
          piece.first = static_cast<uint64_t>(
              groupIndex(mesh, options.rank, axes) * rows);
        }
        // A piece of the batch starts at its samples' global index: the
        // index over the real axes, then the microbatch within it.
        if (d.getBatchAxes()) {
          int64_t microbatches = 1, index = 0;
          if (d.splitsIntoMicrobatches()) {
            auto function = op->getParentOfType<func::FuncOp>();
            auto count =
                function
                    ? function->getAttrOfType<IntegerAttr>("triad.microbatches")
                    : IntegerAttr();
            if (!count)
              return op->emitOpError("splits the batch into microbatches "
                                     "outside a function split by "
                                     "--triad-split-microbatches");
            microbatches = count.getInt();
            index = options.microbatch;
          }
          SmallVector<StringRef> real = d.getBatchMeshAxes();
          if (!real.empty()) {
            dist::MeshOp mesh = dist::MeshOp::lookup(op);
            if (!mesh)
              return op->emitOpError("has batch_split but the module has no "
                                     "dist.mesh");
            index += groupIndex(mesh, options.rank, real) * microbatches;
          }
          piece.first +=
              static_cast<uint64_t>(index * pieces * in[0]->numElements());
        }
        return one(dropout(*in[0], d.getProbability().convertToDouble(),
                           options.seed, options.step, d.getRngStream(),
                           piece));
      })
      .Case([&](CrossEntropyOp c) -> Result {
        FailureOr<std::optional<VocabPiece>> piece =
            vocabPiece(c.getVocabAxes(), in[0]->shape.back(),
                       c.getLse() ? in[2] : nullptr, c.getClasses());
        if (failed(piece))
          return failure();
        FailureOr<double> loss =
            check(op, crossEntropy(*in[0], *in[1], c.getIgnoreIndex(), *piece));
        if (failed(loss))
          return failure();
        return one(Tensor::scalar(*loss));
      })
      .Case([&](SumOp s) {
        bool keep = s.getType().getRank() == s.getX().getType().getRank();
        return one(reduce(*in[0], s.getDims(), keep, /*mean=*/false));
      })
      .Case([&](MeanOp m) {
        bool keep = m.getType().getRank() == m.getX().getType().getRank();
        return one(reduce(*in[0], m.getDims(), keep, /*mean=*/true));
      })
      .Case([&](PadOp p) { return one(pad(*in[0], p.getLow(), p.getHigh())); })
      .Case([&](EmbeddingGradOp e) -> Result {
        int64_t rows = e.getType().getDimSize(0);
        FailureOr<std::optional<VocabPiece>> piece =
            vocabPiece(e.getVocabAxes(), rows, nullptr);
        if (failed(piece))
          return failure();
        if (!*piece)
          return one(embeddingGrad(*in[0], *in[1], rows));
        return one(embeddingGrad(*in[0], *in[1], rows, (*piece)->first));
      })
      .Case([&](ActivationGradOp a) {
        return one(activationGrad(toActivation(a.getKind()), *in[0], *in[1]));
      })
      .Case([&](LayerNormGradOp n) -> Result {
        NormGrads g = layerNormGrad(*in[0], *in[1], *in[2],
                                    n.getEpsilon().convertToDouble());
        return std::vector<Tensor>{std::move(g.dx), std::move(g.dgamma)};
      })
      .Case([&](RmsNormGradOp n) -> Result {
        NormGrads g = rmsNormGrad(*in[0], *in[1], *in[2],
                                  n.getEpsilon().convertToDouble());
        return std::vector<Tensor>{std::move(g.dx), std::move(g.dgamma)};
      })
      .Case([&](AttentionGradOp a) -> Result {
        size_t next = 3;
        const Tensor *prefix = a.getPrefixLengths() ? in[next++] : nullptr;
        const Tensor *slopes = a.getAlibiSlopes() ? in[next++] : nullptr;
        FailureOr<AttentionGrads> grads = check(
            op, attentionGrad(*in[0], *in[1], *in[2], prefix, slopes, *in[next],
                              a.getHeads(), a.getKvHeads(), toMask(a.getMask()),
                              a.getEffectiveScale()));
        if (failed(grads))
          return failure();
        return std::vector<Tensor>{std::move(grads->dq), std::move(grads->dk),
                                   std::move(grads->dv)};
      })
      .Case([&](RopeGradOp r) {
        return one(ropeGrad(*in[0], r.getHeads(), r.getRotaryDim(),
                            r.getBase().convertToDouble()));
      })
      .Case([&](CrossEntropyGradOp c) -> Result {
        FailureOr<std::optional<VocabPiece>> piece =
            vocabPiece(c.getVocabAxes(), in[0]->shape.back(),
                       c.getLse() ? in[3] : nullptr, c.getClasses());
        if (failed(piece))
          return failure();
        return oneOrError(crossEntropyGrad(*in[0], *in[1], in[2]->data[0],
                                           c.getIgnoreIndex(), *piece));
      })
      .Case([&](LogSumExpOp l) -> Result {
        FailureOr<std::optional<VocabPiece>> piece = vocabPiece(
            l.getVocabAxes(), in[0]->shape.back(), nullptr, l.getClasses());
        if (failed(piece))
          return failure();
        return one(logSumExp(*in[0], *piece));
      })
      .Case([&](AssignOp a) -> Result {
        auto it = params.find(a.getName());
        if (it == params.end())
          return a.emitError("no value to replace for ") << a.getNameAttr();
        it->second = *in[0];
        return std::vector<Tensor>{};
      })
      .Case([&](LrScheduleOp l) -> FailureOr<std::vector<Tensor>> {
        int64_t decay = l.getDecayAttr().getInt();
        if (decay == -1) {
          if (!options.runSteps) {
            l.emitError("the schedule decays over the run (decay = -1): "
                        "give the run's last step (--run-steps)");
            return failure();
          }
          decay = *options.runSteps;
        }
        return one(Tensor::scalar(learningRate(
            in[0]->data[0], l.getPeak().convertToDouble(),
            l.getFloor().convertToDouble(), l.getWarmup(), decay)));
      })
      .Case([&](SumSquaresOp op) {
        FloatAttr limit = op.getLimitAttr();
        return one(Tensor::scalar(sumSquares(
            *in[0], limit ? limit.getValueAsDouble()
                          : std::numeric_limits<double>::infinity())));
      })
      .Case([&](ClipCoefficientOp c) -> Result {
        Clip clip =
            clipCoefficient(in[0]->data[0], c.getMaxNorm().convertToDouble());
        return std::vector<Tensor>{Tensor::scalar(clip.coefficient),
                                   Tensor::scalar(clip.norm)};
      })
      .Case([&](AdamWUpdateOp a) -> Result {
        AdamWState next = adamw(
            *in[0], *in[1], *in[2], *in[3], in[4]->data[0], in[5]->data[0],
            in[6]->data[0], a.getBeta1().convertToDouble(),
            a.getBeta2().convertToDouble(), a.getEpsilon().convertToDouble(),
            a.getWeightDecay().convertToDouble());
        return std::vector<Tensor>{std::move(next.param), std::move(next.m),
                                   std::move(next.v)};
      })
      .Case([&](SelectOp) {
        return one(in[0]->data[0] != 0.0 ? *in[1] : *in[2]);
      })
      .Case([&](LossScaleUpdateOp l) -> Result {
        LossScale next = updateLossScale(in[0]->data[0], in[1]->data[0],
                                         in[2]->data[0], l.getGrowthInterval(),
                                         l.getGrowth().convertToDouble(),
                                         l.getBackoff().convertToDouble());
        return std::vector<Tensor>{
            Tensor::scalar(next.skip), Tensor::scalar(next.scale),
            Tensor::scalar(next.goodSteps), Tensor::scalar(next.inverse)};
      })
      .Default([&](Operation *other) -> Result {
        return other->emitError("the reference interpreter does not support '")
               << other->getName() << "'";
      });
}

} // namespace triad::interp
