// Small internal helpers over Attrs shared by the IR and the capture layer.
#pragma once

#include "kiln/ops/op.h"

namespace kiln::ir {

// `attrs` with attribute k replaced by `value`.
Attrs with_attr(const Attrs& attrs, size_t k, AttrValue value);

}  // namespace kiln::ir
