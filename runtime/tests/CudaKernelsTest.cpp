//===- CudaKernelsTest.cpp - the CUDA kernels against the CPU kernels -----===//
//
// Every CUDA kernel runs on random inputs next to the CPU kernel it stands
// in for (runtime/kernels/cpu), and the results must agree: f32 within
// 1e-5 relative (plus a small absolute floor for values near zero, where
// the CPU's vectorized exp and erf differ from CUDA's by a few 1e-7), bf16
// and f16 products within 1e-2. The typed kernels (element-wise, norms,
// sums, embeddings, the loss, rope, dropout, AdamW's gradients) must give
// the bits of the f32 kernels on widened operands, rounded back to each
// result's type, for bf16, f16 and f32 operands and mixes of them, in
// place where a kernel allows it. Outputs are filled with
// NaN before each kernel runs, so an element a kernel fails to write fails
// the comparison.
//
// Without a GPU (or without a driver) every test is skipped, not failed:
// the message "no CUDA device on this machine" is what ctest's
// SKIP_REGULAR_EXPRESSION looks for, and lit's GoogleTest format reports
// the tests as skipped. Nothing here has run on a GPU until a run on one
// says so.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudaKernels.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/tests/CudaTestSupport.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace triad::rt::cuda {
namespace {

using test::expectNear;
using test::randomFloats;

std::vector<int32_t> randomIds(size_t n, int32_t bound, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> uniform(0, bound - 1);
  std::vector<int32_t> ids(n);
  for (int32_t &id : ids)
    id = uniform(generator);
  return ids;
}

void expectNearF32(const std::vector<float> &got,
                   const std::vector<float> &want, const std::string &what,
                   double abs = 1e-6) {
  expectNear(got, want, 1e-5, abs, what);
}

/// Every test skips without a GPU (see CudaTestSupport.h).
class CudaKernels : public test::CudaTest {};

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

struct ProductCase {
  int64_t batch, m, n, k;
  bool transposeA, transposeB, rhsBatched, accumulate;
};

/// The f32 products with cuBLASLt's heuristic's first algorithm for each
/// shape ("Heuristic") and with the fastest of its first 8, timed on the
/// shape's first call ("Timed"; a product that adds to c timed into a
/// temporary).
class CudaProducts : public test::CudaTest,
                     public ::testing::WithParamInterface<int> {
protected:
  ContextOptions contextOptions() const override {
    ContextOptions options;
    options.matmulCandidates = GetParam();
    return options;
  }
};
INSTANTIATE_TEST_SUITE_P(Algorithms, CudaProducts, ::testing::Values(1, 8),
                         [](const ::testing::TestParamInfo<int> &info) {
                           return info.param == 1 ? "Heuristic" : "Timed";
                         });

/// One shape with host scalars (c += product) and device ones (c += weight
/// * product), alternating in one context, the weight changing on the
/// device between calls: each call its own scalars (and, timed, its own
/// plan: the two have different descriptors).
TEST_P(CudaProducts, HostAndDeviceScalarsShareAShape) {
  const int64_t m = 32, n = 16, k = 24;
  std::vector<float> a = randomFloats(m * k, 51), b = randomFloats(k * n, 52);
  std::vector<float> product(m * n), want(m * n, 0.0f);
  cpu::matmul(a.data(), b.data(), product.data(), 1, m, n, k, false, false,
              false);
  DeviceBuffer da = upload(a), db = upload(b),
               dc = upload(std::vector<float>(m * n, 0.0f));
  DeviceBuffer dw = upload(std::vector<float>{2.0f});
  for (float w : {2.0f, 1.0f, -3.0f, 1.0f}) {
    MatmulOptions options;
    options.accumulate = true;
    if (w != 1.0f) {
      ASSERT_EQ(cudaMemcpyAsync(dw.data(), &w, sizeof(float),
                                cudaMemcpyHostToDevice, context->stream()),
                cudaSuccess);
      options.weight = dw.as<float>();
    }
    ASSERT_OK(matmul(*context, da.data(), db.data(), dc.data(),
                     {1, m, n, k, false, false, false}, options));
    ASSERT_OK(context->synchronize());
    for (int64_t i = 0; i < m * n; ++i)
      want[i] += w * product[i];
  }
  expectNear(download(dc, m * n), want, 1e-5,
             1e-5 * std::sqrt(static_cast<double>(k)),
             "host and device scalars on one shape");
}

TEST_P(CudaProducts, MatmulF32MatchesCpu) {
  const ProductCase cases[] = {
      {1, 37, 29, 53, false, false, false, false},
      {1, 37, 29, 53, true, false, false, false},
      {1, 37, 29, 53, false, true, false, false},
      {1, 37, 29, 53, true, true, false, false},
      {3, 16, 24, 40, false, false, true, false},
      {3, 16, 24, 40, true, true, true, false},
      {3, 16, 24, 40, false, true, false, false}, // shared rhs, stacked
      {3, 16, 24, 40, true, false, false, false}, // shared rhs, one by one
      {2, 33, 17, 65, false, false, true, true},  // c += a b
  };
  for (const ProductCase &p : cases) {
    std::string what = "matmul batch " + std::to_string(p.batch) + " " +
                       std::to_string(p.m) + "x" + std::to_string(p.k) + "x" +
                       std::to_string(p.n) + (p.transposeA ? " aT" : "") +
                       (p.transposeB ? " bT" : "") +
                       (p.rhsBatched ? " batched-rhs" : "") +
                       (p.accumulate ? " accumulate" : "");
    std::vector<float> a = randomFloats(p.batch * p.m * p.k, 1);
    std::vector<float> b =
        randomFloats((p.rhsBatched ? p.batch : 1) * p.k * p.n, 2);
    std::vector<float> c = randomFloats(p.batch * p.m * p.n, 3);
    std::vector<float> want = c;
    cpu::matmul(a.data(), b.data(), want.data(), p.batch, p.m, p.n, p.k,
                p.transposeA, p.transposeB, p.rhsBatched, p.accumulate);
    DeviceBuffer da = upload(a), db = upload(b);
    DeviceBuffer dc = p.accumulate ? upload(c) : poisoned(c.size());
    MatmulOptions options;
    options.accumulate = p.accumulate;
    ASSERT_OK(matmul(
        *context, da.data(), db.data(), dc.data(),
        {p.batch, p.m, p.n, p.k, p.transposeA, p.transposeB, p.rhsBatched},
        options));
    expectNear(download(dc, c.size()), want, 1e-5,
               1e-5 * std::sqrt(static_cast<double>(p.k)), what);
  }
}

TEST_F(CudaKernels, MatmulPlansAreKeptPerShape) {
  // The second product of a shape reuses its descriptors and algorithm
  // (and gives the same result); another transposition, or a bias
  // epilogue with another bias, is a plan of its own or the same plan with
  // the new bias.
  const int64_t m = 24, n = 40, k = 32;
  std::vector<float> a = randomFloats(m * k, 11), b = randomFloats(k * n, 12);
  DeviceBuffer da = upload(a), db = upload(b), dc = poisoned(m * n);
  size_t plans = context->matmulPlans().size();
  size_t hits = context->matmulPlans().hitCount();
  for (bool transposeB : {false, true, false}) {
    std::vector<float> want(m * n, 0.0f);
    cpu::matmul(a.data(), b.data(), want.data(), 1, m, n, k, false, transposeB,
                false, false);
    ASSERT_OK(matmul(*context, da.data(), db.data(), dc.data(),
                     {1, m, n, k, false, transposeB, false}, MatmulOptions{}));
    expectNear(download(dc, m * n), want, 1e-5, 1e-4,
               transposeB ? "b transposed" : "b as it is");
  }
  EXPECT_EQ(context->matmulPlans().size(), plans + 2);
  EXPECT_EQ(context->matmulPlans().hitCount(), hits + 1);
  // One plan with a bias epilogue, called with two biases.
  for (float value : {1.0f, -2.0f}) {
    std::vector<float> bias(n, value), want(m * n, 0.0f);
    cpu::matmul(a.data(), b.data(), want.data(), 1, m, n, k, false, false,
                false, false);
    for (int64_t i = 0; i < m * n; ++i)
      want[i] += value;
    DeviceBuffer dbias = upload(bias);
    MatmulOptions options;
    options.epilogue = Epilogue::Bias;
    options.bias = dbias.as<float>();
    ASSERT_OK(matmul(*context, da.data(), db.data(), dc.data(),
                     {1, m, n, k, false, false, false}, options));
    expectNear(download(dc, m * n), want, 1e-5, 1e-4, "bias epilogue");
  }
  EXPECT_EQ(context->matmulPlans().size(), plans + 3);
}

template <typename Half> Half toHalf(float x);
template <> __nv_bfloat16 toHalf(float x) { return __float2bfloat16_rn(x); }
template <> __half toHalf(float x) { return __float2half_rn(x); }
float fromHalf(__nv_bfloat16 x) { return __bfloat162float(x); }
float fromHalf(__half x) { return __half2float(x); }

/// A float's bf16 bits (rounded to nearest even), and back.
uint16_t toBf16(float value) {
  __nv_bfloat16 h = toHalf<__nv_bfloat16>(value);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
float fromBf16(uint16_t bits) {
  __nv_bfloat16 h;
  std::memcpy(&h, &bits, 2);
  return fromHalf(h);
}

/// Products of 16-bit inputs against the CPU's f32 product of the same
/// (rounded) values, with f32 and with 16-bit outputs.
TEST_F(CudaKernels, MatmulBf16AndF16AccumulateInF32) {
  for (DType type : {DType::BF16, DType::F16})
    for (DType output : {DType::F32, type}) {
      const int64_t m = 48, n = 40, k = 96;
      std::vector<float> a = randomFloats(m * k, 4), b = randomFloats(k * n, 5);
      std::vector<uint16_t> a16(a.size()), b16(b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        if (type == DType::BF16) {
          __nv_bfloat16 h = toHalf<__nv_bfloat16>(a[i]);
          a[i] = fromHalf(h);
          std::memcpy(&a16[i], &h, 2);
        } else {
          __half h = toHalf<__half>(a[i]);
          a[i] = fromHalf(h);
          std::memcpy(&a16[i], &h, 2);
        }
      }
      for (size_t i = 0; i < b.size(); ++i) {
        if (type == DType::BF16) {
          __nv_bfloat16 h = toHalf<__nv_bfloat16>(b[i]);
          b[i] = fromHalf(h);
          std::memcpy(&b16[i], &h, 2);
        } else {
          __half h = toHalf<__half>(b[i]);
          b[i] = fromHalf(h);
          std::memcpy(&b16[i], &h, 2);
        }
      }
      std::vector<float> want(m * n);
      cpu::matmul(a.data(), b.data(), want.data(), 1, m, n, k, false, false,
                  false);
      DeviceBuffer da = upload(a16), db = upload(b16);
      bool f32Out = output == DType::F32;
      DeviceBuffer dc = poisoned(m * n, f32Out ? 4 : 2);
      MatmulOptions options;
      options.inputType = type;
      options.outputType = output;
      ASSERT_OK(matmul(*context, da.data(), db.data(), dc.data(),
                       {1, m, n, k, false, false, false}, options));
      std::vector<float> got(m * n);
      if (f32Out) {
        got = download(dc, m * n);
      } else {
        std::vector<uint16_t> raw = download<uint16_t>(dc, m * n);
        for (size_t i = 0; i < raw.size(); ++i) {
          if (type == DType::BF16) {
            __nv_bfloat16 h;
            std::memcpy(&h, &raw[i], 2);
            got[i] = fromHalf(h);
          } else {
            __half h;
            std::memcpy(&h, &raw[i], 2);
            got[i] = fromHalf(h);
          }
        }
      }
      expectNear(got, want, 1e-2, 1e-2,
                 std::string(type == DType::BF16 ? "bf16" : "f16") +
                     " product, " + (f32Out ? "f32" : "16-bit") + " output");
    }
}

/// --matmul-precision: f32 operands rounded to TF32 or bf16 on the way into
/// tensor cores. The product stays near the exact one (relative to the
/// size of its terms: rounding to a 10- or 7-bit mantissa), and differs
/// from it, which shows the precision took effect.
TEST_F(CudaKernels, MatmulPrecisionRoundsTheOperands) {
  const int64_t m = 256, n = 256, k = 512;
  std::vector<float> a = randomFloats(m * k, 6), b = randomFloats(k * n, 7);
  std::vector<float> want(m * n);
  cpu::matmul(a.data(), b.data(), want.data(), 1, m, n, k, false, false, false);
  struct Case {
    MatmulPrecision precision;
    double tolerance; // relative to sqrt(k), the size of the sum's noise
  };
  for (Case c :
       {Case{MatmulPrecision::Tf32, 1e-2}, Case{MatmulPrecision::Bf16, 6e-2}}) {
    ContextOptions options;
    options.matmulPrecision = c.precision;
    absl::StatusOr<std::unique_ptr<CudaContext>> fast =
        CudaContext::create(options);
    ASSERT_TRUE(fast.ok()) << fast.status();
    DeviceBuffer da = upload(a), db = upload(b), dc = poisoned(m * n);
    // (Uploaded and poisoned on the fixture's stream, not `fast`'s.)
    ASSERT_OK(context->synchronize());
    ASSERT_OK(matmul(**fast, da.data(), db.data(), dc.data(),
                     {1, m, n, k, false, false, false}, {}));
    ASSERT_OK((*fast)->synchronize());
    std::vector<float> got = download(dc, m * n);
    double largest = 0;
    for (size_t i = 0; i < got.size(); ++i)
      largest = std::max(largest, std::fabs(double{got[i]} - want[i]));
    std::string what = matmulPrecisionName(c.precision);
    EXPECT_LT(largest, c.tolerance * std::sqrt(static_cast<double>(k))) << what;
    EXPECT_GT(largest, 1e-5) << what << ": no rounding, so no tensor cores";
  }
}

/// How the epilogue tests' context runs products (ContextOptions).
struct EpilogueRoute {
  const char *name;
  bool fuse;
  GeluGradRoute geluGrad;
  int candidates;
};

void PrintTo(const EpilogueRoute &route, std::ostream *os) {
  *os << route.name;
}

/// The epilogue tests run with cuBLASLt's epilogues where it takes them
/// ("Fused"), with them off ("Unfused": the product and Triad's kernels
/// after it, the path of an epilogue cuBLASLt refuses), with the GELU's
/// gradient in the epilogue and its bias gradient by reduceSum ("Dgelu"),
/// with the GELU's gradient by the kernels ("GeluGradKernels"), and with
/// the fastest of cuBLASLt's first 8 algorithms for each shape ("Timed").
class CudaEpilogues : public test::CudaTest,
                      public ::testing::WithParamInterface<EpilogueRoute> {
protected:
  ContextOptions contextOptions() const override {
    ContextOptions options;
    options.fuseEpilogues = GetParam().fuse;
    options.geluGrad = GetParam().geluGrad;
    options.matmulCandidates = GetParam().candidates;
    return options;
  }
  /// Expects `before` -> now to count one product with an epilogue, fused
  /// when `fused` (and the context fuses it: a GELU gradient's, `gradient`,
  /// not under the kernels' route), else run as the product and kernels.
  void expectOneEpilogue(const EpilogueUse &before, bool fused,
                         const std::string &what, bool gradient = false) {
    const EpilogueUse &now = epilogueUse();
    fused = fused && GetParam().fuse &&
            !(gradient && GetParam().geluGrad == GeluGradRoute::Kernels);
    EXPECT_EQ(now.fused - before.fused, fused ? 1 : 0) << what;
    EXPECT_EQ(now.unfused - before.unfused, fused ? 0 : 1) << what;
  }
};
INSTANTIATE_TEST_SUITE_P(
    Epilogues, CudaEpilogues,
    ::testing::Values(EpilogueRoute{"Fused", true, GeluGradRoute::Fused, 1},
                      EpilogueRoute{"Unfused", false, GeluGradRoute::Fused, 1},
                      EpilogueRoute{"Dgelu", true, GeluGradRoute::Dgelu, 1},
                      EpilogueRoute{"GeluGradKernels", true,
                                    GeluGradRoute::Kernels, 1},
                      EpilogueRoute{"Timed", true, GeluGradRoute::Fused, 8}),
    [](const ::testing::TestParamInfo<EpilogueRoute> &info) {
      return std::string(info.param.name);
    });

/// On the H100, cuBLASLt takes the f32 bias epilogues (n a multiple of 8):
/// each product is counted as fused (and as run by the kernels when the
/// context turns fusion off).
TEST_P(CudaEpilogues, MatmulBiasEpilogues) {
  const int64_t m = 64, n = 48, k = 32;
  std::vector<float> a = randomFloats(m * k, 6), b = randomFloats(k * n, 7),
                     bias = randomFloats(n, 8);
  std::vector<float> product(m * n), withBias(m * n);
  cpu::matmul(a.data(), b.data(), product.data(), 1, m, n, k, false, false,
              false);
  cpu::addBroadcast(product.data(), bias.data(), withBias.data(), m * n, n);
  DeviceBuffer da = upload(a), db = upload(b), dbias = upload(bias);
  struct {
    Epilogue epilogue;
    const char *name;
    bool relu, gelu;
  } epilogues[] = {{Epilogue::Bias, "bias", false, false},
                   {Epilogue::ReluBias, "relu(bias)", true, false},
                   {Epilogue::GeluTanhBias, "gelu_tanh(bias)", false, true}};
  for (const auto &e : epilogues) {
    std::vector<float> want = withBias;
    if (e.relu)
      cpu::activation(cpu::Activation::Relu, withBias.data(), want.data(),
                      m * n);
    if (e.gelu)
      cpu::activation(cpu::Activation::GeluTanh, withBias.data(), want.data(),
                      m * n);
    DeviceBuffer dc = poisoned(m * n);
    MatmulOptions options;
    options.epilogue = e.epilogue;
    options.bias = dbias.as<float>();
    EpilogueUse before = epilogueUse();
    ASSERT_OK(matmul(*context, da.data(), db.data(), dc.data(),
                     {1, m, n, k, false, false, false}, options));
    expectOneEpilogue(before, /*fused=*/true, e.name);
    // cuBLASLt's GELU is its own tanh approximation: 1e-4.
    expectNear(download(dc, m * n), want, e.gelu ? 1e-4 : 1e-5, 1e-4, e.name);
  }
}

/// A fused product's epilogues with the pre-activation kept (what the plan's
/// fused matmul asks for), against the CPU's product and epilogue
/// (cpu::matmulEpilogue): the GELU's input from cuBLASLt's auxiliary output
/// (n a multiple of 8), from the bias epilogue and the activation kernel
/// (n not one, and the ReLU), for one product, stacked rows and one product
/// per batch element (a transposed lhs); both results must be written.
TEST_P(CudaEpilogues, MatmulEpiloguesKeepThePreActivation) {
  struct Case {
    Epilogue epilogue;
    cpu::Activation activation;
    ProductCase shape;
  };
  const Case cases[] = {
      {Epilogue::GeluTanhBias,
       cpu::Activation::GeluTanh,
       {1, 64, 48, 32, false, false, false, false}},
      {Epilogue::GeluTanhBias,
       cpu::Activation::GeluTanh,
       {1, 37, 29, 53, false, true, false, false}},
      {Epilogue::ReluBias,
       cpu::Activation::Relu,
       {1, 64, 48, 32, false, false, false, false}},
      {Epilogue::GeluTanhBias,
       cpu::Activation::GeluTanh,
       {3, 16, 24, 40, false, false, false, false}},
      {Epilogue::GeluTanhBias,
       cpu::Activation::GeluTanh,
       {3, 16, 24, 40, true, false, false, false}},
      {Epilogue::ReluBias,
       cpu::Activation::Relu,
       {3, 16, 24, 40, false, false, true, false}},
  };
  for (const Case &c : cases) {
    const ProductCase &p = c.shape;
    std::string what =
        std::string(c.epilogue == Epilogue::ReluBias ? "relu" : "gelu_tanh") +
        " batch " + std::to_string(p.batch) + " n " + std::to_string(p.n) +
        (p.transposeA ? " aT" : "") + (p.rhsBatched ? " batched-rhs" : "");
    int64_t count = p.batch * p.m * p.n;
    std::vector<float> a = randomFloats(p.batch * p.m * p.k, 21);
    std::vector<float> b =
        randomFloats((p.rhsBatched ? p.batch : 1) * p.k * p.n, 22);
    std::vector<float> bias = randomFloats(p.n, 23);
    std::vector<float> want(count), wantPre(count);
    cpu::matmul(a.data(), b.data(), want.data(), p.batch, p.m, p.n, p.k,
                p.transposeA, p.transposeB, p.rhsBatched);
    cpu::matmulEpilogue(want.data(), bias.data(), c.activation, wantPre.data(),
                        count, p.n);
    DeviceBuffer da = upload(a), db = upload(b), dbias = upload(bias);
    DeviceBuffer dc = poisoned(count), dpre = poisoned(count);
    MatmulOptions options;
    options.epilogue = c.epilogue;
    options.bias = dbias.as<float>();
    options.preActivation = dpre.data();
    EpilogueUse before = epilogueUse();
    ASSERT_OK(matmul(
        *context, da.data(), db.data(), dc.data(),
        {p.batch, p.m, p.n, p.k, p.transposeA, p.transposeB, p.rhsBatched},
        options));
    // cuBLASLt keeps the GELU's input (n a multiple of 8), not the ReLU's.
    expectOneEpilogue(
        before, c.epilogue == Epilogue::GeluTanhBias && p.n % 8 == 0, what);
    double abs = 1e-5 * std::sqrt(static_cast<double>(p.k));
    expectNear(download(dpre, count), wantPre, 1e-5, abs, what + " (input)");
    // cuBLASLt's GELU is its own tanh approximation: 1e-4.
    expectNear(download(dc, count), want, 1e-4, std::max(abs, 1e-4), what);
  }
}

/// The tanh GELU's gradient epilogue (a fused backward product), against
/// the CPU's product, activation gradient and row sum: cuBLASLt's
/// DGELU_BGRAD where the product is one call (one matrix, stacked rows), its
/// DGELU and reduceSum for one product per batch element (a transposed lhs,
/// a batched rhs), the product and the kernels where n is not a multiple of
/// 8; with and without the bias gradient; for f32 and for bf16 products
/// with a bias gradient of bf16 or f32. Every result must be written.
TEST_P(CudaEpilogues, MatmulGeluGradientEpilogue) {
  struct Case {
    ProductCase shape;
    bool biasGrad;
    DType type, biasGradType;
  };
  const Case cases[] = {
      {{1, 64, 48, 32, false, false, false, false},
       true,
       DType::F32,
       DType::F32},
      {{3, 16, 24, 40, false, true, false, false},
       true,
       DType::F32,
       DType::F32},
      {{1, 37, 29, 53, false, true, false, false},
       true,
       DType::F32,
       DType::F32},
      {{3, 16, 24, 40, true, false, false, false},
       true,
       DType::F32,
       DType::F32},
      {{3, 16, 24, 40, false, false, true, false},
       true,
       DType::F32,
       DType::F32},
      {{1, 64, 48, 32, false, false, false, false},
       false,
       DType::F32,
       DType::F32},
      {{2, 32, 64, 48, false, true, false, false},
       true,
       DType::BF16,
       DType::BF16},
      {{2, 32, 64, 48, false, true, false, false},
       true,
       DType::BF16,
       DType::F32},
  };
  auto toBits = [](std::vector<float> &values) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      __nv_bfloat16 h = toHalf<__nv_bfloat16>(values[i]);
      values[i] = fromHalf(h);
      std::memcpy(&bits[i], &h, 2);
    }
    return bits;
  };
  auto fromBits = [](const std::vector<uint16_t> &bits) {
    std::vector<float> values(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      __nv_bfloat16 h;
      std::memcpy(&h, &bits[i], 2);
      values[i] = fromHalf(h);
    }
    return values;
  };
  for (const Case &c : cases) {
    const ProductCase &p = c.shape;
    bool sixteen = c.type == DType::BF16;
    std::string what =
        std::string(sixteen ? "bf16" : "f32") + " batch " +
        std::to_string(p.batch) + " n " + std::to_string(p.n) +
        (p.transposeA ? " aT" : "") + (p.rhsBatched ? " batched-rhs" : "") +
        (c.biasGrad ? "" : " without bias gradient") +
        (sixteen && c.biasGradType == DType::F32 ? " f32 bias gradient" : "");
    int64_t count = p.batch * p.m * p.n, rows = p.batch * p.m;
    std::vector<float> a = randomFloats(p.batch * p.m * p.k, 41);
    std::vector<float> b =
        randomFloats((p.rhsBatched ? p.batch : 1) * p.k * p.n, 42);
    std::vector<float> pre = randomFloats(count, 43);
    for (float &x : pre)
      x *= 3.0f;
    DeviceBuffer da, db, dpre;
    if (sixteen) {
      da = upload(toBits(a));
      db = upload(toBits(b));
      dpre = upload(toBits(pre));
    } else {
      da = upload(a);
      db = upload(b);
      dpre = upload(pre);
    }
    std::vector<float> want(count), wantBias(p.n);
    cpu::matmul(a.data(), b.data(), want.data(), p.batch, p.m, p.n, p.k,
                p.transposeA, p.transposeB, p.rhsBatched);
    cpu::activationGrad(cpu::Activation::GeluTanh, pre.data(), want.data(),
                        want.data(), count);
    cpu::sumRows(want.data(), rows, p.n, 1.0, wantBias.data());
    int64_t biasBytes = c.biasGradType == DType::F32 ? 4 : 2;
    DeviceBuffer dc = poisoned(count, sixteen ? 2 : 4),
                 dbias = poisoned(p.n, biasBytes);
    MatmulOptions options;
    options.inputType = options.outputType = c.type;
    options.epilogue = Epilogue::GeluTanhGrad;
    options.activationInput = dpre.data();
    if (c.biasGrad) {
      options.biasGrad = dbias.data();
      options.biasGradType = c.biasGradType;
    }
    EpilogueUse before = epilogueUse();
    ASSERT_OK(matmul(
        *context, da.data(), db.data(), dc.data(),
        {p.batch, p.m, p.n, p.k, p.transposeA, p.transposeB, p.rhsBatched},
        options));
    expectOneEpilogue(before, p.n % 8 == 0, what, /*gradient=*/true);
    std::vector<float> got =
        sixteen ? fromBits(download<uint16_t>(dc, count)) : download(dc, count);
    // cuBLASLt's GELU derivative is its own tanh approximation: 1e-4; a
    // bf16 result is rounded once (2^-8 relative).
    double relative = sixteen ? 1e-2 : 1e-4;
    double abs = relative * std::sqrt(static_cast<double>(p.k));
    expectNear(got, want, relative, abs, what);
    if (!c.biasGrad)
      continue;
    std::vector<float> gotBias = biasBytes == 4
                                     ? download(dbias, p.n)
                                     : fromBits(download<uint16_t>(dbias, p.n));
    // A sum of `rows` such values.
    expectNear(gotBias, wantBias, relative, abs * std::sqrt(rows),
               what + " (bias gradient)");
  }
}

/// c = (op(a) op(b) [+ bias]) + addend (the plan's adding epilogues:
/// cuBLASLt's C with beta 1), against the CPU's product, bias and add: f32
/// without and with the bias, the addend c's very bytes (in place), one
/// product per batch element (a transposed lhs: cuBLASLt's C a piece each),
/// and bf16 with a bf16 bias. Where the context does not fuse the bias (or
/// cuBLASLt refuses it), the product, bias and addend run as kernels.
TEST_P(CudaEpilogues, MatmulAddsItsAddend) {
  struct Case {
    ProductCase shape;
    bool bias, inPlace;
    DType type;
  };
  const Case cases[] = {
      {{1, 64, 48, 32, false, false, false, false}, false, false, DType::F32},
      {{1, 64, 48, 32, false, false, false, false}, true, false, DType::F32},
      // (A shape of its own: its algorithm is picked, and timed, anew.)
      {{1, 72, 48, 32, false, false, false, false}, true, true, DType::F32},
      {{3, 16, 24, 40, true, false, false, false}, false, false, DType::F32},
      // One cuBLASLt call per batch element would add in place piece by
      // piece: the product and the kernels instead.
      {{3, 16, 24, 40, true, false, false, false}, true, true, DType::F32},
      {{2, 32, 64, 48, false, true, false, false}, true, false, DType::BF16},
  };
  for (const Case &c : cases) {
    const ProductCase &p = c.shape;
    bool sixteen = c.type == DType::BF16;
    std::string what =
        std::string(sixteen ? "bf16" : "f32") + (c.bias ? " with bias" : "") +
        (c.inPlace ? " in place" : "") + ", batch " + std::to_string(p.batch) +
        (p.transposeA ? " aT" : "") + (p.transposeB ? " bT" : "");
    int64_t count = p.batch * p.m * p.n;
    std::vector<float> a = randomFloats(p.batch * p.m * p.k, 41),
                       b = randomFloats(p.k * p.n, 42),
                       bias = randomFloats(p.n, 43),
                       addend = randomFloats(count, 44);
    auto stored = [&](std::vector<float> &values) {
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < values.size(); ++i)
        if (sixteen)
          values[i] = fromBf16(bits[i] = toBf16(values[i]));
      return sixteen ? upload(bits) : upload(values);
    };
    DeviceBuffer da = stored(a), db = stored(b), dbias = stored(bias),
                 daddend = stored(addend);
    std::vector<float> want(count);
    cpu::matmul(a.data(), b.data(), want.data(), p.batch, p.m, p.n, p.k,
                p.transposeA, p.transposeB, p.rhsBatched);
    for (int64_t i = 0; i < count; ++i)
      want[i] = (want[i] + (c.bias ? bias[i % p.n] : 0.0f)) + addend[i];
    DeviceBuffer dc =
        c.inPlace ? std::move(daddend) : poisoned(count, sixteen ? 2 : 4);
    MatmulOptions options;
    options.inputType = options.outputType = c.type;
    options.addend = c.inPlace ? dc.data() : daddend.data();
    if (c.bias) {
      options.epilogue = Epilogue::Bias;
      options.bias = dbias.data();
      options.biasType = c.type;
    }
    EpilogueUse before = epilogueUse();
    ASSERT_OK(matmul(
        *context, da.data(), db.data(), dc.data(),
        {p.batch, p.m, p.n, p.k, p.transposeA, p.transposeB, p.rhsBatched},
        options));
    if (c.bias)
      expectOneEpilogue(
          before,
          /*fused=*/!(p.batch > 1 && p.transposeA && !p.rhsBatched), what);
    std::vector<float> got(count);
    if (sixteen) {
      std::vector<uint16_t> raw = download<uint16_t>(dc, count);
      for (int64_t i = 0; i < count; ++i)
        got[i] = fromBf16(raw[i]);
      expectNear(got, want, 1e-2, 1e-2, what);
    } else {
      got = download(dc, count);
      expectNear(got, want, 1e-5, 1e-5 * std::sqrt(static_cast<double>(p.k)),
                 what);
    }
  }
}

/// c += weight[0] * op(a) op(b) with the weight a device scalar (cuBLASLt's
/// alpha and beta then device pointers: the plan's accumulating epilogue),
/// against the CPU's product, weighted and added: f32 operands into an f32
/// c; bf16 ones into an f32 c (a weight gradient into its accumulator) and
/// into a bf16 c; one product with a transposed lhs (a weight gradient's),
/// stacked rows over a shared transposed rhs, and one product per batch
/// element (a batched rhs). Under every route: with fusion off, the f32
/// product and the accumulate kernel.
TEST_P(CudaEpilogues, MatmulAddsItsWeightedProductToC) {
  struct Case {
    DType input, output;
    ProductCase shape;
  };
  const Case cases[] = {
      {DType::F32, DType::F32, {1, 37, 29, 53, true, false, false, true}},
      {DType::BF16, DType::F32, {1, 64, 48, 96, true, false, false, true}},
      {DType::BF16, DType::F32, {3, 16, 24, 40, false, true, false, true}},
      {DType::BF16, DType::F32, {2, 16, 24, 40, false, false, true, true}},
      {DType::BF16, DType::BF16, {1, 64, 48, 96, true, false, false, true}},
      // One cuBLASLt call per batch element would add in place piece by
      // piece: the product and the kernel instead.
      {DType::BF16, DType::F32, {3, 16, 24, 40, true, false, false, true}},
  };
  const float weight = -0.625f;
  DeviceBuffer dweight = upload(std::vector<float>{weight});
  for (const Case &c : cases) {
    const ProductCase &p = c.shape;
    std::string what =
        std::string(c.input == DType::F32 ? "f32" : "bf16") + " into " +
        (c.output == DType::F32 ? "f32" : "bf16") + ", batch " +
        std::to_string(p.batch) + (p.transposeA ? " aT" : "") +
        (p.transposeB ? " bT" : "") + (p.rhsBatched ? " batched-rhs" : "");
    bool sixteen = c.input != DType::F32, wideC = c.output == DType::F32;
    std::vector<float> a = randomFloats(p.batch * p.m * p.k, 31),
                       b = randomFloats(
                           (p.rhsBatched ? p.batch : 1) * p.k * p.n, 32),
                       acc = randomFloats(p.batch * p.m * p.n, 33);
    std::vector<uint16_t> a16(a.size()), b16(b.size()), acc16(acc.size());
    // The operands (and a bf16 c) as the device holds them.
    for (size_t i = 0; sixteen && i < a.size(); ++i)
      a[i] = fromBf16(a16[i] = toBf16(a[i]));
    for (size_t i = 0; sixteen && i < b.size(); ++i)
      b[i] = fromBf16(b16[i] = toBf16(b[i]));
    for (size_t i = 0; !wideC && i < acc.size(); ++i)
      acc[i] = fromBf16(acc16[i] = toBf16(acc[i]));
    std::vector<float> product(acc.size()), want(acc.size());
    cpu::matmul(a.data(), b.data(), product.data(), p.batch, p.m, p.n, p.k,
                p.transposeA, p.transposeB, p.rhsBatched);
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = acc[i] + weight * product[i];
    DeviceBuffer da = sixteen ? upload(a16) : upload(a),
                 db = sixteen ? upload(b16) : upload(b),
                 dc = wideC ? upload(acc) : upload(acc16);
    MatmulOptions options;
    options.inputType = c.input;
    options.outputType = c.output;
    options.accumulate = true;
    options.weight = dweight.as<float>();
    ASSERT_OK(matmul(
        *context, da.data(), db.data(), dc.data(),
        {p.batch, p.m, p.n, p.k, p.transposeA, p.transposeB, p.rhsBatched},
        options));
    std::vector<float> got(acc.size());
    if (wideC) {
      got = download(dc, acc.size());
    } else {
      std::vector<uint16_t> raw = download<uint16_t>(dc, acc.size());
      for (size_t i = 0; i < raw.size(); ++i)
        got[i] = fromBf16(raw[i]);
    }
    // f32 sums of exact products (bf16 operands are exact in f32): within
    // f32 rounding of the terms; a bf16 c within its own rounding.
    double abs = 1e-5 * std::sqrt(static_cast<double>(p.k));
    if (wideC)
      expectNear(got, want, 1e-5, abs, what);
    else
      expectNear(got, want, 1e-2, 1e-2, what);
  }
  // A weight scales the product only where it is added to c.
  MatmulOptions unweighted;
  unweighted.weight = dweight.as<float>();
  DeviceBuffer da = upload(randomFloats(16, 1)),
               db = upload(randomFloats(16, 2)), dc = poisoned(16);
  EXPECT_EQ(matmul(*context, da.data(), db.data(), dc.data(),
                   {1, 4, 4, 4, false, false, false}, unweighted)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

/// A product over k = 0 terms is zeros, as the CPU's: c = 0, c unchanged
/// where it accumulates, the addend, the bias, and under the GELU's
/// gradient zeros and a zero bias gradient.
TEST_P(CudaEpilogues, ProductsOverNoTermsAreZeros) {
  const int64_t m = 4, n = 8, count = m * n;
  std::vector<float> c0 = randomFloats(count, 61),
                     addend = randomFloats(count, 62),
                     bias = randomFloats(n, 63),
                     input = randomFloats(count, 64);
  DeviceBuffer da = upload(std::vector<float>{1.0f}),
               db = upload(std::vector<float>{1.0f}), dbias = upload(bias),
               daddend = upload(addend), dinput = upload(input),
               dweight = upload(std::vector<float>{3.0f});
  std::vector<float> biased(count);
  for (int64_t i = 0; i < count; ++i)
    biased[i] = bias[i % n];
  struct Case {
    const char *what;
    MatmulOptions options;
    std::vector<float> want;
  };
  std::vector<Case> cases(5);
  cases[0] = {"plain", {}, std::vector<float>(count, 0.0f)};
  cases[1] = {"accumulate", {}, c0};
  cases[1].options.accumulate = true;
  cases[1].options.weight = dweight.as<float>();
  cases[2] = {"addend", {}, addend};
  cases[2].options.addend = daddend.data();
  cases[3] = {"bias", {}, biased};
  cases[3].options.epilogue = Epilogue::Bias;
  cases[3].options.bias = dbias.data();
  cases[4] = {"GELU gradient", {}, std::vector<float>(count, 0.0f)};
  cases[4].options.epilogue = Epilogue::GeluTanhGrad;
  cases[4].options.activationInput = dinput.data();
  DeviceBuffer dgrad = poisoned(n);
  cases[4].options.biasGrad = dgrad.data();
  for (const Case &c : cases) {
    DeviceBuffer dc = upload(c0);
    absl::Status ran = matmul(*context, da.data(), db.data(), dc.data(),
                              {1, m, n, 0, false, false, false}, c.options);
    ASSERT_TRUE(ran.ok()) << c.what << ": " << ran;
    expectNear(download(dc, count), c.want, 0, 0, c.what);
  }
  expectNear(download(dgrad, n), std::vector<float>(n, 0.0f), 0, 0,
             "GELU gradient's bias gradient");
}

/// A 16-bit product adds an f32 bias, or one of its own type, to the f32
/// product and rounds once, as the plan's contract says the CPU does:
/// cuBLASLt's bias epilogue for a bias of the output's type, the f32
/// product and the bias kernel for an f32 one (cuBLASLt documents its bias
/// as of the output's type).
TEST_P(CudaEpilogues, MatmulBiasOfF32OrTheOutputType) {
  const int64_t m = 32, n = 40, k = 64;
  std::vector<float> a = randomFloats(m * k, 24), b = randomFloats(k * n, 25),
                     bias = randomFloats(n, 26);
  std::vector<uint16_t> a16(a.size()), b16(b.size()), bias16(n);
  auto round = [](std::vector<float> &values, std::vector<uint16_t> &bits) {
    for (size_t i = 0; i < values.size(); ++i) {
      __nv_bfloat16 h = toHalf<__nv_bfloat16>(values[i]);
      values[i] = fromHalf(h);
      std::memcpy(&bits[i], &h, 2);
    }
  };
  round(a, a16);
  round(b, b16);
  std::vector<float> bias16Values = bias;
  round(bias16Values, bias16);
  DeviceBuffer da = upload(a16), db = upload(b16);
  for (DType biasType : {DType::F32, DType::BF16}) {
    const std::vector<float> &biasValues =
        biasType == DType::F32 ? bias : bias16Values;
    std::vector<float> want(m * n);
    cpu::matmul(a.data(), b.data(), want.data(), 1, m, n, k, false, false,
                false);
    cpu::matmulEpilogue(want.data(), biasValues.data(), std::nullopt, nullptr,
                        m * n, n);
    DeviceBuffer dbias = biasType == DType::F32 ? upload(bias) : upload(bias16);
    DeviceBuffer dc = poisoned(m * n, 2);
    MatmulOptions options;
    options.inputType = DType::BF16;
    options.outputType = DType::BF16;
    options.epilogue = Epilogue::Bias;
    options.bias = dbias.data();
    options.biasType = biasType;
    EpilogueUse before = epilogueUse();
    ASSERT_OK(matmul(*context, da.data(), db.data(), dc.data(),
                     {1, m, n, k, false, false, false}, options));
    expectOneEpilogue(before, /*fused=*/biasType == DType::BF16,
                      biasType == DType::F32 ? "f32 bias" : "bf16 bias");
    std::vector<uint16_t> raw = download<uint16_t>(dc, m * n);
    std::vector<float> got(m * n);
    for (size_t i = 0; i < raw.size(); ++i) {
      __nv_bfloat16 h;
      std::memcpy(&h, &raw[i], 2);
      got[i] = fromHalf(h);
    }
    expectNear(got, want, 1e-2, 1e-2,
               biasType == DType::F32 ? "f32 bias" : "bf16 bias");
  }
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, ArithmeticMatchesCpu) {
  const int64_t rows = 333, width = 77, n = rows * width;
  std::vector<float> x = randomFloats(n, 10), y = randomFloats(n, 11),
                     bias = randomFloats(width, 12);
  DeviceBuffer dx = upload(x), dy = upload(y), dbias = upload(bias);

  std::vector<float> want(n);
  cpu::addBroadcast(x.data(), bias.data(), want.data(), n, width);
  DeviceBuffer out = poisoned(n);
  ASSERT_OK(addBroadcast(*context, dx.as<float>(), dbias.as<float>(),
                         out.as<float>(), n, width));
  expectNearF32(download(out, n), want, "addBroadcast");

  cpu::mul(x.data(), y.data(), want.data(), n);
  out = poisoned(n);
  ASSERT_OK(mul(*context, dx.as<float>(), dy.as<float>(), out.as<float>(), n));
  expectNearF32(download(out, n), want, "mul");

  cpu::scale(x.data(), 0.37f, want.data(), n);
  out = poisoned(n);
  ASSERT_OK(scale(*context, dx.as<float>(), 0.37f, out.as<float>(), n));
  expectNearF32(download(out, n), want, "scale");

  DeviceBuffer factor = upload(std::vector<float>{-1.5f});
  cpu::scale(x.data(), -1.5f, want.data(), n);
  out = poisoned(n);
  ASSERT_OK(scaleBy(*context, dx.as<float>(), factor.as<float>(),
                    out.as<float>(), n));
  expectNearF32(download(out, n), want, "scaleBy");

  want = y;
  cpu::accumulate(want.data(), x.data(), -1.5f, n);
  DeviceBuffer acc = upload(y);
  ASSERT_OK(accumulate(*context, acc.as<float>(), dx.as<float>(),
                       factor.as<float>(), n));
  expectNearF32(download(acc, n), want, "accumulate");

  out = poisoned(n);
  ASSERT_OK(fill(*context, out.as<float>(), 2.5f, n));
  expectNearF32(download(out, n), std::vector<float>(n, 2.5f), "fill");
}

TEST_F(CudaKernels, SameShapeAddsMatchCpu) {
  // addBroadcast with period == count takes the kernel's path without a
  // remainder; in place (out is lhs) as the plans' residual adds may be.
  const int64_t n = 4099;
  std::vector<float> x = randomFloats(n, 13), y = randomFloats(n, 14);
  std::vector<float> want(n);
  cpu::addBroadcast(x.data(), y.data(), want.data(), n, n);
  DeviceBuffer dx = upload(x), dy = upload(y), out = poisoned(n);
  ASSERT_OK(addBroadcast(*context, dx.as<float>(), dy.as<float>(),
                         out.as<float>(), n, n));
  expectNearF32(download(out, n), want, "add");
  ASSERT_OK(addBroadcast(*context, dx.as<float>(), dy.as<float>(),
                         dx.as<float>(), n, n));
  expectNearF32(download(dx, n), want, "add in place");
}

TEST_F(CudaKernels, ElementwiseKernelsCoverCountsBeyondOneGrid) {
  // An element-wise grid is at most 2^16 blocks of 256 threads, each thread
  // taking 4 elements a pass: 2^26 elements. Twice that and a tail make
  // each thread stride over three passes, the last partial.
  const int64_t n = (int64_t{2} << 26) + 777;
  DeviceBuffer a = poisoned(n), b = poisoned(n),
               half = poisoned(n, sizeof(uint16_t));
  ASSERT_OK(fill(*context, a.as<float>(), 1.5f, n));
  ASSERT_OK(cast(*context, a.data(), DType::F32, half.data(), DType::BF16, n));
  // a += 2 * bf16(1.5): 4.5 everywhere.
  DeviceBuffer two = upload(std::vector<float>{2.0f});
  ASSERT_OK(accumulate(*context, Result{a.data(), DType::F32},
                       Operand{half.data(), DType::BF16}, two.as<float>(), n));
  // b = a + a (same shape): 9; then a = b + [1, 2, 3] repeating: 10, 11, 12.
  ASSERT_OK(addBroadcast(*context, a.as<float>(), a.as<float>(), b.as<float>(),
                         n, n));
  DeviceBuffer period = upload(std::vector<float>{1.0f, 2.0f, 3.0f});
  ASSERT_OK(addBroadcast(*context, b.as<float>(), period.as<float>(),
                         a.as<float>(), n, 3));
  std::vector<float> gotB = download(b, n), gotA = download(a, n);
  int64_t wrongB = 0, wrongA = 0, firstA = -1;
  for (int64_t i = 0; i < n; ++i) {
    wrongB += gotB[i] != 9.0f;
    if (gotA[i] != 10.0f + static_cast<float>(i % 3)) {
      if (firstA < 0)
        firstA = i;
      ++wrongA;
    }
  }
  EXPECT_EQ(wrongB, 0) << "elements of fill, cast, accumulate and add wrong";
  EXPECT_EQ(wrongA, 0) << "elements of the broadcast add wrong, the first at "
                       << firstA;
}

TEST(CudaVersions, NamesMajorAndMinor) {
  EXPECT_EQ(cudaVersionName(13000), "13.0");
  EXPECT_EQ(cudaVersionName(12080), "12.8");
  EXPECT_EQ(cudaVersionName(11020), "11.2");
}

// A strided copy moves elements of 2 bytes (16-bit floats) or 4 (f32,
// i32) as bits: a transpose with a shift, a bound (padding zeros) and an
// output offset of an odd count of 16-bit elements against the same copy
// done on the host, and the same coordinates over 4-byte elements.
TEST_F(CudaKernels, StridedCopiesMoveTwoAndFourByteElements) {
  const int64_t d0 = 3, d1 = 5, d2 = 7;
  StridedCopy copy;
  copy.rank = 3;
  // out [d2][d0][d1 + 1] (row-major) from x [d0][d1][d2], read at x[i][j -
  // 1][k]: the first column of every row is padding.
  int64_t shape[] = {d2, d0, d1 + 1};
  int64_t xStrides[] = {1, d1 * d2, d2};
  int64_t shift[] = {0, 0, -1};
  int64_t bound[] = {d2, d0, d1};
  int64_t outStrides[] = {d0 * (d1 + 1), d1 + 1, 1};
  for (int d = 0; d < 3; ++d) {
    copy.shape[d] = shape[d];
    copy.xStrides[d] = xStrides[d];
    copy.shift[d] = shift[d];
    copy.bound[d] = bound[d];
    copy.outStrides[d] = outStrides[d];
  }
  copy.outOffset = 3; // odd: a 16-bit copy starts mid-word
  const int64_t n = d0 * d1 * d2, outN = copy.outOffset + n / d1 * (d1 + 1);
  std::vector<uint16_t> x16(n);
  std::vector<uint32_t> x32(n);
  for (int64_t i = 0; i < n; ++i) {
    x16[i] = static_cast<uint16_t>(0x3c00 + 7 * i);
    x32[i] = 0x40000000u + 13u * static_cast<uint32_t>(i);
  }
  auto reference = [&](auto xs, auto fill) {
    std::vector<decltype(fill)> out(outN, fill);
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        for (int64_t c = 0; c < shape[2]; ++c) {
          int64_t source = c + shift[2];
          out[copy.outOffset + a * outStrides[0] + b * outStrides[1] +
              c * outStrides[2]] = source < 0 || source >= bound[2]
                                       ? 0
                                       : xs[a * xStrides[0] + b * xStrides[1] +
                                            source * xStrides[2]];
        }
    return out;
  };
  DeviceBuffer in16 = upload(x16), in32 = upload(x32);
  DeviceBuffer out16 = poisoned(outN, 2), out32 = poisoned(outN, 4);
  copy.elementBytes = 2;
  ASSERT_OK(stridedCopy(*context, in16.data(), out16.data(), copy));
  copy.elementBytes = 4;
  ASSERT_OK(stridedCopy(*context, in32.data(), out32.data(), copy));
  // The offset's elements stay as poisoned.
  EXPECT_EQ(download<uint16_t>(out16, outN),
            reference(x16, static_cast<uint16_t>(0xffff)));
  EXPECT_EQ(download<uint32_t>(out32, outN),
            reference(x32, static_cast<uint32_t>(0xffffffffu)));
}

// Other element sizes are refused before anything is launched (no GPU
// needed).
TEST(CudaStridedCopy, RefusesElementsOfOtherSizes) {
  StridedCopy copy;
  copy.rank = 1;
  copy.shape[0] = 4;
  copy.elementBytes = 8;
  absl::Status status =
      stridedCopy(static_cast<cudaStream_t>(nullptr), nullptr, nullptr, copy);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("2 or 4 bytes"), std::string::npos) << status;
}

TEST_F(CudaKernels, SumsMatchADoubleReference) {
  // reduceSum over leading dimensions (a bias gradient: chunked, coalesced),
  // over middle and trailing ones (the general layout, chunked), over
  // everything, and with more outputs than the chunking aims at.
  struct SumCase {
    std::vector<int64_t> x, out;
  };
  const std::vector<SumCase> cases = {
      {{300, 70}, {70}},       {{8, 1024, 96}, {96}}, {{5, 300, 7}, {5, 1, 7}},
      {{6, 9, 40}, {6, 9, 1}}, {{3, 4, 5}, {}},       {{2, 300000}, {300000}},
      {{100000, 3}, {3}},      {{17}, {17}}};
  uint32_t seed = 40;
  for (const SumCase &c : cases) {
    int64_t n = 1, outCount = 1;
    for (int64_t size : c.x)
      n *= size;
    for (int64_t size : c.out)
      outCount *= size;
    std::string what = "reduceSum of " + std::to_string(n) + " into " +
                       std::to_string(outCount);
    std::vector<float> x = randomFloats(n, seed++);
    // The reference: out index of each x element, from x's coordinates.
    size_t lead = c.x.size() - c.out.size();
    std::vector<double> sums(outCount, 0.0);
    std::vector<int64_t> coords(c.x.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t o = 0;
      for (size_t d = lead; d < c.x.size(); ++d)
        o = o * c.out[d - lead] + (c.out[d - lead] == 1 ? 0 : coords[d]);
      sums[o] += x[i];
      for (int64_t d = static_cast<int64_t>(c.x.size()) - 1; d >= 0; --d) {
        if (++coords[d] < c.x[d])
          break;
        coords[d] = 0;
      }
    }
    std::vector<float> want(outCount);
    for (int64_t o = 0; o < outCount; ++o)
      want[o] = static_cast<float>(sums[o] * 0.5);
    DeviceBuffer dx = upload(x), out = poisoned(outCount);
    ASSERT_OK(
        reduceSum(*context, dx.as<float>(), c.x, out.as<float>(), c.out, 0.5));
    std::vector<float> got = download(out, outCount);
    expectNearF32(got, want, what, 1e-5);
    // The same inputs give the same bits (fixed chunks, fixed order).
    out = poisoned(outCount);
    ASSERT_OK(
        reduceSum(*context, dx.as<float>(), c.x, out.as<float>(), c.out, 0.5));
    EXPECT_EQ(std::memcmp(download(out, outCount).data(), got.data(),
                          got.size() * sizeof(float)),
              0)
        << what;
  }
}

TEST_F(CudaKernels, CastsRoundTrip) {
  const int64_t n = 1000;
  std::vector<float> x = randomFloats(n, 13);
  DeviceBuffer dx = upload(x);
  for (DType type : {DType::BF16, DType::F16}) {
    DeviceBuffer half = poisoned(n, 2), back = poisoned(n);
    ASSERT_OK(cast(*context, dx.data(), DType::F32, half.data(), type, n));
    ASSERT_OK(cast(*context, half.data(), type, back.data(), DType::F32, n));
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i)
      want[i] = type == DType::BF16 ? fromHalf(toHalf<__nv_bfloat16>(x[i]))
                                    : fromHalf(toHalf<__half>(x[i]));
    expectNear(download(back, n), want, 0.0, 0.0,
               type == DType::BF16 ? "bf16 round trip" : "f16 round trip");
  }
}

const cpu::Activation kActivations[] = {
    cpu::Activation::Gelu, cpu::Activation::GeluTanh, cpu::Activation::FastGelu,
    cpu::Activation::Relu, cpu::Activation::Silu};

std::string activationName(cpu::Activation kind) {
  switch (kind) {
  case cpu::Activation::Gelu:
    return "gelu";
  case cpu::Activation::GeluTanh:
    return "gelu_tanh";
  case cpu::Activation::FastGelu:
    return "fast_gelu";
  case cpu::Activation::Relu:
    return "relu";
  case cpu::Activation::Silu:
    return "silu";
  }
  return "?";
}

TEST_F(CudaKernels, ActivationsAndGradientsMatchCpu) {
  const int64_t n = 70001;
  std::vector<float> x = randomFloats(n, 14, 3.0f), dy = randomFloats(n, 15);
  DeviceBuffer dx = upload(x), ddy = upload(dy);
  for (cpu::Activation kind : kActivations) {
    std::string name = activationName(kind);
    std::vector<float> want(n);
    cpu::activation(kind, x.data(), want.data(), n);
    DeviceBuffer out = poisoned(n);
    ASSERT_OK(activation(*context, kind, dx.as<float>(), out.as<float>(), n));
    expectNearF32(download(out, n), want, name);

    cpu::activationGrad(kind, x.data(), dy.data(), want.data(), n);
    out = poisoned(n);
    ASSERT_OK(activationGrad(*context, kind, dx.as<float>(), ddy.as<float>(),
                             out.as<float>(), n));
    expectNearF32(download(out, n), want, name + " gradient");
  }
}

TEST_F(CudaKernels, GatedUnitsAndGradientsMatchCpu) {
  const int64_t n = 5000;
  std::vector<float> gate = randomFloats(n, 16, 2.0f), up = randomFloats(n, 17),
                     dy = randomFloats(n, 18);
  DeviceBuffer dgateIn = upload(gate), dup = upload(up), ddy = upload(dy);
  // SwiGLU (silu) and GeGLU (exact gelu), as the plan's Gated kinds.
  for (cpu::Activation kind : {cpu::Activation::Silu, cpu::Activation::Gelu}) {
    std::string name = kind == cpu::Activation::Silu ? "swiglu" : "geglu";
    std::vector<float> want(n);
    cpu::gated(kind, gate.data(), up.data(), want.data(), n);
    DeviceBuffer out = poisoned(n);
    ASSERT_OK(gated(*context, kind, dgateIn.as<float>(), dup.as<float>(),
                    out.as<float>(), n));
    expectNearF32(download(out, n), want, name);

    // dgate = act'(gate) * (up * dy), dup = act(gate) * dy.
    std::vector<float> upDy(n), wantGate(n), act(n), wantUp(n);
    cpu::mul(up.data(), dy.data(), upDy.data(), n);
    cpu::activationGrad(kind, gate.data(), upDy.data(), wantGate.data(), n);
    cpu::activation(kind, gate.data(), act.data(), n);
    cpu::mul(act.data(), dy.data(), wantUp.data(), n);
    DeviceBuffer gotGate = poisoned(n), gotUp = poisoned(n);
    ASSERT_OK(gatedGrad(*context, kind, dgateIn.as<float>(), dup.as<float>(),
                        ddy.as<float>(), gotGate.as<float>(), gotUp.as<float>(),
                        n));
    expectNearF32(download(gotGate, n), wantGate, name + " dgate");
    expectNearF32(download(gotUp, n), wantUp, name + " dup");
  }
}

TEST_F(CudaKernels, BiasActivationAndGradientMatchCpu) {
  const int64_t rows = 150, width = 96, n = rows * width;
  std::vector<float> x = randomFloats(n, 19, 2.0f),
                     bias = randomFloats(width, 20), dy = randomFloats(n, 21);
  DeviceBuffer dx = upload(x), dbias = upload(bias), ddy = upload(dy);
  std::vector<float> shifted(n);
  cpu::addBroadcast(x.data(), bias.data(), shifted.data(), n, width);
  for (cpu::Activation kind : kActivations) {
    std::string name = "bias + " + activationName(kind);
    std::vector<float> want(n);
    cpu::activation(kind, shifted.data(), want.data(), n);
    DeviceBuffer out = poisoned(n);
    ASSERT_OK(biasActivation(*context, kind, dx.as<float>(), dbias.as<float>(),
                             out.as<float>(), rows, width));
    expectNearF32(download(out, n), want, name);

    std::vector<float> wantDx(n), wantDbias(width);
    cpu::activationGrad(kind, shifted.data(), dy.data(), wantDx.data(), n);
    for (int64_t c = 0; c < width; ++c) {
      double sum = 0.0;
      for (int64_t r = 0; r < rows; ++r)
        sum += wantDx[r * width + c];
      wantDbias[c] = static_cast<float>(sum);
    }
    DeviceBuffer gotDx = poisoned(n), gotDbias = poisoned(width);
    ASSERT_OK(biasActivationGrad(
        *context, kind, dx.as<float>(), dbias.as<float>(), ddy.as<float>(),
        gotDx.as<float>(), gotDbias.as<float>(), rows, width));
    expectNearF32(download(gotDx, n), wantDx, name + " dx");
    // A sum of 150 terms: 1e-5 of the terms' scale.
    expectNearF32(download(gotDbias, width), wantDbias, name + " dbias", 1e-5);
  }
}

//===----------------------------------------------------------------------===//
// Elementwise, each operand in its own type
//===----------------------------------------------------------------------===//

/// The typed kernels against what a 16-bit plan ran before them: each
/// operand cast to f32 on the device, the f32 kernel, each result cast
/// back. Widening is exact and the arithmetic the same, so the bits must
/// be too.
class TypedKernels : public CudaKernels {
protected:
  static size_t bytesOf(DType type) { return type == DType::F32 ? 4 : 2; }

  /// `values` in `type` on the device (rounded to nearest even).
  DeviceBuffer inType(const std::vector<float> &values, DType type) {
    DeviceBuffer f32 = upload(values);
    if (type == DType::F32)
      return f32;
    DeviceBuffer out = poisoned(values.size(), 2);
    absl::Status status = cast(*context, f32.data(), DType::F32, out.data(),
                               type, static_cast<int64_t>(values.size()));
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }

  /// `n` elements of `from` at `x` cast to `to` (one of them F32), in a
  /// new buffer.
  DeviceBuffer converted(const void *x, DType from, DType to, size_t n) {
    DeviceBuffer out = poisoned(n, bytesOf(to));
    absl::Status status =
        cast(*context, x, from, out.data(), to, static_cast<int64_t>(n));
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }

  /// The f32 widening of `n` elements of `type` at `x`.
  DeviceBuffer widened(const void *x, DType type, size_t n) {
    return converted(x, type, DType::F32, n);
  }

  /// A copy of the `n` elements of `type` in `x` (for a kernel that
  /// writes over or adds to one of its operands).
  DeviceBuffer duplicate(const DeviceBuffer &x, DType type, size_t n) {
    DeviceBuffer copy = poisoned(n, bytesOf(type));
    EXPECT_EQ(cudaMemcpyAsync(copy.data(), x.data(), n * bytesOf(type),
                              cudaMemcpyDeviceToDevice, context->stream()),
              cudaSuccess);
    return copy;
  }

  /// AdamW's parameter, m and v of `n` elements (v squares, so positive)
  /// drawn from `seed`, `seed + 10` and `seed + 20`.
  static std::vector<std::vector<float>> adamwState(int64_t n, uint32_t seed) {
    std::vector<float> v = randomFloats(n, seed + 20, 0.1f);
    for (float &value : v)
      value *= value;
    return {randomFloats(n, seed), randomFloats(n, seed + 10, 0.1f), v};
  }

  /// adamwState(n, seed) uploaded to `got` and to `want` alike.
  void uploadTwice(int64_t n, uint32_t seed, std::vector<DeviceBuffer> &got,
                   std::vector<DeviceBuffer> &want) {
    for (const std::vector<float> &state : adamwState(n, seed)) {
      got.push_back(upload(state));
      want.push_back(upload(state));
    }
  }

  /// The address of element `offset` of a tensor of `type` at `x`.
  static void *element(const DeviceBuffer &x, DType type, int64_t offset) {
    return static_cast<char *>(x.data()) + offset * bytesOf(type);
  }

  /// The `n` elements of `type` at `got` and at `want` (device memory)
  /// have the same bits.
  void expectSameBits(const void *got, const void *want, DType type, size_t n,
                      const std::string &what) {
    size_t bytes = bytesOf(type);
    std::vector<uint8_t> gotBytes(n * bytes), wantBytes(n * bytes);
    ASSERT_OK(context->synchronize());
    ASSERT_OK(context->copyToHost(gotBytes.data(), got, n * bytes));
    ASSERT_OK(context->copyToHost(wantBytes.data(), want, n * bytes));
    if (std::memcmp(gotBytes.data(), wantBytes.data(), n * bytes) == 0)
      return;
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::memcmp(&gotBytes[i * bytes], &wantBytes[i * bytes], bytes) !=
          0) {
        if (++bad <= 5) {
          uint32_t gotBits = 0, wantBits = 0;
          std::memcpy(&gotBits, &gotBytes[i * bytes], bytes);
          std::memcpy(&wantBits, &wantBytes[i * bytes], bytes);
          ADD_FAILURE() << what << ": element " << i << " has bits 0x"
                        << std::hex << gotBits << ", the widened kernel's 0x"
                        << wantBits << std::dec;
        }
      }
    ADD_FAILURE() << what << ": " << bad << " of " << n << " elements differ";
  }
};

std::string typeName(DType type) { return dtypeName(type); }

/// The types of two operands and a result.
struct TypeCase {
  DType a, b, out;
};

/// One type throughout (16-bit and f32), and mixes: an f32 operand with
/// a 16-bit one, 16-bit operands into an f32 result, bf16 with f16, and f32
/// operands into a 16-bit result.
const TypeCase kTypeCases[] = {
    {DType::BF16, DType::BF16, DType::BF16},
    {DType::F16, DType::F16, DType::F16},
    {DType::F32, DType::F32, DType::F32},
    {DType::F32, DType::BF16, DType::BF16},
    {DType::BF16, DType::BF16, DType::F32},
    {DType::F16, DType::F32, DType::F16},
    {DType::BF16, DType::F16, DType::F32},
    {DType::F32, DType::F32, DType::F16},
};

std::string caseName(const TypeCase &c) {
  return typeName(c.a) + ", " + typeName(c.b) + " -> " + typeName(c.out);
}

/// `n` normal deviates of standard deviation `scale` with, at the start,
/// values that round or overflow in 16 bits (f16's largest, an f16
/// subnormal, beyond f16's range, beyond bf16's, infinities, zeros).
std::vector<float> typedInputs(size_t n, uint32_t seed, float scale) {
  std::vector<float> values = randomFloats(n, seed, scale);
  const float special[] = {65504.0f, -65504.0f, 1e-7f,       -3e-6f,
                           7e4f,     3.3e38f,   INFINITY,    -INFINITY,
                           0.0f,     -0.0f,     1.00390625f, 1.0009765625f};
  for (size_t i = 0; i < std::size(special) && i < n; ++i)
    values[(i * 7 + seed) % n] = special[i];
  return values;
}

TEST_F(TypedKernels, ArithmeticMatchesTheWidenedF32Kernels) {
  // An odd count, and an odd period for the broadcast.
  const int64_t rows = 333, width = 77, n = rows * width;
  std::vector<float> x = typedInputs(n, 60, 3.0f), y = typedInputs(n, 61, 3.0f),
                     bias = typedInputs(width, 62, 3.0f);
  for (const TypeCase &c : kTypeCases) {
    std::string name = caseName(c);
    DeviceBuffer a = inType(x, c.a), b = inType(y, c.b),
                 rhs = inType(bias, c.b);
    DeviceBuffer wideA = widened(a.data(), c.a, n),
                 wideB = widened(b.data(), c.b, n),
                 wideRhs = widened(rhs.data(), c.b, width);

    // addBroadcast, with rhs repeating every `width` elements and with a
    // whole rhs.
    for (bool broadcast : {true, false}) {
      int64_t period = broadcast ? width : n;
      const DeviceBuffer &right = broadcast ? rhs : b;
      const DeviceBuffer &wideRight = broadcast ? wideRhs : wideB;
      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(addBroadcast(*context, wideA.as<float>(), wideRight.as<float>(),
                             wide.as<float>(), n, period));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(addBroadcast(*context, Operand{a.data(), c.a},
                             Operand{right.data(), c.b},
                             Result{got.data(), c.out}, n, period));
      expectSameBits(got.data(), want.data(), c.out, n,
                     (broadcast ? "addBroadcast " : "add ") + name);
    }

    DeviceBuffer wide = poisoned(n);
    ASSERT_OK(mul(*context, wideA.as<float>(), wideB.as<float>(),
                  wide.as<float>(), n));
    DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
    DeviceBuffer got = poisoned(n, bytesOf(c.out));
    ASSERT_OK(mul(*context, Operand{a.data(), c.a}, Operand{b.data(), c.b},
                  Result{got.data(), c.out}, n));
    expectSameBits(got.data(), want.data(), c.out, n, "mul " + name);

    wide = poisoned(n);
    ASSERT_OK(scale(*context, wideA.as<float>(), 0.37f, wide.as<float>(), n));
    want = converted(wide.data(), DType::F32, c.out, n);
    got = poisoned(n, bytesOf(c.out));
    ASSERT_OK(scale(*context, Operand{a.data(), c.a}, 0.37f,
                    Result{got.data(), c.out}, n));
    expectSameBits(got.data(), want.data(), c.out, n, "scale " + name);

    // Tensors that start one element into their buffers (16-bit ones at
    // addresses that are not 4-byte aligned), an even count.
    const int64_t m = n - 1;
    auto shifted = [](const DeviceBuffer &buffer, DType type) {
      return static_cast<char *>(buffer.data()) + bytesOf(type);
    };
    wide = poisoned(m);
    ASSERT_OK(mul(*context, wideA.as<float>() + 1, wideB.as<float>() + 1,
                  wide.as<float>(), m));
    want = converted(wide.data(), DType::F32, c.out, m);
    got = poisoned(n, bytesOf(c.out));
    ASSERT_OK(mul(*context, Operand{shifted(a, c.a), c.a},
                  Operand{shifted(b, c.b), c.b},
                  Result{shifted(got, c.out), c.out}, m));
    expectSameBits(shifted(got, c.out), want.data(), c.out, m,
                   "mul one element in " + name);
  }
}

TEST_F(TypedKernels, ActivationsMatchTheWidenedF32Kernels) {
  const int64_t n = 70001;
  std::vector<float> x = typedInputs(n, 63, 3.0f),
                     dy = typedInputs(n, 64, 1.0f);
  for (const TypeCase &c : kTypeCases) {
    DeviceBuffer dx = inType(x, c.a), ddy = inType(dy, c.b);
    DeviceBuffer wideX = widened(dx.data(), c.a, n),
                 wideDy = widened(ddy.data(), c.b, n);
    for (cpu::Activation kind : kActivations) {
      std::string name = activationName(kind) + " " + caseName(c);
      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(
          activation(*context, kind, wideX.as<float>(), wide.as<float>(), n));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(activation(*context, kind, Operand{dx.data(), c.a},
                           Result{got.data(), c.out}, n));
      expectSameBits(got.data(), want.data(), c.out, n, name);

      wide = poisoned(n);
      ASSERT_OK(activationGrad(*context, kind, wideX.as<float>(),
                               wideDy.as<float>(), wide.as<float>(), n));
      want = converted(wide.data(), DType::F32, c.out, n);
      got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(activationGrad(*context, kind, Operand{dx.data(), c.a},
                               Operand{ddy.data(), c.b},
                               Result{got.data(), c.out}, n));
      expectSameBits(got.data(), want.data(), c.out, n, name + " gradient");
    }
  }
}

TEST_F(TypedKernels, GatedUnitsMatchTheWidenedF32Kernels) {
  const int64_t n = 5001;
  std::vector<float> gate = typedInputs(n, 65, 2.0f),
                     up = typedInputs(n, 66, 1.0f),
                     dy = typedInputs(n, 67, 1.0f);
  for (const TypeCase &c : kTypeCases)
    for (cpu::Activation kind :
         {cpu::Activation::Silu, cpu::Activation::Gelu}) {
      std::string name =
          (kind == cpu::Activation::Silu ? "swiglu " : "geglu ") + caseName(c);
      // gate and dy of the first type, up of the second.
      DeviceBuffer dgateIn = inType(gate, c.a), dup = inType(up, c.b),
                   ddy = inType(dy, c.a);
      DeviceBuffer wideGate = widened(dgateIn.data(), c.a, n),
                   wideUp = widened(dup.data(), c.b, n),
                   wideDy = widened(ddy.data(), c.a, n);
      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(gated(*context, kind, wideGate.as<float>(), wideUp.as<float>(),
                      wide.as<float>(), n));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(gated(*context, kind, Operand{dgateIn.data(), c.a},
                      Operand{dup.data(), c.b}, Result{got.data(), c.out}, n));
      expectSameBits(got.data(), want.data(), c.out, n, name);

      // dgate of the result's type, dup of the first operand's.
      DeviceBuffer wideDgate = poisoned(n), wideDup = poisoned(n);
      ASSERT_OK(gatedGrad(*context, kind, wideGate.as<float>(),
                          wideUp.as<float>(), wideDy.as<float>(),
                          wideDgate.as<float>(), wideDup.as<float>(), n));
      DeviceBuffer wantGate = converted(wideDgate.data(), DType::F32, c.out, n),
                   wantUp = converted(wideDup.data(), DType::F32, c.a, n);
      DeviceBuffer gotGate = poisoned(n, bytesOf(c.out)),
                   gotUp = poisoned(n, bytesOf(c.a));
      ASSERT_OK(gatedGrad(*context, kind, Operand{dgateIn.data(), c.a},
                          Operand{dup.data(), c.b}, Operand{ddy.data(), c.a},
                          Result{gotGate.data(), c.out},
                          Result{gotUp.data(), c.a}, n));
      expectSameBits(gotGate.data(), wantGate.data(), c.out, n,
                     name + " dgate");
      expectSameBits(gotUp.data(), wantUp.data(), c.a, n, name + " dup");
    }
}

TEST_F(TypedKernels, BiasActivationMatchesTheWidenedF32Kernel) {
  const int64_t rows = 151, width = 97, n = rows * width;
  std::vector<float> x = typedInputs(n, 68, 2.0f),
                     bias = typedInputs(width, 69, 1.0f);
  for (const TypeCase &c : kTypeCases) {
    DeviceBuffer dx = inType(x, c.a), dbias = inType(bias, c.b);
    DeviceBuffer wideX = widened(dx.data(), c.a, n),
                 wideBias = widened(dbias.data(), c.b, width);
    for (cpu::Activation kind : kActivations) {
      std::string name = "bias + " + activationName(kind) + " " + caseName(c);
      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(biasActivation(*context, kind, wideX.as<float>(),
                               wideBias.as<float>(), wide.as<float>(), rows,
                               width));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(biasActivation(*context, kind, Operand{dx.data(), c.a},
                               Operand{dbias.data(), c.b},
                               Result{got.data(), c.out}, rows, width));
      expectSameBits(got.data(), want.data(), c.out, n, name);
    }
  }
}

TEST_F(TypedKernels, ScalarStepKernelsMatchTheWidenedF32Kernels) {
  // The optimizer step's element-wise kernels: x (in a) of the first type,
  // y (in b) of the second, the results and the accumulator of the
  // result's.
  const int64_t n = 5001;
  std::vector<float> x = typedInputs(n, 70, 2.0f), y = typedInputs(n, 71, 2.0f),
                     start = typedInputs(n, 72, 1.0f);
  DeviceBuffer scalars = upload(std::vector<float>{0.37f, -1.5f, 0.0f, 1.0f});
  const float *factor = scalars.as<float>(), *weight = factor + 1;
  for (const TypeCase &c : kTypeCases) {
    std::string name = caseName(c);
    DeviceBuffer a = inType(x, c.a), b = inType(y, c.b);
    DeviceBuffer wideA = widened(a.data(), c.a, n),
                 wideB = widened(b.data(), c.b, n);

    DeviceBuffer wide = poisoned(n);
    ASSERT_OK(
        scaleBy(*context, wideA.as<float>(), factor, wide.as<float>(), n));
    DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
    DeviceBuffer got = poisoned(n, bytesOf(c.out));
    ASSERT_OK(scaleBy(*context, Operand{a.data(), c.a}, factor,
                      Result{got.data(), c.out}, n));
    expectSameBits(got.data(), want.data(), c.out, n, "scaleBy " + name);

    // The accumulator holds values of its type to begin with.
    DeviceBuffer acc = inType(start, c.out);
    DeviceBuffer wideAcc = widened(acc.data(), c.out, n);
    ASSERT_OK(accumulate(*context, wideAcc.as<float>(), wideA.as<float>(),
                         weight, n));
    want = converted(wideAcc.data(), DType::F32, c.out, n);
    ASSERT_OK(accumulate(*context, Result{acc.data(), c.out},
                         Operand{a.data(), c.a}, weight, n));
    expectSameBits(acc.data(), want.data(), c.out, n, "accumulate " + name);

    // A value that rounds in 16 bits.
    wide = poisoned(n);
    ASSERT_OK(fill(*context, wide.as<float>(), 0.1f, n));
    want = converted(wide.data(), DType::F32, c.out, n);
    got = poisoned(n, bytesOf(c.out));
    ASSERT_OK(fill(*context, Result{got.data(), c.out}, 0.1f, n));
    expectSameBits(got.data(), want.data(), c.out, n, "fill " + name);

    for (int flag : {2, 3}) { // the scalars 0 and 1
      const float *chosen = scalars.as<float>() + flag;
      wide = poisoned(n);
      ASSERT_OK(select(*context, chosen, wideA.as<float>(), wideB.as<float>(),
                       wide.as<float>(), n));
      want = converted(wide.data(), DType::F32, c.out, n);
      got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(select(*context, chosen, Operand{a.data(), c.a},
                       Operand{b.data(), c.b}, Result{got.data(), c.out}, n));
      expectSameBits(got.data(), want.data(), c.out, n,
                     "select " + std::to_string(flag - 2) + " " + name);
    }
  }
}

TEST_F(TypedKernels, SumsMatchTheWidenedF32Kernel) {
  // A bias gradient's sum over the leading dimensions (in chunks, then
  // their partials), sums over inner and outer dimensions, and a scaled
  // copy (nothing summed).
  const std::vector<int64_t> xShape = {6, 37, 50};
  const int64_t n = 6 * 37 * 50;
  const std::vector<std::vector<int64_t>> outShapes = {
      {50}, {1, 37, 1}, {6, 1, 50}, {6, 37, 50}};
  std::vector<float> x = typedInputs(n, 78, 3.0f);
  for (const TypeCase &c : kTypeCases) {
    DeviceBuffer dx = inType(x, c.a);
    DeviceBuffer wideX = widened(dx.data(), c.a, n);
    for (const std::vector<int64_t> &outShape : outShapes) {
      int64_t count = 1;
      for (int64_t size : outShape)
        count *= size;
      std::string what =
          "sum to " + std::to_string(count) + " elements " + caseName(c);
      DeviceBuffer wide = poisoned(count);
      ASSERT_OK(reduceSum(*context, wideX.as<float>(), xShape, wide.as<float>(),
                          outShape, 0.5));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, count);
      DeviceBuffer got = poisoned(count, bytesOf(c.out));
      ASSERT_OK(reduceSum(*context, Operand{dx.data(), c.a}, xShape,
                          Result{got.data(), c.out}, outShape, 0.5));
      expectSameBits(got.data(), want.data(), c.out, count, what);
    }
  }
}

TEST_F(TypedKernels, RopeAndDropoutMatchTheWidenedF32Kernels) {
  // Rotated and copied elements of each head, both directions; dropout
  // from an offset; each also in place where out has x's type.
  const int64_t batch = 2, seq = 37, heads = 4, headDim = 64, rotary = 48;
  const int64_t n = batch * seq * heads * headDim;
  std::vector<float> x = typedInputs(n, 84, 2.0f);
  for (const TypeCase &c : kTypeCases) {
    DeviceBuffer dx = inType(x, c.a);
    DeviceBuffer wideX = widened(dx.data(), c.a, n);
    for (float direction : {1.0f, -1.0f}) {
      std::string name =
          std::string(direction > 0 ? "rope " : "rope back ") + caseName(c);
      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(rope(*context, wideX.as<float>(), wide.as<float>(), batch, seq,
                     heads, headDim, rotary, 10000.0f, direction));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(rope(*context, Operand{dx.data(), c.a},
                     Result{got.data(), c.out}, batch, seq, heads, headDim,
                     rotary, 10000.0f, direction));
      expectSameBits(got.data(), want.data(), c.out, n, name);
      if (c.a == c.out) {
        DeviceBuffer inPlace = duplicate(dx, c.a, n);
        ASSERT_OK(rope(*context, Operand{inPlace.data(), c.a},
                       Result{inPlace.data(), c.out}, batch, seq, heads,
                       headDim, rotary, 10000.0f, direction));
        expectSameBits(inPlace.data(), want.data(), c.out, n,
                       name + " in place");
      }
    }

    std::string name = "dropout " + caseName(c);
    DeviceBuffer wide = poisoned(n);
    ASSERT_OK(dropout(*context, wideX.as<float>(), wide.as<float>(), n, 0.3,
                      1234, 5, 3, DropoutPiece{77}));
    DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
    DeviceBuffer got = poisoned(n, bytesOf(c.out));
    ASSERT_OK(dropout(*context, Operand{dx.data(), c.a},
                      Result{got.data(), c.out}, n, 0.3, 1234, 5, 3,
                      DropoutPiece{77}));
    expectSameBits(got.data(), want.data(), c.out, n, name);
    if (c.a == c.out) {
      DeviceBuffer inPlace = duplicate(dx, c.a, n);
      ASSERT_OK(dropout(*context, Operand{inPlace.data(), c.a},
                        Result{inPlace.data(), c.out}, n, 0.3, 1234, 5, 3,
                        DropoutPiece{77}));
      expectSameBits(inPlace.data(), want.data(), c.out, n, name + " in place");
    }
  }
}

TEST_F(TypedKernels, RejectI32Operands) {
  const int64_t n = 16;
  DeviceBuffer x = poisoned(n), out = poisoned(n);
  Operand f32{x.data(), DType::F32}, i32{x.data(), DType::I32};
  Result f32Out{out.data(), DType::F32}, i32Out{out.data(), DType::I32};
  auto invalid = [](const absl::Status &status) {
    return status.code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(invalid(addBroadcast(*context, i32, f32, f32Out, n, n)));
  EXPECT_TRUE(invalid(addBroadcast(*context, f32, i32, f32Out, n, n)));
  EXPECT_TRUE(invalid(addBroadcast(*context, f32, f32, i32Out, n, n)));
  EXPECT_TRUE(invalid(mul(*context, f32, i32, f32Out, n)));
  EXPECT_TRUE(invalid(mul(*context, f32, f32, i32Out, n)));
  EXPECT_TRUE(invalid(scale(*context, i32, 2.0f, f32Out, n)));
  EXPECT_TRUE(invalid(scale(*context, f32, 2.0f, i32Out, n)));
  cpu::Activation kind = cpu::Activation::Silu;
  EXPECT_TRUE(invalid(activation(*context, kind, i32, f32Out, n)));
  EXPECT_TRUE(invalid(activation(*context, kind, f32, i32Out, n)));
  EXPECT_TRUE(invalid(activationGrad(*context, kind, f32, i32, f32Out, n)));
  EXPECT_TRUE(invalid(gated(*context, kind, i32, f32, f32Out, n)));
  EXPECT_TRUE(
      invalid(gatedGrad(*context, kind, f32, f32, i32, f32Out, f32Out, n)));
  EXPECT_TRUE(
      invalid(gatedGrad(*context, kind, f32, f32, f32, f32Out, i32Out, n)));
  EXPECT_TRUE(invalid(biasActivation(*context, kind, f32, i32, f32Out, 2, 8)));
  const float *scalar = x.as<float>();
  EXPECT_TRUE(invalid(scaleBy(*context, i32, scalar, f32Out, n)));
  EXPECT_TRUE(invalid(accumulate(*context, i32Out, f32, scalar, n)));
  EXPECT_TRUE(invalid(fill(*context, i32Out, 1.0f, n)));
  EXPECT_TRUE(invalid(select(*context, scalar, f32, i32, f32Out, n)));
  EXPECT_TRUE(invalid(reduceSum(*context, i32, {2, 8}, f32Out, {8}, 1.0)));
  EXPECT_TRUE(invalid(layerNorm(*context, f32, i32, f32, f32Out, 2, 8, 1e-5f)));
  EXPECT_TRUE(invalid(rmsNorm(*context, i32, f32, f32Out, 2, 8, 1e-5f)));
  EXPECT_TRUE(invalid(
      layerNormGrad(*context, f32, f32, f32, f32Out, i32Out, 2, 8, 1e-5f)));
  EXPECT_TRUE(invalid(
      rmsNormGrad(*context, f32, f32, i32, f32Out, f32Out, 2, 8, 1e-5f)));
  DeviceBuffer ids = upload(std::vector<int32_t>{0, 1});
  EXPECT_TRUE(
      invalid(embedding(*context, ids.as<int32_t>(), i32, f32Out, 2, 2, 8)));
  EXPECT_TRUE(invalid(
      embeddingGrad(*context, ids.as<int32_t>(), f32, i32Out, 2, 2, 8)));
  EXPECT_TRUE(invalid(crossEntropy(*context, i32, ids.as<int32_t>(),
                                   out.as<float>(), 2, 8, -100)));
  TypedVocabPiece piece{i32, 0, 8};
  EXPECT_TRUE(invalid(crossEntropyGrad(*context, f32, ids.as<int32_t>(), scalar,
                                       f32Out, 2, 8, -100, &piece)));
  EXPECT_TRUE(invalid(logSumExp(*context, f32, i32Out, 2, 8, 8)));
  EXPECT_TRUE(invalid(rope(*context, i32, f32Out, 1, 2, 1, 8, 8, 1e4f, 1.0f)));
  EXPECT_TRUE(invalid(dropout(*context, f32, i32Out, n, 0.5, 1, 1, 1)));
  EXPECT_TRUE(invalid(adamw(
      *context, {{out.as<float>(), i32, out.as<float>(), out.as<float>(), n}},
      scalar, scalar, scalar, {0.9f, 0.95f, 1e-8f})));
  // Nothing ran: the result keeps its poison.
  std::vector<uint32_t> bits = download<uint32_t>(out, n);
  for (uint32_t word : bits)
    EXPECT_EQ(word, 0xffffffffu);
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, NormsAndGradientsMatchCpu) {
  // Rows held in registers, 8 elements a thread (48, 1030, 4096: a row in
  // one warp, in several, in the widest block of 512 threads), and rows
  // read from memory on each pass (4097, 12288: GPT-3's hidden size); rows
  // not a multiple of the dgamma chunk.
  for (int64_t width : {48, 1030, 4096, 4097, 12288}) {
    const int64_t rows = 67, n = rows * width;
    const float epsilon = 1e-5f;
    std::vector<float> x = randomFloats(n, 22, 2.0f),
                       gamma = randomFloats(width, 23),
                       beta = randomFloats(width, 24), dy = randomFloats(n, 25),
                       dgamma0 = randomFloats(width, 26);
    DeviceBuffer dx = upload(x), dgammaIn = upload(gamma), dbeta = upload(beta),
                 ddy = upload(dy);
    std::string size = " (width " + std::to_string(width) + ")";
    for (bool layer : {true, false}) {
      std::string name = (layer ? "layer norm" : "rms norm") + size;
      for (bool withBeta : {true, false}) {
        if (!layer && withBeta)
          continue;
        std::vector<float> want(n);
        if (layer)
          cpu::layerNorm(x.data(), gamma.data(),
                         withBeta ? beta.data() : nullptr, want.data(), rows,
                         width, epsilon);
        else
          cpu::rmsNorm(x.data(), gamma.data(), want.data(), rows, width,
                       epsilon);
        DeviceBuffer out = poisoned(n);
        if (layer)
          ASSERT_OK(layerNorm(*context, dx.as<float>(), dgammaIn.as<float>(),
                              withBeta ? dbeta.as<float>() : nullptr,
                              out.as<float>(), rows, width, epsilon));
        else
          ASSERT_OK(rmsNorm(*context, dx.as<float>(), dgammaIn.as<float>(),
                            out.as<float>(), rows, width, epsilon));
        expectNearF32(download(out, n), want,
                      name + (withBeta ? " with beta" : ""), 1e-5);
      }
      // dgamma accumulates into what it held.
      std::vector<float> wantDx(n), wantDgamma = dgamma0;
      if (layer)
        cpu::layerNormGrad(x.data(), gamma.data(), dy.data(), wantDx.data(),
                           wantDgamma.data(), rows, width, epsilon);
      else
        cpu::rmsNormGrad(x.data(), gamma.data(), dy.data(), wantDx.data(),
                         wantDgamma.data(), rows, width, epsilon);
      DeviceBuffer gotDx = poisoned(n), gotDgamma = upload(dgamma0);
      if (layer)
        ASSERT_OK(layerNormGrad(*context, dx.as<float>(), dgammaIn.as<float>(),
                                ddy.as<float>(), gotDx.as<float>(),
                                gotDgamma.as<float>(), rows, width, epsilon));
      else
        ASSERT_OK(rmsNormGrad(*context, dx.as<float>(), dgammaIn.as<float>(),
                              ddy.as<float>(), gotDx.as<float>(),
                              gotDgamma.as<float>(), rows, width, epsilon));
      expectNearF32(download(gotDx, n), wantDx, name + " dx", 1e-5);
      expectNearF32(download(gotDgamma, width), wantDgamma, name + " dgamma",
                    1e-5);
    }
  }
}

TEST_F(CudaKernels, NormsRunInPlace) {
  // y may be x, for a row held in registers (2050) and one read on each
  // pass (5000): every thread reads each of its elements before it writes
  // it, and the statistics before any.
  const int64_t rows = 5;
  const float epsilon = 1e-5f;
  for (int64_t width : {2050, 5000}) {
    const int64_t n = rows * width;
    std::vector<float> x = randomFloats(n, 27, 2.0f),
                       gamma = randomFloats(width, 28),
                       beta = randomFloats(width, 29);
    std::vector<float> want(n);
    cpu::layerNorm(x.data(), gamma.data(), beta.data(), want.data(), rows,
                   width, epsilon);
    DeviceBuffer dx = upload(x), dgamma = upload(gamma), dbeta = upload(beta);
    ASSERT_OK(layerNorm(*context, dx.as<float>(), dgamma.as<float>(),
                        dbeta.as<float>(), dx.as<float>(), rows, width,
                        epsilon));
    expectNearF32(download(dx, n), want,
                  "layer norm in place (width " + std::to_string(width) + ")",
                  1e-5);
  }
}

TEST_F(TypedKernels, NormsMatchTheWidenedF32Kernels) {
  // Rows held in registers and rows read on each pass (see
  // NormsAndGradientsMatchCpu); rows not a multiple of the dgamma chunk. x
  // of the first type; gamma, beta and dy of the second; y, dx and dgamma
  // of the result's (dgamma adds to values of its type).
  const float epsilon = 1e-5f;
  for (int64_t width : {48, 1030, 4097}) {
    const int64_t rows = 67, n = rows * width;
    std::vector<float> x = randomFloats(n, 73, 2.0f),
                       gamma = randomFloats(width, 74),
                       beta = randomFloats(width, 75), dy = randomFloats(n, 76),
                       dgamma0 = randomFloats(width, 77);
    for (const TypeCase &c : kTypeCases) {
      std::string name = caseName(c) + " (width " + std::to_string(width) + ")";
      DeviceBuffer dx = inType(x, c.a), dgammaIn = inType(gamma, c.b),
                   dbeta = inType(beta, c.b), ddy = inType(dy, c.b);
      DeviceBuffer wideX = widened(dx.data(), c.a, n),
                   wideGamma = widened(dgammaIn.data(), c.b, width),
                   wideBeta = widened(dbeta.data(), c.b, width),
                   wideDy = widened(ddy.data(), c.b, n);
      Operand x16{dx.data(), c.a}, gamma16{dgammaIn.data(), c.b},
          dy16{ddy.data(), c.b};
      for (bool layer : {true, false}) {
        for (bool withBeta : {true, false}) {
          if (!layer && withBeta)
            continue;
          std::string what = (layer ? "layer norm " : "rms norm ") + name +
                             (withBeta ? " with beta" : "");
          DeviceBuffer wide = poisoned(n);
          DeviceBuffer got = poisoned(n, bytesOf(c.out));
          if (layer) {
            ASSERT_OK(layerNorm(*context, wideX.as<float>(),
                                wideGamma.as<float>(),
                                withBeta ? wideBeta.as<float>() : nullptr,
                                wide.as<float>(), rows, width, epsilon));
            ASSERT_OK(layerNorm(*context, x16, gamma16,
                                withBeta ? Operand{dbeta.data(), c.b}
                                         : Operand{nullptr, DType::F32},
                                Result{got.data(), c.out}, rows, width,
                                epsilon));
          } else {
            ASSERT_OK(rmsNorm(*context, wideX.as<float>(),
                              wideGamma.as<float>(), wide.as<float>(), rows,
                              width, epsilon));
            ASSERT_OK(rmsNorm(*context, x16, gamma16, Result{got.data(), c.out},
                              rows, width, epsilon));
          }
          DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
          expectSameBits(got.data(), want.data(), c.out, n, what);
        }
        std::string what =
            (layer ? "layer norm gradient " : "rms norm gradient ") + name;
        DeviceBuffer dgamma = inType(dgamma0, c.out);
        DeviceBuffer wideDx = poisoned(n),
                     wideDgamma = widened(dgamma.data(), c.out, width);
        DeviceBuffer gotDx = poisoned(n, bytesOf(c.out));
        Result dx16{gotDx.data(), c.out}, dgamma16{dgamma.data(), c.out};
        if (layer) {
          ASSERT_OK(layerNormGrad(*context, wideX.as<float>(),
                                  wideGamma.as<float>(), wideDy.as<float>(),
                                  wideDx.as<float>(), wideDgamma.as<float>(),
                                  rows, width, epsilon));
          ASSERT_OK(layerNormGrad(*context, x16, gamma16, dy16, dx16, dgamma16,
                                  rows, width, epsilon));
        } else {
          ASSERT_OK(rmsNormGrad(*context, wideX.as<float>(),
                                wideGamma.as<float>(), wideDy.as<float>(),
                                wideDx.as<float>(), wideDgamma.as<float>(),
                                rows, width, epsilon));
          ASSERT_OK(rmsNormGrad(*context, x16, gamma16, dy16, dx16, dgamma16,
                                rows, width, epsilon));
        }
        DeviceBuffer wantDx = converted(wideDx.data(), DType::F32, c.out, n),
                     wantDgamma =
                         converted(wideDgamma.data(), DType::F32, c.out, width);
        expectSameBits(gotDx.data(), wantDx.data(), c.out, n, what + " dx");
        expectSameBits(dgamma.data(), wantDgamma.data(), c.out, width,
                       what + " dgamma");
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Embeddings and the loss
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, EmbeddingAndGradientMatchCpu) {
  const int64_t vocab = 50, hidden = 300, tokens = 257;
  std::vector<int32_t> ids = randomIds(tokens, vocab, 27);
  std::vector<float> table = randomFloats(vocab * hidden, 28),
                     dy = randomFloats(tokens * hidden, 29),
                     dtable0 = randomFloats(vocab * hidden, 30);
  DeviceBuffer dids = upload(ids), dtableIn = upload(table), ddy = upload(dy);

  std::vector<float> want(tokens * hidden);
  ASSERT_TRUE(cpu::embedding(ids.data(), table.data(), want.data(), tokens,
                             vocab, hidden));
  DeviceBuffer out = poisoned(tokens * hidden);
  ASSERT_OK(embedding(*context, dids.as<int32_t>(), dtableIn.as<float>(),
                      out.as<float>(), tokens, vocab, hidden));
  expectNearF32(download(out, tokens * hidden), want, "embedding");

  // A vocab-parallel piece: rows [20, 40) of the vocabulary.
  const int64_t firstRow = 20, rows = 20;
  ASSERT_TRUE(cpu::embedding(ids.data(), table.data() + firstRow * hidden,
                             want.data(), tokens, rows, hidden, firstRow,
                             vocab));
  out = poisoned(tokens * hidden);
  ASSERT_OK(embedding(*context, dids.as<int32_t>(),
                      dtableIn.as<float>() + firstRow * hidden, out.as<float>(),
                      tokens, rows, hidden, firstRow, vocab));
  expectNearF32(download(out, tokens * hidden), want,
                "vocab-parallel embedding");

  // Ids repeat (257 tokens, 50 rows): the tokens sorted by row add in the
  // CPU's order, onto what dtable held, so the sums are its bits; for the
  // whole table and a vocab-parallel piece, whose other rows' tokens are
  // left out.
  struct Piece {
    int64_t firstRow, rows;
  };
  for (Piece piece : {Piece{0, vocab}, Piece{firstRow, rows}}) {
    std::vector<float> wantGrad(dtable0.begin() + piece.firstRow * hidden,
                                dtable0.begin() +
                                    (piece.firstRow + piece.rows) * hidden);
    DeviceBuffer grad = upload(wantGrad);
    ASSERT_TRUE(cpu::embeddingGradAccumulate(
        ids.data(), dy.data(), wantGrad.data(), tokens, piece.rows, hidden,
        piece.firstRow, vocab));
    ASSERT_OK(embeddingGradAccumulate(
        *context, dids.as<int32_t>(), ddy.as<float>(), grad.as<float>(), tokens,
        piece.rows, hidden, piece.firstRow, vocab));
    std::vector<float> got = download(grad, piece.rows * hidden);
    ASSERT_EQ(got.size(), wantGrad.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], wantGrad[i]) << "embedding gradient (rows "
                                     << piece.firstRow << " on), element " << i;
  }
  ASSERT_TRUE(context->synchronize().ok());
}

TEST_F(TypedKernels, EmbeddingsMatchTheWidenedF32Kernels) {
  // The table and dy of the first type, the result and dtable of the
  // result's; the whole vocabulary and a vocab-parallel piece (rows [20,
  // 40)); ids repeat (257 tokens, 50 rows), so dtable's rows are sums.
  const int64_t vocab = 50, hidden = 300, tokens = 257;
  std::vector<int32_t> ids = randomIds(tokens, vocab, 79);
  std::vector<float> table = typedInputs(vocab * hidden, 80, 1.0f),
                     dy = typedInputs(tokens * hidden, 81, 1.0f);
  DeviceBuffer dids = upload(ids);
  struct Piece {
    int64_t firstRow, rows;
  };
  for (const TypeCase &c : kTypeCases)
    for (Piece piece : {Piece{0, vocab}, Piece{20, 20}}) {
      std::string name =
          caseName(c) + " (rows " + std::to_string(piece.firstRow) + " on)";
      DeviceBuffer dtable = inType(table, c.a), ddy = inType(dy, c.a);
      DeviceBuffer wideTable = widened(dtable.data(), c.a, vocab * hidden),
                   wideDy = widened(ddy.data(), c.a, tokens * hidden);
      const int64_t n = tokens * hidden, m = piece.rows * hidden;

      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(embedding(*context, dids.as<int32_t>(),
                          wideTable.as<float>() + piece.firstRow * hidden,
                          wide.as<float>(), tokens, piece.rows, hidden,
                          piece.firstRow, vocab));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(
          embedding(*context, dids.as<int32_t>(),
                    Operand{element(dtable, c.a, piece.firstRow * hidden), c.a},
                    Result{got.data(), c.out}, tokens, piece.rows, hidden,
                    piece.firstRow, vocab));
      expectSameBits(got.data(), want.data(), c.out, n, "embedding " + name);

      // From zeros, summed in f32 and rounded once (got starts as NaN).
      wide = poisoned(m);
      ASSERT_OK(fill(*context, wide.as<float>(), 0.0f, m));
      ASSERT_OK(embeddingGradAccumulate(
          *context, dids.as<int32_t>(), wideDy.as<float>(), wide.as<float>(),
          tokens, piece.rows, hidden, piece.firstRow, vocab));
      want = converted(wide.data(), DType::F32, c.out, m);
      got = poisoned(m, bytesOf(c.out));
      ASSERT_OK(embeddingGrad(*context, dids.as<int32_t>(),
                              Operand{ddy.data(), c.a},
                              Result{got.data(), c.out}, tokens, piece.rows,
                              hidden, piece.firstRow, vocab));
      expectSameBits(got.data(), want.data(), c.out, m,
                     "embedding gradient " + name);
    }
}

TEST_F(CudaKernels, BadIdsAndLabelsAreReported) {
  const int64_t vocab = 10, hidden = 8;
  std::vector<int32_t> ids = {1, 2, 10, 3};
  DeviceBuffer dids = upload(ids),
               table = upload(randomFloats(vocab * hidden, 31)),
               out = poisoned(ids.size() * hidden);
  ASSERT_TRUE(context->synchronize().ok());
  ASSERT_OK(embedding(*context, dids.as<int32_t>(), table.as<float>(),
                      out.as<float>(), 4, vocab, hidden));
  absl::Status status = context->synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(context->synchronize().ok()) << "the flags are cleared";

  // The embedding's gradient checks the ids too, even of rows of no width
  // (as the CPU's does).
  for (int64_t width : {hidden, int64_t{0}}) {
    DeviceBuffer dtable = poisoned(vocab * hidden);
    ASSERT_OK(embeddingGrad(
        *context, dids.as<int32_t>(), Operand{out.data(), DType::F32},
        Result{dtable.data(), DType::F32}, 4, vocab, width, 0, vocab));
    status = context->synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << "hidden " << width << ": " << status;
  }

  std::vector<int32_t> labels = {1, -100, 11, 2};
  DeviceBuffer dlabels = upload(labels),
               logits = upload(randomFloats(4 * vocab, 32)), loss = poisoned(1);
  ASSERT_OK(crossEntropy(*context, logits.as<float>(), dlabels.as<int32_t>(),
                         loss.as<float>(), 4, vocab, -100));
  status = context->synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST_F(CudaKernels, CrossEntropyAndGradientMatchCpu) {
  const int64_t rows = 130, vocab = 1000;
  const int32_t ignore = -100;
  std::vector<float> logits = randomFloats(rows * vocab, 33, 3.0f);
  std::vector<int32_t> labels = randomIds(rows, vocab, 34);
  for (int64_t r = 0; r < rows; r += 7)
    labels[r] = ignore;
  DeviceBuffer dlogits = upload(logits), dlabels = upload(labels);

  int64_t counted = 0;
  float wantLoss = cpu::crossEntropy(logits.data(), labels.data(), rows, vocab,
                                     ignore, &counted);
  ASSERT_GT(counted, 0);
  DeviceBuffer loss = poisoned(1);
  ASSERT_OK(crossEntropy(*context, dlogits.as<float>(), dlabels.as<int32_t>(),
                         loss.as<float>(), rows, vocab, ignore));
  expectNearF32(download(loss, 1), {wantLoss}, "cross entropy");

  DeviceBuffer count = poisoned(1);
  ASSERT_OK(countValid(*context, dlabels.as<int32_t>(), rows, ignore,
                       count.as<float>()));
  expectNearF32(download(count, 1), {static_cast<float>(counted)},
                "countValid");

  const float dlossValue = 0.75f;
  std::vector<float> want(rows * vocab);
  ASSERT_TRUE(cpu::crossEntropyGrad(logits.data(), labels.data(), want.data(),
                                    rows, vocab, ignore, dlossValue));
  DeviceBuffer dloss = upload(std::vector<float>{dlossValue});
  DeviceBuffer grad = poisoned(rows * vocab);
  ASSERT_OK(crossEntropyGrad(*context, dlogits.as<float>(),
                             dlabels.as<int32_t>(), dloss.as<float>(),
                             grad.as<float>(), rows, vocab, ignore));
  // Probabilities times 0.75 / 112: an absolute floor well below them.
  expectNearF32(download(grad, rows * vocab), want, "cross entropy gradient",
                1e-9);

  // In place: the gradient replaces the logits.
  ASSERT_OK(crossEntropyGrad(*context, dlogits.as<float>(),
                             dlabels.as<int32_t>(), dloss.as<float>(),
                             dlogits.as<float>(), rows, vocab, ignore));
  expectNearF32(download(dlogits, rows * vocab), want,
                "cross entropy gradient in place", 1e-9);
}

/// `rows` rows of `columns` logits whose columns from `vocab` on are the
/// padding of a padded vocabulary, holding large values: they would
/// dominate the softmax if a kernel took them in.
std::vector<float> paddedLogits(int64_t rows, int64_t vocab, int64_t columns,
                                uint32_t seed) {
  std::vector<float> logits = randomFloats(rows * columns, seed, 3.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = vocab; j < columns; ++j)
      logits[r * columns + j] = 40.0f + static_cast<float>(j);
  return logits;
}

/// Columns [first, first + width) of rows of `columns` values.
std::vector<float> columnsOf(const std::vector<float> &values, int64_t rows,
                             int64_t columns, int64_t first, int64_t width) {
  std::vector<float> part(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      part[r * width + j] = values[r * columns + first + j];
  return part;
}

TEST_F(CudaKernels, LogSumExpMatchesCpu) {
  const int64_t rows = 70, columns = 1030;
  std::vector<float> x = randomFloats(rows * columns, 36, 3.0f);
  DeviceBuffer dx = upload(x);
  // All the columns, some (a padded row), one, and none (minus infinity).
  for (int64_t classes : {columns, int64_t{1000}, int64_t{1}, int64_t{0}}) {
    std::string what = "logSumExp of " + std::to_string(classes) + " classes";
    std::vector<float> want(rows);
    cpu::logSumExp(x.data(), want.data(), rows, columns, classes);
    DeviceBuffer out = poisoned(rows);
    ASSERT_OK(logSumExp(*context, dx.as<float>(), out.as<float>(), rows,
                        columns, classes));
    std::vector<float> got = download(out, rows);
    if (classes == 0) {
      for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(got[r], -INFINITY) << what << ", row " << r;
        EXPECT_EQ(want[r], -INFINITY) << what << ", row " << r;
      }
    } else {
      expectNearF32(got, want, what);
    }
  }
  DeviceBuffer out = poisoned(rows);
  EXPECT_EQ(logSumExp(*context, dx.as<float>(), out.as<float>(), rows, columns,
                      columns + 1)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A vocabulary of `vocab` classes padded to `columns` and cut into `pieces`
// pieces, against the CPU kernels on the same inputs: the whole padded
// vocabulary (the piece at 0 without lse), then each piece with the rows'
// log-sum-exp (each piece's logSumExp over its classes, gathered on the
// host and combined with another logSumExp, as the partition combines
// them). 15 classes in 4 pieces of 5 leave the last piece padding only
// (its log-sum-exp minus infinity, its loss 0 and its gradient zeros), as
// do 1000 classes in 5 pieces of 260; rows of 1000 classes are longer than
// a block's threads.
TEST_F(CudaKernels, PaddedVocabCrossEntropyMatchesCpu) {
  struct Case {
    int64_t rows, vocab, columns, pieces;
  };
  const Case cases[] = {{6, 15, 16, 2},
                        {6, 15, 20, 4},
                        {130, 1000, 1040, 4},
                        {130, 1000, 1300, 5}};
  const int32_t ignore = -100;
  const float dlossValue = 0.7f;
  DeviceBuffer dloss = upload(std::vector<float>{dlossValue});
  for (const Case &c : cases) {
    const int64_t rows = c.rows, columns = c.columns, n = rows * columns;
    std::string size = " (" + std::to_string(c.vocab) + " classes in " +
                       std::to_string(columns) + " columns)";
    std::vector<float> logits = paddedLogits(rows, c.vocab, columns, 37);
    std::vector<int32_t> labels = randomIds(rows, c.vocab, 38);
    labels[0] = 0;
    labels[1] = static_cast<int32_t>(c.vocab - 1);
    for (int64_t r = 2; r < rows; r += 7)
      labels[r] = ignore;
    DeviceBuffer dlogits = upload(logits), dlabels = upload(labels);

    // The whole padded vocabulary.
    VocabPiece all{nullptr, 0, c.vocab};
    int64_t counted = 0;
    float wantLoss = cpu::crossEntropy(logits.data(), labels.data(), rows,
                                       columns, ignore, &counted, &all);
    ASSERT_GT(counted, 0);
    const int64_t wholeCounted = counted;
    DeviceBuffer loss = poisoned(1);
    ASSERT_OK(crossEntropy(*context, dlogits.as<float>(), dlabels.as<int32_t>(),
                           loss.as<float>(), rows, columns, ignore, &all));
    expectNearF32(download(loss, 1), {wantLoss}, "padded cross entropy" + size);
    std::vector<float> wantGrad(n);
    ASSERT_TRUE(cpu::crossEntropyGrad(logits.data(), labels.data(),
                                      wantGrad.data(), rows, columns, ignore,
                                      dlossValue, &all));
    DeviceBuffer grad = poisoned(n);
    ASSERT_OK(crossEntropyGrad(*context, dlogits.as<float>(),
                               dlabels.as<int32_t>(), dloss.as<float>(),
                               grad.as<float>(), rows, columns, ignore, &all));
    expectNearF32(download(grad, n), wantGrad,
                  "padded cross entropy gradient" + size, 1e-9);
    DeviceBuffer inPlace = upload(logits);
    ASSERT_OK(crossEntropyGrad(
        *context, inPlace.as<float>(), dlabels.as<int32_t>(), dloss.as<float>(),
        inPlace.as<float>(), rows, columns, ignore, &all));
    expectNearF32(download(inPlace, n), wantGrad,
                  "padded cross entropy gradient in place" + size, 1e-9);

    // Each piece's log-sum-exp over its classes.
    const int64_t pieces = c.pieces, width = columns / pieces;
    std::vector<std::vector<float>> parts;
    std::vector<DeviceBuffer> deviceParts;
    std::vector<float> gathered(rows * pieces);
    for (int64_t piece = 0; piece < pieces; ++piece) {
      std::string what = "log-sum-exp of piece " + std::to_string(piece) + size;
      parts.push_back(columnsOf(logits, rows, columns, width * piece, width));
      deviceParts.push_back(upload(parts.back()));
      VocabPiece at{nullptr, width * piece, c.vocab};
      int64_t classes = cpu::classColumns(width, &at);
      std::vector<float> want(rows);
      cpu::logSumExp(parts.back().data(), want.data(), rows, width, classes);
      DeviceBuffer lse = poisoned(rows);
      ASSERT_OK(logSumExp(*context, deviceParts.back().as<float>(),
                          lse.as<float>(), rows, width, classes));
      std::vector<float> got = download(lse, rows);
      if (classes == 0) {
        for (int64_t r = 0; r < rows; ++r)
          EXPECT_EQ(got[r], -INFINITY) << what << ", row " << r;
      } else {
        expectNearF32(got, want, what);
      }
      for (int64_t r = 0; r < rows; ++r)
        gathered[r * pieces + piece] = got[r];
    }
    // Combined: the whole rows' log-sum-exp over the classes.
    std::vector<float> wantLse(rows), wholeLse(rows);
    cpu::logSumExp(gathered.data(), wantLse.data(), rows, pieces, pieces);
    cpu::logSumExp(logits.data(), wholeLse.data(), rows, columns, c.vocab);
    DeviceBuffer dgathered = upload(gathered), lse = poisoned(rows);
    ASSERT_OK(logSumExp(*context, dgathered.as<float>(), lse.as<float>(), rows,
                        pieces, pieces));
    std::vector<float> gotLse = download(lse, rows);
    expectNearF32(gotLse, wantLse, "combined log-sum-exp" + size);
    expectNearF32(gotLse, wholeLse, "combined log-sum-exp, whole rows" + size);

    // The pieces with that log-sum-exp (the CPU kernels get the same
    // values): their losses add up to the loss, their gradients are the
    // CPU's, also in place.
    double sum = 0.0;
    for (int64_t piece = 0; piece < pieces; ++piece) {
      std::string what = "piece " + std::to_string(piece) + size;
      VocabPiece wantAt{gotLse.data(), width * piece, c.vocab};
      VocabPiece at{lse.as<float>(), width * piece, c.vocab};
      float wantPart =
          cpu::crossEntropy(parts[piece].data(), labels.data(), rows, width,
                            ignore, &counted, &wantAt);
      EXPECT_EQ(counted, wholeCounted) << what;
      DeviceBuffer part = poisoned(1);
      ASSERT_OK(crossEntropy(*context, deviceParts[piece].as<float>(),
                             dlabels.as<int32_t>(), part.as<float>(), rows,
                             width, ignore, &at));
      std::vector<float> gotPart = download(part, 1);
      expectNearF32(gotPart, {wantPart}, "cross entropy of " + what);
      sum += gotPart[0];

      std::vector<float> wantPartGrad(rows * width);
      ASSERT_TRUE(cpu::crossEntropyGrad(parts[piece].data(), labels.data(),
                                        wantPartGrad.data(), rows, width,
                                        ignore, dlossValue, &wantAt));
      DeviceBuffer partGrad = poisoned(rows * width);
      ASSERT_OK(crossEntropyGrad(
          *context, deviceParts[piece].as<float>(), dlabels.as<int32_t>(),
          dloss.as<float>(), partGrad.as<float>(), rows, width, ignore, &at));
      expectNearF32(download(partGrad, rows * width), wantPartGrad,
                    "cross entropy gradient of " + what, 1e-9);
      ASSERT_OK(crossEntropyGrad(*context, deviceParts[piece].as<float>(),
                                 dlabels.as<int32_t>(), dloss.as<float>(),
                                 deviceParts[piece].as<float>(), rows, width,
                                 ignore, &at));
      expectNearF32(download(deviceParts[piece], rows * width), wantPartGrad,
                    "cross entropy gradient in place of " + what, 1e-9);
    }
    EXPECT_NEAR(sum, wantLoss, 1e-5 * wantLoss) << "pieces' losses" << size;
  }
}

// A label among the padding is out of range: for the whole padded
// vocabulary and for the piece of padding only whose first column it
// would name if labels were checked against a piece's columns.
TEST_F(CudaKernels, LabelAmongThePaddingIsReported) {
  const int64_t rows = 6, vocab = 15;
  const int32_t ignore = -100;
  std::vector<int32_t> bad = {15, 0, ignore, 5, 9, 14};
  DeviceBuffer dlabels = upload(bad), dloss = upload(std::vector<float>{1.0f});
  std::vector<float> logits = paddedLogits(rows, vocab, 20, 39);
  std::vector<float> padded = columnsOf(logits, rows, 20, 0, 16),
                     padding = columnsOf(logits, rows, 20, 15, 5);
  DeviceBuffer dpadded = upload(padded), dpadding = upload(padding);
  std::vector<float> lseValues(rows);
  cpu::logSumExp(logits.data(), lseValues.data(), rows, 20, vocab);
  DeviceBuffer lse = upload(lseValues);
  ASSERT_TRUE(context->synchronize().ok());

  struct Case {
    const char *what;
    const std::vector<float> &logits;
    const DeviceBuffer &device;
    int64_t columns;
    VocabPiece cpuPiece, piece;
  } cases[] = {
      {"whole padded vocabulary",
       padded,
       dpadded,
       16,
       {nullptr, 0, vocab},
       {nullptr, 0, vocab}},
      {"piece of padding",
       padding,
       dpadding,
       5,
       {lseValues.data(), 15, vocab},
       {lse.as<float>(), 15, vocab}},
  };
  for (const Case &c : cases) {
    int64_t counted = 0;
    float wantLoss =
        cpu::crossEntropy(c.logits.data(), bad.data(), rows, c.columns, ignore,
                          &counted, &c.cpuPiece);
    EXPECT_EQ(counted, -1) << c.what;
    DeviceBuffer loss = poisoned(1);
    ASSERT_OK(crossEntropy(*context, c.device.as<float>(),
                           dlabels.as<int32_t>(), loss.as<float>(), rows,
                           c.columns, ignore, &c.piece));
    absl::Status status = context->synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << status;
    expectNearF32(download(loss, 1), {wantLoss},
                  std::string("cross entropy of the ") + c.what);

    std::vector<float> wantGrad(rows * c.columns);
    EXPECT_FALSE(cpu::crossEntropyGrad(c.logits.data(), bad.data(),
                                       wantGrad.data(), rows, c.columns, ignore,
                                       1.0f, &c.cpuPiece))
        << c.what;
    DeviceBuffer grad = poisoned(rows * c.columns);
    ASSERT_OK(crossEntropyGrad(*context, c.device.as<float>(),
                               dlabels.as<int32_t>(), dloss.as<float>(),
                               grad.as<float>(), rows, c.columns, ignore,
                               &c.piece));
    status = context->synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << status;
    expectNearF32(download(grad, rows * c.columns), wantGrad,
                  std::string("cross entropy gradient of the ") + c.what, 1e-9);
  }
}

TEST_F(TypedKernels, LossMatchesTheWidenedF32Kernels) {
  // Logits of the first type (with labels in every row's classes, some
  // ignored), a piece's lse of the second, dlogits and log-sum-exp of the
  // result's; the loss is f32. Rows of a whole vocabulary, of a padded
  // one, and the piece of columns [260, 520) of the padded one with the
  // whole rows' log-sum-exp; each gradient also in place where dlogits
  // has the logits' type.
  const int64_t rows = 130, vocab = 1000, columns = 1040, width = 260;
  const int32_t ignore = -100;
  std::vector<float> whole = paddedLogits(rows, vocab, columns, 82);
  std::vector<float> part = columnsOf(whole, rows, columns, width, width);
  std::vector<int32_t> labels = randomIds(rows, vocab, 83);
  for (int64_t r = 0; r < rows; r += 7)
    labels[r] = ignore;
  labels[1] = static_cast<int32_t>(width); // the piece's first class
  DeviceBuffer dlabels = upload(labels),
               dloss = upload(std::vector<float>{0.7f});
  std::vector<float> wholeLse(rows);
  cpu::logSumExp(whole.data(), wholeLse.data(), rows, columns, vocab);
  struct Case {
    std::string what;
    const std::vector<float> &logits;
    int64_t columns;
    bool padded, withLse;
  };
  const Case cases[] = {{"whole vocabulary", whole, columns, false, false},
                        {"padded vocabulary", whole, columns, true, false},
                        {"piece", part, width, true, true}};
  for (const TypeCase &c : kTypeCases)
    for (const Case &k : cases) {
      std::string name = k.what + " " + caseName(c);
      const int64_t n = rows * k.columns;
      DeviceBuffer logits = inType(k.logits, c.a), lse = inType(wholeLse, c.b);
      DeviceBuffer wideLogits = widened(logits.data(), c.a, n),
                   wideLse = widened(lse.data(), c.b, rows);
      const int64_t first = k.withLse ? width : 0;
      VocabPiece widePiece{k.withLse ? wideLse.as<float>() : nullptr, first,
                           vocab};
      TypedVocabPiece piece{k.withLse ? Operand{lse.data(), c.b}
                                      : Operand{nullptr, DType::F32},
                            first, vocab};
      const VocabPiece *widePieceOrNull = k.padded ? &widePiece : nullptr;
      const TypedVocabPiece *pieceOrNull = k.padded ? &piece : nullptr;
      Operand logits16{logits.data(), c.a};

      DeviceBuffer wideLoss = poisoned(1), gotLoss = poisoned(1);
      ASSERT_OK(crossEntropy(*context, wideLogits.as<float>(),
                             dlabels.as<int32_t>(), wideLoss.as<float>(), rows,
                             k.columns, ignore, widePieceOrNull));
      ASSERT_OK(crossEntropy(*context, logits16, dlabels.as<int32_t>(),
                             gotLoss.as<float>(), rows, k.columns, ignore,
                             pieceOrNull));
      expectSameBits(gotLoss.data(), wideLoss.data(), DType::F32, 1,
                     "cross entropy of the " + name);

      DeviceBuffer wide = poisoned(n);
      ASSERT_OK(crossEntropyGrad(*context, wideLogits.as<float>(),
                                 dlabels.as<int32_t>(), dloss.as<float>(),
                                 wide.as<float>(), rows, k.columns, ignore,
                                 widePieceOrNull));
      DeviceBuffer want = converted(wide.data(), DType::F32, c.out, n);
      DeviceBuffer got = poisoned(n, bytesOf(c.out));
      ASSERT_OK(crossEntropyGrad(*context, logits16, dlabels.as<int32_t>(),
                                 dloss.as<float>(), Result{got.data(), c.out},
                                 rows, k.columns, ignore, pieceOrNull));
      expectSameBits(got.data(), want.data(), c.out, n,
                     "cross entropy gradient of the " + name);
      if (c.a == c.out) {
        DeviceBuffer inPlace = duplicate(logits, c.a, n);
        ASSERT_OK(crossEntropyGrad(*context, Operand{inPlace.data(), c.a},
                                   dlabels.as<int32_t>(), dloss.as<float>(),
                                   Result{inPlace.data(), c.out}, rows,
                                   k.columns, ignore, pieceOrNull));
        expectSameBits(inPlace.data(), want.data(), c.out, n,
                       "cross entropy gradient in place of the " + name);
      }

      int64_t classes =
          k.padded ? std::min(k.columns, vocab - first) : k.columns;
      wide = poisoned(rows);
      ASSERT_OK(logSumExp(*context, wideLogits.as<float>(), wide.as<float>(),
                          rows, k.columns, classes));
      want = converted(wide.data(), DType::F32, c.out, rows);
      got = poisoned(rows, bytesOf(c.out));
      ASSERT_OK(logSumExp(*context, logits16, Result{got.data(), c.out}, rows,
                          k.columns, classes));
      expectSameBits(got.data(), want.data(), c.out, rows,
                     "log-sum-exp of the " + name);
    }
}

//===----------------------------------------------------------------------===//
// Gradient norm and optimizer
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, SumSquaresOverTensorsMatchesCpu) {
  const int64_t sizes[] = {1, 16384, 40000, 7};
  std::vector<std::vector<float>> tensors;
  std::vector<DeviceBuffer> buffers;
  std::vector<ConstSpan> spans;
  double want = 0.0;
  for (size_t t = 0; t < std::size(sizes); ++t) {
    tensors.push_back(randomFloats(sizes[t], 40 + t));
    want += cpu::sumSquares(tensors.back().data(), sizes[t]);
    buffers.push_back(upload(tensors.back()));
    spans.push_back({buffers.back().as<float>(), sizes[t]});
  }
  DeviceBuffer out = poisoned(1);
  ASSERT_OK(sumSquares(*context, spans, out.as<float>()));
  expectNearF32(download(out, 1), {static_cast<float>(want)}, "sumSquares");

  // One tensor: the plan's SumSquares.
  out = poisoned(1);
  ASSERT_OK(sumSquares(*context, {spans[2]}, out.as<float>()));
  expectNearF32(download(out, 1),
                {static_cast<float>(cpu::sumSquares(tensors[2].data(), 40000))},
                "sumSquares of one tensor");

  // With a limit: +inf once an element's magnitude is above it, as on the
  // CPU.
  tensors[1][9000] = -70000.0f;
  DeviceBuffer large = upload(tensors[1]);
  out = poisoned(1);
  ASSERT_OK(sumSquares(*context, {{large.as<float>(), 16384}}, out.as<float>(),
                       65504.0));
  std::vector<float> got = download(out, 1);
  EXPECT_TRUE(std::isinf(got[0]) && got[0] > 0) << got[0];
  EXPECT_TRUE(std::isinf(cpu::sumSquares(tensors[1].data(), 16384, 65504.0)));
  out = poisoned(1);
  ASSERT_OK(sumSquares(*context, {{large.as<float>(), 16384}}, out.as<float>(),
                       70000.0));
  expectNearF32(download(out, 1),
                {static_cast<float>(cpu::sumSquares(tensors[1].data(), 16384))},
                "sumSquares under its limit");

  // More chunks than the block that adds their partials has threads (one
  // per 16K elements; 5M elements: 306), added alike every run.
  const int64_t many = 5'000'000;
  std::vector<float> big = randomFloats(many, 47);
  DeviceBuffer bigBuffer = upload(big);
  out = poisoned(1);
  ASSERT_OK(
      sumSquares(*context, {{bigBuffer.as<float>(), many}}, out.as<float>()));
  std::vector<float> first = download(out, 1);
  expectNearF32(first, {static_cast<float>(cpu::sumSquares(big.data(), many))},
                "sumSquares of 306 chunks");
  out = poisoned(1);
  ASSERT_OK(
      sumSquares(*context, {{bigBuffer.as<float>(), many}}, out.as<float>()));
  EXPECT_EQ(download(out, 1), first) << "the same bits again";
}

TEST_F(CudaKernels, AdamWOverTensorsMatchesCpu) {
  const int64_t sizes[] = {3, 20000, 513};
  const float lr = 3e-4f, step = 7.0f, coefficient = 0.8f;
  const AdamWHyper hyper{0.9f, 0.95f, 1e-8f};
  const float weightDecay = 0.1f;
  std::vector<std::vector<float>> want[4]; // param, grad, m, v
  std::vector<DeviceBuffer> buffers;
  std::vector<AdamWTensor> tensors;
  for (size_t t = 0; t < std::size(sizes); ++t) {
    int64_t n = sizes[t];
    std::vector<float> param = randomFloats(n, 50 + t),
                       grad = randomFloats(n, 60 + t),
                       m = randomFloats(n, 70 + t, 0.1f), v(n);
    std::vector<float> vSeed = randomFloats(n, 80 + t, 0.1f);
    for (int64_t i = 0; i < n; ++i)
      v[i] = vSeed[i] * vSeed[i];
    for (auto *values : {&param, &grad, &m, &v})
      buffers.push_back(upload(*values));
    size_t base = buffers.size() - 4;
    tensors.push_back({buffers[base].as<float>(),
                       {buffers[base + 1].data(), DType::F32},
                       buffers[base + 2].as<float>(),
                       buffers[base + 3].as<float>(),
                       n,
                       weightDecay});
    cpu::adamw(param.data(), grad.data(), m.data(), v.data(), n, lr, step,
               coefficient, hyper.beta1, hyper.beta2, hyper.epsilon,
               weightDecay);
    want[0].push_back(param);
    want[2].push_back(m);
    want[3].push_back(v);
  }
  DeviceBuffer scalars = upload(std::vector<float>{lr, step, coefficient});
  ASSERT_OK(adamw(*context, tensors, scalars.as<float>(),
                  scalars.as<float>() + 1, scalars.as<float>() + 2, hyper));
  for (size_t t = 0; t < std::size(sizes); ++t) {
    std::string name = "adamw tensor " + std::to_string(t);
    expectNearF32(download(buffers[4 * t], sizes[t]), want[0][t],
                  name + " param", 1e-7);
    expectNearF32(download(buffers[4 * t + 2], sizes[t]), want[2][t],
                  name + " m", 1e-7);
    expectNearF32(download(buffers[4 * t + 3], sizes[t]), want[3][t],
                  name + " v", 1e-9);
  }
}

TEST_F(TypedKernels, AdamWReadsGradientsOfTheirType) {
  // One launch over tensors whose gradients are bf16, f16 and f32: the
  // bits of the f32 step on the widened gradients.
  const int64_t sizes[] = {3, 20000, 513};
  const DType gradTypes[] = {DType::BF16, DType::F16, DType::F32};
  const AdamWHyper hyper{0.9f, 0.95f, 1e-8f};
  DeviceBuffer scalars = upload(std::vector<float>{3e-4f, 7.0f, 0.8f});
  std::vector<DeviceBuffer> got, want, grads;
  std::vector<AdamWTensor> typed, wide;
  for (size_t t = 0; t < std::size(sizes); ++t) {
    int64_t n = sizes[t];
    uploadTwice(n, 85 + t, got, want);
    grads.push_back(inType(randomFloats(n, 100 + t), gradTypes[t]));
    grads.push_back(widened(grads.back().data(), gradTypes[t], n));
    size_t at = 3 * t;
    typed.push_back({got[at].as<float>(),
                     {grads[2 * t].data(), gradTypes[t]},
                     got[at + 1].as<float>(),
                     got[at + 2].as<float>(),
                     n,
                     0.1f});
    wide.push_back({want[at].as<float>(),
                    {grads[2 * t + 1].data(), DType::F32},
                    want[at + 1].as<float>(),
                    want[at + 2].as<float>(),
                    n,
                    0.1f});
  }
  const float *lr = scalars.as<float>();
  ASSERT_OK(adamw(*context, wide, lr, lr + 1, lr + 2, hyper));
  ASSERT_OK(adamw(*context, typed, lr, lr + 1, lr + 2, hyper));
  const char *names[] = {"param", "m", "v"};
  for (size_t t = 0; t < std::size(sizes); ++t)
    for (size_t k = 0; k < 3; ++k)
      expectSameBits(
          got[3 * t + k].data(), want[3 * t + k].data(), DType::F32, sizes[t],
          "adamw of " + typeName(gradTypes[t]) + " gradients, " + names[k]);
}

TEST_F(TypedKernels, AdamWRoundsItsParametersAsACastDoes) {
  // One launch over tensors with their own weight decays, each parameter
  // also rounded to bf16 or f16: the bits of the update without rounding
  // followed by the cast.
  const int64_t sizes[] = {5, 33000, 700};
  const DType roundedTypes[] = {DType::BF16, DType::F16, DType::BF16};
  const float decays[] = {0.1f, 0.0f, 0.25f};
  const AdamWHyper hyper{0.9f, 0.95f, 1e-8f};
  DeviceBuffer scalars = upload(std::vector<float>{3e-4f, 4.0f, 0.6f});
  std::vector<DeviceBuffer> got, want, grads, rounded;
  std::vector<AdamWTensor> fused, plain;
  for (size_t t = 0; t < std::size(sizes); ++t) {
    int64_t n = sizes[t];
    uploadTwice(n, 130 + t, got, want);
    grads.push_back(upload(randomFloats(n, 150 + t)));
    rounded.push_back(poisoned(n, 2));
    size_t at = 3 * t;
    fused.push_back({got[at].as<float>(),
                     {grads[t].data(), DType::F32},
                     got[at + 1].as<float>(),
                     got[at + 2].as<float>(),
                     n,
                     decays[t],
                     {rounded[t].data(), roundedTypes[t]}});
    plain.push_back({want[at].as<float>(),
                     {grads[t].data(), DType::F32},
                     want[at + 1].as<float>(),
                     want[at + 2].as<float>(),
                     n,
                     decays[t]});
  }
  const float *lr = scalars.as<float>();
  ASSERT_OK(adamw(*context, plain, lr, lr + 1, lr + 2, hyper));
  ASSERT_OK(adamw(*context, fused, lr, lr + 1, lr + 2, hyper));
  const char *names[] = {"param", "m", "v"};
  for (size_t t = 0; t < std::size(sizes); ++t) {
    std::string tensor = "tensor " + std::to_string(t);
    for (size_t k = 0; k < 3; ++k)
      expectSameBits(got[3 * t + k].data(), want[3 * t + k].data(), DType::F32,
                     sizes[t], tensor + " " + names[k]);
    DeviceBuffer cast =
        converted(want[3 * t].data(), DType::F32, roundedTypes[t], sizes[t]);
    expectSameBits(rounded[t].data(), cast.data(), roundedTypes[t], sizes[t],
                   tensor + " rounded to " + typeName(roundedTypes[t]));
  }
  // Each tensor's own decay: the f32 kernel of one tensor with it alone.
  std::vector<std::vector<float>> state = adamwState(sizes[2], 130 + 2);
  DeviceBuffer alone = upload(state[0]);
  DeviceBuffer m = upload(state[1]);
  DeviceBuffer vAlone = upload(state[2]);
  // Tensor 2 alone, writing its rounded copy in type `rounding` where one
  // is given, reading `skip` where it is not null.
  auto alone2 = [&](std::optional<DType> rounding, const float *skip) {
    AdamWTensor tensor{alone.as<float>(), {grads[2].data(), DType::F32},
                       m.as<float>(),     vAlone.as<float>(),
                       sizes[2],          decays[2]};
    if (rounding)
      tensor.rounded = {rounded[2].data(), *rounding};
    return adamw(*context, {tensor}, lr, lr + 1, lr + 2, hyper, skip);
  };
  ASSERT_OK(alone2(std::nullopt, nullptr));
  expectSameBits(got[6].data(), alone.data(), DType::F32, sizes[2],
                 "tensor 2 updated alone");
  // With a skip flag: 0 updates, anything else writes nothing.
  DeviceBuffer flags = upload(std::vector<float>{0.0f, 1.0f});
  std::vector<float> before = download(alone, sizes[2]);
  ASSERT_OK(alone2(roundedTypes[2], flags.as<float>() + 1));
  EXPECT_EQ(download(alone, sizes[2]), before) << "a skipped step";
  ASSERT_OK(alone2(std::nullopt, flags.as<float>()));
  EXPECT_NE(download(alone, sizes[2]), before) << "a step taken";
  // A rounded copy of f32 is refused.
  EXPECT_FALSE(alone2(DType::F32, nullptr).ok());
}

TEST_F(TypedKernels, SumSquaresReadsTensorsOfTheirType) {
  // bf16, f16 and f32 tensors in one pass: the sum over their widened
  // values, the same bits as over the f32 copies.
  const int64_t sizes[] = {7, 40000, 1000};
  const DType types[] = {DType::BF16, DType::F16, DType::F32};
  std::vector<DeviceBuffer> typed, wide;
  std::vector<ConstSpan> spans, wideSpans;
  for (size_t t = 0; t < std::size(sizes); ++t) {
    typed.push_back(inType(randomFloats(sizes[t], 160 + t), types[t]));
    wide.push_back(widened(typed.back().data(), types[t], sizes[t]));
    spans.push_back({typed.back().data(), sizes[t], types[t]});
    wideSpans.push_back({wide.back().data(), sizes[t]});
  }
  DeviceBuffer got = poisoned(1), want = poisoned(1);
  ASSERT_OK(sumSquares(*context, wideSpans, want.as<float>()));
  ASSERT_OK(sumSquares(*context, spans, got.as<float>()));
  expectSameBits(got.data(), want.data(), DType::F32, 1,
                 "sumSquares of 16-bit tensors");
}

} // namespace
} // namespace triad::rt::cuda
