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

Every factory is an ``optax.chain`` of optax parts (``add_decayed_weights``,
``scale_by_learning_rate``) and one torch-rule transform whose state is a NamedTuple
with torch's field names (``momentum_buffer``, ``exp_avg``, ``exp_avg_sq``,
``square_avg``, ``grad_avg``). ``torch_style_state`` reads any of them back as
``{param name: {field: array}}``, the layout of torch's ``optimizer.state[p]``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim.names import dotted_names


def _check_hyper(name: str, value, *, low: float = 0.0, high: float | None = None,
                 open_high: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` (={value!r}) must be a number.")
    if value < low or (high is not None and (value >= high if open_high else value > high)):
        bound = "" if high is None else (f" and < {high}" if open_high else f" and <= {high}")
        raise ValueError(f"`{name}` (={value!r}) must be >= {low}{bound}.")
    return float(value)


def _scalar_like(value, leaf):
    """A traced scalar in ``leaf``'s dtype, as torch casts a Python-float operand."""
    return jnp.asarray(value).astype(leaf.dtype)


# --------------------------------------------------------------------------- SGD


class SgdMomentumState(NamedTuple):
    step: jax.Array  # `()` int32: steps taken; 0 means the buffer is not yet set
    momentum_buffer: Any  # like params: torch's state[p]["momentum_buffer"]


def scale_by_torch_momentum(momentum: float, dampening: float = 0.0,
                            nesterov: bool = False) -> optax.GradientTransformation:
    """torch SGD's momentum: ``buf = grad`` on step 1, then ``momentum*buf + (1-dampening)*grad``."""

    def init_fn(params):
        return SgdMomentumState(step=jnp.zeros((), jnp.int32),
                                momentum_buffer=jax.tree.map(jnp.zeros_like, params))

    def update_fn(updates, state, params=None):
        del params
        first = state.step == 0

        def new_buffer(grad, buf):
            running = buf * _scalar_like(momentum, buf) + grad * _scalar_like(1 - dampening, grad)
            return jnp.where(first, grad, running)

        buffers = jax.tree.map(new_buffer, updates, state.momentum_buffer)
        if nesterov:
            updates = jax.tree.map(lambda g, b: g + b * _scalar_like(momentum, b), updates, buffers)
        else:
            updates = buffers
        return updates, SgdMomentumState(step=optax.safe_int32_increment(state.step),
                                         momentum_buffer=buffers)

    return optax.GradientTransformation(init_fn, update_fn)


def sgd(lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
        weight_decay: float = 0.0, nesterov: bool = False) -> optax.GradientTransformation:
    """``torch.optim.SGD``: ``p -= lr * d`` with ``d`` the (momentum) direction.

    ``d = grad + weight_decay * p``; with momentum, ``buf`` as in
    ``scale_by_torch_momentum`` and ``d = buf`` (or ``d + momentum * buf`` for Nesterov).
    """
    lr = _check_hyper("lr", lr)
    momentum = _check_hyper("momentum", momentum)
    dampening = _check_hyper("dampening", dampening)
    weight_decay = _check_hyper("weight_decay", weight_decay)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError(
            f"`nesterov=True` requires `momentum` > 0 (got {momentum}) and `dampening` == 0 "
            f"(got {dampening}), as in torch."
        )
    parts = []
    if weight_decay:
        parts.append(optax.add_decayed_weights(weight_decay))
    if momentum:
        parts.append(scale_by_torch_momentum(momentum, dampening, nesterov))
    parts.append(optax.scale_by_learning_rate(lr))
    return optax.chain(*parts)


# -------------------------------------------------------------------- Adam / AdamW


class AdamState(NamedTuple):
    step: jax.Array  # `()` int32: torch's state[p]["step"]
    exp_avg: Any  # like params: first moment, torch's state[p]["exp_avg"]
    exp_avg_sq: Any  # like params: second moment, torch's state[p]["exp_avg_sq"]


def _one_minus_power(beta: float, t: jax.Array) -> jax.Array:
    """``1 - beta**t`` as torch forms it, in Python doubles.

    Without x64 the count is float32, where ``1 - 0.999**t`` loses ~1e-5 to
    cancellation (0.999 is not exact in float32); ``-expm1(t * log(beta))`` with the
    log taken in double keeps full relative precision, close to torch's double result.
    """
    if t.dtype == jnp.float64:
        return 1 - jnp.asarray(beta, t.dtype) ** t
    if beta == 0:
        return jnp.ones_like(t)
    return -jnp.expm1(t * math.log(beta))


def scale_by_torch_adam(lr: float, b1: float, b2: float, eps: float,
                        decoupled_weight_decay: float = 0.0) -> optax.GradientTransformation:
    """Adam's full step, lr included, as torch's ``_single_tensor_adam`` computes it.

    ``decoupled_weight_decay`` (AdamW) adds ``-lr * weight_decay * p`` to the update,
    i.e. torch's ``p.mul_(1 - lr * weight_decay)`` before the Adam step.
    """

    def init_fn(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return AdamState(step=jnp.zeros((), jnp.int32), exp_avg=zeros,
                         exp_avg_sq=jax.tree.map(jnp.zeros_like, params))

    def update_fn(updates, state, params=None):
        if decoupled_weight_decay and params is None:
            raise ValueError("adamw's update needs `params` (got None): call "
                             "`optimizer.update(grads, state, params)`.")
        step = optax.safe_int32_increment(state.step)
        # torch: exp_avg.lerp_(grad, 1 - beta1), i.e. exp_avg + w * (grad - exp_avg)
        exp_avg = jax.tree.map(lambda m, g: m + _scalar_like(1 - b1, m) * (g - m),
                               state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(
            lambda v, g: v * _scalar_like(b2, v) + _scalar_like(1 - b2, v) * (g * g),
            state.exp_avg_sq, updates)
        t = step.astype(jnp.result_type(float))
        bias_correction1 = _one_minus_power(b1, t)
        bias_correction2_sqrt = jnp.sqrt(_one_minus_power(b2, t))
        step_size = lr / bias_correction1

        def adam_step(m, v):
            denom = jnp.sqrt(v) / _scalar_like(bias_correction2_sqrt, v) + _scalar_like(eps, v)
            return _scalar_like(-step_size, m) * m / denom

        new_updates = jax.tree.map(adam_step, exp_avg, exp_avg_sq)
        if decoupled_weight_decay:
            new_updates = jax.tree.map(
                lambda u, p: u - _scalar_like(lr * decoupled_weight_decay, p) * p,
                new_updates, params)
        return new_updates, AdamState(step=step, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)

    return optax.GradientTransformation(init_fn, update_fn)


def _check_betas(betas):
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"`betas` (={betas!r}) must be a pair (beta1, beta2).")
    b1 = _check_hyper("betas[0]", betas[0], high=1.0, open_high=True)
    b2 = _check_hyper("betas[1]", betas[1], high=1.0, open_high=True)
    return b1, b2


def adam(lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
         weight_decay: float = 0.0) -> optax.GradientTransformation:
    """``torch.optim.Adam``; ``weight_decay`` is coupled L2 (``grad += wd * p``)."""
    lr = _check_hyper("lr", lr)
    b1, b2 = _check_betas(betas)
    eps = _check_hyper("eps", eps)
    weight_decay = _check_hyper("weight_decay", weight_decay)
    parts = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    parts.append(scale_by_torch_adam(lr, b1, b2, eps))
    return optax.chain(*parts)


def adamw(lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 1e-2) -> optax.GradientTransformation:
    """``torch.optim.AdamW``: decoupled decay ``p *= 1 - lr * wd``, torch's default wd 1e-2."""
    lr = _check_hyper("lr", lr)
    b1, b2 = _check_betas(betas)
    eps = _check_hyper("eps", eps)
    weight_decay = _check_hyper("weight_decay", weight_decay)
    return optax.chain(scale_by_torch_adam(lr, b1, b2, eps, decoupled_weight_decay=weight_decay))


# ------------------------------------------------------------------------ RMSprop


class RmspropState(NamedTuple):
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

    With momentum the direction is ``buf = momentum * buf + grad / (...)`` (zeros-initialised).
    """

    def init_fn(params):
        def zeros():
            return jax.tree.map(jnp.zeros_like, params)
        return RmspropState(step=jnp.zeros((), jnp.int32), square_avg=zeros(),
                            grad_avg=zeros() if centered else None,
                            momentum_buffer=zeros() if momentum > 0 else None)

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
        if momentum > 0:
            buffers = jax.tree.map(lambda b, d: b * _scalar_like(momentum, b) + d,
                                   state.momentum_buffer, direction)
            direction = buffers
        return direction, RmspropState(step=optax.safe_int32_increment(state.step),
                                       square_avg=square_avg, grad_avg=grad_avg,
                                       momentum_buffer=buffers)

    return optax.GradientTransformation(init_fn, update_fn)


def rmsprop(lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
            weight_decay: float = 0.0, momentum: float = 0.0,
            centered: bool = False) -> optax.GradientTransformation:
    """``torch.optim.RMSprop``: ``p -= lr * grad / (sqrt(square_avg) + eps)``."""
    lr = _check_hyper("lr", lr)
    alpha = _check_hyper("alpha", alpha)
    eps = _check_hyper("eps", eps)
    weight_decay = _check_hyper("weight_decay", weight_decay)
    momentum = _check_hyper("momentum", momentum)
    parts = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    parts.append(scale_by_torch_rmsprop(alpha, eps, momentum, bool(centered)))
    parts.append(optax.scale_by_learning_rate(lr))
    return optax.chain(*parts)


# ------------------------------------------------------------------ reading state

_STATE_TYPES = (SgdMomentumState, AdamState, RmspropState)
_TORCH_FIELDS = ("momentum_buffer", "exp_avg", "exp_avg_sq", "square_avg", "grad_avg")


def _find_torch_states(opt_state) -> list:
    found = []

    def visit(node):
        if isinstance(node, _STATE_TYPES):
            found.append(node)
        elif isinstance(node, (tuple, list)):
            for child in node:
                visit(child)
        elif isinstance(node, dict):
            for child in node.values():
                visit(child)
        elif hasattr(node, "_fields"):  # other optax NamedTuples, e.g. multi_transform
            for child in node:
                visit(child)
        elif hasattr(node, "inner_state"):
            visit(node.inner_state)

    visit(opt_state)
    return found


def torch_style_state(opt_state) -> dict[str, dict[str, Any]]:
    """``{param name: {"step": …, "exp_avg": …, …}}``, the layout of torch's ``optimizer.state``.

    Parameters that hold no state (frozen ones under ``freeze``; all of them for plain
    SGD without momentum, like torch's ``momentum_buffer=None``) are left out.
    """
    result: dict[str, dict[str, Any]] = {}
    for state in _find_torch_states(opt_state):
        for field in _TORCH_FIELDS:
            tree = getattr(state, field, None)
            if tree is None:
                continue
            names = dotted_names(tree)
            leaves = jax.tree.leaves(tree)
            for name, leaf in zip(jax.tree.leaves(names), leaves):
                entry = result.setdefault(name, {})
                entry[field] = leaf
                entry["step"] = state.step
    return result
