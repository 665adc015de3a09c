//===- HFWeights.cpp - Hugging Face weight names and layouts --------------===//
//
// The tensors of each supported *ForCausalLM class, against the parameters
// ModelBuilder declares for the config HFConfig.cpp imports. Names follow
// transformers' modeling files; layouts are torch.nn.Linear's [out, in]
// except GPT-2's Conv1D ([in, out]).
//
//===----------------------------------------------------------------------===//

#include "triad/Models/HFWeights.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"

using namespace triad;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

namespace {

using Layout = HFWeightRule::Layout;

/// Collects the rules of one model, layer by layer.
class Rules {
public:
  explicit Rules(const ModelConfig &config) : c(config) {}

  /// A tensor kept as it is (a table, a norm's scale or shift, a bias).
  void same(const Twine &triad, const Twine &hf, std::vector<int64_t> shape) {
    add(triad, hf, Layout::Same, shape, shape);
  }
  /// A matrix of torch.nn.Linear (out x in), whole.
  void linear(const Twine &triad, const Twine &hf, int64_t in, int64_t out) {
    add(triad, hf, Layout::Linear, {in, out}, {out, in});
  }
  /// A norm: its scale, and its shift where the model has one.
  void norm(const Twine &triad, const Twine &hf) {
    same(triad + ".weight", hf + ".weight", {c.hidden});
    if (c.norm == NormKind::LayerNorm && c.bias)
      same(triad + ".bias", hf + ".bias", {c.hidden});
  }
  /// A torch.nn.Linear layer: weight, and bias where the model has one.
  void linearLayer(const Twine &triad, const Twine &hf, int64_t in,
                   int64_t out) {
    linear(triad + ".weight", hf + ".weight", in, out);
    if (c.bias)
      same(triad + ".bias", hf + ".bias", {out});
  }
  /// Query, key and value fused in one torch.nn.Linear of 3 x hidden
  /// outputs ordered by head, then q/k/v, then the head's features
  /// (GPT-NeoX's and BLOOM's query_key_value).
  void fusedPerHead(const Twine &layer, const Twine &hf) {
    int64_t d = c.headDim(), h = c.hidden;
    const char *parts[] = {"wq", "wk", "wv"};
    for (int64_t part = 0; part < 3; ++part) {
      HFWeightRule &w = add(layer + ".attn." + parts[part] + ".weight",
                            hf + ".weight", Layout::Linear, {h, h}, {3 * h, h});
      w.offset = part * d;
      w.headDim = d;
      w.headStride = 3 * d;
      if (!c.bias)
        continue;
      HFWeightRule &b = add(layer + ".attn." + parts[part] + ".bias",
                            hf + ".bias", Layout::Vector, {h}, {3 * h});
      b.offset = part * d;
      b.headDim = d;
      b.headStride = 3 * d;
    }
  }

  std::vector<HFWeightRule> take() { return std::move(rules); }

  HFWeightRule &add(const Twine &triad, const Twine &hf, Layout layout,
                    std::vector<int64_t> triadShape,
                    std::vector<int64_t> hfShape) {
    HFWeightRule &rule = rules.emplace_back();
    rule.triad = triad.str();
    rule.hf = hf.str();
    rule.layout = layout;
    rule.triadShape = std::move(triadShape);
    rule.hfShape = std::move(hfShape);
    return rule;
  }

  const ModelConfig &c;

private:
  std::vector<HFWeightRule> rules;
};

std::string layerName(int64_t i) { return ("layers." + Twine(i)).str(); }

void gpt2(Rules &r) {
  const ModelConfig &c = r.c;
  int64_t h = c.hidden;
  r.same("embed.wte", "transformer.wte.weight", {c.vocab, h});
  r.same("embed.wpe", "transformer.wpe.weight", {c.positionRows(), h});
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string t = layerName(i), hf = ("transformer.h." + Twine(i)).str();
    r.norm(t + ".attn_norm", hf + ".ln_1");
    // c_attn: Conv1D [h, 3h], the columns q, then k, then v.
    const char *parts[] = {"wq", "wk", "wv"};
    for (int64_t part = 0; part < 3; ++part) {
      r.add(t + ".attn." + parts[part] + ".weight", hf + ".attn.c_attn.weight",
            Layout::Conv1D, {h, h}, {h, 3 * h})
          .offset = part * h;
      r.add(t + ".attn." + parts[part] + ".bias", hf + ".attn.c_attn.bias",
            Layout::Vector, {h}, {3 * h})
          .offset = part * h;
    }
    r.same(t + ".attn.wo.weight", hf + ".attn.c_proj.weight", {h, h});
    r.same(t + ".attn.wo.bias", hf + ".attn.c_proj.bias", {h});
    r.norm(t + ".mlp_norm", hf + ".ln_2");
    r.same(t + ".mlp.fc1.weight", hf + ".mlp.c_fc.weight", {h, c.ffn});
    r.same(t + ".mlp.fc1.bias", hf + ".mlp.c_fc.bias", {c.ffn});
    r.same(t + ".mlp.fc2.weight", hf + ".mlp.c_proj.weight", {c.ffn, h});
    r.same(t + ".mlp.fc2.bias", hf + ".mlp.c_proj.bias", {h});
  }
  r.norm("head.norm", "transformer.ln_f");
}

void llama(Rules &r) {
  const ModelConfig &c = r.c;
  int64_t h = c.hidden, kv = c.kvHeads * c.headDim();
  r.same("embed.wte", "model.embed_tokens.weight", {c.vocab, h});
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string t = layerName(i), hf = ("model.layers." + Twine(i)).str();
    r.norm(t + ".attn_norm", hf + ".input_layernorm");
    r.linearLayer(t + ".attn.wq", hf + ".self_attn.q_proj", h, h);
    r.linearLayer(t + ".attn.wk", hf + ".self_attn.k_proj", h, kv);
    r.linearLayer(t + ".attn.wv", hf + ".self_attn.v_proj", h, kv);
    r.linearLayer(t + ".attn.wo", hf + ".self_attn.o_proj", h, h);
    r.norm(t + ".mlp_norm", hf + ".post_attention_layernorm");
    r.linearLayer(t + ".mlp.w_gate", hf + ".mlp.gate_proj", h, c.ffn);
    r.linearLayer(t + ".mlp.w_up", hf + ".mlp.up_proj", h, c.ffn);
    r.linearLayer(t + ".mlp.w_down", hf + ".mlp.down_proj", c.ffn, h);
  }
  r.norm("head.norm", "model.norm");
}

/// The layers of GPT-NeoX and BLOOM, alike but for their names: `layers`
/// before each index, `attention` the attention module's name.
void fusedQkvLayers(Rules &r, StringRef layers, StringRef attention) {
  const ModelConfig &c = r.c;
  int64_t h = c.hidden;
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string t = layerName(i), hf = (layers + Twine(i)).str();
    r.norm(t + ".attn_norm", hf + ".input_layernorm");
    r.fusedPerHead(t, hf + "." + attention + ".query_key_value");
    r.linearLayer(t + ".attn.wo", hf + "." + attention + ".dense", h, h);
    r.norm(t + ".mlp_norm", hf + ".post_attention_layernorm");
    r.linearLayer(t + ".mlp.fc1", hf + ".mlp.dense_h_to_4h", h, c.ffn);
    r.linearLayer(t + ".mlp.fc2", hf + ".mlp.dense_4h_to_h", c.ffn, h);
  }
}

void gptNeox(Rules &r) {
  r.same("embed.wte", "gpt_neox.embed_in.weight", {r.c.vocab, r.c.hidden});
  fusedQkvLayers(r, "gpt_neox.layers.", "attention");
  r.norm("head.norm", "gpt_neox.final_layer_norm");
}

void opt(Rules &r) {
  const ModelConfig &c = r.c;
  int64_t h = c.hidden;
  r.same("embed.wte", "model.decoder.embed_tokens.weight", {c.vocab, h});
  r.same("embed.wpe", "model.decoder.embed_positions.weight",
         {c.positionRows(), h});
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string t = layerName(i),
                hf = ("model.decoder.layers." + Twine(i)).str();
    r.norm(t + ".attn_norm", hf + ".self_attn_layer_norm");
    r.linearLayer(t + ".attn.wq", hf + ".self_attn.q_proj", h, h);
    r.linearLayer(t + ".attn.wk", hf + ".self_attn.k_proj", h, h);
    r.linearLayer(t + ".attn.wv", hf + ".self_attn.v_proj", h, h);
    r.linearLayer(t + ".attn.wo", hf + ".self_attn.out_proj", h, h);
    r.norm(t + ".mlp_norm", hf + ".final_layer_norm");
    r.linearLayer(t + ".mlp.fc1", hf + ".fc1", h, c.ffn);
    r.linearLayer(t + ".mlp.fc2", hf + ".fc2", c.ffn, h);
  }
  if (c.finalNorm)
    r.norm("head.norm", "model.decoder.final_layer_norm");
}

void bloom(Rules &r) {
  r.same("embed.wte", "transformer.word_embeddings.weight",
         {r.c.vocab, r.c.hidden});
  r.norm("embed.norm", "transformer.word_embeddings_layernorm");
  fusedQkvLayers(r, "transformer.h.", "self_attention");
  r.norm("head.norm", "transformer.ln_f");
}

} // namespace

Expected<std::vector<HFWeightRule>>
triad::hfWeightRules(StringRef modelType, const ModelConfig &config) {
  auto refuse = [&](const Twine &what) {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("model_type '{0}': {1}", modelType, what.str()).str());
  };
  if (config.topQueryLayer || config.mask != AttentionMask::Causal)
    return refuse("the model has parts no Hugging Face class of its type has "
                  "(a top-query layer, a prefix mask)");
  if (config.hidden % config.heads != 0)
    return refuse("the hidden size does not split into the heads");
  Rules rules(config);
  if (modelType == "gpt2")
    gpt2(rules);
  else if (modelType == "llama")
    llama(rules);
  else if (modelType == "gpt_neox")
    gptNeox(rules);
  else if (modelType == "opt")
    opt(rules);
  else if (modelType == "bloom")
    bloom(rules);
  else
    return refuse("no weight names known (supported: gpt2, gpt_neox, opt, "
                  "bloom, llama)");
  // The output projection: the token table again where tied, else a
  // [vocab, hidden] matrix, which is Linear's [out, in] as Triad keeps it.
  if (!config.tieEmbeddings)
    rules.same("head.lm_head.weight",
               modelType == "gpt_neox" ? "embed_out.weight" : "lm_head.weight",
               {config.vocab, config.hidden});
  return rules.take();
}

StringRef triad::hfBasePrefix(StringRef modelType) {
  if (modelType == "gpt2" || modelType == "bloom")
    return "transformer.";
  if (modelType == "llama")
    return "model.";
  if (modelType == "gpt_neox")
    return "gpt_neox.";
  if (modelType == "opt")
    return "model.";
  return "";
}

bool triad::isHFBuffer(StringRef name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name.ends_with(".attention.bias") ||
         name.ends_with(".attention.masked_bias") ||
         name.ends_with("rotary_emb.inv_freq");
}
