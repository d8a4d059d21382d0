"""Losses with ``torch.nn.functional``'s names, arguments and reduction semantics.

Every loss takes ``reduction="mean" | "sum" | "none"``: ``"none"`` returns the
per-element (or per-sample, for ``cross_entropy``) losses, ``"mean"`` their mean,
``"sum"`` their sum. Shapes must match exactly: where torch would broadcast
mismatched shapes (with a warning), jaxgrad raises, because broadcasting a
`(N,)` target against `(N, 1)` predictions is a classic silent bug.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

REDUCTIONS = ("mean", "sum", "none")


def _reduce(losses, reduction: str):
    if reduction == "mean":
        return jnp.mean(losses)
    if reduction == "sum":
        return jnp.sum(losses)
    return losses


def _check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"`reduction` (={reduction!r}) must be one of 'mean', 'sum', 'none'.")


def _check_same_shape(loss, input, target):
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(
            f"{loss}: `target` shape {tuple(target.shape)} must equal `input` shape "
            f"{tuple(input.shape)} (jaxgrad does not broadcast losses)."
        )


def mse_loss(input, target, reduction: str = "mean"):
    """``F.mse_loss``: ``(input − target)²``, reduced. Shapes `(*)`, equal."""
    _check_reduction(reduction)
    _check_same_shape("mse_loss", input, target)
    return _reduce(jnp.square(input - target), reduction)


def cross_entropy(input, target, reduction: str = "mean", label_smoothing: float = 0.0):
    """``F.cross_entropy`` on logits.

    Args:
      input: logits `(N, C)` or `(C,)`.
      target: class indices `(N,)` / `()` (integer), or class probabilities with
        ``input``'s shape (floating).
      reduction: ``"mean"`` averages over the N samples.
      label_smoothing: ε in [0, 1]; the target becomes ``(1 − ε)·onehot + ε/C``.

    Returns:
      A scalar, or `(N,)` with ``reduction="none"``.
    """
    _check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"`label_smoothing` (={label_smoothing}) must be in [0, 1].")
    if input.ndim not in (1, 2):
        raise ValueError(
            f"cross_entropy: `input` must be logits of shape (N, C) or (C,), got "
            f"{tuple(input.shape)}."
        )
    num_classes = input.shape[-1]
    log_probs = jax.nn.log_softmax(input, axis=-1)
    if jnp.issubdtype(target.dtype, jnp.integer):
        if tuple(target.shape) != tuple(input.shape[:-1]):
            raise ValueError(
                f"cross_entropy: integer `target` shape {tuple(target.shape)} must be "
                f"`input` shape without the class axis, {tuple(input.shape[:-1])}."
            )
        probs = jax.nn.one_hot(target, num_classes, dtype=input.dtype)
    elif jnp.issubdtype(target.dtype, jnp.floating):
        _check_same_shape("cross_entropy (probability targets)", input, target)
        probs = target
    else:
        raise TypeError(
            f"cross_entropy: `target` dtype {target.dtype} must be integer (class "
            "indices) or floating (class probabilities)."
        )
    if label_smoothing:
        probs = probs * (1.0 - label_smoothing) + label_smoothing / num_classes
    losses = -jnp.sum(probs * log_probs, axis=-1)
    return _reduce(losses, reduction)


def binary_cross_entropy(input, target, reduction: str = "mean"):
    """``F.binary_cross_entropy`` on probabilities `(*)`.

    Like torch, each log is clamped at −100 so that p = 0 or 1 gives a finite loss.
    """
    _check_reduction(reduction)
    _check_same_shape("binary_cross_entropy", input, target)
    log_p = jnp.maximum(jnp.log(input), -100.0)
    log_1mp = jnp.maximum(jnp.log1p(-input), -100.0)
    return _reduce(-(target * log_p + (1.0 - target) * log_1mp), reduction)


def binary_cross_entropy_with_logits(input, target, reduction: str = "mean", pos_weight=None):
    """``F.binary_cross_entropy_with_logits``, in torch's numerically stable form.

    ``(1 − t)·x + (1 + (w − 1)·t)·(log(1 + e^−|x|) + max(−x, 0))``, with ``w`` the
    ``pos_weight`` (1 when None). Finite for any logit, where
    ``binary_cross_entropy(sigmoid(x))`` saturates at |x| ≳ 17 in float32.
    """
    _check_reduction(reduction)
    _check_same_shape("binary_cross_entropy_with_logits", input, target)
    # log(1 + e^−x) = log1p(e^−|x|) + max(−x, 0), written as logaddexp(−x, 0): the same
    # stable value, and at x = 0 the gradient −σ(0) = −½ torch's backward gives, where
    # autodiff through |x| and max(−x, 0) would give −1.
    softplus_neg = jnp.logaddexp(-input, 0.0)
    if pos_weight is None:
        losses = (1.0 - target) * input + softplus_neg
    else:
        log_weight = 1.0 + (pos_weight - 1.0) * target
        losses = (1.0 - target) * input + log_weight * softplus_neg
    return _reduce(losses, reduction)


__all__ = [
    "REDUCTIONS",
    "mse_loss",
    "cross_entropy",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
]
