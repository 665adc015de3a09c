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

/// out[i] = convert(in[i]) for i < count: over the threads for a large
/// array, and otherwise on this thread without entering an OpenMP
/// construct at all (an `if` clause that turns the parallel region off
/// still costs a microsecond or more per call, a chunk's whole work: the
/// element-wise kernels on 16-bit values convert 4,096 at a time).
template <typename In, typename Out, typename Convert>
void convertAll(const In *in, Out *out, int64_t count, Convert convert) {
  if (count < kParallelCount) {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i)
      out[i] = convert(in[i]);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i)
    out[i] = convert(in[i]);
}

} // namespace

// (Lambdas, not the functions: a function pointer would not be inlined
// into the vectorized loop.)
void widen(bool bf16, const uint16_t *in, float *out, int64_t count) {
  if (bf16)
    convertAll(in, out, count, [](uint16_t h) { return fromBf16(h); });
  else
    convertAll(in, out, count, [](uint16_t h) { return fromF16(h); });
}

void narrow(bool bf16, const float *in, uint16_t *out, int64_t count) {
  if (bf16)
    convertAll(in, out, count, [](float v) { return toBf16Select(v); });
  else
    convertAll(in, out, count, [](float v) { return toF16(v); });
}

} // namespace triad::rt::cpu
