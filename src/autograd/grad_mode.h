// The per-thread recording flags, inline so that dispatch's check costs a load.
#pragma once

#include <span>
#include <string_view>

#include "kiln/ops/op.h"

namespace kiln::autograd {

namespace detail {
extern thread_local bool tls_grad_enabled;
extern thread_local bool tls_inference_mode;
}  // namespace detail

// A view whose base got history by an in-place change since the view's history was last
// brought up to date (refresh_view_history regenerates it).
inline bool view_history_is_stale(const TensorImpl& impl) {
  return impl.is_view() && impl.view_base() && impl.view_base()->requires_grad() &&
         impl.view_history_version() != impl.version();
}

// Whether dispatch must hand this call to autograd: recording is on and an input requires grad,
// or the call writes into a tensor that has autograd history or requires grad.
inline bool needs_recording(std::span<const Tensor> inputs, const Tensor& out) {
  if (!detail::tls_grad_enabled) return false;
  for (const Tensor& t : inputs) {
    const TensorImpl* impl = t.impl();  // dispatch checked they are defined
    if (impl->requires_grad()) return true;
    if (view_history_is_stale(*impl)) [[unlikely]]
      return true;
  }
  return out.defined() && out.impl()->requires_grad();
}

inline bool inference_mode() { return detail::tls_inference_mode; }

// Runs the op and records it for autograd (record.cpp).
int dispatch_and_record(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                        std::span<Tensor, kMaxOpOutputs> outputs);
// A derivative formula's gradient for input `i` (of `who`, for errors), cast and summed over
// broadcast dims down to the input's dtype and shape (the engine's rule; AOT autograd's too).
Tensor gradient_for_input(const TensorMeta& want, Tensor g, std::string_view who, size_t i);
// Checks done on every in-place write, recorded or not (inference tensors, leaves).
void check_inplace_target(const OpDef& op, const Tensor& out);

// What the backward() or grad() running on this thread asked for (null outside them). A
// compiled function's autograd node whose graph is still being captured reads it to decide
// whether it can trace its backward into that graph instead of running the graph first
// (aot/compiled_node.cpp).
struct BackwardRequest {
  bool keep_graph = false;
  bool create_graph = false;
  std::span<const Tensor> grad_inputs;  // grad()'s inputs (empty for backward())
};
const BackwardRequest* current_backward_request();
class BackwardRequestScope {
 public:
  explicit BackwardRequestScope(const BackwardRequest& request);
  ~BackwardRequestScope();
  BackwardRequestScope(const BackwardRequestScope&) = delete;
  BackwardRequestScope& operator=(const BackwardRequestScope&) = delete;

 private:
  const BackwardRequest* previous_;
};

}  // namespace kiln::autograd
