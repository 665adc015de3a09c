//===- HFConfigTest.cpp - Hugging Face config.json import -----------------===//

#include "triad/Models/ModelConfig.h"

#include <gtest/gtest.h>

using namespace triad;

namespace {

ModelConfig parse(llvm::StringRef json) {
  llvm::Expected<ModelConfig> config = parseHFConfig(json);
  if (!config) {
    ADD_FAILURE() << llvm::toString(config.takeError());
    return ModelConfig();
  }
  return *config;
}

std::string parseError(llvm::StringRef json) {
  llvm::Expected<ModelConfig> config = parseHFConfig(json);
  if (config)
    return "";
  return llvm::toString(config.takeError());
}

TEST(HFConfig, Gpt2) {
  ModelConfig c = parse(R"({
    "model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
    "n_inner": null, "vocab_size": 50257, "n_positions": 1024,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
    "initializer_range": 0.02})");
  EXPECT_EQ(c.layers, 12);
  EXPECT_EQ(c.hidden, 768);
  EXPECT_EQ(c.ffn, 3072);
  EXPECT_EQ(c.seq, 1024);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_EQ(c.positions, Positions::Learned);
  EXPECT_TRUE(c.tieEmbeddings);
  EXPECT_FALSE(c.validate());
  EXPECT_EQ(countParameters(c).total(), 124439808);
}

TEST(HFConfig, GptNeox) {
  ModelConfig c = parse(R"({
    "model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144,
    "num_attention_heads": 64, "intermediate_size": 24576,
    "vocab_size": 50432, "max_position_embeddings": 2048,
    "rotary_pct": 0.25, "rotary_emb_base": 10000,
    "use_parallel_residual": true, "hidden_act": "gelu",
    "layer_norm_eps": 1e-05, "tie_word_embeddings": false})");
  EXPECT_EQ(c.positions, Positions::Rope);
  EXPECT_EQ(c.rotaryDim(), 24);
  EXPECT_TRUE(c.parallelResidual);
  EXPECT_FALSE(c.tieEmbeddings);
  EXPECT_EQ(c.activation, Activation::Gelu);
  EXPECT_FALSE(c.validate());
  EXPECT_EQ(countParameters(c).total(), 20554567680);
}

TEST(HFConfig, Opt) {
  ModelConfig c = parse(R"({
    "model_type": "opt", "_name_or_path": "facebook/opt-125m",
    "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
    "ffn_dim": 3072, "vocab_size": 50272, "max_position_embeddings": 2048,
    "activation_function": "relu", "do_layer_norm_before": true,
    "word_embed_proj_dim": 768, "enable_bias": true})");
  EXPECT_EQ(c.name, "facebook/opt-125m");
  EXPECT_EQ(c.positionOffset, 2);
  EXPECT_EQ(c.positionRows(), 2050);
  EXPECT_EQ(c.activation, Activation::Relu);
  EXPECT_EQ(c.placement, NormPlacement::Pre);
  EXPECT_FALSE(c.validate());
  // OPT-125m as Hugging Face counts it.
  EXPECT_EQ(countParameters(c).total(), 125239296);
}

TEST(HFConfig, OptPostNorm) {
  ModelConfig c = parse(R"({
    "model_type": "opt", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "ffn_dim": 256, "vocab_size": 256,
    "max_position_embeddings": 64, "do_layer_norm_before": false})");
  EXPECT_EQ(c.placement, NormPlacement::Post);
  EXPECT_FALSE(c.finalNorm);
}

TEST(HFConfig, Bloom) {
  ModelConfig c = parse(R"({
    "model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112,
    "vocab_size": 250880, "layer_norm_epsilon": 1e-05,
    "apply_residual_connection_post_layernorm": false})");
  EXPECT_EQ(c.positions, Positions::Alibi);
  EXPECT_TRUE(c.embeddingNorm);
  EXPECT_EQ(c.ffn, 4 * 14336);
  EXPECT_EQ(c.seq, 2048);
  EXPECT_FALSE(c.validate());
  EXPECT_EQ(countParameters(c).total(), 176247271424);
}

TEST(HFConfig, Llama) {
  ModelConfig c = parse(R"({
    "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 32,
    "intermediate_size": 11008, "vocab_size": 32000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "hidden_act": "silu", "rope_theta": 10000.0, "rope_scaling": null,
    "tie_word_embeddings": false})");
  EXPECT_EQ(c.norm, NormKind::RmsNorm);
  EXPECT_EQ(c.activation, Activation::Swiglu);
  EXPECT_FALSE(c.bias);
  EXPECT_FALSE(c.validate());
  EXPECT_EQ(countParameters(c).total(), 6738415616);
}

TEST(HFConfig, LlamaGroupedQuery) {
  ModelConfig c = parse(R"({
    "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 8, "num_key_value_heads": 2,
    "intermediate_size": 172, "vocab_size": 256,
    "max_position_embeddings": 64})");
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kvHeads, 2);
  EXPECT_FALSE(c.validate());
}

TEST(HFConfig, TransformersV5RopeParameters) {
  ModelConfig c = parse(R"({
    "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 172, "vocab_size": 256,
    "max_position_embeddings": 64, "head_dim": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})");
  EXPECT_EQ(c.ropeBase, 500000.0);
  ModelConfig neox = parse(R"({
    "model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 256,
    "max_position_embeddings": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0,
                        "partial_rotary_factor": 0.5}})");
  EXPECT_EQ(neox.ropeBase, 1000.0);
  EXPECT_EQ(neox.rotaryDim(), 8);
}

TEST(HFConfig, RotaryDimsTruncateLikeTransformers) {
  // int(16 * 0.3) = 4 in Hugging Face; rounding would give 5 and fail.
  ModelConfig c = parse(R"({
    "model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 256,
    "max_position_embeddings": 64, "rotary_pct": 0.3})");
  EXPECT_EQ(c.rotaryDim(), 4);
  EXPECT_FALSE(c.validate());
}

TEST(HFConfig, ErrorsNameTheProblem) {
  struct Case {
    const char *json;
    const char *expected;
  };
  const Case cases[] = {
      {"{\"model_type\": \"gpt2\", \"n_layer\": 12", "invalid JSON"},
      {"", "invalid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"n_layer\": 2}", "no 'model_type' field"},
      {"{\"model_type\": 7}", "'model_type' must be a string"},
      {"{\"model_type\": \"t5\"}",
       "unsupported model_type 't5' (supported: gpt2, gpt_neox, opt, bloom, "
       "llama)"},
      {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 4, "
       "\"vocab_size\": 256, \"n_positions\": 64}",
       "model_type 'gpt2' needs field 'n_embd'"},
      {"{\"model_type\": \"gpt2\", \"n_layer\": \"two\"}",
       "field 'n_layer' must be an integer"},
      {"{\"model_type\": \"gpt2\", \"n_layer\": 2.5}",
       "field 'n_layer' must be an integer"},
      {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, "
       "\"n_head\": 4, \"vocab_size\": 256, \"n_positions\": 64, "
       "\"activation_function\": \"mish\"}",
       "unsupported activation 'mish'"},
      {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, "
       "\"intermediate_size\": 172, \"vocab_size\": 256, "
       "\"max_position_embeddings\": 64, \"rope_scaling\": {\"type\": "
       "\"linear\", \"factor\": 2.0}}",
       "scaled RoPE is not supported"},
      {"{\"model_type\": \"opt\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, \"ffn_dim\": 256, "
       "\"vocab_size\": 256, \"max_position_embeddings\": 64, "
       "\"word_embed_proj_dim\": 32}",
       "projected embeddings (32 != hidden_size 64) are not supported"},
      {"{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, "
       "\"intermediate_size\": 256, \"vocab_size\": 256, "
       "\"max_position_embeddings\": 64, \"use_parallel_residual\": \"yes\"}",
       "field 'use_parallel_residual' must be a boolean"},
      {"{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, "
       "\"intermediate_size\": 256, \"vocab_size\": 256, "
       "\"max_position_embeddings\": 64, \"attention_bias\": false}",
       "field 'attention_bias': attention without biases next to an MLP with "
       "biases is not supported"},
      {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, \"head_dim\": 32, "
       "\"intermediate_size\": 172, \"vocab_size\": 256, "
       "\"max_position_embeddings\": 64}",
       "field 'head_dim': a head size of 32 other than hidden_size / "
       "num_attention_heads is not supported"},
      {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, "
       "\"intermediate_size\": 172, \"vocab_size\": 256, "
       "\"max_position_embeddings\": 64, \"rope_parameters\": "
       "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0}}",
       "field 'rope_parameters': scaled RoPE is not supported"},
      {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, "
       "\"n_head\": 4, \"vocab_size\": 256, \"n_positions\": 64, "
       "\"scale_attn_by_inverse_layer_idx\": true}",
       "field 'scale_attn_by_inverse_layer_idx': per-layer attention scaling "
       "is not supported"},
      {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, "
       "\"n_head\": 4, \"vocab_size\": 256, \"n_positions\": 64, "
       "\"scale_attn_weights\": false}",
       "field 'scale_attn_weights': unscaled attention scores are not "
       "supported"},
      {"{\"model_type\": \"opt\", \"num_hidden_layers\": 2, "
       "\"hidden_size\": 64, \"num_attention_heads\": 4, \"ffn_dim\": 256, "
       "\"vocab_size\": 256, \"max_position_embeddings\": 64, "
       "\"layer_norm_elementwise_affine\": false}",
       "field 'layer_norm_elementwise_affine': layer norms without weights "
       "are not supported"},
  };
  for (const Case &test : cases) {
    std::string message = parseError(test.json);
    EXPECT_NE(message.find(test.expected), std::string::npos)
        << test.json << "\n  gave: '" << message << "'";
  }
}

} // namespace
