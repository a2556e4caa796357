// nn::Module: a tree of named parameters, buffers and child modules (torch.nn.Module in C++).
// The module keeps its own handle to each registered tensor (a handle shares the tensor, as in
// LibTorch), so a tensor may live anywhere — a member, a std::vector that grows, nowhere else —
// and state_dict, dtype conversion (in place: every handle sees it) and loading all reach the
// very tensors that forward uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::nn {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // "Linear", "GPT", ...
  const std::string& type_name() const { return type_name_; }

  // Parameters and buffers in registration order, children's prefixed "child.name".
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensorList named_parameters(bool recurse = true) const;
  NamedTensorList named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  int64_t num_parameters() const;

  // Training mode (dropout active) for this module and every descendant.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Clears (default) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  // Converts every floating parameter and buffer to `dtype` (parameters stay leaves that
  // require grad; gradients are dropped).
  void to(DType dtype);

  // Parameters then buffers, by qualified name (what checkpoints hold).
  NamedTensorList state_dict() const;
  // Copies values into the module's tensors. strict: every name must match both ways. Checks
  // every name, shape and dtype before changing anything; throws kiln::Error naming the tensor.
  void load_state_dict(const NamedTensorList& state, bool strict = true);

 protected:
  // Registers `tensor` as a parameter (made a leaf that requires grad) and returns it:
  // `weight = register_parameter("weight", randn({4, 3}))`, or a member registered as is. The
  // module keeps a handle to that tensor: assigning another tensor to the member later does not
  // change what is registered (as in LibTorch); write into it (copy_) instead.
  Tensor register_parameter(std::string name, Tensor tensor);
  // Registers `tensor` as a buffer (state that is saved but not trained) and returns it.
  Tensor register_buffer(std::string name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    name_descendants(name, *child);
    children_.emplace_back(std::move(name), child);
    return child;
  }

 private:
  // The child's parameters and buffers take their names under `name` ("fc1.weight"), as
  // diagnostics (recompile reasons) call them.
  static void name_descendants(const std::string& name, const Module& child);
  void collect(const std::string& prefix, bool recurse, bool buffers, NamedTensorList& out) const;
  std::string type_name_;
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A module whose forward maps one tensor to one tensor (what Sequential chains).
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

}  // namespace kiln::nn
