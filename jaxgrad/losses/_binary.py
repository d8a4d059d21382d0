"""``binary_cross_entropy`` and ``binary_cross_entropy_with_logits`` with ``weight``.

``weight`` (and ``pos_weight``) broadcast to ``input``'s shape, as torch's do;
``target`` must have ``input``'s shape exactly (torch raises too).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.losses._checks import (
    check_broadcastable,
    check_floating,
    check_reduction,
    check_same_shape,
    reduce,
    require,
)


def _check_weight(loss: str, name: str, weight, input):
    if weight is None:
        return
    check_floating(loss, name, weight)
    check_broadcastable(loss, name, weight, input.shape)


# torch's EPSILON in binary_cross_entropy_backward is a C++ float: 1e-12 rounded to float32
_BCE_EPSILON = float(np.float32(1e-12))


@jax.custom_vjp
def _bce_terms(input, target):
    """Per-element ``−(t·log p + (1 − t)·log(1 − p))``, logs clamped at −100."""
    log_p = jnp.maximum(jnp.log(input), -100.0)
    log_1mp = jnp.maximum(jnp.log1p(-input), -100.0)
    return (target - 1) * log_1mp - target * log_p


def _bce_forward(input, target):
    return _bce_terms(input, target), (input, target)


def _bce_backward(residuals, cotangent):
    # torch's own backward formulas, not the derivative of the clamped forward: at
    # p = 0 or 1 torch's input gradient is (p − t)/1e-12, where autodiff of the clamp
    # would give 0, and its target gradient is −logit(p) (±inf there)
    input, target = residuals
    denom = jnp.maximum((1 - input) * input, _BCE_EPSILON)
    grad_input = cotangent * (input - target) / denom
    grad_target = cotangent * (jnp.log1p(-input) - jnp.log(input))
    return grad_input, grad_target


_bce_terms.defvjp(_bce_forward, _bce_backward)


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean"):
    """``F.binary_cross_entropy`` on probabilities.

    Args:
      input: probabilities in [0, 1], `(*)`.
      target: probabilities in [0, 1], `(*)`, ``input``'s shape.
      weight: optional rescaling weights broadcastable to `(*)`.
      reduction: ``"mean" | "sum" | "none"``.

    Each log is clamped at −100, as torch's, so p = 0 or 1 gives a finite loss; the
    gradients are torch's formulas (``(p − t)/max(p(1 − p), 1e-12)`` for ``input``). A
    probability outside [0, 1] — in ``input`` or ``target``, NaN included — raises
    ``ValueError`` when the values are concrete; under ``jit`` the loss is NaN there
    (``jaxgrad.losses.checked`` raises instead).

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, a ``target`` of another shape, a
        ``weight`` that does not broadcast, or (concrete values) a probability outside
        [0, 1].
      TypeError: a non-floating ``input`` or ``weight``.
    """
    loss = "binary_cross_entropy"
    check_reduction(reduction)
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    _check_weight(loss, "weight", weight, input)
    inside = (input >= 0) & (input <= 1)
    require(inside, f"{loss}: every element of `input` must be a probability in [0, 1].")
    # torch checks the target too (NaN included): "all elements of target should be
    # between 0 and 1"; 1.5 would otherwise give a plausible finite loss
    target_inside = (target >= 0) & (target <= 1)
    require(
        target_inside,
        f"{loss}: every element of `target` must be a probability in "
        "[0, 1]; found one outside it or NaN.",
    )
    # a probability outside [0, 1] gives log of a negative number: NaN, never a number;
    # a target outside it is made NaN explicitly, for jit where nothing can raise
    losses = jnp.where(target_inside, _bce_terms(input, target), jnp.nan)
    if weight is not None:
        losses = losses * weight
    return reduce(losses, reduction)


def binary_cross_entropy_with_logits(
    input, target, weight=None, reduction: str = "mean", pos_weight=None
):
    """``F.binary_cross_entropy_with_logits``, in torch's numerically stable form.

    ``(1 − t)·x − (1 + (pw − 1)·t)·log σ(x)``, times ``weight``; ``pw`` is ``pos_weight``
    (1 when None), broadcast along the last axis like torch's. Finite for any logit,
    where ``binary_cross_entropy(sigmoid(x))`` saturates at |x| ≳ 17 in float32.

    Args:
      input: logits `(*)`, floating.
      target: probabilities `(*)`, ``input``'s shape.
      weight: optional rescaling weights broadcastable to `(*)`.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      pos_weight: optional weights of the positive term, broadcastable to `(*)` (one
        per class on the last axis).

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: a ``reduction`` torch does not know, a ``target`` of another shape,
        or a ``weight`` / ``pos_weight`` that does not broadcast.
      TypeError: a non-floating ``input``, ``weight`` or ``pos_weight``.
    """
    loss = "binary_cross_entropy_with_logits"
    check_reduction(reduction)
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    _check_weight(loss, "weight", weight, input)
    _check_weight(loss, "pos_weight", pos_weight, input)
    # -log σ(x) = log(1 + e^−x) = log1p(e^−|x|) + max(−x, 0), written as logaddexp(−x, 0):
    # the same stable value, and at x = 0 the gradient −σ(0) = −½ torch's backward gives,
    # where autodiff through |x| and max(−x, 0) would give −1.
    neg_log_sigmoid = jnp.logaddexp(-input, 0.0)
    if pos_weight is not None:
        neg_log_sigmoid = (1 + (pos_weight - 1) * target) * neg_log_sigmoid
    losses = (1 - target) * input + neg_log_sigmoid
    if weight is not None:
        losses = losses * weight
    return reduce(losses, reduction)
