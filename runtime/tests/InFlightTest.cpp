//===- InFlightTest.cpp - transfers that outlive the call starting them ---===//
//
// A pipeline rank's receive returns once posted, and the call that reads
// what it receives waits for it. These tests run pipeline rank 1 of a plan
// of two alone, over a communicator that holds every transfer started until
// the executor waits for it, and check where the executor waits: at the
// first instruction of a later call that touches the transfer's bytes on
// its own slot (and never for another slot's), before results and
// persistent tensors are read or written, at finish, on errors and in the
// destructor; and what it reports: a failure where it is waited for, named
// by the call that started it, and the watchdog's view of such a wait.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CpuExecutor.h"
#include "runtime/support/Watchdog.h"
#include "runtime/tests/HeldTransfers.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace triad::rt;
using triad::plan::OpCode;
using triad::rt::tests::HeldTransfers;
using triad::rt::tests::inFlightPlan;

namespace {

class InFlight : public testing::Test {
protected:
  void SetUp() override {
    absl::StatusOr<LoadedPlan> loaded =
        loadPlanFromBytes(inFlightPlan(), "in-flight.plan");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    plan = std::make_unique<LoadedPlan>(std::move(*loaded));
    ASSERT_TRUE(create());
  }

  /// A fresh executor of pipeline rank 1 over `comm`.
  bool create(bool overlap = true) {
    ExecutorOptions options;
    options.communicator = &comm;
    options.progress = &progress;
    options.overlapCollectives = overlap;
    absl::StatusOr<CpuExecutor> created =
        CpuExecutor::create(*plan, 1, 1, options);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok())
      return false;
    executor.emplace(std::move(*created));
    return true;
  }

  absl::StatusOr<std::vector<HostTensor>>
  call(const std::string &function, uint32_t microbatch, uint32_t slot,
       std::vector<InstructionTime> *times = nullptr) {
    const triad::plan::Program &program = executor->programOf();
    progress.beginCall(program.functions()
                           ->Get(*executor->functionIndex(function))
                           ->name()
                           ->c_str(),
                       microbatch);
    return executor->run(function, {}, 0, times, microbatch, slot);
  }

  HeldTransfers comm;
  Progress progress;
  std::unique_ptr<LoadedPlan> plan;
  std::optional<CpuExecutor> executor;
};

/// The waits among `times`, as "function/microbatch/instruction".
std::vector<std::string> waits(const std::vector<InstructionTime> &times) {
  std::vector<std::string> found;
  for (const InstructionTime &time : times)
    if (time.wait)
      found.push_back(time.function->name()->str() + "/" +
                      std::to_string(time.microbatch) + "/" +
                      std::to_string(time.index));
  return found;
}

// Two receives posted on two slots return at once; each is waited for by
// the first instruction that reads its slot, in a later call, and never by
// one that touches the other slot.
TEST_F(InFlight, AReceiveIsWaitedForByTheCallThatReadsIt) {
  ASSERT_TRUE(call("recv", 0, 0).ok());
  ASSERT_TRUE(call("recv", 1, 1).ok());
  ASSERT_EQ(comm.started.size(), 2u);
  EXPECT_FALSE(comm.started[0]->waited);
  EXPECT_FALSE(comm.started[1]->waited);
  EXPECT_FALSE(comm.started[0]->send);
  EXPECT_EQ(comm.started[0]->peer, 0);
  EXPECT_EQ(comm.started[0]->count, 4);
  // Two copies of the activation: slot 1's bytes follow slot 0's.
  EXPECT_EQ(comm.started[1]->data, comm.started[0]->data + 16);
  comm.started[0]->payload = {1, 2, 3, 4};
  comm.started[1]->payload = {5, 6, 7, 8};

  std::vector<InstructionTime> times;
  auto used = call("use", 1, 1, &times);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ((*used)[0].floats, (std::vector<float>{10, 12, 14, 16}));
  EXPECT_TRUE(comm.started[1]->waited);
  EXPECT_FALSE(comm.started[0]->waited);
  EXPECT_EQ(waits(times), (std::vector<std::string>{"recv/1/0"}));
  // The wait comes before the instruction that needed it.
  ASSERT_EQ(times.size(), 2u);
  EXPECT_TRUE(times[0].wait);
  EXPECT_EQ(times[0].op, OpCode::Recv);
  EXPECT_EQ(times[1].op, OpCode::Scale);

  // Overwriting slot 1 does not wait for slot 0's receive.
  ASSERT_TRUE(call("fill", 2, 1).ok());
  EXPECT_FALSE(comm.started[0]->waited);
  used = call("use", 0, 0);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ((*used)[0].floats, (std::vector<float>{2, 4, 6, 8}));
  EXPECT_TRUE(comm.started[0]->waited);
}

// A send may read its buffer until it completes: writing its slot waits
// for it, writing the other slot does not.
TEST_F(InFlight, ASendIsWaitedForBeforeItsBytesAreWritten) {
  ASSERT_TRUE(call("prepare", 0, 0).ok());
  ASSERT_TRUE(call("send", 0, 0).ok());
  ASSERT_EQ(comm.started.size(), 1u);
  EXPECT_TRUE(comm.started[0]->send);
  EXPECT_FALSE(comm.started[0]->waited);
  ASSERT_TRUE(call("overwrite", 1, 1).ok());
  EXPECT_FALSE(comm.started[0]->waited);
  ASSERT_TRUE(call("overwrite", 0, 0).ok());
  EXPECT_TRUE(comm.started[0]->waited);
  EXPECT_EQ(comm.started[0]->sent, (std::vector<float>(4, 7.0f)));
}

// A call's results, and persistent tensors read or written from the host,
// wait for what writes or reads them.
TEST_F(InFlight, TheHostReadsAndWritesAfterTheTransfers) {
  comm.onWait = [&] { comm.started[0]->payload = {4, 3, 2, 1}; };
  auto received = call("recv_result", 0, 1);
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ((*received)[0].floats, (std::vector<float>{4, 3, 2, 1}));
  comm.onWait = nullptr;

  ASSERT_TRUE(call("recv_w", 0, 0).ok());
  EXPECT_FALSE(comm.started.back()->waited);
  comm.started.back()->payload = {9, 8, 7, 6};
  absl::StatusOr<std::vector<float>> w = executor->readPersistent("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, (std::vector<float>{9, 8, 7, 6}));

  ASSERT_TRUE(call("send_w", 0, 0).ok());
  EXPECT_FALSE(comm.started.back()->waited);
  ASSERT_TRUE(executor->writePersistent("w", {0, 0, 0, 0}).ok());
  EXPECT_TRUE(comm.started.back()->waited);
  EXPECT_EQ(comm.started.back()->sent, (std::vector<float>{9, 8, 7, 6}));
}

// An argument is copied in once what may still write its bytes is done.
TEST_F(InFlight, AnArgumentIsWrittenAfterTheTransfers) {
  ASSERT_TRUE(call("recv_arg", 0, 0).ok());
  comm.started[0]->payload = {9, 9, 9, 9};
  HostTensor x;
  x.shape = {4};
  x.floats = {1, 2, 3, 4};
  auto loaded = executor->run("load", {x});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(comm.started[0]->waited);
  EXPECT_EQ((*loaded)[0].floats, x.floats);
}

// finish waits for everything in flight, records the waits, and names the
// call that started a transfer that failed.
TEST_F(InFlight, FinishWaitsForEverything) {
  ASSERT_TRUE(call("recv", 0, 0).ok());
  ASSERT_TRUE(call("recv", 1, 1).ok());
  std::vector<InstructionTime> times;
  ASSERT_TRUE(executor->finish(&times).ok());
  EXPECT_EQ(waits(times), (std::vector<std::string>{"recv/0/0", "recv/1/0"}));
  EXPECT_TRUE(comm.started[0]->waited && comm.started[1]->waited);
  times.clear();
  ASSERT_TRUE(executor->finish(&times).ok());
  EXPECT_TRUE(times.empty());

  ASSERT_TRUE(call("recv", 5, 1).ok());
  comm.started.back()->outcome =
      absl::InvalidArgumentError("received 6 elements from rank 0 (tag 0) "
                                 "but expected 4");
  absl::Status finished = executor->finish();
  EXPECT_EQ(finished.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(finished.message(),
            "the transfer of instruction 0 (Recv) of call recv (microbatch "
            "5): received 6 elements from rank 0 (tag 0) but expected 4");
}

// A transfer that fails is reported by the instruction that waits for it,
// in a later call, which first waits for everything else in flight.
TEST_F(InFlight, AFailureIsReportedWhereItIsWaitedFor) {
  ASSERT_TRUE(call("recv", 3, 1).ok());
  ASSERT_TRUE(call("recv", 4, 0).ok());
  comm.started[0]->outcome = absl::InvalidArgumentError(
      "received 6 elements from rank 0 (tag 0) but expected 4");
  auto used = call("use", 3, 1);
  ASSERT_FALSE(used.ok());
  EXPECT_EQ(used.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(used.status().message(),
            "function 'use', instruction 0 (Scale): the transfer of "
            "instruction 0 (Recv) of call recv (microbatch 3): received 6 "
            "elements from rank 0 (tag 0) but expected 4");
  EXPECT_TRUE(comm.started[1]->waited);
  EXPECT_TRUE(executor->finish().ok());
}

// The executor's memory outlives the receives that write into it.
TEST_F(InFlight, TheDestructorWaitsForWhatIsInFlight) {
  ASSERT_TRUE(call("recv", 0, 0).ok());
  std::shared_ptr<HeldTransfers::Transfer> receive = comm.started[0];
  executor.reset();
  EXPECT_TRUE(receive->waited);
}

// Without overlap every transfer completes in the call that starts it.
TEST_F(InFlight, WithoutOverlapACallCompletesItsTransfers) {
  ASSERT_TRUE(create(/*overlap=*/false));
  ASSERT_TRUE(call("recv", 0, 0).ok());
  ASSERT_EQ(comm.started.size(), 1u);
  EXPECT_TRUE(comm.started[0]->waited);
}

// The watchdog sees a wait for a transfer of an earlier call as that
// call's: what it reports and what peers compare.
TEST_F(InFlight, TheWatchdogNamesTheCallThatStartedAWait) {
  progress.beginStep(7);
  ASSERT_TRUE(call("recv", 2, 0).ok());
  std::string described;
  std::optional<WaitPoint> point;
  comm.onWait = [&] {
    described = progress.describe();
    point = progress.waitPoint();
  };
  ASSERT_TRUE(call("use", 5, 0).ok());
  EXPECT_EQ(described,
            "step 7, call use (microbatch 5), instruction 0 (Scale), waiting "
            "for the transfer of instruction 0 (Recv: rank 0) started by call "
            "recv (microbatch 2)");
  ASSERT_TRUE(point);
  EXPECT_EQ(point->key(), "7/recv/2/0");
  EXPECT_TRUE(point->transfer);
  EXPECT_EQ(point->peers, (std::vector<int64_t>{0}));
}

} // namespace
