//===- CudaAttentionTest.cpp - CUDA attention, rope, dropout vs the CPU ---===//
//
// The CUDA attention (forward and backward), rope and dropout kernels
// (runtime/kernels/cuda/CudaAttention.h) run on random inputs next to the
// CPU kernels they stand in for, and the results must agree: attention
// within 1e-5 relative plus an absolute floor of 1e-5 of the tensor's
// largest element (see expectAttentionNear), rope within 1e-5 relative plus
// 1e-6, and dropout bit for bit. Outputs are filled with NaN before each
// kernel runs, so an element a kernel fails to write fails the comparison.
//
// Without a GPU every test is skipped, not failed (the message "no CUDA
// device on this machine" is what ctest's SKIP_REGULAR_EXPRESSION looks
// for). Nothing here has run on a GPU until a run on one says so.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cpu/HalfFloat.h"
#include "runtime/tests/CudaTestSupport.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace triad::rt::cuda {
namespace {

using cpu::Mask;
using test::expectNear;
using test::maxAbs;
using test::randomFloats;

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttentionCase {
  int64_t batch, querySeq, keySeq, heads, kvHeads, headDim;
  Mask mask;
  bool alibi;
  /// One per sample, with Mask::Prefix.
  std::vector<int32_t> prefix;
};

std::string nameOf(const AttentionCase &c) {
  std::string name = c.mask == Mask::Causal   ? "causal"
                     : c.mask == Mask::Prefix ? "prefix"
                                              : "none";
  name += " batch " + std::to_string(c.batch) + " q" +
          std::to_string(c.querySeq) + " k" + std::to_string(c.keySeq) +
          " heads " + std::to_string(c.heads) + "/" +
          std::to_string(c.kvHeads) + " d" + std::to_string(c.headDim);
  for (int32_t length : c.prefix)
    name += " prefix " + std::to_string(length);
  return c.alibi ? name + " alibi" : name;
}

/// Sequences of 37 and 100 end inside a tile; 256 spans several tiles of
/// every kernel. Head dimensions cover each class of the f32 kernels (up
/// to 32, 64, 128, 256) and of the tensor-core ones (multiples of 16 up to
/// 32, 64, 128), non-powers of two, and 10 (padded to 12); kv heads
/// 4, 2 and 1 of 4 query heads. Prefix lengths include 0 (causal) and the
/// whole sequence (none).
std::vector<AttentionCase> attentionCases() {
  return {
      {2, 37, 37, 4, 4, 64, Mask::Causal, false, {}},
      {2, 100, 100, 4, 4, 64, Mask::Causal, true, {}},
      {2, 100, 100, 4, 2, 48, Mask::Causal, false, {}},
      {2, 256, 256, 4, 1, 64, Mask::Causal, true, {}},
      {2, 100, 100, 4, 2, 128, Mask::Causal, false, {}},
      {2, 256, 256, 2, 2, 32, Mask::Causal, false, {}},
      {2, 100, 100, 4, 2, 16, Mask::Causal, true, {}},
      {2, 37, 37, 4, 2, 10, Mask::Causal, false, {}},
      {1, 100, 100, 2, 1, 200, Mask::Causal, true, {}},
      {2, 37, 37, 4, 4, 64, Mask::Prefix, false, {0, 37}},
      {2, 100, 100, 4, 2, 64, Mask::Prefix, true, {13, 70}},
      {2, 256, 256, 4, 1, 24, Mask::Prefix, false, {256, 100}},
      {2, 100, 100, 4, 1, 64, Mask::None, true, {}},
      {2, 37, 37, 4, 4, 24, Mask::None, false, {}},
      {2, 37, 37, 4, 2, 256, Mask::None, false, {}},
      // Queries and keys of different lengths: row i sees keys j <= i.
      {2, 37, 100, 4, 2, 64, Mask::Causal, false, {}},
      {2, 100, 37, 4, 4, 64, Mask::Causal, true, {}},
      {2, 100, 37, 4, 2, 48, Mask::None, false, {}},
      {2, 20, 64, 4, 4, 64, Mask::Prefix, false, {50, 64}},
  };
}

cpu::AttentionShape shapeOf(const AttentionCase &c) {
  return {c.batch,
          c.querySeq,
          c.keySeq,
          c.heads,
          c.kvHeads,
          c.headDim,
          c.mask,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.headDim)))};
}

/// Random q, k, v and dout of a case, and its ALiBi slopes (the usual
/// geometric sequence 2^(-8 (h + 1) / heads)).
struct AttentionInputs {
  std::vector<float> q, k, v, dout, slopes;

  explicit AttentionInputs(const AttentionCase &c) {
    size_t qCount = c.batch * c.querySeq * c.heads * c.headDim;
    size_t kvCount = c.batch * c.keySeq * c.kvHeads * c.headDim;
    q = randomFloats(qCount, 11);
    k = randomFloats(kvCount, 12);
    v = randomFloats(kvCount, 13);
    dout = randomFloats(qCount, 14);
    if (c.alibi)
      for (int64_t h = 0; h < c.heads; ++h)
        slopes.push_back(static_cast<float>(
            std::exp2(-8.0 * static_cast<double>(h + 1) / c.heads)));
  }
};

/// Attention's outputs on the CPU (want) and the device (got): out for
/// the forward; dq, dk and dv for the gradients.
struct AttentionOutputs {
  std::vector<std::vector<float>> want, got;
};

class CudaAttentionKernels : public test::CudaTest {
protected:
  /// The forward of a case on both backends, the device's with
  /// `products`; got stays empty where the device call fails (a test
  /// failure).
  AttentionOutputs forward(const AttentionCase &c, const AttentionInputs &in,
                           DType products = DType::F32) {
    cpu::AttentionShape shape = shapeOf(c);
    AttentionOutputs outputs;
    outputs.want.emplace_back(in.q.size());
    cpu::attention(in.q.data(), in.k.data(), in.v.data(),
                   c.prefix.empty() ? nullptr : c.prefix.data(),
                   c.alibi ? in.slopes.data() : nullptr, outputs.want[0].data(),
                   shape);
    DeviceBuffer q = upload(in.q), k = upload(in.k), v = upload(in.v);
    DeviceBuffer prefix = c.prefix.empty() ? DeviceBuffer() : upload(c.prefix);
    DeviceBuffer slopes = c.alibi ? upload(in.slopes) : DeviceBuffer();
    DeviceBuffer out = poisoned(in.q.size());
    absl::Status status =
        attention(*context, q.as<float>(), k.as<float>(), v.as<float>(),
                  prefix.as<int32_t>(), slopes.as<float>(), out.as<float>(),
                  shape, products);
    EXPECT_TRUE(status.ok()) << status;
    if (status.ok())
      outputs.got.push_back(download(out, in.q.size()));
    return outputs;
  }

  /// The gradients of a case on both backends (dq, dk, dv).
  AttentionOutputs backward(const AttentionCase &c, const AttentionInputs &in,
                            DType products = DType::F32) {
    cpu::AttentionShape shape = shapeOf(c);
    AttentionOutputs outputs;
    outputs.want = {std::vector<float>(in.q.size()),
                    std::vector<float>(in.k.size()),
                    std::vector<float>(in.v.size())};
    cpu::attentionGrad(in.q.data(), in.k.data(), in.v.data(),
                       c.prefix.empty() ? nullptr : c.prefix.data(),
                       c.alibi ? in.slopes.data() : nullptr, in.dout.data(),
                       outputs.want[0].data(), outputs.want[1].data(),
                       outputs.want[2].data(), shape);
    DeviceBuffer q = upload(in.q), k = upload(in.k), v = upload(in.v);
    DeviceBuffer dout = upload(in.dout);
    DeviceBuffer prefix = c.prefix.empty() ? DeviceBuffer() : upload(c.prefix);
    DeviceBuffer slopes = c.alibi ? upload(in.slopes) : DeviceBuffer();
    DeviceBuffer dq = poisoned(in.q.size()), dk = poisoned(in.k.size()),
                 dv = poisoned(in.v.size());
    absl::Status status = attentionGrad(
        *context, q.as<float>(), k.as<float>(), v.as<float>(),
        prefix.as<int32_t>(), slopes.as<float>(), dout.as<float>(),
        dq.as<float>(), dk.as<float>(), dv.as<float>(), shape, products);
    EXPECT_TRUE(status.ok()) << status;
    if (status.ok())
      outputs.got = {download(dq, in.q.size()), download(dk, in.k.size()),
                     download(dv, in.v.size())};
    return outputs;
  }
};

/// The names of the gradients, in AttentionOutputs' order.
const char *const kGradientNames[] = {"dq", "dk", "dv"};

/// Attention results against the CPU's. Each element is a sum of up to a
/// few hundred products (keys for out and dq, query rows times the heads
/// of a group for dk and dv) that the two backends round at 2^-24 in
/// different orders (OpenBLAS's blocking, float softmax weights; the tiles
/// and online softmax here), so an element whose terms cancel differs by
/// more than 1e-5 of itself. The absolute floor, 1e-5 of the tensor's
/// largest element, is several times the typical difference (about
/// sqrt(n) 2^-24 of the largest term) and far below any indexing or
/// masking error.
void expectAttentionNear(const std::vector<float> &got,
                         const std::vector<float> &want,
                         const std::string &what) {
  expectNear(got, want, 1e-5, 1e-5 * maxAbs(want), what);
}

TEST_F(CudaAttentionKernels, AttentionMatchesCpu) {
  for (const AttentionCase &c : attentionCases()) {
    const std::string name = nameOf(c);
    SCOPED_TRACE(name);
    AttentionOutputs outputs = forward(c, AttentionInputs(c));
    if (!outputs.got.empty())
      expectAttentionNear(outputs.got[0], outputs.want[0], name + ": out");
  }
}

TEST_F(CudaAttentionKernels, AttentionGradMatchesCpu) {
  for (const AttentionCase &c : attentionCases()) {
    const std::string name = nameOf(c);
    SCOPED_TRACE(name);
    AttentionOutputs outputs = backward(c, AttentionInputs(c));
    for (size_t i = 0; i < outputs.got.size(); ++i)
      expectAttentionNear(outputs.got[i], outputs.want[i],
                          name + ": " + kGradientNames[i]);
  }
}

/// The same inputs give the same bits, on the CUDA cores and on tensor
/// cores: no sum depends on scheduling.
TEST_F(CudaAttentionKernels, AttentionGradIsDeterministic) {
  AttentionCase c{2, 256, 256, 4, 1, 64, Mask::Causal, true, {}};
  AttentionInputs in(c);
  for (DType products : {DType::F32, DType::BF16}) {
    AttentionOutputs first = backward(c, in, products),
                     second = backward(c, in, products);
    ASSERT_EQ(first.got.size(), 3u);
    ASSERT_EQ(second.got.size(), 3u);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(std::memcmp(first.got[i].data(), second.got[i].data(),
                            first.got[i].size() * sizeof(float)),
                0)
          << kGradientNames[i] << " differs between runs ("
          << (products == DType::F32 ? "f32" : "bf16") << " products)";
  }
}

//===----------------------------------------------------------------------===//
// Attention on tensor cores (16-bit products)
//===----------------------------------------------------------------------===//

/// `values` rounded to bf16 or f16 (to nearest even) and widened back.
std::vector<float> roundedTo(DType type, const std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  std::vector<float> result(values.size());
  const bool bf16 = type == DType::BF16;
  cpu::narrow(bf16, values.data(), bits.data(),
              static_cast<int64_t>(values.size()));
  cpu::widen(bf16, bits.data(), result.data(),
             static_cast<int64_t>(result.size()));
  return result;
}

const char *nameOf(DType type) { return type == DType::BF16 ? "bf16" : "f16"; }

/// Tensor-core results against the CPU's on inputs already in the 16-bit
/// type (as a 16-bit plan's are): what differs is the rounding of the
/// probabilities (and, backward, of the score gradients) to that type
/// before their products, 2^-9 relative for bf16 and 2^-11 for f16 on each
/// term of a sum of random signs. The tolerance, 2e-2 (bf16) or 5e-3 (f16)
/// of the tensor's largest element plus as much of the element itself, is
/// about ten times that rounding and far below any masking or indexing
/// error (those are of the size of the elements). Returns the largest
/// difference as a fraction of the largest element, which the tests print.
double expectTensorCoresNear(DType type, const std::vector<float> &got,
                             const std::vector<float> &want,
                             const std::string &what) {
  const double tolerance = type == DType::BF16 ? 2e-2 : 5e-3,
               largest = maxAbs(want);
  expectNear(got, want, tolerance, tolerance * largest, what);
  double worst = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  return largest > 0.0 ? worst / largest : worst;
}

/// Whether the tensor-core kernels take the case (else the f32 ones run).
bool onTensorCores(const AttentionCase &c) {
  return c.headDim % 16 == 0 && c.headDim <= 128;
}

/// A case's inputs rounded to `type`, as a 16-bit plan's are.
AttentionInputs roundedInputs(const AttentionCase &c, DType type) {
  AttentionInputs in(c);
  for (std::vector<float> *values : {&in.q, &in.k, &in.v, &in.dout})
    *values = roundedTo(type, *values);
  return in;
}

TEST_F(CudaAttentionKernels, TensorCoreAttentionMatchesCpu) {
  for (DType type : {DType::BF16, DType::F16}) {
    double worst = 0.0;
    for (const AttentionCase &c : attentionCases()) {
      if (!onTensorCores(c))
        continue;
      const std::string name = std::string(nameOf(type)) + " " + nameOf(c);
      SCOPED_TRACE(name);
      AttentionOutputs outputs = forward(c, roundedInputs(c, type), type);
      if (!outputs.got.empty())
        worst = std::max(worst, expectTensorCoresNear(type, outputs.got[0],
                                                      outputs.want[0],
                                                      name + ": out"));
    }
    std::printf("%s products: largest difference %.3g of the output's "
                "largest element\n",
                nameOf(type), worst);
  }
}

TEST_F(CudaAttentionKernels, TensorCoreAttentionGradMatchesCpu) {
  for (DType type : {DType::BF16, DType::F16}) {
    double worst = 0.0;
    for (const AttentionCase &c : attentionCases()) {
      if (!onTensorCores(c))
        continue;
      const std::string name = std::string(nameOf(type)) + " " + nameOf(c);
      SCOPED_TRACE(name);
      AttentionOutputs outputs = backward(c, roundedInputs(c, type), type);
      for (size_t i = 0; i < outputs.got.size(); ++i)
        worst = std::max(
            worst, expectTensorCoresNear(type, outputs.got[i], outputs.want[i],
                                         name + ": " + kGradientNames[i]));
    }
    std::printf("%s products: largest difference %.3g of the gradient's "
                "largest element\n",
                nameOf(type), worst);
  }
}

/// bf16 products round what they multiply: on f32 inputs the result moves
/// from the exact kernel's (by far less than the tolerance), so the tensor
/// cores did run; a head dimension they do not take (24) gives the f32
/// kernel's bits.
TEST_F(CudaAttentionKernels, TensorCoreProductsRoundTheOperands) {
  for (int64_t headDim : {64, 24}) {
    AttentionCase c{2, 100, 100, 4, 2, headDim, Mask::Causal, true, {}};
    SCOPED_TRACE(nameOf(c));
    AttentionInputs in(c);
    DeviceBuffer q = upload(in.q), k = upload(in.k), v = upload(in.v);
    DeviceBuffer slopes = upload(in.slopes);
    DeviceBuffer exact = poisoned(in.q.size()), fast = poisoned(in.q.size());
    ASSERT_OK(attention(*context, q.as<float>(), k.as<float>(), v.as<float>(),
                        nullptr, slopes.as<float>(), exact.as<float>(),
                        shapeOf(c)));
    ASSERT_OK(attention(*context, q.as<float>(), k.as<float>(), v.as<float>(),
                        nullptr, slopes.as<float>(), fast.as<float>(),
                        shapeOf(c), DType::BF16));
    std::vector<float> want = download(exact, in.q.size()),
                       got = download(fast, in.q.size());
    double largest = 0.0;
    for (size_t i = 0; i < got.size(); ++i)
      largest = std::max(largest, std::fabs(static_cast<double>(got[i]) -
                                            static_cast<double>(want[i])));
    if (onTensorCores(c)) {
      EXPECT_GT(largest, 1e-4 * maxAbs(want)) << "no operand was rounded";
      expectTensorCoresNear(DType::BF16, got, want, "bf16 against f32");
    } else {
      EXPECT_EQ(largest, 0.0) << "the f32 kernel did not run";
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention on 16-bit tensors as they are (a 16-bit plan's)
//===----------------------------------------------------------------------===//

/// `values` (already of `type`) as that type's bits.
std::vector<uint16_t> bitsOf(DType type, const std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  cpu::narrow(type == DType::BF16, values.data(), bits.data(),
              static_cast<int64_t>(values.size()));
  return bits;
}

/// The typed attention on 16-bit q, k, v (and dout) against the route the
/// CUDA executor took before it: the same values widened to f32, the f32
/// entry points with products of the 16-bit type, each result rounded to
/// it (to nearest even, as the executor's cast and cpu::narrow round).
/// The arithmetic is the same, so the bits must be: rounding a widened
/// 16-bit value to its type gives it back, so the tensor cores multiply
/// the same tiles; the sums are the same f32 operations in the same order;
/// and each result rounds the f32 value the f32 entry point stores. Every
/// tensor-core case: causal, prefix and no masks, ALiBi, grouped-query
/// heads, queries and keys of different lengths, sequences ending inside a
/// tile; forward and backward, bf16 and f16. The results start as NaN
/// bits, so an element the typed kernels fail to write differs.
TEST_F(CudaAttentionKernels, SixteenBitAttentionGivesTheWidenedRoutesBits) {
  for (DType type : {DType::BF16, DType::F16}) {
    for (const AttentionCase &c : attentionCases()) {
      if (!onTensorCores(c))
        continue;
      const std::string name = std::string(nameOf(type)) + " " + nameOf(c);
      SCOPED_TRACE(name);
      ASSERT_TRUE(attentionTakes16Bit(shapeOf(c), type));
      AttentionInputs in = roundedInputs(c, type);
      // The widened route: f32 tensors, products of the 16-bit type.
      AttentionOutputs wide = forward(c, in, type),
                       wideGrad = backward(c, in, type);
      ASSERT_EQ(wide.got.size(), 1u);
      ASSERT_EQ(wideGrad.got.size(), 3u);
      // The typed route.
      DeviceBuffer q = upload(bitsOf(type, in.q)),
                   k = upload(bitsOf(type, in.k)),
                   v = upload(bitsOf(type, in.v)),
                   dout = upload(bitsOf(type, in.dout));
      DeviceBuffer prefix =
          c.prefix.empty() ? DeviceBuffer() : upload(c.prefix);
      DeviceBuffer slopes = c.alibi ? upload(in.slopes) : DeviceBuffer();
      DeviceBuffer out = poisoned(in.q.size(), 2),
                   dq = poisoned(in.q.size(), 2), dk = poisoned(in.k.size(), 2),
                   dv = poisoned(in.v.size(), 2);
      ASSERT_OK(attention(*context, {q.data(), type}, {k.data(), type},
                          {v.data(), type}, prefix.as<int32_t>(),
                          slopes.as<float>(), {out.data(), type}, shapeOf(c)));
      ASSERT_OK(attentionGrad(
          *context, {q.data(), type}, {k.data(), type}, {v.data(), type},
          prefix.as<int32_t>(), slopes.as<float>(), {dout.data(), type},
          {dq.data(), type}, {dk.data(), type}, {dv.data(), type}, shapeOf(c)));
      EXPECT_EQ(download<uint16_t>(out, in.q.size()), bitsOf(type, wide.got[0]))
          << "out";
      const DeviceBuffer *grads[] = {&dq, &dk, &dv};
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(download<uint16_t>(*grads[i], wideGrad.got[i].size()),
                  bitsOf(type, wideGrad.got[i]))
            << kGradientNames[i];
    }
  }
}

/// What the typed attention refuses: tensors of mixed types, and 16-bit
/// shapes the tensor cores do not take (a head dimension of 24), which the
/// executor widens instead; f32 tensors run the f32 kernels.
TEST_F(CudaAttentionKernels, SixteenBitAttentionRefusesWhatItCannotRun) {
  DeviceBuffer buffer = poisoned(4096);
  void *p = buffer.data();
  const cpu::AttentionShape good{1, 4, 4, 4, 2, 64, Mask::Causal, 0.125f};
  const Operand bf16{p, DType::BF16}, f16{p, DType::F16}, f32{p, DType::F32};
  const Result bf16Out{p, DType::BF16};
  EXPECT_EQ(
      attention(*context, bf16, f16, bf16, nullptr, nullptr, bf16Out, good)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(attentionGrad(*context, bf16, bf16, bf16, nullptr, nullptr, f32,
                          bf16Out, bf16Out, bf16Out, good)
                .code(),
            absl::StatusCode::kInvalidArgument);
  cpu::AttentionShape narrow = good;
  narrow.headDim = 24;
  EXPECT_FALSE(attentionTakes16Bit(narrow, DType::BF16));
  EXPECT_FALSE(attentionTakes16Bit(good, DType::F32));
  EXPECT_TRUE(attentionTakes16Bit(good, DType::F16));
  EXPECT_EQ(
      attention(*context, bf16, bf16, bf16, nullptr, nullptr, bf16Out, narrow)
          .code(),
      absl::StatusCode::kUnimplemented);
  // f32 tensors: the f32 kernels, on the poisoned buffers (the output is
  // past the inputs' bytes).
  DeviceBuffer inputs = upload(std::vector<float>(1024, 0.5f));
  DeviceBuffer output = poisoned(1024);
  const Operand in{inputs.data(), DType::F32};
  ASSERT_OK(attention(*context, in, in, in, nullptr, nullptr,
                      {output.data(), DType::F32}, good));
  for (float x : download(output, 4 * 4 * 64))
    EXPECT_NEAR(x, 0.5f, 1e-6f);
}

TEST_F(CudaAttentionKernels, AttentionRejectsUnsupportedShapes) {
  DeviceBuffer buffer = poisoned(1024);
  float *p = buffer.as<float>();
  auto expectInvalid = [&](cpu::AttentionShape s, const char *what) {
    EXPECT_EQ(attention(*context, p, p, p, nullptr, nullptr, p, s).code(),
              absl::StatusCode::kInvalidArgument)
        << what;
    EXPECT_EQ(attentionGrad(*context, p, p, p, nullptr, nullptr, p, p, p, p, s)
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << what;
  };
  const cpu::AttentionShape good{1, 2, 2, 4, 2, 64, Mask::Causal, 0.125f};
  cpu::AttentionShape s = good;
  s.headDim = 0;
  expectInvalid(s, "head dimension 0");
  s.headDim = kMaxAttentionHeadDim + 1;
  expectInvalid(s, "head dimension past the largest");
  s = good;
  s.kvHeads = 3;
  expectInvalid(s, "heads not a multiple of the kv heads");
  s.kvHeads = 0;
  expectInvalid(s, "no kv heads");
  s = good;
  s.mask = Mask::Prefix;
  expectInvalid(s, "prefix mask without prefix lengths");
  EXPECT_EQ(attention(*context, p, p, p, nullptr, nullptr, p, good, DType::I32)
                .code(),
            absl::StatusCode::kInvalidArgument)
      << "i32 products";
}

//===----------------------------------------------------------------------===//
// Rope
//===----------------------------------------------------------------------===//

struct RopeCase {
  int64_t batch, seq, heads, headDim, rotaryDim;
  float direction;
};

std::string nameOf(const RopeCase &c) {
  return "rope " + std::to_string(c.batch) + "x" + std::to_string(c.seq) +
         " heads " + std::to_string(c.heads) + " dim " +
         std::to_string(c.headDim) + " rotary " + std::to_string(c.rotaryDim) +
         (c.direction > 0 ? " forward" : " back");
}

const RopeCase kRopeCases[] = {
    {2, 37, 4, 64, 64, 1.0f}, {2, 37, 4, 64, 64, -1.0f},
    {2, 37, 4, 64, 32, 1.0f}, {2, 100, 3, 48, 24, -1.0f},
    {1, 37, 2, 48, 31, 1.0f}, // odd: the last rotary element is copied
    {2, 37, 4, 64, 0, 1.0f},  // nothing rotates
};

/// Rope agrees with the CPU to rounding: both take the angle's sine and
/// cosine in double and round every product of the rotation.
TEST_F(CudaAttentionKernels, RopeMatchesCpu) {
  for (const RopeCase &c : kRopeCases) {
    std::string what = nameOf(c);
    size_t n = c.batch * c.seq * c.heads * c.headDim;
    std::vector<float> x = randomFloats(n, 21);
    std::vector<float> want(n);
    cpu::rope(x.data(), want.data(), c.batch, c.seq, c.heads, c.headDim,
              c.rotaryDim, 10000.0f, c.direction);
    DeviceBuffer dx = upload(x), out = poisoned(n);
    ASSERT_OK(rope(*context, dx.as<float>(), out.as<float>(), c.batch, c.seq,
                   c.heads, c.headDim, c.rotaryDim, 10000.0f, c.direction));
    expectNear(download(out, n), want, 1e-5, 1e-6, what);
    // In place (out = x), as the CPU kernel allows.
    ASSERT_OK(rope(*context, dx.as<float>(), dx.as<float>(), c.batch, c.seq,
                   c.heads, c.headDim, c.rotaryDim, 10000.0f, c.direction));
    expectNear(download(dx, n), want, 1e-5, 1e-6, what + " in place");
  }
}

TEST_F(CudaAttentionKernels, RopeThenRopeBackReturnsInput) {
  const int64_t batch = 2, seq = 100, heads = 4, headDim = 64;
  for (int64_t rotaryDim : {int64_t{64}, int64_t{32}}) {
    size_t n = batch * seq * heads * headDim;
    std::vector<float> x = randomFloats(n, 22);
    DeviceBuffer dx = upload(x), rotated = poisoned(n), back = poisoned(n);
    ASSERT_OK(rope(*context, dx.as<float>(), rotated.as<float>(), batch, seq,
                   heads, headDim, rotaryDim, 10000.0f, 1.0f));
    ASSERT_OK(rope(*context, rotated.as<float>(), back.as<float>(), batch, seq,
                   heads, headDim, rotaryDim, 10000.0f, -1.0f));
    // A rotation and its inverse, each rounding a few products of
    // elements of up to about 4.
    expectNear(download(back, n), x, 1e-5, 2e-6,
               "rope back of rope, rotary " + std::to_string(rotaryDim));
  }
}

TEST_F(CudaAttentionKernels, RopeRejectsRotaryDimBeyondHead) {
  DeviceBuffer buffer = poisoned(64);
  EXPECT_EQ(rope(*context, buffer.as<float>(), buffer.as<float>(), 1, 1, 1, 32,
                 33, 10000.0f, 1.0f)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// The elements whose bits differ.
size_t bitDifferences(const std::vector<float> &got,
                      const std::vector<float> &want) {
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i)
    differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  return differ;
}

TEST_F(CudaAttentionKernels, DropoutMatchesCpuBitForBit) {
  const int64_t count = 100003;
  const uint64_t seed = 1234, step = (uint64_t{1} << 33) + 7, stream = 3;
  std::vector<float> x = randomFloats(count, 31);
  DeviceBuffer dx = upload(x);
  for (double probability : {0.1, 0.5})
    // The last offset crosses a 2^32 boundary of the element index.
    for (uint64_t first : {uint64_t{0}, uint64_t{12345},
                           (uint64_t{1} << 32) - uint64_t{50000}}) {
      std::string what = "dropout p=" + std::to_string(probability) +
                         " first=" + std::to_string(first);
      std::vector<float> want(count);
      cpu::dropout(x.data(), want.data(), count, probability, seed, step,
                   stream, DropoutPiece{first});
      DeviceBuffer out = poisoned(count);
      ASSERT_OK(dropout(*context, dx.as<float>(), out.as<float>(), count,
                        probability, seed, step, stream, DropoutPiece{first}));
      std::vector<float> got = download(out, count);
      EXPECT_EQ(bitDifferences(got, want), 0u) << what;
      size_t dropped = 0;
      for (float value : got)
        dropped += value == 0.0f;
      EXPECT_NEAR(static_cast<double>(dropped) / count, probability, 0.01)
          << what;
    }
}

TEST_F(CudaAttentionKernels, DropoutWithZeroProbabilityCopies) {
  const int64_t count = 4099;
  std::vector<float> x = randomFloats(count, 32);
  DeviceBuffer dx = upload(x), out = poisoned(count);
  ASSERT_OK(
      dropout(*context, dx.as<float>(), out.as<float>(), count, 0.0, 7, 1, 0));
  EXPECT_EQ(bitDifferences(download(out, count), x), 0u);
}

TEST_F(CudaAttentionKernels, DropoutInPlaceMatchesCpu) {
  const int64_t count = 5000;
  std::vector<float> x = randomFloats(count, 33);
  std::vector<float> want(count);
  cpu::dropout(x.data(), want.data(), count, 0.3, 99, 5, 2, DropoutPiece{77});
  DeviceBuffer dx = upload(x);
  ASSERT_OK(dropout(*context, dx.as<float>(), dx.as<float>(), count, 0.3, 99, 5,
                    2, DropoutPiece{77}));
  EXPECT_EQ(bitDifferences(download(dx, count), want), 0u);
}

// A piece of each sample's sequence (sequence parallelism): rows [16, 32)
// of 4 samples of 48 rows of 24, as cpu::dropout draws them (CpuKernelsTest
// checks those against the whole tensor's dropout); a piece of empty runs
// is refused.
TEST_F(CudaAttentionKernels, DropoutOnAPieceOfTheSequenceMatchesCpu) {
  const int64_t batch = 4, seq = 48, piece = 16, hidden = 24;
  const uint64_t rows = piece * hidden;
  DropoutPiece second{1000 + rows, rows, rows * (seq / piece)};
  std::vector<float> x = randomFloats(batch * piece * hidden, 34);
  std::vector<float> want(x.size());
  cpu::dropout(x.data(), want.data(), static_cast<int64_t>(x.size()), 0.3, 99,
               5, 2, second);
  DeviceBuffer dx = upload(x), out = poisoned(x.size());
  ASSERT_OK(dropout(*context, dx.as<float>(), out.as<float>(),
                    static_cast<int64_t>(x.size()), 0.3, 99, 5, 2, second));
  EXPECT_EQ(bitDifferences(download(out, x.size()), want), 0u);
  EXPECT_FALSE(dropout(*context, dx.as<float>(), out.as<float>(),
                       static_cast<int64_t>(x.size()), 0.3, 99, 5, 2,
                       DropoutPiece{0, 0, 0})
                   .ok());
}

} // namespace
} // namespace triad::rt::cuda
