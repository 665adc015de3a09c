//===- KernelContract.h - what each runtime kernel reads and writes -*- C++
//-*-===//
//
// The contract of every kernel of the plan format (plan.fbs lists them):
// how many inputs, outputs, integer and float attributes it takes, their
// element types and shapes, and the range of every flag and enum among its
// attributes. One function checks an instruction against it, on a view
// that both sides of the plan build: the plan loader (Plan.cpp, from the
// file's values) and the `rt` dialect's verifier (from an `rt.kernel`'s
// memref types), so that a kernel the runtime would refuse is an error
// where the compiler makes it, with the same message. No MLIR here.
//
// What needs the whole plan stays with the loader: that a collective's
// group and dimensions fit the mesh, a transfer's peer and tag, values
// inside the arena.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_PLAN_KERNELCONTRACT_H
#define TRIAD_RUNTIME_PLAN_KERNELCONTRACT_H

#include "runtime/plan/plan_generated.h"

#include "absl/status/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace triad::plan {

/// One buffer an instruction reads or writes.
struct KernelOperand {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// How errors name it ("value 4" in a plan, "input 1" in the IR).
  std::string name;
};

/// An instruction as the contract sees it. `inputs` and `outputs` index
/// `operands`; one buffer read and written (an update in place) is one
/// operand, so the same index appears on both sides.
struct KernelView {
  OpCode op = OpCode::Embedding;
  std::vector<KernelOperand> operands;
  std::vector<uint32_t> inputs, outputs;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

/// What the plan's header says that some kernels' attributes depend on.
/// Without it (`known` false: an IR fragment without `rt.plan`) the checks
/// that need it pass.
struct KernelContext {
  bool known = false;
  /// The vocabulary and the tensor-parallel size (a vocabulary may be
  /// padded to a multiple of it).
  int64_t vocab = 0, tp = 1;
  /// Microbatches per step.
  int64_t microbatches = 0;
  /// The number of ranks in each communicator group, by group index.
  std::vector<int64_t> groupSizes;
};

/// OK when `view` keeps its kernel's contract; otherwise InvalidArgument
/// saying what is wrong (without saying where: the caller knows).
absl::Status checkKernel(const KernelView &view, const KernelContext &context);

} // namespace triad::plan

#endif // TRIAD_RUNTIME_PLAN_KERNELCONTRACT_H
