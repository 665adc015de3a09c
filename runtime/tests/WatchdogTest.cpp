//===- WatchdogTest.cpp - the progress board and the hang watchdog --------===//

#include "runtime/support/Watchdog.h"

#include "gtest/gtest.h"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <optional>
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
  WaitPeers peers{"ranks 0, 1", {0, 1}};
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

TEST(ProgressTest, AnswersPeersWithItsWaitPoint) {
  Progress progress;
  EXPECT_FALSE(progress.waitPoint());
  EXPECT_EQ(progress.answer(), "-\t\tbefore step 1");
  progress.beginStep(12);
  progress.beginCall("microbatch_step", 2);
  progress.instruction(57, "AllReduce");
  WaitPeers peers{"ranks 0, 1", {0, 1}};
  progress.beginWait({"the collective", 41, "AllGather", &peers});
  std::optional<WaitPoint> point = progress.waitPoint();
  ASSERT_TRUE(point);
  EXPECT_EQ(point->key(), "12/microbatch_step/2/41");
  EXPECT_FALSE(point->transfer);
  EXPECT_EQ(point->peers, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(progress.answer(),
            "12/microbatch_step/2/41\t0,1\t" + progress.describe());
  PeerAnswer answer = PeerAnswer::parse(progress.answer());
  EXPECT_EQ(answer.key, "12/microbatch_step/2/41");
  EXPECT_EQ(answer.waitsFor, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(answer.where, progress.describe());
  // Text of another form is only a description.
  EXPECT_EQ(PeerAnswer::parse("x\t1,y\tz").where, "x\t1,y\tz");
  EXPECT_TRUE(PeerAnswer::parse("x\t1,y\tz").waitsFor.empty());
  progress.endWait();
  EXPECT_FALSE(progress.waitPoint());
}

// A collective or transfer may be waited for by a later call than the
// one that started it, or at the end of the step: the report names the
// call that started it, and the wait point is that call's (the same on
// every rank that waits for it, wherever each waits).
TEST(ProgressTest, AWaitIsNamedByTheCallThatStartedIt) {
  Progress progress;
  progress.beginStep(3);
  progress.beginCall("forward_s1", 2);
  progress.instruction(4, "Matmul");
  WaitPeers peer{"rank 0", {0}};
  progress.beginWait({"the transfer", 0, "Recv", &peer, "recv_act_s1", 2});
  EXPECT_EQ(progress.describe(),
            "step 3, call forward_s1 (microbatch 2), instruction 4 (Matmul), "
            "waiting for the transfer of instruction 0 (Recv: rank 0) started "
            "by call recv_act_s1 (microbatch 2)");
  std::optional<WaitPoint> point = progress.waitPoint();
  ASSERT_TRUE(point);
  EXPECT_EQ(point->key(), "3/recv_act_s1/2/0");
  EXPECT_TRUE(point->transfer);
  // Started by the running call: nothing added.
  progress.beginWait({"the transfer", 1, "Send", &peer, "forward_s1", 2});
  EXPECT_EQ(progress.describe(),
            "step 3, call forward_s1 (microbatch 2), instruction 4 (Matmul), "
            "waiting for the transfer of instruction 1 (Send: rank 0)");
  EXPECT_EQ(progress.waitPoint()->key(), "3/forward_s1/2/1");
  progress.endWait();
  progress.phase("completing the step's transfers");
  progress.beginWait({"the transfer", 0, "Send", &peer, "send_grad_s1", 7});
  EXPECT_EQ(progress.describe(),
            "step 3, completing the step's transfers, waiting for the "
            "transfer of instruction 0 (Send: rank 0) started by call "
            "send_grad_s1 (microbatch 7)");
  ASSERT_TRUE(progress.waitPoint());
  EXPECT_EQ(progress.waitPoint()->key(), "3/send_grad_s1/7/0");
}

/// An answer waiting at `key` for `ranks`.
std::string waiting(const std::string &key, std::vector<int64_t> ranks,
                    const std::string &where) {
  return PeerAnswer{key, std::move(ranks), where}.text();
}

TEST(ProgressTest, NamesThePeersThatNeverArrived) {
  WaitPoint here;
  here.step = 4;
  here.function = "apply_step";
  here.instruction = 7;
  here.peers = {0, 1, 2, 3};
  std::string key = here.key();
  PeerAnswers answers = {
      {1, std::nullopt},
      {2, waiting(key, {0, 1, 2, 3}, "step 4, ...")},
      {3, waiting("4/microbatch_step/1/2", {3, 5},
                  "step 4, call microbatch_step (microbatch 1), instruction 9 "
                  "(Matmul)")},
      {5, std::nullopt}};
  EXPECT_EQ(describePeers(here, 0, answers, 2000ms),
            "not arrived: rank 1 did not answer within 2 s (stopped, hung or "
            "dead); rank 3 is at step 4, call microbatch_step (microbatch 1), "
            "instruction 9 (Matmul); further along: rank 5 did not answer "
            "within 2 s (stopped, hung or dead); rank 2 waits here too");
  // Every peer there: only who waits.
  answers = {{1, answers[2]}, {2, answers[2]}, {3, answers[2]}};
  EXPECT_EQ(describePeers(here, 0, answers, 2000ms),
            "ranks 1, 2, 3 wait here too");
  // A transfer's peer runs other instructions: it is always described.
  here.transfer = true;
  here.peers = {1};
  EXPECT_EQ(describePeers(here, 0, {{1, waiting("x", {}, "step 4, x")}}, 500ms),
            "its peer: rank 1 is at step 4, x");
  EXPECT_EQ(describePeers(here, 0, {{1, std::nullopt}}, 500ms),
            "its peer: rank 1 did not answer within 500 ms (stopped, hung or "
            "dead)");
}

TEST(ProgressTest, AsksAlongTheChainOfWaits) {
  // Rank 2 waits for 0 and 2; rank 0 waits for 0 and 1; rank 1 waits for
  // 1 and 4; rank 4 never answers.
  std::map<int64_t, std::optional<std::string>> world = {
      {0, waiting("a", {0, 1}, "at a")},
      {1, waiting("b", {1, 4}, "at b")},
      {4, std::nullopt}};
  std::vector<std::vector<int64_t>> questions;
  auto ask = [&](const std::vector<int64_t> &ranks, std::chrono::milliseconds) {
    questions.push_back(ranks);
    PeerAnswers answers;
    for (int64_t rank : ranks)
      answers[rank] = world.at(rank);
    return answers;
  };
  WaitPoint here;
  here.peers = {0, 2};
  PeerAnswers answers = askAround(here, 2, ask, 2000ms);
  EXPECT_EQ(questions, (std::vector<std::vector<int64_t>>{{0}, {1}, {4}}));
  EXPECT_EQ(answers.size(), 3u);
  EXPECT_FALSE(answers.at(4));
  // Out of time: no more questions.
  questions.clear();
  answers = askAround(here, 2, ask, 0ms);
  EXPECT_TRUE(questions.empty());
  EXPECT_TRUE(answers.empty());
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
  WaitPeers peers{"ranks 1, 3", {1, 3}};
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
