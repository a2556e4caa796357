// Rewrites of a lowered graph that let the scheduler fuse more, each exact (the same values, bit
// for bit, as the graph before it).
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::inductor {

// `sum` and `mean` over every dim but the last of a view that flattens a contiguous value's
// leading dims (a linear layer's bias gradient: `g.view({B * T, C}).sum({0})` of a [B, T, C]
// gradient) read the value itself, over all its leading dims, so that they can fold columns in
// the kernel computing it; a `view` back to the original result's shape follows when keepdim
// is set. Exact: a column reduction folds the rows of the flattened leading dims in order, and
// splits them across threads, the same way whatever their shape (the eager reduction's outer
// path, which generated column kernels reproduce). Returns the number rewritten.
int64_t read_column_reductions_through_flattening(ir::Graph& graph);

// A copy (`to_copy` to the same dtype) of a contiguous value that nothing else reads, of a
// buffer a kernel of this graph computes, is that value: the copy goes, and its readers (a
// graph output, typically) take the value itself. The common case is a leaf's gradient in a
// graph that traced its own backward: autograd's accumulation copies a gradient whose memory
// could be shared, and here nothing else can see it. Exact (a copy changes no bits). Returns
// the number of copies removed.
int64_t elide_copies_of_unshared_values(ir::Graph& graph);

}  // namespace kiln::inductor
