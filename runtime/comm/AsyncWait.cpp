//===- AsyncWait.cpp - waits for device communication that may never end --===//

#include "runtime/comm/AsyncWait.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace triad::rt {

namespace {

std::string durationText(std::chrono::milliseconds duration) {
  if (duration.count() % 1000 == 0)
    return absl::StrCat(duration.count() / 1000, " s");
  return absl::StrCat(duration.count(), " ms");
}

/// The pause after having waited `waited`: none at first (work that is
/// about to finish should not cost a sleep's granularity), then a 64th of
/// the time waited, so that a wait ends at most 1.6% after its work (the
/// executor waits like this for every call of a step), and at most 1 ms
/// (a thousand polls a second: a hang is found within a millisecond of its
/// timeout, at little processor time).
std::chrono::nanoseconds pauseAfter(std::chrono::nanoseconds waited) {
  if (waited < std::chrono::microseconds(100))
    return std::chrono::nanoseconds(0);
  return std::min<std::chrono::nanoseconds>(waited / 64,
                                            std::chrono::milliseconds(1));
}

} // namespace

WaitClock WaitClock::real() {
  return {[] { return std::chrono::steady_clock::now(); },
          [](std::chrono::nanoseconds pause) {
            if (pause.count() <= 0)
              std::this_thread::yield();
            else
              std::this_thread::sleep_for(pause);
          }};
}

absl::Status waitPolling(const PolledWork &work,
                         std::chrono::milliseconds timeout,
                         const WaitClock &clock) {
  auto start = clock.now();
  auto aborted = [&](absl::StatusCode code, const std::string &message) {
    work.abort();
    return absl::Status(
        code, absl::StrCat(message, "; NCCL's communicators were aborted"));
  };
  std::vector<size_t> inProgress;
  while (true) {
    // The communicators first: an operation that failed never completes,
    // so its error must end the wait while the work is still pending.
    inProgress.clear();
    for (size_t i = 0; i < work.communicators; ++i) {
      CommState state = work.state(i);
      if (state.kind == CommState::Failed)
        return aborted(absl::StatusCode::kUnavailable,
                       absl::StrCat(work.name(i), " failed while waiting for ",
                                    work.what, ": ", state.error));
      if (state.kind == CommState::InProgress)
        inProgress.push_back(i);
    }
    absl::StatusOr<bool> done = work.done();
    if (!done.ok())
      return aborted(done.status().code(),
                     absl::StrCat(work.what, ": ", done.status().message()));
    if (*done && inProgress.empty())
      return absl::OkStatus();
    std::chrono::nanoseconds waited = clock.now() - start;
    if (timeout.count() > 0 && waited >= timeout) {
      std::string message = absl::StrCat(
          work.what, " did not complete within ", durationText(timeout),
          " and NCCL reported no error: a peer has likely "
          "stopped, hung or fallen far behind");
      if (!inProgress.empty()) {
        std::vector<std::string> names;
        for (size_t i : inProgress)
          names.push_back(work.name(i));
        absl::StrAppend(&message,
                        "; still in progress: ", absl::StrJoin(names, ", "));
      }
      return aborted(absl::StatusCode::kDeadlineExceeded, message);
    }
    clock.sleep(pauseAfter(waited));
  }
}

} // namespace triad::rt
