//===- MemoryPlanner.cpp - static arena offsets from lifetimes ------------===//

#include "triad/Analysis/MemoryPlanner.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>

namespace triad {

MemoryPlan planMemory(const std::vector<BufferLifetime> &buffers,
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

} // namespace triad
