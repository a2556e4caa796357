"""kiln.nn.functional (torch.nn.functional): convolution, pooling, normalisation, dropout,
attention, losses and activations. Every function here comes from Kiln's function registry:
its signature and docstring are the C++ definition's schema and doc."""
from .. import _C

globals().update(_C.functions.submodules.get("nn.functional", {}))
__all__ = sorted(_C.functions.submodules.get("nn.functional", {}))
