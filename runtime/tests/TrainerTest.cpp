//===- TrainerTest.cpp - optimizer steps, checkpoints and resuming --------===//
//
// The trainer on a small language-model plan (tests/PlanBuilder.h): the
// same seed gives the same losses; accumulating two microbatches matches
// one microbatch of both; a run resumed from a checkpoint continues with
// exactly the losses and weights of an uninterrupted one; checkpoints of
// another model are refused, naming the tensor; a save killed at any moment
// leaves a checkpoint that loads.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Trainer.h"

#include "runtime/init/Philox.h"
#include "runtime/support/Files.h"
#include "runtime/tests/PlanBuilder.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <memory>
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
                                     uint64_t seed = 7) {
    auto run = std::make_unique<Run>();
    auto plan =
        loadPlanFromBytes(tests::buildTrainingPlan(spec), "training.plan");
    EXPECT_TRUE(plan.ok()) << plan.status();
    run->plan = std::move(*plan);
    auto data = TokenFile::open(corpusPath(), TokenWidth::U16, spec.vocab);
    EXPECT_TRUE(data.ok()) << data.status();
    run->data = std::make_unique<TokenFile>(std::move(*data));
    TrainerOptions options;
    options.seed = seed;
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
    const triad::plan::Program &program = *plan.root().programs()->Get(0);
    for (const triad::plan::Persistent *p : *program.persistent())
      if (p->name()->str() == name) {
        int64_t count = 1;
        for (int64_t size : *program.values()->Get(p->value())->shape())
          count *= size;
        float *data = *trainer->executor().persistent(name);
        return std::vector<float>(data, data + count);
      }
    ADD_FAILURE() << "no tensor " << name;
    return {};
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
  options.traceInstructionSteps = 1;
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
  auto second = trainer->step();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->events.size(), 5u);
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
  std::string bytes = tests::buildTrainingPlan({});
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
    auto plan = loadPlanFromBytes(copy, "corrupt.plan");
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

} // namespace
