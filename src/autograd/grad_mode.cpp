// Gradient-recording scopes: per-thread flags read by dispatch.
#include "autograd/grad_mode.h"

#include "kiln/autograd/autograd.h"

namespace kiln {

namespace autograd::detail {
thread_local bool tls_grad_enabled = true;
thread_local bool tls_inference_mode = false;
}  // namespace autograd::detail

using autograd::detail::tls_grad_enabled;
using autograd::detail::tls_inference_mode;

bool is_grad_enabled() { return tls_grad_enabled; }
void set_grad_enabled(bool enabled) { tls_grad_enabled = enabled; }
bool is_inference_mode_enabled() { return tls_inference_mode; }

AutoGradMode::AutoGradMode(bool enabled) : prev_(tls_grad_enabled) { tls_grad_enabled = enabled; }
AutoGradMode::~AutoGradMode() { tls_grad_enabled = prev_; }

InferenceMode::InferenceMode(bool enabled)
    : prev_grad_(tls_grad_enabled), prev_inference_(tls_inference_mode) {
  // As c10::InferenceMode: InferenceMode(false) turns inference mode off (and grad mode on)
  // for its scope, so it can carve a normal scope out of an inference one.
  tls_grad_enabled = !enabled;
  tls_inference_mode = enabled;
}
InferenceMode::~InferenceMode() {
  tls_grad_enabled = prev_grad_;
  tls_inference_mode = prev_inference_;
}

}  // namespace kiln
