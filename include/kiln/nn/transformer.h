// Attention and transformer layers (torch.nn.MultiheadAttention, TransformerEncoderLayer,
// TransformerEncoder) with PyTorch's arguments, parameter names, initialisation and mask
// conventions. The guide is docs/nn.md.
#pragma once

#include <memory>
#include <string>
#include <tuple>

#include "kiln/nn/layers.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  double dropout = 0;  // on the attention weights, in training mode
  bool bias = true;
  bool batch_first = false;  // [batch, seq, embed] instead of [seq, batch, embed]
  DType dtype = kDefaultFloat;
};

// Multi-head attention: query, key and value projected by in_proj_weight [3 E, E] (xavier
// uniform) and in_proj_bias [3 E] (zeros), split into num_heads heads, softmax(q k^T /
// sqrt(E / heads) + mask) v, heads joined and projected by out_proj (a Linear, bias zeros).
// Masks, as PyTorch: attn_mask [L, S] or [batch * heads, L, S], bool (true: not attended) or
// floating (added); key_padding_mask [batch, S] bool (true: a padding key). is_causal without
// an attn_mask masks each query's later keys. Inputs [L, batch, E] ([batch, L, E] with
// batch_first) or unbatched [L, E]. Returns (output, weights): weights averaged over the heads
// ([batch, L, S]) or per head ([batch, heads, L, S]), undefined when need_weights is false
// (then the fused scaled_dot_product_attention computes the output).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;
  int64_t embed_dim, num_heads;
  MultiheadAttentionOptions options;
};

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm: x + block(norm(x)); else norm(x + block(x))
  bool bias = true;
  DType dtype = kDefaultFloat;
};

// torch.nn.TransformerEncoderLayer: self-attention then a feed-forward block (linear1,
// activation, dropout, linear2), each with dropout and a residual connection and LayerNorm
// (norm1, norm2) after it (or before, with norm_first). Children named as PyTorch's.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src, const Tensor& src_mask = {},
                 const Tensor& src_key_padding_mask = {}, bool is_causal = false);
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  TransformerEncoderLayerOptions options;
};

// torch.nn.TransformerEncoder: num_layers copies of one layer (as PyTorch's deep copies, every
// layer starts with the same weights), children "layers.0", "layers.1", ..., and an optional
// final LayerNorm "norm".
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                     TransformerEncoderLayerOptions options = {}, bool final_norm = false);
  Tensor forward(const Tensor& src, const Tensor& mask = {},
                 const Tensor& src_key_padding_mask = {}, bool is_causal = false);
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

}  // namespace kiln::nn
