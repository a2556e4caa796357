// MultiheadAttention and the transformer encoder, composed of Kiln's ops (the fused
// scaled_dot_product_attention when the weights are not asked for).
#include "kiln/nn/transformer.h"

#include <cmath>
#include <limits>

#include "kiln/autograd/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln::nn {

namespace {

// The additive mask [batch or 1, heads or 1, L, S] for attn_mask and key_padding_mask (either
// may be undefined; so may the result).
Tensor additive_mask(const char* who, const Tensor& attn_mask, const Tensor& key_padding_mask,
                     int64_t batch, int64_t heads, int64_t L, int64_t S, bool causal, DType dtype) {
  const double lowest = -std::numeric_limits<double>::infinity();
  Tensor mask;
  auto add = [&](Tensor m) { mask = mask.defined() ? mask + m : m; };
  if (attn_mask.defined()) {
    const bool shape_ok =
        (attn_mask.dim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S) ||
        (attn_mask.dim() == 3 && attn_mask.size(0) == batch * heads && attn_mask.size(1) == L &&
         attn_mask.size(2) == S);
    KILN_CHECK(shape_ok, ShapeError, who, ": expected attn_mask [", L, ", ", S, "] or [",
               batch * heads, ", ", L, ", ", S, "], got ", attn_mask.shape_str());
    Tensor m = attn_mask.dtype() == DType::Bool
                   ? masked_fill(zeros(attn_mask.sizes(), dtype), attn_mask, lowest)
                   : attn_mask.to(dtype);
    add(attn_mask.dim() == 2 ? m.reshape({1, 1, L, S}) : m.reshape({batch, heads, L, S}));
  } else if (causal) {
    add(masked_fill(zeros({L, S}, dtype), triu(ones({L, S}, DType::Bool), 1), lowest)
            .reshape({1, 1, L, S}));
  }
  if (key_padding_mask.defined()) {
    KILN_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == batch &&
                   key_padding_mask.size(1) == S,
               ShapeError, who, ": expected key_padding_mask [", batch, ", ", S, "], got ",
               key_padding_mask.shape_str());
    KILN_CHECK(key_padding_mask.dtype() == DType::Bool, DTypeError, who,
               ": key_padding_mask must be bool (true: a padding key), got ",
               key_padding_mask.dtype());
    add(masked_fill(zeros({batch, S}, dtype), key_padding_mask, lowest).reshape({batch, 1, 1, S}));
  }
  return mask;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_,
                                       MultiheadAttentionOptions options_)
    : Module("MultiheadAttention"),
      embed_dim(embed_dim_),
      num_heads(num_heads_),
      kdim(options_.kdim.value_or(embed_dim_)),
      vdim(options_.vdim.value_or(embed_dim_)),
      options(options_) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, ValueError,
             "MultiheadAttention: embed_dim (", embed_dim, ") must be a positive multiple of ",
             "num_heads (", num_heads, ")");
  KILN_CHECK(options.dropout >= 0 && options.dropout <= 1, ValueError,
             "MultiheadAttention: dropout must be in [0, 1], got ", options.dropout);
  KILN_CHECK(kdim > 0 && vdim > 0, ValueError,
             "MultiheadAttention: kdim and vdim must be positive, got ", kdim, " and ", vdim);
  auto xavier = [&](const char* name, int64_t in) {
    Tensor w = empty({name == std::string("in_proj_weight") ? 3 * embed_dim : embed_dim, in},
                     options.dtype);
    init::xavier_uniform_(w);
    return register_parameter(name, w);
  };
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = xavier("in_proj_weight", embed_dim);
  } else {
    q_proj_weight = xavier("q_proj_weight", embed_dim);
    k_proj_weight = xavier("k_proj_weight", kdim);
    v_proj_weight = xavier("v_proj_weight", vdim);
  }
  if (options.bias)
    in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}, options.dtype));
  out_proj = register_module(
      "out_proj", std::make_shared<Linear>(embed_dim, embed_dim, options.bias, options.dtype));
  if (options.bias) {
    NoGradGuard no_grad;
    out_proj->bias.zero_();
  }
  if (options.add_bias_kv) {
    for (auto [name, t] : {std::pair{"bias_k", &bias_k}, std::pair{"bias_v", &bias_v}}) {
      Tensor b = empty({1, 1, embed_dim}, options.dtype);
      init::xavier_normal_(b);
      *t = register_parameter(name, b);
    }
  }
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                       const Tensor& value,
                                                       const Tensor& key_padding_mask,
                                                       bool need_weights, const Tensor& attn_mask,
                                                       bool average_attn_weights, bool is_causal) {
  const char* who = "MultiheadAttention";
  KILN_CHECK(query.dim() == key.dim() && key.dim() == value.dim() &&
                 (query.dim() == 2 || query.dim() == 3),
             ShapeError, who, ": expected query, key and value of 3 dims (or 2, unbatched), got ",
             query.shape_str(), ", ", key.shape_str(), " and ", value.shape_str());
  const bool unbatched = query.dim() == 2;
  // [batch, seq, E] from here on.
  auto batch_major = [&](const Tensor& t) {
    return unbatched ? t.unsqueeze(0) : options.batch_first ? t : t.transpose(0, 1);
  };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  KILN_CHECK(q_in.size(-1) == embed_dim && k_in.size(-1) == kdim && v_in.size(-1) == vdim,
             ShapeError, who, ": expected a query of embed_dim ", embed_dim, ", a key of kdim ",
             kdim, " and a value of vdim ", vdim, " features, got ", query.shape_str(), ", ",
             key.shape_str(), " and ", value.shape_str());
  KILN_CHECK(
      k_in.size(1) == v_in.size(1) && q_in.size(0) == k_in.size(0) && k_in.size(0) == v_in.size(0),
      ShapeError, who, ": key ", key.shape_str(), " and value ", value.shape_str(),
      " must share their batch and sequence sizes with each other (and the query's batch)");
  const int64_t batch = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  const int64_t head_dim = embed_dim / num_heads;
  // Projected [batch, len, E] (then any extra keys), and split into heads.
  auto project = [&](const Tensor& x, int64_t k) {
    const Tensor w = in_proj_weight.defined() ? in_proj_weight.narrow(0, k * embed_dim, embed_dim)
                                              : (k == 0   ? q_proj_weight
                                                 : k == 1 ? k_proj_weight
                                                          : v_proj_weight);
    const std::optional<Tensor> b =
        in_proj_bias.defined()
            ? std::optional<Tensor>(in_proj_bias.narrow(0, k * embed_dim, embed_dim))
            : std::nullopt;
    return linear(x, w, b);
  };
  auto heads_of = [&](const Tensor& x) {
    return x.reshape({batch, x.size(1), num_heads, head_dim}).transpose(1, 2);
  };
  Tensor kp = project(k_in, 1), vp = project(v_in, 2);
  if (options.add_bias_kv) {
    kp = cat({kp, bias_k.expand({batch, 1, embed_dim})}, 1);
    vp = cat({vp, bias_v.expand({batch, 1, embed_dim})}, 1);
  }
  const Tensor q = heads_of(project(q_in, 0));
  Tensor k = heads_of(kp), v = heads_of(vp);
  if (options.add_zero_attn) {
    k = cat({k, zeros({batch, num_heads, 1, head_dim}, k.dtype())}, 2);
    v = cat({v, zeros({batch, num_heads, 1, head_dim}, v.dtype())}, 2);
  }
  // The extra keys are attended by every query: the masks get columns that mask nothing.
  const int64_t extra = k.size(2) - S;
  Tensor mask =
      additive_mask(who, attn_mask, key_padding_mask, batch, num_heads, L, S, is_causal, q.dtype());
  if (mask.defined() && extra > 0) mask = pad(mask, {0, extra}, 0.0);
  const double p = is_training() ? options.dropout : 0.0;
  Tensor heads, weights;
  if (need_weights) {
    Tensor scores =
        matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1);
    heads = matmul(p > 0 ? kiln::dropout(weights, p, true) : weights, v);
    if (average_attn_weights) weights = mean(weights, {1});
    if (unbatched) weights = weights.squeeze(0);
  } else {
    heads = scaled_dot_product_attention(
        q, k, v, mask.defined() ? std::optional<Tensor>(mask) : std::nullopt, p);
  }
  Tensor out = out_proj->forward(heads.transpose(1, 2).reshape({batch, L, embed_dim}));
  out = unbatched ? out.squeeze(0) : options.batch_first ? out : out.transpose(0, 1);
  return {out, weights};
}

namespace {
// The layers' parts, made as PyTorch names them (the caller registers each).
void check_activation(const char* who, const TransformerEncoderLayerOptions& o) {
  KILN_CHECK(o.activation == "relu" || o.activation == "gelu", ValueError, who,
             ": activation must be \"relu\" or \"gelu\", got \"", o.activation, "\"");
}
std::shared_ptr<MultiheadAttention> attention_of(int64_t d_model, int64_t nhead,
                                                 const TransformerEncoderLayerOptions& o) {
  return std::make_shared<MultiheadAttention>(
      d_model, nhead,
      MultiheadAttentionOptions{
          .dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first, .dtype = o.dtype});
}
std::shared_ptr<LayerNorm> norm_of(int64_t d_model, const TransformerEncoderLayerOptions& o) {
  return std::make_shared<LayerNorm>(std::vector<int64_t>{d_model}, o.layer_norm_eps, true, o.bias,
                                     o.dtype);
}
// num_layers layers of one configuration, each starting with the first one's weights (as
// PyTorch's deep copies of one layer do), for an encoder or a decoder to register.
template <class Layer>
std::vector<std::shared_ptr<Layer>> stack_of(const char* who, int64_t d_model, int64_t nhead,
                                             int64_t num_layers,
                                             const TransformerEncoderLayerOptions& o) {
  KILN_CHECK(num_layers > 0, ValueError, who, ": num_layers must be positive, got ", num_layers);
  std::vector<std::shared_ptr<Layer>> layers;
  for (int64_t l = 0; l < num_layers; ++l) {
    layers.push_back(std::make_shared<Layer>(d_model, nhead, o));
    if (l > 0) layers.back()->load_state_dict(layers.front()->state_dict());
  }
  return layers;
}
// linear2(dropout(activation(linear1(x)))).
Tensor feed_forward(const TransformerEncoderLayerOptions& o, Linear& linear1, Dropout& dropout,
                    Linear& linear2, const Tensor& x) {
  const Tensor h = linear1.forward(x);
  return linear2.forward(dropout.forward(o.activation == "gelu" ? gelu(h) : relu(h)));
}
}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options_)
    : Module("TransformerEncoderLayer"), options(std::move(options_)) {
  check_activation("TransformerEncoderLayer", options);
  self_attn = register_module("self_attn", attention_of(d_model, nhead, options));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward,
                                                                options.bias, options.dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model,
                                                                options.bias, options.dtype));
  norm1 = register_module("norm1", norm_of(d_model, options));
  norm2 = register_module("norm2", norm_of(d_model, options));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask, bool is_causal) {
  auto attention = [&](const Tensor& x) {
    return dropout1->forward(std::get<0>(
        self_attn->forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal)));
  };
  auto feed_forward = [&](const Tensor& x) {
    return dropout2->forward(nn::feed_forward(options, *linear1, *dropout, *linear2, x));
  };
  Tensor x = src;
  if (options.norm_first) {
    x = x + attention(norm1->forward(x));
    return x + feed_forward(norm2->forward(x));
  }
  x = norm1->forward(x + attention(x));
  return norm2->forward(x + feed_forward(x));
}

TransformerEncoder::TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerEncoderLayerOptions options, bool final_norm)
    : Module("TransformerEncoder") {
  for (auto& layer :
       stack_of<TransformerEncoderLayer>("TransformerEncoder", d_model, nhead, num_layers, options))
    layers.push_back(register_module("layers." + std::to_string(layers.size()), layer));
  if (final_norm) norm = register_module("norm", norm_of(d_model, options));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  for (auto& layer : layers) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? norm->forward(x) : x;
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerDecoderLayerOptions options_)
    : Module("TransformerDecoderLayer"), options(std::move(options_)) {
  check_activation("TransformerDecoderLayer", options);
  self_attn = register_module("self_attn", attention_of(d_model, nhead, options));
  multihead_attn = register_module("multihead_attn", attention_of(d_model, nhead, options));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward,
                                                                options.bias, options.dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model,
                                                                options.bias, options.dtype));
  norm1 = register_module("norm1", norm_of(d_model, options));
  norm2 = register_module("norm2", norm_of(d_model, options));
  norm3 = register_module("norm3", norm_of(d_model, options));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_mask, const Tensor& memory_mask,
                                        const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  auto self_attention = [&](const Tensor& x) {
    return dropout1->forward(std::get<0>(
        self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal)));
  };
  auto cross_attention = [&](const Tensor& x) {
    return dropout2->forward(std::get<0>(multihead_attn->forward(
        x, memory, memory, memory_key_padding_mask, false, memory_mask, true, memory_is_causal)));
  };
  auto feed_forward = [&](const Tensor& x) {
    return dropout3->forward(nn::feed_forward(options, *linear1, *dropout, *linear2, x));
  };
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + self_attention(norm1->forward(x));
    x = x + cross_attention(norm2->forward(x));
    return x + feed_forward(norm3->forward(x));
  }
  x = norm1->forward(x + self_attention(x));
  x = norm2->forward(x + cross_attention(x));
  return norm3->forward(x + feed_forward(x));
}

TransformerDecoder::TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers,
                                       TransformerDecoderLayerOptions options, bool final_norm)
    : Module("TransformerDecoder") {
  for (auto& layer :
       stack_of<TransformerDecoderLayer>("TransformerDecoder", d_model, nhead, num_layers, options))
    layers.push_back(register_module("layers." + std::to_string(layers.size()), layer));
  if (final_norm) norm = register_module("norm", norm_of(d_model, options));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                   bool memory_is_causal) {
  Tensor x = tgt;
  for (auto& layer : layers)
    x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                       memory_key_padding_mask, tgt_is_causal, memory_is_causal);
  return norm ? norm->forward(x) : x;
}

Transformer::Transformer(int64_t d_model_, int64_t nhead_, TransformerOptions options)
    : Module("Transformer"), d_model(d_model_), nhead(nhead_) {
  encoder = register_module(
      "encoder", std::make_shared<TransformerEncoder>(d_model, nhead, options.num_encoder_layers,
                                                      options.layer, /*final_norm=*/true));
  decoder = register_module(
      "decoder", std::make_shared<TransformerDecoder>(d_model, nhead, options.num_decoder_layers,
                                                      options.layer, /*final_norm=*/true));
  // As PyTorch's _reset_parameters: every parameter of more than one dim xavier uniform.
  NoGradGuard no_grad;
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask,
                            const Tensor& tgt_mask, const Tensor& memory_mask,
                            const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask,
                            const Tensor& memory_key_padding_mask, bool src_is_causal,
                            bool tgt_is_causal, bool memory_is_causal) {
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                          memory_key_padding_mask, tgt_is_causal, memory_is_causal);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t size, DType dtype) {
  return masked_fill(zeros({size, size}, dtype), triu(ones({size, size}, DType::Bool), 1),
                     -std::numeric_limits<double>::infinity());
}

}  // namespace kiln::nn
