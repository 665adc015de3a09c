//===- ContentCacheTest.cpp - the device tables' cache, without a GPU -----===//
//
// ContentCache (runtime/kernels/cuda/ContentCache.h) with host buffers: the
// same content gives the same copy, made once; other content a copy of its
// own; past the capacity the cache starts over after its caller's wait,
// unless told to keep every copy; a failure to make a copy is returned and
// caches nothing.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/ContentCache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace triad::rt::cuda {
namespace {

using Copy = std::vector<char>;

TEST(ContentCache, SameContentSameCopyMadeOnce) {
  ContentCache<Copy> cache(1024);
  int made = 0, waits = 0;
  auto make = [&](const void *data, size_t size) -> absl::StatusOr<Copy> {
    ++made;
    const char *bytes = static_cast<const char *>(data);
    return Copy(bytes, bytes + size);
  };
  auto wait = [&]() {
    ++waits;
    return absl::OkStatus();
  };
  std::vector<int> table = {1, 2, 3};
  auto first = cache.get(table.data(), sizeof(int) * 3, make, wait);
  ASSERT_TRUE(first.ok());
  // Another buffer with the same bytes: the same copy.
  std::vector<int> again = table;
  auto second = cache.get(again.data(), sizeof(int) * 3, make, wait);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(cache.hitCount(), 1u);
  // Other content: a copy of its own, with its bytes.
  std::vector<int> other = {1, 2, 4};
  auto third = cache.get(other.data(), sizeof(int) * 3, make, wait);
  ASSERT_TRUE(third.ok());
  EXPECT_NE(*third, *first);
  EXPECT_EQ(std::memcmp((*third)->data(), other.data(), sizeof(int) * 3), 0);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytesHeld(), 24u);
  EXPECT_EQ(waits, 0);
}

/// A cache of 16 bytes, for copies of 12 (two do not fit), counting its
/// caller's waits before it starts over.
struct SmallCache {
  ContentCache<Copy> cache{16};
  int waits = 0;
  char a[12] = "aaaaaaaaaaa", b[12] = "bbbbbbbbbbb";

  absl::StatusOr<const Copy *> get(const char *table) {
    auto make = [](const void *data, size_t size) -> absl::StatusOr<Copy> {
      const char *bytes = static_cast<const char *>(data);
      return Copy(bytes, bytes + size);
    };
    return cache.get(table, 12, make, [&] {
      ++waits;
      return absl::OkStatus();
    });
  }
};

TEST(ContentCache, StartsOverPastItsCapacityAfterTheWait) {
  SmallCache small;
  ASSERT_TRUE(small.get(small.a).ok());
  ASSERT_TRUE(small.get(small.b).ok());
  EXPECT_EQ(small.waits, 1);
  EXPECT_EQ(small.cache.size(), 1u);
  EXPECT_EQ(small.cache.bytesHeld(), 12u);
  // A failing wait leaves the copies in place and says why.
  auto make = [](const void *, size_t) -> absl::StatusOr<Copy> {
    return Copy();
  };
  auto failing = [] { return absl::InternalError("the stream failed"); };
  auto refused = small.cache.get(small.a, 12, make, failing);
  EXPECT_EQ(refused.status().message(), "the stream failed");
  EXPECT_EQ(small.cache.size(), 1u);
}

TEST(ContentCache, KeepsEveryCopyOnceToldTo) {
  // Recorded calls (CUDA graphs) hold the copies' addresses for good.
  SmallCache small;
  auto first = small.get(small.a);
  ASSERT_TRUE(first.ok());
  small.cache.keepAll();
  ASSERT_TRUE(small.get(small.b).ok());
  EXPECT_EQ(small.waits, 0);
  EXPECT_EQ(small.cache.size(), 2u);
  EXPECT_EQ(small.cache.bytesHeld(), 24u);
  auto again = small.get(small.a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first) << "the same copy, still there";
}

TEST(ContentCache, AFailedCopyIsReturnedAndNotCached) {
  ContentCache<Copy> cache(1024);
  auto fail = [](const void *, size_t) -> absl::StatusOr<Copy> {
    return absl::ResourceExhaustedError("out of device memory");
  };
  auto wait = [] { return absl::OkStatus(); };
  int x = 7;
  auto got = cache.get(&x, sizeof(x), fail, wait);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytesHeld(), 0u);
}

} // namespace
} // namespace triad::rt::cuda
