"""How torch's schedulers compose: ``ChainedScheduler``, ``SequentialLR``'s restarts.

A torch scheduler is stateful: each ``step()`` moves the optimizer's ``group["lr"]``,
and most of them compute the new value from the current one. What two of them give
together therefore depends on how each moves the group's lr, which every jaxgrad
scheduler states as its ``kind``:

- ``"scales"``: multiplies it by ``ratio(t)`` at step ``t`` (StepLR, MultiStepLR,
  ExponentialLR, ConstantLR, LinearLR, PolynomialLR, MultiplicativeLR); alone, the lr
  is ``base_lr · factor(t)``;
- ``"sets"``: replaces it with a value of its own (LambdaLR, CosineAnnealingWarmRestarts,
  OneCycleLR, CyclicLR);
- ``"steps"``: anything else (CosineAnnealingLR moves it towards ``eta_min`` and, after
  each ``T_max``, adds a fixed amount: ``move(group_lr, t)``).

Step ``t = 0`` is the one the constructor takes. A ``Schedule`` is the closed form
``count -> lr`` of its scheduler alone plus that description.

``ChainedScheduler(schedulers)`` steps every scheduler once per ``step()``, in order, on
one optimizer (built in that order). After ``t`` steps its lr is

- ``base_lr · Π factor_k(t)`` when every scheduler scales;
- else, when the last one that does not scale sets the lr: its ``lr(t)`` times the
  ``ratio_k(t)`` of the schedulers after it (their earlier ratios were overwritten);
- else (CosineAnnealingLR is the last that does not scale): torch's ``t + 1`` steps
  replayed (a loop of ``t + 1`` iterations, a ``while`` loop under ``jit``).

``SequentialLR(schedulers, milestones)`` runs ``schedulers[i]`` from
``milestones[i - 1]``. torch starts it there with its closed form at epoch 0
(``_update_lr(0)``), or, for a scheduler without one, its ``get_lr()`` on the lr the
previous one left; then it steps it as usual. That is the schedule itself restarted
at 0, except where a ``Schedule`` says otherwise (``restarted``): ConstantLR with
``total_iters=0`` (the closed form gives the base lr, which then stays) and
MultiplicativeLR (which multiplies the lr the previous scheduler left).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxgrad.optim._args import check_last_epoch
from jaxgrad.optim.plateau import ReduceLROnPlateau

KINDS = ("scales", "sets", "steps", "composite")


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """A torch scheduler as a pure schedule ``count -> lr``, and how it steps torch's lr.

    Attributes:
      lr: ``count -> lr``, ``get_last_lr()`` after ``count`` calls of ``step()`` of this
        scheduler alone; calling the schedule is the same.
      name: torch's class name.
      base_lr: the optimizer's lr it starts from (torch's ``initial_lr``), or None for a
        scheduler that brings its own (CyclicLR's ``base_lr``, OneCycleLR's ``max_lr``).
      kind: ``"scales"``, ``"sets"``, ``"steps"`` (module docstring) or
        ``"composite"`` (ChainedScheduler, SequentialLR).
      ratio: ``"scales"``: ``t -> r``, the group's lr is multiplied by ``r`` at step ``t``.
      factor: ``"scales"``: ``count -> lr(count) / base_lr``.
      move: ``"steps"``: ``(group_lr, t) -> group_lr`` after step ``t``.
      restarted: ``(k, lr_before) -> lr``: the lr ``k`` steps after SequentialLR
        restarts it at a milestone, ``lr_before`` the lr at the step before; None when
        that is ``lr(k)``.
      parts: ``"composite"``: the schedules composed.
    """

    lr: Callable
    name: str
    base_lr: float | None
    kind: str
    ratio: Callable | None = None
    factor: Callable | None = None
    move: Callable | None = None
    restarted: Callable | None = None
    parts: tuple = ()

    def __post_init__(self):
        assert self.kind in KINDS, self.kind
        assert (self.ratio is not None and self.factor is not None) == (self.kind == "scales")
        assert (self.move is not None) == (self.kind == "steps")

    def __call__(self, count):
        return self.lr(count)

    def torch_step(self, group_lr, t):
        """The group's lr after torch's ``step()`` number ``t`` (0: the constructor's)."""
        if self.kind == "scales":
            return group_lr * self.ratio(t)
        if self.kind == "sets":
            return self.lr(t)
        assert self.kind == "steps", self.kind
        return self.move(group_lr, t)


def scaling(
    name: str, lr: float, factor: Callable, ratio: Callable, restarted: Callable | None = None
) -> Schedule:
    """The ``Schedule`` of a scheduler that multiplies the group's lr (``lr · factor``)."""
    return Schedule(
        lambda count: lr * factor(count),
        name,
        lr,
        "scales",
        ratio=ratio,
        factor=factor,
        restarted=restarted,
    )


def _links(schedulers, composer: str) -> list[Schedule]:
    """``schedulers`` checked as ChainedScheduler's, nested chains flattened (torch steps a
    nested chain's schedulers in their order, as if they were listed in its place)."""
    if not isinstance(schedulers, (list, tuple)) or not schedulers:
        raise ValueError(
            f"`schedulers` (={schedulers!r}) must be a non-empty list of schedules (torch: "
            f"'{composer} expects at least one scheduler to be chained, but got no "
            "scheduler.')."
        )
    links: list[Schedule] = []
    for index, schedule in enumerate(schedulers):
        if isinstance(schedule, ReduceLROnPlateau):
            raise ValueError(
                f"`schedulers[{index}]` is a ReduceLROnPlateau, which {composer} does not "
                "support (torch: it requires additional kwargs to be specified when calling "
                "`step`)."
            )
        if not isinstance(schedule, Schedule):
            raise TypeError(
                f"`schedulers[{index}]` (={schedule!r}) must be a jaxgrad scheduler "
                f"(schedulers.StepLR(...), ...): {composer} composes how each moves torch's "
                "lr at every step, which a plain count -> lr function does not say."
            )
        if getattr(schedule, "momentum", None) is not None:
            raise ValueError(
                f"`schedulers[{index}]` ({schedule.name}) cycles momentum "
                f"(cycle_momentum=True), which {composer} cannot hand on to the optimizer; "
                "build it with cycle_momentum=False (in torch too)."
            )
        if schedule.name == "SequentialLR":
            raise ValueError(
                f"`schedulers[{index}]` is a SequentialLR, which {composer} does not "
                "support: torch steps it with the others, and it restarts its schedulers "
                "from their closed forms at its milestones, undoing the others' steps."
            )
        links.extend(schedule.parts if schedule.kind == "composite" else [schedule])
    seen: dict[int, int] = {}
    for index, link in enumerate(links):
        if id(link) in seen:
            raise ValueError(
                f"`schedulers` holds one {link.name} twice (positions {seen[id(link)]} and "
                f"{index}, nested chains flattened): torch would step it twice per step."
            )
        seen[id(link)] = index
    return links


def _base_lr(links: list[Schedule]) -> float | None:
    """The one optimizer lr the schedules start from (they step one optimizer)."""
    bases = [(i, link) for i, link in enumerate(links) if link.base_lr is not None]
    for index, link in bases[1:]:
        if link.base_lr != bases[0][1].base_lr:
            raise ValueError(
                f"The chained schedules must start from one optimizer lr, as torch's "
                f"schedulers step one optimizer: {bases[0][1].name} has "
                f"lr={bases[0][1].base_lr!r}, "
                f"{link.name} (position {index}) has lr={link.base_lr!r}."
            )
    for index, link in enumerate(links):
        own = next((earlier for earlier in links[:index] if earlier.base_lr is None), None)
        if own is not None and link.base_lr is not None and link.kind != "scales":
            raise ValueError(
                f"{link.name} (position {index}) reads the optimizer's `initial_lr`, which "
                f"torch's {own.name} before it in the chain replaces when it is built first "
                "(its lr then depends on the order the schedulers were built); not "
                "supported."
            )
    return bases[0][1].base_lr if bases else None


def _as_built_after_others(links: list[Schedule]) -> list[Schedule]:
    """``links`` with torch's CyclicLR quirk: built after another scheduler (the group
    has an ``initial_lr`` already), its constructor's step computes from ``initial_lr``
    instead of ``base_lr`` (it sets ``self.base_lrs`` only after that step), so its lr at
    step 0 is the group's ``initial_lr``."""
    out, initial_lr = links[:1], None
    for previous, link in zip(links, links[1:]):
        entries = getattr(previous, "group_entries", {})
        if initial_lr is None:  # the first scheduler built sets it (setdefault)
            initial_lr = previous.base_lr if previous.base_lr is not None else entries["initial_lr"]
        elif previous.name == "OneCycleLR":  # which overwrites it
            initial_lr = entries["initial_lr"]
        if link.name == "CyclicLR":
            link = dataclasses.replace(
                link,
                lr=lambda count, lr=link.lr, initial_lr=initial_lr: jnp.where(
                    jnp.asarray(count) == 0, initial_lr, lr(count)
                ),
            )
        out.append(link)
    return out


def ChainedScheduler(schedulers: Sequence[Schedule], optimizer=None) -> Schedule:
    """torch's ``ChainedScheduler``: every schedule stepped once per step, in order, on one
    optimizer; their factors compose as torch's recursive steps do (module docstring).

    ``optimizer`` is accepted only as None: torch uses it to check that every scheduler
    steps that optimizer, and a jaxgrad schedule belongs to none.
    """
    if optimizer is not None:
        raise ValueError(
            f"`optimizer` (={optimizer!r}) must be None: torch only checks that every "
            "scheduler steps it, and a jaxgrad schedule belongs to no optimizer; give the "
            "chained schedule to the optimizer as `lr`."
        )
    parts = _links(schedulers, "ChainedScheduler")
    base = _base_lr(parts)
    links = _as_built_after_others(parts)
    last = max((i for i, link in enumerate(links) if link.kind != "scales"), default=None)
    if len(links) == 1:
        lr = links[0].lr
    elif last is None:

        def lr(count):
            value = base
            for link in links:
                value = value * link.factor(count)
            return value
    elif links[last].kind == "sets":

        def lr(count):
            value = links[last](count)
            for link in links[last + 1 :]:
                value = value * link.ratio(jnp.asarray(count))
            return value
    else:

        def lr(count):
            if jnp.ndim(count) != 0:  # several counts: one replay each
                return jax.vmap(lr)(jnp.asarray(count))

            def one_step(t, group_lr):
                for link in links:
                    group_lr = link.torch_step(group_lr, t)
                return group_lr

            start = jnp.asarray(base, jnp.result_type(float))
            return jax.lax.fori_loop(0, jnp.asarray(count) + 1, one_step, start)

    return Schedule(lr, "ChainedScheduler", base, "composite", parts=tuple(parts))


def SequentialLR(
    schedulers: Sequence[Callable], milestones: Sequence[int], last_epoch: int = -1
) -> Schedule:
    """``schedulers[i]`` restarted at ``milestones[i − 1]`` (module docstring): the
    schedule itself from 0, as ``optax.join_schedules``, unless it says otherwise."""
    if not isinstance(schedulers, (list, tuple)) or not all(callable(s) for s in schedulers):
        raise TypeError("`schedulers` must be a list of schedules (count -> lr).")
    if not isinstance(milestones, (list, tuple)) or len(milestones) != len(schedulers) - 1:
        raise ValueError(
            f"`milestones` (={milestones!r}) must have one entry fewer than `schedulers` "
            f"({len(schedulers)}), as torch requires."
        )
    if list(milestones) != sorted(milestones):
        raise ValueError(f"`milestones` (={milestones!r}) must be increasing.")
    cycling = [i for i, s in enumerate(schedulers) if getattr(s, "momentum", None) is not None]
    if cycling:
        raise ValueError(
            f"`schedulers[{cycling[0]}]` cycles momentum (cycle_momentum=True), which "
            "SequentialLR cannot hand on to the optimizer; build it with "
            "cycle_momentum=False (in torch too)."
        )
    nested = [i for i, s in enumerate(schedulers) if getattr(s, "kind", None) == "composite"]
    if nested:
        raise ValueError(
            f"`schedulers[{nested[0]}]` is a {schedulers[nested[0]].name}, which SequentialLR "
            "does not support (torch raises NotImplementedError when it restarts one at a "
            "milestone)."
        )
    check_last_epoch(last_epoch)
    schedulers, milestones = list(schedulers), list(milestones)

    def value(count, upto):
        """The lr after ``count`` steps when only the first ``upto`` schedulers exist."""
        out = schedulers[0](count)
        for index in range(1, upto):
            milestone, child = milestones[index - 1], schedulers[index]
            restarted = getattr(child, "restarted", None)
            if restarted is None or milestone == 0:  # at 0 torch builds it as if alone
                later = child(count - milestone)
            else:
                later = restarted(count - milestone, value(jnp.asarray(milestone - 1), index))
            out = jnp.where(count < milestone, out, later)
        return out

    return Schedule(
        lambda count: value(jnp.asarray(count), len(schedulers)),
        "SequentialLR",
        None,
        "composite",
        parts=tuple(schedulers),
    )
