"""Dropout: ``dropout``, ``dropout1d``, ``dropout2d`` with an explicit key or mask.

torch's semantics: ``p`` is the probability of *dropping* (stax's ``rate`` is the
keep probability); kept values are scaled by ``1 / (1 − p)`` so the expectation is
unchanged; ``training=False`` (and ``p == 0``) is the identity; ``p == 1`` zeroes
everything. ``dropout1d`` / ``dropout2d`` drop whole channels: one draw per `(n, c)`.

No framework reproduces another's random numbers, so besides ``key=`` (a
``jax.random`` key, required when dropout is active) each function takes ``mask=``:
a boolean (or 0/1) keep-mask that replaces the draw — torch's own mask can be
injected for parity. The mask's shape is the input's for ``dropout`` and `(N, C, 1…)`
for the channel-wise forms (any shape that broadcasts is accepted).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _check_p(name: str, p) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: dropout probability `p` (={p}) must be in [0, 1].")


def keep_mask(key, p: float, shape) -> jax.Array:
    """A boolean mask of ``shape``, each entry True (kept) with probability ``1 − p``."""
    return jax.random.bernoulli(key, 1.0 - p, shape)


def _apply(name: str, input, p: float, training: bool, key, mask, mask_shape):
    _check_p(name, p)
    if not training or p == 0.0:
        return input
    if p == 1.0:  # torch multiplies by zero (not 1/(1-p)), keeping NaN propagation
        return input * jnp.zeros((), input.dtype)
    if mask is None:
        if key is None:
            raise ValueError(
                f"{name}: training mode needs randomness: pass `key=` (a jax.random key) "
                "or an explicit keep-`mask=`; got neither."
            )
        mask = keep_mask(key, p, mask_shape)
    else:
        mask = jnp.asarray(mask)
        try:
            jnp.broadcast_shapes(mask.shape, input.shape)
        except ValueError:
            raise ValueError(
                f"{name}: `mask` shape {tuple(mask.shape)} does not broadcast to the "
                f"input's {tuple(input.shape)} (expected {tuple(mask_shape)})."
            ) from None
    # torch's order: noise = mask / (1 - p), then input * noise
    noise = mask.astype(input.dtype) / jnp.asarray(1.0 - p, input.dtype)
    return input * noise


def dropout(
    input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None, mask=None
):
    """``torch.nn.functional.dropout``: zero each element with probability ``p``.

    Args:
      input: any shape.
      key: a ``jax.random`` key, required when ``training`` and ``0 < p < 1`` unless
        ``mask`` is given.
      mask: a keep-mask of the input's shape (True = kept), e.g. torch's own.
      inplace: accepted for signature parity; nothing in JAX is in place.
    """
    del inplace
    return _apply("dropout", input, p, training, key, mask, input.shape)


def dropout1d(
    input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None, mask=None
):
    """``torch.nn.functional.dropout1d``: zero whole channels of `(N, C, L)` or `(C, L)`.

    The mask is `(N, C, 1)` (`(C, 1)` unbatched).
    """
    del inplace
    if input.ndim not in (2, 3):
        raise ValueError(
            f"dropout1d: `input` must be `(N, C, L)` or `(C, L)`, got shape {tuple(input.shape)}."
        )
    return _apply("dropout1d", input, p, training, key, mask, input.shape[:-1] + (1,))


def dropout2d(
    input, p: float = 0.5, training: bool = True, inplace: bool = False, *, key=None, mask=None
):
    """``torch.nn.functional.dropout2d``: zero whole channels of `(N, C, H, W)`.

    As torch does today, a 3-D input is read as `(N, C, L)` (1-D channel dropout), not
    as an unbatched `(C, H, W)`: the mask is ``input.shape[:2] + (1,) * (ndim − 2)``.
    """
    del inplace
    if input.ndim not in (3, 4):
        raise ValueError(
            f"dropout2d: `input` must be `(N, C, H, W)` (or `(N, C, L)`, as torch reads a "
            f"3-D input), got shape {tuple(input.shape)}."
        )
    shape = input.shape[:2] + (1,) * (input.ndim - 2)
    return _apply("dropout2d", input, p, training, key, mask, shape)
