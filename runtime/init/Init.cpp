//===- Init.cpp - parameter initialization by global element index --------===//

#include "runtime/init/Init.h"

#include "runtime/init/PhiloxRounds.h"

#include <cmath>

namespace triad::rt {

namespace {
/// SplitMix64's finalizer: a bijective mix of 64 bits.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

PhiloxKey splitKey(uint64_t z) {
  return {static_cast<uint32_t>(z), static_cast<uint32_t>(z >> 32)};
}
} // namespace

PhiloxKey parameterKey(uint64_t seed, std::string_view name) {
  // FNV-1a over the name, mixed with the seed.
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 0x100000001B3ull;
  }
  return splitKey(mix64(hash ^ (seed + 0x9E3779B97F4A7C15ull)));
}

double dropoutUniform(uint64_t seed, uint64_t step, uint64_t stream,
                      uint64_t index) {
  // A key per (seed, stream), distinct from every parameter key's mixing.
  PhiloxKey key = splitKey(mix64(mix64(seed ^ 0xD1B54A32D192ED03ull) + stream));
  PhiloxCounter bits = philox4x32(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
       static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
      key);
  return openUnit(bits[0]);
}

double standardNormal(PhiloxKey key, uint64_t index) {
  double even, odd;
  normalPair(key[0], key[1], index / 2, even, odd);
  return index % 2 == 0 ? even : odd;
}

void fillNormal(uint64_t seed, std::string_view name, double stddev,
                uint64_t first, uint64_t count, float *out) {
  fillNormal(parameterKey(seed, name), stddev, first, count, out);
}

void fillNormal(PhiloxKey key, double stddev, uint64_t first, uint64_t count,
                float *out) {
  // One Philox block and one Box-Muller transform per pair of elements.
  uint64_t i = 0;
  double even, odd;
  if (count > 0 && first % 2 == 1) {
    normalPair(key[0], key[1], first / 2, even, odd);
    out[i++] = static_cast<float>(stddev * odd);
  }
  for (; i + 1 < count; i += 2) {
    normalPair(key[0], key[1], (first + i) / 2, even, odd);
    out[i] = static_cast<float>(stddev * even);
    out[i + 1] = static_cast<float>(stddev * odd);
  }
  if (i < count) {
    normalPair(key[0], key[1], (first + i) / 2, even, odd);
    out[i] = static_cast<float>(stddev * even);
  }
}

} // namespace triad::rt
