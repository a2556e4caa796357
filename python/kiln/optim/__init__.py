"""kiln.optim: the library's optimizers with torch's constructors and param_groups.

Each wraps a C++ optimizer that updates the very tensors the parameters hold (one fused update
op per parameter). One parameter group: param_groups[0]["lr"] = x sets the learning rate, as a
scheduler would.
"""
from .. import _C


class _ParamGroup(dict):
    """A param group dict whose "lr" (and "momentum" / "betas") reach the C++ optimizer."""

    def __init__(self, optimizer, params, defaults):
        super().__init__(defaults, params=params)
        self._optimizer = optimizer

    def __setitem__(self, key, value):
        native = self._optimizer._native
        if key == "lr":
            native.set_lr(float(value))
        elif key == "momentum":
            native.set_momentum(float(value))
        elif key == "betas":
            native.set_momentum(float(value[0]))
        super().__setitem__(key, value)


class Optimizer:
    """Base of kiln.optim's optimizers (torch.optim.Optimizer)."""

    def __init__(self, params, defaults, make):
        params = list(params)
        if params and isinstance(params[0], dict):
            if len(params) > 1:
                raise _C.NotImplementedError("several parameter groups are not implemented")
            params = list(params[0]["params"])
        if not params:
            raise _C.ValueError(f"{type(self).__name__} got an empty parameter list")
        self._native = make(params)
        self.defaults = dict(defaults)
        self.param_groups = [_ParamGroup(self, params, defaults)]

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ..autograd import enable_grad
            with enable_grad():
                loss = closure()
        self._native.step()
        return loss

    def zero_grad(self, set_to_none=True):
        self._native.zero_grad(set_to_none)

    def __repr__(self):
        options = ", ".join(f"{k}={v}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({options})"


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize),
                         lambda p: _C.optim.SGD(p, lr, momentum, dampening, weight_decay,
                                                nesterov, maximize))


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize),
                         lambda p: _C.optim.Adam(p, lr, betas, eps, weight_decay, amsgrad,
                                                 maximize, False))


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize),
                         lambda p: _C.optim.Adam(p, lr, betas, eps, weight_decay, amsgrad,
                                                 maximize, True))


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, *, maximize=False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize),
                         lambda p: _C.optim.Adagrad(p, lr, lr_decay, weight_decay,
                                                    initial_accumulator_value, eps, maximize))


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize),
                         lambda p: _C.optim.RMSprop(p, lr, alpha, eps, weight_decay, momentum,
                                                    centered, maximize))


class Adadelta(Optimizer):
    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, *, maximize=False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize),
                         lambda p: _C.optim.Adadelta(p, lr, rho, eps, weight_decay, maximize))


from . import lr_scheduler  # noqa: E402,F401  (torch.optim.lr_scheduler's place)
