"""Losses comparing two inputs or two distributions: ``kl_div``,
``cosine_embedding_loss``, ``margin_ranking_loss``."""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import xlogy

from jaxgrad.losses._checks import (
    check_floating,
    check_number,
    check_reduction,
    check_same_shape,
    reduce,
)

_COSINE_EPS = 1e-12  # torch's EPSILON in cosine_embedding_loss


def kl_div(input, target, reduction: str = "mean", log_target: bool = False):
    """``F.kl_div``: ``target·(log target − input)`` with ``input`` log-probabilities.

    ``log_target=True`` takes ``target`` as log-probabilities too. ``reduction`` is
    ``"mean"`` (over every element, torch's default, not the KL divergence),
    ``"batchmean"`` (sum / batch size: the KL divergence), ``"sum"`` or ``"none"``.

    Args:
      input: log-probabilities `(*)` (batch first for ``"batchmean"``), floating.
      target: probabilities (or log-probabilities with ``log_target``), ``input``'s shape.
      reduction: ``"mean"``, ``"batchmean"``, ``"sum"`` or ``"none"``.
      log_target: whether ``target`` holds log-probabilities.

    Returns:
      A scalar, or the per-element terms `(*)` with ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, or a ``target`` of another shape.
      TypeError: a non-floating ``input``.
    """
    loss = "kl_div"
    check_reduction(reduction, ("mean", "batchmean", "sum", "none"))
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    if log_target:
        losses = jnp.exp(target) * (target - input)
    else:
        losses = xlogy(target, target) - target * input
    if reduction == "batchmean":
        total = jnp.sum(losses)
        return total / input.shape[0] if input.ndim else total
    return reduce(losses, reduction)


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean"):
    """``F.cosine_embedding_loss``: ``1 − cos`` where target is 1, ``max(0, cos − margin)``
    where it is −1 (0 for any other target value, as torch).

    Args:
      input1: embeddings `(N, D)`, or one `(D,)`; floating.
      input2: embeddings of ``input1``'s shape.
      target: `(N,)` (or `()`) of 1 (similar) and −1 (dissimilar).
      margin: subtracted from the cosine of the dissimilar pairs.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-pair losses `(N,)` with ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, or shapes other than the above.
      TypeError: a non-floating ``input1`` or a ``margin`` that is not a number.
    """
    loss = "cosine_embedding_loss"
    check_reduction(reduction)
    check_number(loss, "margin", margin)
    check_floating(loss, "input1", input1)
    check_same_shape(loss, input1, input2, "input2")
    if target.ndim not in (0, 1) or input1.ndim != target.ndim + 1:
        raise ValueError(
            f"{loss}: `target` shape {tuple(target.shape)} must be `(N,)` with inputs `(N, D)` "
            f"or `()` with inputs `(D,)`; inputs are {tuple(input1.shape)}."
        )
    if target.ndim == 1 and target.shape[0] != input1.shape[0]:
        raise ValueError(
            f"{loss}: `target` length {target.shape[0]} must equal the inputs' "
            f"batch size {input1.shape[0]}."
        )
    axis = target.ndim
    prod_sum = jnp.sum(input1 * input2, axis=axis)
    mag_square1 = jnp.sum(input1 * input1, axis=axis) + _COSINE_EPS
    mag_square2 = jnp.sum(input2 * input2, axis=axis) + _COSINE_EPS
    cos = prod_sum / jnp.sqrt(mag_square1 * mag_square2)
    zeros = jnp.zeros_like(cos)
    pos = jnp.where(target == 1, 1 - cos, zeros)
    neg = jnp.where(target == -1, jnp.maximum(cos - margin, 0), zeros)
    return reduce(pos + neg, reduction)


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, reduction: str = "mean"):
    """``F.margin_ranking_loss``: ``max(0, −target·(input1 − input2) + margin)``.

    Args:
      input1: scores `(*)`, floating.
      input2: scores of ``input1``'s shape.
      target: ``input1``'s shape, 1 where ``input1`` should rank higher, −1 where lower.
      margin: the margin the ranking must hold by.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, or shapes that are not all equal (torch
        requires it too).
      TypeError: a non-floating ``input1`` or a ``margin`` that is not a number.
    """
    loss = "margin_ranking_loss"
    check_reduction(reduction)
    check_number(loss, "margin", margin)
    check_floating(loss, "input1", input1)
    check_same_shape(loss, input1, input2, "input2")
    if tuple(target.shape) != tuple(input1.shape):
        raise ValueError(
            f"{loss}: `target` shape {tuple(target.shape)} must equal the inputs' "
            f"shape {tuple(input1.shape)}."
        )
    losses = jnp.maximum(-target * (input1 - input2) + margin, 0)
    return reduce(losses.astype(jnp.result_type(input1, input2)), reduction)
