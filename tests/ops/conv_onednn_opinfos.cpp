// OpInfos for the oneDNN convolution ops (src/ops/conv_onednn.h): forward, the gradient with
// respect to the input, and the gradient with respect to the weight and bias, each against
// float64 references written as the textbook loops. float32 runs oneDNN's kernels; float64 (which
// oneDNN lacks) runs the ops' direct loops, and its gradchecks, first and second order, check the
// derivative formulas that tie the three ops together.
#include <gtest/gtest.h>

#include <thread>

#include "ops/conv_onednn.h"
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

// A batched convolution geometry (oneDNN's ops take [N, C, spatial...] and one padding per dim).
struct ConvCase {
  std::string name;
  Ints x;  // [N, C, in...]
  Ints kernel, stride, padding, dilation;
  int64_t out_channels, groups;
  size_t dims() const { return kernel.size(); }
  Ints weight() const {
    Ints w = {out_channels, x[1] / groups};
    w.insert(w.end(), kernel.begin(), kernel.end());
    return w;
  }
  int64_t out(size_t d) const {
    return (x[2 + d] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
  }
  Ints y() const {
    Ints y = {x[0], out_channels};
    for (size_t d = 0; d < dims(); ++d) y.push_back(out(d));
    return y;
  }
  // f(y_at, w_at, x_at) for every product y[y_at] += x[x_at] * w[w_at] (taps in the padding
  // skipped), over flat row-major indices.
  template <class F>
  void for_each_tap(F&& f) const {
    const Ints ys = y(), ws = weight();
    const Ref yr = Ref::zeros(ys, DType::Float64), wr = Ref::zeros(ws, DType::Float64),
              xr = Ref::zeros(x, DType::Float64);
    const int64_t per_group_in = x[1] / groups, per_group_out = out_channels / groups;
    for (int64_t yi = 0; yi < yr.numel(); ++yi) {
      const Ints yidx = yr.unravel(yi);
      for (int64_t wi = 0; wi < wr.numel(); ++wi) {
        const Ints widx = wr.unravel(wi);
        if (widx[0] != yidx[1]) continue;
        Ints xidx = {yidx[0], yidx[1] / per_group_out * per_group_in + widx[1]};
        bool inside = true;
        for (size_t d = 0; d < dims(); ++d) {
          const int64_t i = yidx[2 + d] * stride[d] - padding[d] + widx[2 + d] * dilation[d];
          inside = inside && i >= 0 && i < x[2 + d];
          xidx.push_back(i);
        }
        if (inside) f(yi, wi, xr.ravel(xidx));
      }
    }
  }
};

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> c = {
      {"1d_stride_padding", {2, 3, 9}, {3}, {2}, {1}, {1}, 4, 1},
      {"1d_dilated_groups", {1, 4, 8}, {2}, {1}, {0}, {3}, 2, 2},
      {"2d_3x3", {2, 3, 5, 5}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 4, 1},
      {"2d_stride_padding_groups_uneven", {1, 4, 6, 7}, {3, 2}, {2, 2}, {1, 1}, {1, 1}, 6, 2},
      {"2d_dilation", {2, 2, 7, 6}, {2, 3}, {1, 2}, {2, 1}, {2, 2}, 3, 1},
      {"3d_stride_padding", {1, 2, 4, 5, 4}, {2, 3, 2}, {1, 2, 1}, {1, 0, 1}, {1, 1, 1}, 3, 1},
  };
  return c;
}

Tensor mk(Ints sizes, DType dt, uint32_t seed) {
  return make_tensor_for_test(std::move(sizes), dt, -2, 2, Layout::Contiguous, seed);
}

std::vector<Ref> ref_forward(const ConvCase& c, const std::vector<Ref>& in) {
  Ref y = Ref::zeros(c.y(), in[0].dtype);
  const int64_t plane = y.numel() / (y.sizes[0] * y.sizes[1]);
  for (int64_t i = 0; i < y.numel(); ++i)
    y.v[static_cast<size_t>(i)] = in[2].v[i / plane % c.out_channels];
  c.for_each_tap([&](int64_t y_at, int64_t w_at, int64_t x_at) {
    y.v[static_cast<size_t>(y_at)] +=
        in[0].v[static_cast<size_t>(x_at)] * in[1].v[static_cast<size_t>(w_at)];
  });
  return {y};
}
std::vector<Ref> ref_backward_input(const ConvCase& c, const std::vector<Ref>& in) {
  Ref dx = Ref::zeros(c.x, in[0].dtype);
  c.for_each_tap([&](int64_t y_at, int64_t w_at, int64_t x_at) {
    dx.v[static_cast<size_t>(x_at)] +=
        in[0].v[static_cast<size_t>(y_at)] * in[1].v[static_cast<size_t>(w_at)];
  });
  return {dx};
}
std::vector<Ref> ref_backward_weight(const ConvCase& c, const std::vector<Ref>& in) {
  Ref dw = Ref::zeros(c.weight(), in[0].dtype), db = Ref::zeros({c.out_channels}, in[0].dtype);
  c.for_each_tap([&](int64_t y_at, int64_t w_at, int64_t x_at) {
    dw.v[static_cast<size_t>(w_at)] +=
        in[0].v[static_cast<size_t>(x_at)] * in[1].v[static_cast<size_t>(y_at)];
  });
  const int64_t plane = in[1].numel() / (in[1].sizes[0] * in[1].sizes[1]);
  for (int64_t i = 0; i < in[1].numel(); ++i)
    db.v[static_cast<size_t>(i / plane % c.out_channels)] += in[1].v[static_cast<size_t>(i)];
  return {dw, db};
}

const bool registered = [] {
  for (size_t k = 0; k < cases().size(); ++k) {
    const ConvCase& c = cases()[k];
    RegisterOpInfo({
        .name = "onednn_conv_" + c.name,
        .covers = {"onednn_conv"},
        .dtypes = kFloatDTypes,
        .samples =
            [k](DType dt) {
              const ConvCase& c = cases()[k];
              return std::vector<Sample>{
                  {c.name, {mk(c.x, dt, 1), mk(c.weight(), dt, 2), mk({c.out_channels}, dt, 3)}},
                  {c.name + " transposed input",
                   {make_tensor_for_test(c.x, dt, -2, 2, Layout::Transposed, 4),
                    mk(c.weight(), dt, 5), mk({c.out_channels}, dt, 6)}}};
            },
        .fn =
            [k](const std::vector<Tensor>& in) {
              const ConvCase& c = cases()[k];
              return std::vector<Tensor>{
                  ops::onednn_conv(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.groups)};
            },
        .ref = [k](const std::vector<Ref>& in) { return ref_forward(cases()[k], in); },
        .rtol32 = 1e-4,
        .atol32 = 1e-4,
        .errors = {expect_error<DTypeError>(
            "an integer input", "expected float32 or float64 inputs",
            [] {
              ops::onednn_conv(ones({1, 1, 3}, DType::Int64), ones({1, 1, 2}, DType::Int64), {},
                               {1}, {0}, {1}, 1);
            })},
        .differentiable = true,
        .second_order = true,
    });
    RegisterOpInfo({
        .name = "onednn_conv_backward_input_" + c.name,
        .covers = {"onednn_conv_backward_input"},
        .dtypes = kFloatDTypes,
        .samples =
            [k](DType dt) {
              const ConvCase& c = cases()[k];
              return std::vector<Sample>{{c.name, {mk(c.y(), dt, 7), mk(c.weight(), dt, 8)}}};
            },
        .fn =
            [k](const std::vector<Tensor>& in) {
              const ConvCase& c = cases()[k];
              return std::vector<Tensor>{ops::onednn_conv_backward_input(
                  in[0], in[1], c.x, c.stride, c.padding, c.dilation, c.groups)};
            },
        .ref = [k](const std::vector<Ref>& in) { return ref_backward_input(cases()[k], in); },
        .rtol32 = 1e-4,
        .atol32 = 1e-4,
        .errors = {expect_error<ShapeError>(
            "a gradient of the wrong shape", "expected a gradient of shape [1, 1, 2]",
            [] {
              ops::onednn_conv_backward_input(ones({1, 1, 3}), ones({1, 1, 2}), {1, 1, 3}, {1}, {0},
                                              {1}, 1);
            })},
        .differentiable = true,
        .second_order = true,
    });
    RegisterOpInfo({
        .name = "onednn_conv_backward_weight_" + c.name,
        .covers = {"onednn_conv_backward_weight"},
        .dtypes = kFloatDTypes,
        .samples =
            [k](DType dt) {
              const ConvCase& c = cases()[k];
              return std::vector<Sample>{{c.name, {mk(c.x, dt, 9), mk(c.y(), dt, 10)}}};
            },
        .fn =
            [k](const std::vector<Tensor>& in) {
              const ConvCase& c = cases()[k];
              auto [dw, db] = ops::onednn_conv_backward_weight(in[0], in[1], c.weight(), c.stride,
                                                               c.padding, c.dilation, c.groups);
              return std::vector<Tensor>{dw, db};
            },
        .ref = [k](const std::vector<Ref>& in) { return ref_backward_weight(cases()[k], in); },
        .rtol32 = 1e-4,
        .atol32 = 1e-4,
        .errors = {expect_error<DTypeError>(
            "inputs of two dtypes", "expected float32 or float64 inputs of one dtype",
            [] {
              ops::onednn_conv_backward_weight(ones({1, 1, 3}), ones({1, 1, 2}, DType::Float64),
                                               {1, 1, 2}, {1}, {0}, {1}, 1);
            })},
        .differentiable = true,
        .second_order = true,
    });
  }
  return true;
}();

// Threads that convolve at once (sharing the primitive cache; each its own stream and scratch)
// get what one thread alone gets, forward and backward.
TEST(OneDnnConvolution, ThreadsRunningAtOnceGetWhatOneThreadGets) {
  std::vector<Tensor> xs, ws, want_y, want_gx;
  for (int64_t g = 0; g < 3; ++g) {
    xs.push_back(mk({2, 3 + g, 9 + g, 8}, DType::Float32, 20 + static_cast<uint32_t>(g)));
    ws.push_back(mk({4, 3 + g, 3, 2}, DType::Float32, 30 + static_cast<uint32_t>(g)));
  }
  auto run = [&](size_t g) {
    Tensor x = xs[g].detach().requires_grad_();
    Tensor y = ops::onednn_conv(x, ws[g], {}, {1, 2}, {1, 0}, {1, 1}, 1);
    (y * y).sum().backward();
    return std::pair{y.detach(), x.grad()};
  };
  for (size_t g = 0; g < 3; ++g) {
    auto [y, gx] = run(g);
    want_y.push_back(y);
    want_gx.push_back(gx);
  }
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 12; ++i) {
        const size_t g = static_cast<size_t>((i + t) % 3);
        auto [y, gx] = run(g);
        // (Within rounding: a thread's OpenMP team may differ in size from the main thread's,
        // and oneDNN splits some sums by thread.)
        mismatches[static_cast<size_t>(t)] +=
            !allclose(y, want_y[g], 1e-5, 1e-5) || !allclose(gx, want_gx[g], 1e-5, 1e-5);
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace kiln::testing
