// AOT autograd, step 1: the joint graph. A captured forward graph is extended with the backward
// of some of its values, traced from the ops' derivative formulas on metadata-only tensors (no
// data is touched), into one graph: the forward's nodes unchanged and first, then one tangent
// placeholder per differentiated value, then the backward's nodes.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
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
  // Per forward node, per input: whether the node's derivative gave that input a gradient (as
  // the autograd engine would: copy's never reaches the tensor it overwrites). Empty for nodes
  // no gradient reached.
  std::vector<std::vector<bool>> gradient_flows;

  bool is_forward(int32_t node) const { return node < num_forward_nodes; }
};

// The nodes a backward is traced from: the first `num_nodes` of a graph (a finished one, or
// the segment a tracer is recording), and a tensor holding one of their values to compute with.
struct ForwardNodes {
  int32_t num_nodes = 0;
  std::function<const ir::Node&(int32_t)> node;
  std::function<Tensor(ir::ValueRef)> value;
};

// Applies each call node's derivative formula, last node first, to the gradients flowing back
// from `seeds` (value, its gradient), as the autograd engine would, with the ops recorded by
// the capture running on this thread. A value's requires_grad (the graph's metadata) decides
// where gradients flow. Returns the gradient of each of `wanted` (undefined: none reaches it);
// `missing_derivative` gets the first op on the way that has no derivative formula.
// `gradient_flows`, when given, gets JointGraph::gradient_flows.
std::vector<Tensor> trace_backward(const ForwardNodes& forward,
                                   std::span<const std::pair<ir::ValueRef, Tensor>> seeds,
                                   std::span<const ir::ValueRef> wanted,
                                   std::string& missing_derivative,
                                   std::vector<std::vector<bool>>* gradient_flows = nullptr);

// Whether `node`'s derivative formula can be traced without reading tensor values (cumprod's
// reads its input, checking for zeros). Learnt once per op, on the first node met; `node_at`
// gives the nodes its inputs come from.
bool derivative_traces_without_values(const ir::Node& node,
                                      const std::function<const ir::Node&(int32_t)>& node_at);

// The joint graph of `forward` differentiated at `values` (forward values of floating dtype).
// Which forward values require grad is the graph's own metadata: placeholders' requires_grad,
// and each call output's requires_grad as the capture recorded it (so ops run under no_grad
// pass no gradient).
JointGraph trace_joint(const ir::Graph& forward, std::span<const ir::ValueRef> values);

}  // namespace kiln::aot
