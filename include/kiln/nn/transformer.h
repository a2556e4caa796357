// Attention and transformer layers (torch.nn.MultiheadAttention, TransformerEncoderLayer,
// TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer) with PyTorch's
// arguments, parameter names, initialisation and mask conventions. The guide is docs/nn.md.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "kiln/nn/layers.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  double dropout = 0;  // on the attention weights, in training mode
  bool bias = true;
  bool batch_first = false;  // [batch, seq, embed] instead of [seq, batch, embed]
  DType dtype = kDefaultFloat;
  // One more key and value, learnt (bias_k, bias_v [1, 1, E], xavier normal), after the
  // projected ones; add_zero_attn: one more all-zero key and value per head after those.
  bool add_bias_kv = false, add_zero_attn = false;
  // The key's and value's feature sizes (default embed_dim). When either differs, the inputs
  // are projected by q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]
  // (xavier uniform each) instead of in_proj_weight.
  std::optional<int64_t> kdim, vdim;
};

// Multi-head attention: query, key and value projected by in_proj_weight [3 E, E] (xavier
// uniform; q/k/v_proj_weight with kdim or vdim) and in_proj_bias [3 E] (zeros), split into
// num_heads heads, softmax(q k^T /
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
  // in_proj_weight, or (with kdim / vdim) q_proj_weight, k_proj_weight, v_proj_weight; the
  // others undefined, as are in_proj_bias without bias and bias_k, bias_v without add_bias_kv.
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  Tensor bias_k, bias_v;
  std::shared_ptr<Linear> out_proj;
  int64_t embed_dim, num_heads, kdim, vdim;
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

using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

// torch.nn.TransformerDecoderLayer: self-attention over the target (self_attn), attention from
// the target to the encoder's output `memory` (multihead_attn), then the feed-forward block;
// each with dropout (dropout1..3), a residual connection and LayerNorm (norm1..3) after it (or
// before, with norm_first). Children named as PyTorch's.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                          TransformerDecoderLayerOptions options = {});
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  TransformerDecoderLayerOptions options;
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

// torch.nn.TransformerDecoder: num_layers copies of one TransformerDecoderLayer (the same
// weights to start with), "layers.0", ..., and an optional final LayerNorm "norm".
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                     TransformerDecoderLayerOptions options = {}, bool final_norm = false);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

struct TransformerOptions {
  int64_t num_encoder_layers = 6, num_decoder_layers = 6;
  TransformerEncoderLayerOptions layer;  // each layer's (dim_feedforward 2048, dropout 0.1, ...)
};
// torch.nn.Transformer: an encoder and a decoder, each with its final LayerNorm, every weight
// matrix xavier uniform (as PyTorch re-initialises them). forward(src, tgt, ...) returns the
// decoder's output.
class Transformer : public Module {
 public:
  explicit Transformer(int64_t d_model = 512, int64_t nhead = 8, TransformerOptions options = {});
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {},
                 const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& src_key_padding_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool src_is_causal = false,
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  // A float [size, size] mask with -inf above the diagonal (each position attends to itself
  // and earlier ones), as Transformer.generate_square_subsequent_mask.
  static Tensor generate_square_subsequent_mask(int64_t size, DType dtype = kDefaultFloat);
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
  int64_t d_model, nhead;
};

}  // namespace kiln::nn
