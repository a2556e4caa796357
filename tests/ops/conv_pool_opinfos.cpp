// OpInfos for convolution (conv1d/2d/3d, numeric and Same padding), max and avg pooling (with
// ceil_mode and count_include_pad) and adaptive pooling over 1, 2 and 3 spatial dims: one per
// geometry, each checked against a float64 reference written as the textbook loops, forward and
// backward, eagerly and through every backend.
#include <cmath>
#include <limits>

#include "ops/opinfo.h"
#include "ops/windows.h"

namespace kiln::testing {
namespace {

using Dims = std::vector<int64_t>;

struct Geometry {
  std::string name;
  Dims x;       // [N, C, *] or unbatched [C, *]
  Dims kernel;  // one per spatial dim: their count is the geometry's
  Dims stride, padding, dilation;
  int64_t out_channels = 0, groups = 1;  // convolution
  bool count_include_pad = true;         // avg pooling
  bool ceil_mode = false;                // pooling
  bool same = false;                     // convolution with ConvPadding::Same
  std::optional<int64_t> divisor;        // avg pooling's divisor_override
  size_t dims() const { return kernel.size(); }
};

Tensor mk(Dims sizes, DType dt, uint32_t seed, double lo = -2, double hi = 2) {
  return make_tensor_for_test(std::move(sizes), dt, lo, hi, Layout::Contiguous, seed);
}

// x's sizes as [N, C, *] (an unbatched input has N = 1).
Dims batched(Dims s, size_t dims) {
  if (s.size() == dims + 1) s.insert(s.begin(), 1);
  return s;
}
int64_t at(const Dims& v, size_t d) { return v.size() == 1 ? v[0] : v[d]; }

// The per-dim geometry a reference uses: Same padding resolved to (low, high) pads.
struct Resolved {
  Dims in, kernel, stride, dilation, low, high, out;
};
Resolved resolve(const Dims& xs, const Geometry& g) {
  const Dims s = batched(xs, g.dims());
  Resolved r;
  for (size_t d = 0; d < g.dims(); ++d) {
    const int64_t in = s[2 + d], k = g.kernel[d];
    const int64_t stride = g.stride.empty() ? k : at(g.stride, d);
    const int64_t dil = g.dilation.empty() ? 1 : at(g.dilation, d);
    int64_t low = g.padding.empty() ? 0 : at(g.padding, d), high = low;
    if (g.same) {
      const int64_t total = dil * (k - 1);
      low = total / 2;
      high = total - low;
    }
    int64_t out =
        (in + low + high - dil * (k - 1) - 1 + (g.ceil_mode ? stride - 1 : 0)) / stride + 1;
    if (g.ceil_mode && (out - 1) * stride >= in + low) --out;
    r.in.push_back(in);
    r.kernel.push_back(k);
    r.stride.push_back(stride);
    r.dilation.push_back(dil);
    r.low.push_back(low);
    r.high.push_back(high);
    r.out.push_back(out);
  }
  return r;
}

int64_t product(const Dims& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}
// The multi-index of flat index i over `sizes`.
Dims unflatten(int64_t i, const Dims& sizes) {
  Dims idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = i % sizes[d];
    i /= sizes[d];
  }
  return idx;
}

// For each output position (flat, row-major over r.out), the window's input positions: the
// flat spatial offset, or -1 inside the padding, or -2 past it (ceil_mode's overhang).
std::vector<std::vector<int64_t>> window_positions(const Resolved& r) {
  std::vector<std::vector<int64_t>> all;
  for (int64_t o = 0; o < product(r.out); ++o) {
    const Dims oi = unflatten(o, r.out);
    std::vector<int64_t> window;
    for (int64_t k = 0; k < product(r.kernel); ++k) {
      const Dims ki = unflatten(k, r.kernel);
      int64_t flat = 0;
      int kind = 0;  // 0 inside, 1 padding, 2 overhang
      for (size_t d = 0; d < r.in.size(); ++d) {
        const int64_t pos = oi[d] * r.stride[d] - r.low[d] + ki[d] * r.dilation[d];
        if (pos >= r.in[d] + r.high[d])
          kind = 2;
        else if (kind == 0 && (pos < 0 || pos >= r.in[d]))
          kind = 1;
        flat = flat * r.in[d] + pos;
      }
      window.push_back(kind == 0 ? flat : -kind);
    }
    all.push_back(window);
  }
  return all;
}

Dims out_sizes(const Dims& xs, const Resolved& r, int64_t channels_or_zero) {
  Dims out = xs;
  const size_t first = xs.size() - r.out.size();
  for (size_t d = 0; d < r.out.size(); ++d) out[first + d] = r.out[d];
  if (channels_or_zero) out[first - 1] = channels_or_zero;
  return out;
}

Ref ref_pool(const Ref& x, const Geometry& g, bool max) {
  const Resolved r = resolve(x.sizes, g);
  const Dims s = batched(x.sizes, g.dims());
  const int64_t plane = product(r.in);
  Ref out = Ref::zeros(out_sizes(x.sizes, r, 0), x.dtype);
  const auto windows = window_positions(r);
  size_t k = 0;
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
    for (const auto& window : windows) {
      double acc = max ? -std::numeric_limits<double>::infinity() : 0;
      int64_t count = 0;
      for (int64_t p : window) {
        if (p < 0) {
          count += p == -1 && g.count_include_pad;
          continue;
        }
        acc = max ? std::max(acc, x.v[static_cast<size_t>(nc * plane + p)])
                  : acc + x.v[static_cast<size_t>(nc * plane + p)];
        ++count;
      }
      out.v[k++] = max ? acc : acc / static_cast<double>(g.divisor.value_or(count));
    }
  return out;
}

// Where each window's first maximum is: its flat position in the input's plane (max pooling's
// indices, as torch numbers them).
Ref ref_pool_indices(const Ref& x, const Geometry& g) {
  const Resolved r = resolve(x.sizes, g);
  const Dims s = batched(x.sizes, g.dims());
  const int64_t plane = product(r.in);
  Ref out = Ref::zeros(out_sizes(x.sizes, r, 0), DType::Int64);
  const auto windows = window_positions(r);
  size_t k = 0;
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
    for (const auto& window : windows) {
      double best = -std::numeric_limits<double>::infinity();
      int64_t at = -1;
      for (int64_t p : window)
        if (p >= 0 && (at < 0 || x.v[static_cast<size_t>(nc * plane + p)] > best)) {
          best = x.v[static_cast<size_t>(nc * plane + p)];
          at = p;
        }
      out.v[k++] = static_cast<double>(at);
    }
  return out;
}

// out[n, o, pos] = bias[o] + sum over the group's channels c and the window of x * w.
Ref ref_conv(const Ref& x, const Ref& w, const Ref& bias, const Geometry& g) {
  const Resolved r = resolve(x.sizes, g);
  const Dims s = batched(x.sizes, g.dims());
  const int64_t plane = product(r.in), kk = product(r.kernel);
  const int64_t in_per_group = s[1] / g.groups, out_per_group = g.out_channels / g.groups;
  Ref out = Ref::zeros(out_sizes(x.sizes, r, g.out_channels), x.dtype);
  const auto windows = window_positions(r);
  size_t k = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (const auto& window : windows) {
        double acc = bias.v[static_cast<size_t>(o)];
        const int64_t group = o / out_per_group;
        for (int64_t ci = 0; ci < in_per_group; ++ci)
          for (int64_t p = 0; p < kk; ++p) {
            const int64_t pos = window[static_cast<size_t>(p)];
            if (pos < 0) continue;
            const int64_t c = group * in_per_group + ci;
            acc += x.v[static_cast<size_t>((n * s[1] + c) * plane + pos)] *
                   w.v[static_cast<size_t>((o * in_per_group + ci) * kk + p)];
          }
        out.v[k++] = acc;
      }
  return out;
}

// Adaptive pooling: output i along a dim of `in` covers [floor(i in / out), ceil((i+1) in / out)).
// The pooled values; for max pooling, then the values again and each cell's index (flat in its
// [N, C] plane) of its first maximum in row-major order.
std::vector<Ref> ref_adaptive(const Ref& x, const Dims& output_size, size_t dims, bool max) {
  const Dims s = batched(x.sizes, dims);
  Dims in(s.begin() + 2, s.end()), out;
  for (size_t d = 0; d < dims; ++d) out.push_back(at(output_size, d));
  Dims sizes = x.sizes;
  for (size_t d = 0; d < dims; ++d) sizes[sizes.size() - dims + d] = out[d];
  Ref result = Ref::zeros(sizes, x.dtype), where = Ref::zeros(sizes, DType::Int64);
  size_t k = 0;
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
    for (int64_t o = 0; o < product(out); ++o) {
      const Dims oi = unflatten(o, out);
      Dims lo, len;
      for (size_t d = 0; d < dims; ++d) {
        lo.push_back(oi[d] * in[d] / out[d]);
        len.push_back(((oi[d] + 1) * in[d] + out[d] - 1) / out[d] - lo.back());
      }
      double acc = max ? -std::numeric_limits<double>::infinity() : 0;
      int64_t at = -1;
      for (int64_t b = 0; b < product(len); ++b) {
        const Dims bi = unflatten(b, len);
        int64_t flat = 0;
        for (size_t d = 0; d < dims; ++d) flat = flat * in[d] + lo[d] + bi[d];
        const double v = x.v[static_cast<size_t>(nc * product(in) + flat)];
        if (max && (at < 0 || v > acc)) at = flat;
        acc = max ? std::max(acc, v) : acc + v;
      }
      where.v[k] = static_cast<double>(at);
      result.v[k++] = max ? acc : acc / static_cast<double>(product(len));
    }
  if (!max) return {result};
  return {result, result, where};
}

// A transposed convolution's geometry: x [N, C, *] (or [C, *]), weight [C, O / groups,
// kernel...].
struct Transposed {
  std::string name;
  Dims x, kernel, stride, padding, output_padding, dilation;
  int64_t out_channels, groups;
  size_t dims() const { return kernel.size(); }
};

// The textbook scatter: input element (n, c, i) adds x * w[c, o, k] at output position
// i * stride - padding + k * dilation of each output channel o of c's group.
Ref ref_conv_transpose(const Ref& x, const Ref& w, const Ref& bias, const Transposed& t) {
  const size_t dims = t.dims();
  const Dims s = batched(x.sizes, dims);
  Dims in(s.begin() + 2, s.end()), out;
  for (size_t d = 0; d < dims; ++d)
    out.push_back((in[d] - 1) * at(t.stride, d) - 2 * at(t.padding, d) +
                  at(t.dilation, d) * (t.kernel[d] - 1) + at(t.output_padding, d) + 1);
  Dims sizes = x.sizes;
  sizes[sizes.size() - dims - 1] = t.out_channels;
  for (size_t d = 0; d < dims; ++d) sizes[sizes.size() - dims + d] = out[d];
  Ref result = Ref::zeros(sizes, x.dtype);
  const int64_t in_per_group = s[1] / t.groups, out_per_group = t.out_channels / t.groups;
  const int64_t plane_in = product(in), plane_out = product(out), kk = product(t.kernel);
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t o = 0; o < t.out_channels; ++o)
      for (int64_t p = 0; p < plane_out; ++p)
        result.v[static_cast<size_t>((n * t.out_channels + o) * plane_out + p)] =
            bias.v[static_cast<size_t>(o)];
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t i = 0; i < plane_in; ++i) {
        const Dims ii = unflatten(i, in);
        const double xv = x.v[static_cast<size_t>((n * s[1] + c) * plane_in + i)];
        for (int64_t ol = 0; ol < out_per_group; ++ol)
          for (int64_t k = 0; k < kk; ++k) {
            const Dims ki = unflatten(k, t.kernel);
            int64_t flat = 0;
            bool inside = true;
            for (size_t d = 0; d < dims; ++d) {
              const int64_t pos =
                  ii[d] * at(t.stride, d) - at(t.padding, d) + ki[d] * at(t.dilation, d);
              inside = inside && pos >= 0 && pos < out[d];
              flat = flat * out[d] + pos;
            }
            if (!inside) continue;
            const int64_t o = c / in_per_group * out_per_group + ol;
            result.v[static_cast<size_t>((n * t.out_channels + o) * plane_out + flat)] +=
                xv * w.v[static_cast<size_t>((c * out_per_group + ol) * kk + k)];
          }
      }
  return result;
}

const std::vector<Transposed> kTransposed = {
    {"conv_transpose1d_stride_padding", {2, 3, 5}, {3}, {2}, {1}, {1}, {1}, 4, 1},
    {"conv_transpose1d_unbatched_groups_dilated", {4, 6}, {2}, {1}, {0}, {0}, {2}, 2, 2},
    {"conv_transpose2d_stride_output_padding",
     {1, 2, 3, 4},
     {3, 2},
     {2, 1},
     {1, 0},
     {1, 0},
     {1},
     3,
     1},
    {"conv_transpose2d_groups_crop", {2, 4, 4, 3}, {2, 2}, {1}, {1}, {0}, {1, 2}, 2, 2},
    {"conv_transpose3d_stride", {1, 2, 2, 3, 2}, {2, 1, 2}, {2}, {0, 1, 0}, {0}, {1}, 2, 1},
};

Tensor conv(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  using Conv = Tensor (*)(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntList,
                          IntList, IntList, int64_t);
  using ConvSame = Tensor (*)(const Tensor&, const Tensor&, const std::optional<Tensor>&, IntList,
                              ConvPadding, IntList, int64_t);
  const Conv numeric[] = {conv1d, conv2d, conv3d};
  const ConvSame same[] = {conv1d, conv2d, conv3d};
  const size_t d = g.dims() - 1;
  return g.same ? same[d](x, w, b, {1}, ConvPadding::Same, g.dilation, g.groups)
                : numeric[d](x, w, b, g.stride, g.padding, g.dilation, g.groups);
}

// Max pooling's values and indices, or average pooling's values.
std::vector<Tensor> pool(const Geometry& g, bool max, const Tensor& x) {
  using Max =
      std::tuple<Tensor, Tensor> (*)(const Tensor&, IntList, IntList, IntList, IntList, bool);
  using Avg =
      Tensor (*)(const Tensor&, IntList, IntList, IntList, bool, bool, std::optional<int64_t>);
  const Max with_indices[] = {max_pool1d_with_indices, max_pool2d_with_indices,
                              max_pool3d_with_indices};
  const Avg avg[] = {avg_pool1d, avg_pool2d, avg_pool3d};
  const size_t d = g.dims() - 1;
  if (!max)
    return {avg[d](x, g.kernel, g.stride, g.padding, g.ceil_mode, g.count_include_pad, g.divisor)};
  auto [values, indices] =
      with_indices[d](x, g.kernel, g.stride, g.padding, g.dilation, g.ceil_mode);
  return {values, indices};
}

// The pooled values; for max pooling, then the values and indices of the form with indices.
std::vector<Tensor> adaptive(size_t dims, bool max, const Tensor& x, const Dims& output_size) {
  using Fn = Tensor (*)(const Tensor&, IntList);
  using WithIndices = std::tuple<Tensor, Tensor> (*)(const Tensor&, IntList);
  const Fn avg[] = {adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d};
  const Fn mx[] = {adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d};
  const WithIndices with_indices[] = {adaptive_max_pool1d_with_indices,
                                      adaptive_max_pool2d_with_indices,
                                      adaptive_max_pool3d_with_indices};
  if (!max) return {avg[dims - 1](x, output_size)};
  auto [values, indices] = with_indices[dims - 1](x, output_size);
  return {mx[dims - 1](x, output_size), values, indices};
}

const std::vector<Geometry> kConvs = {
    {"conv1d_stride_padding", {2, 3, 9}, {3}, {2}, {1}, {1}, 4, 1},
    {"conv1d_unbatched_dilated_groups", {4, 8}, {2}, {1}, {0}, {3}, 2, 2},
    {"conv1d_same_even_kernel", {2, 2, 7}, {4}, {1}, {}, {1}, 3, 1, true, false, true},
    {"conv2d_3x3", {2, 3, 5, 5}, {3, 3}, {1}, {0}, {1}, 4, 1},
    {"conv2d_stride_padding_groups", {1, 4, 6, 7}, {3, 2}, {2}, {1}, {1}, 6, 2},
    {"conv2d_dilation_uneven", {2, 2, 7, 6}, {2, 3}, {1, 2}, {2, 1}, {2}, 3, 1},
    {"conv2d_unbatched_1x1", {3, 4, 4}, {1, 1}, {1}, {0}, {1}, 2, 1},
    {"conv2d_same_dilated", {1, 2, 6, 5}, {3, 2}, {1}, {}, {2, 1}, 2, 1, true, false, true},
    {"conv3d_stride_padding", {1, 2, 4, 5, 4}, {2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {1}, 3, 1},
    {"conv3d_unbatched_groups_dilated", {4, 3, 3, 4}, {1, 2, 2}, {1}, {0}, {1, 1, 2}, 2, 2},
};
const std::vector<Geometry> kPools = {
    {"pool1d_3_stride2_padding1", {2, 3, 7}, {3}, {2}, {1}, {1}},
    {"pool1d_ceil", {1, 2, 8}, {3}, {2}, {0}, {1}, 0, 1, true, true},
    {"pool2d_2x2", {2, 3, 6, 6}, {2, 2}, {}, {0}, {1}},
    {"pool2d_3x3_stride2_padding1", {1, 2, 7, 5}, {3, 3}, {2}, {1}, {1}},
    {"pool2d_unbatched_dilated", {2, 5, 6}, {2, 3}, {1}, {0, 1}, {2, 1}},
    {"pool2d_ceil_padding", {1, 2, 7, 6}, {3, 2}, {2}, {1, 0}, {1}, 0, 1, true, true},
    {"pool3d_ceil", {1, 2, 4, 5, 5}, {2, 2, 2}, {2}, {0}, {1}, 0, 1, true, true},
    {"pool3d_unbatched_padding", {2, 5, 4, 4}, {3, 2, 2}, {1, 2, 2}, {1, 0, 1}, {1}},
};
struct Adaptive {
  std::string name;
  Dims x, output_size;
};
const std::vector<Adaptive> kAdaptive = {
    {"1d_uneven", {2, 3, 10}, {4}},
    {"1d_upsampling", {2, 3}, {5}},
    {"2d_uneven", {2, 3, 7, 5}, {3, 2}},
    {"2d_unbatched_even", {3, 6, 6}, {3}},
    {"3d_uneven", {1, 2, 5, 4, 6}, {2, 3, 4}},
};

const bool registered = [] {
  for (const Geometry& g : kConvs)
    RegisterOpInfo({
        .name = g.name,
        .covers = {"slice", "cat", "matmul", "permute"},
        .dtypes = kFloatDTypes,
        .samples =
            [g](DType dt) {
              const int64_t c = batched(g.x, g.dims())[1];
              Dims w = {g.out_channels, c / g.groups};
              w.insert(w.end(), g.kernel.begin(), g.kernel.end());
              return std::vector<Sample>{
                  {"x" + std::to_string(g.x.size()) + "d",
                   {mk(g.x, dt, 1), mk(w, dt, 2), mk({g.out_channels}, dt, 3)}}};
            },
        .fn =
            [g](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{conv(g, in[0], in[1], in[2])};
            },
        .ref =
            [g](const std::vector<Ref>& in) {
              return std::vector<Ref>{ref_conv(in[0], in[1], in[2], g)};
            },
        .rtol32 = 1e-4,
        .atol32 = 1e-4,
        .errors = {expect_error<ShapeError>("channels", "has 3 channels but the weight",
                                            [] {
                                              conv2d(ones({1, 3, 4, 4}), ones({2, 2, 1, 1}));
                                            }),
                   expect_error<ShapeError>("kernel too large", "is smaller than the kernel",
                                            [] {
                                              conv1d(ones({1, 1, 2}), ones({1, 1, 3}));
                                            }),
                   expect_error<ShapeError>("rank",
                                            "expected an input [N, C, D, H, W] or [C, D, H, W]",
                                            [] {
                                              conv3d(ones({2, 2, 2}), ones({1, 1, 1, 1, 1}));
                                            }),
                   expect_error<ValueError>(
                       "groups", "groups (2) must be positive and divide",
                       [] {
                         conv2d(ones({1, 3, 4, 4}), ones({2, 1, 1, 1}), {}, {1}, {0}, {1}, 2);
                       }),
                   expect_error<ValueError>(
                       "strided same", "ConvPadding::Same is not supported for strided",
                       [] {
                         conv1d(ones({1, 1, 6}), ones({1, 1, 3}), {}, {2}, ConvPadding::Same);
                       })},
        .differentiable = true,
    });
  for (const Transposed& t : kTransposed)
    RegisterOpInfo({
        .name = t.name,
        .covers = {"cat", "pad", "flip", "matmul"},
        .dtypes = kFloatDTypes,
        .samples =
            [t](DType dt) {
              const int64_t c = batched(t.x, t.dims())[1];
              Dims w = {c, t.out_channels / t.groups};
              w.insert(w.end(), t.kernel.begin(), t.kernel.end());
              return std::vector<Sample>{
                  {"x" + std::to_string(t.x.size()) + "d",
                   {mk(t.x, dt, 6), mk(w, dt, 7), mk({t.out_channels}, dt, 8)}}};
            },
        .fn =
            [t](const std::vector<Tensor>& in) {
              using Fn = Tensor (*)(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                    IntList, IntList, IntList, int64_t, IntList);
              const Fn fns[] = {conv_transpose1d, conv_transpose2d, conv_transpose3d};
              return std::vector<Tensor>{fns[t.dims() - 1](in[0], in[1], in[2], t.stride, t.padding,
                                                           t.output_padding, t.groups, t.dilation)};
            },
        .ref =
            [t](const std::vector<Ref>& in) {
              return std::vector<Ref>{ref_conv_transpose(in[0], in[1], in[2], t)};
            },
        .rtol32 = 1e-4,
        .atol32 = 1e-4,
        .errors = {expect_error<ValueError>(
                       "output padding", "output_padding must be smaller than either stride",
                       [] {
                         conv_transpose1d(ones({1, 1, 4}), ones({1, 1, 2}), {}, {1}, {0}, {1});
                       }),
                   expect_error<ShapeError>(
                       "channels", "has 2 channels but the weight",
                       [] {
                         conv_transpose2d(ones({1, 2, 3, 3}), ones({3, 1, 2, 2}));
                       })},
        .differentiable = true,
    });
  for (const bool max : {true, false})
    for (const Geometry& base : kPools)
      for (const bool include_pad : {true, false}) {
        if (max && !include_pad) continue;  // (an avg pooling option)
        Geometry g = base;
        g.count_include_pad = include_pad;
        if (!max) g.dilation = {1};  // (avg pooling has no dilation)
        // (divisor_override replaces the count, whatever count_include_pad says: once each.)
        if (!max && !include_pad && g.name.find("padding") != std::string::npos) g.divisor = 5;
        const std::string name = std::string(max ? "max_" : "avg_") + g.name +
                                 (include_pad ? "" : "_exclude_pad") +
                                 (g.divisor ? "_divisor_override" : "");
        RegisterOpInfo({
            .name = name,
            .covers = {"slice", "cat", max ? "window_argmax" : "sum"},
            .dtypes = kFloatDTypes,
            .samples =
                [g](DType dt) {
                  return std::vector<Sample>{
                      {"x" + std::to_string(g.x.size()) + "d", {mk(g.x, dt, 4)}}};
                },
            .fn = [g, max](const std::vector<Tensor>& in) { return pool(g, max, in[0]); },
            .ref =
                [g, max](const std::vector<Ref>& in) {
                  std::vector<Ref> out = {ref_pool(in[0], g, max)};
                  if (max) out.push_back(ref_pool_indices(in[0], g));
                  return out;
                },
            .rtol32 = 1e-5,
            .atol32 = 1e-5,
            .errors = {expect_error<ShapeError>("rank",
                                                "expected an input [N, C, H, W] or [C, H, W]",
                                                [] {
                                                  max_pool2d(ones({4, 4}), {2});
                                                }),
                       expect_error<ValueError>("padding", "padding should be at most half",
                                                [] {
                                                  avg_pool1d(ones({1, 1, 4}), {2}, {}, {2});
                                                }),
                       expect_error<ValueError>("per-dim values",
                                                "kernel_size must have 1 or 3 values",
                                                [] {
                                                  max_pool3d(ones({1, 1, 4, 4, 4}), {2, 2});
                                                })},
            .differentiable = true,
        });
      }
  for (const bool max : {true, false})
    for (const Adaptive& a : kAdaptive) {
      const size_t dims = a.name[0] - '0';
      RegisterOpInfo({
          .name = std::string(max ? "adaptive_max_pool" : "adaptive_avg_pool") + a.name,
          .covers = max ? std::vector<std::string>{"adaptive_window_argmax", "gather"}
                        : std::vector<std::string>{"matmul", "transpose"},
          .dtypes = kFloatDTypes,
          .samples =
              [a, max](DType dt) {
                std::vector<Sample> out{{"x" + std::to_string(a.x.size()) + "d", {mk(a.x, dt, 5)}}};
                // ties (values rounded to halves): the first maximum is the one chosen
                if (max) out.push_back({"with ties", {round(mk(a.x, dt, 6) * 2) / 2}});
                return out;
              },
          .fn =
              [a, dims, max](const std::vector<Tensor>& in) {
                return adaptive(dims, max, in[0], a.output_size);
              },
          .ref =
              [a, dims, max](const std::vector<Ref>& in) {
                return ref_adaptive(in[0], a.output_size, dims, max);
              },
          .rtol32 = 1e-5,
          .atol32 = 1e-5,
          .errors = {expect_error<ValueError>("output size", "output_size must be positive",
                                              [] {
                                                adaptive_avg_pool2d(ones({1, 1, 4, 4}), {0});
                                              }),
                     expect_error<ShapeError>("rank", "expected an input [N, C, L] or [C, L]",
                                              [] { adaptive_max_pool1d(ones({4}), {2}); }),
                     expect_error<DTypeError>(
                         "an integer input", "expected a floating input",
                         [] {
                           ops::adaptive_window_argmax(zeros({1, 1, 4}, DType::Int64), {2});
                         })},
          .differentiable = true,
          // (finite differences are meaningless at ties)
          .grad_samples =
              [a](DType dt) {
                return std::vector<Sample>{
                    {"x" + std::to_string(a.x.size()) + "d", {mk(a.x, dt, 5)}}};
              },
      });
    }
  return true;
}();

}  // namespace
}  // namespace kiln::testing
