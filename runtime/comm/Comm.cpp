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
