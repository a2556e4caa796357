// Tracing below the frontend: a function of tensors traced on metadata-only tensors into a
// graph, with no data touched and nothing run. Backends use it to apply decompositions (each
// op that has one is replaced by the ops its decomposition calls); AOT autograd will use it
// to trace joint graphs.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::capture {

// The graph of the ops `fn` calls on placeholders with `inputs`' dtypes and sizes (traced as
// contiguous tensors); its outputs are fn's results. `who` names the function in errors: fn
// must be functional in its inputs (no in-place writes to them), read no concrete tensor
// (create values through ops) and call no random op and no sync point (item(), printing).
using TracedFn = std::function<std::vector<Tensor>(std::span<const Tensor> inputs)>;
ir::Graph trace_graph(std::span<const TensorMeta> inputs, const TracedFn& fn,
                      const std::string& who);

// `g` with every call node for which `decompose(node)` holds (its op must have a
// decomposition) replaced by the ops of its decomposition, re-traced. Placeholders, their
// order and the outputs' metadata are unchanged; so are random ops' runtime attributes.
ir::Graph decompose_graph(const ir::Graph& g,
                          const std::function<bool(const ir::Node&)>& decompose);

}  // namespace kiln::capture
