// Host allocator: malloc for small blocks; for large ones a cache of mmap'd blocks keyed by
// size, so that repeated large temporaries reuse memory whose pages are already faulted in.
#include "kiln/core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// Small blocks (below 64 KiB) come in power-of-two classes and are recycled through a per-thread
// free list: an eager op on a small tensor allocates its output every call, and malloc's
// aligned path (plus its bin consolidation) was the largest cost of W6's 100-op chain.
constexpr int kNumSmallClasses = 11;  // 64 B .. 64 KiB (requests below kLargeBlockBytes)
constexpr size_t kSmallCacheDepth = 64;
int small_class(size_t nbytes) {
  size_t c = 64;
  for (int k = 0; k < kNumSmallClasses; ++k, c <<= 1)
    if (nbytes <= c) return k;
  return -1;
}
size_t small_class_bytes(int cls) { return size_t{64} << cls; }
// Every request below kLargeBlockBytes has a class.
static_assert((size_t{64} << (kNumSmallClasses - 1)) >= kLargeBlockBytes);

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

// Large blocks. Resident memory is bounded by the peak of the bytes live tensors requested
// (P): every mapping keeps reserved (live blocks + cached) within max(2P, P + cache limit),
// releasing least recently freed cached blocks first, and frees keep cached <= limit. Live
// blocks are at most ~1.41x what they hold (rounding below, 25% best-fit slack), so releasing
// the whole cache always brings reserved within that bound.
class HostAllocator {
 public:
  HostAllocator() {
    if (const char* env = std::getenv("KILN_ALLOC_CACHE_LIMIT")) {
      try {
        limit_ = detail::parse_alloc_cache_limit(env);
      } catch (const Error& e) {
        std::fprintf(stderr, "kiln: %s; using the default (512M)\n", e.what());
      }
    }
  }

  void* allocate(size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    void* p;
    if (nbytes < kLargeBlockBytes) {
      const int cls = small_class(nbytes);
      SmallCache* cache = small_cache();
      auto* list = cache ? &cache->lists[cls] : nullptr;
      p = list && !list->empty() ? list->back() : nullptr;
      if (p) {
        list->pop_back();
      } else {
        p = std::aligned_alloc(kAlignment, small_class_bytes(cls));
      }
      if (!p) throw_oom(nbytes);
      account(static_cast<int64_t>(nbytes), static_cast<int64_t>(nbytes));
      return p;
    }
    size_t size = block_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Best fit, allowing at most 25% slack so that a small request does not pin a huge block.
      auto it = cache_.lower_bound(size);
      if (it != cache_.end() && it->first <= size + size / 4) {
        p = it->second.ptr;
        cached_ -= static_cast<int64_t>(it->first);
        size = it->first;
        cache_.erase(it);
        live_[p] = Live{size, nbytes};
        stats_hit();
        account(static_cast<int64_t>(size), static_cast<int64_t>(nbytes));
        return p;
      }
      // A larger cached block: split it, keep the head (its pages are faulted in already)
      // and cache the tail. Any page-aligned part of a mapping can be unmapped on its own.
      if (it != cache_.end()) {
        const size_t whole = it->first;
        const CacheEntry e = it->second;
        cache_.erase(it);
        p = e.ptr;
        void* tail = static_cast<char*>(p) + size;
        cached_ -= static_cast<int64_t>(whole);
        if (whole - size >= kLargeBlockBytes) {
          cache_.emplace(whole - size, CacheEntry{tail, e.seq});
          cached_ += static_cast<int64_t>(whole - size);
        } else {
          unmap(tail, whole - size);  // too small for any request that comes here
        }
        live_[p] = Live{size, nbytes};
        stats_hit();
        account(static_cast<int64_t>(size), static_cast<int64_t>(nbytes));
        return p;
      }
      // New memory: first release cached blocks that the budget cannot afford.
      const int64_t req_peak =
          std::max(peak_requested_.load(), requested() + static_cast<int64_t>(nbytes));
      const int64_t budget = std::max(2 * req_peak, req_peak + limit_);
      while (!cache_.empty() && allocated_.load() + cached_ + static_cast<int64_t>(size) > budget)
        release_oldest_locked();
    }
    p = map_block(size);
    if (!p) {
      empty_cache();  // give cached blocks back and try once more
      p = map_block(size);
      if (!p) throw_oom(nbytes);
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = Live{size, nbytes};
    account(static_cast<int64_t>(size), static_cast<int64_t>(nbytes));
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (!p) return;
    if (nbytes == 0) nbytes = 1;
    if (nbytes < kLargeBlockBytes) {
      allocated_.fetch_sub(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
      SmallCache* cache = small_cache();
      const int cls = small_class(nbytes);
      if (cache && cache->lists[cls].size() < kSmallCacheDepth) {
        cache->lists[cls].push_back(p);
        return;
      }
      std::free(p);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    const Live live = it->second;
    live_.erase(it);
    allocated_.fetch_sub(static_cast<int64_t>(live.size), std::memory_order_relaxed);
    large_slack_.fetch_sub(static_cast<int64_t>(live.size - live.requested),
                           std::memory_order_relaxed);
    if (static_cast<int64_t>(live.size) > limit_) {  // a block larger than the limit is not kept
      unmap(p, live.size);
      return;
    }
    cache_.emplace(live.size, CacheEntry{p, ++seq_});
    cached_ += static_cast<int64_t>(live.size);
    while (cached_ > limit_ && !cache_.empty()) release_oldest_locked();
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    while (!cache_.empty()) release_oldest_locked();
  }

  void set_limit(int64_t bytes) {
    KILN_CHECK(bytes >= 0, ValueError, "set_alloc_cache_limit: the limit must be >= 0 bytes, got ",
               bytes);
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = bytes;
    while (cached_ > limit_ && !cache_.empty()) release_oldest_locked();
  }
  int64_t limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryStats s;
    s.allocated = allocated_.load();
    s.peak_allocated = peak_.load();
    s.cached = cached_;
    s.num_allocs = num_allocs_.load();
    s.num_cache_hits = num_hits_.load();
    s.requested = requested();
    s.peak_requested = peak_requested_.load();
    s.reserved = s.allocated + cached_;
    s.peak_reserved = std::max(peak_reserved_, s.reserved);
    s.cache_limit = limit_;
    s.num_releases = num_releases_;
    return s;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_.store(allocated_.load());
    peak_requested_.store(requested());
    peak_reserved_ = allocated_.load() + cached_;
  }

 private:
  struct CacheEntry {
    void* ptr;
    uint64_t seq;  // when it was freed: the oldest is released first
  };
  struct Live {
    size_t size;       // the block
    size_t requested;  // what the tensor asked for
  };

  // Blocks from 16 MiB are whole 2 MiB huge pages (at most 12.5% rounding); from 1 MiB they
  // are rounded to 64 KiB (at most 6.25%), so a 1 MiB tensor does not hold 2 MiB; below, to
  // whole 4 KiB pages (at most 6.25%, for a 64 KiB request).
  static size_t block_size(size_t nbytes) {
    if (nbytes >= (size_t{16} << 20)) return round_up(nbytes, kHugePage);
    if (nbytes >= (size_t{1} << 20)) return round_up(nbytes, size_t{64} << 10);
    return round_up(nbytes, size_t{4} << 10);
  }

  static void* map_block(size_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    madvise(p, size, MADV_HUGEPAGE);  // a hint: fewer page faults and TLB misses
    return p;
  }
  void unmap(void* p, size_t size) {
    munmap(p, size);
    ++num_releases_;
  }
  // Called with mu_ held and the cache non-empty.
  void release_oldest_locked() {
    auto oldest = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->second.seq < oldest->second.seq) oldest = it;
    unmap(oldest->second.ptr, oldest->first);
    cached_ -= static_cast<int64_t>(oldest->first);
    cache_.erase(oldest);
  }

  [[noreturn]] static void throw_oom(size_t nbytes) {
    throw Error(
        detail::concat("out of memory: could not allocate ", nbytes, " bytes of host memory"));
  }

  static void raise_peak(std::atomic<int64_t>& peak, int64_t now) {
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
  // Bytes the live tensors asked for: a small block is exactly its request, so only large
  // blocks' rounding (large_slack_) is tracked, under mu_; the small path, the hot one, pays
  // for no extra atomic update.
  int64_t requested() const {
    return allocated_.load(std::memory_order_relaxed) -
           large_slack_.load(std::memory_order_relaxed);
  }
  void account(int64_t n, int64_t requested_bytes) {
    if (n != requested_bytes)  // a large block (mu_ held)
      large_slack_.fetch_add(n - requested_bytes, std::memory_order_relaxed);
    int64_t now = allocated_.fetch_add(n, std::memory_order_relaxed) + n;
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    raise_peak(peak_, now);
    raise_peak(peak_requested_, now - large_slack_.load(std::memory_order_relaxed));
    if (n >= static_cast<int64_t>(kLargeBlockBytes))  // called with mu_ held for large blocks
      peak_reserved_ = std::max(peak_reserved_, now + cached_);
  }
  void stats_hit() { num_hits_.fetch_add(1, std::memory_order_relaxed); }

  std::mutex mu_;
  std::multimap<size_t, CacheEntry> cache_;
  std::map<void*, Live> live_;
  int64_t cached_ = 0;
  int64_t limit_ = kDefaultAllocCacheLimit;
  int64_t peak_reserved_ = 0;
  int64_t num_releases_ = 0;
  uint64_t seq_ = 0;
  std::atomic<int64_t> allocated_{0}, peak_{0}, num_allocs_{0}, num_hits_{0};
  std::atomic<int64_t> large_slack_{0}, peak_requested_{0};
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
void set_alloc_cache_limit(int64_t bytes) { allocator().set_limit(bytes); }
int64_t alloc_cache_limit() { return allocator().limit(); }

namespace detail {
int64_t parse_alloc_cache_limit(const char* text) {
  const std::string s = text ? text : "";
  auto bad = [&]() {
    return ValueError(concat("KILN_ALLOC_CACHE_LIMIT='", s,
                             "' is not a byte count: expected a non-negative integer with an "
                             "optional K, M or G suffix (KiB, MiB, GiB), e.g. 512M"));
  };
  size_t i = 0;
  int64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (v > (INT64_MAX - 9) / 10) throw bad();
    v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0) throw bad();
  int shift = 0;
  if (i < s.size()) {
    switch (s[i]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        throw bad();
    }
    ++i;
    if (i < s.size() && (s[i] == 'i' || s[i] == 'I')) ++i;  // "MiB"
    if (i < s.size() && (s[i] == 'b' || s[i] == 'B')) ++i;  // "MB"
  }
  if (i != s.size()) throw bad();
  if (v > (INT64_MAX >> shift)) throw bad();
  return v << shift;
}
}  // namespace detail

}  // namespace kiln
