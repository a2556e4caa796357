// Host memory for tensor storage: 64-byte aligned blocks, with a cache that reuses large
// blocks instead of returning them to the OS (a fresh mapping costs a page fault per 4 KiB,
// which made large pointwise work 4-5x slower on this class of machine), and huge pages
// requested for them. The cache is bounded (docs/memory-and-threads.md): it holds at most
// alloc_cache_limit() bytes, splits a larger cached block rather than mapping new memory,
// and releases cached blocks before it maps more than the peak live bytes justify.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// Counters of the host allocator, in bytes.
struct MemoryStats {
  int64_t allocated = 0;       // bytes held by live tensors now (large blocks: whole blocks)
  int64_t peak_allocated = 0;  // the most `allocated` has been since start or reset_peak
  int64_t cached = 0;          // bytes kept for reuse, not held by any tensor
  int64_t num_allocs = 0;      // allocations served
  int64_t num_cache_hits = 0;  // of which were served from the cache
  int64_t requested = 0;       // bytes live tensors asked for (<= allocated)
  int64_t peak_requested = 0;  // the most `requested` has been since start or reset_peak
  int64_t reserved = 0;        // allocated + cached: what the allocator holds from the OS
  int64_t peak_reserved = 0;   // the most `reserved` has been since start or reset_peak
  int64_t cache_limit = 0;     // alloc_cache_limit() now
  int64_t num_releases = 0;    // cached blocks returned to the OS (limit, budget, empty_cache)
};

MemoryStats memory_stats();
// Resets the peaks (allocated, requested, reserved) to the current figures.
void reset_peak_memory_stats();
// Returns every cached block to the operating system.
void empty_cache();

// The most bytes the cache keeps for reuse. Default kDefaultAllocCacheLimit, or the
// environment variable KILN_ALLOC_CACHE_LIMIT read at start-up (bytes, with an optional
// K/M/G suffix for KiB/MiB/GiB: "256M", "0" turns caching of large blocks off; an invalid
// value is reported on stderr and the default kept). Setting it releases cached blocks
// beyond the new limit at once; a negative value throws ValueError.
inline constexpr int64_t kDefaultAllocCacheLimit = int64_t{512} << 20;
void set_alloc_cache_limit(int64_t bytes);
int64_t alloc_cache_limit();

// Blocks of at least this many bytes go through the block cache (mmap'd, huge pages where the
// block is large enough); smaller ones come in power-of-two classes recycled per thread. Not
// malloc: glibc gives the top of its heap back to the OS and grows it again, so a training
// step whose mid-size tensors (64 KiB .. 1 MiB: optimizer state, gradients) die and are
// re-made every step paid ~300 page faults a step (W7).
inline constexpr size_t kLargeBlockBytes = size_t{64} << 10;

namespace detail {
// Allocates at least `nbytes` (64-byte aligned); throws kiln::Error when memory is exhausted.
void* host_alloc(size_t nbytes);
void host_free(void* ptr, size_t nbytes);
// Parses a KILN_ALLOC_CACHE_LIMIT value ("1073741824", "512M", "2G", "64k"); throws
// ValueError naming the variable, the value and what was expected.
int64_t parse_alloc_cache_limit(const char* text);
}  // namespace detail

}  // namespace kiln
