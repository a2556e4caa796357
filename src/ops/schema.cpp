// Op schema strings parsed once per op into what a call must look like.
#include "ops/schema.h"

#include <charconv>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace kiln {

namespace {

using Type = SchemaParam::Type;

struct CallForm {
  size_t min_inputs = 0;
  size_t max_inputs = 0;  // SIZE_MAX: a Tensor[] takes any number
  std::vector<SchemaParam> attrs;
  std::vector<std::string_view> attr_names;
  bool open_attrs = false;  // `...`: any further attributes (allow_in_graph functions)
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Splits at the commas outside brackets and quotes.
std::vector<std::string_view> split_top_level(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  bool quoted = false;
  size_t begin = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(trim(s.substr(begin, i - begin)));
      begin = i + 1;
    }
  }
  if (const std::string_view last = trim(s.substr(begin)); !last.empty() || !parts.empty())
    parts.push_back(last);
  return parts;
}

bool parse_type(std::string_view text, SchemaParam& p) {
  p.optional = !text.empty() && text.back() == '?';
  if (p.optional) text.remove_suffix(1);
  // `int[2]` (a fixed length, as PyTorch writes kernel sizes) reads as `int[]`.
  if (text.starts_with("int[") && text.ends_with("]")) text = "int[]";
  static const std::pair<std::string_view, Type> names[] = {
      {"Tensor", Type::Tensor}, {"Tensor[]", Type::TensorList}, {"int", Type::Int},
      {"float", Type::Float},   {"bool", Type::Bool},           {"ScalarType", Type::DType},
      {"Scalar", Type::Scalar}, {"int[]", Type::Ints},          {"str", Type::Str}};
  for (const auto& [name, type] : names)
    if (text == name) {
      p.type = type;
      return true;
    }
  return false;
}

bool parse_int(std::string_view text, int64_t& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

// A default's text as the parameter's value; false when it is not one.
bool parse_default(std::string_view text, SchemaParam& p) {
  AttrValue& v = p.default_value;
  if (text == "None") {
    v = std::monostate{};
    return p.optional;
  }
  switch (p.type) {
    case Type::Tensor:
    case Type::TensorList:
    case Type::DType:
      return false;  // only None
    case Type::Bool:
      if (text != "True" && text != "False") return false;
      v = text == "True";
      return true;
    case Type::Str:
      if (text.size() < 2 || text.front() != '"' || text.back() != '"') return false;
      v = std::string(text.substr(1, text.size() - 2));
      return true;
    case Type::Ints: {
      int64_t single = 0;
      if (parse_int(text, single)) {
        v = std::vector<int64_t>{single};
        return true;
      }
      if (text.size() < 2 || text.front() != '[' || text.back() != ']') return false;
      std::vector<int64_t> values;
      for (std::string_view item : split_top_level(text.substr(1, text.size() - 2))) {
        if (!parse_int(item, values.emplace_back())) return false;
      }
      v = std::move(values);
      return true;
    }
    case Type::Int:
    case Type::Float:
    case Type::Scalar: {
      int64_t i = 0;
      if (p.type != Type::Float && parse_int(text, i)) {
        v = i;
        return true;
      }
      if (p.type == Type::Scalar && (text == "True" || text == "False")) {
        v = text == "True";
        return true;
      }
      if (p.type == Type::Int) return false;
      const std::string s(text);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) return false;
      v = d;
      return true;
    }
  }
  return false;
}

// The attribute checks of calls, from the schema (null when the op states none).
std::unique_ptr<CallForm> call_form(const OpDef& op) {
  if (op.schema.empty()) return nullptr;
  const Schema schema = parse_schema(op.name, op.schema);
  auto form = std::make_unique<CallForm>();
  form->open_attrs = schema.open_attrs;
  for (const SchemaParam& p : schema.params) {
    if (p.type == Type::TensorList) {
      form->max_inputs = SIZE_MAX;
    } else if (p.type == Type::Tensor) {
      if (!p.optional) ++form->min_inputs;
      ++form->max_inputs;
    } else {
      form->attrs.push_back(p);
      form->attr_names.push_back(p.name);
    }
  }
  return form;
}

const CallForm* form_of(const OpDef& op) {
  static std::mutex mu;
  static auto* forms = new std::unordered_map<const OpDef*, std::unique_ptr<CallForm>>();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = forms->try_emplace(&op);
  if (inserted) it->second = call_form(op);
  return it->second.get();
}

bool fits(const AttrValue& v, const SchemaParam& p) {
  if (std::holds_alternative<std::monostate>(v)) return p.optional;
  switch (p.type) {
    case Type::Int:
      return std::holds_alternative<int64_t>(v);
    case Type::Float:
      return std::holds_alternative<double>(v);
    case Type::Bool:
      return std::holds_alternative<bool>(v);
    case Type::DType:
      return std::holds_alternative<DType>(v);
    case Type::Scalar:
      return std::holds_alternative<Scalar>(v);
    case Type::Ints:
      return std::holds_alternative<std::vector<int64_t>>(v);
    case Type::Str:
      return std::holds_alternative<std::string>(v);
    case Type::Tensor:
    case Type::TensorList:
      return false;
  }
  return false;
}

}  // namespace

Schema parse_schema(std::string_view what, std::string_view text) {
  const auto fail = [&](std::string_view why) {
    throw Error(
        detail::concat("the schema of '", what, "' cannot be parsed (", why, "): \"", text, "\""));
  };
  const size_t open = text.find('('), arrow = text.rfind("->");
  const size_t close = text.rfind(')', arrow);
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    fail("no parameter list");
  Schema schema;
  schema.name = trim(text.substr(0, open));
  bool keyword_only = false;
  for (std::string_view param : split_top_level(text.substr(open + 1, close - open - 1))) {
    if (param.empty()) fail("an empty parameter");
    if (param == "*") {
      keyword_only = true;
      continue;
    }
    if (param == "...") {
      schema.open_attrs = true;
      continue;
    }
    SchemaParam p{};
    const size_t space = param.find(' ');
    if (space == std::string_view::npos) fail(detail::concat("no name in '", param, "'"));
    if (!parse_type(param.substr(0, space), p))
      fail(detail::concat("unknown type '", param.substr(0, space), "'"));
    std::string_view rest = trim(param.substr(space + 1));
    if (const size_t eq = rest.find('='); eq != std::string_view::npos) {
      p.has_default = true;
      if (!parse_default(trim(rest.substr(eq + 1)), p))
        fail(detail::concat("the default of '", param, "' does not fit its type"));
      rest = trim(rest.substr(0, eq));
    }
    if (rest.empty()) fail(detail::concat("no name in '", param, "'"));
    p.name = rest;
    p.keyword_only = keyword_only;
    schema.params.push_back(std::move(p));
  }
  if (arrow != std::string_view::npos) {
    std::string_view returns = trim(text.substr(arrow + 2));
    if (returns.starts_with('(') && returns.ends_with(')'))
      returns = returns.substr(1, returns.size() - 2);
    if (returns == "Tensor[]") {
      schema.returns_list = true;
      return schema;
    }
    if (returns == "bool" || returns == "int" || returns == "float") {
      schema.returns_number = true;
      return schema;
    }
    for (std::string_view r : split_top_level(returns)) {
      if (!r.starts_with("Tensor")) fail(detail::concat("a return of type '", r, "'"));
      schema.returns.push_back(trim(r.substr(6)));
    }
  }
  return schema;
}

std::vector<std::string_view> schema_attr_names(std::string_view op_name, std::string_view schema) {
  std::vector<std::string_view> names;
  for (const SchemaParam& p : parse_schema(op_name, schema).params)
    if (!p.is_tensor()) names.push_back(p.name);
  return names;
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
