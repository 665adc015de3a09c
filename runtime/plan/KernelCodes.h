//===- KernelCodes.h - the enums among the kernels' attributes ---*- C++
//-*-===//
//
// The numbers a plan's kernels hold for their enum attributes, shared by
// the compiler that writes them (passes/Lowering/LowerToRt.cpp), the kernel
// contract that range-checks them (KernelContract.h) and the executors that
// decode them. No dependencies, so that any side includes it.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_PLAN_KERNELCODES_H
#define TRIAD_RUNTIME_PLAN_KERNELCODES_H

#include <cstdint>

namespace triad::plan {

/// Activation, ActivationGrad and Gated: ints[0]. Gated with Silu is
/// SwiGLU, with Gelu GeGLU.
enum class ActivationCode : int64_t {
  Gelu = 0,
  GeluTanh = 1,
  FastGelu = 2,
  Relu = 3,
  Silu = 4,
};
constexpr int64_t kLastActivationCode =
    static_cast<int64_t>(ActivationCode::Silu);

/// Matmul: ints[2], absent for None. What a fused product does to its
/// product before storing it: Bias adds a bias vector (the third input, n
/// values) to every row, and BiasGeluTanh and BiasRelu then apply the
/// activation of that code (ActivationCode::GeluTanh, Relu), writing the
/// biased product, the activation's input, to a second output where the
/// plan keeps it. GeluTanhGrad is the backward of BiasGeluTanh: it
/// multiplies the product (the gradient of the activation's output) by the
/// activation's derivative at its input (the third input, which the
/// forward kept), as ActivationGrad does, and writes the sum of that over
/// every dimension but the last, the bias gradient, to a second output
/// where the plan asks for it. Only the activations cuBLASLt's epilogues
/// compute with the same formula are here: it has no erf GELU, SiLU or fast
/// GELU, and its ReLU gradient reads a bit mask, not the ReLU's input.
/// Accumulate adds the product times a weight to the result, which is the
/// accumulator (the third input) itself: a weight gradient's product added
/// to its gradient accumulator, as the Accumulate kernel adds it, without
/// the product being stored first. Addend and BiasAddend add a tensor of
/// the result's shape (the last input) to the product, after the bias with
/// BiasAddend, as an Add kernel after the product would: a residual
/// connection's add after its layer's output projection, or the sum of
/// the gradients of one input of several products.
enum class EpilogueCode : int64_t {
  None = 0,
  Bias = 1,
  BiasGeluTanh = 2,
  BiasRelu = 3,
  GeluTanhGrad = 4,
  Accumulate = 5,
  Addend = 6,
  BiasAddend = 7,
};
constexpr int64_t kLastEpilogueCode =
    static_cast<int64_t>(EpilogueCode::BiasAddend);

/// Attention and AttentionGrad: ints[2]. A prefix mask comes with the
/// prefix lengths (has_prefix).
enum class MaskCode : int64_t { Causal = 0, Prefix = 1, None = 2 };
constexpr int64_t kLastMaskCode = static_cast<int64_t>(MaskCode::None);

} // namespace triad::plan

#endif // TRIAD_RUNTIME_PLAN_KERNELCODES_H
