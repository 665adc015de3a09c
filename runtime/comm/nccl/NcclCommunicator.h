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
// after member, as in runtime/comm/Comm.h.
//
// NCCL does not let two ranks of one communicator share a GPU: 8 ranks on
// one GPU use the MPI communicator with staged buffers instead.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H
#define TRIAD_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H

#include "runtime/comm/Comm.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace triad::rt::nccl {

class NcclCommunicator {
public:
  /// Creates this rank's communicators, bootstrapped over `host` (which
  /// every rank of the job calls this with, on the GPU it runs on: the
  /// current CUDA device).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>>
  create(Communicator &host);
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
  /// `count` elements to or from world rank `peer`; a send and a receive
  /// match in the order each side enqueues them.
  absl::Status send(const float *data, int64_t count, int64_t peer,
                    cudaStream_t stream);
  absl::Status recv(float *data, int64_t count, int64_t peer,
                    cudaStream_t stream);

private:
  NcclCommunicator() = default;
  absl::Status checkGroup(uint32_t group) const;

  struct Group {
    ncclComm_t comm = nullptr;
    int64_t size = 1, member = 0;
  };
  int64_t rank = 0, size = 1;
  /// Over the whole world (point-to-point transfers).
  ncclComm_t world = nullptr;
  std::vector<Group> groups;
};

/// The bytes of `id` as floats (one per byte, exactly representable), for
/// a host communicator that moves f32 blocks; and back.
std::vector<float> idToFloats(const ncclUniqueId &id);
ncclUniqueId idFromFloats(const float *values);

} // namespace triad::rt::nccl

#endif // TRIAD_RUNTIME_COMM_NCCL_NCCLCOMMUNICATOR_H
