// kiln::allow_in_graph(name, fn): fn is recorded as ONE node of the captured graph (an opaque
// callable to the frontend, as torch.compiler.allow_in_graph). Included by compile.h.
//
// The contract, as the reference documents state it (breaking it is undefined behaviour; Kiln
// cannot check it):
//  - fn's arguments are tensors, numbers (bool, integers, floating, Scalar), std::vector<Tensor>
//    or lists of numbers (std::vector of int64_t / int / double / float); its result is a
//    Tensor or a std::vector<Tensor> of at most 4; other types are refused with kiln::Error
//    when allow_in_graph is called (a number result would need a tensor's value: not a graph);
//  - every tensor fn uses is passed in as an argument (no captured tensors, no module state);
//  - fn is functional: no mutation of its inputs or of global state, no data-dependent errors
//    or control flow on tensor values;
//  - fn is deterministic: no random ops inside (its derivative re-runs it, and would draw a
//    different mask than the forward did); draw outside and pass the tensor in.
#pragma once

#include <bit>
#include <functional>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

namespace kiln {
namespace detail {

// The body of an allowed function over flattened arguments: tensors in order, and attrs
// holding [layout, number arguments...] (layout[i]: -1 a number, -2 a Tensor, -3 a list of
// integers, -4 a list of floating numbers (kept as their bit patterns, so that they are exact
// attributes), n >= 0 a list of n tensors).
using AllowedBody = std::function<std::vector<Tensor>(std::span<const Tensor>, const Attrs&)>;
// Registers the op "allow_in_graph.<name>" that calls `body`; kiln::Error if the name is taken.
const OpDef& register_allowed_function(const std::string& name, AllowedBody body);
// Calls the op: one graph node under capture, the body itself otherwise.
std::vector<Tensor> call_allowed_function(const OpDef& op, std::vector<Tensor> tensors,
                                          Attrs attrs);
[[noreturn]] void refuse_allowed_type(const std::string& name, const std::string& what,
                                      const char* type_name);
[[noreturn]] void refuse_allowed_arity(const std::string& name, size_t numbers);

template <class T>
constexpr bool is_graph_number_v =
    std::is_arithmetic_v<std::decay_t<T>> || std::is_same_v<std::decay_t<T>, Scalar>;
template <class T>
struct is_number_list : std::false_type {};
template <class E>
struct is_number_list<std::vector<E>>
    : std::bool_constant<std::is_arithmetic_v<E> && !std::is_same_v<E, bool>> {};
template <class T>
constexpr bool is_number_list_v = is_number_list<std::decay_t<T>>::value;
template <class T>
constexpr bool is_graph_value_v = std::is_same_v<std::decay_t<T>, Tensor> ||
                                  std::is_same_v<std::decay_t<T>, std::vector<Tensor>> ||
                                  is_graph_number_v<T> || is_number_list_v<T>;

template <class T>
void flatten_arg(const T& a, std::vector<Tensor>& tensors, std::vector<int64_t>& layout,
                 Attrs& attrs) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    tensors.push_back(a);
    layout.push_back(-2);
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    tensors.insert(tensors.end(), a.begin(), a.end());
    layout.push_back(static_cast<int64_t>(a.size()));
  } else if constexpr (is_graph_number_v<D>) {
    attrs.push_back(Scalar(a));
    layout.push_back(-1);
  } else if constexpr (is_number_list_v<D>) {
    using E = typename D::value_type;
    std::vector<int64_t> v;
    v.reserve(a.size());
    for (E e : a) {
      if constexpr (std::is_floating_point_v<E>)
        v.push_back(std::bit_cast<int64_t>(static_cast<double>(e)));
      else
        v.push_back(static_cast<int64_t>(e));
    }
    attrs.push_back(std::move(v));
    layout.push_back(std::is_floating_point_v<E> ? -4 : -3);
  }
}

template <class T>
std::decay_t<T> unflatten_arg(std::span<const Tensor> tensors, const Attrs& attrs, size_t& ti,
                              size_t& ai, int64_t kind) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, Tensor>) {
    return tensors[ti++];
  } else if constexpr (std::is_same_v<D, std::vector<Tensor>>) {
    std::vector<Tensor> v(tensors.begin() + static_cast<std::ptrdiff_t>(ti),
                          tensors.begin() + static_cast<std::ptrdiff_t>(ti) + kind);
    ti += static_cast<size_t>(kind);
    return v;
  } else if constexpr (std::is_same_v<D, Scalar>) {
    return attrs.scalar(ai++);
  } else if constexpr (is_number_list_v<D>) {
    using E = typename D::value_type;
    D v;
    for (int64_t e : attrs.ints(ai)) {
      if constexpr (std::is_floating_point_v<E>)
        v.push_back(static_cast<E>(std::bit_cast<double>(e)));
      else
        v.push_back(static_cast<E>(e));
    }
    ++ai;
    return v;
  } else {
    return attrs.scalar(ai++).template to<D>();
  }
}

template <class R>
std::vector<Tensor> flatten_result(R r) {
  if constexpr (std::is_same_v<R, Tensor>)
    return {std::move(r)};
  else
    return r;
}

template <class R, class... A>
auto make_allowed(const std::string& name, std::function<R(A...)> fn) {
  const char* arg_types[] = {typeid(A).name()..., nullptr};
  const bool arg_ok[] = {is_graph_value_v<A>..., true};
  for (size_t i = 0; i < sizeof...(A); ++i)
    if (!arg_ok[i]) refuse_allowed_type(name, "argument " + std::to_string(i + 1), arg_types[i]);
  // Numbers are node attributes: one slot holds the layout, the rest hold them.
  constexpr size_t numbers = ((is_graph_number_v<A> || is_number_list_v<A> ? 1 : 0) + ... + 0);
  if (numbers > Attrs::kMax - 1) refuse_allowed_arity(name, numbers);
  constexpr bool result_ok = std::is_same_v<R, Tensor> || std::is_same_v<R, std::vector<Tensor>>;
  if constexpr (!result_ok || !(is_graph_value_v<A> && ...)) {
    refuse_allowed_type(name, "its result", typeid(R).name());
    return fn;  // not reached; keeps the return type deducible
  } else {
    AllowedBody body = [fn](std::span<const Tensor> tensors, const Attrs& attrs) {
      const auto& layout = attrs.ints(0);
      size_t ti = 0, ai = 1, k = 0;
      auto next = [&]<class X>() { return unflatten_arg<X>(tensors, attrs, ti, ai, layout[k++]); };
      // Braced initialisation evaluates its elements left to right.
      std::tuple<std::decay_t<A>...> args{next.template operator()<A>()...};
      return flatten_result<R>(std::apply(fn, std::move(args)));
    };
    const OpDef* op = &register_allowed_function(name, std::move(body));
    return [op](A... args) -> R {
      std::vector<Tensor> tensors;
      std::vector<int64_t> layout;
      Attrs attrs;
      attrs.push_back(std::vector<int64_t>{});
      (flatten_arg(args, tensors, layout, attrs), ...);
      Attrs with_layout;
      with_layout.push_back(std::move(layout));
      for (size_t i = 1; i < attrs.size(); ++i) with_layout.push_back(attrs[i]);
      std::vector<Tensor> outs = call_allowed_function(*op, std::move(tensors), with_layout);
      if constexpr (std::is_same_v<R, Tensor>)
        return outs.at(0);
      else
        return outs;
    };
  }
}

}  // namespace detail

// Returns a callable with fn's signature that, under capture, is recorded as one graph node
// (output metadata from running fn on metadata-only tensors); outside capture it calls fn.
// `name` names the node ("allow_in_graph.<name>") and must be unique. fn must be a function
// pointer or a lambda with one call signature.
template <class F>
auto allow_in_graph(const std::string& name, F fn) {
  return detail::make_allowed(name, std::function(std::move(fn)));
}

}  // namespace kiln
