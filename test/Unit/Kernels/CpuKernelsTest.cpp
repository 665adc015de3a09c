//===- CpuKernelsTest.cpp - CPU kernels against the reference interpreter -===//
//
// Every fp32 CPU kernel on random inputs against the float64 reference
// kernel of the interpreter: relative error (over the whole output) under
// 1e-5. Outputs are poisoned with NaN first, so an element a kernel forgets
// to write fails the comparison.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cpu/HalfFloat.h"
#include "runtime/kernels/cpu/VectorMath.h"
#include "triad/Interpreter/Kernels.h"

#include "runtime/init/Init.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace cpu = triad::rt::cpu;
namespace ref = triad::interp;
using ref::Tensor;

namespace {

constexpr double kTolerance = 1e-5;

Tensor random(std::vector<int64_t> shape, uint64_t stream, double scale = 1.0) {
  Tensor t(shape);
  auto key = triad::rt::parameterKey(stream, "kernels");
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data[i] = static_cast<float>(scale * triad::rt::standardNormal(key, i));
  return t;
}

std::vector<float> floats(const Tensor &t) {
  return std::vector<float>(t.data.begin(), t.data.end());
}

std::vector<float> poisoned(int64_t count) {
  return std::vector<float>(count, std::numeric_limits<float>::quiet_NaN());
}

std::vector<int32_t> ints(const Tensor &t) {
  return std::vector<int32_t>(t.data.begin(), t.data.end());
}

double relativeError(const std::vector<float> &actual, const Tensor &expected) {
  EXPECT_EQ(actual.size(), expected.data.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(actual[i]))
      return std::numeric_limits<double>::infinity();
    diff += (actual[i] - expected.data[i]) * (actual[i] - expected.data[i]);
    norm += expected.data[i] * expected.data[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

TEST(CpuKernels, Matmul) {
  struct Case {
    int64_t batch, m, n, k;
    bool ta, tb, rhsBatched;
  };
  for (const Case &c : {Case{1, 5, 7, 3, false, false, false},
                        Case{3, 5, 7, 4, false, false, false},
                        Case{3, 5, 7, 4, false, true, false},
                        Case{3, 5, 7, 4, true, false, false},
                        Case{2, 5, 7, 4, true, true, true},
                        Case{2, 5, 7, 4, false, false, true}}) {
    Tensor a = random({c.batch, c.ta ? c.k : c.m, c.ta ? c.m : c.k}, 1);
    std::vector<int64_t> bShape = {c.tb ? c.n : c.k, c.tb ? c.k : c.n};
    if (c.rhsBatched)
      bShape.insert(bShape.begin(), c.batch);
    Tensor b = random(bShape, 2);
    Tensor expected = ref::matmul(a, b, c.ta, c.tb);
    std::vector<float> out = poisoned(expected.numElements());
    cpu::matmul(floats(a).data(), floats(b).data(), out.data(), c.batch, c.m,
                c.n, c.k, c.ta, c.tb, c.rhsBatched);
    EXPECT_LT(relativeError(out, expected), kTolerance)
        << c.batch << " " << c.ta << c.tb << c.rhsBatched;
  }
}

TEST(CpuKernels, EmbeddingAndItsGradient) {
  Tensor table = random({11, 6}, 3);
  Tensor ids({2, 5}, {0, 3, 10, 3, 7, 1, 1, 2, 9, 3});
  std::vector<float> out = poisoned(60);
  EXPECT_TRUE(cpu::embedding(ints(ids).data(), floats(table).data(), out.data(),
                             10, 11, 6));
  EXPECT_LT(relativeError(out, *ref::embedding(ids, table)), kTolerance);
  Tensor dy = random({2, 5, 6}, 4);
  std::vector<float> dtable(66, 0.0f);
  EXPECT_TRUE(cpu::embeddingGradAccumulate(ints(ids).data(), floats(dy).data(),
                                           dtable.data(), 10, 11, 6));
  EXPECT_LT(relativeError(dtable, ref::embeddingGrad(ids, dy, 11)), kTolerance);
  // Ids outside the vocabulary are reported, never read or written.
  std::vector<int32_t> bad = {0, 11, -1};
  std::vector<float> rows = poisoned(18);
  EXPECT_FALSE(
      cpu::embedding(bad.data(), floats(table).data(), rows.data(), 3, 11, 6));
  EXPECT_EQ(rows[6], 0.0f);
  EXPECT_FALSE(cpu::embeddingGradAccumulate(bad.data(), floats(dy).data(),
                                            dtable.data(), 3, 11, 6));
}

// The gradient of a vocab-parallel piece: rows [4, 8) of a vocabulary of 12
// gather the ids in them, as the interpreter's local form, and the pieces
// of three ranks are the whole gradient's rows.
TEST(CpuKernels, EmbeddingGradientOfAVocabPiece) {
  Tensor ids({2, 5}, {0, 3, 11, 4, 7, 5, 4, 2, 9, 8});
  Tensor dy = random({2, 5, 6}, 5);
  Tensor whole = ref::embeddingGrad(ids, dy, 12);
  for (int64_t rank = 0; rank < 3; ++rank) {
    std::vector<float> piece(24, 0.0f);
    EXPECT_TRUE(cpu::embeddingGradAccumulate(ints(ids).data(),
                                             floats(dy).data(), piece.data(),
                                             10, 4, 6, rank * 4, 12));
    EXPECT_LT(relativeError(piece, ref::embeddingGrad(ids, dy, 4, rank * 4)),
              kTolerance);
    std::vector<double> expected(whole.data.begin() + rank * 24,
                                 whole.data.begin() + (rank + 1) * 24);
    EXPECT_LT(relativeError(piece, Tensor({4, 6}, expected)), kTolerance);
  }
  // An id beyond the whole vocabulary is still reported.
  std::vector<int32_t> bad = {12};
  std::vector<float> piece(24, 0.0f);
  EXPECT_FALSE(cpu::embeddingGradAccumulate(bad.data(), floats(dy).data(),
                                            piece.data(), 1, 4, 6, 8, 12));
}

// A vocab-parallel piece: rows [4, 8) of a vocabulary of 12 give the ids in
// them and zeros for the others, as the interpreter's local form; the
// pieces of all three ranks add up to the whole lookup.
TEST(CpuKernels, VocabParallelEmbedding) {
  Tensor table = random({12, 6}, 3);
  Tensor ids({2, 5}, {0, 4, 11, 7, 5, 8, 3, 2, 6, 9});
  std::vector<float> sum(60, 0.0f);
  for (int64_t piece = 0; piece < 3; ++piece) {
    Tensor rows = triad::interp::slice(table, {4 * piece, 0}, {4, 6});
    std::vector<float> out = poisoned(60);
    EXPECT_TRUE(cpu::embedding(ints(ids).data(), floats(rows).data(),
                               out.data(), 10, 4, 6, 4 * piece, 12));
    EXPECT_LT(relativeError(out, *ref::embedding(ids, rows, 4 * piece, 12)),
              kTolerance);
    for (size_t i = 0; i < out.size(); ++i)
      sum[i] += out[i];
  }
  EXPECT_LT(relativeError(sum, *ref::embedding(ids, table)), kTolerance);
  // Ids outside the whole vocabulary are still invalid input.
  std::vector<int32_t> bad = {12};
  std::vector<float> row = poisoned(6);
  EXPECT_FALSE(cpu::embedding(bad.data(), floats(table).data(), row.data(), 1,
                              4, 6, 4, 12));
  auto outside = ref::embedding(Tensor({1}, {12}), table, 4, 12);
  EXPECT_FALSE(static_cast<bool>(outside));
  llvm::consumeError(outside.takeError());
}

TEST(CpuKernels, Elementwise) {
  Tensor x = random({4, 6}, 5, 2.0), y = random({6}, 6), z = random({4, 6}, 7);
  std::vector<float> out = poisoned(24);
  cpu::addBroadcast(floats(x).data(), floats(y).data(), out.data(), 24, 6);
  EXPECT_LT(relativeError(out, ref::add(x, y)), kTolerance);
  out = poisoned(24);
  cpu::mul(floats(x).data(), floats(z).data(), out.data(), 24);
  EXPECT_LT(relativeError(out, ref::mul(x, z)), kTolerance);
  out = poisoned(24);
  cpu::scale(floats(x).data(), -0.5f, out.data(), 24);
  EXPECT_LT(relativeError(out, ref::scale(x, -0.5)), kTolerance);
}

TEST(CpuKernels, Activations) {
  Tensor x = random({5, 7}, 8, 2.0), dy = random({5, 7}, 9);
  struct Case {
    cpu::Activation kind;
    ref::Activation reference;
    Tensor (*forward)(const Tensor &);
  };
  const Case cases[] = {
      {cpu::Activation::Gelu, ref::Activation::Gelu,
       [](const Tensor &t) { return ref::gelu(t, false); }},
      {cpu::Activation::GeluTanh, ref::Activation::GeluTanh,
       [](const Tensor &t) { return ref::gelu(t, true); }},
      {cpu::Activation::FastGelu, ref::Activation::FastGelu,
       [](const Tensor &t) { return ref::fastGelu(t); }},
      {cpu::Activation::Relu, ref::Activation::Relu,
       [](const Tensor &t) { return ref::relu(t); }},
      {cpu::Activation::Silu, ref::Activation::Silu,
       [](const Tensor &t) { return ref::silu(t); }},
  };
  for (const Case &c : cases) {
    std::vector<float> out = poisoned(35);
    cpu::activation(c.kind, floats(x).data(), out.data(), 35);
    EXPECT_LT(relativeError(out, c.forward(x)), kTolerance);
    out = poisoned(35);
    cpu::activationGrad(c.kind, floats(x).data(), floats(dy).data(), out.data(),
                        35);
    EXPECT_LT(relativeError(out, ref::activationGrad(c.reference, x, dy)),
              kTolerance);
  }
  std::vector<float> out = poisoned(35);
  cpu::gated(cpu::Activation::Silu, floats(x).data(), floats(dy).data(),
             out.data(), 35);
  EXPECT_LT(relativeError(out, ref::swiglu(x, dy)), kTolerance);
  out = poisoned(35);
  cpu::gated(cpu::Activation::Gelu, floats(x).data(), floats(dy).data(),
             out.data(), 35);
  EXPECT_LT(relativeError(out, ref::geglu(x, dy)), kTolerance);
}

TEST(CpuKernels, Norms) {
  // More rows than one 64-row block, so the blocked reduction is exercised.
  const int64_t rows = 300, width = 16, n = rows * width;
  Tensor x = random({rows, width}, 10, 3.0), gamma = random({width}, 11),
         beta = random({width}, 12), dy = random({rows, width}, 13);
  std::vector<float> out = poisoned(n);
  cpu::layerNorm(floats(x).data(), floats(gamma).data(), floats(beta).data(),
                 out.data(), rows, width, 1e-5f);
  EXPECT_LT(relativeError(out, ref::layerNorm(x, gamma, &beta, 1e-5)),
            kTolerance);
  ref::NormGrads expected = ref::layerNormGrad(x, gamma, dy, 1e-5);
  std::vector<float> dx = poisoned(n), dgamma(width, 0.0f);
  cpu::layerNormGrad(floats(x).data(), floats(gamma).data(), floats(dy).data(),
                     dx.data(), dgamma.data(), rows, width, 1e-5f);
  EXPECT_LT(relativeError(dx, expected.dx), kTolerance);
  EXPECT_LT(relativeError(dgamma, expected.dgamma), kTolerance);
  // The reduction is deterministic: the same bits every time.
  std::vector<float> again(width, 0.0f);
  cpu::layerNormGrad(floats(x).data(), floats(gamma).data(), floats(dy).data(),
                     dx.data(), again.data(), rows, width, 1e-5f);
  EXPECT_EQ(again, dgamma);

  out = poisoned(n);
  cpu::rmsNorm(floats(x).data(), floats(gamma).data(), out.data(), rows, width,
               1e-6f);
  EXPECT_LT(relativeError(out, ref::rmsNorm(x, gamma, 1e-6)), kTolerance);
  expected = ref::rmsNormGrad(x, gamma, dy, 1e-6);
  dx = poisoned(n);
  std::fill(dgamma.begin(), dgamma.end(), 0.0f);
  cpu::rmsNormGrad(floats(x).data(), floats(gamma).data(), floats(dy).data(),
                   dx.data(), dgamma.data(), rows, width, 1e-6f);
  EXPECT_LT(relativeError(dx, expected.dx), kTolerance);
  EXPECT_LT(relativeError(dgamma, expected.dgamma), kTolerance);
}

void checkAttention(cpu::Mask mask, int64_t heads, int64_t kvHeads, bool alibi,
                    int64_t seq = 9) {
  SCOPED_TRACE(::testing::Message()
               << "mask " << static_cast<int>(mask) << " heads " << heads << "/"
               << kvHeads << " alibi " << alibi << " seq " << seq);
  const int64_t batch = 3, headDim = 4;
  Tensor q = random({batch, seq, heads * headDim}, 14);
  Tensor k = random({batch, seq, kvHeads * headDim}, 15);
  Tensor v = random({batch, seq, kvHeads * headDim}, 16);
  Tensor dout = random({batch, seq, heads * headDim}, 17);
  // Prefixes shorter than, inside and as long as the sequence.
  Tensor prefix({batch},
                {static_cast<float>(seq / 2 + 3), 0, static_cast<float>(seq)});
  Tensor slopes = random({heads}, 18, 0.3);
  ref::Mask refMask = mask == cpu::Mask::Causal   ? ref::Mask::Causal
                      : mask == cpu::Mask::Prefix ? ref::Mask::Prefix
                                                  : ref::Mask::None;
  const Tensor *refPrefix = mask == cpu::Mask::Prefix ? &prefix : nullptr;
  const Tensor *refSlopes = alibi ? &slopes : nullptr;
  std::vector<int32_t> prefixInts = ints(prefix);
  std::vector<float> slopeFloats = floats(slopes);
  cpu::AttentionShape shape{batch,   seq,     seq,  heads,
                            kvHeads, headDim, mask, 0.5f};
  std::vector<float> out = poisoned(q.numElements());
  cpu::attention(floats(q).data(), floats(k).data(), floats(v).data(),
                 refPrefix ? prefixInts.data() : nullptr,
                 alibi ? slopeFloats.data() : nullptr, out.data(), shape);
  EXPECT_LT(relativeError(out, *ref::attention(q, k, v, refPrefix, refSlopes,
                                               heads, kvHeads, refMask, 0.5)),
            kTolerance);
  auto expected = ref::attentionGrad(q, k, v, refPrefix, refSlopes, dout, heads,
                                     kvHeads, refMask, 0.5);
  ASSERT_TRUE(static_cast<bool>(expected));
  std::vector<float> dq = poisoned(q.numElements()),
                     dk = poisoned(k.numElements()),
                     dv = poisoned(v.numElements());
  cpu::attentionGrad(floats(q).data(), floats(k).data(), floats(v).data(),
                     refPrefix ? prefixInts.data() : nullptr,
                     alibi ? slopeFloats.data() : nullptr, floats(dout).data(),
                     dq.data(), dk.data(), dv.data(), shape);
  EXPECT_LT(relativeError(dq, expected->dq), kTolerance);
  EXPECT_LT(relativeError(dk, expected->dk), kTolerance);
  EXPECT_LT(relativeError(dv, expected->dv), kTolerance);
}

TEST(CpuKernels, Attention) {
  checkAttention(cpu::Mask::Causal, 2, 2, false);
  checkAttention(cpu::Mask::None, 2, 2, false);
  checkAttention(cpu::Mask::Prefix, 2, 2, false);
  checkAttention(cpu::Mask::Causal, 4, 2, false);
  checkAttention(cpu::Mask::Causal, 4, 1, true);
  // Several blocks of query rows (64 each, the last one partial): each
  // reads only the keys its rows may see.
  for (cpu::Mask mask : {cpu::Mask::Causal, cpu::Mask::None, cpu::Mask::Prefix})
    checkAttention(mask, 2, 1, mask == cpu::Mask::Causal, 150);
}

// The vectorizable exp, erf and tanh against the C library, on a dense grid
// over their whole useful range and at the edges.
TEST(CpuKernels, VectorMath) {
  namespace vm = triad::rt::cpu::vmath;
  double expError = 0, erfError = 0, tanhError = 0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    float f = static_cast<float>(x);
    double exact = std::exp(static_cast<double>(f));
    expError = std::max(expError, std::abs(vm::expf(f) - exact) / exact);
  }
  for (double x = -8.0; x <= 8.0; x += 0.0001) {
    float f = static_cast<float>(x);
    erfError = std::max(
        erfError, std::abs(vm::erff(f) - std::erf(static_cast<double>(f))));
    tanhError = std::max(
        tanhError, std::abs(vm::tanhf(f) - std::tanh(static_cast<double>(f))));
  }
  EXPECT_LT(expError, 3e-7); // about 2 ulp
  EXPECT_LT(erfError, 5e-7); // the formula 1.5e-7, plus fp32 rounding
  EXPECT_LT(tanhError, 3e-7);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vm::expf(-inf), 0.0f);
  EXPECT_EQ(vm::expf(-100.0f), 0.0f);
  EXPECT_EQ(vm::expf(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(vm::expf(inf)));
  EXPECT_TRUE(std::isnan(vm::expf(std::nanf(""))));
  EXPECT_EQ(vm::erff(inf), 1.0f);
  EXPECT_EQ(vm::erff(-inf), -1.0f);
  EXPECT_EQ(vm::tanhf(inf), 1.0f);
  EXPECT_EQ(vm::tanhf(-inf), -1.0f);
  EXPECT_EQ(vm::erff(0.0f), 0.0f);
}

TEST(CpuKernels, Rope) {
  // Long enough that fp32 angles would drift: the kernel uses double.
  Tensor x = random({2, 4096, 12}, 19); // 3 heads of 4
  for (int64_t rotary : {2, 4}) {
    std::vector<float> out = poisoned(x.numElements());
    cpu::rope(floats(x).data(), out.data(), 2, 4096, 3, 4, rotary, 100.0f,
              1.0f);
    EXPECT_LT(relativeError(out, ref::rope(x, 3, rotary, 100.0)), kTolerance);
    out = poisoned(x.numElements());
    cpu::rope(floats(x).data(), out.data(), 2, 4096, 3, 4, rotary, 100.0f,
              -1.0f);
    EXPECT_LT(relativeError(out, ref::ropeGrad(x, 3, rotary, 100.0)),
              kTolerance);
  }
}

TEST(CpuKernels, CrossEntropy) {
  Tensor logits = random({6, 13}, 20, 3.0);
  Tensor labels({6}, {0, 12, -100, 5, 5, 1});
  int64_t counted = 0;
  float loss = cpu::crossEntropy(floats(logits).data(), ints(labels).data(), 6,
                                 13, -100, &counted);
  EXPECT_EQ(counted, 5);
  double expected = *ref::crossEntropy(logits, labels, -100);
  EXPECT_NEAR(loss, expected, 1e-5 * expected);
  std::vector<float> grad = poisoned(78);
  cpu::crossEntropyGrad(floats(logits).data(), ints(labels).data(), grad.data(),
                        6, 13, -100, 0.7f);
  EXPECT_LT(
      relativeError(grad, *ref::crossEntropyGrad(logits, labels, 0.7, -100)),
      kTolerance);
}

// A vocab-parallel cross entropy over 3 pieces of 5 columns of a vocabulary
// of 15: each piece's log-sum-exp, combined as the partition combines them
// (gathered, and the log-sum-exp of those), is the whole row's; the
// pieces' losses add up to the whole loss and their gradients are the
// whole gradient's columns, as in the interpreter's local forms.
TEST(CpuKernels, VocabParallelCrossEntropy) {
  Tensor logits = random({6, 15}, 21, 3.0);
  Tensor labels({6}, {0, 14, -100, 5, 9, 10});
  double whole = *ref::crossEntropy(logits, labels, -100);
  Tensor wholeGrad = *ref::crossEntropyGrad(logits, labels, 0.7, -100);
  std::vector<float> gathered(18);
  std::vector<std::vector<float>> pieces;
  for (int64_t piece = 0; piece < 3; ++piece) {
    pieces.push_back(
        floats(triad::interp::slice(logits, {0, 5 * piece}, {6, 5})));
    std::vector<float> lse = poisoned(6);
    cpu::logSumExp(pieces.back().data(), lse.data(), 6, 5, 5);
    EXPECT_LT(relativeError(lse, ref::logSumExp(triad::interp::slice(
                                     logits, {0, 5 * piece}, {6, 5}))),
              kTolerance);
    for (int64_t r = 0; r < 6; ++r)
      gathered[r * 3 + piece] = lse[r];
  }
  std::vector<float> lse = poisoned(6);
  cpu::logSumExp(gathered.data(), lse.data(), 6, 3, 3);
  Tensor wholeLse = ref::logSumExp(logits);
  EXPECT_LT(relativeError(lse, wholeLse), kTolerance);

  double sum = 0.0;
  for (int64_t piece = 0; piece < 3; ++piece) {
    cpu::VocabPiece columns{lse.data(), 5 * piece, 15};
    int64_t counted = 0;
    float part = cpu::crossEntropy(pieces[piece].data(), ints(labels).data(), 6,
                                   5, -100, &counted, &columns);
    EXPECT_EQ(counted, 5);
    ref::VocabPiece refColumns{&wholeLse, 5 * piece, 15};
    Tensor columnsOf = triad::interp::slice(logits, {0, 5 * piece}, {6, 5});
    EXPECT_NEAR(part, *ref::crossEntropy(columnsOf, labels, -100, refColumns),
                1e-5 * whole);
    sum += part;
    std::vector<float> grad = poisoned(30);
    EXPECT_TRUE(cpu::crossEntropyGrad(pieces[piece].data(), ints(labels).data(),
                                      grad.data(), 6, 5, -100, 0.7f, &columns));
    EXPECT_LT(relativeError(grad, triad::interp::slice(wholeGrad,
                                                       {0, 5 * piece}, {6, 5})),
              kTolerance);
  }
  EXPECT_NEAR(sum, whole, 1e-5 * whole);

  // Labels are checked against the whole vocabulary: 14 is valid in the
  // first piece's call, 15 is not.
  std::vector<int32_t> bad = {15, 0, 0, 0, 0, 0};
  cpu::VocabPiece first{lse.data(), 0, 15};
  int64_t counted = 0;
  cpu::crossEntropy(pieces[0].data(), bad.data(), 6, 5, -100, &counted, &first);
  EXPECT_EQ(counted, -1);
  std::vector<float> grad = poisoned(30);
  EXPECT_FALSE(cpu::crossEntropyGrad(pieces[0].data(), bad.data(), grad.data(),
                                     6, 5, -100, 1.0f, &first));
  auto outside = ref::crossEntropy(triad::interp::slice(logits, {0, 0}, {6, 5}),
                                   Tensor({6}, {15, 0, 0, 0, 0, 0}), -100,
                                   ref::VocabPiece{&wholeLse, 0, 15});
  EXPECT_FALSE(static_cast<bool>(outside));
  llvm::consumeError(outside.takeError());
}

// A vocabulary of 15 classes padded to 16 columns (tp=2) and to 20 (tp=4,
// pieces of 5, the last one's columns all padding when the vocabulary is
// 15): the padding, whatever its values, changes neither the loss nor the
// gradient of the classes and gets a gradient of 0; the CPU kernels and the
// reference interpreter agree.
TEST(CpuKernels, PaddedVocabCrossEntropy) {
  Tensor logits = random({6, 15}, 23, 3.0);
  Tensor labels({6}, {0, 14, -100, 5, 9, 10});
  double whole = *ref::crossEntropy(logits, labels, -100);
  Tensor wholeGrad = *ref::crossEntropyGrad(logits, labels, 0.7, -100);
  for (int64_t columns : {16, 20}) {
    SCOPED_TRACE(columns);
    // Padding columns hold large values: they would dominate the softmax.
    Tensor padded = ref::pad(logits, {0, 0}, {0, columns - 15});
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t j = 15; j < columns; ++j)
        padded.data[r * columns + j] = 40.0 + j;
    Tensor paddedGrad = ref::pad(wholeGrad, {0, 0}, {0, columns - 15});

    // The whole padded vocabulary: the piece at 0 with no lse.
    cpu::VocabPiece all{nullptr, 0, 15};
    int64_t counted = 0;
    float loss = cpu::crossEntropy(floats(padded).data(), ints(labels).data(),
                                   6, columns, -100, &counted, &all);
    EXPECT_EQ(counted, 5);
    EXPECT_NEAR(loss, whole, 1e-5 * whole);
    ref::VocabPiece refAll{nullptr, 0, 15};
    EXPECT_NEAR(*ref::crossEntropy(padded, labels, -100, refAll), whole,
                1e-9 * whole);
    std::vector<float> grad = poisoned(6 * columns);
    EXPECT_TRUE(cpu::crossEntropyGrad(floats(padded).data(),
                                      ints(labels).data(), grad.data(), 6,
                                      columns, -100, 0.7f, &all));
    EXPECT_LT(relativeError(grad, paddedGrad), kTolerance);
    EXPECT_LT(relativeError(grad, *ref::crossEntropyGrad(padded, labels, 0.7,
                                                         -100, refAll)),
              kTolerance);

    // In pieces: each piece's log-sum-exp over its classes (minus infinity
    // for a piece of padding only), combined.
    int64_t pieces = columns == 16 ? 2 : 4, width = columns / pieces;
    std::vector<float> gathered(6 * pieces);
    std::vector<std::vector<float>> parts;
    for (int64_t piece = 0; piece < pieces; ++piece) {
      Tensor part =
          triad::interp::slice(padded, {0, width * piece}, {6, width});
      parts.push_back(floats(part));
      cpu::VocabPiece at{nullptr, width * piece, 15};
      std::vector<float> lse = poisoned(6);
      cpu::logSumExp(parts.back().data(), lse.data(), 6, width,
                     cpu::classColumns(width, &at));
      Tensor refLse =
          ref::logSumExp(part, ref::VocabPiece{nullptr, width * piece, 15});
      for (int64_t r = 0; r < 6; ++r) {
        if (width * piece >= 15) {
          EXPECT_EQ(lse[r], -std::numeric_limits<float>::infinity());
          EXPECT_EQ(refLse.data[r], -std::numeric_limits<double>::infinity());
        } else {
          EXPECT_NEAR(lse[r], refLse.data[r], 1e-5 * std::abs(refLse.data[r]));
        }
        gathered[r * pieces + piece] = lse[r];
      }
    }
    std::vector<float> lse = poisoned(6);
    cpu::logSumExp(gathered.data(), lse.data(), 6, pieces, pieces);
    Tensor wholeLse = ref::logSumExp(logits);
    EXPECT_LT(relativeError(lse, wholeLse), kTolerance);
    double sum = 0.0;
    for (int64_t piece = 0; piece < pieces; ++piece) {
      cpu::VocabPiece at{lse.data(), width * piece, 15};
      float part = cpu::crossEntropy(parts[piece].data(), ints(labels).data(),
                                     6, width, -100, &counted, &at);
      EXPECT_EQ(counted, 5);
      sum += part;
      std::vector<float> grad = poisoned(6 * width);
      EXPECT_TRUE(cpu::crossEntropyGrad(parts[piece].data(),
                                        ints(labels).data(), grad.data(), 6,
                                        width, -100, 0.7f, &at));
      EXPECT_LT(relativeError(grad, triad::interp::slice(paddedGrad,
                                                         {0, width * piece},
                                                         {6, width})),
                kTolerance);
    }
    EXPECT_NEAR(sum, whole, 1e-5 * whole);
  }
  // A label among the padding is out of range.
  std::vector<int32_t> bad = {15, 0, 0, 0, 0, 0};
  cpu::VocabPiece all{nullptr, 0, 15};
  int64_t counted = 0;
  Tensor padded = ref::pad(logits, {0, 0}, {0, 1});
  cpu::crossEntropy(floats(padded).data(), bad.data(), 6, 16, -100, &counted,
                    &all);
  EXPECT_EQ(counted, -1);
}

TEST(CpuKernels, DropoutMatchesTheReferenceMask) {
  Tensor x = random({1000}, 21);
  std::vector<float> out = poisoned(1000);
  cpu::dropout(floats(x).data(), out.data(), 1000, 0.3f, 5, 2, 7);
  EXPECT_LT(relativeError(out, ref::dropout(x, 0.3, 5, 2, 7)), kTolerance);
  // A shard of the tensor draws the same mask from its global offset.
  std::vector<float> shard = poisoned(100);
  cpu::dropout(floats(x).data() + 400, shard.data(), 100, 0.3f, 5, 2, 7,
               triad::rt::DropoutPiece{400});
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(shard[i], out[400 + i]);
}

TEST(CpuKernels, DropoutOnAPieceOfTheSequenceMatchesTheWhole) {
  // [4 samples, 10 rows, 5]: each rank of 2 holds rows [5 r, 5 r + 5) of
  // every sample, a run of 25 elements every 50.
  const int64_t batch = 4, seq = 10, hidden = 5, pieces = 2;
  const int64_t local = seq / pieces, count = batch * seq * hidden;
  Tensor x = random({count}, 26);
  std::vector<float> whole = poisoned(count);
  cpu::dropout(floats(x).data(), whole.data(), count, 0.5f, 5, 2, 7);
  for (int64_t member = 0; member < pieces; ++member) {
    std::vector<float> input, piece = poisoned(batch * local * hidden);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < local * hidden; ++i)
        input.push_back(static_cast<float>(
            x.data[(b * seq + member * local) * hidden + i]));
    uint64_t run = local * hidden;
    cpu::dropout(input.data(), piece.data(), batch * local * hidden, 0.5f, 5, 2,
                 7, triad::rt::DropoutPiece{member * run, run, run * pieces});
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < local * hidden; ++i)
        EXPECT_EQ(piece[b * local * hidden + i],
                  whole[(b * seq + member * local) * hidden + i])
            << "sample " << b << " element " << i << " of member " << member;
  }
}

TEST(CpuKernels, AdamWAndNorm) {
  Tensor p = random({50}, 22), g = random({50}, 23), m = random({50}, 24, 0.1);
  Tensor v = random({50}, 25, 0.1);
  for (double &value : v.data)
    value = std::abs(value);
  ref::AdamWState expected =
      ref::adamw(p, g, m, v, 1e-3, 3, 0.8, 0.9, 0.95, 1e-8, 0.1);
  std::vector<float> param = floats(p), mm = floats(m), vv = floats(v);
  cpu::adamw(param.data(), floats(g).data(), mm.data(), vv.data(), 50, 1e-3f,
             3.0f, 0.8f, 0.9f, 0.95f, 1e-8f, 0.1f);
  EXPECT_LT(relativeError(param, expected.param), kTolerance);
  EXPECT_LT(relativeError(mm, expected.m), kTolerance);
  EXPECT_LT(relativeError(vv, expected.v), kTolerance);
  EXPECT_NEAR(cpu::sumSquares(floats(g).data(), 50), ref::sumSquares(g),
              1e-6 * ref::sumSquares(g));
}

// The reductions of the loss and the gradient norm add in a fixed order:
// the same bits whatever the thread count.
TEST(CpuKernels, ReductionsDoNotDependOnTheThreadCount) {
  Tensor x = random({100000}, 26);
  Tensor logits = random({300, 17}, 27);
  std::vector<int32_t> labels(300);
  for (int i = 0; i < 300; ++i)
    labels[i] = (i * 7) % 17;
  auto reduce = [&] {
    int64_t counted;
    float loss = cpu::crossEntropy(floats(logits).data(), labels.data(), 300,
                                   17, -100, &counted);
    return std::make_pair(cpu::sumSquares(floats(x).data(), 100000), loss);
  };
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto serial = reduce();
  omp_set_num_threads(3);
  auto parallel = reduce();
  omp_set_num_threads(threads);
  EXPECT_EQ(serial, parallel);
  EXPECT_NEAR(serial.first, ref::sumSquares(x), 1e-9 * serial.first);
}

// sumRows (a bias gradient) adds each column's rows in order, in double,
// whatever the threads: the bits of the sequential sum, with 1 thread and
// with 3, for a width that is not a multiple of its blocks of columns.
TEST(CpuKernels, SumRowsAddsEachColumnInRowOrder) {
  const int64_t rows = 301, width = 300; // above the threads' threshold
  Tensor x = random({rows, width}, 28);
  const std::vector<float> &values = floats(x);
  std::vector<float> want(width);
  for (int64_t j = 0; j < width; ++j) {
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      sum += values[r * width + j];
    want[j] = static_cast<float>(sum * 0.25);
  }
  int threads = omp_get_max_threads();
  for (int count : {1, 3}) {
    omp_set_num_threads(count);
    std::vector<float> got(width);
    cpu::sumRows(values.data(), rows, width, 0.25, got.data());
    EXPECT_EQ(got, want) << count << " threads";
  }
  omp_set_num_threads(threads);
}

TEST(CpuKernels, CountValidAndAccumulate) {
  std::vector<int32_t> labels = {3, -100, 0, -100, 7};
  EXPECT_EQ(cpu::countValid(labels.data(), 5, -100), 3);
  EXPECT_EQ(cpu::countValid(labels.data(), 5, 3), 4);
  Tensor x = random({40}, 28), acc = random({40}, 29);
  std::vector<float> sum = floats(acc);
  cpu::accumulate(sum.data(), floats(x).data(), 2.5f, 40);
  EXPECT_LT(relativeError(sum, ref::add(acc, ref::scale(x, 2.5))), kTolerance);
}

} // namespace

//===----------------------------------------------------------------------===//
// 16-bit storage
//===----------------------------------------------------------------------===//

TEST(HalfFloat, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: ties go to the
  // even mantissa (1); 1 + 3 * 2^-8 goes up to 1 + 2^-6.
  EXPECT_EQ(cpu::toBf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(cpu::toBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(cpu::toBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(cpu::fromBf16(0x3f80), 1.0f);
  EXPECT_EQ(cpu::fromBf16(cpu::toBf16(-2.5f)), -2.5f);
  // The largest f32 rounds to infinity; infinities and NaNs stay.
  EXPECT_EQ(cpu::toBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(cpu::toBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(cpu::fromBf16(cpu::toBf16(std::nanf("")))));
}

TEST(HalfFloat, F16RoundsToNearestEvenWithSubnormals) {
  EXPECT_EQ(cpu::toF16(1.0f), 0x3c00);
  EXPECT_EQ(cpu::fromF16(0x3c00), 1.0f);
  // Halfway between 1 and 1 + 2^-10 goes to 1; above it, up.
  EXPECT_EQ(cpu::toF16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(cpu::toF16(1.0f + 3 * 0x1p-11f), 0x3c02);
  // The largest f16, 65504; from 65520 on, infinity.
  EXPECT_EQ(cpu::toF16(65504.0f), 0x7bff);
  EXPECT_EQ(cpu::toF16(65519.0f), 0x7bff);
  EXPECT_EQ(cpu::toF16(65520.0f), 0x7c00);
  EXPECT_EQ(cpu::toF16(-1e9f), 0xfc00);
  // Subnormals: 2^-24 is the smallest; half of it ties to zero, and 1.5
  // times it to 2^-23.
  EXPECT_EQ(cpu::toF16(0x1p-24f), 0x0001);
  EXPECT_EQ(cpu::toF16(0x1p-25f), 0x0000);
  EXPECT_EQ(cpu::toF16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(cpu::fromF16(0x0001), 0x1p-24f);
  EXPECT_EQ(cpu::fromF16(0x8001), -0x1p-24f);
  EXPECT_EQ(cpu::toF16(0x1p-14f), 0x0400); // the smallest normal
  EXPECT_TRUE(std::isnan(cpu::fromF16(cpu::toF16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(cpu::fromF16(0x7c00)));
  // Every f16 survives the round trip.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    auto half = static_cast<uint16_t>(bits);
    float value = cpu::fromF16(half);
    if (!std::isnan(value)) {
      EXPECT_EQ(cpu::toF16(value), half) << bits;
    }
  }
}

// The bulk conversions (serial below 32,768 values, over the threads
// above) give the scalar functions' bits: every 16-bit pattern widened,
// and f32 values of every kind (ties, subnormals, overflow, infinities,
// NaN) rounded.
TEST(HalfFloat, BulkConversionsGiveTheScalarBits) {
  std::vector<uint16_t> every(0x10000);
  for (uint32_t bits = 0; bits < 0x10000; ++bits)
    every[bits] = static_cast<uint16_t>(bits);
  std::vector<float> values;
  std::mt19937 generator(3);
  std::uniform_int_distribution<uint32_t> anyBits;
  for (int i = 0; i < 70000; ++i) {
    uint32_t bits = anyBits(generator);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    values.push_back(value);
  }
  for (float special :
       {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 65520.0f, 0x1p-25f, 3 * 0x1p-25f,
        -0.0f, std::numeric_limits<float>::infinity()})
    values.insert(values.begin(), special);
  for (bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f16");
    for (size_t count : {size_t{1000}, every.size()}) {
      std::vector<float> wide(count);
      cpu::widen(bf16, every.data(), wide.data(), static_cast<int64_t>(count));
      for (size_t i = 0; i < count; ++i) {
        float want = bf16 ? cpu::fromBf16(every[i]) : cpu::fromF16(every[i]);
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(wide[i])) << i;
        else
          EXPECT_EQ(wide[i], want) << i;
      }
    }
    for (size_t count : {size_t{1000}, values.size()}) {
      std::vector<uint16_t> bits(count);
      cpu::narrow(bf16, values.data(), bits.data(),
                  static_cast<int64_t>(count));
      for (size_t i = 0; i < count; ++i) {
        if (std::isnan(values[i])) {
          float back = bf16 ? cpu::fromBf16(bits[i]) : cpu::fromF16(bits[i]);
          EXPECT_TRUE(std::isnan(back)) << i;
          continue;
        }
        EXPECT_EQ(bits[i],
                  bf16 ? cpu::toBf16(values[i]) : cpu::toF16(values[i]))
            << values[i];
      }
    }
  }
}
