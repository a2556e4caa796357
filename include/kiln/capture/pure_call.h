// Pure mode's view of a call (CompileOptions::pure, docs/compile.md "Pure mode"): the tensors
// and the other values among a compiled function's arguments, and its result as a flat list of
// tensors. A cache hit in pure mode checks the arguments against what the graph was captured
// with and runs the graph without calling the function, so both directions must be cheap and
// need no capture machinery: this header is only traits over the argument and result types.
#pragma once

#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/small_vector.h"
#include "kiln/core/tensor.h"

namespace kiln::detail {

// A call's arguments as pure mode guards them: every tensor (in argument order, vectors
// flattened) and the bytes of every other argument (numbers, bools, enums, strings, and the
// lengths of tensor vectors), which a hit must match exactly.
struct PureArgs {
  SmallVector<const Tensor*, 8> tensors;  // (inline: a hit allocates nothing for them)
  std::string key;
  // The position of the first argument pure mode cannot guard (a type other than those above),
  // or -1.
  int unsupported = -1;
  int position = 0;

  template <class T>
  void add(const T& value) {
    using V = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<V, Tensor>) {
      tensors.push_back(&value);
    } else if constexpr (std::is_same_v<V, std::vector<Tensor>>) {
      append_bytes(value.size());
      for (const Tensor& t : value) tensors.push_back(&t);
    } else if constexpr (std::is_arithmetic_v<V> || std::is_enum_v<V>) {
      append_bytes(value);
    } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
      const std::string_view s(value);
      append_bytes(s.size());
      key.append(s);
    } else {
      if (unsupported < 0) unsupported = position;
    }
    ++position;
  }

 private:
  template <class T>
  void append_bytes(const T& v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    key.append(bytes, sizeof(T));
  }
};

template <class... Args>
PureArgs pure_args(const Args&... args) {
  PureArgs out;
  out.tensors.reserve(sizeof...(Args));
  (out.add(args), ...);
  return out;
}

// The tensors among a call's arguments, for diagnostics that name them ("argument 1", element 2
// of a vector argument "argument 0[2]"): their addresses and their memory's, taken when the call
// starts and only compared (an argument may die during the call), never dereferenced.
struct ArgumentTensors {
  struct Arg {
    const TensorImpl* impl;
    const Storage* memory;  // null: pending
    int16_t position;
    int16_t element;  // -1: the argument is the tensor itself
  };
  SmallVector<Arg, 8> list;

  static const Storage* memory_of(const Tensor& t) {
    return t.defined() ? t.impl()->storage_if_concrete().get() : nullptr;
  }

  template <class T>
  void add(const T& value, int16_t position) {
    using V = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<V, Tensor>) {
      list.push_back({value.impl(), memory_of(value), position, -1});
    } else if constexpr (std::is_same_v<V, std::vector<Tensor>>) {
      for (size_t k = 0; k < value.size(); ++k)
        list.push_back({value[k].impl(), memory_of(value[k]), position, static_cast<int16_t>(k)});
    }
  }
};
template <class... Args>
ArgumentTensors argument_tensors(const Args&... args) {
  ArgumentTensors out;
  int16_t position = 0;
  (out.add(args, position++), ...);
  return out;
}

// The result types pure mode can rebuild from the graph's outputs: void, Tensor, a vector of
// tensors, a pair or tuple of tensors.
template <class R>
struct PureResult {
  static constexpr bool supported = false;
};
template <>
struct PureResult<void> {
  static constexpr bool supported = true;
};
template <>
struct PureResult<Tensor> {
  static constexpr bool supported = true;
  static void flatten(const Tensor& r, std::vector<const Tensor*>& out) { out.push_back(&r); }
  static Tensor build(std::vector<Tensor>& flat) { return std::move(flat[0]); }
};
template <>
struct PureResult<std::vector<Tensor>> {
  static constexpr bool supported = true;
  static void flatten(const std::vector<Tensor>& r, std::vector<const Tensor*>& out) {
    for (const Tensor& t : r) out.push_back(&t);
  }
  static std::vector<Tensor> build(std::vector<Tensor>& flat) { return std::move(flat); }
};
template <class... Ts>
requires(std::is_same_v<Ts, Tensor>&&...) struct PureResult<std::tuple<Ts...>> {
  static constexpr bool supported = true;
  static void flatten(const std::tuple<Ts...>& r, std::vector<const Tensor*>& out) {
    std::apply([&](const auto&... t) { (out.push_back(&t), ...); }, r);
  }
  static std::tuple<Ts...> build(std::vector<Tensor>& flat) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<Ts...>(std::move(flat[I])...);
    }
    (std::index_sequence_for<Ts...>{});
  }
};
template <>
struct PureResult<std::pair<Tensor, Tensor>> {
  static constexpr bool supported = true;
  static void flatten(const std::pair<Tensor, Tensor>& r, std::vector<const Tensor*>& out) {
    out.push_back(&r.first);
    out.push_back(&r.second);
  }
  static std::pair<Tensor, Tensor> build(std::vector<Tensor>& flat) {
    return {std::move(flat[0]), std::move(flat[1])};
  }
};

}  // namespace kiln::detail
