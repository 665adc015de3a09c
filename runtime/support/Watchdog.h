//===- Watchdog.h - ends a rank that stops making progress -------*- C++
//-*-===//
//
// A rank that stops without dying (a peer stopped or deadlocked in a
// collective, a GPU that hangs) would keep the whole job waiting forever.
// The training loop records what it is doing in a Progress board (the step,
// the call, the instruction, and the collective or transfer it waits for);
// a Watchdog thread reads the board and, when it has not advanced for the
// timeout, hands a report naming all of that to its handler, which ends the
// process (triad-run prints it and exits, and the launcher ends the job).
//
// Updates are a few stores under an uncontended mutex: cheap enough for
// every instruction. The strings the board keeps are the caller's and must
// outlive it (names from the plan, static opcode names).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_SUPPORT_WATCHDOG_H
#define TRIAD_RUNTIME_SUPPORT_WATCHDOG_H

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace triad::rt {

/// The world ranks a wait involves: the members of a collective's group
/// (this rank among them), or a transfer's peer.
struct WaitPeers {
  /// "ranks 0, 2" or "rank 3".
  std::string text;
  std::vector<int64_t> ranks;
};

/// What a rank blocks on: a collective or a transfer started by an earlier
/// instruction of the running call or of an earlier call.
struct Wait {
  /// "the collective" or "the transfer".
  const char *kind = "";
  /// The instruction that started it, and its opcode.
  size_t instruction = 0;
  const char *opcode = "";
  /// Whom it waits for; null when unknown.
  const WaitPeers *peers = nullptr;
  /// The call that started it (its function and microbatch); null: the
  /// running call.
  const char *function = nullptr;
  uint32_t microbatch = 0;
};

/// Where a rank waits, as its peers can compare it with their own: the
/// step, the call (function and microbatch) and the instruction that
/// started the collective or transfer (whichever call waits for it).
struct WaitPoint {
  uint64_t step = 0;
  std::string function;
  uint32_t microbatch = 0;
  size_t instruction = 0;
  bool transfer = false;
  std::vector<int64_t> peers;

  /// "12/microbatch_step/2/41": equal for two ranks waiting in the same
  /// collective.
  std::string key() const;
};

class Progress {
public:
  using Clock = std::chrono::steady_clock;

  Progress() : last(Clock::now()) {}

  /// Each marks progress.
  void beginStep(uint64_t step);
  void beginCall(const char *function, uint32_t microbatch);
  void instruction(size_t index, const char *opcode);
  /// Something outside the calls ("saving a checkpoint").
  void phase(const char *what);
  void endWait();
  /// Marks the start of a wait (not progress).
  void beginWait(const Wait &wait);

  /// When the board last advanced.
  Clock::time_point lastProgress() const;
  /// "step 12, call microbatch_step (microbatch 2), instruction 57
  /// (AllReduce), waiting for the collective of instruction 41 (AllReduce:
  /// ranks 0, 1)", and " started by call recv_act_s1 (microbatch 3)" when
  /// another call started it.
  std::string describe() const;
  /// Where the rank waits, when it waits inside a call.
  std::optional<WaitPoint> waitPoint() const;
  /// What this rank tells a peer that asks where it is (PeerAnswer's
  /// text form).
  std::string answer() const;

private:
  void advance() { last = Clock::now(); }

  mutable std::mutex mutex;
  Clock::time_point last;
  uint64_t step = 0;
  const char *function = nullptr;
  uint32_t microbatch = 0;
  bool inInstruction = false;
  size_t index = 0;
  const char *opcode = "";
  const char *what = nullptr;
  bool waiting = false;
  Wait wait;
};

/// A rank's answer to a peer asking where it is: its wait point's key and
/// the ranks it waits for (none when it waits for nothing), and describe().
/// As text (what travels): "key<TAB>ranks<TAB>description", ranks joined by
/// commas, "-" for an empty key.
struct PeerAnswer {
  std::string key;
  std::vector<int64_t> waitsFor;
  std::string where;

  std::string text() const;
  /// The answer a text holds; a text of another form is all `where`.
  static PeerAnswer parse(const std::string &text);
};

/// Who answered, by world rank (nullopt: no answer in time).
using PeerAnswers = std::map<int64_t, std::optional<std::string>>;

/// Asks `here`'s peers where they are with `ask` (world ranks, a time
/// limit), then, within the same `within` in all, the ranks those that
/// answered wait for in turn, and so on: the chain from a waiting rank to
/// the one that holds everybody up. Returns every answer (this rank's own
/// excluded).
PeerAnswers
askAround(const WaitPoint &here, int64_t self,
          const std::function<PeerAnswers(const std::vector<int64_t> &,
                                          std::chrono::milliseconds)> &ask,
          std::chrono::milliseconds within);

/// The sentence a hang report adds from `answers` (askAround's): the peers
/// of the wait that are elsewhere ("not arrived: rank 3 is at step 5, ...",
/// "rank 1 did not answer within 2 s (stopped, hung or dead)"), the ranks
/// further along the chain, and which peers wait at `here` too.
std::string describePeers(const WaitPoint &here, int64_t self,
                          const PeerAnswers &answers,
                          std::chrono::milliseconds within);

/// A thread that watches `progress` and calls `onHang(report)` once, from
/// the thread, when it has not advanced for `timeout` (the report is
/// Progress::describe() with the time waited). `onHang` is expected to end
/// the process; if it returns, the watchdog stops watching.
class Watchdog {
public:
  Watchdog(const Progress &progress, std::chrono::milliseconds timeout,
           std::function<void(const std::string &)> onHang,
           std::chrono::milliseconds poll = std::chrono::milliseconds(200));
  ~Watchdog();
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

private:
  void watch();

  const Progress &progress;
  std::chrono::milliseconds timeout, poll;
  std::function<void(const std::string &)> onHang;
  std::mutex mutex;
  std::condition_variable stopped;
  bool stopping = false;
  std::thread thread;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_SUPPORT_WATCHDOG_H
