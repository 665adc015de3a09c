//===- Schedule.cpp - pipeline-parallel schedules and their checks --------===//
//
// Generators emit each rank's compute order; transfers are then placed from
// the unit-cost timeline of that order. verify() walks each rank's list for
// local rules, matches sends with receives, then runs the lists with
// rendezvous transfers; simulate() runs them on a clock.
//
//===----------------------------------------------------------------------===//

#include "runtime/schedule/Schedule.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>

namespace triad::schedule {

Action Action::compute(ActionKind kind, int stage, int microbatch) {
  Action action{kind};
  action.stage = stage;
  action.microbatch = microbatch;
  return action;
}

Action Action::send(Direction direction, int stage, int microbatch,
                    int peerStage, int peer) {
  Action action = compute(ActionKind::Send, stage, microbatch);
  action.direction = direction;
  action.peerStage = peerStage;
  action.peer = peer;
  return action;
}

Action Action::recv(Direction direction, int stage, int microbatch,
                    int peerStage, int peer) {
  Action action = send(direction, stage, microbatch, peerStage, peer);
  action.kind = ActionKind::Recv;
  return action;
}

Action Action::local(ActionKind kind) { return Action{kind}; }

bool operator==(const Action &lhs, const Action &rhs) {
  return lhs.kind == rhs.kind && lhs.stage == rhs.stage &&
         lhs.microbatch == rhs.microbatch && lhs.peer == rhs.peer &&
         lhs.direction == rhs.direction && lhs.peerStage == rhs.peerStage;
}

namespace {

/// Keeps a hostile or mistaken size from allocating without bound.
constexpr int64_t kMaxStageMicrobatches = int64_t{1} << 22;

bool isCompute(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward ||
         kind == ActionKind::BackwardInput ||
         kind == ActionKind::BackwardWeight;
}

bool isTransfer(ActionKind kind) {
  return kind == ActionKind::Send || kind == ActionKind::Recv;
}

/// Dense indices of (stage, microbatch) pairs and of transfers.
struct Shape {
  int ranks;
  int microbatches;
  int stages;

  static Shape of(const Schedule &schedule) {
    return {schedule.ranks, schedule.microbatches, schedule.stages()};
  }

  int rankOf(int stage) const { return stage % ranks; }
  int64_t pairs() const { return int64_t{stages} * microbatches; }
  int64_t index(int stage, int microbatch) const {
    return int64_t{stage} * microbatches + microbatch;
  }
  /// Both ends of a transfer map to the same index: its direction and the
  /// stage that sends it.
  int64_t transferIndex(const Action &action) const {
    int source =
        action.kind == ActionKind::Send ? action.stage : action.peerStage;
    int64_t base = action.direction == Direction::Gradient ? pairs() : 0;
    return base + index(source, action.microbatch);
  }
  /// The stage at the other end of a transfer of `direction` that `kind`
  /// (Send or Recv) performs for `stage`.
  static int peerStageOf(ActionKind kind, Direction direction, int stage) {
    bool towardsLater =
        (kind == ActionKind::Send) == (direction == Direction::Activation);
    return towardsLater ? stage + 1 : stage - 1;
  }
};

//===----------------------------------------------------------------------===//
// Generators: each rank's compute order.
//===----------------------------------------------------------------------===//

using Lists = std::vector<std::vector<Action>>;

Action pass(ActionKind kind, int stage, int microbatch) {
  return Action::compute(kind, stage, microbatch);
}

Lists gpipeOrder(int ranks, int microbatches) {
  Lists orders(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    for (int i = 0; i < microbatches; ++i)
      orders[rank].push_back(pass(ActionKind::Forward, rank, i));
    for (int i = 0; i < microbatches; ++i)
      orders[rank].push_back(pass(ActionKind::Backward, rank, i));
  }
  return orders;
}

/// 1F1B; with `zeroBubble`, ZB-H1: the same forwards and input gradients,
/// rank r holding back up to r weight gradients until its cool-down ends.
Lists oneForwardOneBackwardOrder(int ranks, int microbatches, bool zeroBubble) {
  Lists orders(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<Action> &order = orders[rank];
    int backwards = 0;
    int weights = 0;
    auto backward = [&] {
      if (!zeroBubble) {
        order.push_back(pass(ActionKind::Backward, rank, backwards++));
        return;
      }
      order.push_back(pass(ActionKind::BackwardInput, rank, backwards++));
      if (backwards - weights > rank)
        order.push_back(pass(ActionKind::BackwardWeight, rank, weights++));
    };
    int warmup = std::min(ranks - rank - 1, microbatches);
    for (int i = 0; i < warmup; ++i)
      order.push_back(pass(ActionKind::Forward, rank, i));
    for (int i = warmup; i < microbatches; ++i) {
      order.push_back(pass(ActionKind::Forward, rank, i));
      backward();
    }
    while (backwards < microbatches)
      backward();
    while (zeroBubble && weights < microbatches)
      order.push_back(pass(ActionKind::BackwardWeight, rank, weights++));
  }
  return orders;
}

/// Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving)
/// over the m * v (chunk, microbatch) pairs of each rank: groups of p
/// microbatches go through chunk 0, then chunk 1, ...; backwards visit the
/// chunks in reverse.
Lists interleavedOrder(int ranks, int microbatches, int virtualStages) {
  int group = ranks * virtualStages;
  int total = microbatches * virtualStages;
  Lists orders(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    auto stageOf = [&](int k, bool forward) {
      int chunk = (k % group) / ranks;
      if (!forward)
        chunk = virtualStages - 1 - chunk;
      return chunk * ranks + rank;
    };
    auto microbatchOf = [&](int k) { return k / group * ranks + k % ranks; };
    auto forward = [&](int k) {
      return pass(ActionKind::Forward, stageOf(k, true), microbatchOf(k));
    };
    auto backward = [&](int k) {
      return pass(ActionKind::Backward, stageOf(k, false), microbatchOf(k));
    };
    int warmup =
        std::min((ranks - rank - 1) * 2 + (virtualStages - 1) * ranks, total);
    std::vector<Action> &order = orders[rank];
    for (int k = 0; k < warmup; ++k)
      order.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
      order.push_back(forward(k + warmup));
      order.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k)
      order.push_back(backward(k));
  }
  return orders;
}

//===----------------------------------------------------------------------===//
// Transfer placement.
//===----------------------------------------------------------------------===//

int64_t unitCost(ActionKind kind) {
  return kind == ActionKind::Backward ? 2 : 1;
}

/// Start and end of every pass of `orders` when each pass starts as soon as
/// its rank is free and its inputs exist, with unit costs.
absl::StatusOr<std::vector<std::vector<std::pair<int64_t, int64_t>>>>
unitTimeline(const Lists &orders, const Shape &shape) {
  std::vector<int64_t> forwardEnd(shape.pairs(), -1);
  std::vector<int64_t> inputGradientEnd(shape.pairs(), -1);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> times(orders.size());
  std::vector<size_t> next(orders.size(), 0);
  std::vector<int64_t> clock(orders.size(), 0);
  size_t remaining = 0;
  for (const auto &order : orders)
    remaining += order.size();
  while (remaining > 0) {
    bool progress = false;
    for (size_t rank = 0; rank < orders.size(); ++rank) {
      for (; next[rank] < orders[rank].size(); ++next[rank], --remaining) {
        const Action &action = orders[rank][next[rank]];
        int64_t ready = clock[rank];
        bool blocked = false;
        auto after = [&](int64_t time) {
          blocked |= time < 0;
          ready = std::max(ready, time);
        };
        int64_t at = shape.index(action.stage, action.microbatch);
        switch (action.kind) {
        case ActionKind::Forward:
          if (action.stage > 0)
            after(forwardEnd[shape.index(action.stage - 1, action.microbatch)]);
          break;
        case ActionKind::Backward:
        case ActionKind::BackwardInput:
          after(forwardEnd[at]);
          if (action.stage + 1 < shape.stages)
            after(inputGradientEnd[shape.index(action.stage + 1,
                                               action.microbatch)]);
          break;
        default:
          after(inputGradientEnd[at]);
          break;
        }
        if (blocked)
          break;
        int64_t end = ready + unitCost(action.kind);
        times[rank].emplace_back(ready, end);
        if (action.kind == ActionKind::Forward)
          forwardEnd[at] = end;
        else if (action.kind != ActionKind::BackwardWeight)
          inputGradientEnd[at] = end;
        clock[rank] = end;
        progress = true;
      }
    }
    if (!progress)
      return absl::InternalError(
          "pipeline schedule generator produced a compute order that cannot "
          "run; this is a bug in Triad");
  }
  return times;
}

/// Adds the transfers to `orders`. Every pass and transfer gets a time (a
/// pass its unit-cost start, a transfer the end of the pass producing its
/// data), transfers going first among equal times; each rank's list is its
/// part of that one global order. The global order is a run of the lists
/// in which each transfer's two ends meet, so the lists are deadlock free
/// even with rendezvous transfers, and every receive comes after the data it
/// waits for was sent on the unit-cost clock, so no pass waits longer than
/// its inputs require.
absl::StatusOr<Lists> placeTransfers(const Lists &orders, const Shape &shape) {
  absl::StatusOr<std::vector<std::vector<std::pair<int64_t, int64_t>>>> times =
      unitTimeline(orders, shape);
  if (!times.ok())
    return times.status();
  struct Event {
    int64_t time;
    bool isTransfer;
    int rank;
    Action action;
    int receiver = -1;
    Action received = Action::local(ActionKind::Recv);
  };
  std::vector<Event> events;
  for (int rank = 0; rank < shape.ranks; ++rank) {
    for (size_t k = 0; k < orders[rank].size(); ++k) {
      const Action &action = orders[rank][k];
      auto [start, end] = (*times)[rank][k];
      events.push_back({start, false, rank, action});
      int to;
      Direction direction;
      if (action.kind == ActionKind::Forward &&
          action.stage + 1 < shape.stages) {
        to = action.stage + 1;
        direction = Direction::Activation;
      } else if ((action.kind == ActionKind::Backward ||
                  action.kind == ActionKind::BackwardInput) &&
                 action.stage > 0) {
        to = action.stage - 1;
        direction = Direction::Gradient;
      } else {
        continue;
      }
      int receiver = shape.rankOf(to);
      if (receiver == rank)
        continue;
      Event transfer{end, true, rank,
                     Action::send(direction, action.stage, action.microbatch,
                                  to, receiver)};
      transfer.receiver = receiver;
      transfer.received =
          Action::recv(direction, to, action.microbatch, action.stage, rank);
      events.push_back(transfer);
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event &lhs, const Event &rhs) {
                     if (lhs.time != rhs.time)
                       return lhs.time < rhs.time;
                     if (lhs.isTransfer != rhs.isTransfer)
                       return lhs.isTransfer;
                     return lhs.rank < rhs.rank;
                   });
  Lists lists(shape.ranks);
  for (const Event &event : events) {
    lists[event.rank].push_back(event.action);
    if (event.isTransfer)
      lists[event.receiver].push_back(event.received);
  }
  for (std::vector<Action> &list : lists) {
    list.push_back(Action::local(ActionKind::ReduceGradients));
    list.push_back(Action::local(ActionKind::Optimizer));
  }
  return lists;
}

//===----------------------------------------------------------------------===//
// Checks.
//===----------------------------------------------------------------------===//

absl::string_view directionName(Direction direction) {
  return direction == Direction::Activation ? "activation" : "gradient";
}

/// "3 microbatches", "1 rank".
std::string count(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

/// "send activation of microbatch 3 to rank 1 (stage 0 -> 1)".
std::string describeTransfer(const Action &action) {
  bool isSend = action.kind == ActionKind::Send;
  int from = isSend ? action.stage : action.peerStage;
  int to = isSend ? action.peerStage : action.stage;
  return absl::StrCat(isSend ? "send " : "recv ",
                      directionName(action.direction), " of microbatch ",
                      action.microbatch, isSend ? " to rank " : " from rank ",
                      action.peer, " (stage ", from, " -> ", to, ")");
}

absl::string_view withArticle(Direction direction) {
  return direction == Direction::Activation ? "an activation" : "a gradient";
}

/// What the rank lists have done so far, walking each in order. Pass flags
/// are indexed by (stage, microbatch), transfer flags by transfer index; only
/// the rank holding a stage writes its entries.
class Walk {
public:
  explicit Walk(const Shape &pipeline)
      : shape(pipeline), forwarded(shape.pairs()), inputGradient(shape.pairs()),
        wholeBackward(shape.pairs()), weightGradient(shape.pairs()),
        received(2 * shape.pairs()), sent(2 * shape.pairs()) {}

  /// The rule `action`, at this point of `rank`'s list, breaks; empty if
  /// none. Records what the action did otherwise.
  std::string check(const Action &action, int rank, bool reduced);

  bool forwardRan(int64_t index) const { return forwarded[index]; }
  bool inputGradientRan(int64_t index) const { return inputGradient[index]; }
  bool weightGradientRan(int64_t index) const { return weightGradient[index]; }

private:
  std::string checkRanges(const Action &action, int rank) const;
  std::string checkPass(const Action &action, int rank);
  std::string checkTransfer(const Action &action, int rank);
  /// Whether the activation or gradient that stage `from` hands on for
  /// `microbatch` is there on `rank`: received, or computed when `from` is on
  /// `rank` too.
  bool hasInput(Direction direction, int microbatch, int from, int rank) const;

  Shape shape;
  std::vector<char> forwarded, inputGradient, wholeBackward, weightGradient;
  std::vector<char> received, sent;
};

std::string Walk::checkRanges(const Action &action, int rank) const {
  if (action.stage < 0 || action.stage >= shape.stages)
    return absl::StrCat("names stage ", action.stage,
                        ", but the pipeline has stages 0 to ",
                        shape.stages - 1);
  if (action.microbatch < 0 || action.microbatch >= shape.microbatches)
    return absl::StrCat("names microbatch ", action.microbatch,
                        ", but the step has microbatches 0 to ",
                        shape.microbatches - 1);
  if (shape.rankOf(action.stage) != rank)
    return absl::StrCat("is on rank ", rank, ", but stage ", action.stage,
                        " lives on rank ", shape.rankOf(action.stage));
  return "";
}

bool Walk::hasInput(Direction direction, int microbatch, int from,
                    int rank) const {
  if (shape.rankOf(from) != rank)
    return received[(direction == Direction::Gradient ? shape.pairs() : 0) +
                    shape.index(from, microbatch)];
  return direction == Direction::Activation
             ? forwarded[shape.index(from, microbatch)]
             : inputGradient[shape.index(from, microbatch)];
}

std::string Walk::checkPass(const Action &action, int rank) {
  int stage = action.stage;
  int microbatch = action.microbatch;
  int64_t at = shape.index(stage, microbatch);
  auto missingInput = [&](Direction direction, int from) -> std::string {
    if (shape.rankOf(from) != rank)
      return absl::StrCat("runs before its ", directionName(direction),
                          " from stage ", from, " is received from rank ",
                          shape.rankOf(from));
    return absl::StrCat("runs before the ",
                        direction == Direction::Activation ? "forward"
                                                           : "backward",
                        " pass of stage ", from, " that computes its ",
                        directionName(direction));
  };
  switch (action.kind) {
  case ActionKind::Forward:
    if (forwarded[at])
      return "runs a second time";
    if (stage > 0 &&
        !hasInput(Direction::Activation, microbatch, stage - 1, rank))
      return missingInput(Direction::Activation, stage - 1);
    forwarded[at] = 1;
    return "";
  case ActionKind::Backward:
  case ActionKind::BackwardInput:
    if (inputGradient[at])
      return absl::StrCat("runs after the backward pass of stage ", stage,
                          ", microbatch ", microbatch, " already ran");
    if (!forwarded[at])
      return absl::StrCat("runs before its forward pass ",
                          format(pass(ActionKind::Forward, stage, microbatch)));
    if (stage + 1 < shape.stages &&
        !hasInput(Direction::Gradient, microbatch, stage + 1, rank))
      return missingInput(Direction::Gradient, stage + 1);
    inputGradient[at] = 1;
    if (action.kind == ActionKind::Backward)
      wholeBackward[at] = weightGradient[at] = 1;
    return "";
  default:
    if (weightGradient[at])
      return wholeBackward[at]
                 ? absl::StrCat(
                       "runs after ",
                       format(pass(ActionKind::Backward, stage, microbatch)),
                       ", which computed the weight gradient already")
                 : std::string("runs a second time");
    if (!inputGradient[at])
      return absl::StrCat(
          "runs before its input-gradient part ",
          format(pass(ActionKind::BackwardInput, stage, microbatch)));
    weightGradient[at] = 1;
    return "";
  }
}

std::string Walk::checkTransfer(const Action &action, int rank) {
  int expectedStage =
      Shape::peerStageOf(action.kind, action.direction, action.stage);
  bool isSend = action.kind == ActionKind::Send;
  if (action.peerStage != expectedStage)
    return absl::StrCat(
        "pairs stage ", action.stage, " with stage ", action.peerStage,
        ", but ", withArticle(action.direction),
        isSend ? " sent from stage " : " received at stage ", action.stage,
        isSend ? " goes to stage " : " comes from stage ", expectedStage);
  if (expectedStage < 0 || expectedStage >= shape.stages)
    return absl::StrCat("moves ", withArticle(action.direction),
                        " beyond the first or last stage");
  int peer = shape.rankOf(expectedStage);
  if (peer == rank)
    return absl::StrCat("transfers between stages ", action.stage, " and ",
                        expectedStage, ", which are both on rank ", rank);
  if (action.peer != peer)
    return absl::StrCat("names rank ", action.peer, ", but stage ",
                        expectedStage, " lives on rank ", peer);
  int64_t key = shape.transferIndex(action);
  if (!isSend) {
    if (received[key])
      return "receives a second time";
    received[key] = 1;
    return "";
  }
  if (sent[key])
    return "sends a second time";
  int64_t at = shape.index(action.stage, action.microbatch);
  if (action.direction == Direction::Activation ? !forwarded[at]
                                                : !inputGradient[at])
    return absl::StrCat("sends the ", directionName(action.direction),
                        " before the pass computing it");
  sent[key] = 1;
  return "";
}

std::string Walk::check(const Action &action, int rank, bool reduced) {
  if (!isCompute(action.kind) && !isTransfer(action.kind))
    return "";
  if (std::string broken = checkRanges(action, rank); !broken.empty())
    return broken;
  if (isTransfer(action.kind))
    return checkTransfer(action, rank);
  if (reduced)
    return "runs after reduce-grads, which must follow every pass";
  return checkPass(action, rank);
}

/// Whether `action` is a transfer whose ends can be keyed: stages and
/// microbatch in range, the peer stage adjacent in its direction.
bool isKeyedTransfer(const Action &action, const Shape &shape) {
  return isTransfer(action.kind) && action.stage >= 0 &&
         action.stage < shape.stages && action.microbatch >= 0 &&
         action.microbatch < shape.microbatches &&
         action.peerStage ==
             Shape::peerStageOf(action.kind, action.direction, action.stage) &&
         action.peerStage >= 0 && action.peerStage < shape.stages;
}

absl::Status invalid(const Schedule &schedule, absl::string_view what,
                     const std::vector<std::string> &problems) {
  return absl::FailedPreconditionError(
      absl::StrCat("pipeline schedule '", schedule.name, "' (",
                   count(schedule.ranks, "rank", "ranks"), ", ",
                   count(schedule.microbatches, "microbatch", "microbatches"),
                   ") ", what, ": ", absl::StrJoin(problems, "; ")));
}

/// Collects the first problem of each rank.
struct Problems {
  explicit Problems(int ranks) : byRank(ranks) {}
  std::vector<std::string> byRank;

  void add(int rank, std::string problem) {
    if (byRank[rank].empty())
      byRank[rank] = std::move(problem);
  }
  void add(int rank, size_t index, const Action &action,
           absl::string_view problem) {
    add(rank, absl::StrCat("rank ", rank, ": action ", index, " (",
                           format(action), ") ", problem));
  }
  std::vector<std::string> list() const {
    std::vector<std::string> problems;
    for (const std::string &problem : byRank)
      if (!problem.empty())
        problems.push_back(problem);
    return problems;
  }
};

absl::Status checkShape(const Schedule &schedule) {
  auto bad = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pipeline schedule '", schedule.name, "' is malformed: ", why));
  };
  if (schedule.ranks < 1 || schedule.microbatches < 1 ||
      schedule.virtualStages < 1)
    return bad(absl::StrCat("it has ", schedule.ranks, " ranks, ",
                            schedule.microbatches, " microbatches and ",
                            schedule.virtualStages,
                            " virtual stages per rank; each needs at least 1"));
  if (schedule.actions.size() != static_cast<size_t>(schedule.ranks))
    return bad(absl::StrCat("it has action lists for ",
                            count(schedule.actions.size(), "rank", "ranks"),
                            ", not ", schedule.ranks));
  int64_t actions = 0;
  for (const auto &list : schedule.actions)
    actions += list.size();
  int64_t stages = int64_t{schedule.ranks} * schedule.virtualStages;
  if (stages > kMaxStageMicrobatches ||
      stages * schedule.microbatches > kMaxStageMicrobatches)
    return bad(absl::StrCat(stages, " stages x ", schedule.microbatches,
                            " microbatches are more than the ",
                            kMaxStageMicrobatches,
                            " stage-microbatch pairs a schedule may have"));
  if (2 * stages * schedule.microbatches > actions)
    return bad(absl::StrCat("its ", actions, " actions cannot run a forward ",
                            "and a backward pass for each of ", stages,
                            " stages x ", schedule.microbatches,
                            " microbatches"));
  return absl::OkStatus();
}

} // namespace

absl::Status verify(const Schedule &schedule) {
  if (absl::Status shape = checkShape(schedule); !shape.ok())
    return shape;
  Shape shape = Shape::of(schedule);
  Walk walk(shape);
  Problems problems(schedule.ranks);
  for (int rank = 0; rank < schedule.ranks; ++rank) {
    const std::vector<Action> &list = schedule.actions[rank];
    int reductions = 0;
    int optimizers = 0;
    for (size_t k = 0; k < list.size(); ++k) {
      const Action &action = list[k];
      std::string broken = walk.check(action, rank, reductions > 0);
      if (action.kind == ActionKind::ReduceGradients && reductions++ > 0)
        broken = "runs a second time";
      if (action.kind == ActionKind::Optimizer) {
        if (reductions == 0)
          broken = "runs before reduce-grads";
        else if (optimizers++ > 0)
          broken = "runs a second time";
      }
      if (!broken.empty()) {
        problems.add(rank, k, action, broken);
        break;
      }
    }
    if (optimizers == 0)
      problems.add(
          rank, absl::StrCat("rank ", rank, " never runs ",
                             reductions == 0 ? "reduce-grads" : "optimizer"));
  }

  // Unmatched transfers, counted over whole lists so that a rank stopped
  // above does not make its peers' transfers look unmatched.
  std::vector<int> sends(2 * shape.pairs()), recvs(2 * shape.pairs());
  for (int rank = 0; rank < schedule.ranks; ++rank)
    for (const Action &action : schedule.actions[rank])
      if (isKeyedTransfer(action, shape))
        ++(action.kind == ActionKind::Send
               ? sends
               : recvs)[shape.transferIndex(action)];
  for (int rank = 0; rank < schedule.ranks; ++rank) {
    const std::vector<Action> &list = schedule.actions[rank];
    for (size_t k = 0; k < list.size(); ++k) {
      const Action &action = list[k];
      if (!isKeyedTransfer(action, shape))
        continue;
      int64_t key = shape.transferIndex(action);
      bool isSend = action.kind == ActionKind::Send;
      if ((isSend ? recvs : sends)[key] == 0)
        problems.add(rank, k, action,
                     absl::StrCat("has no matching ",
                                  isSend ? "receive" : "send", " on rank ",
                                  shape.rankOf(action.peerStage)));
    }
  }

  for (int stage = 0; stage < shape.stages; ++stage) {
    for (int i = 0; i < shape.microbatches; ++i) {
      int64_t at = shape.index(stage, i);
      int rank = shape.rankOf(stage);
      if (!walk.forwardRan(at))
        problems.add(rank,
                     absl::StrCat("rank ", rank, " never runs ",
                                  format(pass(ActionKind::Forward, stage, i))));
      else if (!walk.inputGradientRan(at))
        problems.add(rank, absl::StrCat("rank ", rank,
                                        " never runs the backward pass of "
                                        "stage ",
                                        stage, ", microbatch ", i));
      else if (!walk.weightGradientRan(at))
        problems.add(rank, absl::StrCat("rank ", rank, " never runs ",
                                        format(pass(ActionKind::BackwardWeight,
                                                    stage, i))));
    }
  }
  if (std::vector<std::string> list = problems.list(); !list.empty())
    return invalid(schedule, "is invalid", list);

  // Rendezvous run: a transfer completes when both ranks are at its ends.
  std::vector<size_t> next(schedule.ranks, 0);
  auto at = [&](int rank) -> const Action * {
    const std::vector<Action> &list = schedule.actions[rank];
    return next[rank] < list.size() ? &list[next[rank]] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < schedule.ranks; ++rank) {
      while (const Action *action = at(rank)) {
        if (!isTransfer(action->kind)) {
          ++next[rank];
          progress = true;
          continue;
        }
        const Action *other = at(action->peer);
        if (!other || other->kind == action->kind || !isTransfer(other->kind) ||
            other->peer != rank ||
            shape.transferIndex(*other) != shape.transferIndex(*action))
          break;
        ++next[rank];
        ++next[action->peer];
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  for (int rank = 0; rank < schedule.ranks; ++rank)
    if (const Action *action = at(rank))
      stuck.push_back(absl::StrCat("rank ", rank, " is stuck at ",
                                   describeTransfer(*action)));
  if (!stuck.empty())
    return invalid(schedule, "deadlocks", stuck);
  return absl::OkStatus();
}

absl::StatusOr<Schedule> build(absl::string_view name, int ranks,
                               int microbatches, int virtualStages) {
  if (std::find(std::begin(kScheduleNames), std::end(kScheduleNames), name) ==
      std::end(kScheduleNames))
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pipeline schedule '", name, "'; use one of ",
                     absl::StrJoin(kScheduleNames, ", ")));
  if (ranks < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("a pipeline needs at least 1 rank, got ", ranks,
                     "; set the pipeline-parallel size to 1 or more"));
  if (microbatches < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("a pipeline step needs at least 1 microbatch, got ",
                     microbatches, "; set microbatches to 1 or more"));
  if (virtualStages < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "virtual stages per rank must be at least 1, got ", virtualStages));
  bool interleaved = name == "interleaved";
  if (virtualStages > 1 && !interleaved)
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule '", name, "' runs one stage per rank, but ", virtualStages,
        " virtual stages per rank were requested; use schedule 'interleaved' "
        "or 1 virtual stage"));
  if (interleaved && microbatches % ranks != 0) {
    int below = microbatches / ranks * ranks;
    return absl::InvalidArgumentError(absl::StrCat(
        "the interleaved schedule needs the number of microbatches (",
        microbatches, ") to be a multiple of the pipeline ranks (", ranks,
        "); use ", below > 0 ? absl::StrCat(below, " or ") : "", below + ranks,
        " microbatches"));
  }
  int64_t pairs = int64_t{ranks} * virtualStages * microbatches;
  if (pairs > kMaxStageMicrobatches)
    return absl::InvalidArgumentError(absl::StrCat(
        "a pipeline of ", int64_t{ranks} * virtualStages, " stages x ",
        microbatches, " microbatches is too large to schedule (at most ",
        kMaxStageMicrobatches, " stage-microbatch pairs)"));

  Shape shape{ranks, microbatches, ranks * virtualStages};
  Lists orders;
  if (name == "gpipe")
    orders = gpipeOrder(ranks, microbatches);
  else if (name == "zb-h1")
    orders = oneForwardOneBackwardOrder(ranks, microbatches, true);
  else if (virtualStages > 1)
    orders = interleavedOrder(ranks, microbatches, virtualStages);
  else
    orders = oneForwardOneBackwardOrder(ranks, microbatches, false);
  absl::StatusOr<Lists> lists = placeTransfers(orders, shape);
  if (!lists.ok())
    return lists.status();
  return Schedule{std::string(name), ranks, microbatches, virtualStages,
                  *std::move(lists)};
}

absl::StatusOr<Timeline> simulate(const Schedule &schedule, double forwardCost,
                                  double backwardCost) {
  if (!(forwardCost > 0) || !(backwardCost > 0) || std::isinf(forwardCost) ||
      std::isinf(backwardCost))
    return absl::InvalidArgumentError(
        absl::StrFormat("pass costs must be positive and finite, got forward "
                        "%g and backward %g",
                        forwardCost, backwardCost));
  if (absl::Status valid = verify(schedule); !valid.ok())
    return valid;
  Shape shape = Shape::of(schedule);
  auto cost = [&](ActionKind kind) {
    switch (kind) {
    case ActionKind::Forward:
      return forwardCost;
    case ActionKind::Backward:
      return backwardCost;
    case ActionKind::BackwardInput:
    case ActionKind::BackwardWeight:
      return backwardCost / 2;
    default:
      return 0.0;
    }
  };
  int ranks = schedule.ranks;
  Timeline timeline;
  timeline.busy.assign(ranks, 0);
  timeline.start.resize(ranks);
  timeline.end.resize(ranks);
  std::vector<double> sentAt(2 * shape.pairs(), -1);
  std::vector<double> clock(ranks, 0);
  std::vector<size_t> next(ranks, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < ranks; ++rank) {
      const std::vector<Action> &list = schedule.actions[rank];
      for (; next[rank] < list.size(); ++next[rank]) {
        const Action &action = list[next[rank]];
        double start = clock[rank];
        if (action.kind == ActionKind::Recv) {
          double sent = sentAt[shape.transferIndex(action)];
          if (sent < 0)
            break;
          start = std::max(start, sent);
        }
        if (action.kind == ActionKind::Send)
          sentAt[shape.transferIndex(action)] = start;
        double end = start + cost(action.kind);
        timeline.start[rank].push_back(start);
        timeline.end[rank].push_back(end);
        timeline.busy[rank] += cost(action.kind);
        clock[rank] = end;
        progress = true;
      }
    }
  }
  timeline.makespan = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  double busy = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    double rankIdle = timeline.makespan - timeline.busy[rank];
    timeline.bubble.push_back(rankIdle / timeline.busy[rank]);
    idle += rankIdle;
    busy += timeline.busy[rank];
  }
  timeline.bubbleFraction = idle / busy;
  timeline.idleFraction = idle / (ranks * timeline.makespan);
  return timeline;
}

double closedFormBubble(absl::string_view name, int ranks, int microbatches,
                        int virtualStages) {
  double idle = ranks - 1;
  if (name == "gpipe" || name == "1f1b")
    return idle / microbatches;
  if (name == "interleaved")
    return idle / (static_cast<double>(virtualStages) * microbatches);
  if (name == "zb-h1")
    return idle / (3.0 * microbatches);
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<int> peakInFlight(const Schedule &schedule, InFlightUntil until) {
  std::vector<int> peaks;
  for (const std::vector<Action> &list : schedule.actions) {
    std::set<std::pair<int, int>> live;
    int peak = 0;
    for (const Action &action : list) {
      std::pair<int, int> key(action.stage, action.microbatch);
      bool ends = action.kind == ActionKind::Backward ||
                  action.kind == (until == InFlightUntil::BackwardInput
                                      ? ActionKind::BackwardInput
                                      : ActionKind::BackwardWeight);
      if (action.kind == ActionKind::Forward)
        live.insert(key);
      else if (ends)
        live.erase(key);
      peak = std::max(peak, static_cast<int>(live.size()));
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::string format(const Action &action) {
  absl::string_view direction =
      action.direction == Direction::Activation ? "act" : "grad";
  switch (action.kind) {
  case ActionKind::Forward:
    return absl::StrCat("F", action.stage, ".", action.microbatch);
  case ActionKind::Backward:
    return absl::StrCat("B", action.stage, ".", action.microbatch);
  case ActionKind::BackwardInput:
    return absl::StrCat("BI", action.stage, ".", action.microbatch);
  case ActionKind::BackwardWeight:
    return absl::StrCat("BW", action.stage, ".", action.microbatch);
  case ActionKind::Send:
    return absl::StrCat("send-", direction, action.stage, ".",
                        action.microbatch, ">", action.peer);
  case ActionKind::Recv:
    return absl::StrCat("recv-", direction, action.stage, ".",
                        action.microbatch, "<", action.peer);
  case ActionKind::ReduceGradients:
    return "reduce-grads";
  case ActionKind::Optimizer:
    return "optimizer";
  }
  return "?";
}

absl::StatusOr<Action> parseAction(absl::string_view token) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule action '", token, "': ", why));
  };
  if (token == "reduce-grads")
    return Action::local(ActionKind::ReduceGradients);
  if (token == "optimizer")
    return Action::local(ActionKind::Optimizer);
  // A non-negative decimal number at the front of `rest`, consumed.
  auto number = [](absl::string_view &rest, int &out) {
    size_t digits = 0;
    while (digits < rest.size() && digits < 9 &&
           absl::ascii_isdigit(static_cast<unsigned char>(rest[digits])))
      ++digits;
    if (digits == 0)
      return false;
    out = 0;
    for (size_t i = 0; i < digits; ++i)
      out = out * 10 + (rest[i] - '0');
    rest.remove_prefix(digits);
    return true;
  };
  // "<stage>.<microbatch>" at the front of `rest`, consumed.
  auto stageAndMicrobatch = [&](absl::string_view &rest, int &stage,
                                int &microbatch) {
    return number(rest, stage) && absl::ConsumePrefix(&rest, ".") &&
           number(rest, microbatch);
  };
  absl::string_view rest = token;
  int stage = 0, microbatch = 0, peer = 0;
  for (auto [prefix, kind] : {std::pair{"BI", ActionKind::BackwardInput},
                              std::pair{"BW", ActionKind::BackwardWeight},
                              std::pair{"F", ActionKind::Forward},
                              std::pair{"B", ActionKind::Backward}}) {
    if (!absl::ConsumePrefix(&rest, prefix))
      continue;
    if (!stageAndMicrobatch(rest, stage, microbatch) || !rest.empty())
      return bad("expected <stage>.<microbatch> after the kind");
    return Action::compute(kind, stage, microbatch);
  }
  bool send = absl::ConsumePrefix(&rest, "send-");
  if (!send && !absl::ConsumePrefix(&rest, "recv-"))
    return bad("unknown kind (F, B, BI, BW, send-, recv-, reduce-grads or "
               "optimizer)");
  Direction direction;
  if (absl::ConsumePrefix(&rest, "act"))
    direction = Direction::Activation;
  else if (absl::ConsumePrefix(&rest, "grad"))
    direction = Direction::Gradient;
  else
    return bad("a transfer moves 'act' or 'grad'");
  if (!stageAndMicrobatch(rest, stage, microbatch) ||
      !absl::ConsumePrefix(&rest, send ? ">" : "<") || !number(rest, peer) ||
      !rest.empty())
    return bad(send ? "expected <stage>.<microbatch>><peer rank>"
                    : "expected <stage>.<microbatch><<peer rank>");
  bool activation = direction == Direction::Activation;
  int peerStage = (activation == send) ? stage + 1 : stage - 1;
  return send ? Action::send(direction, stage, microbatch, peerStage, peer)
              : Action::recv(direction, stage, microbatch, peerStage, peer);
}

std::string format(const Schedule &schedule) {
  std::string text =
      absl::StrCat("schedule ", schedule.name, " ranks=", schedule.ranks,
                   " microbatches=", schedule.microbatches,
                   " virtual-stages=", schedule.virtualStages, "\n");
  for (size_t rank = 0; rank < schedule.actions.size(); ++rank)
    absl::StrAppend(&text, "rank ", rank, ":",
                    absl::StrJoin(schedule.actions[rank], "",
                                  [](std::string *out, const Action &action) {
                                    absl::StrAppend(out, " ", format(action));
                                  }),
                    "\n");
  return text;
}

} // namespace triad::schedule
