"""torch.optim's Adadelta and Rprop as optax transformations.

Each factory has torch's argument names, order and defaults (``maximize``, the
implementation flags, and an ``lr`` that is a float, a one-element array or a
schedule, as in ``jaxgrad.optim.optimizers``) and one transform that computes torch's
single-tensor update operation for operation; its state is a NamedTuple with torch's
field names:

- Adadelta: ``square_avg``, ``acc_delta``;
  ``delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) · g``, ``p −= lr · delta``;
- Rprop: ``prev`` (the last gradient, zeroed where its sign flipped) and
  ``step_size`` (starts at ``lr``; ×``etas[1]`` where the gradient kept its sign,
  ×``etas[0]`` where it flipped, clamped to ``step_sizes``); ``p −= sign(g) · step_size``.
  As in torch, ``lr`` is read once, when the state is created.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import check_flags, check_hyper, check_lr, value_at
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.optimizers import _chain, _initial_state, _scalar_like
from jaxgrad.optim.state import register_state


# ------------------------------------------------------------------------- Adadelta


@register_state
class AdadeltaState(NamedTuple):
    """``adadelta``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      square_avg: like params: the running average of the squared gradient.
      acc_delta: like params: the running average of the squared update.
    """

    step: jax.Array  # `()` int32
    square_avg: Any  # like params
    acc_delta: Any  # like params


def adadelta(lr=1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
             foreach=None, *, capturable: bool = False, maximize: bool = False,
             differentiable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.Adadelta``: ``p −= lr·sqrt(acc_delta + eps) / sqrt(square_avg + eps)·g``.

    Args:
      lr: the coefficient of the update: a float, a one-element array (torch's tensor
        ``lr``) or a schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      rho: the coefficient of both running averages, in [0, 1].
      eps: added inside both square roots.
      weight_decay: L2 penalty, added to the gradient (``grad += weight_decay·p``).
      foreach: torch's implementation flag; accepted and ignored (torch's foreach path
        computes the same operations in the same order as its single-tensor one).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      maximize: maximise the objective (the gradient's sign flipped).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``AdadeltaState``).

    Raises:
      ValueError: a hyperparameter outside torch's range (``rho`` outside [0, 1]…) or
        ``capturable=True``.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    # torch takes a tensor lr with foreach=True here
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable)
    check_momentum_follows(lr, None, None, "adadelta")
    rho = check_hyper("rho", rho, high=1.0)
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)

    def init_fn(params):
        return _initial_state(AdadeltaState, params)

    def update_fn(updates, state, params=None):
        del params
        lr_t = value_at(lr, state.step)
        square_avg = jax.tree.map(
            lambda v, g: v * _scalar_like(rho, v) + _scalar_like(1 - rho, v) * (g * g),
            state.square_avg, updates)

        def delta_of(g, v, u):
            std = jnp.sqrt(v + _scalar_like(eps, v))
            return jnp.sqrt(u + _scalar_like(eps, u)) / std * g

        deltas = jax.tree.map(delta_of, updates, square_avg, state.acc_delta)
        acc_delta = jax.tree.map(
            lambda u, d: u * _scalar_like(rho, u) + _scalar_like(1 - rho, u) * (d * d),
            state.acc_delta, deltas)
        new = jax.tree.map(lambda d: _scalar_like(-lr_t, d) * d, deltas)
        return new, AdadeltaState(step=optax.safe_int32_increment(state.step),
                                  square_avg=square_avg, acc_delta=acc_delta)

    return _chain(maximize, weight_decay, optax.GradientTransformation(init_fn, update_fn))


# ---------------------------------------------------------------------------- Rprop


@register_state
class RpropState(NamedTuple):
    """``rprop``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      prev: like params: the previous gradient (0 where its sign flipped).
      step_size: like params: each element's current step size.
    """

    step: jax.Array  # `()` int32
    prev: Any  # like params
    step_size: Any  # like params


def _check_pair(name: str, value) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"`{name}` (={value!r}) must be a pair of numbers.")
    return (check_hyper(f"{name}[0]", value[0], low=float("-inf")),
            check_hyper(f"{name}[1]", value[1], low=float("-inf")))


def rprop(lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable: bool = False,
          foreach=None, maximize: bool = False,
          differentiable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.Rprop``: each element moves by its own step size against the
    gradient's sign; the step size grows while the sign holds and shrinks when it flips.

    Args:
      lr: the starting step size of every element: a float, a one-element array or a
        schedule (read once, at the first step, as torch reads the group's ``lr`` when
        it creates the state).
      etas: ``(etaminus, etaplus)``, the factors applied on a sign flip and on a kept
        sign; ``0 < etaminus < 1 < etaplus``.
      step_sizes: ``(min, max)`` bounds of the step sizes.
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      foreach: torch's implementation flag; accepted and ignored (torch's foreach path
        computes the same operations as its single-tensor one).
      maximize: maximise the objective (the gradient's sign flipped).
      differentiable: torch's implementation flag; accepted and ignored.

    Returns:
      An ``optax.GradientTransformation`` whose state holds torch's ``optimizer.state``
      (``RpropState``).

    Raises:
      ValueError: ``etas`` outside ``0 < etaminus < 1 < etaplus`` (torch's "Invalid eta
        values"), a negative ``lr`` or ``capturable=True``.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    # torch takes a tensor lr with foreach=True here
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable)
    check_momentum_follows(lr, None, None, "rprop")
    etaminus, etaplus = _check_pair("etas", etas)
    if not 0.0 < etaminus < 1.0 < etaplus:
        raise ValueError(f"`etas` (={etas!r}) must satisfy 0 < etas[0] < 1 < etas[1] "
                         f"(torch: 'Invalid eta values: {etas[0]}, {etas[1]}').")
    size_min, size_max = _check_pair("step_sizes", step_sizes)

    def init_fn(params):
        first = value_at(lr, jnp.zeros((), jnp.int32))
        return _initial_state(RpropState, params, step_size=jax.tree.map(
            lambda p: jnp.full_like(p, _scalar_like(first, p)), params))

    def update_fn(updates, state, params=None):
        del params

        def factor_of(g, prev):
            sign = jnp.sign(g * prev)  # NaN stays NaN, as torch's masked assignments
            factor = jnp.where(sign > 0, _scalar_like(etaplus, sign), sign)
            factor = jnp.where(sign < 0, _scalar_like(etaminus, sign), factor)
            return jnp.where(sign == 0, jnp.ones_like(sign), factor)

        factors = jax.tree.map(factor_of, updates, state.prev)
        step_size = jax.tree.map(
            lambda s, f: jnp.clip(s * f, _scalar_like(size_min, s), _scalar_like(size_max, s)),
            state.step_size, factors)
        grads = jax.tree.map(
            lambda g, f: jnp.where(f == _scalar_like(etaminus, f), jnp.zeros_like(g), g),
            updates, factors)
        new = jax.tree.map(lambda g, s: -(jnp.sign(g) * s), grads, step_size)
        return new, RpropState(step=optax.safe_int32_increment(state.step), prev=grads,
                               step_size=step_size)

    return _chain(maximize, 0.0, optax.GradientTransformation(init_fn, update_fn))
