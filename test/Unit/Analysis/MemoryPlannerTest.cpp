//===- MemoryPlannerTest.cpp - the arena memory planner -------------------===//
//
// Buffers live at the same time never share bytes, dead buffers' bytes are
// reused, outputs never overlap the inputs of their instruction, and the
// plan is deterministic.
//
//===----------------------------------------------------------------------===//

#include "triad/Analysis/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <random>

using namespace triad;

namespace {

void expectNoConflicts(const std::vector<BufferLifetime> &buffers,
                       const MemoryPlan &plan, int64_t alignment) {
  ASSERT_EQ(plan.offsets.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % alignment, 0);
    EXPECT_LE(plan.offsets[i] + buffers[i].bytes, plan.arenaBytes);
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      bool liveTogether = buffers[i].first <= buffers[j].last &&
                          buffers[j].first <= buffers[i].last;
      bool shareBytes = plan.offsets[i] < plan.offsets[j] + buffers[j].bytes &&
                        plan.offsets[j] < plan.offsets[i] + buffers[i].bytes;
      EXPECT_FALSE(liveTogether && shareBytes)
          << "buffers " << i << " and " << j << " overlap";
    }
  }
  EXPECT_GE(plan.arenaBytes, plan.peakLiveBytes);
}

TEST(MemoryPlanner, ChainReusesTwoBuffers) {
  // x0 -> x1 -> x2 -> ... each read once by the next instruction.
  std::vector<BufferLifetime> chain;
  for (int64_t i = 0; i < 10; ++i)
    chain.push_back({1000, i, i + 1});
  MemoryPlan plan = planMemory(chain, 64);
  expectNoConflicts(chain, plan, 64);
  EXPECT_EQ(plan.arenaBytes, 2 * 1024);
  EXPECT_EQ(plan.peakLiveBytes, 2 * 1024);
}

TEST(MemoryPlanner, OutputsNeverOverlapInputsOfTheirInstruction) {
  // a dies at instruction 1, where b is produced: b may not take a's bytes.
  std::vector<BufferLifetime> buffers = {{256, 0, 1}, {256, 1, 2}};
  MemoryPlan plan = planMemory(buffers, 64);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
  // c starts after a died: it reuses a's bytes.
  buffers.push_back({256, 2, 3});
  plan = planMemory(buffers, 64);
  EXPECT_EQ(plan.offsets[2], plan.offsets[0]);
  EXPECT_EQ(plan.arenaBytes, 512);
}

TEST(MemoryPlanner, FreeNeighboursMerge) {
  // Two small dead neighbours hold one larger buffer later.
  std::vector<BufferLifetime> buffers = {
      {64, 0, 1}, {64, 0, 1}, {64, 0, 5}, {128, 2, 3}};
  MemoryPlan plan = planMemory(buffers, 64);
  expectNoConflicts(buffers, plan, 64);
  EXPECT_EQ(plan.arenaBytes, 192);
}

TEST(MemoryPlanner, RandomLifetimesAreConflictFreeAndDeterministic) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferLifetime> buffers;
    int count = 1 + static_cast<int>(random() % 60);
    for (int i = 0; i < count; ++i) {
      int64_t first = static_cast<int64_t>(random() % 40);
      int64_t last = first + static_cast<int64_t>(random() % 10);
      buffers.push_back(
          {1 + static_cast<int64_t>(random() % 5000), first, last});
    }
    MemoryPlan plan = planMemory(buffers, 64);
    expectNoConflicts(buffers, plan, 64);
    MemoryPlan again = planMemory(buffers, 64);
    EXPECT_EQ(plan.offsets, again.offsets);
    int64_t total = 0;
    for (const BufferLifetime &b : buffers)
      total += (b.bytes + 63) / 64 * 64;
    EXPECT_LE(plan.arenaBytes, total);
  }
}

TEST(MemoryPlanner, EmptyBuffersTakeNoBytes) {
  // A zero-byte buffer between two others must not lose a free block.
  std::vector<BufferLifetime> buffers = {
      {128, 0, 0}, {128, 0, 5}, {0, 1, 1}, {128, 2, 2}};
  MemoryPlan plan = planMemory(buffers, 64);
  expectNoConflicts(buffers, plan, 64);
  EXPECT_EQ(plan.arenaBytes, 256);
}

TEST(MemoryPlanner, LargestFirstLeavesNoGapWherePlacingInTimeWould) {
  // a and b live together, then c (twice their size) with b. Placed in
  // time, c cannot take a's bytes (b sits above them) and the arena grows
  // to a + b + c; placed largest first, c takes the bottom, a its free
  // bytes before c is born, and b goes above c: the peak of live bytes.
  std::vector<BufferLifetime> buffers = {
      {6400, 0, 1}, {6400, 1, 3}, {12800, 2, 3}};
  MemoryPlan plan = planMemory(buffers, 64);
  expectNoConflicts(buffers, plan, 64);
  EXPECT_EQ(plan.peakLiveBytes, 19200);
  EXPECT_EQ(plan.arenaBytes, 19200);
}

TEST(MemoryPlanner, NeverWorseThanPlacingInTime) {
  // Random lifetimes: the arena is at most what best fit in time order
  // gives (the smaller of the two placements is kept), and near the peak.
  std::mt19937_64 random(11);
  int64_t arenas = 0, peaks = 0;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferLifetime> buffers;
    for (int i = 0; i < 80; ++i) {
      int64_t first = static_cast<int64_t>(random() % 60);
      buffers.push_back({64 * (1 + static_cast<int64_t>(random() % 100)), first,
                         first + static_cast<int64_t>(random() % 8)});
    }
    MemoryPlan plan = planMemory(buffers, 64);
    expectNoConflicts(buffers, plan, 64);
    arenas += plan.arenaBytes;
    peaks += plan.peakLiveBytes;
  }
  // Within 15% of the peak of live bytes over all the trials.
  EXPECT_LE(arenas, peaks + peaks * 15 / 100);
}

TEST(MemoryPlanner, EmptyInput) {
  MemoryPlan plan = planMemory({}, 64);
  EXPECT_EQ(plan.arenaBytes, 0);
  EXPECT_TRUE(plan.offsets.empty());
}

} // namespace
