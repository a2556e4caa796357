// Unary pointwise ops: one OpDef each, computed by its functor in ops/kernels/pointwise_math.h.
#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/pointwise.h"
#include "ops/pointwise_defs.h"

namespace kiln {

// Defines the OpDef NAME_op computed by NAME_fn (ops/kernels/pointwise_math.h) and
// kiln::NAME(x). GRAD is the derivative written in Kiln ops, in terms of g (the output's
// gradient), x (the input, when SAVE_X) and y (the output, when SAVE_Y).
#define KILN_UNARY_OP(NAME, WHICH, TO_FLOAT, SAVE_X, SAVE_Y, GRAD)              \
  namespace ops {                                                               \
  void NAME##_derivative(const BackwardCall& c, std::span<Tensor> grads) {      \
    [[maybe_unused]] const Tensor& g = c.grad();                                \
    [[maybe_unused]] const Tensor& x = c.in(0);                                 \
    [[maybe_unused]] const Tensor& y = c.out(0);                                \
    grads[0] = GRAD;                                                            \
  }                                                                             \
  const OpDef& NAME##_op =                                                      \
      register_pointwise({.name = #NAME,                                        \
                          .schema = #NAME "(Tensor self) -> Tensor",            \
                          .kind = OpKind::Pointwise,                            \
                          .meta = pointwise_meta<Dtypes::WHICH, TO_FLOAT>,      \
                          .derivative = {.fn = NAME##_derivative,               \
                                         .saved_inputs = (SAVE_X) ? 1u : 0u,    \
                                         .saved_outputs = (SAVE_Y) ? 1u : 0u}}, \
                         KILN_MAP_KERNEL(NAME##_fn, WHICH));                    \
  }                                                                             \
  Tensor NAME(const Tensor& x) { return ops::call(ops::NAME##_op, {x}); }

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

// Ops on integers and floats that keep the dtype. Step functions have a zero derivative.
KILN_UNARY_OP(neg, Numeric, false, 0, 0, -g)
KILN_UNARY_OP(abs, Numeric, false, 1, 0, g* sign(x))
KILN_UNARY_OP(sign, Numeric, false, 0, 0, zeros_like(g))
KILN_UNARY_OP(relu, Numeric, false, 0, 1, g*(y > Scalar(0)))
KILN_UNARY_OP(floor, Numeric, false, 0, 0, zeros_like(g))
KILN_UNARY_OP(ceil, Numeric, false, 0, 0, zeros_like(g))
KILN_UNARY_OP(round, Numeric, false, 0, 0, zeros_like(g))
KILN_UNARY_OP(trunc, Numeric, false, 0, 0, zeros_like(g))

// Floating ops (integer inputs compute in float32).
KILN_UNARY_OP(exp, Floating, true, 0, 1, g* y)
KILN_UNARY_OP(exp2, Floating, true, 0, 1, g* y* kLn2)
KILN_UNARY_OP(expm1, Floating, true, 0, 1, g*(y + 1))
KILN_UNARY_OP(log, Floating, true, 1, 0, g / x)
KILN_UNARY_OP(log2, Floating, true, 1, 0, g / (x * kLn2))
KILN_UNARY_OP(log1p, Floating, true, 1, 0, g / (x + 1))
KILN_UNARY_OP(sqrt, Floating, true, 0, 1, g / (y * 2))
KILN_UNARY_OP(rsqrt, Floating, true, 0, 1, g*(y* y* y) * -0.5)
KILN_UNARY_OP(reciprocal, Floating, true, 0, 1, -(g* y* y))
KILN_UNARY_OP(sin, Floating, true, 1, 0, g* cos(x))
KILN_UNARY_OP(cos, Floating, true, 1, 0, -(g* sin(x)))
KILN_UNARY_OP(tan, Floating, true, 0, 1, g*(y* y + 1))
KILN_UNARY_OP(tanh, Floating, true, 0, 1, g*(1 - y * y))
KILN_UNARY_OP(erf, Floating, true, 1, 0, g* exp(-(x* x)) * kTwoOverSqrtPi)
KILN_UNARY_OP(sigmoid, Floating, true, 0, 1, g* y*(1 - y))
KILN_UNARY_OP(silu, Floating, true, 1, 0, g* sigmoid(x) * (1 + x * (1 - sigmoid(x))))
#undef KILN_UNARY_OP

// ---- gelu: the erf form, or the tanh approximation ----
namespace ops {
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
// The erf form in the ops its derivative is written in, so that a compiled graph computing
// both (a training step: the derivative depends only on x) computes erf(x / sqrt(2)) once, as
// common subexpression. Bitwise equal to gelu_fn, half * x * (one + erf(x * k)): IEEE addition
// and multiplication commute, and the constants round to T as gelu_fn's do. The tanh form uses
// a fused multiply-add that no op expresses: it has no decomposition.
bool gelu_decomposes(const Attrs& attrs) { return attrs.str(0) == "none"; }
void gelu_decomposition(const OpCall& c, std::span<Tensor> results) {
  KILN_CHECK(gelu_decomposes(c.attrs), Error,
             "internal error: gelu's tanh form has no decomposition");
  constexpr double kInvSqrt2 = 0.7071067811865476;
  results[0] = (c.in(0) * 0.5) * (erf(c.in(0) * kInvSqrt2) + 1);
}
const OpDef& gelu_op =
    register_pointwise({.name = "gelu",
                        .schema = "gelu(Tensor self, *, str approximate=\"none\") -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = gelu_meta,
                        .derivative = {.fn = gelu_derivative, .saved_inputs = save({0})},
                        .decomposition = gelu_decomposition,
                        .decomposes = gelu_decomposes},
                       KILN_MAP_KERNEL(gelu_fn, Floating));
}  // namespace ops
Tensor gelu(const Tensor& x, const std::string& approximate) {
  return ops::call(ops::gelu_op, {x}, {approximate});
}

// ---- clamp ----
namespace ops {
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
  // An integer bound must fit an integer result (a float bound beyond float32 is +-inf: fine).
  for (int k = 0; k < 2; ++k)
    if (c.attrs.has(k) && is_integral(dt)) check_scalar_fits(c.attrs.scalar(k), dt, "clamp");
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
const OpDef& clamp_op = register_pointwise(
    {.name = "clamp",
     .schema = "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = clamp_meta,
     .derivative = {.fn = clamp_derivative, .saved_inputs = save({0})}},
    KILN_MAP_KERNEL(clamp_fn, Numeric));
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
const OpDef& nan_to_num_op = register_pointwise(
    {.name = "nan_to_num",
     .schema =
         "nan_to_num(Tensor self, float nan=0.0, float? posinf=None, float? neginf=None) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = pointwise_meta<Dtypes::Floating>,
     // The gradient passes where x is finite; replaced values are constants.
     .derivative = {.fn =
                        [](const BackwardCall& c, std::span<Tensor> grads) {
                          const Tensor& x = c.in(0);
                          grads[0] =
                              where(logical_or(isnan(x), isinf(x)), wrap_scalar(0.0), c.grad());
                        },
                    .saved_inputs = save({0})}},
    KILN_MAP_KERNEL(nan_to_num_fn, Floating));
}  // namespace ops
Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  if (!is_floating(x.dtype())) return x.clone();  // integers have no NaN or inf
  auto opt = [](std::optional<double> v) { return v ? AttrValue(*v) : AttrValue(); };
  return ops::call(ops::nan_to_num_op, {x}, {nan, opt(posinf), opt(neginf)});
}

// ---- predicates: bool results ----
namespace ops {
#define KILN_PREDICATE_OP(NAME)                                                                   \
  const OpDef& NAME##_op = register_pointwise({.name = #NAME,                                     \
                                               .schema = #NAME "(Tensor self) -> Tensor",         \
                                               .kind = OpKind::Pointwise,                         \
                                               .meta = pointwise_meta<Dtypes::All, false, true>}, \
                                              KILN_PREDICATE_KERNEL(NAME##_fn, All));
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

// ---- Python-facing forms of the in-place methods (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
const FunctionDef& clamp__function = register_function(
    {.schema = "clamp_(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
     .doc = "Clamps self into [min, max] in place.",
     .call = [](Args a) -> FunctionResult {
       Tensor self = a.tensor(0);
       return clamp_(self, a.opt_scalar(1), a.opt_scalar(2));
     }});
#define KILN_IN_PLACE_UNARY(NAME, DOC)                              \
  const FunctionDef& NAME##_function =                              \
      register_function({.schema = #NAME "(Tensor self) -> Tensor", \
                         .doc = DOC,                                \
                         .call = [](Args a) -> FunctionResult {     \
                           Tensor self = a.tensor(0);               \
                           return NAME(self);                       \
                         }});
KILN_IN_PLACE_UNARY(neg_, "self = -self, in place.")
KILN_IN_PLACE_UNARY(exp_, "self = exp(self), in place.")
KILN_IN_PLACE_UNARY(sqrt_, "self = sqrt(self), in place.")
KILN_IN_PLACE_UNARY(relu_, "self = relu(self), in place.")
KILN_IN_PLACE_UNARY(sigmoid_, "self = sigmoid(self), in place.")
KILN_IN_PLACE_UNARY(tanh_, "self = tanh(self), in place.")
#undef KILN_IN_PLACE_UNARY
const FunctionDef& clip_function =
    register_function({.schema = "clip(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
                       .doc = "clamp's other name.",
                       .call = [](Args a) -> FunctionResult {
                         return clamp(a.tensor(0), a.opt_scalar(1), a.opt_scalar(2));
                       }});
}  // namespace

}  // namespace kiln
