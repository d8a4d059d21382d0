"""Pooling of ``torch.nn.functional``: torch's window rules, gradients and indices.

Every pool here takes its windows explicitly: for each spatial dim a static table
of input positions `(out, k)` and a validity mask (positions in the padding or past
the input are invalid), so one code path serves max, average and adaptive pooling
and every rule is a line of integer arithmetic, matched to ATen's kernels:

- output length ``⌊(L + 2p − d(k − 1) − 1 + (s − 1 if ceil_mode)) / s⌋ + 1``, minus one
  in ``ceil_mode`` when the last window would start in the right padding; ``padding``
  at most half the (effective) kernel. flax has neither ``ceil_mode`` nor these checks;
- max pooling pads with −∞ (never chosen: only valid positions compete). The output
  is the first maximum in row-major window order — or the last NaN, as torch's
  ``val > max || isnan(val)`` scan — and the gradient flows to that one element only
  (ties do not split it). ``return_indices`` gives torch's flat index ``h·W + w`` into
  each input plane;
- average pooling divides the window sum by ``divisor_override`` if given, else by
  the window size clipped to the padded input (``count_include_pad=True``, torch's
  default: padding counts, the ``ceil_mode`` overhang does not) or by the number of
  valid positions (``count_include_pad=False``); ``flax.linen.avg_pool`` always
  divides by ``k``;
- adaptive pooling: window ``i`` is ``[⌊i·L/out⌋, ⌈(i + 1)·L/out⌉)``; the windows
  overlap or differ in size when ``out`` does not divide ``L``. An ``output_size``
  entry ``None`` keeps that input size;
- power-average (``lp_pool``) pooling is torch's formula to the letter:
  ``(sign(a)·relu(|a|)·prod(k))^(1/p)`` with ``a`` the average of ``x^p`` (no padding).
  ``sign(a)·relu(|a|)`` is ``a`` but routes the gradient: where a window's ``a`` is 0
  the infinite derivative of ``^(1/p)`` meets ``relu``'s zero and the gradient is 0,
  as torch's, not NaN. ``p = ±inf`` is the max of ``|x|`` (minus the max of ``−|x|``).

Every function takes 1 to 3 spatial dims (`(N, C, L)`, `(N, C, H, W)`,
`(N, C, D, H, W)`, or unbatched without ``N``); flat indices are ``d·H·W + h·W + w``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.functional._args import _is_int, check_input_rank, ntuple


def pool_output_length(where, length, k, s, p, d, ceil_mode) -> int:
    """ATen's ``pooling_output_shape`` for one dim."""
    out = (length + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1  # the last window must start inside the input or the left padding
    if out < 1:
        raise ValueError(
            f"{where}: the output size is {out} for an input size {length}, `kernel_size` "
            f"{k}, `stride` {s}, `padding` {p}, `dilation` {d}: too small an input."
        )
    return out


def _sliding(length, k, s, p, d, out):
    """Positions `(out, k)` of a sliding window and their validity."""
    positions = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
    return positions, (positions >= 0) & (positions < length)


def _adaptive(length, out):
    """Positions `(out, kmax)` of torch's adaptive windows and their validity."""
    starts = (np.arange(out) * length) // out
    ends = -((-(np.arange(out) + 1) * length) // out)  # ceil
    width = int((ends - starts).max())
    positions = starts[:, None] + np.arange(width)[None, :]
    return positions, positions < ends[:, None]


def _affine(positions):
    """``(start, stride, dilation)`` when ``positions[o, j] = start + o·stride +
    j·dilation`` with both steps ≥ 1 (every sliding window, and adaptive windows of
    equal size), else None."""
    out, k = positions.shape
    start = int(positions[0, 0])
    stride = int(positions[1, 0] - start) if out > 1 else 1
    dilation = int(positions[0, 1] - start) if k > 1 else 1
    expected = start + np.arange(out)[:, None] * stride + np.arange(k)[None, :] * dilation
    if stride < 1 or dilation < 1 or not np.array_equal(positions, expected):
        return None
    return start, stride, dilation


def _windows_along(values, positions, axis, length):
    """Windows along one spatial dim: `(.., L, ..)` -> `(.., out, k, ..)`; positions
    outside ``[0, L)`` hold any value (the caller masks them).

    Regular windows are ``k`` strided slices of the input padded with zeros (a reshape
    when they tile the axis): their gradient is a padded sum, where a gather's is a
    scatter-add. Irregular ones (adaptive windows of unequal sizes) are gathered."""
    affine = _affine(positions)
    if affine is None:
        return jnp.take(values, np.clip(positions, 0, length - 1), axis=axis)
    start, stride, dilation = affine
    out, k = positions.shape
    low, high = max(0, -int(positions.min())), max(0, int(positions.max()) - (length - 1))
    widths = [(0, 0)] * values.ndim
    widths[axis] = (low, high)
    padded = jnp.pad(values, widths) if low or high else values
    if dilation == 1 and stride == k:  # windows tile the axis: a reshape, no copy
        first = start + low
        tiles = jax.lax.slice_in_dim(padded, first, first + out * k, axis=axis)
        return tiles.reshape(tiles.shape[:axis] + (out, k) + tiles.shape[axis + 1 :])
    slices = []
    for j in range(k):
        first = start + j * dilation + low
        slices.append(
            jax.lax.slice_in_dim(padded, first, first + (out - 1) * stride + 1, stride, axis)
        )
    return jnp.stack(slices, axis=axis + 1)


def _gather(x, tables):
    """Windows of ``x`` `(N, C, *spatial)`: `(N, C, *out, K)` values and `(*out, K)`
    flat plane indices and validity, ``K`` the product of the window sizes."""
    n = len(tables)
    values = x
    for axis, (positions, _) in enumerate(tables):
        values = _windows_along(values, positions, 2 + 2 * axis, x.shape[2 + axis])
    # (N, C, o1, k1, o2, k2) -> (N, C, o1, o2, k1, k2) -> (N, C, o1, o2, K)
    order = [0, 1] + [2 + 2 * i for i in range(n)] + [3 + 2 * i for i in range(n)]
    values = jnp.transpose(values, order)
    out = values.shape[2 : 2 + n]
    values = values.reshape(values.shape[: 2 + n] + (-1,))
    flat = np.zeros((), np.int64)
    valid = np.ones((), bool)
    strides = [math.prod(x.shape[3 + i :]) for i in range(n)]
    for axis, (positions, ok) in enumerate(tables):
        shape = [1] * (2 * n)
        shape[axis], shape[n + axis] = positions.shape
        flat = flat + (positions * strides[axis]).reshape(shape)
        valid = valid & ok.reshape(shape)
    return values, flat.reshape(out + (-1,)), valid.reshape(out + (-1,))


def _select_max(values, flat, valid, return_indices):
    """torch's max: first maximum among valid positions, or the last NaN.

    ATen's scan over the window, unrolled over its ``K`` positions as elementwise
    selects: position ``j`` takes over when ``value > best or isnan(value)``; a window
    with no such position (all −∞) keeps its first valid position. The chosen value is
    taken (exact, signed zeros included), so the gradient reaches it alone. On XLA:CPU
    this made a max-pool's forward and backward 2–10× faster than finding the position
    with argmax reductions (measured on 2×2, 3×3 stride 2 and 3×3 stride 1 windows;
    a summed one-hot is faster still at 2×2 but turns −0.0 into +0.0)."""
    k = values.shape[-1]
    valid = np.broadcast_to(valid, valid.shape[:-1] + (k,) if valid.ndim else (k,))
    choice = jnp.asarray(np.argmax(valid, axis=-1))  # first valid position
    scores = jax.lax.stop_gradient(values)
    floating = jnp.issubdtype(values.dtype, jnp.floating)
    lowest = -jnp.inf if floating else jnp.iinfo(values.dtype).min
    best = jnp.full(values.shape[:-1], lowest, values.dtype)
    for j in range(k):
        value = scores[..., j]
        take = (value > best) | jnp.isnan(value) if floating else value > best
        if not valid[..., j].all():
            take = take & valid[..., j]
        best = jnp.where(take, value, best)
        choice = jnp.where(take, j, choice)
    output = jnp.take_along_axis(values, choice[..., None], axis=-1)[..., 0]
    if not return_indices:
        return output
    index_dtype = jax.dtypes.canonicalize_dtype(np.int64)
    flat = jnp.broadcast_to(jnp.asarray(flat, index_dtype), values.shape)
    return output, jnp.take_along_axis(flat, choice[..., None], axis=-1)[..., 0]


def _batched(where, input, n):
    batched = check_input_rank(where, input, n)
    return batched, (input if batched else input[None])


def _unbatch(result, batched):
    if batched:
        return result
    if isinstance(result, tuple):
        return tuple(r[0] for r in result)
    return result[0]


def _window_args(where, n, kernel_size, stride, padding, dilation):
    kernel = ntuple("kernel_size", kernel_size, n, minimum=1, where=where)
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel  # torch: stride defaults to kernel_size
    stride = ntuple("stride", stride, n, minimum=1, where=where)
    padding = ntuple("padding", padding, n, minimum=0, where=where)
    dilation = ntuple("dilation", dilation, n, minimum=1, where=where)
    return kernel, stride, padding, dilation


def _max_pool(where, n, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    kernel, stride, padding, dilation = _window_args(
        where, n, kernel_size, stride, padding, dilation
    )
    for k, p, d in zip(kernel, padding, dilation):
        if 2 * p > d * (k - 1) + 1:
            raise ValueError(
                f"{where}: `padding` (={padding}) must be at most half of the "
                f"effective kernel size (`kernel_size`={kernel}, "
                f"`dilation`={dilation})."
            )
    batched, x = _batched(where, input, n)
    if not all(isinstance(length, int) for length in x.shape[2:]):
        return _unbatch(
            _max_pool_symbolic(
                where, x, kernel, stride, padding, dilation, ceil_mode, return_indices
            ),
            batched,
        )
    tables = []
    for length, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation):
        out = pool_output_length(where, length, k, s, p, d, ceil_mode)
        tables.append(_sliding(length, k, s, p, d, out))
    values, flat, valid = _gather(x, tables)
    return _unbatch(_select_max(values, flat, valid, return_indices), batched)


def _max_pool_symbolic(where, x, kernel, stride, padding, dilation, ceil_mode, return_indices):
    """The max pool of ``_max_pool`` where spatial sizes are ``jax.export`` dimension
    variables (a saved artifact): one variadic ``reduce_window`` over (value, flat
    index) pairs, keeping torch's choice in any combining order: a NaN over a number
    (the last NaN among NaNs), else the larger value, else the first position. Padding
    is (-inf, past every index): a window's real positions win its ties."""
    extra = _ceil_padding(
        where, ceil_mode, [d * (k - 1) + 1 for k, d in zip(kernel, dilation)], stride, padding
    )
    spatial = x.shape[2:]
    index_dtype = jax.dtypes.canonicalize_dtype(np.int64)
    flat = jnp.zeros(spatial, index_dtype)
    for axis in range(len(spatial)):
        place = jax.lax.broadcasted_iota(index_dtype, spatial, axis)
        for later in spatial[axis + 1 :]:
            place = place * later
        flat = flat + place
    flat = jnp.broadcast_to(flat, x.shape)

    def combine(a, b):
        (v1, i1), (v2, i2) = a, b
        n1, n2 = jnp.isnan(v1), jnp.isnan(v2)
        take = jnp.where(n1 | n2, n2 & (~n1 | (i2 > i1)), (v2 > v1) | ((v2 == v1) & (i2 < i1)))
        return jnp.where(take, v2, v1), jnp.where(take, i2, i1)

    values, indices = jax.lax.reduce_window(
        (x, flat),
        (jnp.array(-jnp.inf, x.dtype), jnp.array(jnp.iinfo(index_dtype).max, index_dtype)),
        combine,
        (1, 1, *kernel),
        (1, 1, *stride),
        ((0, 0), (0, 0), *((p, p + e) for p, e in zip(padding, extra))),
        window_dilation=(1, 1, *dilation),
    )
    return (values, indices) if return_indices else values


def _ceil_padding(where, ceil_mode, extents, stride, padding) -> list:
    """The right padding beyond ``padding`` that makes a VALID window count torch's
    ``ceil_mode`` output size where the sizes are symbolic: ``stride - 1``, when torch's
    correction (a last window starting past the left-padded input is dropped) cannot
    apply, i.e. ``padding + stride <= extent`` (the window's effective size); zero
    without ``ceil_mode``."""
    if not ceil_mode:
        return [0] * len(stride)
    for e, s, p in zip(extents, stride, padding):
        if p + s > e:
            raise ValueError(
                f"{where}: ceil_mode=True with symbolic sizes is exported only where "
                f"`padding` + `stride` is at most the window ({p} + {s} > {e} here: torch "
                "then drops a last window by the sizes' values); convert with "
                "`from_torch(..., dynamic_shapes=None)` for this one."
            )
    return [s - 1 for s in stride]


def _avg_pool_symbolic(
    x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, where
):
    """``_avg_pool`` where spatial sizes are ``jax.export`` dimension variables: sums by
    ``reduce_window``, and the divisor likewise over ones: the window clipped to the
    padded input (``count_include_pad``) or its real elements only."""
    extra = _ceil_padding(where, ceil_mode, kernel, stride, padding)
    window, strides = (1, 1, *kernel), (1, 1, *stride)
    pads = ((0, 0), (0, 0), *((p, p + e) for p, e in zip(padding, extra)))
    total = jax.lax.reduce_window(x, jnp.array(0, x.dtype), jax.lax.add, window, strides, pads)
    if divisor_override is not None:
        return total / jnp.asarray(divisor_override, x.dtype)
    ones = jnp.ones((1, 1, *x.shape[2:]), x.dtype)
    if count_include_pad:  # the padding counts, what ceil_mode adds beyond it does not
        ones = jax.lax.pad(
            ones, jnp.array(1, x.dtype), ((0, 0, 0), (0, 0, 0), *((p, p, 0) for p in padding))
        )
        pads = ((0, 0), (0, 0), *((0, e) for e in extra))
    divisor = jax.lax.reduce_window(ones, jnp.array(0, x.dtype), jax.lax.add, window, strides, pads)
    return total / divisor


def max_pool1d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """``torch.nn.functional.max_pool1d``: input `(N, C, L)` or `(C, L)`; with
    ``return_indices``, ``(output, indices)`` (indices into each length-``L`` row)."""
    return _max_pool(
        "max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """``torch.nn.functional.max_pool2d``: input `(N, C, H, W)` or `(C, H, W)`; with
    ``return_indices``, ``(output, indices)`` (flat ``h·W + w`` into each plane)."""
    return _max_pool(
        "max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool3d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """``torch.nn.functional.max_pool3d``: input `(N, C, D, H, W)` or `(C, D, H, W)`; with
    ``return_indices``, ``(output, indices)`` (flat ``d·H·W + h·W + w`` into each volume)."""
    return _max_pool(
        "max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def _avg_pool(
    where, n, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    kernel, stride, padding, _ = _window_args(where, n, kernel_size, stride, padding, 1)
    for k, p in zip(kernel, padding):
        if 2 * p > k:
            raise ValueError(
                f"{where}: `padding` (={padding}) must be at most half of "
                f"`kernel_size` (={kernel})."
            )
    if divisor_override is not None and (not _is_int(divisor_override) or divisor_override == 0):
        raise ValueError(
            f"{where}: `divisor_override` (={divisor_override!r}) must be a non-zero int or None."
        )
    batched, x = _batched(where, input, n)
    if not all(isinstance(length, int) for length in x.shape[2:]):
        return _unbatch(
            _avg_pool_symbolic(
                x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, where
            ),
            batched,
        )
    tables, sizes = [], []
    for length, k, s, p in zip(x.shape[2:], kernel, stride, padding):
        out = pool_output_length(where, length, k, s, p, 1, ceil_mode)
        positions, valid = _sliding(length, k, s, p, 1, out)
        tables.append((positions, valid))
        # torch: the window clipped to the padded input [-p, length + p)
        sizes.append(np.minimum(positions[:, 0] + k, length + p) - positions[:, 0])
    values, _, valid = _gather(x, tables)
    total = jnp.sum(jnp.where(valid, values, 0), axis=-1)
    if divisor_override is not None:
        divisor = np.asarray(divisor_override)
    elif count_include_pad:
        divisor = _outer_product(sizes)
    else:
        divisor = valid.sum(axis=-1)
    return _unbatch(total / jnp.asarray(divisor, x.dtype), batched)


def _outer_product(sizes):
    """The product of per-dim window sizes over the output grid."""
    grid = np.ones((), np.int64)
    for axis, size in enumerate(sizes):
        shape = [1] * len(sizes)
        shape[axis] = size.shape[0]
        grid = grid * size.reshape(shape)
    return grid


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """``torch.nn.functional.avg_pool1d``: input `(N, C, L)` or `(C, L)`."""
    return _avg_pool(
        "avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None
    )


def avg_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """``torch.nn.functional.avg_pool2d``: input `(N, C, H, W)` or `(C, H, W)`."""
    return _avg_pool(
        "avg_pool2d",
        2,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def avg_pool3d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """``torch.nn.functional.avg_pool3d``: input `(N, C, D, H, W)` or `(C, D, H, W)`."""
    return _avg_pool(
        "avg_pool3d",
        3,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def _output_size(where, n, output_size, spatial) -> tuple[int, ...]:
    sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * n
    if len(sizes) == 1 and n > 1:
        sizes = tuple(sizes) * n
    if len(sizes) != n or not all(s is None or (_is_int(s) and s >= 1) for s in sizes):
        raise ValueError(
            f"{where}: `output_size` (={output_size!r}) must be a positive int, "
            f"None or a tuple of {n} of them."
        )
    return tuple(length if s is None else int(s) for s, length in zip(sizes, spatial))


def _adaptive_pool(where, n, input, output_size, kind, return_indices=False):
    batched, x = _batched(where, input, n)
    sizes = _output_size(where, n, output_size, x.shape[2:])
    for length in x.shape[2:]:
        if length == 0:
            raise ValueError(
                f"{where}: empty spatial dimension in input of shape {tuple(input.shape)}."
            )
    tables = [_adaptive(length, out) for length, out in zip(x.shape[2:], sizes)]
    values, flat, valid = _gather(x, tables)
    if kind == "max":
        return _unbatch(_select_max(values, flat, valid, return_indices), batched)
    total = jnp.sum(jnp.where(valid, values, 0), axis=-1)
    return _unbatch(total / jnp.asarray(valid.sum(axis=-1), x.dtype), batched)


def adaptive_avg_pool1d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool1d``: input `(N, C, L)` or `(C, L)`."""
    return _adaptive_pool("adaptive_avg_pool1d", 1, input, output_size, "avg")


def adaptive_avg_pool2d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool2d``: input `(N, C, H, W)` or `(C, H, W)`."""
    return _adaptive_pool("adaptive_avg_pool2d", 2, input, output_size, "avg")


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool1d``."""
    return _adaptive_pool("adaptive_max_pool1d", 1, input, output_size, "max", return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool2d``."""
    return _adaptive_pool("adaptive_max_pool2d", 2, input, output_size, "max", return_indices)


def adaptive_avg_pool3d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool3d``: input `(N, C, D, H, W)` or
    `(C, D, H, W)`."""
    return _adaptive_pool("adaptive_avg_pool3d", 3, input, output_size, "avg")


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """``torch.nn.functional.adaptive_max_pool3d``."""
    return _adaptive_pool("adaptive_max_pool3d", 3, input, output_size, "max", return_indices)


def _lp_pool(where, n, input, norm_type, kernel_size, stride, ceil_mode):
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)):
        raise TypeError(f"{where}: `norm_type` (={norm_type!r}) must be a number.")
    if norm_type == 0:  # torch: ZeroDivisionError computing the 1/p power
        raise ValueError(f"{where}: `norm_type` (=0) must be non-zero: the power is 1/p.")
    kernel = ntuple("kernel_size", kernel_size, n, minimum=1, where=where)
    if math.isinf(norm_type):
        sign = 1 if norm_type > 0 else -1
        return sign * _max_pool(
            where, n, sign * jnp.abs(input), kernel, stride, 0, 1, ceil_mode, False
        )
    # torch's stride=None is kernel_size, as for avg_pool
    out = _avg_pool(where, n, input**norm_type, kernel, stride, 0, ceil_mode, True, None)
    scaled = jnp.sign(out) * _torch_relu(jnp.abs(out)) * math.prod(kernel)
    return scaled ** (1.0 / norm_type)


def _torch_relu(x):
    """relu with torch's backward ``x <= 0 ? 0 : grad``: a NaN passes its gradient on
    (``jax.nn.relu``'s ``x > 0 ? grad : 0`` stops it), as a NaN window must in torch."""
    return jnp.where(x <= 0, jnp.zeros((), x.dtype), x)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """``torch.nn.functional.lp_pool1d``: ``(Σ x^p)^(1/p)`` over each window of
    `(N, C, L)` or `(C, L)`, torch's gradient at 0 (see the module docstring)."""
    return _lp_pool("lp_pool1d", 1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """``torch.nn.functional.lp_pool2d``: input `(N, C, H, W)` or `(C, H, W)`."""
    return _lp_pool("lp_pool2d", 2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """``torch.nn.functional.lp_pool3d``: input `(N, C, D, H, W)` or `(C, D, H, W)`."""
    return _lp_pool("lp_pool3d", 3, input, norm_type, kernel_size, stride, ceil_mode)
