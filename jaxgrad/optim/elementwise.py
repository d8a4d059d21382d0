"""torch.optim's Adadelta and Rprop as optax transformations.

Each factory computes torch's single-tensor update operation for operation; the
arguments, the chain around the rule, the state and the step are the family's
(``jaxgrad.optim._family``; as users see them: ``jaxgrad.optim``'s docstring). The
states' fields carry torch's names:

- Adadelta: ``square_avg``, ``acc_delta``;
  ``delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) · g``, ``p −= lr · delta``;
- Rprop: ``prev`` (the last gradient, zeroed where its sign flipped) and
  ``step_size`` (starts at ``lr``; ×``etas[1]`` where the gradient kept its sign,
  ×``etas[0]`` where it flipped, clamped to ``step_sizes``); ``p −= sign(g) · step_size``.
  As in torch, ``lr`` is read once, when the state is created.

Both take an array ``lr`` with ``foreach=True`` (torch's foreach paths compute the same
operations, in the same order, as their single-tensor ones).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import check_hyper, value_at
from jaxgrad.optim._family import (
    check_lr_and_flags,
    scalar_like,
    square_average,
    torch_chain,
    torch_rule,
)
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.state import register_state

# ------------------------------------------------------------------------- Adadelta


@register_state
class AdadeltaState(NamedTuple):
    """``adadelta``'s state, torch's ``optimizer.state[p]``: the running averages of the
    squared gradient, ``square_avg``, and of the squared update, ``acc_delta``, each
    like params."""

    step: jax.Array
    square_avg: Any
    acc_delta: Any


def adadelta(
    lr=1.0,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0,
    foreach=None,
    *,
    capturable: bool = False,
    maximize: bool = False,
    differentiable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.Adadelta``: ``p −= lr·sqrt(acc_delta + eps) / sqrt(square_avg + eps)·g``.

    ``lr`` (the coefficient of the update), ``weight_decay`` (L2), ``maximize`` and the
    flags are every factory's (``jaxgrad.optim``).

    Args:
      rho: the coefficient of both running averages, in [0, 1].
      eps: added inside both square roots.

    Returns:
      The transformation; its state holds ``AdadeltaState``.
    """
    lr = check_lr_and_flags(
        lr,
        lr_with_foreach=False,
        foreach=foreach,
        differentiable=differentiable,
        capturable=capturable,
    )
    check_momentum_follows(lr, None, None, "adadelta")
    rho = check_hyper("rho", rho, high=1.0)
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)

    def rule(updates, state, params, step):
        square_avg = jax.tree.map(lambda v, g: square_average(v, g, rho), state.square_avg, updates)

        def delta_of(g, v, u):
            std = jnp.sqrt(v + scalar_like(eps, v))
            return jnp.sqrt(u + scalar_like(eps, u)) / std * g

        deltas = jax.tree.map(delta_of, updates, square_avg, state.acc_delta)
        acc_delta = jax.tree.map(lambda u, d: square_average(u, d, rho), state.acc_delta, deltas)
        new = jax.tree.map(lambda d: scalar_like(-step.lr, d) * d, deltas)
        return new, {"square_avg": square_avg, "acc_delta": acc_delta}

    return torch_chain(maximize, weight_decay, torch_rule(AdadeltaState, rule, lr=lr))


# ---------------------------------------------------------------------------- Rprop


@register_state
class RpropState(NamedTuple):
    """``rprop``'s state, torch's ``optimizer.state[p]``: ``prev``, the previous
    gradient (0 where its sign flipped), and ``step_size``, each element's current step
    size, each like params."""

    step: jax.Array
    prev: Any
    step_size: Any


def _check_pair(name: str, value) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"`{name}` (={value!r}) must be a pair of numbers.")
    return (
        check_hyper(f"{name}[0]", value[0], low=float("-inf")),
        check_hyper(f"{name}[1]", value[1], low=float("-inf")),
    )


def rprop(
    lr=1e-2,
    etas=(0.5, 1.2),
    step_sizes=(1e-6, 50),
    *,
    capturable: bool = False,
    foreach=None,
    maximize: bool = False,
    differentiable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.Rprop``: each element moves by its own step size against the
    gradient's sign; the step size grows while the sign holds and shrinks when it flips.

    ``maximize`` and the flags are every factory's (``jaxgrad.optim``).

    Args:
      lr: the starting step size of every element: a float, a one-element array or a
        schedule (read once, at the first step, as torch reads the group's ``lr`` when
        it creates the state).
      etas: ``(etaminus, etaplus)``, the factors applied on a sign flip and on a kept
        sign; ``0 < etaminus < 1 < etaplus``.
      step_sizes: ``(min, max)`` bounds of the step sizes.

    Returns:
      The transformation; its state holds ``RpropState``.

    Raises:
      ValueError: ``etas`` outside ``0 < etaminus < 1 < etaplus`` (torch's "Invalid eta
        values").
    """
    lr = check_lr_and_flags(
        lr,
        lr_with_foreach=False,
        foreach=foreach,
        differentiable=differentiable,
        capturable=capturable,
    )
    check_momentum_follows(lr, None, None, "rprop")
    etaminus, etaplus = _check_pair("etas", etas)
    if not 0.0 < etaminus < 1.0 < etaplus:
        raise ValueError(
            f"`etas` (={etas!r}) must satisfy 0 < etas[0] < 1 < etas[1] "
            f"(torch: 'Invalid eta values: {etas[0]}, {etas[1]}')."
        )
    size_min, size_max = _check_pair("step_sizes", step_sizes)

    def initial_step_size(params):
        first = value_at(lr, jnp.zeros((), jnp.int32))
        return jax.tree.map(lambda p: jnp.full_like(p, scalar_like(first, p)), params)

    def rule(updates, state, params, step):

        def factor_of(g, prev):
            sign = jnp.sign(g * prev)  # NaN stays NaN, as torch's masked assignments
            factor = jnp.where(sign > 0, scalar_like(etaplus, sign), sign)
            factor = jnp.where(sign < 0, scalar_like(etaminus, sign), factor)
            return jnp.where(sign == 0, jnp.ones_like(sign), factor)

        factors = jax.tree.map(factor_of, updates, state.prev)
        step_size = jax.tree.map(
            lambda s, f: jnp.clip(s * f, scalar_like(size_min, s), scalar_like(size_max, s)),
            state.step_size,
            factors,
        )
        grads = jax.tree.map(
            lambda g, f: jnp.where(f == scalar_like(etaminus, f), jnp.zeros_like(g), g),
            updates,
            factors,
        )
        new = jax.tree.map(lambda g, s: -(jnp.sign(g) * s), grads, step_size)
        return new, {"prev": grads, "step_size": step_size}

    return torch_chain(maximize, 0.0, torch_rule(RpropState, rule, step_size=initial_step_size))
