//===- triad-gen.cpp - builds model IR from presets and HF configs --------===//
//
// triad-gen --preset NAME | --hf-config FILE [overrides] [-o FILE]
//           [--print-params] [--list-presets]
//
// Prints the forward model IR of the `triad` dialect. Every bad input ends in
// one line on stderr ("triad-gen: error: ...") and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "triad/Models/ModelBuilder.h"
#include "triad/Models/ModelConfig.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace triad;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory genCategory("triad-gen options");
cl::OptionCategory overrideCategory(
    "Architecture overrides (applied on top of the preset or config file)");

cl::opt<std::string> presetName("preset", cl::desc("Start from a preset"),
                                cl::value_desc("name"), cl::cat(genCategory));
cl::opt<std::string> hfConfigPath(
    "hf-config",
    cl::desc("Start from a Hugging Face config.json (gpt2, gpt_neox, opt, "
             "bloom, llama)"),
    cl::value_desc("file"), cl::cat(genCategory));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(genCategory));
cl::opt<bool> printParams(
    "print-params",
    cl::desc("Print the parameter count by part instead of the IR (the IR is "
             "still written when -o is given)"),
    cl::cat(genCategory));
cl::opt<bool> listPresets("list-presets", cl::desc("List the presets and exit"),
                          cl::cat(genCategory));

#define TRIAD_INT_OVERRIDE(var, flag, help)                                    \
  cl::opt<int64_t> var(flag, cl::desc(help), cl::cat(overrideCategory))
TRIAD_INT_OVERRIDE(layersOpt, "layers", "Number of transformer layers");
TRIAD_INT_OVERRIDE(hiddenOpt, "hidden", "Hidden size");
TRIAD_INT_OVERRIDE(headsOpt, "heads", "Attention heads");
TRIAD_INT_OVERRIDE(kvHeadsOpt, "kv-heads",
                   "Key/value heads (grouped-query attention; default: heads)");
TRIAD_INT_OVERRIDE(ffnOpt, "ffn", "MLP inner size (per branch when gated)");
TRIAD_INT_OVERRIDE(vocabOpt, "vocab", "Vocabulary size");
TRIAD_INT_OVERRIDE(seqOpt, "seq", "Sequence length");
TRIAD_INT_OVERRIDE(batchOpt, "batch",
                   "Global batch of one optimizer step, in sequences");
TRIAD_INT_OVERRIDE(maxPositionsOpt, "max-positions",
                   "Rows of the learned position table (default: seq)");
#undef TRIAD_INT_OVERRIDE

cl::opt<std::string> normOpt("norm", cl::desc("layernorm | rmsnorm"),
                             cl::cat(overrideCategory));
cl::opt<std::string> placementOpt("norm-placement",
                                  cl::desc("pre | post | deepnorm"),
                                  cl::cat(overrideCategory));
cl::opt<double>
    deepnormAlphaOpt("deepnorm-alpha",
                     cl::desc("DeepNorm residual scale (default sqrt(2N))"),
                     cl::cat(overrideCategory));
cl::opt<double>
    deepnormBetaOpt("deepnorm-beta",
                    cl::desc("DeepNorm init gain (default 1/sqrt(2N))"),
                    cl::cat(overrideCategory));
cl::opt<std::string> activationOpt(
    "activation",
    cl::desc("gelu | gelu_tanh | fast_gelu | relu | swiglu | geglu"),
    cl::cat(overrideCategory));
cl::opt<std::string> positionsOpt("positions",
                                  cl::desc("learned | rope | alibi | none"),
                                  cl::cat(overrideCategory));
cl::opt<double>
    rotaryFractionOpt("rotary-fraction",
                      cl::desc("Fraction of each head RoPE rotates"),
                      cl::cat(overrideCategory));
cl::opt<double> ropeBaseOpt("rope-base", cl::desc("RoPE frequency base"),
                            cl::cat(overrideCategory));
cl::opt<bool>
    parallelResidualOpt("parallel-residual",
                        cl::desc("GPT-NeoX parallel attention and MLP"),
                        cl::cat(overrideCategory));
cl::opt<bool>
    tieEmbeddingsOpt("tie-embeddings",
                     cl::desc("Output projection reuses the token embedding"),
                     cl::cat(overrideCategory));
cl::opt<bool>
    embeddingNormOpt("embedding-norm",
                     cl::desc("Layer norm after the embedding (BLOOM)"),
                     cl::cat(overrideCategory));
cl::opt<bool> biasOpt("bias", cl::desc("Biases on linear layers and norms"),
                      cl::cat(overrideCategory));
cl::opt<bool> topQueryLayerOpt(
    "top-query-layer",
    cl::desc("A last layer with per-position learned queries (CodeGeeX)"),
    cl::cat(overrideCategory));
cl::opt<int64_t> positionOffsetOpt(
    "position-offset",
    cl::desc("Leading rows of the learned position table skipped (OPT: 2)"),
    cl::cat(overrideCategory));
cl::opt<bool> finalNormOpt("final-norm", cl::desc("Norm after the last layer"),
                           cl::cat(overrideCategory));
cl::opt<std::string> maskOpt("mask", cl::desc("causal | prefix"),
                             cl::cat(overrideCategory));
cl::opt<std::string> dtypeOpt("dtype", cl::desc("f32 | bf16 | f16"),
                              cl::cat(overrideCategory));
cl::opt<double> normEpsilonOpt("norm-epsilon", cl::desc("Norm epsilon"),
                               cl::cat(overrideCategory));
cl::opt<double> initStdOpt("init-std",
                           cl::desc("Std of the normal initialization"),
                           cl::cat(overrideCategory));
cl::opt<double> dropoutOpt("dropout", cl::desc("Dropout probability"),
                           cl::cat(overrideCategory));

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::errs() << "triad-gen: error: " << message << "\n";
  std::exit(1);
}

template <typename T> void overrideValue(cl::opt<T> &option, T &field) {
  if (option.getNumOccurrences())
    field = option;
}

template <typename Enum>
void overrideEnum(cl::opt<std::string> &option, Enum &field,
                  std::optional<Enum> (*parse)(llvm::StringRef),
                  llvm::StringRef expected) {
  if (!option.getNumOccurrences())
    return;
  std::optional<Enum> value = parse(option);
  if (!value)
    fail(llvm::formatv("unknown --{0} '{1}' (expected {2})", option.ArgStr,
                       option.getValue(), expected));
  field = *value;
}

ModelConfig baseConfig() {
  if (presetName.getNumOccurrences() && hfConfigPath.getNumOccurrences())
    fail("give either --preset or --hf-config, not both");
  if (hfConfigPath.getNumOccurrences()) {
    auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(hfConfigPath);
    if (!buffer)
      fail(llvm::formatv("cannot read '{0}': {1}", hfConfigPath.getValue(),
                         buffer.getError().message()));
    std::vector<std::string> warnings;
    llvm::Expected<ModelConfig> config =
        parseHFConfig((*buffer)->getBuffer(), &warnings);
    if (!config)
      fail(hfConfigPath + ": " + llvm::toString(config.takeError()));
    for (const std::string &warning : warnings)
      llvm::errs() << "triad-gen: warning: " << hfConfigPath << ": " << warning
                   << "\n";
    return *config;
  }
  if (!presetName.getNumOccurrences())
    fail("give --preset NAME or --hf-config FILE (presets: " +
         llvm::join(presetNames(), ", ") + ")");
  llvm::Expected<ModelConfig> config = getPreset(presetName);
  if (!config)
    fail(llvm::toString(config.takeError()));
  return *config;
}

void applyOverrides(ModelConfig &config) {
  overrideValue(layersOpt, config.layers);
  overrideValue(hiddenOpt, config.hidden);
  // kv_heads follows a new head count when the base uses multi-head
  // attention; a grouped-query base keeps its kv_heads unless given.
  bool multiHead = config.kvHeads == config.heads;
  overrideValue(headsOpt, config.heads);
  if (multiHead)
    config.kvHeads = config.heads;
  overrideValue(kvHeadsOpt, config.kvHeads);
  overrideValue(ffnOpt, config.ffn);
  overrideValue(vocabOpt, config.vocab);
  overrideValue(seqOpt, config.seq);
  overrideValue(batchOpt, config.batch);
  overrideValue(maxPositionsOpt, config.maxPositions);
  // A shorter or longer sequence than the preset's keeps the preset's
  // position table unless --max-positions says otherwise; a table shorter
  // than the new sequence grows to it.
  if (seqOpt.getNumOccurrences() && !maxPositionsOpt.getNumOccurrences() &&
      config.maxPositions && config.maxPositions < config.seq)
    config.maxPositions = config.seq;
  overrideEnum(normOpt, config.norm, parseNormKind, "layernorm or rmsnorm");
  overrideEnum(placementOpt, config.placement, parseNormPlacement,
               "pre, post or deepnorm");
  overrideValue(deepnormAlphaOpt, config.deepnormAlpha);
  overrideValue(deepnormBetaOpt, config.deepnormBeta);
  overrideEnum(activationOpt, config.activation, parseActivation,
               "gelu, gelu_tanh, fast_gelu, relu, swiglu or geglu");
  overrideEnum(positionsOpt, config.positions, parsePositions,
               "learned, rope, alibi or none");
  overrideValue(rotaryFractionOpt, config.rotaryFraction);
  overrideValue(ropeBaseOpt, config.ropeBase);
  overrideValue(parallelResidualOpt, config.parallelResidual);
  overrideValue(tieEmbeddingsOpt, config.tieEmbeddings);
  overrideValue(embeddingNormOpt, config.embeddingNorm);
  overrideValue(biasOpt, config.bias);
  overrideValue(finalNormOpt, config.finalNorm);
  overrideValue(topQueryLayerOpt, config.topQueryLayer);
  overrideValue(positionOffsetOpt, config.positionOffset);
  overrideEnum(maskOpt, config.mask, parseAttentionMask, "causal or prefix");
  overrideEnum(dtypeOpt, config.dtype, parseDType, "f32, bf16 or f16");
  overrideValue(normEpsilonOpt, config.normEpsilon);
  overrideValue(initStdOpt, config.initStd);
  overrideValue(dropoutOpt, config.dropout);
}

std::string humanCount(int64_t count) {
  double value = static_cast<double>(count);
  if (value >= 1e9)
    return llvm::formatv("{0:f2}B", value / 1e9);
  if (value >= 1e6)
    return llvm::formatv("{0:f2}M", value / 1e6);
  if (value >= 1e3)
    return llvm::formatv("{0:f2}K", value / 1e3);
  return std::to_string(count);
}

void printParameterReport(const ModelConfig &config, llvm::raw_ostream &os) {
  ParamBreakdown count = countParameters(config);
  os << "model: " << config.name << "\n";
  os << "parameters: " << count.total() << " (" << humanCount(count.total())
     << ")\n";
  os << llvm::formatv("  {0,-10} {1,16}\n", "embedding", count.embedding);
  os << llvm::formatv("  {0,-10} {1,16}  ({2} x {3})\n", "layers", count.layers,
                      config.layers, count.perLayer);
  if (config.topQueryLayer)
    os << llvm::formatv("  {0,-10} {1,16}\n", "top-query", count.topQuery);
  os << llvm::formatv("  {0,-10} {1,16}\n", "head", count.head);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&genCategory, &overrideCategory});
  cl::ParseCommandLineOptions(
      argc, argv,
      "triad-gen: builds the forward model IR of a GPT-family transformer\n\n"
      "  triad-gen --preset tiny -o tiny.mlir\n"
      "  triad-gen --hf-config config.json --layers 4 --seq 256\n"
      "  triad-gen --preset gpt-neox-20b --print-params\n");

  if (listPresets) {
    for (llvm::StringRef name : presetNames())
      llvm::outs() << name << "\n";
    return 0;
  }

  ModelConfig config = baseConfig();
  applyOverrides(config);
  if (llvm::Error error = config.validate())
    fail("invalid model configuration" +
         (hfConfigPath.getNumOccurrences() ? " from " + hfConfigPath + ": "
                                           : std::string(": ")) +
         llvm::toString(std::move(error)));

  if (printParams) {
    printParameterReport(config, llvm::outs());
    if (!outputPath.getNumOccurrences())
      return 0;
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModel(context, config);
  if (!module || mlir::failed(mlir::verify(*module)))
    fail("internal error: the generated model does not verify");

  std::string errorMessage;
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputPath, &errorMessage);
  if (!output)
    fail(errorMessage);
  module->print(output->os());
  output->os() << "\n";
  output->os().flush();
  if (std::error_code error = output->os().error()) {
    output->os().clear_error();
    fail(llvm::formatv("cannot write '{0}': {1}", outputPath.getValue(),
                       error.message()));
  }
  output->keep();
  return 0;
}
