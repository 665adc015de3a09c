//===- ModelConfig.cpp - GPT-family model configurations ------------------===//
//
// Enum spellings, validation, presets and the analytic parameter count.
//
//===----------------------------------------------------------------------===//

#include "triad/Models/ModelConfig.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace triad;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Enum spellings
//===----------------------------------------------------------------------===//

namespace {
template <typename Enum> struct Spelling {
  Enum value;
  StringRef name;
};

constexpr Spelling<NormKind> kNormKinds[] = {{NormKind::LayerNorm, "layernorm"},
                                             {NormKind::RmsNorm, "rmsnorm"}};
constexpr Spelling<NormPlacement> kPlacements[] = {
    {NormPlacement::Pre, "pre"},
    {NormPlacement::Post, "post"},
    {NormPlacement::DeepNorm, "deepnorm"}};
constexpr Spelling<Activation> kActivations[] = {
    {Activation::Gelu, "gelu"},          {Activation::GeluTanh, "gelu_tanh"},
    {Activation::FastGelu, "fast_gelu"}, {Activation::Relu, "relu"},
    {Activation::Swiglu, "swiglu"},      {Activation::Geglu, "geglu"}};
constexpr Spelling<Positions> kPositions[] = {{Positions::Learned, "learned"},
                                              {Positions::Rope, "rope"},
                                              {Positions::Alibi, "alibi"},
                                              {Positions::None, "none"}};
constexpr Spelling<AttentionMask> kMasks[] = {
    {AttentionMask::Causal, "causal"}, {AttentionMask::Prefix, "prefix"}};
constexpr Spelling<DType> kDTypes[] = {
    {DType::F32, "f32"}, {DType::BF16, "bf16"}, {DType::F16, "f16"}};

template <typename Enum, size_t N>
StringRef spell(const Spelling<Enum> (&table)[N], Enum value) {
  for (const auto &entry : table)
    if (entry.value == value)
      return entry.name;
  return "<invalid>";
}

template <typename Enum, size_t N>
std::optional<Enum> lookup(const Spelling<Enum> (&table)[N], StringRef name) {
  for (const auto &entry : table)
    if (entry.name == name)
      return entry.value;
  return std::nullopt;
}
} // namespace

StringRef triad::toString(NormKind value) { return spell(kNormKinds, value); }
StringRef triad::toString(NormPlacement value) {
  return spell(kPlacements, value);
}
StringRef triad::toString(Activation value) {
  return spell(kActivations, value);
}
StringRef triad::toString(Positions value) { return spell(kPositions, value); }
StringRef triad::toString(AttentionMask value) { return spell(kMasks, value); }
StringRef triad::toString(DType value) { return spell(kDTypes, value); }

std::optional<NormKind> triad::parseNormKind(StringRef name) {
  return lookup(kNormKinds, name);
}
std::optional<NormPlacement> triad::parseNormPlacement(StringRef name) {
  return lookup(kPlacements, name);
}
std::optional<Activation> triad::parseActivation(StringRef name) {
  return lookup(kActivations, name);
}
std::optional<Positions> triad::parsePositions(StringRef name) {
  return lookup(kPositions, name);
}
std::optional<AttentionMask> triad::parseAttentionMask(StringRef name) {
  return lookup(kMasks, name);
}
std::optional<DType> triad::parseDType(StringRef name) {
  return lookup(kDTypes, name);
}

bool triad::isGated(Activation activation) {
  return activation == Activation::Swiglu || activation == Activation::Geglu;
}

//===----------------------------------------------------------------------===//
// Derived quantities and validation
//===----------------------------------------------------------------------===//

int64_t ModelConfig::rotaryDim() const {
  // Truncated like Hugging Face's int(head_size * rotary_pct).
  return static_cast<int64_t>(static_cast<double>(headDim()) * rotaryFraction);
}

double ModelConfig::effectiveDeepnormAlpha() const {
  return deepnormAlpha > 0.0 ? deepnormAlpha
                             : std::sqrt(2.0 * static_cast<double>(layers));
}

double ModelConfig::effectiveDeepnormBeta() const {
  return deepnormBeta > 0.0
             ? deepnormBeta
             : 1.0 / std::sqrt(2.0 * static_cast<double>(layers));
}

/// Shortest readable form of a double for messages ("0.3", not "0.30").
static std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

static llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Error ModelConfig::validate() const {
  // Bounds keep every derived count (parameters, elements) inside int64.
  struct Size {
    StringRef name;
    int64_t value;
    int64_t max;
  };
  const Size sizes[] = {
      {"layers", layers, 1 << 16}, {"hidden", hidden, 1 << 20},
      {"heads", heads, 1 << 16},   {"kv_heads", kvHeads, 1 << 16},
      {"ffn", ffn, 1 << 22},       {"vocab", vocab, 1 << 24},
      {"seq", seq, 1 << 20},       {"batch", batch, 1 << 20},
  };
  for (const Size &size : sizes) {
    if (size.value <= 0)
      return configError(llvm::formatv("{0} must be positive, got {1}",
                                       size.name, size.value));
    if (size.value > size.max)
      return configError(llvm::formatv("{0} = {1} exceeds the limit {2}",
                                       size.name, size.value, size.max));
  }
  if (maxPositions < 0 || maxPositions > (1 << 20))
    return configError(llvm::formatv(
        "max positions must be in [0, {0}], got {1}", 1 << 20, maxPositions));
  if (positionOffset < 0 || positionOffset > 1024)
    return configError(llvm::formatv(
        "position offset must be in [0, 1024], got {0}", positionOffset));
  if (hidden % heads != 0)
    return configError(
        llvm::formatv("heads ({0}) must divide hidden ({1})", heads, hidden));
  if (heads % kvHeads != 0)
    return configError(llvm::formatv("kv_heads ({0}) must divide heads ({1})",
                                     kvHeads, heads));
  if ((positions == Positions::Learned || topQueryLayer) && maxPositions &&
      seq > maxPositions)
    return configError(llvm::formatv(
        "seq ({0}) exceeds the learned position table ({1} positions)", seq,
        maxPositions));
  // The largest activation (the logits) must have an element count that
  // every backend can index.
  int64_t widest = std::max({vocab, ffn, hidden});
  if (batch * seq > (int64_t(1) << 44) / widest)
    return configError(llvm::formatv(
        "batch * seq * max(vocab, ffn, hidden) = {0} * {1} * {2} exceeds the "
        "limit of 2^44 elements per activation",
        batch, seq, widest));
  if (positions == Positions::Rope) {
    if (!(rotaryFraction > 0.0 && rotaryFraction <= 1.0))
      return configError(
          llvm::formatv("rotary fraction must be in (0, 1], got {0}",
                        number(rotaryFraction)));
    int64_t dims = rotaryDim();
    if (dims < 2 || dims % 2 != 0)
      return configError(llvm::formatv(
          "rotary fraction {0} of head dim {1} gives {2} rotary dims; RoPE "
          "needs an even number of at least 2",
          number(rotaryFraction), headDim(), dims));
    if (!(ropeBase > 1.0) || !std::isfinite(ropeBase))
      return configError(llvm::formatv(
          "rope base must be greater than 1, got {0}", number(ropeBase)));
  }
  if (parallelResidual && placement != NormPlacement::Pre)
    return configError(
        llvm::formatv("parallel residual needs pre norm placement, got '{0}'",
                      toString(placement)));
  if (!(deepnormAlpha >= 0.0) || !std::isfinite(deepnormAlpha) ||
      !(deepnormBeta >= 0.0) || !std::isfinite(deepnormBeta))
    return configError(llvm::formatv(
        "deepnorm alpha and beta must be finite and not negative, got {0} and "
        "{1}",
        number(deepnormAlpha), number(deepnormBeta)));
  if (!(normEpsilon > 0.0) || !std::isfinite(normEpsilon))
    return configError(llvm::formatv("norm epsilon must be positive, got {0}",
                                     number(normEpsilon)));
  if (!(initStd > 0.0) || !std::isfinite(initStd))
    return configError(
        llvm::formatv("init std must be positive, got {0}", number(initStd)));
  if (!(dropout >= 0.0 && dropout < 1.0))
    return configError(
        llvm::formatv("dropout must be in [0, 1), got {0}", number(dropout)));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Parameter count
//===----------------------------------------------------------------------===//

static int64_t normParams(const ModelConfig &config) {
  bool withBias = config.norm == NormKind::LayerNorm && config.bias;
  return config.hidden * (withBias ? 2 : 1);
}

static int64_t transformerLayerParams(const ModelConfig &config) {
  int64_t h = config.hidden;
  int64_t qDim = config.heads * config.headDim();
  int64_t kvDim = config.kvHeads * config.headDim();
  int64_t attention = h * qDim + 2 * h * kvDim + qDim * h;
  int64_t mlpBranches = isGated(config.activation) ? 2 : 1;
  int64_t mlp = (mlpBranches + 1) * h * config.ffn;
  if (config.bias) {
    attention += qDim + 2 * kvDim + h;
    mlp += mlpBranches * config.ffn + h;
  }
  return attention + mlp + 2 * normParams(config);
}

ParamBreakdown triad::countParameters(const ModelConfig &config) {
  ParamBreakdown count;
  count.embedding = config.vocab * config.hidden;
  if (config.positions == Positions::Learned)
    count.embedding += config.positionRows() * config.hidden;
  if (config.embeddingNorm)
    count.embedding += normParams(config);
  count.perLayer = transformerLayerParams(config);
  count.layers = count.perLayer * config.layers;
  if (config.topQueryLayer)
    count.topQuery = count.perLayer + config.positionRows() * config.hidden;
  if (config.finalNorm)
    count.head += normParams(config);
  if (!config.tieEmbeddings)
    count.head += config.vocab * config.hidden;
  return count;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//

namespace {
/// A model's published architecture. The global batch is a training choice,
/// not part of the architecture: every preset starts at 8 sequences and
/// `--batch` sets it.
struct Preset {
  StringRef name;
  ModelConfig (*make)();
};

ModelConfig gptBase(StringRef name, int64_t layers, int64_t hidden,
                    int64_t heads, int64_t ffn, int64_t vocab, int64_t seq) {
  ModelConfig config;
  config.name = name.str();
  config.layers = layers;
  config.hidden = hidden;
  config.heads = heads;
  config.kvHeads = heads;
  config.ffn = ffn;
  config.vocab = vocab;
  config.seq = seq;
  config.maxPositions = seq;
  return config;
}

const Preset kPresets[] = {
    {"tiny", [] { return gptBase("tiny", 2, 64, 4, 256, 256, 64); }},
    {"gpt2-small",
     [] {
       ModelConfig c = gptBase("gpt2-small", 12, 768, 12, 3072, 50257, 1024);
       c.activation = Activation::GeluTanh;
       return c;
     }},
    {"gpt2-medium",
     [] {
       ModelConfig c = gptBase("gpt2-medium", 24, 1024, 16, 4096, 50257, 1024);
       c.activation = Activation::GeluTanh;
       return c;
     }},
    {"llama2-7b",
     [] {
       ModelConfig c = gptBase("llama2-7b", 32, 4096, 32, 11008, 32000, 4096);
       c.norm = NormKind::RmsNorm;
       c.activation = Activation::Swiglu;
       c.positions = Positions::Rope;
       c.tieEmbeddings = false;
       c.bias = false;
       return c;
     }},
    {"gpt-neox-20b",
     [] {
       ModelConfig c =
           gptBase("gpt-neox-20b", 44, 6144, 64, 24576, 50432, 2048);
       c.positions = Positions::Rope;
       c.rotaryFraction = 0.25;
       c.parallelResidual = true;
       c.activation = Activation::GeluTanh; // HF: hidden_act gelu_fast
       c.tieEmbeddings = false;
       return c;
     }},
    {"codegeex-13b",
     [] {
       ModelConfig c =
           gptBase("codegeex-13b", 39, 5120, 40, 20480, 52224, 2048);
       c.activation = Activation::FastGelu;
       c.topQueryLayer = true;
       return c;
     }},
    {"glm-130b",
     [] {
       ModelConfig c = gptBase("glm-130b", 70, 12288, 96, 32768, 150528, 2048);
       c.placement = NormPlacement::DeepNorm;
       c.activation = Activation::Geglu;
       c.positions = Positions::Rope;
       c.mask = AttentionMask::Prefix;
       return c;
     }},
    {"opt-175b",
     [] {
       ModelConfig c = gptBase("opt-175b", 96, 12288, 96, 49152, 50272, 2048);
       c.activation = Activation::Relu;
       c.positionOffset = 2;
       return c;
     }},
    {"bloom-176b",
     [] {
       ModelConfig c =
           gptBase("bloom-176b", 70, 14336, 112, 57344, 250880, 2048);
       c.activation = Activation::GeluTanh;
       c.positions = Positions::Alibi;
       c.embeddingNorm = true;
       return c;
     }},
    {"mt-nlg-530b",
     [] {
       // GPT-2's 50257-token vocabulary, padded by Megatron to 51200;
       // Megatron's fused bias-GELU is the tanh approximation.
       ModelConfig c =
           gptBase("mt-nlg-530b", 105, 20480, 128, 81920, 51200, 2048);
       c.activation = Activation::GeluTanh;
       return c;
     }},
};
} // namespace

llvm::ArrayRef<StringRef> triad::presetNames() {
  static const std::vector<StringRef> names = [] {
    std::vector<StringRef> result;
    for (const Preset &preset : kPresets)
      result.push_back(preset.name);
    return result;
  }();
  return names;
}

llvm::Expected<ModelConfig> triad::getPreset(StringRef name) {
  for (const Preset &preset : kPresets)
    if (preset.name == name)
      return preset.make();
  return configError(llvm::formatv("unknown preset '{0}' (known: {1})", name,
                                   llvm::join(presetNames(), ", ")));
}
