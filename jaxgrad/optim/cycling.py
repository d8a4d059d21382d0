"""torch's ``OneCycleLR`` and ``CyclicLR``, whose default ``cycle_momentum=True`` also
schedules momentum.

torch's ``OneCycleLR`` and ``CyclicLR`` write two hyperparameters into the optimizer
every step: the learning rate, and — with ``cycle_momentum=True``, their default — the
momentum, which they cycle inversely to the rate between ``max_momentum`` and
``base_momentum``. They write SGD's and RMSprop's ``momentum`` and the Adam family's
``betas[0]`` (torch's ``use_beta1``: the optimizer's defaults have ``betas``), and they
set the momentum to ``max_momentum`` when they are constructed, so the optimizer's own
momentum is never used. A pure schedule cannot write into an optimizer, so the jaxgrad
twin is a ``CyclingSchedule``: callable as the learning-rate schedule, with the
momentum schedule as ``.momentum``, which the optimizer is given explicitly::

    sched = schedulers.OneCycleLR(max_lr=0.1, total_steps=100)
    sched = schedulers.CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=20)
    optimizer = jaxgrad.optim.sgd(lr=sched, momentum=sched.momentum)
    optimizer = jaxgrad.optim.adam(lr=sched, betas=(sched.momentum, 0.999))

An optimizer handed such an ``lr`` with any other momentum raises (torch would cycle
it; a constant would silently differ — SGD's default ``momentum=0`` too: torch's
scheduler turns it into ``max_momentum``), and so does one without momentum or
``betas`` (Adagrad, ASGD), as torch does. ``cycle_momentum=False`` gives
``.momentum = None``.

``sched(t)`` and ``sched.momentum(t)`` are the values of the optimizer step numbered
``t`` (0-based), i.e. ``get_last_lr()`` and the group's momentum after ``t`` calls of
``scheduler.step()``. Past ``total_steps`` OneCycleLR raises in torch; both its
schedules return NaN. ``sched.group_entries`` are the keys torch's scheduler adds to
each parameter group (``initial_lr``; OneCycleLR's ``max_lr``, ``min_lr``; and
``max_momentum`` / ``base_momentum`` when it cycles momentum), which
``jaxgrad.optim.optimizer_state_dict`` writes as torch's ``state_dict()`` has them.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable

import jax.numpy as jnp

from jaxgrad.optim._args import check_hyper, check_int, check_last_epoch, float_count, int_count
from jaxgrad.optim.chaining import Schedule


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class CyclingSchedule(Schedule):
    """A learning-rate schedule ``count -> lr`` that also schedules the momentum.

    Attributes (besides ``Schedule``'s):
      momentum: ``count -> momentum`` (SGD/RMSprop ``momentum``, Adam-family
        ``betas[0]``), or None when the momentum is not cycled.
      group_entries: the entries torch's scheduler adds to every parameter group.
    """

    momentum: Callable | None
    group_entries: dict


def cycled_momentum(lr):
    """The momentum schedule an ``lr`` schedule cycles, or None."""
    return getattr(lr, "momentum", None) if isinstance(lr, CyclingSchedule) else None


def check_momentum_follows(lr, argument: str | None, given, optimizer: str) -> None:
    """Refuse an optimizer whose momentum would silently differ from torch's.

    Args:
      lr: the optimizer's ``lr``.
      argument: the optimizer's momentum argument (``"momentum"``, ``"betas[0]"``),
        or None for an optimizer without one.
      given: the value passed for it.
      optimizer: the factory's name, for messages.
    """
    cycled = cycled_momentum(lr)
    if cycled is None or given is cycled:
        return
    if argument is None:
        raise ValueError(
            f"{optimizer}: `lr` is a schedule with cycle_momentum=True, but {optimizer} has "
            "no momentum or betas (torch: 'optimizer must support momentum or beta1 with "
            "`cycle_momentum` option enabled'); pass cycle_momentum=False."
        )
    example = (
        "betas=(sched.momentum, 0.999)" if argument == "betas[0]" else "momentum=sched.momentum"
    )
    raise ValueError(
        f"{optimizer}: `lr` is a schedule with cycle_momentum=True, so torch also sets the "
        f"optimizer's `{argument}` every step (to max_momentum="
        f"{lr.group_entries['max_momentum']} first); `{argument}` (={given!r}) would "
        f"silently differ. Pass `{example}`, or cycle_momentum=False to both frameworks."
    )


def with_cycled_momentum(factory: Callable, kwargs: dict) -> dict:
    """``kwargs`` for ``factory`` with the momentum that ``kwargs["lr"]`` cycles, put
    where torch's scheduler writes it: ``betas[0]`` when the factory takes ``betas``
    (torch's ``use_beta1``), else ``momentum``. Unchanged when ``lr`` cycles nothing.

    Raises:
      ValueError: for a factory with neither (torch refuses the scheduler too).
    """
    cycled = cycled_momentum(kwargs.get("lr"))
    if cycled is None:
        return dict(kwargs)
    parameters = inspect.signature(factory).parameters
    name = getattr(factory, "__name__", repr(factory))
    if "betas" in parameters:
        betas = kwargs.get("betas", parameters["betas"].default)
        return {**kwargs, "betas": (cycled, betas[1])}
    if "momentum" in parameters:
        return {**kwargs, "momentum": cycled}
    check_momentum_follows(kwargs["lr"], None, None, name)
    raise AssertionError("check_momentum_follows raises for an optimizer without momentum")


def _phase_schedule(phases, total_steps: int, anneal: Callable) -> Callable:
    """``count -> value`` over ``phases`` of ``(end_step, start, end)``, torch's walk."""

    def schedule(count):
        t = float_count(count)
        value = jnp.asarray(jnp.nan, t.dtype)
        # torch walks the phases in order and takes the first whose end is not passed
        for index, (end_step, start, end) in reversed(list(enumerate(phases))):
            begin = 0.0 if index == 0 else phases[index - 1][0]
            annealed = anneal(start, end, (t - begin) / (end_step - begin))
            inside = (t <= end_step) | (index == len(phases) - 1)
            value = jnp.where(inside, annealed, value)
        return jnp.where(t > total_steps, jnp.nan, value)

    return schedule


def OneCycleLR(
    max_lr: float,
    total_steps: int | None = None,
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
    pct_start: float = 0.3,
    anneal_strategy: str = "cos",
    cycle_momentum: bool = True,
    base_momentum: float = 0.85,
    max_momentum: float = 0.95,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
    three_phase: bool = False,
    last_epoch: int = -1,
) -> CyclingSchedule:
    """The 1cycle policy: ``max_lr/div_factor`` up to ``max_lr`` and down to
    ``initial/final_div_factor`` (three phases with ``three_phase``), the momentum
    from ``max_momentum`` down to ``base_momentum`` and back (see the module docstring).

    torch does not check the momenta; here each must be in ``[0, 1)`` (outside it,
    torch's optimizers would have refused it at construction).
    """
    max_lr = check_hyper("max_lr", max_lr)
    if total_steps is None:
        if epochs is None or steps_per_epoch is None:
            raise ValueError(
                "`total_steps`, or both `epochs` and `steps_per_epoch`, must be given."
            )
        total_steps = check_int("epochs", epochs) * check_int("steps_per_epoch", steps_per_epoch)
    check_int("total_steps", total_steps)
    if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
        raise ValueError(
            f"`pct_start` (={pct_start!r}) must be a float in [0, 1] (torch refuses an int)."
        )
    if anneal_strategy not in ("cos", "linear"):
        raise ValueError(f"`anneal_strategy` (={anneal_strategy!r}) must be 'cos' or 'linear'.")
    check_last_epoch(last_epoch)
    div_factor = check_hyper("div_factor", div_factor)
    final_div_factor = check_hyper("final_div_factor", final_div_factor)
    initial = max_lr / div_factor
    minimum = initial / final_div_factor
    ends = [
        float(pct_start * total_steps) - 1,
        float(2 * pct_start * total_steps) - 2,
        total_steps - 1,
    ]
    if not three_phase:
        ends = [ends[0], ends[2]]

    def anneal(start, end, pct):
        if anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (jnp.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    lrs = (
        [(initial, max_lr), (max_lr, initial), (initial, minimum)]
        if three_phase
        else [(initial, max_lr), (max_lr, minimum)]
    )
    entries = {"initial_lr": initial, "max_lr": max_lr, "min_lr": minimum}
    momentum = None
    if cycle_momentum:
        high = check_hyper("max_momentum", max_momentum, high=1.0, open_high=True)
        low = check_hyper("base_momentum", base_momentum, high=1.0, open_high=True)
        momenta = (
            [(high, low), (low, high), (high, high)] if three_phase else [(high, low), (low, high)]
        )
        momentum = _phase_schedule([(e, *m) for e, m in zip(ends, momenta)], total_steps, anneal)
        entries.update(max_momentum=high, base_momentum=low)
    lr = _phase_schedule([(e, *v) for e, v in zip(ends, lrs)], total_steps, anneal)
    return CyclingSchedule(
        lr=lr,
        name="OneCycleLR",
        base_lr=None,
        kind="sets",
        momentum=momentum,
        group_entries=entries,
    )


_CYCLIC_MODES = {
    # mode: (scale function of its argument, torch's scale_mode for it)
    "triangular": (lambda x: 1.0, "cycle"),
    "triangular2": (lambda x: 1 / (2.0 ** (x - 1)), "cycle"),
    "exp_range": (None, "iterations"),  # gamma ** x, built with gamma
}


def CyclicLR(
    base_lr: float,
    max_lr: float,
    step_size_up: int = 2000,
    step_size_down: int | None = None,
    mode: str = "triangular",
    gamma: float = 1.0,
    scale_fn: Callable | None = None,
    scale_mode: str = "cycle",
    cycle_momentum: bool = True,
    base_momentum: float = 0.8,
    max_momentum: float = 0.9,
    last_epoch: int = -1,
) -> CyclingSchedule:
    """The cyclical policy: up from ``base_lr`` towards ``max_lr`` in ``step_size_up``
    steps and down in ``step_size_down`` (default: the same), the amplitude scaled by
    ``scale_fn`` of the cycle number (from 1) or of the step (``scale_mode``); the
    momentum from ``max_momentum`` towards ``base_momentum`` and back (module docstring).

    ``mode`` picks torch's scale functions: ``"triangular"`` (1), ``"triangular2"``
    (``1 / 2^(cycle − 1)``) and ``"exp_range"`` (``gamma^t``); a ``scale_fn`` replaces
    them and ``mode`` is ignored, as in torch. ``scale_fn`` is called with an integer
    array and must be written with ``jnp`` to run under ``jit``.

    torch does not check ``scale_mode`` (anything but ``"cycle"`` counts as
    ``"iterations"``) nor the momenta; here ``scale_mode`` must be one of the two and each
    momentum in ``[0, 1)``. ``step_size_down=0`` (a sawtooth) is allowed as in torch;
    ``step_size_up=0`` is refused (torch divides by zero).
    """
    base_lr = check_hyper("base_lr", base_lr)
    max_lr = check_hyper("max_lr", max_lr)
    up = check_int("step_size_up", step_size_up)
    down = up if step_size_down is None else check_int("step_size_down", step_size_down, low=0)
    if scale_fn is None and mode not in _CYCLIC_MODES:
        raise ValueError(
            f"`mode` (={mode!r}) must be one of {', '.join(_CYCLIC_MODES)} when "
            "`scale_fn` is None (torch: 'mode is invalid and scale_fn is None')."
        )
    gamma = check_hyper("gamma", gamma)
    if scale_fn is not None and not callable(scale_fn):
        raise TypeError(f"`scale_fn` (={scale_fn!r}) must be a function of the cycle or step.")
    if scale_mode not in ("cycle", "iterations"):
        raise ValueError(f"`scale_mode` (={scale_mode!r}) must be 'cycle' or 'iterations'.")
    check_last_epoch(last_epoch)
    if scale_fn is None:  # torch's built-in modes fix their own scale_mode
        scale_fn, scale_mode = _CYCLIC_MODES[mode]
        if mode == "exp_range":
            scale_fn = lambda x: gamma**x  # noqa: E731
    total = up + down

    def position(count):
        """``(scale, scale_fn(...))``: where step ``count`` is in its cycle, from 0 at
        ``base_lr`` to 1 at ``max_lr``, and the amplitude's scale."""
        count = int_count(count)
        cycle = 1 + count // total
        into = count % total  # torch: x = 1 + t / total - cycle, in floats
        if down == 0:
            scale = float_count(into) / up
        else:
            scale = jnp.where(into <= up, float_count(into) / up, float_count(total - into) / down)
        return scale, scale_fn(cycle if scale_mode == "cycle" else count)

    def lr(count):
        scale, amplitude = position(count)
        return base_lr + (max_lr - base_lr) * scale * amplitude

    entries = {"initial_lr": base_lr}
    momentum = None
    if cycle_momentum:
        high = check_hyper("max_momentum", max_momentum, high=1.0, open_high=True)
        low = check_hyper("base_momentum", base_momentum, high=1.0, open_high=True)

        def momentum(count):
            scale, amplitude = position(count)
            return high - (high - low) * scale * amplitude

        entries.update(max_momentum=high, base_momentum=low)
    return CyclingSchedule(
        lr=lr, name="CyclicLR", base_lr=None, kind="sets", momentum=momentum, group_entries=entries
    )
