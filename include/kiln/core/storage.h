// Storage: a reference-counted, 64-byte-aligned buffer that one or more tensor views share.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace kiln {

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

  // Public only for make_shared; use allocate() / wrap().
  struct Private {};
  Storage(Private, void* data, size_t nbytes, bool owned, std::function<void(void*)> deleter);

 private:
  void* data_;
  size_t nbytes_;
  bool owned_;  // allocated by the host allocator (vs wrapped)
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace kiln
