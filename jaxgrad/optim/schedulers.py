"""torch.optim.lr_scheduler as optax schedules: one factory per torch class.

Each factory has the torch class's name, arguments and defaults, except that it
takes the optimizer's base learning rate as ``lr`` where torch reads it from the
optimizer (``OneCycleLR`` and ``CyclicLR`` take ``max_lr`` / ``base_lr`` as torch does;
``ChainedScheduler`` and ``SequentialLR`` take schedules). It returns a schedule
``count -> lr`` (a ``Schedule``, ``jaxgrad.optim.chaining``): ``sched(t)`` is the
learning rate torch uses for the optimizer step numbered ``t`` (0-based), i.e.
``scheduler.get_last_lr()`` after ``t`` calls of ``scheduler.step()``. Every jaxgrad
optimizer accepts it as ``lr``::

    sched = schedulers.SequentialLR([schedulers.LinearLR(lr=0.1, start_factor=0.1,
                                                         total_iters=10),
                                     schedulers.CosineAnnealingLR(lr=0.1, T_max=90)],
                                    milestones=[10])
    optimizer = jaxgrad.optim.sgd(lr=sched, momentum=0.9)

The schedules are the closed forms of torch's (mostly recursive) ``get_lr``; they
agree to the float64 parity tier over whole trajectories. Where the recursion and
torch's own closed form (``_get_closed_form_lr``, used only by the deprecated
``step(epoch)``) disagree, the schedule follows the recursion, which is what
``get_last_lr()`` shows (``ConstantLR``'s edges). ``last_epoch`` is accepted only as -1:
a pure schedule resumes from the step count itself. Each schedule also says how torch's
scheduler moves the optimizer's lr at every step, which ``ChainedScheduler`` and
``SequentialLR`` compose as torch does (``jaxgrad.optim.chaining``).
``OneCycleLR`` and ``CyclicLR`` (``jaxgrad.optim.cycling``) also cycle the momentum, as
torch's do by default: their schedule carries ``.momentum`` for the optimizer's
``momentum`` / ``betas[0]``, and an optimizer given it as ``lr`` without that momentum
raises. ``ReduceLROnPlateau`` depends on a metric, so it is a pure state machine instead
(``jaxgrad.optim.plateau``), re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxgrad.optim._args import check_hyper, check_int, check_last_epoch, float_count, int_count
from jaxgrad.optim.chaining import ChainedScheduler, Schedule, SequentialLR, scaling  # noqa: F401
from jaxgrad.optim.cycling import (  # noqa: F401
    CyclicLR,
    CyclingSchedule,
    OneCycleLR,
    cycled_momentum,
    with_cycled_momentum,
)
from jaxgrad.optim.plateau import PlateauState, ReduceLROnPlateau, injected_lr  # noqa: F401


def _steps(count) -> jax.Array:
    return jnp.asarray(count)


def _ones(count) -> jax.Array:
    return jnp.ones(jnp.shape(count), jnp.result_type(float))


def StepLR(lr: float, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> Schedule:
    """``lr · gamma^(t // step_size)``."""
    lr = check_hyper("lr", lr)
    check_int("step_size", step_size)
    gamma = check_hyper("gamma", gamma)
    check_last_epoch(last_epoch)
    return scaling(
        "StepLR",
        lr,
        lambda count: gamma ** (_steps(count) // step_size).astype(jnp.result_type(float)),
        lambda t: jnp.where((_steps(t) > 0) & (_steps(t) % step_size == 0), gamma, _ones(t)),
    )


def MultiStepLR(
    lr: float, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1
) -> Schedule:
    """``lr · gamma^(number of milestones <= t)`` (a repeated milestone counts twice, as torch)."""
    lr = check_hyper("lr", lr)
    if not isinstance(milestones, (list, tuple)) or not all(
        isinstance(m, int) and not isinstance(m, bool) for m in milestones
    ):
        raise TypeError(f"`milestones` (={milestones!r}) must be a list of ints.")
    gamma = check_hyper("gamma", gamma)
    check_last_epoch(last_epoch)
    marks = jnp.asarray(sorted(milestones) or [2**31 - 1])
    empty = not milestones

    def factor(count):
        passed = 0 if empty else jnp.sum(marks <= jnp.asarray(count))
        return gamma ** jnp.asarray(passed).astype(jnp.result_type(float))

    def ratio(t):  # torch: gamma ** (how often t is listed), at t = 0 too
        hits = 0 if empty else jnp.sum(marks == _steps(t)[..., None], axis=-1)
        return gamma ** jnp.asarray(hits).astype(jnp.result_type(float)) * _ones(t)

    return scaling("MultiStepLR", lr, factor, ratio)


def ExponentialLR(lr: float, gamma: float, last_epoch: int = -1) -> Schedule:
    """``lr · gamma^t``."""
    lr = check_hyper("lr", lr)
    gamma = check_hyper("gamma", gamma)
    check_last_epoch(last_epoch)
    return scaling(
        "ExponentialLR",
        lr,
        lambda count: gamma ** float_count(count),
        lambda t: jnp.where(_steps(t) > 0, gamma, _ones(t)),
    )


def CosineAnnealingLR(
    lr: float, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
) -> Schedule:
    """``eta_min + (lr − eta_min)·(1 + cos(π·t / T_max)) / 2`` (periodic past ``T_max``)."""
    lr = check_hyper("lr", lr)
    check_int("T_max", T_max)
    eta_min = check_hyper("eta_min", eta_min)
    check_last_epoch(last_epoch)

    def move(group_lr, t):  # torch's get_lr: towards eta_min; after each T_max, a jump
        t = _steps(t)
        steps = float_count(t)
        towards = (1 + jnp.cos(math.pi * steps / T_max)) / (
            1 + jnp.cos(math.pi * (steps - 1) / T_max)
        ) * (group_lr - eta_min) + eta_min
        jump = group_lr + (lr - eta_min) * (1 - math.cos(math.pi / T_max)) / 2
        return jnp.where(
            t == 0, group_lr, jnp.where((t - 1 - T_max) % (2 * T_max) == 0, jump, towards)
        )

    return Schedule(
        lambda count: (
            eta_min + (lr - eta_min) * (1 + jnp.cos(math.pi * float_count(count) / T_max)) / 2
        ),
        "CosineAnnealingLR",
        lr,
        "steps",
        move=move,
    )


def CosineAnnealingWarmRestarts(
    lr: float, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1
) -> Schedule:
    """Cosine annealing restarted after ``T_0``, then ``T_0·T_mult``, ``T_0·T_mult²``… steps."""
    lr = check_hyper("lr", lr)
    check_int("T_0", T_0)
    check_int("T_mult", T_mult)
    eta_min = check_hyper("eta_min", eta_min)
    check_last_epoch(last_epoch)
    # restart boundaries as Python ints, then the cycle of t by counting those passed
    starts: list[int] = []
    lengths: list[int] = []
    start, length = 0, T_0
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

    return Schedule(schedule, "CosineAnnealingWarmRestarts", lr, "sets")


def LinearLR(
    lr: float,
    start_factor: float = 1.0 / 3,
    end_factor: float = 1.0,
    total_iters: int = 5,
    last_epoch: int = -1,
) -> Schedule:
    """``lr · (start + (end − start)·min(t, total_iters) / total_iters)``."""
    lr = check_hyper("lr", lr)
    if not 0 < start_factor <= 1:
        raise ValueError(f"`start_factor` (={start_factor!r}) must be > 0 and <= 1.")
    if not 0 <= end_factor <= 1:
        raise ValueError(f"`end_factor` (={end_factor!r}) must be >= 0 and <= 1.")
    check_int("total_iters", total_iters)
    check_last_epoch(last_epoch)
    change = end_factor - start_factor

    def ratio(t):  # torch's get_lr
        t = _steps(t)
        step = 1.0 + change / (total_iters * start_factor + float_count(t - 1) * change)
        return jnp.where(t == 0, start_factor, jnp.where(t > total_iters, 1.0, step))

    return scaling(
        "LinearLR",
        lr,
        lambda count: (
            start_factor + change * jnp.minimum(float_count(count), total_iters) / total_iters
        ),
        ratio,
    )


def ConstantLR(
    lr: float, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1
) -> Schedule:
    """``lr · factor`` for ``t < total_iters``, then ``lr``, as ``get_last_lr()`` shows it.

    Two edges follow torch's recursive steps, not its closed form (``_get_closed_form_lr``,
    which says ``lr`` for both): with ``total_iters=0`` the constructor's step scales the
    lr by ``factor`` and no later step restores it (torch restores at ``t ==
    total_iters``, checked after ``t == 0``), so the lr stays ``lr · factor`` at every
    step; with ``factor=0`` and ``total_iters > 0`` torch's step ``total_iters`` divides
    by the factor and raises ZeroDivisionError, so the schedule is NaN from there.
    """
    lr = check_hyper("lr", lr)
    if not 0 <= factor <= 1:
        raise ValueError(f"`factor` (={factor!r}) must be >= 0 and <= 1.")
    check_int("total_iters", total_iters, low=0)
    check_last_epoch(last_epoch)
    if total_iters == 0:
        # SequentialLR restarts it with the closed form: lr, which then stays
        return scaling(
            "ConstantLR",
            lr,
            lambda count: factor * _ones(count),
            lambda t: jnp.where(_steps(t) == 0, factor, _ones(t)),
            restarted=lambda steps, lr_before: lr * _ones(steps),
        )
    restored = 1.0 if factor > 0 else math.nan

    def constant_factor(count):
        scaled = jnp.asarray(count) < total_iters
        return jnp.where(scaled, factor, restored) * _ones(count)

    def ratio(t):
        t = _steps(t)
        return jnp.where(
            t == 0, factor, jnp.where(t == total_iters, 1.0 / factor if factor else math.nan, 1.0)
        ) * _ones(t)

    return scaling("ConstantLR", lr, constant_factor, ratio)


def PolynomialLR(
    lr: float, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1
) -> Schedule:
    """``lr · (1 − min(t, total_iters) / total_iters)^power``, exactly 0 from ``total_iters``
    on (as torch: the steps left are counted in integers, not ``1 − t / total_iters``,
    which ``jit`` rounds to ±1e-16 and a power < 1 magnifies)."""
    lr = check_hyper("lr", lr)
    check_int("total_iters", total_iters)
    power = check_hyper("power", power)
    check_last_epoch(last_epoch)

    def factor(count):
        left = total_iters - jnp.minimum(_steps(count), total_iters)
        return (float_count(left) / total_iters) ** power

    def ratio(t):  # torch: ((1 - t/T) / (1 - (t-1)/T)) ** power, for 0 < t <= T
        t = _steps(t)
        left = float_count(total_iters - t)
        return jnp.where((t == 0) | (t > total_iters), 1.0, (left / (left + 1)) ** power)

    return scaling("PolynomialLR", lr, factor, ratio)


def LambdaLR(lr: float, lr_lambda: Callable, last_epoch: int = -1) -> Schedule:
    """``lr · lr_lambda(t)``; ``lr_lambda`` must be written with ``jnp`` to run under ``jit``."""
    lr = check_hyper("lr", lr)
    if not callable(lr_lambda):
        raise TypeError(f"`lr_lambda` (={lr_lambda!r}) must be a function of the step count.")
    check_last_epoch(last_epoch)
    return Schedule(lambda count: lr * lr_lambda(int_count(count)), "LambdaLR", lr, "sets")


def _concrete(count) -> int | None:
    """``count`` as a Python int when it is known outside a trace, else None."""
    if isinstance(count, jax.core.Tracer) or jnp.ndim(count) != 0:
        return None
    return int(count)


def _product(start, lr_lambda: Callable, first: int, last):
    """``start · lr_lambda(first) · … · lr_lambda(last)`` multiplied in torch's order
    (``start`` when ``last < first``). Outside ``jit`` ``lr_lambda`` gets Python ints,
    as torch's; under ``jit`` a traced epoch: a loop of ``last − first + 1`` steps, or
    ``factor^n`` when ``lr_lambda`` returns a constant for it (``lambda epoch: 0.95``)."""
    dtype = jnp.result_type(float)
    if jnp.ndim(last) != 0:  # several counts: one product each
        return jax.vmap(lambda one: _product(start, lr_lambda, first, one))(jnp.asarray(last))
    steps = _concrete(last)
    if steps is not None:
        value = start
        for epoch in range(first, steps + 1):
            value = value * lr_lambda(epoch)
        return jnp.asarray(value, dtype)
    last = int_count(last)
    constant = lr_lambda(last)  # last is traced: a constant does not depend on it
    if not isinstance(constant, jax.core.Tracer):
        repeats = jnp.maximum(last - first + 1, 0).astype(dtype)
        return start * jnp.asarray(constant, dtype) ** repeats
    return jax.lax.fori_loop(
        first,
        last + 1,
        lambda epoch, value: value * lr_lambda(epoch),
        jnp.asarray(start, dtype) * jnp.ones(jnp.shape(last), dtype),
    )


def MultiplicativeLR(lr: float, lr_lambda: Callable, last_epoch: int = -1) -> Schedule:
    """``lr · lr_lambda(1) · … · lr_lambda(t)``: torch multiplies the lr by
    ``lr_lambda(epoch)`` at every step after the first (not at construction).

    The product has no closed form: it is a loop of ``t`` steps (``_product``), under
    ``jit`` a ``while`` loop — unless ``lr_lambda`` ignores its epoch (returns a
    constant), then ``lr · c^t``. Under ``jit`` ``lr_lambda`` must be written with
    ``jnp``. Inside ``SequentialLR`` torch multiplies the lr the previous scheduler left
    by ``lr_lambda(0)``, ``lr_lambda(1)``… (``restarted``).
    """
    lr = check_hyper("lr", lr)
    if not callable(lr_lambda):
        raise TypeError(
            f"`lr_lambda` (={lr_lambda!r}) must be a function of the epoch (torch also takes "
            "a list of them, one per parameter group, which a schedule cannot hold)."
        )
    check_last_epoch(last_epoch)

    def ratio(t):
        epoch = _concrete(t)
        if epoch is not None:
            return jnp.asarray(lr_lambda(epoch) if epoch else 1.0, jnp.result_type(float))
        return jnp.where(_steps(t) == 0, 1.0, lr_lambda(int_count(t))) * _ones(t)

    return Schedule(
        lambda count: _product(lr, lr_lambda, 1, count),
        "MultiplicativeLR",
        lr,
        "scales",
        ratio=ratio,
        factor=lambda count: _product(1.0, lr_lambda, 1, count),
        restarted=lambda steps, lr_before: _product(lr_before, lr_lambda, 0, steps),
    )


# torch.optim.lr_scheduler's 15 classes: these 14 and ReduceLROnPlateau (a state machine)
SCHEDULERS: dict[str, Callable[..., Schedule]] = {
    f.__name__: f
    for f in (
        StepLR,
        MultiStepLR,
        ExponentialLR,
        CosineAnnealingLR,
        CosineAnnealingWarmRestarts,
        LinearLR,
        ConstantLR,
        OneCycleLR,
        PolynomialLR,
        LambdaLR,
        SequentialLR,
        MultiplicativeLR,
        CyclicLR,
        ChainedScheduler,
    )
}
"""The 14 schedule factories by torch class name (``ReduceLROnPlateau``, a state machine,
is separate)."""
# what for_run builds from a name and keyword arguments alone
_NOT_FOR_RUN = ("LambdaLR", "SequentialLR", "MultiplicativeLR", "CyclicLR", "ChainedScheduler")

_LENGTH_ARGUMENT = {
    "CosineAnnealingLR": "T_max",
    "OneCycleLR": "total_steps",
    "PolynomialLR": "total_iters",
}


def run_kwargs(name: str, lr: float, total_steps: int, **kwargs) -> dict:
    """The keyword arguments of the schedule ``name`` for a training run of
    ``total_steps`` optimizer steps: ``kwargs`` plus what the run implies, as
    ``torchref.schedulers.scheduler_kwargs`` fills them for torch: the schedule length
    (``T_max``, ``total_steps``, ``total_iters``) and OneCycleLR's ``max_lr`` (= ``lr``).

    Raises:
      ValueError: for a name ``for_run`` does not build.
    """
    names = [n for n in SCHEDULERS if n not in _NOT_FOR_RUN]
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
