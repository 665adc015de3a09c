//===- KernelsTest.cpp - reference semantics of the triad ops -------------===//

#include "triad/Interpreter/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

using namespace triad::interp;

namespace {

/// A tensor with values 0.1 * (i + 1) * (-1)^i, distinct and of mixed sign.
Tensor ramp(std::vector<int64_t> shape) {
  Tensor t(shape);
  for (size_t i = 0; i < t.data.size(); ++i)
    t.data[i] = 0.1 * static_cast<double>(i + 1) * (i % 2 ? -1.0 : 1.0);
  return t;
}

void expectNear(const Tensor &actual, const Tensor &expected,
                double tolerance = 1e-12) {
  ASSERT_EQ(actual.shape, expected.shape);
  for (size_t i = 0; i < actual.data.size(); ++i)
    EXPECT_NEAR(actual.data[i], expected.data[i], tolerance) << "element " << i;
}

TEST(Kernels, MatmulByHand) {
  Tensor a({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b({3, 2}, {7, 8, 9, 10, 11, 12});
  expectNear(matmul(a, b, false, false), Tensor({2, 2}, {58, 64, 139, 154}));
  // The same product from transposed storage.
  expectNear(matmul(transpose(a, {1, 0}), transpose(b, {1, 0}), true, true),
             Tensor({2, 2}, {58, 64, 139, 154}));
}

TEST(Kernels, MatmulBatchedAndBroadcast) {
  Tensor x = ramp({2, 3, 4});
  Tensor w = ramp({4, 5});
  Tensor broadcast = matmul(x, w, false, false);
  ASSERT_EQ(broadcast.shape, (std::vector<int64_t>{2, 3, 5}));
  // Batch 1 equals the 2-D product of its slice.
  Tensor slice1 = reshape(slice(x, {1, 0, 0}, {1, 3, 4}), {3, 4});
  expectNear(reshape(slice(broadcast, {1, 0, 0}, {1, 3, 5}), {3, 5}),
             matmul(slice1, w, false, false));
  // A batched rhs with identical batches equals the broadcast rhs.
  Tensor batched = concat({&w, &w}, 0);
  expectNear(matmul(x, reshape(batched, {2, 4, 5}), false, false), broadcast);
}

TEST(Kernels, AddBroadcastsTheRhs) {
  Tensor x({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor pos({2, 2}, {10, 20, 30, 40});
  expectNear(add(x, pos), Tensor({2, 2, 2}, {11, 22, 33, 44, 15, 26, 37, 48}));
  expectNear(biasAdd(x, Tensor({2}, {1, -1})),
             Tensor({2, 2, 2}, {2, 1, 4, 3, 6, 5, 8, 7}));
}

TEST(Kernels, ActivationValues) {
  EXPECT_NEAR(geluExact(1.0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(geluExact(-1.0), -0.15865525393145707, 1e-15);
  EXPECT_NEAR(geluTanh(1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(fastGelu(1.0), 1.0 / (1.0 + std::exp(-1.702)), 1e-15);
  EXPECT_NEAR(silu(1.0), 0.7310585786300049, 1e-15);
  Tensor x({3}, {-2, 0, 3});
  expectNear(relu(x), Tensor({3}, {0, 0, 3}));
  expectNear(swiglu(x, Tensor({3}, {1, 1, 2})),
             Tensor({3}, {silu(-2), 0, 2 * silu(3)}));
  expectNear(geglu(x, Tensor({3}, {2, 2, 2})),
             Tensor({3}, {2 * geluExact(-2), 0, 2 * geluExact(3)}));
}

TEST(Kernels, LayerNormNormalizesTheLastDimension) {
  Tensor x = ramp({3, 8});
  Tensor ones({8}, 1.0), zeros({8}, 0.0);
  Tensor y = layerNorm(x, ones, &zeros, 0.0);
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 8; ++i)
      mean += y.data[r * 8 + i] / 8;
    for (int i = 0; i < 8; ++i)
      var += (y.data[r * 8 + i] - mean) * (y.data[r * 8 + i] - mean) / 8;
    EXPECT_NEAR(mean, 0.0, 1e-12);
    EXPECT_NEAR(var, 1.0, 1e-12);
  }
  // gamma scales and beta shifts; no beta means no shift.
  Tensor gamma({8}, 2.0), beta({8}, 0.5);
  Tensor scaled = layerNorm(x, gamma, &beta, 0.0);
  for (size_t i = 0; i < y.data.size(); ++i)
    EXPECT_NEAR(scaled.data[i], 2.0 * y.data[i] + 0.5, 1e-12);
  expectNear(layerNorm(x, ones, nullptr, 0.0), y);
}

TEST(Kernels, RmsNormHasUnitRootMeanSquare) {
  Tensor x = ramp({2, 6});
  Tensor y = rmsNorm(x, Tensor({6}, 1.0), 0.0);
  for (int r = 0; r < 2; ++r) {
    double meanSquare = 0;
    for (int i = 0; i < 6; ++i)
      meanSquare += y.data[r * 6 + i] * y.data[r * 6 + i] / 6;
    EXPECT_NEAR(meanSquare, 1.0, 1e-12);
    // Direction is kept: y is x scaled by a positive number.
    EXPECT_NEAR(y.data[r * 6 + 1] / y.data[r * 6],
                x.data[r * 6 + 1] / x.data[r * 6], 1e-12);
  }
}

Tensor attend(const Tensor &q, const Tensor &k, const Tensor &v, int64_t heads,
              int64_t kvHeads, Mask mask, const Tensor *prefix = nullptr,
              const Tensor *slopes = nullptr, double scale = 1.0) {
  llvm::Expected<Tensor> result =
      attention(q, k, v, prefix, slopes, heads, kvHeads, mask, scale);
  if (!result) {
    ADD_FAILURE() << llvm::toString(result.takeError());
    return Tensor();
  }
  return *result;
}

TEST(Kernels, CausalAttentionAveragesVisibleValues) {
  // With zero queries every visible key scores alike: position i averages
  // the values of positions 0..i.
  Tensor q({1, 3, 2}, 0.0);
  Tensor v({1, 3, 2}, {1, 10, 2, 20, 6, 60});
  Tensor out = attend(q, ramp({1, 3, 2}), v, 1, 1, Mask::Causal);
  expectNear(out, Tensor({1, 3, 2}, {1, 10, 1.5, 15, 3, 30}));
  expectNear(attend(q, ramp({1, 3, 2}), v, 1, 1, Mask::None),
             Tensor({1, 3, 2}, {3, 30, 3, 30, 3, 30}));
}

TEST(Kernels, AttentionSoftmaxByHand) {
  // One query against two keys: weights softmax(q.k * scale).
  Tensor q({1, 2, 1}, {0.0, 2.0});
  Tensor k({1, 2, 1}, {1.0, -1.0});
  Tensor v({1, 2, 1}, {3.0, 5.0});
  Tensor out = attend(q, k, v, 1, 1, Mask::Causal, nullptr, nullptr, 0.5);
  double w0 = std::exp(1.0) / (std::exp(1.0) + std::exp(-1.0));
  expectNear(out, Tensor({1, 2, 1}, {3.0, 3.0 * w0 + 5.0 * (1 - w0)}));
}

TEST(Kernels, PrefixAttentionSeesThePrefix) {
  Tensor q({2, 3, 1}, 0.0);
  Tensor k({2, 3, 1}, 0.0);
  Tensor v({2, 3, 1}, {1, 2, 6, 1, 2, 6});
  Tensor prefix({2}, {2, 0});
  // Sample 0: positions 0 and 1 see both prefix tokens; sample 1 is causal.
  Tensor out = attend(q, k, v, 1, 1, Mask::Prefix, &prefix);
  expectNear(out, Tensor({2, 3, 1}, {1.5, 1.5, 3, 1, 1.5, 3}));
  Tensor bad({2}, {4, 0});
  EXPECT_FALSE(static_cast<bool>(
      attention(q, k, v, &bad, nullptr, 1, 1, Mask::Prefix, 1.0)));
}

TEST(Kernels, GroupedQueryHeadsShareKeysAndValues) {
  // Four query heads over two kv heads equal four heads over duplicated kv.
  Tensor q = ramp({1, 3, 8});  // 4 heads of 2
  Tensor kv = ramp({1, 3, 4}); // 2 heads of 2
  Tensor kv4({1, 3, 8});
  for (int s = 0; s < 3; ++s)
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < 2; ++d)
        kv4.data[s * 8 + h * 2 + d] = kv.data[s * 4 + (h / 2) * 2 + d];
  expectNear(attend(q, kv, kv, 4, 2, Mask::Causal),
             attend(q, kv4, kv4, 4, 4, Mask::Causal));
}

TEST(Kernels, AlibiPenalizesDistance) {
  Tensor q({1, 3, 1}, 0.0), k({1, 3, 1}, 0.0);
  Tensor v({1, 3, 1}, {1, 2, 6});
  Tensor slopes({1}, {std::log(2.0)});
  // Scores at the last position: -ln2 * (2, 1, 0): weights 1/4, 1/2, 1.
  Tensor out = attend(q, k, v, 1, 1, Mask::Causal, nullptr, &slopes);
  EXPECT_NEAR(out.data[2], (0.25 * 1 + 0.5 * 2 + 1 * 6) / 1.75, 1e-12);
}

TEST(Kernels, RopeRotatesPairsByPosition) {
  Tensor x({1, 2, 4}, {1, 2, 3, 4, 1, 2, 3, 4}); // one head of 4
  Tensor y = rope(x, 1, 4, 100.0);
  // Position 0 is the identity.
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(y.data[i], x.data[i], 1e-15);
  // Position 1: pair (x0, x2) turns by 1 rad, pair (x1, x3) by 1/10 rad.
  EXPECT_NEAR(y.data[4], std::cos(1.0) - 3 * std::sin(1.0), 1e-12);
  EXPECT_NEAR(y.data[6], 3 * std::cos(1.0) + std::sin(1.0), 1e-12);
  EXPECT_NEAR(y.data[5], 2 * std::cos(0.1) - 4 * std::sin(0.1), 1e-12);
  // A partial rotary dimension rotates (x0, x1) and leaves the rest alone.
  Tensor partial = rope(x, 1, 2, 100.0);
  EXPECT_NEAR(partial.data[4], std::cos(1.0) - 2 * std::sin(1.0), 1e-12);
  EXPECT_EQ(partial.data[6], 3.0);
  EXPECT_EQ(partial.data[7], 4.0);
}

TEST(Kernels, ShapeOps) {
  Tensor x({2, 3}, {0, 1, 2, 3, 4, 5});
  expectNear(transpose(x, {1, 0}), Tensor({3, 2}, {0, 3, 1, 4, 2, 5}));
  expectNear(slice(x, {0, 1}, {2, 2}), Tensor({2, 2}, {1, 2, 4, 5}));
  expectNear(concat({&x, &x}, 1),
             Tensor({2, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  expectNear(concat({&x, &x}, 0),
             Tensor({4, 3}, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  expectNear(broadcast(Tensor({2}, {7, 8}), {2, 2}),
             Tensor({2, 2}, {7, 8, 7, 8}));
  expectNear(reshape(x, {3, 2}), Tensor({3, 2}, {0, 1, 2, 3, 4, 5}));
}

TEST(Kernels, Reductions) {
  Tensor x({2, 3}, {0, 1, 2, 3, 4, 5});
  expectNear(reduce(x, {1}, false, false), Tensor({2}, {3, 12}));
  expectNear(reduce(x, {0}, true, true), Tensor({1, 3}, {1.5, 2.5, 3.5}));
  expectNear(reduce(x, {0, 1}, false, true), Tensor::scalar(2.5));
}

TEST(Kernels, CrossEntropy) {
  Tensor uniform({2, 3, 8}, 0.0);
  Tensor labels({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_NEAR(*crossEntropy(uniform, labels, -100), std::log(8.0), 1e-12);
  // By hand: logits (0, ln 3) with label 1: -log(3/4).
  Tensor logits({1, 2}, {0.0, std::log(3.0)});
  EXPECT_NEAR(*crossEntropy(logits, Tensor({1}, {1}), -100), -std::log(0.75),
              1e-12);
  // Ignored tokens leave the mean; all ignored gives 0.
  Tensor two({2, 2}, {0.0, std::log(3.0), 5.0, 0.0});
  EXPECT_NEAR(*crossEntropy(two, Tensor({2}, {1, -100}), -100), -std::log(0.75),
              1e-12);
  EXPECT_EQ(*crossEntropy(two, Tensor({2}, {-100, -100}), -100), 0.0);
  llvm::Expected<double> bad = crossEntropy(two, Tensor({2}, {1, 2}), -100);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("label 2 at position 1"),
            std::string::npos);
}

TEST(Kernels, LogSumExp) {
  // By hand: log(1 + 3) = log 4; large values stay finite (from the max).
  Tensor x({2, 2}, {0.0, std::log(3.0), 1000.0, 1000.0});
  expectNear(logSumExp(x),
             Tensor({2, 1}, {std::log(4.0), 1000.0 + std::log(2.0)}));
}

// The local form of a vocab-parallel cross entropy by hand: logits (0, ln 3
// | ln 2, ln 2) in two pieces of two columns, log-sum-exp log 8. The label
// 1 lies in the first piece, whose term is log 8 - ln 3; the label 3 in the
// second, log 8 - ln 2; each piece divides by both labels' count, 2.
TEST(Kernels, VocabParallelCrossEntropy) {
  Tensor first({2, 2}, {0.0, std::log(3.0), 0.0, std::log(3.0)});
  Tensor second({2, 2},
                {std::log(2.0), std::log(2.0), std::log(2.0), std::log(2.0)});
  Tensor lse({2, 1}, {std::log(8.0), std::log(8.0)});
  Tensor labels({2}, {1, 3});
  double a = *crossEntropy(first, labels, -100, VocabPiece{&lse, 0, 4});
  double b = *crossEntropy(second, labels, -100, VocabPiece{&lse, 2, 4});
  EXPECT_NEAR(a, (std::log(8.0) - std::log(3.0)) / 2, 1e-12);
  EXPECT_NEAR(b, (std::log(8.0) - std::log(2.0)) / 2, 1e-12);
  Tensor whole({2, 4}, {0.0, std::log(3.0), std::log(2.0), std::log(2.0), 0.0,
                        std::log(3.0), std::log(2.0), std::log(2.0)});
  EXPECT_NEAR(a + b, *crossEntropy(whole, labels, -100), 1e-12);
  // The gradient's columns: softmax (1/8, 3/8 | 2/8, 2/8) less the one-hot
  // where the label falls in the piece, over 2 labels.
  expectNear(
      *crossEntropyGrad(first, labels, 1.0, -100, VocabPiece{&lse, 0, 4}),
      Tensor({2, 2}, {1.0 / 16, 3.0 / 16 - 0.5, 1.0 / 16, 3.0 / 16}));
  expectNear(
      *crossEntropyGrad(second, labels, 1.0, -100, VocabPiece{&lse, 2, 4}),
      Tensor({2, 2}, {2.0 / 16, 2.0 / 16, 2.0 / 16, 2.0 / 16 - 0.5}));
  // Labels beyond the whole vocabulary are refused by every piece.
  llvm::Expected<double> bad =
      crossEntropy(first, Tensor({2}, {4, 0}), -100, VocabPiece{&lse, 0, 4});
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("label 4 at position 0"),
            std::string::npos);
}

TEST(Kernels, EmbeddingGathersRows) {
  Tensor table({3, 2}, {0, 1, 10, 11, 20, 21});
  llvm::Expected<Tensor> rows = embedding(Tensor({2}, {2, 0}), table);
  ASSERT_TRUE(static_cast<bool>(rows));
  expectNear(*rows, Tensor({2, 2}, {20, 21, 0, 1}));
  llvm::Expected<Tensor> bad = embedding(Tensor({1}, {3}), table);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(
      llvm::toString(bad.takeError())
          .find("token id 3 at position 0 is outside the vocabulary [0, 3)"),
      std::string::npos);
}

TEST(Kernels, DropoutKeepsAndScales) {
  Tensor x({10000}, 1.0);
  expectNear(dropout(x, 0.0, 1, 0, 0), x);
  Tensor y = dropout(x, 0.25, 1, 0, 0);
  int kept = 0;
  for (double v : y.data) {
    EXPECT_TRUE(v == 0.0 || std::abs(v - 1.0 / 0.75) < 1e-12);
    kept += v != 0.0;
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  // Another step draws another mask; the same step the same one.
  expectNear(dropout(x, 0.25, 1, 0, 0), y);
  EXPECT_NE(dropout(x, 0.25, 1, 1, 0).data, y.data);
}

} // namespace
