"""torch.optim's SGD, Adam, AdamW and RMSprop as optax ``GradientTransformation``s.

Each factory takes torch's argument names and defaults and reproduces torch's
single-tensor update rule operation for operation, so that parameters *and* optimizer
state match ``torch.optim`` step by step (float64 at the strict parity tier):

- SGD's momentum buffer starts as a copy of the first gradient, not zeros
  (this matters as soon as ``dampening`` is non-zero);
- ``adam(weight_decay=...)`` is coupled L2 (added to the gradient, as torch);
  ``adamw`` decays the parameter itself by ``lr * weight_decay`` with torch's default
  ``weight_decay=1e-2`` (optax's ``adamw`` defaults to 1e-4);
- Adam's bias corrections divide ``exp_avg`` by ``1 - beta1**t`` through the step size
  and ``sqrt(exp_avg_sq)`` by ``sqrt(1 - beta2**t)`` *before* ``eps`` is added;
- RMSprop adds ``eps`` outside the square root (optax's ``rmsprop`` puts it inside),
  its momentum buffer starts at zeros, and ``centered`` subtracts ``grad_avg**2``.

Every factory also takes torch's ``maximize`` (the gradient is negated first), an
``lr`` that is a float, a one-element array or a schedule (``jaxgrad.optim.schedulers``;
``schedule(t)`` is the rate of step ``t``, counting from 0), and torch's
implementation flags ``foreach`` / ``fused`` / ``differentiable`` / ``capturable``
(see ``jaxgrad.optim._args``: accepted where they cannot change the result, refused
by name where they would). ``adam`` / ``adamw`` take ``amsgrad`` (state
``max_exp_avg_sq``) and ``adam`` torch's ``decoupled_weight_decay``.

Every factory is an ``optax.chain`` of optax parts (``add_decayed_weights``,
``scale_by_learning_rate``) and one torch-rule transform whose state is a NamedTuple
with torch's field names (``momentum_buffer``, ``exp_avg``, ``exp_avg_sq``,
``max_exp_avg_sq``, ``square_avg``, ``grad_avg``); ``jaxgrad.optim.state`` reads
them back in torch's layout.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import (check_betas, check_flags, check_hyper, check_lr, check_momentum,
                                 like_lr, maximize_transform, refuse_differentiable,
                                 scale_by_lr, value_at)
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.state import register_state


def _scalar_like(value, leaf):
    """A traced scalar in ``leaf``'s dtype, as torch casts a Python-float operand."""
    return jnp.asarray(value).astype(leaf.dtype)


def _chain(maximize: bool, weight_decay: float, rule) -> optax.GradientTransformation:
    """torch's order around a whole-step ``rule``: the gradient negated (``maximize``),
    then ``weight_decay·p`` added (L2, when non-zero), then the rule."""
    parts = [maximize_transform()] if maximize else []
    if weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    parts.append(rule)
    return optax.chain(*parts)


def _initial_state(state_type, params, **given):
    """``state_type`` before the first step: ``step`` 0 (`()` int32), the fields in
    ``given`` as given, every other field zeros like ``params``."""
    zeros = {name: jax.tree.map(jnp.zeros_like, params) for name in state_type._fields
             if name != "step" and name not in given}
    return state_type(step=jnp.zeros((), jnp.int32), **zeros, **given)


# --------------------------------------------------------------------------- SGD


@register_state(torch_step=False)
class SgdMomentumState(NamedTuple):
    """``sgd``'s momentum state (``scale_by_torch_momentum``), torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: steps taken; 0 means the buffer is not yet set.
      momentum_buffer: like params: torch's ``state[p]["momentum_buffer"]``.
    """

    step: jax.Array  # `()` int32: steps taken; 0 means the buffer is not yet set
    momentum_buffer: Any  # like params: torch's state[p]["momentum_buffer"]


def scale_by_torch_momentum(momentum, dampening: float = 0.0,
                            nesterov: bool = False) -> optax.GradientTransformation:
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

    def init_fn(params):
        return SgdMomentumState(step=jnp.zeros((), jnp.int32),
                                momentum_buffer=jax.tree.map(jnp.zeros_like, params))

    def update_fn(updates, state, params=None):
        del params
        first = state.step == 0
        momentum_t = value_at(momentum, state.step)

        def new_buffer(grad, buf):
            running = buf * _scalar_like(momentum_t, buf) + grad * _scalar_like(1 - dampening, grad)
            return jnp.where(first, grad, running)

        buffers = jax.tree.map(new_buffer, updates, state.momentum_buffer)
        if nesterov:
            directions = jax.tree.map(lambda g, b: g + b * _scalar_like(momentum_t, b),
                                      updates, buffers)
        else:
            directions = buffers
        if scheduled:
            active = momentum_t != 0
            buffers = jax.tree.map(lambda new, old: jnp.where(active, new, old), buffers,
                                   state.momentum_buffer)
            directions = jax.tree.map(lambda d, g: jnp.where(active, d, g), directions, updates)
        return directions, SgdMomentumState(step=optax.safe_int32_increment(state.step),
                                            momentum_buffer=buffers)

    return optax.GradientTransformation(init_fn, update_fn)


def sgd(lr=1e-3, momentum: float = 0.0, dampening: float = 0.0,
        weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
        foreach=None, differentiable: bool = False,
        fused=None) -> optax.GradientTransformation:
    """``torch.optim.SGD``: ``p -= lr * d`` with ``d`` the (momentum) direction.

    ``d = grad + weight_decay * p`` (``-grad`` first with ``maximize``); with momentum,
    ``buf`` as in ``scale_by_torch_momentum`` and ``d = buf`` (or ``d + momentum * buf``
    for Nesterov). ``momentum`` may be a schedule, and must be ``lr.momentum`` when
    ``lr`` is a ``OneCycleLR`` schedule that cycles momentum (``jaxgrad.optim.cycling``).

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      momentum: the momentum factor: a float or a schedule ``count -> momentum``.
      dampening: dampening for momentum.
      weight_decay: L2 penalty, added to the gradient (``grad += weight_decay·p``).
      nesterov: Nesterov momentum (needs ``momentum`` > 0 and ``dampening`` 0).
      maximize: maximise the objective (the gradient's sign flipped).
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).
      fused: must be None or False: torch's fused kernel rounds differently, so True is
        refused.

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``SgdMomentumState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, fused=fused, differentiable=differentiable, lr=lr)
    momentum = check_momentum(momentum)
    check_momentum_follows(lr, "momentum", momentum, "sgd")
    dampening = check_hyper("dampening", dampening)
    weight_decay = check_hyper("weight_decay", weight_decay)
    if callable(momentum):
        # torch checks nesterov against the constant given to SGD, before a scheduler
        # overrides it; a schedule has no such constant, so only dampening is checked
        if nesterov and dampening != 0:
            raise ValueError(f"`nesterov=True` requires `dampening` == 0 (got {dampening}), "
                             "as in torch.")
        if dampening != 0 and float(momentum(0)) == 0:
            raise ValueError(
                "`momentum` is a schedule that is 0 at step 0 with `dampening` != 0: torch "
                "then starts the buffer at the first step with non-zero momentum, which "
                "jaxgrad does not track; use a schedule with momentum(0) > 0 or dampening=0.")
    elif nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError(
            f"`nesterov=True` requires `momentum` > 0 (got {momentum}) and `dampening` == 0 "
            f"(got {dampening}), as in torch."
        )
    parts = [maximize_transform()] if maximize else []
    if weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    if callable(momentum) or momentum:
        parts.append(scale_by_torch_momentum(momentum, dampening, nesterov))
    parts.append(scale_by_lr(lr))
    return optax.chain(*parts)


# -------------------------------------------------------------------- Adam / AdamW


@register_state
class AdamState(NamedTuple):
    """``adam`` / ``adamw``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      exp_avg: like params: first moment, torch's ``state[p]["exp_avg"]``.
      exp_avg_sq: like params: second moment, torch's ``state[p]["exp_avg_sq"]``.
      max_exp_avg_sq: like params with amsgrad, else None.
    """

    step: jax.Array  # `()` int32: torch's state[p]["step"]
    exp_avg: Any  # like params: first moment, torch's state[p]["exp_avg"]
    exp_avg_sq: Any  # like params: second moment, torch's state[p]["exp_avg_sq"]
    max_exp_avg_sq: Any = None  # like params with amsgrad, else None


def _one_minus_power(beta: float, t: jax.Array) -> jax.Array:
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


def scale_by_torch_adam(lr, b1: float, b2: float, eps: float,
                        decoupled_weight_decay: float = 0.0,
                        amsgrad: bool = False) -> optax.GradientTransformation:
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

    def init_fn(params):
        def zeros():
            return jax.tree.map(jnp.zeros_like, params)
        return AdamState(step=jnp.zeros((), jnp.int32), exp_avg=zeros(), exp_avg_sq=zeros(),
                         max_exp_avg_sq=zeros() if amsgrad else None)

    def update_fn(updates, state, params=None):
        if decoupled_weight_decay and params is None:
            raise ValueError("adamw's update needs `params` (got None): call "
                             "`optimizer.update(grads, state, params)`.")
        lr_t = value_at(lr, state.step)
        b1_t = value_at(b1, state.step)
        step = optax.safe_int32_increment(state.step)
        # torch: exp_avg.lerp_(grad, 1 - beta1), i.e. exp_avg + w * (grad - exp_avg)
        exp_avg = jax.tree.map(lambda m, g: m + _scalar_like(1 - b1_t, m) * (g - m),
                               state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(
            lambda v, g: v * _scalar_like(b2, v) + _scalar_like(1 - b2, v) * (g * g),
            state.exp_avg_sq, updates)
        normaliser = exp_avg_sq
        max_exp_avg_sq = None
        if amsgrad:
            max_exp_avg_sq = jax.tree.map(jnp.maximum, state.max_exp_avg_sq, exp_avg_sq)
            normaliser = max_exp_avg_sq
        t = step.astype(jnp.result_type(float))
        bias_correction1 = _one_minus_power(b1_t, t)
        bias_correction2_sqrt = jnp.sqrt(_one_minus_power(b2, t))
        step_size = lr_t / like_lr(lr_t, bias_correction1)

        def adam_step(m, v):
            denom = jnp.sqrt(v) / _scalar_like(bias_correction2_sqrt, v) + _scalar_like(eps, v)
            return _scalar_like(-step_size, m) * m / denom

        new_updates = jax.tree.map(adam_step, exp_avg, normaliser)
        if decoupled_weight_decay:
            decay = lr_t * like_lr(lr_t, decoupled_weight_decay)
            if hasattr(decay, "dtype"):
                decay = 1 - (1 - decay)  # torch's factor 1 - lr*wd, rounded in lr's dtype
            new_updates = jax.tree.map(lambda u, p: u - _scalar_like(decay, p) * p,
                                       new_updates, params)
        return new_updates, AdamState(step=step, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq,
                                      max_exp_avg_sq=max_exp_avg_sq)

    return optax.GradientTransformation(init_fn, update_fn)


def adam(lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
         amsgrad: bool = False, *, foreach=None, maximize: bool = False,
         capturable: bool = False, differentiable: bool = False, fused=None,
         decoupled_weight_decay: bool = False) -> optax.GradientTransformation:
    """``torch.optim.Adam``; ``weight_decay`` is coupled L2 (``grad += wd * p``) unless
    ``decoupled_weight_decay`` (then it is ``adamw``). ``betas[0]`` may be a schedule,
    and must be ``lr.momentum`` when ``lr`` is a ``OneCycleLR`` schedule that cycles
    momentum.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      betas: ``(beta1, beta2)``, the coefficients of the running averages; ``beta1`` may
        be a schedule.
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      weight_decay: L2 penalty, added to the gradient, unless
        ``decoupled_weight_decay``.
      amsgrad: normalise by the running maximum of ``exp_avg_sq``.
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      maximize: maximise the objective (the gradient's sign flipped).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      differentiable: must be False: torch's ``differentiable=True`` takes its capturable
        path (float32 bias corrections), so True is refused (every JAX update is
        differentiable already).
      fused: must be None or False: torch's fused kernel rounds differently, so True is
        refused.
      decoupled_weight_decay: decay the parameters directly (``p *= 1 - lr·weight_decay``,
        AdamW's rule) instead of adding ``weight_decay·p`` to the gradient.

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``AdamState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, fused=fused, differentiable=differentiable,
                capturable=capturable, lr=lr)
    refuse_differentiable("adamw" if decoupled_weight_decay else "adam", differentiable)
    b1, b2 = check_betas(betas)
    check_momentum_follows(lr, "betas[0]", b1, "adamw" if decoupled_weight_decay else "adam")
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)
    parts = [maximize_transform()] if maximize else []
    if weight_decay and not decoupled_weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    parts.append(scale_by_torch_adam(lr, b1, b2, eps,
                                     weight_decay if decoupled_weight_decay else 0.0,
                                     bool(amsgrad)))
    return optax.chain(*parts)


def adamw(lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
          amsgrad: bool = False, *, maximize: bool = False, foreach=None,
          capturable: bool = False, differentiable: bool = False,
          fused=None) -> optax.GradientTransformation:
    """``torch.optim.AdamW``: decoupled decay ``p *= 1 - lr * wd``, torch's default wd 1e-2.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      betas: ``(beta1, beta2)``, the coefficients of the running averages; ``beta1`` may
        be a schedule.
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      weight_decay: decoupled decay: ``p *= 1 − lr·weight_decay`` before the Adam
        step (torch's default 1e-2; optax's ``adamw`` defaults to 1e-4).
      amsgrad: normalise by the running maximum of ``exp_avg_sq``.
      maximize: maximise the objective (the gradient's sign flipped).
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      differentiable: must be False: torch's ``differentiable=True`` takes its capturable
        path (float32 bias corrections), so True is refused (every JAX update is
        differentiable already).
      fused: must be None or False: torch's fused kernel rounds differently, so True is
        refused.

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``AdamState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    return adam(lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                capturable=capturable, differentiable=differentiable, fused=fused,
                decoupled_weight_decay=True)


# ------------------------------------------------------------------------ RMSprop


@register_state
class RmspropState(NamedTuple):
    """``rmsprop``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      square_avg: like params: torch's ``state[p]["square_avg"]``.
      grad_avg: like params when centered, else None: torch's ``state[p]["grad_avg"]``.
      momentum_buffer: like params when momentum > 0, else None.
    """

    step: jax.Array  # `()` int32: torch's state[p]["step"]
    square_avg: Any  # like params: torch's state[p]["square_avg"]
    grad_avg: Any  # like params when centered, else None: torch's state[p]["grad_avg"]
    momentum_buffer: Any  # like params when momentum > 0, else None


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


def scale_by_torch_rmsprop(alpha: float, eps: float, momentum: float = 0.0,
                           centered: bool = False) -> optax.GradientTransformation:
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

    def init_fn(params):
        def zeros():
            return jax.tree.map(jnp.zeros_like, params)
        return RmspropState(step=jnp.zeros((), jnp.int32), square_avg=zeros(),
                            grad_avg=zeros() if centered else None,
                            momentum_buffer=zeros() if scheduled or momentum > 0 else None)

    def update_fn(updates, state, params=None):
        del params
        square_avg = jax.tree.map(
            lambda s, g: s * _scalar_like(alpha, s) + _scalar_like(1 - alpha, s) * (g * g),
            state.square_avg, updates)
        if centered:
            grad_avg = jax.tree.map(lambda a, g: a + _scalar_like(1 - alpha, a) * (g - a),
                                    state.grad_avg, updates)
            avg = jax.tree.map(lambda s, a: jnp.sqrt(_fused_minus_square(s, a)),
                               square_avg, grad_avg)
        else:
            grad_avg = None
            avg = jax.tree.map(jnp.sqrt, square_avg)
        avg = jax.tree.map(lambda a: a + _scalar_like(eps, a), avg)
        direction = jax.tree.map(lambda g, a: g / a, updates, avg)
        buffers = None
        if scheduled:
            # torch takes the momentum branch only at steps where momentum > 0
            momentum_t = value_at(momentum, state.step)
            active = momentum_t > 0
            buffers = jax.tree.map(
                lambda b, d: jnp.where(active, b * _scalar_like(momentum_t, b) + d, b),
                state.momentum_buffer, direction)
            direction = jax.tree.map(lambda b, d: jnp.where(active, b, d), buffers, direction)
        elif momentum > 0:
            buffers = jax.tree.map(lambda b, d: b * _scalar_like(momentum, b) + d,
                                   state.momentum_buffer, direction)
            direction = buffers
        return direction, RmspropState(step=optax.safe_int32_increment(state.step),
                                       square_avg=square_avg, grad_avg=grad_avg,
                                       momentum_buffer=buffers)

    return optax.GradientTransformation(init_fn, update_fn)


def rmsprop(lr=1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
            momentum: float = 0.0, centered: bool = False, capturable: bool = False,
            foreach=None, maximize: bool = False,
            differentiable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.RMSprop``: ``p -= lr * grad / (sqrt(square_avg) + eps)``.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      alpha: the smoothing constant of ``square_avg`` (optax's ``decay``).
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      weight_decay: L2 penalty, added to the gradient (``grad += weight_decay·p``).
      momentum: the momentum factor: a float or a schedule ``count -> momentum``.
      centered: normalise by the centred second moment, ``square_avg − grad_avg²``.
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      maximize: maximise the objective (the gradient's sign flipped).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``RmspropState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable, lr=lr)
    alpha = check_hyper("alpha", alpha)
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)
    momentum = check_momentum(momentum)
    check_momentum_follows(lr, "momentum", momentum, "rmsprop")
    if callable(momentum) and not float(momentum(0)) > 0:
        raise ValueError(
            f"`momentum` is a schedule whose value at step 0 (={float(momentum(0))!r}) is not "
            "> 0: torch creates RMSprop's momentum buffer only when the first step has "
            "momentum, and fails at a later step that has; start the schedule above 0.")
    parts = [maximize_transform()] if maximize else []
    if weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    parts.append(scale_by_torch_rmsprop(alpha, eps, momentum, bool(centered)))
    parts.append(scale_by_lr(lr))
    return optax.chain(*parts)
