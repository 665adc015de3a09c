//===- Watchdog.cpp - ends a rank that stops making progress --------------===//

#include "runtime/support/Watchdog.h"

#include "absl/algorithm/container.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <set>

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
    if (wait.peers && !wait.peers->text.empty())
      absl::StrAppend(&text, ": ", wait.peers->text);
    absl::StrAppend(&text, ")");
    if (wait.function &&
        (!function || std::string_view(wait.function) != function ||
         wait.microbatch != microbatch))
      absl::StrAppend(&text, " started by call ", wait.function,
                      " (microbatch ", wait.microbatch, ")");
  }
  return text;
}

std::string WaitPoint::key() const {
  return absl::StrCat(step, "/", function, "/", microbatch, "/", instruction);
}

std::optional<WaitPoint> Progress::waitPoint() const {
  std::lock_guard<std::mutex> lock(mutex);
  const char *started = wait.function ? wait.function : function;
  if (!waiting || !started)
    return std::nullopt;
  WaitPoint point;
  point.step = step;
  point.function = started;
  point.microbatch = wait.function ? wait.microbatch : microbatch;
  point.instruction = wait.instruction;
  point.transfer = std::string_view(wait.kind) == "the transfer";
  if (wait.peers)
    point.peers = wait.peers->ranks;
  return point;
}

std::string Progress::answer() const {
  std::optional<WaitPoint> point = waitPoint();
  PeerAnswer answer;
  if (point) {
    answer.key = point->key();
    answer.waitsFor = point->peers;
  }
  answer.where = describe();
  return answer.text();
}

std::string PeerAnswer::text() const {
  return absl::StrCat(key.empty() ? "-" : key, "\t",
                      absl::StrJoin(waitsFor, ","), "\t", where);
}

PeerAnswer PeerAnswer::parse(const std::string &text) {
  PeerAnswer answer;
  std::vector<std::string> fields =
      absl::StrSplit(text, absl::MaxSplits('\t', 2));
  std::vector<int64_t> ranks;
  bool valid = fields.size() == 3;
  if (valid && !fields[1].empty())
    for (absl::string_view field : absl::StrSplit(fields[1], ',')) {
      int64_t rank = 0;
      if (!absl::SimpleAtoi(field, &rank)) {
        valid = false;
        break;
      }
      ranks.push_back(rank);
    }
  if (!valid) {
    answer.where = text;
    return answer;
  }
  answer.key = fields[0] == "-" ? "" : fields[0];
  answer.waitsFor = std::move(ranks);
  answer.where = fields[2];
  return answer;
}

PeerAnswers
askAround(const WaitPoint &here, int64_t self,
          const std::function<PeerAnswers(const std::vector<int64_t> &,
                                          std::chrono::milliseconds)> &ask,
          std::chrono::milliseconds within) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + within;
  PeerAnswers answers;
  std::set<int64_t> asked = {self};
  std::vector<int64_t> next;
  auto add = [&](const std::vector<int64_t> &ranks) {
    for (int64_t rank : ranks)
      if (asked.insert(rank).second)
        next.push_back(rank);
  };
  add(here.peers);
  while (!next.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0)
      break;
    std::vector<int64_t> now = std::move(next);
    next.clear();
    for (auto &[rank, answer] : ask(now, left)) {
      if (answer)
        add(PeerAnswer::parse(*answer).waitsFor);
      answers[rank] = std::move(answer);
    }
  }
  answers.erase(self);
  return answers;
}

std::string describePeers(const WaitPoint &here, int64_t self,
                          const PeerAnswers &answers,
                          std::chrono::milliseconds within) {
  std::vector<int64_t> arrived;
  std::vector<std::string> elsewhere, further;
  std::string key = here.key();
  int64_t ms = within.count();
  std::string silence = absl::StrCat(
      " did not answer within ",
      ms % 1000 == 0 ? absl::StrCat(ms / 1000, " s") : absl::StrCat(ms, " ms"),
      " (stopped, hung or dead)");
  for (const auto &[rank, text] : answers) {
    if (rank == self)
      continue;
    bool direct = absl::c_linear_search(here.peers, rank);
    std::vector<std::string> &list = direct ? elsewhere : further;
    if (!text) {
      list.push_back(absl::StrCat("rank ", rank, silence));
      continue;
    }
    PeerAnswer answer = PeerAnswer::parse(*text);
    // Two ranks of a collective wait at the same point; a transfer's two
    // sides run different instructions, so its peer is always described.
    if (direct && !here.transfer && answer.key == key)
      arrived.push_back(rank);
    else
      list.push_back(absl::StrCat("rank ", rank, " is at ", answer.where));
  }
  std::vector<std::string> parts;
  if (!elsewhere.empty())
    parts.push_back(absl::StrCat(here.transfer ? "its peer: " : "not arrived: ",
                                 absl::StrJoin(elsewhere, "; ")));
  if (!further.empty())
    parts.push_back(
        absl::StrCat("further along: ", absl::StrJoin(further, "; ")));
  if (!arrived.empty())
    parts.push_back(absl::StrCat(
        arrived.size() == 1 ? "rank " : "ranks ", absl::StrJoin(arrived, ", "),
        arrived.size() == 1 ? " waits" : " wait", " here too"));
  return absl::StrJoin(parts, "; ");
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
