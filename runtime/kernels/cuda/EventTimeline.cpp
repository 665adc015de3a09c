//===- EventTimeline.cpp - device times of enqueued work --------*- C++ -*-===//

#include "runtime/kernels/cuda/EventTimeline.h"

#include "runtime/kernels/cuda/CudaCheck.h"

#include "absl/strings/str_cat.h"

#include <chrono>
#include <cmath>

namespace triad::rt::cuda {

EventTimeline::~EventTimeline() {
  for (cudaEvent_t event : events)
    cudaEventDestroy(event);
  if (anchorEvent)
    cudaEventDestroy(anchorEvent);
}

absl::StatusOr<size_t> EventTimeline::mark(cudaStream_t stream) {
  if (used == events.size()) {
    cudaEvent_t event = nullptr;
    TRIAD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
    events.push_back(event);
  }
  TRIAD_CUDA_RETURN_IF_ERROR(cudaEventRecord(events[used], stream));
  return used++;
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>>
EventTimeline::resolve(cudaStream_t anchor,
                       const std::vector<std::pair<size_t, size_t>> &spans) {
  size_t marked = used;
  used = 0;
  std::vector<std::pair<int64_t, int64_t>> times;
  if (spans.empty())
    return times;
  if (!anchorEvent)
    TRIAD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&anchorEvent));
  TRIAD_CUDA_RETURN_IF_ERROR(cudaEventRecord(anchorEvent, anchor));
  TRIAD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchorEvent));
  int64_t anchorNanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
  auto ran = [&](size_t mark) -> absl::Status {
    if (mark >= marked)
      return absl::InvalidArgumentError(
          absl::StrCat("mark ", mark, " was not made (", marked, " were)"));
    cudaError_t state = cudaEventQuery(events[mark]);
    if (state == cudaErrorNotReady)
      return absl::FailedPreconditionError(
          "a timed span has not run yet: drain its stream first");
    return cudaStatus(state, "cudaEventQuery");
  };
  // cudaEventElapsedTime's milliseconds, in nanoseconds.
  auto nanos = [&](cudaEvent_t from,
                   cudaEvent_t to) -> absl::StatusOr<int64_t> {
    float millis = 0;
    TRIAD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&millis, from, to));
    return std::llround(static_cast<double>(millis) * 1e6);
  };
  times.reserve(spans.size());
  for (auto [begin, end] : spans) {
    for (size_t mark : {begin, end})
      if (absl::Status status = ran(mark); !status.ok())
        return status;
    absl::StatusOr<int64_t> before = nanos(events[begin], anchorEvent);
    if (!before.ok())
      return before.status();
    absl::StatusOr<int64_t> lasted = nanos(events[begin], events[end]);
    if (!lasted.ok())
      return lasted.status();
    times.emplace_back(anchorNanos - *before, anchorNanos - *before + *lasted);
  }
  return times;
}

} // namespace triad::rt::cuda
