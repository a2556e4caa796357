// Reductions (sum, mean, prod, amax/amin, max/min along a dim, argmax/argmin, var, logsumexp,
// norm, all/any) and scans (cumsum, cumprod): one OpDef each, with their loops in
// kernels/reduce.h. std, and max/min over all elements, are composites.
#include <cmath>
#include <limits>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/kernels/reduce.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {
namespace {

using kernels::highest_value;
using kernels::IdentityMap;
using kernels::lowest_value;
using kernels::make_reducer;
using kernels::make_reducer_in;
using kernels::reduce_loop;
namespace fold = kernels::fold;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- shared argument handling ----
// The dim-list reductions share their first attributes: 0 = dims, 1 = keepdim.

struct ReduceShape {
  std::vector<bool> reduced;  // per input dim
  Shape out_sizes;
  int64_t num_red = 1;  // elements folded into each output
};

ReduceShape reduce_shape(const OpCall& c) {
  const Tensor& x = c.in(0);
  ReduceShape s;
  s.reduced.assign(static_cast<size_t>(x.dim()), false);
  for (int64_t d : reduction_dims(c.attrs.ints(0), x.dim(), c.op.name.data()))
    s.reduced[static_cast<size_t>(d)] = true;
  const bool keepdim = c.attrs.b(1);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!s.reduced[static_cast<size_t>(d)]) {
      s.out_sizes.push_back(x.size(d));
      continue;
    }
    s.num_red *= x.size(d);
    if (keepdim) s.out_sizes.push_back(1);
  }
  return s;
}

void check_floating(const OpCall& c) {
  KILN_CHECK(is_floating(c.in(0).dtype()), DTypeError, c.op.name,
             ": expected a floating-point input but got a ", describe(c.in(0)),
             "; convert it first, e.g. x.to(DType::Float32)");
}

// For folds without an identity (max, min, inf-norms).
void check_nonempty(const OpCall& c, const ReduceShape& s) {
  const Tensor& x = c.in(0);
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(!s.reduced[static_cast<size_t>(d)] || x.size(d) != 0, IndexError, c.op.name,
               ": cannot reduce over a zero-size dimension (dim ", d, " of a ", describe(x),
               "): the operation has no identity value");
}

// Accumulators: double for floating inputs (accurate float32 sums), int64 for the rest.
template <typename T>
using WideAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// ---- sum, prod ----

DType sum_dtype(const OpCall& c) {
  if (c.attrs.has(2)) return c.attrs.dtype(2);
  const DType d = c.in(0).dtype();
  return is_floating(d) ? d : DType::Int64;
}

int sum_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, sum_dtype(c), reduce_shape(c).out_sizes);
}

template <typename Fold, int Identity>
void sum_prod_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  const DType od = out.dtype();
  const ReduceShape s = reduce_shape(c);
  const char* name = c.op.name.data();
  // Like PyTorch's dtype=, the input is converted first when the category changes; within a
  // category the wide accumulator gives the same result without a copy.
  Tensor x = c.in(0);
  if (od == DType::Bool || is_floating(od) != is_floating(x.dtype())) x = cast(x, od);
  auto run = [&]<typename T, typename O>() {
    using Acc = WideAcc<T>;
    auto r = make_reducer<T, O>(Acc(Identity), IdentityMap{}, Fold{},
                                [](Acc a, int64_t) { return static_cast<O>(a); });
    reduce_loop<T>(x, s.reduced, out.data_ptr<O>(), r);
  };
  if (od == DType::Bool) {
    run.template operator()<bool, bool>();
  } else if (is_floating(od)) {
    KILN_DTYPE_SWITCH_FLOATING(x.dtype(), name, [&]<typename T>() {
      if (od == DType::Float32)
        run.template operator()<T, float>();
      else
        run.template operator()<T, double>();
    });
  } else {
    KILN_DTYPE_SWITCH_INTEGRAL(x.dtype(), name, [&]<typename T>() {
      if (od == DType::Int32)
        run.template operator()<T, int32_t>();
      else
        run.template operator()<T, int64_t>();
    });
  }
}

void sum_derivative(const BackwardCall& c, std::span<Tensor> g) {
  g[0] = unreduce(c.grad(), c.input_meta[0].sizes, c.attrs.ints(0), c.attrs.b(1));
}
void mean_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const IntList in = c.input_meta[0].sizes;
  const double n = static_cast<double>(reduced_count(in, c.attrs.ints(0)));
  g[0] = unreduce(c.grad() / n, in, c.attrs.ints(0), c.attrs.b(1));
}

// ---- derivatives of the other reductions (in Kiln ops) ----
// Attributes of the dim-list reductions: 0 = dims, 1 = keepdim.
Tensor unreduced(const BackwardCall& c, const Tensor& t) {
  return unreduce(t, c.input_meta[0].sizes, c.attrs.ints(0), c.attrs.b(1));
}
// The gradient of a max/min-like reduction, split evenly among the elements equal to the
// result (PyTorch's rule for ties). `x` is what was reduced (the input, or |input| for norms).
Tensor split_among_ties(const BackwardCall& c, const Tensor& x, const Tensor& out,
                        const Tensor& grad) {
  const Tensor hit = eq(x, unreduced(c, out));
  const Tensor count = sum(hit, c.attrs.ints(0), true).to(grad.dtype());
  Tensor g = grad;
  if (!c.attrs.b(1) && x.dim() > 0)
    for (int64_t d : reduction_dims(c.attrs.ints(0), x.dim(), "split_among_ties"))
      g = g.unsqueeze(d);
  return hit * (g / count).expand(c.input_meta[0].sizes);
}

// d prod / d x_i = the product of the others: out / x_i where x_i != 0; where x_i is a slice's
// only zero, the product of the slice's non-zero elements; 0 where the slice has more zeros.
void prod_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& x = c.in(0);
  const IntList dims = c.attrs.ints(0);
  const Tensor is_zero = eq(x, wrap_scalar(0));
  const Tensor ones_where_zero = where(is_zero, wrap_scalar(1), x);
  const Tensor others_nonzero = prod(ones_where_zero, dims, true);
  const Tensor one_zero = eq(sum(is_zero, dims, true), wrap_scalar(1));
  const Tensor at_zero = where(one_zero, others_nonzero, zeros({}, x.dtype()));
  const Tensor d = where(is_zero, at_zero, unreduced(c, c.out(0)) / ones_where_zero);
  g[0] = unreduced(c, c.grad()) * d;
}
void amax_amin_derivative(const BackwardCall& c, std::span<Tensor> g) {
  g[0] = split_among_ties(c, c.in(0), c.out(0), c.grad());
}
// max_dim/min_dim: the gradient goes to the position the index output names.
void max_dim_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (!c.grad(0).defined()) return;
  const int64_t nd = c.input_meta[0].sizes.ssize();
  Tensor grad = c.grad(0), index = c.out(1);
  const int64_t dim = wrap_dim(c.attrs.i(0), nd, c.op.name.data());
  if (!c.attrs.b(1) && nd > 0) {
    grad = grad.unsqueeze(dim);
    index = index.unsqueeze(dim);
  }
  g[0] = scatter_add(zeros(c.input_meta[0].sizes, grad.dtype()), dim, index, grad);
}
void var_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& x = c.in(0);
  const IntList dims = c.attrs.ints(0);
  const double n = static_cast<double>(reduced_count(c.input_meta[0].sizes, dims));
  const double denom = std::max(0.0, n - static_cast<double>(c.attrs.i(2)));
  g[0] = unreduced(c, c.grad()) * (x - mean(x, dims, true)) * (2.0 / denom);
}
void logsumexp_derivative(const BackwardCall& c, std::span<Tensor> g) {
  g[0] = unreduced(c, c.grad()) * exp(c.in(0) - unreduced(c, c.out(0)));
}
// d ||x||_p / d x = sign(x) |x|^(p-1) / ||x||^(p-1); 0 where the norm (or, for p < 1, the
// element) is 0, as the one-sided derivatives there cancel.
void norm_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& x = c.in(0);
  const double p = c.attrs.f(2);
  const Tensor grad = unreduced(c, c.grad());
  const Tensor zero = zeros({}, x.dtype());
  if (p == 0) {
    g[0] = zeros_like(x);
  } else if (p == 1) {
    g[0] = grad * sign(x);
  } else if (std::isinf(p)) {
    g[0] = split_among_ties(c, abs(x), c.out(0), c.grad()) * sign(x);
  } else {
    const Tensor out = unreduced(c, c.out(0));
    const Tensor out_is_zero = eq(out, wrap_scalar(0));
    const Tensor safe_out = where(out_is_zero, wrap_scalar(1), out);
    Tensor d;
    if (p == 2) {
      d = x / safe_out;
    } else {
      const Tensor ax = abs(x);
      const Tensor x_is_zero = eq(ax, wrap_scalar(0));
      const Tensor safe_ax = where(x_is_zero, wrap_scalar(1), ax);
      d = where(x_is_zero, zero, sign(x) * pow(safe_ax / safe_out, p - 1));
    }
    g[0] = grad * where(out_is_zero, zero, d);
  }
}
// Scans: attrs 0 = dim. The reverse cumulative sum of the gradient.
Tensor reverse_cumsum(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t;
  return flip(cumsum(flip(t, {dim}), dim), {dim});
}
void cumsum_derivative(const BackwardCall& c, std::span<Tensor> g) {
  g[0] = reverse_cumsum(c.grad(), c.attrs.i(0));
}
// d out_j / d x_i = out_j / x_i for j >= i (x_i != 0).
void cumprod_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& x = c.in(0);
  KILN_CHECK(x.numel() == 0 || !any(eq(x, wrap_scalar(0)), {}, false).item<bool>(),
             NotImplementedError,
             "cumprod: the derivative for an input that contains zeros is not implemented yet");
  g[0] = reverse_cumsum(c.grad() * c.out(0), c.attrs.i(0)) / x;
}

const OpDef& sum_op = register_op(
    {.name = "sum",
     .schema =
         "sum(Tensor self, int[] dim=[], bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = sum_meta,
     .kernel = sum_prod_kernel<fold::Add, 0>,
     .derivative = {.fn = sum_derivative}});
const OpDef& prod_op = register_op(
    {.name = "prod",
     .schema =
         "prod(Tensor self, int[] dim=[], bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = sum_meta,
     .kernel = sum_prod_kernel<fold::Mul, 1>,
     .derivative = {.fn = prod_derivative, .saved_inputs = save({0}), .saved_outputs = save({0})}});

// ---- mean ----

int floating_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  check_floating(c);
  return one_output(out, c.in(0).dtype(), reduce_shape(c).out_sizes);
}

void mean_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ReduceShape s = reduce_shape(c);
  const double count = static_cast<double>(s.num_red);  // 0 gives NaN, as PyTorch
  KILN_DTYPE_SWITCH_FLOATING(c.in(0).dtype(), "mean", [&]<typename T>() {
    auto r = make_reducer<T, T>(0.0, IdentityMap{}, fold::Add{},
                                [count](double a, int64_t) { return static_cast<T>(a / count); });
    reduce_loop<T>(c.in(0), s.reduced, outs[0].data_ptr<T>(), r);
  });
}

const OpDef& mean_op =
    register_op({.name = "mean",
                 .schema = "mean(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
                 .kind = OpKind::Reduction,
                 .meta = floating_meta,
                 .kernel = mean_kernel,
                 .derivative = {.fn = mean_derivative}});

// ---- amax, amin ----

int extreme_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  ReduceShape s = reduce_shape(c);
  check_nonempty(c, s);
  return one_output(out, c.in(0).dtype(), std::move(s.out_sizes));
}

template <bool IsMax>
void extreme_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ReduceShape s = reduce_shape(c);
  KILN_DTYPE_SWITCH_ALL(c.in(0).dtype(), c.op.name.data(), [&]<typename T>() {
    using Fold = std::conditional_t<IsMax, fold::Max, fold::Min>;
    auto r = make_reducer<T, T>(IsMax ? lowest_value<T>() : highest_value<T>(), IdentityMap{},
                                Fold{}, [](T a, int64_t) { return a; });
    reduce_loop<T>(c.in(0), s.reduced, outs[0].data_ptr<T>(), r);
  });
}

const OpDef& amax_op = register_op(
    {.name = "amax",
     .schema = "amax(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = extreme_meta,
     .kernel = extreme_kernel<true>,
     .derivative = {
         .fn = amax_amin_derivative, .saved_inputs = save({0}), .saved_outputs = save({0})}});
const OpDef& amin_op = register_op(
    {.name = "amin",
     .schema = "amin(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = extreme_meta,
     .kernel = extreme_kernel<false>,
     .derivative = {
         .fn = amax_amin_derivative, .saved_inputs = save({0}), .saved_outputs = save({0})}});

// ---- max/min along a dim (values and indices), argmax, argmin ----
// Attributes: 0 = dim (absent for argmax/argmin over all elements), 1 = keepdim.

// The input seen as [outer, n, inner] with n the reduced extent, and the output shape.
struct ArgShape {
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_sizes;
};

ArgShape arg_shape(const OpCall& c) {
  const Tensor& x = c.in(0);
  const char* name = c.op.name.data();
  const bool keepdim = c.attrs.b(1);
  ArgShape a;
  if (!c.attrs.has(0)) {
    KILN_CHECK(x.numel() != 0, IndexError, name, ": cannot reduce over a zero-size dimension: the ",
               describe(x), " has no elements (the operation has no identity value)");
    a.n = x.numel();
    if (keepdim) a.out_sizes.assign(static_cast<size_t>(x.dim()), 1);
    return a;
  }
  const int64_t d = wrap_dim(c.attrs.i(0), x.dim(), name);
  if (x.dim() == 0) return a;  // dim 0 of a 0-d tensor is the tensor itself
  for (int64_t k = 0; k < x.dim(); ++k) (k < d ? a.outer : k > d ? a.inner : a.n) *= x.size(k);
  KILN_CHECK(a.n != 0, IndexError, name, ": cannot reduce over a zero-size dimension (dim ", d,
             " of a ", describe(x), "): the operation has no identity value");
  a.out_sizes = x.sizes();
  if (keepdim)
    a.out_sizes[static_cast<size_t>(d)] = 1;
  else
    a.out_sizes.erase(static_cast<size_t>(d));
  return a;
}

int max_dim_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  ArgShape a = arg_shape(c);
  out[0] = {c.in(0).dtype(), a.out_sizes};
  out[1] = {DType::Int64, std::move(a.out_sizes)};
  return 2;
}

int argmax_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, DType::Int64, arg_shape(c).out_sizes);
}

template <bool IsMax>
void arg_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ArgShape a = arg_shape(c);
  const bool with_values = outs.size() == 2;
  const Tensor x = c.in(0).contiguous();
  KILN_DTYPE_SWITCH_ALL(x.dtype(), c.op.name.data(), [&]<typename T>() {
    kernels::arg_reduce<IsMax>(x.data_ptr<T>(), a.outer, a.n, a.inner,
                               with_values ? outs[0].data_ptr<T>() : nullptr,
                               outs[with_values ? 1 : 0].data_ptr<int64_t>());
  });
}

const OpDef& max_dim_op = register_op(
    {.name = "max_dim",
     .schema = "max_dim(Tensor self, int dim, bool keepdim) -> (Tensor values, Tensor indices)",
     .kind = OpKind::Reduction,
     .meta = max_dim_meta,
     .kernel = arg_kernel<true>,
     .derivative = {.fn = max_dim_derivative, .saved_outputs = save({1})},
     .internal = true});
const OpDef& min_dim_op = register_op(
    {.name = "min_dim",
     .schema = "min_dim(Tensor self, int dim, bool keepdim) -> (Tensor values, Tensor indices)",
     .kind = OpKind::Reduction,
     .meta = max_dim_meta,
     .kernel = arg_kernel<false>,
     .derivative = {.fn = max_dim_derivative, .saved_outputs = save({1})},
     .internal = true});
const OpDef& argmax_op =
    register_op({.name = "argmax",
                 .schema = "argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
                 .kind = OpKind::Reduction,
                 .meta = argmax_meta,
                 .kernel = arg_kernel<true>});
const OpDef& argmin_op =
    register_op({.name = "argmin",
                 .schema = "argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
                 .kind = OpKind::Reduction,
                 .meta = argmax_meta,
                 .kernel = arg_kernel<false>});

// ---- var (two passes: the mean, then the sum of squared deviations from it) ----

void var_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ReduceShape s = reduce_shape(c);
  const double n = static_cast<double>(s.num_red);
  // PyTorch divides by max(0, n - correction): too large a correction gives inf (or NaN).
  const double denom = std::max(0.0, n - static_cast<double>(c.attrs.i(2)));
  const Tensor& x = c.in(0);
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "var", [&]<typename T>() {
    std::vector<double> mean(static_cast<size_t>(outs[0].numel()));
    reduce_loop<T>(x, s.reduced, mean.data(),
                   make_reducer<T, double>(0.0, IdentityMap{}, fold::Add{},
                                           [n](double a, int64_t) { return a / n; }));
    auto squared_deviation = [](auto v, auto m) {
      auto d = v - m;
      return d * d;
    };
    reduce_loop<T>(
        x, s.reduced, outs[0].data_ptr<T>(),
        make_reducer<T, T>(
            0.0, squared_deviation, fold::Add{},
            [denom](double a, int64_t) { return static_cast<T>(a / denom); }, mean.data()));
  });
}

const OpDef& var_op = register_op(
    {.name = "var",
     .schema = "var(Tensor self, int[] dim=[], bool keepdim=False, *, int correction=1) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = floating_meta,
     .kernel = var_kernel,
     .derivative = {.fn = var_derivative, .saved_inputs = save({0})}});

// ---- logsumexp (two passes: the max, then log(sum(exp(x - max))) + max) ----

void logsumexp_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ReduceShape s = reduce_shape(c);
  const Tensor& x = c.in(0);
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "logsumexp", [&]<typename T>() {
    // An infinite max is not subtracted: all -inf gives log(0) = -inf, and +inf stays +inf.
    std::vector<double> shift(static_cast<size_t>(outs[0].numel()));
    reduce_loop<T>(
        x, s.reduced, shift.data(),
        make_reducer<T, double>(-kInf, IdentityMap{}, fold::Max{},
                                [](double m, int64_t) { return std::isinf(m) ? 0.0 : m; }));
    const double* sh = shift.data();
    reduce_loop<T>(
        x, s.reduced, outs[0].data_ptr<T>(),
        // exp in the input's precision (float32 exp is three times faster), summed in double.
        make_reducer_in<T, T, T>(
            0.0, [](auto v, auto m) { return kernels::exp_any(v - m); }, fold::Add{},
            [sh](double a, int64_t o) { return static_cast<T>(std::log(a) + sh[o]); }, sh));
  });
}

const OpDef& logsumexp_op = register_op(
    {.name = "logsumexp",
     .schema = "logsumexp(Tensor self, int[] dim, bool keepdim=False) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = floating_meta,
     .kernel = logsumexp_kernel,
     .derivative = {
         .fn = logsumexp_derivative, .saved_inputs = save({0}), .saved_outputs = save({0})}});

// ---- norm ----

int norm_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  check_floating(c);
  ReduceShape s = reduce_shape(c);
  const double p = c.attrs.f(2);
  KILN_CHECK(!std::isnan(p), ValueError, "norm: p must be a number, got nan");
  if (std::isinf(p)) check_nonempty(c, s);
  return one_output(out, c.in(0).dtype(), std::move(s.out_sizes));
}

void norm_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ReduceShape s = reduce_shape(c);
  const double p = c.attrs.f(2);
  const Tensor& x = c.in(0);
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "norm", [&]<typename T>() {
    auto run = [&](double identity, auto map, auto fold, auto finish) {
      reduce_loop<T>(x, s.reduced, outs[0].data_ptr<T>(),
                     make_reducer<T, T>(identity, map, fold, finish));
    };
    auto as_out = [](double a, int64_t) { return static_cast<T>(a); };
    auto magnitude = [](auto v, auto) { return kernels::abs_any(v); };
    if (p == 2) {
      run(
          0.0, [](auto v, auto) { return v * v; }, fold::Add{},
          [](double a, int64_t) { return static_cast<T>(std::sqrt(a)); });
    } else if (p == 1) {
      run(0.0, magnitude, fold::Add{}, as_out);
    } else if (p == kInf) {
      run(0.0, magnitude, fold::Max{}, as_out);
    } else if (p == -kInf) {
      run(kInf, magnitude, fold::Min{}, as_out);
    } else if (p == 0) {  // the number of non-zeros (NaN counts)
      run(
          0.0,
          [](auto v, auto) {
            using X = decltype(v);
            if constexpr (std::is_arithmetic_v<X>) {
              return X(v != 0 ? 1 : 0);
            } else {
              const X one(1.0), zero(0.0);
              return vec::select(
                  v > zero, one,
                  vec::select(v < zero, one, vec::select(vec::isnan_mask(v), one, zero)));
            }
          },
          fold::Add{}, as_out);
    } else {  // pow in the input's precision, summed in double
      reduce_loop<T>(x, s.reduced, outs[0].data_ptr<T>(),
                     make_reducer_in<T, T, T>(
                         0.0,
                         [p](auto v, auto) {
                           using X = decltype(v);
                           return kernels::pow_any(kernels::abs_any(v), X(p));
                         },
                         fold::Add{},
                         [p](double a, int64_t) { return static_cast<T>(std::pow(a, 1.0 / p)); }));
    }
  });
}

const OpDef& norm_op = register_op(
    {.name = "norm",
     .schema = "norm(Tensor self, int[] dim, bool keepdim, float p) -> Tensor",
     .kind = OpKind::Reduction,
     .meta = norm_meta,
     .kernel = norm_kernel,
     .derivative = {.fn = norm_derivative, .saved_inputs = save({0}), .saved_outputs = save({0})},
     .internal = true});

// ---- all, any ----

int bool_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, DType::Bool, reduce_shape(c).out_sizes);
}

template <bool IsAll>
void all_any_kernel(const OpCall& c, std::span<Tensor> outs) {
  const ReduceShape s = reduce_shape(c);
  KILN_DTYPE_SWITCH_ALL(c.in(0).dtype(), c.op.name.data(), [&]<typename T>() {
    using Fold = std::conditional_t<IsAll, fold::And, fold::Or>;
    auto r = make_reducer<T, bool>(IsAll, IdentityMap{}, Fold{}, [](bool a, int64_t) { return a; });
    reduce_loop<T>(c.in(0), s.reduced, outs[0].data_ptr<bool>(), r);
  });
}

const OpDef& all_op =
    register_op({.name = "all",
                 .schema = "all(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
                 .kind = OpKind::Reduction,
                 .meta = bool_meta,
                 .kernel = all_any_kernel<true>});
const OpDef& any_op =
    register_op({.name = "any",
                 .schema = "any(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
                 .kind = OpKind::Reduction,
                 .meta = bool_meta,
                 .kernel = all_any_kernel<false>});

// ---- cumsum, cumprod ----
// Attributes: 0 = dim, 1 = dtype. Scans keep the input's shape; they are opaque to fusion.

int scan_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  wrap_dim(c.attrs.i(0), x.dim(), c.op.name.data());
  DType dt = c.attrs.has(1) ? c.attrs.dtype(1) : is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  return one_output(out, dt, x.sizes());
}

template <typename Fold, int Identity>
void scan_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  const Tensor x = cast(c.in(0), out.dtype()).contiguous();
  int64_t outer = 1, n = 1, inner = 1;
  if (x.dim() > 0) {
    const int64_t d = wrap_dim(c.attrs.i(0), x.dim(), c.op.name.data());
    for (int64_t k = 0; k < x.dim(); ++k) (k < d ? outer : k > d ? inner : n) *= x.size(k);
  }
  KILN_DTYPE_SWITCH_ALL(out.dtype(), c.op.name.data(), [&]<typename T>() {
    using Acc = WideAcc<T>;
    kernels::scan<T, Acc>(x.data_ptr<T>(), out.data_ptr<T>(), outer, n, inner, Acc(Identity),
                          Fold{});
  });
}

const OpDef& cumsum_op =
    register_op({.name = "cumsum",
                 .schema = "cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = scan_meta,
                 .kernel = scan_kernel<fold::Add, 0>,
                 .derivative = {.fn = cumsum_derivative}});
const OpDef& cumprod_op = register_op(
    {.name = "cumprod",
     .schema = "cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
     .kind = OpKind::Extern,
     .meta = scan_meta,
     .kernel = scan_kernel<fold::Mul, 1>,
     .derivative = {
         .fn = cumprod_derivative, .saved_inputs = save({0}), .saved_outputs = save({0})}});

AttrValue dtype_attr(std::optional<DType> dt) { return dt ? AttrValue(*dt) : AttrValue(); }

std::pair<Tensor, Tensor> values_and_indices(const OpDef& op, const Tensor& x, int64_t dim,
                                             bool keepdim) {
  std::array<Tensor, kMaxOpOutputs> outs;
  const Tensor inputs[] = {x};
  dispatch(op, inputs, Attrs{dim, keepdim}, outs);
  return {std::move(outs[0]), std::move(outs[1])};
}

}  // namespace
}  // namespace ops

Tensor sum(const Tensor& x, IntList dims, bool keepdim, std::optional<DType> dtype) {
  return ops::call(ops::sum_op, {x}, {ops::ints_attr(dims), keepdim, ops::dtype_attr(dtype)});
}
Tensor mean(const Tensor& x, IntList dims, bool keepdim) {
  return ops::call(ops::mean_op, {x}, {ops::ints_attr(dims), keepdim});
}
Tensor prod(const Tensor& x, IntList dims, bool keepdim, std::optional<DType> dtype) {
  return ops::call(ops::prod_op, {x}, {ops::ints_attr(dims), keepdim, ops::dtype_attr(dtype)});
}
Tensor amax(const Tensor& x, IntList dims, bool keepdim) {
  return ops::call(ops::amax_op, {x}, {ops::ints_attr(dims), keepdim});
}
Tensor amin(const Tensor& x, IntList dims, bool keepdim) {
  return ops::call(ops::amin_op, {x}, {ops::ints_attr(dims), keepdim});
}
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return ops::values_and_indices(ops::max_dim_op, x, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return ops::values_and_indices(ops::min_dim_op, x, dim, keepdim);
}
Tensor max(const Tensor& x) {
  KILN_CHECK(x.numel() != 0, IndexError, "max: cannot reduce over a zero-size dimension: the ",
             ops::describe(x), " has no elements (the operation has no identity value)");
  return amax(x);
}
Tensor min(const Tensor& x) {
  KILN_CHECK(x.numel() != 0, IndexError, "min: cannot reduce over a zero-size dimension: the ",
             ops::describe(x), " has no elements (the operation has no identity value)");
  return amin(x);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return ops::call(ops::argmax_op, {x}, {dim ? AttrValue(*dim) : AttrValue(), keepdim});
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return ops::call(ops::argmin_op, {x}, {dim ? AttrValue(*dim) : AttrValue(), keepdim});
}
Tensor var(const Tensor& x, IntList dims, int64_t correction, bool keepdim) {
  return ops::call(ops::var_op, {x}, {ops::ints_attr(dims), keepdim, correction});
}
Tensor std(const Tensor& x, IntList dims, int64_t correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}
Tensor logsumexp(const Tensor& x, IntList dims, bool keepdim) {
  return ops::call(ops::logsumexp_op, {x}, {ops::ints_attr(dims), keepdim});
}
Tensor norm(const Tensor& x, double p, IntList dims, bool keepdim) {
  return ops::call(ops::norm_op, {x}, {ops::ints_attr(dims), keepdim, p});
}
Tensor all(const Tensor& x, IntList dims, bool keepdim) {
  return ops::call(ops::all_op, {x}, {ops::ints_attr(dims), keepdim});
}
Tensor any(const Tensor& x, IntList dims, bool keepdim) {
  return ops::call(ops::any_op, {x}, {ops::ints_attr(dims), keepdim});
}
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return ops::call(ops::cumsum_op, {x}, {dim, ops::dtype_attr(dtype)});
}
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return ops::call(ops::cumprod_op, {x}, {dim, ops::dtype_attr(dtype)});
}

// ---- Python-facing forms (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
// torch.max / torch.min's three forms: the extreme element (a 0-d tensor), the extreme values
// along a dim with their (first) indices, and the elementwise extreme of two tensors.
const FunctionDef& max_function =
    register_function({.schema = "max(Tensor self) -> Tensor",
                       .doc = "The largest element, a 0-d tensor.",
                       .call = [](Args a) -> FunctionResult { return max(a.tensor(0)); }});
const FunctionDef& max_dim_function = register_function(
    {.schema = "max(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
     .doc = "The largest values along dim and their (first) indices.",
     .call = [](Args a) -> FunctionResult {
       auto [values, indices] = max(a.tensor(0), a.i(1), a.b(2));
       return std::vector<Tensor>{values, indices};
     }});
const FunctionDef& max_other_function = register_function(
    {.schema = "max(Tensor self, Tensor other) -> Tensor",
     .doc = "The elementwise larger of self and other (maximum).",
     .call = [](Args a) -> FunctionResult { return maximum(a.tensor(0), a.tensor(1)); }});
const FunctionDef& min_function =
    register_function({.schema = "min(Tensor self) -> Tensor",
                       .doc = "The smallest element, a 0-d tensor.",
                       .call = [](Args a) -> FunctionResult { return min(a.tensor(0)); }});
const FunctionDef& min_dim_function = register_function(
    {.schema = "min(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
     .doc = "The smallest values along dim and their (first) indices.",
     .call = [](Args a) -> FunctionResult {
       auto [values, indices] = min(a.tensor(0), a.i(1), a.b(2));
       return std::vector<Tensor>{values, indices};
     }});
const FunctionDef& min_other_function = register_function(
    {.schema = "min(Tensor self, Tensor other) -> Tensor",
     .doc = "The elementwise smaller of self and other (minimum).",
     .call = [](Args a) -> FunctionResult { return minimum(a.tensor(0), a.tensor(1)); }});
const FunctionDef& std_function = register_function(
    {.schema = "std(Tensor self, int[] dim=[], bool keepdim=False, *, int correction=1) -> Tensor",
     .doc = "The standard deviation over dim (all dims by default), with Bessel's correction.",
     .call = [](Args a) -> FunctionResult {
       return kiln::std(a.tensor(0), a.ints(1), a.i(3), a.b(2));
     }});
const FunctionDef& norm_function = register_function(
    {.schema = "norm(Tensor self, float p=2, int[] dim=[], bool keepdim=False) -> Tensor",
     .doc = "The p-norm over dim (all dims by default); inf and -inf give the max and min of |x|.",
     .call = [](Args a) -> FunctionResult {
       return norm(a.tensor(0), a.f(1), a.ints(2), a.b(3));
     }});
}  // namespace

}  // namespace kiln
