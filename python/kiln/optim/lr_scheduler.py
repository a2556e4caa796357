"""kiln.optim.lr_scheduler: torch.optim.lr_scheduler's schedulers over the C++ ones
(kiln/optim/lr_scheduler.h, PyTorch's formulas). Each sets its optimizer's learning rates (and
OneCycleLR its momentum) when made and at every step(), one C++ scheduler per parameter group;
param_groups follow."""
from .. import _C


def _sync(optimizer):
    """Each param group's lr and momentum as its C++ optimizer now has them."""
    for group, native in zip(optimizer.param_groups, optimizer._natives):
        dict.__setitem__(group, "lr", native.lr)
        momentum = native.momentum
        if momentum is not None and "momentum" in group:
            dict.__setitem__(group, "momentum", momentum)
        if momentum is not None and "betas" in group:
            dict.__setitem__(group, "betas", (momentum, group["betas"][1]))


def _per_group(value, optimizer, name):
    """`value` for each parameter group: a list or tuple gives one per group, else all share it."""
    groups = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != groups:
            raise _C.ValueError(f"expected {groups} values of {name} (one per parameter group), "
                                f"got {len(value)}")
        return list(value)
    return [value] * groups


class LRScheduler:
    """Base of the epoch-indexed schedulers (torch.optim.lr_scheduler.LRScheduler).
    `make(native_optimizer, group_index)` builds one group's C++ scheduler."""

    def __init__(self, optimizer, make):
        self.optimizer = optimizer
        self._natives = [make(native, i) for i, native in enumerate(optimizer._natives)]
        _sync(optimizer)

    def step(self):
        for native in self._natives:
            native.step()
        _sync(self.optimizer)

    def get_last_lr(self):
        return [native.last_lr for native in self._natives]

    @property
    def last_epoch(self):
        return self._natives[0].last_epoch

    @property
    def base_lrs(self):
        return [native.base_lr for native in self._natives]


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        super().__init__(optimizer, lambda native, _: _C.optim.StepLR(native, step_size, gamma,
                                                                       last_epoch))


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        super().__init__(optimizer, lambda native, _: _C.optim.MultiStepLR(
            native, list(milestones), gamma, last_epoch))


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma, last_epoch=-1):
        super().__init__(optimizer, lambda native, _: _C.optim.ExponentialLR(native, gamma,
                                                                              last_epoch))


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        super().__init__(optimizer, lambda native, _: _C.optim.CosineAnnealingLR(
            native, T_max, eta_min, last_epoch))


class LinearLR(LRScheduler):
    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        super().__init__(optimizer, lambda native, _: _C.optim.LinearLR(
            native, start_factor, end_factor, total_iters, last_epoch))


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); a list gives each parameter group its own function."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        lambdas = _per_group(lr_lambda, optimizer, "lr_lambda")
        super().__init__(optimizer, lambda native, i: _C.optim.LambdaLR(
            native, lambda epoch, f=lambdas[i]: float(f(epoch)), last_epoch))


class OneCycleLR(LRScheduler):
    """Stepped once per batch; with cycle_momentum it also cycles SGD's / RMSprop's momentum or
    Adam's / AdamW's beta1 between max_momentum and base_momentum."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        max_lrs = _per_group(max_lr, optimizer, "max_lr")
        base_momenta = _per_group(base_momentum, optimizer, "base_momentum")
        max_momenta = _per_group(max_momentum, optimizer, "max_momentum")
        super().__init__(optimizer, lambda native, i: _C.optim.OneCycleLR(
            native, max_lrs[i], total_steps or 0, epochs or 0, steps_per_epoch or 0, pct_start,
            anneal_strategy, cycle_momentum, base_momenta[i], max_momenta[i], div_factor,
            final_div_factor, three_phase, last_epoch))


class ReduceLROnPlateau:
    """Lowers the lr by `factor` when the metric given to step() stops improving for
    `patience` epochs."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8):
        min_lrs = _per_group(min_lr, optimizer, "min_lr")
        self.optimizer = optimizer
        # One per group, all fed the same metric: they agree on every decision, as torch's one.
        self._natives = [
            _C.optim.make_reduce_lr_on_plateau(native, mode, factor, patience, threshold,
                                               threshold_mode, cooldown, min_lrs[i], eps)
            for i, native in enumerate(optimizer._natives)]

    def step(self, metrics):
        for native in self._natives:
            native.step(float(metrics))
        _sync(self.optimizer)

    def get_last_lr(self):
        return [native.last_lr for native in self._natives]

    @property
    def num_bad_epochs(self):
        return self._natives[0].num_bad_epochs

    @property
    def best(self):
        return self._natives[0].best
