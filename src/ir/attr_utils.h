// Small internal helpers over Attrs shared by the IR and the capture layer.
#pragma once

#include "kiln/ir/graph.h"
#include "kiln/ops/op.h"

namespace kiln::ir {

// `attrs` with attribute k replaced by `value`.
Attrs with_attr(const Attrs& attrs, size_t k, AttrValue value);

// Attribute equality as guards see it: floats compare bitwise, so a NaN constant equals itself
// and 0.0 differs from -0.0.
bool same_attr(const AttrValue& a, const AttrValue& b);

// An as_strided node's storage offset is absolute, recorded for its input's offset in the graph;
// graph inputs are guarded without their offsets (same_guarded_meta), so when the tensor the
// node reads at run time starts elsewhere than the graph recorded, the offset moves by as much.
// Sets `moved` and returns true when node n (of any op), run on `inputs`, must take other
// attributes.
bool as_strided_attrs_at(const Graph& g, const Node& n, std::span<const Tensor> inputs,
                         Attrs& moved);

}  // namespace kiln::ir
