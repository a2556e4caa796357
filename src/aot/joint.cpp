// The joint graph (see joint.h): the forward graph adopted by a metadata-only run, then each
// call node's derivative formula applied in reverse node order, as the autograd engine would,
// but recording ops instead of computing them.
#include "aot/joint.h"

#include <mutex>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "capture/retrace.h"
#include "kiln/ops/pointwise.h"

namespace kiln::aot {

namespace {

uint64_t key_of(ir::ValueRef v) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(v.node)) << 32) |
         static_cast<uint32_t>(v.output);
}

// The backward half: gradients per forward value, summed as they arrive.
class BackwardTracer {
 public:
  explicit BackwardTracer(const ForwardNodes& forward)
      : forward_(forward), flows_(static_cast<size_t>(forward.num_nodes)) {}

  void seed(ir::ValueRef v, const Tensor& tangent) { accumulate(v, tangent); }

  // Applies every call node's derivative, last node first.
  void run(std::string& missing_derivative) {
    for (int32_t i = forward_.num_nodes - 1; i >= 0; --i) {
      const ir::Node& n = forward_.node(i);
      if (n.kind != ir::NodeKind::Call) continue;
      std::vector<Tensor> grads(n.outputs.size());
      bool any_grad = false;
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        auto it = grads_.find(key_of({i, static_cast<int32_t>(k)}));
        if (it == grads_.end()) continue;
        grads[k] = it->second;
        any_grad = true;
      }
      if (!any_grad) continue;
      uint32_t needs = 0;
      bool any_needed = false;
      for (size_t j = 0; j < n.inputs.size(); ++j)
        if (requires_grad(n.inputs[j])) {
          if (j < 32) needs |= 1u << j;
          any_needed = true;
        }
      if (!any_needed) continue;
      const Derivative& d = n.op->derivative;
      if (!d.fn) {
        if (missing_derivative.empty()) missing_derivative = n.op->name;
        continue;
      }
      // A copy: the formula records ops, which may move the node array of a live capture.
      const ir::Node node = n;
      apply_derivative(i, node, grads, needs);
    }
  }

  Tensor grad_tensor(ir::ValueRef v) const {
    auto it = grads_.find(key_of(v));
    return it == grads_.end() ? Tensor() : it->second;
  }
  std::vector<std::vector<bool>> take_flows() { return std::move(flows_); }

 private:
  const TensorMeta& info(ir::ValueRef v) const {
    return forward_.node(v.node).outputs[static_cast<size_t>(v.output)];
  }
  bool requires_grad(ir::ValueRef v) const { return info(v).requires_grad; }

  void accumulate(ir::ValueRef v, Tensor g) {
    auto [it, inserted] = grads_.try_emplace(key_of(v), g);
    if (!inserted) it->second = it->second + g;
  }

  void apply_derivative(int32_t i, const ir::Node& n, const std::vector<Tensor>& grads,
                        uint32_t needs) {
    const Derivative& d = n.op->derivative;
    std::vector<Tensor> ins(n.inputs.size()), outs(n.outputs.size());
    std::vector<TensorMeta> input_meta, output_meta;
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      const TensorMeta& m = info(n.inputs[j]);
      input_meta.emplace_back(m.dtype, m.sizes);
      if (j < 32 && ((d.saved_inputs >> j) & 1u)) ins[j] = forward_.value(n.inputs[j]);
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      output_meta.emplace_back(n.outputs[k].dtype, n.outputs[k].sizes);
      if (k < 32 && ((d.saved_outputs >> k) & 1u))
        outs[k] = forward_.value({i, static_cast<int32_t>(k)});
    }
    const BackwardCall call{*n.op, n.attrs, ins, outs, input_meta, output_meta, grads, needs};
    std::vector<Tensor> grad_inputs(n.inputs.size());
    d.fn(call, grad_inputs);
    std::vector<bool>& flows = flows_[static_cast<size_t>(i)];
    flows.assign(n.inputs.size(), false);
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      if (!grad_inputs[j].defined() || !requires_grad(n.inputs[j])) continue;
      flows[j] = true;
      accumulate(n.inputs[j],
                 autograd::gradient_for_input(input_meta[j], grad_inputs[j], n.op->name, j));
    }
  }

  const ForwardNodes& forward_;
  std::unordered_map<uint64_t, Tensor> grads_;
  std::vector<std::vector<bool>> flows_;  // per node, per input: a gradient given to it
};

}  // namespace

std::vector<Tensor> trace_backward(const ForwardNodes& forward,
                                   std::span<const std::pair<ir::ValueRef, Tensor>> seeds,
                                   std::span<const ir::ValueRef> wanted,
                                   std::string& missing_derivative,
                                   std::vector<std::vector<bool>>* gradient_flows) {
  BackwardTracer backward(forward);
  for (const auto& [v, g] : seeds) backward.seed(v, g);
  backward.run(missing_derivative);
  std::vector<Tensor> grads;
  for (ir::ValueRef v : wanted) grads.push_back(backward.grad_tensor(v));
  if (gradient_flows) *gradient_flows = backward.take_flows();
  return grads;
}

bool derivative_traces_without_values(const ir::Node& node,
                                      const std::function<const ir::Node&(int32_t)>& node_at) {
  // Per thread first (every backward traced inline scans its graph's nodes), then shared.
  thread_local std::unordered_map<const OpDef*, bool> seen;
  if (auto it = seen.find(node.op); it != seen.end()) return it->second;
  static std::mutex mu;
  static std::unordered_map<const OpDef*, bool> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(node.op); it != known.end()) return seen[node.op] = it->second;
  }
  // The node alone, its inputs made placeholders (constants as their 0-d values), traced as
  // AOT autograd traces a joint graph: a formula that reads a value throws there.
  ir::Graph g;
  std::vector<ir::ValueRef> ins;
  for (ir::ValueRef v : node.inputs) {
    const ir::Node& p = node_at(v.node);
    ins.push_back(p.kind == ir::NodeKind::Constant
                      ? g.add_constant(p.attrs.scalar(0), p.attrs.dtype(1))
                      : g.add_placeholder(p.outputs[static_cast<size_t>(v.output)]));
  }
  const ir::ValueRef call = g.add_call(*node.op, ins, node.attrs, node.outputs);
  std::vector<ir::ValueRef> values;
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    g.outputs.push_back({call.node, static_cast<int32_t>(k)});
    if (node.outputs[k].requires_grad && is_floating(node.outputs[k].dtype))
      values.push_back(g.outputs.back());
  }
  bool traceable = true;
  try {
    (void)trace_joint(g, values);
  } catch (const Error&) {
    traceable = false;
  }
  std::lock_guard<std::mutex> lock(mu);
  known[node.op] = traceable;
  return seen[node.op] = traceable;
}

JointGraph trace_joint(const ir::Graph& forward, std::span<const ir::ValueRef> values) {
  JointGraph joint;
  joint.num_forward_nodes = static_cast<int32_t>(forward.nodes.size());
  joint.num_forward_inputs = forward.num_inputs();
  joint.forward_outputs = forward.outputs;
  capture::MetadataOnlyRun run("AOT autograd's backward trace");
  run.adopt_graph(forward);
  const ForwardNodes nodes{
      static_cast<int32_t>(forward.nodes.size()),
      [&](int32_t i) -> const ir::Node& { return forward.nodes[static_cast<size_t>(i)]; },
      [&](ir::ValueRef v) { return run.value_tensor(v); }};
  std::vector<std::pair<ir::ValueRef, Tensor>> seeds;
  for (ir::ValueRef v : values) {
    const TensorMeta& m = forward.info(v);
    KILN_CHECK(is_floating(m.dtype), Error, "internal error: AOT autograd differentiates a ",
               m.dtype, " value");
    seeds.emplace_back(v, run.symbolic_input(TensorMeta(m.dtype, m.sizes)));
  }
  std::vector<ir::ValueRef> placeholders;
  std::vector<int32_t> input_index;
  for (size_t i = 0; i < forward.nodes.size(); ++i)
    if (forward.nodes[i].kind == ir::NodeKind::Placeholder) {
      placeholders.push_back({static_cast<int32_t>(i), 0});
      input_index.push_back(forward.nodes[i].input_index);
    }
  const std::vector<Tensor> input_grads =
      trace_backward(nodes, seeds, placeholders, joint.missing_derivative, &joint.gradient_flows);
  // The graph's outputs: the forward's, then each input's gradient (those that exist).
  std::vector<Tensor> results;
  for (ir::ValueRef v : forward.outputs) results.push_back(run.value_tensor(v));
  std::vector<int32_t> grad_slot(static_cast<size_t>(forward.num_inputs()), -1);
  for (size_t k = 0; k < placeholders.size(); ++k) {
    if (!input_grads[k].defined()) continue;
    grad_slot[static_cast<size_t>(input_index[k])] = static_cast<int32_t>(results.size());
    results.push_back(input_grads[k]);
  }
  joint.graph = run.take_graph(results);
  // Tangent placeholders follow the forward's, in seeding order.
  for (size_t i = static_cast<size_t>(joint.num_forward_nodes); i < joint.graph.nodes.size(); ++i)
    if (joint.graph.nodes[i].kind == ir::NodeKind::Placeholder)
      joint.tangents.push_back({static_cast<int32_t>(i), 0});
  KILN_CHECK(joint.tangents.size() == values.size(), Error,
             "internal error: AOT autograd's joint graph has ", joint.tangents.size(),
             " tangents for ", values.size(), " values");
  const std::vector<ir::ValueRef> outputs = joint.graph.outputs;
  joint.graph.outputs.assign(outputs.begin(),
                             outputs.begin() + static_cast<ptrdiff_t>(forward.outputs.size()));
  joint.forward_outputs = joint.graph.outputs;
  for (int32_t slot : grad_slot)
    joint.input_grads.push_back(slot < 0 ? std::nullopt
                                         : std::optional(outputs[static_cast<size_t>(slot)]));
  return joint;
}

}  // namespace kiln::aot
