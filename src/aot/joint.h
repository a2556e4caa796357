// AOT autograd, step 1: the joint graph. A captured forward graph is extended with the backward
// of some of its values, traced from the ops' derivative formulas on metadata-only tensors (no
// data is touched), into one graph: the forward's nodes unchanged and first, then one tangent
// placeholder per differentiated value, then the backward's nodes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::aot {

struct JointGraph {
  ir::Graph graph;
  int32_t num_forward_nodes = 0;   // nodes [0, num_forward_nodes) are the forward graph's
  int32_t num_forward_inputs = 0;  // its placeholders (graph inputs 0..n-1)
  std::vector<ir::ValueRef> forward_outputs;
  std::vector<ir::ValueRef> tangents;  // placeholder per differentiated value, in order
  // Per forward input: the value of its gradient, or none (needs no gradient, or no
  // differentiated value depends on it: zero).
  std::vector<std::optional<ir::ValueRef>> input_grads;
  // An op on the way from a differentiated value to an input that needs a gradient but has no
  // derivative: backward through the graph must fail as eager's would ("" when none).
  std::string missing_derivative;

  bool is_forward(int32_t node) const { return node < num_forward_nodes; }
};

// The joint graph of `forward` differentiated at `values` (forward values of floating dtype).
// Which forward values require grad is the graph's own metadata: placeholders' requires_grad,
// and each call output's requires_grad as the capture recorded it (so ops run under no_grad
// pass no gradient).
JointGraph trace_joint(const ir::Graph& forward, std::span<const ir::ValueRef> values);

}  // namespace kiln::aot
