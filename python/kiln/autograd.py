"""Grad mode: kiln.no_grad(), kiln.enable_grad(), kiln.set_grad_enabled(mode), as torch's."""
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
