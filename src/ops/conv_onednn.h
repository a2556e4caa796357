// Convolution on oneDNN (the library PyTorch itself runs CPU convolutions on): forward, and the
// gradients with respect to the input and to the weight (and bias), as three ops whose
// derivatives are each other, so second derivatives stay on oneDNN too. float32 only (oneDNN has
// no float64 convolution on CPU); conv_nd (conv_pool.cpp) takes this path for float32 and its
// im2col composite otherwise.
#pragma once

#include <optional>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln::ops {

// Whether a convolution in `dtype` runs on oneDNN: float32, unless the environment variable
// KILN_ONEDNN is 0 (read once; the im2col composite then runs instead, for comparisons).
bool onednn_convolution(DType dtype);

// x [N, C, in...] (1 to 3 spatial dims) with weight [O, C / groups, kernel...] and an optional
// bias [O]: [N, O, out...], out = (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1.
Tensor onednn_conv(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   IntList stride, IntList padding, IntList dilation, int64_t groups);
// Its gradient with respect to x [input_sizes] for the output's gradient `grad`.
Tensor onednn_conv_backward_input(const Tensor& grad, const Tensor& weight, IntList input_sizes,
                                  IntList stride, IntList padding, IntList dilation,
                                  int64_t groups);
// Its gradients with respect to the weight [weight_sizes] and a bias.
std::pair<Tensor, Tensor> onednn_conv_backward_weight(const Tensor& x, const Tensor& grad,
                                                      IntList weight_sizes, IntList stride,
                                                      IntList padding, IntList dilation,
                                                      int64_t groups);

}  // namespace kiln::ops
