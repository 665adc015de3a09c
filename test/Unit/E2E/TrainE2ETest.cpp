//===- TrainE2ETest.cpp - compiled plans train like the interpreter -------===//
//
// The whole path on the 1x1x1 mesh: the tiny preset through
// --triad-train-pipeline, exported as a plan file, loaded and trained by
// the runtime's trainer (what triad-run does) on byte tokens of the test
// corpus (test/e2e/Inputs/corpus.md, a copy of the README frozen so that
// README edits do not move these numbers), against the reference
// interpreter running the autodiff functions on the very same samples from
// the same initial weights: the losses agree to 1e-5 relative over 10 steps. A
// run resumed from a checkpoint continues with exactly the uninterrupted
// losses.
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/Passes.h"
#include "triad/Interpreter/Interpreter.h"
#include "triad/Models/ModelBuilder.h"
#include "triad/Pipelines/TrainPipeline.h"
#include "triad/Registration.h"
#include "triad/Target/Plan.h"

#include "runtime/support/Files.h"
#include "runtime/train/Trainer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

using namespace triad;

namespace {

constexpr uint64_t kSeed = 77;
constexpr int kSteps = 10;

class TrainE2E : public ::testing::Test {
protected:
  TrainE2E() {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    dir = std::filesystem::temp_directory_path() /
          ("triad-e2e-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
  }
  ~TrainE2E() override { std::filesystem::remove_all(dir); }

  ModelConfig config() {
    llvm::Expected<ModelConfig> tiny = getPreset("tiny");
    EXPECT_TRUE(static_cast<bool>(tiny));
    tiny->batch = 4;
    tiny->seq = 32;
    tiny->maxPositions = 32;
    return *tiny;
  }

  /// The test corpus (test/e2e/Inputs/corpus.md) as one uint16 token per
  /// byte.
  std::string writeCorpus() {
    auto buffer = llvm::MemoryBuffer::getFile(TRIAD_SOURCE_DIR
                                              "/test/e2e/Inputs/corpus.md");
    EXPECT_TRUE(static_cast<bool>(buffer));
    std::string bytes;
    for (unsigned char c : (*buffer)->getBuffer()) {
      bytes.push_back(static_cast<char>(c));
      bytes.push_back(0);
    }
    std::string path = (dir / "corpus.bin").string();
    EXPECT_TRUE(rt::writeFileAtomically(path, bytes).ok());
    return path;
  }

  std::string compilePlan(mlir::ModuleOp module) {
    mlir::PassManager pm(&context);
    TrainPipelineOptions options;
    buildTrainPipeline(pm, options);
    EXPECT_TRUE(mlir::succeeded(pm.run(module)));
    mlir::FailureOr<std::string> bytes = exportPlan(module);
    EXPECT_TRUE(mlir::succeeded(bytes));
    return *bytes;
  }

  mlir::MLIRContext context;
  std::filesystem::path dir;
};

TEST_F(TrainE2E, RuntimeLossesEqualTheInterpreters) {
  ModelConfig model = config();
  std::string corpusPath = writeCorpus();
  absl::StatusOr<rt::TokenFile> corpus =
      rt::TokenFile::open(corpusPath, rt::TokenWidth::U16, model.vocab);
  ASSERT_TRUE(corpus.ok()) << corpus.status();

  // The runtime: the compiled plan, trained by the trainer.
  auto compiled = buildModel(context, model);
  absl::StatusOr<rt::LoadedPlan> plan =
      rt::loadPlanFromBytes(compilePlan(*compiled), "tiny");
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The plan's schedule decays over the run (the default decay-steps):
  // to its floor at the run's last step, kSteps, in both.
  rt::TrainerOptions options;
  options.seed = kSeed;
  options.runSteps = kSteps;
  absl::StatusOr<rt::Trainer> trainer =
      rt::Trainer::create(*plan, *corpus, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();

  // The reference: the autodiff functions in the interpreter, on the
  // samples the runtime's sampler draws for each step.
  auto reference = buildModel(context, model);
  mlir::PassManager pm(&context);
  pm.addPass(createAutodiff());
  ASSERT_TRUE(mlir::succeeded(pm.run(*reference)));
  interp::InterpreterOptions referenceOptions{kSeed, 0, false};
  referenceOptions.runSteps = kSteps;
  interp::Interpreter interpreter(*reference, referenceOptions);
  interpreter.initializeParameters();
  absl::StatusOr<rt::Sampler> sampler =
      rt::Sampler::create(*corpus, model.seq, kSeed);
  ASSERT_TRUE(sampler.ok());

  std::vector<double> losses, lrs;
  for (int step = 1; step <= kSteps; ++step) {
    absl::StatusOr<rt::StepResult> result = trainer->step();
    ASSERT_TRUE(result.ok()) << result.status();
    losses.push_back(result->loss);

    std::vector<int32_t> tokens(model.batch * model.seq),
        labels(model.batch * model.seq);
    sampler->fill(step, 0, model.batch, tokens.data(), labels.data());
    interp::Tensor x({model.batch, model.seq}), y({model.batch, model.seq});
    for (size_t i = 0; i < tokens.size(); ++i) {
      x.data[i] = tokens[i];
      y.data[i] = labels[i];
    }
    auto outputs = interpreter.call("microbatch_step", {x, y});
    ASSERT_TRUE(mlir::succeeded(outputs));
    std::vector<interp::Tensor> grads(outputs->begin() + 1, outputs->end());
    auto applied = interpreter.call("apply_step", grads);
    ASSERT_TRUE(mlir::succeeded(applied));

    double expected = (*outputs)[0].data[0];
    EXPECT_NEAR(result->loss, expected, 1e-5 * std::abs(expected))
        << "step " << step;
    double expectedNorm = (*applied)[0].data[0];
    EXPECT_NEAR(result->gradNorm, expectedNorm, 1e-4 * expectedNorm)
        << "step " << step;
    EXPECT_NEAR(result->lr, (*applied)[1].data[0], 1e-9) << "step " << step;
    lrs.push_back(result->lr);
  }
  // The cosine decays from the peak to the floor (0) at the run's last
  // step.
  EXPECT_NEAR(lrs.front(), 1.5e-4 * (1 + std::cos(M_PI / kSteps)), 1e-9);
  EXPECT_EQ(lrs.back(), 0.0);
  EXPECT_TRUE(std::is_sorted(lrs.rbegin(), lrs.rend()));
  // Training starts near the uniform ln(256) (how near depends on the
  // corpus's text) and the loss falls.
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.5);
  EXPECT_LT(losses.back(), losses.front() - 0.1);
  EXPECT_EQ(trainer->completedSteps(), static_cast<uint64_t>(kSteps));
}

TEST_F(TrainE2E, ResumingFromACheckpointGivesTheUninterruptedLosses) {
  ModelConfig model = config();
  std::string corpusPath = writeCorpus();
  absl::StatusOr<rt::TokenFile> corpus =
      rt::TokenFile::open(corpusPath, rt::TokenWidth::U16, model.vocab);
  ASSERT_TRUE(corpus.ok());
  auto module = buildModel(context, model);
  absl::StatusOr<rt::LoadedPlan> plan =
      rt::loadPlanFromBytes(compilePlan(*module), "tiny");
  ASSERT_TRUE(plan.ok());
  // Both runs end at step 6: the resumed one follows the same schedule,
  // which decays over the run.
  rt::TrainerOptions options;
  options.seed = kSeed;
  options.runSteps = 6;

  std::vector<double> uninterrupted;
  {
    absl::StatusOr<rt::Trainer> trainer =
        rt::Trainer::create(*plan, *corpus, options);
    ASSERT_TRUE(trainer.ok());
    for (int step = 1; step <= 6; ++step) {
      absl::StatusOr<rt::StepResult> result = trainer->step();
      ASSERT_TRUE(result.ok());
      uninterrupted.push_back(result->loss);
      if (step == 3) {
        ASSERT_TRUE(trainer->save((dir / "ckpt").string()).ok());
      }
    }
  }
  absl::StatusOr<rt::Trainer> resumed =
      rt::Trainer::create(*plan, *corpus, options);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed->load((dir / "ckpt").string()).ok());
  EXPECT_EQ(resumed->completedSteps(), 3u);
  for (int step = 4; step <= 6; ++step) {
    absl::StatusOr<rt::StepResult> result = resumed->step();
    ASSERT_TRUE(result.ok());
    EXPECT_EQ(result->loss, uninterrupted[step - 1]) << "step " << step;
  }
}

} // namespace
