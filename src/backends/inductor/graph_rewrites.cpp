#include "backends/inductor/graph_rewrites.h"

#include <algorithm>

#include "kiln/ops/op.h"
#include "ops/op_utils.h"

namespace kiln::inductor {
namespace {

bool contiguous(const TensorMeta& m) {
  return m.strides == TensorMeta::contiguous(m.dtype, m.sizes).strides;
}

// The value whose leading dims view v flattens (v = view(r, [N, C]) or any shape with r's last
// dim and fewer leading dims, both contiguous), or v itself.
ir::ValueRef flattened_from(const ir::Graph& g, ir::ValueRef v) {
  const ir::Node& n = g.nodes[static_cast<size_t>(v.node)];
  if (n.kind != ir::NodeKind::Call || n.op->name != "view" || n.inputs.size() != 1) return v;
  const ir::ValueRef r = n.inputs[0];
  const TensorMeta &in = g.info(r), &out = g.info(v);
  if (in.sizes.size() <= out.sizes.size() || out.sizes.empty() ||
      in.sizes.back() != out.sizes.back() || in.storage_offset != out.storage_offset ||
      !contiguous(in) || !contiguous(out))
    return v;
  return r;
}

// Whether `dims` (negative: from the end) are every dim of a rank-`rank` tensor but the last.
bool all_but_last(IntList dims, int64_t rank) {
  if (static_cast<int64_t>(dims.size()) != rank - 1) return false;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    d = d < 0 ? d + rank : d;
    if (d < 0 || d >= rank - 1 || seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

bool rewritable(const ir::Graph& g, const ir::Node& n) {
  if (n.kind != ir::NodeKind::Call || (n.op->name != "sum" && n.op->name != "mean") ||
      n.inputs.size() != 1)
    return false;
  const ir::ValueRef v = n.inputs[0];
  return flattened_from(g, v) != v && all_but_last(n.attrs.ints(0), g.info(v).sizes.ssize());
}

}  // namespace

int64_t read_column_reductions_through_flattening(ir::Graph& graph) {
  const ir::Graph& g = graph;
  if (std::none_of(g.nodes.begin(), g.nodes.end(),
                   [&](const ir::Node& n) { return rewritable(g, n); }))
    return 0;
  static const OpDef& view = *find_op("view");
  ir::Graph out;
  std::vector<std::vector<ir::ValueRef>> value_of(g.nodes.size());
  auto mapped = [&](ir::ValueRef v) {
    return value_of[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
  };
  int64_t rewritten = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind == ir::NodeKind::Placeholder) {
      value_of[i] = {out.add_placeholder(n.outputs[0])};
      continue;
    }
    if (n.kind == ir::NodeKind::Constant) {
      value_of[i] = {out.add_constant(n.attrs.scalar(0), n.attrs.dtype(1))};
      continue;
    }
    std::vector<ir::ValueRef> ins;
    for (ir::ValueRef v : n.inputs) ins.push_back(mapped(v));
    if (!rewritable(g, n)) {
      const ir::ValueRef first = out.add_call(*n.op, std::move(ins), n.attrs, n.outputs, n.loc);
      for (int32_t k = 0; k < static_cast<int32_t>(n.outputs.size()); ++k)
        value_of[i].push_back({first.node, k});
      continue;
    }
    // sum / mean (attributes: dims, keepdim[, dtype]) of the flattened value itself.
    const ir::ValueRef r = flattened_from(g, n.inputs[0]);
    const TensorMeta& whole = g.info(r);
    const int64_t rank = whole.sizes.ssize();
    std::vector<int64_t> dims;
    for (int64_t d = 0; d + 1 < rank; ++d) dims.push_back(d);
    Attrs attrs;
    for (size_t k = 0; k < n.attrs.size(); ++k)
      attrs.push_back(k == 0 ? ops::ints_attr(dims) : n.attrs[k]);
    const bool keepdim = n.attrs.b(1);
    const TensorMeta& result = n.outputs[0];
    Shape sizes(keepdim ? static_cast<size_t>(rank) : 1, 1);
    sizes.back() = whole.sizes.back();
    ir::ValueRef folded = out.add_call(*n.op, {mapped(r)}, std::move(attrs),
                                       {TensorMeta::contiguous(result.dtype, sizes)}, n.loc);
    if (sizes != result.sizes)
      folded = out.add_call(view, {folded}, {ops::ints_attr(result.sizes)}, {result}, n.loc);
    value_of[i] = {folded};
    ++rewritten;
  }
  for (ir::ValueRef v : g.outputs) out.outputs.push_back(mapped(v));
  out.input_writes = g.input_writes;  // outputs and inputs keep their positions
  for (const ir::RuntimeAttr& r : g.runtime_attrs)
    out.runtime_attrs.push_back({value_of[static_cast<size_t>(r.node)][0].node, r.attr});
  graph = std::move(out);
  return rewritten;
}

}  // namespace kiln::inductor
