// Small graph passes, each separate: dead-code elimination and common-subexpression
// elimination. Both keep placeholders (the calling convention) and renumber the rest.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Removes call and constant nodes that no output depends on. Returns the number removed.
int64_t eliminate_dead_code(Graph& g);
// Merges call nodes with the same op, inputs and attributes (random ops never merge: two draws
// differ), and constants with the same value. Returns the number merged.
int64_t eliminate_common_subexpressions(Graph& g);

}  // namespace kiln::ir
