//===- MpiTest.cpp - the MPI world and the MPI communicator ---------------===//
//
// Started without a launcher (as unit tests are), a process is one rank and
// never starts MPI; the launcher variables are what decides. The tests of
// the MPI communicator start this test binary again under `mpirun -np N`
// (with Open MPI's settings for root and oversubscription) and pass when
// every rank passes: run without a launcher, such a test launches; run by
// one, it is one rank of the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/mpi/Mpi.h"
#include "runtime/comm/mpi/MpiCommunicator.h"
#include "runtime/comm/mpi/PeerQuery.h"
#include "runtime/executor/CpuExecutor.h"
#include "runtime/tests/CollectiveChecks.h"
#include "runtime/tests/PlanBuilder.h"
#include "runtime/tests/TransferChecks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace triad::rt;

namespace {

constexpr const char *kLauncherVariables[] = {
    "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS"};

/// Removes the launcher variables for the test's lifetime.
class WithoutLauncher {
public:
  WithoutLauncher() {
    for (const char *name : kLauncherVariables) {
      const char *value = std::getenv(name);
      saved.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~WithoutLauncher() {
    for (size_t i = 0; i < saved.size(); ++i)
      if (saved[i])
        setenv(kLauncherVariables[i], saved[i]->c_str(), 1);
      else
        unsetenv(kLauncherVariables[i]);
  }

private:
  std::vector<std::optional<std::string>> saved;
};

TEST(Mpi, WithoutALauncherAProcessIsOneRank) {
  WithoutLauncher clean;
  EXPECT_FALSE(mpi::launchedByLauncher());
  auto world = mpi::World::initialize(nullptr, nullptr);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_FALSE(world->usesMpi());
  EXPECT_TRUE(world->barrier().ok());
}

TEST(Mpi, LauncherVariablesAreRecognized) {
  for (const char *name : kLauncherVariables) {
    WithoutLauncher clean;
    setenv(name, "2", 1);
    EXPECT_TRUE(mpi::launchedByLauncher()) << name;
  }
  WithoutLauncher clean;
  EXPECT_FALSE(mpi::launchedByLauncher());
}

/// Runs test `test` of this binary on `ranks` ranks under mpirun; returns
/// its exit status, with the job's output in `output`.
int runUnderMpirun(int ranks, const std::string &test, std::string &output) {
  for (const auto &[name, value] :
       {std::pair<const char *, const char *>{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
        {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
        {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
        {"OMP_NUM_THREADS", "1"},
        {"OPENBLAS_NUM_THREADS", "1"},
        // Open MPI's own allocations outlive MPI_Finalize.
        {"ASAN_OPTIONS", "detect_leaks=0"}})
    setenv(name, value, 1);
  // The job runs exactly the one test, whatever shard of the suite (and
  // output file) a runner such as lit gave this process.
  for (const char *name : {"GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX",
                           "GTEST_SHARD_STATUS_FILE", "GTEST_OUTPUT"})
    unsetenv(name);
  char self[4096];
  ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0)
    return -1;
  self[length] = '\0';
  std::string command = "mpirun -np " + std::to_string(ranks) + " '" + self +
                        "' --gtest_color=no --gtest_filter=" + test + " 2>&1";
  FILE *pipe = popen(command.c_str(), "r");
  if (!pipe)
    return -1;
  char buffer[4096];
  size_t read;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    output.append(buffer, read);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool haveMpirun() {
  return std::system("command -v mpirun > /dev/null 2>&1") == 0;
}

/// Without a launcher: runs the current test on `ranks` ranks and returns
/// true (the caller returns too). Under one: returns false.
bool launched(int ranks) {
  if (mpi::launchedByLauncher())
    return false;
  if (!haveMpirun()) {
    ADD_FAILURE() << "mpirun is not installed";
    return true;
  }
  const ::testing::TestInfo *info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = std::string(info->test_suite_name()) + "." + info->name(),
              output;
  EXPECT_EQ(runUnderMpirun(ranks, test, output), 0) << output;
  // Every rank ran the test (and passed it).
  int passed = 0;
  for (size_t at = output.find("[  PASSED  ] 1 test."); at != std::string::npos;
       at = output.find("[  PASSED  ] 1 test.", at + 1))
    ++passed;
  EXPECT_EQ(passed, ranks) << output;
  return true;
}

TEST(MpiCommunicator, EveryCollectiveOnA2x2Mesh) {
  if (launched(4))
    return;
  auto world = mpi::World::initialize(nullptr, nullptr);
  ASSERT_TRUE(world.ok()) << world.status();
  ASSERT_EQ(world->size(), 4);
  auto plan =
      loadPlanFromBytes(tests::buildCollectivesPlan(), "collectives.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto comm = mpi::createMpiCommunicator(plan->root());
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->worldRank(), world->rank());
  for (int64_t group = 0; group < 4; ++group) {
    std::vector<int64_t> members = tests::checkedMembers(group, world->rank());
    EXPECT_EQ((*comm)->groupSize(group), static_cast<int64_t>(members.size()));
    EXPECT_EQ(members[(*comm)->groupMember(group)], world->rank());
  }
  for (bool overlap : {false, true}) {
    ExecutorOptions options;
    options.communicator = comm->get();
    options.overlapCollectives = overlap;
    auto executor = CpuExecutor::create(*plan, 0, 1, options);
    ASSERT_TRUE(executor.ok()) << executor.status();
    EXPECT_EQ(tests::checkCollectives(*executor, world->rank()), "")
        << "overlap " << overlap;
  }
  // Every rank learns of one rank's failure.
  absl::Status mine =
      world->rank() == 2 ? absl::InternalError("disk full") : absl::OkStatus();
  absl::Status agreed = (*comm)->agree(mine);
  EXPECT_EQ(agreed.message(),
            world->rank() == 2 ? "disk full" : "rank 2 failed (see its error)");
  EXPECT_TRUE((*comm)->agree(absl::OkStatus()).ok());
  EXPECT_TRUE((*comm)->barrier().ok());
  // A plan for another world size is refused.
  tests::PlanBuilder two;
  two.mesh = {{"dp", 2}};
  auto other = loadPlanFromBytes(two.build({}, {}), "two.plan");
  ASSERT_TRUE(other.ok()) << other.status();
  auto refused = mpi::createMpiCommunicator(other->root());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "the plan's mesh has 2 ranks but the MPI world has 4");
}

TEST(PeerQuery, SaysWhereEachPeerIsAndWhoDoesNotAnswer) {
  if (launched(3))
    return;
  auto world = mpi::World::initialize(nullptr, nullptr);
  ASSERT_TRUE(world.ok()) << world.status();
  ASSERT_TRUE(world->threadsMayCallMpi());
  int rank = world->rank();
  // Rank 2's answering thread hangs for 3 s on its first question: to rank
  // 0, asking with a deadline of 1 s, it does not answer.
  std::atomic<int> questions{0};
  auto query = mpi::PeerQuery::start(*world, [&] {
    if (rank == 2 && questions++ == 0)
      std::this_thread::sleep_for(std::chrono::seconds(3));
    return "rank " + std::to_string(rank) + " here";
  });
  ASSERT_TRUE(query.ok()) << query.status();
  ASSERT_TRUE(world->barrier().ok());
  if (rank == 0) {
    // The main threads of the others are busy elsewhere (here: in a
    // barrier); their answering threads answer.
    auto answers = (*query)->ask({0, 1, 2, 1}, std::chrono::milliseconds(1000));
    std::map<int64_t, std::optional<std::string>> expected = {
        {1, "rank 1 here"}, {2, std::nullopt}};
    EXPECT_EQ(answers, expected);
    // A late answer still counts for the next question.
    answers = (*query)->ask({2}, std::chrono::milliseconds(5000));
    expected = {{2, "rank 2 here"}};
    EXPECT_EQ(answers, expected);
  }
  ASSERT_TRUE(world->barrier().ok());
  query->reset();
}

/// Runs the transfer plan on `mesh` over MPI, blocking and overlapped;
/// `peerOf` gives each world rank's pipeline peer.
void checkTransfersOverMpi(std::vector<std::pair<std::string, uint32_t>> mesh,
                           int64_t (*peerOf)(int64_t)) {
  auto world = mpi::World::initialize(nullptr, nullptr);
  ASSERT_TRUE(world.ok()) << world.status();
  auto plan = loadPlanFromBytes(tests::buildTransferPlan(mesh), "t.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(world->size(), meshSize(plan->root()));
  auto comm = mpi::createMpiCommunicator(plan->root());
  ASSERT_TRUE(comm.ok()) << comm.status();
  int64_t rank = world->rank();
  uint32_t pipelineRank =
      pipelineRankAt(plan->root(), meshCoordinates(plan->root(), rank));
  for (bool overlap : {false, true}) {
    ExecutorOptions options;
    options.communicator = comm->get();
    options.overlapCollectives = overlap;
    auto executor = CpuExecutor::create(*plan, pipelineRank, 1, options);
    ASSERT_TRUE(executor.ok()) << executor.status();
    EXPECT_EQ(
        tests::checkTransfers(*executor, rank, pipelineRank, peerOf(rank)), "")
        << "overlap " << overlap;
  }
  // Transfers of another size than the receive's are errors there (and
  // the sender's sends complete).
  std::vector<float> data(8, 1.0f);
  int64_t peer = peerOf(rank);
  if (pipelineRank == 0) {
    EXPECT_TRUE((*comm)->send(data.data(), 4, peer, 9).ok());
  } else {
    absl::Status status = (*comm)->recv(data.data(), 8, peer, 9);
    EXPECT_EQ(status.message(),
              absl::StrCat("received 4 elements from rank ", peer,
                           " (tag 9) but expected 8: the matching send has "
                           "another size"));
  }
  EXPECT_FALSE((*comm)->send(data.data(), 4, rank, 0).ok());
  EXPECT_FALSE((*comm)->recv(data.data(), 4, 4, 0).ok());
  EXPECT_TRUE((*comm)->barrier().ok());
}

TEST(MpiCommunicator, TransfersBetweenTwoPipelineRanks) {
  if (launched(2))
    return;
  checkTransfersOverMpi({{"pp", 2}}, [](int64_t rank) { return 1 - rank; });
}

// Each dp replica's pipeline pair exchanges its own data: the peer of rank
// 2 dp + pp is 2 dp + (1 - pp).
TEST(MpiCommunicator, TransfersBesideDataParallelism) {
  if (launched(4))
    return;
  checkTransfersOverMpi({{"dp", 2}, {"pp", 2}},
                        [](int64_t rank) { return rank ^ 1; });
}

TEST(MpiCommunicator, NeedsMpi) {
  WithoutLauncher clean;
  auto plan = loadPlanFromBytes(tests::PlanBuilder().build({}, {}), "p");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto comm = mpi::createMpiCommunicator(plan->root());
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().message(),
            "MPI is not running (start the job with mpirun or srun)");
}

} // namespace
