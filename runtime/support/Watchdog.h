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
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace triad::rt {

/// What a rank blocks on: a collective or a transfer started by an earlier
/// instruction of the running call.
struct Wait {
  /// "the collective" or "the transfer".
  const char *kind = "";
  /// The instruction that started it, and its opcode.
  size_t instruction = 0;
  const char *opcode = "";
  /// The world ranks it waits for ("ranks 0, 2" of its group, or "rank 3"
  /// for a transfer's peer); "" when unknown.
  const std::string *peers = nullptr;
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
  /// ranks 0, 1)".
  std::string describe() const;

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
