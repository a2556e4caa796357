// The fused attention op (attention.cpp), for scaled_dot_product_attention (nn.cpp), which
// calls it when it applies and takes the composite otherwise.
#pragma once

#include <cstdint>

#include "kiln/ops/op.h"

namespace kiln::ops {

extern const OpDef& fused_attention_op;

// Sequence lengths the fused kernel takes: its causal mask compares positions as floats, exact
// below 2^24.
inline constexpr int64_t kMaxFusedAttentionPositions = int64_t{1} << 24;

}  // namespace kiln::ops
