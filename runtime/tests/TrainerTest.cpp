//===- TrainerTest.cpp - optimizer steps, checkpoints and resuming --------===//
//
// The trainer on a small language-model plan (tests/PlanBuilder.h): the
// same seed gives the same losses; accumulating two microbatches matches
// one microbatch of both; a run resumed from a checkpoint continues with
// exactly the losses and weights of an uninterrupted one; checkpoints of
// another model are refused, naming the tensor; a save killed at any moment
// leaves a checkpoint that loads. Several ranks (threads) of a
// data-parallel mesh train like one rank; each rank saves its own slices,
// and a checkpoint loads under another mesh (reshard on load).
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Trainer.h"

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/init/Philox.h"
#include "runtime/support/Files.h"
#include "runtime/tests/PlanBuilder.h"
#include "runtime/tests/ThreadComm.h"

#include <gtest/gtest.h>

#include <limits>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <regex>
#include <sys/wait.h>
#include <unistd.h>

using namespace triad::rt;
using tests::TrainingPlanSpec;

namespace {

void removeDir(const std::string &dir) {
  std::string command = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
}

std::string freshDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "triad-trainer-" + name + "-" +
                    std::to_string(getpid());
  removeDir(dir);
  return dir;
}

/// A corpus with structure to learn: mostly a cycle through the
/// vocabulary, with every fifth token random.
const std::string &corpusPath() {
  static const std::string path = [] {
    std::string bytes;
    PhiloxKey key{3, 4};
    for (uint32_t i = 0; i < 4000; ++i) {
      uint16_t token = static_cast<uint16_t>((i * 5) % 32);
      if (i % 5 == 0)
        token = static_cast<uint16_t>(philox4x32({i, 0, 0, 0}, key)[0] % 32);
      bytes.push_back(static_cast<char>(token & 0xff));
      bytes.push_back(static_cast<char>(token >> 8));
    }
    std::string file = ::testing::TempDir() + "triad-trainer-corpus-" +
                       std::to_string(getpid()) + ".bin";
    EXPECT_TRUE(writeFileAtomically(file, bytes).ok());
    return file;
  }();
  return path;
}

/// A plan, its corpus and a trainer, which points into the other two.
struct Run {
  LoadedPlan plan;
  std::unique_ptr<TokenFile> data;
  std::unique_ptr<Trainer> trainer;

  static std::unique_ptr<Run> create(const TrainingPlanSpec &spec,
                                     uint64_t seed = 7,
                                     Communicator *communicator = nullptr) {
    return create(tests::buildTrainingPlan(spec), spec.vocab, seed,
                  communicator);
  }

  static std::unique_ptr<Run> create(const std::string &planBytes,
                                     int64_t vocab, uint64_t seed,
                                     Communicator *communicator) {
    auto run = std::make_unique<Run>();
    auto plan = loadPlanFromBytes(planBytes, "training.plan");
    EXPECT_TRUE(plan.ok()) << plan.status();
    run->plan = std::move(*plan);
    auto data = TokenFile::open(corpusPath(), TokenWidth::U16, vocab);
    EXPECT_TRUE(data.ok()) << data.status();
    run->data = std::make_unique<TokenFile>(std::move(*data));
    TrainerOptions options;
    options.seed = seed;
    options.communicator = communicator;
    auto trainer = Trainer::create(run->plan, *run->data, options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    run->trainer = std::make_unique<Trainer>(std::move(*trainer));
    return run;
  }

  std::vector<double> losses(int steps) {
    std::vector<double> result;
    for (int i = 0; i < steps; ++i) {
      auto step = trainer->step();
      EXPECT_TRUE(step.ok()) << step.status();
      result.push_back(step.ok() ? step->loss : NAN);
    }
    return result;
  }

  std::vector<float> weights(const std::string &name) {
    absl::StatusOr<std::vector<float>> values =
        trainer->executor().readPersistent(name);
    if (!values.ok()) {
      ADD_FAILURE() << values.status();
      return {};
    }
    return *values;
  }
};

TEST(Trainer, TheSameSeedGivesTheSameLosses) {
  auto first = Run::create({}), second = Run::create({}),
       other = Run::create({}, 8);
  auto step = first->trainer->step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->step, 1u);
  EXPECT_FLOAT_EQ(step->lr, 0.025); // warmup: 1 of 2 steps
  EXPECT_GT(step->gradNorm, 0.0);
  EXPECT_FALSE(step->skipped);
  EXPECT_EQ(step->tokens, 4 * 8);
  EXPECT_EQ(step->results.at("tokens"), 4 * 8); // no label is ignored
  EXPECT_TRUE(step->events.empty());
  EXPECT_EQ(first->trainer->completedSteps(), 1u);
  EXPECT_EQ(first->trainer->samplesConsumed(), 4u);

  std::vector<double> losses = first->losses(29);
  losses.insert(losses.begin(), step->loss);
  std::vector<double> again = second->losses(30);
  EXPECT_EQ(losses, again);
  EXPECT_NE(losses, other->losses(30));
  EXPECT_NEAR(losses[0], std::log(32.0), 1.0);
  EXPECT_LT(losses.back(), losses[0] - 0.5) << "the model does not learn";
}

// The host's side of a step: on the CPU every call's time is the host's
// (nothing is queued for a device), the final synchronization is the
// step's wait for what is in flight, both lie within the step, and no
// device work is issued. The executor's totals grow by each step's share.
TEST(Trainer, ReportsTheHostTimeAndLaunchesOfEachStep) {
  auto run = Run::create({});
  Executor::HostWork before = run->trainer->executor().hostWork();
  double host = 0;
  for (int i = 0; i < 3; ++i) {
    auto step = run->trainer->step();
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_GT(step->hostSeconds, 0.0);
    EXPECT_GE(step->syncSeconds, 0.0);
    EXPECT_LE(step->hostSeconds + step->syncSeconds, step->seconds);
    EXPECT_EQ(step->launches, 0);
    host += step->hostSeconds;
  }
  Executor::HostWork after = run->trainer->executor().hostWork();
  EXPECT_NEAR((after.callNanos - before.callNanos) / 1e9, host, 1e-6);
  EXPECT_EQ(after.launches, 0);
}

// Gradient accumulation: two microbatches of two samples step exactly like
// (within fp32 rounding) one microbatch of four.
TEST(Trainer, AccumulatingMicrobatchesMatchesOneMicrobatch) {
  TrainingPlanSpec two, one;
  two.dropout = one.dropout = 0.0;
  one.microbatches = 1;
  auto accumulated = Run::create(two), whole = Run::create(one);
  std::vector<double> a = accumulated->losses(5), b = whole->losses(5);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i])) << "step " << i + 1;
  std::vector<float> wa = accumulated->weights("wout"),
                     wb = whole->weights("wout");
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_NEAR(wa[i], wb[i], 1e-4 * (1.0 + std::abs(wb[i])));
}

TEST(Trainer, ResumingGivesExactlyTheUninterruptedRun) {
  std::string dir = freshDir("resume");
  auto uninterrupted = Run::create({});
  std::vector<double> expected = uninterrupted->losses(7);

  auto first = Run::create({});
  std::vector<double> losses = first->losses(3);
  ASSERT_TRUE(first->trainer->save(dir).ok());
  auto resumed = Run::create({});
  absl::Status loaded = resumed->trainer->load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(resumed->trainer->completedSteps(), 3u);
  EXPECT_EQ(resumed->trainer->samplesConsumed(), 12u);
  auto step = resumed->trainer->step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->step, 4u);
  losses.push_back(step->loss);
  for (double loss : resumed->losses(3))
    losses.push_back(loss);
  EXPECT_EQ(losses, expected);
  for (const char *name :
       {"wte", "wout", "adam.m.wte", "adam.v.wout", "optimizer.step"})
    EXPECT_EQ(resumed->weights(name), uninterrupted->weights(name)) << name;
  EXPECT_EQ(resumed->weights("optimizer.step"), std::vector<float>{7.0f});

  // Saving again moves `latest`; the step-3 folder stays.
  ASSERT_TRUE(resumed->trainer->save(dir).ok());
  auto latest = Run::create({});
  ASSERT_TRUE(latest->trainer->load(dir).ok());
  EXPECT_EQ(latest->trainer->completedSteps(), 7u);
  EXPECT_EQ(latest->weights("wte"), uninterrupted->weights("wte"));
  removeDir(dir);
}

TEST(Trainer, NonFiniteParametersAreNotSaved) {
  std::string dir = freshDir("nonfinite");
  auto run = Run::create({});
  run->losses(2);
  ASSERT_TRUE(run->trainer->save(dir).ok());
  EXPECT_EQ(run->trainer->firstNonFiniteParameter(), "");
  // An update that overflowed: one element of wout is infinite.
  std::vector<float> wout = run->weights("wout");
  wout[3] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(run->trainer->executor().writePersistent("wout", wout).ok());
  EXPECT_EQ(run->trainer->firstNonFiniteParameter(), "wout");
  run->losses(1);
  absl::Status saved = run->trainer->save(dir);
  EXPECT_EQ(saved.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(saved.message().find("parameter '"), std::string::npos) << saved;
  EXPECT_NE(saved.message().find("' is not finite after the update"),
            std::string::npos)
      << saved;
  // The checkpoint of step 2 stays the latest.
  auto reloaded = Run::create({});
  ASSERT_TRUE(reloaded->trainer->load(dir).ok());
  EXPECT_EQ(reloaded->trainer->completedSteps(), 2u);
  removeDir(dir);
}

TEST(Trainer, RefusesCheckpointsOfAnotherModel) {
  std::string dir = freshDir("refuse");
  auto saved = Run::create({});
  saved->losses(1);
  ASSERT_TRUE(saved->trainer->save(dir).ok());
  auto loadError = [&](const TrainingPlanSpec &spec, uint64_t seed = 7) {
    auto run = Run::create(spec, seed);
    std::vector<float> before = run->weights("wte");
    absl::Status status = run->trainer->load(dir);
    // A refused load changes nothing.
    EXPECT_EQ(run->trainer->completedSteps(), 0u);
    EXPECT_EQ(run->weights("wte"), before);
    return std::string(status.message());
  };
  TrainingPlanSpec renamed;
  renamed.output = "head";
  EXPECT_EQ(loadError(renamed),
            "checkpoint '" + dir +
                "' (step 1) does not fit this plan: it holds tensor "
                "'adam.m.wout', which the plan does not have");
  TrainingPlanSpec reshaped;
  reshaped.hidden = 4;
  EXPECT_EQ(loadError(reshaped),
            "checkpoint '" + dir +
                "' (step 1) does not fit this plan: tensor 'wte' has shape "
                "[32, 8] in the checkpoint but [32, 4] here");
  TrainingPlanSpec larger;
  larger.ballast = 10;
  EXPECT_EQ(loadError(larger), "checkpoint '" + dir +
                                   "' (step 1) does not fit this plan: the "
                                   "checkpoint has no tensor 'ballast'");
  EXPECT_EQ(loadError({}, 9), "checkpoint '" + dir +
                                  "' (step 1) does not fit this plan: it was "
                                  "saved with seed 7, this run uses 9");
  auto run = Run::create({});
  EXPECT_TRUE(run->trainer->load(dir).ok());
  EXPECT_FALSE(run->trainer->load(dir + "-missing").ok());
  removeDir(dir);
}

TEST(Trainer, RecordsTraceEvents) {
  auto run = Run::create({});
  TrainerOptions options;
  options.seed = 7;
  options.trace = true;
  options.traceLastStep = 1;
  auto trainer = Trainer::create(run->plan, *run->data, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto first = trainer->step();
  ASSERT_TRUE(first.ok()) << first.status();
  // The step, its four calls, and every instruction of the first step.
  ASSERT_GT(first->events.size(), 5u);
  EXPECT_EQ(first->events[0].name, "step 1");
  EXPECT_EQ(first->events[0].category, "step");
  EXPECT_EQ(first->events[1].name, "begin_step");
  EXPECT_EQ(first->events[1].category, "call");
  std::vector<std::string> calls;
  for (const TraceEvent &event : first->events) {
    if (event.category == "call")
      calls.push_back(event.name);
    EXPECT_GE(event.beginMicros, first->events[0].beginMicros);
    EXPECT_LE(event.beginMicros + event.durationMicros,
              first->events[0].beginMicros + first->events[0].durationMicros +
                  1.0);
  }
  EXPECT_EQ(calls,
            (std::vector<std::string>{"begin_step", "microbatch_step mb 0",
                                      "microbatch_step mb 1", "apply_step"}));
  EXPECT_EQ(first->events[2].name, "Fill");
  EXPECT_EQ(first->events[2].category, "instruction");
  // Instructions say what they work on: a Matmul its products, the
  // others their operands' types and shapes.
  EXPECT_TRUE(std::regex_search(first->events[2].detail,
                                std::regex("-> f32\\[[0-9,]+\\]$")))
      << first->events[2].detail;
  const std::regex product(
      "[0-9]+x[0-9]+(\\^T)? \\. [0-9]+x[0-9]+(\\^T)?, batch [0-9]+.*");
  bool sawMatmul = false;
  for (const TraceEvent &event : first->events)
    if (event.name == "Matmul") {
      sawMatmul = true;
      EXPECT_TRUE(std::regex_match(event.detail, product)) << event.detail;
    } else if (event.category != "instruction") {
      EXPECT_EQ(event.detail, "") << event.name;
    }
  EXPECT_TRUE(sawMatmul);
  // Outside the window (steps 1 to 1) a step records nothing.
  auto second = trainer->step();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->events.empty());
}

// The CPU runs each instruction when it is issued: its times are already
// the device's, and asking for device times changes nothing (on a GPU they
// add spans of category "device", CudaExecutorTest.cpp).
TEST(Trainer, DeviceTimesOnTheCpuAreItsInstructionTimes) {
  auto run = Run::create({});
  std::vector<std::vector<std::string>> traces;
  for (bool deviceTimes : {false, true}) {
    TrainerOptions options;
    options.trace = true;
    options.deviceTimes = deviceTimes;
    auto trainer = Trainer::create(run->plan, *run->data, options);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    auto step = trainer->step();
    ASSERT_TRUE(step.ok()) << step.status();
    std::vector<std::string> names;
    for (const TraceEvent &event : step->events) {
      EXPECT_NE(event.category.rfind("device", 0), 0u) << event.name;
      EXPECT_TRUE(event.call.empty()) << event.name;
      EXPECT_EQ(event.instruction, -1) << event.name;
      names.push_back(event.category + " " + event.name);
    }
    traces.push_back(names);
  }
  EXPECT_EQ(traces[0], traces[1]);
}

TEST(Trainer, TracesTheStepsOfItsWindowOnly) {
  auto run = Run::create({});
  TrainerOptions options;
  options.trace = true;
  options.traceFirstStep = options.traceLastStep = 2;
  auto trainer = Trainer::create(run->plan, *run->data, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<size_t> counts;
  for (int step = 1; step <= 3; ++step) {
    auto result = trainer->step();
    ASSERT_TRUE(result.ok()) << result.status();
    counts.push_back(result->events.size());
    if (step == 2) {
      ASSERT_FALSE(result->events.empty());
      EXPECT_EQ(result->events[0].name, "step 2");
    }
  }
  EXPECT_EQ(counts[0], 0u);
  EXPECT_GT(counts[1], 5u);
  EXPECT_EQ(counts[2], 0u);
}

TEST(Trainer, RefusesPlansWithoutAStepAndShortCorpora) {
  tests::PlanBuilder b;
  uint32_t x = b.value(triad::plan::DType::F32, {2});
  b.instr(triad::plan::OpCode::Fill, {}, {x}, {}, {1.0});
  auto plan = loadPlanFromBytes(b.build({}, {}), "nostep.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto data = TokenFile::open(corpusPath(), TokenWidth::U16, 32);
  ASSERT_TRUE(data.ok());
  auto trainer = Trainer::create(*plan, *data, {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("has no step"), std::string::npos);

  TrainingPlanSpec longSequences;
  longSequences.seq = 4000;
  longSequences.batch = 2;
  auto training =
      loadPlanFromBytes(tests::buildTrainingPlan(longSequences), "long.plan");
  ASSERT_TRUE(training.ok()) << training.status();
  trainer = Trainer::create(*training, *data, {});
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find(
                "fewer than one training window of seq + 1 = 4001"),
            std::string::npos)
      << trainer.status();
}

// A plan from an untrusted source may fail to load, but one that loads
// runs without reading or writing outside its buffers (this test runs under
// AddressSanitizer): random corruptions of a training plan that still pass
// the loader's checks train a step, or fail with an error.
TEST(Trainer, CorruptedPlansThatLoadRunSafely) {
  // The FlatBuffer inside the sealed plan, corrupted and sealed again so
  // that the loader's checks (not the seal) decide.
  std::string sealed = tests::buildTrainingPlan({});
  std::string bytes = sealed.substr(0, sealed.size() - kPlanSealBytes);
  auto data = TokenFile::open(corpusPath(), TokenWidth::U16, 1 << 16);
  ASSERT_TRUE(data.ok()) << data.status();
  PhiloxKey key{5, 6};
  int loaded = 0, trained = 0;
  for (uint32_t trial = 0; trial < 1000; ++trial) {
    std::string copy = bytes;
    auto random = philox4x32({trial, 0, 0, 0}, key);
    for (int flip = 0; flip < 1 + static_cast<int>(random[3] % 2); ++flip)
      copy[random[flip] % copy.size()] =
          static_cast<char>(random[(flip + 1) % 4] >> 8);
    auto plan = loadPlanFromBytes(sealPlan(copy), "corrupt.plan");
    if (!plan.ok())
      continue;
    ++loaded;
    // The corpus holds ids below 32; a corrupt vocabulary or sequence
    // length is the sampler's or the executor's error to report.
    if (plan->root().programs()->Get(0)->arena_bytes() > (64 << 20))
      continue; // valid, but more memory than a unit test should take
    TrainerOptions options;
    options.seed = trial;
    auto trainer = Trainer::create(*plan, *data, options);
    if (!trainer.ok())
      continue;
    trained += trainer->step().ok();
  }
  EXPECT_GT(loaded, 60);
  EXPECT_GT(trained, 30);
}

// A save killed at any moment leaves a checkpoint that loads and resumes
// exactly: the last one committed before the kill.
TEST(Trainer, KilledSaveLeavesALoadableCheckpoint) {
  std::string dir = freshDir("kill");
  TrainingPlanSpec spec;
  spec.ballast = 1 << 20; // 12 MiB of parameter and moments per checkpoint
  auto run = Run::create(spec);
  run->losses(1);
  ASSERT_TRUE(run->trainer->save(dir).ok());
  std::vector<uint64_t> steps;
  for (int delayMicros : {0, 30000, 100000, 250000}) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Train and save until killed. (OpenMP's thread pool does not survive
      // fork: the child runs on one thread.)
      omp_set_num_threads(1);
      for (int i = 0; i < 1000; ++i)
        if (!run->trainer->step().ok() || !run->trainer->save(dir).ok())
          _exit(1);
      _exit(0);
    }
    usleep(delayMicros);
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    auto resumed = Run::create(spec);
    absl::Status loaded = resumed->trainer->load(dir);
    ASSERT_TRUE(loaded.ok())
        << "after a kill at " << delayMicros << " us: " << loaded;
    steps.push_back(resumed->trainer->completedSteps());
    // It holds the weights of a run that never stopped, and continues
    // like one.
    auto reference = Run::create(spec);
    reference->losses(static_cast<int>(steps.back()));
    EXPECT_EQ(resumed->weights("wte"), reference->weights("wte"));
    EXPECT_EQ(resumed->losses(1), reference->losses(1))
        << "resumed at step " << steps.back();
  }
  EXPECT_GE(steps.front(), 1u);
  removeDir(dir);
}

/// Whether a and b agree to a relative 1e-5 (the project's law for fp32
/// runs on different meshes).
bool close(double a, double b) {
  return std::abs(a - b) <= 1e-5 * std::max(std::abs(a), std::abs(b)) + 1e-7;
}

/// The losses (and final weights of `wte`) of `steps` steps of every rank
/// of `spec`'s mesh, run as threads.
struct RankRuns {
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<float>> weights;
};

RankRuns runRanks(const TrainingPlanSpec &spec, int steps,
                  const std::function<void(int64_t, Run &)> &before = {}) {
  auto plan =
      loadPlanFromBytes(tests::buildTrainingPlan(spec), "training.plan");
  EXPECT_TRUE(plan.ok()) << plan.status();
  RankRuns result;
  int64_t ranks = meshSize(plan->root());
  result.losses.resize(ranks);
  result.weights.resize(ranks);
  tests::runRanks(plan->root(),
                  [&](int64_t rank, tests::ThreadCommunicator &comm) {
                    auto run = Run::create(spec, 7, &comm);
                    if (before)
                      before(rank, *run);
                    result.losses[rank] = run->losses(steps);
                    result.weights[rank] = run->weights("wte");
                  });
  return result;
}

// The law of the project on the data-parallel axis: two replicas, each
// training on its half of every batch and all-reducing the sums, give the
// losses and weights of one rank (fp32: within 1e-5).
TEST(MultiRankTrainer, DataParallelMatchesOneRank) {
  TrainingPlanSpec one;
  one.dropout = 0; // the plan's dropout streams are not yet per replica
  auto single = Run::create(one);
  std::vector<double> expected = single->losses(10);
  std::vector<float> expectedWeights = single->weights("wte");
  for (int64_t microbatches : {1, 2}) {
    TrainingPlanSpec two = one;
    two.mesh = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
    two.microbatches = microbatches;
    RankRuns runs = runRanks(two, 10, [](int64_t rank, auto &run) {
      EXPECT_EQ(run.trainer->dataParallelRank(), rank);
      EXPECT_EQ(run.trainer->dataParallelSize(), 2);
    });
    // Every replica holds the same (global) loss and the same weights.
    EXPECT_EQ(runs.losses[0], runs.losses[1]);
    EXPECT_EQ(runs.weights[0], runs.weights[1]);
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_TRUE(close(runs.losses[0][i], expected[i]))
          << "step " << i + 1 << ": " << runs.losses[0][i] << " vs "
          << expected[i];
    for (size_t i = 0; i < expectedWeights.size(); ++i)
      ASSERT_TRUE(close(runs.weights[0][i], expectedWeights[i])) << i;
  }
}

// A checkpoint saved by two replicas (each saving what it alone holds:
// here the replicated tensors once, by rank 0) resumes exactly on the same
// mesh and loads under one rank.
TEST(MultiRankTrainer, CheckpointsOfReplicas) {
  std::string dir = freshDir("replicas");
  TrainingPlanSpec two;
  two.dropout = 0;
  two.mesh = {{"dp", 2}, {"tp", 1}, {"pp", 1}};
  // Uninterrupted: 5 steps. Interrupted: 3, save, then 2 from the save.
  RankRuns full = runRanks(two, 5);
  {
    auto plan =
        loadPlanFromBytes(tests::buildTrainingPlan(two), "training.plan");
    ASSERT_TRUE(plan.ok());
    tests::runRanks(plan->root(),
                    [&](int64_t rank, tests::ThreadCommunicator &comm) {
                      auto run = Run::create(two, 7, &comm);
                      run->losses(3);
                      absl::Status saved = run->trainer->save(dir);
                      EXPECT_TRUE(saved.ok()) << saved;
                    });
  }
  // Rank 1 holds only replicas of rank 0's tensors: its shard is empty.
  auto shard = SafetensorsFile::open(checkpointStepDir(dir, 3) +
                                     "/rank-00001.safetensors");
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_TRUE(shard->entries().empty());
  auto reader = CheckpointReader::open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->info().worldSize, 2);
  EXPECT_EQ(reader->info().mesh, (std::vector<std::pair<std::string, int64_t>>{
                                     {"dp", 2}, {"tp", 1}, {"pp", 1}}));

  RankRuns resumed = runRanks(two, 2, [&](int64_t, auto &run) {
    absl::Status loaded = run.trainer->load(dir);
    EXPECT_TRUE(loaded.ok()) << loaded;
    EXPECT_EQ(run.trainer->completedSteps(), 3u);
  });
  for (int64_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(resumed.losses[rank],
              std::vector<double>(full.losses[rank].begin() + 3,
                                  full.losses[rank].end()));
    EXPECT_EQ(resumed.weights[rank], full.weights[rank]);
  }

  TrainingPlanSpec one = two;
  one.mesh = {{"dp", 1}, {"tp", 1}, {"pp", 1}};
  auto single = Run::create(one);
  ASSERT_TRUE(single->trainer->load(dir).ok());
  std::vector<double> losses = single->losses(2);
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_TRUE(close(losses[i], full.losses[0][3 + i]))
        << losses[i] << " vs " << full.losses[0][3 + i];
}

/// A plan whose only persistent tensor, "w" [4, 6], is cut over the axes
/// of `split` (rows, columns) of `mesh`, and whose step does nothing.
std::string slicedPlan(std::vector<std::pair<std::string, uint32_t>> mesh,
                       std::vector<std::vector<std::string>> split,
                       bool extra = false) {
  using triad::plan::DType;
  tests::PlanBuilder b;
  b.mesh = mesh;
  b.vocab = 32;
  b.batch = 4;
  std::vector<int64_t> local = {4, 6};
  for (size_t d = 0; d < 2; ++d)
    for (const std::string &axis : split[d])
      for (const auto &[name, size] : mesh)
        if (name == axis)
          local[d] /= size;
  uint32_t w = b.value(DType::F32, local);
  b.splitPersistent("w", w, triad::plan::Role::Parameter,
                    triad::plan::InitKind::Normal, 0.5, split);
  if (extra) {
    uint32_t v = b.value(DType::F32, {2});
    b.persistent("v", v, triad::plan::Role::State,
                 triad::plan::InitKind::Zeros);
  }
  int64_t dp = 1;
  for (const auto &[name, size] : mesh)
    if (name == "dp")
      dp = size;
  uint32_t tokens = b.value(DType::I32, {4 / dp, b.seq}),
           labels = b.value(DType::I32, {4 / dp, b.seq}),
           x = b.value(DType::F32, {});
  uint32_t f =
      b.function("f", {tokens, labels},
                 {triad::plan::ArgKind::Tokens, triad::plan::ArgKind::Labels});
  b.instr(triad::plan::OpCode::Fill, {}, {x}, {}, {0.0});
  b.call(f);
  return b.build();
}

/// The slice of w = 100 + global index that `run`'s rank holds.
std::vector<float> expectedSlice(Run &run) {
  const triad::plan::Program &program = run.trainer->executor().programOf();
  const triad::plan::Persistent &w = *program.persistent()->Get(0);
  std::vector<int64_t> offsets = run.trainer->executor().sliceBox(w).offsets;
  const auto *shape = program.values()->Get(w.value())->shape();
  std::vector<float> values;
  for (int64_t r = 0; r < shape->Get(0); ++r)
    for (int64_t c = 0; c < shape->Get(1); ++c)
      values.push_back(
          static_cast<float>(100 + (offsets[0] + r) * 6 + offsets[1] + c));
  return values;
}

/// Runs `body` on every rank of the mesh of `planBytes`, as threads.
void onRanks(const std::string &planBytes,
             const std::function<void(int64_t, Run &)> &body) {
  auto plan = loadPlanFromBytes(planBytes, "sliced.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  tests::runRanks(plan->root(),
                  [&](int64_t rank, tests::ThreadCommunicator &comm) {
                    auto run = Run::create(planBytes, 32, 7, &comm);
                    body(rank, *run);
                  });
}

// Reshard on load: w saved as row halves by two ranks loads whole on one
// rank, as row quarters on four, and as column halves replicated over dp
// on a 2 x 2 mesh, whose save in turn stores each column half once.
TEST(MultiRankTrainer, ReshardOnLoad) {
  std::string dir = freshDir("reshard");
  std::string rows2 = slicedPlan({{"dp", 2}}, {{"dp"}, {}});
  onRanks(rows2, [&](int64_t, auto &run) {
    absl::Status written =
        run.trainer->executor().writePersistent("w", expectedSlice(run));
    ASSERT_TRUE(written.ok()) << written;
    run.losses(1);
    absl::Status saved = run.trainer->save(dir);
    EXPECT_TRUE(saved.ok()) << saved;
  });

  auto loadAndCheck = [&](const std::string &plan) {
    std::atomic<int> ranks = 0;
    onRanks(plan, [&](int64_t, auto &run) {
      absl::Status loaded = run.trainer->load(dir);
      ASSERT_TRUE(loaded.ok()) << loaded;
      EXPECT_EQ(run.weights("w"), expectedSlice(run));
      EXPECT_EQ(run.trainer->completedSteps(), 1u);
      ++ranks;
    });
    return ranks.load();
  };
  // Whole on one rank, row quarters on four, and columns over tp.
  EXPECT_EQ(loadAndCheck(slicedPlan({{"dp", 1}}, {{}, {}})), 1);
  EXPECT_EQ(loadAndCheck(slicedPlan({{"dp", 4}}, {{"dp"}, {}})), 4);
  std::string columns = slicedPlan({{"dp", 2}, {"tp", 2}}, {{}, {"tp"}});
  EXPECT_EQ(loadAndCheck(columns), 4);

  // Saved from the 2 x 2 mesh: the dp = 0 ranks (0 and 1) store the two
  // column halves, the replicas on ranks 2 and 3 nothing.
  std::string dir2 = freshDir("reshard-columns");
  onRanks(columns, [&](int64_t, auto &run) {
    ASSERT_TRUE(run.trainer->load(dir).ok());
    absl::Status saved = run.trainer->save(dir2);
    EXPECT_TRUE(saved.ok()) << saved;
  });
  for (int rank = 0; rank < 4; ++rank) {
    auto shard =
        SafetensorsFile::open(checkpointStepDir(dir2, 1) + "/rank-0000" +
                              std::to_string(rank) + ".safetensors");
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->entries().size(), rank < 2 ? 1u : 0u) << rank;
  }
  dir = dir2;
  EXPECT_EQ(loadAndCheck(slicedPlan({{"dp", 1}}, {{}, {}})), 1);
  EXPECT_EQ(loadAndCheck(rows2), 2);

  // A tensor the checkpoint lacks fails the load on every rank, and
  // changes nothing.
  onRanks(slicedPlan({{"dp", 2}}, {{"dp"}, {}}, /*extra=*/true),
          [&](int64_t, auto &run) {
            std::vector<float> before = run.weights("w");
            absl::Status loaded = run.trainer->load(dir);
            EXPECT_NE(loaded.message().find(
                          "does not fit this plan: the checkpoint has no "
                          "tensor 'v'"),
                      std::string::npos)
                << loaded;
            EXPECT_EQ(run.weights("w"), before);
            EXPECT_EQ(run.trainer->completedSteps(), 0u);
          });
}

// A rank that cannot save makes every rank's save fail, and `latest` stays.
TEST(MultiRankTrainer, AFailedShardFailsEveryRank) {
  std::string dir = freshDir("failed-shard");
  std::string rows2 = slicedPlan({{"dp", 2}}, {{"dp"}, {}});
  onRanks(rows2, [&](int64_t, auto &run) {
    run.losses(1);
    EXPECT_TRUE(run.trainer->save(dir).ok());
  });
  // Rank 1's shard of step 2 cannot be written: a folder is in its way.
  std::string blocker = checkpointStepDir(dir, 2) + "/rank-00001.safetensors";
  ASSERT_EQ(std::system(("mkdir -p '" + blocker + "'").c_str()), 0);
  std::vector<std::string> errors(2);
  onRanks(rows2, [&](int64_t rank, auto &run) {
    run.losses(2);
    errors[rank] = std::string(run.trainer->save(dir).message());
  });
  EXPECT_NE(errors[1], "");
  EXPECT_EQ(errors[0], "rank 1 failed (see its error)");
  auto reader = CheckpointReader::open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->info().step, 1u);
}

} // namespace
