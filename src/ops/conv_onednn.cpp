// Convolution on oneDNN (see conv_onednn.h). Each op lets oneDNN choose its layouts (blocked,
// such as nChw16c: several times faster than plain NCHW for most shapes here) and reorders the
// plain Kiln tensors into and out of them through per-thread scratch buffers. Primitive
// descriptors are cached by geometry: creating one runs oneDNN's implementation dispatch.
#include "ops/conv_onednn.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/ops/pointwise.h"
#include "ops/onednn_util.h"
#include "ops/op_utils.h"

namespace kiln::ops {

// The ops (defined at the end: their derivatives call each other).
extern const OpDef& onednn_conv_op;
extern const OpDef& onednn_conv_backward_input_op;
extern const OpDef& onednn_conv_backward_weight_op;

namespace {

using Dims = std::vector<int64_t>;
using dnnl::memory;
using Tag = dnnl::memory::format_tag;
using onednn::Argument;
using onednn::cpu_engine;
using onednn::execute;

// The geometry of one convolution, in oneDNN's terms.
struct Geometry {
  memory::dims src, weights, bias, dst, strides, dilates, pad_l, pad_r;
  Tag data_tag = Tag::undef, weights_tag = Tag::undef;
  std::string key;  // every number above: the primitive cache's key
};

// x_sizes [N, C, in...], w_sizes [O, C / groups, kernel...]; attrs from `first`: stride,
// padding, dilation, groups.
Geometry geometry_of(const char* op, const Shape& x_sizes, const Shape& w_sizes, const Attrs& a,
                     size_t first) {
  const auto dims = static_cast<int64_t>(x_sizes.size()) - 2;
  KILN_CHECK(dims >= 1 && dims <= 3 && static_cast<int64_t>(w_sizes.size()) == dims + 2, ShapeError,
             op,
             ": expected [N, C, spatial...] with 1 to 3 spatial dims and a weight "
             "of as many, got ",
             IntList(x_sizes), " and ", IntList(w_sizes));
  const std::vector<int64_t>&stride = a.ints(first), &padding = a.ints(first + 1),
        &dilation = a.ints(first + 2);
  const int64_t groups = a.i(first + 3);
  KILN_CHECK(static_cast<int64_t>(stride.size()) == dims &&
                 static_cast<int64_t>(padding.size()) == dims &&
                 static_cast<int64_t>(dilation.size()) == dims && groups > 0,
             ValueError, op, ": one stride, padding and dilation per spatial dim and groups > 0");
  Geometry g;
  const int64_t out_channels = w_sizes[0];
  g.src = {x_sizes[0], x_sizes[1]};
  g.dst = {x_sizes[0], out_channels};
  g.bias = {out_channels};
  if (groups > 1)
    g.weights = {groups, out_channels / groups, w_sizes[1]};
  else
    g.weights = {out_channels, w_sizes[1]};
  for (int64_t d = 0; d < dims; ++d) {
    const auto u = static_cast<size_t>(d);
    const int64_t in = x_sizes[u + 2], k = w_sizes[u + 2];
    const int64_t span = dilation[u] * (k - 1) + 1;
    const int64_t out = (in + 2 * padding[u] - span) / stride[u] + 1;
    g.src.push_back(in);
    g.dst.push_back(out);
    g.weights.push_back(k);
    g.strides.push_back(stride[u]);
    g.dilates.push_back(dilation[u] - 1);  // (oneDNN counts the elements skipped)
    g.pad_l.push_back(padding[u]);
    // What the last window leaves over on the high side (negative: rows it never reaches).
    g.pad_r.push_back((out - 1) * stride[u] + span - in - padding[u]);
  }
  static constexpr std::array<Tag, 3> data = {Tag::ncw, Tag::nchw, Tag::ncdhw};
  static constexpr std::array<Tag, 3> plain = {Tag::oiw, Tag::oihw, Tag::oidhw};
  static constexpr std::array<Tag, 3> grouped = {Tag::goiw, Tag::goihw, Tag::goidhw};
  g.data_tag = data[static_cast<size_t>(dims - 1)];
  g.weights_tag = (groups > 1 ? grouped : plain)[static_cast<size_t>(dims - 1)];
  for (const memory::dims* list :
       {&g.src, &g.weights, &g.dst, &g.strides, &g.dilates, &g.pad_l, &g.pad_r}) {
    for (int64_t v : *list) g.key += std::to_string(v) + ",";
    g.key += ";";
  }
  return g;
}

memory::desc any_md(const memory::dims& dims) {
  return memory::desc(dims, memory::data_type::f32, Tag::any);
}
memory::desc plain_md(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, memory::data_type::f32, tag);
}

// The three primitives of a geometry, made on first use (the backward ones take the forward's
// descriptor as their hint, as oneDNN asks).
struct Primitives {
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_forward forward;
  std::optional<dnnl::convolution_backward_data::primitive_desc> data_pd;
  std::optional<dnnl::convolution_backward_data> data;
  std::optional<dnnl::convolution_backward_weights::primitive_desc> weights_pd;
  std::optional<dnnl::convolution_backward_weights> weights;
};

// The cache: entries are shared, so a clear (when it is full) never frees primitives another
// thread is running; one mutex guards the map and the lazily made backward primitives.
std::mutex& primitives_mutex() {
  static std::mutex mu;
  return mu;
}
std::shared_ptr<Primitives> primitives_locked(const Geometry& g, bool bias) {
  static auto* cache = new std::map<std::string, std::shared_ptr<Primitives>>();
  const std::string key = g.key + (bias ? "b" : "");
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  // (Bounded: a program sweeping sizes would otherwise keep every geometry's descriptors.)
  if (cache->size() >= 512) cache->clear();
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::desc desc =
      bias ? dnnl::convolution_forward::desc(kind, algo, any_md(g.src), any_md(g.weights),
                                             plain_md(g.bias, Tag::x), any_md(g.dst), g.strides,
                                             g.dilates, g.pad_l, g.pad_r)
           : dnnl::convolution_forward::desc(kind, algo, any_md(g.src), any_md(g.weights),
                                             any_md(g.dst), g.strides, g.dilates, g.pad_l, g.pad_r);
  dnnl::convolution_forward::primitive_desc pd(desc, cpu_engine());
  auto entry = std::make_shared<Primitives>(Primitives{pd, dnnl::convolution_forward(pd)});
  cache->emplace(key, entry);
  return entry;
}
std::shared_ptr<Primitives> primitives_for(const Geometry& g, bool bias) {
  std::lock_guard<std::mutex> lock(primitives_mutex());
  return primitives_locked(g, bias);
}
std::shared_ptr<Primitives> with_backward_data(const Geometry& g) {
  std::lock_guard<std::mutex> lock(primitives_mutex());
  std::shared_ptr<Primitives> p = primitives_locked(g, false);
  if (!p->data) {
    const dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, any_md(g.src), any_md(g.weights), any_md(g.dst),
        g.strides, g.dilates, g.pad_l, g.pad_r);
    p->data_pd.emplace(desc, cpu_engine(), p->forward_pd);
    p->data.emplace(*p->data_pd);
  }
  return p;
}
std::shared_ptr<Primitives> with_backward_weights(const Geometry& g, bool bias) {
  std::lock_guard<std::mutex> lock(primitives_mutex());
  std::shared_ptr<Primitives> p = primitives_locked(g, bias);
  if (!p->weights) {
    const auto algo = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_backward_weights::desc desc =
        bias ? dnnl::convolution_backward_weights::desc(algo, any_md(g.src), any_md(g.weights),
                                                        plain_md(g.bias, Tag::x), any_md(g.dst),
                                                        g.strides, g.dilates, g.pad_l, g.pad_r)
             : dnnl::convolution_backward_weights::desc(algo, any_md(g.src), any_md(g.weights),
                                                        any_md(g.dst), g.strides, g.dilates,
                                                        g.pad_l, g.pad_r);
    p->weights_pd.emplace(desc, cpu_engine(), p->forward_pd);
    p->weights.emplace(*p->weights_pd);
  }
  return p;
}

float* f32(const Tensor& t) { return t.data_ptr<float>(); }
Shape shape_of(const std::vector<int64_t>& v) { return Shape(v.begin(), v.end()); }

// float32 (oneDNN) or float64 (the direct loops), the same for every input.
DType check_dtype(const char* op, std::span<const Tensor> inputs) {
  const DType dt = inputs[0].dtype();
  for (const Tensor& t : inputs)
    KILN_CHECK(t.dtype() == dt && (dt == DType::Float32 || dt == DType::Float64), DTypeError, op,
               ": expected float32 or float64 inputs of one dtype, got ", t.dtype(), " and ", dt);
  return dt;
}

// ---- float64: oneDNN has no float64 convolution; these direct loops compute the three ops in
// float64 (conv_nd runs float64 on its im2col composite, so they serve the OpInfos, whose
// float64 gradchecks check the derivative formulas below) ----

// Calls f(n, o, c, y_at, w_at, x_at) for every product of a convolution with geometry g: output
// element y_at of [N, O, out...], weight element w_at of [O, C / groups, kernel...] and input
// element x_at of [N, C, in...] (inside the input; taps in the padding are skipped).
template <class F>
void for_each_tap(const Geometry& g, F&& f) {
  const size_t dims = g.src.size() - 2;
  const int64_t groups = g.weights.size() == dims + 3 ? g.weights[0] : 1;
  const size_t k0 = groups > 1 ? 3 : 2;  // where the kernel sizes start in g.weights
  const int64_t n_count = g.src[0], in_channels = g.src[1], out_channels = g.dst[1];
  const int64_t per_group_in = in_channels / groups, per_group_out = out_channels / groups;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1},
      pad{0, 0, 0};
  for (size_t i = 0; i < dims; ++i) {
    const size_t e = 3 - dims + i;
    in[e] = g.src[2 + i];
    out[e] = g.dst[2 + i];
    k[e] = g.weights[k0 + i];
    s[e] = g.strides[i];
    d[e] = g.dilates[i] + 1;
    pad[e] = g.pad_l[i];
  }
  const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
  const int64_t taps = k[0] * k[1] * k[2];
  for (int64_t n = 0; n < n_count; ++n)
    for (int64_t o = 0; o < out_channels; ++o)
      for (int64_t ci = 0; ci < per_group_in; ++ci) {
        const int64_t c = o / per_group_out * per_group_in + ci;
        for (int64_t p0 = 0; p0 < out[0]; ++p0)
          for (int64_t p1 = 0; p1 < out[1]; ++p1)
            for (int64_t p2 = 0; p2 < out[2]; ++p2)
              for (int64_t t = 0; t < taps; ++t) {
                const int64_t t0 = t / (k[1] * k[2]), t1 = t / k[2] % k[1], t2 = t % k[2];
                const int64_t i0 = p0 * s[0] - pad[0] + t0 * d[0];
                const int64_t i1 = p1 * s[1] - pad[1] + t1 * d[1];
                const int64_t i2 = p2 * s[2] - pad[2] + t2 * d[2];
                if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                  continue;
                f((n * out_channels + o) * out_plane + (p0 * out[1] + p1) * out[2] + p2,
                  (o * per_group_in + ci) * taps + t,
                  (n * in_channels + c) * in_plane + (i0 * in[1] + i1) * in[2] + i2);
              }
      }
}
// Each output's [N, O, ...] plane index -> its channel, for the bias.
int64_t channel_of(int64_t y_at, const Geometry& g) {
  int64_t plane = 1;
  for (size_t i = 2; i < g.dst.size(); ++i) plane *= g.dst[i];
  return y_at / plane % g.dst[1];
}

// ---- onednn_conv: inputs [x, weight(, bias)]; attrs [stride, padding, dilation, groups,
// has_bias] ----
int conv_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const DType dt = check_dtype("onednn_conv", c.inputs);
  const Geometry g = geometry_of("onednn_conv", c.in(0).sizes(), c.in(1).sizes(), c.attrs, 0);
  return one_output(out, dt, shape_of(g.dst));
}
void conv_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor x = c.in(0).contiguous(), w = c.in(1).contiguous();
  const bool has_bias = c.attrs.b(4);
  const Tensor b = has_bias ? c.in(2).contiguous() : Tensor();
  const Tensor& y = outs[0];
  if (y.numel() == 0) return;
  if (x.numel() == 0 || w.numel() == 0) {  // (no channels to sum: the bias alone)
    y.zero_();
    if (has_bias) {
      Dims sizes(static_cast<size_t>(y.dim()), 1);
      sizes[1] = y.size(1);
      y.add_(b.reshape(IntList(sizes)));
    }
    return;
  }
  const Geometry g = geometry_of("onednn_conv", x.sizes(), w.sizes(), c.attrs, 0);
  if (x.dtype() == DType::Float64) {
    double* ys = y.data_ptr<double>();
    const double *xs = x.data_ptr<double>(), *ws = w.data_ptr<double>();
    for (int64_t i = 0; i < y.numel(); ++i)
      ys[i] = has_bias ? b.data_ptr<double>()[channel_of(i, g)] : 0;
    for_each_tap(
        g, [&](int64_t y_at, int64_t w_at, int64_t x_at) { ys[y_at] += xs[x_at] * ws[w_at]; });
    return;
  }
  const std::shared_ptr<Primitives> shared = primitives_for(g, has_bias);
  const Primitives& p = *shared;
  std::vector<Argument> args = {
      {DNNL_ARG_SRC, plain_md(g.src, g.data_tag), p.forward_pd.src_desc(), f32(x), false},
      {DNNL_ARG_WEIGHTS, plain_md(g.weights, g.weights_tag), p.forward_pd.weights_desc(), f32(w),
       false},
      {DNNL_ARG_DST, plain_md(g.dst, g.data_tag), p.forward_pd.dst_desc(), f32(y), true}};
  if (has_bias)
    args.push_back(
        {DNNL_ARG_BIAS, plain_md(g.bias, Tag::x), p.forward_pd.bias_desc(), f32(b), false});
  execute(p.forward, args);
}

// ---- onednn_conv_backward_input: inputs [grad, weight]; attrs [input_sizes, stride, padding,
// dilation, groups] ----
int backward_input_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const DType dt = check_dtype("onednn_conv_backward_input", c.inputs);
  const Shape x_sizes = shape_of(c.attrs.ints(0));
  const Geometry g =
      geometry_of("onednn_conv_backward_input", x_sizes, c.in(1).sizes(), c.attrs, 1);
  KILN_CHECK(c.in(0).sizes() == shape_of(g.dst), ShapeError,
             "onednn_conv_backward_input: expected a gradient of shape ", IntList(g.dst), ", got ",
             c.in(0).shape_str());
  return one_output(out, dt, x_sizes);
}
void backward_input_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor dy = c.in(0).contiguous(), w = c.in(1).contiguous();
  const Tensor& dx = outs[0];
  if (dx.numel() == 0) return;
  if (dy.numel() == 0 || w.numel() == 0) {
    dx.zero_();
    return;
  }
  const Geometry g = geometry_of("onednn_conv_backward_input", dx.sizes(), w.sizes(), c.attrs, 1);
  if (dx.dtype() == DType::Float64) {
    double* dxs = dx.data_ptr<double>();
    const double *dys = dy.data_ptr<double>(), *ws = w.data_ptr<double>();
    std::fill_n(dxs, dx.numel(), 0.0);
    for_each_tap(
        g, [&](int64_t y_at, int64_t w_at, int64_t x_at) { dxs[x_at] += dys[y_at] * ws[w_at]; });
    return;
  }
  const std::shared_ptr<Primitives> shared = with_backward_data(g);
  const Primitives& p = *shared;
  execute(*p.data, {{DNNL_ARG_DIFF_DST, plain_md(g.dst, g.data_tag), p.data_pd->diff_dst_desc(),
                     f32(dy), false},
                    {DNNL_ARG_WEIGHTS, plain_md(g.weights, g.weights_tag),
                     p.data_pd->weights_desc(), f32(w), false},
                    {DNNL_ARG_DIFF_SRC, plain_md(g.src, g.data_tag), p.data_pd->diff_src_desc(),
                     f32(dx), true}});
}

// ---- onednn_conv_backward_weight: inputs [x, grad]; attrs [weight_sizes, stride, padding,
// dilation, groups, has_bias] -> (grad_weight(, grad_bias)) ----
int backward_weight_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const DType dt = check_dtype("onednn_conv_backward_weight", c.inputs);
  const Shape w_sizes = shape_of(c.attrs.ints(0));
  const Geometry g =
      geometry_of("onednn_conv_backward_weight", c.in(0).sizes(), w_sizes, c.attrs, 1);
  KILN_CHECK(c.in(1).sizes() == shape_of(g.dst), ShapeError,
             "onednn_conv_backward_weight: expected a gradient of shape ", IntList(g.dst), ", got ",
             c.in(1).shape_str());
  out[0] = TensorMeta(dt, w_sizes);
  if (!c.attrs.b(5)) return 1;
  out[1] = TensorMeta(dt, Shape{w_sizes[0]});
  return 2;
}
void backward_weight_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor x = c.in(0).contiguous(), dy = c.in(1).contiguous();
  const bool has_bias = c.attrs.b(5);
  const Tensor& dw = outs[0];
  if (x.numel() == 0 || dy.numel() == 0 || dw.numel() == 0) {
    dw.zero_();
    if (has_bias) {  // the bias's gradient: dy summed over all but its channel dim
      Dims others = {0};
      for (int64_t d = 2; d < dy.dim(); ++d) others.push_back(d);
      outs[1].copy_(dy.sum(IntList(others)));
    }
    return;
  }
  const Geometry g = geometry_of("onednn_conv_backward_weight", x.sizes(), dw.sizes(), c.attrs, 1);
  if (x.dtype() == DType::Float64) {
    double* dws = dw.data_ptr<double>();
    const double *xs = x.data_ptr<double>(), *dys = dy.data_ptr<double>();
    std::fill_n(dws, dw.numel(), 0.0);
    for_each_tap(
        g, [&](int64_t y_at, int64_t w_at, int64_t x_at) { dws[w_at] += xs[x_at] * dys[y_at]; });
    if (has_bias) {
      double* dbs = outs[1].data_ptr<double>();
      std::fill_n(dbs, outs[1].numel(), 0.0);
      for (int64_t i = 0; i < dy.numel(); ++i) dbs[channel_of(i, g)] += dys[i];
    }
    return;
  }
  const std::shared_ptr<Primitives> shared = with_backward_weights(g, has_bias);
  const Primitives& p = *shared;
  std::vector<Argument> args = {
      {DNNL_ARG_SRC, plain_md(g.src, g.data_tag), p.weights_pd->src_desc(), f32(x), false},
      {DNNL_ARG_DIFF_DST, plain_md(g.dst, g.data_tag), p.weights_pd->diff_dst_desc(), f32(dy),
       false},
      {DNNL_ARG_DIFF_WEIGHTS, plain_md(g.weights, g.weights_tag), p.weights_pd->diff_weights_desc(),
       f32(dw), true}};
  if (has_bias)
    args.push_back({DNNL_ARG_DIFF_BIAS, plain_md(g.bias, Tag::x), p.weights_pd->diff_bias_desc(),
                    f32(outs[1]), true});
  execute(*p.weights, args);
}

// The three ops are each other's derivatives (every one is linear in each input):
//   y = conv(x, w) + b:        dx = backward_input(dy, w), (dw, db) = backward_weight(x, dy)
//   dx = backward_input(dy, w): d(dy) = conv(g, w),        dw = backward_weight(g, dy)
//   dw = backward_weight(x, dy): dx = backward_input(dy, g), d(dy) = conv(x, g) (+ db's g)
// Attrs shared by all three from index `first`: stride, padding, dilation, groups.
Attrs geometry_attrs(const Attrs& a, size_t first) {
  return {a[first], a[first + 1], a[first + 2], a[first + 3]};
}
Tensor call_conv(const Tensor& x, const Tensor& w, const Attrs& geometry) {
  Attrs a = geometry;
  a.push_back(false);
  return call(onednn_conv_op, {x, w}, a);
}
Tensor call_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_sizes,
                           const Attrs& geometry) {
  Attrs a = {ints_attr(IntList(x_sizes))};
  for (size_t k = 0; k < geometry.size(); ++k) a.push_back(geometry[k]);
  return call(onednn_conv_backward_input_op, {dy, w}, a);
}
std::vector<Tensor> call_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_sizes,
                                         const Attrs& geometry, bool bias) {
  Attrs a = {ints_attr(IntList(w_sizes))};
  for (size_t k = 0; k < geometry.size(); ++k) a.push_back(geometry[k]);
  a.push_back(bias);
  std::array<Tensor, kMaxOpOutputs> outs;
  const Tensor in[] = {x, dy};
  const int n = dispatch(onednn_conv_backward_weight_op, in, a, outs);
  return std::vector<Tensor>(outs.begin(), outs.begin() + n);
}

void conv_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Attrs geometry = geometry_attrs(c.attrs, 0);
  if (c.needs_grad(0))
    g[0] = call_backward_input(c.grad(), c.in(1), c.input_meta[0].sizes, geometry);
  const bool bias = c.attrs.b(4);
  if (c.needs_grad(1) || (bias && c.needs_grad(2))) {
    const std::vector<Tensor> gw =
        call_backward_weight(c.in(0), c.grad(), c.input_meta[1].sizes, geometry, bias);
    if (c.needs_grad(1)) g[1] = gw[0];
    if (bias && c.needs_grad(2)) g[2] = gw[1];
  }
}
void backward_input_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Attrs geometry = geometry_attrs(c.attrs, 1);
  if (c.needs_grad(0)) g[0] = call_conv(c.grad(), c.in(1), geometry);
  if (c.needs_grad(1))
    g[1] = call_backward_weight(c.grad(), c.in(0), c.input_meta[1].sizes, geometry, false)[0];
}
void backward_weight_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Attrs geometry = geometry_attrs(c.attrs, 1);
  const Tensor& gw = c.grad(0);
  const Tensor gb = c.attrs.b(5) ? c.grad(1) : Tensor();
  if (c.needs_grad(0) && gw.defined())
    g[0] = call_backward_input(c.in(1), gw, c.input_meta[0].sizes, geometry);
  if (c.needs_grad(1)) {
    Tensor d = gw.defined() ? call_conv(c.in(0), gw, geometry) : Tensor();
    if (gb.defined()) {
      Dims sizes(c.input_meta[1].sizes.size(), 1);
      sizes[1] = gb.size(0);
      const Tensor spread = gb.reshape(IntList(sizes)).expand(IntList(c.input_meta[1].sizes));
      d = d.defined() ? d + spread : spread;
    }
    g[1] = d;
  }
}

}  // namespace

const OpDef& onednn_conv_op =
    register_op({.name = "onednn_conv",
                 .schema = "onednn_conv(Tensor input, Tensor weight, Tensor? bias, int[] stride, "
                           "int[] padding, int[] dilation, int groups, bool has_bias) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = conv_meta,
                 .kernel = conv_kernel,
                 .derivative = {.fn = conv_derivative, .saved_inputs = save({0, 1})},
                 .internal = true});
const OpDef& onednn_conv_backward_input_op = register_op(
    {.name = "onednn_conv_backward_input",
     .schema = "onednn_conv_backward_input(Tensor grad, Tensor weight, int[] input_sizes, "
               "int[] stride, int[] padding, int[] dilation, int groups) -> Tensor",
     .kind = OpKind::Extern,
     .meta = backward_input_meta,
     .kernel = backward_input_kernel,
     .derivative = {.fn = backward_input_derivative, .saved_inputs = save({0, 1})},
     .internal = true});
const OpDef& onednn_conv_backward_weight_op = register_op(
    {.name = "onednn_conv_backward_weight",
     .schema = "onednn_conv_backward_weight(Tensor input, Tensor grad, int[] weight_sizes, "
               "int[] stride, int[] padding, int[] dilation, int groups, bool has_bias) -> "
               "(Tensor, Tensor)",
     .kind = OpKind::Extern,
     .meta = backward_weight_meta,
     .kernel = backward_weight_kernel,
     .derivative = {.fn = backward_weight_derivative, .saved_inputs = save({0, 1})},
     .internal = true});

bool onednn_convolution(DType dtype) { return onednn::enabled() && dtype == DType::Float32; }

Tensor onednn_conv(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   IntList stride, IntList padding, IntList dilation, int64_t groups) {
  if (bias)
    return call(onednn_conv_op, {x, weight, *bias},
                {ints_attr(stride), ints_attr(padding), ints_attr(dilation), groups, true});
  return call(onednn_conv_op, {x, weight},
              {ints_attr(stride), ints_attr(padding), ints_attr(dilation), groups, false});
}

Tensor onednn_conv_backward_input(const Tensor& grad, const Tensor& weight, IntList input_sizes,
                                  IntList stride, IntList padding, IntList dilation,
                                  int64_t groups) {
  return call_backward_input(grad, weight, Shape(input_sizes.begin(), input_sizes.end()),
                             {ints_attr(stride), ints_attr(padding), ints_attr(dilation), groups});
}
std::pair<Tensor, Tensor> onednn_conv_backward_weight(const Tensor& x, const Tensor& grad,
                                                      IntList weight_sizes, IntList stride,
                                                      IntList padding, IntList dilation,
                                                      int64_t groups) {
  const std::vector<Tensor> g = call_backward_weight(
      x, grad, Shape(weight_sizes.begin(), weight_sizes.end()),
      {ints_attr(stride), ints_attr(padding), ints_attr(dilation), groups}, true);
  return {g[0], g[1]};
}

}  // namespace kiln::ops
