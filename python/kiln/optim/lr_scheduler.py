"""kiln.optim.lr_scheduler: torch.optim.lr_scheduler's schedulers over the C++ ones
(kiln/optim/lr_scheduler.h, PyTorch's formulas). Each sets its optimizer's learning rate (and
OneCycleLR its momentum) when made and at every step(); param_groups[0] follows."""
from .. import _C


def _sync(optimizer):
    """param_groups[0]'s lr and momentum as the C++ optimizer now has them."""
    group, native = optimizer.param_groups[0], optimizer._native
    dict.__setitem__(group, "lr", native.lr)
    momentum = native.momentum
    if momentum is not None and "momentum" in group:
        dict.__setitem__(group, "momentum", momentum)
    if momentum is not None and "betas" in group:
        dict.__setitem__(group, "betas", (momentum, group["betas"][1]))


class LRScheduler:
    """Base of the epoch-indexed schedulers (torch.optim.lr_scheduler.LRScheduler)."""

    def __init__(self, optimizer, native):
        self.optimizer = optimizer
        self._native = native
        _sync(optimizer)

    def step(self):
        self._native.step()
        _sync(self.optimizer)

    def get_last_lr(self):
        return [self._native.last_lr]

    @property
    def last_epoch(self):
        return self._native.last_epoch

    @property
    def base_lrs(self):
        return [self._native.base_lr]


class StepLR(LRScheduler):
    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        super().__init__(optimizer, _C.optim.StepLR(optimizer._native, step_size, gamma,
                                                     last_epoch))


class MultiStepLR(LRScheduler):
    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        super().__init__(optimizer, _C.optim.MultiStepLR(optimizer._native, list(milestones),
                                                          gamma, last_epoch))


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer, gamma, last_epoch=-1):
        super().__init__(optimizer, _C.optim.ExponentialLR(optimizer._native, gamma, last_epoch))


class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        super().__init__(optimizer, _C.optim.CosineAnnealingLR(optimizer._native, T_max, eta_min,
                                                                last_epoch))


class LinearLR(LRScheduler):
    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        super().__init__(optimizer, _C.optim.LinearLR(optimizer._native, start_factor, end_factor,
                                                       total_iters, last_epoch))


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != 1:
                raise _C.ValueError(f"LambdaLR: one lr_lambda per parameter group (1), got "
                                    f"{len(lr_lambda)}")
            lr_lambda = lr_lambda[0]
        super().__init__(optimizer, _C.optim.LambdaLR(optimizer._native,
                                                       lambda epoch: float(lr_lambda(epoch)),
                                                       last_epoch))


class OneCycleLR(LRScheduler):
    """Stepped once per batch; with cycle_momentum it also cycles SGD's / RMSprop's momentum or
    Adam's / AdamW's beta1 between max_momentum and base_momentum."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        super().__init__(optimizer, _C.optim.OneCycleLR(
            optimizer._native, max_lr, total_steps or 0, epochs or 0, steps_per_epoch or 0,
            pct_start, anneal_strategy, cycle_momentum, base_momentum, max_momentum, div_factor,
            final_div_factor, three_phase, last_epoch))


class ReduceLROnPlateau:
    """Lowers the lr by `factor` when the metric given to step() stops improving for
    `patience` epochs."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8):
        if isinstance(min_lr, (list, tuple)):
            min_lr = min_lr[0]
        self.optimizer = optimizer
        self._native = _C.optim.make_reduce_lr_on_plateau(
            optimizer._native, mode, factor, patience, threshold, threshold_mode, cooldown,
            min_lr, eps)

    def step(self, metrics):
        self._native.step(float(metrics))
        _sync(self.optimizer)

    def get_last_lr(self):
        return [self._native.last_lr]

    @property
    def num_bad_epochs(self):
        return self._native.num_bad_epochs

    @property
    def best(self):
        return self._native.best
