#include "backends/inductor/graph_rewrites.h"

#include <algorithm>

#include "backends/inductor/schedule.h"
#include "ir/graph_rebuild.h"
#include "kiln/ops/op.h"
#include "ops/op_utils.h"

namespace kiln::inductor {
namespace {

bool contiguous(const TensorMeta& m) {
  return same_addressing(m.sizes, m.strides, contiguous_strides(m.sizes));
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

bool rewritable(const ir::Graph& g, const ir::Node& n) {
  if (n.kind != ir::NodeKind::Call || (n.op->name != "sum" && n.op->name != "mean") ||
      n.inputs.size() != 1)
    return false;
  const ir::ValueRef v = n.inputs[0];
  return flattened_from(g, v) != v &&
         reduces_all_but_last(n.attrs.ints(0), g.info(v).sizes.ssize());
}

}  // namespace

int64_t read_column_reductions_through_flattening(ir::Graph& graph) {
  const ir::Graph& g = graph;
  if (std::none_of(g.nodes.begin(), g.nodes.end(),
                   [&](const ir::Node& n) { return rewritable(g, n); }))
    return 0;
  static const OpDef& view = *find_op("view");
  ir::GraphRebuild rebuild(g);
  ir::Graph& out = rebuild.out();
  int64_t rewritten = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!rewritable(g, n)) {
      rebuild.copy(i);
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
    const TensorMeta& result = n.outputs[0];
    Shape sizes(n.attrs.b(1) ? static_cast<size_t>(rank) : 1, 1);  // keepdim or not
    sizes.back() = whole.sizes.back();
    ir::ValueRef folded = out.add_call(*n.op, {rebuild.mapped(r)}, std::move(attrs),
                                       {TensorMeta::contiguous(result.dtype, sizes)}, n.loc);
    if (sizes != result.sizes)
      folded = out.add_call(view, {folded}, {ops::ints_attr(result.sizes)}, {result}, n.loc);
    rebuild.replace(i, {folded});
    ++rewritten;
  }
  graph = rebuild.finish();
  return rewritten;
}

}  // namespace kiln::inductor
