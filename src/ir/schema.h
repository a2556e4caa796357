// Checking a call node against its op's schema string ("add(Tensor self, Tensor other, Scalar
// alpha) -> Tensor"): the number of tensor inputs and the type of each attribute. Graphs the
// tracer records are right by construction; graphs from elsewhere (parse_graph, hand-built)
// are checked before any meta function or kernel sees them, since those trust the arity.
#pragma once

#include <string>

#include "kiln/ops/op.h"

namespace kiln::ir {

// "" when a call of `op` with `num_inputs` tensor inputs and `attrs` fits its schema, otherwise
// what does not fit. Ops without a schema string are not checked.
std::string schema_mismatch(const OpDef& op, size_t num_inputs, const Attrs& attrs);

}  // namespace kiln::ir
