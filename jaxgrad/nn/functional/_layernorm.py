"""``layer_norm`` and ``rms_norm``: ``torch.nn.functional`` normalisation over the last dims.

Both normalise over the trailing ``len(normalized_shape)`` dimensions, which must
equal ``normalized_shape``. ``layer_norm`` uses the biased variance (divide by n) with
``eps`` inside the square root, torch's default ``eps=1e-5`` (flax's ``LayerNorm``
defaults to 1e-6); ``rms_norm``'s ``eps=None`` means ``finfo(input.dtype).eps`` as in
torch (flax's ``RMSNorm`` uses 1e-6).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def normalized_shape_tuple(normalized_shape) -> tuple:
    """torch accepts an int or a sequence of ints."""
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(n) for n in normalized_shape)


def _check(input, shape: tuple, where: str):
    if tuple(input.shape[input.ndim - len(shape) :]) != shape or input.ndim < len(shape):
        raise ValueError(
            f"{where}: `normalized_shape` (={list(shape)}) must match the input's last "
            f"{len(shape)} dims; got input shape {tuple(input.shape)}."
        )


def _affine_check(name, value, shape, where):
    if value is not None and tuple(value.shape) != shape:
        raise ValueError(
            f"{where}: `{name}` must have shape {shape} (normalized_shape), got "
            f"{tuple(value.shape)}."
        )


def layer_norm(
    input,
    normalized_shape,
    weight=None,
    bias=None,
    eps: float = 1e-5,
    *,
    _where: str = "layer_norm",
):
    """``F.layer_norm``: ``(x − mean) / √(var + eps) · weight + bias`` over the last dims.

    Args:
      input: `(*, *normalized_shape)`.
      weight, bias: `normalized_shape` or ``None``.
    """
    input = jnp.asarray(input)
    shape = normalized_shape_tuple(normalized_shape)
    _check(input, shape, _where)
    _affine_check("weight", weight, shape, _where)
    _affine_check("bias", bias, shape, _where)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    mean = jnp.mean(input, axis=axes, keepdims=True)
    centered = input - mean
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)  # biased, two-pass
    out = centered / jnp.sqrt(var + eps)  # torch: 1 / sqrt; XLA rsqrt rounds differently
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(
    input, normalized_shape, weight=None, eps: float | None = None, *, _where: str = "rms_norm"
):
    """``F.rms_norm``: ``x / √(mean(x²) + eps) · weight`` over the last dims.

    ``eps=None`` is ``jnp.finfo(input.dtype).eps``, torch's default.
    """
    input = jnp.asarray(input)
    shape = normalized_shape_tuple(normalized_shape)
    _check(input, shape, _where)
    _affine_check("weight", weight, shape, _where)
    if eps is None:
        eps = float(jnp.finfo(input.dtype).eps)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    out = input * jax.lax.rsqrt(jnp.mean(input * input, axis=axes, keepdims=True) + eps)
    if weight is not None:
        out = out * weight
    return out
