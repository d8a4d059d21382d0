"""``nll_loss`` and ``cross_entropy`` with torch's class weights, ``ignore_index``,
label smoothing, probability targets and `(N, C, d1, …)` inputs.

Reductions follow torch exactly: with class indices, ``"mean"`` divides the summed
(weighted) losses by the summed weights of the targets that are *not* ignored —
``sum_n w[y_n]·l_n / sum_n w[y_n]`` over ``y_n != ignore_index`` — so an ignored
target neither adds loss nor counts in the denominator (all ignored: NaN, as torch).
With probability targets ``"mean"`` divides by the number of samples `N·d1·…`.

Class indices outside ``[0, C)`` (other than ``ignore_index``) raise ``ValueError``
when ``target`` is concrete; under ``jit`` those elements are NaN (see
``jaxgrad.losses.checked`` for a variant that raises inside ``jit``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxgrad.losses._checks import check_floating, check_reduction, require


def _class_axis(input, loss: str) -> int:
    if input.ndim < 1:
        raise ValueError(f"{loss}: `input` must have a class axis, got shape {tuple(input.shape)}.")
    return 0 if input.ndim == 1 else 1


def _check_weight(loss: str, weight, num_classes: int, input):
    if weight is None:
        return
    check_floating(loss, "weight", weight)
    if tuple(weight.shape) != (num_classes,):
        raise ValueError(
            f"{loss}: `weight` shape {tuple(weight.shape)} must be ({num_classes},): one weight "
            f"for each of the C={num_classes} classes."
        )
    if weight.dtype != input.dtype:
        raise TypeError(
            f"{loss}: `weight` dtype {weight.dtype} must equal `input` dtype {input.dtype}."
        )


def _check_index_target(loss: str, input, target, class_axis: int):
    if not jnp.issubdtype(target.dtype, jnp.integer):
        raise TypeError(
            f"{loss}: class-index `target` must be an integer array, got {target.dtype}."
        )
    expected = tuple(input.shape[:class_axis]) + tuple(input.shape[class_axis + 1 :])
    if tuple(target.shape) != expected:
        raise ValueError(
            f"{loss}: `target` shape {tuple(target.shape)} must be `input` shape "
            f"{tuple(input.shape)} without the class axis {class_axis}, i.e. {expected}."
        )


def _weight_per_class(weight, input, class_axis: int):
    """``weight`` reshaped to broadcast along ``input``'s class axis."""
    shape = [1] * input.ndim
    shape[class_axis] = -1
    return weight.reshape(shape)


def _pick(log_probs, target, weight, ignore_index: int, class_axis: int, loss: str):
    """Per-element ``-w[y]·log_probs[y]`` and ``w[y]`` (0 where ignored, NaN where out
    of range)."""
    num_classes = log_probs.shape[class_axis]
    ignored = target == ignore_index
    valid = (target >= 0) & (target < num_classes)
    require(
        valid | ignored,
        f"{loss}: `target` holds a class index outside [0, {num_classes}) that is not "
        f"`ignore_index` (={ignore_index}).",
    )
    # a one-hot mask rather than a gather: exact (the other classes add zeros) and a
    # handful of primitives, where take_along_axis lowers to a dozen index ops
    classes = jnp.arange(num_classes).reshape(
        [-1 if axis == class_axis else 1 for axis in range(log_probs.ndim)]
    )
    onehot = jnp.expand_dims(target, class_axis) == classes
    zero = jnp.zeros((), log_probs.dtype)
    picked = jnp.sum(jnp.where(onehot, log_probs, zero), axis=class_axis)
    if weight is None:
        target_weight = valid.astype(log_probs.dtype)
    else:
        per_class = _weight_per_class(weight, log_probs, class_axis)
        target_weight = jnp.sum(jnp.where(onehot, per_class, zero), axis=class_axis)
    nan = jnp.asarray(jnp.nan, log_probs.dtype)
    kept = valid & ~ignored
    losses = jnp.where(kept, -target_weight * picked, jnp.where(ignored, zero, nan))
    target_weight = jnp.where(ignored, zero, jnp.where(valid, target_weight, nan))
    return losses, target_weight


def _reduce_weighted(losses, target_weight, reduction: str):
    if reduction == "none":
        return losses
    if reduction == "sum":
        return jnp.sum(losses)
    return jnp.sum(losses) / jnp.sum(target_weight)


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """``F.nll_loss`` on log-probabilities.

    Args:
      input: log-probabilities `(N, C)`, `(N, C, d1, …)` or unbatched `(C,)`.
      target: integer class indices `(N,)`, `(N, d1, …)` or `()`; values in
        ``[0, C)`` or ``ignore_index``.
      weight: optional class weights `(C,)`.
      ignore_index: targets with this value add no loss and no weight.
      reduction: ``"mean"`` is the weighted mean over non-ignored targets.

    Returns:
      A scalar, or the per-element losses with ``target``'s shape for ``"none"``.

    Raises:
      ValueError: an unknown ``reduction``, shapes that do not fit, a ``weight`` that
        is not `(C,)`, or (concrete values) a class index outside ``[0, C)``; under
        ``jit`` such an element's loss is NaN (``checked`` raises instead).
      TypeError: a non-floating ``input`` or a non-integer ``target``.
    """
    loss = "nll_loss"
    check_reduction(reduction)
    check_floating(loss, "input", input)
    class_axis = _class_axis(input, loss)
    _check_index_target(loss, input, target, class_axis)
    _check_weight(loss, weight, input.shape[class_axis], input)
    losses, target_weight = _pick(input, target, weight, int(ignore_index), class_axis, loss)
    return _reduce_weighted(losses, target_weight, reduction)


def _check_label_smoothing(label_smoothing):
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
        raise TypeError(f"`label_smoothing` (={label_smoothing!r}) must be a float.")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"`label_smoothing` (={label_smoothing}) must be in [0, 1].")


def cross_entropy(
    input,
    target,
    weight=None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    """``F.cross_entropy`` on logits: ``log_softmax`` over the class axis, then NLL.

    Args:
      input: logits `(N, C)`, `(N, C, d1, …)` or unbatched `(C,)`.
      target: integer class indices (``input``'s shape without the class axis), or
        floating class probabilities with ``input``'s shape.
      weight: optional class weights `(C,)`.
      ignore_index: with class indices, targets equal to it are skipped (default -100
        as torch); with probability targets only a negative value is allowed.
      reduction: ``"mean" | "sum" | "none"``; see the module docstring for ``"mean"``.
      label_smoothing: ε in [0, 1]: ``(1 − ε)·NLL + ε/C·(uniform-target loss)``,
        combined with ``weight`` and ``ignore_index`` as torch does.

    Returns:
      A scalar, or per-element losses (``input``'s shape without the class axis).

    Raises:
      ValueError: an unknown ``reduction``, a ``label_smoothing`` outside [0, 1],
        shapes that do not fit, or (concrete values) a class index outside ``[0, C)``;
        under ``jit`` such an element's loss is NaN (``checked`` raises instead).
      TypeError: a non-floating ``input`` or a ``label_smoothing`` that is not a number.
    """
    loss = "cross_entropy"
    check_reduction(reduction)
    _check_label_smoothing(label_smoothing)
    check_floating(loss, "input", input)
    class_axis = _class_axis(input, loss)
    num_classes = input.shape[class_axis]
    _check_weight(loss, weight, num_classes, input)
    log_probs = jax.nn.log_softmax(input, axis=class_axis)
    if jnp.issubdtype(target.dtype, jnp.floating):
        return _probability_targets(
            log_probs, target, weight, ignore_index, reduction, label_smoothing, class_axis
        )
    if tuple(target.shape) == tuple(input.shape) and input.ndim > 1:
        raise TypeError(
            f"cross_entropy: `target` has `input`'s shape {tuple(input.shape)}, i.e. class "
            f"probabilities, so it must be floating, got {target.dtype}."
        )
    _check_index_target(loss, input, target, class_axis)
    ignore_index = int(ignore_index)
    losses, target_weight = _pick(log_probs, target, weight, ignore_index, class_axis, loss)
    nll = _reduce_weighted(losses, target_weight, reduction)
    if not label_smoothing:
        return nll
    # torch's cross_entropy_loss_label_smoothing, term by term
    per_class = log_probs
    if weight is not None:
        per_class = log_probs * _weight_per_class(weight, log_probs, class_axis)
    smooth = -jnp.sum(per_class, axis=class_axis)
    smooth = jnp.where(target == ignore_index, jnp.zeros((), smooth.dtype), smooth)
    if reduction == "mean":
        smooth = jnp.sum(smooth) / jnp.sum(target_weight)
    elif reduction == "sum":
        smooth = jnp.sum(smooth)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / num_classes)


def _probability_targets(
    log_probs, target, weight, ignore_index, reduction, label_smoothing, class_axis
):
    loss = "cross_entropy"
    if tuple(target.shape) != tuple(log_probs.shape):
        raise ValueError(
            f"cross_entropy: floating `target` (class probabilities) shape "
            f"{tuple(target.shape)} must equal `input` shape {tuple(log_probs.shape)}; class "
            "indices must be an integer array."
        )
    if target.dtype != log_probs.dtype:
        raise TypeError(
            f"{loss}: `target` dtype {target.dtype} must equal `input` dtype {log_probs.dtype}."
        )
    if int(ignore_index) >= 0:
        raise ValueError(
            f"cross_entropy: `ignore_index` (={ignore_index}) is not supported for probability "
            "targets (floating `target`)."
        )
    num_classes = log_probs.shape[class_axis]
    if label_smoothing:
        target = target * (1 - label_smoothing) + (label_smoothing / num_classes)
    terms = log_probs * target
    if weight is not None:
        terms = terms * _weight_per_class(weight, log_probs, class_axis)
    if reduction == "none":
        return -jnp.sum(terms, axis=class_axis)
    total = -jnp.sum(terms)
    if reduction == "sum":
        return total
    return total / (log_probs.size / num_classes) if log_probs.size else total * jnp.nan
