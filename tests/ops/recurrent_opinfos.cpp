// OpInfos for the recurrent cells (rnn_tanh_cell, rnn_relu_cell, lstm_cell, gru_cell), batched
// and unbatched, against float64 references written from PyTorch's formulas, forward and
// backward, eagerly and through every backend.
#include <cmath>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

constexpr int64_t kInput = 5, kHidden = 4, kBatch = 3;

Tensor mk(std::vector<int64_t> sizes, DType dt, uint32_t seed, double bound = 1.0) {
  return make_tensor_for_test(std::move(sizes), dt, -bound, bound, Layout::Contiguous, seed);
}

// x W^T + b for row b of x (or the only row): gates[j] of one sample.
std::vector<double> affine(const Ref& x, int64_t row, const Ref& w, const Ref& b) {
  const int64_t in = w.sizes[1], out = w.sizes[0];
  std::vector<double> r(static_cast<size_t>(out));
  for (int64_t j = 0; j < out; ++j) {
    double acc = b.v[static_cast<size_t>(j)];
    for (int64_t k = 0; k < in; ++k)
      acc += x.v[static_cast<size_t>(row * in + k)] * w.v[static_cast<size_t>(j * in + k)];
    r[static_cast<size_t>(j)] = acc;
  }
  return r;
}
double sigmoid_ref(double v) { return 1 / (1 + std::exp(-v)); }

enum class Cell { Tanh, Relu, Lstm, Gru };
int64_t gates_of(Cell c) { return c == Cell::Lstm ? 4 : c == Cell::Gru ? 3 : 1; }

// in: x, h, (c), w_ih, w_hh, b_ih, b_hh.
std::vector<Ref> reference(Cell cell, const std::vector<Ref>& in) {
  const bool lstm = cell == Cell::Lstm;
  const Ref& x = in[0];
  const Ref& h = in[1];
  const size_t w0 = lstm ? 3 : 2;
  const Ref &w_ih = in[w0], &w_hh = in[w0 + 1], &b_ih = in[w0 + 2], &b_hh = in[w0 + 3];
  const int64_t rows = x.dim() == 2 ? x.sizes[0] : 1, H = kHidden;
  Ref h2 = Ref::zeros(h.sizes, x.dtype), c2 = Ref::zeros(h.sizes, x.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> gi = affine(x, r, w_ih, b_ih), gh = affine(h, r, w_hh, b_hh);
    for (int64_t j = 0; j < H; ++j) {
      const auto at = [&](const std::vector<double>& g, int64_t k) {
        return g[static_cast<size_t>(k * H + j)];
      };
      const size_t o = static_cast<size_t>(r * H + j);
      const double hv = h.v[o];
      switch (cell) {
        case Cell::Tanh:
          h2.v[o] = std::tanh(at(gi, 0) + at(gh, 0));
          break;
        case Cell::Relu:
          h2.v[o] = std::max(0.0, at(gi, 0) + at(gh, 0));
          break;
        case Cell::Lstm: {
          const double i = sigmoid_ref(at(gi, 0) + at(gh, 0)),
                       f = sigmoid_ref(at(gi, 1) + at(gh, 1));
          const double g = std::tanh(at(gi, 2) + at(gh, 2)),
                       out = sigmoid_ref(at(gi, 3) + at(gh, 3));
          c2.v[o] = f * in[2].v[o] + i * g;
          h2.v[o] = out * std::tanh(c2.v[o]);
          break;
        }
        case Cell::Gru: {
          const double rr = sigmoid_ref(at(gi, 0) + at(gh, 0)),
                       z = sigmoid_ref(at(gi, 1) + at(gh, 1));
          const double n = std::tanh(at(gi, 2) + rr * at(gh, 2));
          h2.v[o] = (1 - z) * n + z * hv;
          break;
        }
      }
    }
  }
  return lstm ? std::vector<Ref>{h2, c2} : std::vector<Ref>{h2};
}

const bool registered = [] {
  const std::pair<Cell, const char*> cells[] = {{Cell::Tanh, "rnn_tanh_cell"},
                                                {Cell::Relu, "rnn_relu_cell"},
                                                {Cell::Lstm, "lstm_cell"},
                                                {Cell::Gru, "gru_cell"}};
  for (const auto& [cell, name] : cells) {
    const int64_t G = gates_of(cell);
    const bool lstm = cell == Cell::Lstm;
    RegisterOpInfo({
        .name = name,
        .covers = {"linear", "sigmoid", "tanh"},
        .dtypes = kFloatDTypes,
        .samples =
            [=](DType dt) {
              std::vector<Sample> out;
              for (bool batched : {true, false}) {
                auto rows = [&](int64_t n) {
                  return batched ? std::vector<int64_t>{kBatch, n} : std::vector<int64_t>{n};
                };
                std::vector<Tensor> in = {mk(rows(kInput), dt, 1), mk(rows(kHidden), dt, 2)};
                if (lstm) in.push_back(mk(rows(kHidden), dt, 3));
                in.push_back(mk({G * kHidden, kInput}, dt, 4, 0.5));
                in.push_back(mk({G * kHidden, kHidden}, dt, 5, 0.5));
                in.push_back(mk({G * kHidden}, dt, 6, 0.5));
                in.push_back(mk({G * kHidden}, dt, 7, 0.5));
                out.push_back({batched ? "batched" : "unbatched", in});
              }
              return out;
            },
        .fn =
            [=](const std::vector<Tensor>& in) {
              switch (cell) {
                case Cell::Tanh:
                  return std::vector<Tensor>{
                      rnn_tanh_cell(in[0], in[1], in[2], in[3], in[4], in[5])};
                case Cell::Relu:
                  return std::vector<Tensor>{
                      rnn_relu_cell(in[0], in[1], in[2], in[3], in[4], in[5])};
                case Cell::Lstm: {
                  auto [h, c] = lstm_cell(in[0], in[1], in[2], in[3], in[4], in[5], in[6]);
                  return std::vector<Tensor>{h, c};
                }
                default:
                  return std::vector<Tensor>{gru_cell(in[0], in[1], in[2], in[3], in[4], in[5])};
              }
            },
        .ref = [=](const std::vector<Ref>& in) { return reference(cell, in); },
        .rtol32 = 1e-5,
        .atol32 = 1e-5,
        .errors = {expect_error<ShapeError>(
                       "features", "has 3 features but w_ih",
                       [] {
                         gru_cell(ones({2, 3}), ones({2, 4}), ones({12, 5}), ones({12, 4}));
                       }),
                   expect_error<ShapeError>(
                       "weights", "expected w_ih [4 * hidden, input]",
                       [] {
                         lstm_cell(ones({5}), ones({4}), ones({4}), ones({12, 5}), ones({12, 4}));
                       }),
                   expect_error<ShapeError>(
                       "state", "expected a hidden state [2, 4]",
                       [] {
                         rnn_tanh_cell(ones({2, 5}), ones({3, 4}), ones({4, 5}), ones({4, 4}));
                       })},
        .differentiable = true,
    });
  }
  return true;
}();

}  // namespace
}  // namespace kiln::testing
