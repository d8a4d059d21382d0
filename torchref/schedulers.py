"""torch.optim.lr_scheduler built from a name and keyword arguments, stepped per
optimizer step: the twin of ``jaxgrad.optim.schedulers``.

``scheduler_kwargs`` (pure Python, shared by both frameworks' builders through
``scripts/train.py``) fills the arguments a training run implies: the schedule
length from the run's total steps, OneCycleLR's ``max_lr`` from ``lr``.
``SteppedOptimizer`` calls ``scheduler.step()`` after every ``optimizer.step()``, so
a training loop written for a plain optimizer follows the schedule unchanged, and
checkpoints the scheduler's state with the optimizer's.
"""

from __future__ import annotations

import torch

NAMES = (
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "LinearLR",
    "ConstantLR",
    "OneCycleLR",
    "PolynomialLR",
)
# the same completion as jaxgrad.optim.schedulers.for_run (no shared module: torchref
# never imports jax); parity_tests/test_schedulers.py checks the two agree
_LENGTH_ARGUMENT = {
    "CosineAnnealingLR": "T_max",
    "OneCycleLR": "total_steps",
    "PolynomialLR": "total_iters",
}


def scheduler_kwargs(name: str, lr: float, total_steps: int, **given) -> dict:
    """The scheduler's keyword arguments for a run of ``total_steps`` optimizer steps.

    Raises:
      ValueError: for a name not in ``NAMES``.
    """
    if name not in NAMES:
        raise ValueError(f"`scheduler` (={name!r}) must be one of {', '.join(NAMES)}.")
    kwargs = dict(given)
    if name in _LENGTH_ARGUMENT:
        kwargs.setdefault(_LENGTH_ARGUMENT[name], total_steps)
    if name == "OneCycleLR":
        kwargs.setdefault("max_lr", lr)
    return kwargs


def make_scheduler(name: str, optimizer: torch.optim.Optimizer, **kwargs):
    """``torch.optim.lr_scheduler.<name>(optimizer, **kwargs)``."""
    if name not in NAMES:
        raise ValueError(f"`scheduler` (={name!r}) must be one of {', '.join(NAMES)}.")
    return getattr(torch.optim.lr_scheduler, name)(optimizer, **kwargs)


class SteppedOptimizer:
    """An optimizer whose ``step()`` also steps its learning-rate scheduler.

    Every other attribute (``zero_grad``, ``param_groups``, ``state``) is the wrapped
    optimizer's. ``state_dict()`` is the optimizer's with the scheduler's under
    ``"scheduler"`` (its step count, last learning rates and, for the recursive
    schedulers, what their next step reads), and ``load_state_dict`` restores both:
    a checkpointed run resumes on the same schedule step.
    """

    SCHEDULER_KEY = "scheduler"

    def __init__(self, optimizer: torch.optim.Optimizer, scheduler):
        self.optimizer, self.scheduler = optimizer, scheduler

    def step(self, closure=None):
        result = self.optimizer.step(closure)
        self.scheduler.step()
        return result

    def state_dict(self) -> dict:
        return {**self.optimizer.state_dict(), self.SCHEDULER_KEY: self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.SCHEDULER_KEY not in state:
            raise ValueError(
                f"the state has no {self.SCHEDULER_KEY!r} entry: it was saved "
                f"without a scheduler, and this optimizer steps a "
                f"{type(self.scheduler).__name__}"
            )
        state = dict(state)
        scheduler = state.pop(self.SCHEDULER_KEY)
        self.optimizer.load_state_dict(state)
        self.scheduler.load_state_dict(scheduler)

    def __getattr__(self, name):
        return getattr(self.optimizer, name)
