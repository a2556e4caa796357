// A GPT-2-style decoder-only transformer: token + position embeddings, N pre-norm blocks of
// causal multi-head self-attention and a GELU MLP, a final LayerNorm and a (tied or untied)
// language-model head.
#pragma once

#include <functional>

#include "kiln/nn/layers.h"

namespace kiln::nn {

// Multi-head self-attention with a causal mask: one Linear makes q, k, v; another projects.
class CausalSelfAttention : public UnaryModule {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout = 0.0,
                      DType dtype = kDefaultFloat);
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> qkv, proj;
  std::shared_ptr<Dropout> resid_dropout;
  int64_t n_head;
  double attn_dropout;
};

// Linear(C, 4C) -> GELU -> Linear(4C, C) -> Dropout.
class MLP : public UnaryModule {
 public:
  MLP(int64_t n_embd, double dropout = 0.0, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> fc, proj;
  std::shared_ptr<GELU> act;
  std::shared_ptr<Dropout> dropout;
};

// x + attn(ln1(x)), then + mlp(ln2(x)).
class Block : public UnaryModule {
 public:
  Block(int64_t n_embd, int64_t n_head, double dropout = 0.0, DType dtype = kDefaultFloat);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

struct GPTConfig {
  int64_t vocab_size = 0;
  int64_t block_size = 0;  // longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool tied_head = true;  // the head reuses the token embedding matrix
  DType dtype = kDefaultFloat;
};

// Initialised as GPT-2: N(0, 0.02) matrices and embeddings, zero biases, residual projections
// scaled by 1/sqrt(2 n_layer).
class GPT : public UnaryModule {
 public:
  explicit GPT(const GPTConfig& config);
  // token ids [B, T] (int64, T <= block_size) -> logits [B, T, vocab]
  Tensor forward(const Tensor& idx) override;
  // Mean cross-entropy of the next-token predictions against targets [B, T].
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // Extends idx [B, T] by `new_tokens` sampled at `temperature` (greedy when 0). Each token's
  // logits [B, vocab] come from `next_logits(context)` (context: the last block_size tokens),
  // by default forward(context).select(1, -1): pass a compiled one to compile the step.
  Tensor generate(const Tensor& idx, int64_t new_tokens, double temperature = 1.0,
                  Generator* gen = nullptr,
                  const std::function<Tensor(const Tensor& context)>& next_logits = nullptr);
  const GPTConfig& config() const { return config_; }

  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<ModuleList<Block>> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;  // null when tied

 private:
  void init_weights();
  GPTConfig config_;
};

}  // namespace kiln::nn
