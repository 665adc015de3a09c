//===- Kernels.h - reference semantics of the triad ops ----------*- C++
//-*-===//
//
// The meaning of every `triad` op as a function on float64 tensors. These
// are the oracle for the runtime's kernels and for every pass: plain loops,
// written to be read. Shapes are assumed verified (the interpreter runs
// verified IR); data-dependent errors (an id outside the vocabulary) are
// returned as llvm::Error.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_INTERPRETER_KERNELS_H
#define TRIAD_INTERPRETER_KERNELS_H

#include "triad/Interpreter/Tensor.h"

#include "runtime/init/Init.h"

#include "llvm/Support/Error.h"
#include <limits>
#include <optional>

namespace triad::interp {

enum class Mask { Causal, Prefix, None };

/// Rows of `table` for `ids`. A vocab-parallel piece holds rows
/// [firstRow, firstRow + rows) of a vocabulary of `vocab` ids (-1: the
/// table's rows); ids in other pieces give rows of zeros. Ids outside
/// [0, vocab) are an error.
llvm::Expected<Tensor> embedding(const Tensor &ids, const Tensor &table,
                                 int64_t firstRow = 0, int64_t vocab = -1);
Tensor matmul(const Tensor &lhs, const Tensor &rhs, bool transposeLhs,
              bool transposeRhs);
/// `lhs + rhs`, the rhs broadcast over the leading dimensions of lhs.
Tensor add(const Tensor &lhs, const Tensor &rhs);
Tensor mul(const Tensor &lhs, const Tensor &rhs);
Tensor scale(const Tensor &x, double factor);
Tensor biasAdd(const Tensor &x, const Tensor &bias);

double geluExact(double x);
double geluTanh(double x);
double fastGelu(double x);
double silu(double x);
Tensor gelu(const Tensor &x, bool tanhApproximation);
Tensor fastGelu(const Tensor &x);
Tensor relu(const Tensor &x);
Tensor silu(const Tensor &x);
Tensor swiglu(const Tensor &gate, const Tensor &up);
Tensor geglu(const Tensor &gate, const Tensor &up);

/// Normalizes over the last dimension; `beta` may be null.
Tensor layerNorm(const Tensor &x, const Tensor &gamma, const Tensor *beta,
                 double epsilon);
Tensor rmsNorm(const Tensor &x, const Tensor &gamma, double epsilon);

/// Multi-head attention over packed heads ([batch, seq, heads * d]);
/// `prefixLengths` ([batch]) with Mask::Prefix, `alibiSlopes` ([heads]) may
/// be null.
llvm::Expected<Tensor> attention(const Tensor &q, const Tensor &k,
                                 const Tensor &v, const Tensor *prefixLengths,
                                 const Tensor *alibiSlopes, int64_t heads,
                                 int64_t kvHeads, Mask mask, double scale);
/// Rotary embedding (rotate-half form) of the first `rotaryDim` dimensions
/// of every head.
Tensor rope(const Tensor &x, int64_t heads, int64_t rotaryDim, double base);

Tensor reshape(const Tensor &x, llvm::ArrayRef<int64_t> shape);
Tensor transpose(const Tensor &x, llvm::ArrayRef<int64_t> permutation);
Tensor slice(const Tensor &x, llvm::ArrayRef<int64_t> offsets,
             llvm::ArrayRef<int64_t> sizes);
Tensor concat(llvm::ArrayRef<const Tensor *> inputs, int64_t dim);
/// NumPy-style broadcast of `x` to `shape` (trailing alignment, size-1
/// dimensions repeated).
Tensor broadcast(const Tensor &x, llvm::ArrayRef<int64_t> shape);
/// Zero padding: `low[i]` zeros before and `high[i]` after dimension i.
Tensor pad(const Tensor &x, llvm::ArrayRef<int64_t> low,
           llvm::ArrayRef<int64_t> high);

/// Inverted dropout with the counter-based mask of the runtime; `piece`
/// says where the elements sit in the whole tensor (a piece of the batch
/// starts later, a piece of the sequence is a run per sample).
Tensor dropout(const Tensor &x, double probability, uint64_t seed,
               uint64_t step, uint64_t stream, rt::DropoutPiece piece = {});

/// The columns a vocab-parallel piece of logits holds: `[first, first +
/// columns)` of a whole vocabulary of `vocab` classes, and each token's
/// log-sum-exp over the whole (`[..., 1]`; null: computed from the row).
/// Columns at `vocab` and beyond are the padding of a padded vocabulary:
/// they take no part in the loss. A whole padded vocabulary is the piece
/// at 0 without lse.
struct VocabPiece {
  const Tensor *lse;
  int64_t first;
  int64_t vocab;
};

/// Mean of -log softmax(logits)[label] over the tokens whose label is not
/// `ignoreIndex`; 0 when every label is ignored. For a `piece`, only the
/// labels in its columns contribute, `lse - logit`, still divided by the
/// count of all non-ignored labels.
llvm::Expected<double> crossEntropy(const Tensor &logits, const Tensor &labels,
                                    int64_t ignoreIndex,
                                    std::optional<VocabPiece> piece = {});

/// log(sum(exp(x))) over the last dimension, kept with size 1; for a
/// `piece`, over its columns that are classes (minus infinity without
/// any).
Tensor logSumExp(const Tensor &x, std::optional<VocabPiece> piece = {});

/// Sum (or mean) over `dims`; `keepDims` keeps them with size 1.
Tensor reduce(const Tensor &x, llvm::ArrayRef<int64_t> dims, bool keepDims,
              bool mean);

//===----------------------------------------------------------------------===//
// Gradients (the vector-Jacobian products of the ops above)
//===----------------------------------------------------------------------===//

enum class Activation { Gelu, GeluTanh, FastGelu, Relu, Silu };

/// The derivative of an activation at x.
double activationDerivative(Activation kind, double x);
Tensor activationGrad(Activation kind, const Tensor &x, const Tensor &dy);

/// Scatter-add of dy rows into a [rows, hidden] table gradient. A
/// vocab-parallel piece holds rows [firstRow, firstRow + rows); ids in
/// other pieces add nothing.
Tensor embeddingGrad(const Tensor &ids, const Tensor &dy, int64_t rows,
                     int64_t firstRow = 0);

struct NormGrads {
  Tensor dx, dgamma;
};
NormGrads layerNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                        double epsilon);
NormGrads rmsNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                      double epsilon);

struct AttentionGrads {
  Tensor dq, dk, dv;
};
llvm::Expected<AttentionGrads>
attentionGrad(const Tensor &q, const Tensor &k, const Tensor &v,
              const Tensor *prefixLengths, const Tensor *alibiSlopes,
              const Tensor &dout, int64_t heads, int64_t kvHeads, Mask mask,
              double scale);

/// Rotates dy back by the angles of `rope`.
Tensor ropeGrad(const Tensor &dy, int64_t heads, int64_t rotaryDim,
                double base);

/// Gradient of the mean cross-entropy, scaled by `dloss` (for a `piece`,
/// its columns of the whole gradient).
llvm::Expected<Tensor> crossEntropyGrad(const Tensor &logits,
                                        const Tensor &labels, double dloss,
                                        int64_t ignoreIndex,
                                        std::optional<VocabPiece> piece = {});

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// Linear warmup to `peak` over `warmup` steps, then a cosine down to
/// `floor` at step `decay`; steps count from 1.
double learningRate(double step, double peak, double floor, int64_t warmup,
                    int64_t decay);
/// The sum of the squares of `x`'s elements; +inf if one's magnitude is above
/// `limit`.
double sumSquares(const Tensor &x,
                  double limit = std::numeric_limits<double>::infinity());
struct Clip {
  double coefficient, norm;
};
Clip clipCoefficient(double sumSquares, double maxNorm);
struct AdamWState {
  Tensor param, m, v;
};
AdamWState adamw(const Tensor &param, const Tensor &grad, const Tensor &m,
                 const Tensor &v, double lr, double step, double coefficient,
                 double beta1, double beta2, double epsilon,
                 double weightDecay);

struct LossScale {
  double skip, scale, goodSteps, inverse;
};
/// Dynamic loss scaling: back off on a non-finite gradient norm, grow after
/// `growthInterval` good steps.
LossScale updateLossScale(double sumSquares, double scale, double goodSteps,
                          int64_t growthInterval, double growth,
                          double backoff);

} // namespace triad::interp

#endif // TRIAD_INTERPRETER_KERNELS_H
