//===- Kernels.cpp - reference semantics of the triad ops -----------------===//
//
// Plain float64 loops, one function per op; see Kernels.h.
//
//===----------------------------------------------------------------------===//

#include "triad/Interpreter/Kernels.h"

#include "runtime/init/Init.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace triad::interp {

namespace {

llvm::Error kernelError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

template <typename Fn> Tensor map(const Tensor &x, Fn fn) {
  Tensor result = x;
  for (double &value : result.data)
    value = fn(value);
  return result;
}

template <typename Fn> Tensor zip(const Tensor &a, const Tensor &b, Fn fn) {
  Tensor result = a;
  for (size_t i = 0; i < result.data.size(); ++i)
    result.data[i] = fn(a.data[i], b.data[i]);
  return result;
}

/// Splits a linear index into coordinates of `shape`.
std::vector<int64_t> coordinates(int64_t index, llvm::ArrayRef<int64_t> shape) {
  std::vector<int64_t> coords(shape.size());
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    coords[i] = index % shape[i];
    index /= shape[i];
  }
  return coords;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// A data value in a message: integers without a fraction ("7", "0.5").
std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

} // namespace

//===----------------------------------------------------------------------===//
// Linear algebra and elementwise ops
//===----------------------------------------------------------------------===//

llvm::Expected<Tensor> embedding(const Tensor &ids, const Tensor &table,
                                 int64_t firstRow, int64_t vocab) {
  int64_t rows = table.dim(0), hidden = table.dim(1);
  if (vocab < 0)
    vocab = rows;
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(hidden);
  Tensor result(shape);
  for (int64_t i = 0; i < ids.numElements(); ++i) {
    double id = ids.data[i];
    if (!(id >= 0 && id < static_cast<double>(vocab)))
      return kernelError(llvm::formatv(
          "token id {0} at position {1} is outside the vocabulary [0, {2})",
          number(id), i, vocab));
    auto row = static_cast<int64_t>(id) - firstRow;
    if (row < 0 || row >= rows)
      continue; // another piece's row: zeros
    std::copy_n(table.data.begin() + row * hidden, hidden,
                result.data.begin() + i * hidden);
  }
  return result;
}

Tensor matmul(const Tensor &lhs, const Tensor &rhs, bool transposeLhs,
              bool transposeRhs) {
  int64_t rank = lhs.rank();
  int64_t m = transposeLhs ? lhs.dim(rank - 1) : lhs.dim(rank - 2);
  int64_t k = transposeLhs ? lhs.dim(rank - 2) : lhs.dim(rank - 1);
  int64_t rhsRank = rhs.rank();
  int64_t n = transposeRhs ? rhs.dim(rhsRank - 2) : rhs.dim(rhsRank - 1);
  int64_t batch = numElements(llvm::ArrayRef(lhs.shape).drop_back(2));
  bool rhsBatched = rhsRank == rank && rank > 2;

  std::vector<int64_t> shape(lhs.shape.begin(), lhs.shape.end() - 2);
  shape.push_back(m);
  shape.push_back(n);
  Tensor result(shape);
  for (int64_t b = 0; b < batch; ++b) {
    const double *a = lhs.data.data() + b * m * k;
    const double *w = rhs.data.data() + (rhsBatched ? b * k * n : 0);
    double *out = result.data.data() + b * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double x = transposeLhs ? a[p * m + i] : a[i * k + p];
          double y = transposeRhs ? w[j * k + p] : w[p * n + j];
          sum += x * y;
        }
        out[i * n + j] = sum;
      }
  }
  return result;
}

Tensor add(const Tensor &lhs, const Tensor &rhs) {
  Tensor result = lhs;
  int64_t period = rhs.numElements();
  for (int64_t i = 0; i < result.numElements(); ++i)
    result.data[i] += rhs.data[i % period];
  return result;
}

Tensor mul(const Tensor &lhs, const Tensor &rhs) {
  return zip(lhs, rhs, [](double a, double b) { return a * b; });
}

Tensor scale(const Tensor &x, double factor) {
  return map(x, [&](double v) { return v * factor; });
}

Tensor biasAdd(const Tensor &x, const Tensor &bias) { return add(x, bias); }

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

double geluExact(double x) { return 0.5 * x * (1.0 + std::erf(x / M_SQRT2)); }

double geluTanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

double fastGelu(double x) { return x * sigmoid(1.702 * x); }

double silu(double x) { return x * sigmoid(x); }

Tensor gelu(const Tensor &x, bool tanhApproximation) {
  return tanhApproximation ? map(x, geluTanh) : map(x, geluExact);
}

Tensor fastGelu(const Tensor &x) {
  return map(x, static_cast<double (*)(double)>(fastGelu));
}

Tensor relu(const Tensor &x) {
  return map(x, [](double v) { return v > 0.0 ? v : 0.0; });
}

Tensor silu(const Tensor &x) {
  return map(x, static_cast<double (*)(double)>(silu));
}

Tensor swiglu(const Tensor &gate, const Tensor &up) {
  return zip(gate, up, [](double g, double u) { return silu(g) * u; });
}

Tensor geglu(const Tensor &gate, const Tensor &up) {
  return zip(gate, up, [](double g, double u) { return geluExact(g) * u; });
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

namespace {
/// The mean (0 unless `center`) and 1 / sqrt(statistic + epsilon) of one
/// row: the statistic is the variance (layer norm) or the mean square (RMS
/// norm).
struct RowStatistics {
  double mean, inverse;
};
RowStatistics rowStatistics(const double *in, int64_t width, double epsilon,
                            bool center) {
  double mean = 0.0;
  if (center) {
    for (int64_t i = 0; i < width; ++i)
      mean += in[i];
    mean /= width;
  }
  double statistic = 0.0;
  for (int64_t i = 0; i < width; ++i)
    statistic += (in[i] - mean) * (in[i] - mean);
  statistic /= width;
  return {mean, 1.0 / std::sqrt(statistic + epsilon)};
}

/// Shared by layer and RMS norm.
Tensor norm(const Tensor &x, const Tensor &gamma, const Tensor *beta,
            double epsilon, bool center) {
  int64_t width = x.dim(x.rank() - 1);
  int64_t rows = x.numElements() / width;
  Tensor result = x;
  for (int64_t r = 0; r < rows; ++r) {
    const double *in = x.data.data() + r * width;
    double *out = result.data.data() + r * width;
    RowStatistics stats = rowStatistics(in, width, epsilon, center);
    for (int64_t i = 0; i < width; ++i)
      out[i] = (in[i] - stats.mean) * stats.inverse * gamma.data[i] +
               (beta ? beta->data[i] : 0.0);
  }
  return result;
}
} // namespace

Tensor layerNorm(const Tensor &x, const Tensor &gamma, const Tensor *beta,
                 double epsilon) {
  return norm(x, gamma, beta, epsilon, /*center=*/true);
}

Tensor rmsNorm(const Tensor &x, const Tensor &gamma, double epsilon) {
  return norm(x, gamma, nullptr, epsilon, /*center=*/false);
}

//===----------------------------------------------------------------------===//
// Attention and positions
//===----------------------------------------------------------------------===//

namespace {
/// The attention weights of query `i` of sample `b`, head `h`: softmax over
/// the visible keys of scale * q.k (minus the ALiBi distance penalty);
/// masked keys get 0. `prefix` is the sample's prefix length.
void attentionWeights(const Tensor &q, const Tensor &k,
                      const Tensor *alibiSlopes, int64_t heads, int64_t kvHeads,
                      Mask mask, double scale, double prefix, int64_t b,
                      int64_t h, int64_t i, std::vector<double> &weights) {
  int64_t querySeq = q.dim(1), keySeq = k.dim(1);
  int64_t headDim = q.dim(2) / heads;
  int64_t kvHead = h / (heads / kvHeads);
  const double *query =
      q.data.data() + (b * querySeq + i) * q.dim(2) + h * headDim;
  double maxScore = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < keySeq; ++j) {
    bool visible = mask == Mask::None || j <= i ||
                   (mask == Mask::Prefix && static_cast<double>(j) < prefix);
    if (!visible) {
      weights[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const double *key =
        k.data.data() + (b * keySeq + j) * k.dim(2) + kvHead * headDim;
    double dot = 0.0;
    for (int64_t d = 0; d < headDim; ++d)
      dot += query[d] * key[d];
    weights[j] = scale * dot;
    if (alibiSlopes)
      weights[j] -= alibiSlopes->data[h] * static_cast<double>(i - j);
    maxScore = std::max(maxScore, weights[j]);
  }
  double total = 0.0;
  for (int64_t j = 0; j < keySeq; ++j) {
    weights[j] = std::exp(weights[j] - maxScore);
    total += weights[j];
  }
  for (int64_t j = 0; j < keySeq; ++j)
    weights[j] /= total;
}
} // namespace

llvm::Expected<Tensor> attention(const Tensor &q, const Tensor &k,
                                 const Tensor &v, const Tensor *prefixLengths,
                                 const Tensor *alibiSlopes, int64_t heads,
                                 int64_t kvHeads, Mask mask, double scale) {
  int64_t batch = q.dim(0), querySeq = q.dim(1), keySeq = k.dim(1);
  int64_t headDim = q.dim(2) / heads;
  int64_t group = heads / kvHeads;
  int64_t qWidth = q.dim(2), kvWidth = k.dim(2);
  Tensor result(q.shape);
  std::vector<double> scores(keySeq);
  for (int64_t b = 0; b < batch; ++b) {
    double prefix = 0.0;
    if (mask == Mask::Prefix) {
      prefix = prefixLengths->data[b];
      if (!(prefix >= 0 && prefix <= static_cast<double>(keySeq)))
        return kernelError(
            llvm::formatv("prefix length {0} of sample {1} is outside [0, {2}]",
                          number(prefix), b, keySeq));
    }
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kvHead = h / group;
      for (int64_t i = 0; i < querySeq; ++i) {
        attentionWeights(q, k, alibiSlopes, heads, kvHeads, mask, scale, prefix,
                         b, h, i, scores);
        double *out =
            result.data.data() + (b * querySeq + i) * qWidth + h * headDim;
        for (int64_t j = 0; j < keySeq; ++j) {
          double weight = scores[j];
          if (weight == 0.0)
            continue;
          const double *value =
              v.data.data() + (b * keySeq + j) * kvWidth + kvHead * headDim;
          for (int64_t d = 0; d < headDim; ++d)
            out[d] += weight * value[d];
        }
      }
    }
  }
  return result;
}

namespace {
/// Rotates each (x[i], x[i + rotaryDim / 2]) pair of every head by
/// `direction` times its position's angle.
Tensor rotate(const Tensor &x, int64_t heads, int64_t rotaryDim, double base,
              double direction) {
  int64_t batch = x.dim(0), seq = x.dim(1), width = x.dim(2);
  int64_t headDim = width / heads, half = rotaryDim / 2;
  Tensor result = x;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        const double *in = x.data.data() + (b * seq + s) * width + h * headDim;
        double *out = result.data.data() + (b * seq + s) * width + h * headDim;
        for (int64_t i = 0; i < half; ++i) {
          double angle =
              static_cast<double>(s) *
              std::pow(base, -2.0 * static_cast<double>(i) / rotaryDim);
          double c = std::cos(angle), sn = direction * std::sin(angle);
          out[i] = in[i] * c - in[i + half] * sn;
          out[i + half] = in[i + half] * c + in[i] * sn;
        }
      }
  return result;
}
} // namespace

Tensor rope(const Tensor &x, int64_t heads, int64_t rotaryDim, double base) {
  return rotate(x, heads, rotaryDim, base, 1.0);
}

Tensor ropeGrad(const Tensor &dy, int64_t heads, int64_t rotaryDim,
                double base) {
  return rotate(dy, heads, rotaryDim, base, -1.0);
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

Tensor reshape(const Tensor &x, llvm::ArrayRef<int64_t> shape) {
  return Tensor(shape, x.data);
}

Tensor transpose(const Tensor &x, llvm::ArrayRef<int64_t> permutation) {
  std::vector<int64_t> shape;
  for (int64_t p : permutation)
    shape.push_back(x.dim(p));
  Tensor result(shape);
  std::vector<int64_t> inStrides = x.strides();
  for (int64_t i = 0; i < result.numElements(); ++i) {
    std::vector<int64_t> coords = coordinates(i, shape);
    int64_t source = 0;
    for (size_t d = 0; d < permutation.size(); ++d)
      source += coords[d] * inStrides[permutation[d]];
    result.data[i] = x.data[source];
  }
  return result;
}

Tensor slice(const Tensor &x, llvm::ArrayRef<int64_t> offsets,
             llvm::ArrayRef<int64_t> sizes) {
  Tensor result(sizes);
  std::vector<int64_t> inStrides = x.strides();
  for (int64_t i = 0; i < result.numElements(); ++i) {
    std::vector<int64_t> coords = coordinates(i, sizes);
    int64_t source = 0;
    for (size_t d = 0; d < sizes.size(); ++d)
      source += (coords[d] + offsets[d]) * inStrides[d];
    result.data[i] = x.data[source];
  }
  return result;
}

Tensor concat(llvm::ArrayRef<const Tensor *> inputs, int64_t dim) {
  std::vector<int64_t> shape = inputs.front()->shape;
  shape[dim] = 0;
  for (const Tensor *input : inputs)
    shape[dim] += input->dim(dim);
  Tensor result(shape);
  // Copy contiguous blocks: for each outer index, each input's slab.
  int64_t outer = numElements(llvm::ArrayRef(shape).take_front(dim));
  int64_t inner = numElements(llvm::ArrayRef(shape).drop_front(dim + 1));
  auto out = result.data.begin();
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor *input : inputs) {
      int64_t block = input->dim(dim) * inner;
      out = std::copy_n(input->data.begin() + o * block, block, out);
    }
  return result;
}

Tensor broadcast(const Tensor &x, llvm::ArrayRef<int64_t> shape) {
  Tensor result(shape);
  int64_t offset = static_cast<int64_t>(shape.size()) - x.rank();
  std::vector<int64_t> inStrides = x.strides();
  for (int64_t i = 0; i < result.numElements(); ++i) {
    std::vector<int64_t> coords = coordinates(i, shape);
    int64_t source = 0;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (x.dim(d) != 1)
        source += coords[offset + d] * inStrides[d];
    result.data[i] = x.data[source];
  }
  return result;
}

Tensor pad(const Tensor &x, llvm::ArrayRef<int64_t> low,
           llvm::ArrayRef<int64_t> high) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.rank(); ++d)
    shape.push_back(low[d] + x.dim(d) + high[d]);
  Tensor result(shape);
  std::vector<int64_t> outStrides = result.strides();
  for (int64_t i = 0; i < x.numElements(); ++i) {
    std::vector<int64_t> coords = coordinates(i, x.shape);
    int64_t target = 0;
    for (int64_t d = 0; d < x.rank(); ++d)
      target += (coords[d] + low[d]) * outStrides[d];
    result.data[target] = x.data[i];
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Dropout, loss and reductions
//===----------------------------------------------------------------------===//

Tensor dropout(const Tensor &x, double probability, uint64_t seed,
               uint64_t step, uint64_t stream, rt::DropoutPiece piece) {
  Tensor result = x;
  double keepScale = 1.0 / (1.0 - probability);
  for (int64_t i = 0; i < x.numElements(); ++i) {
    bool keep = rt::dropoutUniform(
                    seed, step, stream,
                    piece.globalIndex(static_cast<uint64_t>(i))) >= probability;
    result.data[i] = keep ? x.data[i] * keepScale : 0.0;
  }
  return result;
}

namespace {
/// Checks every label that is not ignored lies in the vocabulary; returns
/// how many are not ignored.
llvm::Expected<int64_t> countLabels(const Tensor &labels, int64_t vocab,
                                    int64_t ignoreIndex) {
  int64_t counted = 0;
  for (int64_t t = 0; t < labels.numElements(); ++t) {
    double label = labels.data[t];
    if (label == static_cast<double>(ignoreIndex))
      continue;
    if (!(label >= 0 && label < static_cast<double>(vocab)))
      return kernelError(llvm::formatv(
          "label {0} at position {1} is outside the vocabulary [0, {2})",
          number(label), t, vocab));
    ++counted;
  }
  return counted;
}
} // namespace

/// log(sum(exp(row))) over `n` values, from the row's maximum (minus
/// infinity for none).
static double rowLogSumExp(const double *row, int64_t n) {
  if (n == 0)
    return -std::numeric_limits<double>::infinity();
  double maxLogit = *std::max_element(row, row + n);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(row[j] - maxLogit);
  return maxLogit + std::log(sum);
}

/// How many of a piece's `columns` (from the first) are classes.
static int64_t classColumns(int64_t columns,
                            const std::optional<VocabPiece> &piece) {
  if (!piece)
    return columns;
  return std::clamp<int64_t>(piece->vocab - piece->first, 0, columns);
}

Tensor logSumExp(const Tensor &x, std::optional<VocabPiece> piece) {
  std::vector<int64_t> shape = x.shape;
  int64_t n = shape.back(), classes = classColumns(n, piece);
  shape.back() = 1;
  Tensor result(shape);
  for (int64_t r = 0; r < result.numElements(); ++r)
    result.data[r] = rowLogSumExp(x.data.data() + r * n, classes);
  return result;
}

llvm::Expected<double> crossEntropy(const Tensor &logits, const Tensor &labels,
                                    int64_t ignoreIndex,
                                    std::optional<VocabPiece> piece) {
  int64_t columns = logits.dim(logits.rank() - 1);
  int64_t first = piece ? piece->first : 0;
  int64_t classes = classColumns(columns, piece);
  llvm::Expected<int64_t> counted =
      countLabels(labels, piece ? piece->vocab : columns, ignoreIndex);
  if (!counted)
    return counted.takeError();
  double total = 0.0;
  for (int64_t t = 0; t < labels.numElements(); ++t) {
    double label = labels.data[t];
    int64_t column = static_cast<int64_t>(label) - first;
    if (label == static_cast<double>(ignoreIndex) || column < 0 ||
        column >= classes)
      continue;
    const double *row = logits.data.data() + t * columns;
    double lse =
        piece && piece->lse ? piece->lse->data[t] : rowLogSumExp(row, classes);
    total += lse - row[column];
  }
  return *counted ? total / static_cast<double>(*counted) : 0.0;
}

Tensor reduce(const Tensor &x, llvm::ArrayRef<int64_t> dims, bool keepDims,
              bool mean) {
  std::vector<bool> reduced(x.rank(), false);
  for (int64_t d : dims)
    reduced[d] = true;
  std::vector<int64_t> keptShape; // the result shape with kept size-1 dims
  std::vector<int64_t> resultShape;
  int64_t count = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    keptShape.push_back(reduced[d] ? 1 : x.dim(d));
    if (!reduced[d])
      resultShape.push_back(x.dim(d));
    else
      count *= x.dim(d);
  }
  Tensor result(keptShape);
  std::vector<int64_t> outStrides = result.strides();
  for (int64_t i = 0; i < x.numElements(); ++i) {
    std::vector<int64_t> coords = coordinates(i, x.shape);
    int64_t target = 0;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (!reduced[d])
        target += coords[d] * outStrides[d];
    result.data[target] += x.data[i];
  }
  if (mean)
    for (double &value : result.data)
      value /= static_cast<double>(count);
  if (!keepDims)
    result.shape = resultShape;
  return result;
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

double activationDerivative(Activation kind, double x) {
  switch (kind) {
  case Activation::Gelu: {
    double cdf = 0.5 * (1.0 + std::erf(x / M_SQRT2));
    double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    return cdf + x * pdf;
  }
  case Activation::GeluTanh: {
    const double c = std::sqrt(2.0 / M_PI);
    double t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
  }
  case Activation::FastGelu: {
    double s = sigmoid(1.702 * x);
    return s + 1.702 * x * s * (1.0 - s);
  }
  case Activation::Relu:
    return x > 0.0 ? 1.0 : 0.0;
  case Activation::Silu: {
    double s = sigmoid(x);
    return s + x * s * (1.0 - s);
  }
  }
  return 0.0;
}

Tensor activationGrad(Activation kind, const Tensor &x, const Tensor &dy) {
  return zip(x, dy, [&](double value, double grad) {
    return activationDerivative(kind, value) * grad;
  });
}

Tensor embeddingGrad(const Tensor &ids, const Tensor &dy, int64_t rows,
                     int64_t firstRow) {
  int64_t hidden = dy.dim(dy.rank() - 1);
  Tensor result({rows, hidden});
  for (int64_t i = 0; i < ids.numElements(); ++i) {
    auto row = static_cast<int64_t>(ids.data[i]) - firstRow;
    // Ids outside the vocabulary: the forward embedding rejected them.
    if (row < 0 || row >= rows)
      continue;
    for (int64_t h = 0; h < hidden; ++h)
      result.data[row * hidden + h] += dy.data[i * hidden + h];
  }
  return result;
}

namespace {
/// Shared by the norm gradients: with xhat the normalized input and
/// r = 1 / sqrt(statistic + epsilon), dx = r * (g - mean(g) * center -
/// xhat * mean(g * xhat)) for g = dy * gamma (`center` is 0 for RMS norm).
NormGrads normGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                   double epsilon, bool center) {
  int64_t width = x.dim(x.rank() - 1);
  int64_t rows = x.numElements() / width;
  NormGrads grads{Tensor(x.shape), Tensor(gamma.shape)};
  std::vector<double> xhat(width), g(width);
  for (int64_t r = 0; r < rows; ++r) {
    const double *in = x.data.data() + r * width;
    const double *grad = dy.data.data() + r * width;
    RowStatistics stats = rowStatistics(in, width, epsilon, center);
    double mean = stats.mean, inverse = stats.inverse;
    double meanG = 0.0, meanGX = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      xhat[i] = (in[i] - mean) * inverse;
      g[i] = grad[i] * gamma.data[i];
      meanG += g[i];
      meanGX += g[i] * xhat[i];
      grads.dgamma.data[i] += grad[i] * xhat[i];
    }
    meanG /= width;
    meanGX /= width;
    double *out = grads.dx.data.data() + r * width;
    for (int64_t i = 0; i < width; ++i)
      out[i] = inverse * (g[i] - (center ? meanG : 0.0) - xhat[i] * meanGX);
  }
  return grads;
}
} // namespace

NormGrads layerNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                        double epsilon) {
  return normGrad(x, gamma, dy, epsilon, /*center=*/true);
}

NormGrads rmsNormGrad(const Tensor &x, const Tensor &gamma, const Tensor &dy,
                      double epsilon) {
  return normGrad(x, gamma, dy, epsilon, /*center=*/false);
}

llvm::Expected<AttentionGrads>
attentionGrad(const Tensor &q, const Tensor &k, const Tensor &v,
              const Tensor *prefixLengths, const Tensor *alibiSlopes,
              const Tensor &dout, int64_t heads, int64_t kvHeads, Mask mask,
              double scale) {
  // Recompute the forward output to get o . do per query (the softmax
  // gradient's correction term).
  llvm::Expected<Tensor> out = attention(q, k, v, prefixLengths, alibiSlopes,
                                         heads, kvHeads, mask, scale);
  if (!out)
    return out.takeError();
  int64_t batch = q.dim(0), querySeq = q.dim(1), keySeq = k.dim(1);
  int64_t headDim = q.dim(2) / heads;
  int64_t group = heads / kvHeads;
  int64_t qWidth = q.dim(2), kvWidth = k.dim(2);
  AttentionGrads grads{Tensor(q.shape), Tensor(k.shape), Tensor(v.shape)};
  std::vector<double> probs(keySeq);
  for (int64_t b = 0; b < batch; ++b) {
    double prefix = mask == Mask::Prefix ? prefixLengths->data[b] : 0.0;
    for (int64_t h = 0; h < heads; ++h) {
      int64_t kvHead = h / group;
      for (int64_t i = 0; i < querySeq; ++i) {
        int64_t qOffset = (b * querySeq + i) * qWidth + h * headDim;
        const double *query = q.data.data() + qOffset;
        const double *dOut = dout.data.data() + qOffset;
        const double *output = out->data.data() + qOffset;
        attentionWeights(q, k, alibiSlopes, heads, kvHeads, mask, scale, prefix,
                         b, h, i, probs);
        double outDotGrad = 0.0;
        for (int64_t d = 0; d < headDim; ++d)
          outDotGrad += output[d] * dOut[d];
        double *dQuery = grads.dq.data.data() + qOffset;
        for (int64_t j = 0; j < keySeq; ++j) {
          double p = probs[j];
          if (p == 0.0)
            continue;
          int64_t kvOffset = (b * keySeq + j) * kvWidth + kvHead * headDim;
          const double *key = k.data.data() + kvOffset;
          const double *value = v.data.data() + kvOffset;
          double dp = 0.0;
          for (int64_t d = 0; d < headDim; ++d) {
            dp += dOut[d] * value[d];
            grads.dv.data[kvOffset + d] += p * dOut[d];
          }
          double dScore = p * (dp - outDotGrad) * scale;
          for (int64_t d = 0; d < headDim; ++d) {
            dQuery[d] += dScore * key[d];
            grads.dk.data[kvOffset + d] += dScore * query[d];
          }
        }
      }
    }
  }
  return grads;
}

llvm::Expected<Tensor> crossEntropyGrad(const Tensor &logits,
                                        const Tensor &labels, double dloss,
                                        int64_t ignoreIndex,
                                        std::optional<VocabPiece> piece) {
  int64_t columns = logits.dim(logits.rank() - 1);
  int64_t first = piece ? piece->first : 0;
  int64_t classes = classColumns(columns, piece);
  int64_t tokens = labels.numElements();
  llvm::Expected<int64_t> countedOr =
      countLabels(labels, piece ? piece->vocab : columns, ignoreIndex);
  if (!countedOr)
    return countedOr.takeError();
  int64_t counted = *countedOr;
  Tensor result(logits.shape);
  if (counted == 0)
    return result;
  double weight = dloss / static_cast<double>(counted);
  for (int64_t t = 0; t < tokens; ++t) {
    double label = labels.data[t];
    if (label == static_cast<double>(ignoreIndex))
      continue;
    const double *row = logits.data.data() + t * columns;
    double *out = result.data.data() + t * columns;
    double lse =
        piece && piece->lse ? piece->lse->data[t] : rowLogSumExp(row, classes);
    // Padding columns (from `classes` on) keep a gradient of 0.
    for (int64_t j = 0; j < classes; ++j)
      out[j] = std::exp(row[j] - lse) * weight;
    int64_t column = static_cast<int64_t>(label) - first;
    if (column >= 0 && column < classes)
      out[column] -= weight;
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

double learningRate(double step, double peak, double floor, int64_t warmup,
                    int64_t decay) {
  if (warmup > 0 && step <= static_cast<double>(warmup))
    return peak * step / static_cast<double>(warmup);
  if (decay == 0)
    return peak; // no decay
  if (decay <= warmup)
    return floor;
  double progress = (step - static_cast<double>(warmup)) /
                    static_cast<double>(decay - warmup);
  progress = std::min(1.0, std::max(0.0, progress));
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

double sumSquares(const Tensor &x, double limit) {
  double sum = 0.0;
  for (double value : x.data) {
    if (std::fabs(value) > limit)
      return std::numeric_limits<double>::infinity();
    sum += value * value;
  }
  return sum;
}

Clip clipCoefficient(double sumSquares, double maxNorm) {
  double norm = std::sqrt(sumSquares);
  if (maxNorm == 0.0)
    return {1.0, norm};
  return {std::min(1.0, maxNorm / (norm + 1e-6)), norm};
}

AdamWState adamw(const Tensor &param, const Tensor &grad, const Tensor &m,
                 const Tensor &v, double lr, double step, double coefficient,
                 double beta1, double beta2, double epsilon,
                 double weightDecay) {
  AdamWState next{param, m, v};
  double correction1 = 1.0 - std::pow(beta1, step);
  double correction2 = 1.0 - std::pow(beta2, step);
  for (int64_t i = 0; i < param.numElements(); ++i) {
    double g = grad.data[i] * coefficient;
    double m1 = beta1 * m.data[i] + (1.0 - beta1) * g;
    double v1 = beta2 * v.data[i] + (1.0 - beta2) * g * g;
    next.m.data[i] = m1;
    next.v.data[i] = v1;
    double update =
        (m1 / correction1) / (std::sqrt(v1 / correction2) + epsilon);
    next.param.data[i] =
        param.data[i] - lr * update - lr * weightDecay * param.data[i];
  }
  return next;
}

LossScale updateLossScale(double sumSquares, double scale, double goodSteps,
                          int64_t growthInterval, double growth,
                          double backoff) {
  if (!std::isfinite(sumSquares))
    return {1.0, std::max(1.0, scale * backoff), 0.0, 1.0 / scale};
  double good = goodSteps + 1.0;
  if (good >= static_cast<double>(growthInterval))
    return {0.0, scale * growth, 0.0, 1.0 / scale};
  return {0.0, scale, good, 1.0 / scale};
}

} // namespace triad::interp
