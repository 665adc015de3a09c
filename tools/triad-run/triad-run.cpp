//===- triad-run.cpp - trains a compiled plan on a token corpus -----------===//
//
// triad-run PLAN --data FILE --steps N [--seed S] [--lr F] [--log-every K]
//           [--metrics FILE] [--trace FILE] [--save DIR [--save-every K]]
//           [--load DIR] [--token-width u16|u32]
//
// The runtime's tool: no MLIR or LLVM. It verifies the plan, opens the
// corpus, and runs optimizer steps 1..N (or, with --load, from the
// checkpoint's step to N) on the CPU, printing one progress line per logged
// step. Under a launcher (mpirun, srun) it starts MPI and checks that the
// job has as many ranks as the plan's mesh; only rank 0 prints. Every input
// is checked before use: bad input is one line on stderr,
// `triad-run: error: ...`, and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/mpi/Mpi.h"
#include "runtime/data/TokenFile.h"
#include "runtime/plan/Plan.h"
#include "runtime/train/Trainer.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <vector>

ABSL_FLAG(std::string, data, "",
          "Token corpus to train on: flat little-endian token ids (required)");
ABSL_FLAG(std::optional<int64_t>, steps, std::nullopt,
          "Train until optimizer step N (required); with --load, N counts "
          "the checkpoint's steps too");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "Seed of the initial weights, the samples and the dropout masks "
          "(default 1234; with --load, the checkpoint's)");
ABSL_FLAG(std::optional<double>, lr, std::nullopt,
          "Peak learning rate instead of the plan's (the schedule's floor "
          "scales alike)");
ABSL_FLAG(int64_t, log_every, 1,
          "Print a progress line (and a metrics record) every K steps, at "
          "the first and at the last one");
ABSL_FLAG(std::string, metrics, "",
          "Write one JSON object per logged step to FILE (JSON lines)");
ABSL_FLAG(std::string, trace, "",
          "Write a Chrome trace (chrome://tracing, Perfetto) to FILE: every "
          "step and call, and the instructions of the first 3 steps");
ABSL_FLAG(std::string, save, "",
          "Save checkpoints into folder DIR: at the end, and every "
          "--save-every steps");
ABSL_FLAG(int64_t, save_every, 0, "With --save: save every K steps");
ABSL_FLAG(std::string, load, "",
          "Resume from the latest checkpoint in folder DIR");
ABSL_FLAG(std::string, token_width, "u16",
          "Width of the corpus's token ids: u16 or u32");

using namespace triad::rt;
namespace plan = triad::plan;

namespace {

/// Numbers for people: 1234567 -> "1,234,567".
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      result.push_back(',');
    result.push_back(digits[i]);
  }
  return value < 0 ? "-" + result : result;
}

std::string mebibytes(double bytes) {
  return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

double peakResidentBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<double>(usage.ru_maxrss) * 1024.0; // KiB on Linux
}

/// The tool's process: its MPI world, and how it ends.
class Tool {
public:
  /// Prints `message` as the tool's error and ends with status 1, on every
  /// rank (every rank sees the same inputs, so every rank fails alike).
  [[noreturn]] void fail(const std::string &message) {
    std::fprintf(stderr, "triad-run: error: %s\n", message.c_str());
    std::fflush(stderr);
    world.reset(); // finalizes MPI
    std::exit(1);
  }
  void failIf(const absl::Status &status, const std::string &context = "") {
    if (!status.ok())
      fail(absl::StrCat(context, status.message()));
  }
  /// Prints a line on rank 0.
  void say(const std::string &line) {
    if (rank() == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  int rank() const { return world ? world->rank() : 0; }

  std::unique_ptr<mpi::World> world;
};

/// A file written line by line and flushed after each (JSON lines, the
/// trace), so a run that dies leaves what it had written.
class OutputFile {
public:
  static absl::StatusOr<OutputFile> open(const std::string &path) {
    OutputFile file;
    file.path = path;
    file.handle = std::fopen(path.c_str(), "w");
    if (!file.handle)
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
    return file;
  }
  OutputFile() = default;
  OutputFile(OutputFile &&other) noexcept
      : path(std::move(other.path)), handle(other.handle) {
    other.handle = nullptr;
  }
  OutputFile &operator=(OutputFile &&other) noexcept {
    std::swap(path, other.path);
    std::swap(handle, other.handle);
    return *this;
  }
  ~OutputFile() {
    if (handle)
      std::fclose(handle);
  }
  explicit operator bool() const { return handle != nullptr; }

  absl::Status write(const std::string &text) {
    if (std::fwrite(text.data(), 1, text.size(), handle) != text.size() ||
        std::fflush(handle) != 0)
      return absl::DataLossError(
          absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
    return absl::OkStatus();
  }
  absl::Status close() {
    FILE *open = handle;
    handle = nullptr;
    if (open && std::fclose(open) != 0)
      return absl::DataLossError(
          absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
    return absl::OkStatus();
  }

private:
  std::string path;
  FILE *handle = nullptr;
};

using Json = nlohmann::ordered_json;

/// One line of JSON; strings from the plan that are not UTF-8 get
/// replacement characters.
std::string json(const Json &value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// A number for JSON: null when it is not finite.
Json number(double value) {
  return std::isfinite(value) ? Json(value) : Json();
}

/// Chrome's trace event format: {"traceEvents": [...]} of complete ("X")
/// events in microseconds, one process per rank.
class TraceWriter {
public:
  absl::Status open(const std::string &path, int rank) {
    absl::StatusOr<OutputFile> opened = OutputFile::open(path);
    if (!opened.ok())
      return opened.status();
    file = std::move(*opened);
    pid = rank;
    return file.write(absl::StrCat(
        "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n",
        json({{"name", "process_name"},
              {"ph", "M"},
              {"pid", pid},
              {"tid", 0},
              {"args", {{"name", absl::StrCat("rank ", rank)}}}})));
  }
  absl::Status write(const std::vector<TraceEvent> &events) {
    if (!file)
      return absl::OkStatus();
    std::string text;
    for (const TraceEvent &event : events)
      absl::StrAppend(&text, ",\n",
                      json({{"name", event.name},
                            {"cat", event.category},
                            {"ph", "X"},
                            {"ts", event.beginMicros},
                            {"dur", event.durationMicros},
                            {"pid", pid},
                            {"tid", 0}}));
    return file.write(text);
  }
  absl::Status close() {
    if (!file)
      return absl::OkStatus();
    if (absl::Status status = file.write("\n]}\n"); !status.ok())
      return status;
    return file.close();
  }

private:
  OutputFile file;
  int pid = 0;
};

/// Lets flags be spelled with dashes, as the usage says (--log-every):
/// Abseil's names have underscores.
void underscoreFlagNames(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--")
      break;
    if (arg.size() < 3 || arg.substr(0, 2) != "--")
      continue;
    for (char *c = argv[i] + 2; *c && *c != '='; ++c)
      if (*c == '-')
        *c = '_';
  }
}

/// One line about the plan: mesh, parameters, batch, arena.
std::string describePlan(const std::string &path, const plan::Plan &plan) {
  std::vector<std::string> axes;
  for (const plan::MeshAxis *axis : *plan.mesh())
    axes.push_back(absl::StrCat(axis->name()->str(), "=", axis->size()));
  // Parameters over all pipeline ranks, each counted once by name.
  std::map<std::string, int64_t> parameters;
  uint64_t arena = 0;
  for (const plan::Program *program : *plan.programs()) {
    if (program->pipeline_rank() == 0)
      arena = program->arena_bytes();
    if (program->persistent())
      for (const plan::Persistent *p : *program->persistent())
        if (p->role() == plan::Role::Parameter) {
          int64_t count = 1;
          for (int64_t size : *p->global_shape())
            count *= size;
          parameters[p->name()->str()] = count;
        }
  }
  int64_t total = 0;
  for (const auto &entry : parameters)
    total += entry.second;
  int64_t world = meshSize(plan);
  return absl::StrCat(
      "triad-run: plan ", path, ": mesh ", absl::StrJoin(axes, " x "), " (",
      world, world == 1 ? " rank" : " ranks", "), ", grouped(total),
      " parameters, batch ", plan.batch(), " x seq ", plan.seq(), " in ",
      plan.microbatches(), " microbatch", plan.microbatches() == 1 ? "" : "es",
      " of ", microbatchSamples(plan), ", vocab ", grouped(plan.vocab()),
      ", arena ", mebibytes(static_cast<double>(arena)), " (pipeline rank 0)");
}

std::string meshText(const plan::Plan &plan) {
  std::vector<std::string> axes;
  for (const plan::MeshAxis *axis : *plan.mesh())
    axes.push_back(absl::StrCat(axis->name()->str(), "=", axis->size()));
  return absl::StrJoin(axes, ", ");
}

} // namespace

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "trains a compiled plan on a token corpus\n\n"
      "  triad-run tiny.plan --data corpus.bin --steps 200\n"
      "  mpirun -np 8 triad-run tiny.plan --data corpus.bin --steps 200\n\n"
      "Progress, one line per logged step:\n"
      "  step    5/200 | loss 4.8123 | lr 1.00e-03 | grad norm 0.9123 | "
      "12345 tok/s | mem 3.2 MiB | rss 45.1 MiB\n"
      "(mem: the plan's arena on this rank; rss: the process's peak resident "
      "memory). --metrics records per logged step: step, loss, lr, "
      "grad_norm, tokens_per_s, step_seconds, skipped. Flags may be spelled "
      "with - or _ (--log-every, --log_every).");
  underscoreFlagNames(argc, argv);
  std::vector<char *> positional = absl::ParseCommandLine(argc, argv);
  Tool tool;

  // Flags first: nothing starts on a bad command line.
  std::string dataPath = absl::GetFlag(FLAGS_data);
  std::optional<int64_t> stepsFlag = absl::GetFlag(FLAGS_steps);
  int64_t logEvery = absl::GetFlag(FLAGS_log_every);
  int64_t saveEvery = absl::GetFlag(FLAGS_save_every);
  std::string saveDir = absl::GetFlag(FLAGS_save);
  std::string loadDir = absl::GetFlag(FLAGS_load);
  std::string width = absl::GetFlag(FLAGS_token_width);
  std::optional<double> lr = absl::GetFlag(FLAGS_lr);
  std::optional<uint64_t> seedFlag = absl::GetFlag(FLAGS_seed);
  if (positional.size() != 2)
    tool.fail(positional.size() < 2
                  ? "give the plan file to run (triad-run PLAN --data FILE "
                    "--steps N)"
                  : absl::StrCat("give one plan file, not ",
                                 positional.size() - 1, " (",
                                 absl::StrJoin(positional.begin() + 1,
                                               positional.end(), " "),
                                 ")"));
  std::string planPath = positional[1];
  if (dataPath.empty())
    tool.fail("give the token corpus to train on with --data FILE");
  if (!stepsFlag)
    tool.fail("give the optimizer step to train until with --steps N");
  int64_t steps = *stepsFlag;
  if (steps < 1)
    tool.fail(absl::StrCat("--steps must be at least 1, got ", steps));
  if (logEvery < 1)
    tool.fail(absl::StrCat("--log-every must be at least 1, got ", logEvery));
  if (saveEvery != 0 && saveDir.empty())
    tool.fail("--save-every needs --save DIR (where to save)");
  if (saveEvery < 0)
    tool.fail(absl::StrCat("--save-every must be positive, got ", saveEvery));
  if (width != "u16" && width != "u32")
    tool.fail(absl::StrCat("unknown --token-width '", width,
                           "' (expected u16 or u32)"));
  if (lr && !(*lr > 0.0 && std::isfinite(*lr)))
    tool.fail(absl::StrCat("--lr must be a positive number, got ", *lr));

  // The job: MPI under a launcher, else one rank.
  absl::StatusOr<mpi::World> world = mpi::World::initialize(&argc, &argv);
  tool.failIf(world.status(), "cannot start MPI: ");
  tool.world = std::make_unique<mpi::World>(std::move(*world));

  absl::StatusOr<LoadedPlan> loaded = loadPlan(planPath);
  tool.failIf(loaded.status());
  const plan::Plan &plan = loaded->root();
  int64_t meshRanks = meshSize(plan);
  if (meshRanks != tool.world->size())
    tool.fail(absl::StrCat(
        "the plan is for a mesh of ", meshRanks, " rank",
        meshRanks == 1 ? "" : "s", " (", meshText(plan), "); ",
        tool.world->usesMpi() ? "mpirun started " : "this run has ",
        tool.world->size(),
        tool.world->usesMpi()
            ? ""
            : absl::StrCat(" (start it with mpirun -np ", meshRanks, ")")));
  if (meshRanks > 1)
    tool.fail(absl::StrCat(
        "the plan is for a mesh of ", meshRanks, " ranks (", meshText(plan),
        "); this runtime runs single-rank plans so far (compile for dp=1 "
        "tp=1 pp=1)"));

  absl::StatusOr<TokenFile> data = TokenFile::open(
      dataPath, width == "u16" ? TokenWidth::U16 : TokenWidth::U32,
      plan.vocab());
  tool.failIf(data.status());

  // Resuming: the checkpoint's step and seed.
  uint64_t seed = seedFlag.value_or(1234), firstStep = 1;
  if (!loadDir.empty()) {
    absl::StatusOr<CheckpointReader> checkpoint =
        CheckpointReader::open(loadDir);
    tool.failIf(checkpoint.status(), "--load: ");
    const CheckpointInfo &info = checkpoint->info();
    if (seedFlag && *seedFlag != info.seed)
      tool.fail(absl::StrCat("--seed ", *seedFlag, " differs from the seed ",
                             info.seed, " of checkpoint '", loadDir,
                             "' (leave --seed out to resume with it)"));
    seed = info.seed;
    if (info.step >= static_cast<uint64_t>(steps))
      tool.fail(absl::StrCat("checkpoint '", loadDir, "' is at step ",
                             info.step, ": --steps ", steps,
                             " leaves nothing to train (--steps counts the "
                             "checkpoint's steps too)"));
    firstStep = info.step + 1;
  }

  TrainerOptions options;
  options.seed = seed;
  options.learningRate = lr;
  options.trace = !absl::GetFlag(FLAGS_trace).empty();
  absl::StatusOr<Trainer> trainer = Trainer::create(*loaded, *data, options);
  tool.failIf(trainer.status());
  if (!loadDir.empty())
    tool.failIf(trainer->load(loadDir), "--load: ");
  if (!saveDir.empty() && mkdir(saveDir.c_str(), 0755) != 0 && errno != EEXIST)
    tool.fail(absl::StrCat("--save: cannot create checkpoint folder '", saveDir,
                           "': ", std::strerror(errno)));

  OutputFile metrics;
  TraceWriter trace;
  if (tool.rank() == 0) {
    if (!absl::GetFlag(FLAGS_metrics).empty()) {
      absl::StatusOr<OutputFile> opened =
          OutputFile::open(absl::GetFlag(FLAGS_metrics));
      tool.failIf(opened.status(), "--metrics: ");
      metrics = std::move(*opened);
    }
    if (options.trace)
      tool.failIf(trace.open(absl::GetFlag(FLAGS_trace), tool.rank()),
                  "--trace: ");
  }

  tool.say(describePlan(planPath, plan));
  tool.say(absl::StrCat(
      "triad-run: data ", dataPath, ": ", grouped(data->size()), " tokens (",
      width, "); ",
      firstStep == 1 ? absl::StrCat("training steps 1..", steps)
                     : absl::StrCat("resuming from '", loadDir, "' at step ",
                                    firstStep - 1, ", training steps ",
                                    firstStep, "..", steps),
      ", seed ", seed,
      lr ? absl::StrFormat(", peak lr %.3g", *lr) : std::string()));

  double arenaBytes =
      static_cast<double>(trainer->executor().programOf().arena_bytes());
  int stepWidth = std::max<int>(4, std::to_string(steps).size());
  double trainedSeconds = 0, lastLoss = StepResult::kMissing;
  int64_t trainedTokens = 0;
  uint64_t lastSaved = 0;
  auto started = std::chrono::steady_clock::now();
  auto save = [&] {
    tool.failIf(trainer->save(saveDir), "--save: ");
    lastSaved = trainer->completedSteps();
    tool.say(absl::StrCat("triad-run: saved step ", lastSaved, " to ",
                          checkpointStepDir(saveDir, lastSaved)));
  };
  for (uint64_t step = firstStep; step <= static_cast<uint64_t>(steps);
       ++step) {
    absl::StatusOr<StepResult> result = trainer->step();
    tool.failIf(result.status());
    trainedSeconds += result->seconds;
    trainedTokens += result->tokens;
    lastLoss = result->loss;
    double tokensPerSecond =
        result->seconds > 0 ? result->tokens / result->seconds : 0.0;
    tool.failIf(trace.write(result->events), "--trace: ");
    if (step % static_cast<uint64_t>(logEvery) == 0 || step == firstStep ||
        step == static_cast<uint64_t>(steps)) {
      tool.say(absl::StrFormat(
          "step %*d/%d | loss %.4f | lr %.2e | grad norm %.4f | %s tok/s | "
          "mem %s | rss %s%s",
          stepWidth, step, steps, result->loss, result->lr, result->gradNorm,
          grouped(std::llround(tokensPerSecond)), mebibytes(arenaBytes),
          mebibytes(peakResidentBytes()),
          result->skipped ? " | skipped (overflow)" : ""));
      if (metrics) {
        Json record = {{"step", step},
                       {"loss", number(result->loss)},
                       {"lr", number(result->lr)},
                       {"grad_norm", number(result->gradNorm)},
                       {"tokens_per_s", number(tokensPerSecond)},
                       {"step_seconds", number(result->seconds)},
                       {"skipped", result->skipped}};
        tool.failIf(metrics.write(json(record) + "\n"), "--metrics: ");
      }
    }
    if (!saveDir.empty() && saveEvery > 0 &&
        step % static_cast<uint64_t>(saveEvery) == 0)
      save();
  }
  if (!saveDir.empty() && lastSaved != trainer->completedSteps())
    save();
  tool.failIf(trace.close(), "--trace: ");
  tool.failIf(metrics.close(), "--metrics: ");
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  uint64_t trained = static_cast<uint64_t>(steps) - firstStep + 1;
  tool.say(absl::StrFormat(
      "triad-run: trained steps %d..%d in %.2f s (%.3f s/step, %s tok/s); "
      "final loss %.4f",
      firstStep, steps, elapsed, trainedSeconds / trained,
      grouped(std::llround(trainedSeconds > 0 ? trainedTokens / trainedSeconds
                                              : 0.0)),
      lastLoss));
  return 0;
}
