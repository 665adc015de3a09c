//===- AsyncWaitTest.cpp - the polled wait for device communication -------===//
//
// waitPolling (runtime/comm/AsyncWait.h), the loop the CUDA executor's
// waits for NCCL run in, on scripted work, communicators and a fake clock:
// it ends when the work is done and no communicator is in progress, ends
// at a communicator's asynchronous error or the work's own failure with
// their text, times out, and aborts the communicators on every failure and
// only then. None of it needs a GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/AsyncWait.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

using namespace triad::rt;
using namespace std::chrono_literals;

namespace {

/// A clock that moves only when the wait pauses (a yield costs a
/// microsecond), recording every pause.
struct FakeClock {
  std::chrono::steady_clock::time_point now{};
  std::vector<std::chrono::nanoseconds> pauses;

  WaitClock clock() {
    return {[this] { return now; },
            [this](std::chrono::nanoseconds pause) {
              pauses.push_back(pause);
              now += pause.count() > 0 ? pause : std::chrono::nanoseconds(1us);
            }};
  }
  std::chrono::nanoseconds elapsed() const {
    return now - std::chrono::steady_clock::time_point{};
  }
};

/// Work done after `pendingPolls` polls, over communicators whose states
/// come from `states` (the communicator, the poll it is asked at), and a
/// count of the aborts.
struct Script {
  int pendingPolls = 0;
  int polls = 0, aborts = 0;
  size_t communicators = 2;
  std::function<CommState(size_t, int)> states = [](size_t, int) {
    return CommState{};
  };

  PolledWork work() {
    PolledWork w;
    w.what = "the GPU work of this call";
    w.done = [this]() -> absl::StatusOr<bool> {
      return ++polls > pendingPolls;
    };
    w.communicators = communicators;
    w.state = [this](size_t i) { return states(i, polls); };
    w.name = [](size_t i) {
      return "NCCL's communicator of group " + std::to_string(i) + " [tp]";
    };
    w.abort = [this] { ++aborts; };
    return w;
  }
};

TEST(AsyncWait, EndsWhenTheWorkIsDone) {
  FakeClock fake;
  Script script;
  script.pendingPolls = 5;
  absl::Status status = waitPolling(script.work(), 600s, fake.clock());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(script.polls, 6);
  EXPECT_EQ(script.aborts, 0);
  // Five pauses between the six polls, each a yield this early on.
  ASSERT_EQ(fake.pauses.size(), 5u);
  for (std::chrono::nanoseconds pause : fake.pauses)
    EXPECT_EQ(pause.count(), 0);
}

TEST(AsyncWait, AnAsynchronousErrorEndsTheWaitWithItsTextAndAborts) {
  FakeClock fake;
  Script script;
  script.pendingPolls = 1000; // never done before the error
  const std::string error =
      "remote process exited or there was a network error (NET/IB : "
      "connection closed by peer 10.0.0.7)";
  script.states = [&](size_t i, int poll) {
    if (i == 1 && poll >= 3)
      return CommState{CommState::Failed, error};
    return CommState{};
  };
  absl::Status status = waitPolling(script.work(), 600s, fake.clock());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(),
            "NCCL's communicator of group 1 [tp] failed while waiting for the "
            "GPU work of this call: " +
                error + "; NCCL's communicators were aborted");
  EXPECT_EQ(script.aborts, 1);
  // It stopped polling at the error.
  EXPECT_EQ(script.polls, 3);
}

TEST(AsyncWait, AFailureOfTheWorkItselfAborts) {
  FakeClock fake;
  Script script;
  PolledWork work = script.work();
  work.done = []() -> absl::StatusOr<bool> {
    return absl::InternalError("cudaEventQuery failed: an illegal memory "
                               "access was encountered");
  };
  absl::Status status = waitPolling(work, 600s, fake.clock());
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(),
            "the GPU work of this call: cudaEventQuery failed: an illegal "
            "memory access was encountered; NCCL's communicators were "
            "aborted");
  EXPECT_EQ(script.aborts, 1);
}

TEST(AsyncWait, TimesOutAndAborts) {
  FakeClock fake;
  Script script;
  script.pendingPolls = 1 << 30;
  absl::Status status = waitPolling(script.work(), 2s, fake.clock());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(),
            "the GPU work of this call did not complete within 2 s and NCCL "
            "reported no error: a peer has likely stopped, hung or fallen far "
            "behind; NCCL's communicators were aborted");
  EXPECT_EQ(script.aborts, 1);
  // Found within a pause of the timeout: the pauses grow to 1 ms and no
  // further.
  EXPECT_GE(fake.elapsed(), 2s);
  EXPECT_LE(fake.elapsed(), 2s + 1ms);
  std::chrono::nanoseconds longest{0};
  for (std::chrono::nanoseconds pause : fake.pauses)
    longest = std::max(longest, pause);
  EXPECT_EQ(longest, std::chrono::nanoseconds(1ms));
  // A wait of 2 s polls about a thousand times a second, not millions.
  EXPECT_LT(script.polls, 3000);
}

TEST(AsyncWait, ATimeoutNamesTheCommunicatorsStillInProgress) {
  FakeClock fake;
  Script script;
  script.pendingPolls = 0; // the stream is done; a communicator is not
  script.states = [](size_t i, int) {
    return i == 0 ? CommState{CommState::InProgress, ""} : CommState{};
  };
  absl::Status status = waitPolling(script.work(), 250ms, fake.clock());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("within 250 ms"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find(
                "still in progress: NCCL's communicator of group 0 [tp]"),
            std::string::npos)
      << status;
  EXPECT_EQ(script.aborts, 1);
}

TEST(AsyncWait, InProgressThenReadySucceeds) {
  // A non-blocking communicator's creation (or an enqueue that sets up a
  // connection): in progress for a while, then ready; the work itself is
  // done from the start.
  FakeClock fake;
  Script script;
  script.states = [](size_t i, int poll) {
    return i == 1 && poll < 40 ? CommState{CommState::InProgress, ""}
                               : CommState{};
  };
  absl::Status status = waitPolling(script.work(), 600s, fake.clock());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(script.polls, 41);
  EXPECT_EQ(script.aborts, 0);
}

TEST(AsyncWait, NoTimeoutWaitsAsLongAsItTakes) {
  FakeClock fake;
  Script script;
  script.communicators = 0;
  // Done after about 5 simulated seconds of 1 ms pauses.
  script.pendingPolls = 5100;
  absl::Status status =
      waitPolling(script.work(), std::chrono::milliseconds(0), fake.clock());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_GT(fake.elapsed(), 4s);
  EXPECT_EQ(script.aborts, 0);
}

TEST(AsyncWait, TheRealClockTimesOutToo) {
  Script script;
  script.pendingPolls = 1 << 30;
  auto begin = std::chrono::steady_clock::now();
  absl::Status status = waitPolling(script.work(), 20ms);
  auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(script.aborts, 1);
  EXPECT_GE(took, 20ms);
  EXPECT_LT(took, 2s); // generous: a loaded machine may be slow to wake
}

} // namespace
