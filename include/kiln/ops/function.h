// Public functions that are not one op: composites (reshape, conv2d, cross_entropy), overloads
// (max with or without a dim), factories that draw from the generator. Each is stated once,
// beside its C++ definition, with a schema (the grammar of op schemas, kiln/ops/schema.h) and a
// doc line, so that the Python package offers them exactly as it offers the ops: signature,
// defaults and docstring from here, nothing written function by function (docs/python.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// A call's arguments by parameter position in the function's schema, defaults filled in.
class FunctionArgs {
 public:
  using Value = std::variant<std::monostate, int64_t, double, bool, DType, Scalar,
                             std::vector<int64_t>, std::string, Tensor, std::vector<Tensor>>;
  explicit FunctionArgs(std::vector<Value> values) : values_(std::move(values)) {}

  bool has(size_t k) const;  // given and not None
  // An undefined tensor for an optional tensor given as None.
  const Tensor& tensor(size_t k) const;
  std::optional<Tensor> opt_tensor(size_t k) const;
  const std::vector<Tensor>& tensors(size_t k) const;
  int64_t i(size_t k) const { return get<int64_t>(k); }
  double f(size_t k) const;  // an int argument reads as a float
  bool b(size_t k) const { return get<bool>(k); }
  DType dtype(size_t k) const { return get<DType>(k); }
  const Scalar& scalar(size_t k) const { return get<Scalar>(k); }
  const std::vector<int64_t>& ints(size_t k) const { return get<std::vector<int64_t>>(k); }
  const std::string& str(size_t k) const { return get<std::string>(k); }
  std::optional<int64_t> opt_i(size_t k) const;
  std::optional<double> opt_f(size_t k) const;
  std::optional<DType> opt_dtype(size_t k) const;
  std::optional<Scalar> opt_scalar(size_t k) const;

 private:
  template <class T>
  const T& get(size_t k) const;
  std::vector<Value> values_;
};

// What a function returns: one tensor; several (a tuple, named by the schema's returns, or a
// list for `-> Tensor[]`); or a number (`-> bool`, `-> int`, `-> float`).
using FunctionResult = std::variant<Tensor, std::vector<Tensor>, Scalar>;

struct FunctionDef {
  // "reshape(Tensor self, int[] shape) -> Tensor": the name is the schema's.
  std::string_view schema;
  std::string_view doc;  // what it computes, in a sentence or two
  FunctionResult (*call)(const FunctionArgs& args) = nullptr;
  // Where the Python package puts it: "" for kiln.<name> (and a Tensor method when the first
  // parameter is `Tensor self`), or a submodule such as "nn.functional".
  std::string_view module;
};

// Registers a function (at static-initialisation time, beside its definition); kiln::Error if its
// schema cannot be parsed or is registered already. A name registered with several schemas has
// several forms, tried in the order they were registered until one takes the arguments
// (conv2d's padding as sizes or as a string; max(x), max(x, dim), max(x, other)).
const FunctionDef& register_function(FunctionDef def);
// Every registered function, sorted by module and name; a name's forms in registration order.
std::vector<const FunctionDef*> all_functions();

}  // namespace kiln
