//===- MemoryPlanner.cpp - static arena offsets from lifetimes ------------===//

#include "triad/Analysis/MemoryPlanner.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>

namespace triad {

namespace {

bool liveTogether(const BufferLifetime &a, const BufferLifetime &b) {
  return a.first <= b.last && b.first <= a.last;
}

/// Online best fit: buffers placed in the order their lifetimes start,
/// each in the smallest free block that holds it.
MemoryPlan bestFitInTime(const std::vector<BufferLifetime> &buffers,
                         int64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  auto rounded = [&](int64_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  };

  // Buffers by start, and by end for their release.
  std::vector<size_t> byStart(buffers.size()), byEnd(buffers.size());
  std::iota(byStart.begin(), byStart.end(), 0);
  std::iota(byEnd.begin(), byEnd.end(), 0);
  std::stable_sort(byStart.begin(), byStart.end(), [&](size_t a, size_t b) {
    return buffers[a].first < buffers[b].first;
  });
  std::stable_sort(byEnd.begin(), byEnd.end(), [&](size_t a, size_t b) {
    return buffers[a].last < buffers[b].last;
  });

  // Free blocks of the arena below the high-water mark: offset -> size.
  std::map<int64_t, int64_t> free;
  int64_t top = 0, live = 0;
  auto release = [&](size_t index) {
    int64_t offset = plan.offsets[index], size = rounded(buffers[index].bytes);
    live -= size;
    auto next = free.lower_bound(offset);
    // Merge with the neighbours, and give the top back.
    if (next != free.end() && offset + size == next->first) {
      size += next->second;
      next = free.erase(next);
    }
    if (next != free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        free.erase(prev);
      }
    }
    if (offset + size == top)
      top = offset;
    else
      free[offset] = size;
  };
  auto place = [&](size_t index) {
    int64_t size = rounded(buffers[index].bytes);
    if (size == 0) {
      // Takes no bytes: any offset will do, and nothing to release.
      plan.offsets[index] = 0;
      return;
    }
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it)
      if (it->second >= size &&
          (best == free.end() || it->second < best->second))
        best = it;
    if (best != free.end()) {
      plan.offsets[index] = best->first;
      if (best->second > size)
        free[best->first + size] = best->second - size;
      free.erase(best);
    } else {
      // Grow the arena, starting inside a free block that ends at the top.
      int64_t offset = top;
      if (!free.empty()) {
        auto last = std::prev(free.end());
        if (last->first + last->second == top) {
          offset = last->first;
          free.erase(last);
        }
      }
      plan.offsets[index] = offset;
      top = offset + size;
    }
    live += size;
    plan.arenaBytes = std::max(plan.arenaBytes, top);
    plan.peakLiveBytes = std::max(plan.peakLiveBytes, live);
  };

  size_t nextStart = 0, nextEnd = 0;
  while (nextStart < byStart.size()) {
    int64_t now = buffers[byStart[nextStart]].first;
    // Release what died before `now`, then place what starts at `now`.
    while (nextEnd < byEnd.size() && buffers[byEnd[nextEnd]].last < now) {
      if (plan.offsets[byEnd[nextEnd]] >= 0 &&
          rounded(buffers[byEnd[nextEnd]].bytes) > 0)
        release(byEnd[nextEnd]);
      ++nextEnd;
    }
    while (nextStart < byStart.size() &&
           buffers[byStart[nextStart]].first == now)
      place(byStart[nextStart++]);
  }
  return plan;
}

/// Offline, largest first: each buffer takes the lowest offset of the
/// smallest gap between the placed buffers it lives together with, as in
/// Pisarchyk and Lee's greedy by size. Large activations placed first pack
/// around each other; the small ones fill the gaps.
std::vector<int64_t> largestFirst(const std::vector<BufferLifetime> &buffers,
                                  int64_t alignment) {
  auto rounded = [&](int64_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  };
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes)
      return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  std::vector<int64_t> offsets(buffers.size(), 0);
  // Placed buffers by offset.
  std::vector<size_t> placed;
  for (size_t index : order) {
    int64_t size = rounded(buffers[index].bytes);
    if (size == 0)
      continue;
    int64_t reached = 0, best = -1, bestGap = 0;
    for (size_t other : placed) {
      if (!liveTogether(buffers[index], buffers[other]))
        continue;
      int64_t gap = offsets[other] - reached;
      if (gap >= size && (best < 0 || gap < bestGap)) {
        best = reached;
        bestGap = gap;
      }
      reached =
          std::max(reached, offsets[other] + rounded(buffers[other].bytes));
    }
    offsets[index] = best >= 0 ? best : reached;
    placed.insert(std::upper_bound(placed.begin(), placed.end(), index,
                                   [&](size_t a, size_t b) {
                                     return offsets[a] < offsets[b];
                                   }),
                  index);
  }
  return offsets;
}

} // namespace

MemoryPlan planMemory(const std::vector<BufferLifetime> &buffers,
                      int64_t alignment) {
  // Both placements; the smaller arena wins (the first on a tie).
  MemoryPlan plan = bestFitInTime(buffers, alignment);
  std::vector<int64_t> offsets = largestFirst(buffers, alignment);
  int64_t arena = 0;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].bytes > 0)
      arena = std::max(arena, offsets[i] + (buffers[i].bytes + alignment - 1) /
                                               alignment * alignment);
  if (arena < plan.arenaBytes) {
    plan.offsets = std::move(offsets);
    plan.arenaBytes = arena;
  }
  return plan;
}

} // namespace triad
