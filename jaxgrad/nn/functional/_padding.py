"""``torch.nn.functional.pad``: torch's padding order and modes over ``jnp.pad``.

torch lists pads from the last dimension backwards — ``(left, right)`` for the last
dim, then ``(top, bottom)`` for the one before… — where ``jnp.pad`` wants one pair per
dimension from the first. Modes:

==============  ======================  =========================================
torch mode      numpy/jnp mode          edge rule
==============  ======================  =========================================
``constant``    ``constant`` (lax.pad)  fills ``value`` (0); negative pads crop
``reflect``     ``reflect``             mirror without repeating the edge; pad < size
``replicate``   ``edge``                repeats the edge value
``circular``    ``wrap``                wraps around; pad ≤ size
==============  ======================  =========================================

Gradients are autodiff's: each output position reads one input position, so the
gradient of a padded input sums the cotangents of every position that read it.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxgrad.nn.functional._args import _is_int

PAD_MODES = ("constant", "reflect", "replicate", "circular")
_NUMPY_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(input, pad, mode: str = "constant", value: float | None = None):
    """``torch.nn.functional.pad(input, pad, mode='constant', value=None)``.

    Args:
      input: any array; non-constant modes pad at most the last 3 dims of a
        `(N, C, *spatial)` or `(C, *spatial)` input, as torch.
      pad: ``(left, right, top, bottom, …)``, an even number of ints, last dim first.
      mode: one of ``PAD_MODES``.
      value: the fill of ``"constant"`` (default 0).
    """
    if mode not in PAD_MODES:
        raise ValueError(
            f"pad: `mode` (={mode!r}) must be one of {', '.join(map(repr, PAD_MODES))}."
        )
    if not isinstance(pad, (tuple, list)) or not all(_is_int(p) for p in pad):
        raise TypeError(f"pad: `pad` (={pad!r}) must be a tuple of ints.")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(
            f"pad: `pad` (={tuple(pad)}) must have an even length of at most 2 × the "
            f"input's {input.ndim} dims."
        )
    n = len(pad) // 2
    pairs = [(0, 0)] * (input.ndim - n) + [
        (int(pad[2 * i]), int(pad[2 * i + 1])) for i in reversed(range(n))
    ]
    if mode == "constant":
        fill = jnp.asarray(0 if value is None else value, input.dtype)
        return lax.pad(input, fill, [(lo, hi, 0) for lo, hi in pairs])
    if value not in (None, 0):
        raise ValueError(
            f"pad: `value` (={value!r}) is only used with mode='constant', got mode={mode!r}."
        )
    if n > 3 or input.ndim < n + 1:
        raise ValueError(
            f"pad: mode={mode!r} pads 1 to 3 trailing dims of an input with a channel dim "
            f"(and an optional batch dim); got `pad` (={tuple(pad)}) for an input of shape "
            f"{tuple(input.shape)}."
        )
    for axis, (lo, hi) in enumerate(pairs):
        size = input.shape[axis]
        if lo < 0 or hi < 0:
            raise ValueError(f"pad: `pad` (={tuple(pad)}) must be non-negative for mode={mode!r}.")
        if mode == "reflect" and max(lo, hi) >= size and (lo or hi):
            raise ValueError(
                f"pad: reflect padding (={lo}, {hi}) must be smaller than the padded "
                f"dimension (={size}) of the input of shape {tuple(input.shape)}."
            )
        if mode == "circular" and max(lo, hi) > size:
            raise ValueError(
                f"pad: circular padding (={lo}, {hi}) must be at most the padded dimension "
                f"(={size}) of the input of shape {tuple(input.shape)}."
            )
    return jnp.pad(input, pairs, mode=_NUMPY_MODES[mode])
