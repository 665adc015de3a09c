//===- triad-sample.cpp - generates text from a trained checkpoint --------===//
//
// triad-sample PLAN --checkpoint DIR --prompt TEXT [--tokens N]
//              [--temperature T] [--top-k K] [--seed S]
//              [--sentencepiece MODEL | --tokenizer TOKENIZER_JSON]
//
// Loads the weights of checkpoint DIR (saved on any mesh) into a one-rank
// plan, encodes the prompt (byte-level, or with the tokenizer the corpus
// was encoded with: triad-data's), and appends tokens one at a time:
// each from the plan's logits_step (the forward pass to the next-token
// logits, the whole prefix recomputed each time, the last seq tokens of it
// seen), divided by the temperature, cut to the top k and drawn with the
// seed (temperature 0: the most likely). Prints the prompt and what follows.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "runtime/support/CommandLine.h"
#include "runtime/train/Trainer.h"
#include "tools/triad-data/Tokenizer.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

ABSL_FLAG(std::string, checkpoint, "",
          "Checkpoint folder whose latest step's weights to sample with (saved "
          "on any mesh) (required)");
ABSL_FLAG(std::string, prompt, "", "Text to continue (required)");
ABSL_FLAG(int64_t, tokens, 64, "Tokens to generate");
ABSL_FLAG(double, temperature, 1.0,
          "Divides the logits before drawing: below 1 sharper, above 1 "
          "flatter; 0 takes the most likely token");
ABSL_FLAG(int64_t, top_k, 0,
          "Draw among the K most likely tokens only (0: among all)");
ABSL_FLAG(uint64_t, seed, 1234, "Seed of the draws");
ABSL_FLAG(std::string, sentencepiece, "",
          "Encode the prompt and decode the text with this SentencePiece "
          "model (the one triad-data --sentencepiece encoded the corpus "
          "with)");
ABSL_FLAG(std::string, tokenizer, "",
          "Encode and decode with this Hugging Face tokenizer.json (through "
          "Hugging Face's tokenizers in the project's Python environment, "
          "as triad-data --tokenizer does)");

namespace {

using namespace triad::rt;

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "triad-sample: error: %s\n", message.c_str());
  std::exit(1);
}

void failIf(const absl::Status &status, const std::string &prefix = "") {
  if (!status.ok())
    fail(absl::StrCat(prefix, status.message()));
}

/// A uniform double in [0, 1) from the generator's top 53 bits (the same
/// on every platform, unlike std::uniform_real_distribution).
double uniform(std::mt19937_64 &generator) {
  return static_cast<double>(generator() >> 11) * 0x1.0p-53;
}

/// The token after `logits`: the most likely at temperature 0, else drawn
/// from the softmax of logits / temperature over the `topK` most likely
/// (ties broken toward the lower id).
int32_t choose(const std::vector<float> &logits, double temperature,
               int64_t topK, std::mt19937_64 &generator) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (temperature == 0.0)
    return order.front();
  if (topK > 0 && static_cast<size_t>(topK) < order.size())
    order.resize(topK);
  double top = logits[order.front()];
  std::vector<double> weights;
  double total = 0;
  for (int32_t id : order) {
    weights.push_back(std::exp((logits[id] - top) / temperature));
    total += weights.back();
  }
  double target = uniform(generator) * total;
  for (size_t i = 0; i < order.size(); ++i) {
    target -= weights[i];
    if (target < 0)
      return order[i];
  }
  return order.back();
}

/// Text to ids and back: byte-level, a SentencePiece model or a Hugging
/// Face tokenizer.json.
struct Codec {
  std::unique_ptr<triad::data::Tokenizer> local;
  std::string huggingFace;
  int64_t vocabulary = 256;

  std::vector<int32_t> encode(const std::string &text) const {
    std::vector<uint32_t> ids;
    if (local) {
      local->encode(text, ids);
    } else {
      std::string error;
      triad::data::Encoded info;
      if (!triad::data::encodeTextWithHuggingFace(huggingFace, text, ids, info,
                                                  error))
        fail(absl::StrCat("--tokenizer '", huggingFace, "': ", error));
    }
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string decode(const std::vector<int32_t> &ids) const {
    std::vector<uint32_t> unsignedIds(ids.begin(), ids.end());
    if (local)
      return local->decode(unsignedIds);
    std::string text, error;
    if (!triad::data::decodeWithHuggingFace(huggingFace, unsignedIds, text,
                                            error))
      fail(absl::StrCat("--tokenizer '", huggingFace, "': ", error));
    return text;
  }
  /// Whether the text of a sample can be printed as it grows (decoding is
  /// local and cheap).
  bool streams() const { return local != nullptr; }
};

Codec makeCodec(const std::string &sentencePiece,
                const std::string &huggingFace) {
  Codec codec;
  std::string error;
  if (!sentencePiece.empty() && !huggingFace.empty())
    fail("give --sentencepiece or --tokenizer, not both");
  if (!sentencePiece.empty()) {
    codec.local = triad::data::sentencePieceTokenizer(sentencePiece, error);
    if (!codec.local)
      fail(absl::StrCat("--sentencepiece '", sentencePiece, "': ", error));
    codec.vocabulary = codec.local->vocabulary();
  } else if (!huggingFace.empty()) {
    codec.huggingFace = huggingFace;
    triad::data::Encoded info;
    std::vector<uint32_t> ids;
    if (!triad::data::encodeTextWithHuggingFace(huggingFace, "", ids, info,
                                                error))
      fail(absl::StrCat("--tokenizer '", huggingFace, "': ", error));
    codec.vocabulary = info.vocabulary;
  } else {
    codec.local = triad::data::byteLevelTokenizer();
  }
  return codec;
}

} // namespace

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "generates text from a trained checkpoint with a one-rank plan\n\n"
      "  triad-sample one.plan --checkpoint ckpt --prompt 'Once upon' "
      "--tokens 100 --temperature 0.8 --top-k 40\n\n"
      "The plan is the model compiled for one rank (triad-opt "
      "--triad-train-pipeline, without dp, tp or pp); the checkpoint may "
      "come from any mesh. Prompts are byte-level (triad-data's default "
      "tokens), or encoded with --sentencepiece or --tokenizer as the "
      "corpus was.\n");
  underscoreFlagNames(argc, argv);
  std::vector<char *> positional = absl::ParseCommandLine(argc, argv);
  std::string checkpoint = absl::GetFlag(FLAGS_checkpoint),
              prompt = absl::GetFlag(FLAGS_prompt);
  int64_t tokens = absl::GetFlag(FLAGS_tokens),
          topK = absl::GetFlag(FLAGS_top_k);
  double temperature = absl::GetFlag(FLAGS_temperature);
  if (positional.size() != 2)
    fail("give one plan file (triad-sample PLAN --checkpoint DIR --prompt "
         "TEXT)");
  if (checkpoint.empty())
    fail("give the checkpoint to sample with: --checkpoint DIR");
  if (prompt.empty())
    fail("give the text to continue: --prompt TEXT");
  if (tokens < 1)
    fail(absl::StrCat("--tokens must be at least 1, got ", tokens));
  if (!(temperature >= 0.0) || !std::isfinite(temperature))
    fail(absl::StrCat("--temperature must be 0 or more, got ", temperature));
  if (topK < 0)
    fail(absl::StrCat("--top-k must be 0 (all) or more, got ", topK));

  absl::StatusOr<LoadedPlan> plan = loadPlan(positional[1]);
  failIf(plan.status());
  if (int64_t ranks = meshSize(plan->root()); ranks != 1)
    fail(absl::StrCat("the plan's mesh has ", ranks,
                      " ranks; sampling runs on one: compile the model for one "
                      "rank (triad-opt --triad-train-pipeline); a checkpoint "
                      "of any mesh loads there"));
  Codec codec = makeCodec(absl::GetFlag(FLAGS_sentencepiece),
                          absl::GetFlag(FLAGS_tokenizer));
  if (plan->root().vocab() < codec.vocabulary)
    fail(absl::StrCat("the tokenizer has ", codec.vocabulary,
                      " tokens, but the plan's vocabulary only ",
                      plan->root().vocab(),
                      " (byte-level prompts need 256; with another "
                      "tokenizer, give --sentencepiece or --tokenizer)"));

  TrainerOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  // A schedule over the run needs its length; sampling takes no step.
  options.runSteps = 1;
  absl::StatusOr<Trainer> trainer = Trainer::create(*plan, options);
  failIf(trainer.status());
  failIf(trainer->initFrom(checkpoint), "--checkpoint: ");

  std::vector<int32_t> context = codec.encode(prompt);
  if (context.empty())
    fail("the prompt encodes to no tokens");
  // The prompt as typed, then what each new token adds to the decoded
  // whole (decoded together, so that a piece's leading space survives; a
  // local tokenizer streams, Hugging Face's, a Python process away, decodes
  // once at the end).
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::string printed = codec.decode(context);
  auto show = [&] {
    std::string text = codec.decode(context);
    if (text.compare(0, printed.size(), printed) == 0) {
      std::fputs(text.c_str() + printed.size(), stdout);
      printed = text;
    }
    std::fflush(stdout);
  };
  std::mt19937_64 generator(options.seed);
  for (int64_t t = 0; t < tokens; ++t) {
    absl::StatusOr<std::vector<float>> logits =
        trainer->nextTokenLogits(context);
    failIf(logits.status());
    context.push_back(choose(*logits, temperature, topK, generator));
    if (codec.streams())
      show();
  }
  show();
  std::fputc('\n', stdout);
  return 0;
}
