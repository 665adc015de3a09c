//===- Init.cpp - parameter initialization by global element index --------===//

#include "runtime/init/Init.h"

#include <cmath>

namespace triad::rt {

PhiloxKey parameterKey(uint64_t seed, std::string_view name) {
  // FNV-1a over the name, then a SplitMix64 finalizer with the seed.
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 0x100000001B3ull;
  }
  uint64_t z = hash ^ (seed + 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return {static_cast<uint32_t>(z), static_cast<uint32_t>(z >> 32)};
}

double standardNormal(PhiloxKey key, uint64_t index) {
  uint64_t pair = index / 2;
  PhiloxCounter bits = philox4x32(
      {static_cast<uint32_t>(pair), static_cast<uint32_t>(pair >> 32), 0u, 0u},
      key);
  // Box-Muller: two uniforms give two independent normals.
  double u1 = uint32ToOpenUnit(bits[0]);
  double u2 = uint32ToOpenUnit(bits[1]);
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * M_PI * u2;
  return index % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle);
}

void fillNormal(uint64_t seed, std::string_view name, double stddev,
                uint64_t first, uint64_t count, float *out) {
  PhiloxKey key = parameterKey(seed, name);
  for (uint64_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(stddev * standardNormal(key, first + i));
}

} // namespace triad::rt
