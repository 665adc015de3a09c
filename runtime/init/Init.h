//===- Init.h - parameter initialization by global element index -*- C++
//-*-===//
//
// Every parameter element is a function of (seed, parameter name, global
// element index): the key comes from the seed and the name, the counter from
// the index. A rank holding any slice of a tensor generates exactly the
// values a single device holds at those indices (DESIGN.md section 5, Init).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_INIT_INIT_H
#define TRIAD_RUNTIME_INIT_INIT_H

#include "runtime/init/Philox.h"

#include <cstdint>
#include <string_view>

namespace triad::rt {

/// The Philox key of a parameter: a hash of its name mixed with the seed.
PhiloxKey parameterKey(uint64_t seed, std::string_view name);

/// The standard normal deviate for global element `index` of the stream
/// keyed by `key` (Box-Muller on one Philox block per pair of elements).
double standardNormal(PhiloxKey key, uint64_t index);

/// Fills `out[i]` with `stddev * N(0, 1)` for the global indices
/// `first, first + 1, ..., first + count - 1` of the parameter.
void fillNormal(uint64_t seed, std::string_view name, double stddev,
                uint64_t first, uint64_t count, float *out);
/// The same in the stream keyed by `key` (parameterKey).
void fillNormal(PhiloxKey key, double stddev, uint64_t first, uint64_t count,
                float *out);

/// The uniform deviate in (0, 1) that decides whether dropout keeps global
/// element `index` of the dropout op with stream `stream` at training step
/// `step`: the element is kept when the deviate is at least the dropout
/// probability. The same on every mesh and in every backend.
double dropoutUniform(uint64_t seed, uint64_t step, uint64_t stream,
                      uint64_t index);

/// Where a piece of a dropout's tensor sits in the whole: its element `i`
/// is global element `first + (i / run) * stride + i % run`. A piece of the
/// batch is one run (`run` at least its size); a piece of each sample's
/// sequence is a run per sample, `stride` apart.
struct DropoutPiece {
  uint64_t first = 0;
  uint64_t run = UINT64_MAX, stride = 0;
  uint64_t globalIndex(uint64_t i) const {
    return first + (i / run) * stride + i % run;
  }
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_INIT_INIT_H
