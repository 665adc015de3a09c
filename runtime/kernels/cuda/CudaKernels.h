//===- CudaKernels.h - CUDA kernels of the Triad runtime ---------*- C++
//-*-===//
//
// The CUDA backend's kernels, one entry point per CPU kernel they stand in
// for (runtime/kernels/cpu/CpuKernels.h) plus the fused forms a GPU wants.
// Every pointer is device memory; every call enqueues its work on the
// context's stream and returns without waiting, its status saying only
// whether the launch worked. Data-dependent errors (a token id or a label
// outside the vocabulary) raise a bit of the context's error flags, which
// CudaContext::synchronize() turns into a status.
//
// Numerics mirror the CPU kernels: the same formulas, fp32 element math,
// row statistics and long sums accumulated in double, and every reduction
// in a fixed order (no floating-point atomics), so that a result does not
// depend on timing and f32 results are within 1e-5 (relative) of the CPU
// backend's. The tests (runtime/tests/CudaKernelsTest.cpp) check each one
// against its CPU kernel.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
#define TRIAD_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H

#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cuda/CudaContext.h"

#include "absl/status/status.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace triad::rt::cuda {

/// The same activations as the CPU backend (the plan's kind numbers).
using Activation = cpu::Activation;

/// Element types of matrix-product operands, casts and the typed
/// element-wise kernels (I32: token ids, casts only).
enum class DType { F32, BF16, F16, I32 };
/// "f32", "bf16", "f16" or "i32".
inline const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::I32:
    return "i32";
  }
  return "f32";
}

//===----------------------------------------------------------------------===//
// Matrix products (cuBLASLt; CudaMatmul.cpp)
//===----------------------------------------------------------------------===//

/// What cuBLASLt applies to the product before storing it. The bias is a
/// vector of `n` values added to every row of c (a linear layer's bias);
/// GeluTanhBias is the tanh approximation of GELU (Activation::GeluTanh),
/// the only GELU cuBLASLt has. GeluTanhGrad is GeluTanhBias's backward: it
/// multiplies the product (the gradient of the GELU's output) by the GELU's
/// derivative at its input, as activationGrad does, and may also write the
/// sum of that over the rows of c (the bias gradient). The epilogue runs on
/// the f32 product, and c is rounded to its type once, after it.
enum class Epilogue { None, Bias, ReluBias, GeluTanhBias, GeluTanhGrad };

struct MatmulShape {
  /// c[i] = op(a[i]) * op(b[i]) for i < batch, row-major: op(a) is
  /// [m x k], op(b) [k x n], c [m x n]. rhsBatched false: one b for all.
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transposeA = false, transposeB = false, rhsBatched = false;
};

struct MatmulOptions {
  /// a and b have `inputType`; c has `outputType` (F32, or inputType).
  /// Products of BF16 or F16 inputs accumulate in fp32. F32 inputs use
  /// TF32 tensor cores only when the context allows it.
  DType inputType = DType::F32, outputType = DType::F32;
  /// c += product instead of c = product (with Epilogue::None only).
  bool accumulate = false;
  /// With accumulate: c += weight[0] * product, `weight` an f32 on the
  /// device (cuBLASLt's alpha, its scalars then device pointers); null: c
  /// += product.
  const float *weight = nullptr;
  /// With Epilogue::None or Bias (and not accumulate): c = (product [+
  /// bias]) + addend, a tensor of c's shape and outputType, c's very bytes
  /// or apart from them (cuBLASLt's C, with beta 1, added before the bias,
  /// c rounded once); null: none.
  const void *addend = nullptr;
  Epilogue epilogue = Epilogue::None;
  /// `n` values of `biasType` (F32, or outputType), with every epilogue
  /// but None.
  const void *bias = nullptr;
  DType biasType = DType::F32;
  /// With ReluBias and GeluTanhBias: where the biased product (the
  /// activation's input, which its gradient reads) also goes, of c's shape
  /// and outputType; null: nowhere. cuBLASLt writes it with the GELU
  /// (CUBLASLT_EPILOGUE_GELU_AUX_BIAS) where n is a multiple of 8; its
  /// ReLU keeps a bit mask instead, so otherwise the product and bias go
  /// there and the activation kernel reads them back (for 16-bit GELU
  /// results, from the rounded sum).
  void *preActivation = nullptr;
  /// With GeluTanhGrad: the GELU's input, of c's shape and outputType (not
  /// c itself), which cuBLASLt reads as its auxiliary input
  /// (CUBLASLT_EPILOGUE_DGELU) where n is a multiple of 8.
  const void *activationInput = nullptr;
  /// With GeluTanhGrad: where c summed over its rows goes (n values of
  /// biasGradType, F32 or outputType); null: nowhere. cuBLASLt sums the f32
  /// values before c is rounded (CUBLASLT_EPILOGUE_DGELU_BGRAD, where the
  /// product is one cuBLASLt call); otherwise reduceSum sums c. Where
  /// cuBLASLt has no DGELU algorithm, the product, the activation gradient
  /// kernel (in place on c) and reduceSum compute them.
  void *biasGrad = nullptr;
  DType biasGradType = DType::F32;
};

/// The product through cuBLASLt (the CPU's cpu::matmul for F32). An
/// epilogue cuBLASLt refuses (no algorithm, a type combination it does not
/// document: a bias or bias gradient of another type than c's, a leading
/// dimension not a multiple of 8 for its auxiliary operand), or that the
/// context turns off (ContextOptions::fuseEpilogues), runs as the product
/// and Triad's kernels after it: the forward one on the f32 product, the
/// bias and activation rounded once; the gradient one as documented above.
/// A product that adds (accumulate, addend) runs as the f32 product and
/// one kernel after it, c rounded once, where cuBLASLt has no algorithm for
/// it, where the context turns fusion off, and where the product is one
/// cuBLASLt call per batch element (a transposed lhs over a shared rhs). A
/// refusal is remembered per product shape. Where k is 0 the product is
/// zeros, as the CPU's.
absl::Status matmul(CudaContext &context, const void *a, const void *b, void *c,
                    const MatmulShape &shape,
                    const MatmulOptions &options = {});

/// The calling thread's products with an epilogue: those cuBLASLt ran
/// fused, and those that ran as the product and kernels after it (never
/// reset: read differences).
struct EpilogueUse {
  int64_t fused = 0, unfused = 0;
};
EpilogueUse &epilogueUse();

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// out = lhs + rhs, rhs repeating every `period` elements.
absl::Status addBroadcast(CudaContext &context, const float *lhs,
                          const float *rhs, float *out, int64_t count,
                          int64_t period);
absl::Status mul(CudaContext &context, const float *a, const float *b,
                 float *out, int64_t count);
absl::Status scale(CudaContext &context, const float *x, float factor,
                   float *out, int64_t count);
/// out = x * factor[0] (a device scalar: the plan's ScaleBy).
absl::Status scaleBy(CudaContext &context, const float *x, const float *factor,
                     float *out, int64_t count);
/// acc += weight[0] * x (weight a device scalar).
absl::Status accumulate(CudaContext &context, float *acc, const float *x,
                        const float *weight, int64_t count);
absl::Status fill(CudaContext &context, float *out, float value, int64_t count);

/// The piece of a persistent tensor whose initial values initValues draws
/// (Executor::InitDraw): local element (c_0, .., c_{dims-1}) (row-major over
/// `local`) is global element sum (c_d + offsets[d]) x globalStrides[d],
/// inside the tensor where every c_d < inside[d].
constexpr int kInitDims = 8;
struct InitPiece {
  int32_t dims = 0;
  int64_t local[kInitDims] = {}, offsets[kInitDims] = {},
          globalStrides[kInitDims] = {}, inside[kInitDims] = {};
};
/// A persistent tensor's initial values on the device, as the host draws
/// them (Executor::initialValues): with `normal`, float(stddev x the
/// normal deviate of each element's global index) of the Philox stream
/// keyed (key0, key1) (normalPair of runtime/init/PhiloxRounds.h: the same
/// Philox bits, the device's log, sin and cos); else `fill`; 0 outside the
/// tensor.
absl::Status initValues(CudaContext &context, float *out,
                        const InitPiece &piece, bool normal, float fill,
                        uint32_t key0, uint32_t key1, double stddev);
/// out = (to) x: floats round to nearest even, f32 to i32 truncates toward
/// zero (as the CPU's Cast).
absl::Status cast(CudaContext &context, const void *x, DType from, void *out,
                  DType to, int64_t count);
/// The same on `stream` rather than the context's (the CUDA executor widens
/// and rounds the 16-bit tensors of its NCCL collectives on its
/// communication stream, in order with NCCL's kernels).
absl::Status cast(cudaStream_t stream, const void *x, DType from, void *out,
                  DType to, int64_t count);

absl::Status activation(CudaContext &context, Activation kind, const float *x,
                        float *out, int64_t count);
/// dx = f'(x) * dy.
absl::Status activationGrad(CudaContext &context, Activation kind,
                            const float *x, const float *dy, float *dx,
                            int64_t count);
/// out = act(gate) * up: Silu gives SwiGLU, Gelu GeGLU.
absl::Status gated(CudaContext &context, Activation kind, const float *gate,
                   const float *up, float *out, int64_t count);
/// The gradients of gated: dgate = act'(gate) * up * dy, dup = act(gate) *
/// dy (both overwritten).
absl::Status gatedGrad(CudaContext &context, Activation kind, const float *gate,
                       const float *up, const float *dy, float *dgate,
                       float *dup, int64_t count);

/// out = act(x + bias) over rows of `width`, bias [width] (a linear layer's
/// bias and activation in one pass).
absl::Status biasActivation(CudaContext &context, Activation kind,
                            const float *x, const float *bias, float *out,
                            int64_t rows, int64_t width);
/// dx = act'(x + bias) * dy and dbias (overwritten) = the sum of dx over
/// the rows.
absl::Status biasActivationGrad(CudaContext &context, Activation kind,
                                const float *x, const float *bias,
                                const float *dy, float *dx, float *dbias,
                                int64_t rows, int64_t width);

//===----------------------------------------------------------------------===//
// Elementwise, each operand in its own type
//===----------------------------------------------------------------------===//

/// A tensor a typed kernel reads (device memory; F32, BF16 or F16, any
/// 2-byte-aligned address for the 16-bit types).
struct Operand {
  const void *data;
  DType type;
};

/// A tensor a typed kernel writes (F32, BF16 or F16).
struct Result {
  void *data;
  DType type;
};

// The typed kernels: the entry points that take Operand and Result, here
// and in the sections below (and rope and dropout, CudaAttention.h), are
// the f32 kernels with operands and results of any float type, which may
// differ from one another. Each operand is widened to f32 as it is read,
// the f32 kernel's arithmetic runs in its order, and each result is
// rounded once to its type (to nearest even, as cast). Since widening is
// exact, the bits are those of casting the 16-bit operands to f32, running
// the f32 kernel and casting its results back, without the f32 copies: a
// 16-bit plan's instructions run on their values as they are. (Where the
// f32 kernel rounds a double sum to f32, as the norms' dgamma, reduceSum
// and logSumExp do, a 16-bit result is that f32 value rounded again: two
// roundings, kept because they are the f32 kernel's bits.) With every
// type F32 a typed entry point runs the f32 kernel itself. A result may
// overwrite an operand of its type that is read element for element (the
// same address, where the f32 kernel allows it in place), but must not
// otherwise share bytes with an operand. An I32 operand or result is an
// InvalidArgument error.

/// out = lhs + rhs, rhs repeating every `period` elements.
absl::Status addBroadcast(CudaContext &context, Operand lhs, Operand rhs,
                          Result out, int64_t count, int64_t period);
absl::Status mul(CudaContext &context, Operand a, Operand b, Result out,
                 int64_t count);
absl::Status scale(CudaContext &context, Operand x, float factor, Result out,
                   int64_t count);
absl::Status activation(CudaContext &context, Activation kind, Operand x,
                        Result out, int64_t count);
/// dx = f'(x) * dy.
absl::Status activationGrad(CudaContext &context, Activation kind, Operand x,
                            Operand dy, Result dx, int64_t count);
/// out = act(gate) * up.
absl::Status gated(CudaContext &context, Activation kind, Operand gate,
                   Operand up, Result out, int64_t count);
/// dgate = act'(gate) * up * dy, dup = act(gate) * dy.
absl::Status gatedGrad(CudaContext &context, Activation kind, Operand gate,
                       Operand up, Operand dy, Result dgate, Result dup,
                       int64_t count);
/// out = act(x + bias) over rows of `width`, bias [width]. (There is no
/// typed biasActivationGrad: its dbias sums dx before rounding, which
/// wants the f32 dx.)
absl::Status biasActivation(CudaContext &context, Activation kind, Operand x,
                            Operand bias, Result out, int64_t rows,
                            int64_t width);
/// out = x * factor[0] (a device scalar).
absl::Status scaleBy(CudaContext &context, Operand x, const float *factor,
                     Result out, int64_t count);
/// acc += weight[0] * x, acc read and written in its type (a 16-bit
/// plan's gradient accumulators with grad-accumulation=param).
absl::Status accumulate(CudaContext &context, Result acc, Operand x,
                        const float *weight, int64_t count);
absl::Status fill(CudaContext &context, Result out, float value, int64_t count);
/// out = flag[0] != 0 ? a : b (out may be a or b).
absl::Status select(CudaContext &context, const float *flag, Operand a,
                    Operand b, Result out, int64_t count);

//===----------------------------------------------------------------------===//
// Layout: strided copies (of 2- or 4-byte elements) and reductions
//===----------------------------------------------------------------------===//

/// The most dimensions a strided copy or a sum handles.
constexpr int kMaxRank = 8;

/// A copy over the coordinates c of `shape`: out[outOffset + sum(c[d] *
/// outStrides[d])] = x[sum((c[d] + shift[d]) * xStrides[d])], or 0 where
/// some c[d] + shift[d] lies outside [0, bound[d]). It expresses the plan's
/// transpose (permuted strides), slice (shifts), pad (negative shifts and
/// bounds), broadcast (zero strides) and each part of a concat (an offset
/// into the result). Sizes, strides and shifts count elements, of
/// `elementBytes` each: 4 for f32 and i32 values, 2 for bf16 and f16 ones
/// (a copy moves bits, so a 16-bit tensor's layout ops need no f32 copy).
struct StridedCopy {
  int rank = 0;
  int elementBytes = 4;
  int64_t shape[kMaxRank] = {};
  int64_t xStrides[kMaxRank] = {};
  int64_t shift[kMaxRank] = {};
  int64_t bound[kMaxRank] = {};
  int64_t outStrides[kMaxRank] = {};
  int64_t outOffset = 0;
};

/// The copy `copy`; InvalidArgument beyond kMaxRank dimensions or for
/// elements of other than 2 or 4 bytes.
absl::Status stridedCopy(CudaContext &context, const void *x, void *out,
                         const StridedCopy &copy);
/// The same on `stream` rather than the context's (the CUDA executor packs
/// and joins the pieces of its NCCL collectives on its communication
/// stream).
absl::Status stridedCopy(cudaStream_t stream, const void *x, void *out,
                         const StridedCopy &copy);

/// out = factor * x summed to `outShape` (the plan's Sum: the adjoint of a
/// broadcast, `outShape` aligned with x's trailing dimensions, a size of 1
/// where x is summed), in double. Each output element adds its x elements
/// in x's row-major order, as the CPU does, where one block of rows covers
/// them (the two then agree exactly); over more rows, partial sums of
/// blocks of rows are added in block order (the same bits every run, not
/// the CPU's).
absl::Status reduceSum(CudaContext &context, const float *x,
                       const std::vector<int64_t> &xShape, float *out,
                       const std::vector<int64_t> &outShape, double factor);
/// The same, typed (a 16-bit plan's bias gradients).
absl::Status reduceSum(CudaContext &context, Operand x,
                       const std::vector<int64_t> &xShape, Result out,
                       const std::vector<int64_t> &outShape, double factor);

//===----------------------------------------------------------------------===//
// Device scalars of the optimizer step (runtime/kernels/StepMath.h)
//===----------------------------------------------------------------------===//

/// out = flag[0] != 0 ? a : b, `count` elements (out may be a or b).
absl::Status select(CudaContext &context, const float *flag, const float *a,
                    const float *b, float *out, int64_t count);
/// out[0] = stepmath::learningRate(step[0], peak, floor, warmup, decay).
absl::Status learningRate(CudaContext &context, const float *step, double peak,
                          double floor, int64_t warmup, int64_t decay,
                          float *out);
/// coefficient[0], norm[0] = stepmath::clipCoefficient(sumSquares[0],
/// maxNorm).
absl::Status clipCoefficient(CudaContext &context, const float *sumSquares,
                             double maxNorm, float *coefficient, float *norm);
/// stepmath::lossScaleUpdate of the device scalars into skip, nextScale,
/// nextGood and inverse (which may be the inputs: all are read first).
absl::Status lossScaleUpdate(CudaContext &context, const float *sumSquares,
                             const float *scale, const float *good,
                             double growth, double backoff, int64_t interval,
                             float *skip, float *nextScale, float *nextGood,
                             float *inverse);
/// out[0] = stepmath::reciprocal(x[0]).
absl::Status reciprocal(CudaContext &context, const float *x, float *out);

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Layer norm over rows of `width`; `beta` may be null.
absl::Status layerNorm(CudaContext &context, const float *x, const float *gamma,
                       const float *beta, float *y, int64_t rows, int64_t width,
                       float epsilon);
/// dx, and dgamma accumulated (+=) over the rows. dx shares no bytes with x
/// or dy (dgamma's pass reads them after dx is written; the forward kernels
/// may write y over x).
absl::Status layerNormGrad(CudaContext &context, const float *x,
                           const float *gamma, const float *dy, float *dx,
                           float *dgamma, int64_t rows, int64_t width,
                           float epsilon);
absl::Status rmsNorm(CudaContext &context, const float *x, const float *gamma,
                     float *y, int64_t rows, int64_t width, float epsilon);
absl::Status rmsNormGrad(CudaContext &context, const float *x,
                         const float *gamma, const float *dy, float *dx,
                         float *dgamma, int64_t rows, int64_t width,
                         float epsilon);

// The same, typed: statistics and sums as in the f32 kernels (in double),
// dgamma's f32 sum added in f32 to what dgamma holds and the total rounded
// to its type. An absent beta has null data. dx shares no bytes with x or
// dy, as above.
absl::Status layerNorm(CudaContext &context, Operand x, Operand gamma,
                       Operand beta, Result y, int64_t rows, int64_t width,
                       float epsilon);
absl::Status layerNormGrad(CudaContext &context, Operand x, Operand gamma,
                           Operand dy, Result dx, Result dgamma, int64_t rows,
                           int64_t width, float epsilon);
absl::Status rmsNorm(CudaContext &context, Operand x, Operand gamma, Result y,
                     int64_t rows, int64_t width, float epsilon);
absl::Status rmsNormGrad(CudaContext &context, Operand x, Operand gamma,
                         Operand dy, Result dx, Result dgamma, int64_t rows,
                         int64_t width, float epsilon);

//===----------------------------------------------------------------------===//
// Embeddings and the loss
//===----------------------------------------------------------------------===//

/// Raises kBadPrefixLength where one of `batch` prefix lengths lies outside
/// [0, keySeq], on the device: the host need not wait for the GPU to read
/// them (the CPU backend checks them as checkPrefixLengths does). The
/// attention kernels stay within the keys whatever the lengths.
absl::Status checkPrefixLengths(CudaContext &context, const int32_t *lengths,
                                int64_t batch, int64_t keySeq);

/// out[t, :] = table[ids[t], :] for a table of `rows` rows holding rows
/// [firstRow, firstRow + rows) of a vocabulary of `vocab` ids (-1: rows).
/// Ids of other pieces give zeros; ids outside [0, vocab) give zeros and
/// raise kBadTokenId.
absl::Status embedding(CudaContext &context, const int32_t *ids,
                       const float *table, float *out, int64_t tokens,
                       int64_t rows, int64_t hidden, int64_t firstRow = 0,
                       int64_t vocab = -1);
/// dtable[ids[t], :] += dy[t, :] in token order (deterministic: the CPU's
/// bits) for a table of `rows` rows, the tokens sorted by row so that rows
/// sum in parallel; ids outside [0, vocab) are skipped and raise
/// kBadTokenId. A vocab-parallel piece holds rows [firstRow, firstRow +
/// rows) of a vocabulary of `vocab` ids (-1: `rows`).
absl::Status embeddingGradAccumulate(CudaContext &context, const int32_t *ids,
                                     const float *dy, float *dtable,
                                     int64_t tokens, int64_t rows,
                                     int64_t hidden, int64_t firstRow = 0,
                                     int64_t vocab = -1);
/// embedding, typed.
absl::Status embedding(CudaContext &context, const int32_t *ids, Operand table,
                       Result out, int64_t tokens, int64_t rows, int64_t hidden,
                       int64_t firstRow = 0, int64_t vocab = -1);
/// dtable (overwritten) = the sums of embeddingGradAccumulate from zeros,
/// typed: the sums run in f32 in token order (in context scratch for a
/// 16-bit dtable, rounded once at the end).
absl::Status embeddingGrad(CudaContext &context, const int32_t *ids, Operand dy,
                           Result dtable, int64_t tokens, int64_t rows,
                           int64_t hidden, int64_t firstRow = 0,
                           int64_t vocab = -1);

/// The columns a vocab-parallel piece of logits holds, as on the CPU
/// (cpu::VocabPiece): `[first, first + columns)` of a whole vocabulary of
/// `vocab` classes, with each row's log-sum-exp over the whole in `lse`
/// (device memory here, one per row; null: computed from the row's class
/// columns). Columns at `vocab` and beyond are padding and take no part in
/// the loss; a whole padded vocabulary is the piece at 0 without lse.
using VocabPiece = cpu::VocabPiece;

/// loss[0] = the mean cross-entropy of rows of `vocab` logits over the
/// labels that are not `ignoreIndex` (0 when there are none); a label
/// outside [0, vocab) is left out and raises kBadLabel. For a `piece`
/// (whose rows hold `vocab` of its columns), labels are checked against the
/// whole vocabulary and only those in the piece's class columns contribute,
/// `lse - logit`, divided by the count of all valid labels: the pieces'
/// losses add up to the loss.
absl::Status crossEntropy(CudaContext &context, const float *logits,
                          const int32_t *labels, float *loss, int64_t rows,
                          int64_t vocab, int32_t ignoreIndex,
                          const VocabPiece *piece = nullptr);
/// dlogits (overwritten; may be `logits` itself, so that the logits are
/// never held twice) of the mean loss, times dloss[0] (a device scalar).
/// Ignored rows and rows of bad labels are zeros. For a `piece`: its
/// columns of the whole gradient (labels checked against the whole
/// vocabulary), its padding columns zeros.
absl::Status crossEntropyGrad(CudaContext &context, const float *logits,
                              const int32_t *labels, const float *dloss,
                              float *dlogits, int64_t rows, int64_t vocab,
                              int32_t ignoreIndex,
                              const VocabPiece *piece = nullptr);
/// out[r] = log(sum(exp(x[r, :classes]))) for `rows` rows of `columns`
/// values, over the first `classes` of them (minus infinity for none);
/// `classes` outside [0, columns] is an InvalidArgument error.
absl::Status logSumExp(CudaContext &context, const float *x, float *out,
                       int64_t rows, int64_t columns, int64_t classes);

/// A vocab-parallel piece for the typed loss kernels: a VocabPiece whose
/// lse (null data: none) has a type of its own (a plan gives it the
/// logits' type).
struct TypedVocabPiece {
  Operand lse;
  int64_t first, vocab;
};

// The loss kernels, typed: the logits (and a piece's lse) of any float
// type, the loss f32, dlogits of any float type (in place only in the
// logits' type).
absl::Status crossEntropy(CudaContext &context, Operand logits,
                          const int32_t *labels, float *loss, int64_t rows,
                          int64_t vocab, int32_t ignoreIndex,
                          const TypedVocabPiece *piece = nullptr);
absl::Status crossEntropyGrad(CudaContext &context, Operand logits,
                              const int32_t *labels, const float *dloss,
                              Result dlogits, int64_t rows, int64_t vocab,
                              int32_t ignoreIndex,
                              const TypedVocabPiece *piece = nullptr);
absl::Status logSumExp(CudaContext &context, Operand x, Result out,
                       int64_t rows, int64_t columns, int64_t classes);

/// out[0] = the number of labels that are not `ignoreIndex`, as f32.
absl::Status countValid(CudaContext &context, const int32_t *labels,
                        int64_t count, int32_t ignoreIndex, float *out);

//===----------------------------------------------------------------------===//
// Gradient norm and optimizer, over many tensors in few launches
//===----------------------------------------------------------------------===//

/// A tensor of `count` elements of a float type (a 16-bit gradient is
/// widened as it is read).
struct ConstSpan {
  const void *data;
  int64_t count;
  DType type = DType::F32;
};

/// out[0] = the sum of squares of every element of every span, accumulated
/// in double in a fixed order (the global gradient norm's square; the
/// plan's SumSquares over its inputs).
absl::Status sumSquares(CudaContext &context,
                        const std::vector<ConstSpan> &spans, float *out,
                        double limit = std::numeric_limits<double>::infinity());

/// An f32 parameter with its moments, its gradient in its own type (a
/// 16-bit gradient is widened as it is read), its weight decay, and where
/// `rounded.data` is set, the bf16 or f16 tensor that receives the updated
/// parameter rounded (the plan's Cast, in the same pass).
struct AdamWTensor {
  float *param;
  Operand grad;
  float *m, *v;
  int64_t count;
  float weightDecay = 0.0f;
  Result rounded = {nullptr, DType::F32};
};

struct AdamWHyper {
  float beta1, beta2, epsilon;
};

/// One AdamW step in place over every tensor (cpu::adamw's formula), in
/// one launch; lr, step and coefficient (the clipping factor applied to
/// the gradients) are device scalars, and so is `skip` where it is given:
/// when it is not 0 nothing is written (f16's overflowed step).
absl::Status adamw(CudaContext &context,
                   const std::vector<AdamWTensor> &tensors, const float *lr,
                   const float *step, const float *coefficient,
                   const AdamWHyper &hyper, const float *skip = nullptr);

} // namespace triad::rt::cuda

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
