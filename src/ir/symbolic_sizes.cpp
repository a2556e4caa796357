// Dynamic shapes, the graph side: sites, generalisation into symbols, binding (symbolic_sizes.h).
#include "ir/symbolic_sizes.h"

#include <algorithm>
#include <map>

#include "ir/attr_utils.h"
#include "ir/compare.h"
#include "ir/hashing.h"

namespace kiln::ir {

namespace {

// Calls f(site, value) for every site of g, in the fixed order: per node, a placeholder's sizes
// then strides; a call's integer attributes (list elements in order), then per output its
// sizes, strides and storage offset.
template <class F>
void for_each_site(const Graph& g, F&& f) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const auto node = static_cast<int32_t>(i);
    if (n.kind == NodeKind::Constant) continue;
    if (n.kind == NodeKind::Call)
      for (size_t k = 0; k < n.attrs.size(); ++k) {
        if (is_runtime_attr(g, i, k)) continue;
        const auto slot = static_cast<int32_t>(k);
        if (const int64_t* v = std::get_if<int64_t>(&n.attrs[k]))
          f(SizeSite{SizeSite::Kind::Attr, node, slot, -1}, *v);
        else if (const auto* list = std::get_if<std::vector<int64_t>>(&n.attrs[k]))
          for (size_t e = 0; e < list->size(); ++e)
            f(SizeSite{SizeSite::Kind::Attr, node, slot, static_cast<int32_t>(e)}, (*list)[e]);
      }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const TensorMeta& m = n.outputs[o];
      const auto slot = static_cast<int32_t>(o);
      for (size_t d = 0; d < m.sizes.size(); ++d)
        f(SizeSite{SizeSite::Kind::Size, node, slot, static_cast<int32_t>(d)}, m.sizes[d]);
      for (size_t d = 0; d < m.strides.size(); ++d)
        f(SizeSite{SizeSite::Kind::Stride, node, slot, static_cast<int32_t>(d)}, m.strides[d]);
      if (n.kind == NodeKind::Call)
        f(SizeSite{SizeSite::Kind::Offset, node, slot, -1}, m.storage_offset);
    }
  }
}

// Calls f(node, attribute, value) for every number of g that is not a size: a constant's
// value, a call's Scalar and floating attributes (runtime attributes excluded).
template <class F>
void for_each_scalar_site(const Graph& g, F&& f) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Constant) f(i, size_t{0}, n.attrs[0]);
    if (n.kind != NodeKind::Call) continue;
    for (size_t k = 0; k < n.attrs.size(); ++k)
      if ((std::holds_alternative<Scalar>(n.attrs[k]) ||
           std::holds_alternative<double>(n.attrs[k])) &&
          !is_runtime_attr(g, i, k))
        f(i, k, n.attrs[k]);
  }
}

// An attribute is a site when it is an integer or a list of them, a scalar site when it is a
// number of another kind; two graphs equal but for sizes and scalars have the same kinds of
// attributes, list lengths and scalar dtypes.
bool same_attr_but_sizes(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (std::holds_alternative<int64_t>(a) || std::holds_alternative<double>(a)) return true;
  if (const auto* x = std::get_if<std::vector<int64_t>>(&a))
    return x->size() == std::get<std::vector<int64_t>>(b).size();
  if (const auto* x = std::get_if<Scalar>(&a)) return x->dtype() == std::get<Scalar>(b).dtype();
  return same_attr(a, b);
}

bool same_layout_rank(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.sizes.size() == b.sizes.size() &&
         a.strides.size() == b.strides.size() && a.requires_grad == b.requires_grad;
}

std::string input_name(int32_t input, const std::function<std::string(int32_t)>& label) {
  return label ? label(input) : detail::concat("input ", input);
}

std::string site_text(const Graph& g, const SizeSite& s,
                      const std::function<std::string(int32_t)>& label) {
  const Node& n = g.nodes[static_cast<size_t>(s.node)];
  const std::string where = n.kind == NodeKind::Placeholder
                                ? input_name(n.input_index, label)
                                : detail::concat("%", s.node, " (", n.op->name, ")");
  switch (s.kind) {
    case SizeSite::Kind::Size:
      return detail::concat("dim ", s.element, " of ", where);
    case SizeSite::Kind::Stride:
      return detail::concat("stride ", s.element, " of ", where);
    case SizeSite::Kind::Offset:
      return detail::concat("the storage offset of ", where);
    case SizeSite::Kind::Attr: {
      const std::string name = static_cast<size_t>(s.slot) < n.op->attr_names.size()
                                   ? std::string(n.op->attr_names[static_cast<size_t>(s.slot)])
                                   : detail::concat("#", s.slot);
      return s.element < 0 ? detail::concat(name, " of ", where)
                           : detail::concat(name, "[", s.element, "] of ", where);
    }
  }
  return where;
}

// An attribute naming dims (dim, dims, start_dim, ...) holds indices, never sizes.
bool names_dims(const Graph& g, const SizeSite& s) {
  if (s.kind != SizeSite::Kind::Attr) return false;
  const Node& n = g.nodes[static_cast<size_t>(s.node)];
  return static_cast<size_t>(s.slot) < n.op->attr_names.size() &&
         n.op->attr_names[static_cast<size_t>(s.slot)].find("dim") != std::string_view::npos;
}

}  // namespace

std::vector<SizeSite> size_sites(const Graph& g) {
  std::vector<SizeSite> sites;
  for_each_site(g, [&](const SizeSite& s, int64_t) { sites.push_back(s); });
  return sites;
}

std::vector<int64_t> size_site_values(const Graph& g) {
  std::vector<int64_t> values;
  for_each_site(g, [&](const SizeSite&, int64_t v) { values.push_back(v); });
  return values;
}

std::string describe_site(const Graph& g, const SizeSite& site) { return site_text(g, site, {}); }

bool same_node_but_sizes(const Graph& a, const Graph& b, size_t i) {
  const Node& x = a.nodes[i];
  const Node& y = b.nodes[i];
  if (x.kind != y.kind || x.op != y.op || x.inputs != y.inputs ||
      x.attrs.size() != y.attrs.size() || x.outputs.size() != y.outputs.size())
    return false;
  for (size_t k = 0; k < x.attrs.size(); ++k)
    if (!(is_runtime_attr(a, i, k) ? x.attrs[k].index() == y.attrs[k].index()
                                   : same_attr_but_sizes(x.attrs[k], y.attrs[k])))
      return false;
  for (size_t o = 0; o < x.outputs.size(); ++o)
    if (!same_layout_rank(x.outputs[o], y.outputs[o])) return false;
  return true;
}

bool equal_but_sizes(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size() || a.outputs != b.outputs ||
      a.runtime_attrs != b.runtime_attrs || a.input_writes != b.input_writes)
    return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (!same_node_but_sizes(a, b, i)) return false;
  return true;
}

std::string structural_difference(const Graph& a, const Graph& b, int32_t* at) {
  if (at) *at = -1;
  const size_t n = std::min(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < n; ++i) {
    if (same_node_but_sizes(a, b, i)) continue;
    if (at) *at = static_cast<int32_t>(i);
    const Node& x = a.nodes[i];
    const Node& y = b.nodes[i];
    auto name = [](const Node& node) {
      return node.op                              ? std::string(node.op->name)
             : node.kind == NodeKind::Placeholder ? std::string("an input")
                                                  : std::string("a constant");
    };
    if (x.kind != y.kind || x.op != y.op)
      return detail::concat("node ", i, " is ", name(y), " where the cached graph has ", name(x));
    if (x.inputs != y.inputs)
      return detail::concat("node ", i, " (", name(y), ") takes other inputs");
    return detail::concat("node ", i, " (", name(y), ") has other attributes or ranks");
  }
  if (a.nodes.size() != b.nodes.size()) {
    // (b's first extra node, or its last when it stops early: where its loop ran on or ended.)
    if (at && !b.nodes.empty()) *at = static_cast<int32_t>(std::min(n, b.nodes.size() - 1));
    return detail::concat("the graph has ", b.num_calls(), " ops where the cached one has ",
                          a.num_calls());
  }
  if (a.outputs != b.outputs || a.runtime_attrs != b.runtime_attrs ||
      a.input_writes != b.input_writes)
    return "the graph returns or writes other values";
  return "";
}

bool input_sizes_differ(const Graph& a, const Graph& b) {
  const size_t n = std::min(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < n; ++i)
    if (a.nodes[i].kind == NodeKind::Placeholder && b.nodes[i].kind == NodeKind::Placeholder &&
        a.nodes[i].outputs[0].sizes != b.nodes[i].outputs[0].sizes)
      return true;
  return false;
}

uint64_t hash_but_sizes(const Graph& g) {
  Hasher h;
  h.add(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    h.add(static_cast<uint64_t>(n.kind));
    if (n.op) h.add_bytes(n.op->name);
    for (ValueRef v : n.inputs) h.add((static_cast<uint64_t>(v.node) << 8) ^ v.output);
    for (size_t k = 0; k < n.attrs.size(); ++k) {
      const AttrValue& a = n.attrs[k];
      if (const auto* list = std::get_if<std::vector<int64_t>>(&a))
        h.add(list->size());
      else if (const auto* scalar = std::get_if<Scalar>(&a))
        h.add(static_cast<uint64_t>(scalar->dtype()));
      else if (!std::holds_alternative<int64_t>(a) && !std::holds_alternative<double>(a) &&
               !is_runtime_attr(g, i, k))
        h.add(a);
    }
    for (const TensorMeta& m : n.outputs) {
      h.add(static_cast<uint64_t>(m.dtype));
      h.add(m.sizes.size());
      h.add(m.requires_grad);
    }
  }
  for (ValueRef v : g.outputs) h.add((static_cast<uint64_t>(v.node) << 8) ^ v.output);
  for (const InputWrite& w : g.input_writes)
    h.add((static_cast<uint64_t>(w.output) << 32) ^ static_cast<uint32_t>(w.input));
  return h.h;
}

size_t input_size_site(const Graph& g, int32_t input, int32_t dim) {
  size_t found = std::string::npos, j = 0;
  for_each_site(g, [&](const SizeSite& s, int64_t) {
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    if (found == std::string::npos && n.kind == NodeKind::Placeholder && n.input_index == input &&
        s.kind == SizeSite::Kind::Size && s.element == dim)
      found = j;
    ++j;
  });
  return found;
}

std::optional<SymbolicSizes> generalize(
    std::span<const Graph* const> observations,
    std::span<const std::pair<int32_t, int32_t>> dynamic_inputs,
    std::span<const std::pair<int32_t, int32_t>> static_inputs,
    std::span<const std::pair<int32_t, int32_t>> unbacked_inputs) {
  const Graph& hint = *observations[0];
  const std::vector<SizeSite> sites = size_sites(hint);
  std::vector<std::vector<int64_t>> values;
  for (const Graph* g : observations) values.push_back(size_site_values(*g));
  // Whether site s is a listed input dim's size (dim -1: any of the input's sizes and strides).
  auto listed = [&](const SizeSite& s, std::span<const std::pair<int32_t, int32_t>> dims) {
    const Node& n = hint.nodes[static_cast<size_t>(s.node)];
    if (n.kind != NodeKind::Placeholder) return false;
    for (const auto& [input, dim] : dims)
      if (input == n.input_index &&
          ((s.kind == SizeSite::Kind::Size && dim == s.element) || dim == -1))
        return true;
    return false;
  };
  // The stride of a dim of size 1 is never stepped along (a [1, t] slice of a longer row keeps
  // the row's stride, contiguous or not): it follows whatever each call has.
  std::vector<bool> follows(sites.size(), false);
  for (size_t j = 0; j < sites.size(); ++j) {
    const SizeSite& s = sites[j];
    if (s.kind == SizeSite::Kind::Stride)
      follows[j] = hint.nodes[static_cast<size_t>(s.node)]
                       .outputs[static_cast<size_t>(s.slot)]
                       .sizes[static_cast<size_t>(s.element)] == 1;
  }
  std::vector<bool> dynamic(sites.size(), false), unbacked(sites.size(), false);
  std::vector<int64_t> marked_values;
  bool marked = false;          // some input dim is marked (mark_dynamic, mark_unbacked)
  bool small_unbacked = false;  // an unbacked dim is 0 or 1 in the hint
  for (size_t j = 0; j < sites.size(); ++j) {
    if (listed(sites[j], unbacked_inputs) && !listed(sites[j], static_inputs)) {
      dynamic[j] = unbacked[j] = marked = true;  // whatever its value
      follows[j] = false;
      if (values[0][j] >= 2)
        marked_values.push_back(values[0][j]);
      else
        small_unbacked = true;
      continue;
    }
    if (values[0][j] < 2 || listed(sites[j], static_inputs) || follows[j])
      continue;  // (0 and 1 specialise)
    for (size_t k = 1; k < values.size(); ++k)
      dynamic[j] = dynamic[j] || values[k][j] != values[0][j];
    if (listed(sites[j], dynamic_inputs)) {
      dynamic[j] = marked = true;
      marked_values.push_back(values[0][j]);
    }
  }
  // One observation: what a marked dim's value reaches (a view's size, a reshape target, the
  // input's own strides; not another input's size) is taken to be its symbol, and every other
  // size computed in the graph (a product, a difference: 2·s0, s0 - 1) to follow the symbols
  // (SymbolicSizes::kFollows), as every number in it does. A coincidence costs a recompile,
  // whose two observations then tell.
  auto input_size = [&](const SizeSite& s) {
    return s.kind == SizeSite::Kind::Size &&
           hint.nodes[static_cast<size_t>(s.node)].kind == NodeKind::Placeholder;
  };
  const bool one_marked = values.size() == 1 && marked;
  if (one_marked)
    for (size_t j = 0; j < sites.size(); ++j) {
      if (dynamic[j] || follows[j] || names_dims(hint, sites[j]) || input_size(sites[j]) ||
          listed(sites[j], static_inputs))
        continue;
      if (values[0][j] < 2) {
        // An unbacked dim of size 0 or 1 cannot be told from the graph's other 0s and 1s:
        // they all follow each call's values.
        follows[j] = small_unbacked;
        continue;
      }
      if (std::ranges::find(marked_values, values[0][j]) != marked_values.end())
        dynamic[j] = true;
      else
        follows[j] = true;
    }
  if (std::ranges::find(dynamic, true) == dynamic.end() && !one_marked)
    follows.assign(follows.size(), false);  // (nothing dynamic: an exact graph stays exact)
  SymbolicSizes out;
  out.symbol_of_site.assign(sites.size(), SymbolicSizes::kStatic);
  for (size_t j = 0; j < sites.size(); ++j)
    if (follows[j]) out.symbol_of_site[j] = SymbolicSizes::kFollows;
  out.values = values[0];
  std::map<std::vector<int64_t>, int32_t> symbol_of_values;
  for (size_t j = 0; j < sites.size(); ++j) {
    if (!dynamic[j]) continue;
    std::vector<int64_t> key;
    for (const auto& v : values) key.push_back(v[j]);
    auto [it, inserted] = symbol_of_values.try_emplace(key, static_cast<int32_t>(out.hints.size()));
    if (inserted) {
      out.hints.push_back(values[0][j]);
      out.first_site.push_back(j);
      out.min_value.push_back(2);
    }
    out.symbol_of_site[j] = it->second;
    if (unbacked[j]) out.min_value[static_cast<size_t>(it->second)] = 0;
  }
  // Numbers that are not sizes (a constant, a scalar attribute: a mean's 1 / n) and varied
  // between the observations are read from each call's graph, unguarded.
  std::vector<std::vector<AttrValue>> scalars(observations.size());
  for (size_t k = 0; k < observations.size(); ++k)
    for_each_scalar_site(*observations[k],
                         [&](size_t, size_t, const AttrValue& v) { scalars[k].push_back(v); });
  out.free_scalar.assign(scalars[0].size(), one_marked);
  for (size_t j = 0; j < scalars[0].size(); ++j)
    for (size_t k = 1; k < scalars.size(); ++k)
      if (!same_attr(scalars[k][j], scalars[0][j])) out.free_scalar[j] = true;
  if (out.hints.empty() && std::ranges::find(out.free_scalar, true) == out.free_scalar.end())
    return std::nullopt;
  return out;
}

std::optional<std::vector<int64_t>> bind_sizes(
    const Graph& entry, const SymbolicSizes& sizes, const Graph& g, std::string* reason,
    const std::function<std::string(int32_t)>& input_label) {
  if (!equal_but_sizes(entry, g)) {
    if (reason) *reason = describe_difference(entry, g, input_label);
    return std::nullopt;
  }
  const std::vector<int64_t>& hint = sizes.values;
  const std::vector<int64_t> values = size_site_values(g);
  std::vector<int64_t> binding(sizes.num_symbols(), -1);
  auto fail = [&](size_t j, auto&&... what) -> std::optional<std::vector<int64_t>> {
    if (reason) {
      const std::vector<SizeSite> sites = size_sites(entry);
      *reason = detail::concat(site_text(entry, sites[j], input_label), what...);
    }
    return std::nullopt;
  };
  std::vector<std::pair<size_t, const AttrValue*>> entry_scalars;
  for_each_scalar_site(entry, [&](size_t node, size_t, const AttrValue& v) {
    entry_scalars.emplace_back(node, &v);
  });
  size_t k = 0;
  std::string changed;
  for_each_scalar_site(g, [&](size_t, size_t, const AttrValue& v) {
    const auto& [node, want] = entry_scalars[k];
    if (changed.empty() && !sizes.free_scalar[k] && !same_attr(*want, v)) {
      const Node& n = entry.nodes[node];
      changed = detail::concat("a constant of %", node, " (", n.op ? n.op->name : "constant",
                               ") changed ", *want, " → ", v);
    }
    ++k;
  });
  if (!changed.empty()) {
    if (reason) *reason = changed;
    return std::nullopt;
  }
  for (size_t j = 0; j < values.size(); ++j) {
    const int32_t s = sizes.symbol_of_site[j];
    const int64_t v = values[j];
    if (s == SymbolicSizes::kFollows) continue;
    if (s < 0) {
      if (v != hint[j])
        return fail(j, " changed ", hint[j], " → ", v, " (static in the dynamic graph)");
      continue;
    }
    int64_t& bound = binding[static_cast<size_t>(s)];
    if (bound < 0) {
      if (v < sizes.min_of(static_cast<size_t>(s)))
        return fail(j, " is ", v, ": the guard 2 <= s", s, " failed (sizes 0 and 1 specialise)");
      bound = v;
    } else if (v != bound) {
      const std::vector<SizeSite> sites = size_sites(entry);
      return fail(j, " is ", v, " but ",
                  site_text(entry, sites[sizes.first_site[static_cast<size_t>(s)]], input_label),
                  " is ", bound, ": the guard Eq(s", s,
                  ", ...) failed (they were equal when compiled)");
    }
  }
  return binding;
}

std::vector<std::string> symbolic_guard_lines(const Graph& entry, const SymbolicSizes& sizes) {
  const std::vector<SizeSite> sites = size_sites(entry);
  std::vector<std::string> lines;
  for (size_t s = 0; s < sizes.num_symbols(); ++s)
    lines.push_back(detail::concat(
        sizes.min_of(s), " <= s", s, "  (s", s, ": ", sizes.min_of(s) == 0 ? "unbacked, " : "",
        describe_site(entry, sites[sizes.first_site[s]]), ", ", sizes.hints[s], " when compiled)"));
  // Duck sizing: input dims that share a symbol must stay equal.
  for (size_t j = 0; j < sites.size(); ++j) {
    const int32_t s = sizes.symbol_of_site[j];
    const Node& n = entry.nodes[static_cast<size_t>(sites[j].node)];
    if (s < 0 || sizes.first_site[static_cast<size_t>(s)] == j || n.kind != NodeKind::Placeholder ||
        sites[j].kind != SizeSite::Kind::Size)
      continue;
    lines.push_back(detail::concat("Eq(", describe_site(entry, sites[j]), ", s", s, ")"));
  }
  return lines;
}

}  // namespace kiln::ir
