// Storage: a reference-counted, 64-byte-aligned buffer that one or more tensor views share.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace kiln {

struct PendingValue;

namespace detail {
// The capture layer's writer of written storages on this thread, if its token is `token`
// (null otherwise: the storage was marked by a capture on another thread).
PendingValue* thread_storage_writer(uint64_t token);
// Installs (or, with null, removes) this thread's writer and its token.
void set_thread_storage_writer(uint64_t token, PendingValue* writer);
}  // namespace detail

class Storage {
 public:
  // A new buffer of `nbytes` from the host allocator (contents uninitialised).
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // Borrows caller memory; `deleter` (may be empty) runs when the last view goes away.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes,
                                       std::function<void(void*)> deleter);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

  // Version counter shared by every view of this storage: bumped by each in-place write, so
  // autograd can tell that a tensor saved for backward was modified.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  // Carries a pending tensor's version over to the storage it materialised into.
  void set_version(uint64_t v) { version_.store(v, std::memory_order_relaxed); }

  // Set while a graph capture has recorded writes into this storage that have not run yet:
  // reading the data on the capturing thread first runs them (a sync point). Other threads get
  // null and see the memory as it is, as if they had read it just before those writes. The
  // storage holds only the capture's token; the writer is found through the calling thread's
  // own capture (detail::thread_storage_writer), never through another thread's.
  PendingValue* pending_writer() const {
    const uint64_t token = writer_token_.load(std::memory_order_acquire);
    if (token == 0) [[likely]]
      return nullptr;
    return detail::thread_storage_writer(token);
  }
  // Marks the storage as written by the capture `token` (nonzero). False when another capture
  // (on another thread) has it marked: two threads writing one tensor at once.
  bool mark_pending_write(uint64_t token) {
    uint64_t expected = 0;
    return writer_token_.compare_exchange_strong(expected, token, std::memory_order_acq_rel) ||
           expected == token;
  }
  // Removes the mark of the capture `token` (not another's).
  void unmark_pending_write(uint64_t token) {
    uint64_t expected = token;
    writer_token_.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  }

  // Public only for make_shared; use allocate() / wrap().
  struct Private {};
  Storage(Private, void* data, size_t nbytes, bool owned, std::function<void(void*)> deleter);

 private:
  void* data_;
  size_t nbytes_;
  bool owned_;  // allocated by the host allocator (vs wrapped)
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> writer_token_{0};
};

}  // namespace kiln
