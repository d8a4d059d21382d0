"""Indexing ATen ops: advanced indexing, gather and scatter, embedding lookup.

torch checks every index against its dimension while it runs and raises. The same
check runs here whenever the index is concrete (eager execution, the usual way a
program is first tried): an ``IndexError`` naming the op, the offending index and
the valid range. Under ``jit`` the values are unknown when the program is traced, so
nothing can raise; the entries then do what JAX does: a gather clamps an
out-of-range index to the nearest valid one, a scatter drops the update.

Gradients follow torch's derivative formulas, including where JAX's own differ:

- a write with duplicate indices (``index_put`` without ``accumulate``,
  ``scatter``): torch's forward keeps one of the written values (on CPU the last),
  but its backward hands *every* duplicate its cotangent (a gather); JAX's scatter
  sends it to the winning update only. ``_overwrite`` writes the value without a
  gradient and adds a zero-valued scatter-add whose transpose is that gather;
- ``scatter_reduce`` has torch's ``scatter_reduce_backward`` as a ``custom_vjp``:
  ``amax``/``amin`` split the cotangent evenly among the input and source elements
  equal to the result, ``prod`` divides by the operand with torch's exact handling
  of zeros, ``mean`` divides by the count.

``nonzero`` and boolean-mask indexing have an output shape that depends on the
values: they run on concrete values and are refused, named, under tracing, as is
``_local_scalar_dense`` (``tensor.item()``), which makes a Python number of a
traced value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.aten._promote import canonical, compiled
from jaxgrad.nn.aten._shape import wrap_dim
from jaxgrad.nn.aten._table import register
from jaxgrad.nn.functional._embedding import concrete_or_none
from jaxgrad.nn.functional._embedding import embedding as _embedding


def _check_range(op: str, index, size: int, dim: int, *, negative: bool) -> None:
    """Raise if a concrete ``index`` leaves ``[0, size)`` (``[-size, size)`` when
    ``negative`` indices count from the end, as in advanced indexing)."""
    values = concrete_or_none(index)
    if values is None or values.size == 0:
        return
    low = -size if negative else 0
    bad = values[(values < low) | (values >= size)]
    if bad.size:
        raise IndexError(
            f"{op}: index {int(bad.flat[0])} is out of range for dimension {dim} "
            f"of size {size} (expected an index in [{low}, {size - 1}])."
        )


def _is_mask(index) -> bool:
    return np.dtype(index.dtype) in (np.dtype(np.bool_), np.dtype(np.uint8))


def _overwrite(target, index, values):
    """``target.at[index].set(values)`` with torch's gradient: ``target`` gets none at
    the written positions, and every written value (duplicates included) gets the
    cotangent of its position."""
    frozen = jax.lax.stop_gradient(values)
    written = target.at[index].set(frozen, mode="drop")
    if not jnp.issubdtype(values.dtype, jnp.inexact):
        return written
    # zero in value; its transpose gathers the cotangent for every duplicate
    return written + jnp.zeros_like(target).at[index].add(values - frozen, mode="drop")


# ------------------------------------------------------- advanced indexing
def _advanced_index(op: str, input, indices) -> tuple:
    """ATen's ``Tensor?[] indices`` as a numpy-style index tuple: ``None`` keeps a dim,
    a boolean mask becomes the coordinates of its True entries (it must be
    concrete), an integer tensor indexes one dim. The positions of the advanced
    indices then follow numpy's rules, which are torch's."""
    parts, dim = [], 0
    for position, index in enumerate(indices):
        if index is None:
            parts.append(slice(None))
            dim += 1
            continue
        if _is_mask(index):
            mask = concrete_or_none(index)
            if mask is None:
                raise ValueError(
                    f"{op}: indices[{position}] is a boolean mask, whose number of True "
                    "entries decides the output shape; it cannot be traced (under jit). Use "
                    "torch.where(mask, x, fill) in the model instead of x[mask]."
                )
            shape = tuple(input.shape[dim : dim + mask.ndim])
            if shape != mask.shape:
                raise IndexError(
                    f"{op}: the mask indices[{position}] of shape "
                    f"{list(mask.shape)} does not match the indexed shape "
                    f"{list(shape)} at dimension {dim}."
                )
            parts.extend(np.nonzero(mask))
            dim += mask.ndim
            continue
        if not jnp.issubdtype(index.dtype, jnp.integer):
            raise TypeError(
                f"{op}: indices[{position}] must be an integer or boolean tensor, "
                f"got {np.dtype(index.dtype).name}."
            )
        if dim >= input.ndim:
            raise IndexError(f"{op}: too many indices for a tensor of {input.ndim} dims.")
        _check_range(op, index, input.shape[dim], dim, negative=True)
        parts.append(index)
        dim += 1
    if dim > input.ndim:
        raise IndexError(f"{op}: too many indices for a tensor of {input.ndim} dims.")
    arrays = tuple(part for part in parts if not isinstance(part, slice))
    return arrays, tuple(not isinstance(part, slice) for part in parts)


def _joined(arrays, kinds) -> tuple:
    """The index tuple of ``_advanced_index``'s ``(arrays, kinds)``."""
    arrays = iter(arrays)
    return tuple(next(arrays) if is_array else slice(None) for is_array in kinds)


@compiled
def _index(input, arrays, kinds):
    return input[_joined(arrays, kinds)]


@compiled
def _index_put(input, arrays, values, kinds, accumulate):
    where = _joined(arrays, kinds)
    values = values.astype(input.dtype)
    if accumulate:
        return input.at[where].add(values, mode="drop")
    return _overwrite(input, where, values)


@register("aten.index.Tensor")
def index(input, indices):
    """``input[indices]`` with torch's (numpy's) advanced indexing; negative indices
    count from the end. Under ``jit`` an out-of-range index is clamped."""
    return _index(input, *_advanced_index("index", input, indices))


@register("aten.index_put.default")
def index_put(input, indices, values, accumulate=False):
    """``input`` with ``input[indices] = values`` (``+=`` with ``accumulate``), values
    broadcast to the indexed shape. Duplicate indices without ``accumulate`` keep the
    last value, as torch's CPU kernel. Under ``jit`` an out-of-range update is dropped."""
    arrays, kinds = _advanced_index("index_put", input, indices)
    return _index_put(input, arrays, values, kinds, bool(accumulate))


# ------------------------------------------------------------ along a dim
@register("aten.index_select.default")
def index_select(input, dim, index):
    """``input.index_select(dim, index)``: ``index`` 0-D or 1-D, in ``[0, size)``.
    Under ``jit`` an out-of-range index is clamped."""
    dim = wrap_dim("index_select", dim, input.ndim)
    if index.ndim > 1:
        raise ValueError(
            f"index_select: `index` must be 0-D or 1-D, got shape {list(index.shape)}."
        )
    size = input.shape[dim] if input.ndim else 1
    _check_range("index_select", index, size, dim, negative=False)
    if input.ndim == 0:
        return input
    return jnp.take(input, jnp.reshape(index, (-1,)), axis=dim, mode="clip")


def _grid(index, dim: int) -> tuple:
    """Index arrays addressing ``out[i_0, ..., index[i], ..., i_n]`` for every position
    ``i`` of ``index``: ``gather``/``scatter``'s addressing along ``dim``."""
    if index.ndim == 0:
        return (index,)
    return tuple(
        index if k == dim else jnp.arange(n).reshape((1,) * k + (n,) + (1,) * (index.ndim - k - 1))
        for k, n in enumerate(index.shape)
    )


def _check_along(op: str, input, dim: int, index, others=()) -> int:
    """Wrap ``dim``; check ``index``'s dims fit ``input`` (and ``others``, e.g. the
    source) apart from ``dim``, and its values (when concrete)."""
    dim = wrap_dim(op, dim, input.ndim)
    if not jnp.issubdtype(index.dtype, jnp.integer):
        raise TypeError(
            f"{op}: `index` must be an integer tensor, got {np.dtype(index.dtype).name}."
        )
    if index.size == 0:
        return dim
    if max(index.ndim, 1) != max(input.ndim, 1):
        raise ValueError(
            f"{op}: `index` (shape {list(index.shape)}) must have as many dims as "
            f"the input (shape {list(input.shape)})."
        )
    for name, other, apart in (("input", input, True),) + tuple(others):
        for k, n in enumerate(index.shape):
            if other.ndim and n > other.shape[k] and (k != dim or not apart):
                raise ValueError(
                    f"{op}: `index` (shape {list(index.shape)}) must be no larger than "
                    f"`{name}` (shape {list(other.shape)})"
                    + (f" apart from dimension {dim}." if apart else ".")
                )
    _check_range(op, index, input.shape[dim] if input.ndim else 1, dim, negative=False)
    return dim


def _lifted(input, index, src=None):
    """A 0-d ``input`` (with its 0-d index and source) as 1-D, so one addressing rule
    serves; ``restore`` turns the result back."""
    if input.ndim:
        return input, index, src, lambda out: out
    lift = lambda t: t if t is None or not hasattr(t, "ndim") else jnp.reshape(t, (-1,))
    return lift(input), lift(index), lift(src), lambda out: jnp.reshape(out, ())


def _within(tensor, shape):
    """The leading ``shape`` block of ``tensor`` (a source larger than the index)."""
    if tensor.ndim == 0 or tuple(tensor.shape) == tuple(shape):
        return tensor
    return tensor[tuple(slice(0, n) for n in shape)]


@register("aten.gather.default")
def gather(input, dim, index, *, sparse_grad=False):
    """``torch.gather``: ``out[i][j][k] = input[index[i][j][k]][j][k]`` (for dim 0).
    Under ``jit`` an out-of-range index is clamped."""
    dim = _check_along("gather", input, dim, index)
    if index.size == 0:
        return jnp.zeros(index.shape, input.dtype)
    if input.ndim == 0:
        return jnp.broadcast_to(input, index.shape)
    return _gather(input, index, dim)


@compiled
def _gather(input, index, dim):
    return input[_grid(index, dim)]


@register("aten.scatter.src")
def scatter(input, dim, index, src):
    """``torch.scatter``: ``out[index[i][j][k]][j][k] = src[i][j][k]`` (for dim 0); with
    duplicate indices one write wins (the last on CPU), as in torch. Under ``jit`` an
    out-of-range update is dropped."""
    dim = _check_along("scatter", input, dim, index, (("src", src, False),))
    if index.size == 0:
        return input
    return _scatter(input, index, src, dim)


@compiled
def _scatter(input, index, src, dim):
    input, index, src, restore = _lifted(input, index, src)
    return restore(
        _overwrite(input, _grid(index, dim), _within(src, index.shape).astype(input.dtype))
    )


@register("aten.scatter.value")
def scatter_value(input, dim, index, value):
    """``torch.scatter`` of one number at every position of ``index``."""
    dim = _check_along("scatter", input, dim, index)
    if index.size == 0:
        return input
    return _scatter_value(input, index, dim, value)


@compiled
def _scatter_value(input, index, dim, value):
    input, index, _, restore = _lifted(input, index)
    return restore(input.at[_grid(index, dim)].set(jnp.asarray(value, input.dtype), mode="drop"))


@register("aten.scatter_add.default")
def scatter_add(input, dim, index, src):
    """``torch.scatter_add``: ``out[index[i][j][k]][j][k] += src[i][j][k]``."""
    dim = _check_along("scatter_add", input, dim, index, (("src", src, False),))
    if index.size == 0:
        return input
    return _scatter_add(input, index, src, dim)


@compiled
def _scatter_add(input, index, src, dim):
    input, index, src, restore = _lifted(input, index, src)
    return restore(
        input.at[_grid(index, dim)].add(_within(src, index.shape).astype(input.dtype), mode="drop")
    )


# ----------------------------------------------------------- scatter_reduce
REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _reduce_forward(input, grid, src, reduce: str, include_self: bool):
    """torch's ``scatter_reduce`` forward: positions no index reaches keep ``input``;
    without ``include_self`` the reached positions start from the reduction's
    identity instead of ``input``."""
    at = input.at[grid]
    if reduce in ("sum", "mean"):
        base = input if include_self else at.set(0, mode="drop")
        total = base.at[grid].add(src, mode="drop")
        if reduce == "sum":
            return total
        count = jnp.zeros(input.shape, input.dtype).at[grid].add(1, mode="drop")
        count = count + 1 if include_self else count
        count = jnp.where(count == 0, jnp.ones_like(count), count)
        if jnp.issubdtype(input.dtype, jnp.integer):
            return jnp.floor_divide(total, count)
        return total / count
    if reduce == "prod":
        base = input if include_self else at.set(1, mode="drop")
        return base.at[grid].multiply(src, mode="drop")
    if jnp.issubdtype(input.dtype, jnp.inexact):
        identity = -jnp.inf if reduce == "amax" else jnp.inf
    else:
        info = jnp.iinfo(input.dtype)
        identity = info.min if reduce == "amax" else info.max
    base = input if include_self else at.set(identity, mode="drop")
    if reduce == "amax":
        return base.at[grid].max(src, mode="drop")
    return base.at[grid].min(src, mode="drop")


def _reduce_backward(grad, input, grid, src, result, reduce: str, include_self: bool):
    """torch's ``scatter_reduce_backward`` (torch/csrc/autograd/FunctionsManual.cpp)."""
    if reduce == "sum":
        grad_self, grad_src = grad, grad[grid]
    elif reduce == "mean":
        count = jnp.zeros_like(grad).at[grid].add(1, mode="drop")
        count = count + 1 if include_self else count
        count = jnp.where(count == 0, jnp.ones_like(count), count)
        grad_self, grad_src = grad / count, grad[grid] / count[grid]
    elif reduce == "prod":
        one = jnp.ones_like(input)
        masked_self = jnp.where(input == 0, one, input)
        masked_self_result = _reduce_forward(masked_self, grid, src, reduce, include_self)
        grad_self = grad * masked_self_result / masked_self
        src_zero = src == 0
        zeros_per_slot = (
            jnp.zeros_like(input).at[grid].add(src_zero.astype(input.dtype), mode="drop")[grid]
        )
        single_zero = src_zero & (zeros_per_slot == 1)
        masked_src = jnp.where(single_zero, jnp.ones_like(src), src)
        masked_src_result = _reduce_forward(input, grid, masked_src, reduce, include_self)
        grad_src = jnp.where(
            single_zero,
            (grad * masked_src_result)[grid],
            (grad * result)[grid] / jnp.where(src_zero, jnp.ones_like(src), src),
        )
    else:  # amax, amin: the cotangent split evenly among the elements equal to the result
        self_is_result = (input == result).astype(grad.dtype)
        src_is_result = (src == result[grid]).astype(grad.dtype)
        share = grad / self_is_result.at[grid].add(src_is_result, mode="drop")
        grad_self, grad_src = self_is_result * share, src_is_result * share[grid]
    if not include_self:
        grad_self = grad_self.at[grid].set(0, mode="drop")
    return grad_self, grad_src


def _scatter_reduce_vjp(dim: int, reduce: str, include_self: bool):
    """``f(input, index, src)`` with torch's backward as its VJP."""

    @jax.custom_vjp
    def reduce_(input, index, src):
        return _reduce_forward(input, _grid(index, dim), src, reduce, include_self)

    def forward(input, index, src):
        result = reduce_(input, index, src)
        return result, (input, index, src, result)

    def backward(residuals, grad):
        input, index, src, result = residuals
        grad_self, grad_src = _reduce_backward(
            grad, input, _grid(index, dim), src, result, reduce, include_self
        )
        return grad_self, None, grad_src

    reduce_.defvjp(forward, backward)
    return reduce_


@register("aten.scatter_reduce.two")
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """``torch.scatter_reduce(input, dim, index, src, reduce, include_self=True)`` with
    ``reduce`` one of ``REDUCTIONS``; the integer ``mean`` floors, as torch's. Under
    ``jit`` an out-of-range update is dropped."""
    if reduce not in REDUCTIONS:
        raise ValueError(
            f"scatter_reduce: `reduce` (={reduce!r}) must be one of "
            f"{', '.join(map(repr, REDUCTIONS))}."
        )
    dim = _check_along("scatter_reduce", input, dim, index, (("src", src, False),))
    if index.size == 0:
        return input
    return _scatter_reduce(input, index, src, dim, reduce, bool(include_self))


@compiled
def _scatter_reduce(input, index, src, dim, reduce, include_self):
    input, index, src, restore = _lifted(input, index, src)
    src = _within(src, index.shape).astype(input.dtype)
    if not jnp.issubdtype(input.dtype, jnp.inexact):
        return restore(_reduce_forward(input, _grid(index, dim), src, reduce, include_self))
    return restore(_scatter_reduce_vjp(dim, reduce, include_self)(input, index, src))


# ---------------------------------------------------------------- masks
@register("aten.masked_scatter.default")
def masked_scatter(input, mask, source):
    """``input.masked_scatter(mask, source)``: the positions where ``mask`` (broadcast
    with ``input``) is True take ``source``'s elements in row-major order. A concrete
    mask with more True entries than ``source`` has elements is refused; under ``jit``
    the last element of ``source`` is repeated instead."""
    if np.dtype(mask.dtype) != np.dtype(np.bool_):
        raise TypeError(
            f"masked_scatter: `mask` must be a bool tensor, got {np.dtype(mask.dtype).name}."
        )
    shape = jnp.broadcast_shapes(input.shape, mask.shape)
    values = concrete_or_none(mask)
    selected = None if values is None else int(np.broadcast_to(values, shape).sum())
    if selected is not None and selected > source.size:
        raise ValueError(
            f"masked_scatter: `mask` selects {selected} elements, but `source` "
            f"has only {source.size}."
        )
    return _masked_scatter(input, mask, source)


@compiled
def _masked_scatter(input, mask, source):
    shape = jnp.broadcast_shapes(input.shape, mask.shape)
    mask = jnp.broadcast_to(mask, shape)
    if source.size == 0:
        return jnp.broadcast_to(input, shape)
    position = jnp.clip(jnp.cumsum(jnp.ravel(mask)) - 1, 0, source.size - 1)
    picked = jnp.ravel(source)[position].reshape(shape).astype(input.dtype)
    return jnp.where(mask, picked, input)


# -------------------------------------------------------------- embedding
@register("aten.embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``aten.embedding``: rows of ``weight`` at ``indices``; the rows read at
    ``padding_idx`` (ATen's -1: none) get no gradient; ``scale_grad_by_freq`` divides
    each row's gradient by its frequency in ``indices``. Ids out of range raise when
    concrete; under ``jit`` they read a row of NaN
    (``jaxgrad.nn.functional.embedding``)."""
    if not jnp.issubdtype(indices.dtype, jnp.integer):
        raise TypeError(
            f"embedding: `indices` must be an integer tensor, got {np.dtype(indices.dtype).name}."
        )
    _check_range("embedding", indices, weight.shape[0], 0, negative=False)
    return _embedding_rows(
        weight, indices, None if padding_idx < 0 else padding_idx, bool(scale_grad_by_freq)
    )


@compiled
def _embedding_rows(weight, indices, padding_idx, scale_grad_by_freq):
    return _embedding(
        indices,
        weight,
        padding_idx=padding_idx,
        scale_grad_by_freq=scale_grad_by_freq,
        _where="embedding",
    )


# ------------------------------------------------------ value-dependent
@register("aten.nonzero.default")
def nonzero(input):
    """``torch.nonzero(input)``: the ``(count, ndim)`` int64 coordinates of the nonzero
    elements. The count depends on the values, so ``input`` must be concrete."""
    values = concrete_or_none(input)
    if values is None:
        raise ValueError(
            "nonzero: the output shape (the number of nonzero elements) depends on the "
            "input's values, which are unknown under jit/tracing; jaxgrad captures static "
            "shapes only. Run the program eagerly, or avoid nonzero / x[mask] / "
            "torch.where(cond) in the model."
        )
    return jnp.asarray(np.argwhere(values), canonical(np.int64))


@register("aten._local_scalar_dense.default")
def local_scalar_dense(input):
    """``tensor.item()``: refused. It turns a tensor into a Python number, so the rest
    of the program depends on a value that a traced (jitted) program does not have."""
    raise ValueError(
        "_local_scalar_dense (`tensor.item()`, `int(tensor)`, `float(tensor)`): the "
        "forward reads a tensor's value into Python, so the program depends on the value "
        f"of a {np.dtype(input.dtype).name}{list(input.shape)} tensor; a jaxgrad program "
        "is traced without values. Keep the computation in tensors (e.g. torch.where "
        "instead of branching on .item())."
    )
