// The host caching allocator: statistics, reuse of large blocks, empty_cache, alignment.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(Allocator, SmallAllocationsAreCountedExactly) {
  const MemoryStats before = memory_stats();
  {
    Tensor t = empty({100}, DType::Float32);
    const MemoryStats during = memory_stats();
    EXPECT_EQ(during.allocated - before.allocated, 400);
    EXPECT_EQ(during.num_allocs - before.num_allocs, 1);
    EXPECT_GE(during.peak_allocated, during.allocated);
  }
  EXPECT_EQ(memory_stats().allocated, before.allocated);
}

TEST(Allocator, CurrentAndPeak) {
  empty_cache();
  reset_peak_memory_stats();
  const MemoryStats base = memory_stats();
  EXPECT_EQ(base.peak_allocated, base.allocated);
  {
    Tensor a = empty({4 * kMiB / 4}, DType::Float32);  // 4 MiB
    Tensor b = empty({4 * kMiB / 4}, DType::Float32);
    const MemoryStats s = memory_stats();
    EXPECT_GE(s.allocated - base.allocated, 8 * kMiB);
    EXPECT_EQ(s.peak_allocated, s.allocated);
  }
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.allocated, base.allocated);
  EXPECT_GE(after.peak_allocated - base.allocated, 8 * kMiB);  // the peak remembers
  reset_peak_memory_stats();
  EXPECT_EQ(memory_stats().peak_allocated, memory_stats().allocated);
}

TEST(Allocator, RepeatedLargeAllocationsHitTheCache) {
  empty_cache();
  const MemoryStats s0 = memory_stats();
  EXPECT_EQ(s0.cached, 0);
  void* first;
  {
    Tensor t = empty({3 * kMiB}, DType::Float32);  // 12 MiB
    first = t.data_ptr();
  }
  const MemoryStats s1 = memory_stats();
  EXPECT_GE(s1.cached, 12 * kMiB) << "a freed large block is kept";
  for (int i = 0; i < 5; ++i) {
    Tensor t = empty({3 * kMiB}, DType::Float32);
    EXPECT_EQ(t.data_ptr(), first) << "the same block is reused";
    EXPECT_LT(memory_stats().cached, s1.cached);
  }
  const MemoryStats s2 = memory_stats();
  EXPECT_EQ(s2.num_cache_hits - s1.num_cache_hits, 5);
  EXPECT_EQ(s2.num_allocs - s1.num_allocs, 5);
  EXPECT_EQ(s2.cached, s1.cached);
  // A much smaller large request does not take (and pin) the big block.
  {
    Tensor t = empty({kMiB / 2}, DType::Float32);  // 2 MiB
    EXPECT_NE(t.data_ptr(), first);
  }
  empty_cache();
  EXPECT_EQ(memory_stats().cached, 0) << "empty_cache returns every cached block";
  const int64_t hits = memory_stats().num_cache_hits;
  { Tensor t = empty({3 * kMiB}, DType::Float32); }
  EXPECT_EQ(memory_stats().num_cache_hits, hits) << "nothing cached to hit after empty_cache";
  empty_cache();
}

TEST(Allocator, CachedMemoryStaysUsable) {
  empty_cache();  // so that the block freed below is the only candidate for reuse
  // Values written through a reused block are the tensor's own (no stale aliasing).
  Tensor a = full({kMiB}, 1.0f);
  void* p = a.data_ptr();
  a = Tensor();
  Tensor b = full({kMiB}, 2.0f);
  EXPECT_EQ(b.data_ptr(), p);
  EXPECT_EQ(b.to_vector<float>().front(), 2.0f);
  EXPECT_EQ(b.to_vector<float>().back(), 2.0f);
}

TEST(Allocator, SixtyFourByteAlignment) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{17}, int64_t{1000}, kMiB / 8,
                    kMiB + 5, 5 * kMiB}) {
    for (DType d : {DType::Bool, DType::Int32, DType::Float64}) {
      Tensor t = empty({n}, d);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << n << " " << d;
    }
  }
}

TEST(Allocator, ExhaustionThrowsInsteadOfCrashing) {
  const MemoryStats before = memory_stats();
  // 2^50 bytes: more than any address space gives.
  EXPECT_THROW(empty({int64_t{1} << 48}, DType::Float32), Error);
  EXPECT_THROW(zeros({int64_t{1} << 48}, DType::Float32), Error);
  // A byte count that overflows 64 bits is refused before anything is allocated.
  EXPECT_THROW(empty({int64_t{1} << 61}, DType::Float64), Error);
  EXPECT_THROW(ones({int64_t{1} << 62, 2}, DType::Int32), Error);
  EXPECT_EQ(memory_stats().allocated, before.allocated);
}

TEST(Allocator, ViewsKeepStorageAlive) {
  const MemoryStats before = memory_stats();
  Tensor v;
  {
    Tensor t = arange(1000);
    v = t.slice(0, 10, 20);
  }
  EXPECT_GT(memory_stats().allocated, before.allocated);
  EXPECT_EQ(v.to_vector<int64_t>().front(), 10);
  v = Tensor();
  EXPECT_EQ(memory_stats().allocated, before.allocated);
}

}  // namespace
}  // namespace kiln
