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

Dims spatial_of(const Tensor& x, const char* op) {
  KILN_CHECK(x.dim() >= 3 && x.dim() <= 5, ShapeError, op,
             ": expected [N, C, spatial...] with 1 to 3 spatial dims, got ", x.shape_str());
  return Dims(x.sizes().begin() + 2, x.sizes().end());
}

// Calls f(o, k, i0, i1, i2, where) for every output position o and kernel position k of one
// plane (both flattened, row-major), with the input index it reads and where it lies: 0 inside,
// 1 in the padding, 2 in the overhang.
template <class F>
void for_each_window_element(const Geometry& g, F&& f) {
  int64_t o = 0;
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++o) {
        int64_t k = 0;
        for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
          const int64_t i0 = o0 * g.stride[0] + k0 * g.dilation[0] - g.padding[0];
          for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
            const int64_t i1 = o1 * g.stride[1] + k1 * g.dilation[1] - g.padding[1];
            for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2, ++k) {
              const int64_t i2 = o2 * g.stride[2] + k2 * g.dilation[2] - g.padding[2];
              const std::array<int64_t, 3> i{i0, i1, i2};
              int where = 0;
              for (int d = 0; d < 3; ++d) {
                if (i[d] >= g.in[d] + g.padding[d])
                  where = 2;
                else if ((i[d] < 0 || i[d] >= g.in[d]) && where == 0)
                  where = 1;
              }
              f(o, k, i0, i1, i2, where);
            }
          }
        }
      }
}

// ---- unfold_windows: inputs [x]; attrs [kernel, stride, padding, dilation, overhang, fill,
// overhang_fill] ----
int unfold_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  KILN_CHECK(is_floating(x.dtype()), DTypeError, "unfold_windows: expected a floating input, got ",
             x.dtype());
  const Dims spatial = spatial_of(x, "unfold_windows");
  const Geometry g = geometry("unfold_windows", c.attrs, 0, spatial);
  Shape sizes{x.size(0), x.size(1)};
  for (size_t d = 3 - spatial.size(); d < 3; ++d) sizes.push_back(g.out[d]);
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
  std::array<int64_t, 3> st{0, 0, 0};
  for (size_t d = 0; d < spatial.size(); ++d) st[3 - spatial.size() + d] = x.stride(2 + d);
  const int64_t per_plane = g.out_numel() * g.kernel_numel(), kn = g.kernel_numel();
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), "unfold_windows", [&]<typename T>() {
    const T* xs = x.data_ptr<T>();
    T* os = out.data_ptr<T>();
    const T fill = static_cast<T>(c.attrs.f(5)), overhang_fill = static_cast<T>(c.attrs.f(6));
    kernels::parallel_range(
        planes, std::max<int64_t>(1, kParallelGrain / per_plane), [&](int64_t b, int64_t e) {
          for (int64_t p = b; p < e; ++p) {
            const T* xp = xs + (p / channels) * x.stride(0) + (p % channels) * x.stride(1);
            T* op = os + p * per_plane;
            for_each_window_element(
                g, [&](int64_t o, int64_t k, int64_t i0, int64_t i1, int64_t i2, int where) {
                  op[o * kn + k] = where == 0   ? xp[i0 * st[0] + i1 * st[1] + i2 * st[2]]
                                   : where == 1 ? fill
                                                : overhang_fill;
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
  const Tensor win = w.contiguous();
  const int64_t planes = out.size(0) * out.size(1);
  const int64_t per_plane = g.out_numel() * g.kernel_numel(), kn = g.kernel_numel();
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2];
  KILN_DTYPE_SWITCH_FLOATING(w.dtype(), "fold_windows", [&]<typename T>() {
    const T* ws = win.data_ptr<T>();
    T* os = out.data_ptr<T>();  // contiguous: a graph value or a fresh output
    kernels::parallel_range(
        planes, std::max<int64_t>(1, kParallelGrain / per_plane), [&](int64_t b, int64_t e) {
          for (int64_t p = b; p < e; ++p) {
            T* op = os + p * in_plane;
            std::fill(op, op + in_plane, T(0));
            const T* wp = ws + p * per_plane;
            for_each_window_element(
                g, [&](int64_t o, int64_t k, int64_t i0, int64_t i1, int64_t i2, int where) {
                  if (where == 0) op[(i0 * g.in[1] + i1) * g.in[2] + i2] += wp[o * kn + k];
                });
          }
        });
  });
}

const OpDef& unfold_windows_op = register_op(
    {.name = "unfold_windows",
     .schema = "unfold_windows(Tensor self, int[] kernel, int[] stride, int[] padding, "
               "int[] dilation, int[] overhang, float fill, float overhang_fill) -> Tensor",
     .kind = OpKind::Extern,
     .meta = unfold_meta,
     .kernel = unfold_kernel,
     // each window element came from one input element (or a constant): added back there
     .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
       const Shape& in = c.input_meta[0].sizes;
       g[0] = fold_windows(c.grad(), IntList(Dims(in.begin() + 2, in.end())), c.attrs.ints(0),
                           c.attrs.ints(1), c.attrs.ints(2), c.attrs.ints(3), c.attrs.ints(4));
     }}});

const OpDef& fold_windows_op = register_op(
    {.name = "fold_windows",
     .schema = "fold_windows(Tensor self, int[] input_spatial, int[] kernel, int[] stride, "
               "int[] padding, int[] dilation, int[] overhang) -> Tensor",
     .kind = OpKind::Extern,
     .meta = fold_meta,
     .kernel = fold_kernel,
     // the adjoint of a sum into the input is reading the input back out (zeros elsewhere)
     .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
       g[0] = unfold_windows(c.grad(), c.attrs.ints(1), c.attrs.ints(2), c.attrs.ints(3),
                             c.attrs.ints(4), c.attrs.ints(5), 0.0, 0.0);
     }}});

}  // namespace

Tensor unfold_windows(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                      IntList dilation, IntList overhang, double fill, double overhang_fill) {
  return call(unfold_windows_op, {x},
              {ints_attr(kernel), ints_attr(stride), ints_attr(padding), ints_attr(dilation),
               ints_attr(overhang), fill, overhang_fill});
}
Tensor fold_windows(const Tensor& windows, IntList input_spatial, IntList kernel, IntList stride,
                    IntList padding, IntList dilation, IntList overhang) {
  return call(fold_windows_op, {windows},
              {ints_attr(input_spatial), ints_attr(kernel), ints_attr(stride), ints_attr(padding),
               ints_attr(dilation), ints_attr(overhang)});
}

}  // namespace kiln::ops
