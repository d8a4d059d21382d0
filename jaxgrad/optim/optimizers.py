"""torch.optim's SGD, Adam, AdamW and RMSprop as optax ``GradientTransformation``s.

Each factory reproduces torch's single-tensor update rule operation for operation, so
that parameters *and* optimizer state match ``torch.optim`` step by step (float64 at
the strict parity tier); the arguments, the chain around the rule, the state and the
step are the family's (``jaxgrad.optim._family``; as users see them:
``jaxgrad.optim``'s docstring). The rules:

- SGD's momentum buffer starts as a copy of the first gradient, not zeros
  (this matters as soon as ``dampening`` is non-zero);
- ``adam(weight_decay=...)`` is coupled L2 (added to the gradient, as torch);
  ``adamw`` decays the parameter itself by ``lr * weight_decay`` with torch's default
  ``weight_decay=1e-2`` (optax's ``adamw`` defaults to 1e-4);
- Adam's bias corrections divide ``exp_avg`` by ``1 - beta1**t`` through the step size
  and ``sqrt(exp_avg_sq)`` by ``sqrt(1 - beta2**t)`` *before* ``eps`` is added;
  ``amsgrad`` normalises by the running maximum (state ``max_exp_avg_sq``);
- RMSprop adds ``eps`` outside the square root (optax's ``rmsprop`` puts it inside),
  its momentum buffer starts at zeros, and ``centered`` subtracts ``grad_avg**2``.

SGD's and RMSprop's rules return a direction, scaled by ``-lr`` after them in the chain
(``scale_by_lr``); Adam's returns the whole step. The states' fields carry torch's
names (``momentum_buffer``, ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``,
``square_avg``, ``grad_avg``); ``jaxgrad.optim.state`` reads them back in torch's layout.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import check_hyper, like_lr, scale_by_lr
from jaxgrad.optim._family import (
    check_adam_family,
    check_lr_and_flags,
    check_momentum_follow,
    decay_params,
    lerp,
    one_minus_power,
    scalar_like,
    split_weight_decay,
    square_average,
    torch_chain,
    torch_rule,
    zeros,
)
from jaxgrad.optim.state import register_state

# --------------------------------------------------------------------------- SGD


@register_state(torch_step=False)
class SgdMomentumState(NamedTuple):
    """``sgd``'s momentum state (``scale_by_torch_momentum``), torch's
    ``optimizer.state[p]``: ``momentum_buffer``, like params; ``step`` counts the steps
    (0: the buffer is not yet set), torch keeps none."""

    step: jax.Array
    momentum_buffer: Any


def scale_by_torch_momentum(
    momentum, dampening: float = 0.0, nesterov: bool = False
) -> optax.GradientTransformation:
    """torch SGD's momentum: ``buf = grad`` on step 1, then ``momentum*buf + (1-dampening)*grad``.

    ``momentum`` is a float or a schedule ``count -> momentum`` (torch's
    ``cycle_momentum``), read for each step; at a step where it is exactly 0, torch
    skips the buffer (left unchanged) and the direction is the gradient itself.

    Args:
      momentum: the momentum factor, a float or a schedule.
      dampening: dampening of the gradient's term.
      nesterov: return ``grad + momentum·buf`` instead of ``buf``.

    Returns:
      An ``optax.GradientTransformation`` with ``SgdMomentumState`` (the update is
      the direction; scale it by ``-lr`` after).
    """
    scheduled = callable(momentum)

    def rule(updates, state, params, step):
        first = step.count == 0
        momentum_t = step.at(momentum)

        def new_buffer(grad, buf):
            running = buf * scalar_like(momentum_t, buf) + grad * scalar_like(1 - dampening, grad)
            return jnp.where(first, grad, running)

        buffers = jax.tree.map(new_buffer, updates, state.momentum_buffer)
        if nesterov:
            directions = jax.tree.map(
                lambda g, b: g + b * scalar_like(momentum_t, b), updates, buffers
            )
        else:
            directions = buffers
        if scheduled:
            active = momentum_t != 0
            buffers = jax.tree.map(
                lambda new, old: jnp.where(active, new, old), buffers, state.momentum_buffer
            )
            directions = jax.tree.map(lambda d, g: jnp.where(active, d, g), directions, updates)
        return directions, {"momentum_buffer": buffers}

    return torch_rule(SgdMomentumState, rule)


def sgd(
    lr=1e-3,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    *,
    maximize: bool = False,
    foreach=None,
    differentiable: bool = False,
    fused=None,
) -> optax.GradientTransformation:
    """``torch.optim.SGD``: ``p -= lr * d`` with ``d`` the (momentum) direction.

    ``d = grad + weight_decay * p`` (``-grad`` first with ``maximize``); with momentum,
    ``buf`` as in ``scale_by_torch_momentum`` and ``d = buf`` (or ``d + momentum * buf``
    for Nesterov). ``lr``, ``weight_decay`` (L2), ``maximize`` and the flags are every
    factory's (``jaxgrad.optim``).

    Args:
      momentum: the momentum factor: a float or a schedule ``count -> momentum``
        (``lr.momentum`` when ``lr`` is a ``OneCycleLR`` schedule that cycles momentum).
      dampening: dampening for momentum.
      nesterov: Nesterov momentum (needs ``momentum`` > 0 and ``dampening`` 0).

    Returns:
      The transformation; its state holds ``SgdMomentumState`` (with momentum).
    """
    lr = check_lr_and_flags(lr, foreach=foreach, fused=fused, differentiable=differentiable)
    momentum = check_momentum_follow("sgd", lr, momentum)
    dampening = check_hyper("dampening", dampening)
    weight_decay = check_hyper("weight_decay", weight_decay)
    if callable(momentum):
        # torch checks nesterov against the constant given to SGD, before a scheduler
        # overrides it; a schedule has no such constant, so only dampening is checked
        if nesterov and dampening != 0:
            raise ValueError(
                f"`nesterov=True` requires `dampening` == 0 (got {dampening}), as in torch."
            )
        if dampening != 0 and float(momentum(0)) == 0:
            raise ValueError(
                "`momentum` is a schedule that is 0 at step 0 with `dampening` != 0: torch "
                "then starts the buffer at the first step with non-zero momentum, which "
                "jaxgrad does not track; use a schedule with momentum(0) > 0 or dampening=0."
            )
    elif nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError(
            f"`nesterov=True` requires `momentum` > 0 (got {momentum}) and `dampening` == 0 "
            f"(got {dampening}), as in torch."
        )
    momentum_rule = (
        scale_by_torch_momentum(momentum, dampening, nesterov)
        if callable(momentum) or momentum
        else None
    )
    return torch_chain(maximize, weight_decay, momentum_rule, scale_by_lr(lr))


# -------------------------------------------------------------------- Adam / AdamW


@register_state
class AdamState(NamedTuple):
    """``adam`` / ``adamw``'s state, torch's ``optimizer.state[p]``: the moments
    ``exp_avg`` and ``exp_avg_sq``, and with ``amsgrad`` the running maximum
    ``max_exp_avg_sq`` (else None), each like params."""

    step: jax.Array
    exp_avg: Any
    exp_avg_sq: Any
    max_exp_avg_sq: Any = None


def scale_by_torch_adam(
    lr, b1: float, b2: float, eps: float, decoupled_weight_decay: float = 0.0, amsgrad: bool = False
) -> optax.GradientTransformation:
    """Adam's full step, lr included, as torch's ``_single_tensor_adam`` computes it.

    ``decoupled_weight_decay`` (AdamW) adds ``-lr * weight_decay * p`` to the update,
    i.e. torch's ``p.mul_(1 - lr * weight_decay)`` before the Adam step. ``amsgrad``
    normalises by the running maximum of ``exp_avg_sq`` (state ``max_exp_avg_sq``).
    ``lr`` is a float, a 0-d array or a schedule evaluated at the steps taken so far;
    ``b1`` a float or a schedule, whose current value torch uses in the moving average
    *and* in the bias correction ``1 - beta1**t``.

    Args:
      lr: the learning rate (float, 0-d array or schedule).
      b1: ``beta1``, the first moment's coefficient (float or schedule).
      b2: ``beta2``, the second moment's coefficient.
      eps: added to ``sqrt(v_hat)``.
      decoupled_weight_decay: AdamW's ``weight_decay`` (0: none).
      amsgrad: normalise by the running maximum of ``exp_avg_sq``.

    Returns:
      An ``optax.GradientTransformation`` with ``AdamState``; its update is the whole
      step (add it to the params), and it needs ``params`` when
      ``decoupled_weight_decay`` is set.
    """

    def rule(updates, state, params, step):
        b1_t = step.at(b1)
        # torch: exp_avg.lerp_(grad, 1 - beta1), i.e. exp_avg + w * (grad - exp_avg)
        exp_avg = jax.tree.map(lambda m, g: lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(lambda v, g: square_average(v, g, b2), state.exp_avg_sq, updates)
        normaliser = exp_avg_sq
        max_exp_avg_sq = None
        if amsgrad:
            max_exp_avg_sq = jax.tree.map(jnp.maximum, state.max_exp_avg_sq, exp_avg_sq)
            normaliser = max_exp_avg_sq
        bias_correction1 = one_minus_power(b1_t, step.t)
        bias_correction2_sqrt = jnp.sqrt(one_minus_power(b2, step.t))
        step_size = step.lr / like_lr(step.lr, bias_correction1)

        def adam_step(m, v):
            denom = jnp.sqrt(v) / scalar_like(bias_correction2_sqrt, v) + scalar_like(eps, v)
            return scalar_like(-step_size, m) * m / denom

        new_updates = jax.tree.map(adam_step, exp_avg, normaliser)
        if decoupled_weight_decay:
            new_updates = decay_params(new_updates, params, step.lr, decoupled_weight_decay)
        return new_updates, {
            "exp_avg": exp_avg,
            "exp_avg_sq": exp_avg_sq,
            "max_exp_avg_sq": max_exp_avg_sq,
        }

    return torch_rule(
        AdamState,
        rule,
        lr=lr,
        needs_params="adamw" if decoupled_weight_decay else None,
        max_exp_avg_sq=zeros if amsgrad else None,
    )


def adam(
    lr=1e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    *,
    foreach=None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
    fused=None,
    decoupled_weight_decay: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.Adam``; ``weight_decay`` is coupled L2 (``grad += wd * p``) unless
    ``decoupled_weight_decay`` (then it is ``adamw``). ``lr``, ``betas``, ``eps``,
    ``maximize`` and the flags are every factory's (``jaxgrad.optim``).

    Args:
      weight_decay: L2 penalty, added to the gradient, unless
        ``decoupled_weight_decay``.
      amsgrad: normalise by the running maximum of ``exp_avg_sq``.
      differentiable: must be False: torch's ``differentiable=True`` takes its capturable
        path (float32 bias corrections), so True is refused.
      decoupled_weight_decay: decay the parameters directly (``p *= 1 - lr·weight_decay``,
        AdamW's rule) instead of adding ``weight_decay·p`` to the gradient.

    Returns:
      The transformation; its state holds ``AdamState``.
    """
    lr, b1, b2, eps, weight_decay = check_adam_family(
        "adamw" if decoupled_weight_decay else "adam",
        lr,
        betas,
        eps,
        weight_decay,
        differentiable_refused=True,
        foreach=foreach,
        fused=fused,
        differentiable=differentiable,
        capturable=capturable,
    )
    coupled, decoupled = split_weight_decay(weight_decay, decoupled_weight_decay)
    return torch_chain(
        maximize, coupled, scale_by_torch_adam(lr, b1, b2, eps, decoupled, bool(amsgrad))
    )


def adamw(
    lr=1e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    amsgrad: bool = False,
    *,
    maximize: bool = False,
    foreach=None,
    capturable: bool = False,
    differentiable: bool = False,
    fused=None,
) -> optax.GradientTransformation:
    """``torch.optim.AdamW``: decoupled decay ``p *= 1 - lr * wd``, torch's default wd 1e-2.

    ``adam`` with ``decoupled_weight_decay=True`` (its arguments, its state ``AdamState``).

    Args:
      weight_decay: decoupled decay: ``p *= 1 − lr·weight_decay`` before the Adam
        step (torch's default 1e-2; optax's ``adamw`` defaults to 1e-4).
    """
    return adam(
        lr,
        betas,
        eps,
        weight_decay,
        amsgrad,
        foreach=foreach,
        maximize=maximize,
        capturable=capturable,
        differentiable=differentiable,
        fused=fused,
        decoupled_weight_decay=True,
    )


# ------------------------------------------------------------------------ RMSprop


@register_state
class RmspropState(NamedTuple):
    """``rmsprop``'s state, torch's ``optimizer.state[p]``: ``square_avg``, ``grad_avg``
    when centered and ``momentum_buffer`` when momentum > 0 (else None), each like
    params."""

    step: jax.Array
    square_avg: Any
    grad_avg: Any
    momentum_buffer: Any


def _two_product(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``a*b == p + e`` exactly (Dekker's split; XLA does not contract to FMA)."""
    splitter = jnp.asarray(2.0 ** (27 if a.dtype == jnp.float64 else 12) + 1, a.dtype)

    def split(x):
        c = splitter * x
        high = c - (c - x)
        return high, x - high

    a_high, a_low = split(a)
    b_high, b_low = split(b)
    p = a * b
    e = ((a_high * b_high - p) + a_high * b_low + a_low * b_high) + a_low * b_low
    return p, e


def _fused_minus_square(s: jax.Array, a: jax.Array) -> jax.Array:
    """``s - a*a`` rounded once, as torch's ``s.addcmul(a, a, value=-1)`` (an FMA on CPU).

    Centered RMSprop takes ``sqrt(square_avg - grad_avg**2)``; when the gradient is
    steady the two nearly cancel and the plain ``s - a*a`` (two roundings) drifts from
    torch by far more than the float64 tier allows over 100 steps.
    """
    p, e = _two_product(a, a)
    high = s - p  # TwoSum(s, -p): high + low == s - p exactly
    virtual = high - s
    low = (s - (high - virtual)) + (-p - virtual)
    return high + (low - e)


def scale_by_torch_rmsprop(
    alpha: float, eps: float, momentum: float = 0.0, centered: bool = False
) -> optax.GradientTransformation:
    """RMSprop's direction with ``eps`` outside the root: ``grad / (sqrt(avg) + eps)``.

    With momentum the direction is ``buf = momentum * buf + grad / (...)`` (zeros-initialised);
    ``momentum`` may be a schedule (torch then skips the buffer at steps where it is 0).

    Args:
      alpha: the smoothing constant of ``square_avg``.
      eps: added to the square root.
      momentum: the momentum factor, a float or a schedule.
      centered: normalise by ``square_avg − grad_avg²``.

    Returns:
      An ``optax.GradientTransformation`` with ``RmspropState`` (the update is the
      direction; scale it by ``-lr`` after).
    """

    scheduled = callable(momentum)

    def rule(updates, state, params, step):
        square_avg = jax.tree.map(
            lambda s, g: square_average(s, g, alpha), state.square_avg, updates
        )
        if centered:
            grad_avg = jax.tree.map(lambda a, g: lerp(a, g, 1 - alpha), state.grad_avg, updates)
            avg = jax.tree.map(
                lambda s, a: jnp.sqrt(_fused_minus_square(s, a)), square_avg, grad_avg
            )
        else:
            grad_avg = None
            avg = jax.tree.map(jnp.sqrt, square_avg)
        avg = jax.tree.map(lambda a: a + scalar_like(eps, a), avg)
        direction = jax.tree.map(lambda g, a: g / a, updates, avg)
        buffers = None
        if scheduled:
            # torch takes the momentum branch only at steps where momentum > 0
            momentum_t = step.at(momentum)
            active = momentum_t > 0
            buffers = jax.tree.map(
                lambda b, d: jnp.where(active, b * scalar_like(momentum_t, b) + d, b),
                state.momentum_buffer,
                direction,
            )
            direction = jax.tree.map(lambda b, d: jnp.where(active, b, d), buffers, direction)
        elif momentum > 0:
            buffers = jax.tree.map(
                lambda b, d: b * scalar_like(momentum, b) + d, state.momentum_buffer, direction
            )
            direction = buffers
        return direction, {
            "square_avg": square_avg,
            "grad_avg": grad_avg,
            "momentum_buffer": buffers,
        }

    return torch_rule(
        RmspropState,
        rule,
        grad_avg=zeros if centered else None,
        momentum_buffer=zeros if scheduled or momentum > 0 else None,
    )


def rmsprop(
    lr=1e-2,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
    capturable: bool = False,
    foreach=None,
    maximize: bool = False,
    differentiable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.RMSprop``: ``p -= lr * grad / (sqrt(square_avg) + eps)``.

    ``lr``, ``eps``, ``weight_decay`` (L2), ``maximize`` and the flags are every
    factory's (``jaxgrad.optim``).

    Args:
      alpha: the smoothing constant of ``square_avg`` (optax's ``decay``).
      momentum: the momentum factor: a float or a schedule ``count -> momentum``
        (``lr.momentum`` when ``lr`` is a ``OneCycleLR`` schedule that cycles momentum),
        above 0 at step 0.
      centered: normalise by the centred second moment, ``square_avg − grad_avg²``.

    Returns:
      The transformation; its state holds ``RmspropState``.
    """
    lr = check_lr_and_flags(
        lr, foreach=foreach, differentiable=differentiable, capturable=capturable
    )
    alpha = check_hyper("alpha", alpha)
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)
    momentum = check_momentum_follow("rmsprop", lr, momentum)
    if callable(momentum) and not float(momentum(0)) > 0:
        raise ValueError(
            f"`momentum` is a schedule whose value at step 0 (={float(momentum(0))!r}) is not "
            "> 0: torch creates RMSprop's momentum buffer only when the first step has "
            "momentum, and fails at a later step that has; start the schedule above 0."
        )
    return torch_chain(
        maximize,
        weight_decay,
        scale_by_torch_rmsprop(alpha, eps, momentum, bool(centered)),
        scale_by_lr(lr),
    )
