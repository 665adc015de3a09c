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
};

/// When one instruction of a run started and ended (steady clock).
struct InstructionTime {
  plan::OpCode op;
  int64_t beginNanos, endNanos;
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
  absl::Status execute(const plan::Instr &instr, uint64_t step);

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

  const LoadedPlan *plan;
  const plan::Program *program;
  ExecutorOptions options;
  std::unique_ptr<std::byte, ArenaDeleter> arena;
  uint64_t seed = 0;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_CPUEXECUTOR_H
