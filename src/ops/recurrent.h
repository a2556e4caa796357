// One step of the recurrent cells with the input's projection already made (gi = x W_ih^T +
// b_ih): the cells (kiln/ops/nn.h) project one input, the recurrent layers (nn/recurrent.h) a
// whole sequence in one product and then step through it.
#pragma once

#include <optional>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln::ops {

// h' = act(gi + h W_hh^T + b_hh), act tanh or relu.
Tensor rnn_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh,
                const std::optional<Tensor>& b_hh, bool relu);
// PyTorch's gate order (input, forget, cell, output): (h', c').
std::pair<Tensor, Tensor> lstm_step(const Tensor& gi, const Tensor& h, const Tensor& c,
                                    const Tensor& w_hh, const std::optional<Tensor>& b_hh);
// PyTorch's gate order (reset, update, new): h' = n + z (h - n).
Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh,
                const std::optional<Tensor>& b_hh);

}  // namespace kiln::ops
