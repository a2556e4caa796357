// The tensor name registry (tensor_names.h).
#include "core/tensor_names.h"

#include "core/weak_tensor_map.h"

namespace kiln::detail {

namespace {
WeakTensorMap<TensorName>& names() {
  static auto* m = new WeakTensorMap<TensorName>;  // (never destroyed: tensors die at exit)
  return *m;
}
}  // namespace

void set_tensor_name(const Tensor& t, std::string kind, std::string name) {
  if (!t.defined()) return;
  names().update(t, [&](TensorName& n) { n = {std::move(kind), std::move(name)}; });
}

TensorName tensor_name(const Tensor& t, bool by_memory) {
  if (!t.defined()) return {};
  if (std::optional<TensorName> n = names().get(t)) return *n;
  if (!by_memory) return {};
  const std::shared_ptr<Storage>& memory = t.impl()->storage_if_concrete();
  if (!memory) return {};
  return names()
      .find([&](const TensorImpl& named) { return named.storage_if_concrete() == memory; })
      .value_or(TensorName{});
}

}  // namespace kiln::detail
