// unfold_windows (im2col) and fold_windows (col2im): see windows.h. Both iterate one [N, C]
// plane per task over a 3-d geometry (missing spatial dims are size 1), so 1-, 2- and 3-d
// convolution and pooling share one loop; fold's planes are independent, so its sums are
// deterministic.
#include "ops/windows.h"

#include <array>

#include "kiln/core/parallel.h"
#include "ops/kernels/block_loop.h"
#include "ops/op_utils.h"

namespace kiln::ops {

namespace {

using Dims = std::vector<int64_t>;

// A window geometry padded to 3 spatial dims (leading dims of size 1, kernel 1).
struct Geometry {
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1},
      padding{0, 0, 0}, dilation{1, 1, 1};
  int64_t out_numel() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_numel() const { return kernel[0] * kernel[1] * kernel[2]; }
};

// Attrs [kernel, stride, padding, dilation, overhang] from `first`; `spatial` the input's sizes.
Geometry geometry(const char* op, const Attrs& a, size_t first, const Dims& spatial) {
  const size_t dims = spatial.size();
  KILN_CHECK(dims >= 1 && dims <= 3, ValueError, op, ": 1 to 3 spatial dims, got ", dims);
  Geometry g;
  for (size_t k = 0; k < 5; ++k)
    KILN_CHECK(a.ints(first + k).size() == dims, ValueError, op,
               ": kernel, stride, padding, dilation and overhang need one value per spatial dim (",
               dims, ")");
  for (size_t d = 0; d < dims; ++d) {
    const size_t e = 3 - dims + d;
    g.in[e] = spatial[d];
    g.kernel[e] = a.ints(first)[d];
    g.stride[e] = a.ints(first + 1)[d];
    g.padding[e] = a.ints(first + 2)[d];
    g.dilation[e] = a.ints(first + 3)[d];
    const int64_t overhang = a.ints(first + 4)[d];
    KILN_CHECK(g.kernel[e] > 0 && g.stride[e] > 0 && g.dilation[e] > 0 && g.padding[e] >= 0 &&
                   overhang >= 0,
               ValueError, op,
               ": kernel, stride and dilation must be positive, padding and "
               "overhang >= 0");
    const int64_t span = g.dilation[e] * (g.kernel[e] - 1) + 1;
    const int64_t extent = g.in[e] + 2 * g.padding[e] + overhang;
    KILN_CHECK(extent >= span, ShapeError, op, ": the padded size ", extent,
               " is smaller than the kernel's span ", span);
    g.out[e] = (extent - span) / g.stride[e] + 1;
  }
  return g;
}

// x's strides along its spatial dims, padded to 3 as Geometry is (a missing dim's stride 0).
std::array<int64_t, 3> spatial_strides(const Tensor& x) {
  std::array<int64_t, 3> st{0, 0, 0};
  const auto dims = static_cast<size_t>(x.dim() - 2);
  for (size_t d = 0; d < dims; ++d) st[3 - dims + d] = x.stride(static_cast<int64_t>(2 + d));
  return st;
}

Dims spatial_of(const Tensor& x, const char* op) {
  KILN_CHECK(x.dim() >= 3 && x.dim() <= 5, ShapeError, op,
             ": expected [N, C, spatial...] with 1 to 3 spatial dims, got ", x.shape_str());
  return Dims(x.sizes().begin() + 2, x.sizes().end());
}

// Where window element (out position o, kernel position k) lies in a windows tensor (per
// padded dim; a missing dim's stride is 0).
struct WindowStrides {
  std::array<int64_t, 3> out{0, 0, 0}, kernel{0, 0, 0};
};
WindowStrides contiguous_window_strides(const Geometry& g) {
  const int64_t kn = g.kernel_numel();
  return {{kn * g.out[1] * g.out[2], kn * g.out[2], kn},
          {g.kernel[1] * g.kernel[2], g.kernel[2], 1}};
}
// The windows of one [N, C] plane inside [N, out..., C, kernel...] (channels last): each
// output position's row holds every channel's kernel positions.
WindowStrides channels_last_window_strides(const Geometry& g, int64_t channels) {
  WindowStrides s = contiguous_window_strides(g);
  for (int64_t& o : s.out) o *= channels;
  return s;
}
WindowStrides window_strides_of(const Tensor& w, size_t dims) {
  WindowStrides s;
  for (size_t d = 0; d < dims; ++d) {
    s.out[3 - dims + d] = w.stride(static_cast<int64_t>(2 + d));
    s.kernel[3 - dims + d] = w.stride(static_cast<int64_t>(2 + dims + d));
  }
  return s;
}

// Calls run(at, step, count, i0, i1, i2, where) for each run of `count` window elements at
// windows offsets at, at + step, ... (consecutive output positions along the last spatial dim,
// one kernel position) that read the same region: input indices (i0, i1, i2 + j * stride[2]),
// inside the input (where 0), in the padding (1) or in the overhang (2). The runs' bounds are
// computed once per kernel position, so the copies and sums inside a run have no branch.
template <class F>
void for_each_window_run(const Geometry& g, const WindowStrides& ws, F&& run) {
  auto region = [&](int64_t i, int d) {
    return i >= g.in[d] + g.padding[d] ? 2 : (i < 0 || i >= g.in[d]) ? 1 : 0;
  };
  // The first o2 whose index o2 * stride + offset reaches `bound` (clamped to [0, out]).
  auto first_reaching = [&](int64_t bound, int64_t offset) {
    const int64_t n = bound - offset;
    return std::min<int64_t>(n <= 0 ? 0 : (n + g.stride[2] - 1) / g.stride[2], g.out[2]);
  };
  for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
    for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
      for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
        const int64_t at_k = k0 * ws.kernel[0] + k1 * ws.kernel[1] + k2 * ws.kernel[2];
        const int64_t offset2 = k2 * g.dilation[2] - g.padding[2];
        const int64_t inside = first_reaching(0, offset2);
        const int64_t past = std::max(inside, first_reaching(g.in[2], offset2));
        const int64_t overhang = std::max(past, first_reaching(g.in[2] + g.padding[2], offset2));
        const std::array<std::array<int64_t, 3>, 4> segments{
            {{0, inside, 1}, {inside, past, 0}, {past, overhang, 1}, {overhang, g.out[2], 2}}};
        for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
          const int64_t i0 = o0 * g.stride[0] + k0 * g.dilation[0] - g.padding[0];
          for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
            const int64_t i1 = o1 * g.stride[1] + k1 * g.dilation[1] - g.padding[1];
            const int outer = std::max(region(i0, 0), region(i1, 1));
            const int64_t row = o0 * ws.out[0] + o1 * ws.out[1] + at_k;
            for (const auto& [begin, end, where] : segments)
              if (end > begin)
                run(row + begin * ws.out[2], ws.out[2], end - begin, i0, i1,
                    begin * g.stride[2] + offset2, std::max(outer, static_cast<int>(where)));
          }
        }
      }
}

// ---- unfold_windows: inputs [x]; attrs [kernel, stride, padding, dilation, overhang, fill,
// overhang_fill, channels_last] ----
int unfold_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "unfold_windows: expected a floating input, got ",
             x.dtype());
  const Dims spatial = spatial_of(x, "unfold_windows");
  const Geometry g = geometry("unfold_windows", c.attrs, 0, spatial);
  const bool channels_last = c.attrs.b(7);
  Shape sizes{x.size(0)};
  if (!channels_last) sizes.push_back(x.size(1));
  for (size_t d = 3 - spatial.size(); d < 3; ++d) sizes.push_back(g.out[d]);
  if (channels_last) sizes.push_back(x.size(1));
  for (size_t d = 3 - spatial.size(); d < 3; ++d) sizes.push_back(g.kernel[d]);
  checked_numel(sizes, "unfold_windows");
  return one_output(out, x.dtype(), std::move(sizes));
}
void unfold_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const Dims spatial = spatial_of(x, "unfold_windows");
  const Geometry g = geometry("unfold_windows", c.attrs, 0, spatial);
  const int64_t channels = x.size(1), planes = x.size(0) * channels;
  const std::array<int64_t, 3> st = spatial_strides(x);
  const int64_t per_plane = g.out_numel() * g.kernel_numel();
  // Where plane p = (n, c) starts in the output, and its windows' layout there.
  const bool channels_last = c.attrs.b(7);
  const WindowStrides layout =
      channels_last ? channels_last_window_strides(g, channels) : contiguous_window_strides(g);
  auto plane_start = [&](int64_t p) {
    return channels_last ? (p / channels) * per_plane * channels + (p % channels) * g.kernel_numel()
                         : p * per_plane;
  };
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "unfold_windows", [&]<typename T>() {
    const T* xs = x.data_ptr<T>();
    T* os = out.data_ptr<T>();
    const T fill = static_cast<T>(c.attrs.f(5)), overhang_fill = static_cast<T>(c.attrs.f(6));
    kernels::parallel_range(
        planes, std::max<int64_t>(1, kParallelGrain / per_plane), [&](int64_t b, int64_t e) {
          for (int64_t p = b; p < e; ++p) {
            const T* xp = xs + (p / channels) * x.stride(0) + (p % channels) * x.stride(1);
            T* op = os + plane_start(p);
            for_each_window_run(g, layout,
                                [&](int64_t at, int64_t step, int64_t count, int64_t i0, int64_t i1,
                                    int64_t i2, int where) {
                                  T* dst = op + at;
                                  if (where != 0) {
                                    const T value = where == 1 ? fill : overhang_fill;
                                    for (int64_t j = 0; j < count; ++j) dst[j * step] = value;
                                    return;
                                  }
                                  const T* src = xp + i0 * st[0] + i1 * st[1] + i2 * st[2];
                                  const int64_t read_step = g.stride[2] * st[2];
                                  for (int64_t j = 0; j < count; ++j)
                                    dst[j * step] = src[j * read_step];
                                });
          }
        });
  });
}

// ---- fold_windows: inputs [windows]; attrs [input_spatial, kernel, stride, padding, dilation,
// overhang] ----
int fold_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& w = c.in(0);
  KILN_CHECK(is_floating(w.dtype()), DTypeError, "fold_windows: expected floating windows, got ",
             w.dtype());
  const Dims spatial = c.attrs.ints(0);
  const Geometry g = geometry("fold_windows", c.attrs, 1, spatial);
  const auto dims = static_cast<int64_t>(spatial.size());
  Shape want{w.dim() > 0 ? w.size(0) : 0, w.dim() > 1 ? w.size(1) : 0};
  for (int64_t d = 3 - dims; d < 3; ++d) want.push_back(g.out[static_cast<size_t>(d)]);
  for (int64_t d = 3 - dims; d < 3; ++d) want.push_back(g.kernel[static_cast<size_t>(d)]);
  KILN_CHECK(w.dim() == 2 + 2 * dims && w.sizes() == want, ShapeError,
             "fold_windows: expected windows of shape ", IntList(want), ", got ", w.shape_str());
  Shape sizes{w.size(0), w.size(1)};
  for (int64_t s : spatial) sizes.push_back(s);
  return one_output(out, w.dtype(), std::move(sizes));
}
void fold_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& w = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const Dims spatial = c.attrs.ints(0);
  const Geometry g = geometry("fold_windows", c.attrs, 1, spatial);
  // The windows are read where they are (a convolution's gradient arrives permuted).
  const WindowStrides layout = window_strides_of(w, spatial.size());
  const int64_t channels = out.size(1), planes = out.size(0) * channels;
  const int64_t per_plane = g.out_numel() * g.kernel_numel();
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
  KILN_DTYPE_SWITCH_FLOATING(w.dtype(), "fold_windows", [&]<typename T>() {
    const T* ws = w.data_ptr<T>();
    T* os = out.data_ptr<T>();  // contiguous: a graph value or a fresh output
    kernels::parallel_range(
        planes, std::max<int64_t>(1, kParallelGrain / per_plane), [&](int64_t b, int64_t e) {
          for (int64_t p = b; p < e; ++p) {
            T* op = os + p * in_plane;
            std::fill(op, op + in_plane, T(0));
            const T* wp = ws + (p / channels) * w.stride(0) + (p % channels) * w.stride(1);
            const int64_t write_step = g.stride[2];
            for_each_window_run(g, layout,
                                [&](int64_t at, int64_t step, int64_t count, int64_t i0, int64_t i1,
                                    int64_t i2, int where) {
                                  if (where != 0) return;
                                  T* dst = op + (i0 * g.in[1] + i1) * g.in[2] + i2;
                                  const T* src = wp + at;
                                  for (int64_t j = 0; j < count; ++j)
                                    dst[j * write_step] += src[j * step];
                                });
          }
        });
  });
}

// ---- window_argmax: inputs [x]; attrs [kernel, stride, padding, dilation, overhang] ----
int argmax_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "window_argmax: expected a floating input, got ",
             x.dtype());
  const Dims spatial = spatial_of(x, "window_argmax");
  const Geometry g = geometry("window_argmax", c.attrs, 0, spatial);
  Shape sizes{x.size(0), x.size(1)};
  for (size_t d = 3 - spatial.size(); d < 3; ++d) sizes.push_back(g.out[d]);
  return one_output(out, DType::Int64, std::move(sizes));
}
// Max pooling's rule, windows read in order: v takes over a window's best so far when the
// window has none yet (at < 0), when greater, or when a NaN over a number — so the first
// maximum wins and NaN beats any number (as torch). Bitwise operators: the caller selects
// rather than branches (which element wins is data, and a branch on it mispredicts).
template <typename T>
bool takes_over(T v, T best, int64_t at) {
  return (at < 0) | (v > best) | ((v != v) & (best == best));
}

// One kernel position's run of `count` windows: window j reads src[j * read_step], flat
// input index first + j * step. Everything the loop reads is a local, so its stores to at_max
// cannot make the compiler reload it.
template <typename T>
void argmax_run(const T* src, int64_t read_step, int64_t count, int64_t first, int64_t step,
                T* best, int64_t* at_max) {
  for (int64_t j = 0; j < count; ++j) {
    const T v = src[j * read_step], b = best[j];
    const int64_t i = at_max[j];
    const bool take = takes_over(v, b, i);
    best[j] = take ? v : b;
    at_max[j] = take ? first + j * step : i;
  }
}

void argmax_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const Dims spatial = spatial_of(x, "window_argmax");
  const Geometry g = geometry("window_argmax", c.attrs, 0, spatial);
  const int64_t channels = x.size(1), planes = x.size(0) * channels;
  const std::array<int64_t, 3> st = spatial_strides(x);
  const int64_t per_plane = g.out_numel();
  // Runs address output positions (every kernel position onto the same ones).
  const WindowStrides layout{{g.out[1] * g.out[2], g.out[2], 1}, {0, 0, 0}};
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "window_argmax", [&]<typename T>() {
    const T* xs = x.data_ptr<T>();
    int64_t* os = out.data_ptr<int64_t>();
    kernels::parallel_range(
        planes, std::max<int64_t>(1, kParallelGrain / (per_plane * g.kernel_numel())),
        [&](int64_t b, int64_t e) {
          std::vector<T> best(static_cast<size_t>(per_plane));
          for (int64_t p = b; p < e; ++p) {
            const T* xp = xs + (p / channels) * x.stride(0) + (p % channels) * x.stride(1);
            int64_t* at_max = os + p * per_plane;
            std::fill(at_max, at_max + per_plane, int64_t{-1});
            // Kernel positions in order, so each window's first maximum wins; NaN beats any
            // number (as torch's max pooling); padding and overhang are never chosen.
            for_each_window_run(g, layout,
                                [&](int64_t at, int64_t, int64_t count, int64_t i0, int64_t i1,
                                    int64_t i2, int where) {
                                  if (where != 0) return;
                                  const T* src = xp + i0 * st[0] + i1 * st[1] + i2 * st[2];
                                  argmax_run(src, g.stride[2] * st[2], count,
                                             (i0 * g.in[1] + i1) * g.in[2] + i2, g.stride[2],
                                             best.data() + at, at_max + at);
                                });
          }
        });
  });
}

// ---- adaptive_window_argmax: inputs [x]; attrs [output_size] ----
// The input's and the output's spatial sizes, padded to 3 dims as Geometry is.
std::array<std::array<int64_t, 3>, 2> adaptive_sizes(const char* op, const Tensor& x,
                                                     const Attrs& a) {
  const Dims spatial = spatial_of(x, op);
  const Dims& out = a.ints(0);
  KILN_CHECK(out.size() == spatial.size(), ValueError, op,
             ": output_size needs one value per spatial dim (", spatial.size(), "), got ",
             IntList(out));
  std::array<std::array<int64_t, 3>, 2> s{{{1, 1, 1}, {1, 1, 1}}};
  for (size_t d = 0; d < spatial.size(); ++d) {
    KILN_CHECK(out[d] > 0 && spatial[d] > 0, ShapeError, op, ": output_size ", IntList(out),
               " must be positive and the input ", x.shape_str(),
               " non-empty along its spatial dims");
    s[0][3 - spatial.size() + d] = spatial[d];
    s[1][3 - spatial.size() + d] = out[d];
  }
  return s;
}
int adaptive_argmax_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const char* op = "adaptive_window_argmax";
  const Tensor& x = c.in(0);
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating input, got ",
             x.dtype());
  (void)adaptive_sizes(op, x, c.attrs);
  Shape sizes{x.size(0), x.size(1)};
  for (int64_t s : c.attrs.ints(0)) sizes.push_back(s);
  return one_output(out, DType::Int64, std::move(sizes));
}
void adaptive_argmax_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const auto [in, o] = adaptive_sizes("adaptive_window_argmax", x, c.attrs);
  const int64_t channels = x.size(1), planes = x.size(0) * channels;
  const std::array<int64_t, 3> st = spatial_strides(x);
  const int64_t per_plane = o[0] * o[1] * o[2], in_plane = in[0] * in[1] * in[2];
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "adaptive_window_argmax", [&]<typename T>() {
    const T* xs = x.data_ptr<T>();
    int64_t* os = out.data_ptr<int64_t>();
    kernels::parallel_range(
        planes, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, in_plane)),
        [&](int64_t b, int64_t e) {
          for (int64_t p = b; p < e; ++p) {
            const T* xp = xs + (p / channels) * x.stride(0) + (p % channels) * x.stride(1);
            int64_t* at_max = os + p * per_plane;
            // Each cell's elements in order, by max pooling's rule (takes_over).
            for (int64_t o0 = 0; o0 < o[0]; ++o0)
              for (int64_t o1 = 0; o1 < o[1]; ++o1)
                for (int64_t o2 = 0; o2 < o[2]; ++o2) {
                  const int64_t e0 = adaptive_end(o0, in[0], o[0]),
                                e1 = adaptive_end(o1, in[1], o[1]),
                                b2 = adaptive_begin(o2, in[2], o[2]),
                                e2 = adaptive_end(o2, in[2], o[2]);
                  T best = T(0);
                  int64_t where = -1;
                  for (int64_t i0 = adaptive_begin(o0, in[0], o[0]); i0 < e0; ++i0)
                    for (int64_t i1 = adaptive_begin(o1, in[1], o[1]); i1 < e1; ++i1) {
                      const T* row = xp + i0 * st[0] + i1 * st[1];
                      const int64_t flat_row = (i0 * in[1] + i1) * in[2];
                      for (int64_t i2 = b2; i2 < e2; ++i2) {
                        const T v = row[i2 * st[2]];
                        const bool take = takes_over(v, best, where);
                        best = take ? v : best;
                        where = take ? flat_row + i2 : where;
                      }
                    }
                  at_max[(o0 * o[1] + o1) * o[2] + o2] = where;
                }
          }
        });
  });
}

const OpDef& unfold_windows_op = register_op(
    {.name = "unfold_windows",
     .schema = "unfold_windows(Tensor self, int[] kernel, int[] stride, int[] padding, "
               "int[] dilation, int[] overhang, float fill, float overhang_fill, "
               "bool channels_last) -> Tensor",
     .kind = OpKind::Extern,
     .meta = unfold_meta,
     .kernel = unfold_kernel,
     // each window element came from one input element (or a constant): added back there
     // (fold reads the gradient in any layout: a channels-last one is permuted, not copied)
     .derivative = {.fn =
                        [](const BackwardCall& c, std::span<Tensor> g) {
                          const Shape& in = c.input_meta[0].sizes;
                          const auto dims = static_cast<int64_t>(in.size()) - 2;
                          Tensor grad = c.grad();
                          if (c.attrs.b(7)) {
                            Dims channels_first = {0, 1 + dims};
                            for (int64_t d = 1; d <= dims; ++d) channels_first.push_back(d);
                            for (int64_t d = 2 + dims; d < 2 + 2 * dims; ++d)
                              channels_first.push_back(d);
                            grad = grad.permute(IntList(channels_first));
                          }
                          g[0] = fold_windows(grad, IntList(Dims(in.begin() + 2, in.end())),
                                              c.attrs.ints(0), c.attrs.ints(1), c.attrs.ints(2),
                                              c.attrs.ints(3), c.attrs.ints(4));
                        }},
     .internal = true});

const OpDef& fold_windows_op = register_op(
    {.name = "fold_windows",
     .schema = "fold_windows(Tensor self, int[] input_spatial, int[] kernel, int[] stride, "
               "int[] padding, int[] dilation, int[] overhang) -> Tensor",
     .kind = OpKind::Extern,
     .meta = fold_meta,
     .kernel = fold_kernel,
     // the adjoint of a sum into the input is reading the input back out (zeros elsewhere)
     .derivative = {.fn =
                        [](const BackwardCall& c, std::span<Tensor> g) {
                          g[0] = unfold_windows(c.grad(), c.attrs.ints(1), c.attrs.ints(2),
                                                c.attrs.ints(3), c.attrs.ints(4), c.attrs.ints(5),
                                                0.0, 0.0, false);
                        }},
     .internal = true});

const OpDef& window_argmax_op =
    register_op({.name = "window_argmax",
                 .schema = "window_argmax(Tensor self, int[] kernel, int[] stride, int[] padding, "
                           "int[] dilation, int[] overhang) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = argmax_meta,
                 .kernel = argmax_kernel,
                 .internal = true});

const OpDef& adaptive_window_argmax_op =
    register_op({.name = "adaptive_window_argmax",
                 .schema = "adaptive_window_argmax(Tensor self, int[] output_size) -> Tensor",
                 .kind = OpKind::Extern,
                 .meta = adaptive_argmax_meta,
                 .kernel = adaptive_argmax_kernel,
                 .internal = true});

}  // namespace

Tensor adaptive_window_argmax(const Tensor& x, IntList output_size) {
  return call(adaptive_window_argmax_op, {x}, {ints_attr(output_size)});
}
Tensor window_argmax(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                     IntList dilation, IntList overhang) {
  return call(window_argmax_op, {x},
              {ints_attr(kernel), ints_attr(stride), ints_attr(padding), ints_attr(dilation),
               ints_attr(overhang)});
}
Tensor unfold_windows(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                      IntList dilation, IntList overhang, double fill, double overhang_fill,
                      bool channels_last) {
  return call(unfold_windows_op, {x},
              {ints_attr(kernel), ints_attr(stride), ints_attr(padding), ints_attr(dilation),
               ints_attr(overhang), fill, overhang_fill, channels_last});
}
Tensor fold_windows(const Tensor& windows, IntList input_spatial, IntList kernel, IntList stride,
                    IntList padding, IntList dilation, IntList overhang) {
  return call(fold_windows_op, {windows},
              {ints_attr(input_spatial), ints_attr(kernel), ints_attr(stride), ints_attr(padding),
               ints_attr(dilation), ints_attr(overhang)});
}

}  // namespace kiln::ops
