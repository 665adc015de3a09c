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

#include "llvm/Support/Error.h"

namespace triad::interp {

enum class Mask { Causal, Prefix, None };

llvm::Expected<Tensor> embedding(const Tensor &ids, const Tensor &table);
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
/// Repeats `x` along new leading dimensions up to `shape`.
Tensor broadcast(const Tensor &x, llvm::ArrayRef<int64_t> shape);

/// Inverted dropout with the counter-based mask of the runtime.
Tensor dropout(const Tensor &x, double probability, uint64_t seed,
               uint64_t step, uint64_t stream);

/// Mean of -log softmax(logits)[label] over the tokens whose label is not
/// `ignoreIndex`; 0 when every label is ignored.
llvm::Expected<double> crossEntropy(const Tensor &logits, const Tensor &labels,
                                    int64_t ignoreIndex);

/// Sum (or mean) over `dims`; `keepDims` keeps them with size 1.
Tensor reduce(const Tensor &x, llvm::ArrayRef<int64_t> dims, bool keepDims,
              bool mean);

} // namespace triad::interp

#endif // TRIAD_INTERPRETER_KERNELS_H
