// The library's layers for kiln.nn (python/kiln/nn/modules.py wraps each in a torch-like
// Module): constructors with torch's arguments, and the base class that exposes a C++ module's
// parameters, buffers and children, so that the Python tree holds the very tensors the C++
// forward uses (their gradients land where Python reads them).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/nn/gpt.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/recurrent.h"
#include "kiln/nn/transformer.h"

namespace kiln::python {

namespace {

DType dtype_or_default(nb::handle h) { return h.is_none() ? kDefaultFloat : to_dtype(h, "dtype"); }

// torch's `kernel_size=3` and `kernel_size=(3, 3)` alike.
std::vector<int64_t> ints_arg(nb::handle h, const char* what) { return to_ints(h, what); }

// Every layer is handed to Python as a UnaryModule (forward(x) -> Tensor).
using Unary = std::shared_ptr<nn::UnaryModule>;

template <class F>
Tensor forward_unlocked(const Tensor& x, F&& fn) {
  if (worth_releasing_gil(x.numel())) {
    nb::gil_scoped_release unlocked;
    return fn();
  }
  return fn();
}

Tensor or_undefined(const std::optional<Tensor>& t) { return t.value_or(Tensor()); }

// forward(src, <mask_name>, src_key_padding_mask, is_causal) of an encoder layer or an encoder.
template <class Encoder>
void bind_encoder(nb::module_& nn, const char* name, const char* mask_name) {
  nb::class_<Encoder, nn::Module>(nn, name).def(
      "forward",
      [](Encoder& mod, const Tensor& src, std::optional<Tensor> mask,
         std::optional<Tensor> src_key_padding_mask, bool is_causal) {
        return mod.forward(src, or_undefined(mask), or_undefined(src_key_padding_mask), is_causal);
      },
      nb::arg("src"), nb::arg(mask_name).none() = nb::none(),
      nb::arg("src_key_padding_mask").none() = nb::none(), nb::arg("is_causal") = false);
}
// forward(tgt, memory, masks..., tgt_is_causal, memory_is_causal) of a decoder layer or a
// decoder.
template <class Decoder>
void bind_decoder(nb::module_& nn, const char* name) {
  nb::class_<Decoder, nn::Module>(nn, name).def(
      "forward",
      [](Decoder& mod, const Tensor& tgt, const Tensor& memory, std::optional<Tensor> tgt_mask,
         std::optional<Tensor> memory_mask, std::optional<Tensor> tgt_key_padding_mask,
         std::optional<Tensor> memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
        return mod.forward(tgt, memory, or_undefined(tgt_mask), or_undefined(memory_mask),
                           or_undefined(tgt_key_padding_mask),
                           or_undefined(memory_key_padding_mask), tgt_is_causal, memory_is_causal);
      },
      nb::arg("tgt"), nb::arg("memory"), nb::arg("tgt_mask").none() = nb::none(),
      nb::arg("memory_mask").none() = nb::none(),
      nb::arg("tgt_key_padding_mask").none() = nb::none(),
      nb::arg("memory_key_padding_mask").none() = nb::none(), nb::arg("tgt_is_causal") = false,
      nb::arg("memory_is_causal") = false);
}

}  // namespace

void bind_nn(nb::module_& m) {
  nb::module_ nn = m.def_submodule("nn", "The C++ layers kiln.nn wraps.");
  nb::class_<nn::Module>(nn, "Module")
      .def_prop_ro("type_name", &nn::Module::type_name)
      .def("named_parameters", &nn::Module::named_parameters, nb::arg("recurse") = true)
      .def("named_buffers", &nn::Module::named_buffers, nb::arg("recurse") = true)
      .def("named_children",
           [](const nn::Module& mod) {
             // Children of layer types Python does not know by name still have their forward.
             nb::list out;
             for (const auto& [name, child] : mod.named_children()) {
               auto unary = std::dynamic_pointer_cast<nn::UnaryModule>(child);
               out.append(nb::make_tuple(name, unary ? nb::cast(unary) : nb::cast(child)));
             }
             return out;
           })
      .def("train", &nn::Module::train, nb::arg("mode") = true)
      .def_prop_ro("training", &nn::Module::is_training)
      .def("to", [](nn::Module& mod, nb::handle dtype) { mod.to(to_dtype(dtype, "dtype")); });
  nb::class_<nn::UnaryModule, nn::Module>(nn, "UnaryModule")
      .def("forward", [](nn::UnaryModule& mod, const Tensor& x) {
        return forward_unlocked(x, [&] { return mod.forward(x); });
      });

  nn.def("Linear", [](int64_t in, int64_t out, bool bias, nb::handle dtype) {
    return Unary(std::make_shared<nn::Linear>(in, out, bias, dtype_or_default(dtype)));
  });
  nn.def("Embedding", [](int64_t num, int64_t dim, nb::handle dtype) {
    return Unary(std::make_shared<nn::Embedding>(num, dim, dtype_or_default(dtype)));
  });
  nn.def("LayerNorm", [](nb::handle shape, double eps, bool affine, bool bias, nb::handle dtype) {
    return Unary(std::make_shared<nn::LayerNorm>(ints_arg(shape, "normalized_shape"), eps, affine,
                                                 bias, dtype_or_default(dtype)));
  });
  nn.def("RMSNorm", [](nb::handle shape, std::optional<double> eps, bool affine, nb::handle dtype) {
    return Unary(std::make_shared<nn::RMSNorm>(ints_arg(shape, "normalized_shape"), eps, affine,
                                               dtype_or_default(dtype)));
  });
  nn.def("BatchNorm",
         [](int64_t rank, int64_t features, double eps, std::optional<double> momentum, bool affine,
            bool track, nb::handle dtype) -> Unary {
           const DType dt = dtype_or_default(dtype);
           if (rank == 1)
             return std::make_shared<nn::BatchNorm1d>(features, eps, momentum, affine, track, dt);
           if (rank == 2)
             return std::make_shared<nn::BatchNorm2d>(features, eps, momentum, affine, track, dt);
           return std::make_shared<nn::BatchNorm3d>(features, eps, momentum, affine, track, dt);
         });
  nn.def("GroupNorm",
         [](int64_t groups, int64_t channels, double eps, bool affine, nb::handle dtype) {
           return Unary(std::make_shared<nn::GroupNorm>(groups, channels, eps, affine,
                                                        dtype_or_default(dtype)));
         });
  nn.def(
      "InstanceNorm",
      [](int64_t rank, int64_t features, double eps, double momentum, bool affine, bool track,
         nb::handle dtype) -> Unary {
        const DType dt = dtype_or_default(dtype);
        if (rank == 1)
          return std::make_shared<nn::InstanceNorm1d>(features, eps, momentum, affine, track, dt);
        if (rank == 2)
          return std::make_shared<nn::InstanceNorm2d>(features, eps, momentum, affine, track, dt);
        return std::make_shared<nn::InstanceNorm3d>(features, eps, momentum, affine, track, dt);
      });
  nn.def("Conv",
         [](int64_t rank, int64_t in, int64_t out, nb::handle kernel, nb::handle stride,
            nb::handle padding, nb::handle dilation, int64_t groups, bool bias, nb::handle dtype,
            const std::string& padding_mode) -> Unary {
           nn::ConvOptions o;
           const std::pair<const char*, PadMode> modes[] = {{"zeros", PadMode::Constant},
                                                            {"reflect", PadMode::Reflect},
                                                            {"replicate", PadMode::Replicate},
                                                            {"circular", PadMode::Circular}};
           bool known = false;
           for (const auto& [name, mode] : modes)
             if (padding_mode == name) {
               o.padding_mode = mode;
               known = true;
             }
           KILN_CHECK(known, ValueError,
                      "padding_mode must be 'zeros', 'reflect', 'replicate' "
                      "or 'circular', not '",
                      padding_mode, "'");
           o.stride = ints_arg(stride, "stride");
           if (PyUnicode_Check(padding.ptr())) {
             const std::string named = nb::cast<std::string>(padding);
             KILN_CHECK(named == "same" || named == "valid", ValueError,
                        "padding must be \"same\", \"valid\" or sizes, not \"", named, "\"");
             o.named_padding = named == "same" ? ConvPadding::Same : ConvPadding::Valid;
           } else {
             o.padding = ints_arg(padding, "padding");
           }
           o.dilation = ints_arg(dilation, "dilation");
           o.groups = groups;
           o.bias = bias;
           o.dtype = dtype_or_default(dtype);
           std::vector<int64_t> k = ints_arg(kernel, "kernel_size");
           if (rank == 1) return std::make_shared<nn::Conv1d>(in, out, k, o);
           if (rank == 2) return std::make_shared<nn::Conv2d>(in, out, k, o);
           return std::make_shared<nn::Conv3d>(in, out, k, o);
         });
  nn.def("ConvTranspose",
         [](int64_t rank, int64_t in, int64_t out, nb::handle kernel, nb::handle stride,
            nb::handle padding, nb::handle output_padding, int64_t groups, bool bias,
            nb::handle dilation, nb::handle dtype) -> Unary {
           nn::ConvTransposeOptions o;
           o.stride = ints_arg(stride, "stride");
           o.padding = ints_arg(padding, "padding");
           o.output_padding = ints_arg(output_padding, "output_padding");
           o.dilation = ints_arg(dilation, "dilation");
           o.groups = groups;
           o.bias = bias;
           o.dtype = dtype_or_default(dtype);
           std::vector<int64_t> k = ints_arg(kernel, "kernel_size");
           if (rank == 1) return std::make_shared<nn::ConvTranspose1d>(in, out, k, o);
           if (rank == 2) return std::make_shared<nn::ConvTranspose2d>(in, out, k, o);
           return std::make_shared<nn::ConvTranspose3d>(in, out, k, o);
         });
  nn.def("MaxPool",
         [](int64_t rank, nb::handle kernel, nb::handle stride, nb::handle padding,
            nb::handle dilation, bool ceil_mode) -> Unary {
           std::vector<int64_t> k = ints_arg(kernel, "kernel_size"),
                                s = stride.is_none() ? std::vector<int64_t>{}
                                                     : ints_arg(stride, "stride"),
                                p = ints_arg(padding, "padding"),
                                d = ints_arg(dilation, "dilation");
           if (rank == 1) return std::make_shared<nn::MaxPool1d>(k, s, p, d, ceil_mode);
           if (rank == 2) return std::make_shared<nn::MaxPool2d>(k, s, p, d, ceil_mode);
           return std::make_shared<nn::MaxPool3d>(k, s, p, d, ceil_mode);
         });
  nn.def(
      "AvgPool",
      [](int64_t rank, nb::handle kernel, nb::handle stride, nb::handle padding, bool ceil_mode,
         bool count_include_pad, std::optional<int64_t> divisor_override) -> Unary {
        std::vector<int64_t> k = ints_arg(kernel, "kernel_size"),
                             s = stride.is_none() ? std::vector<int64_t>{}
                                                  : ints_arg(stride, "stride"),
                             p = ints_arg(padding, "padding");
        std::shared_ptr<nn::AvgPoolNd> pool;
        if (rank == 1)
          pool = std::make_shared<nn::AvgPool1d>(k, s, p, ceil_mode, count_include_pad);
        else if (rank == 2)
          pool = std::make_shared<nn::AvgPool2d>(k, s, p, ceil_mode, count_include_pad);
        else
          pool = std::make_shared<nn::AvgPool3d>(k, s, p, ceil_mode, count_include_pad);
        pool->divisor_override = divisor_override;
        return pool;
      },
      nb::arg("rank"), nb::arg("kernel").none(), nb::arg("stride").none(),
      nb::arg("padding").none(), nb::arg("ceil_mode"), nb::arg("count_include_pad"),
      nb::arg("divisor_override").none());
  nn.def("AdaptiveAvgPool", [](int64_t rank, nb::handle size) -> Unary {
    std::vector<int64_t> s = ints_arg(size, "output_size");
    if (rank == 1) return std::make_shared<nn::AdaptiveAvgPool1d>(s);
    if (rank == 2) return std::make_shared<nn::AdaptiveAvgPool2d>(s);
    return std::make_shared<nn::AdaptiveAvgPool3d>(s);
  });
  nn.def("AdaptiveMaxPool", [](int64_t rank, nb::handle size) -> Unary {
    std::vector<int64_t> s = ints_arg(size, "output_size");
    if (rank == 1) return std::make_shared<nn::AdaptiveMaxPool1d>(s);
    if (rank == 2) return std::make_shared<nn::AdaptiveMaxPool2d>(s);
    return std::make_shared<nn::AdaptiveMaxPool3d>(s);
  });
  nn.def("Dropout", [](double p) { return Unary(std::make_shared<nn::Dropout>(p)); });
  nn.def("Dropout2d", [](double p) { return Unary(std::make_shared<nn::Dropout2d>(p)); });
  nn.def("GELU",
         [](std::string approximate) { return Unary(std::make_shared<nn::GELU>(approximate)); });
  nn.def("ReLU", [] { return Unary(std::make_shared<nn::ReLU>()); });
  nn.def("Flatten", [](int64_t start, int64_t end) {
    return Unary(std::make_shared<nn::Flatten>(start, end));
  });

  // Recurrent layers: forward returns (output, h_n), LSTM (output, (h_n, c_n)), as torch.
  nb::class_<nn::RNNBase, nn::Module>(nn, "RNNBase");
  const auto rnn_options = [](int64_t num_layers, bool bias, bool batch_first, double dropout,
                              bool bidirectional, std::string nonlinearity, nb::handle dtype) {
    nn::RNNOptions o;
    o.num_layers = num_layers;
    o.bias = bias;
    o.batch_first = batch_first;
    o.dropout = dropout;
    o.bidirectional = bidirectional;
    o.nonlinearity = std::move(nonlinearity);
    o.dtype = dtype_or_default(dtype);
    return o;
  };
  nb::class_<nn::RNN, nn::RNNBase>(nn, "RNN").def(
      "forward",
      [](nn::RNN& mod, const Tensor& input, std::optional<Tensor> h0) {
        return mod.forward(input, h0.value_or(Tensor()));
      },
      nb::arg("input"), nb::arg("hx").none() = nb::none());
  nb::class_<nn::GRU, nn::RNNBase>(nn, "GRU").def(
      "forward",
      [](nn::GRU& mod, const Tensor& input, std::optional<Tensor> h0) {
        return mod.forward(input, h0.value_or(Tensor()));
      },
      nb::arg("input"), nb::arg("hx").none() = nb::none());
  nb::class_<nn::LSTM, nn::RNNBase>(nn, "LSTM")
      .def(
          "forward",
          [](nn::LSTM& mod, const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
            return mod.forward(input, std::move(hx));
          },
          nb::arg("input"), nb::arg("hx").none() = nb::none());
  nn.def(
      "make_rnn",
      [rnn_options](std::string kind, int64_t input_size, int64_t hidden_size, int64_t num_layers,
                    bool bias, bool batch_first, double dropout, bool bidirectional,
                    std::string nonlinearity, nb::handle dtype) -> nb::object {
        const nn::RNNOptions o = rnn_options(num_layers, bias, batch_first, dropout, bidirectional,
                                             std::move(nonlinearity), dtype);
        if (kind == "LSTM") return nb::cast(std::make_shared<nn::LSTM>(input_size, hidden_size, o));
        if (kind == "GRU") return nb::cast(std::make_shared<nn::GRU>(input_size, hidden_size, o));
        return nb::cast(std::make_shared<nn::RNN>(input_size, hidden_size, o));
      });

  // Attention and transformers: optional masks as None; need_weights=False gives (out, None).
  nb::class_<nn::MultiheadAttention, nn::Module>(nn, "MultiheadAttention")
      .def(
          "forward",
          [](nn::MultiheadAttention& mod, const Tensor& query, const Tensor& key,
             const Tensor& value, std::optional<Tensor> key_padding_mask, bool need_weights,
             std::optional<Tensor> attn_mask, bool average_attn_weights, bool is_causal) {
            auto [out, weights] =
                mod.forward(query, key, value, or_undefined(key_padding_mask), need_weights,
                            or_undefined(attn_mask), average_attn_weights, is_causal);
            return nb::make_tuple(out, weights.defined() ? nb::cast(weights) : nb::none());
          },
          nb::arg("query"), nb::arg("key"), nb::arg("value"),
          nb::arg("key_padding_mask").none() = nb::none(), nb::arg("need_weights") = true,
          nb::arg("attn_mask").none() = nb::none(), nb::arg("average_attn_weights") = true,
          nb::arg("is_causal") = false);
  nn.def("make_multihead_attention",
         [](int64_t embed_dim, int64_t num_heads, double dropout, bool bias, bool add_bias_kv,
            bool add_zero_attn, std::optional<int64_t> kdim, std::optional<int64_t> vdim,
            bool batch_first, nb::handle dtype) {
           return std::make_shared<nn::MultiheadAttention>(
               embed_dim, num_heads,
               nn::MultiheadAttentionOptions{.dropout = dropout,
                                             .bias = bias,
                                             .batch_first = batch_first,
                                             .dtype = dtype_or_default(dtype),
                                             .add_bias_kv = add_bias_kv,
                                             .add_zero_attn = add_zero_attn,
                                             .kdim = kdim,
                                             .vdim = vdim});
         });
  const auto layer_options = [](int64_t dim_feedforward, double dropout, std::string activation,
                                double layer_norm_eps, bool batch_first, bool norm_first, bool bias,
                                nb::handle dtype) {
    return nn::TransformerEncoderLayerOptions{.dim_feedforward = dim_feedforward,
                                              .dropout = dropout,
                                              .activation = std::move(activation),
                                              .layer_norm_eps = layer_norm_eps,
                                              .batch_first = batch_first,
                                              .norm_first = norm_first,
                                              .bias = bias,
                                              .dtype = dtype_or_default(dtype)};
  };
  bind_encoder<nn::TransformerEncoderLayer>(nn, "TransformerEncoderLayer", "src_mask");
  bind_encoder<nn::TransformerEncoder>(nn, "TransformerEncoder", "mask");
  bind_decoder<nn::TransformerDecoderLayer>(nn, "TransformerDecoderLayer");
  bind_decoder<nn::TransformerDecoder>(nn, "TransformerDecoder");
  nb::class_<nn::Transformer, nn::Module>(nn, "Transformer")
      .def(
          "forward",
          [](nn::Transformer& mod, const Tensor& src, const Tensor& tgt,
             std::optional<Tensor> src_mask, std::optional<Tensor> tgt_mask,
             std::optional<Tensor> memory_mask, std::optional<Tensor> src_key_padding_mask,
             std::optional<Tensor> tgt_key_padding_mask,
             std::optional<Tensor> memory_key_padding_mask, bool src_is_causal, bool tgt_is_causal,
             bool memory_is_causal) {
            return mod.forward(src, tgt, or_undefined(src_mask), or_undefined(tgt_mask),
                               or_undefined(memory_mask), or_undefined(src_key_padding_mask),
                               or_undefined(tgt_key_padding_mask),
                               or_undefined(memory_key_padding_mask), src_is_causal, tgt_is_causal,
                               memory_is_causal);
          },
          nb::arg("src"), nb::arg("tgt"), nb::arg("src_mask").none() = nb::none(),
          nb::arg("tgt_mask").none() = nb::none(), nb::arg("memory_mask").none() = nb::none(),
          nb::arg("src_key_padding_mask").none() = nb::none(),
          nb::arg("tgt_key_padding_mask").none() = nb::none(),
          nb::arg("memory_key_padding_mask").none() = nb::none(), nb::arg("src_is_causal") = false,
          nb::arg("tgt_is_causal") = false, nb::arg("memory_is_causal") = false)
      .def_static(
          "generate_square_subsequent_mask",
          [](int64_t size, nb::handle dtype) {
            return nn::Transformer::generate_square_subsequent_mask(size, dtype_or_default(dtype));
          },
          nb::arg("sz"), nb::arg("dtype").none() = nb::none());
  nn.def("make_transformer_layer",
         [layer_options](bool decoder, int64_t d_model, int64_t nhead, int64_t dim_feedforward,
                         double dropout, std::string activation, double layer_norm_eps,
                         bool batch_first, bool norm_first, bool bias,
                         nb::handle dtype) -> nb::object {
           const auto o = layer_options(dim_feedforward, dropout, std::move(activation),
                                        layer_norm_eps, batch_first, norm_first, bias, dtype);
           if (decoder)
             return nb::cast(std::make_shared<nn::TransformerDecoderLayer>(d_model, nhead, o));
           return nb::cast(std::make_shared<nn::TransformerEncoderLayer>(d_model, nhead, o));
         });
  nn.def("make_transformer_stack",
         [layer_options](bool decoder, int64_t d_model, int64_t nhead, int64_t num_layers,
                         bool final_norm, int64_t dim_feedforward, double dropout,
                         std::string activation, double layer_norm_eps, bool batch_first,
                         bool norm_first, bool bias, nb::handle dtype) -> nb::object {
           const auto o = layer_options(dim_feedforward, dropout, std::move(activation),
                                        layer_norm_eps, batch_first, norm_first, bias, dtype);
           if (decoder)
             return nb::cast(std::make_shared<nn::TransformerDecoder>(d_model, nhead, num_layers, o,
                                                                      final_norm));
           return nb::cast(
               std::make_shared<nn::TransformerEncoder>(d_model, nhead, num_layers, o, final_norm));
         });
  nn.def("make_transformer",
         [layer_options](int64_t d_model, int64_t nhead, int64_t num_encoder_layers,
                         int64_t num_decoder_layers, int64_t dim_feedforward, double dropout,
                         std::string activation, double layer_norm_eps, bool batch_first,
                         bool norm_first, bool bias, nb::handle dtype) {
           return std::make_shared<nn::Transformer>(
               d_model, nhead,
               nn::TransformerOptions{
                   .num_encoder_layers = num_encoder_layers,
                   .num_decoder_layers = num_decoder_layers,
                   .layer = layer_options(dim_feedforward, dropout, std::move(activation),
                                          layer_norm_eps, batch_first, norm_first, bias, dtype)});
         });

  // The GPT of the demo (docs/training.md): forward(idx) -> logits, loss(idx, targets).
  nb::class_<nn::GPT, nn::UnaryModule>(nn, "GPT")
      .def("loss",
           [](nn::GPT& gpt, const Tensor& idx, const Tensor& targets) {
             return forward_unlocked(idx, [&] { return gpt.loss(idx, targets); });
           })
      .def(
          "generate",
          [](nn::GPT& gpt, const Tensor& idx, int64_t new_tokens, double temperature) {
            nb::gil_scoped_release unlocked;
            return gpt.generate(idx, new_tokens, temperature);
          },
          nb::arg("idx"), nb::arg("new_tokens"), nb::arg("temperature") = 1.0);
  nn.def("make_gpt", [](int64_t vocab_size, int64_t block_size, int64_t n_layer, int64_t n_head,
                        int64_t n_embd, double dropout, bool tied_head, nb::handle dtype) {
    nn::GPTConfig c;
    c.vocab_size = vocab_size;
    c.block_size = block_size;
    c.n_layer = n_layer;
    c.n_head = n_head;
    c.n_embd = n_embd;
    c.dropout = dropout;
    c.tied_head = tied_head;
    c.dtype = dtype_or_default(dtype);
    return std::make_shared<nn::GPT>(c);
  });
}

}  // namespace kiln::python
