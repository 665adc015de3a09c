//===- Trainer.h - optimizer steps of a plan on a token corpus ---*- C++
//-*-===//
//
// The training loop of one rank, without the tool around it: a trainer owns
// the executor (on the CPU or a GPU) of its pipeline rank and a sampler over a
// token corpus, and runs optimizer steps by walking the program's step
// (Program.step): before each call it fills the function's Tokens and Labels
// arguments with the call's microbatch, then it runs the function and keeps its
// named results. Transfers and collectives a call starts may complete in a
// later call (a pipeline rank posts its receive and forwards the previous
// microbatch while it arrives); the step ends once all have
// (Executor::finish).
//
// Steps count from 1, as the optimizer's own counter does: the apply step
// increments the state "optimizer.step" from 0 and schedules the learning
// rate with the new value, so step N of the trainer is the optimizer's step
// N (unless loss scaling skipped some). The sampler and the dropout masks
// are keyed by the same number: step N reads the samples of (seed, N), the
// global sample indices of microbatch m on data-parallel rank r being
// r * (batch / dp) + m * microbatchSamples + [0, microbatchSamples).
//
// A checkpoint holds every Parameter and State persistent tensor (never the
// accumulators, which every step resets), the step, the seed and the
// samples consumed; a run resumed from it continues with exactly the losses
// of an uninterrupted one.
//
// Under a mesh of several ranks (TrainerOptions::communicator), the rank's
// place in the mesh decides its program (its "pp" coordinate), its slices
// of the persistent tensors and its data: its "dp" coordinate is the
// data-parallel rank above, the size of the "dp" axis the replica count.
// The plan makes the logged results ("loss", "grad_norm") global itself
// (all-reduced inside the step), so every rank reports the same values.
// Every rank saves the slices it holds into its own shard of the
// checkpoint, a replicated slice being saved once (by the replica whose
// coordinates are 0 on every axis that neither splits the tensor nor is
// "pp"); rank 0 commits once every shard is written. Loading reads each
// rank's slices from whatever slices the checkpoint holds, so a checkpoint
// saved under one mesh loads under another.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TRAIN_TRAINER_H
#define TRIAD_RUNTIME_TRAIN_TRAINER_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Comm.h"
#include "runtime/data/TokenFile.h"
#include "runtime/executor/Backends.h"
#include "runtime/plan/Plan.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace triad::rt {

struct TrainerOptions {
  /// Initializes the parameters and draws the samples and dropout masks.
  uint64_t seed = 1234;
  /// Replaces the plan's peak learning rate (see ExecutorOptions).
  std::optional<double> learningRate;
  /// The run's last optimizer step, where a schedule that decays over the
  /// run ends (see ExecutorOptions); a plan with such a schedule needs it.
  std::optional<int64_t> runSteps;
  /// Record trace events (StepResult::events) for the steps from
  /// traceFirstStep to traceLastStep: the step, its calls, each
  /// instruction and the idle time. Other steps record none, so that a
  /// trace of a long run stays bounded.
  bool trace = false;
  uint64_t traceFirstStep = 1, traceLastStep = 3;
  /// With trace, on a backend that runs asynchronously (a GPU): each
  /// instruction's span on the device too, without waiting for it
  /// (ExecutorOptions::deviceTimes).
  bool deviceTimes = false;
  /// The job's ranks (not owned; it must outlive the trainer), or none for
  /// a world of one rank. See ExecutorOptions::communicator.
  Communicator *communicator = nullptr;
  /// See ExecutorOptions::overlapCollectives.
  bool overlapCollectives = true;
  /// The backend the steps run on (the CPU by default).
  DeviceOptions device;
  /// Where the trainer and its executor record the step, call and
  /// instruction they are in and what they wait for (not owned; it must
  /// outlive the trainer), for a Watchdog; none by default.
  Progress *progress = nullptr;
};

/// A span of time for a timeline (Chrome trace "complete" event).
struct TraceEvent {
  std::string name;
  /// "step", "call" or "instruction" (a collective or transfer completing
  /// in the background has a second one, "wait <op>", for the time waited,
  /// in the call that needs its buffers or at the end of the step). Under
  /// a pipeline a call is named by its schedule action ("F0.1
  /// forward_s0_m1") and its category is the action's: "forward",
  /// "backward", "transfer" or "optimizer"; "idle" spans the transfer calls
  /// between two compute calls (which post their transfers and return:
  /// the waits for them are the "wait Send" and "wait Recv" events).
  std::string category;
  /// Microseconds since the trainer was created.
  double beginMicros = 0, durationMicros = 0;
  /// An instruction's operands (Executor::describe); for a wait, the call
  /// and instruction that started what it waited for ("recv-act1.2<0,
  /// instruction 0"); empty otherwise.
  std::string detail = {};
  /// The model layer an instruction comes from ("transformer 3"), when the
  /// plan names it; empty otherwise.
  std::string layer = {};
  /// An instruction's span as the device ran it (category "device", or
  /// "device communication" for the stream of the collectives and
  /// transfers; TrainerOptions::deviceTimes) lies outside its call's span:
  /// the call it ran in and its index there. Empty and -1 otherwise.
  std::string call = {};
  int64_t instruction = -1;
};

struct StepResult {
  static constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();
  uint64_t step = 0;
  /// The step's named results "loss", "grad_norm", "lr" and "skipped"
  /// (NaN, or false, when the plan does not return one).
  double loss = kMissing, gradNorm = kMissing, lr = kMissing;
  bool skipped = false;
  /// Every named result of the step's calls; a later call's result
  /// replaces an earlier one of the same name.
  std::map<std::string, double> results;
  /// Tokens the step trained on over all ranks: batch * seq.
  int64_t tokens = 0;
  /// Wall-clock time of the step.
  double seconds = 0;
  /// Under a pipeline: the part of `seconds` this rank spent waiting for
  /// its peers: in transfer calls between its compute calls, and waiting
  /// for transfers in the other calls and at the end of the step; 0
  /// otherwise.
  double idleSeconds = 0;
  /// The host's side of the step (Executor::HostWork): the time its calls
  /// spent on the host itself, not waiting for the device's queued work;
  /// the time it waited for the device, in calls that read results and at
  /// the step's end (the final synchronization); and the device work it
  /// issued (kernel launches, cuBLASLt products, asynchronous copies and
  /// memsets, NCCL calls; 0 on the CPU).
  double hostSeconds = 0, syncSeconds = 0;
  int64_t launches = 0;
  /// With TrainerOptions::trace: the step, each call and (early steps)
  /// each instruction.
  std::vector<TraceEvent> events;
};

class Trainer {
public:
  /// A trainer for `plan` on `data`, which must outlive it (open `data`
  /// with the plan's vocabulary). Fails when the plan has no step or no
  /// program for this rank's pipeline rank, when its mesh splits the
  /// pipeline (no runtime support yet), or when the corpus is shorter than
  /// one sample.
  static absl::StatusOr<Trainer> create(const LoadedPlan &plan,
                                        const TokenFile &data,
                                        const TrainerOptions &options);
  /// A trainer without training data, to evaluate or sample: step() fails.
  static absl::StatusOr<Trainer> create(const LoadedPlan &plan,
                                        const TrainerOptions &options);

  /// The next-token logits after `context` (token ids, the last seq of
  /// them used): the plan's logits_step on a batch whose first sample is
  /// the context (right-padded; a causal model's last position sees only
  /// what precedes it), dropout off; one value per token of the plan's
  /// vocabulary. Fails on a plan without logits_step (a pipeline, or the
  /// vocabulary split over tensor parallelism). Every rank calls it.
  absl::StatusOr<std::vector<float>>
  nextTokenLogits(const std::vector<int32_t> &context);

  /// Runs optimizer step completedSteps() + 1.
  absl::StatusOr<StepResult> step();

  /// The model's loss on held-out data: the mean over the non-ignored
  /// tokens of `batches` global batches of `data` (batch b draws the
  /// windows the training sampler would draw for step b + 1 of `data`, so
  /// the same on every mesh). It runs the forward pass alone, dropout off:
  /// the plan's eval_step for each microbatch step, or under a pipeline the
  /// schedule's forward and activation-transfer calls. It leaves the
  /// parameters and the optimizer's state as they are, and reduces the loss
  /// over the ranks. Every rank calls it.
  struct Evaluation {
    double loss = StepResult::kMissing;
    int64_t tokens = 0;
    double seconds = 0;
  };
  absl::StatusOr<Evaluation> evaluate(const TokenFile &data, int64_t batches);

  /// Steps run so far (or restored by load).
  uint64_t completedSteps() const { return completed; }
  /// Samples of the corpus consumed so far (the data position).
  uint64_t samplesConsumed() const { return consumed; }
  uint64_t seed() const { return options.seed; }

  /// Saves every parameter and optimizer state after completedSteps() into
  /// checkpoint folder `dir` (DIR/step-N, then DIR/latest; atomic). Every
  /// rank calls it; it returns OK on every rank or an error on every rank.
  /// Parameters holding a NaN or an infinity are not saved (an update can
  /// overflow them after a finite loss): FailedPrecondition naming one.
  absl::Status save(const std::string &dir);

  /// The first of this rank's parameters holding a NaN or an infinity, in
  /// the plan's order, or "" when all are finite.
  std::string firstNonFiniteParameter();

  /// Restores the latest checkpoint of `dir` (or the one of `step`): this
  /// rank's slices of every parameter and state of its program, the step and
  /// the data position. Refuses (and changes nothing) when a tensor is missing,
  /// differs in global shape, or the checkpoint holds a tensor the plan does
  /// not have, or was saved with another seed. Every rank calls it; it returns
  /// OK on every rank or an error on every rank.
  absl::Status load(const std::string &dir,
                    std::optional<uint64_t> step = std::nullopt);

  /// Starts from the weights of the latest checkpoint of `dir` (fine-tuning):
  /// its parameters and their f32 master copies only. The optimizer's state,
  /// the step, the data position and the loss scale start anew, and the
  /// checkpoint's seed need not be this run's. Refuses as load() does
  /// otherwise. Every rank calls it.
  absl::Status initFrom(const std::string &dir);

  Executor &executor() { return *exec; }
  /// This rank's data-parallel index and the replica count.
  int64_t dataParallelRank() const { return dpRank; }
  int64_t dataParallelSize() const { return dpSize; }

private:
  /// A call of the step as the trace and the idle time see it: under a
  /// pipeline its schedule action's token and category ("forward",
  /// "backward", "transfer", "optimizer"); otherwise "call" and no token.
  struct CallLabel {
    std::string token;
    std::string category = "call";
  };
  static std::vector<CallLabel> labelCalls(const plan::Program &program);

  static absl::StatusOr<Trainer> createWith(const LoadedPlan &plan,
                                            const TokenFile *data,
                                            const TrainerOptions &options);
  Trainer(const LoadedPlan &plan, Sampler sampler,
          std::unique_ptr<Executor> exec,
          std::unique_ptr<Communicator> ownCommunicator,
          const TrainerOptions &options,
          std::optional<int32_t> prefixIgnoreIndex);

  /// Whether this rank is the one that saves its slice of `p`.
  bool savesSlice(const plan::Persistent &p) const;
  /// Reads this rank's slices from the latest checkpoint of `dir` into
  /// `restored` (tensor name, values), checking that it fits the plan.
  /// Reads this rank's slices of a checkpoint into `restored`: every
  /// checkpointed tensor, or with `weightsOnly` the parameters and their
  /// master copies (and then whatever seed it was saved with).
  absl::StatusOr<CheckpointInfo>
  read(const std::string &dir,
       std::vector<std::pair<std::string, std::vector<float>>> &restored,
       std::optional<uint64_t> step, bool weightsOnly = false);

  const LoadedPlan *plan;
  Sampler sampler;
  /// The data arguments of `call` (tokens, labels, prefix lengths, as its
  /// function takes them) for `step`, drawn by `from` for this replica's
  /// share of the global batch.
  std::vector<HostTensor> callArguments(const Sampler &from, uint64_t step,
                                        const plan::Call &call);
  std::unique_ptr<Executor> exec;
  /// options.communicator, or a world of one rank.
  std::unique_ptr<Communicator> ownCommunicator;
  Communicator *communicator;
  TrainerOptions options;
  uint64_t completed = 0, consumed = 0;
  /// The data-parallel rank and replica count.
  int64_t dpRank = 0, dpSize = 1;
  int64_t epochNanos = 0;
  /// One per call of the step, computed once.
  std::vector<CallLabel> callLabels;
  /// For a prefix LM (a plan whose functions take prefix lengths): the
  /// ignore index that hides the labels inside each sample's prefix.
  std::optional<int32_t> prefixIgnoreIndex;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_TRAIN_TRAINER_H
