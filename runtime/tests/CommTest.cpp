//===- CommTest.cpp - collectives: packing, one rank, ranks as threads ----===//
//
// The tensor layer's packing helpers, the world of one rank, and every
// collective of the plan format run by the executor on the four ranks of a
// 2 x 2 mesh (as threads), over groups of one axis, of both in either
// order, along leading and non-leading dimensions, with and without
// overlapping communication; then Send and Recv between pipeline ranks, on
// pp = 2 alone and beside dp = 2, and their errors. The same checks run
// over MPI in MpiTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"
#include "runtime/comm/Collectives.h"
#include "runtime/executor/CpuExecutor.h"
#include "runtime/tests/CollectiveChecks.h"
#include "runtime/tests/PlanBuilder.h"
#include "runtime/tests/ThreadComm.h"
#include "runtime/tests/TransferChecks.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>

using namespace triad::rt;
using triad::plan::DType;
using triad::plan::OpCode;

namespace {

std::vector<float> iota(int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  std::iota(values.begin(), values.end(), 0.0f);
  return values;
}

TEST(Packing, SwapBlocks) {
  // [2][3][2] -> [3][2][2]
  std::vector<float> source = iota(12), target(12);
  swapBlocks(source.data(), target.data(), 2, 3, 2);
  EXPECT_EQ(target, (std::vector<float>{0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11}));
}

TEST(Packing, PiecesAlongEveryDimension) {
  // x [2, 4, 3] = 0..23 in pieces of two along dimension 1: piece 0 holds
  // rows 0-1 of each [4, 3] matrix, piece 1 rows 2-3.
  std::vector<float> x = iota(24), packed(24), back(24);
  packPieces(x.data(), {2, 4, 3}, 1, 2, packed.data());
  EXPECT_EQ(packed,
            (std::vector<float>{0, 1, 2, 3, 4,  5,  12, 13, 14, 15, 16, 17,
                                6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23}));
  unpackPieces(packed.data(), {2, 4, 3}, 1, 2, back.data());
  EXPECT_EQ(back, x);
  // Along the last dimension: three pieces of one column each.
  packPieces(x.data(), {2, 4, 3}, 2, 3, packed.data());
  EXPECT_EQ(std::vector<float>(packed.begin(), packed.begin() + 8),
            (std::vector<float>{0, 3, 6, 9, 12, 15, 18, 21}));
  unpackPieces(packed.data(), {2, 4, 3}, 2, 3, back.data());
  EXPECT_EQ(back, x);
  // Along the leading dimension the pieces are the blocks already.
  packPieces(x.data(), {2, 4, 3}, 0, 2, packed.data());
  EXPECT_EQ(packed, x);
  EXPECT_EQ(outerElements({2, 4, 3}, 0), 1);
  EXPECT_EQ(outerElements({2, 4, 3}, 2), 8);
  EXPECT_EQ(outerElements({1, 1, 3}, 2), 1);
}

TEST(Packing, StagingOverDeviceBlocks) {
  // What NCCL's collectives stage beside their tensors (the CUDA executor
  // sizes its staging buffers from it once, at creation).
  auto staging = [](CollectiveKind kind, TensorShape x, TensorShape out,
                    int64_t dim, int64_t concatDim = 0) {
    TensorCollective c;
    c.kind = kind;
    c.xShape = std::move(x);
    c.outShape = std::move(out);
    c.dim = dim;
    c.concatDim = concatDim;
    PackedStaging need = packedStaging(c, 4);
    return std::pair(need.first, need.second);
  };
  using Need = std::pair<int64_t, int64_t>;
  // An all-reduce and pieces along the leading dimension stage nothing.
  EXPECT_EQ(staging(CollectiveKind::AllReduce, {8, 6}, {8, 6}, 0), Need(0, 0));
  EXPECT_EQ(staging(CollectiveKind::AllGather, {2, 6}, {8, 6}, 0), Need(0, 0));
  EXPECT_EQ(staging(CollectiveKind::ReduceScatter, {8, 6}, {2, 6}, 0),
            Need(0, 0));
  EXPECT_EQ(staging(CollectiveKind::AllGather, {1, 2, 6}, {1, 8, 6}, 1),
            Need(0, 0));
  // Along an inner dimension: the gathered blocks (every member's piece),
  // the packed pieces.
  EXPECT_EQ(staging(CollectiveKind::AllGather, {3, 2}, {3, 8}, 1), Need(24, 0));
  EXPECT_EQ(staging(CollectiveKind::ReduceScatter, {3, 8}, {3, 2}, 1),
            Need(24, 0));
  // An all-to-all packs what it sends and joins what it receives, each only
  // where the pieces are not already blocks.
  EXPECT_EQ(staging(CollectiveKind::AllToAll, {2, 8}, {8, 2}, 1, 0),
            Need(16, 0));
  EXPECT_EQ(staging(CollectiveKind::AllToAll, {8, 2}, {2, 8}, 0, 1),
            Need(0, 16));
  EXPECT_EQ(staging(CollectiveKind::AllToAll, {3, 8, 2}, {3, 2, 8}, 1, 2),
            Need(48, 48));
}

TEST(Packing, WidenedStagingOfSixteenBitCollectives) {
  // What a 16-bit collective over NCCL stages in f32 besides its packing:
  // x widened, and the result before it is rounded, except for an
  // all-reduce, which reduces the widened x in place.
  auto staging = [](CollectiveKind kind, TensorShape x, TensorShape out) {
    TensorCollective c;
    c.kind = kind;
    c.xShape = std::move(x);
    c.outShape = std::move(out);
    PackedStaging need = widenedStaging(c);
    return std::pair(need.first, need.second);
  };
  using Need = std::pair<int64_t, int64_t>;
  EXPECT_EQ(staging(CollectiveKind::AllReduce, {8, 6}, {8, 6}), Need(48, 0));
  EXPECT_EQ(staging(CollectiveKind::AllGather, {3, 2}, {3, 8}), Need(6, 24));
  EXPECT_EQ(staging(CollectiveKind::ReduceScatter, {3, 8}, {3, 2}),
            Need(24, 6));
  EXPECT_EQ(staging(CollectiveKind::AllToAll, {2, 8}, {8, 2}), Need(16, 16));
}

TEST(LocalCommunicator, EveryCollectiveIsACopy) {
  LocalCommunicator comm(2);
  EXPECT_EQ(comm.worldSize(), 1);
  EXPECT_EQ(comm.groupSize(1), 1);
  std::vector<float> x = iota(12), out(12);
  TensorCollective gather;
  gather.kind = CollectiveKind::AllGather;
  gather.group = 1;
  gather.x = x.data();
  gather.xShape = gather.outShape = {3, 4};
  gather.out = out.data();
  gather.dim = 1;
  ASSERT_TRUE(runCollective(comm, gather).ok());
  EXPECT_EQ(out, x);
  TensorCollective inPlace = gather;
  inPlace.kind = CollectiveKind::AllReduce;
  inPlace.out = x.data();
  ASSERT_TRUE(runCollective(comm, inPlace).ok());
  EXPECT_EQ(out, x);
  // Errors, not crashes.
  TensorCollective bad = gather;
  bad.group = 2;
  EXPECT_EQ(runCollective(comm, bad).code(),
            absl::StatusCode::kInvalidArgument);
  bad = gather;
  bad.outShape = {3, 5};
  EXPECT_EQ(runCollective(comm, bad).message(),
            "collective over group 1 of 1 members on x [3, 4]: the result "
            "must have shape [3, 4], not [3, 5]");
  bad = gather;
  bad.dim = 2;
  EXPECT_FALSE(runCollective(comm, bad).ok());
  EXPECT_FALSE(comm.allReduceSum(0, x.data(), out.data(), -1).ok());
  EXPECT_TRUE(comm.barrier().ok());
  EXPECT_EQ(comm.agree(absl::InternalError("x")).message(), "x");
  // Alone, a rank has no one to transfer to or from.
  EXPECT_EQ(comm.send(x.data(), 12, 1, 0).message(),
            "rank 0 cannot transfer to or from rank 1: the peer must be "
            "another of the world's 1 ranks");
  EXPECT_EQ(comm.recv(out.data(), 12, 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

/// Runs the transfer plan on `mesh` as threads; `peerOf` gives each world
/// rank's pipeline peer.
void runTransfersOnThreads(std::vector<std::pair<std::string, uint32_t>> mesh,
                           const std::function<int64_t(int64_t)> &peerOf,
                           bool overlap) {
  auto plan = loadPlanFromBytes(tests::buildTransferPlan(mesh), "t.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t size = meshSize(plan->root());
  std::vector<std::string> errors(size);
  std::vector<int64_t> transfers(size);
  tests::runRanks(
      plan->root(), [&](int64_t rank, tests::ThreadCommunicator &comm) {
        ExecutorOptions options;
        options.communicator = &comm;
        options.overlapCollectives = overlap;
        comm.deferred = overlap;
        uint32_t pipelineRank =
            pipelineRankAt(plan->root(), meshCoordinates(plan->root(), rank));
        auto executor = CpuExecutor::create(*plan, pipelineRank, 1, options);
        if (!executor.ok()) {
          errors[rank] = std::string(executor.status().message());
          return;
        }
        errors[rank] =
            tests::checkTransfers(*executor, rank, pipelineRank, peerOf(rank));
        transfers[rank] = comm.transfers;
      });
  for (int64_t rank = 0; rank < size; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(transfers[rank], 3) << "rank " << rank;
  }
}

TEST(ExecutorTransfers, BetweenTwoPipelineRanks) {
  for (bool overlap : {false, true})
    runTransfersOnThreads(
        {{"pp", 2}}, [](int64_t rank) { return 1 - rank; }, overlap);
}

// Each dp replica's pipeline pair exchanges its own data: with dp slowest
// the peer of rank 2 dp + pp is 2 dp + (1 - pp); with pp slowest, the peer
// of 2 pp + dp is 2 (1 - pp) + dp.
TEST(ExecutorTransfers, PeersShareTheDataParallelCoordinate) {
  for (bool overlap : {false, true}) {
    runTransfersOnThreads(
        {{"dp", 2}, {"pp", 2}}, [](int64_t rank) { return rank ^ 1; }, overlap);
    runTransfersOnThreads(
        {{"pp", 2}, {"dp", 2}}, [](int64_t rank) { return rank ^ 2; }, overlap);
  }
}

TEST(ExecutorTransfers, NeedACommunicatorAndTheRightPipelineRank) {
  auto plan = loadPlanFromBytes(
      tests::buildTransferPlan({{"dp", 2}, {"pp", 2}}), "t.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto alone = CpuExecutor::create(*plan, 1, 1);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(alone.status().message(),
            "function 'f', instruction 0 (Recv) transfers from pipeline rank "
            "0, but this executor has no communicator (run the plan's 4 ranks "
            "under mpirun)");
  // World rank 2 is (dp 1, pp 0): it cannot run pipeline rank 1's program.
  tests::ThreadWorld world(4);
  tests::ThreadCommunicator comm(plan->root(), 2, world);
  ExecutorOptions options;
  options.communicator = &comm;
  auto misplaced = CpuExecutor::create(*plan, 1, 1, options);
  ASSERT_FALSE(misplaced.ok());
  EXPECT_EQ(misplaced.status().message(),
            "function 'f', instruction 0 (Recv): world rank 2 is at pipeline "
            "rank 0 of the mesh but runs the program of pipeline rank 1");
  // The communicator refuses transfers to itself or outside the world.
  std::vector<float> data(4);
  EXPECT_FALSE(comm.send(data.data(), 4, 2, 0).ok());
  EXPECT_FALSE(comm.recv(data.data(), 4, 4, 0).ok());
  EXPECT_FALSE(comm.send(data.data(), -1, 0, 0).ok());
  EXPECT_FALSE(comm.send(data.data(), 4, 0, -1).ok());
}

// A receive whose size differs from its send's is an error on the
// receiving rank, whether it waits at once or at the first use.
TEST(ExecutorTransfers, SizesMustMatch) {
  tests::PlanBuilder b;
  b.mesh = {{"pp", 2}};
  uint32_t x = b.value(DType::F32, {2, 3});
  b.function("f");
  b.instr(OpCode::Send, {x}, {}, {1, 0});
  b.program(1);
  uint32_t y = b.value(DType::F32, {4}), z = b.value(DType::F32, {4});
  b.function("f");
  b.instr(OpCode::Recv, {}, {y}, {0, 0});
  b.instr(OpCode::Copy, {y}, {z});
  auto plan = loadPlanFromBytes(b.build(), "mismatch.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (bool overlap : {false, true}) {
    std::vector<std::string> errors(2);
    tests::runRanks(plan->root(), [&](int64_t rank,
                                      tests::ThreadCommunicator &comm) {
      ExecutorOptions options;
      options.communicator = &comm;
      options.overlapCollectives = overlap;
      comm.deferred = overlap;
      auto executor =
          CpuExecutor::create(*plan, static_cast<uint32_t>(rank), 1, options);
      ASSERT_TRUE(executor.ok()) << executor.status();
      auto results = executor->run("f", {});
      errors[rank] =
          results.ok() ? "" : std::string(results.status().message());
    });
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1],
              overlap ? "function 'f', instruction 1 (Copy): the transfer of "
                        "instruction 0 (Recv): received 6 elements from rank "
                        "0 (tag 0) but expected 4"
                      : "function 'f', instruction 0 (Recv): received 6 "
                        "elements from rank 0 (tag 0) but expected 4");
  }
}

TEST(ThreadCommunicator, PaddedPiecesGatherCutAndScatterPadded) {
  // A dimension of 3 over a group of 2: pieces of 2, the last one padded
  // (ZeRO's split of a dimension dp does not divide).
  auto plan = loadPlanFromBytes(tests::buildCollectivesPlan(), "c.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  tests::runRanks(plan->root(), [&](int64_t rank,
                                    tests::ThreadCommunicator &comm) {
    uint32_t group = 0;
    ASSERT_EQ(comm.groupSize(group), 2);
    int64_t member = comm.groupMember(group);
    EXPECT_EQ(paddedPiece(3, 2), 2);
    // The pieces [0, 1] and [2, padding] gather to [0, 1, 2].
    std::vector<float> piece = {member * 2.0f, member == 0 ? 1.0f : -7.0f};
    std::vector<float> gathered(3, -1.0f);
    TensorCollective gather{CollectiveKind::AllGather,
                            group,
                            piece.data(),
                            {2},
                            gathered.data(),
                            {3},
                            0,
                            0};
    ASSERT_TRUE(runCollective(comm, gather).ok()) << "rank " << rank;
    EXPECT_EQ(gathered, (std::vector<float>{0, 1, 2})) << "rank " << rank;
    // [2, 3] reduce-scattered along dimension 1: member 0 keeps columns 0
    // and 1 of the sum, member 1 column 2 and a zero.
    std::vector<float> x = {1, 2, 3, 4, 5, 6};
    std::vector<float> sum(4, -1.0f);
    TensorCollective scatter{CollectiveKind::ReduceScatter,
                             group,
                             x.data(),
                             {2, 3},
                             sum.data(),
                             {2, 2},
                             1,
                             0};
    ASSERT_TRUE(runCollective(comm, scatter).ok()) << "rank " << rank;
    std::vector<float> expected = member == 0 ? std::vector<float>{2, 4, 8, 10}
                                              : std::vector<float>{6, 0, 12, 0};
    EXPECT_EQ(sum, expected) << "rank " << rank;
    // Shapes that no padding explains are refused.
    TensorCollective wrong = gather;
    wrong.outShape = {5};
    EXPECT_FALSE(resultShape(wrong, 2).ok());
  });
}

/// Forwards to another communicator, counting the collectives it starts.
class CountingCommunicator : public Communicator {
public:
  explicit CountingCommunicator(Communicator &inner) : inner(inner) {}
  int64_t worldRank() const override { return inner.worldRank(); }
  int64_t worldSize() const override { return inner.worldSize(); }
  uint32_t groupCount() const override { return inner.groupCount(); }
  int64_t groupSize(uint32_t g) const override { return inner.groupSize(g); }
  int64_t groupMember(uint32_t g) const override {
    return inner.groupMember(g);
  }
  absl::Status allReduceSum(uint32_t g, const float *in, float *out,
                            int64_t count) override {
    ++calls;
    return inner.allReduceSum(g, in, out, count);
  }
  absl::Status allGather(uint32_t g, const float *in, float *out,
                         int64_t count) override {
    ++calls;
    return inner.allGather(g, in, out, count);
  }
  absl::Status reduceScatter(uint32_t g, const float *in, float *out,
                             int64_t count) override {
    ++calls;
    return inner.reduceScatter(g, in, out, count);
  }
  absl::Status allToAll(uint32_t g, const float *in, float *out,
                        int64_t count) override {
    ++calls;
    return inner.allToAll(g, in, out, count);
  }
  absl::Status send(const float *data, int64_t count, int64_t peer,
                    int64_t tag) override {
    return inner.send(data, count, peer, tag);
  }
  absl::Status recv(float *data, int64_t count, int64_t peer,
                    int64_t tag) override {
    return inner.recv(data, count, peer, tag);
  }
  absl::Status barrier() override { return inner.barrier(); }
  absl::Status agree(const absl::Status &local) override {
    return inner.agree(local);
  }
  absl::StatusOr<int64_t> worldMinimum(int64_t local) override {
    return inner.worldMinimum(local);
  }
  absl::StatusOr<double> worldSum(double local) override {
    return inner.worldSum(local);
  }
  int calls = 0;

private:
  Communicator &inner;
};

TEST(ThreadCommunicator, ABucketMovesInOneCollective) {
  // Three tensors of a group of 2, along different dimensions, one of them
  // padded: the bucket gives what each collective gives alone, in one call
  // of the backend.
  auto plan = loadPlanFromBytes(tests::buildCollectivesPlan(), "c.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  tests::runRanks(
      plan->root(), [&](int64_t rank, tests::ThreadCommunicator &comm) {
        uint32_t group = 0;
        ASSERT_EQ(comm.groupSize(group), 2);
        float base = 100.0f * static_cast<float>(comm.groupMember(group) + 1);
        auto iota = [&](int64_t n) {
          std::vector<float> v(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i)
            v[i] = base + static_cast<float>(i);
          return v;
        };
        // x shapes [4, 3] along 0, [2, 5] along 1 (padded to 6), [3] along 0
        // (padded to 4).
        std::vector<TensorShape> xs = {{4, 3}, {2, 5}, {3}};
        std::vector<int64_t> dims = {0, 1, 0};
        std::vector<TensorShape> pieces = {{2, 3}, {2, 3}, {2}};
        std::vector<std::vector<float>> x, alone, bucketed;
        for (const TensorShape &shape : xs)
          x.push_back(iota(shape.size() == 1 ? shape[0] : shape[0] * shape[1]));
        CountingCommunicator counting(comm);
        auto collectives = [&](CollectiveKind kind,
                               std::vector<std::vector<float>> &out) {
          std::vector<TensorCollective> bucket;
          out.clear();
          for (size_t t = 0; t < xs.size(); ++t) {
            bool scatter = kind == CollectiveKind::ReduceScatter;
            TensorShape from = scatter ? xs[t] : pieces[t];
            TensorShape to = scatter ? pieces[t] : xs[t];
            int64_t n = 1;
            for (int64_t size : to)
              n *= size;
            out.emplace_back(static_cast<size_t>(n), -1.0f);
            const float *input = scatter ? x[t].data() : x[t].data();
            bucket.push_back(
                {kind, group, input, from, out.back().data(), to, dims[t], 0});
          }
          return bucket;
        };
        for (CollectiveKind kind :
             {CollectiveKind::ReduceScatter, CollectiveKind::AllGather}) {
          std::vector<TensorCollective> one = collectives(kind, alone);
          for (const TensorCollective &c : one)
            ASSERT_TRUE(runCollective(comm, c).ok()) << "rank " << rank;
          std::vector<TensorCollective> many = collectives(kind, bucketed);
          counting.calls = 0;
          ASSERT_TRUE(runBucket(counting, many).ok()) << "rank " << rank;
          EXPECT_EQ(counting.calls, 1) << "rank " << rank;
          EXPECT_EQ(bucketed, alone) << "rank " << rank;
        }
        // Collectives of different kinds are no bucket.
        std::vector<TensorCollective> mixed =
            collectives(CollectiveKind::AllGather, bucketed);
        mixed[1].kind = CollectiveKind::ReduceScatter;
        EXPECT_FALSE(runBucket(counting, mixed).ok());
      });
}

TEST(ThreadCommunicator, RankZeroGathersStringsAndFindsSharedDevices) {
  auto plan = loadPlanFromBytes(tests::buildCollectivesPlan(), "c.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::vector<std::string>> gathered(4);
  tests::runRanks(plan->root(), [&](int64_t rank,
                                    tests::ThreadCommunicator &comm) {
    // Ranks 1 and 3 name the same GPU.
    std::string mine = "0000:" + std::to_string(rank % 2 == 1 ? 1 : rank) +
                       "A:00.0 on host node-" + std::string(200, 'x');
    absl::StatusOr<std::vector<std::string>> all = gatherStrings(comm, mine, 0);
    ASSERT_TRUE(all.ok()) << all.status();
    gathered[rank] = *all;
  });
  ASSERT_EQ(gathered[0].size(), 4u);
  EXPECT_TRUE(gathered[1].empty());
  EXPECT_EQ(gathered[0][2].substr(0, 12), "0000:2A:00.0");
  absl::Status shared = checkOneDevicePerRank(gathered[0]);
  EXPECT_EQ(shared.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.message().find("ranks 1 and 3 share the GPU 0000:1A:00.0"),
            std::string::npos)
      << shared;
  EXPECT_NE(shared.message().find("--comm mpi"), std::string::npos);
  EXPECT_TRUE(checkOneDevicePerRank({"a", "b", "c"}).ok());
  // A string over the limit is refused before anything is sent.
  LocalCommunicator alone;
  EXPECT_EQ(gatherStrings(alone, std::string(kMaxGatheredChars + 1, 'y'), 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ThreadCommunicator, GroupsOfA2x2Mesh) {
  auto plan = loadPlanFromBytes(tests::buildCollectivesPlan(), "c.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  tests::runRanks(plan->root(), [&](int64_t rank,
                                    tests::ThreadCommunicator &comm) {
    for (int64_t group = 0; group < 4; ++group) {
      std::vector<int64_t> members = tests::checkedMembers(group, rank);
      EXPECT_EQ(comm.groupSize(group), static_cast<int64_t>(members.size()));
      EXPECT_EQ(members[comm.groupMember(group)], rank) << "group " << group;
    }
  });
}

void runCollectivesOnThreads(bool overlap) {
  auto plan = loadPlanFromBytes(tests::buildCollectivesPlan(), "c.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<std::string> errors(4);
  tests::runRanks(plan->root(),
                  [&](int64_t rank, tests::ThreadCommunicator &comm) {
                    ExecutorOptions options;
                    options.communicator = &comm;
                    options.overlapCollectives = overlap;
                    comm.deferred = overlap;
                    auto executor = CpuExecutor::create(*plan, 0, 1, options);
                    if (!executor.ok()) {
                      errors[rank] = std::string(executor.status().message());
                      return; // every rank fails alike
                    }
                    EXPECT_EQ(executor->worldRank(), rank);
                    errors[rank] = tests::checkCollectives(*executor, rank);
                    EXPECT_EQ(comm.collectives, 12);
                  });
  for (const std::string &error : errors)
    EXPECT_EQ(error, "");
}

TEST(ExecutorCollectives, EveryCollectiveOnA2x2Mesh) {
  runCollectivesOnThreads(/*overlap=*/false);
}

TEST(ExecutorCollectives, EveryCollectiveOverlapped) {
  runCollectivesOnThreads(/*overlap=*/true);
}

// Collectives that complete only when waited for: the executor waits at
// the first instruction that reads a collective's output or writes its
// input (or a value on the same bytes), and before the function returns.
TEST(ExecutorCollectives, OverlapWaitsWhereTheBuffersAreUsed) {
  tests::PlanBuilder b;
  b.mesh = {{"dp", 2}};
  b.groups = {{"dp"}};
  uint32_t x = b.value(DType::F32, {4}), sum = b.value(DType::F32, {4}),
           scaled = b.value(DType::F32, {4}),
           gathered = b.value(DType::F32, {8}),
           unread = b.value(DType::F32, {4}), copy = b.value(DType::F32, {4});
  b.function("f", {x});
  b.instr(OpCode::AllReduce, {x}, {sum}, {0});
  b.instr(OpCode::AllGather, {x}, {gathered}, {0, 0});
  b.instr(OpCode::Copy, {x}, {copy});         // reads x: no wait
  b.instr(OpCode::Fill, {}, {x}, {}, {-1.0}); // writes x: waits for both
  b.instr(OpCode::Scale, {sum}, {scaled}, {}, {2.0}); // reads sum
  b.instr(OpCode::AllReduce, {x}, {unread}, {0});     // completes at the end
  b.results({scaled, gathered, unread, copy}, {});
  auto plan = loadPlanFromBytes(b.build(), "overlap.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (bool overlap : {false, true}) {
    std::vector<std::vector<HostTensor>> results(2);
    std::vector<std::vector<InstructionTime>> times(2);
    tests::runRanks(plan->root(),
                    [&](int64_t rank, tests::ThreadCommunicator &comm) {
                      comm.deferred = true;
                      ExecutorOptions options;
                      options.communicator = &comm;
                      options.overlapCollectives = overlap;
                      auto executor = CpuExecutor::create(*plan, 0, 1, options);
                      ASSERT_TRUE(executor.ok()) << executor.status();
                      HostTensor input;
                      input.shape = {4};
                      input.floats = {1.0f + rank, 2, 3, 4};
                      auto out = executor->run("f", {input}, 0, &times[rank]);
                      ASSERT_TRUE(out.ok()) << out.status();
                      results[rank] = *out;
                    });
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(results[rank].size(), 4u);
      EXPECT_EQ(results[rank][0].floats, (std::vector<float>{6, 8, 12, 16}));
      EXPECT_EQ(results[rank][1].floats,
                (std::vector<float>{1, 2, 3, 4, 2, 2, 3, 4}));
      EXPECT_EQ(results[rank][2].floats, (std::vector<float>(4, -2.0f)));
      EXPECT_EQ(results[rank][3].floats,
                (std::vector<float>{1.0f + rank, 2, 3, 4}));
      // Six instructions, and with overlap three waits.
      int waits = 0;
      for (const InstructionTime &time : times[rank])
        waits += time.wait;
      EXPECT_EQ(times[rank].size(), overlap ? 9u : 6u);
      EXPECT_EQ(waits, overlap ? 3 : 0);
    }
  }
}

TEST(ExecutorCollectives, WithoutACommunicatorOnlyGroupsOfOne) {
  auto plan = loadPlanFromBytes(tests::buildCollectivesPlan(), "c.plan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto executor = CpuExecutor::create(*plan, 0, 1);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().message(),
            "function 'collectives', instruction 0 (AllReduce) runs over "
            "group 0 of 2 ranks, but this executor has no communicator (run "
            "the plan's 4 ranks under mpirun)");

  // A communicator for another mesh is refused.
  tests::ThreadWorld world(1);
  tests::PlanBuilder single;
  single.groups = {{"dp"}};
  uint32_t x = single.value(DType::F32, {2, 3}),
           y = single.value(DType::F32, {2, 3});
  single.instr(OpCode::AllGather, {x}, {y}, {0, 1});
  auto one = loadPlanFromBytes(single.build({x}, {y}), "one.plan");
  ASSERT_TRUE(one.ok()) << one.status();
  tests::ThreadCommunicator wrong(one->root(), 0, world);
  ExecutorOptions options;
  options.communicator = &wrong;
  auto mismatched = CpuExecutor::create(*plan, 0, 1, options);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("is not one for this plan"),
            std::string::npos)
      << mismatched.status();

  // On one rank every group has one member: collectives are copies.
  auto local = CpuExecutor::create(*one, 0, 1);
  ASSERT_TRUE(local.ok()) << local.status();
  HostTensor input;
  input.shape = {2, 3};
  input.floats = iota(6);
  auto results = local->run("f", {input});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].floats, input.floats);
}

} // namespace
