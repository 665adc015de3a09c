//===- Comm.cpp - collective communication among a job's ranks ------------===//

#include "runtime/comm/Comm.h"

#include "absl/strings/str_cat.h"

#include <cstring>

namespace triad::rt {

namespace {

/// A collective that completed when it was started.
class FinishedRequest : public CommRequest {
public:
  absl::Status wait() override { return absl::OkStatus(); }
};

absl::StatusOr<std::unique_ptr<CommRequest>>
finished(const absl::Status &status) {
  if (!status.ok())
    return status;
  return std::unique_ptr<CommRequest>(new FinishedRequest());
}

} // namespace

CommRequest::~CommRequest() = default;
Communicator::~Communicator() = default;

absl::StatusOr<std::unique_ptr<CommRequest>>
Communicator::startAllReduceSum(uint32_t group, const float *in, float *out,
                                int64_t count) {
  return finished(allReduceSum(group, in, out, count));
}

absl::StatusOr<std::unique_ptr<CommRequest>>
Communicator::startAllGather(uint32_t group, const float *in, float *out,
                             int64_t count) {
  return finished(allGather(group, in, out, count));
}

absl::StatusOr<std::unique_ptr<CommRequest>>
Communicator::startReduceScatter(uint32_t group, const float *in, float *out,
                                 int64_t count) {
  return finished(reduceScatter(group, in, out, count));
}

absl::StatusOr<std::unique_ptr<CommRequest>>
Communicator::startAllToAll(uint32_t group, const float *in, float *out,
                            int64_t count) {
  return finished(allToAll(group, in, out, count));
}

absl::StatusOr<std::unique_ptr<CommRequest>>
Communicator::startSend(const float *data, int64_t count, int64_t peer,
                        int64_t tag) {
  return finished(send(data, count, peer, tag));
}

absl::StatusOr<std::unique_ptr<CommRequest>>
Communicator::startRecv(float *data, int64_t count, int64_t peer, int64_t tag) {
  return finished(recv(data, count, peer, tag));
}

absl::Status Communicator::checkTransfer(int64_t count, int64_t peer,
                                         int64_t tag) const {
  if (peer < 0 || peer >= worldSize() || peer == worldRank())
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", worldRank(), " cannot transfer to or from rank ", peer,
        ": the peer must be another of the world's ", worldSize(), " ranks"));
  if (count < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", count));
  if (tag < 0)
    return absl::InvalidArgumentError(absl::StrCat("negative tag ", tag));
  return absl::OkStatus();
}

absl::Status LocalCommunicator::send(const float *, int64_t count, int64_t peer,
                                     int64_t tag) {
  return checkTransfer(count, peer, tag);
}

absl::Status LocalCommunicator::recv(float *, int64_t count, int64_t peer,
                                     int64_t tag) {
  return checkTransfer(count, peer, tag);
}

absl::Status LocalCommunicator::copy(uint32_t group, const float *in,
                                     float *out, int64_t count) const {
  if (group >= groups)
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group, " is not one of the ", groups,
                     " groups of this communicator"));
  if (count < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", count));
  if (in != out && count > 0)
    std::memmove(out, in, static_cast<size_t>(count) * sizeof(float));
  return absl::OkStatus();
}

absl::Status LocalCommunicator::allReduceSum(uint32_t group, const float *in,
                                             float *out, int64_t count) {
  return copy(group, in, out, count);
}

absl::Status LocalCommunicator::allGather(uint32_t group, const float *in,
                                          float *out, int64_t count) {
  return copy(group, in, out, count);
}

absl::Status LocalCommunicator::reduceScatter(uint32_t group, const float *in,
                                              float *out, int64_t count) {
  return copy(group, in, out, count);
}

absl::Status LocalCommunicator::allToAll(uint32_t group, const float *in,
                                         float *out, int64_t count) {
  return copy(group, in, out, count);
}

} // namespace triad::rt
