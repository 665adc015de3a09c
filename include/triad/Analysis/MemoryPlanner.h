//===- MemoryPlanner.h - static arena offsets from lifetimes ------*- C++
//-*-===//
//
// Places buffers with known lifetimes in one arena so that buffers live at
// the same time never overlap, reusing the bytes of dead buffers. Lifetimes
// are inclusive ranges of instruction indices; a buffer is placed when its
// lifetime starts (before the buffers that die at that instruction are
// released), so an instruction's outputs never share bytes with its inputs.
// Two placements are made and the smaller arena kept (the first on a tie):
// best fit over the free blocks in order of the lifetimes' starts, ties to
// the lowest offset; and largest first, each buffer in the smallest gap
// between the placed buffers it lives together with (Pisarchyk and Lee's
// greedy by size), which reaches the peak of live bytes where placing in
// time leaves gaps. Deterministic for the same input.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_ANALYSIS_MEMORYPLANNER_H
#define TRIAD_ANALYSIS_MEMORYPLANNER_H

#include <cstdint>
#include <vector>

namespace triad {

struct BufferLifetime {
  int64_t bytes = 0;
  /// First and last instruction index that touches the buffer (inclusive).
  int64_t first = 0, last = 0;
};

struct MemoryPlan {
  /// Offset of each buffer, aligned, in the order given.
  std::vector<int64_t> offsets;
  /// Bytes the arena needs (the high-water mark of the placement).
  int64_t arenaBytes = 0;
  /// Most bytes live at one instruction (a lower bound on arenaBytes).
  int64_t peakLiveBytes = 0;
};

/// Plans `buffers`; every size is rounded up to `alignment` bytes.
MemoryPlan planMemory(const std::vector<BufferLifetime> &buffers,
                      int64_t alignment);

} // namespace triad

#endif // TRIAD_ANALYSIS_MEMORYPLANNER_H
