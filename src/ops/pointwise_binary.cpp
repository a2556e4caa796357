// Binary pointwise ops with broadcasting and PyTorch type promotion; C++ numbers enter as
// wrapped 0-d tensors (see wrap_scalar).
#include <cmath>
#include <limits>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/pointwise_defs.h"

namespace kiln {

Tensor wrap_scalar(const Scalar& s) {
  Tensor t = make_tensor({}, s.dtype());
  KILN_DTYPE_SWITCH_ALL(s.dtype(), "wrap_scalar",
                        [&]<typename T>() { *static_cast<T*>(t.data_ptr()) = s.to<T>(); });
  t.impl()->set_wrapped_number(true);
  return t;
}

namespace ops {

// ---- arithmetic ----
void check_alpha(const OpCall& c, DType result) {
  if (c.attrs.size() == 0 || !c.attrs.has(0)) return;
  const Scalar& alpha = c.attrs.scalar(0);
  KILN_CHECK(is_floating(result) || !alpha.is_floating(), DTypeError, c.op.name,
             ": for integer inputs alpha must not be a floating-point number, got ", alpha);
  if (is_integral(result)) check_scalar_fits(alpha, result, c.op.name.data());
  KILN_CHECK(result != DType::Bool || alpha.is_bool() || alpha.to_int() == 1 || alpha.to_int() == 0,
             DTypeError, c.op.name, ": for bool inputs alpha must be a bool, got ", alpha);
}
template <bool Sub>
int add_sub_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  int n = pointwise_meta<Dtypes::All>(c, out);
  KILN_CHECK(!Sub || out[0].dtype != DType::Bool, DTypeError,
             "sub: subtraction of bool tensors is not supported; use logical_xor instead");
  check_alpha(c, out[0].dtype);
  return n;
}
// ---- derivatives (written in Kiln ops; autograd sums broadcast gradients back down) ----
void add_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(1)) {
    const Scalar& alpha = c.attrs.scalar(0);
    g[1] = alpha.to<double>() == 1.0 ? c.grad() : c.grad() * alpha;
  }
}
void sub_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(1)) g[1] = c.grad() * (-c.attrs.scalar(0).to<double>());
}
void mul_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad() * c.in(1);
  if (c.needs_grad(1)) g[1] = c.grad() * c.in(0);
}
void div_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad() / c.in(1);
  if (c.needs_grad(1)) g[1] = -c.grad() * c.in(0) / (c.in(1) * c.in(1));
}

const OpDef& add_op =
    register_pointwise({.name = "add",
                        .schema = "add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = add_sub_meta<false>,
                        .derivative = {.fn = add_derivative}},
                       KILN_MAP_KERNEL(add_fn, All));
const OpDef& sub_op =
    register_pointwise({.name = "sub",
                        .schema = "sub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = add_sub_meta<true>,
                        .derivative = {.fn = sub_derivative}},
                       KILN_MAP_KERNEL(sub_fn, Numeric));
const OpDef& mul_op =
    register_pointwise({.name = "mul",
                        .schema = "mul(Tensor self, Tensor other) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pointwise_meta<Dtypes::All>,
                        .derivative = {.fn = mul_derivative, .saved_inputs = save({0, 1})}},
                       KILN_MAP_KERNEL(mul_fn, All));
const OpDef& div_op =
    register_pointwise({.name = "div",
                        .schema = "div(Tensor self, Tensor other) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pointwise_meta<Dtypes::All, true>,
                        .derivative = {.fn = div_derivative, .saved_inputs = save({0, 1})}},
                       KILN_MAP_KERNEL(true_div_fn, Floating));

// Integer division by zero has no value (PyTorch raises ZeroDivisionError); check before
// touching the output.
void check_integer_divisor(const OpCall& c, DType dt, int64_t out_numel) {
  if (is_floating(dt) || out_numel == 0) return;  // an empty result divides nothing
  Tensor b = cast(c.in(1), dt);
  KILN_DTYPE_SWITCH_ALL(dt, c.op.name.data(), [&]<typename T>() {
    for (T v : b.to_vector<T>())
      KILN_CHECK(v != T(0), ValueError, c.op.name, ": integer division by zero");
  });
}
// Rounded quotients are step functions: zero derivative almost everywhere.
void rounded_div_derivative(const BackwardCall& c, std::span<Tensor> g) {
  for (int i = 0; i < 2; ++i)
    if (c.needs_grad(i)) g[i] = zeros_like(c.grad());
}
// remainder(a, b) = a - b * floor(a / b): d/da = 1, d/db = -floor(a / b).
void remainder_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(1)) g[1] = -(c.grad() * floor_divide(c.in(0), c.in(1)));
}
template <template <typename> class Fn>
void int_div_kernel(const OpCall& c, std::span<Tensor> outs) {
  check_integer_divisor(c, outs[0].dtype(), outs[0].numel());
  scalar_map_kernel<Fn, Dtypes::Numeric>(c, outs);
}
const OpDef& floor_divide_op =
    register_pointwise({.name = "floor_divide",
                        .schema = "floor_divide(Tensor self, Tensor other) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pointwise_meta<Dtypes::Numeric>,
                        .derivative = {.fn = rounded_div_derivative}},
                       KILN_FUNCTOR_KERNEL(int_div_kernel, Scalar, floor_div_fn));
const OpDef& trunc_divide_op =
    register_pointwise({.name = "trunc_divide",
                        .schema = "trunc_divide(Tensor self, Tensor other) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pointwise_meta<Dtypes::Numeric>,
                        .derivative = {.fn = rounded_div_derivative},
                        .internal = true},
                       KILN_FUNCTOR_KERNEL(int_div_kernel, Scalar, trunc_div_fn));
const OpDef& remainder_op =
    register_pointwise({.name = "remainder",
                        .schema = "remainder(Tensor self, Tensor other) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pointwise_meta<Dtypes::Numeric>,
                        .derivative = {.fn = remainder_derivative, .saved_inputs = save({0, 1})}},
                       KILN_FUNCTOR_KERNEL(int_div_kernel, Scalar, remainder_fn));

// ---- pow ----
int pow_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  int n = pointwise_meta<Dtypes::Numeric>(c, out);
  const Tensor& e = c.in(1);
  if (!is_floating(out[0].dtype) && e.impl()->is_wrapped_number()) {
    KILN_CHECK(e.item<int64_t>() >= 0, ValueError,
               "pow: integers to negative integer powers are not allowed (exponent ",
               e.item<int64_t>(), ")");
  }
  return n;
}
// d/dx x^e = e * x^(e-1) (zero where e == 0, as PyTorch, so 0^0 gives no NaN);
// d/de x^e = x^e * log(x), zero where x == 0 and e >= 0 (the limit), with log's argument
// replaced there so that no NaN/inf leaks into the double backward either.
void pow_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& x = c.in(0);
  const Tensor& e = c.in(1);
  const DType dt = c.output_meta[0].dtype;
  const Tensor zero = wrap_scalar(0.0);
  if (c.needs_grad(0)) {
    const Tensor xf = x.to(dt), ef = e.to(dt);
    g[0] = where(ef == 0, zero, c.grad() * ef * pow(xf, ef - 1));
  }
  if (c.needs_grad(1)) {
    const Tensor xf = x.to(dt);
    const Tensor at_zero = logical_and(xf == 0, e >= 0);
    const Tensor safe_x = where(at_zero, wrap_scalar(1.0), xf);
    g[1] = where(at_zero, zero, c.grad() * pow(safe_x, e.to(dt)) * log(safe_x));
  }
}
const OpDef& pow_op =
    register_pointwise({.name = "pow",
                        .schema = "pow(Tensor self, Tensor exponent) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pow_meta,
                        .derivative = {.fn = pow_derivative, .saved_inputs = save({0, 1})}},
                       KILN_MAP_KERNEL(pow_fn, Numeric));

// ---- maximum, minimum, atan2 ----
// The gradient goes to the larger (maximum) or smaller (minimum) operand; on ties each gets
// half, as PyTorch.
template <bool Max>
void extremum_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  const Tensor zero = wrap_scalar(0.0);
  const Tensor tie = a == b;
  const Tensor half = c.grad() * 0.5;
  if (c.needs_grad(0)) g[0] = where(tie, half, where(Max ? a > b : a < b, c.grad(), zero));
  if (c.needs_grad(1)) g[1] = where(tie, half, where(Max ? b > a : b < a, c.grad(), zero));
}
// atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2).
void atan2_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& a = c.in(0);
  const Tensor& b = c.in(1);
  const Tensor denom = a * a + b * b;
  if (c.needs_grad(0)) g[0] = c.grad() * b / denom;
  if (c.needs_grad(1)) g[1] = -(c.grad() * a / denom);
}
const OpDef& maximum_op = register_pointwise(
    {.name = "maximum",
     .schema = "maximum(Tensor self, Tensor other) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = pointwise_meta<Dtypes::All>,
     .derivative = {.fn = extremum_derivative<true>, .saved_inputs = save({0, 1})}},
    KILN_MAP_KERNEL(maximum_fn, All));
const OpDef& minimum_op = register_pointwise(
    {.name = "minimum",
     .schema = "minimum(Tensor self, Tensor other) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = pointwise_meta<Dtypes::All>,
     .derivative = {.fn = extremum_derivative<false>, .saved_inputs = save({0, 1})}},
    KILN_MAP_KERNEL(minimum_fn, All));
const OpDef& atan2_op =
    register_pointwise({.name = "atan2",
                        .schema = "atan2(Tensor self, Tensor other) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = pointwise_meta<Dtypes::All, true>,
                        .derivative = {.fn = atan2_derivative, .saved_inputs = save({0, 1})}},
                       KILN_MAP_KERNEL(atan2_fn, Floating));

// ---- comparisons and logical ops (bool results) ----
#define KILN_PREDICATE_BINARY(NAME, WHICH)                                         \
  const OpDef& NAME##_op =                                                         \
      register_pointwise({.name = #NAME,                                           \
                          .schema = #NAME "(Tensor self, Tensor other) -> Tensor", \
                          .kind = OpKind::Pointwise,                               \
                          .meta = pointwise_meta<Dtypes::WHICH, false, true>},     \
                         KILN_PREDICATE_KERNEL(NAME##_fn, WHICH));
// isclose: attrs [rtol, atol, equal_nan]; inputs promoted to a common dtype (PyTorch requires
// equal dtypes), shapes broadcast.
int isclose_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const double rtol = c.attrs.f(0), atol = c.attrs.f(1);
  KILN_CHECK(rtol >= 0, ValueError, "isclose: rtol must be non-negative, got ", rtol);
  KILN_CHECK(atol >= 0, ValueError, "isclose: atol must be non-negative, got ", atol);
  return pointwise_meta<Dtypes::All, false, true>(c, out);
}
const OpDef& isclose_op =
    register_pointwise({.name = "isclose",
                        .schema = "isclose(Tensor self, Tensor other, float rtol=1e-05, float "
                                  "atol=1e-08, bool equal_nan=False) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = isclose_meta},
                       KILN_PREDICATE_KERNEL(isclose_fn, All));
KILN_PREDICATE_BINARY(eq, All)
KILN_PREDICATE_BINARY(ne, All)
KILN_PREDICATE_BINARY(lt, All)
KILN_PREDICATE_BINARY(le, All)
KILN_PREDICATE_BINARY(gt, All)
KILN_PREDICATE_BINARY(ge, All)
KILN_PREDICATE_BINARY(logical_and, All)
KILN_PREDICATE_BINARY(logical_or, All)
KILN_PREDICATE_BINARY(logical_xor, All)
#undef KILN_PREDICATE_BINARY

// ---- bitwise (integers and bool) ----
#define KILN_BITWISE(NAME)                                                         \
  const OpDef& NAME##_op =                                                         \
      register_pointwise({.name = #NAME,                                           \
                          .schema = #NAME "(Tensor self, Tensor other) -> Tensor", \
                          .kind = OpKind::Pointwise,                               \
                          .meta = pointwise_meta<Dtypes::Integral>},               \
                         KILN_SCALAR_MAP_KERNEL(NAME##_fn, Integral));
KILN_BITWISE(bitwise_and)
KILN_BITWISE(bitwise_or)
KILN_BITWISE(bitwise_xor)
#undef KILN_BITWISE

}  // namespace ops

// ---- functional API ----
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return ops::call(ops::add_op, {a, b}, {alpha});
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return ops::call(ops::sub_op, {a, b}, {alpha});
}
Tensor mul(const Tensor& a, const Tensor& b) { return ops::call(ops::mul_op, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return ops::call(ops::div_op, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  if (rounding_mode == "floor") return ops::call(ops::floor_divide_op, {a, b});
  if (rounding_mode == "trunc") return ops::call(ops::trunc_divide_op, {a, b});
  throw ValueError(detail::concat("div: rounding_mode must be \"floor\" or \"trunc\", got \"",
                                  rounding_mode, "\""));
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return ops::call(ops::floor_divide_op, {a, b});
}
Tensor remainder(const Tensor& a, const Tensor& b) { return ops::call(ops::remainder_op, {a, b}); }
Tensor pow(const Tensor& a, const Tensor& b) { return ops::call(ops::pow_op, {a, b}); }
Tensor pow(const Tensor& a, const Scalar& b) { return pow(a, wrap_scalar(b)); }
Tensor pow(const Scalar& a, const Tensor& b) { return pow(wrap_scalar(a), b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return ops::call(ops::maximum_op, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return ops::call(ops::minimum_op, {a, b}); }
Tensor atan2(const Tensor& a, const Tensor& b) { return ops::call(ops::atan2_op, {a, b}); }
Tensor eq(const Tensor& a, const Tensor& b) { return ops::call(ops::eq_op, {a, b}); }
Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return ops::call(ops::isclose_op, {a, b}, {rtol, atol, equal_nan});
}
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  // A sync point under kiln::compile, as torch.allclose (it returns a C++ bool).
  const Tensor close = isclose(a, b, rtol, atol, equal_nan);
  return close.numel() == 0 || all(close).item<bool>();
}
bool equal(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), Error, "equal: ", a.defined() ? "b" : "a",
             " is an undefined tensor");
  if (a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;
  return all(eq(a, b)).item<bool>();
}
Tensor ne(const Tensor& a, const Tensor& b) { return ops::call(ops::ne_op, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return ops::call(ops::lt_op, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return ops::call(ops::le_op, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return ops::call(ops::gt_op, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return ops::call(ops::ge_op, {a, b}); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return ops::call(ops::logical_and_op, {a, b});
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return ops::call(ops::logical_or_op, {a, b});
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return ops::call(ops::logical_xor_op, {a, b});
}
Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  return ops::call(ops::bitwise_and_op, {a, b});
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  return ops::call(ops::bitwise_or_op, {a, b});
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  return ops::call(ops::bitwise_xor_op, {a, b});
}

Tensor& add_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  return ops::call_into(self, ops::add_op, {self, other}, {alpha});
}
Tensor& sub_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  return ops::call_into(self, ops::sub_op, {self, other}, {alpha});
}
Tensor& mul_(Tensor& self, const Tensor& other) {
  return ops::call_into(self, ops::mul_op, {self, other});
}
Tensor& div_(Tensor& self, const Tensor& other) {
  return ops::call_into(self, ops::div_op, {self, other});
}
Tensor& pow_(Tensor& self, const Scalar& exponent) {
  return ops::call_into(self, ops::pow_op, {self, wrap_scalar(exponent)});
}
Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return ops::call_into(out, ops::add_op, {a, b}, {alpha});
}
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  return ops::call_into(out, ops::mul_op, {a, b});
}

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, wrap_scalar(b)); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, wrap_scalar(b)); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, wrap_scalar(b)); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, wrap_scalar(b)); }
Tensor operator%(const Tensor& a, const Scalar& b) { return remainder(a, wrap_scalar(b)); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(wrap_scalar(a), b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(wrap_scalar(a), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(wrap_scalar(a), b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(wrap_scalar(a), b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, wrap_scalar(b)); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, wrap_scalar(b)); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, wrap_scalar(b)); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, wrap_scalar(b)); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, wrap_scalar(b)); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, wrap_scalar(b)); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }
Tensor& operator+=(Tensor& a, const Scalar& b) { return add_(a, wrap_scalar(b)); }
Tensor& operator-=(Tensor& a, const Scalar& b) { return sub_(a, wrap_scalar(b)); }
Tensor& operator*=(Tensor& a, const Scalar& b) { return mul_(a, wrap_scalar(b)); }
Tensor& operator/=(Tensor& a, const Scalar& b) { return div_(a, wrap_scalar(b)); }

// ---- Python-facing forms (kiln/ops/function.h): the in-place methods, division with a
// rounding mode, and the comparisons that return a Python bool ----
namespace {
using Args = const FunctionArgs&;
Tensor self_of(Args a) { return a.tensor(0); }  // shares the caller's tensor
const FunctionDef& div_function = register_function(
    {.schema = "div(Tensor self, Tensor other, *, str? rounding_mode=None) -> Tensor",
     .doc = "self / other: true division, or rounded \"floor\" or \"trunc\".",
     .call = [](Args a) -> FunctionResult {
       if (!a.has(2)) return div(a.tensor(0), a.tensor(1));
       return div(a.tensor(0), a.tensor(1), a.str(2));
     }});
const FunctionDef& add__function =
    register_function({.schema = "add_(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                       .doc = "self += alpha * other, in place.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = self_of(a);
                         return add_(self, a.tensor(1), a.scalar(2));
                       }});
const FunctionDef& sub__function =
    register_function({.schema = "sub_(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
                       .doc = "self -= alpha * other, in place.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = self_of(a);
                         return sub_(self, a.tensor(1), a.scalar(2));
                       }});
const FunctionDef& mul__function =
    register_function({.schema = "mul_(Tensor self, Tensor other) -> Tensor",
                       .doc = "self *= other, in place.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = self_of(a);
                         return mul_(self, a.tensor(1));
                       }});
const FunctionDef& div__function =
    register_function({.schema = "div_(Tensor self, Tensor other) -> Tensor",
                       .doc = "self /= other, in place.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = self_of(a);
                         return div_(self, a.tensor(1));
                       }});
const FunctionDef& pow__function =
    register_function({.schema = "pow_(Tensor self, Scalar exponent) -> Tensor",
                       .doc = "self **= exponent, in place.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = self_of(a);
                         return pow_(self, a.scalar(1));
                       }});
const FunctionDef& allclose_function = register_function(
    {.schema = "allclose(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, "
               "bool equal_nan=False) -> bool",
     .doc = "Whether every |self - other| <= atol + rtol |other| (a sync point under compile).",
     .call = [](Args a) -> FunctionResult {
       return Scalar(allclose(a.tensor(0), a.tensor(1), a.f(2), a.f(3), a.b(4)));
     }});
const FunctionDef& equal_function = register_function(
    {.schema = "equal(Tensor self, Tensor other) -> bool",
     .doc = "Whether self and other have the same shape and values (a sync point under compile).",
     .call = [](Args a) -> FunctionResult { return Scalar(equal(a.tensor(0), a.tensor(1))); }});
}  // namespace

}  // namespace kiln
