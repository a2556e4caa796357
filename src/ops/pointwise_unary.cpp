// Unary pointwise ops: one functor and one OpDef each.
#include <limits>

#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "ops/pointwise_defs.h"

namespace kiln {

// Defines functor Fn<T> returning EXPR of Vec<T> x, the OpDef NAME_op, and kiln::NAME(x).
// GRAD is the derivative written in Kiln ops, in terms of g (the output's gradient), x (the
// input, when SAVE_X) and y (the output, when SAVE_Y).
#define KILN_UNARY_OP(NAME, WHICH, TO_FLOAT, EXPR, SAVE_X, SAVE_Y, GRAD)                       \
  namespace ops {                                                                              \
  template <typename T>                                                                        \
  struct NAME##_fn {                                                                           \
    Vec<T> operator()(Vec<T> x) const { return EXPR; }                                         \
  };                                                                                           \
  void NAME##_derivative(const BackwardCall& c, std::span<Tensor> grads) {                     \
    [[maybe_unused]] const Tensor& g = c.grad();                                               \
    [[maybe_unused]] const Tensor& x = c.in(0);                                                \
    [[maybe_unused]] const Tensor& y = c.out(0);                                               \
    grads[0] = GRAD;                                                                           \
  }                                                                                            \
  const OpDef& NAME##_op = register_op({.name = #NAME,                                         \
                                        .schema = #NAME "(Tensor self) -> Tensor",             \
                                        .kind = OpKind::Pointwise,                             \
                                        .meta = pointwise_meta<Dtypes::WHICH, TO_FLOAT>,       \
                                        .kernel = map_kernel<NAME##_fn, Dtypes::WHICH>,        \
                                        .derivative = {.fn = NAME##_derivative,                \
                                                       .saved_inputs = (SAVE_X) ? 1u : 0u,     \
                                                       .saved_outputs = (SAVE_Y) ? 1u : 0u}}); \
  }                                                                                            \
  Tensor NAME(const Tensor& x) { return ops::call(ops::NAME##_op, {x}); }

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

// Ops on integers and floats that keep the dtype. Step functions have a zero derivative.
KILN_UNARY_OP(neg, Numeric, false, -x, 0, 0, -g)
KILN_UNARY_OP(abs, Numeric, false, vec::abs(x), 1, 0, g* sign(x))
KILN_UNARY_OP(sign, Numeric, false,
              vec::select(x > Vec<T>(T(0)), Vec<T>(T(1)),
                          vec::select(x < Vec<T>(T(0)), Vec<T>(T(-1)), Vec<T>(T(0)))),
              0, 0, zeros_like(g))
KILN_UNARY_OP(relu, Numeric, false, vec::select(x < Vec<T>(T(0)), Vec<T>(T(0)), x), 0, 1,
              g*(y > Scalar(0)))
KILN_UNARY_OP(floor, Numeric, false, vec::floor(x), 0, 0, zeros_like(g))
KILN_UNARY_OP(ceil, Numeric, false, vec::ceil(x), 0, 0, zeros_like(g))
KILN_UNARY_OP(round, Numeric, false, vec::round_even(x), 0, 0, zeros_like(g))
KILN_UNARY_OP(trunc, Numeric, false, vec::trunc(x), 0, 0, zeros_like(g))

// Floating ops (integer inputs compute in float32).
KILN_UNARY_OP(exp, Floating, true, vec::exp(x), 0, 1, g* y)
KILN_UNARY_OP(exp2, Floating, true, vec::exp2(x), 0, 1, g* y* kLn2)
KILN_UNARY_OP(expm1, Floating, true, vec::expm1(x), 0, 1, g*(y + 1))
KILN_UNARY_OP(log, Floating, true, vec::log(x), 1, 0, g / x)
KILN_UNARY_OP(log2, Floating, true, vec::log2(x), 1, 0, g / (x * kLn2))
KILN_UNARY_OP(log1p, Floating, true, vec::log1p(x), 1, 0, g / (x + 1))
KILN_UNARY_OP(sqrt, Floating, true, vec::sqrt(x), 0, 1, g / (y * 2))
KILN_UNARY_OP(rsqrt, Floating, true, Vec<T>(T(1)) / vec::sqrt(x), 0, 1, g*(y* y* y) * -0.5)
KILN_UNARY_OP(reciprocal, Floating, true, Vec<T>(T(1)) / x, 0, 1, -(g* y* y))
KILN_UNARY_OP(sin, Floating, true, vec::sin(x), 1, 0, g* cos(x))
KILN_UNARY_OP(cos, Floating, true, vec::cos(x), 1, 0, -(g* sin(x)))
KILN_UNARY_OP(tan, Floating, true, vec::tan(x), 0, 1, g*(y* y + 1))
KILN_UNARY_OP(tanh, Floating, true, vec::tanh(x), 0, 1, g*(1 - y * y))
KILN_UNARY_OP(erf, Floating, true, vec::erf(x), 1, 0, g* exp(-(x* x)) * kTwoOverSqrtPi)
KILN_UNARY_OP(sigmoid, Floating, true, Vec<T>(T(1)) / (Vec<T>(T(1)) + vec::exp(-x)), 0, 1,
              g* y*(1 - y))
KILN_UNARY_OP(silu, Floating, true, x / (Vec<T>(T(1)) + vec::exp(-x)), 1, 0,
              g* sigmoid(x) * (1 + x * (1 - sigmoid(x))))
#undef KILN_UNARY_OP

// ---- gelu: the erf form, or the tanh approximation ----
namespace ops {
template <typename T>
struct gelu_fn {
  bool tanh_form;
  explicit gelu_fn(const Attrs& a) : tanh_form(a.str(0) == "tanh") {}
  Vec<T> operator()(Vec<T> x) const {
    const Vec<T> half(T(0.5)), one(T(1));
    if (tanh_form) {
      const Vec<T> k(T(0.7978845608028654)), c(T(0.044715));  // sqrt(2/pi)
      return half * x * (one + vec::tanh(k * vec::fmadd(c * x, x * x, x)));
    }
    return half * x * (one + vec::erf(x * Vec<T>(T(0.7071067811865476))));
  }
};
int gelu_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const std::string& a = c.attrs.str(0);
  KILN_CHECK(a == "none" || a == "tanh", ValueError,
             "gelu: approximate must be \"none\" or \"tanh\", got \"", a, "\"");
  return pointwise_meta<Dtypes::Floating, true>(c, out);
}
// erf form: Phi(x) + x * phi(x). tanh form, with u = k * (x + c x^3) and t = tanh(u):
// 0.5 * (1 + t) + 0.5 * x * (1 - t^2) * k * (1 + 3 c x^2).
void gelu_derivative(const BackwardCall& c, std::span<Tensor> grads) {
  const Tensor& x = c.in(0);
  const Tensor& g = c.grad();
  if (c.attrs.str(0) == "tanh") {
    constexpr double k = 0.7978845608028654, cc = 0.044715;
    const Tensor x2 = x * x;
    const Tensor t = tanh((x + x2 * x * cc) * k);
    grads[0] = g * ((t + 1) * 0.5 + x * (1 - t * t) * (x2 * (3 * cc) + 1) * (0.5 * k));
    return;
  }
  constexpr double kInvSqrt2 = 0.7071067811865476, kInvSqrt2Pi = 0.3989422804014327;
  grads[0] = g * ((erf(x * kInvSqrt2) + 1) * 0.5 + x * exp(x * x * -0.5) * kInvSqrt2Pi);
}
const OpDef& gelu_op =
    register_op({.name = "gelu",
                 .schema = "gelu(Tensor self, str approximate) -> Tensor",
                 .kind = OpKind::Pointwise,
                 .meta = gelu_meta,
                 .kernel = map_kernel<gelu_fn, Dtypes::Floating>,
                 .derivative = {.fn = gelu_derivative, .saved_inputs = save({0})}});
}  // namespace ops
Tensor gelu(const Tensor& x, const std::string& approximate) {
  return ops::call(ops::gelu_op, {x}, {approximate});
}

// ---- clamp ----
namespace ops {
template <typename T>
struct clamp_fn {
  bool has_lo, has_hi;
  T lo{}, hi{};
  explicit clamp_fn(const Attrs& a) : has_lo(a.has(0)), has_hi(a.has(1)) {
    if (has_lo) lo = a.scalar(0).to<T>();
    if (has_hi) hi = a.scalar(1).to<T>();
  }
  Vec<T> operator()(Vec<T> x) const {
    // NaN stays NaN (as PyTorch): x < lo and x > hi are false for NaN.
    if (has_lo) x = vec::select(x < Vec<T>(lo), Vec<T>(lo), x);
    if (has_hi) x = vec::select(x > Vec<T>(hi), Vec<T>(hi), x);
    return x;
  }
};
// The bounds take part in type promotion as C++ numbers do (as in PyTorch): an integer tensor
// clamped by a floating bound gives a float32 result, and its in-place form is an error.
int clamp_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.attrs.has(0) || c.attrs.has(1), ValueError,
             "clamp: at least one of min and max must be given");
  DType dt = c.in(0).dtype();
  if (!is_floating(dt)) {
    std::optional<DType> bounds;  // the bounds' own promotion: bool, int64 or default float
    for (int k = 0; k < 2; ++k) {
      if (!c.attrs.has(k)) continue;
      const Scalar& b = c.attrs.scalar(k);
      DType bt = b.is_floating() ? kDefaultFloat : b.dtype();
      bounds = bounds ? promote_types(*bounds, bt) : bt;
    }
    // A lower tier only matters when its category is higher (see ops::result_type).
    if (dt == DType::Bool || is_floating(*bounds)) dt = promote_types(dt, *bounds);
  }
  check_supported(c, Dtypes::Numeric, dt);
  return one_output(out, dt, c.in(0).sizes());
}
// The gradient passes where min <= x <= max (bounds included, as PyTorch).
void clamp_derivative(const BackwardCall& c, std::span<Tensor> grads) {
  const Tensor& x = c.in(0);
  Tensor inside;
  if (c.attrs.has(0)) inside = x >= c.attrs.scalar(0);
  if (c.attrs.has(1)) {
    Tensor below = x <= c.attrs.scalar(1);
    inside = inside.defined() ? logical_and(inside, below) : below;
  }
  grads[0] = where(inside, c.grad(), wrap_scalar(0.0));
}
const OpDef& clamp_op =
    register_op({.name = "clamp",
                 .schema = "clamp(Tensor self, Scalar? min, Scalar? max) -> Tensor",
                 .kind = OpKind::Pointwise,
                 .meta = clamp_meta,
                 .kernel = map_kernel<clamp_fn, Dtypes::Numeric>,
                 .derivative = {.fn = clamp_derivative, .saved_inputs = save({0})}});
}  // namespace ops
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  return ops::call(ops::clamp_op, {x}, {ops::opt_attr(min), ops::opt_attr(max)});
}
Tensor clip(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  return clamp(x, min, max);
}
Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max) {
  return ops::call_into(self, ops::clamp_op, {self}, {ops::opt_attr(min), ops::opt_attr(max)});
}

// ---- nan_to_num ----
namespace ops {
template <typename T>
struct nan_to_num_fn {
  T nan, posinf, neginf;
  explicit nan_to_num_fn(const Attrs& a)
      : nan(static_cast<T>(a.f(0))),
        posinf(a.has(1) ? static_cast<T>(a.f(1)) : std::numeric_limits<T>::max()),
        neginf(a.has(2) ? static_cast<T>(a.f(2)) : std::numeric_limits<T>::lowest()) {}
  Vec<T> operator()(Vec<T> x) const {
    const Vec<T> inf(std::numeric_limits<T>::infinity());
    x = vec::select(vec::isnan_mask(x), Vec<T>(nan), x);
    x = vec::select(x > Vec<T>(std::numeric_limits<T>::max()), Vec<T>(posinf), x);
    return vec::select(x < Vec<T>(std::numeric_limits<T>::lowest()), Vec<T>(neginf), x);
  }
};
const OpDef& nan_to_num_op = register_op(
    {.name = "nan_to_num",
     .schema = "nan_to_num(Tensor self, float nan, float? posinf, float? neginf) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = pointwise_meta<Dtypes::Floating>,
     .kernel = map_kernel<nan_to_num_fn, Dtypes::Floating>,
     // The gradient passes where x is finite; replaced values are constants.
     .derivative = {.fn =
                        [](const BackwardCall& c, std::span<Tensor> grads) {
                          const Tensor& x = c.in(0);
                          grads[0] =
                              where(logical_or(isnan(x), isinf(x)), wrap_scalar(0.0), c.grad());
                        },
                    .saved_inputs = save({0})}});
}  // namespace ops
Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  if (!is_floating(x.dtype())) return x.clone();  // integers have no NaN or inf
  auto opt = [](std::optional<double> v) { return v ? AttrValue(*v) : AttrValue(); };
  return ops::call(ops::nan_to_num_op, {x}, {nan, opt(posinf), opt(neginf)});
}

// ---- predicates: bool results ----
namespace ops {
template <typename T>
struct isnan_fn {
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
    return false;
  }
};
template <typename T>
struct isinf_fn {
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    return false;
  }
};
template <typename T>
struct logical_not_fn {
  bool operator()(T x) const { return !(x != T(0)); }
};
#define KILN_PREDICATE_OP(NAME)                                                           \
  const OpDef& NAME##_op = register_op({.name = #NAME,                                    \
                                        .schema = #NAME "(Tensor self) -> Tensor",        \
                                        .kind = OpKind::Pointwise,                        \
                                        .meta = pointwise_meta<Dtypes::All, false, true>, \
                                        .kernel = predicate_kernel<NAME##_fn, Dtypes::All>});
KILN_PREDICATE_OP(isnan)
KILN_PREDICATE_OP(isinf)
KILN_PREDICATE_OP(logical_not)
#undef KILN_PREDICATE_OP
}  // namespace ops
Tensor isnan(const Tensor& x) { return ops::call(ops::isnan_op, {x}); }
Tensor isinf(const Tensor& x) { return ops::call(ops::isinf_op, {x}); }
Tensor logical_not(const Tensor& x) { return ops::call(ops::logical_not_op, {x}); }

// ---- in-place unary forms ----
Tensor& neg_(Tensor& self) { return ops::call_into(self, ops::neg_op, {self}); }
Tensor& exp_(Tensor& self) { return ops::call_into(self, ops::exp_op, {self}); }
Tensor& sqrt_(Tensor& self) { return ops::call_into(self, ops::sqrt_op, {self}); }
Tensor& relu_(Tensor& self) { return ops::call_into(self, ops::relu_op, {self}); }
Tensor& sigmoid_(Tensor& self) { return ops::call_into(self, ops::sigmoid_op, {self}); }
Tensor& tanh_(Tensor& self) { return ops::call_into(self, ops::tanh_op, {self}); }

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator!(const Tensor& x) { return logical_not(x); }

}  // namespace kiln
