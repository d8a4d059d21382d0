"""Margin losses: ``soft_margin_loss``, ``multilabel_soft_margin_loss``,
``hinge_embedding_loss``, ``multi_margin_loss``, ``multilabel_margin_loss``.

torch's derivatives at the kinks are kept: ``hinge_embedding_loss`` clamps with
``clamp_min``, whose gradient passes at the tie (``margin − x = 0``) and is 0 at NaN;
``multi_margin_loss`` and ``multilabel_margin_loss`` count a term only where
``z > 0`` (strictly), so a term at the tie and a NaN term add neither loss nor
gradient — torch's kernels test ``z > 0`` the same way. Class indices outside
``[0, C)`` (``[-1, C)`` for ``multilabel_margin_loss``) raise ``ValueError`` when
``target`` is concrete (torch: "target out of range"); under ``jit`` the loss is NaN.
"""

from __future__ import annotations

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


@jax.custom_jvp
def _clamp_min(value, minimum):
    """``torch.clamp_min``: NaN stays NaN; the derivative passes where ``value >= minimum``
    (the tie included) and is 0 elsewhere and at NaN."""
    return jnp.where(value < minimum, minimum, value)


@_clamp_min.defjvp
def _clamp_min_jvp(primals, tangents):
    (value, minimum), (tangent, _) = primals, tangents
    passes = value >= minimum
    return _clamp_min(value, minimum), jnp.where(passes, tangent, jnp.zeros_like(tangent))


def soft_margin_loss(input, target, reduction: str = "mean"):
    """``F.soft_margin_loss``: ``log(1 + exp(−target·input))``, reduced.

    Written as torch writes it (``log1p(exp(·))``), so an overflowing ``exp`` gives
    ``inf`` and a NaN gradient exactly where torch's does.

    Args:
      input: scores `(*)`, floating.
      target: ``input``'s shape, 1 or −1.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction`` or a ``target`` of another shape.
      TypeError: a non-floating ``input``.
    """
    loss = "soft_margin_loss"
    check_reduction(reduction)
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    return reduce(jnp.log1p(jnp.exp(-input * target)), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, reduction: str = "mean"):
    """``F.multilabel_soft_margin_loss``: per-class binary cross entropy on logits,
    averaged over the last (class) axis, then reduced over the batch.

    Args:
      input: logits `(N, C)` or `(C,)`, floating.
      target: ``input``'s shape, 0 or 1 (integer or floating, as torch).
      weight: optional per-class weights broadcasting to ``input``'s shape (`(C,)`).
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-sample losses `(N,)` with ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, a ``target`` of another shape, a ``weight``
        that does not broadcast to ``input``, or an ``input`` without a class axis.
      TypeError: a non-floating ``input`` or ``weight``.
    """
    loss = "multilabel_soft_margin_loss"
    check_reduction(reduction)
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    if input.ndim < 1:
        raise ValueError(f"{loss}: `input` must have a class axis, got shape {tuple(input.shape)}.")
    target = target.astype(input.dtype)
    losses = -(target * jax.nn.log_sigmoid(input) + (1 - target) * jax.nn.log_sigmoid(-input))
    if weight is not None:
        check_floating(loss, "weight", weight)
        check_broadcastable(loss, "weight", weight, input.shape)
        losses = losses * weight
    losses = jnp.sum(losses, axis=-1) / input.shape[-1]
    return reduce(losses, reduction)


def hinge_embedding_loss(input, target, margin: float = 1.0, reduction: str = "mean"):
    """``F.hinge_embedding_loss``: ``input`` where target is 1, ``max(0, margin − input)``
    where it is −1 (both terms for any other target value, as torch).

    Args:
      input: distances `(*)`, floating.
      target: ``input``'s shape, 1 or −1.
      margin: the margin dissimilar pairs are pushed beyond.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-element losses `(*)` with ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction`` or a ``target`` of another shape.
      TypeError: a non-floating ``input`` or a ``margin`` that is not a number.
    """
    loss = "hinge_embedding_loss"
    check_reduction(reduction)
    check_number(loss, "margin", margin)
    check_floating(loss, "input", input)
    check_same_shape(loss, input, target)
    zeros = jnp.zeros_like(input)
    margin_term = jnp.where(target != 1, _clamp_min(margin - input, zeros), zeros)
    self_term = jnp.where(target != -1, input, zeros)
    return reduce(margin_term + self_term, reduction)


def _check_class_target(loss: str, target):
    if not jnp.issubdtype(target.dtype, jnp.integer):
        raise TypeError(
            f"{loss}: `target` must be an integer array of class indices, got {target.dtype}."
        )


def _frames(loss: str, input):
    """``(nframe, dim)`` as torch's shape checks define them; rejects empty inputs."""
    if input.ndim > 2 or input.size == 0 and not (input.ndim == 2 and input.shape[1] > 0):
        raise ValueError(
            f"{loss}: `input` must be a non-empty vector or a matrix `(N, C)` "
            f"with C > 0 (N may be 0), got shape {tuple(input.shape)}."
        )
    if input.ndim <= 1:
        return 1, (input.shape[0] if input.ndim else 1)
    return input.shape[0], input.shape[1]


def _nan_where_invalid(losses, valid):
    return jnp.where(valid, losses, jnp.asarray(jnp.nan, losses.dtype))


def multi_margin_loss(
    input, target, p: int = 1, margin: float = 1.0, weight=None, reduction: str = "mean"
):
    """``F.multi_margin_loss``: the multi-class hinge loss
    ``sum_{i≠y} w[y]·max(0, margin − x[y] + x[i])^p / C``.

    Args:
      input: scores `(N, C)`, `(C,)` or `()`, floating (N may be 0).
      target: class indices in ``[0, C)``: `(N,)`, or `()` / `(1,)` for one sample.
      p: 1 or 2.
      margin: the margin the target's score must lead by.
      weight: optional class weights `(C,)`; the target class's weight scales its terms.
      reduction: ``"mean"`` (over samples), ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-sample losses `(N,)` (``()`` for a `()` target) with
      ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, ``p`` not 1 or 2, an empty ``input``, a
        ``target`` or ``weight`` of the wrong size, or (concrete values) a class index
        outside ``[0, C)`` (under ``jit`` that sample's loss is NaN).
      TypeError: a non-floating ``input``, a non-integer ``target`` or a ``margin``
        that is not a number.
    """
    loss = "multi_margin_loss"
    check_reduction(reduction)
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"{loss}: `p` (={p!r}) must be 1 or 2.")
    check_number(loss, "margin", margin)
    check_floating(loss, "input", input)
    if weight is not None and weight.ndim != 1:
        raise ValueError(
            f"{loss}: `weight` must be one-dimensional `(C,)`, got shape {tuple(weight.shape)}."
        )
    nframe, dim = _frames(loss, input)
    if target.ndim > 1 or target.size != nframe:
        raise ValueError(
            f"{loss}: `target` must be 1-D with one class index per sample "
            f"({nframe}), got shape {tuple(target.shape)}."
        )
    _check_class_target(loss, target)
    if weight is not None:
        check_floating(loss, "weight", weight)
        if weight.shape[0] != dim:
            raise ValueError(
                f"{loss}: `weight` shape {tuple(weight.shape)} must be ({dim},): "
                f"one weight per class."
            )
    scores = input.reshape(nframe, dim)
    labels = target.reshape(nframe)
    valid = (labels >= 0) & (labels < dim)
    require(valid, f"{loss}: `target` holds a class index outside [0, {dim}).")
    onehot = labels[:, None] == jnp.arange(dim)
    zero = jnp.zeros((), scores.dtype)
    target_score = jnp.sum(jnp.where(onehot, scores, zero), axis=1, keepdims=True)
    z = margin - target_score + scores
    # torch's kernel adds a term only where z > 0: the tie and NaN add nothing
    # (z squared after the mask, so a NaN score's gradient stays 0 with p=2)
    z = jnp.where((z > 0) & ~onehot, z, zero)
    terms = z if p == 1 else z * z
    if weight is not None:
        terms = terms * jnp.sum(jnp.where(onehot, weight, zero), axis=1, keepdims=True)
    losses = _nan_where_invalid(jnp.sum(terms, axis=1) / dim, valid)
    if reduction == "none":
        return losses.reshape(target.shape)
    return reduce(losses, reduction)


def multilabel_margin_loss(input, target, reduction: str = "mean"):
    """``F.multilabel_margin_loss``: ``sum_j sum_{i not a target} max(0, 1 − x[y_j] + x[i])
    / C``, the targets ``y_j`` being ``target``'s leading indices up to the first −1.

    Args:
      input: scores `(N, C)`, `(C,)` or `()`, floating (N may be 0).
      target: integer `input`'s shape: class indices in ``[0, C)``, padded with −1
        (everything from the first −1 on is ignored).
      reduction: ``"mean"`` (over samples), ``"sum"`` or ``"none"``.

    Returns:
      A scalar, or the per-sample losses `(N,)` (``()`` for a 1-D ``input``) with
      ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, an empty ``input``, a ``target`` of another
        size, or (concrete values) a value outside ``[-1, C)`` (under ``jit`` that
        sample's loss is NaN).
      TypeError: a non-floating ``input`` or a non-integer ``target``.
    """
    loss = "multilabel_margin_loss"
    check_reduction(reduction)
    check_floating(loss, "input", input)
    nframe, dim = _frames(loss, input)
    if input.ndim <= 1:
        ok = target.ndim <= 1 and target.size == dim
    else:
        ok = tuple(target.shape) == tuple(input.shape)
    if not ok:
        raise ValueError(
            f"{loss}: `target` shape {tuple(target.shape)} must match `input` "
            f"shape {tuple(input.shape)}."
        )
    _check_class_target(loss, target)
    scores = input.reshape(nframe, dim)
    labels = target.reshape(nframe, dim)
    in_range = (labels >= -1) & (labels < dim)
    require(in_range, f"{loss}: `target` holds a value outside [-1, {dim}).")
    valid = jnp.all(in_range, axis=1)
    # the targets are the entries before the first negative one
    active = jnp.cumprod(labels >= 0, axis=1).astype(bool)  # (nframe, dim_j)
    onehot = (labels[:, :, None] == jnp.arange(dim)) & active[:, :, None]  # (n, j, class)
    is_target = jnp.any(onehot, axis=1)  # (n, class)
    zero = jnp.zeros((), scores.dtype)
    target_scores = jnp.sum(jnp.where(onehot, scores[:, None, :], zero), axis=2)  # (n, j)
    z = 1 - target_scores[:, :, None] + scores[:, None, :]  # (n, j, class)
    counted = active[:, :, None] & ~is_target[:, None, :] & (z > 0)
    losses = jnp.sum(jnp.where(counted, z, zero), axis=(1, 2)) / dim
    losses = _nan_where_invalid(losses, valid)
    if reduction == "none":
        return losses if input.ndim == 2 else losses.reshape(())
    return reduce(losses, reduction)
