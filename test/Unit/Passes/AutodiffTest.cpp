//===- AutodiffTest.cpp - autodiff gradients vs finite differences --------===//
//
// For every differentiable op, and for whole tiny models of every
// architecture variant, the gradients of @microbatch_step built by
// --triad-autodiff equal the central finite differences of @forward computed
// by the reference interpreter in float64 (relative error under 1e-6 over
// the checked elements). The recompute modes give the same gradients.
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/Passes.h"
#include "triad/Interpreter/Interpreter.h"
#include "triad/Models/ModelBuilder.h"
#include "triad/Registration.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace triad;
using namespace triad::interp;

namespace {

class Autodiff : public ::testing::Test {
protected:
  Autodiff() {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &diag) {
          diagnostics += diag.str() + "\n";
          return mlir::success();
        });
  }

  mlir::OwningOpRef<mlir::ModuleOp> parse(const std::string &source) {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
    EXPECT_TRUE(module) << diagnostics << source;
    return module;
  }

  mlir::LogicalResult differentiate(mlir::ModuleOp module,
                                    const std::string &recompute = "none") {
    mlir::PassManager pm(&context);
    AutodiffOptions options;
    options.recompute = recompute;
    pm.addPass(createAutodiff(options));
    return pm.run(module);
  }

  /// Gradients of @microbatch_step, one per parameter in declaration order.
  std::vector<Tensor> gradients(mlir::ModuleOp module,
                                const std::vector<Tensor> &args) {
    Interpreter interpreter(module, {/*seed=*/3});
    interpreter.initializeParameters();
    auto results = interpreter.call("microbatch_step", args);
    EXPECT_TRUE(mlir::succeeded(results)) << diagnostics;
    if (mlir::failed(results))
      return {};
    auto forward = interpreter.call("forward", args);
    EXPECT_TRUE(mlir::succeeded(forward));
    // The step's loss is the forward loss.
    EXPECT_NEAR((*results)[0].data[0], (*forward)[0].data[0], 1e-12);
    return std::vector<Tensor>(results->begin() + 1, results->end());
  }

  /// Compares the autodiff gradients with central differences of @forward
  /// on at most `samples` elements of each parameter (all when 0).
  void checkGradients(mlir::ModuleOp module, const std::vector<Tensor> &args,
                      int64_t samples = 0, double tolerance = 1e-6) {
    std::vector<Tensor> analytic = gradients(module, args);
    Interpreter interpreter(module, {/*seed=*/3});
    interpreter.initializeParameters();
    std::vector<std::string> names;
    for (auto param : module.getOps<ParamOp>())
      names.push_back(param.getSymName().str());
    ASSERT_EQ(analytic.size(), names.size());
    double diff = 0.0, norm = 0.0;
    const double h = 1e-6;
    for (auto [name, grad] : llvm::zip(names, analytic)) {
      Tensor &value = interpreter.parameters()[name];
      ASSERT_EQ(value.shape, grad.shape) << name;
      int64_t count = value.numElements();
      int64_t stride = samples && count > samples ? count / samples : 1;
      double paramDiff = 0.0, paramNorm = 0.0;
      for (int64_t i = 0; i < count; i += stride) {
        double saved = value.data[i];
        value.data[i] = saved + h;
        double up = (*interpreter.call("forward", args))[0].data[0];
        value.data[i] = saved - h;
        double down = (*interpreter.call("forward", args))[0].data[0];
        value.data[i] = saved;
        double numeric = (up - down) / (2 * h);
        paramDiff += (numeric - grad.data[i]) * (numeric - grad.data[i]);
        paramNorm += numeric * numeric;
      }
      // Each parameter on its own (where its gradient stands above the
      // differences' noise), and all of them together.
      if (paramNorm > 1e-12) {
        EXPECT_LT(std::sqrt(paramDiff / paramNorm), 100 * tolerance) << name;
      }
      diff += paramDiff;
      norm += paramNorm;
    }
    ASSERT_GT(norm, 0.0) << "every checked gradient is zero";
    EXPECT_LT(std::sqrt(diff / norm), tolerance);
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
};

//===----------------------------------------------------------------------===//
// One op at a time
//===----------------------------------------------------------------------===//

/// A test function: parameters `params` (name, type) read into SSA values
/// of the same names, integer arguments, and ops computing `%y`. The loss is
/// sum(%y * @w_out), so every element of %y gets a distinct gradient.
struct OpCase {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;
  std::vector<std::pair<std::string, Tensor>> intArgs; // name, value (i32)
  std::string body;
  std::string yType;
};

std::string opModule(const OpCase &c) {
  std::string decls, reads, args, dims;
  for (auto &[name, type] : c.params) {
    decls += llvm::formatv("triad.param @{0} : {1} init <normal, std = 1.0>\n",
                           name, type);
    reads += llvm::formatv("  %{0} = triad.get_param @{0} : {1}\n", name, type);
  }
  for (auto &[name, value] : c.intArgs) {
    std::string shape;
    for (int64_t d : value.shape)
      shape += std::to_string(d) + "x";
    args += (args.empty() ? "" : ", ") +
            ("%" + name + ": tensor<" + shape + "i32>");
  }
  int64_t rank = std::count(c.yType.begin(), c.yType.end(), 'x');
  for (int64_t d = 0; d < rank; ++d)
    dims += (d ? ", " : "") + std::to_string(d);
  return llvm::formatv(R"mlir(
{0}triad.param @w_out : {1} init <normal, std = 1.0>
func.func @forward({2}) -> tensor<f32> {{
{3}{4}
  %w_out = triad.get_param @w_out : {1}
  %weighted = triad.mul %y, %w_out : {1}
  %loss = triad.sum %weighted dims = [{5}] : {1} -> tensor<f32>
  return %loss : tensor<f32>
}
)mlir",
                       decls, c.yType, args, reads, c.body, dims);
}

std::vector<OpCase> opCases() {
  using P = std::vector<std::pair<std::string, std::string>>;
  const std::string x = "tensor<2x3x4xf32>";
  Tensor ids({2, 3}, {0, 4, 4, 1, 2, 0});
  Tensor labels({2, 3}, {0, 4, -100, 1, 2, 0});
  Tensor prefix({2}, {2, 0});
  const std::string q = "tensor<2x3x8xf32>", kv = "tensor<2x3x4xf32>";
  return {
      {"embedding",
       P{{"t", "tensor<5x4xf32>"}},
       {{"ids", ids}},
       "  %y = triad.embedding %ids, %t : tensor<2x3xi32>, tensor<5x4xf32> -> "
       "tensor<2x3x4xf32>",
       x},
      {"matmul, broadcast rhs",
       P{{"a", x}, {"w", "tensor<4x5xf32>"}},
       {},
       "  %y = triad.matmul %a, %w : tensor<2x3x4xf32>, tensor<4x5xf32> -> "
       "tensor<2x3x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul, broadcast rhs, both transposed",
       P{{"a", "tensor<2x4x3xf32>"}, {"w", "tensor<5x4xf32>"}},
       {},
       "  %y = triad.matmul %a, %w transpose_lhs transpose_rhs : "
       "tensor<2x4x3xf32>, tensor<5x4xf32> -> tensor<2x3x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul, broadcast rhs, lhs transposed",
       P{{"a", "tensor<2x4x3xf32>"}, {"w", "tensor<4x5xf32>"}},
       {},
       "  %y = triad.matmul %a, %w transpose_lhs : tensor<2x4x3xf32>, "
       "tensor<4x5xf32> -> tensor<2x3x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul, broadcast rhs transposed (tied output layer)",
       P{{"a", x}, {"w", "tensor<5x4xf32>"}},
       {},
       "  %y = triad.matmul %a, %w transpose_rhs : tensor<2x3x4xf32>, "
       "tensor<5x4xf32> -> tensor<2x3x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul, batched",
       P{{"a", x}, {"w", "tensor<2x4x5xf32>"}},
       {},
       "  %y = triad.matmul %a, %w : tensor<2x3x4xf32>, tensor<2x4x5xf32> -> "
       "tensor<2x3x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul, batched, both transposed",
       P{{"a", "tensor<2x4x3xf32>"}, {"w", "tensor<2x5x4xf32>"}},
       {},
       "  %y = triad.matmul %a, %w transpose_lhs transpose_rhs : "
       "tensor<2x4x3xf32>, tensor<2x5x4xf32> -> tensor<2x3x5xf32>",
       "tensor<2x3x5xf32>"},
      {"matmul, 2-D, lhs transposed",
       P{{"a", "tensor<4x3xf32>"}, {"w", "tensor<4x5xf32>"}},
       {},
       "  %y = triad.matmul %a, %w transpose_lhs : tensor<4x3xf32>, "
       "tensor<4x5xf32> -> tensor<3x5xf32>",
       "tensor<3x5xf32>"},
      {"add, broadcast",
       P{{"a", x}, {"b", "tensor<3x4xf32>"}},
       {},
       "  %y = triad.add %a, %b : tensor<2x3x4xf32>, tensor<3x4xf32>",
       x},
      {"mul",
       P{{"a", x}, {"b", x}},
       {},
       "  %y = triad.mul %a, %b : tensor<2x3x4xf32>",
       x},
      {"scale",
       P{{"a", x}},
       {},
       "  %y = triad.scale %a by -1.5 : tensor<2x3x4xf32>",
       x},
      {"bias_add",
       P{{"a", x}, {"b", "tensor<4xf32>"}},
       {},
       "  %y = triad.bias_add %a, %b : tensor<2x3x4xf32>, tensor<4xf32>",
       x},
      {"gelu", P{{"a", x}}, {}, "  %y = triad.gelu %a : tensor<2x3x4xf32>", x},
      {"gelu tanh",
       P{{"a", x}},
       {},
       "  %y = triad.gelu %a approximate = tanh : tensor<2x3x4xf32>",
       x},
      {"fast_gelu",
       P{{"a", x}},
       {},
       "  %y = triad.fast_gelu %a : tensor<2x3x4xf32>",
       x},
      {"relu", P{{"a", x}}, {}, "  %y = triad.relu %a : tensor<2x3x4xf32>", x},
      {"silu", P{{"a", x}}, {}, "  %y = triad.silu %a : tensor<2x3x4xf32>", x},
      {"swiglu",
       P{{"a", x}, {"b", x}},
       {},
       "  %y = triad.swiglu %a, %b : tensor<2x3x4xf32>",
       x},
      {"geglu",
       P{{"a", x}, {"b", x}},
       {},
       "  %y = triad.geglu %a, %b : tensor<2x3x4xf32>",
       x},
      {"layer_norm",
       P{{"a", x}, {"g", "tensor<4xf32>"}, {"b", "tensor<4xf32>"}},
       {},
       "  %y = triad.layer_norm %a, %g, %b : tensor<2x3x4xf32>, tensor<4xf32>, "
       "tensor<4xf32>",
       x},
      {"layer_norm without beta",
       P{{"a", x}, {"g", "tensor<4xf32>"}},
       {},
       "  %y = triad.layer_norm %a, %g : tensor<2x3x4xf32>, tensor<4xf32>",
       x},
      {"rms_norm",
       P{{"a", x}, {"g", "tensor<4xf32>"}},
       {},
       "  %y = triad.rms_norm %a, %g : tensor<2x3x4xf32>, tensor<4xf32>",
       x},
      {"attention, causal",
       P{{"q", q}, {"k", q}, {"v", q}},
       {},
       "  %y = triad.attention %q, %k, %v heads = 2 kv_heads = 2 mask = causal "
       ": tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>",
       q},
      {"attention, grouped-query with ALiBi",
       P{{"q", q}, {"k", kv}, {"v", kv}},
       {},
       "  %s = arith.constant dense<[0.5, 0.25]> : tensor<2xf32>\n"
       "  %y = triad.attention %q, %k, %v alibi(%s : tensor<2xf32>) heads = 2 "
       "kv_heads = 1 mask = causal : tensor<2x3x8xf32>, tensor<2x3x4xf32>, "
       "tensor<2x3x4xf32>",
       q},
      {"attention, prefix",
       P{{"q", q}, {"k", q}, {"v", q}},
       {{"p", prefix}},
       "  %y = triad.attention %q, %k, %v prefix(%p : tensor<2xi32>) heads = 2 "
       "kv_heads = 2 mask = prefix : tensor<2x3x8xf32>, tensor<2x3x8xf32>, "
       "tensor<2x3x8xf32>",
       q},
      {"attention, no mask, scale",
       P{{"q", q}, {"k", q}, {"v", q}},
       {},
       "  %y = triad.attention %q, %k, %v heads = 4 kv_heads = 4 mask = none "
       "{scale = 0.3 : f64} : tensor<2x3x8xf32>, tensor<2x3x8xf32>, "
       "tensor<2x3x8xf32>",
       q},
      {"rope",
       P{{"a", q}},
       {},
       "  %y = triad.rope %a heads = 2 rotary_dim = 2 base = 20.0 : "
       "tensor<2x3x8xf32>",
       q},
      {"reshape",
       P{{"a", x}},
       {},
       "  %y = triad.reshape %a : tensor<2x3x4xf32> -> tensor<6x4xf32>",
       "tensor<6x4xf32>"},
      {"transpose",
       P{{"a", x}},
       {},
       "  %y = triad.transpose %a [2, 0, 1] : tensor<2x3x4xf32> -> "
       "tensor<4x2x3xf32>",
       "tensor<4x2x3xf32>"},
      {"slice",
       P{{"a", x}},
       {},
       "  %y = triad.slice %a offsets = [1, 1, 0] sizes = [1, 2, 3] : "
       "tensor<2x3x4xf32> -> tensor<1x2x3xf32>",
       "tensor<1x2x3xf32>"},
      {"pad",
       P{{"a", "tensor<2x3xf32>"}},
       {},
       "  %y = triad.pad %a low = [1, 0] high = [0, 2] : tensor<2x3xf32> -> "
       "tensor<3x5xf32>",
       "tensor<3x5xf32>"},
      {"concat",
       P{{"a", x}, {"b", "tensor<2x3x2xf32>"}},
       {},
       "  %y = triad.concat %a, %b dim = 2 : tensor<2x3x4xf32>, "
       "tensor<2x3x2xf32> -> tensor<2x3x6xf32>",
       "tensor<2x3x6xf32>"},
      {"broadcast",
       P{{"a", "tensor<3x1xf32>"}},
       {},
       "  %y = triad.broadcast %a : tensor<3x1xf32> -> tensor<2x3x4xf32>",
       x},
      {"dropout",
       P{{"a", x}},
       {},
       "  %y = triad.dropout %a probability = 0.4 rng_stream = 2 : "
       "tensor<2x3x4xf32>",
       x},
      {"sum",
       P{{"a", x}},
       {},
       "  %y = triad.sum %a dims = [1] : tensor<2x3x4xf32> -> tensor<2x4xf32>",
       "tensor<2x4xf32>"},
      {"mean, keeping dims",
       P{{"a", x}},
       {},
       "  %y = triad.mean %a dims = [0, 2] : tensor<2x3x4xf32> -> "
       "tensor<1x3x1xf32>",
       "tensor<1x3x1xf32>"},
      {"cross_entropy",
       P{{"a", "tensor<2x3x5xf32>"}},
       {{"l", labels}},
       "  %c = triad.cross_entropy %a, %l : tensor<2x3x5xf32>, tensor<2x3xi32> "
       "-> tensor<f32>\n"
       "  %y = triad.reshape %c : tensor<f32> -> tensor<1xf32>",
       "tensor<1xf32>"},
      {"a value used twice",
       P{{"a", x}},
       {},
       "  %s = triad.mul %a, %a : tensor<2x3x4xf32>\n"
       "  %y = triad.add %s, %a : tensor<2x3x4xf32>, tensor<2x3x4xf32>",
       x},
  };
}

TEST_F(Autodiff, EveryOpMatchesFiniteDifferences) {
  for (const OpCase &c : opCases()) {
    SCOPED_TRACE(c.name);
    std::string source = opModule(c);
    auto module = parse(source);
    ASSERT_TRUE(module);
    ASSERT_TRUE(mlir::succeeded(differentiate(*module))) << diagnostics;
    std::vector<Tensor> args;
    for (auto &[name, value] : c.intArgs)
      args.push_back(value);
    checkGradients(*module, args);
  }
}

// A cast rounds, so differences cannot check its rule; its gradient is the
// incoming gradient cast back (straight through the rounding).
TEST_F(Autodiff, CastPassesTheGradientThrough) {
  OpCase c{"cast",
           {{"a", "tensor<2x3x4xf32>"}},
           {},
           "  %c = triad.cast %a : tensor<2x3x4xf32> -> tensor<2x3x4xbf16>\n"
           "  %y = triad.cast %c : tensor<2x3x4xbf16> -> tensor<2x3x4xf32>",
           "tensor<2x3x4xf32>"};
  auto module = parse(opModule(c));
  ASSERT_TRUE(mlir::succeeded(differentiate(*module))) << diagnostics;
  std::vector<Tensor> grads = gradients(*module, {});
  Interpreter interpreter(*module, {/*seed=*/3});
  interpreter.initializeParameters();
  const Tensor &weights = interpreter.parameters()["w_out"];
  auto bf16 = mlir::BFloat16Type::get(&context);
  ASSERT_EQ(grads.size(), 2u);
  for (size_t i = 0; i < weights.data.size(); ++i)
    EXPECT_EQ(grads[0].data[i], roundTo(bf16, weights.data[i]));
}

//===----------------------------------------------------------------------===//
// Whole models
//===----------------------------------------------------------------------===//

ModelConfig smallModel() {
  llvm::Expected<ModelConfig> config = getPreset("tiny");
  EXPECT_TRUE(static_cast<bool>(config));
  config->layers = 2;
  config->hidden = 16;
  config->heads = 2;
  config->kvHeads = 2;
  config->ffn = 24;
  config->vocab = 11;
  config->seq = 5;
  config->maxPositions = 5;
  config->batch = 2;
  config->initStd = 0.5; // gradients well above the differences' noise
  return *config;
}

std::vector<Tensor> modelArgs(const ModelConfig &config) {
  Tensor tokens({config.batch, config.seq}), labels({config.batch, config.seq});
  for (int64_t i = 0; i < tokens.numElements(); ++i) {
    tokens.data[i] = (i * 7 + 3) % config.vocab;
    labels.data[i] = (i * 5 + 1) % config.vocab;
  }
  labels.data[1] = -100; // one ignored token
  std::vector<Tensor> args{tokens, labels};
  if (config.mask == AttentionMask::Prefix)
    args.push_back(Tensor({config.batch}, {2, 0}));
  return args;
}

TEST_F(Autodiff, EveryArchitectureMatchesFiniteDifferences) {
  struct Variant {
    const char *name;
    void (*mutate)(ModelConfig &);
  };
  const Variant variants[] = {
      {"gpt (learned positions, gelu, tied)", [](ModelConfig &) {}},
      {"llama (rmsnorm, swiglu, rope, untied, no bias, gqa)",
       [](ModelConfig &c) {
         c.norm = NormKind::RmsNorm;
         c.activation = Activation::Swiglu;
         c.positions = Positions::Rope;
         c.tieEmbeddings = false;
         c.bias = false;
         c.heads = 4;
         c.kvHeads = 2;
       }},
      {"neox (parallel residual, partial rope, gelu tanh)",
       [](ModelConfig &c) {
         c.parallelResidual = true;
         c.positions = Positions::Rope;
         c.rotaryFraction = 0.5;
         c.activation = Activation::GeluTanh;
         c.tieEmbeddings = false;
       }},
      {"bloom (alibi, embedding norm)",
       [](ModelConfig &c) {
         c.positions = Positions::Alibi;
         c.embeddingNorm = true;
       }},
      {"glm (deepnorm, geglu, prefix mask)",
       [](ModelConfig &c) {
         c.placement = NormPlacement::DeepNorm;
         c.activation = Activation::Geglu;
         c.positions = Positions::Rope;
         c.mask = AttentionMask::Prefix;
       }},
      {"opt (relu, position offset)",
       [](ModelConfig &c) {
         c.activation = Activation::Relu;
         c.positionOffset = 2;
       }},
      {"post-norm",
       [](ModelConfig &c) {
         c.placement = NormPlacement::Post;
         c.finalNorm = false;
       }},
      {"codegeex (top query layer, fast gelu)",
       [](ModelConfig &c) {
         c.topQueryLayer = true;
         c.activation = Activation::FastGelu;
       }},
      {"dropout", [](ModelConfig &c) { c.dropout = 0.2; }},
  };
  for (const Variant &variant : variants) {
    SCOPED_TRACE(variant.name);
    ModelConfig config = smallModel();
    variant.mutate(config);
    ASSERT_FALSE(config.validate());
    auto module = buildModel(context, config);
    ASSERT_TRUE(module);
    ASSERT_TRUE(mlir::succeeded(differentiate(*module))) << diagnostics;
    checkGradients(*module, modelArgs(config), /*samples=*/12);
  }
}

TEST_F(Autodiff, RecomputeModesGiveTheSameGradients) {
  ModelConfig config = smallModel();
  config.dropout = 0.1;
  std::vector<std::vector<Tensor>> results;
  for (const char *mode : {"none", "selective", "full"}) {
    SCOPED_TRACE(mode);
    auto module = buildModel(context, config);
    ASSERT_TRUE(mlir::succeeded(differentiate(*module, mode))) << diagnostics;
    results.push_back(gradients(*module, modelArgs(config)));
  }
  for (size_t mode = 1; mode < results.size(); ++mode) {
    ASSERT_EQ(results[mode].size(), results[0].size());
    for (size_t p = 0; p < results[0].size(); ++p)
      for (size_t i = 0; i < results[0][p].data.size(); ++i)
        ASSERT_NEAR(results[mode][p].data[i], results[0][p].data[i], 1e-12)
            << "mode " << mode << ", parameter " << p << ", element " << i;
  }
}

TEST_F(Autodiff, RecomputeModesChangeWhatIsSaved) {
  ModelConfig config = smallModel();
  std::vector<size_t> savedPerLayer;
  for (const char *mode : {"none", "selective", "full"}) {
    auto module = buildModel(context, config);
    ASSERT_TRUE(mlir::succeeded(differentiate(*module, mode)));
    auto step = module->lookupSymbol<mlir::func::FuncOp>("microbatch_step");
    size_t saved = 0;
    for (auto layer : step.getBody().getOps<LayerOp>())
      if (!layer.getBackward() && layer.getKind() == LayerKind::transformer &&
          layer.getIndex() == 0)
        saved = layer.getNumResults() - 1;
    savedPerLayer.push_back(saved);
  }
  // Selective saves one value less (the attention output); full saves none.
  EXPECT_GT(savedPerLayer[0], 0u);
  EXPECT_EQ(savedPerLayer[1], savedPerLayer[0] - 1);
  EXPECT_EQ(savedPerLayer[2], 0u);
}

} // namespace
