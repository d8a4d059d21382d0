"""Shape and view ATen ops: ``view``, ``permute``, ``expand``, ``slice``, ``cat``…

A captured program is functional (``torch.export`` has already turned every write
through a view into a ``*_scatter`` copy), so a view is a value here: ``view``,
``permute``, ``select`` and friends return new arrays, and the ``*_scatter`` ops
return the input with the viewed region replaced. Dimensions wrap as torch's do (a
negative ``dim`` counts from the end); an index or a dimension out of range is an
``IndexError`` naming the op, the value and the valid range: sizes are static, so
these checks hold under ``jit`` too.

Gradients are autodiff's, which agree with torch's here: every output element reads
one input element, so an input's gradient is the sum of the cotangents of the
outputs that read it (``expand``, ``repeat``, overlapping ``unfold`` windows and
``as_strided`` views sum; a ``*_scatter`` gives the replaced region of the input
no gradient).

Overloads that ``torch.export``'s core-ATen decompositions never leave in a program
(``reshape``, ``_unsafe_view``, ``squeeze.default``/``.dim``, ``transpose``, ``t``,
``split.Tensor``, ``unbind``, ``narrow``, ``roll``, ``tril``/``triu``,
``select_scatter``, the reflection and replication pads) are not in the table.

An entry made of several primitives is one ``jax.jit`` program (``_promote.compiled``,
shared by every family), its int and tuple arguments static: run eagerly (as the interpreter runs a program op by
op) it costs one XLA compilation per signature instead of one per primitive, and
under an outer ``jit`` it is inlined. A single-primitive entry stays a plain function
(a ``jit`` around it would compile its derivative as a program of its own).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.aten._promote import compiled, promote
from jaxgrad.nn.aten._table import register
from jaxgrad.nn.functional._padding import pad as _pad


def wrap_dim(op: str, dim: int, ndim: int, *, what: str = "dim") -> int:
    """``dim`` counted from the front; a 0-d tensor takes dims -1 and 0, as in torch."""
    span = max(ndim, 1)
    if not -span <= dim < span:
        raise IndexError(
            f"{op}: `{what}` (={dim}) is out of range for a tensor of "
            f"{ndim} dims (expected a dim in [{-span}, {span - 1}])."
        )
    return dim % span


def _check_not_scalar(op: str, input) -> None:
    if input.ndim == 0:
        raise IndexError(f"{op}: cannot be applied to a 0-dim tensor.")


# ------------------------------------------------------------------ views
@register("aten.view.default")
def view(input, size):
    """``input.view(size)`` (one entry may be -1)."""
    return jnp.reshape(input, tuple(size))


@register("aten.permute.default")
def permute(input, dims):
    """``input.permute(dims)``."""
    dims = tuple(wrap_dim("permute", d, input.ndim) for d in dims)
    if sorted(dims) != list(range(input.ndim)):
        raise ValueError(
            f"permute: `dims` (={list(dims)}) must be a permutation of the "
            f"input's {input.ndim} dims."
        )
    return jnp.transpose(input, dims)


@register("aten.expand.default")
def expand(input, size, *, implicit=False):
    """``input.expand(size)``: new leading dims, size-1 dims stretched, -1 keeps a dim."""
    size = tuple(size)
    lead = len(size) - input.ndim
    if lead < 0:
        raise ValueError(
            f"expand: `size` (={list(size)}) must have at least as many dims as "
            f"the input (shape {list(input.shape)})."
        )
    shape = tuple(input.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(size))
    return jnp.broadcast_to(input, shape)


@register("aten.squeeze.dims")
def squeeze(input, dim):
    """``input.squeeze(dim)``: the listed dims of size 1 removed (others kept)."""
    if input.ndim == 0:
        for d in dim:
            wrap_dim("squeeze", d, 0)
        return input
    axes = {wrap_dim("squeeze", d, input.ndim) for d in dim}
    return jnp.squeeze(input, tuple(sorted(a for a in axes if input.shape[a] == 1)))


@register("aten.unsqueeze.default")
def unsqueeze(input, dim):
    """``input.unsqueeze(dim)``; ``dim`` in ``[-ndim - 1, ndim]``."""
    return jnp.expand_dims(input, wrap_dim("unsqueeze", dim, input.ndim + 1))


@register("aten.slice.Tensor")
def slice_(input, dim=0, start=None, end=None, step=1):
    """``input[..., start:end:step]`` along ``dim`` (bounds clamp as in torch)."""
    if step <= 0:
        raise ValueError(f"slice: `step` (={step}) must be positive.")
    _check_not_scalar("slice", input)
    dim = wrap_dim("slice", dim, input.ndim)
    if isinstance(end, int) and end >= 2**62:
        end = None  # torch's "to the end" (INT64_MAX): min(size, it) is undecidable symbolically
    if isinstance(start, int) and start == 0:
        start = None
    if not all(b is None or isinstance(b, (int, np.integer)) for b in (start, end)):
        # a jax.export dimension variable as a bound (a constant's first `length` rows):
        # torch's guards hold it within the extent, so no clamping
        size = input.shape[dim]
        start = (
            0 if start is None else start + size if isinstance(start, int) and start < 0 else start
        )
        end = size if end is None else end
        return jax.lax.slice_in_dim(jnp.asarray(input), start, end, step, axis=dim)
    # Python's slice rules are torch's for a positive step: None is the whole extent,
    # negatives count from the end, bounds clamp to [0, size]
    return input[(slice(None),) * dim + (slice(start, end, step),)]


@register("aten.select.int")
def select(input, dim, index):
    """``input.select(dim, index)``: the ``dim`` axis removed at ``index``."""
    _check_not_scalar("select", input)
    dim = wrap_dim("select", dim, input.ndim)
    size = input.shape[dim]
    if not -size <= index < size:
        raise IndexError(
            f"select: `index` (={index}) is out of range for dimension {dim} of "
            f"size {size} (expected [{-size}, {size - 1}])."
        )
    return jnp.take(input, index % size, axis=dim)


@register("aten.diagonal.default")
def diagonal(input, offset=0, dim1=0, dim2=1):
    """``torch.diagonal``: the diagonal of the ``(dim1, dim2)`` planes, as the last dim
    (empty when ``offset`` is beyond the plane)."""
    dim1, dim2 = (wrap_dim("diagonal", d, input.ndim) for d in (dim1, dim2))
    if dim1 == dim2:
        raise ValueError(f"diagonal: `dim1` and `dim2` (={dim1}) must differ.")
    return jnp.diagonal(input, offset, dim1, dim2)


@register("aten.unfold.default")
@compiled
def unfold(input, dimension, size, step):
    """``input.unfold(dimension, size, step)``: windows of ``size`` every ``step`` along
    ``dimension``, the window as a new last dim."""
    dim = wrap_dim("unfold", dimension, input.ndim, what="dimension")
    extent = input.shape[dim] if input.ndim else 1
    if not 0 <= size <= extent:
        raise ValueError(
            f"unfold: `size` (={size}) must be in [0, {extent}], the size of dimension {dim}."
        )
    if step <= 0:
        raise ValueError(f"unfold: `step` (={step}) must be positive.")
    if input.ndim == 0:
        return jnp.reshape(input, (1,))
    count = (extent - size) // step + 1
    windows = np.arange(count)[:, None] * step + np.arange(size)[None, :]
    return jnp.moveaxis(jnp.take(input, windows, axis=dim), dim + 1, -1)


@register("aten.as_strided.default")
@compiled
def as_strided(input, size, stride, storage_offset=None):
    """``torch.as_strided(input, size, stride, storage_offset)`` on a contiguous input:
    element ``i`` of the result is ``input.flatten()[storage_offset + Σ i_k·stride_k]``
    (a gather; ``from_torch`` refuses a non-contiguous input at capture)."""
    if len(size) != len(stride):
        raise ValueError(
            f"as_strided: `size` (={list(size)}) and `stride` (={list(stride)}) "
            "must have the same length."
        )
    offset = 0 if storage_offset is None else storage_offset
    if not all(isinstance(v, (int, np.integer)) for v in (*size, *stride, offset)):
        # symbolic sizes (a program exported with jax.export): the same index, built by
        # JAX with the sizes as dimension variables; torch checked the bounds at capture
        index_dtype = jax.dtypes.canonicalize_dtype(np.int64)
        flat_index = jnp.full(tuple(size), offset, dtype=index_dtype)
        for axis, step in enumerate(stride):
            flat_index = (
                flat_index + jax.lax.broadcasted_iota(index_dtype, tuple(size), axis) * step
            )
        return jnp.ravel(input)[flat_index]
    flat_index = np.full(tuple(size), offset, dtype=np.int64)
    for axis, (extent, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = extent
        flat_index = flat_index + np.arange(extent).reshape(shape) * step
    if flat_index.size and (flat_index.min() < 0 or flat_index.max() >= input.size):
        raise IndexError(
            f"as_strided: size {list(size)}, stride {list(stride)} and storage offset "
            f"{offset} reach element {int(flat_index.max())}, outside the input's {input.size} "
            "elements."
        )
    return jnp.ravel(input)[flat_index]


# ------------------------------------------------------- copies of views
@register("aten.flip.default")
def flip(input, dims):
    """``torch.flip(input, dims)``."""
    axes = [wrap_dim("flip", d, input.ndim) for d in dims]
    if len(set(axes)) != len(axes):
        raise ValueError(f"flip: `dims` (={list(dims)}) has duplicates.")
    return jnp.flip(input, tuple(axes)) if axes and input.ndim else input


@register("aten.repeat.default")
@compiled
def repeat(input, repeats):
    """``input.repeat(repeats)``: tiled; extra leading repeats add dims."""
    repeats = tuple(repeats)
    if len(repeats) < input.ndim:
        raise ValueError(
            f"repeat: `repeats` (={list(repeats)}) must have at least as many "
            f"entries as the input has dims ({input.ndim})."
        )
    if any(r < 0 for r in repeats):
        raise ValueError(f"repeat: `repeats` (={list(repeats)}) must be non-negative.")
    return jnp.tile(input, repeats)


def _skipped_in_cat(tensor) -> bool:
    # torch's legacy rule: a 1-D empty tensor is skipped whatever the other shapes
    return tensor.ndim == 1 and tensor.shape[0] == 0


@register("aten.cat.default")
def cat(tensors, dim=0):
    """``torch.cat(tensors, dim)``, promoting dtypes as torch does; 1-D empty tensors
    are skipped (torch's legacy behaviour)."""
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors.")
    tensors, _ = promote(*tensors)
    kept = [t for t in tensors if not _skipped_in_cat(t)]
    if not kept:
        return tensors[0]
    if any(t.ndim == 0 for t in kept):
        raise ValueError("cat: zero-dimensional tensors cannot be concatenated.")
    axis = wrap_dim("cat", dim, kept[0].ndim)
    for i, t in enumerate(kept):
        if t.ndim != kept[0].ndim or any(
            a != b for k, (a, b) in enumerate(zip(t.shape, kept[0].shape)) if k != axis
        ):
            raise ValueError(
                f"cat: sizes of tensors must match except in dimension {axis}: tensor {i} has "
                f"shape {list(t.shape)}, the first {list(kept[0].shape)}."
            )
    return jnp.concatenate(kept, axis=axis)


@register("aten.split_with_sizes.default")
@compiled
def split_with_sizes(input, split_sizes, dim=0):
    """``input.split(split_sizes, dim)`` with explicit sizes summing to the dim's size."""
    dim = wrap_dim("split_with_sizes", dim, input.ndim)
    if sum(split_sizes) != input.shape[dim] or any(s < 0 for s in split_sizes):
        raise ValueError(
            f"split_with_sizes: `split_sizes` (={list(split_sizes)}) must be "
            f"non-negative and sum to the size of dimension {dim} "
            f"(={input.shape[dim]})."
        )
    cuts = np.cumsum(split_sizes)[:-1].tolist()
    return tuple(jnp.split(input, cuts, axis=dim))


@register("aten.constant_pad_nd.default")
def constant_pad_nd(input, pad, value=0):
    """``F.pad(input, pad, value=value)``: pads listed from the last dim backwards;
    negative pads crop."""
    return _pad(input, tuple(pad), "constant", value)


# ----------------------------------------------------------- *_scatter
@register("aten.slice_scatter.default")
@compiled
def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """``input`` with ``input[..., start:end:step]`` (along ``dim``) replaced by ``src``."""
    target = slice_(input, dim, start, end, step)
    if tuple(src.shape) != tuple(target.shape):
        raise ValueError(
            f"slice_scatter: `src` has shape {list(src.shape)}, the slice it "
            f"replaces {list(target.shape)}."
        )
    dim = wrap_dim("slice_scatter", dim, input.ndim)
    return input.at[(slice(None),) * dim + (slice(start, end, step),)].set(src.astype(input.dtype))


@register("aten.diagonal_scatter.default")
@compiled
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """``input`` with its ``(dim1, dim2)`` diagonal at ``offset`` replaced by ``src``."""
    target = diagonal(input, offset, dim1, dim2)
    if tuple(src.shape) != tuple(target.shape):
        raise ValueError(
            f"diagonal_scatter: `src` has shape {list(src.shape)}, the diagonal "
            f"it replaces {list(target.shape)}."
        )
    dim1, dim2 = (wrap_dim("diagonal_scatter", d, input.ndim) for d in (dim1, dim2))
    planes = jnp.moveaxis(input, (dim1, dim2), (-2, -1))
    length = target.shape[-1]
    rows = np.arange(length) + max(-offset, 0)
    cols = np.arange(length) + max(offset, 0)
    planes = planes.at[..., rows, cols].set(src.astype(input.dtype))
    return jnp.moveaxis(planes, (-2, -1), (dim1, dim2))
