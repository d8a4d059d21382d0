"""torch.optim's Adagrad, Adamax, NAdam, RAdam and ASGD as optax transformations.

Each factory computes torch's single-tensor update, ``lr`` included, operation for
operation; the arguments, the chain around the rule, the state and the step are the
family's (``jaxgrad.optim._family``; as users see them: ``jaxgrad.optim``'s
docstring). The states' fields carry torch's names:

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

from jaxgrad.optim._args import check_hyper, like_lr, value_at
from jaxgrad.optim._family import (
    check_adam_family,
    check_lr_and_flags,
    decay_params,
    lerp,
    one_minus_power,
    scalar_like,
    split_weight_decay,
    square_average,
    torch_chain,
    torch_rule,
)
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.state import register_state

_SCALAR_DTYPE = jnp.float32  # torch's _get_scalar_dtype() under its default float32


def _scalars(value, params):
    """A state field of one ``()`` float32 per parameter, each ``value``."""
    return jax.tree.map(lambda p: jnp.asarray(value).astype(_SCALAR_DTYPE), params)


# ------------------------------------------------------------------------- Adagrad


@register_state
class AdagradState(NamedTuple):
    """``adagrad``'s state, torch's ``optimizer.state[p]``: ``sum``, like params."""

    step: jax.Array
    sum: Any


def adagrad(
    lr=1e-2,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    initial_accumulator_value: float = 0.0,
    eps: float = 1e-10,
    foreach=None,
    *,
    maximize: bool = False,
    differentiable: bool = False,
    fused=None,
) -> optax.GradientTransformation:
    """``torch.optim.Adagrad``: ``sum += g²``, ``p -= clr · g / (sqrt(sum) + eps)``.

    ``lr``, ``eps``, ``weight_decay`` (L2), ``maximize`` and the flags are every
    factory's (``jaxgrad.optim``).

    Args:
      lr_decay: learning-rate decay: step ``t`` uses ``lr / (1 + (t − 1)·lr_decay)``.
      initial_accumulator_value: the starting value of every element of ``sum``.

    Returns:
      The transformation; its state holds ``AdagradState``.
    """
    lr = check_lr_and_flags(lr, foreach=foreach, fused=fused, differentiable=differentiable)
    check_momentum_follows(lr, None, None, "adagrad")
    lr_decay = check_hyper("lr_decay", lr_decay)
    weight_decay = check_hyper("weight_decay", weight_decay)
    initial = check_hyper("initial_accumulator_value", initial_accumulator_value)
    eps = check_hyper("eps", eps)

    def rule(updates, state, params, step):
        clr = step.lr / like_lr(step.lr, 1 + (step.t - 1) * lr_decay)
        sums = jax.tree.map(lambda s, g: s + g * g, state.sum, updates)
        new = jax.tree.map(
            lambda g, s: scalar_like(-clr, g) * (g / (jnp.sqrt(s) + scalar_like(eps, s))),
            updates,
            sums,
        )
        return new, {"sum": sums}

    return torch_chain(
        maximize,
        weight_decay,
        torch_rule(
            AdagradState,
            rule,
            lr=lr,
            sum=lambda params: jax.tree.map(lambda p: jnp.full_like(p, initial), params),
        ),
    )


# -------------------------------------------------------------------------- Adamax


@register_state
class AdamaxState(NamedTuple):
    """``adamax``'s state, torch's ``optimizer.state[p]``: the first moment ``exp_avg``
    and the exponentially weighted infinity norm ``exp_inf``, each like params."""

    step: jax.Array
    exp_avg: Any
    exp_inf: Any


def adamax(
    lr=2e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    foreach=None,
    *,
    maximize: bool = False,
    differentiable: bool = False,
    capturable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.Adamax``: ``p -= lr / (1 − beta1^t) · exp_avg / exp_inf``.

    ``lr``, ``betas``, ``eps`` (added to ``|g|``), ``weight_decay`` (L2), ``maximize`` and
    the flags are every factory's (``jaxgrad.optim``).

    Returns:
      The transformation; its state holds ``AdamaxState``.
    """
    lr, b1, b2, eps, weight_decay = check_adam_family(
        "adamax",
        lr,
        betas,
        eps,
        weight_decay,
        foreach=foreach,
        differentiable=differentiable,
        capturable=capturable,
    )

    def rule(updates, state, params, step):
        b1_t = step.at(b1)
        exp_avg = jax.tree.map(lambda m, g: lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_inf = jax.tree.map(
            lambda u, g: jnp.maximum(u * scalar_like(b2, u), jnp.abs(g) + scalar_like(eps, g)),
            state.exp_inf,
            updates,
        )
        clr = step.lr / like_lr(step.lr, one_minus_power(b1_t, step.t))
        new = jax.tree.map(lambda m, u: scalar_like(-clr, m) * (m / u), exp_avg, exp_inf)
        return new, {"exp_avg": exp_avg, "exp_inf": exp_inf}

    return torch_chain(maximize, weight_decay, torch_rule(AdamaxState, rule, lr=lr))


# --------------------------------------------------------------------------- NAdam


@register_state
class NadamState(NamedTuple):
    """``nadam``'s state, torch's ``optimizer.state[p]``: the moments ``exp_avg`` and
    ``exp_avg_sq``, like params, and ``mu_product``, like params with each leaf a ``()``
    float32 (torch's default scalar dtype)."""

    step: jax.Array
    exp_avg: Any
    exp_avg_sq: Any
    mu_product: Any


def nadam(
    lr=2e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum_decay: float = 4e-3,
    decoupled_weight_decay: bool = False,
    *,
    foreach=None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.NAdam`` (Nesterov Adam with torch's ``momentum_decay`` schedule).

    ``lr``, ``betas``, ``eps``, ``weight_decay`` (L2 unless ``decoupled_weight_decay``),
    ``maximize`` and the flags are every factory's (``jaxgrad.optim``).

    Args:
      momentum_decay: NAdam's momentum decay ψ: ``mu_t = beta1·(1 − 0.5·0.96^(t·ψ))``.
      decoupled_weight_decay: decay the parameters directly (``p *= 1 - lr·weight_decay``,
        AdamW's rule) instead of adding ``weight_decay·p`` to the gradient.
      differentiable: must be False, as ``adam``'s.

    Returns:
      The transformation; its state holds ``NadamState``.
    """
    lr, b1, b2, eps, weight_decay = check_adam_family(
        "nadam",
        lr,
        betas,
        eps,
        weight_decay,
        differentiable_refused=True,
        foreach=foreach,
        differentiable=differentiable,
        capturable=capturable,
    )
    momentum_decay = check_hyper("momentum_decay", momentum_decay)
    coupled, decoupled = split_weight_decay(weight_decay, decoupled_weight_decay)

    def rule(updates, state, params, step):
        lr_t, b1_t, t = step.lr, step.at(b1), step.t
        bias_correction2 = one_minus_power(b2, t)
        mu = b1_t * (1.0 - 0.5 * (0.96 ** (t * momentum_decay)))
        mu_next = b1_t * (1.0 - 0.5 * (0.96 ** ((t + 1) * momentum_decay)))
        # torch: mu_product *= mu on a float32 scalar tensor, so in float32
        mu_product = jax.tree.map(lambda q: q * mu.astype(q.dtype), state.mu_product)
        exp_avg = jax.tree.map(lambda m, g: lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(lambda v, g: square_average(v, g, b2), state.exp_avg_sq, updates)

        def step_of(g, m, v, q):
            denom = jnp.sqrt(v / scalar_like(bias_correction2, v)) + scalar_like(eps, v)
            q = q.astype(jnp.result_type(float))
            q_next = q * mu_next
            grad_coef = -lr_t * like_lr(lr_t, 1.0 - mu) / like_lr(lr_t, 1.0 - q)
            avg_coef = (-lr_t * like_lr(lr_t, mu_next)) / like_lr(lr_t, 1.0 - q_next)
            return scalar_like(grad_coef, g) * (g / denom) + scalar_like(avg_coef, m) * (m / denom)

        new = jax.tree.map(step_of, updates, exp_avg, exp_avg_sq, mu_product)
        if decoupled:
            new = decay_params(new, params, lr_t, decoupled)
        return new, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq, "mu_product": mu_product}

    return torch_chain(
        maximize,
        coupled,
        torch_rule(
            NadamState,
            rule,
            lr=lr,
            needs_params="nadam" if decoupled else None,
            mu_product=lambda params: _scalars(1.0, params),
        ),
    )


# --------------------------------------------------------------------------- RAdam


@register_state
class RadamState(NamedTuple):
    """``radam``'s state, torch's ``optimizer.state[p]``: the moments ``exp_avg`` and
    ``exp_avg_sq``, each like params."""

    step: jax.Array
    exp_avg: Any
    exp_avg_sq: Any


def radam(
    lr=1e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    *,
    foreach=None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.RAdam``: Adam with the variance rectification once ``rho_t > 5``.

    ``lr``, ``betas``, ``eps``, ``weight_decay`` (L2 unless ``decoupled_weight_decay``),
    ``maximize`` and the flags are every factory's (``jaxgrad.optim``).

    Args:
      decoupled_weight_decay: decay the parameters directly (``p *= 1 - lr·weight_decay``,
        AdamW's rule) instead of adding ``weight_decay·p`` to the gradient.

    Returns:
      The transformation; its state holds ``RadamState``.
    """
    lr, b1, b2, eps, weight_decay = check_adam_family(
        "radam",
        lr,
        betas,
        eps,
        weight_decay,
        foreach=foreach,
        differentiable=differentiable,
        capturable=capturable,
    )
    coupled, decoupled = split_weight_decay(weight_decay, decoupled_weight_decay)
    rho_inf = 2 / (1 - b2) - 1

    def rule(updates, state, params, step):
        lr_t, b1_t, t = step.lr, step.at(b1), step.t
        exp_avg = jax.tree.map(lambda m, g: lerp(m, g, 1 - b1_t), state.exp_avg, updates)
        exp_avg_sq = jax.tree.map(lambda v, g: square_average(v, g, b2), state.exp_avg_sq, updates)
        bias_correction1 = one_minus_power(b1_t, t)
        bias_correction2 = one_minus_power(b2, t)
        rho_t = rho_inf - 2 * t * (b2**t) / bias_correction2
        rectified = rho_t > 5.0
        safe_rho = jnp.where(rectified, rho_t, rho_inf)  # no NaN in the unused branch
        rect = jnp.sqrt(
            (safe_rho - 4) * (safe_rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * safe_rho)
        )

        def step_of(m, v):
            corrected = m / scalar_like(bias_correction1, m)
            plain = corrected * scalar_like(lr_t, m)
            adaptive = scalar_like(jnp.sqrt(bias_correction2), v) / (
                jnp.sqrt(v) + scalar_like(eps, v)
            )
            return -jnp.where(rectified, plain * adaptive * scalar_like(rect, m), plain)

        new = jax.tree.map(step_of, exp_avg, exp_avg_sq)
        if decoupled:
            new = decay_params(new, params, lr_t, decoupled)
        return new, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    return torch_chain(
        maximize,
        coupled,
        torch_rule(RadamState, rule, lr=lr, needs_params="radam" if decoupled else None),
    )


# ---------------------------------------------------------------------------- ASGD


@register_state
class AsgdState(NamedTuple):
    """``asgd``'s state, torch's ``optimizer.state[p]``: the step size ``eta`` and the
    averaging weight ``mu``, like params with each leaf a ``()`` float32 (torch's default
    scalar dtype), and the averaged parameters ``ax``, like params."""

    step: jax.Array
    eta: Any
    mu: Any
    ax: Any


def asgd(
    lr=1e-2,
    lambd: float = 1e-4,
    alpha: float = 0.75,
    t0: float = 1e6,
    weight_decay: float = 0.0,
    foreach=None,
    maximize: bool = False,
    differentiable: bool = False,
    capturable: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.ASGD``: ``p ← p·(1 − lambd·eta) − eta·g``, ``ax`` the running average.

    ``eta`` and ``mu`` are float32 scalars as torch keeps them (its default scalar
    dtype), so the step size is the float32 rounding of ``lr / (1 + lambd·lr·t)^alpha``.
    ``lr`` (a float or a schedule), ``weight_decay`` (L2), ``maximize`` and the flags
    are every factory's (``jaxgrad.optim``).

    Args:
      lambd: the decay term.
      alpha: the power of the step size's decay.
      t0: the step at which averaging starts.
      foreach: None or False (torch's default on CPU, its single-tensor rule); True is
        refused: torch's foreach ASGD rounds differently (eta in float32 arithmetic).

    Returns:
      The transformation; its state holds ``AsgdState``; its update needs ``params``.
    """
    lr = check_lr_and_flags(
        lr, foreach=foreach, differentiable=differentiable, capturable=capturable
    )
    if foreach:
        raise ValueError(
            "asgd: `foreach=True` is not supported: torch's foreach ASGD is another "
            "computation (eta in float32 arithmetic, lr / (1 + lambd·lr·step)^alpha on the "
            "float32 step; p -= eta·(g + lambd·p); ax always lerped), 1e-9 relative from its "
            "single-tensor rule after 3 steps, which is the one jaxgrad reproduces; pass "
            "foreach=None or False (torch's default on CPU)."
        )
    check_momentum_follows(lr, None, None, "asgd")
    if hasattr(lr, "shape"):
        raise TypeError("asgd: `lr` must be a float or a schedule; an array `lr` is not supported.")
    lambd = check_hyper("lambd", lambd)
    alpha = check_hyper("alpha", alpha, low=float("-inf"))
    t0 = check_hyper("t0", t0, low=float("-inf"))
    weight_decay = check_hyper("weight_decay", weight_decay)

    def rule(updates, state, params, step):
        lr_t, t = step.lr, step.t

        def new_param(p, g, eta):
            eta = eta.astype(jnp.result_type(float))
            decayed = p * scalar_like(1 - lambd * eta, p)
            return decayed + scalar_like(-eta, g) * g

        new_params = jax.tree.map(new_param, params, updates, state.eta)
        ax = jax.tree.map(
            lambda a, p, mu: jnp.where(mu != 1, a + (p - a) * mu.astype(p.dtype), p),
            state.ax,
            new_params,
            state.mu,
        )
        eta = lr_t / ((1 + lambd * lr_t * t) ** alpha)
        mu = 1 / jnp.maximum(1.0, t - t0)
        new = jax.tree.map(lambda n, p: n - p, new_params, params)
        return new, {"ax": ax, "eta": _scalars(eta, params), "mu": _scalars(mu, params)}

    return torch_chain(
        maximize,
        weight_decay,
        torch_rule(
            AsgdState,
            rule,
            lr=lr,
            needs_params="asgd",
            eta=lambda params: _scalars(value_at(lr, jnp.zeros((), jnp.int32)), params),
            mu=lambda params: _scalars(1.0, params),
        ),
    )
