// The registry of public functions (kiln/ops/function.h).
#include "kiln/ops/function.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "kiln/ops/schema.h"

namespace kiln {

namespace {

struct Registry {
  std::mutex mu;
  // By module, name and registration order: a name registered with several schemas has several
  // forms, tried in the order they were registered (the more specific first).
  std::map<std::tuple<std::string, std::string, size_t>, std::unique_ptr<FunctionDef>> by_name;
  std::set<std::tuple<std::string, std::string>> schemas;  // (module, schema) registered
  size_t registered = 0;
};
Registry& registry() {
  static auto* r = new Registry();  // never destroyed: definitions live as long as the process
  return *r;
}

[[noreturn]] void wrong_argument(size_t k) {
  throw Error(detail::concat("internal error: function argument ", k,
                             " is not of the type its schema states"));
}

}  // namespace

template <class T>
const T& FunctionArgs::get(size_t k) const {
  if (k >= values_.size() || !std::holds_alternative<T>(values_[k])) wrong_argument(k);
  return std::get<T>(values_[k]);
}
// The accessors in the header use these.
template const int64_t& FunctionArgs::get<int64_t>(size_t) const;
template const double& FunctionArgs::get<double>(size_t) const;
template const bool& FunctionArgs::get<bool>(size_t) const;
template const DType& FunctionArgs::get<DType>(size_t) const;
template const Scalar& FunctionArgs::get<Scalar>(size_t) const;
template const std::vector<int64_t>& FunctionArgs::get<std::vector<int64_t>>(size_t) const;
template const std::string& FunctionArgs::get<std::string>(size_t) const;

bool FunctionArgs::has(size_t k) const {
  return k < values_.size() && !std::holds_alternative<std::monostate>(values_[k]);
}

const Tensor& FunctionArgs::tensor(size_t k) const {
  static const Tensor undefined;
  return has(k) ? get<Tensor>(k) : undefined;
}

std::optional<Tensor> FunctionArgs::opt_tensor(size_t k) const {
  if (!has(k)) return std::nullopt;
  return get<Tensor>(k);
}

const std::vector<Tensor>& FunctionArgs::tensors(size_t k) const {
  return get<std::vector<Tensor>>(k);
}

double FunctionArgs::f(size_t k) const {
  if (k < values_.size() && std::holds_alternative<int64_t>(values_[k]))
    return static_cast<double>(std::get<int64_t>(values_[k]));
  return get<double>(k);
}

std::optional<int64_t> FunctionArgs::opt_i(size_t k) const {
  return has(k) ? std::optional<int64_t>(i(k)) : std::nullopt;
}
std::optional<double> FunctionArgs::opt_f(size_t k) const {
  return has(k) ? std::optional<double>(f(k)) : std::nullopt;
}
std::optional<DType> FunctionArgs::opt_dtype(size_t k) const {
  return has(k) ? std::optional<DType>(dtype(k)) : std::nullopt;
}
std::optional<Scalar> FunctionArgs::opt_scalar(size_t k) const {
  return has(k) ? std::optional<Scalar>(scalar(k)) : std::nullopt;
}

const FunctionDef& register_function(FunctionDef def) {
  const Schema schema = parse_schema("register_function", def.schema);
  KILN_CHECK(def.call, Error, "register_function: '", schema.name, "' has no call");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  KILN_CHECK(r.schemas.emplace(std::string(def.module), std::string(def.schema)).second, Error,
             "register_function: '", def.schema, "' is already registered",
             def.module.empty() ? "" : " in ", def.module);
  auto owned = std::make_unique<FunctionDef>(def);
  const FunctionDef& ref = *owned;
  r.by_name.emplace(
      std::make_tuple(std::string(def.module), std::string(schema.name), r.registered++),
      std::move(owned));
  return ref;
}

std::vector<const FunctionDef*> all_functions() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const FunctionDef*> out;
  for (const auto& [key, def] : r.by_name) out.push_back(def.get());
  return out;
}

}  // namespace kiln
