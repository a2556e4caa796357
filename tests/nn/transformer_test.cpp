// MultiheadAttention and the transformer encoder: PyTorch's parameter names and
// initialisation, outputs against the attention written head by head (with bool, float, causal
// and key-padding masks, averaged and per-head weights, the fused path), post- and pre-norm
// layers against their formulas, shared initial weights across an encoder's layers, and a
// compiled training step equal to eager in one graph.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::nn {
namespace {

bool near(const Tensor& a, const Tensor& b, double tol) { return allclose(a, b, tol, tol); }

// Attention head by head for one batch element: x_q [L, E], x_kv [S, E], an additive mask
// [L, S] (or undefined). Returns (output [L, E], weights averaged over heads [L, S]).
std::pair<Tensor, Tensor> by_hand(const MultiheadAttention& mha, const Tensor& xq, const Tensor& xk,
                                  const Tensor& xv, const Tensor& mask) {
  const int64_t E = mha.embed_dim, H = mha.num_heads, hd = E / H;
  const Tensor w = mha.in_proj_weight, b = mha.in_proj_bias;
  const Tensor q = matmul(xq, w.narrow(0, 0, E).t()) + b.narrow(0, 0, E);
  const Tensor k = matmul(xk, w.narrow(0, E, E).t()) + b.narrow(0, E, E);
  const Tensor v = matmul(xv, w.narrow(0, 2 * E, E).t()) + b.narrow(0, 2 * E, E);
  std::vector<Tensor> heads;
  Tensor weight_sum;
  for (int64_t h = 0; h < H; ++h) {
    Tensor s = matmul(q.narrow(1, h * hd, hd), k.narrow(1, h * hd, hd).t()) /
               std::sqrt(static_cast<double>(hd));
    if (mask.defined()) s = s + mask;
    const Tensor p = softmax(s, 1);
    heads.push_back(matmul(p, v.narrow(1, h * hd, hd)));
    weight_sum = weight_sum.defined() ? weight_sum + p : p;
  }
  const Tensor out = matmul(cat(heads, 1), mha.out_proj->weight.t()) + mha.out_proj->bias;
  return {out, weight_sum / static_cast<double>(H)};
}

TEST(MultiheadAttention, NamesAndInitialisationAsPyTorch) {
  manual_seed(1);
  MultiheadAttention mha(8, 2);
  std::vector<std::string> names;
  for (const auto& [n, t] : mha.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                             "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.sizes(), (Shape{24, 8}));
  // xavier uniform over [24, 8]: bound sqrt(6 / 32).
  EXPECT_LE(amax(abs(mha.in_proj_weight)).item<double>(), std::sqrt(6.0 / 32.0));
  EXPECT_EQ(amax(abs(mha.in_proj_bias)).item<double>(), 0.0);
  EXPECT_EQ(amax(abs(mha.out_proj->bias)).item<double>(), 0.0);
  EXPECT_THROW(MultiheadAttention(10, 3), ValueError);
}

TEST(MultiheadAttention, EqualsAttentionWrittenHeadByHead) {
  manual_seed(2);
  MultiheadAttention mha(6, 3, {.dtype = DType::Float64});
  {
    NoGradGuard no_grad;
    mha.in_proj_bias.copy_(randn({18}, DType::Float64));  // (zeros would hide a wrong slice)
    mha.out_proj->bias.copy_(randn({6}, DType::Float64));
  }
  const int64_t L = 4, S = 5, N = 2;
  const Tensor query = randn({L, N, 6}, DType::Float64), key = randn({S, N, 6}, DType::Float64),
               value = randn({S, N, 6}, DType::Float64);
  Tensor bool_mask = zeros({L, S}, DType::Bool);
  {
    NoGradGuard no_grad;
    bool_mask = rand({L, S}) > 0.7;
    bool_mask.select(1, 0).fill_(false);  // every query keeps a key
  }
  const Tensor padding = tensor(std::vector<int64_t>{0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {N, S}) > 0;
  auto [out, weights] = mha.forward(query, key, value, padding, true, bool_mask);
  ASSERT_EQ(out.sizes(), (Shape{L, N, 6}));
  ASSERT_EQ(weights.sizes(), (Shape{N, L, S}));
  const double lowest = -std::numeric_limits<double>::infinity();
  for (int64_t n = 0; n < N; ++n) {
    Tensor mask = masked_fill(zeros({L, S}, DType::Float64), bool_mask, lowest);
    mask = masked_fill(mask, padding[n].unsqueeze(0).expand({L, S}), lowest);
    auto [want, want_w] =
        by_hand(mha, query.select(1, n), key.select(1, n), value.select(1, n), mask);
    EXPECT_TRUE(near(out.select(1, n), want, 1e-12)) << n;
    EXPECT_TRUE(near(weights[n], want_w, 1e-12)) << n;
  }
  // The fused path (no weights) and a float mask give the same output.
  const Tensor float_mask = masked_fill(zeros({L, S}, DType::Float64), bool_mask, lowest);
  auto [fused, none] = mha.forward(query, key, value, padding, false, float_mask);
  EXPECT_FALSE(none.defined());
  EXPECT_TRUE(near(fused, out, 1e-12));
  // Causal self-attention, batch_first, per-head weights.
  MultiheadAttention bf(6, 3, {.batch_first = true, .dtype = DType::Float64});
  const Tensor x = randn({N, L, 6}, DType::Float64);
  auto [y, w] = bf.forward(x, x, x, {}, true, {}, false, true);
  ASSERT_EQ(w.sizes(), (Shape{N, 3, L, L}));
  EXPECT_EQ(amax(triu(w, 1)).item<double>(), 0.0);  // no query sees a later key
  const Tensor causal =
      masked_fill(zeros({L, L}, DType::Float64), triu(ones({L, L}, DType::Bool), 1), lowest);
  EXPECT_TRUE(near(y[1], by_hand(bf, x[1], x[1], x[1], causal).first, 1e-12));
  EXPECT_THROW(mha.forward(query, key, value, {}, true, ones({L, L})), ShapeError);
}

// kdim / vdim (separate projections), add_bias_kv (a learnt key and value appended) and
// add_zero_attn (a zero key and value per head appended), against the attention by hand.
TEST(MultiheadAttention, KdimVdimBiasKvAndZeroAttnAsPyTorch) {
  manual_seed(5);
  MultiheadAttention mha(
      6, 2,
      {.dtype = DType::Float64, .add_bias_kv = true, .add_zero_attn = true, .kdim = 4, .vdim = 3});
  std::vector<std::string> names;
  for (const auto& [n, t] : mha.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                             "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
                                             "out_proj.bias"}));
  EXPECT_FALSE(mha.in_proj_weight.defined());
  EXPECT_EQ(mha.k_proj_weight.sizes(), (Shape{6, 4}));
  EXPECT_EQ(mha.bias_v.sizes(), (Shape{1, 1, 6}));
  {
    NoGradGuard no_grad;
    mha.in_proj_bias.copy_(randn({18}, DType::Float64));
  }
  const int64_t L = 3, S = 4, N = 2, E = 6, H = 2, hd = 3;
  const Tensor query = randn({L, N, E}, DType::Float64), key = randn({S, N, 4}, DType::Float64),
               value = randn({S, N, 3}, DType::Float64);
  const Tensor padding = tensor(std::vector<int64_t>{0, 0, 1, 0, 0, 0, 0, 0}, {N, S}) > 0;
  auto [out, weights] = mha.forward(query, key, value, padding, true);
  ASSERT_EQ(weights.sizes(), (Shape{N, L, S + 2}));
  const Tensor b = mha.in_proj_bias;
  for (int64_t n = 0; n < N; ++n) {
    const Tensor q = matmul(query.select(1, n), mha.q_proj_weight.t()) + b.narrow(0, 0, E);
    const Tensor k = cat({matmul(key.select(1, n), mha.k_proj_weight.t()) + b.narrow(0, E, E),
                          mha.bias_k.reshape({1, E})});
    const Tensor v = cat({matmul(value.select(1, n), mha.v_proj_weight.t()) + b.narrow(0, 2 * E, E),
                          mha.bias_v.reshape({1, E})});
    // The padded key masked; the appended bias and zero keys seen by every query.
    Tensor mask = zeros({L, S + 2}, DType::Float64);
    for (int64_t s = 0; s < S; ++s)
      if (padding[n][s].item<bool>())
        mask.select(1, s).fill_(-std::numeric_limits<double>::infinity());
    std::vector<Tensor> heads;
    Tensor weight_sum;
    for (int64_t h = 0; h < H; ++h) {
      const Tensor kh = cat({k.narrow(1, h * hd, hd), zeros({1, hd}, DType::Float64)});
      const Tensor vh = cat({v.narrow(1, h * hd, hd), zeros({1, hd}, DType::Float64)});
      const Tensor p = softmax(matmul(q.narrow(1, h * hd, hd), kh.t()) / std::sqrt(3.0) + mask, 1);
      heads.push_back(matmul(p, vh));
      weight_sum = weight_sum.defined() ? weight_sum + p : p;
    }
    const Tensor want = matmul(cat(heads, 1), mha.out_proj->weight.t()) + mha.out_proj->bias;
    EXPECT_TRUE(near(out.select(1, n), want, 1e-12)) << n;
    EXPECT_TRUE(near(weights[n], weight_sum / 2.0, 1e-12)) << n;
  }
  auto [fused, none] = mha.forward(query, key, value, padding, false);
  EXPECT_TRUE(near(fused, out, 1e-12));
  EXPECT_THROW(mha.forward(query, query, value), ShapeError);  // a key of embed_dim, not kdim
}

TEST(TransformerEncoderLayer, PostAndPreNormFollowTheirFormulas) {
  for (bool norm_first : {false, true}) {
    manual_seed(3);
    TransformerEncoderLayer layer(8, 2,
                                  {.dim_feedforward = 16,
                                   .dropout = 0.0,
                                   .activation = "gelu",
                                   .norm_first = norm_first,
                                   .dtype = DType::Float64});
    const Tensor x = randn({5, 3, 8}, DType::Float64);
    auto sa = [&](const Tensor& t) { return std::get<0>(layer.self_attn->forward(t, t, t)); };
    auto ff = [&](const Tensor& t) {
      return layer.linear2->forward(gelu(layer.linear1->forward(t)));
    };
    Tensor want;
    if (norm_first) {
      const Tensor h = x + sa(layer.norm1->forward(x));
      want = h + ff(layer.norm2->forward(h));
    } else {
      const Tensor h = layer.norm1->forward(x + sa(x));
      want = layer.norm2->forward(h + ff(h));
    }
    EXPECT_TRUE(near(layer.forward(x), want, 1e-12)) << norm_first;
  }
  std::vector<std::string> children;
  TransformerEncoderLayer layer(4, 2);
  for (const auto& [n, m] : layer.named_children()) children.push_back(n);
  EXPECT_EQ(children, (std::vector<std::string>{"self_attn", "linear1", "dropout", "linear2",
                                                "norm1", "norm2", "dropout1", "dropout2"}));
}

// An encoder's layers start equal (PyTorch deep-copies one layer); a training step through it
// compiles to one graph with eager's loss.
TEST(TransformerEncoder, LayersStartEqualAndAStepCompilesToOneGraph) {
  auto make = [] {
    manual_seed(4);
    return std::make_shared<TransformerEncoder>(
        8, 2, 2, TransformerEncoderLayerOptions{.dim_feedforward = 16, .dropout = 0.0}, true);
  };
  auto eager = make(), compiled = make();
  EXPECT_TRUE(near(eager->layers[0]->linear1->weight, eager->layers[1]->linear1->weight, 0));
  EXPECT_NE(eager->norm, nullptr);
  optim::AdamW eager_opt(eager->parameters(), {.lr = 1e-2}),
      compiled_opt(compiled->parameters(), {.lr = 1e-2});
  auto step = [](TransformerEncoder& m, optim::AdamW& opt, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = m.forward(x, {}, {}, /*is_causal=*/true).pow(2).mean();
    loss.backward();
    opt.step();
    return loss;
  };
  CompileProfiler prof;
  auto f = compile([&](const Tensor& x) { return step(*compiled, compiled_opt, x); },
                   {.backend = std::string("inductor"), .name = "encoder_step"});
  manual_seed(5);
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({6, 2, 8});
    const Tensor want = step(*eager, eager_opt, x), got = f(x);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << i;
  }
  EXPECT_EQ(prof.stats()["encoder_step"].graphs, 1);
}

// The decoder layer against its formulas (self-attention, attention to the memory, feed-forward;
// post- and pre-norm), PyTorch's child names, and nn::Transformer as its encoder and decoder.
TEST(TransformerDecoderLayer, PostAndPreNormFollowTheirFormulas) {
  for (bool norm_first : {false, true}) {
    manual_seed(6);
    TransformerDecoderLayer layer(
        8, 2,
        {.dim_feedforward = 16, .dropout = 0.0, .norm_first = norm_first, .dtype = DType::Float64});
    const Tensor tgt = randn({4, 2, 8}, DType::Float64), memory = randn({5, 2, 8}, DType::Float64);
    const Tensor mask = Transformer::generate_square_subsequent_mask(4, DType::Float64);
    auto sa = [&](const Tensor& t) {
      return std::get<0>(layer.self_attn->forward(t, t, t, {}, true, mask));
    };
    auto ca = [&](const Tensor& t) {
      return std::get<0>(layer.multihead_attn->forward(t, memory, memory));
    };
    auto ff = [&](const Tensor& t) {
      return layer.linear2->forward(relu(layer.linear1->forward(t)));
    };
    Tensor want;
    if (norm_first) {
      Tensor h = tgt + sa(layer.norm1->forward(tgt));
      h = h + ca(layer.norm2->forward(h));
      want = h + ff(layer.norm3->forward(h));
    } else {
      Tensor h = layer.norm1->forward(tgt + sa(tgt));
      h = layer.norm2->forward(h + ca(h));
      want = layer.norm3->forward(h + ff(h));
    }
    EXPECT_TRUE(near(layer.forward(tgt, memory, mask), want, 1e-12)) << norm_first;
  }
  std::vector<std::string> children;
  TransformerDecoderLayer layer(4, 2);
  for (const auto& [n, m] : layer.named_children()) children.push_back(n);
  EXPECT_EQ(children, (std::vector<std::string>{"self_attn", "multihead_attn", "linear1", "dropout",
                                                "linear2", "norm1", "norm2", "norm3", "dropout1",
                                                "dropout2", "dropout3"}));
}

TEST(Transformer, IsItsEncoderThenItsDecoderWithFinalNorms) {
  manual_seed(7);
  Transformer model(8, 2,
                    {.num_encoder_layers = 2,
                     .num_decoder_layers = 3,
                     .layer = {.dim_feedforward = 16, .dropout = 0.0, .dtype = DType::Float64}});
  ASSERT_NE(model.encoder->norm, nullptr);
  ASSERT_NE(model.decoder->norm, nullptr);
  EXPECT_EQ(model.decoder->layers.size(), 3u);
  // Re-initialised as PyTorch's: every matrix xavier uniform, so the decoder's layers differ.
  EXPECT_FALSE(allclose(model.decoder->layers[0]->linear1->weight,
                        model.decoder->layers[1]->linear1->weight));
  const Tensor src = randn({5, 2, 8}, DType::Float64), tgt = randn({4, 2, 8}, DType::Float64);
  const Tensor mask = Transformer::generate_square_subsequent_mask(4, DType::Float64);
  EXPECT_EQ(mask[0][1].item<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(mask[1][1].item<double>(), 0.0);
  const Tensor want = model.decoder->forward(tgt, model.encoder->forward(src), mask);
  EXPECT_TRUE(near(model.forward(src, tgt, {}, mask), want, 0));
  // A training step compiles and gives eager's loss.
  auto loss = [&] {
    const Tensor y = model.forward(src, tgt, {}, mask);
    return (y * y).mean();
  };
  const double eager = loss().item<double>();
  auto compiled = compile(loss, {.backend = std::string("aot_eager")});
  EXPECT_NEAR(compiled().item<double>(), eager, 1e-12);
}

}  // namespace
}  // namespace kiln::nn
