//===- Watchdog.cpp - ends a rank that stops making progress --------------===//

#include "runtime/support/Watchdog.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace triad::rt {

void Progress::beginStep(uint64_t value) {
  std::lock_guard<std::mutex> lock(mutex);
  step = value;
  function = nullptr;
  inInstruction = waiting = false;
  what = nullptr;
  advance();
}

void Progress::beginCall(const char *name, uint32_t value) {
  std::lock_guard<std::mutex> lock(mutex);
  function = name;
  microbatch = value;
  inInstruction = waiting = false;
  what = nullptr;
  advance();
}

void Progress::instruction(size_t value, const char *name) {
  std::lock_guard<std::mutex> lock(mutex);
  inInstruction = true;
  index = value;
  opcode = name;
  waiting = false;
  advance();
}

void Progress::phase(const char *value) {
  std::lock_guard<std::mutex> lock(mutex);
  what = value;
  function = nullptr;
  inInstruction = waiting = false;
  advance();
}

void Progress::beginWait(const Wait &value) {
  std::lock_guard<std::mutex> lock(mutex);
  wait = value;
  waiting = true;
}

void Progress::endWait() {
  std::lock_guard<std::mutex> lock(mutex);
  waiting = false;
  advance();
}

Progress::Clock::time_point Progress::lastProgress() const {
  std::lock_guard<std::mutex> lock(mutex);
  return last;
}

std::string Progress::describe() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::string text = step > 0 ? absl::StrCat("step ", step) : "before step 1";
  if (what)
    absl::StrAppend(&text, ", ", what);
  if (function) {
    absl::StrAppend(&text, ", call ", function, " (microbatch ", microbatch,
                    ")");
    if (inInstruction)
      absl::StrAppend(&text, ", instruction ", index, " (", opcode, ")");
    else
      absl::StrAppend(&text, ", finishing the call");
  }
  if (waiting) {
    absl::StrAppend(&text, ", waiting for ", wait.kind, " of instruction ",
                    wait.instruction, " (", wait.opcode);
    if (wait.peers && !wait.peers->empty())
      absl::StrAppend(&text, ": ", *wait.peers);
    absl::StrAppend(&text, ")");
  }
  return text;
}

Watchdog::Watchdog(const Progress &progress, std::chrono::milliseconds timeout,
                   std::function<void(const std::string &)> onHang,
                   std::chrono::milliseconds poll)
    : progress(progress), timeout(timeout), poll(poll),
      onHang(std::move(onHang)), thread([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  stopped.notify_all();
  thread.join();
}

void Watchdog::watch() {
  using Seconds = std::chrono::duration<double>;
  std::unique_lock<std::mutex> lock(mutex);
  auto woke = Progress::Clock::now();
  // The longest this process went unscheduled (stopped, suspended) since
  // the board last advanced: a rank that was itself stopped says so rather
  // than blame its peers.
  Progress::Clock::duration frozen{};
  auto frozenSince = progress.lastProgress();
  while (!stopped.wait_for(lock, poll, [this] { return stopping; })) {
    auto now = Progress::Clock::now(), last = progress.lastProgress();
    if (last != frozenSince) {
      frozen = {};
      frozenSince = last;
    }
    frozen = std::max(frozen, now - woke - poll);
    woke = now;
    auto idle = now - last;
    if (idle < timeout)
      continue;
    std::string report = absl::StrCat(
        "no progress for ", static_cast<int64_t>(Seconds(idle).count()),
        " s: ", progress.describe());
    if (frozen > timeout / 2)
      absl::StrAppend(&report, " (this process itself did not run for ",
                      static_cast<int64_t>(Seconds(frozen).count()),
                      " s: it was stopped or suspended)");
    lock.unlock();
    onHang(report);
    return;
  }
}

} // namespace triad::rt
