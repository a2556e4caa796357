// Small internal helpers over Attrs shared by the IR and the capture layer.
#pragma once

#include "kiln/ops/op.h"

namespace kiln::ir {

// `attrs` with attribute k replaced by `value`.
Attrs with_attr(const Attrs& attrs, size_t k, AttrValue value);

// Attribute equality as guards see it: floats compare bitwise, so a NaN constant equals itself
// and 0.0 differs from -0.0.
bool same_attr(const AttrValue& a, const AttrValue& b);

}  // namespace kiln::ir
