//===- StepMath.h - the scalar formulas of an optimizer step -----*- C++
//-*-===//
//
// The plan's scalar ops (LrSchedule, ClipCoefficient, LossScaleUpdate,
// Reciprocal) as inline functions that both backends call: the CPU
// executor on the host, the CUDA backend inside a one-thread kernel (the
// scalars live on the device, and reading them back would stall the
// stream). One definition keeps the two bit-identical: every formula works
// in double and rounds to f32 once, at the end.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_STEPMATH_H
#define TRIAD_RUNTIME_KERNELS_STEPMATH_H

#include "runtime/support/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace triad::rt::stepmath {

/// Whether `x` is neither infinite nor NaN (x - x is NaN exactly then),
/// without the host or device library's classification functions.
TRIAD_HOST_DEVICE inline bool isFinite(double x) { return x - x == 0.0; }

/// The learning rate at optimizer step `step`: linear warmup to `peak`
/// over `warmup` steps, then (with `decay` > 0) a cosine decay to `floor`
/// at step `decay`, `floor` after it; `decay` 0 keeps `peak`.
TRIAD_HOST_DEVICE inline float learningRate(double step, double peak,
                                            double floor, int64_t warmup,
                                            int64_t decay) {
  constexpr double kPi = 3.14159265358979323846;
  double lr = peak;
  if (warmup > 0 && step <= static_cast<double>(warmup))
    lr = peak * step / static_cast<double>(warmup);
  else if (decay != 0 && decay <= warmup)
    lr = floor;
  else if (decay != 0) {
    double progress = (step - static_cast<double>(warmup)) /
                      static_cast<double>(decay - warmup);
    progress = progress < 0.0 ? 0.0 : progress > 1.0 ? 1.0 : progress;
    lr = floor + 0.5 * (peak - floor) * (1.0 + cos(kPi * progress));
  }
  return static_cast<float>(lr);
}

/// The factor that scales gradients of global norm sqrt(`sumSquares`) to
/// at most `maxNorm` (1 when `maxNorm` is 0: no clipping), and the norm.
struct Clip {
  float coefficient, norm;
};
TRIAD_HOST_DEVICE inline Clip clipCoefficient(float sumSquares,
                                              double maxNorm) {
  double norm = sqrt(static_cast<double>(sumSquares));
  double coefficient = 1.0;
  if (maxNorm != 0.0) {
    double ratio = maxNorm / (norm + 1e-6);
    coefficient = ratio < 1.0 ? ratio : 1.0;
  }
  return {static_cast<float>(coefficient), static_cast<float>(norm)};
}

/// Dynamic loss scaling after a step whose gradients have `sumSquares`:
/// a non-finite sum skips the step and backs the scale off (not below 1);
/// `interval` finite steps in a row grow it.
struct LossScale {
  float skip, scale, goodSteps, inverse;
};
TRIAD_HOST_DEVICE inline LossScale
lossScaleUpdate(float sumSquares, float scale, float good, double growth,
                double backoff, int64_t interval) {
  bool finite = isFinite(sumSquares);
  double next = scale, goodNext = static_cast<double>(good) + 1.0;
  if (!finite) {
    double backedOff = static_cast<double>(scale) * backoff;
    next = backedOff > 1.0 ? backedOff : 1.0;
    goodNext = 0.0;
  } else if (goodNext >= static_cast<double>(interval)) {
    next = static_cast<double>(scale) * growth;
    goodNext = 0.0;
  }
  return {finite ? 0.0f : 1.0f, static_cast<float>(next),
          static_cast<float>(goodNext),
          static_cast<float>(1.0 / static_cast<double>(scale))};
}

/// 1 / x, and 0 for 0 (a microbatch count of no valid labels).
TRIAD_HOST_DEVICE inline float reciprocal(float x) {
  return x == 0.0f ? 0.0f : 1.0f / x;
}

} // namespace triad::rt::stepmath

#endif // TRIAD_RUNTIME_KERNELS_STEPMATH_H
