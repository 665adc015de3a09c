//===- GradientKernelsTest.cpp - gradient kernels vs finite differences ---===//
//
// Every gradient kernel equals the central finite differences of its forward
// kernel in float64: for L(x) = sum(w * f(x)) with fixed random weights w,
// dL/dx from the gradient kernel (with dy = w) matches
// (L(x + h e_i) - L(x - h e_i)) / 2h for every element i, to a relative
// error (over the whole gradient) under 1e-6.
//
//===----------------------------------------------------------------------===//

#include "triad/Interpreter/Kernels.h"

#include "runtime/init/Init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace triad::interp;

namespace {

Tensor random(std::vector<int64_t> shape, uint64_t stream, double scale = 1.0) {
  Tensor t(shape);
  auto key = triad::rt::parameterKey(stream, "test");
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data[i] = scale * triad::rt::standardNormal(key, i);
  return t;
}

double dot(const Tensor &a, const Tensor &b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.data.size(); ++i)
    sum += a.data[i] * b.data[i];
  return sum;
}

/// Relative error between an analytic gradient and the central
/// differences of `loss` around `x`.
double gradientError(Tensor x,
                     const std::function<double(const Tensor &)> &loss,
                     const Tensor &analytic) {
  const double h = 1e-5;
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < x.numElements(); ++i) {
    double saved = x.data[i];
    x.data[i] = saved + h;
    double up = loss(x);
    x.data[i] = saved - h;
    double down = loss(x);
    x.data[i] = saved;
    double numeric = (up - down) / (2 * h);
    diff += (numeric - analytic.data[i]) * (numeric - analytic.data[i]);
    norm += std::max(numeric * numeric, analytic.data[i] * analytic.data[i]);
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

constexpr double kTolerance = 1e-6;

TEST(GradientKernels, Activations) {
  Tensor x = random({3, 7}, 1, 2.0);
  Tensor w = random({3, 7}, 2);
  struct Case {
    Activation kind;
    std::function<Tensor(const Tensor &)> forward;
  };
  const Case cases[] = {
      {Activation::Gelu, [](const Tensor &t) { return gelu(t, false); }},
      {Activation::GeluTanh, [](const Tensor &t) { return gelu(t, true); }},
      {Activation::FastGelu, [](const Tensor &t) { return fastGelu(t); }},
      {Activation::Relu, [](const Tensor &t) { return relu(t); }},
      {Activation::Silu, [](const Tensor &t) { return silu(t); }},
  };
  for (const Case &c : cases) {
    Tensor analytic = activationGrad(c.kind, x, w);
    EXPECT_LT(
        gradientError(
            x, [&](const Tensor &t) { return dot(w, c.forward(t)); }, analytic),
        kTolerance)
        << static_cast<int>(c.kind);
  }
}

TEST(GradientKernels, LayerNorm) {
  Tensor x = random({4, 6}, 3), gamma = random({6}, 4), beta = random({6}, 5);
  Tensor w = random({4, 6}, 6);
  NormGrads grads = layerNormGrad(x, gamma, w, 1e-5);
  EXPECT_LT(gradientError(
                x,
                [&](const Tensor &t) {
                  return dot(w, layerNorm(t, gamma, &beta, 1e-5));
                },
                grads.dx),
            kTolerance);
  EXPECT_LT(
      gradientError(
          gamma,
          [&](const Tensor &g) { return dot(w, layerNorm(x, g, &beta, 1e-5)); },
          grads.dgamma),
      kTolerance);
}

TEST(GradientKernels, RmsNorm) {
  Tensor x = random({4, 6}, 7), gamma = random({6}, 8);
  Tensor w = random({4, 6}, 9);
  NormGrads grads = rmsNormGrad(x, gamma, w, 1e-6);
  EXPECT_LT(
      gradientError(
          x, [&](const Tensor &t) { return dot(w, rmsNorm(t, gamma, 1e-6)); },
          grads.dx),
      kTolerance);
  EXPECT_LT(gradientError(
                gamma,
                [&](const Tensor &g) { return dot(w, rmsNorm(x, g, 1e-6)); },
                grads.dgamma),
            kTolerance);
}

void checkAttention(Mask mask, int64_t heads, int64_t kvHeads, bool alibi,
                    const std::string &what) {
  SCOPED_TRACE(what);
  int64_t headDim = 3, batch = 2, seq = 4;
  Tensor q = random({batch, seq, heads * headDim}, 10);
  Tensor k = random({batch, seq, kvHeads * headDim}, 11);
  Tensor v = random({batch, seq, kvHeads * headDim}, 12);
  Tensor w = random({batch, seq, heads * headDim}, 13);
  Tensor prefix({batch}, {2, 0});
  Tensor slopes = random({heads}, 14, 0.5);
  const Tensor *prefixPtr = mask == Mask::Prefix ? &prefix : nullptr;
  const Tensor *slopesPtr = alibi ? &slopes : nullptr;
  double scale = 0.7;
  auto loss = [&](const Tensor &qq, const Tensor &kk, const Tensor &vv) {
    llvm::Expected<Tensor> out = attention(qq, kk, vv, prefixPtr, slopesPtr,
                                           heads, kvHeads, mask, scale);
    if (!out) {
      llvm::consumeError(out.takeError());
      return 0.0;
    }
    return dot(w, *out);
  };
  llvm::Expected<AttentionGrads> grads = attentionGrad(
      q, k, v, prefixPtr, slopesPtr, w, heads, kvHeads, mask, scale);
  ASSERT_TRUE(static_cast<bool>(grads));
  EXPECT_LT(gradientError(
                q, [&](const Tensor &t) { return loss(t, k, v); }, grads->dq),
            kTolerance);
  EXPECT_LT(gradientError(
                k, [&](const Tensor &t) { return loss(q, t, v); }, grads->dk),
            kTolerance);
  EXPECT_LT(gradientError(
                v, [&](const Tensor &t) { return loss(q, k, t); }, grads->dv),
            kTolerance);
}

TEST(GradientKernels, Attention) {
  checkAttention(Mask::Causal, 2, 2, false, "causal");
  checkAttention(Mask::None, 2, 2, false, "no mask");
  checkAttention(Mask::Prefix, 2, 2, false, "prefix");
  checkAttention(Mask::Causal, 4, 2, false, "grouped-query");
  checkAttention(Mask::Causal, 4, 1, true, "multi-query with ALiBi");
}

TEST(GradientKernels, Rope) {
  Tensor x = random({2, 5, 8}, 15), w = random({2, 5, 8}, 16);
  Tensor analytic = ropeGrad(w, 2, 2, 50.0);
  EXPECT_LT(gradientError(
                x, [&](const Tensor &t) { return dot(w, rope(t, 2, 2, 50.0)); },
                analytic),
            kTolerance);
  // Rotating forward then back is the identity.
  Tensor back = ropeGrad(rope(x, 2, 4, 50.0), 2, 4, 50.0);
  for (int64_t i = 0; i < x.numElements(); ++i)
    EXPECT_NEAR(back.data[i], x.data[i], 1e-12);
}

TEST(GradientKernels, CrossEntropy) {
  Tensor logits = random({2, 3, 5}, 17);
  Tensor labels({2, 3}, {0, 4, -100, 2, 2, 1});
  double dloss = 1.7;
  llvm::Expected<Tensor> analytic =
      crossEntropyGrad(logits, labels, dloss, -100);
  ASSERT_TRUE(static_cast<bool>(analytic));
  EXPECT_LT(gradientError(
                logits,
                [&](const Tensor &t) {
                  return dloss * *crossEntropy(t, labels, -100);
                },
                *analytic),
            kTolerance);
  // Ignored tokens get no gradient.
  for (int64_t j = 0; j < 5; ++j)
    EXPECT_EQ(analytic->data[2 * 5 + j], 0.0);
}

TEST(GradientKernels, Embedding) {
  Tensor table = random({5, 3}, 18);
  Tensor ids({2, 3}, {4, 0, 4, 1, 4, 2});
  Tensor w = random({2, 3, 3}, 19);
  Tensor analytic = embeddingGrad(ids, w, 5);
  EXPECT_LT(gradientError(
                table,
                [&](const Tensor &t) { return dot(w, *embedding(ids, t)); },
                analytic),
            kTolerance);
  // Row 3 is never used.
  for (int64_t h = 0; h < 3; ++h)
    EXPECT_EQ(analytic.data[3 * 3 + h], 0.0);
}

TEST(GradientKernels, PadIsTheAdjointOfSlice) {
  Tensor x = random({3, 4}, 20), y = random({2, 2}, 21);
  // <slice(x), y> = <x, pad(y)> for the matching offsets.
  EXPECT_NEAR(dot(slice(x, {1, 1}, {2, 2}), y), dot(x, pad(y, {1, 1}, {0, 1})),
              1e-12);
}

TEST(GradientKernels, BroadcastSizeOneDimensions) {
  Tensor x({2, 1}, {1, 2});
  Tensor y = broadcast(x, {3, 2, 2});
  EXPECT_EQ(y.data, (std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2}));
}

} // namespace
