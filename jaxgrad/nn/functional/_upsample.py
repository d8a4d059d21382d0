"""``torch.nn.functional.interpolate`` for ``'nearest'``, ``'linear'`` and ``'bilinear'``.

Index and weight rules are ATen's (``UpSample.h``), per spatial dim of input size
``L_in`` and output size ``L_out``:

- the output size is ``size``, or ``⌊L_in · scale_factor⌋``;
- the scale is ``1 / scale_factor`` when a scale factor is given (and
  ``recompute_scale_factor`` is not True), else ``L_in / L_out``;
- ``'nearest'``: source ``min(⌊i · scale⌋, L_in − 1)``, computed in float32 as torch's
  kernel does (``floorf``);
- ``'linear'`` / ``'bilinear'``: source ``(i + ½)·scale − ½`` clamped at 0
  (``align_corners=False``, torch's default) or ``i · (L_in − 1)/(L_out − 1)``
  (``align_corners=True``); the output mixes the two neighbours ``⌊src⌋`` and
  ``min(⌊src⌋ + 1, L_in − 1)`` with weights ``1 − λ`` and ``λ = src − ⌊src⌋``.

``jax.image.resize`` differs: it antialiases when downsampling (torch's default is
``antialias=False``) and has no ``align_corners``. Gradients are autodiff's: each
input element collects the weights it was read with.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

MODES = {"nearest": None, "linear": 1, "bilinear": 2}


def _sizes_and_scales(where, spatial, size, scale_factor, recompute_scale_factor):
    n = len(spatial)
    if (size is None) == (scale_factor is None):
        raise ValueError(
            f"{where}: exactly one of `size` (={size!r}) and `scale_factor` "
            f"(={scale_factor!r}) must be given."
        )
    if size is not None:
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * n
        if len(sizes) != n or not all(isinstance(s, int) and s >= 1 for s in sizes):
            raise ValueError(
                f"{where}: `size` (={size!r}) must be a positive int or {n} of them "
                f"for an input with {n} spatial dims."
            )
        return sizes, (None,) * n
    factors = (
        tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * n
    )
    if len(factors) != n or not all(isinstance(f, (int, float)) and f > 0 for f in factors):
        raise ValueError(
            f"{where}: `scale_factor` (={scale_factor!r}) must be a positive number or {n} of them."
        )
    sizes = tuple(math.floor(float(length) * float(f)) for length, f in zip(spatial, factors))
    if any(s < 1 for s in sizes):
        raise ValueError(
            f"{where}: `scale_factor` (={scale_factor!r}) gives an empty output "
            f"{sizes} for the input size {tuple(spatial)}."
        )
    scales = (None,) * n if recompute_scale_factor else tuple(float(f) for f in factors)
    return sizes, scales


def _nearest_index(length_in, length_out, scale):
    scale32 = (
        np.float32(1.0 / scale)
        if scale is not None
        else np.float32(length_in) / np.float32(length_out)
    )
    source = np.floor(np.arange(length_out, dtype=np.float32) * scale32).astype(np.int64)
    return np.minimum(source, length_in - 1)


def _linear_weights(length_in, length_out, scale, align_corners):
    out = np.arange(length_out, dtype=np.float64)
    if align_corners:
        step = (length_in - 1) / (length_out - 1) if length_out > 1 else 0.0
        source = out * step
    else:
        step = 1.0 / scale if scale is not None else length_in / length_out
        source = np.maximum((out + 0.5) * step - 0.5, 0.0)
    low = np.floor(source).astype(np.int64)
    low = np.minimum(low, length_in - 1)
    high = np.minimum(low + 1, length_in - 1)
    return low, high, source - low


def interpolate(
    input,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
):
    """``torch.nn.functional.interpolate`` (modes ``'nearest'``, ``'linear'`` for
    `(N, C, L)`, ``'bilinear'`` for `(N, C, H, W)`).

    Raises:
      ValueError: naming ``mode`` for another mode (bicubic, trilinear, area,
        nearest-exact are not implemented), ``align_corners`` set with ``'nearest'``,
        ``antialias=True``, or an input rank the mode does not take.
    """
    where = "interpolate"
    if mode not in MODES:
        raise ValueError(
            f"{where}: `mode` (={mode!r}) must be one of "
            f"{', '.join(map(repr, MODES))}; other torch modes are not implemented."
        )
    if antialias:
        raise ValueError(
            f"{where}: `antialias` (=True) is not implemented (torch's default is False)."
        )
    if mode == "nearest":
        if align_corners is not None:
            raise ValueError(
                f"{where}: `align_corners` (={align_corners!r}) can only be set "
                "with the interpolating modes 'linear' and 'bilinear', as in torch."
            )
        if input.ndim not in (3, 4):
            raise ValueError(
                f"{where}: mode 'nearest' takes a 3-d (N C L) or 4-d (N C H W) "
                f"input, got shape {tuple(input.shape)}."
            )
    else:
        if input.ndim != MODES[mode] + 2:
            raise ValueError(
                f"{where}: mode {mode!r} takes a {MODES[mode] + 2}-d batched input, "
                f"got shape {tuple(input.shape)}."
            )
    spatial = input.shape[2:]
    sizes, scales = _sizes_and_scales(where, spatial, size, scale_factor, recompute_scale_factor)
    y = input
    for axis, (length_in, length_out, scale) in enumerate(zip(spatial, sizes, scales)):
        dim = 2 + axis
        if mode == "nearest":
            y = jnp.take(y, _nearest_index(length_in, length_out, scale), axis=dim)
            continue
        low, high, lam = _linear_weights(length_in, length_out, scale, bool(align_corners))
        shape = [1] * y.ndim
        shape[dim] = length_out
        lam = jnp.asarray(lam.reshape(shape), y.dtype)
        y = jnp.take(y, low, axis=dim) * (1 - lam) + jnp.take(y, high, axis=dim) * lam
    return y
