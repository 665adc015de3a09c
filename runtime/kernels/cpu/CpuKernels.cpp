//===- CpuKernels.cpp - fp32 CPU kernels of the Triad runtime -------------===//
//
// See CpuKernels.h. Reductions over a row accumulate in double where the
// row is long (norms, softmax sums), which keeps the kernels within fp32
// rounding of the float64 reference.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/CpuKernels.h"

#include "runtime/init/Init.h"
#include "runtime/kernels/cpu/HalfFloat.h"
#include "runtime/kernels/cpu/VectorMath.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

namespace triad::rt::cpu {

namespace {
using vmath::sigmoid;

TRIAD_ALWAYS_INLINE float applyActivation(Activation kind, float x) {
  switch (kind) {
  case Activation::Gelu:
    return 0.5f * x * (1.0f + vmath::erff(x * static_cast<float>(M_SQRT1_2)));
  case Activation::GeluTanh: {
    const float c = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + vmath::tanhf(c * (x + 0.044715f * x * x * x)));
  }
  case Activation::FastGelu:
    return x * sigmoid(1.702f * x);
  case Activation::Relu:
    return x > 0.0f ? x : 0.0f;
  case Activation::Silu:
    return x * sigmoid(x);
  }
  return x;
}

TRIAD_ALWAYS_INLINE float activationDerivative(Activation kind, float x) {
  switch (kind) {
  case Activation::Gelu: {
    float cdf = 0.5f * (1.0f + vmath::erff(x * static_cast<float>(M_SQRT1_2)));
    float pdf = vmath::expf(-0.5f * x * x) * 0.3989422804014327f;
    return cdf + x * pdf;
  }
  case Activation::GeluTanh: {
    const float c = 0.7978845608028654f;
    float t = vmath::tanhf(c * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
  }
  case Activation::FastGelu: {
    float s = sigmoid(1.702f * x);
    return s + 1.702f * x * s * (1.0f - s);
  }
  case Activation::Relu:
    return x > 0.0f ? 1.0f : 0.0f;
  case Activation::Silu: {
    float s = sigmoid(x);
    return s + x * s * (1.0f - s);
  }
  }
  return 1.0f;
}

// The elementwise loops over one chunk, the activation's switch outside
// the loop so that each loop vectorizes. `up` (gated) and `dy` (gradient)
// may be null.
template <Activation kind>
TRIAD_ALWAYS_INLINE void activationLoop(const float *x, const float *other,
                                        float *out, int64_t n,
                                        bool derivative) {
  if (derivative) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = activationDerivative(kind, x[i]) * other[i];
  } else if (other) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyActivation(kind, x[i]) * other[i];
  } else {
    for (int64_t i = 0; i < n; ++i)
      out[i] = applyActivation(kind, x[i]);
  }
}

TRIAD_VECTOR_CLONES void activationChunk(Activation kind, const float *x,
                                         const float *other, float *out,
                                         int64_t n, bool derivative) {
  switch (kind) {
  case Activation::Gelu:
    return activationLoop<Activation::Gelu>(x, other, out, n, derivative);
  case Activation::GeluTanh:
    return activationLoop<Activation::GeluTanh>(x, other, out, n, derivative);
  case Activation::FastGelu:
    return activationLoop<Activation::FastGelu>(x, other, out, n, derivative);
  case Activation::Relu:
    return activationLoop<Activation::Relu>(x, other, out, n, derivative);
  case Activation::Silu:
    return activationLoop<Activation::Silu>(x, other, out, n, derivative);
  }
}

/// Runs activationChunk over [0, count) in chunks across the threads.
void activationMap(Activation kind, const float *x, const float *other,
                   float *out, int64_t count, bool derivative) {
  const int64_t chunk = 4096;
#pragma omp parallel for schedule(static)
  for (int64_t begin = 0; begin < count; begin += chunk)
    activationChunk(kind, x + begin, other ? other + begin : nullptr,
                    out + begin, std::min(chunk, count - begin), derivative);
}

/// row[j] = e^(row[j] - shift) for j < n; returns the sum in double.
TRIAD_VECTOR_CLONES double expShifted(float *row, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j)
    row[j] = vmath::expf(row[j] - shift);
  double total = 0.0;
  for (int64_t j = 0; j < n; ++j)
    total += row[j];
  return total;
}
} // namespace

//===----------------------------------------------------------------------===//
// Matrix products and embeddings
//===----------------------------------------------------------------------===//

void matmul(const float *a, const float *b, float *c, int64_t batch, int64_t m,
            int64_t n, int64_t k, bool transposeA, bool transposeB,
            bool rhsBatched, bool accumulate) {
  if (!rhsBatched && !transposeA && batch > 1) {
    // A shared rhs: one product of the stacked rows.
    m *= batch;
    batch = 1;
  }
  for (int64_t i = 0; i < batch; ++i)
    cblas_sgemm(CblasRowMajor, transposeA ? CblasTrans : CblasNoTrans,
                transposeB ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a + i * m * k,
                transposeA ? static_cast<int>(m) : static_cast<int>(k),
                b + (rhsBatched ? i * k * n : 0),
                transposeB ? static_cast<int>(k) : static_cast<int>(n),
                accumulate ? 1.0f : 0.0f, c + i * m * n, static_cast<int>(n));
}

void matmulEpilogue(float *c, const float *bias,
                    std::optional<Activation> activation, float *preActivation,
                    int64_t count, int64_t n) {
  if (!activation) {
    addBroadcast(c, bias, c, count, n);
    return;
  }
  float *sum = preActivation ? preActivation : c;
  addBroadcast(c, bias, sum, count, n);
  cpu::activation(*activation, sum, c, count);
}

bool embedding(const int32_t *ids, const float *table, float *out,
               int64_t tokens, int64_t rows, int64_t hidden, int64_t firstRow,
               int64_t vocab) {
  if (vocab < 0)
    vocab = rows;
  bool valid = true;
#pragma omp parallel for reduction(&& : valid)
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t row = static_cast<int64_t>(ids[t]) - firstRow;
    if (ids[t] < 0 || ids[t] >= vocab || row < 0 || row >= rows) {
      std::fill_n(out + t * hidden, hidden, 0.0f);
      valid = valid && ids[t] >= 0 && ids[t] < vocab;
      continue;
    }
    std::copy_n(table + row * hidden, hidden, out + t * hidden);
  }
  return valid;
}

bool embeddingGradAccumulate(const int32_t *ids, const float *dy, float *dtable,
                             int64_t tokens, int64_t rows, int64_t hidden,
                             int64_t firstRow, int64_t vocab) {
  if (vocab < 0)
    vocab = rows;
  bool valid = true;
  for (int64_t t = 0; t < tokens; ++t)
    valid = valid && ids[t] >= 0 && ids[t] < vocab;
    // Rows may repeat: parallel over the hidden dimension, not the tokens.
#pragma omp parallel for
  for (int64_t h = 0; h < hidden; ++h)
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t row = static_cast<int64_t>(ids[t]) - firstRow;
      if (ids[t] >= 0 && ids[t] < vocab && row >= 0 && row < rows)
        dtable[row * hidden + h] += dy[t * hidden + h];
    }
  return valid;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

void addBroadcast(const float *lhs, const float *rhs, float *out, int64_t count,
                  int64_t period) {
#pragma omp parallel for
  for (int64_t i = 0; i < count; i += period)
    for (int64_t j = 0; j < period; ++j)
      out[i + j] = lhs[i + j] + rhs[j];
}

void mul(const float *a, const float *b, float *out, int64_t count) {
#pragma omp parallel for
  for (int64_t i = 0; i < count; ++i)
    out[i] = a[i] * b[i];
}

void scale(const float *x, float factor, float *out, int64_t count) {
#pragma omp parallel for
  for (int64_t i = 0; i < count; ++i)
    out[i] = x[i] * factor;
}

void activation(Activation kind, const float *x, float *out, int64_t count) {
  activationMap(kind, x, nullptr, out, count, /*derivative=*/false);
}

void activationGrad(Activation kind, const float *x, const float *dy, float *dx,
                    int64_t count) {
  activationMap(kind, x, dy, dx, count, /*derivative=*/true);
}

void gated(Activation kind, const float *gate, const float *up, float *out,
           int64_t count) {
  activationMap(kind, gate, up, out, count, /*derivative=*/false);
}

//===----------------------------------------------------------------------===//
// Element-wise kernels on stored values
//===----------------------------------------------------------------------===//

namespace {

/// `count` f32 values of `in` from `begin`: the array itself, or `buffer`
/// holding them widened.
const float *chunkIn(StoredIn in, int64_t begin, int64_t count, float *buffer) {
  if (in.type == Storage::F32)
    return static_cast<const float *>(in.data) + begin;
  widen(in.type == Storage::BF16,
        static_cast<const uint16_t *>(in.data) + begin, buffer, count);
  return buffer;
}

/// Runs `body(ins, out, begin, n)` (the f32 kernel on elements [begin,
/// begin + n), serially) over [0, count) in chunks across the threads: each
/// chunk's 16-bit inputs widened into the thread's buffers, a 16-bit
/// result computed into one and rounded into `out`. Every input is read
/// before the chunk's result is written, so the result may be an input.
template <size_t N, typename Body>
void inChunks(int64_t count, const std::array<StoredIn, N> &ins, StoredOut out,
              Body body) {
  constexpr int64_t chunk = 4096;
#pragma omp parallel
  {
    thread_local std::vector<float> buffers;
    buffers.resize((N + 1) * static_cast<size_t>(chunk));
#pragma omp for schedule(static)
    for (int64_t begin = 0; begin < count; begin += chunk) {
      int64_t n = std::min(chunk, count - begin);
      std::array<const float *, N> values;
      for (size_t i = 0; i < N; ++i)
        values[i] = chunkIn(ins[i], begin, n, buffers.data() + i * chunk);
      float *result = out.type == Storage::F32
                          ? static_cast<float *>(out.data) + begin
                          : buffers.data() + N * chunk;
      body(values, result, begin, n);
      if (out.type != Storage::F32)
        narrow(out.type == Storage::BF16, result,
               static_cast<uint16_t *>(out.data) + begin, n);
    }
  }
}

} // namespace

void convert(StoredIn x, StoredOut out, int64_t count) {
  inChunks<1>(count, {x}, out,
              [](auto values, float *result, int64_t, int64_t n) {
                std::copy_n(values[0], n, result);
              });
}

void sumRows(StoredIn x, int64_t rows, int64_t width, double factor,
             StoredOut out) {
  // Each column adds its rows in order, so the threads may take blocks of
  // columns (of a few cache lines per row) and the bits are the same for
  // any thread count.
  constexpr int64_t block = 64;
  int64_t blocks = (width + block - 1) / block;
#pragma omp parallel for schedule(static) if (rows * width >= (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t begin = b * block, n = std::min(block, width - begin);
    std::array<double, block> sums{};
    std::array<float, block> wide, result;
    for (int64_t row = 0; row < rows; ++row) {
      const float *values = chunkIn(x, row * width + begin, n, wide.data());
      for (int64_t j = 0; j < n; ++j)
        sums[j] += values[j];
    }
    for (int64_t j = 0; j < n; ++j)
      result[j] = static_cast<float>(sums[j] * factor);
    if (out.type == Storage::F32)
      std::copy_n(result.data(), n, static_cast<float *>(out.data) + begin);
    else
      narrow(out.type == Storage::BF16, result.data(),
             static_cast<uint16_t *>(out.data) + begin, n);
  }
}

void sumRows(const float *x, int64_t rows, int64_t width, double factor,
             float *out) {
  sumRows(StoredIn{x, Storage::F32}, rows, width, factor,
          StoredOut{out, Storage::F32});
}

void addBroadcast(StoredIn lhs, StoredIn rhs, StoredOut out, int64_t count,
                  int64_t period) {
  if (count == 0 || period == 0)
    return;
  // The repeating rhs whole, widened once.
  std::vector<float> wideRhs(rhs.type == Storage::F32 ? 0 : period);
  const float *repeated = chunkIn(rhs, 0, period, wideRhs.data());
  inChunks<1>(count, {lhs}, out,
              [&](auto values, float *result, int64_t begin, int64_t n) {
                // Runs of the period, the first and last cut by the chunk.
                for (int64_t i = 0, j = begin % period; i < n; j = 0) {
                  int64_t run = std::min(n - i, period - j);
                  for (int64_t r = 0; r < run; ++r)
                    result[i + r] = values[0][i + r] + repeated[j + r];
                  i += run;
                }
              });
}

void mul(StoredIn a, StoredIn b, StoredOut out, int64_t count) {
  inChunks<2>(count, {a, b}, out,
              [](auto values, float *result, int64_t, int64_t n) {
                for (int64_t i = 0; i < n; ++i)
                  result[i] = values[0][i] * values[1][i];
              });
}

void activation(Activation kind, StoredIn x, StoredOut out, int64_t count) {
  inChunks<1>(count, {x}, out,
              [&](auto values, float *result, int64_t, int64_t n) {
                activationChunk(kind, values[0], nullptr, result, n, false);
              });
}

void activationGrad(Activation kind, StoredIn x, StoredIn dy, StoredOut dx,
                    int64_t count) {
  inChunks<2>(count, {x, dy}, dx,
              [&](auto values, float *result, int64_t, int64_t n) {
                activationChunk(kind, values[0], values[1], result, n, true);
              });
}

void gated(Activation kind, StoredIn gate, StoredIn up, StoredOut out,
           int64_t count) {
  inChunks<2>(count, {gate, up}, out,
              [&](auto values, float *result, int64_t, int64_t n) {
                activationChunk(kind, values[0], values[1], result, n, false);
              });
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

namespace {
/// The mean (0 unless `center`) and 1 / sqrt(statistic + epsilon) of one
/// row, in double: the statistic is the variance (layer norm) or the mean
/// square (RMS norm).
struct RowStatistics {
  double mean, inverse;
};
RowStatistics rowStatistics(const float *in, int64_t width, float epsilon,
                            bool center) {
  double mean = 0.0;
  if (center) {
    for (int64_t i = 0; i < width; ++i)
      mean += in[i];
    mean /= static_cast<double>(width);
  }
  double statistic = 0.0;
  for (int64_t i = 0; i < width; ++i)
    statistic += (in[i] - mean) * (in[i] - mean);
  statistic /= static_cast<double>(width);
  return {mean, 1.0 / std::sqrt(statistic + epsilon)};
}

/// `count` values of `in` from `begin` widened, for the whole run of a
/// norm's call (gamma, beta): the array itself when it is f32.
const float *widenedWhole(StoredIn in, int64_t count,
                          std::vector<float> &buffer) {
  if (in.type != Storage::F32)
    buffer.resize(static_cast<size_t>(count));
  return chunkIn(in, 0, count, buffer.data());
}

/// Writes the f32 `values` (a row at `begin`, computed into the thread's
/// buffer or, for an f32 result, in place) to `out`.
void storeRow(const float *values, StoredOut out, int64_t begin,
              int64_t count) {
  if (out.type != Storage::F32)
    narrow(out.type == Storage::BF16, values,
           static_cast<uint16_t *>(out.data) + begin, count);
}

/// Where a norm writes row `begin`'s f32 values: the result itself when
/// it is f32, else `buffer`.
float *rowOut(StoredOut out, int64_t begin, float *buffer) {
  return out.type == Storage::F32 ? static_cast<float *>(out.data) + begin
                                  : buffer;
}

/// Shared by layer and RMS norm: `center` subtracts the mean. Each row of
/// 16-bit values is widened (and its result rounded) in the thread's
/// buffers.
void norm(StoredIn x, StoredIn gammaIn, const StoredIn *betaIn, StoredOut y,
          int64_t rows, int64_t width, float epsilon, bool center) {
  std::vector<float> gammaWide, betaWide;
  const float *gamma = widenedWhole(gammaIn, width, gammaWide);
  const float *beta = betaIn ? widenedWhole(*betaIn, width, betaWide) : nullptr;
#pragma omp parallel
  {
    std::vector<float> inRow(width), outRow(width);
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const float *in = chunkIn(x, r * width, width, inRow.data());
      float *out = rowOut(y, r * width, outRow.data());
      RowStatistics stats = rowStatistics(in, width, epsilon, center);
      float inverse = static_cast<float>(stats.inverse);
      float m = static_cast<float>(stats.mean);
      for (int64_t i = 0; i < width; ++i)
        out[i] = (in[i] - m) * inverse * gamma[i] + (beta ? beta[i] : 0.0f);
      storeRow(out, y, r * width, width);
    }
  }
}

void normGrad(StoredIn x, StoredIn gammaIn, StoredIn dy, StoredOut dx,
              StoredOut dgamma, int64_t rows, int64_t width, float epsilon,
              bool center) {
  std::vector<float> gammaWide;
  const float *gamma = widenedWhole(gammaIn, width, gammaWide);
  // dgamma sums over rows in fixed blocks, added in block order, so the
  // result does not depend on the thread count or timing.
  constexpr int64_t kBlock = 64;
  int64_t blocks = (rows + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks * width), 0.0);
#pragma omp parallel
  {
    std::vector<float> xhat(width), inRow(width), gradRow(width), outRow(width);
#pragma omp for
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t r = block * kBlock; r < std::min(rows, (block + 1) * kBlock);
           ++r) {
        double *local = partial.data() + block * width;
        const float *in = chunkIn(x, r * width, width, inRow.data());
        const float *grad = chunkIn(dy, r * width, width, gradRow.data());
        RowStatistics stats = rowStatistics(in, width, epsilon, center);
        double mean = stats.mean, inverse = stats.inverse;
        double meanG = 0.0, meanGX = 0.0;
        for (int64_t i = 0; i < width; ++i) {
          xhat[i] = static_cast<float>((in[i] - mean) * inverse);
          double g = static_cast<double>(grad[i]) * gamma[i];
          meanG += g;
          meanGX += g * xhat[i];
          local[i] += static_cast<double>(grad[i]) * xhat[i];
        }
        meanG /= static_cast<double>(width);
        meanGX /= static_cast<double>(width);
        float *out = rowOut(dx, r * width, outRow.data());
        for (int64_t i = 0; i < width; ++i)
          out[i] = static_cast<float>(
              inverse * (static_cast<double>(grad[i]) * gamma[i] -
                         (center ? meanG : 0.0) - xhat[i] * meanGX));
        storeRow(out, dx, r * width, width);
      }
  }
  // dgamma += the blocks' sums (read and rounded back where it is 16-bit).
  std::vector<float> dgammaWide(static_cast<size_t>(width));
  const float *current =
      chunkIn({dgamma.data, dgamma.type}, 0, width, dgammaWide.data());
  float *sums = rowOut(dgamma, 0, dgammaWide.data());
  for (int64_t i = 0; i < width; ++i) {
    double sum = 0.0;
    for (int64_t block = 0; block < blocks; ++block)
      sum += partial[block * width + i];
    sums[i] = current[i] + static_cast<float>(sum);
  }
  storeRow(sums, dgamma, 0, width);
}

constexpr Storage kF32 = Storage::F32;
} // namespace

void layerNorm(StoredIn x, StoredIn gamma, const StoredIn *beta, StoredOut y,
               int64_t rows, int64_t width, float epsilon) {
  norm(x, gamma, beta, y, rows, width, epsilon, /*center=*/true);
}

void layerNormGrad(StoredIn x, StoredIn gamma, StoredIn dy, StoredOut dx,
                   StoredOut dgamma, int64_t rows, int64_t width,
                   float epsilon) {
  normGrad(x, gamma, dy, dx, dgamma, rows, width, epsilon, /*center=*/true);
}

void rmsNorm(StoredIn x, StoredIn gamma, StoredOut y, int64_t rows,
             int64_t width, float epsilon) {
  norm(x, gamma, nullptr, y, rows, width, epsilon, /*center=*/false);
}

void rmsNormGrad(StoredIn x, StoredIn gamma, StoredIn dy, StoredOut dx,
                 StoredOut dgamma, int64_t rows, int64_t width, float epsilon) {
  normGrad(x, gamma, dy, dx, dgamma, rows, width, epsilon, /*center=*/false);
}

void layerNorm(const float *x, const float *gamma, const float *beta, float *y,
               int64_t rows, int64_t width, float epsilon) {
  StoredIn betaIn{beta, kF32};
  norm({x, kF32}, {gamma, kF32}, beta ? &betaIn : nullptr, {y, kF32}, rows,
       width, epsilon, /*center=*/true);
}

void layerNormGrad(const float *x, const float *gamma, const float *dy,
                   float *dx, float *dgamma, int64_t rows, int64_t width,
                   float epsilon) {
  normGrad({x, kF32}, {gamma, kF32}, {dy, kF32}, {dx, kF32}, {dgamma, kF32},
           rows, width, epsilon, /*center=*/true);
}

void rmsNorm(const float *x, const float *gamma, float *y, int64_t rows,
             int64_t width, float epsilon) {
  norm({x, kF32}, {gamma, kF32}, nullptr, {y, kF32}, rows, width, epsilon,
       /*center=*/false);
}

void rmsNormGrad(const float *x, const float *gamma, const float *dy, float *dx,
                 float *dgamma, int64_t rows, int64_t width, float epsilon) {
  normGrad({x, kF32}, {gamma, kF32}, {dy, kF32}, {dx, kF32}, {dgamma, kF32},
           rows, width, epsilon, /*center=*/false);
}

//===----------------------------------------------------------------------===//
// Attention and positions
//===----------------------------------------------------------------------===//

namespace {
/// Query rows per block: a block reads only the keys its rows may see
/// (under the causal mask, up to its last row), so causal attention skips
/// the products above the diagonal (5/8 of the work at seq 256).
constexpr int64_t kQueryBlock = 64;

/// Keys [0, result) are all that query rows before `rowEnd` may see.
int64_t visibleKeys(const AttentionShape &s, int64_t prefix, int64_t rowEnd) {
  switch (s.mask) {
  case Mask::Causal:
    return std::min(s.keySeq, rowEnd);
  case Mask::Prefix:
    return std::min(s.keySeq, std::max(rowEnd, prefix));
  case Mask::None:
    break;
  }
  return s.keySeq;
}

/// Where one (sample, head) block of attention reads and writes: row i of
/// q, k, v, out or their gradients is at base + i * width.
struct HeadView {
  int64_t qOffset, kvOffset, qWidth, kvWidth, kvHead, prefix;
};

HeadView headView(const AttentionShape &s, const int32_t *prefixLengths,
                  int64_t b, int64_t h) {
  int64_t qWidth = s.heads * s.headDim, kvWidth = s.kvHeads * s.headDim;
  int64_t kvHead = h / (s.heads / s.kvHeads);
  return {b * s.querySeq * qWidth + h * s.headDim,
          b * s.keySeq * kvWidth + kvHead * s.headDim,
          qWidth,
          kvWidth,
          kvHead,
          s.mask == Mask::Prefix ? prefixLengths[b] : 0};
}

/// The softmax weights of query rows [rowBegin, rowEnd) of one (sample,
/// head) over keys [0, keys) (the keys they may see), into rows of
/// `weights` ([querySeq, keySeq], row-major; masked keys 0): the scores of
/// the block come from one matrix product.
void attentionWeights(const float *q, const float *k, const float *alibiSlopes,
                      const AttentionShape &s, const HeadView &v, int64_t h,
                      int64_t rowBegin, int64_t rowEnd, int64_t keys,
                      float *weights) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
              static_cast<int>(rowEnd - rowBegin), static_cast<int>(keys),
              static_cast<int>(s.headDim), s.scale,
              q + v.qOffset + rowBegin * v.qWidth, static_cast<int>(v.qWidth),
              k + v.kvOffset, static_cast<int>(v.kvWidth), 0.0f,
              weights + rowBegin * s.keySeq, static_cast<int>(s.keySeq));
  for (int64_t i = rowBegin; i < rowEnd; ++i) {
    float *row = weights + i * s.keySeq;
    float maxScore = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < keys; ++j) {
      bool visible = s.mask == Mask::None || j <= i ||
                     (s.mask == Mask::Prefix && j < v.prefix);
      if (!visible) {
        row[j] = -std::numeric_limits<float>::infinity();
        continue;
      }
      if (alibiSlopes)
        row[j] -= alibiSlopes[h] * static_cast<float>(i - j);
      maxScore = std::max(maxScore, row[j]);
    }
    double total = expShifted(row, keys, maxScore);
    float inverse = static_cast<float>(1.0 / total);
    for (int64_t j = 0; j < keys; ++j)
      row[j] *= inverse;
  }
}
} // namespace

namespace {
/// One (sample, head) block of attention: the rows of `out` that `view`
/// addresses, from q, k and v as it addresses them, a block of query rows
/// at a time.
void attendHead(const float *q, const float *k, const float *v,
                const float *alibiSlopes, const AttentionShape &s,
                const HeadView &view, int64_t h, float *out, float *weights) {
  for (int64_t i0 = 0; i0 < s.querySeq; i0 += kQueryBlock) {
    int64_t i1 = std::min(s.querySeq, i0 + kQueryBlock);
    int64_t keys = visibleKeys(s, view.prefix, i1);
    attentionWeights(q, k, alibiSlopes, s, view, h, i0, i1, keys, weights);
    cblas_sgemm(
        CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(i1 - i0),
        static_cast<int>(s.headDim), static_cast<int>(keys), 1.0f,
        weights + i0 * s.keySeq, static_cast<int>(s.keySeq), v + view.kvOffset,
        static_cast<int>(view.kvWidth), 0.0f,
        out + view.qOffset + i0 * view.qWidth, static_cast<int>(view.qWidth));
  }
}

/// One (sample, head) block of attention's gradient: its rows of dq, and
/// its terms added into dk and dv (as `view` addresses them all).
void attendHeadGrad(const float *q, const float *k, const float *v,
                    const float *alibiSlopes, const float *dout,
                    const AttentionShape &s, const HeadView &view, int64_t h,
                    float *dq, float *dk, float *dv, float *weights,
                    float *dWeights) {
  const int sk = static_cast<int>(s.keySeq), hd = static_cast<int>(s.headDim);
  const int qw = static_cast<int>(view.qWidth),
            kvw = static_cast<int>(view.kvWidth);
  for (int64_t i0 = 0; i0 < s.querySeq; i0 += kQueryBlock) {
    int64_t i1 = std::min(s.querySeq, i0 + kQueryBlock);
    const int rows = static_cast<int>(i1 - i0);
    int64_t keys = visibleKeys(s, view.prefix, i1);
    const int kn = static_cast<int>(keys);
    const float *dOut = dout + view.qOffset + i0 * view.qWidth;
    float *p = weights + i0 * s.keySeq, *dp = dWeights + i0 * s.keySeq;
    attentionWeights(q, k, alibiSlopes, s, view, h, i0, i1, keys, weights);
    // dP = dO V^T; dV += P^T dO.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn, hd, 1.0f,
                dOut, qw, v + view.kvOffset, kvw, 0.0f, dp, sk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hd, rows, 1.0f, p,
                sk, dOut, qw, 1.0f, dv + view.kvOffset, kvw);
    // dS = P (dP - rowsum(P dP)) * scale, in place of dP.
    for (int64_t i = 0; i < rows; ++i) {
      const float *pRow = p + i * s.keySeq;
      float *dpRow = dp + i * s.keySeq;
      float outDotGrad = 0.0f;
      for (int64_t j = 0; j < keys; ++j)
        outDotGrad += pRow[j] * dpRow[j];
      for (int64_t j = 0; j < keys; ++j)
        dpRow[j] = pRow[j] * (dpRow[j] - outDotGrad) * s.scale;
    }
    // dQ = dS K; dK += dS^T Q.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kn, 1.0f,
                dp, sk, k + view.kvOffset, kvw, 0.0f,
                dq + view.qOffset + i0 * view.qWidth, qw);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kn, hd, rows, 1.0f, dp,
                sk, q + view.qOffset + i0 * view.qWidth, qw, 1.0f,
                dk + view.kvOffset, kvw);
  }
}

/// `rows` rows of `width` values of `in`, `stride` apart from `offset`
/// (one head's columns of a packed tensor), widened into `out` (dense).
void gatherRows(StoredIn in, int64_t offset, int64_t stride, int64_t rows,
                int64_t width, float *out) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t begin = offset + r * stride;
    if (in.type == Storage::F32)
      std::copy_n(static_cast<const float *>(in.data) + begin, width,
                  out + r * width);
    else
      widen(in.type == Storage::BF16,
            static_cast<const uint16_t *>(in.data) + begin, out + r * width,
            width);
  }
}

/// The reverse of gatherRows: dense `in` rounded into the rows of `out`.
void scatterRows(const float *in, StoredOut out, int64_t offset, int64_t stride,
                 int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t begin = offset + r * stride;
    if (out.type == Storage::F32)
      std::copy_n(in + r * width, width,
                  static_cast<float *>(out.data) + begin);
    else
      narrow(out.type == Storage::BF16, in + r * width,
             static_cast<uint16_t *>(out.data) + begin, width);
  }
}
} // namespace

// The f32 kernels are the stored ones on f32 storage (see below).
void attention(const float *q, const float *k, const float *v,
               const int32_t *prefixLengths, const float *alibiSlopes,
               float *out, const AttentionShape &s) {
  constexpr Storage f32 = Storage::F32;
  attention(StoredIn{q, f32}, StoredIn{k, f32}, StoredIn{v, f32}, prefixLengths,
            alibiSlopes, StoredOut{out, f32}, s);
}

void attentionGrad(const float *q, const float *k, const float *v,
                   const int32_t *prefixLengths, const float *alibiSlopes,
                   const float *dout, float *dq, float *dk, float *dv,
                   const AttentionShape &s) {
  constexpr Storage f32 = Storage::F32;
  attentionGrad(StoredIn{q, f32}, StoredIn{k, f32}, StoredIn{v, f32},
                prefixLengths, alibiSlopes, StoredIn{dout, f32},
                StoredOut{dq, f32}, StoredOut{dk, f32}, StoredOut{dv, f32}, s);
}

// Each thread takes one (sample, head) at a time (one (sample, kv head) for
// the gradient, whose query heads add into the same dk and dv): it copies
// (widening 16-bit values) the head's strided rows of the packed [batch,
// seq, heads * headDim] tensors into dense buffers, runs the block there,
// a few matrix products a block of query rows at a time (OpenBLAS
// single-threaded inside), and writes (rounding) its rows of the results
// back.
void attention(StoredIn q, StoredIn k, StoredIn v, const int32_t *prefixLengths,
               const float *alibiSlopes, StoredOut out,
               const AttentionShape &s) {
  const int64_t hd = s.headDim;
#pragma omp parallel
  {
    std::vector<float> weights(s.querySeq * s.keySeq), qd(s.querySeq * hd),
        kd(s.keySeq * hd), vd(s.keySeq * hd), od(s.querySeq * hd);
#pragma omp for collapse(2)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h) {
        HeadView at = headView(s, prefixLengths, b, h);
        gatherRows(q, at.qOffset, at.qWidth, s.querySeq, hd, qd.data());
        gatherRows(k, at.kvOffset, at.kvWidth, s.keySeq, hd, kd.data());
        gatherRows(v, at.kvOffset, at.kvWidth, s.keySeq, hd, vd.data());
        HeadView dense{0, 0, hd, hd, at.kvHead, at.prefix};
        attendHead(qd.data(), kd.data(), vd.data(), alibiSlopes, s, dense, h,
                   od.data(), weights.data());
        scatterRows(od.data(), out, at.qOffset, at.qWidth, s.querySeq, hd);
      }
  }
}

void attentionGrad(StoredIn q, StoredIn k, StoredIn v,
                   const int32_t *prefixLengths, const float *alibiSlopes,
                   StoredIn dout, StoredOut dq, StoredOut dk, StoredOut dv,
                   const AttentionShape &s) {
  const int64_t hd = s.headDim, group = s.heads / s.kvHeads;
#pragma omp parallel
  {
    std::vector<float> weights(s.querySeq * s.keySeq),
        dWeights(s.querySeq * s.keySeq), qd(s.querySeq * hd),
        dod(s.querySeq * hd), dqd(s.querySeq * hd), kd(s.keySeq * hd),
        vd(s.keySeq * hd), dkd(s.keySeq * hd), dvd(s.keySeq * hd);
#pragma omp for collapse(2)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t kvHead = 0; kvHead < s.kvHeads; ++kvHead) {
        HeadView first = headView(s, prefixLengths, b, kvHead * group);
        gatherRows(k, first.kvOffset, first.kvWidth, s.keySeq, hd, kd.data());
        gatherRows(v, first.kvOffset, first.kvWidth, s.keySeq, hd, vd.data());
        std::fill(dkd.begin(), dkd.end(), 0.0f);
        std::fill(dvd.begin(), dvd.end(), 0.0f);
        for (int64_t h = kvHead * group; h < (kvHead + 1) * group; ++h) {
          HeadView at = headView(s, prefixLengths, b, h);
          gatherRows(q, at.qOffset, at.qWidth, s.querySeq, hd, qd.data());
          gatherRows(dout, at.qOffset, at.qWidth, s.querySeq, hd, dod.data());
          HeadView dense{0, 0, hd, hd, at.kvHead, at.prefix};
          attendHeadGrad(qd.data(), kd.data(), vd.data(), alibiSlopes,
                         dod.data(), s, dense, h, dqd.data(), dkd.data(),
                         dvd.data(), weights.data(), dWeights.data());
          scatterRows(dqd.data(), dq, at.qOffset, at.qWidth, s.querySeq, hd);
        }
        scatterRows(dkd.data(), dk, first.kvOffset, first.kvWidth, s.keySeq,
                    hd);
        scatterRows(dvd.data(), dv, first.kvOffset, first.kvWidth, s.keySeq,
                    hd);
      }
  }
}

void rope(const float *x, float *out, int64_t batch, int64_t seq, int64_t heads,
          int64_t headDim, int64_t rotaryDim, float base, float direction) {
  int64_t width = heads * headDim, half = rotaryDim / 2;
  // Angles in double: position * frequency grows with the position.
  std::vector<double> frequency(half);
  for (int64_t i = 0; i < half; ++i)
    frequency[i] = std::pow(static_cast<double>(base),
                            -2.0 * static_cast<double>(i) / rotaryDim);
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const float *in = x + (b * seq + s) * width;
      float *o = out + (b * seq + s) * width;
      if (o != in)
        std::copy_n(in, width, o);
      for (int64_t i = 0; i < half; ++i) {
        double angle = static_cast<double>(s) * frequency[i];
        float c = static_cast<float>(std::cos(angle));
        float sn = direction * static_cast<float>(std::sin(angle));
        for (int64_t h = 0; h < heads; ++h) {
          float a = in[h * headDim + i], bValue = in[h * headDim + i + half];
          o[h * headDim + i] = a * c - bValue * sn;
          o[h * headDim + i + half] = bValue * c + a * sn;
        }
      }
    }
}

//===----------------------------------------------------------------------===//
// Loss, dropout, optimizer
//===----------------------------------------------------------------------===//

namespace {
/// log(sum(exp(row))) over `n` values, from the row's maximum, summed in
/// double.
double rowLogSumExp(const float *row, int64_t n) {
  if (n == 0)
    return -std::numeric_limits<double>::infinity();
  float maxLogit = *std::max_element(row, row + n);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(static_cast<double>(row[j] - maxLogit));
  return maxLogit + std::log(sum);
}
} // namespace

void logSumExp(const float *x, float *out, int64_t rows, int64_t columns,
               int64_t classes) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    out[r] = static_cast<float>(rowLogSumExp(x + r * columns, classes));
}

float crossEntropy(const float *logits, const int32_t *labels, int64_t rows,
                   int64_t vocab, int32_t ignoreIndex, int64_t *counted,
                   const VocabPiece *piece) {
  int64_t whole = piece ? piece->vocab : vocab;
  int64_t first = piece ? piece->first : 0;
  int64_t classes = classColumns(vocab, piece);
  // Rows sum in fixed blocks, added in block order: the loss does not depend
  // on the thread count or timing.
  constexpr int64_t kBlock = 64;
  int64_t blocks = (rows + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  int64_t count = 0;
  bool valid = true;
#pragma omp parallel for reduction(+ : count) reduction(&& : valid)
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t r = block * kBlock; r < std::min(rows, (block + 1) * kBlock);
         ++r) {
      if (labels[r] == ignoreIndex)
        continue;
      if (labels[r] < 0 || labels[r] >= whole) {
        valid = false;
        continue;
      }
      ++count;
      int64_t column = labels[r] - first;
      if (column < 0 || column >= classes)
        continue;
      const float *row = logits + r * vocab;
      double lse = piece && piece->lse ? static_cast<double>(piece->lse[r])
                                       : rowLogSumExp(row, classes);
      partial[block] += lse - row[column];
    }
  double total = 0.0;
  for (double part : partial)
    total += part;
  if (counted)
    *counted = valid ? count : -1;
  return count ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

bool crossEntropyGrad(const float *logits, const int32_t *labels,
                      float *dlogits, int64_t rows, int64_t vocab,
                      int32_t ignoreIndex, float dloss,
                      const VocabPiece *piece) {
  int64_t whole = piece ? piece->vocab : vocab;
  int64_t first = piece ? piece->first : 0;
  int64_t classes = classColumns(vocab, piece);
  int64_t count = 0;
  bool valid = true;
  for (int64_t r = 0; r < rows; ++r) {
    count += labels[r] != ignoreIndex;
    valid = valid &&
            (labels[r] == ignoreIndex || (labels[r] >= 0 && labels[r] < whole));
  }
  float weight = count ? dloss / static_cast<float>(count) : 0.0f;
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float *out = dlogits + r * vocab;
    if (labels[r] == ignoreIndex || labels[r] < 0 || labels[r] >= whole) {
      std::fill_n(out, vocab, 0.0f);
      continue;
    }
    const float *row = logits + r * vocab;
    int64_t column = labels[r] - first;
    // Padding columns (from `classes` on) get a gradient of 0.
    std::fill(out + classes, out + vocab, 0.0f);
    if (piece && piece->lse) {
      float lse = piece->lse[r];
      for (int64_t j = 0; j < classes; ++j)
        out[j] = std::exp(row[j] - lse) * weight;
    } else if (classes > 0) {
      float maxLogit = *std::max_element(row, row + classes);
      double sum = 0.0;
      for (int64_t j = 0; j < classes; ++j) {
        out[j] = std::exp(row[j] - maxLogit);
        sum += out[j];
      }
      float inverse = static_cast<float>(weight / sum);
      for (int64_t j = 0; j < classes; ++j)
        out[j] *= inverse;
    }
    if (column >= 0 && column < classes)
      out[column] -= weight;
  }
  return valid;
}

void dropout(const float *x, float *out, int64_t count, double probability,
             uint64_t seed, uint64_t step, uint64_t stream,
             DropoutPiece piece) {
  float keepScale = static_cast<float>(1.0 / (1.0 - probability));
#pragma omp parallel for
  for (int64_t i = 0; i < count; ++i) {
    bool keep = dropoutUniform(seed, step, stream,
                               piece.globalIndex(static_cast<uint64_t>(i))) >=
                probability;
    out[i] = keep ? x[i] * keepScale : 0.0f;
  }
}

double sumSquares(const float *x, int64_t count, double limit) {
  // Fixed blocks added in order, as in crossEntropy.
  constexpr int64_t kBlock = 4096;
  int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for
  for (int64_t block = 0; block < blocks; ++block) {
    double sum = 0.0;
    bool over = false;
    for (int64_t i = block * kBlock; i < std::min(count, (block + 1) * kBlock);
         ++i) {
      double value = x[i];
      over |= std::fabs(value) > limit;
      sum += value * value;
    }
    partial[block] = over ? std::numeric_limits<double>::infinity() : sum;
  }
  double sum = 0.0;
  for (double part : partial)
    sum += part;
  return sum;
}

int64_t countValid(const int32_t *labels, int64_t count, int32_t ignoreIndex) {
  int64_t valid = 0;
  for (int64_t i = 0; i < count; ++i)
    valid += labels[i] != ignoreIndex;
  return valid;
}

void accumulate(float *acc, const float *x, float weight, int64_t count) {
#pragma omp parallel for
  for (int64_t i = 0; i < count; ++i)
    acc[i] += weight * x[i];
}

void adamw(float *param, const float *grad, float *m, float *v, int64_t count,
           float lr, float step, float coefficient, float beta1, float beta2,
           float epsilon, float weightDecay) {
  float correction1 = 1.0f - std::pow(beta1, step);
  float correction2 = 1.0f - std::pow(beta2, step);
#pragma omp parallel for
  for (int64_t i = 0; i < count; ++i) {
    float g = grad[i] * coefficient;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    float update =
        (m[i] / correction1) / (std::sqrt(v[i] / correction2) + epsilon);
    param[i] -= lr * update + lr * weightDecay * param[i];
  }
}

} // namespace triad::rt::cpu
