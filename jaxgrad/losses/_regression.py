"""Element-wise regression losses: ``mse_loss``, ``l1_loss``, ``smooth_l1_loss``,
``huber_loss``, ``poisson_nll_loss``, ``gaussian_nll_loss``.

``target`` must have ``input``'s shape: where torch broadcasts mismatched shapes (with
a warning), jaxgrad raises, because broadcasting a `(N,)` target against `(N, 1)`
predictions is a classic silent bug. ``weight`` (torch ≥ 2.7's ``mse_loss`` /
``l1_loss`` / ``huber_loss`` argument) must have ``input``'s shape, as torch requires.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxgrad.losses._checks import (
    check_broadcastable,
    check_floating,
    check_number,
    check_reduction,
    check_same_shape,
    reduce,
    require,
)


def _prepare(loss: str, input, target, reduction, weight=None):
    check_reduction(reduction)
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    if weight is not None:
        check_floating(loss, "weight", weight)
        check_same_shape(loss, input, weight, "weight")


def _reduce_weighted_mean(losses, weight, reduction):
    """torch's weighted ``mse_loss`` / ``l1_loss``: ``"mean"`` is ``sum(w·l) / sum(w)``."""
    if weight is None:
        return reduce(losses, reduction)
    losses = losses * weight
    if reduction == "mean":
        return jnp.sum(losses) / jnp.sum(weight)
    return reduce(losses, reduction)


@jax.custom_jvp
def _abs(diff):
    """``|diff|`` with torch's derivative ``sign(diff)``, which is 0 at a tie and at NaN.

    JAX's ``abs`` differentiates to +1 at 0 and −1 at NaN (``select(x >= 0, 1, −1)``),
    so a NaN target would pass −1 to the input where torch passes 0.
    """
    return jnp.abs(diff)


@_abs.defjvp
def _abs_jvp(primals, tangents):
    (diff,), (tangent,) = primals, tangents
    sign = (diff > 0).astype(diff.dtype) - (diff < 0).astype(diff.dtype)
    return jnp.abs(diff), sign * tangent


def mse_loss(input, target, reduction: str = "mean", weight=None):
    """``F.mse_loss``: ``(input − target)²``, reduced. Shapes `(*)`, equal.

    Args:
      input: predictions `(*)`, floating.
      target: `(*)`, ``input``'s shape.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      weight: optional per-element weights, ``input``'s shape: ``"mean"`` is then
        ``sum(w·l) / sum(w)``, as torch.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, or a ``target`` or ``weight`` whose shape differs
        from ``input``'s (jaxgrad does not broadcast).
      TypeError: a non-floating ``input`` or ``weight``.
    """
    _prepare("mse_loss", input, target, reduction, weight)
    return _reduce_weighted_mean(jnp.square(input - target), weight, reduction)


def l1_loss(input, target, reduction: str = "mean", weight=None):
    """``F.l1_loss``: ``|input − target|``, reduced. Shapes `(*)`, equal.

    The gradient is torch's ``sign(input − target)``: 0 where they tie or either is NaN.

    Args:
      input: predictions `(*)`, floating.
      target: `(*)`, ``input``'s shape.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      weight: optional per-element weights, ``input``'s shape: ``"mean"`` is then
        ``sum(w·l) / sum(w)``, as torch.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, or a ``target`` or ``weight`` whose shape differs
        from ``input``'s (jaxgrad does not broadcast).
      TypeError: a non-floating ``input`` or ``weight``.
    """
    _prepare("l1_loss", input, target, reduction, weight)
    return _reduce_weighted_mean(_abs(input - target), weight, reduction)


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0):
    """``F.smooth_l1_loss``: ``0.5·z²/beta`` for ``z = |input − target| < beta``, else
    ``z − 0.5·beta``; ``beta=0`` is ``l1_loss``.

    Args:
      input: predictions `(*)`, floating.
      target: `(*)`, ``input``'s shape.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      beta: the threshold between the quadratic and the linear part, ≥ 0.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, or a negative ``beta``, or a ``target`` whose shape differs
        from ``input``'s (jaxgrad does not broadcast).
      TypeError: a non-floating ``input``.
    """
    loss = "smooth_l1_loss"
    check_number(loss, "beta", beta, nonnegative=True)
    _prepare(loss, input, target, reduction)
    if beta == 0:  # torch calls l1_loss here, gradient included
        return reduce(_abs(input - target), reduction)
    diff = jnp.abs(input - target)
    losses = jnp.where(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta)
    return reduce(losses, reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """``F.huber_loss``: ``0.5·z²`` for ``z = |input − target| < delta``, else
    ``delta·(z − 0.5·delta)``; ``weight`` multiplies each term (plain mean, as torch).

    Args:
      input: predictions `(*)`, floating.
      target: `(*)`, ``input``'s shape.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      delta: the threshold between the quadratic and the linear part, > 0.
      weight: optional per-element weights, ``input``'s shape.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, or a ``delta`` ≤ 0, or a ``target`` or ``weight`` whose shape differs
        from ``input``'s (jaxgrad does not broadcast).
      TypeError: a non-floating ``input`` or ``weight``.
    """
    loss = "huber_loss"
    check_number(loss, "delta", delta, positive=True)
    _prepare(loss, input, target, reduction, weight)
    diff = jnp.abs(input - target)
    losses = jnp.where(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta))
    if weight is not None:
        losses = losses * weight
    return reduce(losses, reduction)


def poisson_nll_loss(
    input,
    target,
    log_input: bool = True,
    full: bool = False,
    eps: float = 1e-8,
    reduction: str = "mean",
):
    """``F.poisson_nll_loss``: ``exp(input) − target·input`` (``log_input``) or
    ``input − target·log(input + eps)``; ``full`` adds Stirling's term where target > 1.

    Args:
      input: the predicted log-rates (``log_input``) or rates, `(*)`, floating.
      target: counts `(*)`, ``input``'s shape.
      log_input: whether ``input`` holds log-rates.
      full: add Stirling's approximation of ``log(target!)``.
      eps: added inside the log when ``log_input`` is False.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, or a ``target`` whose shape differs
        from ``input``'s (jaxgrad does not broadcast).
      TypeError: a non-floating ``input``.
    """
    loss = "poisson_nll_loss"
    check_number(loss, "eps", eps)
    _prepare(loss, input, target, reduction)
    if log_input:
        losses = jnp.exp(input) - target * input
    else:
        losses = input - target * jnp.log(input + eps)
    if full:
        stirling = target * jnp.log(target) - target + 0.5 * jnp.log(2 * math.pi * target)
        losses = losses + jnp.where(target <= 1, jnp.zeros((), stirling.dtype), stirling)
    return reduce(losses, reduction)


def _var_shape_ok(input_shape, var_shape) -> bool:
    if var_shape == input_shape or var_shape == input_shape[:-1]:
        return True
    return (
        len(var_shape) == len(input_shape)
        and sum(v for i, v in zip(input_shape, var_shape) if i != v) == 1
    )


def gaussian_nll_loss(
    input, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"
):
    """``F.gaussian_nll_loss``: ``0.5·(log var + (input − target)²/var)``.

    Args:
      input: `(*)`.
      target: `(*)`, or a shape broadcasting to it (torch documents size-1 axes).
      var: a float, or variances with ``input``'s shape, that shape without the last
        axis, or one axis of size 1 (homoscedastic). Negative entries raise when concrete.
      full: add the constant ``0.5·log(2π)``.
      eps: ``var`` is clamped at ``eps`` for the value only: the gradient passes the
        clamp unchanged, as in torch (which clamps in place under ``no_grad``).
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, a ``target`` or ``var`` of
        another shape than described, or a negative ``var`` (concrete values).
      TypeError: a non-floating ``input``, ``target`` or ``var``.
    """
    loss = "gaussian_nll_loss"
    check_number(loss, "eps", eps)
    check_reduction(reduction)
    check_floating(loss, "input", input)
    check_floating(loss, "target", target)
    # torch documents a target "with one dimension equal to 1 (to allow for broadcasting)"
    check_broadcastable(loss, "target", target, input.shape)
    if isinstance(var, (int, float)) and not isinstance(var, bool):
        if var < 0:
            raise ValueError(f"{loss}: `var` (={var}) must be >= 0.")
        var = var * jnp.ones_like(input)
    check_floating(loss, "var", var)
    input_shape, var_shape = tuple(input.shape), tuple(var.shape)
    if not _var_shape_ok(input_shape, var_shape):
        raise ValueError(
            f"{loss}: `var` shape {var_shape} must be `input` shape {input_shape}, that shape "
            "without its last axis, or that shape with one axis of size 1."
        )
    require(var >= 0, f"{loss}: `var` has negative entries; variances must be >= 0.")
    if var_shape != input_shape and var_shape == input_shape[:-1]:
        var = jnp.expand_dims(var, -1)
    var = jnp.where(var < 0, jnp.nan, var)
    var = var + jax.lax.stop_gradient(jnp.maximum(var, eps) - var)
    losses = 0.5 * (jnp.log(var) + jnp.square(input - target) / var)
    if full:
        losses = losses + 0.5 * math.log(2 * math.pi)
    return reduce(losses, reduction)
