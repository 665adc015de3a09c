//===- VectorMath.h - exp, erf and tanh that vectorize ------------*- C++
//-*-===//
//
// Branch-free, call-free fp32 versions of the transcendental functions the
// elementwise kernels need, so that a loop over an array of them compiles
// to SIMD code (std::exp and std::erf are library calls, one element at a
// time). Their errors are far below what the kernels' tests allow (1e-5
// relative to the float64 reference):
//  - expf:  within 2 ulp of e^x on [-87.3, 88]; exactly 0 below -87.3
//    (so -inf gives 0), e^88 above 88; NaN stays NaN;
//  - erff:  within 5e-7 of erf(x) absolutely (Abramowitz and Stegun 7.1.26,
//    1.5e-7, on top of expf and fp32 rounding);
//  - tanhf: within 3e-7 of tanh(x) absolutely.
//
// TRIAD_VECTOR_CLONES compiles a function twice, for the baseline x86-64
// and for AVX2, and picks at load time by the CPU's features (GCC's
// target_clones; without FMA contraction, so both give the same bits); the
// kernels put it on the loops that call these functions, and everything a
// clone calls is TRIAD_ALWAYS_INLINE so that it compiles for the clone's
// target.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CPU_VECTORMATH_H
#define TRIAD_RUNTIME_KERNELS_CPU_VECTORMATH_H

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    !defined(__SANITIZE_ADDRESS__)
#define TRIAD_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TRIAD_VECTOR_CLONES
#endif

// The clones inline what they call, so that it compiles for their target.
#if defined(__GNUC__)
#define TRIAD_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TRIAD_ALWAYS_INLINE inline
#endif

namespace triad::rt::cpu::vmath {

TRIAD_ALWAYS_INLINE float expf(float x) {
  const float lo = -87.33654f, hi = 88.0f;
  const float log2e = 1.44269504088896341f;
  // ln 2 in two parts: n * ln2Hi is exact for the n that occur.
  const float ln2Hi = 0.693359375f, ln2Lo = -2.12194440e-4f;
  float c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  // n = round(c / ln 2): adding 1.5 * 2^23 rounds to an integer.
  const float shifter = 12582912.0f;
  float n = (c * log2e + shifter) - shifter;
  float r = c - n * ln2Hi;
  r = r - n * ln2Lo;
  // e^r on [-ln2 / 2, ln2 / 2] (Cephes' expf polynomial).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n from its exponent bits.
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float result = p * scale;
  result = x < lo ? 0.0f : result;
  return x != x ? x : result;
}

TRIAD_ALWAYS_INLINE float erff(float x) {
  float a = x < 0.0f ? -x : x;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  float y = 1.0f - poly * t * expf(-a * a);
  return x < 0.0f ? -y : y;
}

TRIAD_ALWAYS_INLINE float tanhf(float x) {
  // 1 - 2 / (e^(2x) + 1), odd by construction.
  float a = x < 0.0f ? -x : x;
  float y = 1.0f - 2.0f / (expf(2.0f * a) + 1.0f);
  return x < 0.0f ? -y : y;
}

TRIAD_ALWAYS_INLINE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

} // namespace triad::rt::cpu::vmath

#endif // TRIAD_RUNTIME_KERNELS_CPU_VECTORMATH_H
