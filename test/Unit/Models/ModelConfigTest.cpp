//===- ModelConfigTest.cpp - presets, validation, parameter counts --------===//

#include "triad/Models/ModelConfig.h"

#include <gtest/gtest.h>

#include <cmath>

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

std::string validationError(const ModelConfig &config) {
  llvm::Error error = config.validate();
  return error ? llvm::toString(std::move(error)) : std::string();
}

struct PublishedCount {
  const char *preset;
  double parameters;
  const char *source;
};

// Published parameter counts of the reference models.
const PublishedCount kPublished[] = {
    {"gpt2-small", 124e6,
     "GPT-2 small, 124M (corrected from the paper's 117M)"},
    {"gpt2-medium", 355e6, "GPT-2 medium, 355M (corrected from 345M)"},
    {"llama2-7b", 6.74e9, "Llama 2 7B model card: 6.74B"},
    {"gpt-neox-20b", 20554567680.0, "GPT-NeoX-20B model card"},
    {"codegeex-13b", 13e9, "CodeGeeX paper: 13 billion"},
    {"glm-130b", 128.7e9,
     "GLM-130B: 130B nominal; 128.7B counted by its authors (THUDM/GLM-130B "
     "issue 138)"},
    {"opt-175b", 175e9, "OPT paper, table 1: 175B"},
    {"bloom-176b", 176247271424.0, "BLOOM model card: 176,247,271,424"},
    {"mt-nlg-530b", 530e9, "MT-NLG paper: 530B"},
};

TEST(ModelConfig, PresetsMatchPublishedParameterCounts) {
  for (const PublishedCount &published : kPublished) {
    ModelConfig config = preset(published.preset);
    ASSERT_FALSE(config.validate()) << published.preset;
    double count = static_cast<double>(countParameters(config).total());
    double relative =
        std::abs(count - published.parameters) / published.parameters;
    EXPECT_LT(relative, 0.01)
        << published.preset << ": counted " << count << ", published "
        << published.parameters << " (" << published.source << ")";
  }
}

TEST(ModelConfig, ExactCountsOfWellKnownModels) {
  // Counts that the models' own implementations report.
  EXPECT_EQ(countParameters(preset("gpt2-small")).total(), 124439808);
  EXPECT_EQ(countParameters(preset("gpt2-medium")).total(), 354823168);
  EXPECT_EQ(countParameters(preset("llama2-7b")).total(), 6738415616);
  EXPECT_EQ(countParameters(preset("gpt-neox-20b")).total(), 20554567680);
  EXPECT_EQ(countParameters(preset("bloom-176b")).total(), 176247271424);
}

TEST(ModelConfig, TinyBreakdown) {
  ModelConfig tiny = preset("tiny");
  ParamBreakdown count = countParameters(tiny);
  // wte 256x64 + wpe 64x64.
  EXPECT_EQ(count.embedding, 256 * 64 + 64 * 64);
  // q, k, v, o with biases; fc1, fc2 with biases; two layer norms.
  EXPECT_EQ(count.perLayer, 4 * (64 * 64 + 64) + (64 * 256 + 256) +
                                (256 * 64 + 64) + 2 * 2 * 64);
  EXPECT_EQ(count.layers, 2 * count.perLayer);
  EXPECT_EQ(count.head, 2 * 64); // final norm; the output layer is tied
  EXPECT_EQ(count.total(), 120576);
}

TEST(ModelConfig, CountsFollowTheArchitecture) {
  ModelConfig base = preset("tiny");
  int64_t baseLayer = countParameters(base).perLayer;

  ModelConfig untied = base;
  untied.tieEmbeddings = false;
  EXPECT_EQ(countParameters(untied).head, 2 * 64 + 256 * 64);

  ModelConfig gqa = base;
  gqa.kvHeads = 1; // k and v shrink from 64 to 16 columns
  EXPECT_EQ(countParameters(gqa).perLayer, baseLayer - 2 * (48 * 64 + 48));

  ModelConfig gated = base;
  gated.activation = Activation::Swiglu;
  EXPECT_EQ(countParameters(gated).perLayer, baseLayer + 64 * 256 + 256);

  ModelConfig noBias = base;
  noBias.bias = false;
  EXPECT_EQ(countParameters(noBias).perLayer,
            baseLayer - (4 * 64 + 256 + 64) - 2 * 64);

  ModelConfig rope = base;
  rope.positions = Positions::Rope;
  EXPECT_EQ(countParameters(rope).embedding, 256 * 64);

  ModelConfig bloomish = base;
  bloomish.embeddingNorm = true;
  EXPECT_EQ(countParameters(bloomish).embedding, 256 * 64 + 64 * 64 + 2 * 64);

  ModelConfig offset = base;
  offset.positionOffset = 2;
  EXPECT_EQ(countParameters(offset).embedding, 256 * 64 + 66 * 64);

  ModelConfig topQuery = base;
  topQuery.topQueryLayer = true;
  EXPECT_EQ(countParameters(topQuery).topQuery, baseLayer + 64 * 64);
}

TEST(ModelConfig, EveryPresetIsValid) {
  ASSERT_FALSE(presetNames().empty());
  for (llvm::StringRef name : presetNames())
    EXPECT_EQ(validationError(preset(name)), "") << name.str();
}

TEST(ModelConfig, UnknownPresetListsTheKnownOnes) {
  llvm::Expected<ModelConfig> config = getPreset("gpt5");
  ASSERT_FALSE(static_cast<bool>(config));
  std::string message = llvm::toString(config.takeError());
  EXPECT_NE(message.find("unknown preset 'gpt5'"), std::string::npos);
  EXPECT_NE(message.find("tiny"), std::string::npos);
}

TEST(ModelConfig, ValidationNamesTheProblem) {
  struct Case {
    const char *what;
    void (*mutate)(ModelConfig &);
    const char *expected;
  };
  const Case cases[] = {
      {"zero layers", [](ModelConfig &c) { c.layers = 0; },
       "layers must be positive, got 0"},
      {"negative hidden", [](ModelConfig &c) { c.hidden = -64; },
       "hidden must be positive, got -64"},
      {"zero batch", [](ModelConfig &c) { c.batch = 0; },
       "batch must be positive"},
      {"huge vocab", [](ModelConfig &c) { c.vocab = int64_t(1) << 40; },
       "vocab = 1099511627776 exceeds the limit"},
      {"heads not dividing hidden", [](ModelConfig &c) { c.heads = 3; },
       "heads (3) must divide hidden (64)"},
      {"kv_heads not dividing heads", [](ModelConfig &c) { c.kvHeads = 3; },
       "kv_heads (3) must divide heads (4)"},
      {"seq beyond the position table", [](ModelConfig &c) { c.seq = 128; },
       "seq (128) exceeds the learned position table (64 positions)"},
      {"odd rotary dims",
       [](ModelConfig &c) {
         c.positions = Positions::Rope;
         c.rotaryFraction = 0.35;
       },
       "gives 5 rotary dims"},
      {"rotary fraction above 1",
       [](ModelConfig &c) {
         c.positions = Positions::Rope;
         c.rotaryFraction = 1.5;
       },
       "rotary fraction must be in (0, 1]"},
      {"parallel residual with post norm",
       [](ModelConfig &c) {
         c.parallelResidual = true;
         c.placement = NormPlacement::Post;
       },
       "parallel residual needs pre norm placement, got 'post'"},
      {"dropout of 1", [](ModelConfig &c) { c.dropout = 1.0; },
       "dropout must be in [0, 1)"},
      {"zero init std", [](ModelConfig &c) { c.initStd = 0.0; },
       "init std must be positive"},
      {"negative epsilon", [](ModelConfig &c) { c.normEpsilon = -1.0; },
       "norm epsilon must be positive"},
  };
  for (const Case &test : cases) {
    ModelConfig config = preset("tiny");
    test.mutate(config);
    std::string message = validationError(config);
    EXPECT_NE(message.find(test.expected), std::string::npos)
        << test.what << ": got '" << message << "'";
  }
}

TEST(ModelConfig, EnumSpellingsRoundTrip) {
  for (Activation a :
       {Activation::Gelu, Activation::GeluTanh, Activation::FastGelu,
        Activation::Relu, Activation::Swiglu, Activation::Geglu})
    EXPECT_EQ(parseActivation(toString(a)), a);
  for (Positions p :
       {Positions::Learned, Positions::Rope, Positions::Alibi, Positions::None})
    EXPECT_EQ(parsePositions(toString(p)), p);
  for (NormPlacement p :
       {NormPlacement::Pre, NormPlacement::Post, NormPlacement::DeepNorm})
    EXPECT_EQ(parseNormPlacement(toString(p)), p);
  EXPECT_EQ(parseActivation("swish"), std::nullopt);
  EXPECT_EQ(parseDType("fp8"), std::nullopt);
}

} // namespace
