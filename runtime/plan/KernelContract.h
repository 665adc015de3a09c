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

#include "runtime/plan/KernelCodes.h"
#include "runtime/plan/plan_generated.h"

#include "absl/status/status.h"

#include <cstdint>
#include <limits>
#include <optional>
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
  /// The vocabulary the compiler padded the output layer to (the plan's
  /// `padded_vocab`), or 0: the vocabulary rounded up to a multiple of tp.
  int64_t paddedVocab = 0;
  /// Microbatches per step.
  int64_t microbatches = 0;
  /// The number of ranks in each communicator group, by group index.
  std::vector<int64_t> groupSizes;
};

/// OK when `view` keeps its kernel's contract; otherwise InvalidArgument
/// saying what is wrong (without saying where: the caller knows).
absl::Status checkKernel(const KernelView &view, const KernelContext &context);

/// The floating-point operations of a kernel the contract accepted, counted
/// as model FLOPs are: 2 per multiply-add of its products (Matmul: 2 m n k
/// per batch; Attention: 4 b h sq sk d for QK^T and PV, AttentionGrad twice
/// that), 0 for the element-wise kernels, whose share is small.
double kernelFlops(const KernelView &view);

//===----------------------------------------------------------------------===//
// The kernels' attributes by name
//===----------------------------------------------------------------------===//
//
// What the positional `ints` and `floats` of a kernel mean, decoded in one
// place for the contract's checks and both executors. Each decoder reads
// an instruction the contract has accepted (its attributes are there).

/// Matmul: ints transpose_a, transpose_b[, epilogue (KernelCodes.h; absent:
/// None)]; inputs a, b[, bias, activation input, or accumulator and
/// weight][, addend]; outputs c[, pre-activation or bias gradient]. op(a) is
/// [..., m, k], op(b) [k, n] or
/// [..., k, n], c [..., m, n].
///
/// The forward epilogues (Bias, BiasGeluTanh, BiasRelu) read a bias: n
/// values, f32 or of c's type. The pre-activation (the biased product,
/// which an activation's gradient reads) is an output only with an
/// activation epilogue, and only where the plan keeps it; it has c's shape
/// and type. The epilogue runs in f32 on the f32 product: the bias is added
/// as the Add kernel adds it, then the activation applied as the Activation
/// kernel applies it, so f32 results have the bits of the unfused kernels.
///
/// The gradient epilogue (GeluTanhGrad) reads the activation's input, of
/// c's shape and type and not c's buffer, and takes the product for the
/// gradient of the activation's output: c is what ActivationGrad computes
/// from them. The bias gradient, an output only where the plan asks for
/// it, is c summed over all its dimensions but the last as the Sum kernel
/// sums (factor 1): n values, f32 or of c's type. In f32 both have the bits
/// of the unfused kernels.
///
/// A 16-bit c (and pre-activation or bias gradient) is rounded once, after
/// the epilogue, as cuBLASLt's epilogues do, where the unfused kernels round
/// the product first: 16-bit results may differ from theirs by a rounding.
///
/// The accumulating epilogue (Accumulate) reads the accumulator, which c
/// is (the third input and the output are one value), f32 or of the
/// operands' type, and the weight, an f32 scalar (the fourth input): c =
/// c + weight * product, the multiply and the add each rounded to f32 as
/// the Accumulate kernel rounds them (a 16-bit c then rounded to its
/// type), on the f32 product, where the unfused kernels add the product
/// rounded to its 16-bit type: 16-bit operands' results may differ from
/// theirs by that rounding (f32 ones have their bits on the CPU; cuBLASLt
/// adds in its own epilogue, within f32 rounding). The accumulator shares
/// no bytes with the product's operands or the weight (the plan loader
/// checks).
///
/// The adding epilogues (Addend, BiasAddend) read an addend of c's shape
/// and type, their last input, which is not c: c = (product [+ bias]) +
/// addend, each add rounded to f32 as the Add kernel rounds it, a 16-bit c
/// once, after the last (the unfused kernels round the product first; on
/// the GPU cuBLASLt adds the addend before the bias). c shares no bytes
/// with the product's operands or the bias, and its bytes are the
/// addend's or apart from them (the plan loader checks).
struct MatmulAttrs {
  bool transposeA, transposeB;
  EpilogueCode epilogue;
  bool fused() const { return epilogue != EpilogueCode::None; }
  /// Whether the epilogue adds a bias (the forward epilogues).
  bool hasBias() const {
    return fused() && epilogue != EpilogueCode::GeluTanhGrad &&
           epilogue != EpilogueCode::Accumulate &&
           epilogue != EpilogueCode::Addend;
  }
  /// Whether the product is added to c (the accumulating epilogue).
  bool accumulates() const { return epilogue == EpilogueCode::Accumulate; }
  /// Whether the epilogue adds a tensor of c's shape (its last input).
  bool hasAddend() const {
    return epilogue == EpilogueCode::Addend ||
           epilogue == EpilogueCode::BiasAddend;
  }
  /// The activation the epilogue applies after the bias, if any.
  std::optional<ActivationCode> activation() const {
    switch (epilogue) {
    case EpilogueCode::BiasGeluTanh:
      return ActivationCode::GeluTanh;
    case EpilogueCode::BiasRelu:
      return ActivationCode::Relu;
    case EpilogueCode::None:
    case EpilogueCode::Bias:
    case EpilogueCode::GeluTanhGrad:
    case EpilogueCode::Accumulate:
    case EpilogueCode::Addend:
    case EpilogueCode::BiasAddend:
      break;
    }
    return std::nullopt;
  }
  /// The activation whose gradient the epilogue applies, if any.
  std::optional<ActivationCode> gradient() const {
    if (epilogue == EpilogueCode::GeluTanhGrad)
      return ActivationCode::GeluTanh;
    return std::nullopt;
  }
};
/// Activation, ActivationGrad and Gated: ints[0] (KernelCodes.h).
/// Attention and AttentionGrad: ints heads, kv_heads, mask, has_prefix,
/// has_slopes; floats scale.
struct AttentionAttrs {
  int64_t heads, kvHeads;
  MaskCode mask;
  bool hasPrefix, hasSlopes;
  double scale;
};
/// Rope: ints heads, rotary_dim; floats base, direction (1 or -1).
struct RopeAttrs {
  int64_t heads, rotaryDim;
  double base, direction;
};
/// Dropout: ints stream, first global index[, group (-1: none),
/// microbatches[, seq_group]]; floats probability. A piece of the batch is
/// this member of `group` and this microbatch; a piece of each sample's
/// sequence (dimension 1), this member of `seq_group` (-1: whole).
struct DropoutAttrs {
  uint64_t stream, firstIndex;
  int64_t group = -1, microbatches = 1, seqGroup = -1;
  double probability;
};
/// LrSchedule: ints warmup, decay (0: none; kDecayOverRun: the run's last
/// step, which the runtime supplies); floats peak, floor.
constexpr int64_t kDecayOverRun = -1;
struct LrScheduleAttrs {
  int64_t warmupSteps, decaySteps;
  double peak, floor;
};
/// AdamW: floats beta1, beta2, epsilon, then a weight decay per tensor
/// (`weightDecay` is the first tensor's).
struct AdamWAttrs {
  double beta1, beta2, epsilon, weightDecay;
};
/// How an AdamW instruction's operands split into tensors: `count` tensors
/// (4 inputs each, then lr, step and coefficient, and with `skips` a skip
/// flag) of `outputsPerTensor` outputs (4 where each writes its parameter
/// rounded to 16 bits too).
struct AdamWShape {
  size_t count;
  size_t outputsPerTensor;
  bool rounded;
  bool skips;
  /// The scalars after the tensors' inputs: 3, or 4 with the skip flag.
  size_t sharedInputs() const { return skips ? 4 : 3; }
};
/// The split of `inputs`, `outputs` and `floats`, or none where the counts
/// fit no number of tensors.
inline std::optional<AdamWShape> adamWShape(size_t inputs, size_t outputs,
                                            size_t floats) {
  if (inputs < 7)
    return std::nullopt;
  bool skips = (inputs - 4) % 4 == 0;
  if (!skips && (inputs - 3) % 4 != 0)
    return std::nullopt;
  size_t count = (inputs - (skips ? 4 : 3)) / 4;
  if (count == 0 || floats != 3 + count ||
      (outputs != 3 * count && outputs != 4 * count))
    return std::nullopt;
  bool rounded = outputs == 4 * count;
  return AdamWShape{count, rounded ? 4u : 3u, rounded, skips};
}

/// LossScaleUpdate: ints growth_interval; floats growth, backoff.
struct LossScaleAttrs {
  int64_t growthInterval;
  double growth, backoff;
};

/// The attributes of `ints` and `floats` (a plan's vectors or the
/// contract's), by kernel.
template <typename Ints> MatmulAttrs matmulAttrs(const Ints &ints) {
  return {ints[0] != 0, ints[1] != 0,
          ints.size() > 2 ? static_cast<EpilogueCode>(ints[2])
                          : EpilogueCode::None};
}
template <typename Ints> ActivationCode activationAttr(const Ints &ints) {
  return static_cast<ActivationCode>(ints[0]);
}
template <typename Ints, typename Floats>
AttentionAttrs attentionAttrs(const Ints &ints, const Floats &floats) {
  return {ints[0],      ints[1],      static_cast<MaskCode>(ints[2]),
          ints[3] != 0, ints[4] != 0, floats[0]};
}
template <typename Ints, typename Floats>
RopeAttrs ropeAttrs(const Ints &ints, const Floats &floats) {
  return {ints[0], ints[1], floats[0], floats[1]};
}
template <typename Ints, typename Floats>
DropoutAttrs dropoutAttrs(const Ints &ints, const Floats &floats) {
  DropoutAttrs attrs{static_cast<uint64_t>(ints[0]),
                     static_cast<uint64_t>(ints[1])};
  if (ints.size() >= 4) {
    attrs.group = ints[2];
    attrs.microbatches = ints[3];
  }
  if (ints.size() >= 5)
    attrs.seqGroup = ints[4];
  attrs.probability = floats[0];
  return attrs;
}
template <typename Ints, typename Floats>
LrScheduleAttrs lrScheduleAttrs(const Ints &ints, const Floats &floats) {
  return {ints[0], ints[1], floats[0], floats[1]};
}
template <typename Floats> AdamWAttrs adamWAttrs(const Floats &floats) {
  return {floats[0], floats[1], floats[2], floats[3]};
}
/// SumSquares: floats none, or limit (+inf without one).
inline double sumSquaresLimit(const Instr &instr) {
  const auto *floats = instr.floats();
  return floats && floats->size() == 1
             ? floats->Get(0)
             : std::numeric_limits<double>::infinity();
}
template <typename Ints, typename Floats>
LossScaleAttrs lossScaleAttrs(const Ints &ints, const Floats &floats) {
  return {ints[0], floats[0], floats[1]};
}

} // namespace triad::plan

#endif // TRIAD_RUNTIME_PLAN_KERNELCONTRACT_H
