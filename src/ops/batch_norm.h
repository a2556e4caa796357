// Batch normalisation in training mode as two fused ops (batch_norm.cpp): the forward takes the
// per-channel statistics in one pass over each channel and writes the normalised output in a
// second; the backward takes its two per-channel sums in one pass and writes the input's
// gradient in a second (the composite of public ops took about ten passes each way).
#pragma once

#include <optional>

#include "kiln/core/tensor.h"

namespace kiln::ops {

struct BatchNormTraining {
  Tensor y;       // the normalised input, scaled and shifted
  Tensor mean;    // [C], the batch's mean per channel
  Tensor invstd;  // [C], 1 / sqrt(var + eps)
  Tensor var;     // [C], the batch's biased variance (for the running estimate)
};

// x [N, C, *] normalised by its own per-channel statistics; differentiable in every input,
// to any order.
BatchNormTraining batch_norm_training(const Tensor& x, const std::optional<Tensor>& weight,
                                      const std::optional<Tensor>& bias, double eps);

}  // namespace kiln::ops
