// Batch normalisation in training mode (see batch_norm.h). Both kernels work a channel at a
// time, OpenMP over channels: a channel's values (N rows of the trailing dims) are read by the
// statistics pass and read again, usually from cache, by the pass that writes the result.
// An input [N, C] (one value per channel in each row) is worked a block of channels at a time
// instead, each pass along the rows.
//   forward  y = (x - mean) * invstd * w + b, with mean and the biased variance per channel
//            (Welford per vector lane, merged in double);
//   backward with S1 = sum(dy), S2 = sum(dy * (x - mean)) per channel (float vectors per chunk
//            of a row, accumulated in double), M values per channel:
//            grad_x = (dy - S1 / M - (x - mean) * invstd^2 * S2 / M) * invstd * w,
//            grad_w = S2 * invstd, grad_b = S1.
// The backward op's own derivative (a second derivative of batch_norm) is written in Kiln ops.
#include "ops/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/norm_row.h"
#include "ops/kernels/vec.h"
#include "ops/op_utils.h"

namespace kiln::ops {

extern const OpDef& batch_norm_training_op;
extern const OpDef& batch_norm_backward_op;

namespace {

using vec::Vec;

// x [N, C, *] seen as [N, C, inner].
struct Geometry {
  int64_t n, channels, inner;
  int64_t per_channel() const { return n * inner; }
};
Geometry geometry_of(const Tensor& x) {
  Geometry g{x.size(0), x.size(1), 1};
  for (int64_t d = 2; d < x.dim(); ++d) g.inner *= x.size(d);
  return g;
}

// Channels per task when each row holds one value per channel (inner == 1): enough values to be
// worth a thread, and whole cache lines of each row.
int64_t column_grain(const Geometry& g) {
  return std::max<int64_t>(16, kParallelGrain / std::max<int64_t>(1, g.n));
}

void check_input(const char* op, const Tensor& x) {
  KILN_CHECK(x.dim() >= 2, ShapeError, op, ": expected an input [N, C, *] of at least 2 dims, got ",
             x.shape_str());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op,
             ": expected a floating input (float32 or float64), got dtype ", x.dtype());
}
void check_channel_tensor(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  KILN_CHECK(t.dim() == 1 && t.size(0) == x.size(1), ShapeError, op, ": ", what,
             " must have shape [", x.size(1), "] (one value per channel), got ", t.shape_str());
  KILN_CHECK(t.dtype() == x.dtype(), DTypeError, op, ": ", what, " has dtype ", t.dtype(),
             " but the input has dtype ", x.dtype());
}

// A per-channel [C] tensor (or [1, C, 1...] sum) viewed as [1, C, 1, ...] against x of `rank`.
Tensor per_channel(const Tensor& t, int64_t rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[1] = t.numel();
  return t.reshape(shape);
}
// Every dim but the channels'.
std::vector<int64_t> reduced_dims(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// ---- batch_norm_training: inputs [x, weight?, bias?]; attrs [eps, has_weight, has_bias];
// outputs [y, mean, invstd, var] ----
int training_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const char* op = "batch_norm";
  const Tensor& x = c.in(0);
  check_input(op, x);
  const bool has_w = c.attrs.b(1), has_b = c.attrs.b(2);
  KILN_CHECK(c.inputs.size() == size_t{1} + has_w + has_b, Error, op, ": expected ",
             1 + has_w + has_b, " inputs, got ", c.inputs.size());
  if (has_w) check_channel_tensor(op, "weight", c.in(1), x);
  if (has_b) check_channel_tensor(op, "bias", c.in(1 + has_w), x);
  const Geometry g = geometry_of(x);
  KILN_CHECK(g.per_channel() > 1, ValueError, op,
             ": expected more than 1 value per channel when training, got input of shape ",
             x.shape_str());
  out[0] = {x.dtype(), x.sizes()};
  for (int k = 1; k < 4; ++k) out[k] = {x.dtype(), Shape{g.channels}};
  return 4;
}

// y = (x - mean) * scale + shift over one contiguous row.
template <typename T>
void scale_shift_row(const T* x, T* y, int64_t n, T mean, T scale, T shift) {
  using V = Vec<T>;
  constexpr int64_t W = V::width;
  const V vm(mean), vs(scale), vb(shift);
  int64_t i = 0;
  for (; i + W <= n; i += W) vec::fmadd(V::load(x + i) - vm, vs, vb).store(y + i);
  for (; i < n; ++i) y[i] = std::fma(x[i] - mean, scale, shift);
}

void training_kernel(const OpCall& c, std::span<Tensor> outs) {
  const bool has_w = c.attrs.b(1), has_b = c.attrs.b(2);
  const Tensor x = c.in(0).contiguous();
  const Tensor w = has_w ? c.in(1).contiguous() : Tensor();
  const Tensor b = has_b ? c.in(1 + has_w).contiguous() : Tensor();
  const Geometry g = geometry_of(x);
  const double eps = c.attrs.f(0);
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "batch_norm", [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = outs[0].data_ptr<T>();
    T *mean_p = outs[1].data_ptr<T>(), *invstd_p = outs[2].data_ptr<T>(),
      *var_p = outs[3].data_ptr<T>();
    const T* wp = has_w ? w.data_ptr<T>() : nullptr;
    const T* bp = has_b ? b.data_ptr<T>() : nullptr;
    if (g.inner == 1) {  // [N, C]: channels side by side in each row
      kernels::parallel_range(g.channels, column_grain(g), [&](int64_t c0, int64_t c1) {
        const auto width = static_cast<size_t>(c1 - c0);
        std::vector<double> mean(width), m2(width);
        for (int64_t i = 0; i < g.n; ++i)
          for (size_t j = 0; j < width; ++j) mean[j] += xp[i * g.channels + c0 + j];
        for (size_t j = 0; j < width; ++j) mean[j] /= static_cast<double>(g.n);
        for (int64_t i = 0; i < g.n; ++i)
          for (size_t j = 0; j < width; ++j) {
            const double d = xp[i * g.channels + c0 + j] - mean[j];
            m2[j] += d * d;
          }
        std::vector<T> mu(width), scale(width), shift(width);
        for (size_t j = 0; j < width; ++j) {
          const int64_t ch = c0 + static_cast<int64_t>(j);
          const double var = m2[j] / static_cast<double>(g.n), invstd = 1 / std::sqrt(var + eps);
          mean_p[ch] = mu[j] = static_cast<T>(mean[j]);
          var_p[ch] = static_cast<T>(var);
          invstd_p[ch] = static_cast<T>(invstd);
          scale[j] = static_cast<T>(wp ? invstd * static_cast<double>(wp[ch]) : invstd);
          shift[j] = bp ? bp[ch] : T(0);
        }
        for (int64_t i = 0; i < g.n; ++i) {
          const T* row = xp + i * g.channels + c0;
          T* out = yp + i * g.channels + c0;
          for (size_t j = 0; j < width; ++j) out[j] = std::fma(row[j] - mu[j], scale[j], shift[j]);
        }
      });
      return;
    }
    const int64_t grain =
        std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.per_channel()));
    kernels::parallel_range(g.channels, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        kernels::Moments<double> m;
        for (int64_t i = 0; i < g.n; ++i) {
          const kernels::Moments<T> row =
              kernels::row_moments(xp + (i * g.channels + ch) * g.inner, g.inner);
          m.merge({static_cast<double>(row.count), static_cast<double>(row.mean),
                   static_cast<double>(row.m2)});
        }
        const double var = m.m2 / m.count, invstd = 1 / std::sqrt(var + eps);
        mean_p[ch] = static_cast<T>(m.mean);
        var_p[ch] = static_cast<T>(var);
        invstd_p[ch] = static_cast<T>(invstd);
        const T scale = static_cast<T>(wp ? invstd * static_cast<double>(wp[ch]) : invstd);
        const T shift = bp ? bp[ch] : T(0);
        for (int64_t i = 0; i < g.n; ++i) {
          const int64_t at = (i * g.channels + ch) * g.inner;
          scale_shift_row(xp + at, yp + at, g.inner, mean_p[ch], scale, shift);
        }
      }
    });
  });
}

// ---- batch_norm_backward: inputs [grad, x, mean, invstd, weight?]; attrs [has_weight];
// outputs [grad_input, grad_weight, grad_bias] ----
int backward_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const char* op = "batch_norm_backward";
  const Tensor& x = c.in(1);
  check_input(op, x);
  const bool has_w = c.attrs.b(0);
  KILN_CHECK(c.inputs.size() == size_t{4} + has_w, Error, op, ": expected ", 4 + has_w,
             " inputs, got ", c.inputs.size());
  KILN_CHECK(c.in(0).sizes() == x.sizes() && c.in(0).dtype() == x.dtype(), ShapeError, op,
             ": the gradient (", c.in(0).dtype(), c.in(0).shape_str(),
             ") must have the input's shape and dtype (", x.dtype(), x.shape_str(), ")");
  check_channel_tensor(op, "mean", c.in(2), x);
  check_channel_tensor(op, "invstd", c.in(3), x);
  if (has_w) check_channel_tensor(op, "weight", c.in(4), x);
  out[0] = {x.dtype(), x.sizes()};
  out[1] = {x.dtype(), Shape{x.size(1)}};
  out[2] = {x.dtype(), Shape{x.size(1)}};
  return 3;
}

// Adds sum(dy) and sum(dy * (x - mean)) over a row to s1 and s2: float vectors over chunks
// short enough to keep their rounding small, each chunk's total added in double.
template <typename T>
void add_row_sums(const T* dy, const T* x, T mean, int64_t n, double& s1, double& s2) {
  using V = Vec<T>;
  constexpr int64_t W = V::width, kChunk = 2048;
  const V vm(mean);
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t c1 = std::min(n, c0 + kChunk);
    V a0(T(0)), a1(T(0)), b0(T(0)), b1(T(0));
    int64_t i = c0;
    for (; i + 2 * W <= c1; i += 2 * W) {
      const V d0 = V::load(dy + i), d1 = V::load(dy + i + W);
      a0 = a0 + d0;
      a1 = a1 + d1;
      b0 = vec::fmadd(d0, V::load(x + i) - vm, b0);
      b1 = vec::fmadd(d1, V::load(x + i + W) - vm, b1);
    }
    for (; i + W <= c1; i += W) {
      const V d0 = V::load(dy + i);
      a0 = a0 + d0;
      b0 = vec::fmadd(d0, V::load(x + i) - vm, b0);
    }
    T t1 = kernels::lane_sum(a0 + a1), t2 = kernels::lane_sum(b0 + b1);
    for (; i < c1; ++i) {
      t1 += dy[i];
      t2 += dy[i] * (x[i] - mean);
    }
    s1 += static_cast<double>(t1);
    s2 += static_cast<double>(t2);
  }
}

// gx = (dy - mean_dy - (x - mean) * k) * scale over one contiguous row.
template <typename T>
void input_grad_row(const T* dy, const T* x, T* gx, int64_t n, T mean, T mean_dy, T k, T scale) {
  using V = Vec<T>;
  constexpr int64_t W = V::width;
  const V vm(mean), vmdy(mean_dy), vk(k), vs(scale);
  int64_t i = 0;
  for (; i + W <= n; i += W)
    ((V::load(dy + i) - vmdy - (V::load(x + i) - vm) * vk) * vs).store(gx + i);
  for (; i < n; ++i) gx[i] = (dy[i] - mean_dy - (x[i] - mean) * k) * scale;
}

void backward_kernel(const OpCall& c, std::span<Tensor> outs) {
  const bool has_w = c.attrs.b(0);
  const Tensor dy = c.in(0).contiguous(), x = c.in(1).contiguous();
  const Tensor mean = c.in(2).contiguous(), invstd = c.in(3).contiguous();
  const Tensor w = has_w ? c.in(4).contiguous() : Tensor();
  const Geometry g = geometry_of(x);
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    const T *dyp = dy.data_ptr<T>(), *xp = x.data_ptr<T>();
    const T *mean_p = mean.data_ptr<T>(), *invstd_p = invstd.data_ptr<T>();
    const T* wp = has_w ? w.data_ptr<T>() : nullptr;
    T *gxp = outs[0].data_ptr<T>(), *gwp = outs[1].data_ptr<T>(), *gbp = outs[2].data_ptr<T>();
    const double count = static_cast<double>(g.per_channel());
    if (g.inner == 1) {  // [N, C]: channels side by side in each row
      kernels::parallel_range(g.channels, column_grain(g), [&](int64_t c0, int64_t c1) {
        const auto width = static_cast<size_t>(c1 - c0);
        std::vector<double> s1(width), s2(width);
        for (int64_t i = 0; i < g.n; ++i)
          for (size_t j = 0; j < width; ++j) {
            const int64_t at = i * g.channels + c0 + static_cast<int64_t>(j);
            s1[j] += dyp[at];
            s2[j] += static_cast<double>(dyp[at]) * (xp[at] - mean_p[c0 + j]);
          }
        std::vector<T> mean_dy(width), k(width), scale(width);
        for (size_t j = 0; j < width; ++j) {
          const int64_t ch = c0 + static_cast<int64_t>(j);
          const double is = static_cast<double>(invstd_p[ch]);
          gbp[ch] = static_cast<T>(s1[j]);
          gwp[ch] = static_cast<T>(s2[j] * is);
          mean_dy[j] = static_cast<T>(s1[j] / count);
          k[j] = static_cast<T>(s2[j] / count * is * is);
          scale[j] = static_cast<T>(wp ? is * static_cast<double>(wp[ch]) : is);
        }
        for (int64_t i = 0; i < g.n; ++i)
          for (size_t j = 0; j < width; ++j) {
            const int64_t at = i * g.channels + c0 + static_cast<int64_t>(j);
            gxp[at] = (dyp[at] - mean_dy[j] - (xp[at] - mean_p[c0 + j]) * k[j]) * scale[j];
          }
      });
      return;
    }
    const int64_t grain =
        std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, g.per_channel()));
    kernels::parallel_range(g.channels, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch) {
        const T mu = mean_p[ch];
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < g.n; ++i) {
          const int64_t at = (i * g.channels + ch) * g.inner;
          add_row_sums(dyp + at, xp + at, mu, g.inner, s1, s2);
        }
        const double is = static_cast<double>(invstd_p[ch]);
        gbp[ch] = static_cast<T>(s1);
        gwp[ch] = static_cast<T>(s2 * is);
        if (count == 0) continue;
        const T mean_dy = static_cast<T>(s1 / count), k = static_cast<T>(s2 / count * is * is);
        const T scale = static_cast<T>(wp ? is * static_cast<double>(wp[ch]) : is);
        for (int64_t i = 0; i < g.n; ++i) {
          const int64_t at = (i * g.channels + ch) * g.inner;
          input_grad_row(dyp + at, xp + at, gxp + at, g.inner, mu, mean_dy, k, scale);
        }
      }
    });
  });
}

// ---- derivatives ----
std::array<Tensor, 3> call_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                    const Tensor& invstd, const std::optional<Tensor>& weight) {
  std::vector<Tensor> in{dy, x, mean, invstd};
  if (weight) in.push_back(*weight);
  std::array<Tensor, kMaxOpOutputs> outs;
  dispatch(batch_norm_backward_op, in, {weight.has_value()}, outs);
  return {outs[0], outs[1], outs[2]};
}

// Of y (through the backward op) and of the statistics themselves, which a second derivative
// sends back: d mean / dx = 1 / M, d var / dx = 2 (x - mean) / M, d invstd = -invstd^3 / 2 d var.
void training_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const bool has_w = c.attrs.b(1), has_b = c.attrs.b(2);
  const Tensor& x = c.in(0);
  const Tensor &mean = c.out(1), &invstd = c.out(2);
  Tensor gx, gw, gb;
  if (c.grad(0).defined()) {
    auto [dx, dw, db] = call_backward(c.grad(0), x, mean, invstd,
                                      has_w ? std::optional<Tensor>(c.in(1)) : std::nullopt);
    gx = dx;
    gw = dw;
    gb = db;
  }
  if (c.needs_grad(0) && (c.grad(1).defined() || c.grad(2).defined() || c.grad(3).defined())) {
    const int64_t rank = x.dim();
    const double count = static_cast<double>(geometry_of(x).per_channel());
    auto add = [&gx](const Tensor& t) { gx = gx.defined() ? gx + t : t; };
    if (c.grad(1).defined()) add(per_channel(c.grad(1) / count, rank).expand(x.sizes()));
    Tensor d_var;  // the gradient reaching the variance, per channel
    if (c.grad(3).defined()) d_var = c.grad(3);
    if (c.grad(2).defined()) {
      const Tensor t = c.grad(2) * (invstd * invstd * invstd) * -0.5;
      d_var = d_var.defined() ? d_var + t : t;
    }
    if (d_var.defined())
      add(per_channel(d_var * (2 / count), rank) * (x - per_channel(mean, rank)));
  }
  if (c.needs_grad(0)) g[0] = gx.defined() ? gx : zeros(c.input_meta[0].sizes, x.dtype());
  if (has_w && c.needs_grad(1)) g[1] = gw;
  if (has_b && c.needs_grad(1 + has_w)) g[1 + has_w] = gb;
}

// The backward op as a function of (dy, x, mean, invstd, w), every one independent; with a, bw,
// bb the gradients reaching grad_x, grad_w, grad_b, the sums per channel S1 = sum(dy),
// S2 = sum(dy xmu), A1 = sum(a), A2 = sum(a xmu), Ady = sum(a dy) and xmu = x - mean, s = invstd:
//   d dy     = w s (a - A1 / M) + xmu (bw s - w s^3 A2 / M) + bb
//   d x      = dy (bw s - w s^3 A2 / M) - a w s^3 S2 / M
//   d mean   = w s^3 (S1 A2 + S2 A1) / M - bw s S1
//   d invstd = w (Ady - S1 A1 / M) - 3 w s^2 S2 A2 / M + bw S2
//   d w      = s (Ady - S1 A1 / M) - s^3 S2 A2 / M
void backward_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const bool has_w = c.attrs.b(0);
  const Tensor &dy = c.in(0), &x = c.in(1);
  const int64_t rank = x.dim(), channels = x.size(1);
  const double m = static_cast<double>(geometry_of(x).per_channel());
  const std::vector<int64_t> dims = reduced_dims(rank);
  auto sum_c = [&](const Tensor& t) { return sum(t, dims, /*keepdim=*/true); };
  auto flat = [&](const Tensor& t) { return t.reshape({channels}); };
  const Tensor xmu = x - per_channel(c.in(2), rank);
  const Tensor s = per_channel(c.in(3), rank);
  const Tensor s3 = s * s * s;
  const Tensor w = has_w ? per_channel(c.in(4), rank) : ones_like(s);
  const Tensor a = c.grad_or_zeros(0);
  const Tensor bw = per_channel(c.grad_or_zeros(1), rank),
               bb = per_channel(c.grad_or_zeros(2), rank);
  const Tensor s1 = sum_c(dy), s2 = sum_c(dy * xmu), a1 = sum_c(a), a2 = sum_c(a * xmu);
  const Tensor along_xmu = bw * s - w * s3 * a2 / m;
  if (c.needs_grad(0)) g[0] = w * s * (a - a1 / m) + xmu * along_xmu + bb;
  if (c.needs_grad(1)) g[1] = dy * along_xmu - a * (w * s3 * s2 / m);
  if (c.needs_grad(2)) g[2] = flat(w * s3 * (s1 * a2 + s2 * a1) / m - bw * s * s1);
  if (c.needs_grad(3) || (has_w && c.needs_grad(4))) {
    const Tensor centred = sum_c(a * dy) - s1 * a1 / m;  // Ady - S1 A1 / M
    const Tensor s2a2 = s2 * a2 / m;
    if (c.needs_grad(3)) g[3] = flat(w * centred - 3 * w * s * s * s2a2 + bw * s2);
    if (has_w && c.needs_grad(4)) g[4] = flat(s * centred - s3 * s2a2);
  }
}

}  // namespace

const OpDef& batch_norm_training_op = register_op(
    {.name = "batch_norm_training",
     .schema = "batch_norm_training(Tensor input, Tensor? weight, Tensor? bias, float eps, "
               "bool has_weight, bool has_bias) -> (Tensor, Tensor mean, Tensor invstd, "
               "Tensor var)",
     .kind = OpKind::Extern,
     .meta = training_meta,
     .kernel = training_kernel,
     .derivative = {.fn = training_derivative,
                    .saved_inputs = save({0, 1}),
                    .saved_outputs = save({1, 2})},
     .doc = "Batch normalisation by the batch's own statistics per channel: the output, the "
            "mean, 1 / sqrt(var + eps) and the biased variance.",
     .internal = true});
const OpDef& batch_norm_backward_op = register_op(
    {.name = "batch_norm_backward",
     .schema = "batch_norm_backward(Tensor grad, Tensor input, Tensor mean, Tensor invstd, "
               "Tensor? weight, bool has_weight) -> (Tensor grad_input, Tensor grad_weight, "
               "Tensor grad_bias)",
     .kind = OpKind::Extern,
     .meta = backward_meta,
     .kernel = backward_kernel,
     .derivative = {.fn = backward_derivative, .saved_inputs = save({0, 1, 2, 3, 4})},
     .doc = "The gradients of batch_norm_training's output with respect to its input, weight "
            "and bias.",
     .internal = true});

BatchNormTraining batch_norm_training(const Tensor& x, const std::optional<Tensor>& weight,
                                      const std::optional<Tensor>& bias, double eps) {
  std::vector<Tensor> in{x};
  if (weight) in.push_back(*weight);
  if (bias) in.push_back(*bias);
  std::array<Tensor, kMaxOpOutputs> outs;
  dispatch(batch_norm_training_op, in, {eps, weight.has_value(), bias.has_value()}, outs);
  return {outs[0], outs[1], outs[2], outs[3]};
}

}  // namespace kiln::ops
