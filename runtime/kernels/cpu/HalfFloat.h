//===- HalfFloat.h - bf16 and f16 storage, f32 arithmetic --------*- C++
//-*-===//
//
// The CPU backend keeps 16-bit tensors as their bits and computes in f32:
// a kernel reads its 16-bit operands widened to f32 (exact) and its 16-bit
// results are rounded back, to nearest with ties to even, as a GPU's
// conversions do. NaNs stay NaNs (quiet), infinities stay infinities, f16
// keeps its subnormals, and f32 values beyond f16's range round to its
// infinity.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CPU_HALFFLOAT_H
#define TRIAD_RUNTIME_KERNELS_CPU_HALFFLOAT_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace triad::rt::cpu {

inline uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

inline float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

/// bf16: the high half of an f32.
inline uint16_t toBf16(float value) {
  uint32_t bits = bitsOf(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it, quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float fromBf16(uint16_t half) {
  return floatOf(static_cast<uint32_t>(half) << 16);
}

/// f16: 1 sign, 5 exponent and 10 mantissa bits.
inline uint16_t toF16(float value) {
  uint32_t bits = bitsOf(value);
  auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN
    return static_cast<uint16_t>(sign | 0x7e00u);
  if (magnitude >= 0x477ff000u) // 65520 and up round to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) { // below 2^-14: f16's subnormals
    // In units of 2^-24 the value is below 2^10, so the scaling is exact
    // and nearbyint rounds to nearest even.
    float units = std::nearbyint(floatOf(magnitude) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  uint32_t exponent = (magnitude >> 23) - 127 + 15;
  uint32_t mantissa = magnitude & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half; // a carry moves into the exponent, as it should
  return static_cast<uint16_t>(sign | half);
}

inline float fromF16(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)
    return floatOf(sign | 0x7f800000u | (mantissa << 13));
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

/// `count` 16-bit values (bf16 when `bf16`, else f16) widened into `out`.
/// Widens `count` 16-bit values (bf16 or f16) to f32, exactly; in parallel
/// and vectorized over large arrays (HalfFloat.cpp).
void widen(bool bf16, const uint16_t *in, float *out, int64_t count);

/// Rounds `count` f32 values to bf16 or f16, to nearest even, as toBf16 and
/// toF16 do one value.
void narrow(bool bf16, const float *in, uint16_t *out, int64_t count);

} // namespace triad::rt::cpu

#endif // TRIAD_RUNTIME_KERNELS_CPU_HALFFLOAT_H
