"""torch.optim's Adagrad, Adamax, NAdam, RAdam and ASGD as optax transformations.

Each factory has torch's argument names, order and defaults (``maximize``, the
implementation flags and an ``lr`` that is a float, a one-element array or a schedule,
as in ``jaxgrad.optim.optimizers``) and one transform that computes torch's
single-tensor update, ``lr`` included, operation for operation; its state is a
NamedTuple with torch's field names:

- Adagrad: ``sum`` (starts at ``initial_accumulator_value``); ``clr = lr / (1 + (t − 1)·lr_decay)``;
- Adamax: ``exp_avg``, ``exp_inf = max(beta2·exp_inf, |g| + eps)``;
- NAdam: ``exp_avg``, ``exp_avg_sq``, ``mu_product`` — a float32 scalar per parameter,
  because torch keeps it in its default scalar dtype and multiplies in float32;
- RAdam: ``exp_avg``, ``exp_avg_sq``; the rectified step only once ``rho_t > 5``;
- ASGD: ``eta``, ``mu`` (float32 scalars, torch's default scalar dtype) and ``ax``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import (check_betas, check_flags, check_hyper, check_lr, like_lr,
                                 refuse_differentiable, value_at)
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.optimizers import _chain, _initial_state, _one_minus_power, _scalar_like
from jaxgrad.optim.state import register_state

_SCALAR_DTYPE = jnp.float32  # torch's _get_scalar_dtype() under its default float32


def _lerp(m, g, weight):
    """torch's ``m.lerp_(g, weight)``: ``m + weight * (g − m)``."""
    return m + _scalar_like(weight, m) * (g - m)


def _decay(lr, weight_decay):
    """``lr·weight_decay`` as torch's ``p.mul_(1 - lr * weight_decay)`` applies it: with a
    tensor ``lr`` the factor ``1 - lr·wd`` is a tensor of lr's dtype, rounded there
    (float32: 2e-8 from the double factor after one step)."""
    decay = lr * like_lr(lr, weight_decay)
    if hasattr(decay, "dtype"):
        decay = 1 - (1 - decay)
    return decay


def _needs_params(name, params):
    if params is None:
        raise ValueError(f"{name}'s update needs `params` (got None): call "
                         "`optimizer.update(grads, state, params)`.")


# ------------------------------------------------------------------------- Adagrad


@register_state
class AdagradState(NamedTuple):
    """``adagrad``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      sum: like params: torch's ``state[p]["sum"]``.
    """

    step: jax.Array  # `()` int32
    sum: Any  # like params: torch's state[p]["sum"]


def adagrad(lr=1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
            initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach=None, *,
            maximize: bool = False, differentiable: bool = False,
            fused=None) -> optax.GradientTransformation:
    """``torch.optim.Adagrad``: ``sum += g²``, ``p -= clr · g / (sqrt(sum) + eps)``.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      lr_decay: learning-rate decay: step ``t`` uses ``lr / (1 + (t − 1)·lr_decay)``.
      weight_decay: L2 penalty, added to the gradient (``grad += weight_decay·p``).
      initial_accumulator_value: the starting value of every element of ``sum``.
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      maximize: maximise the objective (the gradient's sign flipped).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).
      fused: must be None or False: torch's fused kernel rounds differently, so True is
        refused.

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``AdagradState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, fused=fused, differentiable=differentiable, lr=lr)
    check_momentum_follows(lr, None, None, "adagrad")
    lr_decay = check_hyper("lr_decay", lr_decay)
    weight_decay = check_hyper("weight_decay", weight_decay)
    initial = check_hyper("initial_accumulator_value", initial_accumulator_value)
    eps = check_hyper("eps", eps)

    def init_fn(params):
        return AdagradState(step=jnp.zeros((), jnp.int32),
                            sum=jax.tree.map(lambda p: jnp.full_like(p, initial), params))

    def update_fn(updates, state, params=None):
        lr_t = value_at(lr, state.step)
        step = optax.safe_int32_increment(state.step)
        t = step.astype(jnp.result_type(float))
        clr = lr_t / like_lr(lr_t, 1 + (t - 1) * lr_decay)
        sums = jax.tree.map(lambda s, g: s + g * g, state.sum, updates)
        new = jax.tree.map(
            lambda g, s: _scalar_like(-clr, g) * (g / (jnp.sqrt(s) + _scalar_like(eps, s))),
            updates, sums)
        return new, AdagradState(step=step, sum=sums)

    return _chain(maximize, weight_decay, optax.GradientTransformation(init_fn, update_fn))


# -------------------------------------------------------------------------- Adamax


@register_state
class AdamaxState(NamedTuple):
    """``adamax``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      exp_avg: like params: the first moment.
      exp_inf: like params: the exponentially weighted infinity norm.
    """

    step: jax.Array  # `()` int32
    exp_avg: Any  # like params
    exp_inf: Any  # like params: the exponentially weighted infinity norm


def adamax(lr=2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
           foreach=None, *, maximize: bool = False, differentiable: bool = False,
           capturable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.Adamax``: ``p -= lr / (1 − beta1^t) · exp_avg / exp_inf``.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      betas: ``(beta1, beta2)``, the coefficients of the running averages; ``beta1`` may
        be a schedule.
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      weight_decay: L2 penalty, added to the gradient (``grad += weight_decay·p``).
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      maximize: maximise the objective (the gradient's sign flipped).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``AdamaxState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable, lr=lr)
    b1, b2 = check_betas(betas)
    check_momentum_follows(lr, "betas[0]", b1, "adamax")
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)

    def init_fn(params):
        return _initial_state(AdamaxState, params)

    def update_fn(updates, state, params=None):
        lr_t = value_at(lr, state.step)
        b1_t = value_at(b1, state.step)
        step = optax.safe_int32_increment(state.step)
        exp_avg = jax.tree.map(lambda m, g: _lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_inf = jax.tree.map(
            lambda u, g: jnp.maximum(u * _scalar_like(b2, u), jnp.abs(g) + _scalar_like(eps, g)),
            state.exp_inf, updates)
        clr = lr_t / like_lr(lr_t, _one_minus_power(b1_t, step.astype(jnp.result_type(float))))
        new = jax.tree.map(lambda m, u: _scalar_like(-clr, m) * (m / u), exp_avg, exp_inf)
        return new, AdamaxState(step=step, exp_avg=exp_avg, exp_inf=exp_inf)

    return _chain(maximize, weight_decay, optax.GradientTransformation(init_fn, update_fn))


# --------------------------------------------------------------------------- NAdam


@register_state
class NadamState(NamedTuple):
    """``nadam``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      exp_avg: like params: the first moment.
      exp_avg_sq: like params: the second moment.
      mu_product: like params, each leaf a ``()`` float32: torch's ``state[p]["mu_product"]``.
    """

    step: jax.Array  # `()` int32
    exp_avg: Any  # like params
    exp_avg_sq: Any  # like params
    mu_product: Any  # like params, each leaf a `()` float32: torch's state[p]["mu_product"]


def nadam(lr=2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
          momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *,
          foreach=None, maximize: bool = False, capturable: bool = False,
          differentiable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.NAdam`` (Nesterov Adam with torch's ``momentum_decay`` schedule).

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      betas: ``(beta1, beta2)``, the coefficients of the running averages; ``beta1`` may
        be a schedule.
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      weight_decay: L2 penalty, added to the gradient, unless
        ``decoupled_weight_decay``.
      momentum_decay: NAdam's momentum decay ψ: ``mu_t = beta1·(1 − 0.5·0.96^(t·ψ))``.
      decoupled_weight_decay: decay the parameters directly (``p *= 1 - lr·weight_decay``,
        AdamW's rule) instead of adding ``weight_decay·p`` to the gradient.
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      maximize: maximise the objective (the gradient's sign flipped).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      differentiable: must be False: torch's ``differentiable=True`` takes its capturable
        path (float32 bias corrections), so True is refused (every JAX update is
        differentiable already).

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``NadamState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable, lr=lr)
    b1, b2 = check_betas(betas)
    refuse_differentiable("nadam", differentiable)
    check_momentum_follows(lr, "betas[0]", b1, "nadam")
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)
    momentum_decay = check_hyper("momentum_decay", momentum_decay)
    decoupled = bool(decoupled_weight_decay) and weight_decay != 0

    def init_fn(params):
        return _initial_state(NadamState, params, mu_product=jax.tree.map(
            lambda p: jnp.ones((), _SCALAR_DTYPE), params))

    def update_fn(updates, state, params=None):
        if decoupled:
            _needs_params("nadam", params)
        lr_t = value_at(lr, state.step)
        b1_t = value_at(b1, state.step)
        step = optax.safe_int32_increment(state.step)
        t = step.astype(jnp.result_type(float))
        bias_correction2 = _one_minus_power(b2, t)
        mu = b1_t * (1.0 - 0.5 * (0.96 ** (t * momentum_decay)))
        mu_next = b1_t * (1.0 - 0.5 * (0.96 ** ((t + 1) * momentum_decay)))
        # torch: mu_product *= mu on a float32 scalar tensor, so in float32
        mu_product = jax.tree.map(lambda q: q * mu.astype(q.dtype), state.mu_product)
        exp_avg = jax.tree.map(lambda m, g: _lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(
            lambda v, g: v * _scalar_like(b2, v) + _scalar_like(1 - b2, v) * (g * g),
            state.exp_avg_sq, updates)

        def step_of(g, m, v, q):
            denom = jnp.sqrt(v / _scalar_like(bias_correction2, v)) + _scalar_like(eps, v)
            q = q.astype(jnp.result_type(float))
            q_next = q * mu_next
            grad_coef = -lr_t * like_lr(lr_t, 1.0 - mu) / like_lr(lr_t, 1.0 - q)
            avg_coef = (-lr_t * like_lr(lr_t, mu_next)) / like_lr(lr_t, 1.0 - q_next)
            return (_scalar_like(grad_coef, g) * (g / denom)
                    + _scalar_like(avg_coef, m) * (m / denom))

        new = jax.tree.map(step_of, updates, exp_avg, exp_avg_sq, mu_product)
        if decoupled:
            new = jax.tree.map(lambda u, p: u - _scalar_like(_decay(lr_t, weight_decay), p) * p,
                               new, params)
        return new, NadamState(step=step, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq,
                               mu_product=mu_product)

    rule = optax.GradientTransformation(init_fn, update_fn)
    return _chain(maximize, 0.0 if decoupled else weight_decay, rule)


# --------------------------------------------------------------------------- RAdam


@register_state
class RadamState(NamedTuple):
    """``radam``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      exp_avg: like params: the first moment.
      exp_avg_sq: like params: the second moment.
    """

    step: jax.Array  # `()` int32
    exp_avg: Any  # like params
    exp_avg_sq: Any  # like params


def radam(lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
          decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
          capturable: bool = False, differentiable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.RAdam``: Adam with the variance rectification once ``rho_t > 5``.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      betas: ``(beta1, beta2)``, the coefficients of the running averages; ``beta1`` may
        be a schedule.
      eps: added to the denominator for numerical stability (outside the square root,
        as torch).
      weight_decay: L2 penalty, added to the gradient, unless
        ``decoupled_weight_decay``.
      decoupled_weight_decay: decay the parameters directly (``p *= 1 - lr·weight_decay``,
        AdamW's rule) instead of adding ``weight_decay·p`` to the gradient.
      foreach: torch's implementation flag; accepted and ignored (jaxgrad computes torch's
        single-tensor rule).
      maximize: maximise the objective (the gradient's sign flipped).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``RadamState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable, lr=lr)
    b1, b2 = check_betas(betas)
    check_momentum_follows(lr, "betas[0]", b1, "radam")
    eps = check_hyper("eps", eps)
    weight_decay = check_hyper("weight_decay", weight_decay)
    decoupled = bool(decoupled_weight_decay) and weight_decay != 0
    rho_inf = 2 / (1 - b2) - 1

    def init_fn(params):
        return _initial_state(RadamState, params)

    def update_fn(updates, state, params=None):
        if decoupled:
            _needs_params("radam", params)
        lr_t = value_at(lr, state.step)
        b1_t = value_at(b1, state.step)
        step = optax.safe_int32_increment(state.step)
        t = step.astype(jnp.result_type(float))
        exp_avg = jax.tree.map(lambda m, g: _lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(
            lambda v, g: v * _scalar_like(b2, v) + _scalar_like(1 - b2, v) * (g * g),
            state.exp_avg_sq, updates)
        bias_correction1 = _one_minus_power(b1_t, t)
        bias_correction2 = _one_minus_power(b2, t)
        rho_t = rho_inf - 2 * t * (b2 ** t) / bias_correction2
        rectified = rho_t > 5.0
        safe_rho = jnp.where(rectified, rho_t, rho_inf)  # no NaN in the unused branch
        rect = jnp.sqrt((safe_rho - 4) * (safe_rho - 2) * rho_inf
                        / ((rho_inf - 4) * (rho_inf - 2) * safe_rho))

        def step_of(m, v):
            corrected = m / _scalar_like(bias_correction1, m)
            plain = corrected * _scalar_like(lr_t, m)
            adaptive = (_scalar_like(jnp.sqrt(bias_correction2), v)
                        / (jnp.sqrt(v) + _scalar_like(eps, v)))
            return -jnp.where(rectified, plain * adaptive * _scalar_like(rect, m), plain)

        new = jax.tree.map(step_of, exp_avg, exp_avg_sq)
        if decoupled:
            new = jax.tree.map(lambda u, p: u - _scalar_like(_decay(lr_t, weight_decay), p) * p,
                               new, params)
        return new, RadamState(step=step, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)

    rule = optax.GradientTransformation(init_fn, update_fn)
    return _chain(maximize, 0.0 if decoupled else weight_decay, rule)


# ---------------------------------------------------------------------------- ASGD


@register_state
class AsgdState(NamedTuple):
    """``asgd``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      step: ``()`` int32: torch's ``state[p]["step"]``.
      eta: like params, each leaf ``()`` float32: the current step size.
      mu: like params, each leaf ``()`` float32: the averaging weight.
      ax: like params: the averaged parameters.
    """

    step: jax.Array  # `()` int32
    eta: Any  # like params, each leaf `()` float32: the current step size
    mu: Any  # like params, each leaf `()` float32: the averaging weight
    ax: Any  # like params: the averaged parameters


def asgd(lr=1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
         weight_decay: float = 0.0, foreach=None, maximize: bool = False,
         differentiable: bool = False, capturable: bool = False) -> optax.GradientTransformation:
    """``torch.optim.ASGD``: ``p ← p·(1 − lambd·eta) − eta·g``, ``ax`` the running average.

    ``eta`` and ``mu`` are float32 scalars as torch keeps them (its default scalar
    dtype), so the step size is the float32 rounding of ``lr / (1 + lambd·lr·t)^alpha``.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr`` (``jaxgrad.optim.schedulers``).
      lambd: the decay term.
      alpha: the power of the step size's decay.
      t0: the step at which averaging starts.
      weight_decay: L2 penalty, added to the gradient (``grad += weight_decay·p``).
      foreach: None or False (torch's default on CPU, its single-tensor rule); True is
        refused: torch's foreach ASGD rounds differently (eta in float32 arithmetic).
      maximize: maximise the objective (the gradient's sign flipped).
      differentiable: torch's implementation flag; accepted and ignored (every JAX update
        is differentiable).
      capturable: must be False (torch refuses True for CPU tensors; a jitted step is
        always capturable).

    Returns:
      An ``optax.GradientTransformation`` (``init(params)``, ``update(grads, state,
      params)``) whose state holds torch's ``optimizer.state`` (``AsgdState``).

    Raises:
      ValueError: a hyperparameter outside torch's range, ``fused=True`` or
        ``capturable=True``, or a combination torch refuses.
      TypeError: a hyperparameter or flag of the wrong type.
    """
    lr = check_lr(lr)
    check_flags(foreach=foreach, differentiable=differentiable, capturable=capturable, lr=lr)
    if foreach:
        raise ValueError(
            "asgd: `foreach=True` is not supported: torch's foreach ASGD is another "
            "computation (eta in float32 arithmetic, lr / (1 + lambd·lr·step)^alpha on the "
            "float32 step; p -= eta·(g + lambd·p); ax always lerped), 1e-9 relative from its "
            "single-tensor rule after 3 steps, which is the one jaxgrad reproduces; pass "
            "foreach=None or False (torch's default on CPU).")
    check_momentum_follows(lr, None, None, "asgd")
    if hasattr(lr, "shape"):
        raise TypeError("asgd: `lr` must be a float or a schedule; an array `lr` is not supported.")
    lambd = check_hyper("lambd", lambd)
    alpha = check_hyper("alpha", alpha, low=float("-inf"))
    t0 = check_hyper("t0", t0, low=float("-inf"))
    weight_decay = check_hyper("weight_decay", weight_decay)

    def init_fn(params):
        first = jnp.asarray(value_at(lr, jnp.zeros((), jnp.int32))).astype(_SCALAR_DTYPE)
        return _initial_state(AsgdState, params, eta=jax.tree.map(lambda p: first, params),
                              mu=jax.tree.map(lambda p: jnp.ones((), _SCALAR_DTYPE), params))

    def update_fn(updates, state, params=None):
        _needs_params("asgd", params)
        lr_t = value_at(lr, state.step)
        step = optax.safe_int32_increment(state.step)
        t = step.astype(jnp.result_type(float))

        def new_param(p, g, eta):
            eta = eta.astype(jnp.result_type(float))
            decayed = p * _scalar_like(1 - lambd * eta, p)
            return decayed + _scalar_like(-eta, g) * g

        new_params = jax.tree.map(new_param, params, updates, state.eta)
        ax = jax.tree.map(
            lambda a, p, mu: jnp.where(mu != 1, a + (p - a) * mu.astype(p.dtype), p),
            state.ax, new_params, state.mu)
        eta = (lr_t / ((1 + lambd * lr_t * t) ** alpha))
        mu = 1 / jnp.maximum(1.0, t - t0)
        new_state = AsgdState(
            step=step, ax=ax,
            eta=jax.tree.map(lambda p: jnp.asarray(eta).astype(_SCALAR_DTYPE), params),
            mu=jax.tree.map(lambda p: jnp.asarray(mu).astype(_SCALAR_DTYPE), params))
        return jax.tree.map(lambda n, p: n - p, new_params, params), new_state

    return _chain(maximize, weight_decay, optax.GradientTransformation(init_fn, update_fn))
