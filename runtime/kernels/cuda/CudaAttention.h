//===- CudaAttention.h - attention, rope and dropout on CUDA -----*- C++
//-*-===//
//
// The CUDA backend's kernels for the position-dependent operations of a
// transformer layer: fused attention (forward and backward), rotary
// embeddings and dropout. Each one computes what the CPU kernel of the same
// name computes (runtime/kernels/cpu/CpuKernels.h): the same masks (causal,
// prefix, none), ALiBi slopes, grouped-query heads and packed [batch, seq,
// heads * headDim] layout for attention, the same rotation for rope, and
// for dropout the very same counter-based keep mask (bit for bit).
//
// Conventions are those of CudaKernels.h: every pointer is device memory,
// every call enqueues its work on the context's stream and returns without
// waiting, its status saying whether the arguments were supported and the
// launches worked. Attention is a flash-attention style tiled kernel: it
// never forms the score matrix, accumulates in fp32 (softmax sums in
// double) and reduces in a fixed order without atomics, so results do not
// depend on timing. The tests (runtime/tests/CudaAttentionTest.cpp) check
// each kernel against its CPU kernel.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDAATTENTION_H
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDAATTENTION_H

#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include "absl/status/status.h"

#include <cstdint>

namespace triad::rt::cuda {

/// The largest head dimension the attention kernels support.
constexpr int64_t kMaxAttentionHeadDim = 256;

/// Fused attention over packed heads, as cpu::attention: q and out are
/// [batch, querySeq, heads * headDim], k and v [batch, keySeq, kvHeads *
/// headDim]; query head h reads kv head h / (heads / kvHeads). Row i sees
/// key j when the mask is None, when j <= i, or (Mask::Prefix) when j <
/// prefixLengths[b]; the score is scale * q.k minus alibiSlopes[h] * (i -
/// j). `prefixLengths` ([batch] int32, required with Mask::Prefix) and
/// `alibiSlopes` ([heads], optional) are device memory and may be null
/// otherwise. Supports 1 <= headDim <= kMaxAttentionHeadDim and heads a
/// multiple of kvHeads; other shapes are InvalidArgument errors. `out` must
/// not overlap the inputs.
///
/// `products` is the arithmetic of the products. F32 (the default) forms
/// every product in f32 on the CUDA cores, within 1e-5 of the CPU kernel.
/// BF16 or F16 runs them on tensor cores with f32 sums, where the GPU has
/// them (compute capability 8.0) and headDim is a multiple of 16 up to 128:
/// q, k and v are rounded to that type, and so are the softmax
/// probabilities before their product with v (FlashAttention's
/// arithmetic); other shapes take the f32 kernels. I32 is an
/// InvalidArgument error.
absl::Status attention(CudaContext &context, const float *q, const float *k,
                       const float *v, const int32_t *prefixLengths,
                       const float *alibiSlopes, float *out,
                       const cpu::AttentionShape &shape,
                       DType products = DType::F32);

/// The gradients of attention from dout (shaped like out), as
/// cpu::attentionGrad: dq, dk and dv (shaped like q, k and v) are
/// overwritten. The softmax is recomputed from q and k (the forward's
/// output is not needed); dk and dv sum over the query heads that share a
/// kv head in head order. Uses context scratch for three floats per
/// (sample, head, query row). The outputs must not overlap the inputs or
/// each other. `products` as for attention: on tensor cores, dout and the
/// score gradients are rounded too.
absl::Status attentionGrad(CudaContext &context, const float *q, const float *k,
                           const float *v, const int32_t *prefixLengths,
                           const float *alibiSlopes, const float *dout,
                           float *dq, float *dk, float *dv,
                           const cpu::AttentionShape &shape,
                           DType products = DType::F32);

/// Whether the typed attention below takes `shape` with 16-bit tensors of
/// `type`: the tensor-core kernels' shapes (tensorCoresTake: BF16 or F16,
/// head dimensions that are multiples of 16 up to 128, compute capability
/// 8.0).
bool attentionTakes16Bit(const cpu::AttentionShape &shape, DType type);

/// attention and attentionGrad on tensors of one float type (q, k, v, dout
/// and the results alike): F32 runs the f32 kernels above (exact f32
/// products). BF16 or F16 runs the tensor-core kernels in that type on the
/// tensors as they are, without f32 copies: the operands are read in
/// their type, the probabilities and score gradients round to it as
/// above, every sum is f32, and each result is rounded once to the type.
/// These are the bits of widening the operands to f32, running the f32
/// entry points with `products` of the same type and rounding the results
/// back (a 16-bit plan's attention, as the CUDA executor ran it on f32
/// copies). Tensors of mixed types are an InvalidArgument error; 16-bit
/// shapes that attentionTakes16Bit refuses, an Unimplemented one.
absl::Status attention(CudaContext &context, Operand q, Operand k, Operand v,
                       const int32_t *prefixLengths, const float *alibiSlopes,
                       Result out, const cpu::AttentionShape &shape);
absl::Status attentionGrad(CudaContext &context, Operand q, Operand k,
                           Operand v, const int32_t *prefixLengths,
                           const float *alibiSlopes, Operand dout, Result dq,
                           Result dk, Result dv,
                           const cpu::AttentionShape &shape);

/// Rotary embedding of [batch * seq, heads * headDim] rows, as cpu::rope:
/// in each head, element i < rotaryDim / 2 and element i + rotaryDim / 2
/// rotate by the angle position * base^(-2i / rotaryDim) (times
/// `direction`: 1 rotates, -1 rotates back, which is also the gradient);
/// the other elements are copied. `out` may be `x` itself (in place), but
/// must not partly overlap it. 0 <= rotaryDim <= headDim, else an
/// InvalidArgument error.
absl::Status rope(CudaContext &context, const float *x, float *out,
                  int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                  int64_t rotaryDim, float base, float direction);

/// Where a dropout's step and microbatch come from: the `step` argument
/// (no `words`), or, for a call recorded once and replayed
/// (CallRecordings.h), the device words [step, microbatch] the executor
/// writes before each call (CudaContext::callWords), the piece moved by
/// `perMicrobatch` elements for each microbatch.
struct DropoutCall {
  const uint64_t *words = nullptr;
  uint64_t perMicrobatch = 0;
};

/// Inverted dropout with the runtime's counter-based mask, as cpu::dropout:
/// element i is kept (and scaled by 1 / (1 - probability)) when
/// dropoutUniform(seed, step, stream, piece.globalIndex(i)) >= probability
/// and zeroed otherwise, the same decisions as the CPU backend's bit for
/// bit. `out` may be `x` itself.
absl::Status dropout(CudaContext &context, const float *x, float *out,
                     int64_t count, double probability, uint64_t seed,
                     uint64_t step, uint64_t stream, DropoutPiece piece = {},
                     DropoutCall call = {});

// rope and dropout, typed (CudaKernels.h's typed kernels): x and out each
// of its own float type, the arithmetic the f32 kernels'.
absl::Status rope(CudaContext &context, Operand x, Result out, int64_t batch,
                  int64_t seq, int64_t heads, int64_t headDim,
                  int64_t rotaryDim, float base, float direction);
absl::Status dropout(CudaContext &context, Operand x, Result out, int64_t count,
                     double probability, uint64_t seed, uint64_t step,
                     uint64_t stream, DropoutPiece piece = {},
                     DropoutCall call = {});

} // namespace triad::rt::cuda

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDAATTENTION_H
