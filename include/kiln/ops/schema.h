// Schemas: the one statement of an op's (or a public function's) arguments, in PyTorch's
// native_functions grammar: "sum(Tensor self, int[] dim=[], bool keepdim=False, *,
// ScalarType? dtype=None) -> Tensor". register_op takes the attributes' names from it and calls
// are checked against it; the Python package (python/, docs/python.md) builds each function's
// signature from it: names, defaults, and `*` (the parameters after it are keyword-only).
#pragma once

#include <string_view>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

struct SchemaParam {
  enum class Type : uint8_t {
    Tensor,      // `Tensor`, or `Tensor?` (optional: may be left out)
    TensorList,  // `Tensor[]`: any number of tensors
    Int,
    Float,
    Bool,
    DType,  // `ScalarType`
    Scalar,
    Ints,  // `int[]`
    Str,
  };
  Type type;
  bool optional = false;  // `T?`: None is allowed (an attribute holds monostate)
  bool keyword_only = false;
  bool has_default = false;
  AttrValue default_value;  // monostate for `=None`; a Scalar default is held as int64/double/bool
  std::string_view name;
  bool is_tensor() const { return type == Type::Tensor || type == Type::TensorList; }
};

struct Schema {
  std::string_view name;
  std::vector<SchemaParam> params;        // in order, tensors and attributes interleaved
  std::vector<std::string_view> returns;  // one entry per returned tensor ("" when unnamed)
  bool returns_list = false;              // `-> Tensor[]`: any number of tensors
  bool returns_number = false;            // `-> bool`, `-> int`, `-> float` (functions only)
  bool open_attrs = false;                // `...`: any further attributes (allow_in_graph)
};

// Parses `schema`; throws kiln::Error naming `what` (the op) and the text it cannot read.
Schema parse_schema(std::string_view what, std::string_view schema);

}  // namespace kiln
