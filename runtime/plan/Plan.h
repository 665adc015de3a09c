//===- Plan.h - loading and verifying plan files -----------------*- C++
//-*-===//
//
// A plan is loaded in three steps, and nothing runs unless all pass:
// the file is read whole; the FlatBuffers verifier checks its structure
// (every offset and vector inside the buffer); the semantic checks below
// check what the structure cannot say: every value inside the arena, every
// index in range, every enum known, and for every instruction the number,
// element types and shapes of its operands and its attributes. After that
// the executor may index values and run kernels without further checks.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_PLAN_PLAN_H
#define TRIAD_RUNTIME_PLAN_PLAN_H

#include "runtime/plan/plan_generated.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace triad::rt {

/// The plan format version this runtime reads.
constexpr uint32_t kPlanVersion = 4;

/// The largest tag of a Send or Recv: the least upper bound of tags that
/// MPI guarantees (MPI_TAG_UB is at least this).
constexpr int64_t kMaxTransferTag = 32767;

/// The largest plan file: FlatBuffers' 32-bit signed offsets address 2 GiB.
constexpr uint64_t kMaxPlanBytes = (uint64_t(1) << 31) - 1;

/// The most copies a slotted value may have (a pipeline stage's microbatches
/// in flight).
constexpr uint32_t kMaxSlots = 1u << 16;

/// A verified plan and the bytes it points into.
class LoadedPlan {
public:
  const plan::Plan &root() const { return *plan::GetPlan(bytes.data()); }

private:
  friend absl::StatusOr<LoadedPlan> loadPlanFromBytes(std::string bytes,
                                                      const std::string &name);
  std::string bytes;
};

/// A plan file is the plan's FlatBuffer sealed by a trailer of
/// kPlanSealBytes: the 8 bytes "TRIADSUM" and the FNV-1a 64-bit hash of the
/// FlatBuffer (little-endian). The loader checks the seal before anything
/// else, so a flipped byte, a cut file or bytes appended after the seal are
/// refused with a clear error rather than loaded.
constexpr size_t kPlanSealBytes = 16;

/// The FNV-1a 64-bit hash of `bytes`.
uint64_t planHash(std::string_view bytes);

/// `flatbuffer` with its seal appended (what --export-plan writes).
std::string sealPlan(std::string flatbuffer);

/// Reads and verifies the plan file `path`.
absl::StatusOr<LoadedPlan> loadPlan(const std::string &path);

/// Verifies sealed plan bytes (`name` appears in errors): the seal, the
/// FlatBuffer's structure, then the semantic checks.
absl::StatusOr<LoadedPlan> loadPlanFromBytes(std::string bytes,
                                             const std::string &name);

/// The semantic checks alone, on a structurally verified plan.
absl::Status checkPlan(const plan::Plan &plan);

/// Elements of a value, or -1 when the shape is invalid or overflows.
int64_t elementCount(const flatbuffers::Vector<int64_t> *shape);

/// Bytes per element of a plan dtype (0 for an unknown one).
int64_t dtypeSize(plan::DType dtype);

/// The ranks a run of `plan` needs: the product of its mesh axis sizes.
int64_t meshSize(const plan::Plan &plan);

/// The floating-point operations of one optimizer step over all ranks of a
/// checked plan: every call of every program's step, each program counted
/// once per rank that runs it (plan::kernelFlops counts products and
/// attention).
double stepFlops(const plan::Plan &plan);

/// The size of mesh axis `name`, 1 when the mesh has no such axis.
int64_t meshAxisSize(const plan::Plan &plan, const std::string &name);

/// Calls `visit(index)` for each value `function` names: its arguments,
/// its results and every instruction's operands, in that order (a value
/// named twice is visited twice).
template <typename Visit>
void forEachValueOf(const plan::Function &function, Visit visit) {
  auto all = [&](const flatbuffers::Vector<uint32_t> *list) {
    if (list)
      for (uint32_t index : *list)
        visit(index);
  };
  all(function.args());
  all(function.results());
  if (function.body())
    for (const plan::Instr *instr : *function.body()) {
      all(instr->inputs());
      all(instr->outputs());
    }
}

/// The most slots of the slotted values `function` reads or writes (0: it
/// uses none). A call of a function with slotted values picks any slot
/// below kMaxSlots (its stage's microbatch in flight), each value serving it
/// with its copy slot mod its slots; a call of one without picks slot 0.
uint32_t slotsOf(const plan::Program &program, const plan::Function &function);

/// Samples in one microbatch of one data-parallel rank:
/// batch / (dp * microbatches), dp being the size of the axis "dp".
int64_t microbatchSamples(const plan::Plan &plan);

/// Whether two values may share bytes within one call. A call picks the
/// same slot of both, so slotted values with one stride keep their
/// distance; otherwise each copy's bytes count.
bool mayOverlap(const plan::Value &a, const plan::Value &b);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_PLAN_PLAN_H
