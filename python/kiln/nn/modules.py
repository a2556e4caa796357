"""kiln.nn's Module, Parameter, containers and layers (torch.nn).

Module is plain Python, as torch's: assigning a Parameter, a buffer or a Module to an attribute
registers it, and parameters(), state_dict(), train() walk the tree. The library's layers
(Linear, Conv2d, LSTM, the GPT, ...) are the C++ layers: each wrapper's parameters are the C++
module's own tensors, so its forward runs in C++ and the gradients land where Python reads them.
"""
from collections import OrderedDict

__all__ = [
    "Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "NativeModule",
    "Linear", "Embedding", "LayerNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "GroupNorm",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "Dropout", "Dropout2d", "GELU", "ReLU", "Tanh", "Sigmoid", "SiLU", "Softmax", "Identity",
    "Flatten", "RNN", "LSTM", "GRU", "GPT",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
    "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
    "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss",
]

from .. import _C
from .._C import Tensor
from ..autograd import no_grad


class Parameter(Tensor):
    """A tensor that is a module's parameter: requires grad by default (torch.nn.Parameter).
    Parameter(t) shares t's storage (a new leaf, as t.detach())."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _C.empty(0)
        super().__init__(data.detach() if isinstance(data, Tensor) else data)
        self.requires_grad_(requires_grad)

    @classmethod
    def _of(cls, tensor):
        """The very tensor (not a copy, not a detached alias) as a Parameter object."""
        p = cls.__new__(cls)
        Tensor.__init__(p, tensor)
        return p

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base of every layer and model (torch.nn.Module)."""

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- registration by attribute ----
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign to a Module before Module.__init__() ran")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Parameter):
            self.__dict__.pop(name, None)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self.__dict__.pop(name, None)
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: '{name}' must be a Parameter or None")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._buffers[name] = tensor
        if not persistent:
            self.__dict__.setdefault("_non_persistent", set()).add(name)

    def add_module(self, name, module):
        self._modules[name] = module

    register_module = add_module

    # ---- walking the tree ----
    def named_modules(self, prefix=""):
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self):
        return (m for _, m in self.named_children())

    def _named(self, table, prefix, recurse):
        seen = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, t in getattr(module, table).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{module_prefix}.{name}" if module_prefix else name), t

    def named_parameters(self, prefix="", recurse=True):
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix="", recurse=True):
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    def apply(self, fn):
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---- modes and gradients ----
    def train(self, mode=True):
        object.__setattr__(self, "training", mode)
        for child in self.children():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    # ---- state ----
    def state_dict(self, prefix=""):
        """Parameters and persistent buffers by dotted name (the tensors themselves, detached)."""
        out = OrderedDict()
        for module_prefix, module in self.named_modules(prefix.rstrip(".")):
            skip = module.__dict__.get("_non_persistent", set())
            for table in ("_parameters", "_buffers"):
                for name, t in getattr(module, table).items():
                    if t is not None and name not in skip:
                        key = f"{module_prefix}.{name}" if module_prefix else name
                        out[key] = t.detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values in place (shapes must match). strict: every key must match."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise _C.Error(f"load_state_dict for {type(self).__name__}: missing keys {missing}, "
                           f"unexpected keys {unexpected}")
        with no_grad():
            for key, target in own.items():
                if key in state_dict:
                    value = state_dict[key]
                    if tuple(value.shape) != tuple(target.shape):
                        raise _C.ShapeError(f"load_state_dict: '{key}' has shape "
                                            f"{tuple(value.shape)}, the module's "
                                            f"{tuple(target.shape)}")
                    target.copy_(value)
        return _IncompatibleKeys(missing, unexpected)

    # ---- printing ----
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = "\n  ".join(([extra] if extra else []) + lines)
        return f"{type(self).__name__}(\n  {body}\n)"


class _IncompatibleKeys(tuple):
    def __new__(cls, missing_keys, unexpected_keys):
        obj = super().__new__(cls, (missing_keys, unexpected_keys))
        obj.missing_keys, obj.unexpected_keys = missing_keys, unexpected_keys
        return obj


# ---- containers ----
class _Container(Module):
    """Children by position: indexing, len, iteration and append."""

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self


class Sequential(_Container):
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (dict, OrderedDict)):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_Container):
    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            self.add_module(name, m)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()


# ---- the library's layers ----
def _dt(dtype):
    """The layer's dtype: float32 unless given (torch's default dtype)."""
    return _C.float32 if dtype is None else dtype


def _stride(stride):
    """A pool's stride: None means the kernel size (an empty list for the C++ layer)."""
    return () if stride is None else stride

class NativeModule(Module):
    """A layer implemented in C++: the tree below it (parameters, buffers, children) is the C++
    module's, adopted as Python objects; forward runs in C++."""

    def __init__(self, native):
        super().__init__()
        object.__setattr__(self, "_native", native)
        for name, t in native.named_parameters(False):
            self._parameters[name] = Parameter._of(t)
        for name, t in native.named_buffers(False):
            self._buffers[name] = t
        for name, child in native.named_children():
            self._modules[name] = NativeModule(child)
        object.__setattr__(self, "training", native.training)

    def __setattr__(self, name, value):
        if name in self._parameters or name in self._buffers or name in self._modules:
            raise _C.NotImplementedError(
                f"{type(self).__name__}.{name}: replacing a parameter, buffer or submodule of a "
                "C++ layer is not supported; copy into it instead (with kiln.no_grad(): "
                f"layer.{name}.copy_(value))")
        super().__setattr__(name, value)

    def forward(self, *args, **kwargs):
        return self._native.forward(*args, **kwargs)

    def train(self, mode=True):
        self._native.train(mode)
        return super().train(mode)

    def to(self, dtype):
        self._native.to(dtype)
        NativeModule.__init__(self, self._native)
        return self

    def __repr__(self):
        if type(self) is NativeModule:
            return f"{self._native.type_name}()" if not self._modules else \
                Module.__repr__(self).replace("NativeModule", self._native.type_name, 1)
        return Module.__repr__(self)


class Linear(NativeModule):
    def __init__(self, in_features, out_features, bias=True, *, dtype=None):
        super().__init__(_C.nn.Linear(in_features, out_features, bias, _dt(dtype)))
        self.in_features, self.out_features = in_features, out_features

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self._parameters.get('bias') is not None}")


class Embedding(NativeModule):
    def __init__(self, num_embeddings, embedding_dim, *, dtype=None):
        super().__init__(_C.nn.Embedding(num_embeddings, embedding_dim, _dt(dtype)))
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(NativeModule):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, *,
                 dtype=None):
        super().__init__(_C.nn.LayerNorm(normalized_shape, eps, elementwise_affine, bias,
                                         _dt(dtype)))


class RMSNorm(NativeModule):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, *, dtype=None):
        super().__init__(_C.nn.RMSNorm(normalized_shape, eps, elementwise_affine, _dt(dtype)))


def _norm_class(name, rank, make):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, *, dtype=None):
        NativeModule.__init__(self, make(rank, num_features, eps, momentum, affine,
                                         track_running_stats, _dt(dtype)))
    return type(name, (NativeModule,), {"__init__": __init__})


BatchNorm1d = _norm_class("BatchNorm1d", 1, _C.nn.BatchNorm)
BatchNorm2d = _norm_class("BatchNorm2d", 2, _C.nn.BatchNorm)
BatchNorm3d = _norm_class("BatchNorm3d", 3, _C.nn.BatchNorm)


def _instance_norm_class(name, rank):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, *, dtype=None):
        NativeModule.__init__(self, _C.nn.InstanceNorm(rank, num_features, eps, momentum, affine,
                                                       track_running_stats, _dt(dtype)))
    return type(name, (NativeModule,), {"__init__": __init__})


InstanceNorm1d = _instance_norm_class("InstanceNorm1d", 1)
InstanceNorm2d = _instance_norm_class("InstanceNorm2d", 2)
InstanceNorm3d = _instance_norm_class("InstanceNorm3d", 3)


class GroupNorm(NativeModule):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, *, dtype=None):
        super().__init__(_C.nn.GroupNorm(num_groups, num_channels, eps, affine, _dt(dtype)))


def _conv_class(name, rank):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", *, dtype=None):
        NativeModule.__init__(self, _C.nn.Conv(rank, in_channels, out_channels, kernel_size,
                                               stride, padding, dilation, groups, bias, _dt(dtype),
                                               padding_mode))
        self.padding_mode = padding_mode
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")
    return type(name, (NativeModule,), {"__init__": __init__, "extra_repr": extra_repr})


Conv1d = _conv_class("Conv1d", 1)
Conv2d = _conv_class("Conv2d", 2)
Conv3d = _conv_class("Conv3d", 3)


def _conv_transpose_class(name, rank):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, *, dtype=None):
        NativeModule.__init__(self, _C.nn.ConvTranspose(rank, in_channels, out_channels,
                                                        kernel_size, stride, padding,
                                                        output_padding, groups, bias, dilation,
                                                        _dt(dtype)))
    return type(name, (NativeModule,), {"__init__": __init__})


ConvTranspose1d = _conv_transpose_class("ConvTranspose1d", 1)
ConvTranspose2d = _conv_transpose_class("ConvTranspose2d", 2)
ConvTranspose3d = _conv_transpose_class("ConvTranspose3d", 3)


def _pool_classes(rank):
    def max_init(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        NativeModule.__init__(self, _C.nn.MaxPool(rank, kernel_size, _stride(stride), padding,
                                                  dilation, ceil_mode))
        self.return_indices = return_indices
        self._arguments = (kernel_size, stride, padding, dilation, ceil_mode)

    def max_forward(self, x):
        if not self.return_indices:
            return self._native.forward(x)
        # (the values and where each maximum is: the functional form returns both)
        return getattr(F, f"max_pool{rank}d")(x, *self._arguments, return_indices=True)

    def avg_init(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        NativeModule.__init__(self, _C.nn.AvgPool(rank, kernel_size, _stride(stride), padding,
                                                  ceil_mode, count_include_pad, divisor_override))

    def adaptive_avg_init(self, output_size):
        NativeModule.__init__(self, _C.nn.AdaptiveAvgPool(rank, output_size))

    def adaptive_max_init(self, output_size, return_indices=False):
        NativeModule.__init__(self, _C.nn.AdaptiveMaxPool(rank, output_size))
        self.return_indices = return_indices
        self._output_size = output_size

    def adaptive_max_forward(self, x):
        if not self.return_indices:
            return self._native.forward(x)
        return getattr(F, f"adaptive_max_pool{rank}d")(x, self._output_size, return_indices=True)
    return (type(f"MaxPool{rank}d", (NativeModule,), {"__init__": max_init,
                                                      "forward": max_forward}),
            type(f"AvgPool{rank}d", (NativeModule,), {"__init__": avg_init}),
            type(f"AdaptiveAvgPool{rank}d", (NativeModule,), {"__init__": adaptive_avg_init}),
            type(f"AdaptiveMaxPool{rank}d", (NativeModule,), {"__init__": adaptive_max_init,
                                                              "forward": adaptive_max_forward}))


MaxPool1d, AvgPool1d, AdaptiveAvgPool1d, AdaptiveMaxPool1d = _pool_classes(1)
MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, AdaptiveMaxPool2d = _pool_classes(2)
MaxPool3d, AvgPool3d, AdaptiveAvgPool3d, AdaptiveMaxPool3d = _pool_classes(3)


class Dropout(NativeModule):
    def __init__(self, p=0.5, inplace=False):
        if inplace:
            raise _C.NotImplementedError("Dropout(inplace=True) is not implemented")
        super().__init__(_C.nn.Dropout(p))
        self.p = p


class Dropout2d(NativeModule):
    def __init__(self, p=0.5, inplace=False):
        if inplace:
            raise _C.NotImplementedError("Dropout2d(inplace=True) is not implemented")
        super().__init__(_C.nn.Dropout2d(p))
        self.p = p


class GELU(NativeModule):
    def __init__(self, approximate="none"):
        super().__init__(_C.nn.GELU(approximate))


class ReLU(NativeModule):
    def __init__(self, inplace=False):
        if inplace:
            raise _C.NotImplementedError("ReLU(inplace=True) is not implemented")
        super().__init__(_C.nn.ReLU())


class Flatten(NativeModule):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__(_C.nn.Flatten(start_dim, end_dim))


def _rnn_class(kind):
    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, *, dtype=None):
        NativeModule.__init__(self, _C.nn.make_rnn(kind, input_size, hidden_size, num_layers,
                                                   bias, batch_first, dropout, bidirectional,
                                                   nonlinearity, _dt(dtype)))

    def forward(self, input, hx=None):
        return self._native.forward(input, hx)
    return type(kind, (NativeModule,), {"__init__": __init__, "forward": forward})


RNN = _rnn_class("RNN")
LSTM = _rnn_class("LSTM")
GRU = _rnn_class("GRU")


class MultiheadAttention(NativeModule):
    """torch.nn.MultiheadAttention: forward returns (output, weights); weights is None with
    need_weights=False (then the fused scaled_dot_product_attention runs)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, *, dtype=None):
        super().__init__(_C.nn.make_multihead_attention(embed_dim, num_heads, dropout, bias,
                                                        add_bias_kv, add_zero_attn, kdim, vdim,
                                                        batch_first, _dt(dtype)))
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        return self._native.forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                                    average_attn_weights, is_causal)


def _layer_config(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                  batch_first, norm_first, bias, dtype):
    if not isinstance(activation, str):
        raise _C.NotImplementedError("a transformer layer's activation must be \"relu\" or "
                                     "\"gelu\" (a callable is not supported)")
    return dict(d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward, dropout=dropout,
                activation=activation, layer_norm_eps=layer_norm_eps, batch_first=batch_first,
                norm_first=norm_first, bias=bias, dtype=dtype)


def _layer_args(c):
    return (c["dim_feedforward"], c["dropout"], c["activation"], c["layer_norm_eps"],
            c["batch_first"], c["norm_first"], c["bias"], _dt(c["dtype"]))


class TransformerEncoderLayer(NativeModule):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True, *,
                 dtype=None):
        config = _layer_config(d_model, nhead, dim_feedforward, dropout, activation,
                               layer_norm_eps, batch_first, norm_first, bias, dtype)
        super().__init__(_C.nn.make_transformer_layer(False, d_model, nhead, *_layer_args(config)))
        self._config = config

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        return self._native.forward(src, src_mask, src_key_padding_mask, is_causal)


class TransformerDecoderLayer(NativeModule):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True, *,
                 dtype=None):
        config = _layer_config(d_model, nhead, dim_feedforward, dropout, activation,
                               layer_norm_eps, batch_first, norm_first, bias, dtype)
        super().__init__(_C.nn.make_transformer_layer(True, d_model, nhead, *_layer_args(config)))
        self._config = config

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        return self._native.forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                                    memory_key_padding_mask, tgt_is_causal, memory_is_causal)


def _stack(decoder, layer, num_layers, norm):
    """A C++ encoder or decoder of num_layers copies of `layer` (each starts with its weights, as
    torch's deep copies) and `norm`'s final LayerNorm."""
    kind = TransformerDecoderLayer if decoder else TransformerEncoderLayer
    if not isinstance(layer, kind):
        raise TypeError(f"expected a kiln.nn.{kind.__name__}, got {type(layer).__name__}")
    c = layer._config
    native = _C.nn.make_transformer_stack(decoder, c["d_model"], c["nhead"], num_layers,
                                          norm is not None, *_layer_args(c))
    module = NativeModule(native)
    state = layer.state_dict()
    for i in range(num_layers):
        module._modules[f"layers.{i}"].load_state_dict(state)
    if norm is not None:
        module._modules["norm"].load_state_dict(norm.state_dict())
    return native


class TransformerEncoder(NativeModule):
    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        native = _stack(False, encoder_layer, num_layers, norm)
        super().__init__(native)
        self.num_layers = num_layers

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        return self._native.forward(src, mask, src_key_padding_mask, bool(is_causal))


class TransformerDecoder(NativeModule):
    def __init__(self, decoder_layer, num_layers, norm=None):
        native = _stack(True, decoder_layer, num_layers, norm)
        super().__init__(native)
        self.num_layers = num_layers

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        return self._native.forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                                    memory_key_padding_mask, bool(tgt_is_causal),
                                    memory_is_causal)


class Transformer(NativeModule):
    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 bias=True, *, dtype=None):
        if custom_encoder is not None or custom_decoder is not None:
            raise _C.NotImplementedError("Transformer(custom_encoder/custom_decoder) is not "
                                         "implemented")
        c = _layer_config(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                          batch_first, norm_first, bias, dtype)
        super().__init__(_C.nn.make_transformer(d_model, nhead, num_encoder_layers,
                                                num_decoder_layers, *_layer_args(c)))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        return self._native.forward(src, tgt, src_mask, tgt_mask, memory_mask,
                                    src_key_padding_mask, tgt_key_padding_mask,
                                    memory_key_padding_mask, bool(src_is_causal),
                                    bool(tgt_is_causal), memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        return _C.nn.Transformer.generate_square_subsequent_mask(sz, _dt(dtype))


class GPT(NativeModule):
    """The character-level GPT of Kiln's demo (docs/training.md): forward(idx) gives logits,
    loss(idx, targets) the mean next-token cross entropy."""

    def __init__(self, vocab_size, block_size, n_layer=4, n_head=4, n_embd=128, dropout=0.0,
                 tied_head=True, *, dtype=None):
        super().__init__(_C.nn.make_gpt(vocab_size, block_size, n_layer, n_head, n_embd, dropout,
                                        tied_head, _dt(dtype)))

    def loss(self, idx, targets):
        return self._native.loss(idx, targets)

    def generate(self, idx, new_tokens, temperature=1.0):
        return self._native.generate(idx, new_tokens, temperature)


# ---- losses and activations as modules (over nn.functional) ----
from . import functional as F  # noqa: E402


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(_Loss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        self.weight, self.ignore_index, self.label_smoothing = weight, ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_Loss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class SiLU(Module):
    def forward(self, x):
        return F.silu(x)


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)


class Identity(Module):
    def forward(self, x):
        return x
