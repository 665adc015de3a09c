//===- PhiloxRounds.h - Philox4x32-10 and Box-Muller, host and device -*- C++
//-*-===//
//
// The arithmetic of Philox.h and Init.h's normal deviates, written once for
// the host and the GPU: the CUDA kernels that draw dropout masks and initial
// values compile the same rounds and the same Box-Muller transform. The
// bits of a Philox block are the same everywhere; a normal deviate is the
// same up to the device's log, sin and cos (CUDA's double functions are
// within 2 ulp, glibc's within 1), which the rounding to f32 almost always
// hides.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_INIT_PHILOXROUNDS_H
#define TRIAD_RUNTIME_INIT_PHILOXROUNDS_H

#include "runtime/support/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace triad::rt {

/// A 128-bit Philox counter or block, word 0 first.
struct PhiloxWords {
  uint32_t w0, w1, w2, w3;
};

/// Philox4x32 with 10 rounds of `counter` under the key (key0, key1).
TRIAD_HOST_DEVICE inline PhiloxWords
philoxRounds(PhiloxWords counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    const uint64_t product0 = static_cast<uint64_t>(0xD2511F53u) * counter.w0;
    const uint64_t product1 = static_cast<uint64_t>(0xCD9E8D57u) * counter.w2;
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter.w1 ^ key0,
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter.w3 ^ key1,
               static_cast<uint32_t>(product0)};
  }
  return counter;
}

/// 32 random bits as a double in the open interval (0, 1).
TRIAD_HOST_DEVICE inline double openUnit(uint32_t bits) {
  return (static_cast<double>(bits) + 0.5) * (1.0 / 4294967296.0);
}

/// Both normal deviates of Philox pair `pair` under the key (global
/// elements 2 pair and 2 pair + 1): Box-Muller on the block's first two
/// words.
TRIAD_HOST_DEVICE inline void normalPair(uint32_t key0, uint32_t key1,
                                         uint64_t pair, double &even,
                                         double &odd) {
  PhiloxWords bits = philoxRounds(
      {static_cast<uint32_t>(pair), static_cast<uint32_t>(pair >> 32), 0u, 0u},
      key0, key1);
  double u1 = openUnit(bits.w0);
  double u2 = openUnit(bits.w1);
  double radius = sqrt(-2.0 * log(u1));
  double angle = 2.0 * M_PI * u2;
  even = radius * cos(angle);
  odd = radius * sin(angle);
}

} // namespace triad::rt

#endif // TRIAD_RUNTIME_INIT_PHILOXROUNDS_H
