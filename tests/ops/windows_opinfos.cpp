// OpInfos for the window ops under convolution and pooling (src/ops/windows.h): unfold_windows
// (im2col, with padding and ceil_mode's overhang filled by constants) and fold_windows (its
// adjoint, col2im), over 1, 2 and 3 spatial dims, against float64 references written as the
// textbook loops; gradients checked in float64.
#include "ops/opinfo.h"
#include "ops/windows.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

struct WindowGeometry {
  std::string name;
  Ints x;  // [N, C, spatial...]
  Ints kernel, stride, padding, dilation, overhang;
  double fill = 0, overhang_fill = 0;
  bool large = false;  // runs on several threads
  size_t dims() const { return kernel.size(); }
  Ints spatial() const { return Ints(x.begin() + 2, x.end()); }
  int64_t out(size_t d) const {
    const int64_t span = dilation[d] * (kernel[d] - 1) + 1;
    return (x[2 + d] + 2 * padding[d] + overhang[d] - span) / stride[d] + 1;
  }
  Ints windows_shape() const {
    Ints s{x[0], x[1]};
    for (size_t d = 0; d < dims(); ++d) s.push_back(out(d));
    for (size_t d = 0; d < dims(); ++d) s.push_back(kernel[d]);
    return s;
  }
  // For window element idx [n, c, o..., k...]: the input index [n, c, i...] it reads, and 0
  // inside the input, 1 in the padding, 2 in the overhang.
  std::pair<Ints, int> source(const Ints& idx) const {
    Ints in{idx[0], idx[1]};
    int where = 0;
    for (size_t d = 0; d < dims(); ++d) {
      const int64_t i = idx[2 + d] * stride[d] + idx[2 + dims() + d] * dilation[d] - padding[d];
      in.push_back(i);
      if (i >= x[2 + d] + padding[d])
        where = 2;
      else if ((i < 0 || i >= x[2 + d]) && where == 0)
        where = 1;
    }
    return {in, where};
  }
};

const std::vector<WindowGeometry>& geometries() {
  static const std::vector<WindowGeometry> g = {
      {"1d_stride2_pad1", {2, 3, 7}, {3}, {2}, {1}, {1}, {0}, 0.5, -1},
      {"2d_dilated_overhang", {2, 2, 5, 6}, {2, 3}, {1, 2}, {1, 0}, {2, 1}, {0, 1}, -2, 3},
      {"3d_mixed", {1, 2, 3, 4, 4}, {2, 2, 3}, {1, 2, 1}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, 0, 0},
      {"2d_large_threaded", {4, 8, 20, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, 0, 0, true},
  };
  return g;
}

Tensor mk(Ints sizes, DType dt, uint32_t seed) {
  return make_tensor_for_test(std::move(sizes), dt, -2, 2, Layout::Contiguous, seed);
}

std::vector<ErrorCase> unfold_errors() {
  return {expect_error<DTypeError>(
              "an integer input", "expected a floating input",
              [] {
                ops::unfold_windows(zeros({1, 1, 4}, DType::Int64), {2}, {1}, {0}, {1}, {0}, 0, 0);
              }),
          expect_error<ShapeError>(
              "a kernel larger than the padded input", "is smaller than the kernel's span", [] {
                ops::unfold_windows(zeros({1, 1, 4}), {3}, {1}, {0}, {2}, {0}, 0, 0);
              })};
}
std::vector<ErrorCase> fold_errors() {
  return {expect_error<ShapeError>(
              "windows of the wrong shape", "expected windows of shape",
              [] {
                ops::fold_windows(zeros({1, 1, 3, 3}), {4}, {2}, {1}, {0}, {1}, {0});
              }),
          expect_error<ValueError>(
              "a geometry for another number of dims", "one value per spatial dim", [] {
                ops::fold_windows(zeros({1, 1, 3, 2}), {4}, {2, 2}, {1}, {0}, {1}, {0});
              })};
}

// unfold_windows's reference: each window element read from where the geometry says.
std::vector<Ref> unfold_ref(const WindowGeometry& g, const std::vector<Ref>& in) {
  Ref out = Ref::zeros(g.windows_shape(), in[0].dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto [src, where] = g.source(out.unravel(i));
    out.v[static_cast<size_t>(i)] = where == 0   ? in[0].at(src)
                                    : where == 1 ? g.fill
                                                 : g.overhang_fill;
  }
  return {out};
}

// Both ops are linear: first and second derivatives checked, but on the large geometry (there
// for the threads) finite differences over 12800 inputs would take a minute.
OpInfo with_gradient_checks(OpInfo info, const WindowGeometry& g) {
  info.differentiable = true;
  info.second_order = !g.large;
  if (g.large) info.no_gradcheck = "the same loops as the smaller geometries, on more threads";
  return info;
}

// Each geometry's OpInfo pair.
struct RegisterWindowOpInfos {
  RegisterWindowOpInfos() {
    for (size_t k = 0; k < geometries().size(); ++k) {
      const WindowGeometry& g = geometries()[k];
      opinfos().push_back(with_gradient_checks(
          OpInfo{
              .name = "unfold_windows_" + g.name,
              .covers = {"unfold_windows"},
              .dtypes = kFloatDTypes,
              .samples = [k](DType dt) -> std::vector<Sample> {
                const WindowGeometry& g = geometries()[k];
                return {{g.name, {mk(g.x, dt, 1)}},
                        {g.name + " transposed input",
                         {make_tensor_for_test(g.x, dt, -2, 2, Layout::Transposed, 2)}}};
              },
              .fn =
                  [k](const std::vector<Tensor>& in) {
                    const WindowGeometry& g = geometries()[k];
                    return std::vector<Tensor>{
                        ops::unfold_windows(in[0], g.kernel, g.stride, g.padding, g.dilation,
                                            g.overhang, g.fill, g.overhang_fill)};
                  },
              .ref = [k](const std::vector<Ref>& in) { return unfold_ref(geometries()[k], in); },
              .errors = unfold_errors(),
          },
          g));
      // The channels-last layout [N, out..., C, kernel...], compared (and differentiated) through
      // a permute back to [N, C, out..., kernel...].
      opinfos().push_back(with_gradient_checks(
          OpInfo{
              .name = "unfold_windows_channels_last_" + g.name,
              .covers = {"unfold_windows"},
              .dtypes = kFloatDTypes,
              .samples = [k](DType dt) -> std::vector<Sample> {
                return {{geometries()[k].name, {mk(geometries()[k].x, dt, 1)}}};
              },
              .fn =
                  [k](const std::vector<Tensor>& in) {
                    const WindowGeometry& g = geometries()[k];
                    const auto dims = static_cast<int64_t>(g.dims());
                    Ints channels_first = {0, 1 + dims};
                    for (int64_t d = 1; d <= dims; ++d) channels_first.push_back(d);
                    for (int64_t d = 2 + dims; d < 2 + 2 * dims; ++d) channels_first.push_back(d);
                    const Tensor last =
                        ops::unfold_windows(in[0], g.kernel, g.stride, g.padding, g.dilation,
                                            g.overhang, g.fill, g.overhang_fill, true);
                    EXPECT_EQ(last.size(1 + dims), g.x[1]);
                    return std::vector<Tensor>{last.permute(channels_first)};
                  },
              .ref = [k](const std::vector<Ref>& in) { return unfold_ref(geometries()[k], in); },
              .errors = unfold_errors(),
          },
          g));
      opinfos().push_back(with_gradient_checks(
          OpInfo{
              .name = "fold_windows_" + g.name,
              .covers = {"fold_windows"},
              .dtypes = kFloatDTypes,
              .samples = [k](DType dt) -> std::vector<Sample> {
                const WindowGeometry& g = geometries()[k];
                return {{g.name, {mk(g.windows_shape(), dt, 3)}},
                        {g.name + " strided windows",
                         {make_tensor_for_test(g.windows_shape(), dt, -2, 2, Layout::Strided, 4)}}};
              },
              .fn =
                  [k](const std::vector<Tensor>& in) {
                    const WindowGeometry& g = geometries()[k];
                    return std::vector<Tensor>{ops::fold_windows(
                        in[0], g.spatial(), g.kernel, g.stride, g.padding, g.dilation, g.overhang)};
                  },
              .ref =
                  [k](const std::vector<Ref>& in) {
                    const WindowGeometry& g = geometries()[k];
                    Ref out = Ref::zeros(g.x, in[0].dtype);
                    for (int64_t i = 0; i < in[0].numel(); ++i) {
                      const auto [src, where] = g.source(in[0].unravel(i));
                      if (where == 0) out.v[static_cast<size_t>(out.ravel(src))] += in[0].v[i];
                    }
                    return std::vector<Ref>{out};
                  },
              .errors = fold_errors(),
          },
          g));
      // window_argmax: integer indices, no gradient. The samples hold ties (values rounded to
      // halves), so "the first maximum in kernel order" is what is compared.
      opinfos().push_back(OpInfo{
          .name = "window_argmax_" + g.name,
          .covers = {"window_argmax"},
          .dtypes = kFloatDTypes,
          .samples = [k](DType dt) -> std::vector<Sample> {
            const WindowGeometry& g = geometries()[k];
            return {{g.name + " with ties", {round(mk(g.x, dt, 5) * 2) / 2}},
                    {g.name + " transposed input",
                     {make_tensor_for_test(g.x, dt, -2, 2, Layout::Transposed, 6)}}};
          },
          .fn =
              [k](const std::vector<Tensor>& in) {
                const WindowGeometry& g = geometries()[k];
                return std::vector<Tensor>{ops::window_argmax(in[0], g.kernel, g.stride, g.padding,
                                                              g.dilation, g.overhang)};
              },
          .ref =
              [k](const std::vector<Ref>& in) {
                const WindowGeometry& g = geometries()[k];
                const Ints shape = g.windows_shape();
                Ref out =
                    Ref::zeros(Ints(shape.begin(), shape.end() - static_cast<int64_t>(g.dims())),
                               DType::Int64);
                std::vector<double> best(static_cast<size_t>(out.numel()));
                std::vector<bool> found(static_cast<size_t>(out.numel()), false);
                const Ref windows = Ref::zeros(shape, DType::Float64);  // (for its indexing)
                const int64_t kernel_numel = windows.numel() / out.numel();
                // Window elements in order: output position major, kernel position minor.
                for (int64_t i = 0; i < windows.numel(); ++i) {
                  const auto [src, where] = g.source(windows.unravel(i));
                  const auto o = static_cast<size_t>(i / kernel_numel);
                  if (where != 0) continue;
                  const double v = in[0].at(src);
                  if (!found[o] || v > best[o]) {
                    found[o] = true;
                    best[o] = v;
                    int64_t flat = 0;
                    for (size_t d = 0; d < g.dims(); ++d) flat = flat * g.x[2 + d] + src[2 + d];
                    out.v[o] = static_cast<double>(flat);
                  }
                }
                return std::vector<Ref>{out};
              },
          .errors = {expect_error<DTypeError>(
              "an integer input", "expected a floating input",
              [] {
                ops::window_argmax(zeros({1, 1, 4}, DType::Int64), {2}, {1}, {0}, {1}, {0});
              })},
      });
    }
  }
} register_window_opinfos;

}  // namespace
}  // namespace kiln::testing
