"""Fractional max pooling (Graham, 2014): ``fractional_max_pool2d`` / ``3d`` as torch's.

Each `(n, c)` plane is pooled over ``kernel_size`` windows whose starts advance by a
random step of ⌊α⌋ or ⌈α⌉, ``α = (L − k) / (out − 1)``. torch draws one number
``u ∈ [0, 1)`` per sample, plane and spatial dim (``_random_samples``, `(N, C, n)`;
`(1, C, n)` for an unbatched input) and places window ``i`` at
``int((i + u)·α) − int(u·α)``, the last at ``L − k``, in the input's precision. Here
the numbers are explicit: pass torch's own ``_random_samples`` (parity), or a
``key`` from which they are drawn uniformly (JAX's generator, not torch's).

torch reads the samples of the 2-d pool in reverse order — ``u[..., 0]`` places the
*width* windows, ``u[..., 1]`` the height ones — and those of the 3-d pool in order
(time, height, width); both are kept. The maximum is torch's: the first maximum of
each window in row-major order or its last NaN; the gradient flows to that element
only; indices are flat into each plane (``h·W + w``, ``t·H·W + h·W + w``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.functional._args import check_input_rank, ntuple
from jaxgrad.nn.functional._pool import _select_max, _unbatch


def fractional_output_size(where, n, spatial, output_size, output_ratio) -> tuple[int, ...]:
    """torch's output size: ``output_size``, or ``int(L · ratio)`` per dim.

    Raises:
      ValueError: when neither or both are given, or a ratio outside (0, 1).
    """
    if (output_size is None) == (output_ratio is None):
        raise ValueError(
            f"{where}: exactly one of `output_size` (={output_size!r}) and "
            f"`output_ratio` (={output_ratio!r}) must be given."
        )
    if output_size is not None:
        return ntuple("output_size", output_size, n, minimum=1, where=where)
    ratios = output_ratio if isinstance(output_ratio, (tuple, list)) else (output_ratio,) * n
    if len(ratios) == 1:
        ratios = tuple(ratios) * n
    if len(ratios) != n or not all(
        isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < 1 for r in ratios
    ):
        raise ValueError(
            f"{where}: `output_ratio` (={output_ratio!r}) must be a number in "
            f"(0, 1) or {n} of them."
        )
    return tuple(int(length * ratio) for length, ratio in zip(spatial, ratios))


def _starts(samples, length: int, out: int, k: int):
    """Window starts `(N, C, out)` from samples `(N, C)`, torch's arithmetic."""
    dtype = samples.dtype
    last = jnp.full(samples.shape + (min(out, 1),), length - k, jnp.int32)
    if out <= 1:  # torch: an empty output for a ratio that rounds the size to 0
        return last
    alpha = jnp.asarray(length - k, dtype) / jnp.asarray(out - 1, dtype)
    steps = jnp.arange(out - 1, dtype=dtype)
    u = samples[..., None]
    # static_cast<int> truncates; every operand is non-negative, so astype does the same
    starts = ((steps + u) * alpha).astype(jnp.int32) - (u * alpha).astype(jnp.int32)
    return jnp.concatenate([starts, last], axis=-1)


def _fractional(
    where, n, input, kernel_size, output_size, output_ratio, return_indices, _random_samples, key
):
    batched = check_input_rank(where, input, n)
    x = input if batched else input[None]
    spatial = x.shape[2:]
    if min(x.shape[1:], default=0) == 0:
        raise ValueError(
            f"{where}: expected a non-empty input (batch dim aside), got shape "
            f"{tuple(input.shape)}."
        )
    kernel = ntuple("kernel_size", kernel_size, n, minimum=1, where=where)
    out = fractional_output_size(where, n, spatial, output_size, output_ratio)
    # torch's bound: output + kernel − 1 at most the input size in 2-d, below it in 3-d
    slack = 0 if n == 2 else 1
    for length, k, o in zip(spatial, kernel, out):
        if o + k - 1 + slack > length:
            bound = "at most" if n == 2 else "smaller than"
            raise ValueError(
                f"{where}: `kernel_size` (={kernel}) is too large for "
                f"`output_size` {out} and an input of spatial size "
                f"{tuple(spatial)}: output + kernel − 1 must be {bound} the "
                "input size, as torch checks."
            )
    expected = (x.shape[0], x.shape[1], n)
    if _random_samples is None:
        if key is None:
            raise ValueError(
                f"{where}: fractional pooling is random: pass `key=` (a "
                "jax.random key) or torch's `_random_samples` "
                f"{expected}; got neither."
            )
        samples = jax.random.uniform(key, expected, x.dtype)
    else:
        samples = jnp.asarray(_random_samples)
        if samples.ndim != 3 or samples.shape[0] < expected[0] or samples.shape[1:] != expected[1:]:
            raise ValueError(
                f"{where}: `_random_samples` must have shape (B, {expected[1]}, "
                f"{n}) with B at least the batch size {expected[0]} (torch reads "
                f"the first rows), got {tuple(samples.shape)}."
            )
        samples = samples[: expected[0]]
        if samples.dtype != x.dtype:
            raise TypeError(
                f"{where}: `_random_samples` must have the input's dtype "
                f"{x.dtype}, got {samples.dtype}."
            )
    order = range(n - 1, -1, -1) if n == 2 else range(n)  # torch: 2-d reads (W, H)
    starts = [
        _starts(samples[..., i], length, o, k)
        for i, length, o, k in zip(order, spatial, out, kernel)
    ]
    # flat index of every window element: (N, C, *out, *kernel) -> (N, C, *out, K)
    strides = [math.prod(spatial[d + 1 :]) for d in range(n)]
    flat = 0
    for d in range(n):
        positions = starts[d][..., None] + np.arange(kernel[d])  # (N, C, out_d, k_d)
        shape = list(x.shape[:2]) + [1] * (2 * n)
        shape[2 + d], shape[2 + n + d] = out[d], kernel[d]
        flat = flat + (positions * strides[d]).reshape(shape)
    flat = flat.reshape(x.shape[:2] + tuple(out) + (math.prod(kernel),))
    planes = x.reshape(x.shape[:2] + (math.prod(spatial),))
    every = flat.reshape(x.shape[:2] + (math.prod(out) * math.prod(kernel),))
    values = jnp.take_along_axis(planes, every, axis=2).reshape(flat.shape)
    return _unbatch(_select_max(values, flat, np.ones((), bool), return_indices), batched)


def fractional_max_pool2d(
    input,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices=False,
    _random_samples=None,
    *,
    key=None,
):
    """``torch.nn.functional.fractional_max_pool2d``.

    Args:
      input: `(N, C, H, W)` or `(C, H, W)`.
      kernel_size: an int or ``(kH, kW)``.
      output_size, output_ratio: exactly one: ``(H_out, W_out)`` or ratios in (0, 1).
      _random_samples: torch's `(N, C, 2)` samples in [0, 1) (`(1, C, 2)` unbatched);
        ``[..., 0]`` places the width windows, ``[..., 1]`` the height ones.
      key: a ``jax.random`` key to draw the samples from, when none are given.

    Returns:
      The output `(N, C, H_out, W_out)`, with ``return_indices`` also the indices.
    """
    return _fractional(
        "fractional_max_pool2d",
        2,
        input,
        kernel_size,
        output_size,
        output_ratio,
        return_indices,
        _random_samples,
        key,
    )


def fractional_max_pool3d(
    input,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices=False,
    _random_samples=None,
    *,
    key=None,
):
    """``torch.nn.functional.fractional_max_pool3d``: input `(N, C, T, H, W)` or
    `(C, T, H, W)`, ``_random_samples`` `(N, C, 3)` in (time, height, width) order;
    otherwise as ``fractional_max_pool2d``."""
    return _fractional(
        "fractional_max_pool3d",
        3,
        input,
        kernel_size,
        output_size,
        output_ratio,
        return_indices,
        _random_samples,
        key,
    )
