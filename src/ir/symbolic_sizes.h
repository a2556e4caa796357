// Dynamic shapes, the graph side (docs/dynamic_shapes.md). A graph is captured with concrete
// sizes on every call; a dynamic cache entry is such a graph read as a family: some of its
// size-like integers ("sites": input sizes and strides, each value's sizes, strides and offset,
// integer attributes) are symbols, the others stay the graph's own. A site whose value varies
// between the observed calls (or an input dim marked dynamic) is a symbol; sites equal at every
// observation share one (duck sizing), so that whatever a backend decided from two sizes being
// equal holds for every call the entry accepts. A call's captured graph is an instance of the
// entry when it has the same structure, every static site is equal and every symbol's sites
// agree on one value >= 2 (sizes 0 and 1 are never symbols): its binding.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <functional>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Where a size-like integer sits in a graph.
struct SizeSite {
  enum class Kind : uint8_t { Size, Stride, Offset, Attr };
  Kind kind;
  int32_t node;
  int32_t slot;     // Size/Stride/Offset: the node's output; Attr: the attribute
  int32_t element;  // Size/Stride: the dim; Attr: the list element (-1: a single integer)
};

// The sites of `g` in their fixed order, and their values.
std::vector<SizeSite> size_sites(const Graph& g);
std::vector<int64_t> size_site_values(const Graph& g);
// "dim 1 of input 0", "stride 0 of %4 (transpose)", "sizes[1] of %5 (reshape)".
std::string describe_site(const Graph& g, const SizeSite& site);

// Whether a and b are equal but for the values of their sites and of their other numbers
// (constants, Scalar and floating attributes), and a hash that agrees with it.
bool equal_but_sizes(const Graph& a, const Graph& b);
uint64_t hash_but_sizes(const Graph& g);
// Whether node i of a and of b are equal but for sizes (equal_but_sizes, node by node).
bool same_node_but_sizes(const Graph& a, const Graph& b, size_t i);
// The first difference between a (cached) and b that is not one of sizes ("node 12 is exp where
// the cached graph has sin"), or "" when they are equal but for sizes. `at` (when given) gets the
// index of b's node where they differ, or -1 when the difference is not at one of b's nodes.
std::string structural_difference(const Graph& a, const Graph& b, int32_t* at = nullptr);
// Whether an input (a placeholder at the same position) has other sizes in b than in a.
bool input_sizes_differ(const Graph& a, const Graph& b);

// The symbols of a dynamic graph.
struct SymbolicSizes {
  // Per site: its symbol, kStatic, or kFollows: computed from the symbols (a product, a
  // difference), read from each call unguarded, as every backend compiles each binding's graph.
  static constexpr int32_t kStatic = -1, kFollows = -2;
  std::vector<int32_t> symbol_of_site;
  std::vector<int64_t> values;     // per site: its value in the graph (what static ones keep)
  std::vector<int64_t> hints;      // per symbol: its value in the graph
  std::vector<size_t> first_site;  // per symbol: where it is first met
  // Per symbol: its least value, 2 (sizes 0 and 1 specialise) or 0 for an unbacked dim's
  // (mark_unbacked). Empty: 2 for every symbol.
  std::vector<int64_t> min_value;
  int64_t min_of(size_t symbol) const { return symbol < min_value.size() ? min_value[symbol] : 2; }
  // Per number that is not a size (a constant's value, a Scalar or floating attribute): whether
  // each call's own is used, unguarded (it varied between the observations: a mean's 1 / n).
  std::vector<bool> free_scalar;
  size_t num_symbols() const { return hints.size(); }
};

// Generalises `observations` (graphs equal but for sizes; the first is the one to compile, the
// hint) into symbols: a site whose value differs between observations is a symbol, as is every
// dim of an input listed in `dynamic_inputs` ((input index, dim) pairs) and, with a single
// observation, every site whose value is that of such a dim (except attributes named as dims,
// which are indices, not sizes), every other site computed in the graph then following the
// symbols (kFollows) and every number that is not a size being free_scalar. Values 0 and 1 stay
// static, as do other inputs' sizes and the input dims listed in `static_inputs` (dim -1: all
// of that input's sizes and strides). Numbers that are not sizes and varied become free_scalar.
// Input dims listed in `unbacked_inputs` (also listed in dynamic_inputs) are symbols whatever
// their value, ranging over [0, inf). Nothing dynamic: nullopt.
std::optional<SymbolicSizes> generalize(
    std::span<const Graph* const> observations,
    std::span<const std::pair<int32_t, int32_t>> dynamic_inputs = {},
    std::span<const std::pair<int32_t, int32_t>> static_inputs = {},
    std::span<const std::pair<int32_t, int32_t>> unbacked_inputs = {});
// The site of dim `dim` of graph input `input` (npos: none).
size_t input_size_site(const Graph& g, int32_t input, int32_t dim);

// The binding of `g` to `sizes` (one value per symbol) when g is an instance of `entry` (see
// the header comment); otherwise nullopt, and `reason` says which guard failed (named as
// input_label names inputs, or "input i").
std::optional<std::vector<int64_t>> bind_sizes(
    const Graph& entry, const SymbolicSizes& sizes, const Graph& g, std::string* reason,
    const std::function<std::string(int32_t input)>& input_label = nullptr);

// The entry's guards in torch's words, one per line: each symbol's range ("2 <= s0", with where
// it comes from) and each equality duck sizing relies on among inputs ("Eq(s0, ...)").
std::vector<std::string> symbolic_guard_lines(const Graph& entry, const SymbolicSizes& sizes);

}  // namespace kiln::ir
