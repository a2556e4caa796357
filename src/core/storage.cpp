#include "kiln/core/storage.h"

#include "kiln/core/allocator.h"

namespace kiln {

Storage::Storage(Private, void* data, size_t nbytes, bool owned, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), owned_(owned), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    detail::host_free(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  void* p = detail::host_alloc(nbytes);
  return std::make_shared<Storage>(Private{}, p, nbytes, true, nullptr);
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes,
                                       std::function<void(void*)> deleter) {
  return std::make_shared<Storage>(Private{}, data, nbytes, false, std::move(deleter));
}

}  // namespace kiln
