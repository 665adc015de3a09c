//===- Schedule.h - pipeline-parallel schedules and their checks -*- C++
//-*-===//
//
// Per-rank action lists for pipeline parallelism (GPipe, 1F1B, interleaved
// 1F1B, zero-bubble H1) with their point-to-point transfers, a static check
// that a schedule is complete and free of deadlocks, and a unit-cost timeline
// that measures its bubble. Used by the compiler, which emits the schedules,
// and by the runtime, which re-checks a loaded plan's; it depends on no MLIR
// or LLVM library.
//
// Model: p pipeline ranks, m microbatches and v virtual stages per rank give
// S = p * v model stages; stage s lives on rank s % p (Megatron's interleaved
// placement, so for v = 1 stage s is on rank s). Activations flow from stage
// s to s + 1, gradients from s + 1 to s.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_SCHEDULE_SCHEDULE_H
#define TRIAD_RUNTIME_SCHEDULE_SCHEDULE_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "absl/strings/string_view.h"
#include <string>
#include <vector>

namespace triad::schedule {

/// The schedules `build` knows.
inline constexpr absl::string_view kScheduleNames[] = {"gpipe", "1f1b",
                                                       "interleaved", "zb-h1"};

enum class ActionKind {
  Forward,
  /// The whole backward pass of a stage: input and weight gradients.
  Backward,
  /// Zero-bubble split of the backward pass: the input gradient ("B" in the
  /// paper), which the previous stage waits for...
  BackwardInput,
  /// ...and the weight gradient ("W"), which nothing downstream waits for.
  BackwardWeight,
  Send,
  Recv,
  /// Once per step after every compute action: collectives over the other
  /// mesh axes, local as far as the pipeline is concerned.
  ReduceGradients,
  Optimizer,
};

enum class Direction { Activation, Gradient };

struct Action {
  ActionKind kind = ActionKind::Forward;
  /// The stage this rank computes or transfers for (for a Send the stage
  /// that produced the data, for a Recv the stage that consumes it); -1 for
  /// ReduceGradients and Optimizer.
  int stage = -1;
  int microbatch = -1;
  /// Send and Recv only: the other rank, what moves and the other end's
  /// stage (s + 1 for activations sent by s, s - 1 for gradients).
  int peer = -1;
  Direction direction = Direction::Activation;
  int peerStage = -1;

  static Action compute(ActionKind kind, int stage, int microbatch);
  static Action send(Direction direction, int stage, int microbatch,
                     int peerStage, int peer);
  static Action recv(Direction direction, int stage, int microbatch,
                     int peerStage, int peer);
  static Action local(ActionKind kind);

  friend bool operator==(const Action &lhs, const Action &rhs);
  friend bool operator!=(const Action &lhs, const Action &rhs) {
    return !(lhs == rhs);
  }
};

struct Schedule {
  std::string name;
  int ranks = 0;
  int microbatches = 0;
  int virtualStages = 1;
  /// One list per pipeline rank, executed in order.
  std::vector<std::vector<Action>> actions;

  int stages() const { return ranks * virtualStages; }
  int rankOf(int stage) const { return stage % ranks; }
};

/// Builds schedule `name` (one of kScheduleNames) for `ranks` pipeline ranks
/// and `microbatches` microbatches:
///  - gpipe: every forward, then every backward;
///  - 1f1b: PipeDream-flush / Megatron's non-interleaved schedule: rank r runs
///    min(p - r - 1, m) warm-up forwards, then alternates one forward and one
///    backward, then the remaining backwards;
///  - interleaved: Megatron's interleaved 1F1B over `virtualStages` stages per
///    rank; needs m to be a multiple of p (with v = 1 it is 1f1b);
///  - zb-h1: zero-bubble H1 (Qi et al. 2023): 1F1B's order of forwards and
///    input gradients, with rank r keeping up to r weight gradients pending
///    and running them once its forwards are done, so that they fill the
///    bubbles; no rank holds activations (until W) for more microbatches
///    than 1F1B's rank 0 does.
/// Transfers are placed by the unit-cost timeline (F = 1, B = 2, B = W = 1
/// when split): a send right after the pass that produces the data, the
/// receive at the point of the receiver's list where that data arrives
/// (before the pass that consumes it). Every rank's list ends with
/// ReduceGradients and Optimizer. Bad arguments are InvalidArgument errors.
absl::StatusOr<Schedule> build(absl::string_view name, int ranks,
                               int microbatches, int virtualStages = 1);

/// Checks `schedule` statically, as the runtime must before running it:
///  - every action names a stage and microbatch in range, on the rank that
///    holds the stage; transfers go between adjacent stages on other ranks;
///  - every pass has its inputs: Forward(s, i) for s > 0 after the activation
///    from s - 1 is received (or computed, on the same rank); Backward and
///    BackwardInput(s, i) after Forward(s, i) and, for s < S - 1, after the
///    gradient from s + 1 is received; BackwardWeight(s, i) after
///    BackwardInput(s, i); a send after the pass that produces its data;
///  - every (stage, microbatch) runs forward once and backward once (whole,
///    or split into input and weight parts); each rank runs ReduceGradients
///    once, after all its passes, then Optimizer once;
///  - every send has exactly one matching receive (same direction, stage pair
///    and microbatch) and vice versa;
///  - the whole schedule completes when a send and a receive both block
///    until the other side reaches its match (rendezvous, the strictest
///    semantics: what completes here completes with buffered sends too).
/// Failures are FailedPrecondition errors naming, for each rank at fault, its
/// first violated rule or the transfer it is stuck at.
absl::Status verify(const Schedule &schedule);

/// A simulated run of a schedule.
struct Timeline {
  double makespan = 0;
  /// Compute time per rank.
  std::vector<double> busy;
  /// Idle time over compute time per rank: the definition of Megatron's
  /// closed forms ("bubble time fraction" = t_pb / t_id).
  std::vector<double> bubble;
  /// The same over all ranks: total idle time over total compute time.
  double bubbleFraction = 0;
  /// Total idle time over total time (ranks x makespan).
  double idleFraction = 0;
  /// Start and end time of every action, per rank, in list order.
  std::vector<std::vector<double>> start, end;
};

/// Runs `schedule` (which must pass `verify`) on a clock: a forward costs
/// `forwardCost`, a whole backward `backwardCost`, each half of a split
/// backward `backwardCost / 2`; transfers, ReduceGradients and Optimizer are
/// free. A send does not wait for its receiver (the data is on its way when
/// the producing pass ends); a receive waits for its send. Ranks start at 0
/// and every rank's time counts until the last one ends.
absl::StatusOr<Timeline> simulate(const Schedule &schedule,
                                  double forwardCost = 1,
                                  double backwardCost = 2);

/// The published bubble fraction (idle over compute time) of a schedule:
/// (p - 1) / m for gpipe and 1f1b, (p - 1) / (v m) for interleaved, and for
/// zb-h1 (p - 1) / (3 m), the paper's (p - 1)(F + B - W) bubble with
/// F = B = W. The built schedules meet these exactly in `simulate` with its
/// default costs (zb-h1 for m >= p); gpipe and 1f1b with any costs. NaN for
/// an unknown name.
double closedFormBubble(absl::string_view name, int ranks, int microbatches,
                        int virtualStages = 1);

/// Where a microbatch stops counting as in flight on a rank.
enum class InFlightUntil {
  /// Its input gradient (Backward or BackwardInput) has run.
  BackwardInput,
  /// Its weight gradient (Backward or BackwardWeight) has run: the stage
  /// holds its activations until then.
  BackwardWeight,
};

/// The peak number, per rank, of (stage, microbatch) pairs whose forward has
/// run and whose backward has not: m on every rank for gpipe, min(p - r, m)
/// on rank r for 1f1b.
std::vector<int>
peakInFlight(const Schedule &schedule,
             InFlightUntil until = InFlightUntil::BackwardInput);

/// One token per action (s: stage, i: microbatch, r: the peer rank):
///   Fs.i   Bs.i   BIs.i   BWs.i       forward, backward, input / weight part
///   send-acts.i>r   recv-acts.i<r     activation of stage s sent to rank r /
///                                     for stage s received from rank r
///   send-grads.i>r  recv-grads.i<r    likewise for gradients
///   reduce-grads   optimizer
/// e.g. "F0.1", "send-act0.1>1", "recv-grad0.1<1".
std::string format(const Action &action);

/// Reads one token of `format` back: the inverse of format(Action). The
/// other end's stage of a transfer follows from its direction (s + 1 for
/// activations sent by s, s - 1 for gradients; the reverse for receives).
/// Anything else is an InvalidArgument error quoting the token.
absl::StatusOr<Action> parseAction(absl::string_view token);

/// The schedule as text, one line per rank after a header:
///   schedule 1f1b ranks=2 microbatches=4 virtual-stages=1
///   rank 0: F0.0 send-act0.0>1 F0.1 ...
///   rank 1: recv-act1.0<0 F1.0 ...
std::string format(const Schedule &schedule);

} // namespace triad::schedule

#endif // TRIAD_RUNTIME_SCHEDULE_SCHEDULE_H
