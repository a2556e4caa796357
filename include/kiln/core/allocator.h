// Host memory for tensor storage: 64-byte aligned blocks, with a cache that reuses large
// blocks instead of returning them to the OS (a fresh mapping costs a page fault per 4 KiB,
// which made large pointwise work 4-5x slower on this class of machine), and huge pages
// requested for them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// Counters of the host allocator, in bytes.
struct MemoryStats {
  int64_t allocated = 0;       // bytes held by live tensors now
  int64_t peak_allocated = 0;  // the most `allocated` has been since start or reset_peak
  int64_t cached = 0;          // bytes kept for reuse, not held by any tensor
  int64_t num_allocs = 0;      // allocations served
  int64_t num_cache_hits = 0;  // of which were served from the cache
};

MemoryStats memory_stats();
// Resets peak_allocated to the current allocated figure.
void reset_peak_memory_stats();
// Returns every cached block to the operating system.
void empty_cache();

// Blocks of at least this many bytes go through the cache (and get huge pages); smaller ones
// are served by malloc, which already recycles them well.
inline constexpr size_t kLargeBlockBytes = size_t{1} << 20;

namespace detail {
// Allocates at least `nbytes` (64-byte aligned); throws kiln::Error when memory is exhausted.
void* host_alloc(size_t nbytes);
void host_free(void* ptr, size_t nbytes);
}  // namespace detail

}  // namespace kiln
