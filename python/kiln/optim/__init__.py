"""kiln.optim: the library's optimizers with torch's constructors and param_groups.

Each parameter group is a C++ optimizer of its own that updates the very tensors the parameters
hold (one fused update op per parameter), made with the group's options. Setting a group's "lr"
(and "momentum" / "betas"), as a scheduler does, reaches its C++ optimizer; the other options are
fixed when the group is made.
"""
from .. import _C

# Options a C++ optimizer takes new values of after it is made.
_SETTABLE = ("lr", "momentum", "betas")


class _ParamGroup(dict):
    """A param group dict whose "lr" (and "momentum" / "betas") reach its C++ optimizer."""

    def __init__(self, native, group):
        super().__init__(group)
        self._native = native

    def __setitem__(self, key, value):
        native = self._native
        if key == "lr":
            native.set_lr(float(value))
        elif key == "momentum":
            native.set_momentum(float(value))
        elif key == "betas":
            native.set_momentum(float(value[0]))
            if float(value[1]) != float(self["betas"][1]):
                raise _C.NotImplementedError(
                    "param_groups: beta2 is fixed when the group is made; only beta1 changes")
        elif key in self and key != "params" and self[key] != value:
            raise _C.NotImplementedError(
                f"param_groups: {key!r} is fixed when the group is made (only "
                f"{', '.join(repr(k) for k in _SETTABLE)} change); add a new group or make a new "
                "optimizer")
        super().__setitem__(key, value)


class Optimizer:
    """Base of kiln.optim's optimizers (torch.optim.Optimizer): `params` is an iterable of
    tensors or of dicts (parameter groups, each with "params" and any options that differ from
    the defaults). `make(params, options)` builds one group's C++ optimizer."""

    def __init__(self, params, defaults, make):
        self.defaults = dict(defaults)
        self._make = make
        self._natives = []
        self.param_groups = []
        params = list(params)
        if not params:
            raise _C.ValueError(f"{type(self).__name__} got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        """Adds a group of parameters with its own options (the defaults for those it omits)."""
        if not isinstance(param_group, dict):
            raise _C.TypeError(f"{type(self).__name__}: a parameter group must be a dict, got "
                               f"{type(param_group).__name__}")
        if "params" not in param_group:
            raise _C.ValueError(f"{type(self).__name__}: a parameter group needs 'params'")
        params = param_group["params"]
        params = [params] if isinstance(params, _C.Tensor) else list(params)
        if not params:
            raise _C.ValueError(f"{type(self).__name__} got a parameter group with no parameters")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params) or len({id(p) for p in params}) != len(params):
            raise _C.ValueError(f"{type(self).__name__}: some parameters appear in more than one "
                                "parameter group")
        group = dict(self.defaults)
        group.update(param_group)
        group["params"] = params
        native = self._make(params, group)
        self._natives.append(native)
        self.param_groups.append(_ParamGroup(native, group))

    @property
    def _native(self):
        """The first group's C++ optimizer (the one a single-group optimizer has)."""
        return self._natives[0]

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ..autograd import enable_grad
            with enable_grad():
                loss = closure()
        for native in self._natives:
            native.step()
        return loss

    def zero_grad(self, set_to_none=True):
        for native in self._natives:
            native.zero_grad(set_to_none)

    def __repr__(self):
        options = ", ".join(f"{k}={v}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({options})"


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize),
                         lambda p, o: _C.optim.SGD(p, o["lr"], o["momentum"], o["dampening"],
                                                   o["weight_decay"], o["nesterov"],
                                                   o["maximize"]))


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize),
                         lambda p, o: _C.optim.Adam(p, o["lr"], o["betas"], o["eps"],
                                                    o["weight_decay"], o["amsgrad"],
                                                    o["maximize"], False))


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize),
                         lambda p, o: _C.optim.Adam(p, o["lr"], o["betas"], o["eps"],
                                                    o["weight_decay"], o["amsgrad"],
                                                    o["maximize"], True))


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, *, maximize=False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize),
                         lambda p, o: _C.optim.Adagrad(p, o["lr"], o["lr_decay"],
                                                       o["weight_decay"],
                                                       o["initial_accumulator_value"], o["eps"],
                                                       o["maximize"]))


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, *, maximize=False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize),
                         lambda p, o: _C.optim.RMSprop(p, o["lr"], o["alpha"], o["eps"],
                                                       o["weight_decay"], o["momentum"],
                                                       o["centered"], o["maximize"]))


class Adadelta(Optimizer):
    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, *, maximize=False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize),
                         lambda p, o: _C.optim.Adadelta(p, o["lr"], o["rho"], o["eps"],
                                                        o["weight_decay"], o["maximize"]))


from . import lr_scheduler  # noqa: E402,F401  (torch.optim.lr_scheduler's place)
