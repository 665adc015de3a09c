//===- triad-sample.cpp - generates text from a trained checkpoint --------===//
//
// triad-sample PLAN --checkpoint DIR --prompt TEXT [--tokens N]
//              [--temperature T] [--top-k K] [--seed S]
//
// Loads the weights of checkpoint DIR (saved on any mesh) into a one-rank
// plan, encodes the prompt byte-level, and appends tokens one at a time:
// each from the plan's logits_step (the forward pass to the next-token
// logits, the whole prefix recomputed each time, the last seq tokens of it
// seen), divided by the temperature, cut to the top k and drawn with the
// seed (temperature 0: the most likely). Prints the prompt and what follows.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "runtime/support/CommandLine.h"
#include "runtime/train/Trainer.h"

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

/// A byte-level id as text: the byte itself, or <id> beyond 255.
std::string decode(int32_t id) {
  return id < 256 ? std::string(1, static_cast<char>(id))
                  : absl::StrCat("<", id, ">");
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
      "tokens): the plan's vocabulary must hold the 256 bytes.\n");
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
  if (plan->root().vocab() < 256)
    fail(absl::StrCat("prompts are byte-level, but the plan's vocabulary "
                      "has ",
                      plan->root().vocab(), " tokens, fewer than 256"));

  TrainerOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  // A schedule over the run needs its length; sampling takes no step.
  options.runSteps = 1;
  absl::StatusOr<Trainer> trainer = Trainer::create(*plan, options);
  failIf(trainer.status());
  failIf(trainer->initFrom(checkpoint), "--checkpoint: ");

  std::vector<int32_t> context;
  for (unsigned char byte : prompt)
    context.push_back(byte);
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::mt19937_64 generator(options.seed);
  for (int64_t t = 0; t < tokens; ++t) {
    absl::StatusOr<std::vector<float>> logits =
        trainer->nextTokenLogits(context);
    failIf(logits.status());
    int32_t next = choose(*logits, temperature, topK, generator);
    context.push_back(next);
    std::fputs(decode(next).c_str(), stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}
