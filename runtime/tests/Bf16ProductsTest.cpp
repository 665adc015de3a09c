//===- Bf16ProductsTest.cpp - oneDNN's bf16 products against OpenBLAS -----===//
//
// Every layout the plans' products take (transposes, a shared or batched
// rhs, f32 or bf16 results), against the reference the CPU backend runs
// otherwise: the operands widened to f32 (exact), OpenBLAS's f32 product,
// a bf16 result rounded once. Only the order of the f32 sums may differ.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Bf16Products.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cpu/HalfFloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace triad::rt::cpu {
namespace {

std::vector<uint16_t> randomBf16(int64_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float &v : values)
    v = normal(generator);
  std::vector<uint16_t> bits(values.size());
  narrow(/*bf16=*/true, values.data(), bits.data(), count);
  return bits;
}

std::vector<float> widened(const std::vector<uint16_t> &bits) {
  std::vector<float> out(bits.size());
  widen(/*bf16=*/true, bits.data(), out.data(),
        static_cast<int64_t>(bits.size()));
  return out;
}

/// The products, or a skip saying why they cannot run here.
#define GET_PRODUCTS_OR_SKIP(products)                                         \
  std::unique_ptr<Bf16Products> products;                                      \
  {                                                                            \
    std::string whyNot;                                                        \
    if (!bf16ProductsAvailable(&whyNot))                                       \
      GTEST_SKIP() << whyNot;                                                  \
    absl::StatusOr<std::unique_ptr<Bf16Products>> made =                       \
        Bf16Products::create();                                                \
    ASSERT_TRUE(made.ok()) << made.status();                                   \
    products = std::move(*made);                                               \
  }

struct Case {
  Bf16ProductShape shape;
  std::string name;
};

class Bf16ProductsLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16ProductsLayouts, MatchOpenBlasOnWidenedCopies) {
  GET_PRODUCTS_OR_SKIP(products);
  const Bf16ProductShape &s = GetParam().shape;
  int64_t rhsCount = (s.rhsBatched ? s.batch : 1) * s.k * s.n;
  std::vector<uint16_t> a = randomBf16(s.batch * s.m * s.k, 1),
                        b = randomBf16(rhsCount, 2);
  std::vector<float> aWide = widened(a), bWide = widened(b);
  int64_t outCount = s.batch * s.m * s.n;
  std::vector<float> expected(static_cast<size_t>(outCount));
  matmul(aWide.data(), bWide.data(), expected.data(), s.batch, s.m, s.n, s.k,
         s.transposeA, s.transposeB, s.rhsBatched);
  // The sums' magnitude bounds how far a different order may move them:
  // k terms of about 1 each, summed in f32.
  double tolerance = 1e-6 * static_cast<double>(s.k) + 1e-6;
  if (!s.resultBf16) {
    std::vector<float> got(static_cast<size_t>(outCount), NAN);
    ASSERT_TRUE(products->run(s, a.data(), b.data(), got.data()).ok());
    for (int64_t i = 0; i < outCount; ++i)
      ASSERT_NEAR(got[i], expected[i], tolerance) << "element " << i;
    return;
  }
  std::vector<uint16_t> got(static_cast<size_t>(outCount), 0xffff);
  ASSERT_TRUE(products->run(s, a.data(), b.data(), got.data()).ok());
  std::vector<float> gotWide = widened(got);
  std::vector<uint16_t> expectedBits(got.size());
  narrow(/*bf16=*/true, expected.data(), expectedBits.data(), outCount);
  for (int64_t i = 0; i < outCount; ++i) {
    // Rounded once: the same bits, or the neighbour where the f32 sum sits
    // within the sums' tolerance of a rounding boundary.
    if (got[i] == expectedBits[i])
      continue;
    float ulp = std::ldexp(1.0f, std::ilogb(expected[i]) - 7);
    ASSERT_LE(std::fabs(gotWide[i] - expected[i]), ulp / 2 + tolerance)
        << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Bf16ProductsLayouts,
    ::testing::Values(
        Case{{1, 33, 65, 47, false, false, false, false}, "Plain"},
        Case{{1, 33, 65, 47, true, false, false, false}, "TransposedA"},
        Case{{1, 33, 65, 47, false, true, false, false}, "TransposedB"},
        Case{{1, 33, 65, 47, true, true, false, true}, "BothTransposedBf16"},
        Case{{3, 16, 24, 40, false, false, false, true}, "SharedRhsBf16"},
        Case{{3, 16, 24, 40, true, false, false, false},
             "SharedRhsTransposedA"},
        Case{{4, 16, 24, 40, false, true, true, false}, "BatchedRhs"},
        Case{{4, 16, 24, 40, true, true, true, true}, "BatchedRhsBf16"},
        Case{{1, 512, 1024, 256, false, true, false, true}, "LargeBf16"}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

TEST(Bf16Products, MakesEachShapesKernelOnce) {
  GET_PRODUCTS_OR_SKIP(products);
  Bf16ProductShape shape{1, 8, 8, 8, false, false, false, true};
  std::vector<uint16_t> a = randomBf16(64, 3), b = randomBf16(64, 4), c(64);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(products->run(shape, a.data(), b.data(), c.data()).ok());
  EXPECT_EQ(products->cachedShapes(), 1u);
  shape.resultBf16 = false;
  std::vector<float> wide(64);
  ASSERT_TRUE(products->run(shape, a.data(), b.data(), wide.data()).ok());
  EXPECT_EQ(products->cachedShapes(), 2u);
}

TEST(Bf16Products, NamesRoundTripAndUnknownNamesAreRefused) {
  for (Bf16ProductKernel kernel :
       {Bf16ProductKernel::Auto, Bf16ProductKernel::OneDnn,
        Bf16ProductKernel::Blas}) {
    absl::StatusOr<Bf16ProductKernel> parsed =
        parseBf16ProductKernel(bf16ProductKernelName(kernel));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kernel);
  }
  absl::StatusOr<Bf16ProductKernel> bad = parseBf16ProductKernel("mkl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "unknown bf16 product kernel 'mkl' (expected auto, onednn or "
            "blas)");
}

TEST(Bf16Products, UnavailableSaysWhy) {
  std::string whyNot;
  if (bf16ProductsAvailable(&whyNot))
    GTEST_SKIP() << "oneDNN's bf16 products run here";
  EXPECT_FALSE(whyNot.empty());
  absl::StatusOr<std::unique_ptr<Bf16Products>> made = Bf16Products::create();
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find(whyNot), std::string::npos)
      << made.status();
}

} // namespace
} // namespace triad::rt::cpu
