//===- Executor.h - runs a verified plan program on one backend --*- C++
//-*-===//
//
// What every backend's executor shares: it runs the program of one pipeline
// rank for one world rank, with one arena holding every value of the
// program at the offsets the plan gives (host memory on the CPU, device
// memory on a GPU). Creating one checks the plan against the communicator
// (every collective's group, every transfer's peer) and initializes the
// persistent tensors from their init specs at their global indices, so a
// shard starts from the single-device values. Running a function copies
// its arguments in, walks its body instruction by instruction, starts
// collectives and transfers (letting the following instructions overlap
// them until one touches their buffers) and copies its results out.
//
// What a call starts may outlive it: a pipeline's receive returns once
// posted, and the computation that reads the activation, in a later call,
// waits for it. Each collective or transfer in flight holds the arena bytes
// it reads and writes, fixed when it started (a call on another microbatch
// slot touches other bytes of a slotted value), and whatever touches them
// first waits for it: an instruction, an argument copied in, a result
// copied out. finish() waits for all of them (the trainer calls it at the
// end of each step), as do reading and writing a persistent tensor, a
// failing call and the backends' destructors.
//
// A backend supplies the memory and the instructions: CpuExecutor
// (executor/CpuExecutor.h) and, where the CUDA toolkit is found,
// CudaExecutor (executor/CudaExecutor.h); createExecutor
// (executor/Backends.h) picks one by name.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_EXECUTOR_EXECUTOR_H
#define TRIAD_RUNTIME_EXECUTOR_EXECUTOR_H

#include "runtime/comm/Collectives.h"
#include "runtime/comm/Comm.h"
#include "runtime/executor/CallRecordings.h"
#include "runtime/init/Philox.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/plan/KernelContract.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/Plan.h"
#include "runtime/support/Watchdog.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace triad::rt {

/// A host tensor handed to or returned by a function: f32 or i32 data.
struct HostTensor {
  plan::DType dtype = plan::DType::F32;
  std::vector<int64_t> shape;
  std::vector<float> floats; // F32
  std::vector<int32_t> ints; // I32
};

/// What a run may change about the plan it executes.
struct ExecutorOptions {
  /// Replaces the peak learning rate of every LrSchedule; its floor scales
  /// by the same ratio (so the schedule keeps its shape).
  std::optional<double> peakLearningRate;
  /// The run's last optimizer step (triad-run's --steps): where a
  /// learning-rate schedule that decays over the run (the plan's default,
  /// decay -1) reaches its floor. Such a plan needs it.
  std::optional<int64_t> runSteps;
  /// The job's ranks (not owned; it must outlive the executor): the
  /// executor is its world rank, holds that rank's slices of the persistent
  /// tensors and runs the plan's collectives and transfers through it.
  /// Without one, the executor is world rank 0 alone: a plan whose
  /// collectives run over groups of more than one rank, or that transfers
  /// between pipeline ranks, is then refused at creation.
  Communicator *communicator = nullptr;
  /// Starts each collective and transfer (Send, Recv) and lets the
  /// following instructions, of this call and later ones, run until the
  /// first one that reads or writes its output, or writes its input,
  /// overlapping communication with computation (see finish); false: every
  /// collective and transfer completes before the next instruction.
  bool overlapCollectives = true;
  /// Where the executor records each instruction it runs and each
  /// collective or transfer it waits for (not owned; it must outlive the
  /// executor), for a Watchdog; none by default.
  Progress *progress = nullptr;
  /// Where instructions are timed (run's `times`): by default each one is
  /// waited for, so that its time is its own. With `deviceTimes`, a backend
  /// whose work runs asynchronously (a GPU) instead times each one on the
  /// device (events around its work, on the stream it runs on) and waits
  /// for nothing more than an untimed call does: kernels and collectives
  /// then overlap as they do untimed, and finish appends their device spans
  /// (InstructionTime::onDevice). The CPU, which runs each instruction
  /// when it is issued, ignores it.
  bool deviceTimes = false;
};

/// When one instruction of a run started and ended (steady clock). A
/// collective or transfer started in the background has a second entry,
/// `wait`, for the time the run waited for it to complete (in the call
/// that started it, a later one, or finish).
struct InstructionTime {
  plan::OpCode op;
  int64_t beginNanos, endNanos;
  bool wait = false;
  /// The instruction (in the executor's plan), or null for a wait.
  const plan::Instr *instr = nullptr;
  /// Its index in the function's body (of the instruction waited for, for
  /// a wait).
  size_t index = 0;
  /// The call the instruction ran in (for a wait, the call that started
  /// what it waited for): its function and microbatch.
  const plan::Function *function = nullptr;
  uint32_t microbatch = 0;
  /// The instruction's span as the device ran it (ExecutorOptions::
  /// deviceTimes), on the host's clock; the entry without it is then the
  /// host's time to issue it. `communication`: on the stream that runs the
  /// collectives and transfers, not the compute stream.
  bool onDevice = false, communication = false;
};

/// The values of a program's arena seen as shapes (shared by the backends).
std::vector<int64_t> shapeOf(const plan::Value &value);
int64_t elementCount(const std::vector<int64_t> &shape);
/// Row-major strides of `shape`, in elements.
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape);

/// Calls `visit(linear, coordinates)` for every element of `shape`, in
/// row-major order.
template <typename Fn>
void forEachIndex(const std::vector<int64_t> &shape, Fn visit) {
  int64_t total = elementCount(shape);
  std::vector<int64_t> coords(shape.size(), 0);
  for (int64_t linear = 0; linear < total; ++linear) {
    visit(linear, coords);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++coords[d] < shape[d])
        break;
      coords[d] = 0;
    }
  }
}

/// Whether `op` is a collective (AllReduce, AllGather, ReduceScatter,
/// AllToAll), or a transfer between pipeline ranks (Send, Recv).
inline bool isCollective(plan::OpCode op) {
  return op == plan::OpCode::AllReduce || op == plan::OpCode::AllGather ||
         op == plan::OpCode::ReduceScatter || op == plan::OpCode::AllToAll;
}
inline bool isTransfer(plan::OpCode op) {
  return op == plan::OpCode::Send || op == plan::OpCode::Recv;
}

/// The activation of a plan's kind number (Activation, ActivationGrad,
/// Gated).
cpu::Activation activationOf(int64_t kind);

class Executor {
public:
  virtual ~Executor();
  Executor(Executor &&) = default;
  Executor &operator=(Executor &&) = delete;
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Runs function `name`: copies `args` into its argument values, runs its
  /// body (dropout masks of training step `step`, for the step's
  /// `microbatch`, on copy `slot` of its slotted values) and returns its
  /// results. With `times`, appends the time of every instruction to it.
  /// Collectives and transfers it starts may still be in flight when it
  /// returns (see finish); when an instruction or a wait fails, it returns
  /// once all have ended.
  absl::StatusOr<std::vector<HostTensor>>
  run(const std::string &name, const std::vector<HostTensor> &args,
      uint64_t step = 0, std::vector<InstructionTime> *times = nullptr,
      uint32_t microbatch = 0, uint32_t slot = 0);

  /// The index of function `name` in the program, or none.
  std::optional<uint32_t> functionIndex(std::string_view name) const;

  /// The same for the function at `index` in the program.
  absl::StatusOr<std::vector<HostTensor>>
  run(uint32_t index, const std::vector<HostTensor> &args, uint64_t step = 0,
      std::vector<InstructionTime> *times = nullptr, uint32_t microbatch = 0,
      uint32_t slot = 0);

  /// Waits for every collective and transfer still in flight and for the
  /// work the backend has enqueued (a GPU's stream), and returns the first
  /// error, naming the instruction and the call that started what failed.
  /// With `times`, appends its waits to it, and the device spans of the
  /// instructions timed on the device since the last finish
  /// (ExecutorOptions::deviceTimes).
  absl::Status finish(std::vector<InstructionTime> *times = nullptr);

  /// How long this executor has waited for transfers (Send, Recv) to
  /// complete, in all: a pipeline rank waiting for its peers.
  int64_t transferWaitNanos() const { return transferWaiting; }

  /// What the host has spent on this executor's calls, in all since it was
  /// created (the trainer reports each step's share, as the differences
  /// across the step).
  struct HostWork {
    /// Wall time inside run(), less the time it waited there for the
    /// device's queued work (`syncNanos`): the host's own time, preparing
    /// and enqueueing the instructions (and waiting for collectives and
    /// transfers). On the CPU, where nothing is queued, all of run().
    int64_t callNanos = 0;
    /// Wall time waiting for the device: in run() before a call's results
    /// are read (or each timed instruction ends), and all of finish(), the
    /// step's final wait for what is queued and in flight.
    int64_t syncNanos = 0;
    /// The device work issued by run() and finish(): kernel launches,
    /// cuBLASLt products, asynchronous copies and memsets, and NCCL calls
    /// (cuda::IssueCounts); 0 on the CPU.
    int64_t launches = 0;
  };
  const HostWork &hostWork() const { return work; }

  /// Where creating this executor spent its time, phase by phase in order
  /// (a GPU's context, the arena, drawing the initial values, copying them
  /// to the device), for the start-up line of triad-run.
  struct StartupPhase {
    std::string name;
    double seconds = 0;
  };
  const std::vector<StartupPhase> &startupPhases() const { return startup; }

  /// "cpu" or "cuda".
  virtual const char *backend() const = 0;

  /// In a backend that records calls and replays them (CUDA graphs): the
  /// calls that ran instruction by instruction instead, one line each,
  /// with the reason. Empty for a backend that records none.
  virtual std::vector<std::string> callsNotRecorded() const { return {}; }

  /// What `instr` (of this executor's program) works on, for a timeline:
  /// a Matmul's products ("8192x1024 . 1024x3072^T, batch 1", op(a) by
  /// op(b), ^T where an operand is read transposed), otherwise its
  /// operands' types and shapes ("f32[8,1024] f32[1024] -> f32[8,1024]").
  std::string describe(const plan::Instr &instr) const;

  const plan::Program &programOf() const { return *program; }
  /// While true, every Dropout keeps all of its input (evaluation, as
  /// inference runs: the forward pass of any function without dropping).
  void setEvaluating(bool on) { evaluating = on; }
  /// The world rank this executor runs, and its mesh coordinates.
  int64_t worldRank() const { return rank; }
  const MeshCoordinates &coordinates() const { return meshPosition; }
  /// The peak learning rate the steps run with (the plan's, or the one
  /// that replaces it); none when the plan has no schedule.
  std::optional<double> peakLearningRate() const;
  /// The plan's other training hyper-parameters, by name: warmup,
  /// decay_steps and min_lr (its learning-rate schedule), beta1, beta2,
  /// epsilon and weight_decay (AdamW; the largest decay of any tensor),
  /// clip_norm; those the plan has.
  std::map<std::string, double> hyperparameters() const;
  /// Where the slice of persistent `p` that this rank holds lies in the
  /// global tensor, and how much of it is inside (not padding).
  SliceBox sliceBox(const plan::Persistent &p) const;

  /// A copy of the f32 data of persistent tensor `name` (this rank's
  /// slice, padding included), for checkpoints and tests, once everything
  /// in flight has ended (finish).
  absl::StatusOr<std::vector<float>> readPersistent(const std::string &name);
  /// Replaces the data of persistent tensor `name` with `values` (its
  /// local element count exactly), once everything in flight has ended.
  absl::Status writePersistent(const std::string &name,
                               const std::vector<float> &values);

protected:
  Executor(const LoadedPlan &plan, const plan::Program &program,
           ExecutorOptions options)
      : plan(&plan), program(&program), options(options) {}

  /// The program of `pipelineRank`, after checking the options and that
  /// its values are of the types the `backend` ("CPU", "CUDA") runs: f32
  /// and i32, and bf16 and f16 where it keeps `sixteenBit` storage.
  static absl::StatusOr<const plan::Program *>
  findProgram(const LoadedPlan &plan, uint32_t pipelineRank,
              const ExecutorOptions &options, const char *backend,
              bool sixteenBit = false);
  /// Takes the communicator (or makes a world of one), places this rank on
  /// the mesh and checks every collective and transfer against it.
  absl::Status connect();
  /// How this rank's slice of persistent `p` starts: every element
  /// `fill`, or (`normal`) `stddev` times the standard normal deviate of
  /// its global index in the stream keyed by `key` (the run's seed and the
  /// init's stream); elements outside the tensor (a padded piece's) zero.
  /// Local element (c_0, .., c_n) is global index sum (c_d + offsets[d]) x
  /// globalStrides[d], inside the tensor where every c_d < inside[d].
  struct InitDraw {
    bool normal = false;
    float fill = 0;
    double stddev = 0;
    PhiloxKey key = {0, 0};
    std::vector<int64_t> local, offsets, globalStrides, inside;
  };
  absl::StatusOr<InitDraw> initDraw(const plan::Persistent &p) const;
  /// Writes the initial values of this rank's slice of `p` (its local
  /// element count) to `data`, host memory: its init drawn at each
  /// element's global index (with the run's seed), padding zero.
  absl::Status initialValues(const plan::Persistent &p, float *data) const;
  /// This rank's persistent tensors that its arena does not start with
  /// (zeros), in groups that start from the same values: the same init
  /// over the same slice of the same global shape (a 16-bit parameter and
  /// its f32 master copy, drawn from the parameter's stream), each group
  /// in the order of its first member. Its values are drawn once.
  std::vector<std::vector<const plan::Persistent *>> initGroups() const;
  /// The member of an init group that keeps f32 values (a master copy),
  /// into which its values are drawn, or null where every member is 16-bit.
  const plan::Persistent *
  f32Member(const std::vector<const plan::Persistent *> &group) const;
  /// Ends start-up phase `name` (startupPhases): the time since `began`,
  /// which then becomes now (the next phase's beginning).
  void endPhase(const char *name, std::chrono::steady_clock::time_point &began);
  /// Adds start-up phase `name` of `seconds` (summed over parts).
  void addPhase(const char *name, double seconds) {
    startup.push_back({name, seconds});
  }

  /// The vocabulary piece of a cross entropy or log-sum-exp whose ints
  /// hold, from `groupInt` on, [group (-1: the whole vocabulary)[,
  /// classes]]: none for a whole, unpadded vocabulary. The piece holds
  /// `columns` columns and reads `lse` (null: computes it).
  std::optional<cpu::VocabPiece> vocabPiece(const plan::Instr &instr,
                                            size_t groupInt, int64_t columns,
                                            const float *lse) const;
  /// A Matmul's products: c[i] = op(a[i]) * op(b[i]), op(a) [m x k],
  /// op(b) [k x n], for i < batch (one b for all unless rhsBatched); then
  /// its epilogue (plan::MatmulAttrs), with the values of its bias and of
  /// the pre-activation it keeps (a forward epilogue), or of the
  /// activation's input it reads and the bias gradient it writes (a
  /// gradient epilogue).
  struct MatmulDims {
    int64_t batch, m, n, k;
    bool transposeA, transposeB, rhsBatched;
    plan::EpilogueCode epilogue = plan::EpilogueCode::None;
    std::optional<plan::ActivationCode> activation, gradient;
    std::optional<uint32_t> bias, preActivation;
    std::optional<uint32_t> activationInput, biasGrad;
    /// The accumulating epilogue's weight (c, its accumulator, is both
    /// input 2 and the output).
    std::optional<uint32_t> weight;
    /// The adding epilogues' addend (of c's shape and type).
    std::optional<uint32_t> addend;
  };
  MatmulDims matmulDims(const plan::Instr &instr) const;
  /// An Embedding's table (an EmbeddingGrad's result): `rows` of `hidden`,
  /// rows [firstRow, firstRow + rows) of a vocabulary of `vocab` ids (a
  /// vocab-parallel piece holds the rows of this rank's index in its
  /// group).
  struct EmbeddingRows {
    int64_t rows, hidden, firstRow, vocab;
  };
  EmbeddingRows embeddingRows(const plan::Instr &instr) const;
  /// An Attention or AttentionGrad instruction's shape and the values of
  /// its optional operands (prefix lengths, ALiBi slopes) and, for the
  /// gradient, of dout.
  struct AttentionCall {
    cpu::AttentionShape shape;
    std::optional<uint32_t> prefix, slopes;
    uint32_t dout = 0;
  };
  AttentionCall attentionCall(const plan::Instr &instr) const;
  /// InvalidArgument unless every one of `shape.batch` prefix lengths (host
  /// memory) lies in [0, keySeq].
  static absl::Status checkPrefixLengths(const int32_t *lengths,
                                         const cpu::AttentionShape &shape);
  /// An AllSlice as a byte view of x [outer, pieces, run]: this member's
  /// piece is the `run` bytes at piece `member` of each of the `outer`
  /// rows (elements of 4 bytes: f32 values or i32 token ids).
  /// An AllSlice as `outer` rows of x (`xRunBytes` each) from which this
  /// member keeps `runBytes` starting at `offsetBytes`: the first
  /// `validBytes` of them are x's, the rest the zero padding of a padded
  /// split (ZeRO's pieces of a dimension the group does not divide).
  struct SliceView {
    int64_t outer, xRunBytes, offsetBytes, runBytes, validBytes;
  };
  SliceView allSliceView(const plan::Instr &instr) const;
  /// Where a Dropout's elements sit in the whole tensor it draws its mask
  /// for: from its offset, plus, for a piece of the batch, the elements of
  /// the samples before the piece (its index in its group, times the
  /// step's microbatches, plus the microbatch being run); a piece of each
  /// sample's sequence is a run per sample, starting its index in its
  /// group times its rows into the sample. With `perMicrobatch`, the piece
  /// of microbatch 0 instead, and there how far each microbatch moves it
  /// (0 where it does not): a recorded call adds the replayed call's.
  DropoutPiece dropoutPiece(const plan::Instr &instr,
                            uint64_t *perMicrobatch = nullptr) const;
  /// The plan's learning-rate schedule as this run applies it (the first
  /// LrSchedule's), or none.
  std::optional<plan::LrScheduleAttrs> lrSchedule() const;
  /// A Dropout's probability as this call applies it (0 while evaluating).
  double dropoutProbability(const plan::DropoutAttrs &attrs) const {
    return evaluating ? 0.0 : attrs.probability;
  }
  bool evaluating = false;
  /// LrSchedule `instr` as this run applies it: the options' peak (the floor
  /// scaled alike) and, for a decay over the run, the run's last step.
  plan::LrScheduleAttrs schedule(const plan::Instr &instr) const;
  /// The collective of instruction `instr` (AllReduce, AllGather,
  /// ReduceScatter, AllToAll) on the buffers `x` and `out`; of a bucket
  /// (several inputs), that of input and output `pair`.
  TensorCollective describeCollective(const plan::Instr &instr, const float *x,
                                      float *out, size_t pair = 0) const;
  /// The world rank a Send or Recv talks to, its tag and its element count.
  struct Transfer {
    bool send;
    uint32_t data;
    int64_t peer, tag, elements;
  };
  Transfer describeTransfer(const plan::Instr &instr) const;

  /// Keeps a started collective or transfer of instruction `index` in
  /// flight (or completes it at once without overlap). `x` is the value it
  /// reads (none for a Recv), `out` the value it writes (none for a Send).
  absl::Status track(std::optional<PendingCollective> collective,
                     std::unique_ptr<CommRequest> transfer,
                     const plan::Instr &instr, size_t index,
                     std::optional<uint32_t> x, std::optional<uint32_t> out);
  /// Waits for everything in flight, errors ignored: a backend's destructor
  /// calls it before the memory a receive may still write goes away.
  void drainInFlight();

  const plan::Value &value(uint32_t index) const {
    return *program->values()->Get(index);
  }
  /// Where value `index` starts in the arena for the function being run:
  /// its copy for the call's slot (slot mod its copies).
  uint64_t offsetOf(uint32_t index) const {
    const plan::Value &v = value(index);
    return v.region()->offset() +
           (v.slots() ? (slot % v.slots()) * v.slot_stride() : 0);
  }
  const plan::Persistent *findPersistent(const std::string &name) const;
  /// Whether value `index` is bf16 or f16.
  bool isSixteenBit(uint32_t index) const;
  /// Whether a result of `instr` shares bytes with an operand (other than
  /// itself, where `inPlace` lets a result be an operand: a kernel that
  /// reads and writes it in one type). The memory planner never places
  /// one so; a hand-made plan might.
  bool resultOverlapsOperand(const plan::Instr &instr, bool inPlace) const;
  /// The distinct 16-bit values `instr` reads or writes, in order.
  std::vector<uint32_t> sixteenBitOperands(const plan::Instr &instr) const;

  // What a backend supplies.

  /// Copies a checked argument into value `index`.
  virtual absl::Status writeValue(uint32_t index, const HostTensor &arg) = 0;
  /// Copies value `index` out (its dtype and shape are set).
  virtual absl::Status readValue(uint32_t index, HostTensor &result) = 0;
  /// Runs a compute instruction (not a collective or a transfer).
  virtual absl::Status execute(const plan::Instr &instr, uint64_t step) = 0;
  /// Starts the collective `instr` (see track).
  virtual absl::Status startCollective(const plan::Instr &instr,
                                       size_t index) = 0;
  /// Starts the Send or Recv `instr` (see track).
  virtual absl::Status startTransfer(const plan::Instr &instr,
                                     size_t index) = 0;
  /// Completes the work enqueued so far (for an instruction's time, and for
  /// errors found on the device), when `timed`, before a call's results are
  /// read and in finish: a backend that runs asynchronously waits for it
  /// here.
  virtual absl::Status settle(bool timed) { return absl::OkStatus(); }
  /// The device work the calling thread has issued so far, in all (see
  /// HostWork::launches): 0 for a backend that issues none.
  virtual int64_t issuedWork() const { return 0; }
  /// Whether instructions timed now are timed on the device
  /// (ExecutorOptions::deviceTimes, in a backend that can): the executor
  /// then sets `timing` around each one, for the backend to mark its work,
  /// and does not wait for it.
  virtual bool timesOnDevice() const { return false; }
  /// The instruction being timed on the device, while it is issued.
  struct Timing {
    const plan::Instr *instr;
    size_t index;
    const plan::Function *function;
    uint32_t microbatch;
  };
  std::optional<Timing> timing;
  /// In finish, once everything has ended: appends the device spans of the
  /// instructions timed since the last call (onDevice entries) to `times`,
  /// or forgets them (null).
  virtual absl::Status deviceSpans(std::vector<InstructionTime> *times) {
    return absl::OkStatus();
  }

  const LoadedPlan *plan;
  const plan::Program *program;
  ExecutorOptions options;
  uint64_t seed = 0;
  int64_t rank = 0;
  MeshCoordinates meshPosition;
  /// options.communicator, or a world of one rank.
  std::unique_ptr<Communicator> ownCommunicator;
  Communicator *communicator = nullptr;

  /// How the call of `key` runs (CallRecordings.h): Direct, instruction by
  /// instruction, unless the backend records calls.
  virtual CallMode callMode(const CallKey &key) { return CallMode::Direct; }
  /// Before each call's instructions, after its arguments: a backend that
  /// records calls writes the call's `step` and `microbatch` where its
  /// kernels (dropout's) read them, so that a replay draws this call's.
  virtual absl::Status beginCall(uint64_t step, uint32_t microbatch) {
    return absl::OkStatus();
  }
  /// Starts recording the device work enqueued from here on (Record).
  virtual absl::Status startRecording() {
    return absl::UnimplementedError("this backend records no calls");
  }
  /// Ends the recording startRecording began (if it did), `body` being
  /// whether everything until now was enqueued: keeps the recording for
  /// later calls of `key` and launches it (true), or, where something
  /// failed, keeps nothing and says why in refusals (false: the call then
  /// runs directly; nothing of the recording ran). An error is a launch
  /// that failed.
  virtual absl::StatusOr<bool> endRecording(const CallKey &key,
                                            absl::Status body) {
    return false;
  }
  /// Launches the recording of `key`'s call (Replay).
  virtual absl::Status replay(const CallKey &key) {
    return absl::UnimplementedError("this backend records no calls");
  }

private:
  absl::StatusOr<std::vector<HostTensor>>
  runCall(uint32_t index, const std::vector<HostTensor> &args, uint64_t step,
          std::vector<InstructionTime> *times, uint32_t microbatch,
          uint32_t slot);
  /// Runs the instructions of `function`'s body (one call's, its arguments
  /// written); on a failure, `at` is the instruction that failed (none for
  /// a failure outside one).
  absl::Status runBody(const plan::Function &function, uint64_t step,
                       std::vector<InstructionTime> *times,
                       std::optional<size_t> &at);
  /// Records the call of `key` (runBody between startRecording and
  /// endRecording, what it started joined before the end) and launches
  /// the recording: false where recording failed and nothing ran.
  absl::StatusOr<bool> record(const plan::Function &function,
                              const CallKey &key, uint64_t step,
                              std::optional<size_t> &at);
  /// The call being run or run last (its function, null after finish; its
  /// microbatch and slot): an error names the call that started what
  /// failed where that is another.
  const plan::Function *running = nullptr;
  uint32_t microbatch = 0, slot = 0;
  absl::Status checkCollectives() const;
  /// Completes the collectives and transfers in flight that write bytes of
  /// a value in `reads` or `writes`, or read bytes of one in `writes`, on
  /// the running call's slot (every one when `all`); records their waits
  /// in `times`.
  absl::Status waitFor(const flatbuffers::Vector<uint32_t> *reads,
                       const flatbuffers::Vector<uint32_t> *writes,
                       std::vector<InstructionTime> *times, bool all = false);
  absl::Status waitForAll(std::vector<InstructionTime> *times) {
    return waitFor(nullptr, nullptr, times, /*all=*/true);
  }
  /// Completes the collectives and transfers in flight for which
  /// `mustWait(entry)` holds, recording their waits in `times`.
  struct InFlight;
  template <typename MustWait>
  absl::Status waitWhere(MustWait mustWait,
                         std::vector<InstructionTime> *times);
  /// Whether value `index` (on the running call's slot) has bytes in
  /// [begin, end) of the arena.
  bool overlaps(uint32_t index, uint64_t begin, uint64_t end) const;
  /// The values function `function` reads or writes: its arguments,
  /// results and every instruction's operands (computed once).
  const std::vector<uint32_t> &touchedBy(uint32_t function);
  std::map<uint32_t, std::vector<uint32_t>> touched;
  /// The calls run so far (an InFlight's `call` is the one it started in).
  uint64_t calls = 0;
  /// Runs `wait` (for `what`), recorded in options.progress.
  template <typename Fn> absl::Status waitRecorded(const Wait &what, Fn wait);
  /// For the watchdog's report: the world ranks a collective or transfer
  /// `instr` exchanges with ("ranks 0, 1, 2, 3" of this rank's instance of
  /// its group, "rank 5" for a transfer's peer), computed once each.
  const WaitPeers *peersOf(const plan::Instr &instr);
  std::map<std::pair<bool, int64_t>, WaitPeers> peerNames;

  /// A collective or transfer started and not yet completed (one of
  /// `collective` and `transfer`): the byte ranges of its input and output
  /// in the arena as they were when it started (on its call's slot; empty
  /// for the side a transfer lacks).
  struct InFlight {
    std::optional<PendingCollective> collective;
    std::unique_ptr<CommRequest> transfer;
    plan::OpCode op;
    size_t instruction;
    uint64_t xBegin, xEnd, outBegin, outEnd;
    /// Whom it waits for (peersOf).
    const WaitPeers *peers;
    /// The call that started it, and its number (Executor::calls).
    const plan::Function *function;
    uint32_t microbatch;
    uint64_t call;

    absl::Status wait() {
      return collective ? collective->wait() : transfer->wait();
    }
  };
  std::vector<InFlight> inFlight;
  /// The watchdog's record of a wait for `c`.
  Wait waitOf(const InFlight &c) const;
  /// See transferWaitNanos.
  int64_t transferWaiting = 0;
  /// See hostWork.
  HostWork work;
  /// See startupPhases.
  std::vector<StartupPhase> startup;
  /// settle(timed), its time counted as waiting for the device.
  absl::Status settleCounted(bool timed);
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_EXECUTOR_H
