"""Autograd from Python: grad modes (kiln.no_grad(), enable_grad(), set_grad_enabled(mode)) and
user-defined differentiable functions (kiln.autograd.Function), as torch's."""
import functools

from . import _C


class _GradMode:
    """Sets grad mode for a ``with`` block, or for every call of a decorated function."""

    _enabled = True

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Ops inside record no gradients (torch.no_grad)."""

    _enabled = False


class enable_grad(_GradMode):
    """Ops inside record gradients, even within no_grad (torch.enable_grad)."""

    _enabled = True


class set_grad_enabled(_GradMode):
    """Sets grad mode now; as a context manager, restores the previous mode on exit."""

    def __init__(self, mode):
        self._prev = _C.is_grad_enabled()
        self._enabled = mode
        _C._set_grad_enabled(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


FunctionCtx = _C._FunctionCtx


class Function:
    """A differentiable function with its own backward (torch.autograd.Function)::

        class Square(kiln.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        y = Square.apply(x)

    forward runs without recording gradients and returns a tensor or a tuple of them; backward
    gets one gradient per output and returns one per forward argument (None where there is
    none). ctx takes any other attribute (ctx.scale = 2); ctx.needs_input_grad says which
    arguments want a gradient.
    """

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a kiln.autograd.Function must define forward")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a kiln.autograd.Function must define backward")

    @classmethod
    def apply(cls, *args):
        return _C._apply_function(cls, *args)
