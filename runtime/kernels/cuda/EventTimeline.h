//===- EventTimeline.h - device times of enqueued work ----------*- C++ -*-===//
//
// Times work on the GPU without waiting for it: `mark` records a timing
// event on a stream where the work it brackets is enqueued, and `resolve`,
// once everything marked has run, turns every mark into the host's steady
// clock. The device clock is tied to the host's by one more event, recorded
// on an idle stream and waited for: its time is taken as the host's time
// right after the wait (to within the wait's return, microseconds). Marks
// on different streams of one device are on one clock, so spans on a
// compute stream and on a communication stream show their overlap.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_EVENTTIMELINE_H
#define TRIAD_RUNTIME_KERNELS_CUDA_EVENTTIMELINE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace triad::rt::cuda {

class EventTimeline {
public:
  EventTimeline() = default;
  ~EventTimeline();
  EventTimeline(const EventTimeline &) = delete;
  EventTimeline &operator=(const EventTimeline &) = delete;

  /// Records a timing event on `stream` after the work enqueued on it so
  /// far; returns its number among the marks since the last resolve.
  absl::StatusOr<size_t> mark(cudaStream_t stream);
  /// The marks since the last resolve.
  size_t marks() const { return used; }
  /// The spans between the marks of `spans` (pairs of numbers of marks
  /// since the last resolve: begin, end) in nanoseconds of the host's
  /// steady clock, by pair: the begin tied to the host's clock through an
  /// anchor recorded on stream `anchor`, the duration measured between the
  /// two marks themselves. Every mark must have run (the streams drained):
  /// one still pending is a FailedPrecondition error, not a wait. The marks
  /// are then free for reuse, whatever the answer.
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>>
  resolve(cudaStream_t anchor,
          const std::vector<std::pair<size_t, size_t>> &spans);
  /// Forgets the marks since the last resolve (their events are reused).
  void clear() { used = 0; }

private:
  /// Events with timing, reused from one resolve to the next; the first
  /// `used` are marked.
  std::vector<cudaEvent_t> events;
  size_t used = 0;
  cudaEvent_t anchorEvent = nullptr;
};

} // namespace triad::rt::cuda

#endif // TRIAD_RUNTIME_KERNELS_CUDA_EVENTTIMELINE_H
