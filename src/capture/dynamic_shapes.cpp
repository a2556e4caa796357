// Dynamic shapes, the capture side (dynamic_shapes.h): marks, policy, lookup.
#include "capture/dynamic_shapes.h"

#include <algorithm>

#include "core/tensor_names.h"
#include "core/weak_tensor_map.h"

namespace kiln {

namespace {
enum class DimMark : uint8_t { Dynamic, MaybeDynamic, Static, Unbacked };
using DimMarks = std::vector<std::pair<int64_t, DimMark>>;

detail::WeakTensorMap<DimMarks>& marks() {
  static auto* m = new detail::WeakTensorMap<DimMarks>;  // (never destroyed: tensors die at exit)
  return *m;
}

void mark(const Tensor& t, int64_t dim, DimMark how, const char* who) {
  KILN_CHECK(t.defined(), ValueError, who, ": the tensor is undefined");
  const int64_t rank = t.dim();
  KILN_CHECK(dim >= -rank && dim < rank, IndexError, who, ": dim ", dim,
             " is out of range for a tensor of shape ", t.shape_str());
  if (dim < 0) dim += rank;
  marks().update(t, [&](DimMarks& m) {
    std::erase_if(m, [&](const auto& p) { return p.first == dim; });
    m.emplace_back(dim, how);
  });
}
}  // namespace

void mark_dynamic(const Tensor& t, int64_t dim) { mark(t, dim, DimMark::Dynamic, "mark_dynamic"); }
void maybe_mark_dynamic(const Tensor& t, int64_t dim) {
  mark(t, dim, DimMark::MaybeDynamic, "maybe_mark_dynamic");
}
void mark_static(const Tensor& t, int64_t dim) { mark(t, dim, DimMark::Static, "mark_static"); }
void mark_unbacked(const Tensor& t, int64_t dim) {
  mark(t, dim, DimMark::Unbacked, "mark_unbacked");
}

namespace capture {

namespace {
// The marks on t's dims; for a view (taken inside the function, so it is the graph's input),
// its base's marks carried to the view's dims of the same size, and a dim of a size the base
// does not have (a flattened [b·t]) made maybe-dynamic when the base has a dynamic dim.
std::optional<DimMarks> marks_of(const Tensor& t) {
  if (std::optional<DimMarks> m = marks().get(t)) return m;
  const std::shared_ptr<TensorImpl>& base = t.impl()->view_base();
  if (!base) return std::nullopt;
  const std::optional<DimMarks> on_base = marks().get(Tensor(base));
  if (!on_base) return std::nullopt;
  DimMarks carried;
  bool dynamic_base = false;
  for (const auto& [dim, how] : *on_base) {
    if (dim >= static_cast<int64_t>(base->sizes().size())) continue;
    dynamic_base = dynamic_base || how != DimMark::Static;
    const int64_t size = base->sizes()[static_cast<size_t>(dim)];
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) == size) carried.emplace_back(d, how);
  }
  if (dynamic_base)
    for (int64_t d = 0; d < t.dim(); ++d)
      if (std::ranges::find(base->sizes(), t.size(d)) == base->sizes().end())
        carried.emplace_back(d, DimMark::MaybeDynamic);
  return carried;
}

// Parameters, buffers and optimizer state keep their sizes (torch: parameters are static): the
// named tensors themselves and what covers their whole memory (an optimizer's flat view of a
// parameter it updates), not a slice (a causal mask buffer narrowed to the sequence length).
bool is_model_state(const Tensor& t) {
  const std::string kind = detail::tensor_name(t, true).kind;
  if (kind.empty()) return false;
  if (!detail::tensor_name(t).empty()) return true;
  const std::shared_ptr<Storage>& memory = t.impl()->storage_if_concrete();
  return memory && t.numel() * static_cast<int64_t>(t.element_size()) ==
                       static_cast<int64_t>(memory->nbytes());
}
}  // namespace

std::optional<ir::SymbolicSizes> plan_dynamic(const detail::CompiledState& st, size_t segment,
                                              const ir::Graph& graph,
                                              std::span<const Tensor> inputs,
                                              const std::function<std::string(int32_t)>& label,
                                              std::string& note) {
  std::vector<std::pair<int32_t, int32_t>> dynamic, required, frozen, unbacked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto input = static_cast<int32_t>(i);
    if (const std::optional<DimMarks> m = marks_of(inputs[i]))
      for (const auto& [dim, how] : *m) {
        if (dim >= inputs[i].dim()) continue;  // (a mark made before set_data changed its rank)
        const std::pair<int32_t, int32_t> d{input, static_cast<int32_t>(dim)};
        if (how == DimMark::Static) frozen.push_back(d);
        if (how != DimMark::Static) dynamic.push_back(d);
        if (how == DimMark::Dynamic || how == DimMark::Unbacked)
          KILN_CHECK(!is_model_state(inputs[i]), Error, "kiln::mark_dynamic: dim ", dim, " of ",
                     label(input), " is marked dynamic, but it is ",
                     detail::tensor_name(inputs[i], true).str(),
                     ", whose sizes stay static (as torch keeps parameters static)");
        if (how == DimMark::Dynamic) required.push_back(d);
        if (how == DimMark::Unbacked) unbacked.push_back(d);
      }
    if (is_model_state(inputs[i]))
      frozen.emplace_back(input, -1);  // all its sizes and strides
    else if (st.options.dynamic.value_or(false))
      for (int32_t d = 0; d < static_cast<int32_t>(inputs[i].dim()); ++d)
        dynamic.emplace_back(input, d);
  }
  auto name = [&](std::pair<int32_t, int32_t> d) {
    return detail::concat("dim ", d.second, " of ", label(d.first));
  };
  if (!required.empty() || !unbacked.empty()) {
    const auto& first = required.empty() ? unbacked[0] : required[0];
    KILN_CHECK(st.options.dynamic.value_or(true), Error, "kiln::mark_dynamic: ", name(first),
               " is marked dynamic, but '", st.name, "' is compiled with dynamic=false",
               st.dynamic_from_config ? " (the program-wide setting: KILN_DYNAMIC_SHAPES=0 or "
                                        "compile_config().dynamic = false)"
                                      : "");
    KILN_CHECK(!st.options.pure, Error, "kiln::mark_dynamic: ", name(first),
               " is marked dynamic, but '", st.name,
               "' is compiled in pure mode, whose graphs are exact");
  }
  // (Pure mode runs a plan's graph at the sizes it learnt: its graphs stay exact.)
  if (!st.options.dynamic.value_or(true) || st.options.pure) return std::nullopt;
  // Automatic: a cached graph that differs only in sizes is the second observation.
  std::vector<const ir::Graph*> observations{&graph};
  if (!st.options.dynamic && segment < st.segments.size()) {
    for (const auto& [hash, list] : st.segments[segment])
      for (const auto& e : list)
        if (observations.size() == 1 && ir::equal_but_sizes(e->graph, graph))
          observations.push_back(&e->graph);
    if (segment < st.dynamic_entries.size())
      for (const auto& e : st.dynamic_entries[segment])
        if (observations.size() == 1 && ir::equal_but_sizes(e->graph, graph))
          observations.push_back(&e->graph);
  }
  std::optional<ir::SymbolicSizes> sizes = ir::generalize(observations, dynamic, frozen, unbacked);
  for (const auto& d : required) {
    const size_t site = ir::input_size_site(graph, d.first, d.second);
    KILN_CHECK(sizes && site != std::string::npos && sizes->symbol_of_site[site] >= 0, Error,
               "kiln::mark_dynamic: ", name(d), " is marked dynamic, but its size is ",
               inputs[static_cast<size_t>(d.first)].size(d.second),
               ": sizes 0 and 1 are specialised (use maybe_mark_dynamic to allow it)");
  }
  if (!sizes) return std::nullopt;
  const std::vector<ir::SizeSite> sites = ir::size_sites(graph);
  const std::vector<int64_t> values = ir::size_site_values(graph);
  for (size_t s = 0; s < sizes->num_symbols(); ++s)
    for (size_t j = 0; j < sites.size(); ++j) {
      const ir::Node& n = graph.nodes[static_cast<size_t>(sites[j].node)];
      if (sizes->symbol_of_site[j] != static_cast<int32_t>(s) ||
          n.kind != ir::NodeKind::Placeholder || sites[j].kind != ir::SizeSite::Kind::Size)
        continue;
      if (!note.empty()) note += "; ";
      note += detail::concat(name({n.input_index, sites[j].element}), " is now dynamic (s", s, ", ",
                             values[j], " here)");
    }
  if (note.empty() && sizes->num_symbols() > 0)
    note = "sizes computed inside the graph are now dynamic";
  if (std::ranges::find(sizes->free_scalar, true) != sizes->free_scalar.end())
    note += detail::concat(
        note.empty() ? "" : "; ",
        "numbers that changed (a constant, 1 / n of a mean) are read from each call");
  return sizes;
}

std::string changed_marked_dim(const ir::Graph& cached, const ir::Graph& graph,
                               std::span<const Tensor> inputs,
                               const std::function<std::string(int32_t)>& label) {
  auto sizes_of = [](const ir::Graph& g, int32_t input) -> const Shape* {
    for (const ir::Node& n : g.nodes)
      if (n.kind == ir::NodeKind::Placeholder && n.input_index == input) return &n.outputs[0].sizes;
    return nullptr;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<DimMarks> m = marks_of(inputs[i]);
    if (!m) continue;
    const auto input = static_cast<int32_t>(i);
    const Shape* was = sizes_of(cached, input);
    const Shape* now = sizes_of(graph, input);
    for (const auto& [dim, how] : *m) {
      const auto d = static_cast<size_t>(dim);
      if (how == DimMark::Dynamic && was && now && d < was->size() && d < now->size() &&
          (*was)[d] != (*now)[d])
        return detail::concat("dim ", dim, " of ", label(input));
    }
  }
  return "";
}

std::shared_ptr<CacheEntry> find_dynamic_entry(detail::CompiledState& st, size_t segment,
                                               const ir::Graph& graph) {
  if (segment >= st.dynamic_entries.size() || st.dynamic_entries[segment].empty()) return nullptr;
  const uint64_t key = ir::hash_but_sizes(graph);
  for (const auto& e : st.dynamic_entries[segment])
    if (e->sizes_hash == key && ir::bind_sizes(e->graph, *e->symbolic, graph, nullptr)) return e;
  return nullptr;
}

}  // namespace capture
}  // namespace kiln
