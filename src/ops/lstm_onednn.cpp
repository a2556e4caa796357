// An LSTM layer on oneDNN (see lstm_onednn.h): two ops, the layer and its backward. oneDNN
// chooses the weights' layout (they are reordered from PyTorch's [4 H, I] = ldgoi through
// per-thread scratch); the forward's workspace (each step's gates and cell state, oneDNN's own
// format) is an output the backward reads. Primitive descriptors are cached by geometry.
#include "ops/lstm_onednn.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ops/onednn_util.h"
#include "ops/op_utils.h"

namespace kiln::ops {

extern const OpDef& onednn_lstm_layer_op;
extern const OpDef& onednn_lstm_layer_backward_op;

namespace {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;
using onednn::Argument;
using onednn::cpu_engine;
using onednn::execute;

struct Geometry {
  int64_t steps, batch, input, hidden;
  bool reverse;
};

// Inputs [x, h0, c0, w_ih, w_hh, bias]: checked, as the op's geometry.
Geometry geometry_of(const char* op, std::span<const Tensor> in, bool reverse) {
  const Tensor &x = in[0], &h0 = in[1], &c0 = in[2], &w_ih = in[3], &w_hh = in[4], &b = in[5];
  KILN_CHECK(x.dim() == 3, ShapeError, op, ": expected an input [steps, batch, features], got ",
             x.shape_str());
  Geometry g{x.size(0), x.size(1), x.size(2), w_hh.dim() == 2 ? w_hh.size(1) : -1, reverse};
  const int64_t h = g.hidden;
  KILN_CHECK(w_hh.dim() == 2 && w_hh.size(0) == 4 * h && w_ih.dim() == 2 && w_ih.size(0) == 4 * h &&
                 w_ih.size(1) == g.input && b.dim() == 1 && b.size(0) == 4 * h,
             ShapeError, op, ": expected w_ih [4 H, ", g.input,
             "], w_hh [4 H, H] and a bias [4 H], got ", w_ih.shape_str(), ", ", w_hh.shape_str(),
             " and ", b.shape_str());
  for (const Tensor* s : {&h0, &c0})
    KILN_CHECK(s->dim() == 2 && s->size(0) == g.batch && s->size(1) == h, ShapeError, op,
               ": expected states [", g.batch, ", ", h, "], got ", s->shape_str());
  const DType dt = x.dtype();
  KILN_CHECK(dt == DType::Float32 || dt == DType::Float64, DTypeError, op,
             ": expected float32 or float64, got ", dt);
  for (const Tensor& t : in)
    KILN_CHECK(t.dtype() == dt, DTypeError, op, ": every input must be ", dt, ", got ", t.dtype());
  return g;
}

std::string key_of(const Geometry& g) {
  return std::to_string(g.steps) + "," + std::to_string(g.batch) + "," + std::to_string(g.input) +
         "," + std::to_string(g.hidden) + (g.reverse ? "r" : "");
}

// oneDNN's descriptors of a geometry's arguments (one layer, one direction).
struct Descs {
  memory::desc src_layer, src_iter, weights_layer_plain, weights_iter_plain, bias, dst_layer;
  memory::desc weights_layer_any, weights_iter_any;
  memory::desc no_peephole;
};
Descs descs_of(const Geometry& g) {
  const auto f32 = memory::data_type::f32;
  const memory::dim t = g.steps, n = g.batch, i = g.input, h = g.hidden;
  return {memory::desc({t, n, i}, f32, Tag::tnc),
          memory::desc({1, 1, n, h}, f32, Tag::ldnc),
          memory::desc({1, 1, i, 4, h}, f32, Tag::ldgoi),
          memory::desc({1, 1, h, 4, h}, f32, Tag::ldgoi),
          memory::desc({1, 1, 4, h}, f32, Tag::ldgo),
          memory::desc({t, n, h}, f32, Tag::tnc),
          memory::desc({1, 1, i, 4, h}, f32, Tag::any),
          memory::desc({1, 1, h, 4, h}, f32, Tag::any),
          memory::desc()};
}
dnnl::rnn_direction direction_of(const Geometry& g) {
  return g.reverse ? dnnl::rnn_direction::unidirectional_right2left
                   : dnnl::rnn_direction::unidirectional_left2right;
}

struct Primitives {
  dnnl::lstm_forward::primitive_desc forward_pd;
  dnnl::lstm_forward forward;
  std::optional<dnnl::lstm_backward::primitive_desc> backward_pd;
  std::optional<dnnl::lstm_backward> backward;
};
std::mutex& primitives_mutex() {
  static std::mutex mu;
  return mu;
}
std::shared_ptr<Primitives> primitives_locked(const Geometry& g) {
  static auto* cache = new std::map<std::string, std::shared_ptr<Primitives>>();
  const std::string key = key_of(g);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  if (cache->size() >= 256) cache->clear();  // bounded, as the convolution cache
  const Descs d = descs_of(g);
  const dnnl::lstm_forward::desc desc(
      dnnl::prop_kind::forward_training, direction_of(g), d.src_layer, d.src_iter, d.src_iter,
      d.weights_layer_any, d.weights_iter_any, d.bias, d.dst_layer, d.src_iter, d.src_iter);
  dnnl::lstm_forward::primitive_desc pd(desc, cpu_engine());
  auto entry = std::make_shared<Primitives>(Primitives{pd, dnnl::lstm_forward(pd)});
  cache->emplace(key, entry);
  return entry;
}
std::shared_ptr<Primitives> forward_primitives(const Geometry& g) {
  std::lock_guard<std::mutex> lock(primitives_mutex());
  return primitives_locked(g);
}
std::shared_ptr<Primitives> backward_primitives(const Geometry& g) {
  std::lock_guard<std::mutex> lock(primitives_mutex());
  std::shared_ptr<Primitives> p = primitives_locked(g);
  if (!p->backward) {
    const Descs d = descs_of(g);
    const dnnl::lstm_backward::desc desc(
        dnnl::prop_kind::backward, direction_of(g), d.src_layer, d.src_iter, d.src_iter,
        d.weights_layer_any, d.weights_iter_any, d.bias, d.dst_layer, d.src_iter, d.src_iter,
        d.src_layer, d.src_iter, d.src_iter, d.weights_layer_any, d.weights_iter_any, d.bias,
        d.dst_layer, d.src_iter, d.src_iter);
    p->backward_pd.emplace(desc, cpu_engine(), p->forward_pd);
    p->backward.emplace(*p->backward_pd);
  }
  return p;
}

// The workspace's float elements: oneDNN's bytes (float32), or each step's four gate values and
// cell state (float64's direct loops).
int64_t workspace_numel(const Geometry& g, DType dt) {
  if (dt == DType::Float64) return g.steps * g.batch * 5 * g.hidden;
  const size_t bytes = forward_primitives(g)->forward_pd.workspace_desc().get_size();
  return static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
}

float* f32(const Tensor& t) { return t.data_ptr<float>(); }

// The layer's six inputs (x, h0, c0, w_ih, w_hh, bias) as arguments of a primitive (forward's or
// backward's: both take them).
template <class PrimitiveDesc>
std::vector<Argument> layer_arguments(const Descs& d, const PrimitiveDesc& pd,
                                      const std::vector<Tensor>& in) {
  return {
      {DNNL_ARG_SRC_LAYER, d.src_layer, pd.src_layer_desc(), f32(in[0]), false},
      {DNNL_ARG_SRC_ITER, d.src_iter, pd.src_iter_desc(), f32(in[1]), false},
      {DNNL_ARG_SRC_ITER_C, d.src_iter, pd.src_iter_c_desc(), f32(in[2]), false},
      {DNNL_ARG_WEIGHTS_LAYER, d.weights_layer_plain, pd.weights_layer_desc(), f32(in[3]), false},
      {DNNL_ARG_WEIGHTS_ITER, d.weights_iter_plain, pd.weights_iter_desc(), f32(in[4]), false},
      {DNNL_ARG_BIAS, d.bias, pd.bias_desc(), f32(in[5]), false}};
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// ---- float64: the formulas in direct loops ----
// Step s of the layer visits time t = s (or T - 1 - s in reverse). ws[t] holds i, f, g, o and c.
void forward_f64(const Geometry& g, const double* x, const double* h0, const double* c0,
                 const double* w_ih, const double* w_hh, const double* b, double* y, double* hy,
                 double* cy, double* ws) {
  const int64_t n = g.batch, in = g.input, h = g.hidden;
  std::vector<double> h_prev(h0, h0 + n * h), c_prev(c0, c0 + n * h),
      pre(static_cast<size_t>(4 * h));
  for (int64_t s = 0; s < g.steps; ++s) {
    const int64_t t = g.reverse ? g.steps - 1 - s : s;
    for (int64_t r = 0; r < n; ++r) {
      const double* xr = x + (t * n + r) * in;
      for (int64_t k = 0; k < 4 * h; ++k) {
        double v = b[k];
        for (int64_t j = 0; j < in; ++j) v += w_ih[k * in + j] * xr[j];
        for (int64_t j = 0; j < h; ++j)
          v += w_hh[k * h + j] * h_prev[static_cast<size_t>(r * h + j)];
        pre[static_cast<size_t>(k)] = v;
      }
      double* w = ws + (t * n + r) * 5 * h;
      for (int64_t j = 0; j < h; ++j) {
        const double i_g = sigmoid(pre[static_cast<size_t>(j)]);
        const double f_g = sigmoid(pre[static_cast<size_t>(h + j)]);
        const double g_g = std::tanh(pre[static_cast<size_t>(2 * h + j)]);
        const double o_g = sigmoid(pre[static_cast<size_t>(3 * h + j)]);
        const double c = f_g * c_prev[static_cast<size_t>(r * h + j)] + i_g * g_g;
        w[j] = i_g, w[h + j] = f_g, w[2 * h + j] = g_g, w[3 * h + j] = o_g, w[4 * h + j] = c;
        y[(t * n + r) * h + j] = o_g * std::tanh(c);
      }
    }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < h; ++j) {
        h_prev[static_cast<size_t>(r * h + j)] = y[(t * n + r) * h + j];
        c_prev[static_cast<size_t>(r * h + j)] = ws[(t * n + r) * 5 * h + 4 * h + j];
      }
  }
  std::copy(h_prev.begin(), h_prev.end(), hy);
  std::copy(c_prev.begin(), c_prev.end(), cy);
}

void backward_f64(const Geometry& g, const double* x, const double* h0, const double* c0,
                  const double* w_ih, const double* w_hh, const double* y, const double* ws,
                  const double* dy, const double* dhy, const double* dcy, double* dx, double* dh0,
                  double* dc0, double* dw_ih, double* dw_hh, double* db) {
  const int64_t n = g.batch, in = g.input, h = g.hidden, T = g.steps;
  std::vector<double> dh(dhy, dhy + n * h), dc(dcy, dcy + n * h), da(static_cast<size_t>(4 * h));
  std::fill_n(dx, T * n * in, 0.0);
  std::fill_n(dw_ih, 4 * h * in, 0.0);
  std::fill_n(dw_hh, 4 * h * h, 0.0);
  std::fill_n(db, 4 * h, 0.0);
  for (int64_t s = T - 1; s >= 0; --s) {
    const int64_t t = g.reverse ? T - 1 - s : s;
    const int64_t prev = g.reverse ? t + 1 : t - 1;  // the step before in the layer's order
    const bool first = s == 0;
    std::vector<double> dh_prev(static_cast<size_t>(n * h), 0.0),
        dc_prev(static_cast<size_t>(n * h));
    for (int64_t r = 0; r < n; ++r) {
      const double* w = ws + (t * n + r) * 5 * h;
      const double* h_before = first ? h0 + r * h : y + (prev * n + r) * h;
      const double* c_before = first ? c0 + r * h : ws + (prev * n + r) * 5 * h + 4 * h;
      for (int64_t j = 0; j < h; ++j) {
        const auto rj = static_cast<size_t>(r * h + j);
        const double i_g = w[j], f_g = w[h + j], g_g = w[2 * h + j], o_g = w[3 * h + j];
        const double tc = std::tanh(w[4 * h + j]);
        const double dh_t = dy[(t * n + r) * h + j] + dh[rj];
        const double dc_t = dc[rj] + dh_t * o_g * (1 - tc * tc);
        da[static_cast<size_t>(j)] = dc_t * g_g * i_g * (1 - i_g);
        da[static_cast<size_t>(h + j)] = dc_t * c_before[j] * f_g * (1 - f_g);
        da[static_cast<size_t>(2 * h + j)] = dc_t * i_g * (1 - g_g * g_g);
        da[static_cast<size_t>(3 * h + j)] = dh_t * tc * o_g * (1 - o_g);
        dc_prev[rj] = dc_t * f_g;
      }
      const double* xr = x + (t * n + r) * in;
      double* dxr = dx + (t * n + r) * in;
      for (int64_t k = 0; k < 4 * h; ++k) {
        const double a = da[static_cast<size_t>(k)];
        db[k] += a;
        for (int64_t j = 0; j < in; ++j) {
          dw_ih[k * in + j] += a * xr[j];
          dxr[j] += a * w_ih[k * in + j];
        }
        for (int64_t j = 0; j < h; ++j) {
          dw_hh[k * h + j] += a * h_before[j];
          dh_prev[static_cast<size_t>(r * h + j)] += a * w_hh[k * h + j];
        }
      }
    }
    dh.swap(dh_prev);
    dc.swap(dc_prev);
  }
  std::copy(dh.begin(), dh.end(), dh0);
  std::copy(dc.begin(), dc.end(), dc0);
}

// ---- onednn_lstm_layer: inputs [x, h0, c0, w_ih, w_hh, bias]; attrs [reverse] ->
// (y, h_T, c_T, workspace) ----
int layer_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Geometry g = geometry_of("onednn_lstm_layer", c.inputs, c.attrs.b(0));
  const DType dt = c.in(0).dtype();
  out[0] = TensorMeta(dt, Shape{g.steps, g.batch, g.hidden});
  out[1] = TensorMeta(dt, Shape{g.batch, g.hidden});
  out[2] = TensorMeta(dt, Shape{g.batch, g.hidden});
  out[3] = TensorMeta(dt, Shape{g.steps > 0 && g.batch > 0 ? workspace_numel(g, dt) : 0});
  return 4;
}
void layer_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Geometry g = geometry_of("onednn_lstm_layer", c.inputs, c.attrs.b(0));
  std::vector<Tensor> in;
  for (const Tensor& t : c.inputs) in.push_back(t.contiguous());
  if (g.batch == 0 || g.hidden == 0) return;
  if (g.steps == 0) {  // no step: the state passes through
    outs[1].copy_(in[1]);
    outs[2].copy_(in[2]);
    return;
  }
  if (in[0].dtype() == DType::Float64) {
    forward_f64(g, in[0].data_ptr<double>(), in[1].data_ptr<double>(), in[2].data_ptr<double>(),
                in[3].data_ptr<double>(), in[4].data_ptr<double>(), in[5].data_ptr<double>(),
                outs[0].data_ptr<double>(), outs[1].data_ptr<double>(), outs[2].data_ptr<double>(),
                outs[3].data_ptr<double>());
    return;
  }
  const std::shared_ptr<Primitives> shared = forward_primitives(g);
  const auto& pd = shared->forward_pd;
  const Descs d = descs_of(g);
  std::vector<Argument> args = layer_arguments(d, pd, in);
  args.insert(args.end(),
              {{DNNL_ARG_DST_LAYER, d.dst_layer, pd.dst_layer_desc(), f32(outs[0]), true},
               {DNNL_ARG_DST_ITER, d.src_iter, pd.dst_iter_desc(), f32(outs[1]), true},
               {DNNL_ARG_DST_ITER_C, d.src_iter, pd.dst_iter_c_desc(), f32(outs[2]), true},
               {DNNL_ARG_WORKSPACE, pd.workspace_desc(), pd.workspace_desc(), f32(outs[3]), true}});
  execute(shared->forward, args);
}

// ---- onednn_lstm_layer_backward: inputs [x, h0, c0, w_ih, w_hh, bias, y, h_T, c_T, workspace,
// dy, dh_T, dc_T]; attrs [reverse] -> (dx, dh0, dc0, d_weights) where d_weights is [w_ih's,
// w_hh's, bias's] flattened into one tensor (an op has at most four outputs) ----
int backward_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Geometry g = geometry_of("onednn_lstm_layer_backward", c.inputs.first(6), c.attrs.b(0));
  const DType dt = c.in(0).dtype();
  const Shape y{g.steps, g.batch, g.hidden}, state{g.batch, g.hidden};
  KILN_CHECK(c.in(6).sizes() == y && c.in(7).sizes() == state && c.in(8).sizes() == state &&
                 c.in(10).sizes() == y && c.in(11).sizes() == state && c.in(12).sizes() == state,
             ShapeError, "onednn_lstm_layer_backward: the outputs and their gradients must be ",
             IntList(y), " and ", IntList(state));
  out[0] = TensorMeta(dt, c.in(0).sizes());
  out[1] = TensorMeta(dt, state);
  out[2] = TensorMeta(dt, state);
  out[3] = TensorMeta(dt, Shape{4 * g.hidden * (g.input + g.hidden + 1)});
  return 4;
}
void backward_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Geometry g = geometry_of("onednn_lstm_layer_backward", c.inputs.first(6), c.attrs.b(0));
  std::vector<Tensor> in;
  for (const Tensor& t : c.inputs) in.push_back(t.contiguous());
  const int64_t h = g.hidden, wi = 4 * h * g.input, wh = 4 * h * h;
  if (g.batch == 0 || h == 0 || g.steps == 0) {
    for (const Tensor& o : outs) o.zero_();
    if (g.steps == 0) {  // the state passed through
      outs[1].copy_(in[11]);
      outs[2].copy_(in[12]);
    }
    return;
  }
  if (in[0].dtype() == DType::Float64) {
    double* dw = outs[3].data_ptr<double>();
    backward_f64(g, in[0].data_ptr<double>(), in[1].data_ptr<double>(), in[2].data_ptr<double>(),
                 in[3].data_ptr<double>(), in[4].data_ptr<double>(), in[6].data_ptr<double>(),
                 in[9].data_ptr<double>(), in[10].data_ptr<double>(), in[11].data_ptr<double>(),
                 in[12].data_ptr<double>(), outs[0].data_ptr<double>(), outs[1].data_ptr<double>(),
                 outs[2].data_ptr<double>(), dw, dw + wi, dw + wi + wh);
    return;
  }
  const std::shared_ptr<Primitives> shared = backward_primitives(g);
  const auto& pd = *shared->backward_pd;
  const Descs d = descs_of(g);
  float* dw = f32(outs[3]);
  // (The primitive adds every step's weight gradients into its outputs: they start at zero.)
  std::vector<Argument> args = layer_arguments(d, pd, in);
  args.insert(
      args.end(),
      {{DNNL_ARG_DST_LAYER, d.dst_layer, pd.dst_layer_desc(), f32(in[6]), false},
       {DNNL_ARG_DST_ITER, d.src_iter, pd.dst_iter_desc(), f32(in[7]), false},
       {DNNL_ARG_DST_ITER_C, d.src_iter, pd.dst_iter_c_desc(), f32(in[8]), false},
       {DNNL_ARG_WORKSPACE, pd.workspace_desc(), pd.workspace_desc(), f32(in[9]), false},
       {DNNL_ARG_DIFF_DST_LAYER, d.dst_layer, pd.diff_dst_layer_desc(), f32(in[10]), false},
       {DNNL_ARG_DIFF_DST_ITER, d.src_iter, pd.diff_dst_iter_desc(), f32(in[11]), false},
       {DNNL_ARG_DIFF_DST_ITER_C, d.src_iter, pd.diff_dst_iter_c_desc(), f32(in[12]), false},
       {DNNL_ARG_DIFF_SRC_LAYER, d.src_layer, pd.diff_src_layer_desc(), f32(outs[0]), true},
       {DNNL_ARG_DIFF_SRC_ITER, d.src_iter, pd.diff_src_iter_desc(), f32(outs[1]), true},
       {DNNL_ARG_DIFF_SRC_ITER_C, d.src_iter, pd.diff_src_iter_c_desc(), f32(outs[2]), true},
       {DNNL_ARG_DIFF_WEIGHTS_LAYER, d.weights_layer_plain, pd.diff_weights_layer_desc(), dw, true,
        true},
       {DNNL_ARG_DIFF_WEIGHTS_ITER, d.weights_iter_plain, pd.diff_weights_iter_desc(), dw + wi,
        true, true},
       {DNNL_ARG_DIFF_BIAS, d.bias, pd.diff_bias_desc(), dw + wi + wh, true, true}});
  execute(*shared->backward, args);
}

// Gradients of the layer: the backward op, with zeros for outputs nothing used.
void layer_derivative(const BackwardCall& c, std::span<Tensor> grads) {
  const Geometry g = geometry_of("onednn_lstm_layer", c.inputs, c.attrs.b(0));
  const Tensor in[] = {c.in(0),
                       c.in(1),
                       c.in(2),
                       c.in(3),
                       c.in(4),
                       c.in(5),
                       c.out(0),
                       c.out(1),
                       c.out(2),
                       c.out(3),
                       c.grad_or_zeros(0),
                       c.grad_or_zeros(1),
                       c.grad_or_zeros(2)};
  std::array<Tensor, kMaxOpOutputs> outs;
  dispatch(onednn_lstm_layer_backward_op, in, c.attrs, outs);
  const int64_t h = g.hidden, wi = 4 * h * g.input, wh = 4 * h * h;
  for (size_t k = 0; k < 3; ++k)
    if (c.needs_grad(k)) grads[k] = outs[k];
  if (c.needs_grad(3)) grads[3] = outs[3].narrow(0, 0, wi).view({4 * h, g.input});
  if (c.needs_grad(4)) grads[4] = outs[3].narrow(0, wi, wh).view({4 * h, h});
  if (c.needs_grad(5)) grads[5] = outs[3].narrow(0, wi + wh, 4 * h);
}

}  // namespace

const OpDef& onednn_lstm_layer_op = register_op(
    {.name = "onednn_lstm_layer",
     .schema = "onednn_lstm_layer(Tensor input, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, "
               "Tensor bias, bool reverse) -> (Tensor, Tensor, Tensor, Tensor)",
     .kind = OpKind::Extern,
     .meta = layer_meta,
     .kernel = layer_kernel,
     .derivative = {.fn = layer_derivative,
                    .saved_inputs = save({0, 1, 2, 3, 4, 5}),
                    .saved_outputs = save({0, 1, 2, 3})},
     .internal = true});
// (No derivative: a second derivative through the layer is a clear error, naming this op.)
const OpDef& onednn_lstm_layer_backward_op = register_op(
    {.name = "onednn_lstm_layer_backward",
     .schema = "onednn_lstm_layer_backward(Tensor input, Tensor h0, Tensor c0, Tensor w_ih, "
               "Tensor w_hh, Tensor bias, Tensor output, Tensor h_n, Tensor c_n, Tensor workspace, "
               "Tensor grad_output, Tensor grad_h, Tensor grad_c, bool reverse) -> "
               "(Tensor, Tensor, Tensor, Tensor)",
     .kind = OpKind::Extern,
     .meta = backward_meta,
     .kernel = backward_kernel,
     .internal = true});

bool onednn_lstm(DType dtype) { return onednn::enabled() && dtype == DType::Float32; }

std::tuple<Tensor, Tensor, Tensor> onednn_lstm_layer(const Tensor& x, const Tensor& h0,
                                                     const Tensor& c0, const Tensor& w_ih,
                                                     const Tensor& w_hh, const Tensor& bias,
                                                     bool reverse) {
  std::array<Tensor, kMaxOpOutputs> outs;
  const Tensor in[] = {x, h0, c0, w_ih, w_hh, bias};
  dispatch(onednn_lstm_layer_op, in, {reverse}, outs);
  return {outs[0], outs[1], outs[2]};
}

}  // namespace kiln::ops
