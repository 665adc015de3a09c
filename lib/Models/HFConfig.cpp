//===- HFConfig.cpp - Hugging Face config.json import ---------------------===//
//
// Maps the config.json of Hugging Face model types gpt2, gpt_neox, opt, bloom
// and llama to a ModelConfig. Fields the architecture needs are required;
// a field with the wrong JSON type, or a feature Triad does not model, is an
// error naming the field rather than a silent approximation.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/JsonDepth.h"
#include "triad/Models/ModelConfig.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace triad;
using llvm::Expected;
using llvm::StringRef;
namespace json = llvm::json;

namespace {

llvm::Error hfError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Typed access to the fields of one config object; every failure names the
/// model type and the field.
class Fields {
public:
  Fields(const json::Object &object, StringRef modelType)
      : object(object), modelType(modelType) {}

  /// The integer field `key`, or `fallback` when it is absent or null; an
  /// error when it is required and absent, or not an integer.
  Expected<int64_t> integer(StringRef key,
                            std::optional<int64_t> fallback = std::nullopt) {
    const json::Value *value = object.get(key);
    if (!value || value->kind() == json::Value::Null) {
      if (fallback)
        return *fallback;
      return missing(key);
    }
    if (std::optional<int64_t> result = value->getAsInteger())
      return *result;
    return wrongType(key, "an integer");
  }

  Expected<double> number(StringRef key, double fallback) {
    const json::Value *value = object.get(key);
    if (!value || value->kind() == json::Value::Null)
      return fallback;
    if (std::optional<double> result = value->getAsNumber())
      return *result;
    return wrongType(key, "a number");
  }

  Expected<bool> boolean(StringRef key, bool fallback) {
    const json::Value *value = object.get(key);
    if (!value || value->kind() == json::Value::Null)
      return fallback;
    if (std::optional<bool> result = value->getAsBoolean())
      return *result;
    return wrongType(key, "a boolean");
  }

  Expected<std::string> string(StringRef key, StringRef fallback) {
    const json::Value *value = object.get(key);
    if (!value || value->kind() == json::Value::Null)
      return fallback.str();
    if (std::optional<StringRef> result = value->getAsString())
      return result->str();
    return wrongType(key, "a string");
  }

  bool has(StringRef key) const {
    const json::Value *value = object.get(key);
    return value && value->kind() != json::Value::Null;
  }

  llvm::Error unsupported(StringRef key, const llvm::Twine &what) const {
    return hfError(llvm::formatv("model_type '{0}': field '{1}': {2}",
                                 modelType, key, what.str()));
  }

  /// A field Triad reads but cannot honor, said rather than dropped.
  void warn(StringRef key, const llvm::Twine &what) {
    warnings.push_back(llvm::formatv("model_type '{0}': field '{1}': {2}",
                                     modelType, key, what.str()));
  }

  /// The dropout probability of field `key` (`fallback`, Hugging Face's
  /// default, when absent), checked to be in [0, 1).
  Expected<double> probability(StringRef key, double fallback) {
    Expected<double> p = number(key, fallback);
    if (p && !(*p >= 0.0 && *p < 1.0))
      return unsupported(key, llvm::formatv("a dropout probability must be in "
                                            "[0, 1), got {0}",
                                            gText(*p)));
    return p;
  }

  static std::string gText(double value) {
    return llvm::formatv("{0}", llvm::format("%g", value)).str();
  }

  /// Dropout Triad does not model (on attention probabilities, inside the
  /// MLP): a warning naming the field when its probability is not 0.
  llvm::Error unmodelledDropout(StringRef key, double fallback,
                                StringRef where) {
    Expected<double> p = probability(key, fallback);
    if (!p)
      return p.takeError();
    if (*p != 0.0)
      warn(key, llvm::formatv("{0} is ignored: Triad has no dropout {1}",
                              gText(*p), where));
    return llvm::Error::success();
  }

  std::vector<std::string> warnings;

private:
  llvm::Error missing(StringRef key) const {
    return hfError(
        llvm::formatv("model_type '{0}' needs field '{1}'", modelType, key));
  }
  llvm::Error wrongType(StringRef key, StringRef expected) const {
    return hfError(llvm::formatv("model_type '{0}': field '{1}' must be {2}",
                                 modelType, key, expected));
  }

  const json::Object &object;
  StringRef modelType;
};

/// Reads transformers v5's `rope_parameters` object when present: only the
/// default RoPE is modelled; its theta and partial rotary factor override the
/// v4 fields.
llvm::Error readRopeParameters(const json::Object &object, Fields &fields,
                               ModelConfig &config) {
  const json::Value *value = object.get("rope_parameters");
  if (!value || value->kind() == json::Value::Null)
    return llvm::Error::success();
  const json::Object *rope = value->getAsObject();
  if (!rope)
    return fields.unsupported("rope_parameters", "must be an object");
  if (const json::Value *type = rope->get("rope_type")) {
    std::optional<StringRef> name = type->getAsString();
    if (!name || *name != "default")
      return fields.unsupported("rope_parameters",
                                "scaled RoPE is not supported (rope_type must "
                                "be 'default')");
  }
  if (const json::Value *theta = rope->get("rope_theta")) {
    std::optional<double> number = theta->getAsNumber();
    if (!number)
      return fields.unsupported("rope_parameters",
                                "rope_theta must be a number");
    config.ropeBase = *number;
  }
  if (const json::Value *factor = rope->get("partial_rotary_factor")) {
    std::optional<double> number = factor->getAsNumber();
    if (!number)
      return fields.unsupported("rope_parameters",
                                "partial_rotary_factor must be a number");
    config.rotaryFraction = *number;
  }
  return llvm::Error::success();
}

/// Rejects a boolean field whose value Triad does not model.
llvm::Error requireBoolean(Fields &fields, StringRef key, bool fallback,
                           bool required, const llvm::Twine &why) {
  Expected<bool> value = fields.boolean(key, fallback);
  if (!value)
    return value.takeError();
  if (*value != required)
    return fields.unsupported(key, why);
  return llvm::Error::success();
}

/// Maps Hugging Face activation names to Triad's.
Expected<Activation> mapActivation(Fields &fields, StringRef key,
                                   StringRef name) {
  if (name == "gelu")
    return Activation::Gelu;
  if (name == "gelu_new" || name == "gelu_fast" || name == "gelu_pytorch_tanh")
    return Activation::GeluTanh;
  if (name == "relu")
    return Activation::Relu;
  return fields.unsupported(key, "unsupported activation '" + name + "'");
}

// Returns an llvm::Error from the enclosing function when there is one.
#define TRIAD_CHECK(expr)                                                      \
  do {                                                                         \
    if (llvm::Error _error = (expr))                                           \
      return std::move(_error);                                                \
  } while (false)

// Sets `target` from an Expected or returns its error from the enclosing
// function.
#define TRIAD_ASSIGN(target, expr)                                             \
  do {                                                                         \
    auto _value = (expr);                                                      \
    if (!_value)                                                               \
      return _value.takeError();                                               \
    target = std::move(*_value);                                               \
  } while (false)

Expected<ModelConfig> fromGpt2(Fields &f, ModelConfig c) {
  TRIAD_ASSIGN(c.layers, f.integer("n_layer"));
  TRIAD_ASSIGN(c.hidden, f.integer("n_embd"));
  TRIAD_ASSIGN(c.heads, f.integer("n_head"));
  c.kvHeads = c.heads;
  TRIAD_ASSIGN(c.ffn, f.integer("n_inner", 4 * c.hidden));
  TRIAD_ASSIGN(c.vocab, f.integer("vocab_size"));
  TRIAD_ASSIGN(c.maxPositions, f.integer("n_positions"));
  c.seq = c.maxPositions;
  std::string act;
  TRIAD_ASSIGN(act, f.string("activation_function", "gelu_new"));
  TRIAD_ASSIGN(c.activation, mapActivation(f, "activation_function", act));
  TRIAD_ASSIGN(c.normEpsilon, f.number("layer_norm_epsilon", 1e-5));
  TRIAD_ASSIGN(c.tieEmbeddings, f.boolean("tie_word_embeddings", true));
  TRIAD_ASSIGN(c.initStd, f.number("initializer_range", 0.02));
  TRIAD_CHECK(requireBoolean(f, "scale_attn_weights", true, true,
                             "unscaled attention scores are not supported"));
  TRIAD_CHECK(requireBoolean(f, "scale_attn_by_inverse_layer_idx", false, false,
                             "per-layer attention scaling is not supported"));
  TRIAD_CHECK(requireBoolean(f, "reorder_and_upcast_attn", false, false,
                             "reordered attention upcasting is not supported"));
  // Triad's one dropout probability acts where GPT-2's resid_pdrop and
  // embd_pdrop do (the residual branches and the embedding); absent fields
  // take Hugging Face's defaults (0.1), as transformers would train.
  double resid, embd;
  TRIAD_ASSIGN(resid, f.probability("resid_pdrop", 0.1));
  TRIAD_ASSIGN(embd, f.probability("embd_pdrop", 0.1));
  if (resid != embd)
    return f.unsupported(
        "embd_pdrop", llvm::formatv("{0} differs from resid_pdrop {1}; "
                                    "Triad applies one dropout "
                                    "probability to both",
                                    Fields::gText(embd), Fields::gText(resid)));
  c.dropout = resid;
  TRIAD_CHECK(
      f.unmodelledDropout("attn_pdrop", 0.1, "on attention probabilities"));
  return c;
}

Expected<ModelConfig> fromGptNeox(const json::Object &object, Fields &f,
                                  ModelConfig c) {
  TRIAD_ASSIGN(c.layers, f.integer("num_hidden_layers"));
  TRIAD_ASSIGN(c.hidden, f.integer("hidden_size"));
  TRIAD_ASSIGN(c.heads, f.integer("num_attention_heads"));
  c.kvHeads = c.heads;
  TRIAD_ASSIGN(c.ffn, f.integer("intermediate_size"));
  TRIAD_ASSIGN(c.vocab, f.integer("vocab_size"));
  TRIAD_ASSIGN(c.seq, f.integer("max_position_embeddings"));
  c.positions = Positions::Rope;
  TRIAD_ASSIGN(c.rotaryFraction, f.number("rotary_pct", 0.25));
  TRIAD_ASSIGN(c.ropeBase, f.number("rotary_emb_base", 10000.0));
  TRIAD_ASSIGN(c.parallelResidual, f.boolean("use_parallel_residual", true));
  std::string act;
  TRIAD_ASSIGN(act, f.string("hidden_act", "gelu"));
  TRIAD_ASSIGN(c.activation, mapActivation(f, "hidden_act", act));
  TRIAD_ASSIGN(c.normEpsilon, f.number("layer_norm_eps", 1e-5));
  TRIAD_ASSIGN(c.tieEmbeddings, f.boolean("tie_word_embeddings", false));
  // GPT-NeoX's MLP and layer norms always have biases; only attention can
  // drop them, which Triad does not model separately.
  TRIAD_CHECK(requireBoolean(f, "attention_bias", true, true,
                             "attention without biases next to an MLP with "
                             "biases is not supported"));
  TRIAD_ASSIGN(c.initStd, f.number("initializer_range", 0.02));
  if (f.has("rope_scaling"))
    return f.unsupported("rope_scaling", "scaled RoPE is not supported");
  TRIAD_CHECK(readRopeParameters(object, f, c));
  // Dropout on the residual branches (hidden_dropout); none on attention
  // probabilities in Triad.
  TRIAD_ASSIGN(c.dropout, f.probability("hidden_dropout", 0.0));
  TRIAD_CHECK(f.unmodelledDropout("attention_dropout", 0.0,
                                  "on attention probabilities"));
  return c;
}

Expected<ModelConfig> fromOpt(Fields &f, ModelConfig c) {
  TRIAD_ASSIGN(c.layers, f.integer("num_hidden_layers"));
  TRIAD_ASSIGN(c.hidden, f.integer("hidden_size"));
  TRIAD_ASSIGN(c.heads, f.integer("num_attention_heads"));
  c.kvHeads = c.heads;
  TRIAD_ASSIGN(c.ffn, f.integer("ffn_dim"));
  TRIAD_ASSIGN(c.vocab, f.integer("vocab_size"));
  TRIAD_ASSIGN(c.maxPositions, f.integer("max_position_embeddings"));
  c.seq = c.maxPositions;
  c.positionOffset = 2;
  int64_t projDim;
  TRIAD_ASSIGN(projDim, f.integer("word_embed_proj_dim", c.hidden));
  if (projDim != c.hidden)
    return f.unsupported("word_embed_proj_dim",
                         llvm::formatv("projected embeddings ({0} != "
                                       "hidden_size {1}) are not supported",
                                       projDim, c.hidden));
  bool preNorm;
  TRIAD_ASSIGN(preNorm, f.boolean("do_layer_norm_before", true));
  c.placement = preNorm ? NormPlacement::Pre : NormPlacement::Post;
  c.finalNorm = preNorm;
  std::string act;
  TRIAD_ASSIGN(act, f.string("activation_function", "relu"));
  TRIAD_ASSIGN(c.activation, mapActivation(f, "activation_function", act));
  TRIAD_ASSIGN(c.bias, f.boolean("enable_bias", true));
  TRIAD_CHECK(requireBoolean(f, "layer_norm_elementwise_affine", true, true,
                             "layer norms without weights are not supported"));
  TRIAD_ASSIGN(c.tieEmbeddings, f.boolean("tie_word_embeddings", true));
  TRIAD_ASSIGN(c.initStd, f.number("init_std", 0.02));
  // OPT's dropout acts on the embedding and the residual branches, as
  // Triad's does; its attention and activation dropouts Triad lacks.
  TRIAD_ASSIGN(c.dropout, f.probability("dropout", 0.1));
  TRIAD_CHECK(f.unmodelledDropout("attention_dropout", 0.0,
                                  "on attention probabilities"));
  TRIAD_CHECK(f.unmodelledDropout("activation_dropout", 0.0, "inside the MLP"));
  return c;
}

Expected<ModelConfig> fromBloom(Fields &f, ModelConfig c) {
  TRIAD_ASSIGN(c.layers, f.integer("n_layer"));
  if (f.has("n_embed"))
    TRIAD_ASSIGN(c.hidden, f.integer("n_embed"));
  else
    TRIAD_ASSIGN(c.hidden, f.integer("hidden_size"));
  if (f.has("num_attention_heads"))
    TRIAD_ASSIGN(c.heads, f.integer("num_attention_heads"));
  else
    TRIAD_ASSIGN(c.heads, f.integer("n_head"));
  c.kvHeads = c.heads;
  c.ffn = 4 * c.hidden;
  TRIAD_ASSIGN(c.vocab, f.integer("vocab_size"));
  TRIAD_ASSIGN(c.seq, f.integer("seq_length", 2048));
  c.positions = Positions::Alibi;
  c.embeddingNorm = true;
  c.activation = Activation::GeluTanh;
  bool postResidual;
  TRIAD_ASSIGN(postResidual,
               f.boolean("apply_residual_connection_post_layernorm", false));
  if (postResidual)
    return f.unsupported("apply_residual_connection_post_layernorm",
                         "residuals taken after the layer norm are not "
                         "supported");
  TRIAD_ASSIGN(c.normEpsilon, f.number("layer_norm_epsilon", 1e-5));
  TRIAD_ASSIGN(c.tieEmbeddings, f.boolean("tie_word_embeddings", true));
  TRIAD_ASSIGN(c.initStd, f.number("initializer_range", 0.02));
  TRIAD_ASSIGN(c.dropout, f.probability("hidden_dropout", 0.0));
  TRIAD_CHECK(f.unmodelledDropout("attention_dropout", 0.0,
                                  "on attention probabilities"));
  return c;
}

Expected<ModelConfig> fromLlama(const json::Object &object, Fields &f,
                                ModelConfig c) {
  TRIAD_ASSIGN(c.layers, f.integer("num_hidden_layers"));
  TRIAD_ASSIGN(c.hidden, f.integer("hidden_size"));
  TRIAD_ASSIGN(c.heads, f.integer("num_attention_heads"));
  TRIAD_ASSIGN(c.kvHeads, f.integer("num_key_value_heads", c.heads));
  TRIAD_ASSIGN(c.ffn, f.integer("intermediate_size"));
  TRIAD_ASSIGN(c.vocab, f.integer("vocab_size"));
  TRIAD_ASSIGN(c.seq, f.integer("max_position_embeddings"));
  c.norm = NormKind::RmsNorm;
  c.positions = Positions::Rope;
  TRIAD_ASSIGN(c.ropeBase, f.number("rope_theta", 10000.0));
  if (f.has("rope_scaling"))
    return f.unsupported("rope_scaling", "scaled RoPE is not supported");
  TRIAD_CHECK(readRopeParameters(object, f, c));
  if (f.has("head_dim")) {
    int64_t headDim;
    TRIAD_ASSIGN(headDim, f.integer("head_dim"));
    if (c.heads <= 0 || headDim * c.heads != c.hidden)
      return f.unsupported("head_dim",
                           llvm::formatv("a head size of {0} other than "
                                         "hidden_size / num_attention_heads "
                                         "is not supported",
                                         headDim));
  }
  std::string act;
  TRIAD_ASSIGN(act, f.string("hidden_act", "silu"));
  if (act != "silu")
    return f.unsupported("hidden_act", "unsupported activation '" + act +
                                           "' (LLaMA's MLP is SwiGLU: silu)");
  c.activation = Activation::Swiglu;
  TRIAD_ASSIGN(c.normEpsilon, f.number("rms_norm_eps", 1e-6));
  TRIAD_ASSIGN(c.tieEmbeddings, f.boolean("tie_word_embeddings", false));
  bool attentionBias, mlpBias;
  TRIAD_ASSIGN(attentionBias, f.boolean("attention_bias", false));
  TRIAD_ASSIGN(mlpBias, f.boolean("mlp_bias", false));
  if (attentionBias != mlpBias)
    return f.unsupported("mlp_bias", "biases on attention but not the MLP (or "
                                     "the reverse) are not supported");
  c.bias = attentionBias;
  TRIAD_ASSIGN(c.initStd, f.number("initializer_range", 0.02));
  TRIAD_CHECK(f.unmodelledDropout("attention_dropout", 0.0,
                                  "on attention probabilities"));
  return c;
}

#undef TRIAD_ASSIGN
#undef TRIAD_CHECK

} // namespace

Expected<ModelConfig> triad::parseHFConfig(StringRef text,
                                           std::vector<std::string> *warnings) {
  // The parser recurses per level: deep input is an error, not a crash.
  if (size_t depth = jsonDepth(std::string_view(text.data(), text.size()));
      depth > kMaxJsonDepth)
    return hfError("the JSON nests " + std::to_string(depth) +
                   " levels deep, more than the " +
                   std::to_string(kMaxJsonDepth) + " a config may");
  Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return hfError("invalid JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *object = parsed->getAsObject();
  if (!object)
    return hfError("expected a JSON object at the top level");
  const json::Value *typeValue = object->get("model_type");
  if (!typeValue)
    return hfError("no 'model_type' field");
  std::optional<StringRef> modelType = typeValue->getAsString();
  if (!modelType)
    return hfError("'model_type' must be a string");

  ModelConfig config;
  config.name = ("hf-" + *modelType).str();
  config.maxPositions = 0;
  Fields fields(*object, *modelType);
  Expected<ModelConfig> result = [&]() -> Expected<ModelConfig> {
    if (*modelType == "gpt2")
      return fromGpt2(fields, config);
    if (*modelType == "gpt_neox")
      return fromGptNeox(*object, fields, config);
    if (*modelType == "opt")
      return fromOpt(fields, config);
    if (*modelType == "bloom")
      return fromBloom(fields, config);
    if (*modelType == "llama")
      return fromLlama(*object, fields, config);
    return hfError(llvm::formatv("unsupported model_type '{0}' (supported: "
                                 "gpt2, gpt_neox, opt, bloom, llama)",
                                 *modelType));
  }();
  if (!result)
    return result.takeError();
  if (warnings)
    llvm::append_range(*warnings, fields.warnings);
  // The weights' type ("torch_dtype", "dtype" in newer configs): the
  // model's parameters and activations (16-bit ones train through f32
  // master weights); --dtype overrides it.
  for (StringRef key : {"torch_dtype", "dtype"}) {
    const json::Value *value = object->get(key);
    if (!value || value->kind() == json::Value::Null)
      continue;
    std::optional<StringRef> name = value->getAsString();
    if (name && (*name == "float32" || *name == "float"))
      result->dtype = DType::F32;
    else if (name && *name == "bfloat16")
      result->dtype = DType::BF16;
    else if (name && (*name == "float16" || *name == "half"))
      result->dtype = DType::F16;
    else
      return hfError(llvm::formatv(
          "'{0}' must be float32, bfloat16 or float16 (the weights' type), "
          "not {1}",
          key, name ? ("'" + *name + "'").str() : std::string("a non-string")));
    break;
  }
  if (const json::Value *name = object->get("_name_or_path"))
    if (std::optional<StringRef> text = name->getAsString())
      if (!text->empty())
        result->name = text->str();
  return result;
}
