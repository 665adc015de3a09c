//===- WatchdogTest.cpp - the progress board and the hang watchdog --------===//

#include "runtime/support/Watchdog.h"

#include "gtest/gtest.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace triad::rt {
namespace {

using namespace std::chrono_literals;

TEST(ProgressTest, DescribesWhereTheRankIs) {
  Progress progress;
  EXPECT_EQ(progress.describe(), "before step 1");
  progress.beginStep(12);
  progress.beginCall("microbatch_step", 2);
  EXPECT_EQ(progress.describe(),
            "step 12, call microbatch_step (microbatch 2), finishing the call");
  progress.instruction(57, "AllReduce");
  std::string peers = "ranks 0, 1";
  progress.beginWait({"the collective", 41, "AllGather", &peers});
  EXPECT_EQ(progress.describe(),
            "step 12, call microbatch_step (microbatch 2), instruction 57 "
            "(AllReduce), waiting for the collective of instruction 41 "
            "(AllGather: ranks 0, 1)");
  progress.endWait();
  EXPECT_EQ(progress.describe(), "step 12, call microbatch_step (microbatch "
                                 "2), instruction 57 (AllReduce)");
  progress.phase("saving a checkpoint");
  EXPECT_EQ(progress.describe(), "step 12, saving a checkpoint");
}

TEST(ProgressTest, OnlyAdvancingMarksProgress) {
  Progress progress;
  auto before = progress.lastProgress();
  std::this_thread::sleep_for(5ms);
  progress.beginWait({"the transfer", 3, "Recv", nullptr});
  EXPECT_EQ(progress.lastProgress(), before); // waiting is not progress
  progress.endWait();
  EXPECT_GT(progress.lastProgress(), before);
}

TEST(WatchdogTest, ReportsARankThatStopsProgressing) {
  Progress progress;
  progress.beginStep(3);
  progress.beginCall("apply_step", 0);
  progress.instruction(1, "Reciprocal");
  std::string peers = "ranks 1, 3";
  progress.beginWait({"the collective", 0, "AllReduce", &peers});
  std::promise<std::string> reported;
  auto started = std::chrono::steady_clock::now();
  Watchdog watchdog(
      progress, 200ms,
      [&](const std::string &report) { reported.set_value(report); }, 10ms);
  std::future<std::string> report = reported.get_future();
  ASSERT_EQ(report.wait_for(5s), std::future_status::ready);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 200ms);
  EXPECT_EQ(report.get(),
            "no progress for 0 s: step 3, call apply_step (microbatch 0), "
            "instruction 1 (Reciprocal), waiting for the collective of "
            "instruction 0 (AllReduce: ranks 1, 3)");
}

TEST(WatchdogTest, StaysQuietWhileTheRankProgresses) {
  Progress progress;
  std::atomic<int> hangs{0};
  {
    Watchdog watchdog(
        progress, 150ms, [&](const std::string &) { ++hangs; }, 10ms);
    // 600 ms of instructions 20 ms apart: never 150 ms without progress.
    for (int i = 0; i < 30; ++i) {
      progress.instruction(i, "Matmul");
      std::this_thread::sleep_for(20ms);
    }
  } // stops the thread promptly
  EXPECT_EQ(hangs.load(), 0);
}

TEST(WatchdogTest, StopsPromptlyWhenDestroyed) {
  Progress progress;
  auto started = std::chrono::steady_clock::now();
  {
    Watchdog watchdog(
        progress, 3600s, [](const std::string &) {}, 1000ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 500ms);
}

} // namespace
} // namespace triad::rt
