// Partitioning the joint graph (see partition.h). The min-cut follows the construction of
// torch's default partitioner: each forward value v is an edge v_in → v_out whose capacity is
// the bytes saving v costs; the source feeds every value the backward cannot recompute (graph
// inputs, matrix products, reductions, indexing, library calls), and every forward value a backward
// op reads drains to the sink. Any finite source→sink cut is a set of values from which the
// backward can recompute what it reads with cheap ops; the minimum cut saves the fewest bytes.
#include "aot/partition.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kiln/ir/passes.h"

namespace kiln::aot {

namespace {

constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

// Graph values as keys of hash sets and maps.
struct ValueRefHash {
  size_t operator()(const ir::ValueRef& v) const noexcept {
    return std::hash<uint64_t>{}((static_cast<uint64_t>(static_cast<uint32_t>(v.node)) << 32) |
                                 static_cast<uint32_t>(v.output));
  }
};

int64_t bytes_of(const TensorMeta& m) {
  int64_t n = 1;
  for (int64_t s : m.sizes) n *= s;
  return n * itemsize(m.dtype);
}

// Max-flow by Dinic's algorithm over a small graph (a few thousand vertices at most).
class FlowNetwork {
 public:
  explicit FlowNetwork(size_t vertices) : adjacency_(vertices) {}

  void add_edge(size_t from, size_t to, int64_t capacity) {
    adjacency_[from].push_back(edges_.size());
    edges_.push_back({to, capacity});
    adjacency_[to].push_back(edges_.size());
    edges_.push_back({from, 0});
  }

  void max_flow(size_t source, size_t sink) {
    while (levels_from(source, sink)) {
      next_.assign(adjacency_.size(), 0);
      while (push(source, sink, kInfinite) > 0) {
      }
    }
  }

  // Vertices reachable from `source` through edges with capacity left: the source side of a
  // minimum cut once max_flow has run.
  std::vector<bool> reachable_from(size_t source) const {
    std::vector<bool> seen(adjacency_.size(), false);
    std::vector<size_t> stack{source};
    seen[source] = true;
    while (!stack.empty()) {
      const size_t u = stack.back();
      stack.pop_back();
      for (size_t e : adjacency_[u])
        if (edges_[e].capacity > 0 && !seen[edges_[e].to]) {
          seen[edges_[e].to] = true;
          stack.push_back(edges_[e].to);
        }
    }
    return seen;
  }

 private:
  struct Edge {
    size_t to;
    int64_t capacity;
  };

  bool levels_from(size_t source, size_t sink) {
    level_.assign(adjacency_.size(), -1);
    std::queue<size_t> q;
    level_[source] = 0;
    q.push(source);
    while (!q.empty()) {
      const size_t u = q.front();
      q.pop();
      for (size_t e : adjacency_[u])
        if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[u] + 1;
          q.push(edges_[e].to);
        }
    }
    return level_[sink] >= 0;
  }

  int64_t push(size_t u, size_t sink, int64_t limit) {
    if (u == sink) return limit;
    for (size_t& k = next_[u]; k < adjacency_[u].size(); ++k) {
      const size_t e = adjacency_[u][k];
      Edge& edge = edges_[e];
      if (edge.capacity <= 0 || level_[edge.to] != level_[u] + 1) continue;
      const int64_t pushed = push(edge.to, sink, std::min(limit, edge.capacity));
      if (pushed > 0) {
        edge.capacity -= pushed;
        edges_[e ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }

  std::vector<std::vector<size_t>> adjacency_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

// Whether the backward may recompute forward node `n` instead of reading it saved.
bool recomputable(const ir::Node& n) {
  if (n.kind == ir::NodeKind::Constant) return true;
  if (n.kind == ir::NodeKind::Placeholder) return false;
  switch (n.op->kind) {
    case OpKind::Pointwise:
    case OpKind::View:
    case OpKind::Random:  // with the forward's seed and offset: the same numbers
    case OpKind::Layout:  // copies
    // A row's softmax or norm costs a few passes over the row it returns, much less than
    // keeping it (torch's partitioner recomputes them too, decomposed).
    case OpKind::Composite:
      return true;
    default:  // matrix products and scans (compute), reductions (small outputs), indexing
      return false;
  }
}

// The forward values (not constants) that backward nodes read directly.
std::vector<ir::ValueRef> read_by_backward(const JointGraph& joint) {
  const ir::Graph& g = joint.graph;
  std::vector<ir::ValueRef> out;
  std::unordered_set<ir::ValueRef, ValueRefHash> seen;
  for (size_t i = static_cast<size_t>(joint.num_forward_nodes); i < g.nodes.size(); ++i)
    for (ir::ValueRef v : g.nodes[i].inputs)
      if (joint.is_forward(v.node) &&
          g.nodes[static_cast<size_t>(v.node)].kind != ir::NodeKind::Constant &&
          seen.insert(v).second)
        out.push_back(v);
  return out;
}

// The graph computing `outputs` of `g` from `given` values (its placeholders, in order);
// `runtime_index` gets, per runtime attribute of the result, its index in g.runtime_attrs.
ir::Graph extract(const ir::Graph& g, std::span<const ir::ValueRef> given,
                  std::span<const ir::ValueRef> outputs, std::vector<int32_t>& runtime_index) {
  std::vector<std::vector<ir::ValueRef>> mapped(g.nodes.size());
  // Each given value's placeholder in the result (the first, should one be given twice).
  std::unordered_map<ir::ValueRef, ir::ValueRef, ValueRefHash> placeholder_of;
  auto is_given = [&](ir::ValueRef v) { return placeholder_of.contains(v); };
  ir::Graph out;
  for (ir::ValueRef v : given) {
    const ir::Node& n = g.nodes[static_cast<size_t>(v.node)];
    const TensorMeta& m = g.info(v);
    // A graph input keeps its layout (views recorded on it assume it); any other value
    // arrives as a fresh contiguous tensor.
    const ir::ValueRef placeholder = out.add_placeholder(
        n.kind == ir::NodeKind::Placeholder ? m : TensorMeta::contiguous(m.dtype, m.sizes));
    placeholder_of.try_emplace(v, placeholder);
  }
  auto map_value = [&](ir::ValueRef v) {
    if (auto it = placeholder_of.find(v); it != placeholder_of.end()) return it->second;
    return mapped[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
  };
  // Which nodes must run: those outputs need, through values that are not given.
  std::vector<bool> needed(g.nodes.size(), false);
  std::vector<ir::ValueRef> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    const ir::ValueRef v = stack.back();
    stack.pop_back();
    if (is_given(v) || needed[static_cast<size_t>(v.node)]) continue;
    needed[static_cast<size_t>(v.node)] = true;
    for (ir::ValueRef in : g.nodes[static_cast<size_t>(v.node)].inputs) stack.push_back(in);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!needed[i]) continue;
    const ir::Node& n = g.nodes[i];
    switch (n.kind) {
      case ir::NodeKind::Placeholder:
        throw Error(detail::concat(
            "internal error: AOT autograd's partition needs graph input ", n.input_index,
            " in a graph that does not have it (a value was neither saved nor recomputable)"));
      case ir::NodeKind::Constant:
        mapped[i] = {out.add_constant(n.attrs.scalar(0), n.attrs.dtype(1))};
        break;
      case ir::NodeKind::Call: {
        std::vector<ir::ValueRef> ins;
        for (ir::ValueRef v : n.inputs) ins.push_back(map_value(v));
        std::vector<TensorMeta> metas = n.outputs;
        // A view of a given value that arrives contiguous (it was a strided view here) views
        // the contiguous tensor: its layout is re-derived from there. as_strided addresses the
        // storage by its attributes, which hold only over the layout they were recorded on.
        if (n.op->kind == OpKind::View &&
            !ir::addresses_alike(out.info(ins[0]), g.info(n.inputs[0]))) {
          KILN_CHECK(n.op->name != "as_strided", Error,
                     "internal error: AOT autograd's partition gives as_strided node %", i,
                     " an input laid out otherwise than when it was recorded; please report it");
          metas[0] = ir::view_layout(n, out.info(ins[0]));
          metas[0].requires_grad = n.outputs[0].requires_grad;
        }
        const ir::ValueRef first = out.add_call(*n.op, std::move(ins), n.attrs, metas, n.loc);
        for (size_t k = 0; k < n.outputs.size(); ++k)
          mapped[i].push_back({first.node, static_cast<int32_t>(k)});
        break;
      }
    }
  }
  for (ir::ValueRef v : outputs) out.outputs.push_back(map_value(v));
  for (size_t k = 0; k < g.runtime_attrs.size(); ++k) {
    const ir::RuntimeAttr& r = g.runtime_attrs[k];
    if (!needed[static_cast<size_t>(r.node)]) continue;
    out.runtime_attrs.push_back({mapped[static_cast<size_t>(r.node)][0].node, r.attr});
    runtime_index.push_back(static_cast<int32_t>(k));
  }
  return out;
}

// The two graphs once the saved values are chosen.
Partition split(const JointGraph& joint, const std::vector<ir::ValueRef>& saved_values) {
  const ir::Graph& g = joint.graph;
  Partition p;
  std::vector<ir::ValueRef> forward_inputs(static_cast<size_t>(joint.num_forward_inputs));
  for (int32_t i = 0; i < joint.num_forward_nodes; ++i) {
    const ir::Node& n = g.nodes[static_cast<size_t>(i)];
    if (n.kind == ir::NodeKind::Placeholder)
      forward_inputs[static_cast<size_t>(n.input_index)] = {i, 0};
  }
  std::vector<ir::ValueRef> forward_outputs = joint.forward_outputs;
  for (ir::ValueRef v : saved_values) {
    const ir::Node& n = g.nodes[static_cast<size_t>(v.node)];
    SavedValue s;
    s.bytes = bytes_of(g.info(v));
    s.is_input = n.kind == ir::NodeKind::Placeholder;
    s.index = s.is_input ? n.input_index : static_cast<int32_t>(forward_outputs.size());
    if (!s.is_input) forward_outputs.push_back(v);
    p.saved.push_back(s);
  }
  p.forward = extract(g, forward_inputs, forward_outputs, p.forward_runtime_index);
  std::vector<ir::ValueRef> backward_inputs = saved_values;
  backward_inputs.insert(backward_inputs.end(), joint.tangents.begin(), joint.tangents.end());
  std::vector<ir::ValueRef> grads;
  for (const auto& v : joint.input_grads)
    if (v) grads.push_back(*v);
  p.backward = extract(g, backward_inputs, grads, p.backward_runtime_index);
  return p;
}

}  // namespace

Partition partition_save_all(const JointGraph& joint) {
  return split(joint, read_by_backward(joint));
}

Partition partition_min_cut(const JointGraph& joint) {
  const ir::Graph& g = joint.graph;
  // One in/out vertex pair per forward value; constants are copied, never saved.
  std::vector<std::vector<size_t>> vertex(static_cast<size_t>(joint.num_forward_nodes));
  std::vector<ir::ValueRef> values;
  for (int32_t i = 0; i < joint.num_forward_nodes; ++i) {
    const ir::Node& n = g.nodes[static_cast<size_t>(i)];
    if (n.kind == ir::NodeKind::Constant) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      vertex[static_cast<size_t>(i)].push_back(values.size());
      values.push_back({i, static_cast<int32_t>(k)});
    }
  }
  const size_t source = 0, sink = 1;
  auto in = [](size_t value) { return 2 + 2 * value; };
  auto out = [](size_t value) { return 3 + 2 * value; };
  FlowNetwork net(2 + 2 * values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    const ir::ValueRef v = values[k];
    const ir::Node& n = g.nodes[static_cast<size_t>(v.node)];
    net.add_edge(in(k), out(k), std::max<int64_t>(bytes_of(g.info(v)), 1));
    if (!recomputable(n)) net.add_edge(source, in(k), kInfinite);
    for (ir::ValueRef u : n.inputs)
      if (!vertex[static_cast<size_t>(u.node)].empty())
        net.add_edge(out(vertex[static_cast<size_t>(u.node)][static_cast<size_t>(u.output)]), in(k),
                     kInfinite);
  }
  for (ir::ValueRef v : read_by_backward(joint))
    net.add_edge(out(vertex[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]), sink,
                 kInfinite);
  net.max_flow(source, sink);
  const std::vector<bool> source_side = net.reachable_from(source);
  std::vector<ir::ValueRef> saved;
  for (size_t k = 0; k < values.size(); ++k)
    if (source_side[in(k)] && !source_side[out(k)]) saved.push_back(values[k]);
  return split(joint, saved);
}

}  // namespace kiln::aot
