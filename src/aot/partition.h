// AOT autograd, step 2: splitting the joint graph into a forward graph and a backward graph.
// The forward computes the outputs and the values the backward needs (the *saved* values);
// the backward recomputes what is cheaper to recompute than to keep, from the saved values
// and the tangents. Which values to save is a minimum cut (see partition.cpp).
#pragma once

#include <vector>

#include "aot/joint.h"

namespace kiln::aot {

// Where a saved value comes from when the forward runs: one of the forward graph's inputs
// (kept as it is, nothing copied) or one of its extra outputs.
struct SavedValue {
  bool is_input = false;
  int32_t index = 0;  // input number, or output number of the forward graph
  int64_t bytes = 0;
};

struct Partition {
  // Forward inputs → the joint's forward outputs, then the saved values that are not inputs.
  ir::Graph forward;
  // The saved values (in `saved` order), then the tangents → the gradient of each forward
  // input whose JointGraph::input_grads entry exists, in input order.
  ir::Graph backward;
  std::vector<SavedValue> saved;
  // For each runtime attribute (random seed/offset) of each half: its index in the joint
  // graph's runtime_attrs (which are the forward graph's). A random op recomputed in the
  // backward gets the forward's values, so it draws the same numbers.
  std::vector<int32_t> forward_runtime_index, backward_runtime_index;
  int64_t saved_bytes() const {
    int64_t b = 0;
    for (const SavedValue& s : saved) b += s.bytes;
    return b;
  }
};

// The min-cut partition: saves the set of forward values of least total size from which the
// backward can recompute all it needs by cheap ops (pointwise, views); matrix products,
// reductions and other expensive or library ops are never recomputed.
Partition partition_min_cut(const JointGraph& joint);
// The partition that saves every forward value the backward reads directly and recomputes
// nothing: what the eager autograd engine keeps, the reference the min-cut is measured by.
Partition partition_save_all(const JointGraph& joint);

}  // namespace kiln::aot
