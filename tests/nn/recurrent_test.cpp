// RNN, LSTM, GRU and their cells: PyTorch's parameter names and shapes, outputs equal to the
// cells stepped by hand (layers, directions, batch_first, unbatched inputs, initial states),
// argument errors, and an LSTM language-model step compiled equal to eager in one graph.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::nn {
namespace {

bool near(const Tensor& a, const Tensor& b, double tol) { return allclose(a, b, tol, tol); }

std::vector<std::string> names(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(LSTM, PyTorchsParameterNamesShapesAndInitialisation) {
  manual_seed(1);
  LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true});
  const std::vector<std::string> want = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  EXPECT_EQ(names(lstm), want);
  EXPECT_EQ(lstm.weights(0, 0).w_ih.sizes(), (Shape{16, 3}));
  EXPECT_EQ(lstm.weights(1, 1).w_ih.sizes(), (Shape{16, 8}));  // both directions' outputs
  for (const Tensor& p : lstm.parameters()) EXPECT_LE(amax(abs(p)).item<double>(), 0.5);
  GRU gru(3, 5, {.bias = false});
  EXPECT_EQ(names(gru), (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0"}));
  EXPECT_EQ(gru.weights(0, 0).w_hh.sizes(), (Shape{15, 5}));
  EXPECT_EQ(names(LSTMCell(2, 3)),
            (std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"}));
}

// A 2-layer bidirectional batch_first LSTM against lstm_cell stepped by hand.
TEST(LSTM, EqualsTheCellSteppedByHand) {
  manual_seed(2);
  LSTM lstm(3, 4,
            {.num_layers = 2, .batch_first = true, .bidirectional = true, .dtype = DType::Float64});
  const int64_t B = 2, T = 5, H = 4;
  const Tensor x = randn({B, T, 3}, DType::Float64);
  const Tensor h0 = randn({4, B, H}, DType::Float64), c0 = randn({4, B, H}, DType::Float64);
  auto [out, state] = lstm.forward(x, std::tuple{h0, c0});
  auto [hn, cn] = state;
  ASSERT_EQ(out.sizes(), (Shape{B, T, 2 * H}));
  ASSERT_EQ(hn.sizes(), (Shape{4, B, H}));
  Tensor layer_in = x.transpose(0, 1);  // [T, B, I]
  std::vector<Tensor> want_h, want_c;
  for (int64_t l = 0; l < 2; ++l) {
    std::vector<Tensor> dirs;
    for (int64_t d = 0; d < 2; ++d) {
      const auto& w = lstm.weights(l, d);
      Tensor h = h0[l * 2 + d], c = c0[l * 2 + d];
      std::vector<Tensor> hs(T);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = d == 0 ? i : T - 1 - i;
        std::tie(h, c) = lstm_cell(layer_in[t], h, c, w.w_ih, w.w_hh, w.b_ih, w.b_hh);
        hs[static_cast<size_t>(t)] = h;
      }
      dirs.push_back(stack(hs, 0));
      want_h.push_back(h);
      want_c.push_back(c);
    }
    layer_in = cat(dirs, -1);
  }
  EXPECT_TRUE(near(out, layer_in.transpose(0, 1), 1e-12));
  EXPECT_TRUE(near(hn, stack(want_h, 0), 1e-12));
  EXPECT_TRUE(near(cn, stack(want_c, 0), 1e-12));
}

// float32 layers run on oneDNN's LSTM primitive, float64 ones on the composite time loop: the
// same module in both dtypes gives the same outputs and gradients (bidirectional, two layers,
// with and without biases, from given and from zero states).
TEST(LSTM, Float32OnOneDnnEqualsTheFloat64CompositeForwardAndBackward) {
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with biases" : "without biases");
    manual_seed(7);
    const RNNOptions options{
        .num_layers = 2, .bias = bias, .batch_first = true, .bidirectional = true};
    LSTM fast(3, 5, options);
    RNNOptions wide = options;
    wide.dtype = DType::Float64;
    LSTM exact(3, 5, wide);
    const std::vector<Tensor> from = fast.parameters(), to = exact.parameters();
    ASSERT_EQ(from.size(), to.size());
    {
      NoGradGuard no_grad;
      for (size_t k = 0; k < from.size(); ++k) to[k].copy_(from[k]);
    }
    const Tensor x = randn({2, 6, 3});
    const Tensor h0 = randn({4, 2, 5}), c0 = randn({4, 2, 5});
    const Tensor weights = randn({2, 6, 10});
    for (const bool given_state : {true, false}) {
      SCOPED_TRACE(given_state ? "given state" : "zero state");
      auto run = [&](LSTM& lstm, DType dt) {
        const Tensor xi = x.to(dt).detach().requires_grad_();
        auto [out, state] =
            given_state ? lstm.forward(xi, std::tuple{h0.to(dt), c0.to(dt)}) : lstm.forward(xi);
        auto [hn, cn] = state;
        for (Tensor p : lstm.parameters()) p.set_grad(Tensor());
        ((out * weights.to(dt)).sum() + (hn * hn).sum() + cn.sum()).backward();
        std::vector<Tensor> got = {out, hn, cn, xi.grad()};
        for (const Tensor& p : lstm.parameters()) got.push_back(p.grad());
        return got;
      };
      const std::vector<Tensor> a = run(fast, DType::Float32), b = run(exact, DType::Float64);
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        ASSERT_TRUE(a[k].defined() && b[k].defined()) << "result " << k;
        EXPECT_TRUE(allclose(a[k].to(DType::Float64), b[k], 1e-4, 1e-5)) << "result " << k;
      }
    }
  }
  // A second derivative through the layer is refused, naming the op.
  LSTM lstm(2, 3);
  const Tensor x = randn({4, 1, 2}).requires_grad_();
  const Tensor y = std::get<0>(lstm.forward(x)).sum();
  const Tensor g = grad({y}, {x}, {}, true, true)[0];
  try {
    g.sum().backward();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("onednn_lstm_layer_backward"), std::string::npos)
        << e.what();
  }
}

TEST(GRU, AndRNNStepTheirCellsOnUnbatchedAndBatchedInputs) {
  manual_seed(3);
  GRU gru(2, 3, {.dtype = DType::Float64});
  const Tensor x = randn({6, 2}, DType::Float64);  // unbatched [T, I]
  auto [out, hn] = gru.forward(x);
  ASSERT_EQ(out.sizes(), (Shape{6, 3}));
  ASSERT_EQ(hn.sizes(), (Shape{1, 3}));
  const auto& w = gru.weights(0, 0);
  Tensor h = zeros({3}, DType::Float64);
  for (int64_t t = 0; t < 6; ++t) {
    h = gru_cell(x[t], h, w.w_ih, w.w_hh, w.b_ih, w.b_hh);
    EXPECT_TRUE(near(out[t], h, 1e-12)) << t;
  }
  EXPECT_TRUE(near(hn[0], h, 1e-12));
  RNN rnn(2, 3, {.num_layers = 2, .nonlinearity = "relu"});
  auto [rout, rh] = rnn.forward(randn({4, 5, 2}));
  EXPECT_EQ(rout.sizes(), (Shape{4, 5, 3}));
  EXPECT_EQ(rh.sizes(), (Shape{2, 5, 3}));
  EXPECT_GE(amin(rout).item<double>(), 0.0);  // relu
  RNNCell cell(2, 3);
  EXPECT_TRUE(near(cell.forward(ones({2})),
                   rnn_tanh_cell(ones({2}), zeros({3}), cell.weight_ih, cell.weight_hh,
                                 cell.bias_ih, cell.bias_hh),
                   1e-6));
}

TEST(LSTM, BadInputsNameTheLayerAndTheShape) {
  LSTM lstm(3, 4);
  try {
    lstm.forward(ones({5, 2, 6}));
    ADD_FAILURE() << "expected an error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "LSTM: the input [5, 2, 6] has 6 features, expected input_size 3");
  }
  EXPECT_THROW(lstm.forward(ones({5, 2, 3}), std::tuple{ones({2, 2, 4}), ones({1, 2, 4})}),
               ShapeError);
  EXPECT_THROW(RNN(3, 4, {.nonlinearity = "sigmoid"}), ValueError);
  EXPECT_THROW(GRU(0, 4), ValueError);
}

// A word-level language model's step (embedding, 2-layer LSTM with dropout off, linear,
// cross-entropy, SGD) compiled with inductor: the same losses as eagerly, one graph.
TEST(LSTM, ALanguageModelStepCompilesToOneGraphEqualToEager) {
  struct Model {
    Embedding embed{20, 8};
    LSTM lstm{8, 12, {.num_layers = 2}};
    Linear head{12, 20};
    std::vector<Tensor> parameters() {
      std::vector<Tensor> ps = embed.parameters();
      for (const Module* m : {static_cast<const Module*>(&lstm), static_cast<const Module*>(&head)})
        for (const Tensor& p : m->parameters()) ps.push_back(p);
      return ps;
    }
  };
  auto make = [] {
    manual_seed(4);
    return std::make_unique<Model>();
  };
  auto eager = make(), compiled = make();
  optim::SGD eager_opt(eager->parameters(), {.lr = 0.5}),
      compiled_opt(compiled->parameters(), {.lr = 0.5});
  auto step = [](Model& m, optim::SGD& opt, const Tensor& tokens, const Tensor& targets) {
    opt.zero_grad();
    auto [out, state] = m.lstm.forward(m.embed.forward(tokens));
    Tensor loss = cross_entropy(m.head.forward(out).reshape({-1, 20}), targets.reshape({-1}));
    loss.backward();
    opt.step();
    return loss;
  };
  CompileProfiler prof;
  auto f =
      compile([&](const Tensor& tokens,
                  const Tensor& targets) { return step(*compiled, compiled_opt, tokens, targets); },
              {.backend = std::string("inductor"), .name = "lm_step"});
  manual_seed(5);
  for (int i = 0; i < 3; ++i) {
    const Tensor tokens = randint(0, 20, {7, 3}), targets = randint(0, 20, {7, 3});
    const Tensor want = step(*eager, eager_opt, tokens, targets), got = f(tokens, targets);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << i;
  }
  EXPECT_EQ(prof.stats()["lm_step"].graphs, 1);
  EXPECT_EQ(prof.stats()["lm_step"].graph_breaks, 0);
}

}  // namespace
}  // namespace kiln::nn
