// AOT autograd, step 4 (on demand): the backward graph for a call in which some outputs got no
// gradient (detached after the graph, unused). Their tangents are not zeros but *absent*, as
// eager autograd's engine sees them: every value computed only from absent tangents is absent
// too and is not computed, and a sum of gradient parts keeps only the parts that exist. With
// zeros instead, a derivative multiplying the tangent by an infinite saved value (rsqrt at 0)
// gave NaN in a gradient eager computes finite. Every node kept is recorded over its inputs'
// layouts (a view's strides are its input's, rearranged), so a part passed on for its sum has
// the sum's layout, or is copied into it.
#pragma once

#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::aot {

struct BackwardWithoutTangents {
  ir::Graph graph;  // the same placeholders; the absent tangents' are left unread
  // Per output of the full backward: its output in `graph`, or -1 (absent: no gradient).
  std::vector<int32_t> output_of;
  // The runtime attributes (random ops' seeds and offsets) `graph` keeps, as indices into the
  // full backward's runtime_attrs: the values to pass it, in order.
  std::vector<int32_t> runtime_kept;
};

// `backward`'s inputs are `num_saved` saved values, then one tangent per differentiated value;
// `arrived[t]` says whether tangent t has a gradient.
BackwardWithoutTangents backward_without_tangents(const ir::Graph& backward, int64_t num_saved,
                                                  const std::vector<bool>& arrived);

}  // namespace kiln::aot
