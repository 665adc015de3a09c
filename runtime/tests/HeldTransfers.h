//===- HeldTransfers.h - transfers held until waited for --------*- C++ -*-===//
//
// Transfers that outlive the call starting them, seen from one rank: world
// rank 1 of two, over `HeldTransfers`, a communicator whose started sends
// and receives complete only when the executor waits for them, recording
// when (and what a send's buffer held then); and `inFlightPlan`, whose
// pipeline rank 1 receives and sends on the slots of slotted values, into
// and from a persistent tensor and an argument. InFlightTest.cpp runs it on
// the CPU executor, CudaExecutorTest.cpp on the GPU.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_TESTS_HELDTRANSFERS_H
#define TRIAD_RUNTIME_TESTS_HELDTRANSFERS_H

#include "runtime/comm/Comm.h"
#include "runtime/tests/PlanBuilder.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace triad::rt::tests {

/// World rank 1 of two, without groups: every transfer started is held
/// until the executor waits for it.
class HeldTransfers : public Communicator {
public:
  struct Transfer {
    bool send;
    const float *data;
    int64_t count, peer, tag;
    /// What a receive delivers, and what the wait returns.
    std::vector<float> payload;
    absl::Status outcome;
    bool waited = false;
    /// A send's data as the wait found it (a send may read its buffer
    /// until it completes).
    std::vector<float> sent;
  };
  std::vector<std::shared_ptr<Transfer>> started;
  /// Called at the start of every wait.
  std::function<void()> onWait;

  int64_t worldRank() const override { return 1; }
  int64_t worldSize() const override { return 2; }
  uint32_t groupCount() const override { return 0; }
  int64_t groupSize(uint32_t) const override { return 1; }
  int64_t groupMember(uint32_t) const override { return 0; }
  absl::Status allReduceSum(uint32_t, const float *, float *,
                            int64_t) override {
    return absl::UnimplementedError("no collectives");
  }
  absl::Status allGather(uint32_t, const float *, float *, int64_t) override {
    return absl::UnimplementedError("no collectives");
  }
  absl::Status reduceScatter(uint32_t, const float *, float *,
                             int64_t) override {
    return absl::UnimplementedError("no collectives");
  }
  absl::Status allToAll(uint32_t, const float *, float *, int64_t) override {
    return absl::UnimplementedError("no collectives");
  }
  absl::Status send(const float *, int64_t, int64_t, int64_t) override {
    return absl::UnimplementedError("transfers are started");
  }
  absl::Status recv(float *, int64_t, int64_t, int64_t) override {
    return absl::UnimplementedError("transfers are started");
  }
  absl::Status barrier() override { return absl::OkStatus(); }
  absl::Status agree(const absl::Status &local) override { return local; }
  absl::StatusOr<int64_t> worldMinimum(int64_t local) override { return local; }
  absl::StatusOr<double> worldSum(double local) override { return local; }

  absl::StatusOr<std::unique_ptr<CommRequest>> startSend(const float *data,
                                                         int64_t count,
                                                         int64_t peer,
                                                         int64_t tag) override {
    return hold(true, data, count, peer, tag);
  }
  absl::StatusOr<std::unique_ptr<CommRequest>>
  startRecv(float *data, int64_t count, int64_t peer, int64_t tag) override {
    return hold(false, data, count, peer, tag);
  }

private:
  class Held : public CommRequest {
  public:
    Held(HeldTransfers &owner, std::shared_ptr<Transfer> transfer)
        : owner(owner), transfer(std::move(transfer)) {}
    absl::Status wait() override {
      if (owner.onWait)
        owner.onWait();
      Transfer &t = *transfer;
      t.waited = true;
      if (t.send)
        t.sent.assign(t.data, t.data + t.count);
      else if (static_cast<int64_t>(t.payload.size()) == t.count)
        std::copy(t.payload.begin(), t.payload.end(),
                  const_cast<float *>(t.data));
      return t.outcome;
    }

  private:
    HeldTransfers &owner;
    std::shared_ptr<Transfer> transfer;
  };

  std::unique_ptr<CommRequest> hold(bool send, const float *data, int64_t count,
                                    int64_t peer, int64_t tag) {
    auto transfer = std::make_shared<Transfer>();
    transfer->send = send;
    transfer->data = data;
    transfer->count = count;
    transfer->peer = peer;
    transfer->tag = tag;
    started.push_back(transfer);
    return std::make_unique<Held>(*this, std::move(transfer));
  }
};

/// Pipeline rank 1's functions (rank 0's program only makes the plan one
/// of two ranks): "recv" receives an activation into its slot, "use" reads
/// it, "fill" overwrites it; "prepare" writes a gradient into its slot,
/// "send" sends it, "overwrite" writes it again; "recv_result" returns
/// what it receives; "recv_w" and "send_w" move persistent tensor "w";
/// "recv_arg" receives into the argument of "load".
inline std::string inFlightPlan() {
  PlanBuilder b;
  b.mesh = {{"pp", 2}};
  uint32_t x = b.value(plan::DType::F32, {4});
  b.function("f");
  b.instr(plan::OpCode::Send, {x}, {}, {1, 0});

  b.program(1);
  uint32_t act = b.slottedValue(plan::DType::F32, {4}, 2),
           grad = b.slottedValue(plan::DType::F32, {4}, 2),
           out = b.value(plan::DType::F32, {4}),
           w = b.value(plan::DType::F32, {4}),
           arg = b.value(plan::DType::F32, {4});
  b.persistent("w", w, plan::Role::Parameter, plan::InitKind::Constant, 1.0);
  b.function("recv");
  b.instr(plan::OpCode::Recv, {}, {act}, {0, 0});
  b.function("use");
  b.instr(plan::OpCode::Scale, {act}, {out}, {}, {2.0});
  b.results({out}, {});
  b.function("fill");
  b.instr(plan::OpCode::Fill, {}, {act}, {}, {-1.0});
  b.function("prepare");
  b.instr(plan::OpCode::Fill, {}, {grad}, {}, {7.0});
  b.function("send");
  b.instr(plan::OpCode::Send, {grad}, {}, {0, 1});
  b.function("overwrite");
  b.instr(plan::OpCode::Fill, {}, {grad}, {}, {3.0});
  b.function("recv_result");
  b.instr(plan::OpCode::Recv, {}, {act}, {0, 0});
  b.results({act}, {});
  b.function("recv_w");
  b.instr(plan::OpCode::Recv, {}, {w}, {0, 2});
  b.function("send_w");
  b.instr(plan::OpCode::Send, {w}, {}, {0, 3});
  b.function("recv_arg");
  b.instr(plan::OpCode::Recv, {}, {arg}, {0, 4});
  b.function("load", {arg});
  b.instr(plan::OpCode::Copy, {arg}, {out});
  b.results({out}, {});
  return b.build();
}

} // namespace triad::rt::tests

#endif // TRIAD_RUNTIME_TESTS_HELDTRANSFERS_H
