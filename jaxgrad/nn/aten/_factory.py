"""Factory ATen ops: ``arange``, ``full``, ``empty``, ``scalar_tensor``…

A new tensor's dtype is the node's ``dtype`` (export records it explicitly); when it
is absent, torch's inference applies: a ``bool`` fill gives bool, an ``int`` int64, a
``float`` the default float dtype (float32), and ``arange`` is int64 unless one of
its bounds or its step is a float. The device, layout and pinning arguments describe
where torch keeps the tensor: jaxgrad has one device per array and no strides, so they
are accepted and ignored, except a non-strided layout (sparse), which is refused.
``empty*`` are zeros: torch leaves the values undefined, a program that reads them
before writing has no defined result to match.

Only overloads that survive ``torch.export``'s core-ATen decompositions are here:
``zeros``, ``ones``, the ``*_like`` ops but ``full_like``, ``new_*``, ``eye``, ``linspace``,
``fill`` and the short ``arange`` overloads all become ``full``, ``full_like``,
``empty_permuted`` or ``arange.start_step`` before a program reaches the table.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.aten._promote import DEFAULT_FLOAT, _wrapped_dtype, canonical, compiled
from jaxgrad.nn.aten._table import register


def _dtype(dtype, fallback) -> np.dtype:
    return canonical(fallback if dtype is None else dtype)


def _check_layout(op: str, layout) -> None:
    if layout not in (None, "torch.strided"):
        raise ValueError(
            f"{op}: `layout` (={layout}) is not supported; jaxgrad arrays are "
            "dense (torch.strided)."
        )


def _size(op: str, size) -> tuple:
    # a jax.export dimension variable (a saved artifact's symbolic size) stays one
    size = tuple(s if jax.export.is_symbolic_dim(s) else int(s) for s in size)
    if any(isinstance(s, int) and s < 0 for s in size):
        raise ValueError(f"{op}: `size` (={list(size)}) must hold non-negative sizes.")
    return size


# ------------------------------------------------------------------ arange
@register("aten.arange.start_step")
def arange(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.arange(start, end, step)``: ``start + i·step``, following torch's
    reference (``torch._refs.arange``) to the letter, quirks included: an integer
    dtype truncates the bounds and the step to integers, and int64 (or all-integer
    arguments) counts ``ceil((end - start) / step)`` on the truncated values
    (``arange(0.5, 5, 1.5, dtype=int64)`` is ``[0, 1, 2, 3, 4]``) where other dtypes
    count it on the given ones (``dtype=int32``: ``[0, 1, 2]``)."""
    _check_layout("arange", layout)
    if not all(isinstance(b, (int, float, np.integer, np.floating)) for b in (start, end, step)):
        return _symbolic_arange(start, end, step, dtype)
    if step == 0:
        raise ValueError("arange: `step` must be nonzero.")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise ValueError(
            f"arange: the bounds {start} to {end} are inconsistent with the "
            f"sign of `step` (={step})."
        )
    if not all(math.isfinite(bound) for bound in (start, end, step)):
        raise ValueError(
            f"arange: unsupported range {start} to {end} (step {step}): the "
            "bounds and the step must be finite."
        )
    integer_args = all(isinstance(b, (int, np.integer)) for b in (start, end, step))
    dtype = (
        np.dtype(np.int64 if integer_args else DEFAULT_FLOAT) if dtype is None else np.dtype(dtype)
    )
    exact = dtype.kind in "iu" or integer_args
    first, last, stride = (int(start), int(end), int(step)) if exact else (start, end, step)
    if dtype == np.int64 or integer_args:
        if stride == 0:
            raise ValueError(
                f"arange: `step` (={step}) must be nonzero after truncation to an integer."
            )
        length = max(0, -((first - last) // stride))  # exact ceil for either sign of step
    else:
        length = max(0, math.ceil((end - start) / step))
    return _arange(first, stride, length, canonical(dtype), exact)


def _symbolic_arange(start, end, step, dtype):
    """``arange`` with a ``jax.export`` dimension variable among integer bounds (a
    position index over a symbolic sequence length)."""
    if not (isinstance(step, (int, np.integer)) and step > 0):
        raise ValueError(
            f"arange: a symbolic range {start} to {end} takes a positive "
            f"integer step, got {step!r}."
        )
    dtype = np.dtype(np.int64 if dtype is None else dtype)
    length = (end - start + step - 1) // step
    return (start + step * jnp.arange(length, dtype=canonical(np.int64))).astype(canonical(dtype))


@compiled
def _arange(start, step, length, dtype, exact):
    # torch computes start + step·i in int64 for integers, else in the accumulate type
    # (double on CPU), then casts
    wide = canonical(np.int64 if exact else np.float64)
    return (start + step * jnp.arange(length, dtype=wide)).astype(dtype)


# -------------------------------------------------------------------- full
@register("aten.full.default")
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.full(size, fill_value)``; without ``dtype``, the dtype of the fill (bool,
    int64 or the default float)."""
    _check_layout("full", layout)
    return jnp.full(_size("full", size), fill_value, _dtype(dtype, _wrapped_dtype(fill_value)))


@register("aten.full_like.default")
def full_like(
    input, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    """``torch.full_like(input, fill_value)``: ``input``'s shape (and dtype unless given);
    no gradient reaches ``input``."""
    _check_layout("full_like", layout)
    return jnp.full(input.shape, fill_value, _dtype(dtype, input.dtype))


@register("aten.scalar_tensor.default")
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.scalar_tensor(s)``: a zero-dim tensor, of the default float dtype unless
    ``dtype`` is given (whatever the type of ``s``)."""
    _check_layout("scalar_tensor", layout)
    return jnp.asarray(s, _dtype(dtype, DEFAULT_FLOAT))


# ------------------------------------------------------------------- empty
@register("aten.empty.memory_format")
def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """``torch.empty(size)``: zeros here (torch's values are undefined)."""
    _check_layout("empty", layout)
    return jnp.zeros(_size("empty", size), _dtype(dtype, DEFAULT_FLOAT))


@register("aten.empty_strided.default")
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.empty_strided(size, stride)``: zeros of ``size`` (strides are a memory
    layout, which jaxgrad does not have)."""
    _check_layout("empty_strided", layout)
    if len(stride) != len(size):
        raise ValueError(
            f"empty_strided: `stride` (={list(stride)}) must have one entry per "
            f"dimension of `size` (={list(size)})."
        )
    return jnp.zeros(_size("empty_strided", size), _dtype(dtype, DEFAULT_FLOAT))


@register("aten.empty_permuted.default")
def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.empty_permuted(size, physical_layout)``: zeros of the logical ``size``
    (``physical_layout`` orders memory only)."""
    _check_layout("empty_permuted", layout)
    if sorted(physical_layout) != list(range(len(size))):
        raise ValueError(
            f"empty_permuted: `physical_layout` (={list(physical_layout)}) must "
            f"be a permutation of the {len(size)} dimensions of `size`."
        )
    return jnp.zeros(_size("empty_permuted", size), _dtype(dtype, DEFAULT_FLOAT))
