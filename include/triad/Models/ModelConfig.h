//===- ModelConfig.h - GPT-family model configurations -----------*- C++
//-*-===//
//
// The configuration of a GPT-family transformer as triad-gen builds it: the
// presets of the project's reference models, Hugging Face config.json import,
// command-line overrides, validation and the analytic parameter count. No
// MLIR here; the IR builder is in ModelBuilder.h.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_MODELS_MODELCONFIG_H
#define TRIAD_MODELS_MODELCONFIG_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace triad {

enum class NormKind { LayerNorm, RmsNorm };
enum class NormPlacement { Pre, Post, DeepNorm };
enum class Activation { Gelu, GeluTanh, FastGelu, Relu, Swiglu, Geglu };
enum class Positions { Learned, Rope, Alibi, None };
enum class AttentionMask { Causal, Prefix };
enum class DType { F32, BF16, F16 };

/// The spelling of each enum value used on the command line, in presets and
/// in the IR's summary; and the inverse (std::nullopt for an unknown name).
llvm::StringRef toString(NormKind value);
llvm::StringRef toString(NormPlacement value);
llvm::StringRef toString(Activation value);
llvm::StringRef toString(Positions value);
llvm::StringRef toString(AttentionMask value);
llvm::StringRef toString(DType value);
std::optional<NormKind> parseNormKind(llvm::StringRef name);
std::optional<NormPlacement> parseNormPlacement(llvm::StringRef name);
std::optional<Activation> parseActivation(llvm::StringRef name);
std::optional<Positions> parsePositions(llvm::StringRef name);
std::optional<AttentionMask> parseAttentionMask(llvm::StringRef name);
std::optional<DType> parseDType(llvm::StringRef name);

/// True for the gated activations (SwiGLU, GeGLU), whose MLP has separate
/// gate and up projections of `ffn` columns each.
bool isGated(Activation activation);

struct ModelConfig {
  std::string name = "custom";
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kvHeads = 4;
  /// Inner size of the MLP (per branch for gated activations).
  int64_t ffn = 256;
  int64_t vocab = 256;
  /// Sequence length of one training sample.
  int64_t seq = 64;
  /// Global batch of one optimizer step, in sequences: data parallelism and
  /// microbatching divide it later, so the same IR trains on the same tokens
  /// per step on every mesh.
  int64_t batch = 8;
  /// Rows of the learned position table (before `positionOffset`); the
  /// published context length. 0 means `seq`.
  int64_t maxPositions = 0;
  /// Extra leading rows of the learned position table (OPT reserves 2).
  int64_t positionOffset = 0;

  NormKind norm = NormKind::LayerNorm;
  NormPlacement placement = NormPlacement::Pre;
  /// DeepNorm's residual scale and initialization gain; 0 derives them from
  /// the layer count as GLM-130B does: alpha = sqrt(2N), beta = 1/sqrt(2N).
  double deepnormAlpha = 0.0;
  double deepnormBeta = 0.0;
  /// A norm after the last layer, before the output projection.
  bool finalNorm = true;
  double normEpsilon = 1e-5;

  Activation activation = Activation::Gelu;
  Positions positions = Positions::Learned;
  /// Fraction of each head's dimensions that RoPE rotates (GPT-NeoX: 0.25).
  double rotaryFraction = 1.0;
  double ropeBase = 10000.0;

  /// GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x)).
  bool parallelResidual = false;
  /// The output projection reuses the token embedding table.
  bool tieEmbeddings = true;
  /// BLOOM: a layer norm right after the token embedding.
  bool embeddingNorm = false;
  /// Biases on the linear layers, and on layer norms.
  bool bias = true;
  /// CodeGeeX: a last transformer layer whose queries come from a learned
  /// per-position embedding.
  bool topQueryLayer = false;
  AttentionMask mask = AttentionMask::Causal;
  DType dtype = DType::F32;

  double initStd = 0.02;
  double dropout = 0.0;

  int64_t headDim() const { return hidden / heads; }
  int64_t rotaryDim() const;
  int64_t positionRows() const {
    return (maxPositions ? maxPositions : seq) + positionOffset;
  }
  double effectiveDeepnormAlpha() const;
  double effectiveDeepnormBeta() const;

  /// Checks every field and their combinations; the error says which field
  /// is wrong and why, in one line.
  llvm::Error validate() const;
};

/// Parameter counts of a configuration, by part of the model.
struct ParamBreakdown {
  int64_t embedding = 0;
  /// Parameters of one transformer layer (all layers are alike).
  int64_t perLayer = 0;
  int64_t layers = 0;
  /// CodeGeeX's top query layer and its query embedding.
  int64_t topQuery = 0;
  /// Final norm and (untied) output projection.
  int64_t head = 0;
  int64_t total() const { return embedding + layers + topQuery + head; }
};

/// The analytic parameter count of a valid configuration.
ParamBreakdown countParameters(const ModelConfig &config);

/// The names of the presets, in a stable order.
llvm::ArrayRef<llvm::StringRef> presetNames();

/// The preset called `name`, or an error listing the known presets.
llvm::Expected<ModelConfig> getPreset(llvm::StringRef name);

/// Reads a Hugging Face config.json (model types gpt2, gpt_neox, opt, bloom,
/// llama). `batch` and `seq` come from the file where it has them
/// (max_position_embeddings / n_positions), else keep the defaults. The
/// dropout of the embedding and the residual branches is read (Hugging
/// Face's default where absent); a field Triad reads but cannot honor (a
/// dropout it has not) adds a sentence to `warnings`.
llvm::Expected<ModelConfig>
parseHFConfig(llvm::StringRef json,
              std::vector<std::string> *warnings = nullptr);

} // namespace triad

#endif // TRIAD_MODELS_MODELCONFIG_H
