#include "backends/inductor/graph_rewrites.h"

#include <algorithm>
#include <optional>

#include "backends/inductor/lowering.h"
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
  if (!lowering_as<ViewLowering>(n) || n.inputs.size() != 1) return v;
  const ir::ValueRef r = n.inputs[0];
  const TensorMeta &in = g.info(r), &out = g.info(v);
  if (in.sizes.size() <= out.sizes.size() || out.sizes.empty() ||
      in.sizes.back() != out.sizes.back() || in.storage_offset != out.storage_offset ||
      !contiguous(in) || !contiguous(out))
    return v;
  return r;
}

bool rewritable(const ir::Graph& g, const ir::Node& n) {
  const RowFoldLowering* fold = lowering_as<RowFoldLowering>(n);
  if (!fold || !fold->columns || n.inputs.size() != 1) return false;
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
  const OpDef& view = view_op();
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

namespace {

// The copy node i elides, as the value it copies, or nullopt. `readers[n][o]`: how many inputs
// (and graph outputs) read output o of node n.
std::optional<ir::ValueRef> elidable_copy_source(const ir::Graph& g, size_t i,
                                                 const std::vector<std::vector<int>>& readers) {
  const OpDef& to_copy = to_copy_op();
  const ir::Node& c = g.nodes[i];
  if (c.kind != ir::NodeKind::Call || c.op != &to_copy) return std::nullopt;
  const ir::ValueRef v = c.inputs[0];
  const TensorMeta& m = g.info(v);
  if (m.dtype != c.outputs[0].dtype || !ops::is_contiguous_layout(m)) return std::nullopt;
  auto read_once = [&](ir::ValueRef x) {
    return readers[static_cast<size_t>(x.node)][static_cast<size_t>(x.output)] == 1;
  };
  // Down the views to the buffer: each link read only by the next, the copy the only reader.
  ir::ValueRef at = v;
  while (true) {
    if (!read_once(at)) return std::nullopt;
    const ir::Node& n = g.nodes[static_cast<size_t>(at.node)];
    if (n.kind != ir::NodeKind::Call) return std::nullopt;  // a graph input or a constant
    if (n.op->kind != OpKind::View) {
      // A kernel's fresh buffer (an extern call's result might share memory with its inputs),
      // copied whole.
      if (n.op->kind == OpKind::Extern || n.outputs.size() != 1) return std::nullopt;
      int64_t whole = 1, copied = 1;
      for (int64_t s : n.outputs[0].sizes) whole *= s;
      for (int64_t s : m.sizes) copied *= s;
      if (whole != copied) return std::nullopt;
      return v;
    }
    at = n.inputs[0];
  }
}

}  // namespace

int64_t elide_copies_of_unshared_values(ir::Graph& graph) {
  const ir::Graph& g = graph;
  std::vector<std::vector<int>> readers(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) readers[i].assign(g.nodes[i].outputs.size(), 0);
  for (const ir::Node& n : g.nodes)
    for (ir::ValueRef v : n.inputs)
      ++readers[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
  for (ir::ValueRef v : g.outputs)
    ++readers[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
  std::vector<std::optional<ir::ValueRef>> source(g.nodes.size());
  bool any = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    source[i] = elidable_copy_source(g, i, readers);
    any = any || source[i].has_value();
  }
  if (!any) return 0;
  ir::GraphRebuild rebuild(g);
  int64_t elided = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!source[i]) {
      rebuild.copy(i);
      continue;
    }
    rebuild.replace(i, {rebuild.mapped(*source[i])});
    ++elided;
  }
  graph = rebuild.finish();
  return elided;
}

}  // namespace kiln::inductor
