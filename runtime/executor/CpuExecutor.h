//===- CpuExecutor.h - runs a verified plan program on the CPU ---*- C++
//-*-===//
//
// The CPU backend's executor: one arena per program, persistent tensors
// initialized from their init specs at their global indices (so a shard
// starts from the single-device values), and functions run instruction by
// instruction on the fp32 CPU kernels. It trusts the loader's checks
// (runtime/plan/Plan.h) for shapes and bounds; data-dependent errors (a
// token id outside the vocabulary) are returned as a Status.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_EXECUTOR_CPUEXECUTOR_H
#define TRIAD_RUNTIME_EXECUTOR_CPUEXECUTOR_H

#include "runtime/comm/Collectives.h"
#include "runtime/comm/Comm.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/Plan.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
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
  /// The job's ranks (not owned; it must outlive the executor): the
  /// executor is its world rank, holds that rank's slices of the persistent
  /// tensors and runs the plan's collectives and transfers through it.
  /// Without one, the executor is world rank 0 alone: a plan whose
  /// collectives run over groups of more than one rank, or that transfers
  /// between pipeline ranks, is then refused at creation.
  Communicator *communicator = nullptr;
  /// Starts each collective and transfer (Send, Recv) and lets the
  /// following instructions run until the first one that reads or writes
  /// its output, or writes its input, overlapping communication with
  /// computation; false: every collective and transfer completes before the
  /// next instruction. Either way all are complete when a function returns.
  bool overlapCollectives = true;
};

/// When one instruction of a run started and ended (steady clock). A
/// collective or transfer started in the background has a second entry,
/// `wait`, for the time the run waited for it to complete.
struct InstructionTime {
  plan::OpCode op;
  int64_t beginNanos, endNanos;
  bool wait = false;
};

class CpuExecutor {
public:
  /// Prepares the program of `pipelineRank`: checks that the CPU backend
  /// can run it (f32 and i32 values only), allocates its arena and
  /// initializes its persistent tensors with `seed` (accumulators start
  /// from zeros, as their init says).
  static absl::StatusOr<CpuExecutor> create(const LoadedPlan &plan,
                                            uint32_t pipelineRank,
                                            uint64_t seed,
                                            ExecutorOptions options = {});

  /// Runs function `name`: copies `args` into its argument values, runs its
  /// body (dropout masks of training step `step`) and returns its results.
  /// With `times`, appends the time of every instruction to it.
  absl::StatusOr<std::vector<HostTensor>>
  run(const std::string &name, const std::vector<HostTensor> &args,
      uint64_t step = 0, std::vector<InstructionTime> *times = nullptr);

  /// The same for the function at `index` in the program.
  absl::StatusOr<std::vector<HostTensor>>
  run(uint32_t index, const std::vector<HostTensor> &args, uint64_t step = 0,
      std::vector<InstructionTime> *times = nullptr);

  const plan::Program &programOf() const { return *program; }
  /// The world rank this executor runs, and its mesh coordinates.
  int64_t worldRank() const { return rank; }
  const MeshCoordinates &coordinates() const { return meshPosition; }
  /// Where the slice of persistent `p` that this rank holds starts in the
  /// global tensor.
  std::vector<int64_t> sliceOffsets(const plan::Persistent &p) const;

  /// The f32 data of a persistent tensor (for checkpoints and tests).
  absl::StatusOr<float *> persistent(const std::string &name);

private:
  CpuExecutor(const LoadedPlan &plan, const plan::Program &program,
              ExecutorOptions options)
      : plan(&plan), program(&program), options(options) {}
  absl::StatusOr<std::vector<HostTensor>>
  run(const plan::Function &function, const std::vector<HostTensor> &args,
      uint64_t step, std::vector<InstructionTime> *times);
  absl::Status initialize(uint64_t seed);
  absl::Status checkCollectives() const;
  absl::Status execute(const plan::Instr &instr, uint64_t step);
  /// The vocabulary piece of a cross entropy or log-sum-exp whose ints
  /// hold, from `groupInt` on, [group (-1: the whole vocabulary)[,
  /// classes]]: none for a whole, unpadded vocabulary. The piece holds
  /// `columns` columns and reads `lse` (null: computes it).
  std::optional<cpu::VocabPiece> vocabPiece(const plan::Instr &instr,
                                            size_t groupInt, int64_t columns,
                                            const float *lse) const;
  /// Starts the collective `instr` (and, without overlap, completes it).
  absl::Status startCollective(const plan::Instr &instr, size_t index);
  /// Starts the Send or Recv `instr` (and, without overlap, completes it).
  absl::Status startTransfer(const plan::Instr &instr, size_t index);
  /// Completes the collectives and transfers in flight that `instr` must
  /// wait for (all of them for nullptr); records their waits in `times`.
  absl::Status waitFor(const plan::Instr *instr,
                       std::vector<InstructionTime> *times);

  float *f32(uint32_t value);
  int32_t *i32(uint32_t value);
  const plan::Value &value(uint32_t index) const {
    return *program->values()->Get(index);
  }

  /// Untyped, 64-byte aligned storage of every value of the program.
  struct ArenaDeleter {
    void operator()(std::byte *p) const {
      ::operator delete(p, std::align_val_t(64));
    }
  };

  /// A collective or transfer started and not yet completed (one of
  /// `collective` and `transfer`): the byte ranges of its input and output
  /// in the arena (empty for the side a transfer lacks).
  struct InFlight {
    std::optional<PendingCollective> collective;
    std::unique_ptr<CommRequest> transfer;
    plan::OpCode op;
    size_t instruction;
    uint64_t xBegin, xEnd, outBegin, outEnd;

    absl::Status wait() {
      return collective ? collective->wait() : transfer->wait();
    }
  };

  const LoadedPlan *plan;
  const plan::Program *program;
  ExecutorOptions options;
  std::unique_ptr<std::byte, ArenaDeleter> arena;
  uint64_t seed = 0;
  int64_t rank = 0;
  MeshCoordinates meshPosition;
  /// options.communicator, or a world of one rank.
  std::unique_ptr<Communicator> ownCommunicator;
  Communicator *communicator = nullptr;
  std::vector<InFlight> inFlight;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_CPUEXECUTOR_H
