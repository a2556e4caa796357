// An op's schema string ("add(Tensor self, Tensor other, Scalar alpha) -> Tensor") is the one
// statement of its arguments: register_op takes the attributes' names from it, and calls are
// checked against it (the number of tensor inputs and the type of each attribute). Graphs the
// tracer records are right by construction; graphs from elsewhere (parse_graph, hand-built)
// are checked before any meta function or kernel sees them, since those trust the arity.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/ops/schema.h"

namespace kiln {

// The names of the schema's non-tensor parameters, in order (views into `schema`). Throws
// kiln::Error naming `op_name` when the schema cannot be parsed.
std::vector<std::string_view> schema_attr_names(std::string_view op_name, std::string_view schema);

// "" when a call of `op` with `num_inputs` tensor inputs and `attrs` fits its schema, otherwise
// what does not fit. Ops without a schema string are not checked.
std::string schema_mismatch(const OpDef& op, size_t num_inputs, const Attrs& attrs);

}  // namespace kiln
