"""``linear_cross_entropy``: ``cross_entropy(linear(input, linear_weight, linear_bias),
target)`` in one call, torch ≥ 2.12's ``F.linear_cross_entropy``.

torch's ``options`` (``LinearCrossEntropyOptions``) choose how the batch is chunked to
save memory; the loss and its gradients are the reference path's, which is what is
computed here (XLA decides the memory layout), so ``options`` is accepted and has no
effect on the result.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from jaxgrad.losses._checks import check_floating
from jaxgrad.losses._classification import cross_entropy


def linear_cross_entropy(
    input,
    linear_weight,
    target,
    *,
    linear_bias=None,
    weight=None,
    reduction: str = "mean",
    ignore_index=None,
    label_smoothing: float = 0.0,
    options=None,
):
    """``F.linear_cross_entropy``: the cross entropy of the logits
    ``input @ linear_weight.T + linear_bias``.

    Args:
      input: features `(N, in_features)` or unbatched `(in_features,)`, floating.
      linear_weight: `(C, in_features)`, or `(C, d1, …, dK, in_features)` for a
        K-dimensional loss (batched ``input`` only).
      target: class indices (`(N,)`, `(N, d1, …, dK)` or `()`), or floating class
        probabilities of the logits' shape `(N, C, d1, …, dK)` / `(C,)`.
      linear_bias: optional `(C, d1, …, dK)`.
      weight: optional class weights `(C,)`.
      reduction: ``"mean" | "sum" | "none"``, as ``cross_entropy``.
      ignore_index: class index to ignore (None: -100); not allowed with probabilities.
      label_smoothing: in [0, 1], as ``cross_entropy``.
      options: torch's chunking options; accepted, no effect (see the module docstring).

    Returns:
      ``cross_entropy``'s result for the logits.

    Raises:
      ValueError: ``input`` not 1-D or 2-D, ``linear_weight`` under 2-D, mismatched
        ``in_features``, a ``linear_bias`` of the wrong shape, a K-dimensional weight
        with unbatched ``input``, ``ignore_index`` with probability targets, and
        everything ``cross_entropy`` rejects.
      TypeError: non-floating ``input`` or ``linear_weight``.
    """
    del options
    loss = "linear_cross_entropy"
    check_floating(loss, "input", input)
    check_floating(loss, "linear_weight", linear_weight)
    if input.ndim not in (1, 2):
        raise ValueError(
            f"{loss}: `input` must be 1-D or 2-D `(N, in_features)`, got "
            f"shape {tuple(input.shape)} (dimensionality {input.ndim})."
        )
    if linear_weight.ndim < 2:
        raise ValueError(
            f"{loss}: `linear_weight` must have at least 2 dimensions "
            f"`(C, …, in_features)`, got shape {tuple(linear_weight.shape)}."
        )
    in_features = input.shape[-1]
    if linear_weight.shape[-1] != in_features:
        raise ValueError(
            f"{loss}: `linear_weight`'s last dimension (={linear_weight.shape[-1]}) "
            f"must equal `input`'s in_features (={in_features})."
        )
    num_classes = linear_weight.shape[0]
    out_features = tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (num_classes, *out_features):
        raise ValueError(
            f"{loss}: `linear_bias` shape {tuple(linear_bias.shape)} must be "
            f"{(num_classes, *out_features)}."
        )
    num_batches = tuple(input.shape[:-1])
    if out_features and not num_batches:
        raise ValueError(
            f"{loss}: a K-dimensional `linear_weight` {tuple(linear_weight.shape)} "
            f"needs batched `input` (N, {in_features}), got shape "
            f"{tuple(input.shape)}."
        )
    logits_shape = (*num_batches, num_classes, *out_features)
    probabilities = tuple(target.shape) == logits_shape
    if probabilities and ignore_index is not None:
        raise ValueError(
            f"{loss}: `ignore_index` (={ignore_index}) cannot be given when "
            f"`target` holds class probabilities (shape {logits_shape})."
        )
    rows = math.prod(out_features, start=num_classes)
    logits = jnp.matmul(input, linear_weight.reshape(rows, in_features).T)
    if linear_bias is not None:
        logits = logits + linear_bias.reshape(rows)
    logits = logits.reshape(logits_shape)
    return cross_entropy(
        logits,
        target,
        weight,
        -100 if ignore_index is None else ignore_index,
        reduction,
        label_smoothing,
    )
