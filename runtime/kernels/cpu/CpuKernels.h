//===- CpuKernels.h - fp32 CPU kernels of the Triad runtime ------*- C++
//-*-===//
//
// The CPU backend's kernels: plain fp32 pointers and sizes, row-major, no
// allocation (scratch comes from the caller where needed). Matrix products
// go to OpenBLAS; the rest are loops over rows, parallel with OpenMP. Each
// kernel computes what the reference interpreter's kernel of the same name
// defines (lib/Interpreter/Kernels.cpp), within fp32 rounding; the unit
// tests check every one against it.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CPU_CPUKERNELS_H
#define TRIAD_RUNTIME_KERNELS_CPU_CPUKERNELS_H

#include "runtime/init/Init.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

namespace triad::rt::cpu {

enum class Mask { Causal, Prefix, None };
enum class Activation { Gelu, GeluTanh, FastGelu, Relu, Silu };

/// c[b] = op(a[b]) * op(b[b]) (+ c[b] when `accumulate`) for `batch`
/// products of [m x k] by [k x n]; `rhsBatched` false shares one rhs.
void matmul(const float *a, const float *b, float *c, int64_t batch, int64_t m,
            int64_t n, int64_t k, bool transposeA, bool transposeB,
            bool rhsBatched, bool accumulate = false);

/// out[j] = factor * (sum over r < rows of x[r * width + j]), for j < width:
/// x reduced over its leading dimensions (a bias gradient), added in row
/// order in double and rounded once. The Sum kernel and the gradient
/// epilogue's bias gradient both reduce this way, so they agree in every
/// bit.
void sumRows(const float *x, int64_t rows, int64_t width, double factor,
             float *out);

/// A fused product's epilogue on c, `count` elements in rows of `n`: adds
/// `bias` ([n]) to every row, then, with an activation, applies it, the
/// biased product going to `preActivation` (null: nowhere; the activation
/// then runs in place). The arithmetic is addBroadcast's and activation's,
/// so c (and preActivation) get the bits of those kernels run one after
/// the other on the product.
void matmulEpilogue(float *c, const float *bias,
                    std::optional<Activation> activation, float *preActivation,
                    int64_t count, int64_t n);

/// out[t, :] = table[ids[t], :] for a table of `rows` rows. An id outside
/// [0, vocab) gives a row of zeros and the result false (the caller reports
/// the bad input). A vocab-parallel piece holds rows [firstRow, firstRow +
/// rows) of a vocabulary of `vocab` ids (-1: `rows`); ids of other pieces
/// give rows of zeros.
bool embedding(const int32_t *ids, const float *table, float *out,
               int64_t tokens, int64_t rows, int64_t hidden,
               int64_t firstRow = 0, int64_t vocab = -1);
/// dtable[ids[t], :] += dy[t, :] (dtable is not cleared) for a table of
/// `rows` rows; ids outside [0, vocab) are skipped and make the result
/// false. A vocab-parallel piece holds rows [firstRow, firstRow + rows) of
/// a vocabulary of `vocab` ids (-1: `rows`); ids of other pieces add
/// nothing here.
bool embeddingGradAccumulate(const int32_t *ids, const float *dy, float *dtable,
                             int64_t tokens, int64_t rows, int64_t hidden,
                             int64_t firstRow = 0, int64_t vocab = -1);

/// out = lhs + rhs, rhs repeating every `period` elements.
void addBroadcast(const float *lhs, const float *rhs, float *out, int64_t count,
                  int64_t period);
void mul(const float *a, const float *b, float *out, int64_t count);
void scale(const float *x, float factor, float *out, int64_t count);

void activation(Activation kind, const float *x, float *out, int64_t count);
/// dx = f'(x) * dy.
void activationGrad(Activation kind, const float *x, const float *dy, float *dx,
                    int64_t count);
/// out = act(gate) * up, act = silu (SwiGLU) or exact GELU (GeGLU).
void gated(Activation kind, const float *gate, const float *up, float *out,
           int64_t count);

/// The element-wise kernels above on values stored in any float type: bf16
/// and f16 values are widened to f32 a chunk at a time (a few thousand
/// elements, in cache), the f32 kernel runs on the chunk, and a 16-bit
/// result is rounded back once, so the results have the bits of the f32
/// kernels on f32 copies of the whole arrays without their memory traffic.
/// A result may be one of the operands (the same array, of its type).
enum class Storage { F32, BF16, F16 };
struct StoredIn {
  const void *data;
  Storage type;
};
struct StoredOut {
  void *data;
  Storage type;
};
void addBroadcast(StoredIn lhs, StoredIn rhs, StoredOut out, int64_t count,
                  int64_t period);
/// The norms on stored values, a row at a time (the bits of the f32
/// kernels on widened copies, each result rounded once); `beta` may be
/// null.
void layerNorm(StoredIn x, StoredIn gamma, const StoredIn *beta, StoredOut y,
               int64_t rows, int64_t width, float epsilon);
void layerNormGrad(StoredIn x, StoredIn gamma, StoredIn dy, StoredOut dx,
                   StoredOut dgamma, int64_t rows, int64_t width,
                   float epsilon);
void rmsNorm(StoredIn x, StoredIn gamma, StoredOut y, int64_t rows,
             int64_t width, float epsilon);
void rmsNormGrad(StoredIn x, StoredIn gamma, StoredIn dy, StoredOut dx,
                 StoredOut dgamma, int64_t rows, int64_t width, float epsilon);
/// out = x, converted between storage types (the bits of widening x and
/// rounding it to out's type).
void convert(StoredIn x, StoredOut out, int64_t count);
/// sumRows on stored values (the same bits as on widened copies).
void sumRows(StoredIn x, int64_t rows, int64_t width, double factor,
             StoredOut out);
void mul(StoredIn a, StoredIn b, StoredOut out, int64_t count);
void activation(Activation kind, StoredIn x, StoredOut out, int64_t count);
void activationGrad(Activation kind, StoredIn x, StoredIn dy, StoredOut dx,
                    int64_t count);
void gated(Activation kind, StoredIn gate, StoredIn up, StoredOut out,
           int64_t count);

/// Layer norm over rows of `width`; `beta` may be null.
void layerNorm(const float *x, const float *gamma, const float *beta, float *y,
               int64_t rows, int64_t width, float epsilon);
/// dx, and dgamma accumulated (+=) over the rows.
void layerNormGrad(const float *x, const float *gamma, const float *dy,
                   float *dx, float *dgamma, int64_t rows, int64_t width,
                   float epsilon);
void rmsNorm(const float *x, const float *gamma, float *y, int64_t rows,
             int64_t width, float epsilon);
void rmsNormGrad(const float *x, const float *gamma, const float *dy, float *dx,
                 float *dgamma, int64_t rows, int64_t width, float epsilon);

struct AttentionShape {
  int64_t batch, querySeq, keySeq, heads, kvHeads, headDim;
  Mask mask;
  float scale;
};
/// Fused attention over packed heads; `prefixLengths` ([batch]) with
/// Mask::Prefix and `alibiSlopes` ([heads]) may be null. Each thread forms
/// the scores of one (sample, head) at a time, a block of query rows at a
/// time; a block reads only the keys its rows may see, so the causal mask
/// skips the products above the diagonal.
void attention(const float *q, const float *k, const float *v,
               const int32_t *prefixLengths, const float *alibiSlopes,
               float *out, const AttentionShape &shape);
/// dq, dk, dv (all overwritten) from dout; recomputes the softmax.
void attentionGrad(const float *q, const float *k, const float *v,
                   const int32_t *prefixLengths, const float *alibiSlopes,
                   const float *dout, float *dq, float *dk, float *dv,
                   const AttentionShape &shape);
/// Attention and its gradient on stored values (the f32 entry points above
/// are these on f32 storage): each (sample, head)'s rows copied (widened)
/// into dense f32 buffers, the block run there, its results rounded back
/// (dk and dv once, after the query heads of their group).
void attention(StoredIn q, StoredIn k, StoredIn v, const int32_t *prefixLengths,
               const float *alibiSlopes, StoredOut out,
               const AttentionShape &s);
void attentionGrad(StoredIn q, StoredIn k, StoredIn v,
                   const int32_t *prefixLengths, const float *alibiSlopes,
                   StoredIn dout, StoredOut dq, StoredOut dk, StoredOut dv,
                   const AttentionShape &s);

/// Rotary embedding of [batch * seq, heads * headDim] rows; `direction` 1
/// rotates (rope), -1 rotates back (its gradient).
void rope(const float *x, float *out, int64_t batch, int64_t seq, int64_t heads,
          int64_t headDim, int64_t rotaryDim, float base, float direction);

/// The columns a vocab-parallel piece of logits holds: `[first, first +
/// columns)` of a whole vocabulary of `vocab` classes, with each row's
/// log-sum-exp over the whole (`lse`, one per row; null: computed from the
/// row). Columns at `vocab` and beyond are the padding of a padded
/// vocabulary and take no part in the loss; a whole padded vocabulary is
/// the piece at 0 without lse.
struct VocabPiece {
  const float *lse;
  int64_t first;
  int64_t vocab;
};

/// How many of a piece's `columns` (from its first) are classes (all of
/// them without a piece). Inline: the CUDA kernels count the same way.
inline int64_t classColumns(int64_t columns, const VocabPiece *piece) {
  if (!piece)
    return columns;
  return std::clamp<int64_t>(piece->vocab - piece->first, 0, columns);
}

/// Mean cross-entropy of rows of `vocab` logits over the labels that are
/// not `ignoreIndex`; returns the loss and sets `counted`. A label outside
/// [0, vocab) (other than the ignore index) sets `counted` to -1. For a
/// `piece` (whose rows hold `vocab` of its columns), only the labels in
/// its columns contribute, `lse - logit`, divided by the count of all
/// valid labels: the pieces' results add up to the loss.
float crossEntropy(const float *logits, const int32_t *labels, int64_t rows,
                   int64_t vocab, int32_t ignoreIndex, int64_t *counted,
                   const VocabPiece *piece = nullptr);
/// dlogits (overwritten) of the mean loss, times `dloss`; false (and zero
/// rows) for labels outside [0, vocab) (for a `piece`: its columns of the
/// whole gradient, labels checked against the whole vocabulary).
bool crossEntropyGrad(const float *logits, const int32_t *labels,
                      float *dlogits, int64_t rows, int64_t vocab,
                      int32_t ignoreIndex, float dloss,
                      const VocabPiece *piece = nullptr);
/// out[r] = log(sum(exp(x[r, :classes]))) for `rows` rows of `columns`
/// values, over the first `classes` of them (minus infinity for none).
void logSumExp(const float *x, float *out, int64_t rows, int64_t columns,
               int64_t classes);

/// Inverted dropout with the runtime's counter-based mask; `piece` says
/// where the elements sit in the whole tensor (global element indices).
void dropout(const float *x, float *out, int64_t count, double probability,
             uint64_t seed, uint64_t step, uint64_t stream,
             DropoutPiece piece = {});

/// Sum of squares accumulated in double, in an order that does not depend
/// on the thread count; +inf if an element's magnitude is above `limit`.
double sumSquares(const float *x, int64_t count,
                  double limit = std::numeric_limits<double>::infinity());

/// The labels that are not `ignoreIndex`.
int64_t countValid(const int32_t *labels, int64_t count, int32_t ignoreIndex);

/// acc += weight * x.
void accumulate(float *acc, const float *x, float weight, int64_t count);

/// One AdamW step in place (see triad.adamw_update).
void adamw(float *param, const float *grad, float *m, float *v, int64_t count,
           float lr, float step, float coefficient, float beta1, float beta2,
           float epsilon, float weightDecay);

} // namespace triad::rt::cpu

#endif // TRIAD_RUNTIME_KERNELS_CPU_CPUKERNELS_H
