// Neural-network functional ops (torch.nn.functional).
#pragma once

#include <optional>
#include <string>

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
// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);
// softmax(q k^T * scale [+ mask]) v over [..., L, E] tensors; is_causal masks j > i.
// attn_mask: bool (true = keep) or floating (added).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask = {},
                                    double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = {},
                                    Generator* generator = nullptr);

}  // namespace kiln
