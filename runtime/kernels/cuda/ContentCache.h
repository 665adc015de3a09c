//===- ContentCache.h - device copies of host tables, by content -*- C++
//-*-===//
//
// The multi-tensor kernels (AdamW, the gradient norm) read a small table of
// tensor addresses and chunks. Their addresses are the plan's, fixed for
// the executor's life, so the same tables come back every step: uploading
// each from pageable memory cost a stream synchronization per instruction
// (hundreds per step). The cache keeps one device copy per distinct table
// and hands it out again. No CUDA here: `Buffer` and the function that
// makes one are the caller's, so the policy is tested without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_KERNELS_CUDA_CONTENTCACHE_H
#define TRIAD_RUNTIME_KERNELS_CUDA_CONTENTCACHE_H

#include "absl/status/statusor.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

namespace triad::rt::cuda {

template <typename Buffer> class ContentCache {
public:
  /// At most `capacity` bytes of copies; past it the cache starts over.
  explicit ContentCache(size_t capacity) : capacity(capacity) {}

  /// The copy of `bytes` bytes at `host`: the cached one, or a new one
  /// from `make(host, bytes)` (a `StatusOr<Buffer>`). `beforeClear` runs
  /// before the cache drops its copies for room (the caller waits there
  /// for the work that may still read them).
  template <typename Make, typename BeforeClear>
  absl::StatusOr<const Buffer *> get(const void *host, size_t bytes, Make make,
                                     BeforeClear beforeClear) {
    std::string key(static_cast<const char *>(host), bytes);
    if (auto it = copies.find(key); it != copies.end()) {
      ++hits;
      return &it->second;
    }
    if (held + bytes > capacity && !copies.empty()) {
      if (absl::Status status = beforeClear(); !status.ok())
        return status;
      copies.clear();
      held = 0;
    }
    absl::StatusOr<Buffer> made = make(host, bytes);
    if (!made.ok())
      return made.status();
    held += bytes;
    auto [it, inserted] = copies.emplace(std::move(key), std::move(*made));
    return &it->second;
  }

  /// From now on, keeps every copy: callers hold their addresses for good
  /// (recorded calls), so none is dropped for room.
  void keepAll() { capacity = SIZE_MAX; }

  size_t size() const { return copies.size(); }
  size_t bytesHeld() const { return held; }
  size_t hitCount() const { return hits; }

private:
  size_t capacity;
  size_t held = 0;
  size_t hits = 0;
  std::unordered_map<std::string, Buffer> copies;
};

} // namespace triad::rt::cuda

#endif // TRIAD_RUNTIME_KERNELS_CUDA_CONTENTCACHE_H
