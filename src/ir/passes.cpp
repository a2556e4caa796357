// Dead-code and common-subexpression elimination over the graph IR.
#include "kiln/ir/passes.h"

#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln::ir {

namespace {
// Keeps the nodes for which keep[i] is true (placeholders always), remapping references
// through `replace` first (a node's uses redirected to an equivalent earlier node).
void rebuild(Graph& g, const std::vector<bool>& keep, const std::vector<int32_t>& replace) {
  std::vector<int32_t> new_index(g.nodes.size(), -1);
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  auto remap = [&](ValueRef v) { return ValueRef{new_index[replace[v.node]], v.output}; };
  std::vector<RuntimeAttr> runtime;
  size_t next_runtime = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool is_kept = keep[i] && replace[i] == static_cast<int32_t>(i);
    while (next_runtime < g.runtime_attrs.size() &&
           g.runtime_attrs[next_runtime].node == static_cast<int32_t>(i)) {
      if (is_kept)
        runtime.push_back({static_cast<int32_t>(kept.size()), g.runtime_attrs[next_runtime].attr});
      ++next_runtime;
    }
    if (!is_kept) continue;
    Node n = std::move(g.nodes[i]);
    for (ValueRef& v : n.inputs) v = remap(v);
    new_index[i] = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(n));
  }
  for (ValueRef& v : g.outputs) v = remap(v);
  g.nodes = std::move(kept);
  g.runtime_attrs = std::move(runtime);
}

std::vector<int32_t> identity(size_t n) {
  std::vector<int32_t> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = static_cast<int32_t>(i);
  return r;
}
}  // namespace

int64_t eliminate_dead_code(Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (ValueRef v : g.outputs) live[v.node] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (g.nodes[i].kind == NodeKind::Placeholder) live[i] = true;
    if (!live[i]) continue;
    for (ValueRef v : g.nodes[i].inputs) live[v.node] = true;
  }
  int64_t removed = 0;
  for (bool l : live) removed += !l;
  if (removed) rebuild(g, live, identity(g.nodes.size()));
  return removed;
}

int64_t eliminate_common_subexpressions(Graph& g) {
  std::vector<int32_t> replace = identity(g.nodes.size());
  std::unordered_map<uint64_t, std::vector<int32_t>> seen;  // node hash -> candidates
  int64_t merged = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind == NodeKind::Placeholder) continue;
    for (ValueRef& v : n.inputs) v.node = replace[v.node];
    // Random ops never merge (two draws differ), nor do factories: their attributes may be
    // sizes that coincide at one size only (arange(t) and arange(vocab) at t == vocab), and
    // merging them there would make that size's graph differ from every other's (a compile of
    // its own under dynamic shapes); they are cheap to repeat.
    if (n.kind == NodeKind::Call && (n.op->kind == OpKind::Random || n.op->kind == OpKind::Factory))
      continue;
    // A single-node graph's hash is a cheap structural key for the node.
    Graph one;
    one.nodes.push_back(n);
    const uint64_t key = one.hash();
    bool found = false;
    for (int32_t j : seen[key]) {
      const Node& m = g.nodes[j];
      if (m.kind == n.kind && m.op == n.op && m.inputs == n.inputs && m.attrs == n.attrs &&
          m.outputs == n.outputs) {
        replace[i] = j;
        ++merged;
        found = true;
        break;
      }
    }
    if (!found) seen[key].push_back(static_cast<int32_t>(i));
  }
  if (merged) rebuild(g, std::vector<bool>(g.nodes.size(), true), replace);
  return merged;
}

namespace {
std::string layout_text(const TensorMeta& m) {
  return detail::concat(IntList(m.sizes), " strides ", IntList(m.strides), " offset ",
                        m.storage_offset);
}
}  // namespace

bool is_view(const Node& n) { return n.kind == NodeKind::Call && n.op->kind == OpKind::View; }

ValueRef root_of(const Graph& g, ValueRef v) {
  while (is_view(g.nodes[static_cast<size_t>(v.node)]))
    v = g.nodes[static_cast<size_t>(v.node)].inputs[0];
  return v;
}

bool addresses_alike(const TensorMeta& a, const TensorMeta& b) {
  if (a.dtype != b.dtype || a.sizes != b.sizes) return false;
  int64_t numel = 1;
  for (int64_t s : a.sizes) numel *= s;
  if (numel == 0) return true;
  if (a.storage_offset != b.storage_offset || a.strides.size() != b.strides.size()) return false;
  for (size_t d = 0; d < a.sizes.size(); ++d)
    if (a.sizes[d] != 1 && a.strides[d] != b.strides[d]) return false;
  return true;
}

TensorMeta view_layout(const Node& n, const TensorMeta& in) {
  if (n.op->name == "as_strided")  // laid out by its attributes (bounds checked when recorded)
    return TensorMeta(in.dtype, n.attrs.ints(0), n.attrs.ints(1),
                      n.attrs.has(2) ? n.attrs.i(2) : in.storage_offset, false);
  // The view built over a tensor with the input's layout and no storage (nothing is read).
  const Tensor base(
      std::make_shared<TensorImpl>(nullptr, in.storage_offset, in.sizes, in.strides, in.dtype));
  const Tensor view = n.op->view(OpCall{*n.op, std::span<const Tensor>(&base, 1), n.attrs});
  return TensorMeta(view.dtype(), view.sizes().vec(), view.strides().vec(), view.storage_offset(),
                    false);
}

void check_view_layouts(const Graph& g, std::string_view who) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Call || n.op->kind != OpKind::View) continue;
    const TensorMeta& in = g.info(n.inputs[0]);
    const TensorMeta want = view_layout(n, in);
    KILN_CHECK(addresses_alike(n.outputs[0], want), Error, "internal error: ", who, ": node %", i,
               " (", n.op->name, ") is recorded as ", layout_text(n.outputs[0]),
               " but viewing its input (", layout_text(in), ") gives ", layout_text(want),
               "; please report it");
  }
}

}  // namespace kiln::ir
