//===- InitTest.cpp - Philox and parameter initialization -----------------===//

#include "runtime/init/Init.h"
#include "runtime/init/Philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace triad::rt;

// Known-answer vectors of Philox4x32-10 from the Random123 distribution
// (kat_vectors): counter, key, expected output.
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Init, KeysDependOnSeedAndName) {
  EXPECT_EQ(parameterKey(1, "layers.0.attn.wq.weight"),
            parameterKey(1, "layers.0.attn.wq.weight"));
  EXPECT_NE(parameterKey(1, "layers.0.attn.wq.weight"),
            parameterKey(2, "layers.0.attn.wq.weight"));
  EXPECT_NE(parameterKey(1, "layers.0.attn.wq.weight"),
            parameterKey(1, "layers.1.attn.wq.weight"));
}

// A slice generated on its own equals the same indices of the whole tensor:
// the property that lets every rank initialize its shard independently.
TEST(Init, SlicesMatchTheWholeTensor) {
  constexpr uint64_t kCount = 1001;
  std::vector<float> whole(kCount);
  fillNormal(42, "embed.wte", 0.02, 0, kCount, whole.data());
  for (uint64_t first : {0ull, 1ull, 2ull, 333ull, 1000ull}) {
    uint64_t count = std::min<uint64_t>(77, kCount - first);
    std::vector<float> slice(count);
    fillNormal(42, "embed.wte", 0.02, first, count, slice.data());
    for (uint64_t i = 0; i < count; ++i)
      ASSERT_EQ(slice[i], whole[first + i]) << "index " << first + i;
  }
}

TEST(Init, NormalMomentsAreStandard) {
  constexpr int kCount = 200000;
  PhiloxKey key = parameterKey(7, "moments");
  double sum = 0, sumSquares = 0, sumFourth = 0;
  for (int i = 0; i < kCount; ++i) {
    double x = standardNormal(key, i);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sumSquares += x * x;
    sumFourth += x * x * x * x;
  }
  double mean = sum / kCount;
  double variance = sumSquares / kCount - mean * mean;
  // Standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032.
  EXPECT_NEAR(mean, 0.0, 0.012);
  EXPECT_NEAR(variance, 1.0, 0.016);
  EXPECT_NEAR(sumFourth / kCount, 3.0, 0.1);
}

TEST(Init, DropoutDeviatesAreUniformAndKeyedByStepAndStream) {
  constexpr int kCount = 100000;
  int below = 0;
  double sum = 0;
  for (int i = 0; i < kCount; ++i) {
    double u = dropoutUniform(3, 5, 1, i);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    below += u < 0.1;
  }
  EXPECT_NEAR(sum / kCount, 0.5, 0.005);
  EXPECT_NEAR(below / double(kCount), 0.1, 0.005);
  EXPECT_EQ(dropoutUniform(3, 5, 1, 17), dropoutUniform(3, 5, 1, 17));
  EXPECT_NE(dropoutUniform(3, 5, 1, 17), dropoutUniform(3, 6, 1, 17));
  EXPECT_NE(dropoutUniform(3, 5, 1, 17), dropoutUniform(3, 5, 2, 17));
  EXPECT_NE(dropoutUniform(3, 5, 1, 17), dropoutUniform(4, 5, 1, 17));
}
