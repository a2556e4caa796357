// OpInfos for conv2d, max_pool2d and avg_pool2d: one per geometry (kernel, stride, padding,
// dilation, groups), each checked against a float64 reference written as the textbook loops,
// forward and backward, eagerly and through every backend.
#include <cmath>
#include <limits>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

struct Geometry {
  std::string name;
  std::vector<int64_t> x;       // [N, C, H, W] or [C, H, W]
  std::vector<int64_t> kernel;  // (kh, kw)
  std::vector<int64_t> stride, padding, dilation;
  int64_t out_channels = 0, groups = 1;  // conv2d
  bool count_include_pad = true;         // avg_pool2d
};

Tensor mk(std::vector<int64_t> sizes, DType dt, uint32_t seed, double lo = -2, double hi = 2) {
  return make_tensor_for_test(std::move(sizes), dt, lo, hi, Layout::Contiguous, seed);
}

// x's sizes as [N, C, H, W] (an unbatched input has N = 1).
std::vector<int64_t> batched(std::vector<int64_t> s) {
  if (s.size() == 3) s.insert(s.begin(), 1);
  return s;
}
int64_t at(const std::vector<int64_t>& v, size_t d) { return v.size() == 1 ? v[0] : v[d]; }

// Calls f(n, c, oi, oj, window) for every output element, window listing the input positions
// (flat offsets, or -1 for padding) it covers.
void for_each_window(
    const std::vector<int64_t>& xs, const Geometry& g,
    const std::function<void(int64_t, int64_t, int64_t, int64_t, const std::vector<int64_t>&)>& f) {
  const std::vector<int64_t> s = batched(xs);
  const std::vector<int64_t>& stride = g.stride.empty() ? g.kernel : g.stride;
  int64_t out[2];
  for (size_t d = 0; d < 2; ++d)
    out[d] = (s[2 + d] + 2 * at(g.padding, d) - at(g.dilation, d) * (at(g.kernel, d) - 1) - 1) /
                 at(stride, d) +
             1;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t i = 0; i < out[0]; ++i)
        for (int64_t j = 0; j < out[1]; ++j) {
          std::vector<int64_t> window;
          for (int64_t a = 0; a < at(g.kernel, 0); ++a)
            for (int64_t b = 0; b < at(g.kernel, 1); ++b) {
              const int64_t h = i * at(stride, 0) - at(g.padding, 0) + a * at(g.dilation, 0);
              const int64_t w = j * at(stride, 1) - at(g.padding, 1) + b * at(g.dilation, 1);
              window.push_back(h < 0 || h >= s[2] || w < 0 || w >= s[3]
                                   ? -1
                                   : ((n * s[1] + c) * s[2] + h) * s[3] + w);
            }
          f(n, c, i, j, window);
        }
}

// x's sizes with the window's output height and width.
std::vector<int64_t> pooled_sizes(const std::vector<int64_t>& xs, const Geometry& g) {
  const std::vector<int64_t>& stride = g.stride.empty() ? g.kernel : g.stride;
  std::vector<int64_t> out = xs;
  for (size_t d = 0; d < 2; ++d) {
    int64_t& size = out[out.size() - 2 + d];
    size = (size + 2 * at(g.padding, d) - at(g.dilation, d) * (at(g.kernel, d) - 1) - 1) /
               at(stride, d) +
           1;
  }
  return out;
}

Ref ref_pool(const Ref& x, const Geometry& g, bool max) {
  Ref out = Ref::zeros(pooled_sizes(x.sizes, g), x.dtype);
  size_t k = 0;
  for_each_window(x.sizes, g, [&](int64_t, int64_t, int64_t, int64_t, const auto& window) {
    double acc = max ? -std::numeric_limits<double>::infinity() : 0;
    int64_t count = 0;
    for (int64_t o : window) {
      if (o < 0) {
        count += g.count_include_pad;
        continue;
      }
      acc = max ? std::max(acc, x.v[o]) : acc + x.v[o];
      ++count;
    }
    out.v[k++] = max ? acc : acc / static_cast<double>(count);
  });
  return out;
}

// out[n, o, i, j] = bias[o] + sum over the group's channels c and the window of x * w.
Ref ref_conv(const Ref& x, const Ref& w, const Ref& bias, const Geometry& g) {
  const std::vector<int64_t> s = batched(x.sizes);
  const int64_t in_per_group = s[1] / g.groups, out_per_group = g.out_channels / g.groups;
  const int64_t kk = at(g.kernel, 0) * at(g.kernel, 1);
  Geometry one_channel = g;
  std::vector<int64_t> xs1 = {s[0], 1, s[2], s[3]};
  std::vector<std::vector<std::vector<int64_t>>> windows(static_cast<size_t>(s[0]));
  int64_t oh = 0, ow = 0;
  for_each_window(xs1, one_channel, [&](int64_t n, int64_t, int64_t i, int64_t j, const auto& win) {
    windows[static_cast<size_t>(n)].push_back(win);
    oh = i + 1;
    ow = j + 1;
  });
  std::vector<int64_t> sizes = {s[0], g.out_channels, oh, ow};
  if (x.sizes.size() == 3) sizes.erase(sizes.begin());
  Ref out = Ref::zeros(sizes, x.dtype);
  size_t k = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (const std::vector<int64_t>& win : windows[static_cast<size_t>(n)]) {
        double acc = bias.v[static_cast<size_t>(o)];
        const int64_t group = o / out_per_group;
        for (int64_t ci = 0; ci < in_per_group; ++ci)
          for (int64_t p = 0; p < kk; ++p) {
            const int64_t pos = win[static_cast<size_t>(p)];
            if (pos < 0) continue;
            // pos is an offset in the one-channel image of sample n: move to channel c.
            const int64_t hw = pos - n * s[2] * s[3];
            const int64_t c = group * in_per_group + ci;
            acc += x.v[static_cast<size_t>((n * s[1] + c) * s[2] * s[3] + hw)] *
                   w.v[static_cast<size_t>((o * in_per_group + ci) * kk + p)];
          }
        out.v[k++] = acc;
      }
  return out;
}

const std::vector<Geometry> kConvs = {
    {"conv2d_3x3", {2, 3, 5, 5}, {3, 3}, {1}, {0}, {1}, 4, 1},
    {"conv2d_stride_padding_groups", {1, 4, 6, 7}, {3, 2}, {2}, {1}, {1}, 6, 2},
    {"conv2d_dilation_uneven", {2, 2, 7, 6}, {2, 3}, {1, 2}, {2, 1}, {2}, 3, 1},
    {"conv2d_unbatched_1x1", {3, 4, 4}, {1, 1}, {1}, {0}, {1}, 2, 1},
};
const std::vector<Geometry> kPools = {
    {"pool2d_2x2", {2, 3, 6, 6}, {2, 2}, {}, {0}, {1}},
    {"pool2d_3x3_stride2_padding1", {1, 2, 7, 5}, {3}, {2}, {1}, {1}},
    {"pool2d_unbatched_dilated", {2, 5, 6}, {2, 3}, {1}, {0, 1}, {2, 1}},
};

const bool registered = [] {
  for (const Geometry& g : kConvs)
    RegisterOpInfo({
        .name = g.name,
        .covers = {"as_strided", "matmul", "permute"},
        .dtypes = kFloatDTypes,
        .samples =
            [g](DType dt) {
              const int64_t c = batched(g.x)[1];
              return std::vector<Sample>{
                  {"x" + std::to_string(g.x.size()) + "d",
                   {mk(g.x, dt, 1),
                    mk({g.out_channels, c / g.groups, g.kernel[0], g.kernel[1]}, dt, 2),
                    mk({g.out_channels}, dt, 3)}}};
            },
        .fn =
            [g](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{
                  conv2d(in[0], in[1], in[2], g.stride, g.padding, g.dilation, g.groups)};
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
                                              conv2d(ones({1, 1, 2, 2}), ones({1, 1, 3, 3}));
                                            }),
                   expect_error<ValueError>(
                       "groups", "groups (2) must be positive and divide",
                       [] {
                         conv2d(ones({1, 3, 4, 4}), ones({2, 1, 1, 1}), {}, {1}, {0}, {1}, 2);
                       })},
        .differentiable = true,
    });
  for (const bool max : {true, false})
    for (const Geometry& base : kPools)
      for (const bool include_pad : {true, false}) {
        if (max && !include_pad) continue;  // (an avg_pool2d option)
        Geometry g = base;
        g.count_include_pad = include_pad;
        if (!max) g.dilation = {1};  // (avg_pool2d has no dilation)
        const std::string name =
            std::string(max ? "max_" : "avg_") + g.name + (include_pad ? "" : "_exclude_pad");
        RegisterOpInfo({
            .name = name,
            .covers = {"as_strided", max ? "amax" : "mean"},
            .dtypes = kFloatDTypes,
            .samples =
                [g](DType dt) {
                  return std::vector<Sample>{
                      {"x" + std::to_string(g.x.size()) + "d", {mk(g.x, dt, 4)}}};
                },
            .fn =
                [g, max](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{
                      max ? max_pool2d(in[0], g.kernel, g.stride, g.padding, g.dilation)
                          : avg_pool2d(in[0], g.kernel, g.stride, g.padding, false,
                                       g.count_include_pad)};
                },
            .ref =
                [g, max](const std::vector<Ref>& in) {
                  return std::vector<Ref>{ref_pool(in[0], g, max)};
                },
            .rtol32 = 1e-5,
            .atol32 = 1e-5,
            .errors = {expect_error<NotImplementedError>(
                           "ceil_mode", "ceil_mode=true is not implemented",
                           [max] {
                             if (max)
                               max_pool2d(ones({1, 1, 4, 4}), {2}, {}, {0}, {1}, true);
                             else
                               avg_pool2d(ones({1, 1, 4, 4}), {2}, {}, {0}, true);
                           }),
                       expect_error<ShapeError>("rank",
                                                "expected an input [N, C, H, W] or [C, H, W]",
                                                [] {
                                                  max_pool2d(ones({4, 4}), {2});
                                                }),
                       expect_error<ValueError>("padding", "padding should be at most half",
                                                [] {
                                                  avg_pool2d(ones({1, 1, 4, 4}), {2}, {}, {2});
                                                })},
            .differentiable = true,
        });
      }
  return true;
}();

}  // namespace
}  // namespace kiln::testing
