//===- HalfFloat.cpp - bulk conversions between 16-bit and f32 ------------===//
//
// The CPU backend keeps bf16 and f16 values in the arena and runs every
// kernel on f32 copies, so every 16-bit operand is converted once per
// kernel call: these loops are written branch-free (a select for NaN and
// the rounding) so that they vectorize, and large arrays are split over
// the OpenMP threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/HalfFloat.h"

namespace triad::rt::cpu {

namespace {

/// Below this many values one thread converts (a parallel region costs
/// more than the work).
constexpr int64_t kParallelCount = 1 << 15;

/// toBf16 without branches: the NaN case is a select.
inline uint16_t toBf16Select(float value) {
  uint32_t bits = bitsOf(value);
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  uint32_t quiet = (bits >> 16) | 0x0040u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet
                                                                  : rounded);
}

} // namespace

void widen(bool bf16, const uint16_t *in, float *out, int64_t count) {
  if (bf16) {
#pragma omp parallel for simd schedule(static) if (count >= kParallelCount)
    for (int64_t i = 0; i < count; ++i)
      out[i] = fromBf16(in[i]);
    return;
  }
#pragma omp parallel for schedule(static) if (count >= kParallelCount)
  for (int64_t i = 0; i < count; ++i)
    out[i] = fromF16(in[i]);
}

void narrow(bool bf16, const float *in, uint16_t *out, int64_t count) {
  if (bf16) {
#pragma omp parallel for simd schedule(static) if (count >= kParallelCount)
    for (int64_t i = 0; i < count; ++i)
      out[i] = toBf16Select(in[i]);
    return;
  }
#pragma omp parallel for schedule(static) if (count >= kParallelCount)
  for (int64_t i = 0; i < count; ++i)
    out[i] = toF16(in[i]);
}

} // namespace triad::rt::cpu
