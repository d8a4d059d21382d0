"""Reductions: sums, means, extrema, variance, norms, softmax, cumulative ops, sorting.

Conventions (torch's, each checked against ``op_db``):

- ``dim`` is a list of dims, ``None`` or ``[]`` for all of them; a 0-dim tensor
  accepts ``dim`` 0 or -1 and reduces nothing;
- integer and bool inputs sum, multiply and accumulate (``cumsum``, ``cumprod``) in
  int64 unless ``dtype`` is given; ``mean`` needs a floating input or ``dtype``;
- ``amax``/``amin``/``max()``/``min()`` split the gradient evenly among tied
  extrema; ``max.dim``/``min.dim``, ``sort`` and ``topk`` give it to the index they
  return (the first extremum; NaN counts as the largest value and propagates);
- ``max()``/``min()`` of a tensor holding NaN split the gradient among its NaNs;
- ``var`` divides by ``max(N − correction, 0)`` (``correction`` 1 by default) and
  differentiates as ``2 (x − mean) / (N − correction)``; where ``N`` equals the
  correction (a size-1 dimension) both are NaN, as in torch;
- ``linalg_vector_norm`` differentiates as torch's ``norm_backward``: 0 where the
  norm is 0 (ord 2 and above), ``sgn(x)`` for ord 1 (0 at NaN), evenly split ties
  for ord ±inf, no gradient for ord 0.

Left as JAX differentiates them (the same values wherever inputs are finite):
``cumprod`` and ``logcumsumexp`` next to NaN or inf, where torch's backward formulas
(a division by the input; log-space sums) give NaN for elements JAX keeps finite.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn import functional
from jaxgrad.nn.aten._pointwise import torch_sign
from jaxgrad.nn.aten._promote import canonical, compiled, is_floating
from jaxgrad.nn.aten._table import register
from jaxgrad.nn.functional._attention import safe_softmax as attention_softmax


def _axes(ndim: int, dim, op: str):
    """``dim`` (an int, a list, or None/[] for all) as a tuple of non-negative axes."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return tuple(range(ndim))
    rank = max(ndim, 1)
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(
                f"{op}: `dim` (={d}) is out of range for a tensor of {ndim} "
                f"dims (expected {-rank} ≤ dim < {rank})."
            )
    return tuple(sorted({d % rank for d in dims})) if ndim else ()


def _accumulating(input, dtype):
    """``input`` cast to ``dtype``, or to int64 when integral and ``dtype`` is None."""
    if dtype is not None:
        return input.astype(canonical(dtype))
    if not is_floating(input.dtype):
        return input.astype(canonical(np.int64))
    return input


# ----------------------------------------------------------------- sum, mean
@register("aten.sum.dim_IntList")
def sum_dim(input, dim=None, keepdim=False, *, dtype=None):
    axes = _axes(input.ndim, dim, "sum")
    return jnp.sum(_accumulating(input, dtype), axis=axes, keepdims=keepdim)


def _mean(input, axes, keepdim, dtype):
    if dtype is not None:
        input = input.astype(canonical(dtype))
    if not is_floating(input.dtype):
        raise TypeError(
            f"mean: needs a floating input or `dtype`, got {input.dtype} (torch refuses it too)."
        )
    return jnp.mean(input, axis=axes, keepdims=keepdim)


@register("aten.mean.dim")
def mean_dim(input, dim=None, keepdim=False, *, dtype=None):
    return _mean(input, _axes(input.ndim, dim, "mean"), keepdim, dtype)


@register("aten.mean.default")
def mean(input, *, dtype=None):
    return _mean(input, None, False, dtype)


@register("aten.prod.default")
@compiled
def prod(input, *, dtype=None):
    return jnp.prod(_accumulating(input, dtype))


@register("aten.prod.dim_int")
@compiled
def prod_dim(input, dim, keepdim=False, *, dtype=None):
    axes = _axes(input.ndim, dim, "prod")
    return jnp.prod(_accumulating(input, dtype), axis=axes, keepdims=keepdim)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def _variance(x, axes, keepdim, count, correction):
    deviation = x - jnp.mean(x, axis=axes, keepdims=True)
    squares = jnp.sum(deviation * deviation, axis=axes, keepdims=keepdim)
    return squares / max(count - correction, 0)


@_variance.defjvp
def _variance_jvp(axes, keepdim, count, correction, primals, tangents):
    # torch's var_backward: 2 (x − mean) / (N − correction), with no max(·, 0), and
    # without autodiff's term through the mean (0 in exact arithmetic, NaN next to inf);
    # N = correction (a size-1 dim) divides as C++ doubles do: 2/0 = inf, and inf·0 NaN
    (x,), (dx,) = primals, tangents
    scale = 2.0 / (count - correction) if count != correction else math.inf
    slope = scale * (x - jnp.mean(x, axis=axes, keepdims=True))
    return (
        _variance(x, axes, keepdim, count, correction),
        jnp.sum(slope * dx, axis=axes, keepdims=keepdim),
    )


@register("aten.var.correction")
def var(input, dim=None, *, correction=None, keepdim=False):
    """``sum(|x − mean|²) / max(N − correction, 0)`` over ``dim`` (``correction`` 1 by
    default)."""
    axes = _axes(input.ndim, dim, "var")
    count = math.prod(input.shape[a] for a in axes)
    return _variance(input, axes, keepdim, count, 1 if correction is None else correction)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def _deviation(x, axes, keepdim, count, correction):
    return jnp.sqrt(_variance(x, axes, keepdim, count, correction))


@_deviation.defjvp
def _deviation_jvp(axes, keepdim, count, correction, primals, tangents):
    # torch's std_backward: var_backward(grad / (2·std)), 0 where std == 0 (a constant
    # row: autodiff of sqrt(var) gives inf·0 = NaN there)
    (x,), (dx,) = primals, tangents
    result = _deviation(x, axes, keepdim, count, correction)
    _, dvar = jax.jvp(lambda x: _variance(x, axes, keepdim, count, correction), (x,), (dx,))
    safe = jnp.where(result == 0, 1, result)
    return result, jnp.where(result == 0, 0, dvar / (2 * safe))


@register("aten.std.correction")
def std(input, dim=None, *, correction=None, keepdim=False):
    """``sqrt(var)``, kept whole by ``export.decompositions``: torch's gradient is 0
    where the result is 0 (a constant row), where the decomposed sqrt(var) gives NaN."""
    axes = _axes(input.ndim, dim, "std")
    count = math.prod(input.shape[a] for a in axes)
    return _deviation(input, axes, keepdim, count, 1 if correction is None else correction)


# ----------------------------------------------------------------- extrema
@register("aten.amax.default")
def amax(input, dim=(), keepdim=False):
    return jnp.max(input, axis=_axes(input.ndim, dim, "amax"), keepdims=keepdim)


@register("aten.amin.default")
def amin(input, dim=(), keepdim=False):
    return jnp.min(input, axis=_axes(input.ndim, dim, "amin"), keepdims=keepdim)


def _evenly_distributed(reduce):
    """``reduce`` (a full reduction) differentiated as torch's ``max()``/``min()``: the
    gradient split evenly among the elements equal to the result, or among the NaNs
    when the result is NaN (JAX: NaN everywhere then)."""

    def slope(dx, out, x):
        chosen = jnp.where(jnp.isnan(out), jnp.isnan(x), x == out)
        return jnp.sum(jnp.where(chosen, dx, 0)) / jnp.sum(chosen)

    reduction = jax.custom_jvp(lambda x: reduce(x))
    reduction.defjvps(slope)
    return reduction


_max_all, _min_all = _evenly_distributed(jnp.max), _evenly_distributed(jnp.min)


@register("aten.max.default")
def max_all(input):
    _check_nonempty(input, "max")
    return _max_all(input) if is_floating(input.dtype) else jnp.max(input)


@register("aten.min.default")
def min_all(input):
    _check_nonempty(input, "min")
    return _min_all(input) if is_floating(input.dtype) else jnp.min(input)


def _check_nonempty(input, op):
    if input.size == 0:
        raise ValueError(
            f"{op}: the input is empty; give `dim` to reduce an empty tensor "
            "(torch refuses it too)."
        )


def _select(input, dim, keepdim, pick, op):
    """``(values, indices)`` of the element ``pick`` (argmax/argmin) chooses along ``dim``."""
    if input.ndim == 0:
        _axes(0, dim, op)
        return input, jnp.zeros((), canonical(np.int64))
    (axis,) = _axes(input.ndim, dim, op)
    if input.shape[axis] == 0:
        raise IndexError(
            f"{op}: cannot reduce the empty dim {dim} of a tensor of shape {list(input.shape)}."
        )
    indices = pick(input, axis=axis, keepdims=True)
    values = jnp.take_along_axis(input, indices, axis=axis)
    if not keepdim:
        values, indices = jnp.squeeze(values, axis), jnp.squeeze(indices, axis)
    return values, indices.astype(canonical(np.int64))


@register("aten.max.dim")
def max_dim(input, dim, keepdim=False):
    return _select(input, dim, keepdim, jnp.argmax, "max")


@register("aten.min.dim")
def min_dim(input, dim, keepdim=False):
    return _select(input, dim, keepdim, jnp.argmin, "min")


def _arg(input, dim, keepdim, pick, op):
    if dim is None:
        index = pick(input.reshape(-1))
        shape = (1,) * input.ndim if keepdim else ()
        return index.reshape(shape).astype(canonical(np.int64))
    return _select(input, dim, keepdim, pick, op)[1]


@register("aten.argmax.default")
def argmax(input, dim=None, keepdim=False):
    return _arg(input, dim, keepdim, jnp.argmax, "argmax")


@register("aten.argmin.default")
def argmin(input, dim=None, keepdim=False):
    return _arg(input, dim, keepdim, jnp.argmin, "argmin")


@register("aten.any.default", "aten.any.dim", "aten.any.dims")
def any_(input, dim=None, keepdim=False):
    """``torch.any``: bool, or uint8 for a uint8 input (as torch)."""
    out = jnp.any(input != 0, axis=_axes(input.ndim, dim, "any"), keepdims=keepdim)
    return out.astype(np.uint8) if input.dtype == np.uint8 else out


# ------------------------------------------------------------------- norms
def _norm_forward(x, ord, axes, keepdim):
    magnitude = jnp.abs(x)
    if ord == 0:
        return jnp.sum((x != 0).astype(x.dtype), axis=axes, keepdims=keepdim)
    if ord == 1:
        return jnp.sum(magnitude, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=keepdim))
    if ord == math.inf:
        return jnp.max(magnitude, axis=axes, keepdims=keepdim)
    if ord == -math.inf:
        return jnp.min(magnitude, axis=axes, keepdims=keepdim)
    powered = jnp.sum(magnitude**ord, axis=axes, keepdims=keepdim)
    return powered ** (1.0 / ord)


def _norm_slope(x, ord, axes, norm):
    """torch's ``norm_backward`` for a unit gradient: d norm / d x (``norm`` kept)."""
    sign = torch_sign(x)
    magnitude = jnp.abs(x)
    zero = jnp.zeros((), x.dtype)
    if ord == 0:
        return jnp.zeros_like(x)
    if ord == 1:
        return sign
    if ord == 2:
        return jnp.where(norm == 0, zero, x / norm)
    if math.isinf(ord):
        ties = (magnitude == norm) | jnp.isnan(magnitude)
        return sign * (1 / jnp.sum(ties, axis=axes, keepdims=True)) * ties
    if ord < 1:
        scaled = sign * jnp.where(x == 0, zero, magnitude ** (ord - 1))
        return scaled * norm ** (1 - ord)
    scaled = sign * magnitude ** (ord - 1) if ord < 2 else x * magnitude ** (ord - 2)
    return scaled * jnp.where(norm == 0, zero, 1 / norm ** (ord - 1))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def _vector_norm(x, ord, axes, keepdim):
    return _norm_forward(x, ord, axes, keepdim)


@_vector_norm.defjvp
def _vector_norm_jvp(ord, axes, keepdim, primals, tangents):
    (x,), (dx,) = primals, tangents
    norm = _norm_forward(x, ord, axes, True)
    tangent = jnp.sum(_norm_slope(x, ord, axes, norm) * dx, axis=axes, keepdims=keepdim)
    return (norm if keepdim else jnp.squeeze(norm, axes)), tangent


@register("aten.linalg_vector_norm.default")
def linalg_vector_norm(input, ord=2, dim=None, keepdim=False, *, dtype=None):
    """``torch.linalg.vector_norm``; ``ord`` any real (0 counts non-zeros, ±inf the
    largest/smallest magnitude)."""
    if dtype is not None:
        input = input.astype(canonical(dtype))
    if not is_floating(input.dtype):
        raise TypeError(f"linalg_vector_norm: needs a floating input, got {input.dtype}.")
    axes = _axes(input.ndim, dim, "linalg_vector_norm")
    if input.ndim == 0:
        return _vector_norm(input.reshape(1), float(ord), (0,), False)
    return _vector_norm(input, float(ord), axes, keepdim)


# ----------------------------------------------------------------- softmax
def _in_float32(fn, input, dim, half_to_float):
    """``fn`` computed in float32 for a float16/bfloat16 input, as torch's kernels do,
    and returned in float32 with ``half_to_float`` (else in the input's dtype)."""
    if np.dtype(input.dtype).itemsize >= 4 or not is_floating(input.dtype):
        return fn(input, dim)
    out = fn(input.astype(np.float32), dim)
    return out if half_to_float else out.astype(input.dtype)


@register("aten._softmax.default")
@compiled
def softmax(input, dim, half_to_float=False):
    return _in_float32(functional.softmax, input, dim, half_to_float)


@register("aten._safe_softmax.default")
@compiled
def safe_softmax(input, dim, dtype=None):
    """The softmax of scaled dot-product attention's math path: a row whose scores are
    all ``-inf`` (fully masked) gives 0, value and gradient. Kept whole rather than
    decomposed to ``softmax``, ``eq``, ``all`` and ``where`` (see
    ``jaxgrad.nn.capture.export.decompositions``): ``safe_softmax`` costs what a softmax costs."""
    if dtype is not None:
        input = input.astype(canonical(dtype))
    (axis,) = _axes(input.ndim, dim, "_safe_softmax") or (None,)
    if axis is None:  # a 0-dim tensor: one element, its own row
        return _in_float32(lambda x, _: attention_softmax(x[None], 0)[0], input, None, False)
    return _in_float32(attention_softmax, input, axis, False)


@register("aten._log_softmax.default")
@compiled
def log_softmax(input, dim, half_to_float=False):
    return _in_float32(functional.log_softmax, input, dim, half_to_float)


# -------------------------------------------------------------- cumulative
def _cumulative(input, dim, op):
    (axis,) = _axes(input.ndim, dim, op) or (None,)
    return axis


@register("aten.cumsum.default")
def cumsum(input, dim, *, dtype=None):
    input = _accumulating(input, dtype)
    axis = _cumulative(input, dim, "cumsum")
    return input if axis is None else jnp.cumsum(input, axis=axis)


@register("aten.cumprod.default")
def cumprod(input, dim, *, dtype=None):
    input = _accumulating(input, dtype)
    axis = _cumulative(input, dim, "cumprod")
    return input if axis is None else jnp.cumprod(input, axis=axis)


@register("aten.logcumsumexp.default")
@compiled
def logcumsumexp(input, dim):
    axis = _cumulative(input, dim, "logcumsumexp")
    return input if axis is None else jax.lax.cumlogsumexp(input, axis=axis)


# ----------------------------------------------------------------- sorting
def _sort(input, dim, descending):
    if input.ndim == 0:
        _axes(0, dim, "sort")
        return input, jnp.zeros((), canonical(np.int64))
    (axis,) = _axes(input.ndim, dim, "sort")
    indices = jnp.argsort(input, axis=axis, stable=True, descending=descending)
    return (jnp.take_along_axis(input, indices, axis=axis), indices.astype(canonical(np.int64)))


@register("aten.sort.default")
def sort(input, dim=-1, descending=False):
    """Ties keep their order (torch's CPU sort is stable); NaN sorts as the largest."""
    return _sort(input, dim, descending)


@register("aten.sort.stable")
def sort_stable(input, *, stable=None, dim=-1, descending=False):
    return _sort(input, dim, descending)


@register("aten.topk.default")
def topk(input, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (``largest=False``: smallest) along ``dim``, in sorted order;
    ties go to the lower index."""
    values, indices = _sort(input, dim, largest)
    if input.ndim == 0:
        if k not in (0, 1):
            raise IndexError(f"topk: `k` (={k}) is out of range for a 0-dim tensor.")
        return values, indices
    (axis,) = _axes(input.ndim, dim, "topk")
    if not 0 <= k <= input.shape[axis]:
        raise IndexError(
            f"topk: `k` (={k}) must lie in [0, {input.shape[axis]}] (the size of dim {dim})."
        )
    take = functools.partial(jax.lax.slice_in_dim, start_index=0, limit_index=k, axis=axis)
    return take(values), take(indices)
