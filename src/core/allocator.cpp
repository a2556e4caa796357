// Host allocator: malloc for small blocks; for large ones a cache of mmap'd blocks keyed by
// size, so that repeated large temporaries reuse memory whose pages are already faulted in.
#include "kiln/core/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Small blocks (<= 64 KiB) come in power-of-two classes and are recycled through a per-thread
// free list: an eager op on a small tensor allocates its output every call, and malloc's
// aligned path (plus its bin consolidation) was the largest cost of W6's 100-op chain.
constexpr int kNumSmallClasses = 11;  // 64 B .. 64 KiB
constexpr size_t kSmallCacheDepth = 64;
int small_class(size_t nbytes) {
  size_t c = 64;
  for (int k = 0; k < kNumSmallClasses; ++k, c <<= 1)
    if (nbytes <= c) return k;
  return -1;
}
size_t small_class_bytes(int cls) { return size_t{64} << cls; }

// Set once a thread's cache is destroyed: storages freed later in that thread's exit (static
// tensors) go straight to free(). A trivially destructible thread_local is always readable.
thread_local bool tls_small_cache_gone = false;
struct SmallCache {
  std::vector<void*> lists[kNumSmallClasses];
  ~SmallCache() {
    tls_small_cache_gone = true;
    for (auto& l : lists)
      for (void* p : l) std::free(p);
  }
};
SmallCache* small_cache() {
  if (tls_small_cache_gone) return nullptr;
  thread_local SmallCache cache;
  return &cache;
}

class HostAllocator {
 public:
  void* allocate(size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    void* p;
    if (nbytes < kLargeBlockBytes) {
      int cls = small_class(nbytes);
      if (cls >= 0) {
        SmallCache* cache = small_cache();
        auto* list = cache ? &cache->lists[cls] : nullptr;
        p = list && !list->empty() ? list->back() : nullptr;
        if (p) {
          list->pop_back();
        } else {
          p = std::aligned_alloc(kAlignment, small_class_bytes(cls));
        }
      } else {
        p = std::aligned_alloc(kAlignment, round_up(nbytes, kAlignment));
      }
      if (!p) throw_oom(nbytes);
      account(static_cast<int64_t>(nbytes));
      return p;
    }
    size_t size = block_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Best fit, allowing at most 25% slack so that a small request does not pin a huge block.
      auto it = cache_.lower_bound(size);
      if (it != cache_.end() && it->first <= size + size / 4) {
        p = it->second;
        cached_ -= static_cast<int64_t>(it->first);
        size = it->first;
        cache_.erase(it);
        sizes_[p] = size;
        stats_hit();
        account(static_cast<int64_t>(size));
        return p;
      }
    }
    p = map_block(size);
    if (!p) {
      empty_cache();  // give cached blocks back and try once more
      p = map_block(size);
      if (!p) throw_oom(nbytes);
    }
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = size;
    account(static_cast<int64_t>(size));
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (!p) return;
    if (nbytes == 0) nbytes = 1;
    if (nbytes < kLargeBlockBytes) {
      allocated_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
      int cls = small_class(nbytes);
      SmallCache* cache = cls >= 0 ? small_cache() : nullptr;
      if (cache && cache->lists[cls].size() < kSmallCacheDepth) {
        cache->lists[cls].push_back(p);
        return;
      }
      std::free(p);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    size_t size = it->second;
    sizes_.erase(it);
    allocated_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
    cache_.emplace(size, p);
    cached_ += static_cast<int64_t>(size);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, p] : cache_) munmap(p, size);
    cache_.clear();
    cached_ = 0;
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryStats s;
    s.allocated = allocated_.load();
    s.peak_allocated = peak_.load();
    s.cached = cached_;
    s.num_allocs = num_allocs_.load();
    s.num_cache_hits = num_hits_.load();
    return s;
  }
  void reset_peak() { peak_.store(allocated_.load()); }

 private:
  static size_t block_size(size_t nbytes) { return round_up(nbytes, kHugePage); }

  static void* map_block(size_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    madvise(p, size, MADV_HUGEPAGE);  // a hint: fewer page faults and TLB misses
    return p;
  }

  [[noreturn]] static void throw_oom(size_t nbytes) {
    throw Error(
        detail::concat("out of memory: could not allocate ", nbytes, " bytes of host memory"));
  }

  void account(int64_t n) {
    int64_t now = allocated_.fetch_add(n, std::memory_order_relaxed) + n;
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  void stats_hit() { num_hits_.fetch_add(1, std::memory_order_relaxed); }

  std::mutex mu_;
  std::multimap<size_t, void*> cache_;
  std::map<void*, size_t> sizes_;
  int64_t cached_ = 0;
  std::atomic<int64_t> allocated_{0}, peak_{0}, num_allocs_{0}, num_hits_{0};
};

HostAllocator& allocator() {
  static HostAllocator* a = new HostAllocator();  // never destroyed: storages may outlive main
  return *a;
}

}  // namespace

namespace detail {
void* host_alloc(size_t nbytes) { return allocator().allocate(nbytes); }
void host_free(void* ptr, size_t nbytes) { allocator().deallocate(ptr, nbytes); }
}  // namespace detail

MemoryStats memory_stats() { return allocator().stats(); }
void reset_peak_memory_stats() { allocator().reset_peak(); }
void empty_cache() { allocator().empty_cache(); }

}  // namespace kiln
