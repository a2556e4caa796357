// Neural-network functional ops. layer_norm and rms_norm have dedicated row kernels (one pass
// for the row statistics, one writing the normalised row, OpenMP over rows); the losses and
// dropout are composites of public ops, attention too unless the fused kernel applies.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/autograd/autograd.h"
#include "kiln/core/random.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/attention.h"
#include "ops/batch_norm.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/norm_row.h"
#include "ops/kernels/vec.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {

namespace {

using vec::Vec;

// ---- shared by layer_norm and rms_norm ----

// Checks x's trailing dims against normalized_shape, and an affine parameter's shape and dtype.
void check_normalized_shape(const char* op, const Tensor& x, IntList normalized_shape) {
  KILN_CHECK(!normalized_shape.empty(), ValueError, op,
             ": normalized_shape must name at least one dim, got []");
  bool ok = x.dim() >= normalized_shape.ssize();
  for (int64_t i = 0; ok && i < normalized_shape.ssize(); ++i)
    ok = x.size(x.dim() - normalized_shape.ssize() + i) == normalized_shape[i];
  KILN_CHECK(
      ok, ShapeError, op, ": normalized_shape ", normalized_shape,
      " expects an input of shape [*, ",
      [&] {
        std::string s;
        for (int64_t d : normalized_shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
        return s;
      }(),
      "], got ", x.shape_str());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op,
             ": expected a floating input (float32 or float64), got dtype ", x.dtype());
}
void check_param(const char* op, const char* what, const Tensor& p, const Tensor& x,
                 IntList normalized_shape) {
  KILN_CHECK(p.sizes() == normalized_shape.shape(), ShapeError, op, ": ", what, " of shape ",
             p.shape_str(), " does not match normalized_shape ", normalized_shape);
  KILN_CHECK(p.dtype() == x.dtype(), DTypeError, op, ": ", what, " has dtype ", p.dtype(),
             " but the input has dtype ", x.dtype());
}
// Shape of the per-row statistics: x's leading dims, then 1 for each normalised dim.
Shape stats_shape(const Tensor& x, int64_t normalized_dims) {
  Shape s = x.sizes();
  for (int64_t d = x.dim() - normalized_dims; d < x.dim(); ++d) s[d] = 1;
  return s;
}
int64_t leading_rows(const Tensor& x, int64_t normalized_dims) {
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim() - normalized_dims; ++d) rows *= x.size(d);
  return rows;
}

// ---- layer_norm: inputs [x, weight?, bias?]; attrs [normalized_shape, eps, has_weight,
// has_bias]; outputs [y, mean, rstd] (the statistics are kept for the backward pass) ----
int layer_norm_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  const IntList shape = c.attrs.ints(0);
  check_normalized_shape("layer_norm", x, shape);
  const bool has_w = c.attrs.b(2), has_b = c.attrs.b(3);
  KILN_CHECK(c.inputs.size() == size_t{1} + has_w + has_b, Error, "layer_norm: expected ",
             1 + has_w + has_b, " inputs, got ", c.inputs.size());
  if (has_w) check_param("layer_norm", "weight", c.in(1), x, shape);
  if (has_b) check_param("layer_norm", "bias", c.in(1 + has_w), x, shape);
  out[0] = {x.dtype(), x.sizes()};
  out[1] = {x.dtype(), stats_shape(x, shape.ssize())};
  out[2] = {x.dtype(), stats_shape(x, shape.ssize())};
  return 3;
}
void layer_norm_kernel(const OpCall& c, std::span<Tensor> outs) {
  const int64_t nd = static_cast<int64_t>(c.attrs.ints(0).size());
  const bool has_w = c.attrs.b(2), has_b = c.attrs.b(3);
  const Tensor x = c.in(0).contiguous();
  const Tensor w = has_w ? c.in(1).contiguous() : Tensor();
  const Tensor b = has_b ? c.in(1 + has_w).contiguous() : Tensor();
  const int64_t rows = leading_rows(x, nd), n = rows == 0 ? 0 : x.numel() / rows;
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "layer_norm", [&]<typename T>() {
    const T eps = static_cast<T>(c.attrs.f(1));
    const T* xp = x.data_ptr<T>();
    T* yp = outs[0].data_ptr<T>();
    T* mean_p = outs[1].data_ptr<T>();
    T* rstd_p = outs[2].data_ptr<T>();
    const T* wp = has_w ? w.data_ptr<T>() : nullptr;
    const T* bp = has_b ? b.data_ptr<T>() : nullptr;
    const bool stream =
        x.numel() * static_cast<int64_t>(sizeof(T)) >= kernels::kStreamingStoreBytes;
    auto run = [&]<bool HasW, bool HasB>() {
      kernels::parallel_range(
          rows, std::max<int64_t>(1, kParallelGrain / 2 / std::max<int64_t>(n, 1)),
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              if (n == 0) {  // statistics of an empty row, as mean() of nothing
                mean_p[r] = rstd_p[r] = std::numeric_limits<T>::quiet_NaN();
                continue;
              }
              const T* next = r + 1 < r1 && n <= kernels::kPrefetchRow ? xp + (r + 1) * n : nullptr;
              kernels::layer_norm_row<T, HasW, HasB>(xp + r * n, yp + r * n, n, eps, wp, bp, stream,
                                                     next, mean_p + r, rstd_p + r);
            }
            if (stream) vec::stream_fence();
          });
    };
    if (has_w && has_b)
      run.template operator()<true, true>();
    else if (has_w)
      run.template operator()<true, false>();
    else if (has_b)
      run.template operator()<false, true>();
    else
      run.template operator()<false, false>();
  });
}

// ---- rms_norm: inputs [x, weight?]; attrs [normalized_shape, eps, has_weight];
// outputs [y, rstd] ----
int rms_norm_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  const IntList shape = c.attrs.ints(0);
  check_normalized_shape("rms_norm", x, shape);
  const bool has_w = c.attrs.b(2);
  KILN_CHECK(c.inputs.size() == size_t{1} + has_w, Error, "rms_norm: expected ", 1 + has_w,
             " inputs, got ", c.inputs.size());
  if (has_w) check_param("rms_norm", "weight", c.in(1), x, shape);
  out[0] = {x.dtype(), x.sizes()};
  out[1] = {x.dtype(), stats_shape(x, shape.ssize())};
  return 2;
}
void rms_norm_kernel(const OpCall& c, std::span<Tensor> outs) {
  const int64_t nd = static_cast<int64_t>(c.attrs.ints(0).size());
  const bool has_w = c.attrs.b(2);
  const Tensor x = c.in(0).contiguous();
  const Tensor w = has_w ? c.in(1).contiguous() : Tensor();
  const int64_t rows = leading_rows(x, nd), n = rows == 0 ? 0 : x.numel() / rows;
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "rms_norm", [&]<typename T>() {
    const T eps = static_cast<T>(c.attrs.f(1));
    const T* xp = x.data_ptr<T>();
    T* yp = outs[0].data_ptr<T>();
    T* rstd_p = outs[1].data_ptr<T>();
    const T* wp = has_w ? w.data_ptr<T>() : nullptr;
    const bool stream =
        x.numel() * static_cast<int64_t>(sizeof(T)) >= kernels::kStreamingStoreBytes;
    kernels::parallel_range(
        rows, std::max<int64_t>(1, kParallelGrain / 2 / std::max<int64_t>(n, 1)),
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* row = xp + r * n;
            const T* next = r + 1 < r1 && n <= kernels::kPrefetchRow ? row + n : nullptr;
            if (has_w)
              kernels::rms_norm_row<T, true>(row, yp + r * n, n, eps, wp, stream, next, rstd_p + r);
            else
              kernels::rms_norm_row<T, false>(row, yp + r * n, n, eps, nullptr, stream, next,
                                              rstd_p + r);
          }
          if (stream) vec::stream_fence();
        });
  });
}

// ---- derivatives (in Kiln ops, from the saved statistics) ----
// The normalized dims: the last normalized_shape.size() dims of x.
std::vector<int64_t> normalized_dims(const BackwardCall& c) {
  const int64_t nd = static_cast<int64_t>(c.attrs.ints(0).size());
  std::vector<int64_t> dims;
  for (int64_t d = -nd; d < 0; ++d) dims.push_back(d);
  return dims;
}
int64_t normalized_count(const BackwardCall& c) {
  int64_t n = 1;
  for (int64_t s : c.attrs.ints(0)) n *= s;
  return n;
}

// y = xhat * w + b with xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased var).
void layer_norm_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const bool has_w = c.attrs.b(2), has_b = c.attrs.b(3);
  const Tensor& x = c.in(0);
  const Tensor &mean_ = c.out(1), &rstd = c.out(2);
  const Tensor xhat = (x - mean_) * rstd;
  const std::vector<int64_t> dims = normalized_dims(c);
  const double n = static_cast<double>(normalized_count(c));
  if (c.needs_grad(0)) {
    Tensor gx;
    if (c.grad(0).defined()) {
      const Tensor gxhat = has_w ? c.grad(0) * c.in(1) : c.grad(0);
      gx = rstd * (gxhat - mean(gxhat, dims, true) - xhat * mean(gxhat * xhat, dims, true));
    }
    // Gradients sent to the statistics themselves (e.g. by a double backward).
    auto acc = [&gx](const Tensor& t) { gx = gx.defined() ? gx + t : t; };
    if (c.grad(1).defined()) acc((c.grad(1) / n).expand(c.input_meta[0].sizes));
    if (c.grad(2).defined()) acc(-(c.grad(2) * rstd * rstd / n) * xhat);
    if (!gx.defined()) gx = zeros(c.input_meta[0].sizes, x.dtype());
    g[0] = gx;
  }
  if (has_w && c.needs_grad(1) && c.grad(0).defined()) g[1] = c.grad(0) * xhat;
  if (has_b && c.needs_grad(1 + has_w) && c.grad(0).defined()) g[1 + has_w] = c.grad(0);
}

// y = xhat * w with xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps).
void rms_norm_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const bool has_w = c.attrs.b(2);
  const Tensor& x = c.in(0);
  const Tensor& rstd = c.out(1);
  const Tensor xhat = x * rstd;
  const std::vector<int64_t> dims = normalized_dims(c);
  const double n = static_cast<double>(normalized_count(c));
  if (c.needs_grad(0)) {
    Tensor gx;
    if (c.grad(0).defined()) {
      const Tensor gxhat = has_w ? c.grad(0) * c.in(1) : c.grad(0);
      gx = rstd * (gxhat - xhat * mean(gxhat * xhat, dims, true));
    }
    if (c.grad(1).defined()) {
      const Tensor t = -(c.grad(1) * rstd * rstd / n) * xhat;
      gx = gx.defined() ? gx + t : t;
    }
    if (!gx.defined()) gx = zeros(c.input_meta[0].sizes, x.dtype());
    g[0] = gx;
  }
  if (has_w && c.needs_grad(1) && c.grad(0).defined()) g[1] = c.grad(0) * xhat;
}

}  // namespace

// Extern: fused row kernels (a decomposition into reductions can be attached later).
const OpDef& layer_norm_op = register_op(
    {.name = "layer_norm",
     .schema = "layer_norm(Tensor input, Tensor? weight, Tensor? bias, int[] normalized_shape, "
               "float eps, bool has_weight, bool has_bias) -> (Tensor, Tensor mean, Tensor rstd)",
     .kind = OpKind::Composite,
     .meta = layer_norm_meta,
     .kernel = layer_norm_kernel,
     .derivative = {.fn = layer_norm_derivative,
                    .saved_inputs = save({0, 1}),
                    .saved_outputs = save({1, 2})},
     .internal = true});
const OpDef& rms_norm_op = register_op(
    {.name = "rms_norm",
     .schema = "rms_norm(Tensor input, Tensor? weight, int[] normalized_shape, float eps, "
               "bool has_weight) -> (Tensor, Tensor rstd)",
     .kind = OpKind::Composite,
     .meta = rms_norm_meta,
     .kernel = rms_norm_kernel,
     .derivative = {.fn = rms_norm_derivative,
                    .saved_inputs = save({0, 1}),
                    .saved_outputs = save({1})},
     .internal = true});

}  // namespace ops

Tensor layer_norm(const Tensor& x, IntList normalized_shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps) {
  std::vector<Tensor> inputs{x};
  if (weight) inputs.push_back(*weight);
  if (bias) inputs.push_back(*bias);
  return dispatch1(ops::layer_norm_op, inputs,
                   {ops::ints_attr(normalized_shape), eps, weight.has_value(), bias.has_value()});
}

Tensor rms_norm(const Tensor& x, IntList normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  std::vector<Tensor> inputs{x};
  if (weight) inputs.push_back(*weight);
  // PyTorch's default: the machine epsilon of the input's dtype.
  const double e = eps.value_or(x.dtype() == DType::Float64
                                    ? std::numeric_limits<double>::epsilon()
                                    : static_cast<double>(std::numeric_limits<float>::epsilon()));
  return dispatch1(ops::rms_norm_op, inputs,
                   {ops::ints_attr(normalized_shape), e, weight.has_value()});
}

// ---- losses (composites) ----
namespace {

enum class Reduction { None, Mean, Sum };
Reduction parse_reduction(const char* op, const std::string& r) {
  if (r == "mean") return Reduction::Mean;
  if (r == "sum") return Reduction::Sum;
  if (r == "none") return Reduction::None;
  throw ValueError(
      detail::concat(op, ": reduction must be \"mean\", \"sum\" or \"none\", got \"", r, "\""));
}

// Checks class-index targets against [N, C, d1...] (or [C]) scores; returns the class dim.
int64_t check_class_target(const char* op, const Tensor& scores, const Tensor& target) {
  KILN_CHECK(is_floating(scores.dtype()), DTypeError, op,
             ": expected floating scores (float32 or float64), got dtype ", scores.dtype());
  KILN_CHECK(target.dtype() == DType::Int64, DTypeError, op,
             ": expected int64 class indices as target, got dtype ", target.dtype(),
             " (class-probability targets are not supported)");
  KILN_CHECK(scores.dim() >= 1, ShapeError, op,
             ": expected scores of shape [C] or [N, C, ...], got a 0-d tensor");
  const int64_t class_dim = scores.dim() == 1 ? 0 : 1;
  bool ok = target.dim() == scores.dim() - 1;
  for (int64_t d = 0; ok && d < target.dim(); ++d)
    ok = target.size(d) == scores.size(d < class_dim ? d : d + 1);
  KILN_CHECK(ok, ShapeError, op, ": target of shape ", target.shape_str(),
             " does not match scores of shape ", scores.shape_str(), " (expected ",
             scores.dim() == 1 ? "a 0-d target for [C] scores" : "[N, ...] for [N, C, ...] scores",
             ")");
  return class_dim;
}

// -log_probs[target] per element (0 where target == ignore_index), and the kept-element mask.
std::pair<Tensor, Tensor> picked_nll(const char* op, const Tensor& log_probs, const Tensor& target,
                                     int64_t class_dim, int64_t ignore_index) {
  const Tensor keep = target != Scalar(ignore_index);
  const Tensor safe_target = masked_fill(target, logical_not(keep), 0);
  Tensor picked;
  try {
    picked = gather(log_probs, class_dim, safe_target.unsqueeze(class_dim)).squeeze(class_dim);
  } catch (const IndexError& e) {
    throw IndexError(detail::concat(op, ": a target class index is out of range for ",
                                    log_probs.size(class_dim), " classes (", e.what(), ")"));
  }
  return {masked_fill(neg(picked), logical_not(keep), 0), keep};
}

Tensor reduce_loss(const Tensor& loss, const Tensor& keep, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      return sum(loss) / sum(keep, {}, false, loss.dtype());  // 0/0 = NaN
  }
  return loss;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index,
                const std::string& reduction) {
  const Reduction r = parse_reduction("nll_loss", reduction);
  const int64_t class_dim = check_class_target("nll_loss", log_probs, target);
  auto [loss, keep] = picked_nll("nll_loss", log_probs, target, class_dim, ignore_index);
  return reduce_loss(loss, keep, r);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     double label_smoothing, const std::string& reduction) {
  const Reduction r = parse_reduction("cross_entropy", reduction);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t class_dim = check_class_target("cross_entropy", logits, target);
  const Tensor log_probs = log_softmax(logits, class_dim);
  auto [loss, keep] = picked_nll("cross_entropy", log_probs, target, class_dim, ignore_index);
  if (label_smoothing > 0.0) {
    // Mixes in the loss against the uniform distribution: -mean over classes of log_probs.
    const double classes = static_cast<double>(logits.size(class_dim));
    Tensor uniform = masked_fill(neg(sum(log_probs, {class_dim})), logical_not(keep), 0);
    loss = loss * (1.0 - label_smoothing) + uniform * (label_smoothing / classes);
  }
  return reduce_loss(loss, keep, r);
}

namespace {
// Checks two floating operands that broadcast; `op` names the loss in errors.
void check_elementwise_loss(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), DTypeError, op,
             ": expected floating tensors, got dtypes ", input.dtype(), " and ", target.dtype());
  const Tensor operands[] = {input, target};
  ops::broadcast_shapes(op, operands);
}
Tensor reduce_elementwise(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      return mean(loss);
  }
  return loss;
}
// Multiplies by an optional weight (which must broadcast to the loss).
Tensor weighted(const char* op, const Tensor& loss, const std::optional<Tensor>& weight) {
  if (!weight) return loss;
  KILN_CHECK(is_floating(weight->dtype()), DTypeError, op,
             ": expected a floating weight, got dtype ", weight->dtype());
  const Tensor operands[] = {loss, *weight};
  KILN_CHECK(ops::broadcast_shapes(op, operands) == loss.sizes(), ShapeError, op,
             ": weight of shape ", weight->shape_str(), " does not broadcast to the loss's ",
             loss.shape_str());
  return loss * *weight;
}
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  const Reduction r = parse_reduction("mse_loss", reduction);
  check_elementwise_loss("mse_loss", input, target);
  const Tensor diff = input - target;
  return reduce_elementwise(diff * diff, r);
}

// ---- batch and group normalisation (composites) ----

namespace {
// A per-channel [C] tensor viewed as [1, C, 1, ...] against x of `rank` dims.
Tensor per_channel(const Tensor& t, int64_t rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[1] = t.numel();
  return t.reshape(shape);
}
void check_per_channel(const char* op, const char* what, const std::optional<Tensor>& t,
                       int64_t channels) {
  if (!t) return;
  KILN_CHECK(t->dim() == 1 && t->size(0) == channels, ShapeError, op, ": ", what,
             " must have shape [", channels, "] (one value per channel), got ", t->shape_str());
  KILN_CHECK(is_floating(t->dtype()), DTypeError, op, ": ", what, " must be floating, got dtype ",
             t->dtype());
}
Tensor affine(Tensor y, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
              int64_t rank) {
  if (weight) y = y * per_channel(*weight, rank);
  if (bias) y = y + per_channel(*bias, rank);
  return y;
}
}  // namespace

namespace {
// batch_norm with the momentum a number, or (when `momentum_tensor` is defined) a 0-d tensor.
Tensor batch_norm_impl(const Tensor& x, const std::optional<Tensor>& running_mean,
                       const std::optional<Tensor>& running_var,
                       const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                       bool training, double momentum, const Tensor& momentum_tensor, double eps) {
  const char* op = "batch_norm";
  KILN_CHECK(x.dim() >= 2, ShapeError, op, ": expected an input [N, C, *] of at least 2 dims, got ",
             x.shape_str());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating input, got dtype ",
             x.dtype());
  const int64_t rank = x.dim(), channels = x.size(1);
  check_per_channel(op, "weight", weight, channels);
  check_per_channel(op, "bias", bias, channels);
  check_per_channel(op, "running_mean", running_mean, channels);
  check_per_channel(op, "running_var", running_var, channels);
  KILN_CHECK(running_mean.has_value() == running_var.has_value(), ValueError, op,
             ": running_mean and running_var must be given together");
  if (!training) {
    KILN_CHECK(running_mean && running_var, ValueError, op,
               ": running_mean and running_var are needed when not training");
    // One pass over x, y = x * scale + shift, with the per-channel scale = weight / sqrt(var +
    // eps) and shift = bias - mean * scale computed on the [C] statistics first (as PyTorch's
    // CPU kernel folds them).
    Tensor scale = rsqrt(*running_var + eps);
    if (weight) scale = scale * *weight;
    const Tensor shifted = *running_mean * scale;
    const Tensor shift = bias ? *bias - shifted : neg(shifted);
    return addcmul(per_channel(shift, rank), x, per_channel(scale, rank));
  }
  const int64_t count = channels == 0 ? 0 : x.numel() / channels;
  KILN_CHECK(count > 1, ValueError, op,
             ": expected more than 1 value per channel when training, got input of shape ",
             x.shape_str());
  const ops::BatchNormTraining bn = ops::batch_norm_training(x, weight, bias, eps);
  if (running_mean) {
    NoGradGuard no_grad;
    const double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
    Tensor rm = *running_mean, rv = *running_var;
    const Tensor batch_mean = bn.mean.detach(), batch_var = bn.var.detach();
    if (momentum_tensor.defined()) {
      KILN_CHECK(momentum_tensor.dim() == 0 && is_floating(momentum_tensor.dtype()), ValueError, op,
                 ": a momentum tensor must be 0-d and floating, got ", momentum_tensor.dtype(),
                 momentum_tensor.shape_str());
      const Tensor m = momentum_tensor.to(rm.dtype());
      rm.mul_(1 - m).add_(batch_mean * m);
      rv.mul_(1 - m).add_(batch_var * (m * unbiased));
    } else {
      KILN_CHECK(std::isfinite(momentum) && momentum >= 0 && momentum <= 1, ValueError, op,
                 ": momentum must be in [0, 1], got ", momentum);
      rm.mul_(Scalar(1 - momentum)).add_(batch_mean * momentum);
      rv.mul_(Scalar(1 - momentum)).add_(batch_var * (momentum * unbiased));
    }
  }
  return bn.y;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const std::optional<Tensor>& running_mean,
                  const std::optional<Tensor>& running_var, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, bool training, double momentum, double eps) {
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, momentum, Tensor(),
                         eps);
}

Tensor batch_norm(const Tensor& x, const std::optional<Tensor>& running_mean,
                  const std::optional<Tensor>& running_var, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, bool training, const Tensor& momentum,
                  double eps) {
  KILN_CHECK(momentum.defined(), ValueError, "batch_norm: the momentum tensor is undefined");
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, 0.0, momentum, eps);
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps) {
  const char* op = "group_norm";
  KILN_CHECK(x.dim() >= 2, ShapeError, op, ": expected an input [N, C, *] of at least 2 dims, got ",
             x.shape_str());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating input, got dtype ",
             x.dtype());
  const int64_t n = x.size(0), channels = x.size(1);
  KILN_CHECK(num_groups > 0 && channels % num_groups == 0, ValueError, op, ": num_groups (",
             num_groups, ") must be positive and divide the number of channels (", channels, ")");
  check_per_channel(op, "weight", weight, channels);
  check_per_channel(op, "bias", bias, channels);
  const Tensor grouped = x.reshape({n, num_groups, -1});
  const Tensor mean_g = mean(grouped, {2}, true);
  const Tensor var_g = var(grouped, {2}, 0, true);
  const Tensor y = ((grouped - mean_g) * rsqrt(var_g + eps)).reshape(x.sizes());
  return affine(y, weight, bias, x.dim());
}

// ---- elementwise losses (composites) ----

Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  const Reduction r = parse_reduction("l1_loss", reduction);
  check_elementwise_loss("l1_loss", input, target);
  return reduce_elementwise(abs(input - target), r);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction,
                      double beta) {
  const Reduction r = parse_reduction("smooth_l1_loss", reduction);
  check_elementwise_loss("smooth_l1_loss", input, target);
  KILN_CHECK(beta >= 0 && std::isfinite(beta), ValueError,
             "smooth_l1_loss: beta must be finite and >= 0, got ", beta);
  const Tensor d = abs(input - target);
  if (beta == 0) return reduce_elementwise(d, r);
  return reduce_elementwise(
      where(lt(d, wrap_scalar(Scalar(beta))), d * d * (0.5 / beta), d - 0.5 * beta), r);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, const std::string& reduction,
                  double delta) {
  const Reduction r = parse_reduction("huber_loss", reduction);
  check_elementwise_loss("huber_loss", input, target);
  KILN_CHECK(delta > 0 && std::isfinite(delta), ValueError,
             "huber_loss: delta must be finite and > 0, got ", delta);
  const Tensor d = abs(input - target);
  return reduce_elementwise(
      where(lt(d, wrap_scalar(Scalar(delta))), d * d * 0.5, (d - 0.5 * delta) * delta), r);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const std::optional<Tensor>& weight, const std::string& reduction) {
  const char* op = "binary_cross_entropy";
  const Reduction r = parse_reduction(op, reduction);
  check_elementwise_loss(op, input, target);
  KILN_CHECK(input.sizes() == target.sizes(), ShapeError, op, ": target of shape ",
             target.shape_str(), " must have the input's shape ", input.shape_str());
  // log clamped at -100, as PyTorch, so that a probability of 0 or 1 costs 100, not infinity.
  // At exactly 0 the log is not taken (log(1) in its place, then -100 selected), so no 0 / 0
  // reaches the gradient: a saturated sigmoid's 1.0 gets a finite gradient, as in PyTorch.
  auto clamped_log = [](const Tensor& p) {
    const Tensor zero = eq(p, wrap_scalar(Scalar(0.0)));
    const Tensor safe = where(zero, ones_like(p), p);
    return where(zero, full_like(p, Scalar(-100.0)),
                 clamp(log(safe), Scalar(-100.0), std::nullopt));
  };
  const Tensor log_x = clamped_log(input);
  const Tensor log_1mx = clamped_log(1.0 - input);
  const Tensor loss = -(target * log_x + (1.0 - target) * log_1mx);
  return reduce_elementwise(weighted(op, loss, weight), r);
}
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const std::string& reduction) {
  return binary_cross_entropy(input, target, std::nullopt, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::optional<Tensor>& weight,
                                        const std::optional<Tensor>& pos_weight,
                                        const std::string& reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  const Reduction r = parse_reduction(op, reduction);
  check_elementwise_loss(op, input, target);
  KILN_CHECK(input.sizes() == target.sizes(), ShapeError, op, ": target of shape ",
             target.shape_str(), " must have the input's shape ", input.shape_str());
  // -log(sigmoid(x)) = max(-x, 0) + log1p(exp(-|x|)), never overflowing.
  const Tensor neg_log_sigmoid = relu(-input) + log1p(exp(-abs(input)));
  Tensor loss;
  if (pos_weight) {
    KILN_CHECK(is_floating(pos_weight->dtype()), DTypeError, op,
               ": expected a floating pos_weight, got dtype ", pos_weight->dtype());
    const Tensor operands[] = {input, *pos_weight};
    KILN_CHECK(ops::broadcast_shapes(op, operands) == input.sizes(), ShapeError, op,
               ": pos_weight of shape ", pos_weight->shape_str(),
               " does not broadcast to the input's ", input.shape_str());
    const Tensor log_weight = (*pos_weight - 1.0) * target + 1.0;
    loss = (1.0 - target) * input + log_weight * neg_log_sigmoid;
  } else {
    loss = (1.0 - target) * input + neg_log_sigmoid;
  }
  return reduce_elementwise(weighted(op, loss, weight), r);
}
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const std::string& reduction) {
  return binary_cross_entropy_with_logits(input, target, std::nullopt, std::nullopt, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction,
              bool log_target) {
  const bool batchmean = reduction == "batchmean";
  const Reduction r = parse_reduction("kl_div", batchmean ? "sum" : reduction);
  check_elementwise_loss("kl_div", input, target);
  // target log(target) is 0 where target is 0 (xlogy): the log is taken of 1 there, so neither
  // the value nor the gradient meets log(0); a negative or NaN target gives NaN, as xlogy does.
  const Tensor safe_target = where(eq(target, wrap_scalar(Scalar(0.0))), ones_like(target), target);
  const Tensor loss =
      log_target ? exp(target) * (target - input) : target * log(safe_target) - target * input;
  const Tensor reduced = reduce_elementwise(loss, r);
  if (!batchmean) return reduced;
  const int64_t batch = input.dim() == 0 ? 1 : input.size(0);
  return reduced / static_cast<double>(batch);
}

// ---- dropout and attention (composites) ----

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "dropout: expected a floating input, got dtype ",
             x.dtype());
  if (p == 1.0) return zeros_like(x);
  // The kept elements are scaled by 1 / (1 - p) so the expectation is unchanged.
  Tensor scale = bernoulli(x.sizes(), 1.0 - p, x.dtype(), generator);
  scale.mul_(Scalar(1.0 / (1.0 - p)));
  return x * scale;
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator* generator) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout2d: probability must be in [0, 1], got ", p);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError,
             "dropout2d: expected an input [N, C, H, W] or [C, H, W], got ", x.shape_str());
  if (!training || p == 0.0) return x;
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "dropout2d: expected a floating input, got dtype ",
             x.dtype());
  if (p == 1.0) return zeros_like(x);
  // One draw per channel (per sample), kept channels scaled by 1 / (1 - p).
  Shape mask_sizes(x.sizes());
  mask_sizes[mask_sizes.size() - 1] = 1;
  mask_sizes[mask_sizes.size() - 2] = 1;
  Tensor scale = bernoulli(mask_sizes, 1.0 - p, x.dtype(), generator);
  scale.mul_(Scalar(1.0 / (1.0 - p)));
  return x * scale;
}

Tensor instance_norm(const Tensor& x, const std::optional<Tensor>& weight,
                     const std::optional<Tensor>& bias, double eps) {
  KILN_CHECK(x.dim() >= 3, ShapeError,
             "instance_norm: expected an input [N, C, *] of at least 3 dims, got ", x.shape_str());
  // Each (sample, channel) normalised on its own: group_norm with one channel per group.
  return group_norm(x, x.size(1), weight, bias, eps);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const std::optional<Tensor>& attn_mask, double dropout_p,
                                    bool is_causal, std::optional<double> scale,
                                    Generator* generator) {
  const char* op = "scaled_dot_product_attention";
  KILN_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, ShapeError, op,
             ": query, key and value need at least 2 dims [..., L, E], got shapes ", q.shape_str(),
             ", ", k.shape_str(), " and ", v.shape_str());
  KILN_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError,
             op, ": query, key and value must share one floating dtype, got ", q.dtype(), ", ",
             k.dtype(), " and ", v.dtype());
  KILN_CHECK(q.size(-1) == k.size(-1), ShapeError, op, ": query of shape ", q.shape_str(),
             " and key of shape ", k.shape_str(), " differ in the embedding dim (", q.size(-1),
             " != ", k.size(-1), ")");
  KILN_CHECK(k.size(-2) == v.size(-2), ShapeError, op, ": key of shape ", k.shape_str(),
             " and value of shape ", v.shape_str(), " differ in the sequence dim (", k.size(-2),
             " != ", v.size(-2), ")");
  KILN_CHECK(!(is_causal && attn_mask), ValueError, op,
             ": pass either attn_mask or is_causal=true, not both");
  KILN_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, ValueError, op,
             ": dropout_p must be in [0, 1], got ", dropout_p);
  const int64_t L = q.size(-2), S = k.size(-2);
  if (attn_mask) {
    const Tensor& m = *attn_mask;
    KILN_CHECK(m.dtype() == DType::Bool || m.dtype() == q.dtype(), DTypeError, op,
               ": attn_mask must be bool or have the query's dtype ", q.dtype(), ", got ",
               m.dtype());
    // Its last two dims must broadcast to the scores' [L, S]; batch dims broadcast as usual.
    const bool ok = (m.dim() < 1 || m.size(-1) == 1 || m.size(-1) == S) &&
                    (m.dim() < 2 || m.size(-2) == 1 || m.size(-2) == L);
    KILN_CHECK(ok, ShapeError, op, ": attn_mask of shape ", m.shape_str(),
               " cannot be broadcast to the attention scores [..., ", L, ", ", S, "]");
  }
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  // Without an explicit mask or dropout, and with one batch shape for all three, the fused
  // kernel (ops/attention.cpp) computes the same in one pass per head. With a heads dim, q, k
  // and v go to it sequence-major ([..., L, H, E], the projection's layout they are usually
  // views of) and the result comes back as a view of its [..., L, H, Ev] output.
  const bool same_batch = q.dim() == k.dim() && q.dim() == v.dim() &&
                          std::equal(q.sizes().begin(), q.sizes().end() - 2, k.sizes().begin()) &&
                          std::equal(q.sizes().begin(), q.sizes().end() - 2, v.sizes().begin());
  if (!attn_mask && dropout_p == 0.0 && same_batch && L < ops::kMaxFusedAttentionPositions &&
      S < ops::kMaxFusedAttentionPositions) {
    if (q.dim() < 3) return ops::call(ops::fused_attention_op, {q, k, v}, {s, is_causal, false});
    return ops::call(ops::fused_attention_op,
                     {q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2)},
                     {s, is_causal, true})
        .transpose(-3, -2);
  }
  Tensor scores = matmul(q, k.mT());
  scores.mul_(Scalar(s));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {  // keep j <= i (top-left aligned, as PyTorch)
    const Tensor above = arange(L).unsqueeze(1) < arange(S).unsqueeze(0);
    masked_fill_(scores, above, neg_inf);
  } else if (attn_mask && attn_mask->dtype() == DType::Bool) {
    scores = where(*attn_mask, scores, wrap_scalar(neg_inf));
  } else if (attn_mask) {
    scores = scores + *attn_mask;
  }
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
  return matmul(weights, v);
}

// ---- Python-facing forms: torch.nn.functional's names, order and defaults
// (kiln/ops/function.h). Arguments Kiln does not implement are errors, never ignored. ----
namespace {
using Args = const FunctionArgs&;
constexpr std::string_view kF = "nn.functional";
void unsupported(bool given, const char* what) {
  KILN_CHECK(!given, NotImplementedError, what, " is not implemented");
}
#define KILN_F_ACTIVATION(NAME, DOC, CALL)                                               \
  const FunctionDef& NAME##_f =                                                          \
      register_function({.schema = #NAME "(Tensor input, bool inplace=False) -> Tensor", \
                         .doc = DOC,                                                     \
                         .call = [](Args a) -> FunctionResult {                          \
                           unsupported(a.b(1), "nn.functional." #NAME "(inplace=True)"); \
                           return CALL(a.tensor(0));                                     \
                         },                                                              \
                         .module = kF});
KILN_F_ACTIVATION(relu, "max(input, 0).", relu)
KILN_F_ACTIVATION(silu, "input * sigmoid(input).", silu)
#undef KILN_F_ACTIVATION
const FunctionDef& gelu_f =
    register_function({.schema = "gelu(Tensor input, *, str approximate=\"none\") -> Tensor",
                       .doc = "input * Phi(input) (approximate=\"tanh\": the tanh form).",
                       .call = [](Args a) -> FunctionResult { return gelu(a.tensor(0), a.str(1)); },
                       .module = kF});
const FunctionDef& sigmoid_f =
    register_function({.schema = "sigmoid(Tensor input) -> Tensor",
                       .doc = "1 / (1 + exp(-input)).",
                       .call = [](Args a) -> FunctionResult { return sigmoid(a.tensor(0)); },
                       .module = kF});
const FunctionDef& tanh_f =
    register_function({.schema = "tanh(Tensor input) -> Tensor",
                       .doc = "The hyperbolic tangent.",
                       .call = [](Args a) -> FunctionResult { return tanh(a.tensor(0)); },
                       .module = kF});
const FunctionDef& softmax_f = register_function(
    {.schema = "softmax(Tensor input, int dim) -> Tensor",
     .doc = "exp(input) normalised along dim.",
     .call = [](Args a) -> FunctionResult { return softmax(a.tensor(0), a.i(1)); },
     .module = kF});
const FunctionDef& log_softmax_f = register_function(
    {.schema = "log_softmax(Tensor input, int dim) -> Tensor",
     .doc = "log(softmax(input, dim)).",
     .call = [](Args a) -> FunctionResult { return log_softmax(a.tensor(0), a.i(1)); },
     .module = kF});
const FunctionDef& layer_norm_f = register_function(
    {.schema = "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, "
               "Tensor? bias=None, float eps=1e-05) -> Tensor",
     .doc = "Normalised over the last dims (normalized_shape), then scaled and shifted.",
     .call = [](Args a) -> FunctionResult {
       return layer_norm(a.tensor(0), a.ints(1), a.opt_tensor(2), a.opt_tensor(3), a.f(4));
     },
     .module = kF});
const FunctionDef& rms_norm_f = register_function(
    {.schema = "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, "
               "float? eps=None) -> Tensor",
     .doc = "Divided by the root mean square over the last dims, then scaled.",
     .call = [](Args a) -> FunctionResult {
       return rms_norm(a.tensor(0), a.ints(1), a.opt_tensor(2), a.opt_f(3));
     },
     .module = kF});
const FunctionDef& group_norm_f = register_function(
    {.schema = "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
               "float eps=1e-05) -> Tensor",
     .doc = "Each sample's channel groups normalised by their own statistics.",
     .call = [](Args a) -> FunctionResult {
       return group_norm(a.tensor(0), a.i(1), a.opt_tensor(2), a.opt_tensor(3), a.f(4));
     },
     .module = kF});
const FunctionDef& batch_norm_f = register_function(
    {.schema = "batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, "
               "Tensor? weight=None, Tensor? bias=None, bool training=False, "
               "float momentum=0.1, float eps=1e-05) -> Tensor",
     .doc = "Normalised per channel by the batch's statistics (training; the running ones are "
            "updated in place) or by the running ones.",
     .call = [](Args a) -> FunctionResult {
       return batch_norm(a.tensor(0), a.opt_tensor(1), a.opt_tensor(2), a.opt_tensor(3),
                         a.opt_tensor(4), a.b(5), a.f(6), a.f(7));
     },
     .module = kF});
const FunctionDef& instance_norm_f = register_function(
    {.schema = "instance_norm(Tensor input, Tensor? running_mean=None, Tensor? running_var=None, "
               "Tensor? weight=None, Tensor? bias=None, bool use_input_stats=True, "
               "float momentum=0.1, float eps=1e-05) -> Tensor",
     .doc = "Each sample's channels normalised by their own statistics.",
     .call = [](Args a) -> FunctionResult {
       unsupported(a.has(1) || a.has(2) || !a.b(5),
                   "nn.functional.instance_norm with running statistics");
       return instance_norm(a.tensor(0), a.opt_tensor(3), a.opt_tensor(4), a.f(7));
     },
     .module = kF});
const FunctionDef& dropout_f = register_function(
    {.schema =
         "dropout(Tensor input, float p=0.5, bool training=True, bool inplace=False) -> Tensor",
     .doc = "Zeroes elements with probability p and scales the rest by 1 / (1 - p) when training.",
     .call = [](Args a) -> FunctionResult {
       unsupported(a.b(3), "nn.functional.dropout(inplace=True)");
       return dropout(a.tensor(0), a.f(1), a.b(2));
     },
     .module = kF});
const FunctionDef& dropout2d_f = register_function(
    {.schema =
         "dropout2d(Tensor input, float p=0.5, bool training=True, bool inplace=False) -> Tensor",
     .doc = "Zeroes whole channels with probability p and scales the rest by 1 / (1 - p).",
     .call = [](Args a) -> FunctionResult {
       unsupported(a.b(3), "nn.functional.dropout2d(inplace=True)");
       return dropout2d(a.tensor(0), a.f(1), a.b(2));
     },
     .module = kF});
const FunctionDef& sdpa_f = register_function(
    {.schema = "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
               "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
               "float? scale=None) -> Tensor",
     .doc = "softmax(query key^T scale [+ mask]) value; is_causal masks the future.",
     .call = [](Args a) -> FunctionResult {
       return scaled_dot_product_attention(a.tensor(0), a.tensor(1), a.tensor(2), a.opt_tensor(3),
                                           a.f(4), a.b(5), a.opt_f(6));
     },
     .module = kF});
const FunctionDef& cross_entropy_f = register_function(
    {.schema =
         "cross_entropy(Tensor input, Tensor target, Tensor? weight=None, *, "
         "int ignore_index=-100, str reduction=\"mean\", float label_smoothing=0.0) -> Tensor",
     .doc = "The cross entropy of logits input [N, C] against class indices target [N].",
     .call = [](Args a) -> FunctionResult {
       unsupported(a.has(2), "nn.functional.cross_entropy with class weights");
       return cross_entropy(a.tensor(0), a.tensor(1), a.i(3), a.f(5), a.str(4));
     },
     .module = kF});
const FunctionDef& nll_loss_f = register_function(
    {.schema = "nll_loss(Tensor input, Tensor target, Tensor? weight=None, *, "
               "int ignore_index=-100, str reduction=\"mean\") -> Tensor",
     .doc = "The negative log likelihood of log-probabilities input at the target classes.",
     .call = [](Args a) -> FunctionResult {
       unsupported(a.has(2), "nn.functional.nll_loss with class weights");
       return nll_loss(a.tensor(0), a.tensor(1), a.i(3), a.str(4));
     },
     .module = kF});
const FunctionDef& mse_loss_f = register_function(
    {.schema = "mse_loss(Tensor input, Tensor target, *, str reduction=\"mean\") -> Tensor",
     .doc = "(input - target)^2, reduced.",
     .call = [](Args a) -> FunctionResult { return mse_loss(a.tensor(0), a.tensor(1), a.str(2)); },
     .module = kF});
const FunctionDef& l1_loss_f = register_function(
    {.schema = "l1_loss(Tensor input, Tensor target, *, str reduction=\"mean\") -> Tensor",
     .doc = "|input - target|, reduced.",
     .call = [](Args a) -> FunctionResult { return l1_loss(a.tensor(0), a.tensor(1), a.str(2)); },
     .module = kF});
const FunctionDef& smooth_l1_loss_f = register_function(
    {.schema = "smooth_l1_loss(Tensor input, Tensor target, *, str reduction=\"mean\", "
               "float beta=1.0) -> Tensor",
     .doc = "Quadratic below beta, linear above, reduced.",
     .call = [](Args a) -> FunctionResult {
       return smooth_l1_loss(a.tensor(0), a.tensor(1), a.str(2), a.f(3));
     },
     .module = kF});
const FunctionDef& huber_loss_f = register_function(
    {.schema = "huber_loss(Tensor input, Tensor target, *, str reduction=\"mean\", "
               "float delta=1.0) -> Tensor",
     .doc = "Quadratic below delta, delta-scaled linear above, reduced.",
     .call = [](Args a) -> FunctionResult {
       return huber_loss(a.tensor(0), a.tensor(1), a.str(2), a.f(3));
     },
     .module = kF});
const FunctionDef& bce_f = register_function(
    {.schema = "binary_cross_entropy(Tensor input, Tensor target, Tensor? weight=None, *, "
               "str reduction=\"mean\") -> Tensor",
     .doc = "The binary cross entropy of probabilities input against target.",
     .call = [](Args a) -> FunctionResult {
       return binary_cross_entropy(a.tensor(0), a.tensor(1), a.opt_tensor(2), a.str(3));
     },
     .module = kF});
const FunctionDef& bce_logits_f = register_function(
    {.schema = "binary_cross_entropy_with_logits(Tensor input, Tensor target, "
               "Tensor? weight=None, *, str reduction=\"mean\", Tensor? pos_weight=None) -> Tensor",
     .doc = "The binary cross entropy of logits input against target, computed stably.",
     .call = [](Args a) -> FunctionResult {
       return binary_cross_entropy_with_logits(a.tensor(0), a.tensor(1), a.opt_tensor(2),
                                               a.opt_tensor(4), a.str(3));
     },
     .module = kF});
const FunctionDef& kl_div_f = register_function(
    {.schema = "kl_div(Tensor input, Tensor target, *, str reduction=\"mean\", "
               "bool log_target=False) -> Tensor",
     .doc = "The Kullback-Leibler divergence of log-probabilities input from target.",
     .call = [](Args a) -> FunctionResult {
       return kl_div(a.tensor(0), a.tensor(1), a.str(2), a.b(3));
     },
     .module = kF});
}  // namespace

}  // namespace kiln
