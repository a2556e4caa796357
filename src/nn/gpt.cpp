// The GPT model: attention, MLP, blocks, and generation.
#include "kiln/nn/gpt.h"

#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln::nn {

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head_, double dropout,
                                         DType dtype)
    : UnaryModule("CausalSelfAttention"), n_head(n_head_), attn_dropout(dropout) {
  KILN_CHECK(n_head > 0 && n_embd % n_head == 0, ValueError, "CausalSelfAttention: n_embd ", n_embd,
             " must be a positive multiple of n_head ", n_head);
  qkv = register_module("qkv", std::make_shared<Linear>(n_embd, 3 * n_embd, true, dtype));
  proj = register_module("proj", std::make_shared<Linear>(n_embd, n_embd, true, dtype));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 3, ShapeError, "CausalSelfAttention: expected input [B, T, C], got ",
             x.shape_str());
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head;
  // [B, T, 3C] -> [B, T, 3, H, D] -> three [B, H, T, D]
  Tensor h = qkv->forward(x).view({B, T, 3, n_head, D});
  Tensor q = h.select(2, 0).transpose(1, 2);
  Tensor k = h.select(2, 1).transpose(1, 2);
  Tensor v = h.select(2, 2).transpose(1, 2);
  Tensor y = scaled_dot_product_attention(q, k, v, std::nullopt, is_training() ? attn_dropout : 0.0,
                                          /*is_causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, C});
  return resid_dropout->forward(proj->forward(y));
}

MLP::MLP(int64_t n_embd, double p, DType dtype) : UnaryModule("MLP") {
  fc = register_module("fc", std::make_shared<Linear>(n_embd, 4 * n_embd, true, dtype));
  act = register_module("act", std::make_shared<GELU>());
  proj = register_module("proj", std::make_shared<Linear>(4 * n_embd, n_embd, true, dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}
Tensor MLP::forward(const Tensor& x) {
  return dropout->forward(proj->forward(act->forward(fc->forward(x))));
}

Block::Block(int64_t n_embd, int64_t n_head, double dropout, DType dtype) : UnaryModule("Block") {
  ln1 = register_module(
      "ln1", std::make_shared<LayerNorm>(std::vector<int64_t>{n_embd}, 1e-5, true, true, dtype));
  attn = register_module("attn",
                         std::make_shared<CausalSelfAttention>(n_embd, n_head, dropout, dtype));
  ln2 = register_module(
      "ln2", std::make_shared<LayerNorm>(std::vector<int64_t>{n_embd}, 1e-5, true, true, dtype));
  mlp = register_module("mlp", std::make_shared<MLP>(n_embd, dropout, dtype));
}
Tensor Block::forward(const Tensor& x) {
  Tensor h = x + attn->forward(ln1->forward(x));
  return h + mlp->forward(ln2->forward(h));
}

GPT::GPT(const GPTConfig& c) : UnaryModule("GPT"), config_(c) {
  KILN_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0,
             ValueError,
             "GPT: vocab_size, block_size, n_layer, n_head and n_embd must be "
             "positive, got ",
             c.vocab_size, ", ", c.block_size, ", ", c.n_layer, ", ", c.n_head, ", ", c.n_embd);
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, c.dtype));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, c.dtype));
  blocks = register_module("blocks", std::make_shared<ModuleList<Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i)
    blocks->push_back(std::make_shared<Block>(c.n_embd, c.n_head, c.dropout, c.dtype));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(std::vector<int64_t>{c.n_embd}, 1e-5,
                                                             true, true, c.dtype));
  if (!c.tied_head)
    lm_head = register_module("lm_head",
                              std::make_shared<Linear>(c.n_embd, c.vocab_size, false, c.dtype));
  init_weights();
}

// GPT-2's initialisation (the layers' PyTorch defaults suit a tied head badly: N(0, 1) token
// embeddings make the initial logits ~sqrt(n_embd) wide): matrices and embeddings from
// N(0, 0.02), biases zero, and the projections that write into the residual stream scaled by
// 1/sqrt(2 n_layer) so the residual's variance does not grow with depth.
void GPT::init_weights() {
  NoGradGuard no_grad;
  const double std = 0.02, resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p;
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    const bool is_norm = name.find("ln") != std::string::npos;
    if (is_norm) continue;  // LayerNorm keeps ones/zeros
    if (is_bias) {
      t.zero_();
    } else {
      const bool residual = name.find("proj.weight") != std::string::npos;
      normal_(t, 0.0, residual ? resid_std : std);
    }
  }
}

Tensor GPT::forward(const Tensor& idx) {
  KILN_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64, ShapeError,
             "GPT: expected token ids [B, T] of dtype int64, got ", idx.shape_str(), " ",
             idx.dtype());
  const int64_t T = idx.size(1);
  KILN_CHECK(T <= config_.block_size, ShapeError, "GPT: sequence length ", T,
             " exceeds the block size ", config_.block_size);
  Tensor h = wte->forward(idx) + wpe->forward(arange(T));
  for (const auto& block : *blocks) h = block->forward(h);
  h = ln_f->forward(h);
  return lm_head ? lm_head->forward(h) : linear(h, wte->weight);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  Tensor logits = forward(idx);
  const int64_t V = config_.vocab_size;
  return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
}

namespace {
// Throws ValueError when `t` ([B, V]) holds a NaN or an infinity: "<what> at generation step
// <step> (sequence <b>, class <v>) is <value>; <why>".
void check_finite(const Tensor& t, const char* what, int64_t step, const char* why) {
  const std::vector<double> v = t.contiguous().to(DType::Float64).to_vector<double>();
  const int64_t cols = t.size(1);
  for (size_t i = 0; i < v.size(); ++i)
    KILN_CHECK(std::isfinite(v[i]), ValueError, "generate: ", what, " at generation step ", step,
               " (sequence ", static_cast<int64_t>(i) / cols, ", class ",
               static_cast<int64_t>(i) % cols, ") is ", v[i], "; ", why);
}
}  // namespace

Tensor GPT::generate(const Tensor& idx, int64_t new_tokens, double temperature, Generator* gen,
                     const std::function<Tensor(const Tensor& context)>& next_logits) {
  KILN_CHECK(std::isfinite(temperature) && temperature >= 0, ValueError,
             "generate: temperature must be a finite number >= 0 (0: greedy), got ", temperature);
  NoGradGuard no_grad;
  Tensor seq = idx;
  for (int64_t step = 0; step < new_tokens; ++step) {
    const int64_t T = seq.size(1), start = std::max<int64_t>(0, T - config_.block_size);
    const Tensor context = seq.slice(1, start, T).contiguous();
    const Tensor logits =
        next_logits ? next_logits(context) : forward(context).select(1, -1);  // [B, V]
    check_finite(logits, "the model's logit", step,
                 "the weights are corrupt or training diverged, so there is nothing to sample");
    Tensor next;
    if (temperature == 0) {
      next = argmax(logits, -1, true);
    } else {
      // Scaled in float64 after subtracting the maximum: the largest logit becomes exactly 0 and
      // the rest are <= 0, so a tiny temperature (1e-300, which is 0 in float32) sends them
      // towards -inf, never NaN, and the distribution tends to greedy as it should.
      Tensor scaled = (logits - amax(logits, {-1}, true)).to(DType::Float64) / temperature;
      Tensor probs = softmax(scaled, -1);
      check_finite(probs, "the probability", step, "from softmax(logits / temperature)");
      // Inverse-CDF sampling: the first class whose cumulative probability exceeds u.
      Tensor cdf = cumsum(probs, -1);
      Tensor u = rand({logits.size(0), 1}, cdf.dtype(), gen);
      next = sum(cdf < u, {-1}, true);  // int64 count of classes below u
      next = clamp(next, Scalar(0), Scalar(config_.vocab_size - 1));
    }
    seq = cat({seq, next}, 1);
  }
  return seq;
}

}  // namespace kiln::nn
