// Node-by-node structural comparison, shared by whole-graph equality and the capture layer's
// replay (which switches between cached graphs that share a prefix).
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Whether node i of `a` and of `b` are equal as the cache sees them: kind, op, inputs,
// attributes (a's runtime attributes excluded), and for placeholders the guarded metadata.
bool same_node_at(const Graph& a, const Graph& b, size_t i);

// Bit k: output k of a call requires grad (part of a node's identity).
uint64_t grad_bits(const Node& n);
// Whether attribute `attr` of node `node` is a runtime attribute of g.
bool is_runtime_attr(const Graph& g, size_t node, size_t attr);

}  // namespace kiln::ir
