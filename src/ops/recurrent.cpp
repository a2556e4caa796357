// The recurrent cells (torch.rnn_tanh_cell, rnn_relu_cell, lstm_cell, gru_cell) as composites:
// the projections are products (linear), the gates pointwise ops that inductor fuses.
#include "ops/recurrent.h"

#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"

namespace kiln {

namespace {

// Checks a cell's operands: input [B, I] or [I], hx (and cx) [B, H] or [H], w_ih [G H, I],
// w_hh [G H, H], biases [G H], one floating dtype.
void check_cell(const char* op, int64_t gates, const Tensor& input, const Tensor& hx,
                const Tensor& w_ih, const Tensor& w_hh, const std::optional<Tensor>& b_ih,
                const std::optional<Tensor>& b_hh) {
  KILN_CHECK(input.dim() == 1 || input.dim() == 2, ShapeError, op,
             ": expected an input [batch, input_size] or [input_size], got ", input.shape_str());
  KILN_CHECK(is_floating(input.dtype()), DTypeError, op, ": expected a floating input, got ",
             input.dtype());
  KILN_CHECK(w_ih.dim() == 2 && w_hh.dim() == 2 && w_hh.size(1) > 0 &&
                 w_ih.size(0) == gates * w_hh.size(1) && w_hh.size(0) == w_ih.size(0),
             ShapeError, op, ": expected w_ih [", gates, " * hidden, input] and w_hh [", gates,
             " * hidden, hidden], got ", w_ih.shape_str(), " and ", w_hh.shape_str());
  const int64_t hidden = w_hh.size(1);
  KILN_CHECK(input.size(-1) == w_ih.size(1), ShapeError, op, ": the input ", input.shape_str(),
             " has ", input.size(-1), " features but w_ih ", w_ih.shape_str(), " expects ",
             w_ih.size(1));
  KILN_CHECK(hx.dim() == input.dim() && hx.size(-1) == hidden &&
                 (input.dim() == 1 || hx.size(0) == input.size(0)),
             ShapeError, op, ": expected a hidden state ",
             input.dim() == 2 ? "[" + std::to_string(input.size(0)) + ", " : "[", hidden, "], got ",
             hx.shape_str());
  for (const std::optional<Tensor>* b : {&b_ih, &b_hh})
    KILN_CHECK(!*b || ((*b)->dim() == 1 && (*b)->size(0) == gates * hidden), ShapeError, op,
               ": expected biases [", gates * hidden, "], got ", (*b)->shape_str());
  for (const Tensor* t : {&hx, &w_ih, &w_hh})
    KILN_CHECK(t->dtype() == input.dtype(), DTypeError, op, ": the input is ", input.dtype(),
               " but a weight or state is ", t->dtype());
}

}  // namespace

namespace ops {

Tensor rnn_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh,
                const std::optional<Tensor>& b_hh, bool use_relu) {
  const Tensor pre = gi + linear(h, w_hh, b_hh);
  return use_relu ? relu(pre) : tanh(pre);
}

std::pair<Tensor, Tensor> lstm_step(const Tensor& gi, const Tensor& h, const Tensor& c,
                                    const Tensor& w_hh, const std::optional<Tensor>& b_hh) {
  const Tensor gates = gi + linear(h, w_hh, b_hh);
  const int64_t hidden = w_hh.size(1);
  const Tensor i = sigmoid(gates.narrow(-1, 0, hidden));
  const Tensor f = sigmoid(gates.narrow(-1, hidden, hidden));
  const Tensor g = tanh(gates.narrow(-1, 2 * hidden, hidden));
  const Tensor o = sigmoid(gates.narrow(-1, 3 * hidden, hidden));
  const Tensor c2 = f * c + i * g;
  return {o * tanh(c2), c2};
}

Tensor gru_step(const Tensor& gi, const Tensor& h, const Tensor& w_hh,
                const std::optional<Tensor>& b_hh) {
  const Tensor gh = linear(h, w_hh, b_hh);
  const int64_t hidden = w_hh.size(1);
  auto part = [&](const Tensor& t, int64_t k) { return t.narrow(-1, k * hidden, hidden); };
  const Tensor r = sigmoid(part(gi, 0) + part(gh, 0));
  const Tensor z = sigmoid(part(gi, 1) + part(gh, 1));
  const Tensor n = tanh(part(gi, 2) + r * part(gh, 2));
  return n + z * (h - n);
}

}  // namespace ops

Tensor rnn_tanh_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh) {
  check_cell("rnn_tanh_cell", 1, input, hx, w_ih, w_hh, b_ih, b_hh);
  return ops::rnn_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh, false);
}

Tensor rnn_relu_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                     const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh) {
  check_cell("rnn_relu_cell", 1, input, hx, w_ih, w_hh, b_ih, b_hh);
  return ops::rnn_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh, true);
}

std::pair<Tensor, Tensor> lstm_cell(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                    const Tensor& w_ih, const Tensor& w_hh,
                                    const std::optional<Tensor>& b_ih,
                                    const std::optional<Tensor>& b_hh) {
  check_cell("lstm_cell", 4, input, hx, w_ih, w_hh, b_ih, b_hh);
  KILN_CHECK(cx.sizes() == hx.sizes() && cx.dtype() == hx.dtype(), ShapeError,
             "lstm_cell: the cell state ", cx.shape_str(), " differs from the hidden state ",
             hx.shape_str());
  return ops::lstm_step(linear(input, w_ih, b_ih), hx, cx, w_hh, b_hh);
}

Tensor gru_cell(const Tensor& input, const Tensor& hx, const Tensor& w_ih, const Tensor& w_hh,
                const std::optional<Tensor>& b_ih, const std::optional<Tensor>& b_hh) {
  check_cell("gru_cell", 3, input, hx, w_ih, w_hh, b_ih, b_hh);
  return ops::gru_step(linear(input, w_ih, b_ih), hx, w_hh, b_hh);
}

}  // namespace kiln
