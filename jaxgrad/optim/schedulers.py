"""torch.optim.lr_scheduler as optax schedules: one factory per torch class.

Each factory has the torch class's name, arguments and defaults, except that it
takes the optimizer's base learning rate as ``lr`` where torch reads it from the
optimizer (``OneCycleLR`` takes ``max_lr`` as torch does). It returns an optax
schedule ``count -> lr``: ``sched(t)`` is the learning rate torch uses for the
optimizer step numbered ``t`` (0-based), i.e. ``scheduler.get_last_lr()`` after ``t``
calls of ``scheduler.step()``. Every jaxgrad optimizer accepts it as ``lr``::

    sched = schedulers.SequentialLR([schedulers.LinearLR(lr=0.1, start_factor=0.1,
                                                         total_iters=10),
                                     schedulers.CosineAnnealingLR(lr=0.1, T_max=90)],
                                    milestones=[10])
    optimizer = jaxgrad.optim.sgd(lr=sched, momentum=0.9)

The schedules are the closed forms of torch's (mostly recursive) ``get_lr``; they
agree to the float64 parity tier over whole trajectories. ``last_epoch`` is accepted
only as -1: a pure schedule resumes from the step count itself.
``OneCycleLR`` (``jaxgrad.optim.cycling``) also cycles the momentum, as torch's does by
default: its schedule carries ``.momentum`` for the optimizer's ``momentum`` /
``betas[0]``, and an optimizer given it as ``lr`` without that momentum raises.
``ReduceLROnPlateau`` depends on a metric, so it is a pure state machine instead
(``jaxgrad.optim.plateau``), re-exported here.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import jax.numpy as jnp
import optax

from jaxgrad.optim._args import check_hyper, check_int, check_last_epoch, float_count
from jaxgrad.optim.cycling import (CyclingSchedule, OneCycleLR, cycled_momentum,  # noqa: F401
                                   with_cycled_momentum)
from jaxgrad.optim.plateau import PlateauState, ReduceLROnPlateau, injected_lr  # noqa: F401


def StepLR(lr: float, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
    """``lr · gamma^(t // step_size)``."""
    lr = check_hyper("lr", lr)
    check_int("step_size", step_size)
    gamma = check_hyper("gamma", gamma)
    check_last_epoch(last_epoch)
    return lambda count: lr * gamma ** (jnp.asarray(count) // step_size).astype(
        jnp.result_type(float))


def MultiStepLR(lr: float, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
    """``lr · gamma^(number of milestones <= t)`` (a repeated milestone counts twice, as torch)."""
    lr = check_hyper("lr", lr)
    if not isinstance(milestones, (list, tuple)) or not all(
            isinstance(m, int) and not isinstance(m, bool) for m in milestones):
        raise TypeError(f"`milestones` (={milestones!r}) must be a list of ints.")
    gamma = check_hyper("gamma", gamma)
    check_last_epoch(last_epoch)
    marks = jnp.asarray(sorted(milestones) or [2**31 - 1])
    empty = not milestones

    def schedule(count):
        passed = 0 if empty else jnp.sum(marks <= jnp.asarray(count))
        return lr * gamma ** jnp.asarray(passed).astype(jnp.result_type(float))
    return schedule


def ExponentialLR(lr: float, gamma: float, last_epoch: int = -1):
    """``lr · gamma^t``."""
    lr = check_hyper("lr", lr)
    gamma = check_hyper("gamma", gamma)
    check_last_epoch(last_epoch)
    return lambda count: lr * gamma ** float_count(count)


def CosineAnnealingLR(lr: float, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
    """``eta_min + (lr − eta_min)·(1 + cos(π·t / T_max)) / 2`` (periodic past ``T_max``)."""
    lr = check_hyper("lr", lr)
    check_int("T_max", T_max)
    eta_min = check_hyper("eta_min", eta_min)
    check_last_epoch(last_epoch)
    return lambda count: eta_min + (lr - eta_min) * (1 + jnp.cos(math.pi * float_count(count) / T_max)) / 2


def CosineAnnealingWarmRestarts(lr: float, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                                last_epoch: int = -1):
    """Cosine annealing restarted after ``T_0``, then ``T_0·T_mult``, ``T_0·T_mult²``… steps."""
    lr = check_hyper("lr", lr)
    check_int("T_0", T_0)
    check_int("T_mult", T_mult)
    eta_min = check_hyper("eta_min", eta_min)
    check_last_epoch(last_epoch)
    # restart boundaries as Python ints, then the cycle of t by counting those passed
    starts, lengths, start, length = [], [], 0, T_0
    while start < 2**31 and len(starts) < 64:
        starts.append(start)
        lengths.append(length)
        start, length = start + length, length * T_mult
    starts_arr, lengths_arr = jnp.asarray(starts), jnp.asarray(lengths)

    def schedule(count):
        count = jnp.asarray(count)
        if T_mult == 1:
            t_cur, t_i = count % T_0, T_0
        else:
            cycle = jnp.sum(starts_arr <= count) - 1
            t_cur, t_i = count - starts_arr[cycle], lengths_arr[cycle]
        ratio = float_count(t_cur) / float_count(t_i)
        return eta_min + (lr - eta_min) * (1 + jnp.cos(math.pi * ratio)) / 2
    return schedule


def LinearLR(lr: float, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
             total_iters: int = 5, last_epoch: int = -1):
    """``lr · (start + (end − start)·min(t, total_iters) / total_iters)``."""
    lr = check_hyper("lr", lr)
    if not 0 < start_factor <= 1:
        raise ValueError(f"`start_factor` (={start_factor!r}) must be > 0 and <= 1.")
    if not 0 <= end_factor <= 1:
        raise ValueError(f"`end_factor` (={end_factor!r}) must be >= 0 and <= 1.")
    check_int("total_iters", total_iters)
    check_last_epoch(last_epoch)
    return lambda count: lr * (start_factor + (end_factor - start_factor)
                               * jnp.minimum(float_count(count), total_iters) / total_iters)


def ConstantLR(lr: float, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
    """``lr · factor`` for ``t < total_iters``, then ``lr``."""
    lr = check_hyper("lr", lr)
    if not 0 <= factor <= 1:
        raise ValueError(f"`factor` (={factor!r}) must be >= 0 and <= 1.")
    check_int("total_iters", total_iters, low=0)
    check_last_epoch(last_epoch)
    return lambda count: jnp.where(jnp.asarray(count) < total_iters, lr * factor, lr) * jnp.ones(
        (), jnp.result_type(float))


def PolynomialLR(lr: float, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
    """``lr · (1 − min(t, total_iters) / total_iters)^power``."""
    lr = check_hyper("lr", lr)
    check_int("total_iters", total_iters)
    power = check_hyper("power", power)
    check_last_epoch(last_epoch)
    return lambda count: lr * (1 - jnp.minimum(float_count(count), total_iters) / total_iters) ** power


def LambdaLR(lr: float, lr_lambda: Callable, last_epoch: int = -1):
    """``lr · lr_lambda(t)``; ``lr_lambda`` must be written with ``jnp`` to run under ``jit``."""
    lr = check_hyper("lr", lr)
    if not callable(lr_lambda):
        raise TypeError(f"`lr_lambda` (={lr_lambda!r}) must be a function of the step count.")
    check_last_epoch(last_epoch)
    return lambda count: lr * lr_lambda(jnp.asarray(count))


def SequentialLR(schedulers: Sequence[Callable], milestones: Sequence[int], last_epoch: int = -1):
    """``schedulers[i](t − milestones[i−1])`` between milestones, as torch restarts each
    scheduler at its milestone (``optax.join_schedules``)."""
    if not isinstance(schedulers, (list, tuple)) or not all(callable(s) for s in schedulers):
        raise TypeError("`schedulers` must be a list of schedules (count -> lr).")
    if not isinstance(milestones, (list, tuple)) or len(milestones) != len(schedulers) - 1:
        raise ValueError(
            f"`milestones` (={milestones!r}) must have one entry fewer than `schedulers` "
            f"({len(schedulers)}), as torch requires.")
    if list(milestones) != sorted(milestones):
        raise ValueError(f"`milestones` (={milestones!r}) must be increasing.")
    cycling = [i for i, s in enumerate(schedulers) if cycled_momentum(s) is not None]
    if cycling:
        raise ValueError(
            f"`schedulers[{cycling[0]}]` cycles momentum (cycle_momentum=True), which "
            "SequentialLR cannot hand on to the optimizer; build it with "
            "cycle_momentum=False (in torch too).")
    check_last_epoch(last_epoch)
    return optax.join_schedules(list(schedulers), list(milestones))


SCHEDULERS = {f.__name__: f for f in (
    StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, CosineAnnealingWarmRestarts,
    LinearLR, ConstantLR, OneCycleLR, PolynomialLR, LambdaLR, SequentialLR)}

_LENGTH_ARGUMENT = {"CosineAnnealingLR": "T_max", "OneCycleLR": "total_steps",
                    "PolynomialLR": "total_iters"}


def run_kwargs(name: str, lr: float, total_steps: int, **kwargs) -> dict:
    """The keyword arguments of the schedule ``name`` for a training run of
    ``total_steps`` optimizer steps: ``kwargs`` plus what the run implies, as
    ``torchref.schedulers.scheduler_kwargs`` fills them for torch: the schedule length
    (``T_max``, ``total_steps``, ``total_iters``) and OneCycleLR's ``max_lr`` (= ``lr``).

    Raises:
      ValueError: for a name ``for_run`` does not build.
    """
    names = [n for n in SCHEDULERS if n not in ("LambdaLR", "SequentialLR")]
    if name not in names:
        raise ValueError(f"`scheduler` (={name!r}) must be one of {', '.join(names)}.")
    kwargs = dict(kwargs)
    if name in _LENGTH_ARGUMENT:
        kwargs.setdefault(_LENGTH_ARGUMENT[name], total_steps)
    if name == "OneCycleLR":
        kwargs.setdefault("max_lr", lr)
    return kwargs


def for_run(name: str, lr: float, total_steps: int, **kwargs):
    """The schedule ``name`` for a training run of ``total_steps`` optimizer steps,
    with ``run_kwargs``' arguments. OneCycleLR keeps torch's ``cycle_momentum=True``:
    give the optimizer its momentum with
    ``with_cycled_momentum(factory, {"lr": schedule, ...})``.
    """
    kwargs = run_kwargs(name, lr, total_steps, **kwargs)
    if name == "OneCycleLR":
        return OneCycleLR(**kwargs)
    return SCHEDULERS[name](lr=lr, **kwargs)
