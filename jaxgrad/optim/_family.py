"""The torch-rule optimizer family: what every factory shares, written once.

Every optimizer factory (``optimizers``, ``adaptive``, ``elementwise``, ``factored``,
``orthogonal``) is built the same way, and its module keeps only its update rule (the
arguments every factory shares, as users see them: ``jaxgrad.optim``'s docstring):

- arguments, in this order: ``lr`` and torch's implementation flags
  (``check_lr_and_flags``; the checks and their messages are ``jaxgrad.optim._args``'),
  then the momentum a cycling ``lr`` schedule must drive (``check_momentum_follow``;
  ``cycling.check_momentum_follows`` for an optimizer without one), then the
  optimizer's own hyperparameters; the Adam family's together (``check_adam_family``);
- the chain (``torch_chain``), torch's order around the rule: the gradient negated
  (``maximize``), then ``weight_decay·p`` added (coupled L2), then the rule, then the
  ``-lr`` scaling where the rule returns a direction (SGD, RMSprop);
- weight decay, coupled (in the chain) or decoupled (``p *= 1 − lr·weight_decay``
  inside the rule, ``decay_params``): ``split_weight_decay`` gives the two amounts;
- the state: a NamedTuple (``state.register_state``) of ``step`` — ``()`` int32,
  torch's ``state[p]["step"]`` — and torch's fields, each a tree like the params;
- the step (``torch_rule``): the state before the first step (``step`` 0, every field
  zeros like the params unless given), the count, and the rule called as
  ``rule(updates, state, params, step) -> (updates, {field: tree})`` with ``Step``:
  the steps taken (``count``, what schedules read), torch's step number from 1
  (``number``, and ``t`` as a float) and this step's ``lr``;
- the arithmetic per leaf as torch's single-tensor kernels round it: ``scalar_like`` (a
  Python operand in the tensor's dtype), ``lerp`` / ``torch_lerp``,
  ``square_average``, ``one_minus_power`` (``1 − beta**t`` in double precision).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import (
    check_betas,
    check_flags,
    check_hyper,
    check_lr,
    check_momentum,
    like_lr,
    maximize_transform,
    refuse_differentiable,
    value_at,
)
from jaxgrad.optim.cycling import check_momentum_follows

# ----------------------------------------------------------------------- arguments


def check_lr_and_flags(lr, *, lr_with_foreach: bool = True, **flags):
    """``lr`` checked (returned as ``check_lr`` gives it), then torch's implementation
    flags (``check_flags``); ``lr_with_foreach=False`` where torch takes an array ``lr``
    with ``foreach=True``."""
    lr = check_lr(lr)
    check_flags(**flags, lr=lr if lr_with_foreach else None)
    return lr


def check_adam_family(
    optimizer: str, lr, betas, eps, weight_decay, *, differentiable_refused: bool = False, **flags
) -> tuple:
    """The Adam family's shared arguments, checked: ``(lr, beta1, beta2, eps,
    weight_decay)``, ``beta1`` the momentum a cycling ``lr`` drives;
    ``differentiable_refused`` where ``differentiable=True`` takes torch's capturable
    path (``refuse_differentiable``)."""
    lr = check_lr_and_flags(lr, **flags)
    if differentiable_refused:
        refuse_differentiable(optimizer, flags["differentiable"])
    b1, b2 = check_betas(betas)
    check_momentum_follows(lr, "betas[0]", b1, optimizer)
    return lr, b1, b2, check_hyper("eps", eps), check_hyper("weight_decay", weight_decay)


def check_momentum_follow(optimizer: str, lr, momentum):
    """``momentum`` checked, the momentum a cycling ``lr`` drives."""
    momentum = check_momentum(momentum)
    check_momentum_follows(lr, "momentum", momentum, optimizer)
    return momentum


def refuse_complex(name: str, params) -> None:
    """torch's "<Optimizer> does not support complex parameters", naming the leaf."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if jnp.issubdtype(jnp.result_type(leaf), jnp.complexfloating):
            raise ValueError(
                f"`params` {jax.tree_util.keystr(path)} is complex "
                f"({jnp.result_type(leaf)}): {name} does not support complex "
                "parameters (as torch)."
            )


# ------------------------------------------------------------ chain and weight decay


def torch_chain(maximize: bool, weight_decay: float, *rules) -> optax.GradientTransformation:
    """torch's order around a rule: the gradient negated (``maximize``), then
    ``weight_decay·p`` added (coupled L2, when non-zero), then ``rules`` (None ones
    left out)."""
    parts = [maximize_transform()] if maximize else []
    if weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    parts += [rule for rule in rules if rule is not None]
    return optax.chain(*parts)


def split_weight_decay(weight_decay: float, decoupled) -> tuple[float, float]:
    """``(coupled, decoupled)``: torch's ``weight_decay`` as L2 added to the gradient
    (``torch_chain``), or, with ``decoupled_weight_decay``, as ``p *= 1 − lr·weight_decay``
    inside the rule (``decay_params``); the other one 0."""
    return (0.0, weight_decay) if decoupled else (weight_decay, 0.0)


def decay_params(updates, params, lr, weight_decay):
    """``updates`` with torch's decoupled ``p.mul_(1 - lr * weight_decay)`` added, as
    ``u − (lr·weight_decay)·p``; with a tensor ``lr`` the factor ``1 − lr·wd`` is a tensor
    of lr's dtype, rounded there (float32: 2e-8 from the double factor after one step)."""
    decay = lr * like_lr(lr, weight_decay)
    if hasattr(decay, "dtype"):
        decay = 1 - (1 - decay)
    return jax.tree.map(lambda u, p: u - scalar_like(decay, p) * p, updates, params)


# ------------------------------------------------------------------ state and step


class Step(NamedTuple):
    """The step a rule takes (``torch_rule``).

    Attributes:
      count: ``()`` int32: the steps taken before this one (what schedules read).
      number: ``()`` int32: torch's ``state[p]["step"]`` after its increment, from 1.
      t: ``()``: ``number`` in the default float dtype.
      lr: this step's learning rate (``value_at(lr, count)``); None without an ``lr``.
    """

    # optax's field name (ScaleByAdamState.count); it shadows tuple.count for type checkers
    count: jax.Array  # type: ignore[assignment]
    number: jax.Array
    t: jax.Array
    lr: Any

    def at(self, value):
        """A hyperparameter (a float or a schedule, e.g. ``beta1``) for this step."""
        return value_at(value, self.count)


def zeros(params):
    """A state field before the first step: zeros like ``params``."""
    return jax.tree.map(jnp.zeros_like, params)


def torch_rule(
    state_type,
    rule: Callable,
    *,
    lr=None,
    needs_params: str | None = None,
    check_params: Callable | None = None,
    **initial,
) -> optax.GradientTransformation:
    """A torch update rule as an optax transformation that creates and counts its state.

    Args:
      state_type: the rule's state NamedTuple (``step`` and torch's fields).
      rule: ``rule(updates, state, params, step) -> (updates, {field: tree})``, every
        field but ``step`` (``Step`` gives the step).
      lr: the factory's ``lr`` (a float, a 0-d array or a schedule), read for each step.
      needs_params: the optimizer's name when its update needs ``params`` (refused as
        None, saying so).
      check_params: called with the params at ``init`` (refusals torch makes when it
        is given the parameters).
      **initial: ``field=make`` for a field that does not start as zeros like the
        params: ``make(params)``, or None for a field the configuration does not use.

    Returns:
      An ``optax.GradientTransformation`` with ``state_type`` as its state.
    """

    def init_fn(params):
        if check_params is not None:
            check_params(params)
        fields = {
            name: zeros(params)
            for name in state_type._fields
            if name != "step" and name not in initial
        }
        fields.update(
            {name: None if make is None else make(params) for name, make in initial.items()}
        )
        return state_type(step=jnp.zeros((), jnp.int32), **fields)

    def update_fn(updates, state, params=None):
        if needs_params is not None and params is None:
            raise ValueError(
                f"{needs_params}'s update needs `params` (got None): call "
                "`optimizer.update(grads, state, params)`."
            )
        number = optax.safe_int32_increment(state.step)
        step = Step(
            count=state.step,
            number=number,
            t=number.astype(jnp.result_type(float)),
            lr=value_at(lr, state.step),
        )
        new, fields = rule(updates, state, params, step)
        return new, state_type(step=number, **fields)

    return optax.GradientTransformation(init_fn, update_fn)


# --------------------------------------------------------------- arithmetic per leaf


def scalar_like(value, leaf):
    """A traced scalar in ``leaf``'s dtype, as torch casts a Python-float operand."""
    return jnp.asarray(value).astype(leaf.dtype)


def lerp(m, g, weight):
    """torch's ``m.lerp_(g, weight)`` for ``|weight| < 0.5``: ``m + weight·(g − m)``."""
    return m + scalar_like(weight, m) * (g - m)


def torch_lerp(start, end, weight):
    """torch's ``start.lerp(end, weight)``: ``start + w·(end − start)`` for ``|w| < 0.5``,
    else ``end − (end − start)·(1 − w)`` (exact at ``w = 1``)."""
    weight = jnp.asarray(weight).astype(start.dtype)
    small = start + weight * (end - start)
    large = end - (end - start) * (1 - weight)
    return jnp.where(jnp.abs(weight) < 0.5, small, large)


def square_average(v, g, beta):
    """A running average of squares, torch's ``v.mul_(beta).addcmul_(g, g, value=1 - beta)``."""
    return v * scalar_like(beta, v) + scalar_like(1 - beta, v) * (g * g)


def one_minus_power(beta: float, t: jax.Array) -> jax.Array:
    """``1 - beta**t`` as torch forms it, in Python doubles.

    Without x64 the count is float32, where ``1 - 0.999**t`` loses ~1e-5 to
    cancellation (0.999 is not exact in float32); ``-expm1(t * log(beta))`` with the
    log taken in double keeps full relative precision, close to torch's double result.
    """
    if t.dtype == jnp.float64:
        return 1 - jnp.asarray(beta, t.dtype) ** t
    if not isinstance(beta, float):  # a scheduled beta, traced in float32
        return -jnp.expm1(t * jnp.log(beta))
    if beta == 0:
        return jnp.ones_like(t)
    return -jnp.expm1(t * math.log(beta))
