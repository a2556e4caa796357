// Building blocks for defining pointwise ops: meta functions for the usual dtype rules and
// kernels that instantiate a functor template Fn<T> (constructed from the call's Attrs) for
// each dtype the op supports. A pointwise op is then one functor (its math, in
// ops/kernels/pointwise_math.h) and one register_pointwise call (its definition).
#pragma once

#include "kiln/ops/op.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/pointwise_math.h"
#include "ops/op_utils.h"

namespace kiln::ops {

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
  if (c.inputs.size() > 1 && !is_floating(dt))
    check_wrapped_numbers(c.op.name.data(), c.inputs, dt);
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

// ---- registration ----
// A kernel that computes an op with a functor of pointwise_math.h, and the description of that
// functor for code generation (OpDef::pointwise).
struct FunctorKernel {
  KernelFn kernel;
  PointwiseBody body;
};

// Registers a pointwise op computed by a functor: def's kernel and pointwise come from `k`.
inline const OpDef& register_pointwise(OpDef def, const FunctorKernel& k) {
  def.kernel = k.kernel;
  def.pointwise = k.body;
  return register_op(std::move(def));
}

// The FunctorKernel of KERNEL<FN, ...> (KERNEL: map_kernel, predicate_kernel,
// scalar_map_kernel, or a kernel template around one), with FN's qualified name written from
// the same token, so the name cannot drift from the functor the kernel instantiates.
#define KILN_FUNCTOR_KERNEL(KERNEL, FORM, FN, ...)         \
  ::kiln::ops::FunctorKernel {                             \
    KERNEL<::kiln::ops::FN __VA_OPT__(, ) __VA_ARGS__>, {  \
      "kiln::ops::" #FN, ::kiln::PointwiseBody::Form::FORM \
    }                                                      \
  }
// out = FN<T>(Vec<T>...) (map_kernel), for the dtypes in Dtypes::WHICH.
#define KILN_MAP_KERNEL(FN, WHICH) \
  KILN_FUNCTOR_KERNEL(::kiln::ops::map_kernel, Vector, FN, ::kiln::ops::Dtypes::WHICH)
// bool out = FN<T>(T...) (predicate_kernel).
#define KILN_PREDICATE_KERNEL(FN, WHICH) \
  KILN_FUNCTOR_KERNEL(::kiln::ops::predicate_kernel, Predicate, FN, ::kiln::ops::Dtypes::WHICH)
// out = FN<T>(T...) (scalar_map_kernel).
#define KILN_SCALAR_MAP_KERNEL(FN, WHICH) \
  KILN_FUNCTOR_KERNEL(::kiln::ops::scalar_map_kernel, Scalar, FN, ::kiln::ops::Dtypes::WHICH)

// The PointwiseBody naming FN, for an op with a hand-written kernel: where and masked_fill call
// FN; copy, to_copy and fill convert values as FN does (static_cast, Scalar::to). Fails to
// compile unless FN is a functor template of kiln::ops.
template <template <typename> class Fn>
constexpr PointwiseBody functor_body(std::string_view name, PointwiseBody::Form form) {
  return {name, form};
}
#define KILN_FUNCTOR_BODY(FORM, FN) \
  ::kiln::ops::functor_body<::kiln::ops::FN>("kiln::ops::" #FN, ::kiln::PointwiseBody::Form::FORM)

}  // namespace kiln::ops
