//===- CallRecordings.h - when a call's device work is recorded -*- C++ -*-===//
//
// A backend that can record a call's device work once and replay it (the
// CUDA backend's CUDA graphs: one launch for a call of hundreds of kernels)
// decides per call whether it runs instruction by instruction, records, or
// replays. The plan's arena is static, so a call of one function on one
// slot of its values, dropping or evaluating, enqueues the same work every
// time; what changes from call to call (the arguments, the step and the
// microbatch dropout draws for) is written to device memory the recorded
// kernels read, before each replay.
//
// The first calls of a key run directly: they make what a recording must
// not (the kernels' scratch and device tables, cuBLASLt's and cuDNN's
// plans, NCCL's connections). The next records, and every later one
// replays. A function whose calls cannot be recorded (a transfer to a
// pipeline peer, a collective staged through host memory) runs directly
// with the reason kept, as does a key whose recording failed.
//
// No CUDA here: `Recording` is the backend's (a cudaGraphExec_t's owner),
// so the policy is tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_EXECUTOR_CALLRECORDINGS_H
#define TRIAD_RUNTIME_EXECUTOR_CALLRECORDINGS_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace triad::rt {

/// How one call runs.
enum class CallMode {
  /// Instruction by instruction, as without recordings.
  Direct,
  /// Its instructions recorded, then the recording launched.
  Record,
  /// The recording of an earlier call of its key launched.
  Replay,
};

/// What makes two calls' device work the same: the function, the slot of
/// its slotted values, and whether dropout keeps everything (evaluating).
struct CallKey {
  uint32_t function = 0;
  uint32_t slot = 0;
  bool evaluating = false;
  bool operator<(const CallKey &other) const {
    return std::tie(function, slot, evaluating) <
           std::tie(other.function, other.slot, other.evaluating);
  }
};

template <typename Recording> class CallRecordings {
public:
  /// The first `warmup` calls of each key run directly.
  explicit CallRecordings(int warmup = 1) : warmup(warmup) {}

  /// How the call of `key` runs. `cannot` says why calls of its function
  /// cannot be recorded (none: they can); it is kept for refusals().
  CallMode mode(const CallKey &key, const std::optional<std::string> &cannot) {
    State &state = states[key];
    if (cannot && !state.refusal)
      state.refusal = cannot;
    if (state.refusal)
      return CallMode::Direct;
    if (state.recording)
      return CallMode::Replay;
    return state.calls++ < warmup ? CallMode::Direct : CallMode::Record;
  }

  /// The recording of `key`'s call, to replay from now on.
  void recorded(const CallKey &key, Recording recording) {
    states[key].recording = std::move(recording);
  }
  /// Recording `key`'s call failed (`why`): its calls run directly.
  void refused(const CallKey &key, std::string why) {
    State &state = states[key];
    state.recording.reset();
    state.refusal = std::move(why);
  }

  /// The recording Replay launches (null when there is none).
  const Recording *recording(const CallKey &key) const {
    auto it = states.find(key);
    return it == states.end() || !it->second.recording ? nullptr
                                                       : &*it->second.recording;
  }
  /// The number of recordings kept.
  size_t recordings() const {
    size_t count = 0;
    for (const auto &[key, state] : states)
      count += state.recording.has_value();
    return count;
  }
  /// Why the calls of each key that runs directly do, by key, in order.
  std::vector<std::pair<CallKey, std::string>> refusals() const {
    std::vector<std::pair<CallKey, std::string>> why;
    for (const auto &[key, state] : states)
      if (state.refusal)
        why.emplace_back(key, *state.refusal);
    return why;
  }
  /// Drops every recording (before what they use goes away).
  void clear() { states.clear(); }

private:
  struct State {
    int calls = 0;
    std::optional<Recording> recording;
    std::optional<std::string> refusal;
  };
  int warmup;
  std::map<CallKey, State> states;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_CALLRECORDINGS_H
