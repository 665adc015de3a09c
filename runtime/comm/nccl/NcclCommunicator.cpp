//===- NcclCommunicator.cpp - the plan's collectives on GPUs through NCCL -===//

#include "runtime/comm/nccl/NcclCommunicator.h"

#include "absl/strings/str_cat.h"

#include <cstring>

#include <cuda_runtime.h>
#include <unistd.h>

namespace triad::rt::nccl {

namespace {

absl::Status ncclStatus(ncclResult_t result, const char *call) {
  if (result == ncclSuccess)
    return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, " failed: ", ncclGetErrorString(result)));
}

#define TRIAD_NCCL_RETURN_IF_ERROR(call)                                       \
  do {                                                                         \
    if (absl::Status triadNcclStatus_ = ncclStatus((call), #call);             \
        !triadNcclStatus_.ok())                                                \
      return triadNcclStatus_;                                                 \
  } while (false)

/// The tag of the world id's messages: sent before any transfer of a plan,
/// so it cannot be confused with one.
constexpr int64_t kBootstrapTag = 0;

size_t elements(int64_t count) { return static_cast<size_t>(count); }

} // namespace

std::vector<float> idToFloats(const ncclUniqueId &id) {
  std::vector<float> values(sizeof(id.internal));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(static_cast<unsigned char>(id.internal[i]));
  return values;
}

ncclUniqueId idFromFloats(const float *values) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(static_cast<unsigned char>(values[i]));
  return id;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(Communicator &host) {
  std::unique_ptr<NcclCommunicator> nccl(new NcclCommunicator());
  nccl->rank = host.worldRank();
  nccl->size = host.worldSize();
  const int64_t idFloats = static_cast<int64_t>(sizeof(ncclUniqueId::internal));

  // One GPU per rank: NCCL refuses two ranks on one device with a bare
  // "invalid usage", so rank 0 compares every rank's host and PCI bus id
  // first and every rank learns the outcome.
  {
    char busId[32] = {};
    int device = 0;
    char hostName[128] = {};
    cudaError_t error = cudaGetDevice(&device);
    if (error == cudaSuccess)
      error = cudaDeviceGetPCIBusId(busId, sizeof(busId), device);
    absl::Status identified =
        error == cudaSuccess
            ? absl::OkStatus()
            : absl::InternalError(absl::StrCat("cannot name this rank's GPU: ",
                                               cudaGetErrorString(error)));
    gethostname(hostName, sizeof(hostName) - 1);
    if (absl::Status status = host.agree(identified); !status.ok())
      return status;
    absl::StatusOr<std::vector<std::string>> devices = gatherStrings(
        host, absl::StrCat(busId, " on host ", hostName), kBootstrapTag);
    absl::Status distinct =
        devices.ok() ? checkOneDevicePerRank(*devices) : devices.status();
    if (absl::Status status = host.agree(distinct); !status.ok())
      return status;
  }

  // The world: rank 0's id to every rank. Every rank learns whether rank 0
  // could make one before any waits for it.
  ncclUniqueId worldId;
  absl::Status made;
  if (nccl->rank == 0)
    made = ncclStatus(ncclGetUniqueId(&worldId), "ncclGetUniqueId");
  if (absl::Status status = host.agree(made); !status.ok())
    return status;
  if (nccl->rank == 0) {
    std::vector<float> sent = idToFloats(worldId);
    for (int64_t peer = 1; peer < nccl->size; ++peer)
      if (absl::Status status =
              host.send(sent.data(), idFloats, peer, kBootstrapTag);
          !status.ok())
        return status;
  } else {
    std::vector<float> received(sizeof(ncclUniqueId::internal));
    if (absl::Status status =
            host.recv(received.data(), idFloats, 0, kBootstrapTag);
        !status.ok())
      return status;
    worldId = idFromFloats(received.data());
  }
  TRIAD_NCCL_RETURN_IF_ERROR(
      ncclCommInitRank(&nccl->world, static_cast<int>(nccl->size), worldId,
                       static_cast<int>(nccl->rank)));

  // The plan's groups, in its order: member 0 of each instance makes the
  // id, the members gather every member's and keep member 0's.
  nccl->groups.resize(host.groupCount());
  for (uint32_t g = 0; g < host.groupCount(); ++g) {
    Group &group = nccl->groups[g];
    group.size = host.groupSize(g);
    group.member = host.groupMember(g);
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    absl::Status own;
    if (group.member == 0)
      own = ncclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (absl::Status status = host.agree(own); !status.ok())
      return status;
    std::vector<float> mine = idToFloats(id);
    std::vector<float> all(static_cast<size_t>(idFloats * group.size));
    if (absl::Status status =
            host.allGather(g, mine.data(), all.data(), idFloats);
        !status.ok())
      return status;
    id = idFromFloats(all.data());
    TRIAD_NCCL_RETURN_IF_ERROR(
        ncclCommInitRank(&group.comm, static_cast<int>(group.size), id,
                         static_cast<int>(group.member)));
  }
  return nccl;
}

NcclCommunicator::~NcclCommunicator() {
  for (Group &group : groups)
    if (group.comm)
      ncclCommDestroy(group.comm);
  if (world)
    ncclCommDestroy(world);
}

absl::Status NcclCommunicator::checkGroup(uint32_t group) const {
  if (group >= groups.size())
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group, " is not one of the ", groups.size(),
                     " communicator groups"));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::allReduceSum(uint32_t group, const float *in,
                                            float *out, int64_t count,
                                            cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  TRIAD_NCCL_RETURN_IF_ERROR(ncclAllReduce(in, out, elements(count),
                                           ncclFloat32, ncclSum,
                                           groups[group].comm, stream));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::allGather(uint32_t group, const float *in,
                                         float *out, int64_t count,
                                         cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  TRIAD_NCCL_RETURN_IF_ERROR(ncclAllGather(
      in, out, elements(count), ncclFloat32, groups[group].comm, stream));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::reduceScatter(uint32_t group, const float *in,
                                             float *out, int64_t count,
                                             cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  TRIAD_NCCL_RETURN_IF_ERROR(ncclReduceScatter(in, out, elements(count),
                                               ncclFloat32, ncclSum,
                                               groups[group].comm, stream));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::allToAll(uint32_t group, const float *in,
                                        float *out, int64_t count,
                                        cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  const Group &g = groups[group];
  TRIAD_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  for (int64_t peer = 0; peer < g.size; ++peer) {
    ncclResult_t sent =
        ncclSend(in + peer * count, elements(count), ncclFloat32,
                 static_cast<int>(peer), g.comm, stream);
    ncclResult_t received =
        ncclRecv(out + peer * count, elements(count), ncclFloat32,
                 static_cast<int>(peer), g.comm, stream);
    if (sent != ncclSuccess || received != ncclSuccess) {
      ncclGroupEnd();
      return ncclStatus(sent != ncclSuccess ? sent : received,
                        "ncclSend/ncclRecv of an all-to-all");
    }
  }
  TRIAD_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  return absl::OkStatus();
}

absl::Status NcclCommunicator::send(const float *data, int64_t count,
                                    int64_t peer, cudaStream_t stream) {
  if (peer < 0 || peer >= size || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot send to rank ", peer, " from rank ", rank, " of ", size));
  TRIAD_NCCL_RETURN_IF_ERROR(ncclSend(data, elements(count), ncclFloat32,
                                      static_cast<int>(peer), world, stream));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::recv(float *data, int64_t count, int64_t peer,
                                    cudaStream_t stream) {
  if (peer < 0 || peer >= size || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot receive from rank ", peer, " on rank ", rank, " of ", size));
  TRIAD_NCCL_RETURN_IF_ERROR(ncclRecv(data, elements(count), ncclFloat32,
                                      static_cast<int>(peer), world, stream));
  return absl::OkStatus();
}

} // namespace triad::rt::nccl
