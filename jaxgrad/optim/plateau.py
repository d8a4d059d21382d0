"""``ReduceLROnPlateau`` as a pure state machine: the learning rate depends on a metric.

torch's scheduler mutates the optimizer's ``lr`` when a metric stops improving. Here
the state is explicit and the step is a pure, jit-able function::

    plateau = ReduceLROnPlateau(lr=0.1, patience=2)
    optimizer = injected_lr(jaxgrad.optim.sgd, lr=0.1, momentum=0.9)
    state = plateau.init()
    for epoch in ...:
        ...train with opt_state...
        state = plateau.step(state, val_loss)
        opt_state.hyperparams["lr"] = state.lr     # torch's group["lr"]

``state.lr`` equals torch's ``get_last_lr()[0]`` after the same ``step(metric)`` calls.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class PlateauState(NamedTuple):
    """``ReduceLROnPlateau``'s state: what torch's scheduler keeps between ``step`` calls.

    Attributes:
      lr: ``()`` float: the current learning rate (torch's ``group["lr"]``).
      best: ``()`` float: the best metric so far (torch's ``best``).
      num_bad_epochs: ``()`` int32: epochs without improvement.
      cooldown_counter: ``()`` int32: epochs of cooldown left.
      last_epoch: ``()`` int32: number of ``step()`` calls.
    """

    lr: jax.Array  # `()` float: the current learning rate (torch's group["lr"])
    best: jax.Array  # `()` float: the best metric so far (torch's best)
    num_bad_epochs: jax.Array  # `()` int32: epochs without improvement
    cooldown_counter: jax.Array  # `()` int32: epochs of cooldown left
    last_epoch: jax.Array  # `()` int32: number of step() calls


@dataclasses.dataclass(frozen=True)
class ReduceLROnPlateau:
    """torch's ``ReduceLROnPlateau`` (same arguments and defaults, ``lr`` added)."""

    lr: float
    mode: str = "min"
    factor: float = 0.1
    patience: int = 10
    threshold: float = 1e-4
    threshold_mode: str = "rel"
    cooldown: int = 0
    min_lr: float = 0.0
    eps: float = 1e-8

    def __post_init__(self):
        if self.mode not in ("min", "max"):
            raise ValueError(f"`mode` (={self.mode!r}) must be 'min' or 'max'.")
        if self.threshold_mode not in ("rel", "abs"):
            raise ValueError(f"`threshold_mode` (={self.threshold_mode!r}) must be 'rel' or 'abs'.")
        if not self.factor < 1.0 or self.factor < 0:
            raise ValueError(f"`factor` (={self.factor!r}) must be >= 0 and < 1.0.")
        patience = self.patience
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"`patience` (={self.patience!r}) must be an int >= 0.")
        if not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool) or self.lr < 0:
            raise ValueError(f"`lr` (={self.lr!r}) must be a number >= 0.")

    def init(self) -> PlateauState:
        float_dtype = jnp.result_type(float)
        worst = jnp.inf if self.mode == "min" else -jnp.inf
        zero = jnp.zeros((), jnp.int32)
        return PlateauState(
            lr=jnp.asarray(self.lr, float_dtype),
            best=jnp.asarray(worst, float_dtype),
            num_bad_epochs=zero,
            cooldown_counter=zero,
            last_epoch=zero,
        )

    def _is_better(self, current, best):
        if self.mode == "min" and self.threshold_mode == "rel":
            return current < best * (1.0 - self.threshold)
        if self.mode == "min":
            return current < best - self.threshold
        if self.threshold_mode == "rel":
            return current > best * (self.threshold + 1.0)
        return current > best + self.threshold

    def step(self, state: PlateauState, metric) -> PlateauState:
        """torch's ``scheduler.step(metric)``: the new state (pure; works under ``jit``)."""
        current = jnp.asarray(metric, state.best.dtype)
        better = self._is_better(current, state.best)
        best = jnp.where(better, current, state.best)
        bad = jnp.where(better, 0, state.num_bad_epochs + 1)
        in_cooldown = state.cooldown_counter > 0
        cooldown = jnp.where(in_cooldown, state.cooldown_counter - 1, state.cooldown_counter)
        bad = jnp.where(in_cooldown, 0, bad)
        reduce = bad > self.patience
        new_lr = jnp.maximum(state.lr * self.factor, self.min_lr)
        lr = jnp.where(reduce & (state.lr - new_lr > self.eps), new_lr, state.lr)
        cooldown = jnp.where(reduce, self.cooldown, cooldown)
        bad = jnp.where(reduce, 0, bad)
        return PlateauState(
            lr=lr,
            best=best,
            num_bad_epochs=bad.astype(jnp.int32),
            cooldown_counter=cooldown.astype(jnp.int32),
            last_epoch=state.last_epoch + 1,
        )


def injected_lr(
    optimizer: Callable[..., optax.GradientTransformation], **kwargs
) -> optax.GradientTransformation:
    """``optimizer(**kwargs)`` whose ``lr`` lives in its state, settable between steps.

    ``optax.inject_hyperparams`` with every argument but ``lr`` static (the jaxgrad
    factories validate them as Python numbers); set ``opt_state.hyperparams["lr"]``.
    """
    names = [n for n in inspect.signature(optimizer).parameters if n != "lr"]
    return optax.inject_hyperparams(optimizer, static_args=tuple(names))(**kwargs)
