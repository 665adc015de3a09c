//===- ModelBuilderTest.cpp - the generated IR of every configuration -----===//

#include "triad/Models/ModelBuilder.h"

#include "dialects/Triad/TriadOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ctime>

using namespace triad;

namespace {

ModelConfig preset(llvm::StringRef name) {
  llvm::Expected<ModelConfig> config = getPreset(name);
  if (!config) {
    ADD_FAILURE() << llvm::toString(config.takeError());
    return ModelConfig();
  }
  return *config;
}

/// Builds the model, checks that it verifies and that its declared
/// parameters add up to the analytic count.
void checkModel(const ModelConfig &config, const std::string &what) {
  SCOPED_TRACE(what);
  ASSERT_FALSE(config.validate());
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, config);
  ASSERT_TRUE(module);
  ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));

  int64_t declared = 0;
  llvm::StringSet<> names;
  for (auto param : module->getOps<ParamOp>()) {
    declared += param.getNumElements();
    EXPECT_TRUE(names.insert(param.getSymName()).second);
  }
  EXPECT_EQ(declared, countParameters(config).total());

  // Every parameter is read by some layer; parts come in order; dropout
  // streams are unique.
  llvm::StringSet<> read;
  llvm::DenseSet<int64_t> streams;
  int64_t transformers = 0;
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  ASSERT_TRUE(forward);
  auto layers = llvm::to_vector(forward.getBody().getOps<LayerOp>());
  ASSERT_GE(layers.size(), 2u);
  EXPECT_EQ(layers.front().getKind(), LayerKind::embedding);
  EXPECT_EQ(layers.back().getKind(), LayerKind::head);
  for (LayerOp layer : layers) {
    if (layer.getKind() == LayerKind::transformer) {
      EXPECT_EQ(static_cast<int64_t>(layer.getIndex()), transformers++);
    }
    layer.walk([&](mlir::Operation *op) {
      if (auto get = llvm::dyn_cast<GetParamOp>(op))
        read.insert(get.getName());
      if (auto dropout = llvm::dyn_cast<DropoutOp>(op)) {
        EXPECT_TRUE(streams.insert(dropout.getRngStream()).second);
      }
    });
  }
  EXPECT_EQ(transformers, config.layers + (config.topQueryLayer ? 1 : 0));
  EXPECT_EQ(read.size(), names.size());
}

TEST(ModelBuilder, EveryPresetVerifiesAndMatchesItsCount) {
  for (llvm::StringRef name : presetNames())
    checkModel(preset(name), name.str());
}

TEST(ModelBuilder, ArchitectureVariants) {
  struct Variant {
    const char *name;
    void (*mutate)(ModelConfig &);
  };
  const Variant variants[] = {
      {"rmsnorm", [](ModelConfig &c) { c.norm = NormKind::RmsNorm; }},
      {"post-norm",
       [](ModelConfig &c) {
         c.placement = NormPlacement::Post;
         c.finalNorm = false;
       }},
      {"deepnorm",
       [](ModelConfig &c) { c.placement = NormPlacement::DeepNorm; }},
      {"gelu_tanh",
       [](ModelConfig &c) { c.activation = Activation::GeluTanh; }},
      {"fast_gelu",
       [](ModelConfig &c) { c.activation = Activation::FastGelu; }},
      {"relu", [](ModelConfig &c) { c.activation = Activation::Relu; }},
      {"swiglu", [](ModelConfig &c) { c.activation = Activation::Swiglu; }},
      {"geglu", [](ModelConfig &c) { c.activation = Activation::Geglu; }},
      {"rope",
       [](ModelConfig &c) {
         c.positions = Positions::Rope;
         c.rotaryFraction = 0.25;
       }},
      {"alibi", [](ModelConfig &c) { c.positions = Positions::Alibi; }},
      {"no positions", [](ModelConfig &c) { c.positions = Positions::None; }},
      {"parallel residual", [](ModelConfig &c) { c.parallelResidual = true; }},
      {"untied", [](ModelConfig &c) { c.tieEmbeddings = false; }},
      {"embedding norm", [](ModelConfig &c) { c.embeddingNorm = true; }},
      {"no bias", [](ModelConfig &c) { c.bias = false; }},
      {"grouped-query", [](ModelConfig &c) { c.kvHeads = 2; }},
      {"multi-query", [](ModelConfig &c) { c.kvHeads = 1; }},
      {"prefix mask", [](ModelConfig &c) { c.mask = AttentionMask::Prefix; }},
      {"bf16", [](ModelConfig &c) { c.dtype = DType::BF16; }},
      {"f16", [](ModelConfig &c) { c.dtype = DType::F16; }},
      {"dropout", [](ModelConfig &c) { c.dropout = 0.1; }},
      {"top query layer", [](ModelConfig &c) { c.topQueryLayer = true; }},
      {"position offset", [](ModelConfig &c) { c.positionOffset = 2; }},
  };
  for (const Variant &variant : variants) {
    ModelConfig config = preset("tiny");
    variant.mutate(config);
    checkModel(config, variant.name);
  }
}

TEST(ModelBuilder, PrefixMaskAddsAnInput) {
  ModelConfig config = preset("tiny");
  config.mask = AttentionMask::Prefix;
  mlir::MLIRContext context;
  auto module = buildModel(context, config);
  ASSERT_TRUE(module);
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  ASSERT_EQ(forward.getNumArguments(), 3u);
  module->walk([](AttentionOp op) {
    EXPECT_EQ(op.getMask(), MaskKind::prefix);
    EXPECT_TRUE(op.getPrefixLengths());
  });
}

TEST(ModelBuilder, AlibiSlopesFollowBloom) {
  // Powers of two: a geometric sequence starting at 2^(-8/n).
  std::vector<float> eight = alibiSlopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_FLOAT_EQ(eight[i], std::pow(2.0f, -(i + 1.0f)));
  // Otherwise the closest power of two (8), then the odd powers of
  // 2^(-8 / 16): 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  std::vector<float> twelve = alibiSlopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  EXPECT_FLOAT_EQ(twelve[8], std::pow(2.0f, -0.5f));
  EXPECT_FLOAT_EQ(twelve[11], std::pow(2.0f, -3.5f));
}

TEST(ModelBuilder, InvalidConfigurationBuildsNothing) {
  ModelConfig config = preset("tiny");
  config.heads = 5;
  mlir::MLIRContext context;
  EXPECT_FALSE(buildModel(context, config));
}

TEST(ModelBuilder, LargestPresetBuildsWellUnderASecond) {
  ModelConfig config = preset("mt-nlg-530b");
  mlir::MLIRContext context;
  auto start = std::chrono::steady_clock::now();
  auto module = buildModel(context, config);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(module);
  // Measured at about 0.03 s on a 2-core CI machine; the bound leaves room.
  EXPECT_LT(seconds, 1.0);
}

} // namespace
