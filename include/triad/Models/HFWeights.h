//===- HFWeights.h - Hugging Face weight names and layouts ------*- C++ -*-===//
//
// How the parameters of a model imported from a Hugging Face config.json
// (triad-gen --hf-config) correspond to the tensors of its Hugging Face
// checkpoint: names, the [out, in] layout of torch.nn.Linear against
// Triad's [in, out], and the fused query/key/value projections (GPT-2's
// Conv1D columns; GPT-NeoX's and BLOOM's per-head rows). triad-convert
// reads and writes checkpoints through these rules, in both directions.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_MODELS_HFWEIGHTS_H
#define TRIAD_MODELS_HFWEIGHTS_H

#include "triad/Models/ModelConfig.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace triad {

/// One Triad parameter and where its elements lie in one Hugging Face
/// tensor. The Triad tensor's last dimension (its output features for a
/// matrix, every element for a vector) is `features` wide; feature o comes
/// from feature select(o) of the Hugging Face tensor:
///   select(o) = headStride ? (o / headDim) * headStride + offset + o % headDim
///                          : offset + o.
struct HFWeightRule {
  enum class Layout {
    /// The same shape and elements (a table, a norm's vector, a bias).
    Same,
    /// A vector: triad[o] = hf[select(o)].
    Vector,
    /// torch.nn.Linear's [out, in]: triad[i][o] = hf[select(o)][i].
    Linear,
    /// GPT-2's Conv1D [in, out]: triad[i][o] = hf[i][select(o)].
    Conv1D,
  };
  std::string triad;
  /// The name in the checkpoint of the *ForCausalLM class.
  std::string hf;
  Layout layout = Layout::Same;
  std::vector<int64_t> triadShape, hfShape;
  int64_t offset = 0, headDim = 1, headStride = 0;

  int64_t select(int64_t feature) const {
    return headStride
               ? (feature / headDim) * headStride + offset + feature % headDim
               : offset + feature;
  }
};

/// The rules for every parameter of `config` (imported from a config.json
/// of `modelType`: gpt2, gpt_neox, opt, bloom, llama). Every Triad
/// parameter has one rule; a fused Hugging Face tensor is the source of
/// several, which together cover it exactly.
llvm::Expected<std::vector<HFWeightRule>>
hfWeightRules(llvm::StringRef modelType, const ModelConfig &config);

/// The prefix the *ForCausalLM class puts before the base model's tensor
/// names ("transformer." for gpt2), which checkpoints of the base model
/// class (GPT2Model) lack; empty when there is none.
llvm::StringRef hfBasePrefix(llvm::StringRef modelType);

/// Whether `name` is a buffer Hugging Face saves beside the weights (an
/// attention mask, rotary frequencies): not a parameter, read by no rule.
bool isHFBuffer(llvm::StringRef name);

} // namespace triad

#endif // TRIAD_MODELS_HFWEIGHTS_H
