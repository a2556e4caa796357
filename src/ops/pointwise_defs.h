// Building blocks for defining pointwise ops: meta functions for the usual dtype rules and
// kernels that instantiate a functor template Fn<T> (constructed from the call's Attrs) for
// each dtype the op supports. A pointwise op is then one functor and one register_op call.
#pragma once

#include "kiln/ops/op.h"
#include "ops/kernels/loops.h"
#include "ops/op_utils.h"

namespace kiln::ops {

using vec::Vec;

// Which dtypes a pointwise op computes in.
enum class Dtypes { All, Numeric, Floating, Integral };

template <template <typename> class Fn, typename T>
Fn<T> make_fn(const Attrs& attrs) {
  if constexpr (std::is_constructible_v<Fn<T>, const Attrs&>) {
    return Fn<T>(attrs);
  } else {
    return Fn<T>{};
  }
}

// Instantiates f.template operator()<T>() for the runtime dtype, among the dtypes in Which only.
template <Dtypes Which, typename F>
void switch_dtype(DType dt, const OpDef& op, F&& f) {
  const char* name = op.name.data();
  if constexpr (Which == Dtypes::All) return KILN_DTYPE_SWITCH_ALL(dt, name, f);
  if constexpr (Which == Dtypes::Numeric) return KILN_DTYPE_SWITCH_NUMERIC(dt, name, f);
  if constexpr (Which == Dtypes::Floating) return KILN_DTYPE_SWITCH_FLOATING(dt, name, f);
  if constexpr (Which == Dtypes::Integral) return KILN_DTYPE_SWITCH_INTEGRAL(dt, name, f);
}

inline bool supports(Dtypes which, DType dt) {
  switch (which) {
    case Dtypes::All:
      return true;
    case Dtypes::Numeric:
      return dt != DType::Bool;
    case Dtypes::Floating:
      return is_floating(dt);
    case Dtypes::Integral:
      return !is_floating(dt);
  }
  return false;
}

inline void check_supported(const OpCall& c, Dtypes which, DType dt) {
  static constexpr const char* kNames[] = {"any dtype", "numeric (non-bool) dtypes",
                                           "floating dtypes", "integer and bool dtypes"};
  KILN_CHECK(supports(which, dt), DTypeError, c.op.name, ": not supported for dtype ", dt,
             " (supports ", kNames[static_cast<int>(which)], ")");
}

// ---- meta ----
// The result keeps the (promoted) input dtype; ints are promoted to float32 when `to_float`.
template <Dtypes Which, bool ToFloat = false, bool BoolOut = false>
int pointwise_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  DType dt = result_type(c.inputs);
  if (ToFloat && !is_floating(dt)) dt = kDefaultFloat;
  check_supported(c, Which, dt);
  Shape sizes =
      c.inputs.size() == 1 ? c.in(0).sizes() : broadcast_shapes(c.op.name.data(), c.inputs);
  return one_output(out, BoolOut ? DType::Bool : dt, std::move(sizes));
}

// ---- kernels ----
// out = Fn<T>(inputs...) with every input cast to the output dtype T (vectorised).
template <template <typename> class Fn, Dtypes Which>
void map_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  switch_dtype<Which>(out.dtype(), c.op, [&]<typename T>() {
    auto f = make_fn<Fn, T>(c.attrs);
    using V = Vec<T>;
    if constexpr (std::is_invocable_v<Fn<T>, V>) {
      kernels::map_vec<T>(out, f, cast(c.in(0), out.dtype()));
    } else if constexpr (std::is_invocable_v<Fn<T>, V, V>) {
      kernels::map_vec<T>(out, f, cast(c.in(0), out.dtype()), cast(c.in(1), out.dtype()));
    } else {
      kernels::map_vec<T>(out, f, cast(c.in(0), out.dtype()), cast(c.in(1), out.dtype()),
                          cast(c.in(2), out.dtype()));
    }
  });
}

// out (bool) = Fn<T>(a, b) computed in the inputs' promoted dtype T (comparisons, logical ops).
template <template <typename> class Fn, Dtypes Which>
void predicate_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  DType dt = result_type(c.inputs);
  switch_dtype<Which>(dt, c.op, [&]<typename T>() {
    auto f = make_fn<Fn, T>(c.attrs);
    if constexpr (std::is_invocable_v<Fn<T>, T>) {
      Tensor a = cast(c.in(0), dt);
      kernels::map_scalar<bool, T>(out, f, {&a});
    } else {
      Tensor a = cast(c.in(0), dt), b = cast(c.in(1), dt);
      kernels::map_scalar<bool, T, T>(out, f, {&a, &b});
    }
  });
}

}  // namespace kiln::ops

namespace kiln::ops {
// out = Fn<T>(inputs...) on plain values, every operand of type T (for ops without a vector
// form: integer division, remainder, bitwise ops).
template <template <typename> class Fn, Dtypes Which>
void scalar_map_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  switch_dtype<Which>(out.dtype(), c.op, [&]<typename T>() {
    auto f = make_fn<Fn, T>(c.attrs);
    Tensor a = cast(c.in(0), out.dtype()), b = cast(c.in(1), out.dtype());
    kernels::map_scalar<T, T, T>(out, f, {&a, &b});
  });
}
}  // namespace kiln::ops
