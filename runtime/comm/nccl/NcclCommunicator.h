//===- NcclCommunicator.h - the plan's collectives on GPUs through NCCL -*- C++
//-*-===//
//
// The `nccl` comm backend of DESIGN.md section 5: device buffers move
// between the GPUs of the job without going through host memory. It is
// bootstrapped over the job's host communicator (MPI under mpirun): rank 0
// creates the unique id of a communicator over the whole world (for the
// pipeline's point-to-point transfers) and sends it to every rank; then,
// for every group of the plan in the plan's order, member 0 of each of its
// instances creates that instance's id and the members gather it. Every
// rank creates its communicators in that one canonical order, so creation
// cannot deadlock (every group of the plan partitions the world).
//
// Every call enqueues on the stream it is given and returns without
// waiting; the work is ordered with the kernels of that stream. A block is
// `count` f32 elements, and buffers of several blocks hold them member
// after member, as in runtime/comm/Comm.h; transfers move bytes.
//
// The communicators are non-blocking (ncclConfig_t's blocking = 0), so
// that no NCCL call can hang the host: a call that answers "in progress"
// (creation; an operation whose connection to a peer is still being set
// up) is polled until its communicator is ready, and the host waits for
// NCCL's work with `wait` (runtime/comm/AsyncWait.h), which polls every
// communicator's asynchronous error and a timeout, and aborts them all on
// a failure. Every error quotes ncclGetLastError's text and names the
// communicator and the operation last enqueued on it.
//
// NCCL does not let two ranks of one communicator share a GPU: 8 ranks on
// one GPU use the MPI communicator with staged buffers instead.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H
#define TRIAD_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H

#include "runtime/comm/AsyncWait.h"
#include "runtime/comm/Comm.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace triad::rt::nccl {

class NcclCommunicator {
public:
  /// Creates this rank's communicators, bootstrapped over `host` (which
  /// every rank of the job calls this with, on the GPU it runs on: the
  /// current CUDA device). `timeout` bounds every wait on them, creation
  /// included (0: none); `groupNames` name the plan's groups in messages
  /// ("[tp]"), by group index (may be empty).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>>
  create(Communicator &host,
         std::chrono::milliseconds timeout = kDefaultCommTimeout,
         std::vector<std::string> groupNames = {});
  /// Finalizes and destroys the communicators (their work must be
  /// complete); one that does not finish within the timeout is aborted.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int64_t worldRank() const { return rank; }
  int64_t worldSize() const { return size; }
  int64_t groupSize(uint32_t group) const { return groups[group].size; }
  int64_t groupMember(uint32_t group) const { return groups[group].member; }
  uint32_t groupCount() const { return static_cast<uint32_t>(groups.size()); }

  /// out[i] = the sum over the members of their in[i] (in may be out).
  absl::Status allReduceSum(uint32_t group, const float *in, float *out,
                            int64_t count, cudaStream_t stream);
  /// One tensor of a bucket, as allGather or reduceScatter takes it: `count`
  /// f32 per member.
  struct Piece {
    const float *in;
    float *out;
    int64_t count;
  };
  enum class Grouped { AllGather, ReduceScatter };
  /// allGather or reduceScatter of every piece, as one NCCL group: NCCL
  /// launches them together at ncclGroupEnd, one operation instead of one
  /// per tensor.
  absl::Status grouped(uint32_t group, Grouped kind,
                       const std::vector<Piece> &pieces, cudaStream_t stream);
  /// out (groupSize blocks) = every member's in, in member order.
  absl::Status allGather(uint32_t group, const float *in, float *out,
                         int64_t count, cudaStream_t stream);
  /// out (one block) = the sum over the members of their block number
  /// groupMember(group) of in.
  absl::Status reduceScatter(uint32_t group, const float *in, float *out,
                             int64_t count, cudaStream_t stream);
  /// Block j of in to member j; block i of out from member i (grouped
  /// sends and receives).
  absl::Status allToAll(uint32_t group, const float *in, float *out,
                        int64_t count, cudaStream_t stream);
  /// `bytes` bytes to or from world rank `peer` (a transfer copies bits,
  /// whatever the element type); a send and a receive match in the order
  /// each side enqueues them.
  absl::Status send(const void *data, int64_t bytes, int64_t peer,
                    cudaStream_t stream);
  absl::Status recv(void *data, int64_t bytes, int64_t peer,
                    cudaStream_t stream);

  /// Names what the operations enqueued from now on are for, in error
  /// messages ("instruction 12 (AllGather)").
  void setCaller(std::string caller) { this->caller = std::move(caller); }

  /// Waits on the host until `done` holds (whether the device work waited
  /// for has completed: cudaEventQuery on an event after it), polling
  /// every communicator's asynchronous error, for at most the timeout. On
  /// an error or the timeout it aborts every communicator (see
  /// AsyncWait.h) and returns why; `what` says what was waited for.
  absl::Status wait(std::string what,
                    std::function<absl::StatusOr<bool>()> done);

  /// Aborts every communicator (ncclCommAbort), which ends their kernels;
  /// every later call fails, saying why they were aborted.
  void abort(std::string why);
  bool aborted() const { return !abortReason.empty(); }

private:
  NcclCommunicator() = default;
  absl::Status checkGroup(uint32_t group) const;

  struct Endpoint {
    ncclComm_t comm = nullptr;
    int64_t size = 1, member = 0;
    /// "NCCL's communicator of group 2 [tp]", "NCCL's world communicator".
    std::string name;
    /// The operation last enqueued on it, and what for.
    std::string lastOperation;
  };
  /// Endpoint `index` of all of them: 0 the world, then the groups.
  size_t endpointCount() const { return 1 + groups.size(); }
  Endpoint &endpoint(size_t index) {
    return index == 0 ? world : groups[index - 1];
  }
  /// Its name for a message, with its size and its last operation.
  std::string describe(const Endpoint &e) const;
  /// Creates `e`'s communicator (its size, member and name set) from `id`,
  /// polling until it is ready.
  absl::Status initialize(Endpoint &e, const ncclUniqueId &id);
  /// Checks what an NCCL call on `e` returned: "in progress" is polled
  /// until the call has enqueued its work (so that an event recorded
  /// after it follows that work), an error quotes NCCL's last error.
  absl::Status enqueued(ncclResult_t result, Endpoint &e,
                        std::string operation);
  /// A call inside a group (of `operation`) on `e` failed with `result`:
  /// ends the group, polls the communicator until what was queued before
  /// is launched, and returns the failure. (A call in a group that answers
  /// "in progress" has not failed: the group goes on.)
  absl::Status abandonedGroup(ncclResult_t result, Endpoint &e,
                              std::string operation);
  /// The error of an NCCL call on `e` that failed with `result` (not in
  /// progress): its last operation, the communicator and NCCL's text.
  absl::Status failure(ncclResult_t result, const Endpoint &e) const;
  /// FailedPrecondition once the communicators were aborted.
  absl::Status usable() const;

  int64_t rank = 0, size = 1;
  std::chrono::milliseconds timeout = kDefaultCommTimeout;
  /// Over the whole world (point-to-point transfers).
  Endpoint world;
  std::vector<Endpoint> groups;
  std::string caller;
  /// Why the communicators were aborted; empty while they are not.
  std::string abortReason;
};

/// The bytes of `id` as floats (one per byte, exactly representable), for
/// a host communicator that moves f32 blocks; and back.
std::vector<float> idToFloats(const ncclUniqueId &id);
ncclUniqueId idFromFloats(const float *values);

} // namespace triad::rt::nccl

#endif // TRIAD_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H
