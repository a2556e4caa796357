// User-defined autograd functions: the context their forward and backward share, and the node
// that calls their backward.
#include <cxxabi.h>

#include <cstdlib>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/factory.h"

namespace kiln::autograd {

void FunctionContext::save_for_backward(const std::vector<Tensor>& tensors) { to_save_ = tensors; }

std::vector<Tensor> FunctionContext::get_saved_variables() const {
  KILN_CHECK(!released_, Error,
             "a custom function's saved tensors were freed after the first backward pass; pass "
             "retain_graph=true to keep them");
  std::vector<Tensor> out;
  if (!packed_) return to_save_;  // forward called outside recording: nothing was packed
  std::shared_ptr<Node> owner = owner_.lock();
  for (const SavedTensor& s : saved_) out.push_back(s.unpack(owner, "a custom function"));
  return out;
}

bool FunctionContext::needs_input_grad(size_t i) const {
  KILN_CHECK(i < needs_input_grad_.size(), IndexError, "needs_input_grad: argument ", i,
             " out of range for a function of ", needs_input_grad_.size(), " arguments");
  return needs_input_grad_[i];
}

namespace detail {

namespace {
std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : mangled;
  std::free(d);
  return out;
}
}  // namespace

std::string CustomFunctionNode::name() const { return demangle(name_) + "Backward"; }

std::vector<Tensor> CustomFunctionNode::apply(std::vector<Tensor>&& grad_outputs) {
  for (size_t i = 0; i < grad_outputs.size(); ++i)
    if (!grad_outputs[i].defined())
      grad_outputs[i] = zeros(output_meta_[i].sizes, output_meta_[i].dtype);
  std::vector<Tensor> grads = backward_(&ctx, std::move(grad_outputs));
  const size_t n_tensors = tensor_args_.size();
  KILN_CHECK(grads.size() == num_args_ || grads.size() == n_tensors, Error, name(),
             ": backward returned ", grads.size(), " gradients, expected ", num_args_,
             " (one per forward argument) or ", n_tensors, " (one per tensor argument)");
  std::vector<Tensor> out(n_tensors);
  for (size_t k = 0; k < n_tensors; ++k) {
    Tensor g = grads.size() == num_args_ ? grads[static_cast<size_t>(tensor_args_[k])] : grads[k];
    if (!g.defined() || !next_edges_[k].valid()) continue;
    const TensorMeta& want = input_meta_[k];
    // As for ops' derivatives (and PyTorch's custom functions), a gradient at a shape the
    // input broadcasts to is summed down to the input's shape by the engine.
    bool reducible = g.dim() >= static_cast<int64_t>(want.sizes.size());
    const int64_t lead = g.dim() - static_cast<int64_t>(want.sizes.size());
    for (size_t d = 0; reducible && d < want.sizes.size(); ++d)
      reducible = want.sizes[d] == g.size(lead + static_cast<int64_t>(d)) || want.sizes[d] == 1;
    KILN_CHECK(reducible, ShapeError, name(), ": backward returned a gradient of shape ",
               g.shape_str(), " for tensor argument ", k, " of shape ", IntList(want.sizes));
    out[k] = std::move(g);
  }
  return out;
}

void CustomFunctionNode::release_saved() {
  for (SavedTensor& s : ctx.saved_) s.release();
  ctx.released_ = true;
}

void connect_custom_function(const std::shared_ptr<CustomFunctionNode>& node,
                             const std::vector<Tensor>& tensor_args, std::vector<Tensor>& outputs) {
  for (const Tensor& t : tensor_args) {
    node->add_input(t);
  }
  for (Tensor& out : outputs) {
    KILN_CHECK(out.defined(), Error, node->name(), ": forward returned an undefined tensor");
    // An input returned as is: give the output its own handle so the input keeps its history.
    for (const Tensor& t : tensor_args)
      if (out.is_same(t)) out = out.detach();
    node->add_output(out);
  }
  set_history(outputs, node);
  // Saved outputs hold no history (the node is their grad_fn); inputs are kept as they are.
  for (const Tensor& t : node->ctx.to_save_) {
    bool is_output = false;
    for (const Tensor& o : outputs) is_output = is_output || (t.defined() && t.is_same(o));
    node->ctx.saved_.emplace_back(t, is_output);
  }
  node->ctx.to_save_.clear();
  node->ctx.owner_ = node;
  node->ctx.packed_ = true;
}

}  // namespace detail
}  // namespace kiln::autograd
