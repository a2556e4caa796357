// Parameter initialisation (torch.nn.init): each function fills a tensor in place, without
// recording autograd history, with PyTorch's formulas, and returns it. Fans are PyTorch's: for a
// tensor of at least 2 dims, fan_in = size(1) * receptive field and fan_out = size(0) *
// receptive field (the product of the dims after the first two).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {
class Generator;
}

namespace kiln::nn::init {

// The recommended gain for a nonlinearity: "linear", "conv1d/2d/3d", "sigmoid": 1; "tanh": 5/3;
// "relu": sqrt(2); "leaky_relu": sqrt(2 / (1 + slope^2)) (slope `param`, default 0.01);
// "selu": 3/4. ValueError for another name.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = {});
// (fan_in, fan_out) of a tensor of at least 2 dims (ValueError otherwise).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
// N(mean, std^2) truncated to [a, b] (torch.nn.init.trunc_normal_): drawn by the inverse CDF
// of the truncated distribution, so every value lies in [a, b] whatever the bounds.
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0,
                      double b = 2.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// The identity in a 2-D tensor (ones on the diagonal, zeros elsewhere).
Tensor& eye_(Tensor& t);
// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// U(-b, b), b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a), fan the mode's
// ("fan_in" or "fan_out").
Tensor& kaiming_uniform_(Tensor& t, double a = 0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// N(0, std^2), std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, double a = 0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// A (semi-)orthogonal matrix, times gain: the Q of the QR decomposition of a matrix of N(0, 1)
// draws with R's diagonal made positive (as PyTorch); dims after the first are flattened.
Tensor& orthogonal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace kiln::nn::init
