// The optimizers' parameter updates as ops: one fused in-place op per parameter step, so that
// eager mode runs one SIMD pass over the parameter and its state, graph capture records one
// node, and the inductor backend either calls that kernel or fuses the op's decomposition (the
// same formula written in Kiln ops, bitwise equal to the kernel). kiln::optim's SGD, Adam and
// AdamW call these; they are public for users writing their own optimizers.
//
// Every hyper-parameter is a 0-d tensor of the parameter's dtype, not a C++ number: under
// kiln::compile a tensor is a graph input whose value is not guarded, so a new learning rate or
// step count runs the same compiled graph. Pass the same tensor for every parameter that shares
// a value (one graph input instead of one per parameter). Flags that change the formula are
// plain bools (a different flag is a different graph).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// torch.optim.Adam / AdamW's update of one parameter (the single-tensor formula):
//   g = maximize ? -grad : grad
//   l2:        g = g + weight_decay * param
//   decoupled: param = param * wd_factor                      (wd_factor = 1 - lr * weight_decay)
//   exp_avg = lerp(exp_avg, g, beta1_weight)                   (beta1_weight = 1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + one_minus_beta2 * g * g
//   amsgrad:   max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq), used below for exp_avg_sq
//   param = param + neg_step_size * exp_avg / (sqrt(exp_avg_sq) / bc2_sqrt + eps)
// with neg_step_size = -lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t).
struct AdamHyper {
  Tensor wd_factor, weight_decay, beta1_weight, beta2, one_minus_beta2, bc2_sqrt, eps,
      neg_step_size;
  bool decoupled = false;  // AdamW's weight decay (mutually exclusive with l2)
  bool l2 = false;         // Adam's weight decay, added to the gradient
  bool amsgrad = false;
  bool maximize = false;
  // The lerp's two-sided formula (as PyTorch): exp_avg + w * (g - exp_avg) when the weight
  // (in the parameter's dtype) is below 0.5, else g - (g - exp_avg) * (1 - w).
  bool lerp_from_exp_avg = true;
};
// Updates param, exp_avg, exp_avg_sq (and max_exp_avg_sq when amsgrad; pass an undefined tensor
// otherwise) in place. All have param's shape and floating dtype; grad may have any layout.
void adam_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamHyper& h);

// torch.optim.SGD's update of one parameter:
//   g = maximize ? -grad : grad
//   weight_decay_on: g = g + weight_decay * param
//   momentum buffer given: buf = first_step ? g : buf * momentum + one_minus_dampening * g
//                          g = nesterov ? g + momentum * buf : buf
//   param = param + neg_lr * g
struct SGDHyper {
  Tensor weight_decay, momentum, one_minus_dampening, neg_lr;
  bool weight_decay_on = false;
  bool first_step = false;  // the buffer is set to the gradient, not read
  bool nesterov = false;
  bool maximize = false;
};
// Updates param (and momentum_buffer, when defined) in place.
void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                 const SGDHyper& h);

}  // namespace kiln
