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

#include "runtime/executor/Executor.h"
#include "runtime/kernels/cpu/Bf16Products.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace triad::rt {

class CpuExecutor : public Executor {
public:
  /// Prepares the program of `pipelineRank`: checks that the CPU backend
  /// can run it (f32, bf16, f16 and i32 values: 16-bit values are stored as
  /// such, and every kernel computes in f32), allocates its arena and
  /// initializes its persistent tensors with `seed` (accumulators start
  /// from zeros, as their init says).
  /// Products of two bf16 operands run on `bf16Products` (see
  /// kernels/cpu/Bf16Products.h); OneDnn where this build or CPU lacks
  /// oneDNN's is an error.
  static absl::StatusOr<CpuExecutor>
  create(const LoadedPlan &plan, uint32_t pipelineRank, uint64_t seed,
         ExecutorOptions options = {},
         cpu::Bf16ProductKernel bf16Products = cpu::Bf16ProductKernel::Auto);

  CpuExecutor(CpuExecutor &&) = default;
  ~CpuExecutor() override;

  const char *backend() const override { return "cpu"; }

  /// Whether products of bf16 operands run on oneDNN's bf16 kernels.
  bool runsBf16Products() const { return bf16Products != nullptr; }

  /// The f32 data of a persistent f32 tensor, in place (for tests).
  absl::StatusOr<float *> persistent(const std::string &name);

private:
  CpuExecutor(const LoadedPlan &plan, const plan::Program &program,
              ExecutorOptions options)
      : Executor(plan, program, options) {}

  absl::Status writeValue(uint32_t index, const HostTensor &arg) override;
  absl::Status readValue(uint32_t index, HostTensor &result) override;
  absl::Status execute(const plan::Instr &instr, uint64_t step) override;
  absl::Status startCollective(const plan::Instr &instr, size_t index) override;
  absl::Status startTransfer(const plan::Instr &instr, size_t index) override;
  /// A collective that completes before it returns: a bucket of
  /// all-gathers or reduce-scatters (an instruction with several inputs,
  /// moved as one collective), or one on 16-bit values.
  absl::Status runHere(const plan::Instr &instr);

  /// A product of two bf16 operands with an f32 or bf16 result, run on
  /// their bits by oneDNN, when this executor has its bf16 products.
  bool runsOnBf16Products(const plan::Instr &instr) const;

  /// A kernel that reads its values as they are stored (cpu::StoredIn):
  /// the element-wise ones (Add, Mul, Activation, ActivationGrad, Gated)
  /// and casts a chunk at a time, norms a row at a time, bias-gradient sums
  /// a block of columns at a time, attention a (sample, head) at a time;
  /// 16-bit values converted in the thread's buffers, not as whole f32
  /// copies, with the same bits. Not for a result that shares bytes with
  /// another operand.
  bool runsStored(const plan::Instr &instr) const;
  absl::Status executeStored(const plan::Instr &instr);
  /// Value `value` as stored: its f32 copy while a kernel runs on copies,
  /// else in the arena in its type.
  cpu::StoredIn storedIn(uint32_t value);
  cpu::StoredOut storedOut(uint32_t value);

  /// SumSquares and AdamW, over one tensor or many: f32 weights and
  /// moments, and gradients in any float type, widened one tensor at a
  /// time.
  absl::Status executeOptimizer(const plan::Instr &instr);

  /// The kernel of one instruction, on f32 (and i32) data: `execute` runs
  /// it on f32 copies of the instruction's 16-bit values.
  absl::Status executeF32(const plan::Instr &instr, uint64_t step);

  /// A value's f32 data: in the arena, or its f32 copy while a kernel on
  /// a 16-bit value runs.
  float *f32(uint32_t value);
  int32_t *i32(uint32_t value);
  uint16_t *bits16(uint32_t value);
  /// A 16-bit value's elements widened into `out`, or rounded from `in`.
  void widenFrom(uint32_t value, float *out);
  void narrowInto(uint32_t value, const float *in);

  /// The f32 copies of the 16-bit values of the instruction running.
  /// (One buffer per operand, kept from one instruction to the next.)
  std::vector<std::vector<float>> widePool;
  /// The product of a matmul that adds it to its accumulator or to an
  /// addend.
  std::vector<float> productBuffer;
  std::vector<std::pair<uint32_t, float *>> widened;
  /// oneDNN's bf16 products, or null (OpenBLAS on widened copies).
  std::unique_ptr<cpu::Bf16Products> bf16Products;

  /// Untyped, 64-byte aligned storage of every value of the program.
  struct ArenaDeleter {
    void operator()(std::byte *p) const {
      ::operator delete(p, std::align_val_t(64));
    }
  };
  std::unique_ptr<std::byte, ArenaDeleter> arena;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_CPUEXECUTOR_H
