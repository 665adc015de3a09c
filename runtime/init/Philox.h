//===- Philox.h - the Philox4x32-10 counter-based generator -------*- C++
//-*-===//
//
// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11): a bijection of a 128-bit counter under a 64-bit key.
// Random values are pure functions of (key, counter), so any element of any
// tensor can be generated independently, on any rank, in any order.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_INIT_PHILOX_H
#define TRIAD_RUNTIME_INIT_PHILOX_H

#include <array>
#include <cstdint>

namespace triad::rt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

/// Philox4x32-10 of `counter` under `key`.
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_INIT_PHILOX_H
