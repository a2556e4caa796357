"""Kiln: a tensor library with a just-in-time compiler, torch-like from Python.

The C++ core does the work (``kiln._C``); this package gives it torch's names. The guide is
docs/python.md in the source tree.
"""
import os as _os

from . import _C
from ._C import (  # noqa: F401  (re-exported)
    Tensor, dtype, bool, int32, int64, float32, float64,
    Error, ShapeError, DTypeError, IndexError, ValueError, NotImplementedError,
    GraphBreakError, RecompileError,
    zeros, ones, empty, full, rand, randn, randint, arange, linspace, eye,
    zeros_like, ones_like, empty_like, full_like, rand_like, randn_like,
    tensor, manual_seed, set_num_threads, get_num_threads, from_numpy, from_dlpack,
    is_grad_enabled, ops,
    save_file, load_file,
)
from .autograd import no_grad, enable_grad, set_grad_enabled  # noqa: F401
from . import compiler  # noqa: F401
from . import nn, optim, utils  # noqa: F401
from .compiler import compile, explain  # noqa: F401

# Frames in this package are not the user's code (graph breaks name the user's line).
_C._set_package_dir(_os.path.dirname(_os.path.abspath(__file__)) + _os.sep)

float = float32  # noqa: A001  (torch.float)
double = float64
long = int64
int = int32  # noqa: A001

# Every public op and function of the registries as kiln.<name> (the schema gives the
# signature); those of submodules (kiln.nn.functional) are placed there.
from ._functions import *  # noqa: F401,F403,E402

__version__ = "0.1.0"
