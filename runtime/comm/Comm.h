//===- Comm.h - collective communication among a job's ranks ----*- C++ -*-===//
//
// The interface every communication backend implements (mpi now, nccl
// later): the four collectives of the plan, each over one of the plan's
// communicator groups (an index into Plan.groups), on contiguous f32
// buffers laid out member after member, the way MPI and NCCL take them.
// Cutting a tensor into pieces along a dimension that is not the leading
// one, and joining received pieces along one, is the same for every
// backend and lives in Collectives.h, above this interface.
//
// Besides them, point-to-point transfers between two world ranks (the
// plan's Send and Recv, between pipeline ranks).
//
// A backend's collectives and transfers are blocking; a backend that can run
// them in the background overrides the start* functions, which by default
// run the blocking one and return a finished request.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_COMM_H
#define TRIAD_RUNTIME_COMM_COMM_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace triad::rt {

/// A collective in flight.
class CommRequest {
public:
  virtual ~CommRequest();
  /// Blocks until the collective completes (its output is then final and
  /// its buffers free). Call once.
  virtual absl::Status wait() = 0;
};

class Communicator {
public:
  virtual ~Communicator();

  virtual int64_t worldRank() const = 0;
  virtual int64_t worldSize() const = 0;
  /// The number of groups (the plan's Plan.groups).
  virtual uint32_t groupCount() const = 0;
  /// Members of group `group`, and this rank's index among them (the
  /// plan's order: see Group in plan.fbs).
  virtual int64_t groupSize(uint32_t group) const = 0;
  virtual int64_t groupMember(uint32_t group) const = 0;

  // The collectives over the members of `group`. Every member calls each
  // one, in the same order, with the same `count`; `count` elements make
  // one block, and a buffer of several blocks holds them member after
  // member. Errors (a failed transfer, a count the backend cannot take)
  // come back as a Status.

  /// out[i] = the sum over the members of their in[i], for i < count.
  /// `in` may be `out` (in place); otherwise the buffers do not overlap.
  virtual absl::Status allReduceSum(uint32_t group, const float *in, float *out,
                                    int64_t count) = 0;
  /// out (groupSize blocks) = every member's `in` (one block), in member
  /// order.
  virtual absl::Status allGather(uint32_t group, const float *in, float *out,
                                 int64_t count) = 0;
  /// in: groupSize blocks; out (one block) = the sum over the members of
  /// their block number groupMember(group).
  virtual absl::Status reduceScatter(uint32_t group, const float *in,
                                     float *out, int64_t count) = 0;
  /// in: groupSize blocks, block j for member j; out: groupSize blocks,
  /// block i from member i.
  virtual absl::Status allToAll(uint32_t group, const float *in, float *out,
                                int64_t count) = 0;

  // Point-to-point transfers of `count` f32 elements between this rank and
  // world rank `peer` (another rank). A send and a receive match when their
  // (sender, receiver, tag) match, in the order each side issues them; a
  // receive whose count differs from its send's is an error. A send may
  // return before the receiver has the data or only once it has it: callers
  // order their transfers so that neither deadlocks (a schedule that is
  // deadlock-free when both block until matched).

  /// Sends data[0, count) to `peer`.
  virtual absl::Status send(const float *data, int64_t count, int64_t peer,
                            int64_t tag) = 0;
  /// Receives `count` elements from `peer` into data[0, count).
  virtual absl::Status recv(float *data, int64_t count, int64_t peer,
                            int64_t tag) = 0;

  /// Waits for every rank of the world.
  virtual absl::Status barrier() = 0;
  /// Every rank calls it with its own outcome; every rank gets OK exactly
  /// when every rank's `local` is OK. A rank that failed gets its own
  /// error back, the others an error naming the first rank that failed.
  virtual absl::Status agree(const absl::Status &local) = 0;
  /// Every rank calls it; every rank gets the smallest of their `local`s.
  virtual absl::StatusOr<int64_t> worldMinimum(int64_t local) = 0;
  /// Every rank calls it; every rank gets the sum of their `local`s.
  virtual absl::StatusOr<double> worldSum(double local) = 0;

  // The same collectives started in the background: until the request's
  // wait() returns, `out` must be neither read nor written and `in` not
  // written. The defaults run the blocking collective.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllReduceSum(uint32_t group, const float *in, float *out, int64_t count);
  virtual absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllGather(uint32_t group, const float *in, float *out, int64_t count);
  virtual absl::StatusOr<std::unique_ptr<CommRequest>>
  startReduceScatter(uint32_t group, const float *in, float *out,
                     int64_t count);
  virtual absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllToAll(uint32_t group, const float *in, float *out, int64_t count);
  /// The transfers started in the background: until wait() returns, a
  /// send's `data` must not be written, a receive's neither read nor
  /// written. Transfers match in the order they are started.
  virtual absl::StatusOr<std::unique_ptr<CommRequest>>
  startSend(const float *data, int64_t count, int64_t peer, int64_t tag);
  virtual absl::StatusOr<std::unique_ptr<CommRequest>>
  startRecv(float *data, int64_t count, int64_t peer, int64_t tag);

protected:
  /// InvalidArgument unless `peer` is another rank of the world, `count`
  /// is not negative and `tag` is not negative.
  absl::Status checkTransfer(int64_t count, int64_t peer, int64_t tag) const;
};

/// Rank 0 receives every rank's `mine` (at most kMaxGatheredChars
/// characters) over `host`'s transfers with `tag`, in rank order; the other
/// ranks get an empty list. Every rank must call it, before any transfer of
/// a plan with that tag.
inline constexpr int64_t kMaxGatheredChars = 256;
absl::StatusOr<std::vector<std::string>>
gatherStrings(Communicator &host, const std::string &mine, int64_t tag);

/// OK unless two ranks name the same device (`devices[r]`: rank r's host and
/// GPU); then FailedPrecondition naming the first two, and what to do:
/// NCCL needs a GPU per rank, while MPI staging lets ranks share one.
absl::Status checkOneDevicePerRank(const std::vector<std::string> &devices);

/// The world of one rank, alone in each of its `groups` groups: every
/// collective is a copy, and every transfer an error (there is no other
/// rank).
class LocalCommunicator : public Communicator {
public:
  explicit LocalCommunicator(uint32_t groups = 0) : groups(groups) {}

  int64_t worldRank() const override { return 0; }
  int64_t worldSize() const override { return 1; }
  uint32_t groupCount() const override { return groups; }
  int64_t groupSize(uint32_t) const override { return 1; }
  int64_t groupMember(uint32_t) const override { return 0; }
  absl::Status allReduceSum(uint32_t group, const float *in, float *out,
                            int64_t count) override;
  absl::Status allGather(uint32_t group, const float *in, float *out,
                         int64_t count) override;
  absl::Status reduceScatter(uint32_t group, const float *in, float *out,
                             int64_t count) override;
  absl::Status allToAll(uint32_t group, const float *in, float *out,
                        int64_t count) override;
  absl::Status send(const float *data, int64_t count, int64_t peer,
                    int64_t tag) override;
  absl::Status recv(float *data, int64_t count, int64_t peer,
                    int64_t tag) override;
  absl::Status barrier() override { return absl::OkStatus(); }
  absl::Status agree(const absl::Status &local) override { return local; }
  absl::StatusOr<int64_t> worldMinimum(int64_t local) override { return local; }
  absl::StatusOr<double> worldSum(double local) override { return local; }

private:
  absl::Status copy(uint32_t group, const float *in, float *out,
                    int64_t count) const;
  uint32_t groups;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_COMM_COMM_H
