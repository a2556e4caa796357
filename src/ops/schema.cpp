// Op schema strings parsed once per op into what a call must look like.
#include "ops/schema.h"

#include <mutex>
#include <unordered_map>

namespace kiln {

namespace {

// AttrValue alternatives, as the schema's type names map onto them.
enum class AttrType { Int, Float, Bool, DType, Scalar, Ints, Str };

struct Param {
  AttrType type;
  bool optional;  // `int?`: may be left out (monostate)
};

struct CallForm {
  size_t min_inputs = 0;
  size_t max_inputs = 0;  // SIZE_MAX: a Tensor[] takes any number
  std::vector<Param> attrs;
  std::vector<std::string_view> attr_names;
  bool open_attrs = false;  // `...`: any further attributes (allow_in_graph functions)
};

bool parse_type(std::string type, Param& p) {
  p.optional = !type.empty() && type.back() == '?';
  if (p.optional) type.pop_back();
  static const std::unordered_map<std::string, AttrType> names = {
      {"int", AttrType::Int},          {"float", AttrType::Float},   {"bool", AttrType::Bool},
      {"ScalarType", AttrType::DType}, {"Scalar", AttrType::Scalar}, {"int[]", AttrType::Ints},
      {"str", AttrType::Str}};
  auto it = names.find(type);
  if (it == names.end()) return false;
  p.type = it->second;
  return true;
}

// Null when the schema is missing or not understood (the call is then not checked).
std::unique_ptr<CallForm> parse_schema(std::string_view schema) {
  const size_t open = schema.find('('), close = schema.find(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return nullptr;
  auto form = std::make_unique<CallForm>();
  std::string_view params = schema.substr(open + 1, close - open - 1);
  while (!params.empty()) {
    const size_t comma = params.find(',');
    std::string_view param = params.substr(0, comma);
    params = comma == std::string_view::npos ? std::string_view() : params.substr(comma + 1);
    while (!param.empty() && param.front() == ' ') param.remove_prefix(1);
    if (param.empty()) continue;
    const size_t space = param.find(' ');
    const std::string type(param.substr(0, space));
    std::string_view name = space == std::string_view::npos ? "" : param.substr(space + 1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (type == "Tensor") {
      ++form->min_inputs;
      ++form->max_inputs;
    } else if (type == "Tensor?") {
      ++form->max_inputs;
    } else if (type == "Tensor[]") {
      form->max_inputs = SIZE_MAX;
    } else if (type == "...") {
      form->open_attrs = true;
    } else {
      Param p{};
      if (!parse_type(type, p) || name.empty()) return nullptr;
      form->attrs.push_back(p);
      form->attr_names.push_back(name);
    }
  }
  return form;
}

const CallForm* form_of(const OpDef& op) {
  static std::mutex mu;
  static auto* forms = new std::unordered_map<const OpDef*, std::unique_ptr<CallForm>>();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = forms->try_emplace(&op);
  if (inserted) it->second = parse_schema(op.schema);
  return it->second.get();
}

bool fits(const AttrValue& v, const Param& p) {
  if (std::holds_alternative<std::monostate>(v)) return p.optional;
  switch (p.type) {
    case AttrType::Int:
      return std::holds_alternative<int64_t>(v);
    case AttrType::Float:
      return std::holds_alternative<double>(v);
    case AttrType::Bool:
      return std::holds_alternative<bool>(v);
    case AttrType::DType:
      return std::holds_alternative<DType>(v);
    case AttrType::Scalar:
      return std::holds_alternative<Scalar>(v);
    case AttrType::Ints:
      return std::holds_alternative<std::vector<int64_t>>(v);
    case AttrType::Str:
      return std::holds_alternative<std::string>(v);
  }
  return false;
}

}  // namespace

std::vector<std::string_view> schema_attr_names(std::string_view op_name, std::string_view schema) {
  const std::unique_ptr<CallForm> form = parse_schema(schema);
  KILN_CHECK(form, Error, "register_op: the schema of '", op_name, "' cannot be parsed: \"", schema,
             "\"");
  return form->attr_names;
}

std::string schema_mismatch(const OpDef& op, size_t num_inputs, const Attrs& attrs) {
  const CallForm* form = form_of(op);
  if (!form) return "";
  if (num_inputs < form->min_inputs || num_inputs > form->max_inputs)
    return detail::concat(op.name, " takes ", form->max_inputs == SIZE_MAX ? "at least " : "",
                          form->min_inputs == form->max_inputs || form->max_inputs == SIZE_MAX
                              ? std::to_string(form->min_inputs)
                              : detail::concat(form->min_inputs, " to ", form->max_inputs),
                          " tensor inputs, not ", num_inputs, " (", op.schema, ")");
  if (attrs.size() < form->attrs.size() || (attrs.size() > form->attrs.size() && !form->open_attrs))
    return detail::concat(op.name, " takes ", form->attrs.size(), " attributes, not ", attrs.size(),
                          " (", op.schema, ")");
  for (size_t k = 0; k < form->attrs.size(); ++k)
    if (!fits(attrs[k], form->attrs[k]))
      return detail::concat(op.name, ": attribute ", k, " (",
                            k < op.attr_names.size() ? op.attr_names[k] : "?", ") is ", attrs[k],
                            ", which does not fit the schema ", op.schema);
  return "";
}

}  // namespace kiln
