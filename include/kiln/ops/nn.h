// Neural-network functional ops (torch.nn.functional).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

class Generator;

Tensor layer_norm(const Tensor& x, IntList normalized_shape,
                  const std::optional<Tensor>& weight = {}, const std::optional<Tensor>& bias = {},
                  double eps = 1e-5);
Tensor rms_norm(const Tensor& x, IntList normalized_shape, const std::optional<Tensor>& weight = {},
                std::optional<double> eps = {});
// reduction: "mean", "sum" or "none".
// logits [N, C] (or [C]); target class indices [N] int64.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, const std::string& reduction = "mean");
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100,
                const std::string& reduction = "mean");
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
// 0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      const std::string& reduction = "mean", double beta = 1.0);
// 0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                  double delta = 1.0);
// -w (t log(x) + (1 - t) log(1 - x)) of probabilities x, each log clamped at -100 (as PyTorch).
// x outside [0, 1] gives NaN (PyTorch checks the values, a sync point; Kiln does not read them).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const std::optional<Tensor>& weight = {},
                            const std::string& reduction = "mean");
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const std::string& reduction);
// The same on logits, computed stably: -w (p t log(sigmoid(x)) + (1 - t) log(1 - sigmoid(x))),
// p = pos_weight (per class, broadcast along the last dim) weighting the positive term.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::optional<Tensor>& weight = {},
                                        const std::optional<Tensor>& pos_weight = {},
                                        const std::string& reduction = "mean");
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::string& reduction);
// Kullback-Leibler divergence of log-probabilities `input` from `target` (probabilities, or
// log-probabilities with log_target): target (log(target) - input), 0 where target is 0.
// reduction: "mean" (over elements, as PyTorch), "batchmean" (the sum over the batch size,
// dim 0: the mathematical KL divergence), "sum" or "none".
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
              bool log_target = false);
// Batch normalisation of x [N, C, *] per channel (torch.nn.functional.batch_norm). training:
// normalised by the batch's mean and biased variance over every dim but 1, and running_mean /
// running_var (when defined) updated in place as PyTorch does: r = (1 - momentum) r + momentum s,
// with the unbiased variance (kiln::compile captures the updates as in-place writes: no graph
// break). Not training: normalised by running_mean / running_var (which must be defined).
// weight and bias: per channel, optional.
Tensor batch_norm(const Tensor& x, const std::optional<Tensor>& running_mean,
                  const std::optional<Tensor>& running_var,
                  const std::optional<Tensor>& weight = {}, const std::optional<Tensor>& bias = {},
                  bool training = false, double momentum = 0.1, double eps = 1e-5);
// The same with the momentum a 0-d floating tensor: nn::BatchNorm's momentum = None, a
// cumulative average whose factor 1 / num_batches_tracked changes every batch, reaches a
// compiled step as a graph input instead of a constant.
Tensor batch_norm(const Tensor& x, const std::optional<Tensor>& running_mean,
                  const std::optional<Tensor>& running_var, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, bool training, const Tensor& momentum,
                  double eps = 1e-5);
// Group normalisation of x [N, C, *]: the C channels in num_groups groups, each normalised by
// its own mean and biased variance per sample; weight and bias per channel, optional.
Tensor group_norm(const Tensor& x, int64_t num_groups, const std::optional<Tensor>& weight = {},
                  const std::optional<Tensor>& bias = {}, double eps = 1e-5);
// ---- convolution and pooling over 1, 2 or 3 spatial dims (conv1d: x [N, C, L] or [C, L];
// conv2d: [N, C, H, W] or [C, H, W]; conv3d: [N, C, D, H, W] or [C, D, H, W]) ----
// Convolution with weight [O, C / groups, kernel...] (torch.nn.functional.conv1d/2d/3d):
// stride, padding (zeros) and dilation as one value or one per spatial dim. Output size per
// dim: (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1.
Tensor conv1d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = {},
              IntList stride = {1}, IntList padding = {0}, IntList dilation = {1},
              int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = {},
              IntList stride = {1}, IntList padding = {0}, IntList dilation = {1},
              int64_t groups = 1);
Tensor conv3d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = {},
              IntList stride = {1}, IntList padding = {0}, IntList dilation = {1},
              int64_t groups = 1);
// torch's padding="same" / "valid": Same pads so that the output keeps the input's size (stride
// 1 only; an odd total puts the extra element on the high side, as PyTorch), Valid pads nothing.
enum class ConvPadding { Same, Valid };
Tensor conv1d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
              IntList stride, ConvPadding padding, IntList dilation = {1}, int64_t groups = 1);
Tensor conv2d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
              IntList stride, ConvPadding padding, IntList dilation = {1}, int64_t groups = 1);
Tensor conv3d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
              IntList stride, ConvPadding padding, IntList dilation = {1}, int64_t groups = 1);
// ---- recurrent cells (torch.rnn_tanh_cell, rnn_relu_cell, lstm_cell, gru_cell) ----
// input [B, I] (or unbatched [I]), hidden state hx (and cx) [B, H] (or [H]), w_ih [G H, I],
// w_hh [G H, H], optional biases [G H]; PyTorch's gate order and formulas:
//   rnn:  h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)                          (G = 1)
//   lstm: i, f, g, o = the four slices of x W_ih^T + b_ih + h W_hh^T + b_hh     (G = 4)
//         c' = sigmoid(f) c + sigmoid(i) tanh(g);  h' = sigmoid(o) tanh(c')
//   gru:  r, z, n slices of gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh      (G = 3)
//         r = sigmoid(gi_r + gh_r); z = sigmoid(gi_z + gh_z); n = tanh(gi_n + r gh_n)
//         h' = n + z (h - n)
Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const std::optional<Tensor>& b_ih = {},
                     const std::optional<Tensor>& b_hh = {});
Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const std::optional<Tensor>& b_ih = {},
                     const std::optional<Tensor>& b_hh = {});
// Returns (h', c').
std::pair<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                    const Tensor& w_ih, const Tensor& w_hh,
                                    const std::optional<Tensor>& b_ih = {},
                                    const std::optional<Tensor>& b_hh = {});
Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const std::optional<Tensor>& b_ih = {}, const std::optional<Tensor>& b_hh = {});
// Transposed convolution (torch.nn.functional.conv_transpose1d/2d/3d, the same argument order)
// with weight [C, O / groups, kernel...]: the gradient of the convolution with respect to its
// input. Output size per dim: (in - 1) stride - 2 padding + dilation (kernel - 1) +
// output_padding + 1 (output_padding below stride or dilation).
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight,
                        const std::optional<Tensor>& bias = {}, IntList stride = {1},
                        IntList padding = {0}, IntList output_padding = {0}, int64_t groups = 1,
                        IntList dilation = {1});
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight,
                        const std::optional<Tensor>& bias = {}, IntList stride = {1},
                        IntList padding = {0}, IntList output_padding = {0}, int64_t groups = 1,
                        IntList dilation = {1});
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight,
                        const std::optional<Tensor>& bias = {}, IntList stride = {1},
                        IntList padding = {0}, IntList output_padding = {0}, int64_t groups = 1,
                        IntList dilation = {1});
// The maximum over each window (torch.nn.functional.max_pool1d/2d/3d); stride defaults to the
// kernel size; padding (at most half the kernel) never wins; ceil_mode rounds the output size up
// (a last window that starts inside the input or its padding). As torch, the gradient goes to
// one element per window: its first maximum.
Tensor max_pool1d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  IntList dilation = {1}, bool ceil_mode = false);
Tensor max_pool2d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  IntList dilation = {1}, bool ceil_mode = false);
Tensor max_pool3d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  IntList dilation = {1}, bool ceil_mode = false);
// max_poolNd and where each maximum is (LibTorch's max_poolNd_with_indices, torch's
// return_indices=True): per output, the flat index (int64) of its element in its [N, C] plane of
// the input, as torch gives them.
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, IntList kernel_size,
                                                   IntList stride = {}, IntList padding = {0},
                                                   IntList dilation = {1}, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, IntList kernel_size,
                                                   IntList stride = {}, IntList padding = {0},
                                                   IntList dilation = {1}, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, IntList kernel_size,
                                                   IntList stride = {}, IntList padding = {0},
                                                   IntList dilation = {1}, bool ceil_mode = false);
// The mean over each window (torch.nn.functional.avg_pool1d/2d/3d): divided by the window's
// elements inside the input and, with count_include_pad, its padding (never ceil_mode's
// overhang past the padding), as PyTorch; by divisor_override instead when given.
Tensor avg_pool1d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor avg_pool2d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor avg_pool3d(const Tensor& x, IntList kernel_size, IntList stride = {}, IntList padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Adaptive pooling to output_size (one value or one per spatial dim): output i of a dim of size
// `in` covers [floor(i in / out), ceil((i + 1) in / out)) (torch.nn.functional.adaptive_*).
Tensor adaptive_avg_pool1d(const Tensor& x, IntList output_size);
Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size);
Tensor adaptive_avg_pool3d(const Tensor& x, IntList output_size);
Tensor adaptive_max_pool1d(const Tensor& x, IntList output_size);
Tensor adaptive_max_pool2d(const Tensor& x, IntList output_size);
Tensor adaptive_max_pool3d(const Tensor& x, IntList output_size);
// The values and where each cell's maximum is (torch's return_indices=True): flat indices in
// each [N, C] plane of the input, the cell's first maximum (NaN counting as the largest); the
// gradient goes to that element.
std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x, IntList output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, IntList output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x, IntList output_size);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);
// Zeroes whole channels of x [N, C, H, W] (or [C, H, W]) with probability p and scales the rest
// by 1/(1-p) when training (torch.nn.functional.dropout2d).
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true,
                 Generator* generator = nullptr);
// Instance normalisation of x [N, C, *] (torch.nn.functional.instance_norm with input
// statistics): each sample's channel by its own mean and biased variance; weight and bias per
// channel, optional.
Tensor instance_norm(const Tensor& x, const std::optional<Tensor>& weight = {},
                     const std::optional<Tensor>& bias = {}, double eps = 1e-5);
// softmax(q k^T * scale [+ mask]) v over [..., L, E] tensors; is_causal masks j > i.
// attn_mask: bool (true = keep) or floating (added).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = {},
                                    Generator* generator = nullptr);

}  // namespace kiln
