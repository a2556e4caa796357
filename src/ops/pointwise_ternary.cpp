// Ternary pointwise ops (where, lerp, addcmul, addcdiv, masked_fill) and the copy/fill/cast
// family that every in-place write goes through.
#include <cstring>
#include <type_traits>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/pointwise.h"
#include "ops/pointwise_defs.h"

namespace kiln {
namespace ops {

// Writes src (broadcast to out's shape) into out, converting the dtype. Kernels call this
// directly (never through dispatch) when they need an operand in another dtype.
void convert_into(const Tensor& out, const Tensor& src) {
  if (src.dtype() == out.dtype() && src.is_contiguous() && out.is_contiguous() &&
      src.sizes() == out.sizes()) {
    const char* s = static_cast<const char*>(src.data_ptr());
    char* d = static_cast<char*>(out.data_ptr());
    if (s == d) return;  // x.copy_(x): nothing to move (and memcpy must not overlap)
    const int64_t isz = out.element_size();
    kernels::parallel_range(out.numel(), kParallelGrain * 4, [&](int64_t b, int64_t e) {
      std::memcpy(d + b * isz, s + b * isz, static_cast<size_t>((e - b) * isz));
    });
    return;
  }
  KILN_DTYPE_SWITCH_ALL(out.dtype(), "copy_", [&]<typename To>() {
    KILN_DTYPE_SWITCH_ALL(src.dtype(), "copy_", [&]<typename From>() {
      if constexpr (std::is_same_v<From, bool>) {
        // Read as bytes: GCC vectorises neither a load of `bool` nor its conversion (a mask
        // cast to float took ~0.5 ns an element, 7x a float multiply).
        kernels::map_scalar<To, uint8_t>(out, [](uint8_t v) { return static_cast<To>(v != 0); },
                                         {&src});
      } else {
        kernels::map_scalar<To, From>(out, [](From v) { return static_cast<To>(v); }, {&src});
      }
    });
  });
}

// ---- to_copy: a new contiguous tensor with x's values in dtype (clone, to(dtype)) ----
int to_copy_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, c.attrs.dtype(0), c.in(0).sizes());
}
void to_copy_kernel(const OpCall& c, std::span<Tensor> outs) { convert_into(outs[0], c.in(0)); }
const OpDef& to_copy_op = register_op(
    {.name = "to_copy",
     .schema = "to_copy(Tensor self, ScalarType dtype) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = to_copy_meta,
     .kernel = to_copy_kernel,
     // autograd casts the gradient back to the input's dtype
     .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) { g[0] = c.grad(); }},
     .pointwise = KILN_FUNCTOR_BODY(Scalar, to_copy_fn),
     .internal = true});

// ---- copy: out (self's shape and dtype) = src broadcast and cast; the in-place copy_ ----
int copy_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& self = c.in(0);
  const Tensor& src = c.in(1);
  Shape b = broadcast_shapes("copy_", c.inputs);
  KILN_CHECK(b == self.sizes(), ShapeError, "copy_: source of shape ", src.shape_str(),
             " cannot be broadcast to the destination's shape ", self.shape_str());
  return one_output(out, self.dtype(), self.sizes());
}
void copy_kernel(const OpCall& c, std::span<Tensor> outs) { convert_into(outs[0], c.in(1)); }
const OpDef& copy_op =
    register_op({.name = "copy",
                 .schema = "copy(Tensor self, Tensor src) -> Tensor",
                 .kind = OpKind::Pointwise,
                 .meta = copy_meta,
                 .kernel = copy_kernel,
                 // the old value of self is overwritten: only src gets one
                 .derivative = {.fn =
                                    [](const BackwardCall& c, std::span<Tensor> g) {
                                      if (c.needs_grad(1)) g[1] = c.grad();
                                    }},
                 .pointwise = KILN_FUNCTOR_BODY(Scalar, copy_fn),
                 .internal = true});

// ---- fill: out (self's shape and dtype) = value ----
int fill_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  check_scalar_fits(c.attrs.scalar(0), c.in(0).dtype(), "fill_");
  return one_output(out, c.in(0).dtype(), c.in(0).sizes());
}
void fill_tensor(const Tensor& out, const Scalar& value) {
  KILN_DTYPE_SWITCH_ALL(out.dtype(), "fill_", [&]<typename T>() {
    const T v = value.to<T>();
    kernels::map_scalar<T>(out, [v]() { return v; }, {});
  });
}
void fill_kernel(const OpCall& c, std::span<Tensor> outs) {
  fill_tensor(outs[0], c.attrs.scalar(0));
}
const OpDef& fill_op =
    register_op({.name = "fill",
                 .schema = "fill(Tensor self, Scalar value) -> Tensor",
                 .kind = OpKind::Pointwise,
                 .meta = fill_meta,
                 .kernel = fill_kernel,
                 .derivative = {.fn = [](const BackwardCall&, std::span<Tensor>) {}},
                 .pointwise = KILN_FUNCTOR_BODY(Scalar, fill_fn),
                 .internal = true});

// ---- where ----
int where_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.in(0).dtype() == DType::Bool, DTypeError,
             "where: condition must be a bool tensor, got dtype ", c.in(0).dtype());
  DType dt = result_type(c.inputs.subspan(1));
  check_wrapped_numbers("where", c.inputs.subspan(1), dt);
  return one_output(out, dt, broadcast_shapes("where", c.inputs));
}
void where_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  KILN_DTYPE_SWITCH_ALL(out.dtype(), "where", [&]<typename T>() {
    Tensor a = cast(c.in(1), out.dtype()), b = cast(c.in(2), out.dtype());
    kernels::map_scalar<T, bool, T, T>(out, where_fn<T>{}, {&c.in(0), &a, &b});
  });
}
const OpDef& where_op =
    register_op({.name = "where",
                 .schema = "where(Tensor condition, Tensor self, Tensor other) -> Tensor",
                 .kind = OpKind::Pointwise,
                 .meta = where_meta,
                 .kernel = where_kernel,
                 // the condition (bool) gets no gradient
                 .derivative = {.fn =
                                    [](const BackwardCall& c, std::span<Tensor> g) {
                                      const Tensor zero = wrap_scalar(0.0);
                                      if (c.needs_grad(1)) g[1] = where(c.in(0), c.grad(), zero);
                                      if (c.needs_grad(2)) g[2] = where(c.in(0), zero, c.grad());
                                    },
                                .saved_inputs = save({0})},
                 .pointwise = KILN_FUNCTOR_BODY(Scalar, where_fn)});

// ---- masked_fill: x with value where mask ----
int masked_fill_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  KILN_CHECK(c.in(1).dtype() == DType::Bool, DTypeError,
             "masked_fill: mask must be a bool tensor, got dtype ", c.in(1).dtype());
  Shape b = broadcast_shapes("masked_fill", c.inputs);
  KILN_CHECK(b == x.sizes(), ShapeError, "masked_fill: mask of shape ", c.in(1).shape_str(),
             " cannot be broadcast to the tensor's shape ", x.shape_str());
  check_scalar_fits(c.attrs.scalar(0), x.dtype(), "masked_fill");
  return one_output(out, x.dtype(), x.sizes());
}
void masked_fill_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  KILN_DTYPE_SWITCH_ALL(out.dtype(), "masked_fill", [&]<typename T>() {
    kernels::map_scalar<T, T, bool>(out, masked_fill_fn<T>(c.attrs), {&c.in(0), &c.in(1)});
  });
}
const OpDef& masked_fill_op =
    register_op({.name = "masked_fill",
                 .schema = "masked_fill(Tensor self, Tensor mask, Scalar value) -> Tensor",
                 .kind = OpKind::Pointwise,
                 .meta = masked_fill_meta,
                 .kernel = masked_fill_kernel,
                 // filled positions no longer depend on self; the mask gets no gradient
                 .derivative = {.fn =
                                    [](const BackwardCall& c, std::span<Tensor> g) {
                                      if (c.needs_grad(0))
                                        g[0] = where(c.in(1), wrap_scalar(0.0), c.grad());
                                    },
                                .saved_inputs = save({1})},
                 .pointwise = KILN_FUNCTOR_BODY(Scalar, masked_fill_fn)});

// ---- lerp, addcmul, addcdiv ----
// ---- derivatives: lerp = s + w * (e - s); addcmul = s + v * a * b; addcdiv = s + v * a / b ----
void lerp_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& w = c.in(2);
  if (c.needs_grad(0)) g[0] = c.grad() * (1 - w);
  if (c.needs_grad(1)) g[1] = c.grad() * w;
  if (c.needs_grad(2)) g[2] = c.grad() * (c.in(1) - c.in(0));
}
Tensor scaled(const Tensor& t, const Scalar& value) {
  return value.to<double>() == 1.0 ? t : t * value;
}
void addcmul_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Scalar& v = c.attrs.scalar(0);
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(1)) g[1] = scaled(c.grad() * c.in(2), v);
  if (c.needs_grad(2)) g[2] = scaled(c.grad() * c.in(1), v);
}
void addcdiv_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Scalar& v = c.attrs.scalar(0);
  const Tensor& b = c.in(2);
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(1)) g[1] = scaled(c.grad() / b, v);
  if (c.needs_grad(2)) g[2] = -scaled(c.grad() * c.in(1) / (b * b), v);
}
// Interpolation is defined between floating endpoints only (as PyTorch): integer endpoints
// must not be promoted to float by a floating weight.
int lerp_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  for (int k = 0; k < 2; ++k)
    KILN_CHECK(is_floating(c.in(k).dtype()), DTypeError, "lerp: ", k == 0 ? "start" : "end",
               " must be floating, got dtype ", c.in(k).dtype(),
               " (not supported for integer or bool dtypes)");
  return pointwise_meta<Dtypes::Floating>(c, out);
}
const OpDef& lerp_op =
    register_pointwise({.name = "lerp",
                        .schema = "lerp(Tensor self, Tensor end, Tensor weight) -> Tensor",
                        .kind = OpKind::Pointwise,
                        .meta = lerp_meta,
                        .derivative = {.fn = lerp_derivative, .saved_inputs = save({0, 1, 2})}},
                       KILN_MAP_KERNEL(lerp_fn, Floating));
const OpDef& addcmul_op = register_pointwise(
    {.name = "addcmul",
     .schema = "addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = pointwise_meta<Dtypes::Numeric>,
     .derivative = {.fn = addcmul_derivative, .saved_inputs = save({1, 2})}},
    KILN_MAP_KERNEL(addcmul_fn, Numeric));
int addcdiv_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  int n = pointwise_meta<Dtypes::Numeric>(c, out);
  KILN_CHECK(is_floating(out[0].dtype), DTypeError,
             "addcdiv: integer division is not supported (inputs promote to ", out[0].dtype, ")");
  return n;
}
const OpDef& addcdiv_op = register_pointwise(
    {.name = "addcdiv",
     .schema = "addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
     .kind = OpKind::Pointwise,
     .meta = addcdiv_meta,
     .derivative = {.fn = addcdiv_derivative, .saved_inputs = save({1, 2})}},
    KILN_MAP_KERNEL(addcdiv_fn, Floating));

}  // namespace ops

Tensor& copy_(Tensor& self, const Tensor& src) {
  return ops::call_into(self, ops::copy_op, {self, src});
}
Tensor& fill_(Tensor& self, const Scalar& value) {
  return ops::call_into(self, ops::fill_op, {self}, {value});
}
Tensor& zero_(Tensor& self) { return fill_(self, 0); }

Tensor to_dtype(const Tensor& x, DType dtype) {
  KILN_CHECK(x.defined(), Error, "to: the tensor is undefined");
  if (x.dtype() == dtype) return x;
  return ops::call(ops::to_copy_op, {x}, {dtype});
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return ops::call(ops::where_op, {condition, a, b});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  return ops::call(ops::masked_fill_op, {x, mask}, {value});
}
Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Scalar& value) {
  return ops::call_into(self, ops::masked_fill_op, {self, mask}, {value});
}
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  return ops::call(ops::lerp_op, {start, end, weight});
}
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight) {
  return lerp(start, end, wrap_scalar(weight));
}
Tensor& lerp_(Tensor& self, const Tensor& end, const Scalar& weight) {
  return ops::call_into(self, ops::lerp_op, {self, end, wrap_scalar(weight)});
}
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return ops::call(ops::addcmul_op, {self, t1, t2}, {value});
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return ops::call(ops::addcdiv_op, {self, t1, t2}, {value});
}
Tensor& addcmul_(Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return ops::call_into(self, ops::addcmul_op, {self, t1, t2}, {value});
}
Tensor& addcdiv_(Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  return ops::call_into(self, ops::addcdiv_op, {self, t1, t2}, {value});
}

// ---- Python-facing forms of the in-place methods (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
const FunctionDef& copy__function =
    register_function({.schema = "copy_(Tensor self, Tensor src) -> Tensor",
                       .doc = "Copies src (broadcast, cast) into self.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = a.tensor(0);
                         return copy_(self, a.tensor(1));
                       }});
const FunctionDef& fill__function =
    register_function({.schema = "fill_(Tensor self, Scalar value) -> Tensor",
                       .doc = "Sets every element of self to value.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = a.tensor(0);
                         return fill_(self, a.scalar(1));
                       }});
const FunctionDef& zero__function = register_function({.schema = "zero_(Tensor self) -> Tensor",
                                                       .doc = "Sets every element of self to zero.",
                                                       .call = [](Args a) -> FunctionResult {
                                                         Tensor self = a.tensor(0);
                                                         return zero_(self);
                                                       }});
const FunctionDef& masked_fill__function =
    register_function({.schema = "masked_fill_(Tensor self, Tensor mask, Scalar value) -> Tensor",
                       .doc = "Sets the elements of self where mask is true to value.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = a.tensor(0);
                         return masked_fill_(self, a.tensor(1), a.scalar(2));
                       }});
const FunctionDef& lerp__function =
    register_function({.schema = "lerp_(Tensor self, Tensor end, Scalar weight) -> Tensor",
                       .doc = "self += weight * (end - self), in place.",
                       .call = [](Args a) -> FunctionResult {
                         Tensor self = a.tensor(0);
                         return lerp_(self, a.tensor(1), a.scalar(2));
                       }});
const FunctionDef& addcmul__function = register_function(
    {.schema = "addcmul_(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
     .doc = "self += value * tensor1 * tensor2, in place.",
     .call = [](Args a) -> FunctionResult {
       Tensor self = a.tensor(0);
       return addcmul_(self, a.tensor(1), a.tensor(2), a.scalar(3));
     }});
const FunctionDef& addcdiv__function = register_function(
    {.schema = "addcdiv_(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
     .doc = "self += value * tensor1 / tensor2, in place.",
     .call = [](Args a) -> FunctionResult {
       Tensor self = a.tensor(0);
       return addcdiv_(self, a.tensor(1), a.tensor(2), a.scalar(3));
     }});
}  // namespace

}  // namespace kiln
