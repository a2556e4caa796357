// Recording op calls for autograd: dispatch hands a call here when an input requires grad; it
// runs the op and gives its outputs an OpNode that applies the op's Derivative on backward.
#include <string>

#include "autograd/grad_mode.h"
#include "kiln/autograd/autograd.h"

namespace kiln::autograd {

namespace {

// "mul" -> "MulBackward", "log_softmax" -> "LogSoftmaxBackward".
std::string backward_name(std::string_view op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out + "Backward";
}

// A view op's derivative reads only its input's geometry (sizes, strides, offset: as_strided),
// so the node keeps that without the data: writing the input in place later (a base whose
// views are regenerated, refresh_view_history) leaves the node valid, as in PyTorch.
Tensor geometry_of(const Tensor& t) {
  return Tensor(
      std::make_shared<TensorImpl>(nullptr, t.storage_offset(), t.sizes(), t.strides(), t.dtype()));
}

// The node of one recorded op call.
class OpNode : public Node {
 public:
  OpNode(const OpDef& op, const Attrs& attrs, std::span<const Tensor> inputs,
         std::span<const Tensor> outputs)
      : op_(op), attrs_(attrs), needs_(0) {
    next_edges_.reserve(inputs.size());
    input_meta_.reserve(inputs.size());
    for (const Tensor& t : inputs) add_input(t);
    for (const Tensor& t : outputs) add_output(t);
    // Bit i: input i needs a gradient (BackwardCall::needs_grad treats inputs from the 33rd
    // on as always needed; the engine drops gradients for inputs without an edge).
    for (size_t i = 0; i < next_edges_.size() && i < 32; ++i)
      if (next_edges_[i].valid()) needs_ |= 1u << i;
  }
  std::string name() const override { return backward_name(op_.name); }

  void save(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
    const Derivative& d = op_.derivative;
    if (d.saved_inputs) {
      saved_inputs_.resize(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i)
        if (i < 32 && ((d.saved_inputs >> i) & 1u))
          saved_inputs_[i] =
              SavedTensor(op_.kind == OpKind::View ? geometry_of(inputs[i]) : inputs[i], false);
    }
    if (d.saved_outputs) {
      saved_outputs_.resize(outputs.size());
      for (size_t i = 0; i < outputs.size(); ++i)
        if (i < 32 && ((d.saved_outputs >> i) & 1u))
          saved_outputs_[i] = SavedTensor(outputs[i], true);
    }
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    KILN_CHECK(op_.derivative.fn, NotImplementedError, "the derivative of '", op_.name,
               "' is not implemented, so gradients cannot flow through it (", name(), ")");
    KILN_CHECK(!released_, Error, "trying to run ", name(),
               " a second time: its saved tensors were freed after the first backward pass. "
               "Pass retain_graph=true to the first backward() (or grad()) to keep them");
    auto self = shared_from_this();
    std::vector<Tensor> ins(next_edges_.size()), outs(output_meta_.size());
    for (size_t i = 0; i < saved_inputs_.size(); ++i)
      if (saved_inputs_[i].defined()) ins[i] = saved_inputs_[i].unpack(nullptr, name());
    for (size_t i = 0; i < saved_outputs_.size(); ++i)
      if (saved_outputs_[i].defined()) outs[i] = saved_outputs_[i].unpack(self, name());
    BackwardCall call{op_, attrs_, ins, outs, input_meta_, output_meta_, grads, needs_};
    std::vector<Tensor> grad_inputs(next_edges_.size());
    op_.derivative.fn(call, grad_inputs);
    return grad_inputs;
  }

  void release_saved() override {
    if (saved_inputs_.empty() && saved_outputs_.empty()) return;
    for (SavedTensor& s : saved_inputs_) s.release();
    for (SavedTensor& s : saved_outputs_) s.release();
    released_ = true;
  }

 private:
  const OpDef& op_;
  Attrs attrs_;
  uint32_t needs_;
  std::vector<SavedTensor> saved_inputs_, saved_outputs_;
  bool released_ = false;
};

// Creates the node for a call whose outputs are computed, and gives them their history.
void record(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
            std::span<Tensor> outputs, std::span<const Tensor> saved_inputs) {
  auto node = std::make_shared<OpNode>(op, attrs, inputs, outputs);
  set_history(outputs, node);
  node->save(saved_inputs, outputs);
}

}  // namespace

void check_inplace_target(const OpDef& op, const Tensor& out) {
  KILN_CHECK(!out.impl()->is_inference() || inference_mode(), Error, op.name,
             ": an in-place change to a tensor made in InferenceMode (shape ", out.shape_str(),
             ") is not allowed outside InferenceMode; clone() it first");
}

namespace {

// The inputs a derivative will read, with those sharing `out`'s memory (about to be
// overwritten) replaced by copies of their current value (recorded, so they keep history).
std::vector<Tensor> inputs_to_save(const OpDef& op, std::span<const Tensor> inputs,
                                   const Tensor& out) {
  std::vector<Tensor> saved(inputs.begin(), inputs.end());
  for (size_t i = 0; i < saved.size(); ++i) {
    if (i >= 32 || !((op.derivative.saved_inputs >> i) & 1u)) continue;
    if (saved[i].impl()->memory_id() == out.impl()->memory_id()) saved[i] = saved[i].clone();
  }
  return saved;
}

// Writes `value` into `dst`'s memory without recording (cast and broadcast as copy_ does).
void copy_unrecorded(const Tensor& dst, const Tensor& value) {
  AutoGradMode off(false);
  std::array<Tensor, kMaxOpOutputs> out{dst};
  const Tensor copy_inputs[] = {dst, value};
  static const OpDef& copy = *find_op("copy");
  dispatch_no_autograd(copy, copy_inputs, Attrs{}, out);
}

// `t` now holds `value`'s history (rebase); retain_grad follows it.
void take_history(const Tensor& t, const Tensor& value) {
  AutogradMeta& m = meta(t);
  if (m.retains_grad && m.grad_fn) m.grad_fn->remove_pre_hook(m.retain_grad_hook);
  m.grad_fn = value.grad_fn();
  m.output_nr = value.requires_grad() ? value.output_nr() : 0;
  t.impl()->set_requires_grad(value.requires_grad());
  if (m.retains_grad && m.grad_fn) add_retain_grad_hook(t);
}

}  // namespace

void refresh_view_history(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->is_view() || !impl->view_base()) return;
  const uint64_t now = impl->version();
  if (impl->view_history_version() == now) return;
  impl->set_view_history_version(now);
  const Tensor base(impl->view_base());
  // A leaf base is changed in place only without recording (an optimizer step): the view's
  // gradient still flows into the same elements of it, so its history stays.
  if (!base.requires_grad() || base.is_leaf()) return;
  AutoGradMode on(true);
  take_history(t, base.as_strided(t.sizes(), t.strides(), t.storage_offset()));
}

namespace {

// In place into a view while recording (PyTorch's CopySlices): the op's result is computed out
// of place with its history, the view's base gets as its new value (and history) the old base
// with the view's elements replaced by the result (as_strided_scatter, differentiable in both),
// and the view's history becomes that region of the new base.
int dispatch_into_view_and_record(const OpDef& op, std::span<const Tensor> inputs,
                                  const Attrs& attrs, std::span<Tensor, kMaxOpOutputs> outputs) {
  Tensor out = outputs[0];
  Tensor base(out.impl()->view_base());
  KILN_CHECK(!(base.requires_grad() && base.is_leaf()), Error, op.name,
             ": a view of a leaf tensor that requires grad (shape ", base.shape_str(),
             ") cannot be changed in place while gradients are recorded; do it under "
             "kiln::NoGradGuard, or on a clone()");
  KILN_CHECK(base.is_contiguous(), NotImplementedError, op.name,
             ": an in-place change to a view of a non-contiguous tensor (shape ", base.shape_str(),
             ", strides ", IntList(base.strides()),
             ") while gradients are recorded is not supported; call .contiguous() on it first");
  check_inplace_target(op, out);
  std::array<Tensor, kMaxOpOutputs> result;
  const int n = dispatch_no_autograd(op, inputs, attrs, result);
  check_destination(op, TensorMeta(result[0].dtype(), result[0].sizes()), out);
  record(op, inputs, attrs, std::span<Tensor>(result.data(), 1), inputs_to_save(op, inputs, out));
  Tensor value = result[0].dtype() == out.dtype() ? result[0] : result[0].to(out.dtype());
  // The region in the base's elements (the base is contiguous from its own offset).
  const std::vector<int64_t> sizes = out.sizes().vec(), strides = out.strides().vec();
  const int64_t offset = out.storage_offset() - base.storage_offset();
  static const OpDef& scatter = *find_op("as_strided_scatter");
  const Tensor scatter_inputs[] = {base, value};
  Tensor new_base = dispatch1(scatter, scatter_inputs, Attrs{sizes, strides, offset});
  copy_unrecorded(out, value);
  take_history(base, new_base);
  take_history(out, new_base.as_strided(sizes, strides, offset));
  out.impl()->set_view_history_version(out.impl()->version());  // up to date
  for (int i = 1; i < n; ++i) outputs[static_cast<size_t>(i)] = result[static_cast<size_t>(i)];
  return n;
}

}  // namespace

int dispatch_and_record(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                        std::span<Tensor, kMaxOpOutputs> outputs) {
  bool any_requires = false;
  for (const Tensor& t : inputs) {
    refresh_view_history(t);
    any_requires = any_requires || t.requires_grad();
  }
  if (!outputs[0].defined()) {
    const int n = dispatch_no_autograd(op, inputs, attrs, outputs);
    if (any_requires) record(op, inputs, attrs, outputs.first(static_cast<size_t>(n)), inputs);
    return n;
  }

  // In place (or out=): compute out of place, write the result into the destination, then
  // make the destination's history the new node's (PyTorch's "rebase history").
  Tensor out = outputs[0];
  KILN_CHECK(!(out.requires_grad() && out.is_leaf()), Error, op.name,
             ": a leaf tensor that requires grad (shape ", out.shape_str(),
             ") cannot be changed in place while gradients are recorded; do it under "
             "kiln::NoGradGuard, or on a clone()");
  if (any_requires && out.impl()->is_view() && out.impl()->view_base())
    return dispatch_into_view_and_record(op, inputs, attrs, outputs);
  check_inplace_target(op, out);
  std::array<Tensor, kMaxOpOutputs> result;
  const int n = dispatch_no_autograd(op, inputs, attrs, result);
  // The checks dispatch makes when it writes into `out` directly (the copy below would
  // broadcast and cast instead, and an integer `out` would end up requiring grad).
  check_destination(op, TensorMeta(result[0].dtype(), result[0].sizes()), out);
  // An input the derivative reads that shares the destination's storage is about to be
  // overwritten: save a copy of its current value instead.
  if (any_requires)
    record(op, inputs, attrs, std::span<Tensor>(result.data(), 1), inputs_to_save(op, inputs, out));
  copy_unrecorded(out, result[0]);
  if (any_requires) {
    // retain_grad follows the tensor to its new value (its other hooks stay with the old one,
    // as in PyTorch).
    take_history(out, result[0]);
  } else if (out.impl()->autograd_meta()) {
    // Nothing that requires grad went into the new value: it has no history any more.
    out.impl()->autograd_meta()->grad_fn = nullptr;
    out.impl()->set_requires_grad(false);
  }
  for (int i = 1; i < n; ++i) outputs[static_cast<size_t>(i)] = result[static_cast<size_t>(i)];
  return n;
}

}  // namespace kiln::autograd
