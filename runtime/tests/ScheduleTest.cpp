//===- ScheduleTest.cpp - pipeline schedules, their check and bubbles -----===//

#include "runtime/schedule/Schedule.h"

#include "absl/strings/str_cat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace triad::schedule;

namespace {

Schedule mustBuild(absl::string_view name, int ranks, int microbatches,
                   int virtualStages = 1) {
  absl::StatusOr<Schedule> schedule =
      build(name, ranks, microbatches, virtualStages);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{};
}

struct Case {
  std::string name;
  int ranks;
  int microbatches;
  int virtualStages;
};

std::string describe(const Case &c) {
  return c.name + " p=" + std::to_string(c.ranks) +
         " m=" + std::to_string(c.microbatches) +
         " v=" + std::to_string(c.virtualStages);
}

/// Every schedule for p in 1..4 and m in 1..8; interleaved with v in {2, 3}
/// where p divides m.
std::vector<Case> grid() {
  std::vector<Case> cases;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int microbatches = 1; microbatches <= 8; ++microbatches) {
      for (const char *name : {"gpipe", "1f1b", "zb-h1"})
        cases.push_back({name, ranks, microbatches, 1});
      if (microbatches % ranks == 0)
        for (int virtualStages : {2, 3})
          cases.push_back({"interleaved", ranks, microbatches, virtualStages});
    }
  }
  return cases;
}

Action at(const Schedule &schedule, int rank, const std::string &token) {
  for (const Action &action : schedule.actions[rank])
    if (format(action) == token)
      return action;
  ADD_FAILURE() << "no " << token << " on rank " << rank;
  return Action::local(ActionKind::Optimizer);
}

size_t indexOf(const Schedule &schedule, int rank, const std::string &token) {
  const std::vector<Action> &list = schedule.actions[rank];
  for (size_t k = 0; k < list.size(); ++k)
    if (format(list[k]) == token)
      return k;
  ADD_FAILURE() << "no " << token << " on rank " << rank;
  return 0;
}

void erase(Schedule &schedule, int rank, const std::string &token) {
  std::vector<Action> &list = schedule.actions[rank];
  list.erase(list.begin() + indexOf(schedule, rank, token));
}

/// Moves `token` on `rank` to position `to` (counted after its removal).
void move(Schedule &schedule, int rank, const std::string &token, size_t to) {
  Action action = at(schedule, rank, token);
  erase(schedule, rank, token);
  std::vector<Action> &list = schedule.actions[rank];
  list.insert(list.begin() + to, action);
}

void expectRejected(const Schedule &schedule, const std::string &message) {
  absl::Status status = verify(schedule);
  ASSERT_FALSE(status.ok()) << format(schedule);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(status.message()).find(message), std::string::npos)
      << "got: " << status.message() << "\nwanted: " << message;
}

void expectInvalidArgument(absl::string_view name, int ranks, int microbatches,
                           int virtualStages, const std::string &message) {
  absl::StatusOr<Schedule> schedule =
      build(name, ranks, microbatches, virtualStages);
  ASSERT_FALSE(schedule.ok());
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(schedule.status().message(), message);
}

double simulatedBubble(absl::string_view name, int ranks, int microbatches,
                       int virtualStages = 1) {
  absl::StatusOr<Timeline> timeline =
      simulate(mustBuild(name, ranks, microbatches, virtualStages));
  EXPECT_TRUE(timeline.ok()) << timeline.status();
  return timeline.ok() ? timeline->bubbleFraction : NAN;
}

//===----------------------------------------------------------------------===//
// The generated action lists.
//===----------------------------------------------------------------------===//

TEST(ScheduleOrder, GPipe) {
  EXPECT_EQ(format(mustBuild("gpipe", 2, 4)),
            "schedule gpipe ranks=2 microbatches=4 virtual-stages=1\n"
            "rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 F0.2 send-act0.2>1 "
            "F0.3 send-act0.3>1 recv-grad0.0<1 B0.0 recv-grad0.1<1 B0.1 "
            "recv-grad0.2<1 B0.2 recv-grad0.3<1 B0.3 reduce-grads optimizer\n"
            "rank 1: recv-act1.0<0 F1.0 recv-act1.1<0 F1.1 recv-act1.2<0 F1.2 "
            "recv-act1.3<0 F1.3 B1.0 send-grad1.0>0 B1.1 send-grad1.1>0 B1.2 "
            "send-grad1.2>0 B1.3 send-grad1.3>0 reduce-grads optimizer\n");
}

TEST(ScheduleOrder, OneForwardOneBackward) {
  // Rank 0 warms up with one forward, rank 1 with none.
  EXPECT_EQ(format(mustBuild("1f1b", 2, 4)),
            "schedule 1f1b ranks=2 microbatches=4 virtual-stages=1\n"
            "rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 recv-grad0.0<1 "
            "B0.0 F0.2 send-act0.2>1 recv-grad0.1<1 B0.1 F0.3 send-act0.3>1 "
            "recv-grad0.2<1 B0.2 recv-grad0.3<1 B0.3 reduce-grads optimizer\n"
            "rank 1: recv-act1.0<0 F1.0 recv-act1.1<0 B1.0 send-grad1.0>0 "
            "F1.1 B1.1 recv-act1.2<0 send-grad1.1>0 F1.2 B1.2 recv-act1.3<0 "
            "send-grad1.2>0 F1.3 B1.3 send-grad1.3>0 reduce-grads optimizer\n");
}

TEST(ScheduleOrder, Interleaved) {
  // Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3. Megatron's order:
  // warm-up of 2 (p - r - 1) + (v - 1) p forwards (4 on rank 0, 2 on rank 1)
  // over groups of p microbatches per chunk, backwards through the chunks in
  // reverse.
  EXPECT_EQ(
      format(mustBuild("interleaved", 2, 4, 2)),
      "schedule interleaved ranks=2 microbatches=4 virtual-stages=2\n"
      "rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 recv-act2.0<1 F2.0 "
      "send-act2.0>1 recv-act2.1<1 F2.1 send-act2.1>1 F0.2 send-act0.2>1 "
      "recv-grad2.0<1 B2.0 send-grad2.0>1 F0.3 send-act0.3>1 recv-grad2.1<1 "
      "B2.1 recv-act2.2<1 send-grad2.1>1 F2.2 send-act2.2>1 recv-grad0.0<1 "
      "B0.0 recv-act2.3<1 F2.3 send-act2.3>1 recv-grad0.1<1 B0.1 "
      "recv-grad2.2<1 B2.2 send-grad2.2>1 recv-grad2.3<1 B2.3 send-grad2.3>1 "
      "recv-grad0.2<1 B0.2 recv-grad0.3<1 B0.3 reduce-grads optimizer\n"
      "rank 1: recv-act1.0<0 F1.0 recv-act1.1<0 send-act1.0>0 F1.1 "
      "recv-act3.0<0 send-act1.1>0 F3.0 recv-act3.1<0 B3.0 recv-act1.2<0 "
      "send-grad3.0>0 F3.1 B3.1 recv-grad1.0<0 recv-act1.3<0 send-grad3.1>0 "
      "F1.2 send-act1.2>0 B1.0 recv-grad1.1<0 recv-act3.2<0 send-grad1.0>0 "
      "F1.3 send-act1.3>0 B1.1 recv-act3.3<0 send-grad1.1>0 F3.2 B3.2 "
      "send-grad3.2>0 F3.3 B3.3 recv-grad1.2<0 send-grad3.3>0 B1.2 "
      "recv-grad1.3<0 send-grad1.2>0 B1.3 send-grad1.3>0 reduce-grads "
      "optimizer\n");
}

TEST(ScheduleOrder, ZeroBubbleH1) {
  // 1F1B's forwards and input gradients; rank 0 runs each weight gradient
  // right away, rank 1 keeps one pending and runs the last two at the end.
  EXPECT_EQ(format(mustBuild("zb-h1", 2, 4)),
            "schedule zb-h1 ranks=2 microbatches=4 virtual-stages=1\n"
            "rank 0: F0.0 send-act0.0>1 F0.1 send-act0.1>1 recv-grad0.0<1 "
            "BI0.0 BW0.0 recv-grad0.1<1 F0.2 send-act0.2>1 BI0.1 BW0.1 "
            "recv-grad0.2<1 F0.3 send-act0.3>1 BI0.2 BW0.2 recv-grad0.3<1 "
            "BI0.3 BW0.3 reduce-grads optimizer\n"
            "rank 1: recv-act1.0<0 F1.0 recv-act1.1<0 BI1.0 send-grad1.0>0 "
            "F1.1 BI1.1 send-grad1.1>0 BW1.0 recv-act1.2<0 F1.2 BI1.2 "
            "send-grad1.2>0 BW1.1 recv-act1.3<0 F1.3 BI1.3 send-grad1.3>0 "
            "BW1.2 BW1.3 reduce-grads optimizer\n");
}

TEST(ScheduleOrder, SingleRankInterleavedRunsChunksInOrder) {
  EXPECT_EQ(format(mustBuild("interleaved", 1, 2, 3)),
            "schedule interleaved ranks=1 microbatches=2 virtual-stages=3\n"
            "rank 0: F0.0 F1.0 F2.0 B2.0 F0.1 B1.0 F1.1 B0.0 F2.1 B2.1 B1.1 "
            "B0.1 reduce-grads optimizer\n");
}

TEST(ScheduleOrder, InterleavedWithOneVirtualStageIs1F1B) {
  for (int ranks = 1; ranks <= 4; ++ranks)
    EXPECT_EQ(mustBuild("interleaved", ranks, 2 * ranks).actions,
              mustBuild("1f1b", ranks, 2 * ranks).actions);
}

TEST(ScheduleOrder, OneRankHasNoTransfers) {
  for (const Case &c : grid()) {
    if (c.ranks != 1)
      continue;
    Schedule schedule =
        mustBuild(c.name, c.ranks, c.microbatches, c.virtualStages);
    for (const Action &action : schedule.actions[0])
      EXPECT_TRUE(action.kind != ActionKind::Send &&
                  action.kind != ActionKind::Recv)
          << describe(c) << ": " << format(action);
  }
}

TEST(ScheduleOrder, TransfersSitBetweenProducerAndConsumer) {
  for (const Case &c : grid()) {
    Schedule schedule =
        mustBuild(c.name, c.ranks, c.microbatches, c.virtualStages);
    for (int rank = 0; rank < c.ranks; ++rank) {
      const std::vector<Action> &list = schedule.actions[rank];
      for (size_t k = 0; k < list.size(); ++k) {
        const Action &action = list[k];
        bool isActivation = action.direction == Direction::Activation;
        if (action.kind == ActionKind::Send) {
          // The last pass before a send produced its data.
          size_t before = k;
          while (before > 0 && (list[before - 1].kind == ActionKind::Send ||
                                list[before - 1].kind == ActionKind::Recv))
            --before;
          ASSERT_GT(before, 0u) << describe(c);
          const Action &producer = list[before - 1];
          EXPECT_TRUE(isActivation
                          ? producer.kind == ActionKind::Forward
                          : producer.kind == ActionKind::Backward ||
                                producer.kind == ActionKind::BackwardInput)
              << describe(c) << ": " << format(producer) << " before "
              << format(action);
          EXPECT_EQ(producer.stage, action.stage) << describe(c);
          EXPECT_EQ(producer.microbatch, action.microbatch) << describe(c);
          EXPECT_EQ(action.peerStage, action.stage + (isActivation ? 1 : -1));
          EXPECT_EQ(action.peer, action.peerStage % c.ranks);
        } else if (action.kind == ActionKind::Recv) {
          // The pass consuming a receive comes later on the same rank.
          auto consumer = std::find_if(
              list.begin() + k, list.end(), [&](const Action &pass) {
                bool kindMatches =
                    isActivation ? pass.kind == ActionKind::Forward
                                 : pass.kind == ActionKind::Backward ||
                                       pass.kind == ActionKind::BackwardInput;
                return kindMatches && pass.stage == action.stage &&
                       pass.microbatch == action.microbatch;
              });
          EXPECT_NE(consumer, list.end())
              << describe(c) << ": nothing consumes " << format(action);
        }
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// verify().
//===----------------------------------------------------------------------===//

TEST(Verify, AcceptsEveryGeneratedSchedule) {
  for (const Case &c : grid()) {
    Schedule schedule =
        mustBuild(c.name, c.ranks, c.microbatches, c.virtualStages);
    EXPECT_TRUE(verify(schedule).ok())
        << describe(c) << ": " << verify(schedule);

    // Independently of verify(): each (stage, microbatch) runs forward once
    // and backward once, whole or as both halves, on the rank of its stage.
    std::map<std::tuple<ActionKind, int, int>, int> runs;
    for (int rank = 0; rank < c.ranks; ++rank) {
      const std::vector<Action> &list = schedule.actions[rank];
      ASSERT_GE(list.size(), 2u);
      EXPECT_EQ(list[list.size() - 2].kind, ActionKind::ReduceGradients);
      EXPECT_EQ(list.back().kind, ActionKind::Optimizer);
      for (const Action &action : list) {
        if (action.kind == ActionKind::Send ||
            action.kind == ActionKind::Recv ||
            action.kind == ActionKind::ReduceGradients ||
            action.kind == ActionKind::Optimizer)
          continue;
        EXPECT_EQ(action.stage % c.ranks, rank)
            << describe(c) << ": " << format(action);
        ++runs[{action.kind, action.stage, action.microbatch}];
      }
    }
    bool split = c.name == "zb-h1";
    for (int stage = 0; stage < c.ranks * c.virtualStages; ++stage) {
      for (int i = 0; i < c.microbatches; ++i) {
        EXPECT_EQ((runs[{ActionKind::Forward, stage, i}]), 1) << describe(c);
        EXPECT_EQ((runs[{ActionKind::Backward, stage, i}]), split ? 0 : 1)
            << describe(c);
        EXPECT_EQ((runs[{ActionKind::BackwardInput, stage, i}]), split ? 1 : 0)
            << describe(c);
        EXPECT_EQ((runs[{ActionKind::BackwardWeight, stage, i}]), split ? 1 : 0)
            << describe(c);
      }
    }
  }
}

TEST(Verify, RejectsSendsFacingEachOther) {
  // Rank 1 sends the gradient of microbatch 0 before receiving activation 1,
  // while rank 0 sends activation 1 before receiving that gradient: with
  // blocking transfers both wait for the other forever.
  Schedule schedule = mustBuild("1f1b", 2, 4);
  move(schedule, 1, "recv-act1.1<0", indexOf(schedule, 1, "send-grad1.0>0"));
  EXPECT_EQ(verify(schedule).message(),
            "pipeline schedule '1f1b' (2 ranks, 4 microbatches) deadlocks: "
            "rank 0 is stuck at send activation of microbatch 1 to rank 1 "
            "(stage 0 -> 1); rank 1 is stuck at send gradient of microbatch 0 "
            "to rank 0 (stage 1 -> 0)");
  EXPECT_EQ(verify(schedule).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Verify, RejectsReceiveBeforeTheForwardFeedingIt) {
  // Rank 0 waits for the gradient of a microbatch it has not sent forward.
  Schedule schedule = mustBuild("gpipe", 2, 1);
  move(schedule, 0, "recv-grad0.0<1", 0);
  EXPECT_EQ(verify(schedule).message(),
            "pipeline schedule 'gpipe' (2 ranks, 1 microbatch) deadlocks: "
            "rank 0 is stuck at recv gradient of microbatch 0 from rank 1 "
            "(stage 1 -> 0); rank 1 is stuck at recv activation of microbatch "
            "0 from rank 0 (stage 0 -> 1)");
}

TEST(Verify, RejectsMissingReceive) {
  Schedule schedule = mustBuild("1f1b", 2, 4);
  erase(schedule, 1, "recv-act1.3<0");
  EXPECT_EQ(verify(schedule).message(),
            "pipeline schedule '1f1b' (2 ranks, 4 microbatches) is invalid: "
            "rank 0: action 11 (send-act0.3>1) has no matching receive on "
            "rank 1; rank 1: action 12 (F1.3) runs before its activation from "
            "stage 0 is received from rank 0");
}

TEST(Verify, RejectsDuplicatedForward) {
  Schedule schedule = mustBuild("1f1b", 2, 4);
  std::vector<Action> &list = schedule.actions[0];
  size_t forward = indexOf(schedule, 0, "F0.2");
  list.insert(list.begin() + forward + 1, list[forward]);
  EXPECT_EQ(verify(schedule).message(),
            "pipeline schedule '1f1b' (2 ranks, 4 microbatches) is invalid: "
            "rank 0: action 7 (F0.2) runs a second time");
}

TEST(Verify, RejectsBackwardBeforeItsForward) {
  Schedule schedule = mustBuild("1f1b", 2, 4);
  move(schedule, 1, "B1.0", indexOf(schedule, 1, "F1.0"));
  EXPECT_EQ(verify(schedule).message(),
            "pipeline schedule '1f1b' (2 ranks, 4 microbatches) is invalid: "
            "rank 1: action 1 (B1.0) runs before its forward pass F1.0");

  Schedule single = mustBuild("gpipe", 1, 2);
  move(single, 0, "B0.1", 1);
  expectRejected(single, "rank 0: action 1 (B0.1) runs before its forward "
                         "pass F0.1");
}

TEST(Verify, RejectsPassesWithoutTheirInputs) {
  Schedule unsent = mustBuild("gpipe", 2, 1);
  move(unsent, 0, "send-act0.0>1", 0);
  expectRejected(unsent, "rank 0: action 0 (send-act0.0>1) sends the "
                         "activation before the pass computing it");

  Schedule early = mustBuild("gpipe", 2, 2);
  move(early, 0, "B0.1", indexOf(early, 0, "recv-grad0.1<1"));
  expectRejected(early, "rank 0: action 6 (B0.1) runs before its gradient "
                        "from stage 1 is received from rank 1");

  Schedule zeroBubble = mustBuild("zb-h1", 1, 1);
  move(zeroBubble, 0, "BW0.0", 1);
  expectRejected(zeroBubble, "rank 0: action 1 (BW0.0) runs before its "
                             "input-gradient part BI0.0");

  Schedule sameRank = mustBuild("interleaved", 1, 1, 2);
  move(sameRank, 0, "B1.0", indexOf(sameRank, 0, "B0.0") + 1);
  expectRejected(sameRank, "rank 0: action 2 (B0.0) runs before the "
                           "backward pass of stage 1 that computes its "
                           "gradient");
}

TEST(Verify, RejectsMisplacedActions) {
  Schedule wrongRank = mustBuild("1f1b", 2, 2);
  wrongRank.actions[1][indexOf(wrongRank, 1, "F1.0")].stage = 0;
  expectRejected(wrongRank,
                 "rank 1: action 1 (F0.0) is on rank 1, but stage 0 lives on "
                 "rank 0");

  Schedule wrongPeer = mustBuild("1f1b", 3, 3);
  wrongPeer.actions[0][indexOf(wrongPeer, 0, "send-act0.0>1")].peer = 2;
  expectRejected(wrongPeer, "rank 0: action 1 (send-act0.0>2) names rank 2, "
                            "but stage 1 lives on rank 1");

  Schedule beyondLast = mustBuild("1f1b", 2, 1);
  beyondLast.actions[1].insert(beyondLast.actions[1].begin() + 2,
                               Action::send(Direction::Activation, 1, 0, 2, 0));
  expectRejected(beyondLast, "rank 1: action 2 (send-act1.0>0) moves an "
                             "activation beyond the first or last stage");

  Schedule wrongStage = mustBuild("1f1b", 3, 3);
  wrongStage.actions[0][indexOf(wrongStage, 0, "send-act0.0>1")].peerStage = 2;
  expectRejected(wrongStage, "rank 0: action 1 (send-act0.0>1) pairs stage 0 "
                             "with stage 2, but an activation sent from stage "
                             "0 goes to stage 1");

  Schedule outOfRange = mustBuild("gpipe", 1, 2);
  outOfRange.actions[0][0].microbatch = 2;
  expectRejected(outOfRange, "rank 0: action 0 (F0.2) names microbatch 2, "
                             "but the step has microbatches 0 to 1");
  outOfRange.actions[0][0] = Action::compute(ActionKind::Forward, -1, 0);
  expectRejected(outOfRange, "rank 0: action 0 (F-1.0) names stage -1, but "
                             "the pipeline has stages 0 to 0");

  Schedule twice = mustBuild("gpipe", 2, 1);
  std::vector<Action> &list = twice.actions[0];
  list.insert(list.begin() + 2, list[1]);
  expectRejected(twice, "rank 0: action 2 (send-act0.0>1) sends a second time");
}

TEST(Verify, RejectsIncompleteSteps) {
  Schedule noBackward = mustBuild("gpipe", 1, 2);
  erase(noBackward, 0, "B0.1");
  expectRejected(noBackward, "rank 0 never runs the backward pass of stage 0, "
                             "microbatch 1");

  Schedule noForward = mustBuild("gpipe", 2, 2);
  erase(noForward, 1, "F1.1");
  erase(noForward, 1, "B1.1");
  erase(noForward, 1, "send-grad1.1>0");
  erase(noForward, 0, "recv-grad0.1<1");
  erase(noForward, 0, "B0.1");
  expectRejected(noForward, "rank 1 never runs F1.1");

  Schedule noWeight = mustBuild("zb-h1", 1, 1);
  erase(noWeight, 0, "BW0.0");
  expectRejected(noWeight, "rank 0 never runs BW0.0");

  Schedule wholeThenWeight = mustBuild("gpipe", 1, 1);
  std::vector<Action> &list = wholeThenWeight.actions[0];
  list.insert(list.begin() + 2,
              Action::compute(ActionKind::BackwardWeight, 0, 0));
  expectRejected(wholeThenWeight, "rank 0: action 2 (BW0.0) runs after B0.0, "
                                  "which computed the weight gradient "
                                  "already");

  Schedule noOptimizer = mustBuild("1f1b", 2, 2);
  noOptimizer.actions[1].pop_back();
  expectRejected(noOptimizer, "rank 1 never runs optimizer");

  Schedule lateBackward = mustBuild("gpipe", 1, 2);
  move(lateBackward, 0, "reduce-grads", indexOf(lateBackward, 0, "B0.1"));
  expectRejected(lateBackward, "rank 0: action 4 (B0.1) runs after "
                               "reduce-grads, which must follow every pass");

  Schedule optimizerFirst = mustBuild("gpipe", 1, 1);
  move(optimizerFirst, 0, "optimizer", 0);
  expectRejected(optimizerFirst,
                 "rank 0: action 0 (optimizer) runs before reduce-grads");
}

TEST(Verify, RejectsMalformedShapes) {
  Schedule missingRank = mustBuild("1f1b", 2, 2);
  missingRank.actions.pop_back();
  expectRejected(missingRank, "is malformed: it has action lists for 1 rank, "
                              "not 2");

  Schedule tooFewActions = mustBuild("1f1b", 2, 2);
  tooFewActions.microbatches = 1000;
  expectRejected(tooFewActions, "cannot run a forward and a backward pass for "
                                "each of 2 stages x 1000 microbatches");

  Schedule tooLarge = mustBuild("1f1b", 2, 2);
  tooLarge.virtualStages = 1 << 30;
  expectRejected(tooLarge, "2147483648 stages x 2 microbatches are more than "
                           "the 4194304 stage-microbatch pairs a schedule may "
                           "have");

  Schedule noRanks;
  noRanks.name = "empty";
  expectRejected(noRanks, "it has 0 ranks, 0 microbatches and 1 virtual "
                          "stages per rank; each needs at least 1");
}

//===----------------------------------------------------------------------===//
// simulate() and the closed forms.
//
// Megatron's closed forms are bubble time over ideal compute time
// (t_pb / t_id), not idle time over the makespan; Timeline::bubbleFraction is
// the former, Timeline::idleFraction the latter.
//===----------------------------------------------------------------------===//

TEST(Simulate, GPipeAnd1F1BMatchTheClosedFormForAnyCostRatio) {
  for (const char *name : {"gpipe", "1f1b"}) {
    for (int ranks = 1; ranks <= 4; ++ranks) {
      for (int microbatches = 1; microbatches <= 8; ++microbatches) {
        for (double backwardCost : {2.0, 1.0, 3.0}) {
          Schedule schedule = mustBuild(name, ranks, microbatches);
          absl::StatusOr<Timeline> timeline =
              simulate(schedule, 1, backwardCost);
          ASSERT_TRUE(timeline.ok()) << timeline.status();
          double closed = closedFormBubble(name, ranks, microbatches);
          EXPECT_DOUBLE_EQ(closed, double(ranks - 1) / microbatches);
          EXPECT_DOUBLE_EQ(timeline->bubbleFraction, closed)
              << name << " p=" << ranks << " m=" << microbatches;
          for (double bubble : timeline->bubble)
            EXPECT_DOUBLE_EQ(bubble, closed);
          EXPECT_DOUBLE_EQ(timeline->makespan,
                           (microbatches + ranks - 1) * (1 + backwardCost));
          EXPECT_DOUBLE_EQ(timeline->idleFraction,
                           double(ranks - 1) / (microbatches + ranks - 1));
        }
      }
    }
  }
}

TEST(Simulate, InterleavedMatchesItsClosedFormAndBeats1F1B) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int virtualStages : {2, 3}) {
      for (int microbatches = ranks; microbatches <= 8; microbatches += ranks) {
        double bubble =
            simulatedBubble("interleaved", ranks, microbatches, virtualStages);
        EXPECT_DOUBLE_EQ(bubble, closedFormBubble("interleaved", ranks,
                                                  microbatches, virtualStages))
            << "p=" << ranks << " m=" << microbatches << " v=" << virtualStages;
        EXPECT_DOUBLE_EQ(bubble * virtualStages,
                         closedFormBubble("1f1b", ranks, microbatches));
        if (ranks > 1) {
          EXPECT_LT(bubble, simulatedBubble("1f1b", ranks, microbatches));
        }
      }
    }
  }
}

TEST(Simulate, ZeroBubbleH1CutsThe1F1BBubbleToAThird) {
  for (int ranks = 2; ranks <= 4; ++ranks) {
    for (int microbatches = 1; microbatches <= 8; ++microbatches) {
      double bubble = simulatedBubble("zb-h1", ranks, microbatches);
      double oneForwardOneBackward =
          simulatedBubble("1f1b", ranks, microbatches);
      EXPECT_LT(bubble, oneForwardOneBackward)
          << "p=" << ranks << " m=" << microbatches;
      if (microbatches >= ranks) {
        EXPECT_DOUBLE_EQ(bubble, oneForwardOneBackward / 3)
            << "p=" << ranks << " m=" << microbatches;
        EXPECT_DOUBLE_EQ(bubble,
                         closedFormBubble("zb-h1", ranks, microbatches));
      }
    }
  }
}

TEST(Simulate, RecordsWhenEachActionRuns) {
  Schedule schedule = mustBuild("1f1b", 2, 4);
  absl::StatusOr<Timeline> timeline = simulate(schedule);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  EXPECT_EQ(timeline->makespan, 15);
  EXPECT_EQ(timeline->busy, (std::vector<double>{12, 12}));
  auto startOf = [&](int rank, const std::string &token) {
    return timeline->start[rank][indexOf(schedule, rank, token)];
  };
  auto endOf = [&](int rank, const std::string &token) {
    return timeline->end[rank][indexOf(schedule, rank, token)];
  };
  EXPECT_EQ(startOf(0, "F0.1"), 1);
  EXPECT_EQ(startOf(1, "F1.0"), 1);
  EXPECT_EQ(startOf(1, "B1.0"), 2);
  // Rank 0 waits from 2 to 4 for the first gradient.
  EXPECT_EQ(startOf(0, "recv-grad0.0<1"), 4);
  EXPECT_EQ(startOf(0, "B0.0"), 4);
  EXPECT_EQ(endOf(0, "B0.3"), 15);
  EXPECT_EQ(endOf(1, "B1.3"), 13);
  EXPECT_EQ(timeline->start[0].size(), schedule.actions[0].size());
}

TEST(Simulate, RejectsInvalidSchedulesAndCosts) {
  Schedule schedule = mustBuild("1f1b", 2, 4);
  EXPECT_EQ(simulate(schedule, 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(simulate(schedule, 1, NAN).status().code(),
            absl::StatusCode::kInvalidArgument);
  erase(schedule, 1, "recv-act1.3<0");
  EXPECT_EQ(simulate(schedule).status(), verify(schedule));
}

TEST(Simulate, ClosedFormsOfEachSchedule) {
  EXPECT_DOUBLE_EQ(closedFormBubble("gpipe", 4, 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(closedFormBubble("1f1b", 4, 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(closedFormBubble("interleaved", 4, 8, 2), 3.0 / 16);
  EXPECT_DOUBLE_EQ(closedFormBubble("zb-h1", 4, 8), 3.0 / 24);
  EXPECT_TRUE(std::isnan(closedFormBubble("pipedream", 4, 8)));
}

//===----------------------------------------------------------------------===//
// peakInFlight().
//===----------------------------------------------------------------------===//

TEST(PeakInFlight, GPipeHoldsEveryMicrobatch1F1BAtMostP) {
  EXPECT_EQ(peakInFlight(mustBuild("gpipe", 2, 8)), (std::vector<int>{8, 8}));
  EXPECT_EQ(peakInFlight(mustBuild("1f1b", 2, 8)), (std::vector<int>{2, 1}));
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int microbatches = 1; microbatches <= 8; ++microbatches) {
      std::vector<int> peaks =
          peakInFlight(mustBuild("1f1b", ranks, microbatches));
      std::vector<int> gpipe =
          peakInFlight(mustBuild("gpipe", ranks, microbatches));
      for (int rank = 0; rank < ranks; ++rank) {
        EXPECT_EQ(peaks[rank], std::min(ranks - rank, microbatches));
        EXPECT_EQ(gpipe[rank], microbatches);
      }
    }
  }
}

TEST(PeakInFlight, ZeroBubbleH1StaysWithin1F1BMemory) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int microbatches = 1; microbatches <= 8; ++microbatches) {
      Schedule zeroBubble = mustBuild("zb-h1", ranks, microbatches);
      std::vector<int> oneForwardOneBackward =
          peakInFlight(mustBuild("1f1b", ranks, microbatches));
      EXPECT_EQ(peakInFlight(zeroBubble), oneForwardOneBackward);
      // Held until the weight gradient, rank r keeps r more microbatches,
      // never more than 1F1B's rank 0.
      std::vector<int> untilWeight =
          peakInFlight(zeroBubble, InFlightUntil::BackwardWeight);
      for (int rank = 0; rank < ranks; ++rank) {
        EXPECT_LE(untilWeight[rank], oneForwardOneBackward[0]);
        if (microbatches >= ranks) {
          EXPECT_EQ(untilWeight[rank], ranks);
        }
      }
    }
  }
}

TEST(PeakInFlight, InterleavedFollowsMegatronsWarmup) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int virtualStages : {2, 3}) {
      for (int microbatches = ranks; microbatches <= 8; microbatches += ranks) {
        std::vector<int> peaks = peakInFlight(
            mustBuild("interleaved", ranks, microbatches, virtualStages));
        for (int rank = 0; rank < ranks; ++rank)
          EXPECT_EQ(peaks[rank], std::min(2 * (ranks - rank - 1) +
                                              (virtualStages - 1) * ranks + 1,
                                          microbatches * virtualStages));
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// build() arguments and format().
//===----------------------------------------------------------------------===//

TEST(Build, RejectsBadArguments) {
  expectInvalidArgument("pipedream", 2, 4, 1,
                        "unknown pipeline schedule 'pipedream'; use one of "
                        "gpipe, 1f1b, interleaved, zb-h1");
  expectInvalidArgument("1f1b", 0, 4, 1,
                        "a pipeline needs at least 1 rank, got 0; set the "
                        "pipeline-parallel size to 1 or more");
  expectInvalidArgument("gpipe", 2, 0, 1,
                        "a pipeline step needs at least 1 microbatch, got 0; "
                        "set microbatches to 1 or more");
  expectInvalidArgument("interleaved", 2, 4, 0,
                        "virtual stages per rank must be at least 1, got 0");
  expectInvalidArgument("1f1b", 2, 4, 2,
                        "schedule '1f1b' runs one stage per rank, but 2 "
                        "virtual stages per rank were requested; use schedule "
                        "'interleaved' or 1 virtual stage");
  expectInvalidArgument("zb-h1", 2, 4, 3,
                        "schedule 'zb-h1' runs one stage per rank, but 3 "
                        "virtual stages per rank were requested; use schedule "
                        "'interleaved' or 1 virtual stage");
  expectInvalidArgument("interleaved", 4, 6, 2,
                        "the interleaved schedule needs the number of "
                        "microbatches (6) to be a multiple of the pipeline "
                        "ranks (4); use 4 or 8 microbatches");
  expectInvalidArgument("interleaved", 4, 3, 2,
                        "the interleaved schedule needs the number of "
                        "microbatches (3) to be a multiple of the pipeline "
                        "ranks (4); use 4 microbatches");
  expectInvalidArgument("gpipe", 1 << 12, 1 << 12, 1,
                        "a pipeline of 4096 stages x 4096 microbatches is too "
                        "large to schedule (at most 4194304 stage-microbatch "
                        "pairs)");
}

TEST(Format, OneTokenPerAction) {
  EXPECT_EQ(format(Action::compute(ActionKind::Forward, 2, 5)), "F2.5");
  EXPECT_EQ(format(Action::compute(ActionKind::Backward, 2, 5)), "B2.5");
  EXPECT_EQ(format(Action::compute(ActionKind::BackwardInput, 2, 5)), "BI2.5");
  EXPECT_EQ(format(Action::compute(ActionKind::BackwardWeight, 2, 5)), "BW2.5");
  EXPECT_EQ(format(Action::send(Direction::Activation, 2, 5, 3, 1)),
            "send-act2.5>1");
  EXPECT_EQ(format(Action::recv(Direction::Activation, 3, 5, 2, 0)),
            "recv-act3.5<0");
  EXPECT_EQ(format(Action::send(Direction::Gradient, 3, 5, 2, 0)),
            "send-grad3.5>0");
  EXPECT_EQ(format(Action::recv(Direction::Gradient, 2, 5, 3, 1)),
            "recv-grad2.5<1");
  EXPECT_EQ(format(Action::local(ActionKind::ReduceGradients)), "reduce-grads");
  EXPECT_EQ(format(Action::local(ActionKind::Optimizer)), "optimizer");
}

TEST(Format, ParseReadsEveryTokenBack) {
  for (absl::string_view name : kScheduleNames) {
    absl::StatusOr<Schedule> built =
        build(name, 2, 4, name == "interleaved" ? 2 : 1);
    ASSERT_TRUE(built.ok()) << built.status();
    for (const std::vector<Action> &rank : built->actions)
      for (const Action &action : rank) {
        absl::StatusOr<Action> parsed = parseAction(format(action));
        ASSERT_TRUE(parsed.ok()) << parsed.status();
        EXPECT_EQ(*parsed, action) << format(action);
      }
  }
}

TEST(Format, ParseRejectsMalformedTokens) {
  for (const char *token :
       {"", "X0.1", "F0", "F0.", "F.1", "F0.1x", "send-act0.1", "send-act0.1<1",
        "recv-grad0.1>1", "send-data0.1>1", "recv-act0.1<", "BI1",
        "optimize"}) {
    absl::StatusOr<Action> parsed = parseAction(token);
    ASSERT_FALSE(parsed.ok()) << token;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(absl::StrCat("'", token, "'")),
              std::string::npos)
        << parsed.status();
  }
}

} // namespace
