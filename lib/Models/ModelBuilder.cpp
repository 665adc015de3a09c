//===- ModelBuilder.cpp - builds triad model IR from a config -------------===//
//
// Emits the forward model: parameters at module level, then `@forward` as a
// chain of `triad.layer` parts (embedding, transformer 0..L-1, [CodeGeeX's
// top query layer,] head) ending in the cross-entropy loss.
//
//===----------------------------------------------------------------------===//

#include "triad/Models/ModelBuilder.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace triad;

std::vector<float> triad::alibiSlopes(int64_t heads) {
  auto geometric = [](int64_t n) {
    std::vector<float> slopes;
    double start = std::pow(2.0, -8.0 / static_cast<double>(n));
    double slope = start;
    for (int64_t i = 0; i < n; ++i, slope *= start)
      slopes.push_back(static_cast<float>(slope));
    return slopes;
  };
  int64_t power = 1;
  while (power * 2 <= heads)
    power *= 2;
  std::vector<float> slopes = geometric(power);
  if (power != heads) {
    std::vector<float> extra = geometric(2 * power);
    for (int64_t i = 0; i < heads - power; ++i)
      slopes.push_back(extra[2 * i]);
  }
  return slopes;
}

namespace {

class ModelIRBuilder {
public:
  ModelIRBuilder(MLIRContext &context, const ModelConfig &config)
      : context(context), config(config), builder(&context),
        loc(UnknownLoc::get(&context)) {}

  OwningOpRef<ModuleOp> build();

private:
  Type elementType() {
    switch (config.dtype) {
    case DType::F32:
      return builder.getF32Type();
    case DType::BF16:
      return builder.getBF16Type();
    case DType::F16:
      return builder.getF16Type();
    }
    return builder.getF32Type();
  }
  RankedTensorType floatTensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elementType());
  }
  RankedTensorType idTensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder.getI32Type());
  }
  RankedTensorType activationType() {
    return floatTensor({config.batch, config.seq, config.hidden});
  }

  InitAttr normalInit(double stddev) {
    return InitAttr::get(&context, InitKind::normal, APFloat(stddev), 0);
  }
  InitAttr constantInit(InitKind kind) {
    return InitAttr::get(&context, kind, APFloat(0.0), 0);
  }
  /// Initialization of the projections that write into the residual stream
  /// (attention output, MLP output): GPT-2's scaled normal, or the DeepNorm
  /// gain beta.
  InitAttr residualOutputInit() {
    if (config.placement == NormPlacement::DeepNorm)
      return normalInit(config.initStd * config.effectiveDeepnormBeta());
    return InitAttr::get(&context, InitKind::scaled_normal,
                         APFloat(config.initStd), config.layers);
  }
  /// DeepNorm also scales the value projection and the MLP input by beta.
  InitAttr deepnormScaledInit() {
    if (config.placement == NormPlacement::DeepNorm)
      return normalInit(config.initStd * config.effectiveDeepnormBeta());
    return normalInit(config.initStd);
  }

  /// Declares the parameter `name` (once) and reads it at the insertion
  /// point.
  Value param(StringRef name, ArrayRef<int64_t> shape, InitAttr init) {
    RankedTensorType type = floatTensor(shape);
    if (declared.insert(name).second)
      ParamOp::create(paramBuilder, loc, name, type, init,
                      /*unpadded=*/DenseI64ArrayAttr());
    return GetParamOp::create(builder, loc, type, name);
  }

  /// `x @ W (+ b)` with W of shape [in, out].
  Value linear(Value x, const Twine &name, int64_t in, int64_t out,
               InitAttr init) {
    Value weight = param((name + ".weight").str(), {in, out}, init);
    Value y = MatmulOp::create(builder, loc, x, weight);
    if (!config.bias)
      return y;
    Value bias =
        param((name + ".bias").str(), {out}, constantInit(InitKind::zeros));
    return BiasAddOp::create(builder, loc, y, bias);
  }

  Value norm(Value x, const Twine &name) {
    Value gamma = param((name + ".weight").str(), {config.hidden},
                        constantInit(InitKind::ones));
    FloatAttr epsilon = builder.getF64FloatAttr(config.normEpsilon);
    if (config.norm == NormKind::RmsNorm)
      return RmsNormOp::create(builder, loc, x.getType(), x, gamma, epsilon);
    Value beta;
    if (config.bias)
      beta = param((name + ".bias").str(), {config.hidden},
                   constantInit(InitKind::zeros));
    return LayerNormOp::create(builder, loc, x.getType(), x, gamma, beta,
                               epsilon);
  }

  Value dropout(Value x) {
    if (config.dropout == 0.0)
      return x;
    return DropoutOp::create(builder, loc, x,
                             builder.getF64FloatAttr(config.dropout),
                             builder.getI64IntegerAttr(nextRngStream++));
  }

  Value activation(Value x) {
    switch (config.activation) {
    case Activation::Gelu:
      return GeluOp::create(builder, loc, x, GeluApproximation::none);
    case Activation::GeluTanh:
      return GeluOp::create(builder, loc, x, GeluApproximation::tanh);
    case Activation::FastGelu:
      return FastGeluOp::create(builder, loc, x);
    case Activation::Relu:
      return ReluOp::create(builder, loc, x);
    case Activation::Swiglu:
    case Activation::Geglu:
      break;
    }
    llvm_unreachable("gated activations are built by mlp()");
  }

  Value attention(Value queryInput, Value kvInput, Value prefixLengths,
                  const Twine &prefix);
  Value mlp(Value x, const Twine &prefix);
  Value residual(Value x, Value update) {
    if (config.placement == NormPlacement::DeepNorm)
      x = ScaleOp::create(
          builder, loc, x,
          builder.getF64FloatAttr(config.effectiveDeepnormAlpha()));
    return AddOp::create(builder, loc, x, update);
  }

  /// Creates a `triad.layer` whose body `body` fills from its block
  /// arguments, yielding the returned values.
  LayerOp layer(LayerKind kind, int64_t index, ValueRange inputs,
                TypeRange resultTypes,
                llvm::function_ref<SmallVector<Value>(ValueRange)> body);

  Value embeddingPart(Value tokens);
  Value transformerPart(int64_t index, Value hidden, Value prefixLengths);
  Value topQueryPart(Value hidden, Value prefixLengths);
  Value headPart(Value hidden, Value labels);

  MLIRContext &context;
  const ModelConfig &config;
  OpBuilder builder;
  OpBuilder paramBuilder{static_cast<MLIRContext *>(nullptr)};
  Location loc;
  llvm::StringSet<> declared;
  int64_t nextRngStream = 0;
};

LayerOp
ModelIRBuilder::layer(LayerKind kind, int64_t index, ValueRange inputs,
                      TypeRange resultTypes,
                      llvm::function_ref<SmallVector<Value>(ValueRange)> body) {
  auto op = LayerOp::create(builder, loc, resultTypes, kind, index,
                            /*backward=*/false, inputs);
  Block *block = builder.createBlock(&op.getBody());
  for (Value input : inputs)
    block->addArgument(input.getType(), loc);
  SmallVector<Value> results = body(block->getArguments());
  YieldOp::create(builder, loc, results);
  builder.setInsertionPointAfter(op);
  return op;
}

Value ModelIRBuilder::attention(Value queryInput, Value kvInput,
                                Value prefixLengths, const Twine &prefix) {
  int64_t h = config.hidden, d = config.headDim();
  int64_t qDim = config.heads * d, kvDim = config.kvHeads * d;
  InitAttr init = normalInit(config.initStd);
  Value q = linear(queryInput, prefix + ".wq", h, qDim, init);
  Value k = linear(kvInput, prefix + ".wk", h, kvDim, init);
  Value v = linear(kvInput, prefix + ".wv", h, kvDim, deepnormScaledInit());
  if (config.positions == Positions::Rope) {
    auto rope = [&](Value x, int64_t heads) -> Value {
      return RopeOp::create(builder, loc, x, builder.getI64IntegerAttr(heads),
                            builder.getI64IntegerAttr(config.rotaryDim()),
                            builder.getF64FloatAttr(config.ropeBase));
    };
    q = rope(q, config.heads);
    k = rope(k, config.kvHeads);
  }
  Value slopes;
  if (config.positions == Positions::Alibi) {
    auto type = RankedTensorType::get({config.heads}, builder.getF32Type());
    slopes = arith::ConstantOp::create(
        builder, loc, type,
        DenseElementsAttr::get(type, ArrayRef(alibiSlopes(config.heads))));
  }
  MaskKind mask = config.mask == AttentionMask::Prefix ? MaskKind::prefix
                                                       : MaskKind::causal;
  Value attended = AttentionOp::create(
      builder, loc, q.getType(), q, k, v, prefixLengths, slopes,
      builder.getI64IntegerAttr(config.heads),
      builder.getI64IntegerAttr(config.kvHeads),
      MaskKindAttr::get(&context, mask), /*scale=*/FloatAttr());
  Value out = linear(attended, prefix + ".wo", qDim, h, residualOutputInit());
  return dropout(out);
}

Value ModelIRBuilder::mlp(Value x, const Twine &prefix) {
  int64_t h = config.hidden, f = config.ffn;
  Value inner;
  if (isGated(config.activation)) {
    Value gate = linear(x, prefix + ".w_gate", h, f, deepnormScaledInit());
    Value up = linear(x, prefix + ".w_up", h, f, deepnormScaledInit());
    if (config.activation == Activation::Swiglu)
      inner = SwigluOp::create(builder, loc, gate, up);
    else
      inner = GegluOp::create(builder, loc, gate, up);
    return dropout(
        linear(inner, prefix + ".w_down", f, h, residualOutputInit()));
  }
  inner = activation(linear(x, prefix + ".fc1", h, f, deepnormScaledInit()));
  return dropout(linear(inner, prefix + ".fc2", f, h, residualOutputInit()));
}

Value ModelIRBuilder::embeddingPart(Value tokens) {
  LayerOp op =
      layer(LayerKind::embedding, 0, tokens, activationType(),
            [&](ValueRange args) -> SmallVector<Value> {
              Value table = param("embed.wte", {config.vocab, config.hidden},
                                  normalInit(config.initStd));
              Value x = EmbeddingOp::create(builder, loc, args[0], table);
              if (config.positions == Positions::Learned) {
                Value positions =
                    param("embed.wpe", {config.positionRows(), config.hidden},
                          normalInit(config.initStd));
                Value used = SliceOp::create(
                    builder, loc, positions,
                    ArrayRef<int64_t>{config.positionOffset, 0},
                    ArrayRef<int64_t>{config.seq, config.hidden});
                x = AddOp::create(builder, loc, x, used);
              }
              if (config.embeddingNorm)
                x = norm(x, "embed.norm");
              return {dropout(x)};
            });
  return op.getResult(0);
}

Value ModelIRBuilder::transformerPart(int64_t index, Value hidden,
                                      Value prefixLengths) {
  SmallVector<Value> inputs{hidden};
  if (prefixLengths)
    inputs.push_back(prefixLengths);
  std::string prefix = llvm::formatv("layers.{0}", index);
  LayerOp op = layer(
      LayerKind::transformer, index, inputs, activationType(),
      [&](ValueRange args) -> SmallVector<Value> {
        Value x = args[0];
        Value plen = prefixLengths ? args[1] : Value();
        if (config.placement != NormPlacement::Pre) {
          // Post-LN and DeepNorm: norm(alpha * x + f(x)) after each block.
          Value h = norm(residual(x, attention(x, x, plen, prefix + ".attn")),
                         prefix + ".attn_norm");
          return {
              norm(residual(h, mlp(h, prefix + ".mlp")), prefix + ".mlp_norm")};
        }
        Value attnIn = norm(x, prefix + ".attn_norm");
        Value attnOut = attention(attnIn, attnIn, plen, prefix + ".attn");
        if (config.parallelResidual) {
          Value mlpOut = mlp(norm(x, prefix + ".mlp_norm"), prefix + ".mlp");
          return {residual(residual(x, attnOut), mlpOut)};
        }
        Value h = residual(x, attnOut);
        return {
            residual(h, mlp(norm(h, prefix + ".mlp_norm"), prefix + ".mlp"))};
      });
  return op.getResult(0);
}

Value ModelIRBuilder::topQueryPart(Value hidden, Value prefixLengths) {
  SmallVector<Value> inputs{hidden};
  if (prefixLengths)
    inputs.push_back(prefixLengths);
  LayerOp op = layer(
      LayerKind::transformer, config.layers, inputs, activationType(),
      [&](ValueRange args) -> SmallVector<Value> {
        Value plen = prefixLengths ? args[1] : Value();
        // CodeGeeX normalizes the last layer's output here, then takes
        // the queries from a learned per-position embedding.
        Value x = config.finalNorm ? norm(args[0], "head.norm") : args[0];
        Value table =
            param("top_query.embedding", {config.positionRows(), config.hidden},
                  normalInit(config.initStd));
        Value used = SliceOp::create(
            builder, loc, table, ArrayRef<int64_t>{config.positionOffset, 0},
            ArrayRef<int64_t>{config.seq, config.hidden});
        Value queries =
            BroadcastOp::create(builder, loc, activationType(), used);
        Value kvIn = norm(x, "top_query.attn_norm");
        Value h = residual(x, attention(queries, kvIn, plen, "top_query.attn"));
        return {
            residual(h, mlp(norm(h, "top_query.mlp_norm"), "top_query.mlp"))};
      });
  return op.getResult(0);
}

Value ModelIRBuilder::headPart(Value hidden, Value labels) {
  auto lossType = RankedTensorType::get({}, builder.getF32Type());
  LayerOp op = layer(
      LayerKind::head, 0, ValueRange{hidden, labels}, lossType,
      [&](ValueRange args) -> SmallVector<Value> {
        Value x = args[0];
        if (config.finalNorm && !config.topQueryLayer)
          x = norm(x, "head.norm");
        Value table =
            config.tieEmbeddings
                ? param("embed.wte", {config.vocab, config.hidden},
                        normalInit(config.initStd))
                : param("head.lm_head.weight", {config.vocab, config.hidden},
                        normalInit(config.initStd));
        Value logits = MatmulOp::create(builder, loc, x, table,
                                        /*transposeLhs=*/false,
                                        /*transposeRhs=*/true);
        return {CrossEntropyOp::create(builder, loc, logits, args[1], -100)};
      });
  return op.getResult(0);
}

OwningOpRef<ModuleOp> ModelIRBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  (*module)->setAttr("triad.model", builder.getStringAttr(config.name));
  builder.setInsertionPointToEnd(module->getBody());

  SmallVector<Type> argTypes{idTensor({config.batch, config.seq}),
                             idTensor({config.batch, config.seq})};
  SmallVector<StringRef> argRoles{"tokens", "labels"};
  if (config.mask == AttentionMask::Prefix) {
    argTypes.push_back(idTensor({config.batch}));
    argRoles.push_back("prefix_lengths");
  }
  auto lossType = RankedTensorType::get({}, builder.getF32Type());
  auto func = func::FuncOp::create(builder, loc, "forward",
                                   builder.getFunctionType(argTypes, lossType));
  for (auto [i, role] : llvm::enumerate(argRoles))
    func.setArgAttr(i, "triad.input", builder.getStringAttr(role));

  paramBuilder = OpBuilder(func);
  builder.setInsertionPointToStart(func.addEntryBlock());
  Value tokens = func.getArgument(0), labels = func.getArgument(1);
  Value prefixLengths =
      config.mask == AttentionMask::Prefix ? func.getArgument(2) : Value();

  Value hidden = embeddingPart(tokens);
  for (int64_t i = 0; i < config.layers; ++i)
    hidden = transformerPart(i, hidden, prefixLengths);
  if (config.topQueryLayer)
    hidden = topQueryPart(hidden, prefixLengths);
  Value loss = headPart(hidden, labels);
  func::ReturnOp::create(builder, loc, loss);
  return module;
}

} // namespace

OwningOpRef<ModuleOp> triad::buildModel(MLIRContext &context,
                                        const ModelConfig &config) {
  if (llvm::Error error = config.validate()) {
    llvm::consumeError(std::move(error));
    return nullptr;
  }
  context.loadDialect<TriadDialect, func::FuncDialect, arith::ArithDialect>();
  return ModelIRBuilder(context, config).build();
}
