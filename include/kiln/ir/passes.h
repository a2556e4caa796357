// Small graph passes, each separate: dead-code elimination and common-subexpression
// elimination. Both keep placeholders (the calling convention) and renumber the rest. And a
// check of the views' recorded layouts, which backends that address memory rely on.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Removes call and constant nodes that no output depends on. Returns the number removed.
int64_t eliminate_dead_code(Graph& g);
// Merges call nodes with the same op, inputs and attributes (random ops never merge: two draws
// differ; nor factories: sizes that coincide at one size only would give it a graph of its
// own), and constants with the same value. Returns the number merged.
int64_t eliminate_common_subexpressions(Graph& g);

// Throws kiln::Error (an internal error, naming `who`, the node and both layouts) unless every
// view node's recorded output layout is what its op makes of its input's recorded layout. A
// backend that addresses a view through its recorded strides (inductor) would otherwise read
// the wrong elements; the eager interpreter re-runs views, so a wrong record passes there.
void check_view_layouts(const Graph& g, std::string_view who);
// The layout the view node `n` makes of an input laid out as `in` (as_strided: its attributes).
TensorMeta view_layout(const Node& n, const TensorMeta& in);
// Whether two layouts address the same elements: same dtype and sizes, and the same offset and
// strides except where they address nothing (strides of dims of size 1, all of an empty tensor).
bool addresses_alike(const TensorMeta& a, const TensorMeta& b);
// Whether `n` is a call of a view op.
bool is_view(const Node& n);
// The value a chain of views starts from (v itself when it is not a view's result).
ValueRef root_of(const Graph& g, ValueRef v);

}  // namespace kiln::ir
