// A whole LSTM layer (one direction) on oneDNN's LSTM primitive, as PyTorch runs its CPU LSTM
// layers (mkldnn_rnn_layer): the time loop, the gates and, backward, every step's weight
// gradients summed by the primitive's own products, instead of a time loop of small ops.
// float32 on oneDNN; float64 runs the same formulas in direct loops (for the gradchecks).
// nn::LSTM (src/nn/recurrent.cpp) takes this path for float32 layers.
#pragma once

#include <tuple>

#include "kiln/core/tensor.h"

namespace kiln::ops {

// Whether an LSTM layer in `dtype` runs on oneDNN: float32, unless KILN_ONEDNN=0 (as for
// convolution: the composite time loop then runs instead, for comparisons).
bool onednn_lstm(DType dtype);

// One layer over x [T, B, I] from state h0, c0 [B, H], with w_ih [4 H, I], w_hh [4 H, H] and one
// bias [4 H] (b_ih + b_hh), gates in PyTorch's order (i, f, g, o); `reverse` runs from the last
// step to the first (a bidirectional layer's second direction). Returns y [T, B, H] (each
// step's h, in time order), h_T and c_T [B, H]. Differentiable in every input.
std::tuple<Tensor, Tensor, Tensor> onednn_lstm_layer(const Tensor& x, const Tensor& h0,
                                                     const Tensor& c0, const Tensor& w_ih,
                                                     const Tensor& w_hh, const Tensor& bias,
                                                     bool reverse);

}  // namespace kiln::ops
