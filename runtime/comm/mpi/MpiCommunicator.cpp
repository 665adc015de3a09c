//===- MpiCommunicator.cpp - the plan's collectives over MPI --------------===//

#include "runtime/comm/mpi/MpiCommunicator.h"

#include "runtime/comm/mpi/MpiStatus.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/Plan.h"

#include "absl/strings/str_cat.h"

#include <mpi.h>

#include <climits>
#include <vector>

namespace triad::rt::mpi {

namespace {

/// A nonblocking MPI collective.
class MpiRequest : public CommRequest {
public:
  MpiRequest(MPI_Request request, const char *what)
      : request(request), what(what) {}
  ~MpiRequest() override {
    // A request dropped without wait() still completes before its buffers
    // can go away.
    if (request != MPI_REQUEST_NULL)
      MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  absl::Status wait() override {
    return mpiStatus(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
  }

private:
  MPI_Request request;
  const char *what;
};

/// The error for a receive that got `received` elements where `expected`
/// were to come.
absl::Status receivedCount(const MPI_Status &status, int64_t expected,
                           int64_t peer, int64_t tag) {
  int received = 0;
  if (absl::Status s = mpiStatus(MPI_Get_count(&status, MPI_FLOAT, &received),
                                 "MPI_Get_count");
      !s.ok())
    return s;
  if (received != expected)
    return absl::InvalidArgumentError(absl::StrCat(
        "received ", received, " elements from rank ", peer, " (tag ", tag,
        ") but expected ", expected, ": the matching send has another size"));
  return absl::OkStatus();
}

/// A nonblocking receive: its wait also checks the count received.
class MpiRecvRequest : public CommRequest {
public:
  MpiRecvRequest(MPI_Request request, int64_t count, int64_t peer, int64_t tag)
      : request(request), count(count), peer(peer), tag(tag) {}
  ~MpiRecvRequest() override {
    if (request != MPI_REQUEST_NULL)
      MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  absl::Status wait() override {
    MPI_Status status;
    if (absl::Status s = mpiStatus(MPI_Wait(&request, &status), "MPI_Wait");
        !s.ok())
      return s;
    return receivedCount(status, count, peer, tag);
  }

private:
  MPI_Request request;
  int64_t count, peer, tag;
};

class MpiCommunicator : public Communicator {
public:
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    for (MPI_Comm &comm : comms)
      if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
    if (transfers != MPI_COMM_NULL)
      MPI_Comm_free(&transfers);
  }

  absl::Status initialize(const plan::Plan &plan);

  int64_t worldRank() const override { return rank; }
  int64_t worldSize() const override { return size; }
  uint32_t groupCount() const override {
    return static_cast<uint32_t>(comms.size());
  }
  int64_t groupSize(uint32_t group) const override {
    return group < positions.size() ? positions[group].size : 0;
  }
  int64_t groupMember(uint32_t group) const override {
    return group < positions.size() ? positions[group].member : 0;
  }

  absl::Status allReduceSum(uint32_t group, const float *in, float *out,
                            int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    return mpiStatus(MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out,
                                   static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                   comms[group]),
                     "MPI_Allreduce");
  }
  absl::Status allGather(uint32_t group, const float *in, float *out,
                         int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    int n = static_cast<int>(count);
    return mpiStatus(
        MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comms[group]),
        "MPI_Allgather");
  }
  absl::Status reduceScatter(uint32_t group, const float *in, float *out,
                             int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    return mpiStatus(MPI_Reduce_scatter_block(in, out, static_cast<int>(count),
                                              MPI_FLOAT, MPI_SUM, comms[group]),
                     "MPI_Reduce_scatter_block");
  }
  absl::Status allToAll(uint32_t group, const float *in, float *out,
                        int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    int n = static_cast<int>(count);
    return mpiStatus(
        MPI_Alltoall(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comms[group]),
        "MPI_Alltoall");
  }

  absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllReduceSum(uint32_t group, const float *in, float *out,
                    int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    MPI_Request request;
    int code = MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out,
                              static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                              comms[group], &request);
    return started(code, request, "MPI_Iallreduce");
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllGather(uint32_t group, const float *in, float *out,
                 int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    int n = static_cast<int>(count);
    MPI_Request request;
    int code = MPI_Iallgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comms[group],
                              &request);
    return started(code, request, "MPI_Iallgather");
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startReduceScatter(uint32_t group, const float *in, float *out,
                     int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    MPI_Request request;
    int code =
        MPI_Ireduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT,
                                  MPI_SUM, comms[group], &request);
    return started(code, request, "MPI_Ireduce_scatter_block");
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startAllToAll(uint32_t group, const float *in, float *out,
                int64_t count) override {
    if (absl::Status status = check(group, count); !status.ok())
      return status;
    int n = static_cast<int>(count);
    MPI_Request request;
    int code = MPI_Ialltoall(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comms[group],
                             &request);
    return started(code, request, "MPI_Ialltoall");
  }

  absl::Status send(const float *data, int64_t count, int64_t peer,
                    int64_t tag) override {
    if (absl::Status status = checkMpiTransfer(count, peer, tag); !status.ok())
      return status;
    return mpiStatus(MPI_Send(data, static_cast<int>(count), MPI_FLOAT,
                              static_cast<int>(peer), static_cast<int>(tag),
                              transfers),
                     "MPI_Send");
  }
  absl::Status recv(float *data, int64_t count, int64_t peer,
                    int64_t tag) override {
    if (absl::Status status = checkMpiTransfer(count, peer, tag); !status.ok())
      return status;
    MPI_Status received;
    if (absl::Status status =
            mpiStatus(MPI_Recv(data, static_cast<int>(count), MPI_FLOAT,
                               static_cast<int>(peer), static_cast<int>(tag),
                               transfers, &received),
                      "MPI_Recv");
        !status.ok())
      return status;
    return receivedCount(received, count, peer, tag);
  }
  absl::StatusOr<std::unique_ptr<CommRequest>> startSend(const float *data,
                                                         int64_t count,
                                                         int64_t peer,
                                                         int64_t tag) override {
    if (absl::Status status = checkMpiTransfer(count, peer, tag); !status.ok())
      return status;
    MPI_Request request;
    int code = MPI_Isend(data, static_cast<int>(count), MPI_FLOAT,
                         static_cast<int>(peer), static_cast<int>(tag),
                         transfers, &request);
    return started(code, request, "MPI_Isend");
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startRecv(float *data, int64_t count, int64_t peer, int64_t tag) override {
    if (absl::Status status = checkMpiTransfer(count, peer, tag); !status.ok())
      return status;
    MPI_Request request;
    if (absl::Status status =
            mpiStatus(MPI_Irecv(data, static_cast<int>(count), MPI_FLOAT,
                                static_cast<int>(peer), static_cast<int>(tag),
                                transfers, &request),
                      "MPI_Irecv");
        !status.ok())
      return status;
    return std::unique_ptr<CommRequest>(
        new MpiRecvRequest(request, count, peer, tag));
  }

  absl::Status barrier() override {
    return mpiStatus(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

  absl::Status agree(const absl::Status &local) override {
    // The lowest failing rank, or the world size when none failed.
    int mine = local.ok() ? static_cast<int>(size) : static_cast<int>(rank);
    int first = 0;
    if (absl::Status status = mpiStatus(
            MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
            "MPI_Allreduce");
        !status.ok())
      return local.ok() ? status : local;
    if (!local.ok())
      return local;
    if (first < size)
      return absl::AbortedError(
          absl::StrCat("rank ", first, " failed (see its error)"));
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> worldMinimum(int64_t local) override {
    int64_t smallest = local;
    if (absl::Status status =
            mpiStatus(MPI_Allreduce(&local, &smallest, 1, MPI_INT64_T, MPI_MIN,
                                    MPI_COMM_WORLD),
                      "MPI_Allreduce");
        !status.ok())
      return status;
    return smallest;
  }

  absl::StatusOr<double> worldSum(double local) override {
    double sum = local;
    if (absl::Status status = mpiStatus(
            MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
        !status.ok())
      return status;
    return sum;
  }

private:
  absl::Status check(uint32_t group, int64_t count) const {
    if (group >= comms.size())
      return absl::InvalidArgumentError(
          absl::StrCat("group ", group, " is not one of the plan's ",
                       comms.size(), " groups"));
    if (count < 0 || count > INT_MAX)
      return absl::InvalidArgumentError(
          absl::StrCat("a collective of ", count,
                       " elements per member exceeds MPI's counts (2^31 - 1)"));
    return absl::OkStatus();
  }

  absl::Status checkMpiTransfer(int64_t count, int64_t peer,
                                int64_t tag) const {
    if (absl::Status status = checkTransfer(count, peer, tag); !status.ok())
      return status;
    if (count > INT_MAX)
      return absl::InvalidArgumentError(
          absl::StrCat("a transfer of ", count,
                       " elements exceeds MPI's counts (2^31 - 1)"));
    if (tag > maxTag)
      return absl::InvalidArgumentError(absl::StrCat(
          "tag ", tag, " exceeds this MPI's largest tag ", maxTag));
    return absl::OkStatus();
  }

  /// The request of a collective that MPI started (call it after the
  /// MPI call has written `request`).
  static absl::StatusOr<std::unique_ptr<CommRequest>>
  started(int code, MPI_Request request, const char *what) {
    if (absl::Status status = mpiStatus(code, what); !status.ok())
      return status;
    return std::unique_ptr<CommRequest>(new MpiRequest(request, what));
  }

  int64_t rank = 0, size = 1;
  /// The world, duplicated: point-to-point transfers match only each
  /// other, never another library's messages.
  MPI_Comm transfers = MPI_COMM_NULL;
  int64_t maxTag = 32767;
  std::vector<MPI_Comm> comms;
  std::vector<GroupPosition> positions;
};

absl::Status MpiCommunicator::initialize(const plan::Plan &plan) {
  int initialized = 0;
  if (absl::Status status =
          mpiStatus(MPI_Initialized(&initialized), "MPI_Initialized");
      !status.ok())
    return status;
  if (!initialized)
    return absl::FailedPreconditionError(
        "MPI is not running (start the job with mpirun or srun)");
  int worldRank = 0, worldSize = 0;
  if (absl::Status status =
          mpiStatus(MPI_Comm_rank(MPI_COMM_WORLD, &worldRank), "MPI_Comm_rank");
      !status.ok())
    return status;
  if (absl::Status status =
          mpiStatus(MPI_Comm_size(MPI_COMM_WORLD, &worldSize), "MPI_Comm_size");
      !status.ok())
    return status;
  if (worldSize != meshSize(plan))
    return absl::FailedPreconditionError(
        absl::StrCat("the plan's mesh has ", meshSize(plan),
                     " ranks but the MPI world has ", worldSize));
  rank = worldRank;
  size = worldSize;
  if (absl::Status status =
          mpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &transfers), "MPI_Comm_dup");
      !status.ok())
    return status;
  if (absl::Status status =
          mpiStatus(MPI_Comm_set_errhandler(transfers, MPI_ERRORS_RETURN),
                    "MPI_Comm_set_errhandler");
      !status.ok())
    return status;
  int *tagUpperBound = nullptr, found = 0;
  if (absl::Status status = mpiStatus(
          MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUpperBound, &found),
          "MPI_Comm_get_attr");
      !status.ok())
    return status;
  if (found && tagUpperBound)
    maxTag = *tagUpperBound;
  MeshCoordinates coordinates = meshCoordinates(plan, rank);
  uint32_t groups = plan.groups() ? plan.groups()->size() : 0;
  for (uint32_t group = 0; group < groups; ++group) {
    GroupPosition position = groupPosition(plan, group, coordinates);
    MPI_Comm comm = MPI_COMM_NULL;
    if (absl::Status status = mpiStatus(
            MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(position.color),
                           static_cast<int>(position.member), &comm),
            "MPI_Comm_split");
        !status.ok())
      return status;
    comms.push_back(comm);
    positions.push_back(position);
    if (absl::Status status =
            mpiStatus(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN),
                      "MPI_Comm_set_errhandler");
        !status.ok())
      return status;
    int members = 0, member = 0;
    if (MPI_Comm_size(comm, &members) != MPI_SUCCESS ||
        MPI_Comm_rank(comm, &member) != MPI_SUCCESS ||
        members != position.size || member != position.member)
      return absl::InternalError(absl::StrCat(
          "the MPI communicator of group ", group, " has ", members,
          " members with this rank at ", member, "; the plan says ",
          position.size, " and ", position.member));
  }
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::unique_ptr<Communicator>>
createMpiCommunicator(const plan::Plan &plan) {
  auto comm = std::make_unique<MpiCommunicator>();
  if (absl::Status status = comm->initialize(plan); !status.ok())
    return status;
  return std::unique_ptr<Communicator>(std::move(comm));
}

} // namespace triad::rt::mpi
