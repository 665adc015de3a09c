//===- NcclCommunicator.cpp - the plan's collectives on GPUs through NCCL -===//

#include "runtime/comm/nccl/NcclCommunicator.h"

#include "absl/strings/str_cat.h"

#include <cstring>

#include <cuda_runtime.h>
#include <unistd.h>

namespace triad::rt::nccl {

namespace {

/// NCCL's account of a failed call: its error string and, where NCCL left
/// one, its last error's message, which says what actually failed (a peer
/// that closed its connection, a CUDA error, which argument was wrong).
std::string errorText(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  // (NCCL keeps its last error's text per process in the versions this
  // builds with, so after several failures it may describe another; the
  // communicator is passed for those that keep it per communicator.)
  if (const char *last = ncclGetLastError(comm); last && *last)
    absl::StrAppend(&text, " (", last, ")");
  return text;
}

absl::StatusCode codeOf(ncclResult_t result) {
  switch (result) {
  case ncclInvalidArgument:
  case ncclInvalidUsage:
    return absl::StatusCode::kInvalidArgument;
  case ncclRemoteError:
  case ncclSystemError:
    return absl::StatusCode::kUnavailable;
  default:
    return absl::StatusCode::kInternal;
  }
}

absl::Status ncclStatus(ncclResult_t result, const char *call,
                        ncclComm_t comm = nullptr) {
  if (result == ncclSuccess)
    return absl::OkStatus();
  return absl::Status(codeOf(result),
                      absl::StrCat(call, " failed: ", errorText(result, comm)));
}

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
NcclCommunicator::create(Communicator &host, std::chrono::milliseconds timeout,
                         std::vector<std::string> groupNames) {
  std::unique_ptr<NcclCommunicator> nccl(new NcclCommunicator());
  nccl->rank = host.worldRank();
  nccl->size = host.worldSize();
  nccl->timeout = timeout;
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
  nccl->world.size = nccl->size;
  nccl->world.member = nccl->rank;
  nccl->world.name = "NCCL's world communicator";
  // Every rank learns whether every rank could create it before going on
  // (a rank that failed would otherwise leave the others waiting for it in
  // the next creation).
  if (absl::Status status = host.agree(nccl->initialize(nccl->world, worldId));
      !status.ok())
    return status;

  // The plan's groups, in its order: member 0 of each instance makes the
  // id, the members gather every member's and keep member 0's.
  nccl->groups.resize(host.groupCount());
  for (uint32_t g = 0; g < host.groupCount(); ++g) {
    Endpoint &group = nccl->groups[g];
    group.size = host.groupSize(g);
    group.member = host.groupMember(g);
    group.name = absl::StrCat("NCCL's communicator of group ", g);
    if (g < groupNames.size() && !groupNames[g].empty())
      absl::StrAppend(&group.name, " ", groupNames[g]);
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
    if (absl::Status status = host.agree(nccl->initialize(group, id));
        !status.ok())
      return status;
  }
  return nccl;
}

absl::Status NcclCommunicator::initialize(Endpoint &e, const ncclUniqueId &id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: no call waits inside NCCL, so a peer that never comes
  // cannot hang the host (its waits poll, time out and abort).
  config.blocking = 0;
  ncclResult_t result =
      ncclCommInitRankConfig(&e.comm, static_cast<int>(e.size), id,
                             static_cast<int>(e.member), &config);
  e.lastOperation = "its creation";
  if (result != ncclSuccess && result != ncclInProgress) {
    absl::Status failed = ncclStatus(result, "ncclCommInitRankConfig", e.comm);
    if (e.comm)
      ncclCommAbort(e.comm);
    e.comm = nullptr;
    return absl::Status(failed.code(), absl::StrCat("creating ", e.name, ": ",
                                                    failed.message()));
  }
  return wait(absl::StrCat("the creation of ", e.name),
              [] { return absl::StatusOr<bool>(true); });
}

NcclCommunicator::~NcclCommunicator() {
  if (aborted())
    return;
  // Finalizing flushes each communicator's operations (non-blocking: it is
  // in progress until they are done); destroying then frees it locally. A
  // destructor cannot report, and must not hang the process's exit on a
  // peer that died: anything but a clean finalization aborts.
  bool finalized = true;
  for (size_t i = 0; i < endpointCount(); ++i)
    if (Endpoint &e = endpoint(i); e.comm) {
      ncclResult_t result = ncclCommFinalize(e.comm);
      finalized &= result == ncclSuccess || result == ncclInProgress;
    }
  if (finalized)
    finalized = wait("finalizing NCCL's communicators", [] {
                  return absl::StatusOr<bool>(true);
                }).ok();
  if (!finalized) {
    abort("finalizing them failed");
    return;
  }
  for (size_t i = 0; i < endpointCount(); ++i)
    if (Endpoint &e = endpoint(i); e.comm) {
      ncclCommDestroy(e.comm);
      e.comm = nullptr;
    }
}

void NcclCommunicator::abort(std::string why) {
  if (aborted())
    return;
  abortReason = why.empty() ? "a failure" : std::move(why);
  for (size_t i = 0; i < endpointCount(); ++i)
    if (Endpoint &e = endpoint(i); e.comm) {
      ncclCommAbort(e.comm);
      e.comm = nullptr;
    }
}

absl::Status NcclCommunicator::usable() const {
  if (!aborted())
    return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "NCCL's communicators were aborted after an earlier failure: ",
      abortReason));
}

std::string NcclCommunicator::describe(const Endpoint &e) const {
  std::string text =
      absl::StrCat(e.name, " (", e.size, e.size == 1 ? " rank" : " ranks");
  if (!e.lastOperation.empty())
    absl::StrAppend(&text, "; last operation: ", e.lastOperation);
  return text + ")";
}

absl::Status
NcclCommunicator::wait(std::string what,
                       std::function<absl::StatusOr<bool>()> done) {
  if (absl::Status status = usable(); !status.ok())
    return status;
  PolledWork work;
  work.what = std::move(what);
  work.done = std::move(done);
  work.communicators = endpointCount();
  work.state = [this](size_t i) {
    ncclComm_t comm = endpoint(i).comm;
    CommState state;
    if (!comm) // not created yet
      return state;
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t asked = ncclCommGetAsyncError(comm, &async);
        asked != ncclSuccess)
      return CommState{CommState::Failed,
                       absl::StrCat("ncclCommGetAsyncError failed: ",
                                    errorText(asked, comm))};
    if (async == ncclInProgress)
      state.kind = CommState::InProgress;
    else if (async != ncclSuccess)
      state = {CommState::Failed, errorText(async, comm)};
    return state;
  };
  work.name = [this](size_t i) { return describe(endpoint(i)); };
  work.abort = [this] { abort("a failure while waiting for NCCL"); };
  absl::Status status = waitPolling(work, timeout);
  if (!status.ok())
    abortReason = std::string(status.message());
  return status;
}

absl::Status NcclCommunicator::enqueued(ncclResult_t result, Endpoint &e,
                                        std::string operation) {
  e.lastOperation =
      caller.empty() ? operation : absl::StrCat(operation, " for ", caller);
  if (result == ncclSuccess)
    return absl::OkStatus();
  // The call goes on in the background (a connection to a peer being set
  // up): its work is on the stream only once the communicator is ready.
  if (result == ncclInProgress)
    return wait(
        absl::StrCat("NCCL to enqueue ", e.lastOperation, " on ", e.name),
        [] { return absl::StatusOr<bool>(true); });
  return failure(result, e);
}

absl::Status NcclCommunicator::abandonedGroup(ncclResult_t result,
                                              Endpoint &e,
                                              std::string operation) {
  // The calls queued before the failure may still be launching: the
  // communicator is ready again (polled) before anything else uses it. The
  // first failure is the one reported.
  enqueued(ncclGroupEnd(), e, std::move(operation)).IgnoreError();
  return failure(result, e);
}

absl::Status NcclCommunicator::failure(ncclResult_t result,
                                       const Endpoint &e) const {
  return absl::Status(
      codeOf(result),
      absl::StrCat(
          e.lastOperation, " failed on ", e.name, " (", e.size,
          e.size == 1 ? " rank): " : " ranks): ", errorText(result, e.comm)));
}

absl::Status NcclCommunicator::checkGroup(uint32_t group) const {
  if (absl::Status status = usable(); !status.ok())
    return status;
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
  Endpoint &g = groups[group];
  return enqueued(ncclAllReduce(in, out, elements(count), ncclFloat32, ncclSum,
                                g.comm, stream),
                  g, absl::StrCat("ncclAllReduce of ", count, " f32"));
}

absl::Status NcclCommunicator::allGather(uint32_t group, const float *in,
                                         float *out, int64_t count,
                                         cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  Endpoint &g = groups[group];
  return enqueued(
      ncclAllGather(in, out, elements(count), ncclFloat32, g.comm, stream), g,
      absl::StrCat("ncclAllGather of ", count, " f32 per member"));
}

absl::Status NcclCommunicator::reduceScatter(uint32_t group, const float *in,
                                             float *out, int64_t count,
                                             cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  Endpoint &g = groups[group];
  return enqueued(
      ncclReduceScatter(in, out, elements(count), ncclFloat32, ncclSum, g.comm,
                        stream),
      g, absl::StrCat("ncclReduceScatter of ", count, " f32 per member"));
}

absl::Status NcclCommunicator::grouped(uint32_t group, Grouped kind,
                                       const std::vector<Piece> &pieces,
                                       cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  Endpoint &g = groups[group];
  bool gather = kind == Grouped::AllGather;
  int64_t total = 0;
  for (const Piece &piece : pieces)
    total += piece.count;
  std::string operation =
      absl::StrCat("a group of ", pieces.size(),
                   gather ? " ncclAllGather (" : " ncclReduceScatter (", total,
                   " f32 per member in all)");
  if (absl::Status status = ncclStatus(ncclGroupStart(), "ncclGroupStart");
      !status.ok())
    return status;
  for (const Piece &piece : pieces) {
    ncclResult_t result =
        gather ? ncclAllGather(piece.in, piece.out, elements(piece.count),
                               ncclFloat32, g.comm, stream)
               : ncclReduceScatter(piece.in, piece.out, elements(piece.count),
                                   ncclFloat32, ncclSum, g.comm, stream);
    if (result != ncclSuccess && result != ncclInProgress)
      return abandonedGroup(result, g, std::move(operation));
  }
  // As in allToAll: the group may still be launching when ncclGroupEnd
  // returns.
  return enqueued(ncclGroupEnd(), g, std::move(operation));
}

absl::Status NcclCommunicator::allToAll(uint32_t group, const float *in,
                                        float *out, int64_t count,
                                        cudaStream_t stream) {
  if (absl::Status status = checkGroup(group); !status.ok())
    return status;
  Endpoint &g = groups[group];
  std::string operation =
      absl::StrCat("an all-to-all (grouped ncclSend and ncclRecv) of ", count,
                   " f32 per member");
  if (absl::Status status = ncclStatus(ncclGroupStart(), "ncclGroupStart");
      !status.ok())
    return status;
  for (int64_t peer = 0; peer < g.size; ++peer) {
    ncclResult_t sent =
        ncclSend(in + peer * count, elements(count), ncclFloat32,
                 static_cast<int>(peer), g.comm, stream);
    ncclResult_t received =
        ncclRecv(out + peer * count, elements(count), ncclFloat32,
                 static_cast<int>(peer), g.comm, stream);
    for (ncclResult_t result : {sent, received})
      if (result != ncclSuccess && result != ncclInProgress)
        return abandonedGroup(result, g, std::move(operation));
  }
  // A non-blocking communicator's group may still be launching when
  // ncclGroupEnd returns (in progress).
  return enqueued(ncclGroupEnd(), g, std::move(operation));
}

absl::Status NcclCommunicator::send(const void *data, int64_t bytes,
                                    int64_t peer, cudaStream_t stream) {
  if (absl::Status status = usable(); !status.ok())
    return status;
  if (peer < 0 || peer >= size || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot send to rank ", peer, " from rank ", rank, " of ", size));
  return enqueued(ncclSend(data, elements(bytes), ncclUint8,
                           static_cast<int>(peer), world.comm, stream),
                  world,
                  absl::StrCat("ncclSend of ", bytes, " bytes to rank ", peer));
}

absl::Status NcclCommunicator::recv(void *data, int64_t bytes, int64_t peer,
                                    cudaStream_t stream) {
  if (absl::Status status = usable(); !status.ok())
    return status;
  if (peer < 0 || peer >= size || peer == rank)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot receive from rank ", peer, " on rank ", rank, " of ", size));
  return enqueued(
      ncclRecv(data, elements(bytes), ncclUint8, static_cast<int>(peer),
               world.comm, stream),
      world, absl::StrCat("ncclRecv of ", bytes, " bytes from rank ", peer));
}

} // namespace triad::rt::nccl
