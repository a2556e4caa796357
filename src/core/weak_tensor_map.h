// A thread-safe map from tensors to values that does not keep the tensors alive: an entry goes
// with its tensor (dead entries are swept as the map grows). What diagnostics and the capture
// attach to a user's tensor (its name, its dims marked dynamic) lives in one.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "kiln/core/tensor.h"

namespace kiln::detail {

template <class T>
class WeakTensorMap {
 public:
  // Calls update(value) on t's value (default-made if t has none).
  void update(const Tensor& t, const std::function<void(T&)>& update) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[t.impl()];
    if (e.tensor.lock().get() != t.impl()) e = {t.impl_ptr(), T{}};
    update(e.value);
    if (entries_.size() >= sweep_at_) {
      std::erase_if(entries_, [](const auto& kv) { return kv.second.tensor.expired(); });
      sweep_at_ = 2 * entries_.size() + 64;
    }
  }
  // t's value, if it has one.
  std::optional<T> get(const Tensor& t) const {
    std::lock_guard<std::mutex> lock(mu_);
    // (A dead entry's tensor may share its address with a new one: the weak pointer tells.)
    if (auto it = entries_.find(t.impl()); it != entries_.end())
      if (it->second.tensor.lock().get() == t.impl()) return it->second.value;
    return std::nullopt;
  }
  // The value of a live tensor that `pred` accepts (any one), if there is one.
  std::optional<T> find(const std::function<bool(const TensorImpl&)>& pred) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [impl, e] : entries_)
      if (const std::shared_ptr<TensorImpl> alive = e.tensor.lock(); alive && pred(*alive))
        return e.value;
    return std::nullopt;
  }

 private:
  struct Entry {
    std::weak_ptr<TensorImpl> tensor;
    T value;
  };
  mutable std::mutex mu_;
  std::unordered_map<const TensorImpl*, Entry> entries_;
  size_t sweep_at_ = 64;
};

}  // namespace kiln::detail
