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

absl::StatusOr<std::vector<std::string>>
gatherStrings(Communicator &host, const std::string &mine, int64_t tag) {
  if (mine.size() > static_cast<size_t>(kMaxGatheredChars))
    return absl::InvalidArgumentError(
        absl::StrCat("a gathered string has ", mine.size(),
                     " characters, over the limit of ", kMaxGatheredChars));
  // Characters as floats (exact up to 2^24), the length first.
  std::vector<float> sent(kMaxGatheredChars + 1, 0.0f);
  sent[0] = static_cast<float>(mine.size());
  for (size_t i = 0; i < mine.size(); ++i)
    sent[i + 1] = static_cast<float>(static_cast<unsigned char>(mine[i]));
  std::vector<std::string> all;
  if (host.worldRank() != 0) {
    if (absl::Status status =
            host.send(sent.data(), kMaxGatheredChars + 1, 0, tag);
        !status.ok())
      return status;
    return all;
  }
  all.push_back(mine);
  std::vector<float> received(kMaxGatheredChars + 1);
  for (int64_t peer = 1; peer < host.worldSize(); ++peer) {
    if (absl::Status status =
            host.recv(received.data(), kMaxGatheredChars + 1, peer, tag);
        !status.ok())
      return status;
    auto length = static_cast<size_t>(received[0]);
    if (received[0] < 0 || length > static_cast<size_t>(kMaxGatheredChars))
      return absl::DataLossError(absl::StrCat(
          "rank ", peer, " sent a string of length ", received[0]));
    std::string text(length, '\0');
    for (size_t i = 0; i < length; ++i)
      text[i] = static_cast<char>(static_cast<unsigned char>(received[i + 1]));
    all.push_back(std::move(text));
  }
  return all;
}

absl::Status checkOneDevicePerRank(const std::vector<std::string> &devices) {
  for (size_t a = 0; a < devices.size(); ++a)
    for (size_t b = a + 1; b < devices.size(); ++b)
      if (devices[a] == devices[b])
        return absl::FailedPreconditionError(absl::StrCat(
            "ranks ", a, " and ", b, " share the GPU ", devices[a],
            ": NCCL needs a GPU of its own for every rank (one rank per GPU "
            "of each node, or --cuda-device); --comm mpi stages collectives "
            "through host memory and lets ranks share a GPU"));
  return absl::OkStatus();
}

} // namespace triad::rt
