// Recurrent layers (torch.nn.RNN, LSTM, GRU and their cells) with PyTorch's arguments,
// parameter names (weight_ih_l0, bias_hh_l1_reverse, ...), gate order and initialisation
// (every parameter from U(-1/sqrt(hidden), 1/sqrt(hidden))). forward returns what LibTorch's
// does: (output, h_n), and for LSTM (output, (h_n, c_n)). Under kiln::compile a layer over a
// sequence is one graph, its time loop unrolled (the sequence length is part of the graph).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  // Input and output [batch, seq, feature] instead of [seq, batch, feature].
  bool batch_first = false;
  // Dropout on the outputs of every layer but the last, in training mode.
  double dropout = 0;
  bool bidirectional = false;
  // RNN only: "tanh" or "relu".
  std::string nonlinearity = "tanh";
  DType dtype = kDefaultFloat;
};

// The layers' shared machinery: mode "RNN_TANH", "RNN_RELU", "LSTM" or "GRU".
class RNNBase : public Module {
 public:
  int64_t input_size, hidden_size;
  RNNOptions options;
  // The parameters of layer l, direction d (0 forward, 1 reverse).
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  const Weights& weights(int64_t layer, int64_t direction) const;

 protected:
  RNNBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size,
          RNNOptions options);
  // Runs the layers over input [T, B, I] / [B, T, I] (batch_first) / unbatched [T, I], from h0
  // (and c0 for LSTM) [layers * directions, B, H] (or unbatched [layers * directions, H]),
  // zeros when undefined. Returns (output, h_n, c_n); c_n undefined but for LSTM.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0,
                                         const Tensor& c0) const;

 private:
  int64_t gates_;
  std::vector<Weights> weights_;  // layer-major, then direction
};

// torch.nn.RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu).
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = {});
};
// torch.nn.LSTM: forward returns (output, (h_n, c_n)).
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt);
};
// torch.nn.GRU.
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = {});
};

// The cells (torch.nn.RNNCell, LSTMCell, GRUCell): one step; parameters weight_ih, weight_hh,
// bias_ih, bias_hh. An undefined state is zeros.
class RNNCell : public Module {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          std::string nonlinearity = "tanh", DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  std::string nonlinearity;
};
class LSTMCell : public Module {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true, DType dtype = kDefaultFloat);
  // Returns (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     std::optional<std::tuple<Tensor, Tensor>> hx = std::nullopt);
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};
class GRUCell : public Module {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

}  // namespace kiln::nn
