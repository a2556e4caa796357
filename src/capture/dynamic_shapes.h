// Dynamic shapes, the capture side (docs/dynamic_shapes.md): the dims users mark, the policy
// that decides which sizes of a graph about to be compiled become symbols, and finding the
// dynamic entry a call's graph binds to. The graph side is ir/symbolic_sizes.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "capture/state.h"
#include "ir/symbolic_sizes.h"

namespace kiln::capture {

// The symbols of `graph` (the call's, about to be compiled at position `segment` of `st`, on
// `inputs`), as the function's `dynamic` option, the marks on its inputs and (automatic) a
// cached graph it differs from only in sizes say; nullopt: exact. `note` gets what became
// dynamic, one "dim 1 of argument 0 (graph input 0) is now dynamic (s0)" per input dim. Throws
// where a mark_dynamic cannot be honoured. Called with st.mu held.
std::optional<ir::SymbolicSizes> plan_dynamic(const detail::CompiledState& st, size_t segment,
                                              const ir::Graph& graph,
                                              std::span<const Tensor> inputs,
                                              const std::function<std::string(int32_t)>& label,
                                              std::string& note);

// The first dim marked with mark_dynamic whose size differs between `cached` and `graph` (the
// call's, on `inputs`), as "dim 1 of argument 0 (graph input 0)"; "" when none.
std::string changed_marked_dim(const ir::Graph& cached, const ir::Graph& graph,
                               std::span<const Tensor> inputs,
                               const std::function<std::string(int32_t)>& label);

// A dynamic entry at position `segment` that `graph` binds to, or null. Called with st.mu held.
std::shared_ptr<CacheEntry> find_dynamic_entry(detail::CompiledState& st, size_t segment,
                                               const ir::Graph& graph);

}  // namespace kiln::capture
