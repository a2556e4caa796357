// RNN, LSTM, GRU and their cells: the input's projection for a whole sequence in one product,
// then one step per position (ops/recurrent.h).
#include "kiln/nn/recurrent.h"

#include <cmath>
#include <functional>

#include "kiln/core/random.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "ops/lstm_onednn.h"
#include "ops/recurrent.h"

namespace kiln::nn {

namespace {

// U(-1/sqrt(hidden), 1/sqrt(hidden)), every recurrent parameter's initialisation in PyTorch.
Tensor recurrent_init(IntList sizes, int64_t hidden, DType dtype) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  Tensor t = empty(sizes, dtype);
  uniform_(t, -bound, bound);
  return t;
}

std::optional<Tensor> maybe(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

void check_sizes(const char* name, int64_t input_size, int64_t hidden_size) {
  KILN_CHECK(input_size > 0 && hidden_size > 0, ValueError, name,
             ": input_size and hidden_size must be positive, got ", input_size, " and ",
             hidden_size);
}

}  // namespace

RNNBase::RNNBase(const char* name, int64_t gates, int64_t input_size_, int64_t hidden_size_,
                 RNNOptions options_)
    : Module(name),
      input_size(input_size_),
      hidden_size(hidden_size_),
      options(std::move(options_)),
      gates_(gates) {
  check_sizes(name, input_size, hidden_size);
  KILN_CHECK(options.num_layers > 0, ValueError, name, ": num_layers must be positive, got ",
             options.num_layers);
  KILN_CHECK(options.dropout >= 0 && options.dropout <= 1, ValueError, name,
             ": dropout must be in [0, 1], got ", options.dropout);
  const int64_t directions = options.bidirectional ? 2 : 1;
  for (int64_t l = 0; l < options.num_layers; ++l)
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? input_size : hidden_size * directions;
      Weights w;
      w.w_ih = register_parameter("weight_ih" + suffix, recurrent_init({gates * hidden_size, in},
                                                                       hidden_size, options.dtype));
      w.w_hh = register_parameter(
          "weight_hh" + suffix,
          recurrent_init({gates * hidden_size, hidden_size}, hidden_size, options.dtype));
      if (options.bias) {
        w.b_ih = register_parameter(
            "bias_ih" + suffix, recurrent_init({gates * hidden_size}, hidden_size, options.dtype));
        w.b_hh = register_parameter(
            "bias_hh" + suffix, recurrent_init({gates * hidden_size}, hidden_size, options.dtype));
      }
      weights_.push_back(w);
    }
}

const RNNBase::Weights& RNNBase::weights(int64_t layer, int64_t direction) const {
  const int64_t directions = options.bidirectional ? 2 : 1;
  KILN_CHECK(layer >= 0 && layer < options.num_layers && direction >= 0 && direction < directions,
             IndexError, type_name(), ": no layer ", layer, " direction ", direction);
  return weights_[static_cast<size_t>(layer * directions + direction)];
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& input, const Tensor& h0,
                                                const Tensor& c0) const {
  const std::string& name = type_name();
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, name, ": expected an input [",
             options.batch_first ? "batch, seq" : "seq, batch", ", ", input_size,
             "] or unbatched [seq, ", input_size, "], got ", input.shape_str());
  KILN_CHECK(input.size(-1) == input_size, ShapeError, name, ": the input ", input.shape_str(),
             " has ", input.size(-1), " features, expected input_size ", input_size);
  const bool unbatched = input.dim() == 2;
  // [T, B, I] from here on.
  Tensor x = unbatched ? input.unsqueeze(1) : options.batch_first ? input.transpose(0, 1) : input;
  const int64_t steps = x.size(0), batch = x.size(1);
  KILN_CHECK(steps > 0, ShapeError, name, ": the input sequence is empty (", input.shape_str(),
             ")");
  const int64_t directions = options.bidirectional ? 2 : 1;
  const int64_t layers = options.num_layers;
  const Shape state_shape = unbatched ? Shape{layers * directions, hidden_size}
                                      : Shape{layers * directions, batch, hidden_size};
  auto initial = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({layers * directions, batch, hidden_size}, x.dtype());
    KILN_CHECK(s.sizes() == state_shape, ShapeError, name, ": expected ", what, " of shape ",
               IntList(state_shape), ", got ", s.shape_str());
    return unbatched ? s.unsqueeze(1) : s;
  };
  const bool lstm = gates_ == 4;
  const Tensor h_init = initial(h0, "h_0"), c_init = lstm ? initial(c0, "c_0") : Tensor();
  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < directions; ++d) {
      const Weights& w = weights(l, d);
      const int64_t k = l * directions + d;
      Tensor h = h_init.select(0, k), c = lstm ? c_init.select(0, k) : Tensor();
      if (lstm && ops::onednn_lstm(layer_input.dtype())) {
        // One oneDNN primitive for the layer (the loop below is the composite it replaces).
        const Tensor bias =
            w.b_ih.defined() ? w.b_ih + w.b_hh : zeros({gates_ * hidden_size}, layer_input.dtype());
        auto [y, h_last, c_last] = ops::onednn_lstm_layer(
            layer_input, h.contiguous(), c.contiguous(), w.w_ih, w.w_hh, bias, d == 1);
        outputs.push_back(y);
        h_n.push_back(h_last);
        c_n.push_back(c_last);
        continue;
      }
      const Tensor projected = linear(layer_input, w.w_ih, maybe(w.b_ih));  // [T, B, G H]
      std::vector<Tensor> hs(static_cast<size_t>(steps));
      for (int64_t i = 0; i < steps; ++i) {
        const int64_t t = d == 0 ? i : steps - 1 - i;
        const Tensor gi = projected.select(0, t);
        if (lstm) {
          std::tie(h, c) = ops::lstm_step(gi, h, c, w.w_hh, maybe(w.b_hh));
        } else if (gates_ == 3) {
          h = ops::gru_step(gi, h, w.w_hh, maybe(w.b_hh));
        } else {
          h = ops::rnn_step(gi, h, w.w_hh, maybe(w.b_hh), options.nonlinearity == "relu");
        }
        hs[static_cast<size_t>(t)] = h;
      }
      outputs.push_back(stack(hs, 0));
      h_n.push_back(h);
      if (lstm) c_n.push_back(c);
    }
    layer_input = directions == 2 ? cat(outputs, -1) : outputs[0];
    if (options.dropout > 0 && is_training() && l + 1 < layers)
      layer_input = dropout(layer_input, options.dropout, true);
  }
  Tensor output = layer_input, hn = stack(h_n, 0), cn = lstm ? stack(c_n, 0) : Tensor();
  if (unbatched) {
    output = output.squeeze(1);
    hn = hn.squeeze(1);
    if (lstm) cn = cn.squeeze(1);
  } else if (options.batch_first) {
    output = output.transpose(0, 1);
  }
  return {output, hn, cn};
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("RNN", 1, input_size, hidden_size, options) {
  KILN_CHECK(this->options.nonlinearity == "tanh" || this->options.nonlinearity == "relu",
             ValueError, "RNN: nonlinearity must be \"tanh\" or \"relu\", got \"",
             this->options.nonlinearity, "\"");
}
std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& h0) {
  auto [out, hn, cn] = run(input, h0, Tensor());
  return {out, hn};
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("LSTM", 4, input_size, hidden_size, options) {}
std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(
    const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  auto [out, hn, cn] =
      hx ? run(input, std::get<0>(*hx), std::get<1>(*hx)) : run(input, Tensor(), Tensor());
  return {out, {hn, cn}};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("GRU", 3, input_size, hidden_size, options) {}
std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0) {
  auto [out, hn, cn] = run(input, h0, Tensor());
  return {out, hn};
}

namespace {
// The cells' parameters, registered in PyTorch's order.
void make_cell(Module& m, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias,
               DType dtype, Tensor& w_ih, Tensor& w_hh, Tensor& b_ih, Tensor& b_hh,
               const std::function<Tensor(std::string, Tensor)>& reg) {
  check_sizes(m.type_name().c_str(), input_size, hidden_size);
  w_ih = reg("weight_ih", recurrent_init({gates * hidden_size, input_size}, hidden_size, dtype));
  w_hh = reg("weight_hh", recurrent_init({gates * hidden_size, hidden_size}, hidden_size, dtype));
  if (bias) {
    b_ih = reg("bias_ih", recurrent_init({gates * hidden_size}, hidden_size, dtype));
    b_hh = reg("bias_hh", recurrent_init({gates * hidden_size}, hidden_size, dtype));
  }
}
// A zero state shaped for `input` ([B, I] or [I]) when `hx` is undefined.
Tensor state_for(const Tensor& input, const Tensor& hx, int64_t hidden) {
  if (hx.defined()) return hx;
  return input.dim() == 2 ? zeros({input.size(0), hidden}, input.dtype())
                          : zeros({hidden}, input.dtype());
}
}  // namespace

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, std::string nonlinearity_,
                 DType dtype)
    : Module("RNNCell"), nonlinearity(std::move(nonlinearity_)) {
  KILN_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", ValueError,
             "RNNCell: nonlinearity must be \"tanh\" or \"relu\", got \"", nonlinearity, "\"");
  make_cell(*this, 1, input_size, hidden_size, bias, dtype, weight_ih, weight_hh, bias_ih, bias_hh,
            [this](std::string n, Tensor t) { return register_parameter(std::move(n), t); });
}
Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  const Tensor h = state_for(input, hx, weight_hh.size(1));
  return nonlinearity == "relu"
             ? rnn_relu_cell(input, h, weight_ih, weight_hh, maybe(bias_ih), maybe(bias_hh))
             : rnn_tanh_cell(input, h, weight_ih, weight_hh, maybe(bias_ih), maybe(bias_hh));
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias, DType dtype)
    : Module("LSTMCell") {
  make_cell(*this, 4, input_size, hidden_size, bias, dtype, weight_ih, weight_hh, bias_ih, bias_hh,
            [this](std::string n, Tensor t) { return register_parameter(std::move(n), t); });
}
std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input,
                                             std::optional<std::tuple<Tensor, Tensor>> hx) {
  const int64_t hidden = weight_hh.size(1);
  const Tensor h = state_for(input, hx ? std::get<0>(*hx) : Tensor(), hidden);
  const Tensor c = state_for(input, hx ? std::get<1>(*hx) : Tensor(), hidden);
  auto [h2, c2] = lstm_cell(input, h, c, weight_ih, weight_hh, maybe(bias_ih), maybe(bias_hh));
  return {h2, c2};
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias, DType dtype)
    : Module("GRUCell") {
  make_cell(*this, 3, input_size, hidden_size, bias, dtype, weight_ih, weight_hh, bias_ih, bias_hh,
            [this](std::string n, Tensor t) { return register_parameter(std::move(n), t); });
}
Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  return gru_cell(input, state_for(input, hx, weight_hh.size(1)), weight_ih, weight_hh,
                  maybe(bias_ih), maybe(bias_hh));
}

}  // namespace kiln::nn
