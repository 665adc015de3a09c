//===- AsyncWait.h - waits for device communication that may never end -*- C++
//-*-===//
//
// A host that waits for GPU work including NCCL operations must not block
// in cudaStreamSynchronize: when a peer dies, NCCL's kernels wait for it
// forever, and NCCL reports the failure only through
// ncclCommGetAsyncError, which a blocked host never calls. waitPolling
// polls instead: whether the work is done, the state of every communicator
// and the time. On a communicator's error, a failure of the work itself or
// the timeout, it aborts the communicators (ncclCommAbort ends their
// kernels, so the device can be used, synchronized and freed again) and
// returns the error, naming the communicator and what was waited for.
//
// It knows nothing of CUDA or NCCL: they come in as callables (as does the
// clock), so its logic is tested without a GPU (CommTest.cpp). The NCCL
// communicator (comm/nccl/NcclCommunicator.h) supplies them.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_ASYNCWAIT_H
#define TRIAD_RUNTIME_COMM_ASYNCWAIT_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace triad::rt {

/// One communicator as ncclCommGetAsyncError sees it: ready, still
/// completing a call that returned "in progress" (a non-blocking
/// communicator's creation, or an operation being enqueued in the
/// background), or failed.
struct CommState {
  enum Kind { Ready, InProgress, Failed };
  Kind kind = Ready;
  /// For Failed: what went wrong (NCCL's error string and its last error's
  /// text).
  std::string error;
};

/// How a wait reads time and pauses; real by default, a fake in tests.
struct WaitClock {
  std::function<std::chrono::steady_clock::time_point()> now;
  /// Pauses the calling thread (0: yields the processor).
  std::function<void(std::chrono::nanoseconds)> sleep;

  /// steady_clock and std::this_thread.
  static WaitClock real();
};

/// What waitPolling waits for.
struct PolledWork {
  /// For messages: "the GPU work of the function", "creating NCCL's
  /// communicator of group 2".
  std::string what;
  /// Whether the work is done (cudaEventQuery: true, false while not
  /// ready), or the error that ends the wait (a CUDA failure).
  std::function<absl::StatusOr<bool>()> done;
  /// The communicators to watch, by index in [0, communicators).
  size_t communicators = 0;
  std::function<CommState(size_t)> state;
  /// For messages: "NCCL's communicator of group 1 [tp] (2 ranks)".
  std::function<std::string(size_t)> name;
  /// Aborts every communicator; called once, on any failure.
  std::function<void()> abort;
};

/// Polls until `work.done()` holds and no communicator is in progress, or
/// fails: a communicator's error (Unavailable, naming it and quoting its
/// error), a failure of `done` (its status, `what` prepended) or, when
/// `timeout` is positive, the timeout (DeadlineExceeded, listing the
/// communicators still in progress). Every failure aborts the
/// communicators first. The pause between polls grows with the time
/// waited, from none (a yield) to 1 ms, so that a short wait ends soon
/// after the work and a long one costs little processor time.
absl::Status waitPolling(const PolledWork &work,
                         std::chrono::milliseconds timeout,
                         const WaitClock &clock = WaitClock::real());

/// How long a wait polled for communication takes at most by default: 600
/// seconds, triad-run's --timeout (runtime/support/Watchdog.h), which sets
/// it in a run.
inline constexpr std::chrono::milliseconds kDefaultCommTimeout =
    std::chrono::seconds(600);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_COMM_ASYNCWAIT_H
