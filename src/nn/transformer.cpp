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
      options(options_) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, ValueError,
             "MultiheadAttention: embed_dim (", embed_dim, ") must be a positive multiple of ",
             "num_heads (", num_heads, ")");
  KILN_CHECK(options.dropout >= 0 && options.dropout <= 1, ValueError,
             "MultiheadAttention: dropout must be in [0, 1], got ", options.dropout);
  Tensor w = empty({3 * embed_dim, embed_dim}, options.dtype);
  init::xavier_uniform_(w);
  in_proj_weight = register_parameter("in_proj_weight", w);
  if (options.bias)
    in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}, options.dtype));
  out_proj = register_module(
      "out_proj", std::make_shared<Linear>(embed_dim, embed_dim, options.bias, options.dtype));
  if (options.bias) {
    NoGradGuard no_grad;
    out_proj->bias.zero_();
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
  for (const Tensor* t : {&q_in, &k_in, &v_in})
    KILN_CHECK(t->size(-1) == embed_dim, ShapeError, who, ": expected inputs with embed_dim ",
               embed_dim, " features, got ", query.shape_str(), ", ", key.shape_str(), " and ",
               value.shape_str());
  KILN_CHECK(
      k_in.size(1) == v_in.size(1) && q_in.size(0) == k_in.size(0) && k_in.size(0) == v_in.size(0),
      ShapeError, who, ": key ", key.shape_str(), " and value ", value.shape_str(),
      " must share their batch and sequence sizes with each other (and the query's batch)");
  const int64_t batch = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  const int64_t head_dim = embed_dim / num_heads;
  auto project = [&](const Tensor& x, int64_t k, int64_t len) {
    const Tensor w = in_proj_weight.narrow(0, k * embed_dim, embed_dim);
    const std::optional<Tensor> b =
        in_proj_bias.defined()
            ? std::optional<Tensor>(in_proj_bias.narrow(0, k * embed_dim, embed_dim))
            : std::nullopt;
    return linear(x, w, b).reshape({batch, len, num_heads, head_dim}).transpose(1, 2);
  };
  const Tensor q = project(q_in, 0, L), k = project(k_in, 1, S), v = project(v_in, 2, S);
  const double p = is_training() ? options.dropout : 0.0;
  const Tensor mask =
      additive_mask(who, attn_mask, key_padding_mask, batch, num_heads, L, S, is_causal, q.dtype());
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

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options_)
    : Module("TransformerEncoderLayer"), options(std::move(options_)) {
  KILN_CHECK(options.activation == "relu" || options.activation == "gelu", ValueError,
             "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"",
             options.activation, "\"");
  self_attn =
      register_module("self_attn", std::make_shared<MultiheadAttention>(
                                       d_model, nhead,
                                       MultiheadAttentionOptions{.dropout = options.dropout,
                                                                 .bias = options.bias,
                                                                 .batch_first = options.batch_first,
                                                                 .dtype = options.dtype}));
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, options.dim_feedforward,
                                                                options.bias, options.dtype));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d_model,
                                                                options.bias, options.dtype));
  norm1 = register_module(
      "norm1", std::make_shared<LayerNorm>(std::vector<int64_t>{d_model}, options.layer_norm_eps,
                                           true, options.bias, options.dtype));
  norm2 = register_module(
      "norm2", std::make_shared<LayerNorm>(std::vector<int64_t>{d_model}, options.layer_norm_eps,
                                           true, options.bias, options.dtype));
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
    const Tensor h = linear1->forward(x);
    return dropout2->forward(
        linear2->forward(dropout->forward(options.activation == "gelu" ? gelu(h) : relu(h))));
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
  KILN_CHECK(num_layers > 0, ValueError, "TransformerEncoder: num_layers must be positive, got ",
             num_layers);
  for (int64_t l = 0; l < num_layers; ++l) {
    layers.push_back(
        register_module("layers." + std::to_string(l),
                        std::make_shared<TransformerEncoderLayer>(d_model, nhead, options)));
    if (l > 0) layers.back()->load_state_dict(layers.front()->state_dict());
  }
  if (final_norm)
    norm = register_module(
        "norm", std::make_shared<LayerNorm>(std::vector<int64_t>{d_model}, options.layer_norm_eps,
                                            true, options.bias, options.dtype));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  for (auto& layer : layers) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? norm->forward(x) : x;
}

}  // namespace kiln::nn
