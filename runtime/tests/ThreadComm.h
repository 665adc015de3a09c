//===- ThreadComm.h - a job's ranks as threads of one test ------*- C++ -*-===//
//
// Tests run several ranks of a plan in one process, one thread per rank,
// with `ThreadCommunicator`: every collective is a barrier of the whole
// world (the ranks of a plan call every collective in the same order, as
// MPI requires), after which each rank reads its group's inputs from the
// others' buffers and writes its own output, and a second barrier before
// anyone may overwrite an input. Sums add the members' values in member
// order. A transfer goes through a mailbox per (sender, receiver, tag): a
// send leaves a copy of its data there and returns, a receive takes the
// oldest message (waiting for one, up to a minute, so a broken test fails
// instead of hanging). `runRanks` starts the threads and joins them.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TESTS_THREADCOMM_H
#define TRIAD_RUNTIME_TESTS_THREADCOMM_H

#include "runtime/comm/Comm.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/Plan.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

namespace triad::rt::tests {

/// What the threads of one world share.
class ThreadWorld {
public:
  explicit ThreadWorld(int64_t size)
      : size(size), inputs(size, nullptr), failed(size, false), values(size, 0),
        sums(size, 0.0) {}

  /// Blocks until every rank has arrived.
  void arrive() {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t generation = generationCount;
    if (++arrived == size) {
      arrived = 0;
      ++generationCount;
      changed.notify_all();
      return;
    }
    changed.wait(lock, [&] { return generationCount != generation; });
  }

  /// Leaves a copy of `data` for `to`.
  void post(int64_t from, int64_t to, int64_t tag, std::vector<float> data) {
    std::lock_guard<std::mutex> lock(mailMutex);
    mailboxes[{from, to, tag}].push_back(std::move(data));
    mailArrived.notify_all();
  }

  /// Takes the oldest message from `from` to `to` with `tag`, waiting up
  /// to `timeout` for one.
  absl::StatusOr<std::vector<float>> take(int64_t from, int64_t to, int64_t tag,
                                          std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mailMutex);
    std::deque<std::vector<float>> &box = mailboxes[{from, to, tag}];
    if (!mailArrived.wait_for(lock, timeout, [&] { return !box.empty(); }))
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", to, " waited ", timeout.count(),
          " s for a message from rank ", from, " (tag ", tag, ")"));
    std::vector<float> data = std::move(box.front());
    box.pop_front();
    return data;
  }

  const int64_t size;
  /// Each rank's input of the current collective.
  std::vector<const float *> inputs;
  std::vector<bool> failed;
  std::vector<int64_t> values;
  std::vector<double> sums;

private:
  std::mutex mutex;
  std::condition_variable changed;
  int64_t arrived = 0;
  uint64_t generationCount = 0;
  std::mutex mailMutex;
  std::condition_variable mailArrived;
  std::map<std::tuple<int64_t, int64_t, int64_t>,
           std::deque<std::vector<float>>>
      mailboxes;
};

class ThreadCommunicator : public Communicator {
public:
  ThreadCommunicator(const plan::Plan &plan, int64_t rank, ThreadWorld &world)
      : rank(rank), world(world) {
    MeshCoordinates mine = meshCoordinates(plan, rank);
    uint32_t groups = plan.groups() ? plan.groups()->size() : 0;
    for (uint32_t g = 0; g < groups; ++g) {
      positions.push_back(groupPosition(plan, g, mine));
      // The world ranks of the members of this rank's group, in order.
      std::vector<int64_t> ranks(positions.back().size);
      for (int64_t other = 0; other < world.size; ++other) {
        GroupPosition p = groupPosition(plan, g, meshCoordinates(plan, other));
        if (p.color == positions.back().color)
          ranks[p.member] = other;
      }
      members.push_back(std::move(ranks));
    }
  }

  int64_t worldRank() const override { return rank; }
  int64_t worldSize() const override { return world.size; }
  uint32_t groupCount() const override {
    return static_cast<uint32_t>(positions.size());
  }
  int64_t groupSize(uint32_t group) const override {
    return positions.at(group).size;
  }
  int64_t groupMember(uint32_t group) const override {
    return positions.at(group).member;
  }

  absl::Status allReduceSum(uint32_t group, const float *in, float *out,
                            int64_t count) override {
    return collective(group, in, out, count, [&](float *result) {
      for (int64_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int64_t m : members[group])
          sum += world.inputs[m][i];
        result[i] = sum;
      }
    });
  }
  absl::Status allGather(uint32_t group, const float *in, float *out,
                         int64_t count) override {
    int64_t n = groupSize(group);
    return collective(group, in, out, n * count, [&](float *result) {
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(result + j * count, world.inputs[members[group][j]],
                    count * sizeof(float));
    });
  }
  absl::Status reduceScatter(uint32_t group, const float *in, float *out,
                             int64_t count) override {
    int64_t me = groupMember(group);
    return collective(group, in, out, count, [&](float *result) {
      for (int64_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int64_t m : members[group])
          sum += world.inputs[m][me * count + i];
        result[i] = sum;
      }
    });
  }
  absl::Status allToAll(uint32_t group, const float *in, float *out,
                        int64_t count) override {
    int64_t n = groupSize(group), me = groupMember(group);
    return collective(group, in, out, n * count, [&](float *result) {
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(result + j * count,
                    world.inputs[members[group][j]] + me * count,
                    count * sizeof(float));
    });
  }
  absl::Status send(const float *data, int64_t count, int64_t peer,
                    int64_t tag) override {
    if (absl::Status status = checkTransfer(count, peer, tag); !status.ok())
      return status;
    ++transfers;
    world.post(rank, peer, tag, std::vector<float>(data, data + count));
    return absl::OkStatus();
  }
  absl::Status recv(float *data, int64_t count, int64_t peer,
                    int64_t tag) override {
    if (absl::Status status = checkTransfer(count, peer, tag); !status.ok())
      return status;
    ++transfers;
    absl::StatusOr<std::vector<float>> message =
        world.take(peer, rank, tag, std::chrono::seconds(60));
    if (!message.ok())
      return message.status();
    if (static_cast<int64_t>(message->size()) != count)
      return absl::InvalidArgumentError(
          absl::StrCat("received ", message->size(), " elements from rank ",
                       peer, " (tag ", tag, ") but expected ", count));
    std::memcpy(data, message->data(), message->size() * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status barrier() override {
    world.arrive();
    return absl::OkStatus();
  }
  absl::Status agree(const absl::Status &local) override {
    world.failed[rank] = !local.ok();
    world.arrive();
    int64_t first = world.size;
    for (int64_t r = world.size - 1; r >= 0; --r)
      if (world.failed[r])
        first = r;
    world.arrive();
    if (!local.ok())
      return local;
    if (first < world.size)
      return absl::AbortedError(
          absl::StrCat("rank ", first, " failed (see its error)"));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> worldMinimum(int64_t local) override {
    world.values[rank] = local;
    world.arrive();
    int64_t smallest = local;
    for (int64_t value : world.values)
      smallest = std::min(smallest, value);
    world.arrive();
    return smallest;
  }

  absl::StatusOr<double> worldSum(double local) override {
    world.sums[rank] = local;
    world.arrive();
    double sum = 0;
    for (double value : world.sums)
      sum += value;
    world.arrive();
    return sum;
  }

  /// With `deferred`, a started collective runs only when it is waited for
  /// (a backend at its slowest): an executor that reads its output, or
  /// writes its input, before waiting sees the difference.
  bool deferred = false;

  absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllReduceSum(uint32_t group, const float *in, float *out,
                    int64_t count) override {
    return later([=] { return allReduceSum(group, in, out, count); });
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllGather(uint32_t group, const float *in, float *out,
                 int64_t count) override {
    return later([=] { return allGather(group, in, out, count); });
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startReduceScatter(uint32_t group, const float *in, float *out,
                     int64_t count) override {
    return later([=] { return reduceScatter(group, in, out, count); });
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllToAll(uint32_t group, const float *in, float *out,
                int64_t count) override {
    return later([=] { return allToAll(group, in, out, count); });
  }

  /// A send leaves its message at once (as a buffering backend would); a
  /// receive, when `deferred`, takes it only when waited for.
  absl::StatusOr<std::unique_ptr<CommRequest>> startSend(const float *data,
                                                         int64_t count,
                                                         int64_t peer,
                                                         int64_t tag) override {
    if (absl::Status status = send(data, count, peer, tag); !status.ok())
      return status;
    return std::unique_ptr<CommRequest>(
        new Deferred([] { return absl::OkStatus(); }));
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startRecv(float *data, int64_t count, int64_t peer, int64_t tag) override {
    return later([=] { return recv(data, count, peer, tag); });
  }

  /// Collectives and transfers (each end counts one) run so far (tests
  /// check that plans ran them).
  int64_t collectives = 0, transfers = 0;

private:
  class Deferred : public CommRequest {
  public:
    explicit Deferred(std::function<absl::Status()> run)
        : run(std::move(run)) {}
    absl::Status wait() override { return run(); }

  private:
    std::function<absl::Status()> run;
  };

  absl::StatusOr<std::unique_ptr<CommRequest>>
  later(std::function<absl::Status()> run) {
    if (deferred)
      return std::unique_ptr<CommRequest>(new Deferred(std::move(run)));
    if (absl::Status status = run(); !status.ok())
      return status;
    return std::unique_ptr<CommRequest>(
        new Deferred([] { return absl::OkStatus(); }));
  }

  /// Publishes `in`, computes `outCount` elements with `compute` from the
  /// others' inputs, and writes them to `out` once every rank has read.
  absl::Status collective(uint32_t group, const float *in, float *out,
                          int64_t outCount,
                          const std::function<void(float *)> &compute) {
    if (group >= positions.size())
      return absl::InvalidArgumentError("no such group");
    ++collectives;
    world.inputs[rank] = in;
    world.arrive();
    std::vector<float> result(static_cast<size_t>(outCount));
    compute(result.data());
    world.arrive();
    std::memcpy(out, result.data(), result.size() * sizeof(float));
    return absl::OkStatus();
  }

  int64_t rank;
  ThreadWorld &world;
  std::vector<GroupPosition> positions;
  std::vector<std::vector<int64_t>> members;
};

/// Runs `body(rank, communicator)` for every rank of `plan`'s mesh, each on
/// its own thread, and waits for all.
inline void
runRanks(const plan::Plan &plan,
         const std::function<void(int64_t, ThreadCommunicator &)> &body) {
  int64_t size = meshSize(plan);
  ThreadWorld world(size);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      ThreadCommunicator comm(plan, rank, world);
      body(rank, comm);
    });
  for (std::thread &thread : threads)
    thread.join();
}

} // namespace triad::rt::tests

#endif // TRIAD_RUNTIME_TESTS_THREADCOMM_H
