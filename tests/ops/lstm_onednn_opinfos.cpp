// OpInfos for the oneDNN LSTM layer ops (src/ops/lstm_onednn.h): the layer against the
// textbook recurrence, and its backward against central finite differences of that recurrence
// (float64). float32 runs oneDNN's primitive; float64 (which oneDNN lacks) runs the ops' direct
// loops, and the layer's gradcheck checks its derivative (the backward op) in float64.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/lstm_onednn.h"
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

using Ints = std::vector<int64_t>;

struct LstmCase {
  std::string name;
  int64_t steps, batch, input, hidden;
  bool reverse;
};
const std::vector<LstmCase>& cases() {
  static const std::vector<LstmCase> c = {{"3_steps", 3, 2, 3, 2, false},
                                          {"3_steps_reversed", 3, 2, 3, 2, true},
                                          {"1_step_wide", 1, 1, 2, 3, false}};
  return c;
}

Tensor mk(Ints sizes, DType dt, uint32_t seed) {
  return make_tensor_for_test(std::move(sizes), dt, -1, 1, Layout::Contiguous, seed);
}
// x, h0, c0, w_ih, w_hh, bias of a case.
std::vector<Tensor> layer_inputs(const LstmCase& c, DType dt) {
  const int64_t h = c.hidden;
  return {mk({c.steps, c.batch, c.input}, dt, 1),
          mk({c.batch, h}, dt, 2),
          mk({c.batch, h}, dt, 3),
          mk({4 * h, c.input}, dt, 4),
          mk({4 * h, h}, dt, 5),
          mk({4 * h}, dt, 6)};
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

// The recurrence as PyTorch documents it: gates i, f, g, o from x_t W_ih^T + h W_hh^T + b.
std::vector<Ref> ref_layer(const LstmCase& c, const std::vector<Ref>& in) {
  const int64_t n = c.batch, h = c.hidden, ni = c.input;
  const Ref &x = in[0], &w_ih = in[3], &w_hh = in[4], &b = in[5];
  Ref y = Ref::zeros({c.steps, n, h}, x.dtype), hs = in[1], cs = in[2];
  for (int64_t s = 0; s < c.steps; ++s) {
    const int64_t t = c.reverse ? c.steps - 1 - s : s;
    Ref h_next = hs, c_next = cs;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < h; ++j) {
        double pre[4];
        for (int64_t q = 0; q < 4; ++q) {
          const int64_t k = q * h + j;
          double v = b.v[static_cast<size_t>(k)];
          for (int64_t m = 0; m < ni; ++m)
            v += w_ih.v[static_cast<size_t>(k * ni + m)] *
                 x.v[static_cast<size_t>((t * n + r) * ni + m)];
          for (int64_t m = 0; m < h; ++m)
            v += w_hh.v[static_cast<size_t>(k * h + m)] * hs.v[static_cast<size_t>(r * h + m)];
          pre[q] = v;
        }
        const auto at = static_cast<size_t>(r * h + j);
        const double cell = sigmoid(pre[1]) * cs.v[at] + sigmoid(pre[0]) * std::tanh(pre[2]);
        c_next.v[at] = cell;
        h_next.v[at] = sigmoid(pre[3]) * std::tanh(cell);
        y.v[static_cast<size_t>((t * n + r) * h + j)] = h_next.v[at];
      }
    hs = h_next;
    cs = c_next;
  }
  return {y, hs, cs};
}

// d/d(each input) of sum(y dy) + sum(h_T dh) + sum(c_T dc), by central differences of
// ref_layer: an independent check of the backward formulas (oneDNN's and the direct loops').
std::vector<Ref> ref_backward(const LstmCase& c, const std::vector<Ref>& in) {
  std::vector<Ref> layer(in.begin(), in.begin() + 6);
  auto loss = [&](const std::vector<Ref>& at) {
    const std::vector<Ref> out = ref_layer(c, at);
    double total = 0;
    for (size_t k = 0; k < 3; ++k)
      for (size_t e = 0; e < out[k].v.size(); ++e) total += out[k].v[e] * in[6 + k].v[e];
    return total;
  };
  std::vector<Ref> grads;
  const double eps = 1e-6;
  for (size_t k = 0; k < 6; ++k) {
    Ref g = Ref::zeros(layer[k].sizes, in[0].dtype);
    for (size_t e = 0; e < layer[k].v.size(); ++e) {
      std::vector<Ref> plus = layer, minus = layer;
      plus[k].v[e] += eps;
      minus[k].v[e] -= eps;
      g.v[e] = (loss(plus) - loss(minus)) / (2 * eps);
    }
    grads.push_back(g);
  }
  return grads;
}

const bool registered = [] {
  for (size_t k = 0; k < cases().size(); ++k) {
    RegisterOpInfo({
        .name = "onednn_lstm_layer_" + cases()[k].name,
        .covers = {"onednn_lstm_layer"},
        .dtypes = kFloatDTypes,
        .samples =
            [k](DType dt) {
              return std::vector<Sample>{{cases()[k].name, layer_inputs(cases()[k], dt)}};
            },
        .fn =
            [k](const std::vector<Tensor>& in) {
              auto [y, h, c] = ops::onednn_lstm_layer(in[0], in[1], in[2], in[3], in[4], in[5],
                                                      cases()[k].reverse);
              return std::vector<Tensor>{y, h, c};
            },
        .ref = [k](const std::vector<Ref>& in) { return ref_layer(cases()[k], in); },
        .rtol32 = 1e-4,
        .atol32 = 1e-5,
        .errors = {expect_error<ShapeError>("a weight of the wrong shape", "expected w_ih [4 H, 3]",
                                            [] {
                                              ops::onednn_lstm_layer(
                                                  ones({2, 1, 3}), zeros({1, 2}), zeros({1, 2}),
                                                  ones({8, 2}), ones({8, 2}), zeros({8}), false);
                                            }),
                   expect_error<DTypeError>("an integer input", "expected float32 or float64",
                                            [] {
                                              const Tensor i = ones({1, 1, 1}, DType::Int64);
                                              ops::onednn_lstm_layer(
                                                  i, i[0], i[0], ones({4, 1}, DType::Int64),
                                                  ones({4, 1}, DType::Int64),
                                                  ones({4}, DType::Int64), false);
                                            })},
        .differentiable = true,
    });
    RegisterOpInfo({
        .name = "onednn_lstm_layer_backward_" + cases()[k].name,
        .covers = {"onednn_lstm_layer_backward"},
        .dtypes = kFloatDTypes,
        .samples =
            [k](DType dt) {
              const LstmCase& c = cases()[k];
              std::vector<Tensor> in = layer_inputs(c, dt);
              in.push_back(mk({c.steps, c.batch, c.hidden}, dt, 7));
              in.push_back(mk({c.batch, c.hidden}, dt, 8));
              in.push_back(mk({c.batch, c.hidden}, dt, 9));
              return std::vector<Sample>{{c.name, in}};
            },
        .fn =
            [k](const std::vector<Tensor>& in) {
              // The layer's outputs and workspace, then its backward with the given gradients.
              const Attrs attrs = {cases()[k].reverse};
              std::array<Tensor, kMaxOpOutputs> fwd, bwd;
              const std::vector<Tensor> layer(in.begin(), in.begin() + 6);
              dispatch_no_autograd(*find_op("onednn_lstm_layer"), layer, attrs, fwd);
              std::vector<Tensor> args = layer;
              args.insert(args.end(), {fwd[0], fwd[1], fwd[2], fwd[3], in[6], in[7], in[8]});
              dispatch(*find_op("onednn_lstm_layer_backward"), args, attrs, bwd);
              const int64_t h = in[4].size(1), wi = in[3].numel(), wh = in[4].numel();
              return std::vector<Tensor>{bwd[0],
                                         bwd[1],
                                         bwd[2],
                                         bwd[3].narrow(0, 0, wi).view(in[3].sizes()),
                                         bwd[3].narrow(0, wi, wh).view(in[4].sizes()),
                                         bwd[3].narrow(0, wi + wh, 4 * h)};
            },
        .ref = [k](const std::vector<Ref>& in) { return ref_backward(cases()[k], in); },
        .rtol32 = 1e-3,
        .atol32 = 1e-4,
        .rtol64 = 1e-6,
        .atol64 = 1e-7,
        .errors = {expect_error<ShapeError>(
            "gradients of the wrong shape", "the outputs and their gradients must be",
            [] {
              const Tensor x = ones({2, 1, 1}), s = zeros({1, 1}), w = ones({4, 1});
              std::vector<Tensor> args = {
                  x, s, s, w, w, zeros({4}), zeros({2, 1, 1}), s, s, zeros({1}), zeros({3, 1, 1}),
                  s, s};
              std::array<Tensor, kMaxOpOutputs> out;
              dispatch(*find_op("onednn_lstm_layer_backward"), args, {false}, out);
            })},
        .no_gradcheck = "a second derivative through an LSTM layer is not implemented",
    });
  }
  return true;
}();

}  // namespace
}  // namespace kiln::testing
