// The tensor name registry (tensor_names.h): weak entries by TensorImpl, swept as it grows.
#include "core/tensor_names.h"

#include <mutex>
#include <unordered_map>

namespace kiln::detail {

namespace {
struct Entry {
  std::weak_ptr<TensorImpl> tensor;
  TensorName name;
};
struct Registry {
  std::mutex mu;
  std::unordered_map<const TensorImpl*, Entry> entries;
  size_t sweep_at = 64;  // entries after which dead ones are dropped
};
Registry& registry() {
  static Registry* r = new Registry;  // (never destroyed: tensors may die during static exit)
  return *r;
}
}  // namespace

void set_tensor_name(const Tensor& t, std::string kind, std::string name) {
  if (!t.defined()) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries[t.impl()] = {t.impl_ptr(), {std::move(kind), std::move(name)}};
  if (r.entries.size() >= r.sweep_at) {
    std::erase_if(r.entries, [](const auto& e) { return e.second.tensor.expired(); });
    r.sweep_at = 2 * r.entries.size() + 64;
  }
}

TensorName tensor_name(const Tensor& t) {
  if (!t.defined()) return {};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // (An entry whose tensor died may share its address with a new tensor: the weak pointer tells.)
  if (auto it = r.entries.find(t.impl()); it != r.entries.end())
    if (it->second.tensor.lock().get() == t.impl()) return it->second.name;
  const std::shared_ptr<Storage>& memory = t.impl()->storage_if_concrete();
  if (!memory) return {};
  for (const auto& [impl, e] : r.entries)
    if (const std::shared_ptr<TensorImpl> named = e.tensor.lock();
        named && named->storage_if_concrete() == memory)
      return e.name;
  return {};
}

}  // namespace kiln::detail
