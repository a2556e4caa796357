// nn::Module: parameter/buffer registration, traversal, mode, dtype conversion, state dicts.
#include "kiln/nn/module.h"

#include <map>
#include <set>

#include "core/tensor_names.h"
#include "kiln/autograd/autograd.h"

namespace kiln::nn {

Tensor Module::register_parameter(std::string name, Tensor tensor) {
  KILN_CHECK(tensor.defined(), Error, type_name_, ": parameter '", name, "' is undefined");
  if (!tensor.requires_grad()) tensor.requires_grad_(true);
  detail::set_tensor_name(tensor, "parameter", name);
  params_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  KILN_CHECK(tensor.defined(), Error, type_name_, ": buffer '", name, "' is undefined");
  detail::set_tensor_name(tensor, "buffer", name);
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

void Module::name_descendants(const std::string& name, const Module& child) {
  for (const auto& [path, t] : child.named_parameters())
    detail::set_tensor_name(t, "parameter", name + "." + path);
  for (const auto& [path, t] : child.named_buffers())
    detail::set_tensor_name(t, "buffer", name + "." + path);
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers,
                     NamedTensorList& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->collect(prefix + name + ".", true, buffers, out);
}

NamedTensorList Module::named_parameters(bool recurse) const {
  NamedTensorList out;
  collect("", recurse, false, out);
  // A tensor registered twice (tied weights) is listed once, under its first name.
  std::set<const TensorImpl*> seen;
  std::erase_if(out, [&](const auto& p) { return !seen.insert(p.second.impl()).second; });
  return out;
}

NamedTensorList Module::named_buffers(bool recurse) const {
  NamedTensorList out;
  collect("", recurse, true, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  // In place (TensorImpl::set_data), so every handle — the layer's member, an optimizer's list —
  // sees the new dtype. Tied parameters share one tensor: converted once.
  std::set<const TensorImpl*> converted;
  for (bool buffers : {false, true}) {
    NamedTensorList all;
    collect("", true, buffers, all);
    for (auto& [name, t] : all) {
      if (!is_floating(t.dtype()) || t.dtype() == dtype || !converted.insert(t.impl()).second)
        continue;
      const Tensor value = t.detach().to(dtype).contiguous();
      t.impl()->set_data(*value.impl());
    }
  }
}

NamedTensorList Module::state_dict() const {
  NamedTensorList out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(b);
  return out;
}

void Module::load_state_dict(const NamedTensorList& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) {
    KILN_CHECK(given.emplace(name, &t).second, Error, "load_state_dict: '", name,
               "' appears twice");
  }
  NamedTensorList mine = state_dict();
  std::set<std::string> used;
  // Check everything first, so a failed load changes nothing.
  for (const auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it == given.end()) {
      KILN_CHECK(!strict, Error, "load_state_dict: ", type_name_, " expects '", name, "' (shape ",
                 t.shape_str(), ") but the state has no such entry");
      continue;
    }
    const Tensor& src = *it->second;
    KILN_CHECK(src.defined(), Error, "load_state_dict: '", name, "' is undefined");
    KILN_CHECK(src.sizes() == t.sizes(), ShapeError, "load_state_dict: '", name, "' has shape ",
               src.shape_str(), " in the state but ", t.shape_str(), " in the model");
    KILN_CHECK(src.dtype() == t.dtype(), DTypeError, "load_state_dict: '", name, "' has dtype ",
               src.dtype(), " in the state but ", t.dtype(), " in the model");
    used.insert(name);
  }
  if (strict)
    for (const auto& [name, t] : state)
      KILN_CHECK(used.count(name), Error, "load_state_dict: unexpected entry '", name, "' (shape ",
                 t.shape_str(), ") that ", type_name_, " does not have");
  NoGradGuard no_grad;
  for (auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    Tensor dst = t;
    dst.copy_(*it->second);
  }
}

}  // namespace kiln::nn
