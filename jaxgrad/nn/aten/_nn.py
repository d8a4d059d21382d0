"""Neural-network ATen ops: matrix products, convolution, normalisation, pooling,
resampling (upsampling, ``grid_sampler``), embedding bags and pairwise distances.

Each entry takes the ATen schema's arguments and computes what torch's CPU kernel
computes, value *and* derivative, in the input's dtype (matmuls at precision
``highest``: a float32 matmul is exact on CPU in torch). Where ``jaxgrad.nn.functional``
already holds torch's semantics (convolution, pooling with indices and ``ceil_mode``,
batch / layer / group norm, linear resampling weights) the entry calls it and only
adapts ATen's argument forms. ATen's conventions beyond ``torch.nn.functional``:

- normalisation ops also return the statistics torch saves for its backward:
  ``(output, mean, rstd)`` with ``rstd = 1 / √(var + eps)`` (biased variance), in the
  parameters' dtype when a reduced-precision input meets float32 parameters. Batch
  norm in evaluation mode saves nothing: both are `(0,)`. Running statistics are
  never differentiated (torch refuses ``requires_grad`` on them);
  ``_native_batch_norm_legit_functional`` returns the updated running statistics
  (momentum = weight of the new batch, unbiased variance) as outputs 3 and 4;
- upsampling ops take the output size and, optionally, the scale factors the
  caller gave: a scale factor ``s`` samples the input at ``1 / s`` steps even where
  ``L_in · s`` is not the output size (``align_corners=True`` ignores it);
- ``grid_sampler_2d`` / ``_3d`` take ``interpolation_mode`` 0 bilinear, 1 nearest,
  2 bicubic and ``padding_mode`` 0 zeros, 1 border, 2 reflection; coordinates
  clipped to the border pass no gradient to the grid, as in torch;
- ``_embedding_bag`` leaves entries equal to ``padding_idx`` out of sums, means (and
  their counts) and maxima; ``max`` passes each feature's gradient to the first
  maximal row only;
- ``_cdist_forward`` follows torch's choice of algorithm (for ``p = 2``, the
  ``‖x‖² + ‖y‖² − 2x·y`` matrix-product form beyond 25 rows, or as
  ``compute_mode`` says) and torch's derivative, which uses the differences
  whichever form computed the distances: zero at zero distance, and for ``p = ∞``
  the whole gradient to every coordinate that attains the maximum.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxgrad.nn.aten._table import register
from jaxgrad.nn.functional._conv import (
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
    transposed_output_size,
)
from jaxgrad.nn.functional._embedding import embedding
from jaxgrad.nn.functional._layernorm import layer_norm
from jaxgrad.nn.functional._lowering import convolve as lowered_convolution
from jaxgrad.nn.functional._norm import batch_norm_with_stats, group_norm
from jaxgrad.nn.functional._pool import _adaptive_pool, _avg_pool, _max_pool
from jaxgrad.nn.functional._upsample import _linear_weights, _nearest_index

HIGHEST = lax.Precision.HIGHEST


# ------------------------------------------------------------ matrix products
def _matmul(a, b):
    return jnp.matmul(a, b, precision=HIGHEST)


def _beta_alpha(input, product, beta, alpha):
    """torch's ``beta·input + alpha·product``; ``beta = 0`` ignores ``input`` (NaN too)."""
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (input if beta == 1 else input * beta)


@register("aten.mm.default", "aten.bmm.default")
def mm(input, mat2):
    return _matmul(input, mat2)


@register("aten.addmm.default", "aten.addmv.default")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    return _beta_alpha(input, _matmul(mat1, mat2), beta, alpha)


@register("aten.addbmm.default")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _beta_alpha(input, jnp.sum(_matmul(batch1, batch2), axis=0), beta, alpha)


# ---------------------------------------------------------------- convolution
_CONVOLUTIONS = {1: (conv1d, conv_transpose1d), 2: (conv2d, conv_transpose2d)}


def _conv_nd(input, weight, stride, padding, dilation, transposed, output_padding, groups):
    """Any number of spatial dims: ``lax``'s default dimension numbers are torch's
    layout (`N C *spatial`, `O I *kernel`). The transposed convolution is, as torch
    defines it, the transpose of the convolution taking its output back to its input
    (cropped to the input's size: ``output_padding`` may add positions no window of
    that convolution reaches)."""
    n = weight.ndim - 2
    stride, padding, dilation, output_padding = (
        tuple(v) * n if len(v) == 1 else tuple(v)
        for v in (stride, padding, dilation, output_padding)
    )

    def convolve(x):
        return lowered_convolution(
            x, weight, stride, [(p, p) for p in padding], dilation, groups, precision=HIGHEST
        )

    if not transposed:
        return convolve(input)
    crop = (Ellipsis,) + tuple(slice(0, length) for length in input.shape[2:])
    size = transposed_output_size(
        input.shape[2:], weight.shape[2:], stride, padding, output_padding, dilation
    )
    template = jax.ShapeDtypeStruct((input.shape[0], weight.shape[1] * groups) + size, input.dtype)
    (output,) = jax.linear_transpose(lambda z: convolve(z)[crop], template)(input)
    return output


@register("aten.convolution.default")
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """`(N, C_in, *spatial)` with weight `(C_out, C_in / groups, *kernel)`, or
    `(C_in, C_out / groups, *kernel)` when ``transposed``; 1-d and 2-d run
    ``functional``'s convolutions, other ranks ``_conv_nd``."""
    n = weight.ndim - 2
    if n in _CONVOLUTIONS:
        forward, transpose = _CONVOLUTIONS[n]
        if transposed:
            return transpose(
                input,
                weight,
                bias,
                tuple(stride),
                tuple(padding),
                tuple(output_padding),
                groups,
                tuple(dilation),
            )
        return forward(input, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups)
    output = _conv_nd(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        output = output + bias.reshape((1, -1) + (1,) * n)
    return output


# -------------------------------------------------------------- normalisation
def _stats_dtype(input, *params):
    """The dtype torch computes and saves statistics in: the parameters' (float32
    with a bfloat16 / float16 input), else the input's."""
    for param in params:
        if param is not None:
            return param.dtype
    return input.dtype


def _mean_rstd(x, axes, eps):
    """Mean and ``1 / √(biased var + eps)`` over ``axes`` (kept as size-1 dims)."""
    mean = jnp.mean(x, axis=axes, keepdims=True)
    centred = x - mean
    var = jnp.mean(centred * centred, axis=axes, keepdims=True)
    return mean, 1 / jnp.sqrt(var + eps)


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """``(output, save_mean, save_rstd, new_running_mean, new_running_var)``."""
    dtype = _stats_dtype(input, weight, bias, running_mean, running_var)
    x = input.astype(dtype)
    if running_mean is not None:
        running_mean = lax.stop_gradient(running_mean)
        running_var = lax.stop_gradient(running_var)
    use_batch = training or running_mean is None
    output, new_mean, new_var = batch_norm_with_stats(
        x, running_mean, running_var, weight, bias, use_batch, momentum, eps
    )
    if use_batch:
        axes = (0, *range(2, x.ndim))
        mean, rstd = (s.reshape(-1) for s in _mean_rstd(x, axes, eps))
    else:
        mean = rstd = jnp.zeros((0,), dtype)
    if new_mean is not None:
        new_mean, new_var = lax.stop_gradient(new_mean), lax.stop_gradient(new_var)
    return output.astype(input.dtype), mean, rstd, new_mean, new_var


@register("aten.native_batch_norm.default")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """``(output, save_mean, save_rstd)``. Training with running statistics updates
    them in place, which a functional program cannot: refused (a functionalised
    capture, as ``torch.export`` makes, records ``_native_batch_norm_legit_functional``
    instead, which returns them)."""
    if training and running_mean is not None:
        raise ValueError(
            "aten.native_batch_norm in training writes its inputs running_mean and "
            "running_var in place, which jaxgrad's functional program would drop; capture "
            "the model with "
            "torch.export (from_torch(module, example=..., capture='export')), whose "
            "functionalised graph returns the updated statistics"
        )
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)[:3]


@register("aten._native_batch_norm_legit.no_stats")
def native_batch_norm_no_stats(input, weight, bias, training, momentum, eps):
    return _batch_norm(input, weight, bias, None, None, True, momentum, eps)[:3]


@register("aten._native_batch_norm_legit_functional.default")
def native_batch_norm_functional(
    input, weight, bias, running_mean, running_var, training, momentum, eps
):
    """``(output, save_mean, save_rstd, new_running_mean, new_running_var)``."""
    return _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register("aten._native_batch_norm_legit_no_training.default")
def native_batch_norm_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    return _batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@register("aten.native_layer_norm.default")
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``(output, mean, rstd)``; the statistics keep the normalised dims as size 1."""
    x = input.astype(_stats_dtype(input, weight, bias))
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    output = layer_norm(x, tuple(normalized_shape), weight, bias, eps, _where="native_layer_norm")
    return (output.astype(input.dtype), *_mean_rstd(x, axes, eps))


@register("aten.native_group_norm.default")
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """``(output, mean, rstd)``, the statistics `(N, group)`."""
    x = input.astype(_stats_dtype(input, weight, bias))
    if x.size == 0:  # an empty batch: nothing to normalise (a reshape could not infer -1)
        empty = jnp.zeros((N, group), x.dtype)
        return input, empty, empty
    output = group_norm(x, group, weight, bias, eps)
    mean, rstd = _mean_rstd(x.reshape((N, group, -1)), (2,), eps)
    return output.astype(input.dtype), mean[..., 0], rstd[..., 0]


# -------------------------------------------------------------------- pooling
def _pool(n, pool, input, *args):
    """``pool(input, *args)`` over ``n`` spatial dims. An empty batch (or no channels)
    takes its result's shape from one sample: the functional pools' window reshapes
    cannot infer a size from nothing."""
    if input.size:
        return pool(input, *args)
    lead = input.shape[:-n]
    probe = jax.eval_shape(
        lambda x: pool(x, *args),
        jax.ShapeDtypeStruct(tuple(max(d, 1) for d in lead) + input.shape[-n:], input.dtype),
    )
    return jax.tree_util.tree_map(
        lambda result: jnp.zeros(lead + result.shape[len(lead) :], result.dtype), probe
    )


@register("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``(output, indices)``, indices flat ``h·W + w`` into each input plane."""
    return _pool(
        2,
        functools.partial(_max_pool, "max_pool2d_with_indices", 2),
        input,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        True,
    )


@register("aten.max_pool3d_with_indices.default")
def max_pool3d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """``(output, indices)``, indices flat ``(d·H + h)·W + w`` into each input volume."""
    return _pool(
        3,
        functools.partial(_max_pool, "max_pool3d_with_indices", 3),
        input,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        True,
    )


@register("aten.avg_pool2d.default")
def avg_pool2d(
    input,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    return _pool(
        2,
        functools.partial(_avg_pool, "avg_pool2d", 2),
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


@register("aten.avg_pool3d.default")
def avg_pool3d(
    input,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    return _pool(
        3,
        functools.partial(_avg_pool, "avg_pool3d", 3),
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


@register("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(input, output_size):
    return _pool(
        2,
        functools.partial(_adaptive_pool, "_adaptive_avg_pool2d", 2),
        input,
        tuple(output_size),
        "avg",
    )


@register("aten._adaptive_avg_pool3d.default")
def adaptive_avg_pool3d(input, output_size):
    return _pool(
        3,
        functools.partial(_adaptive_pool, "_adaptive_avg_pool3d", 3),
        input,
        tuple(output_size),
        "avg",
    )


@register("aten.adaptive_max_pool2d.default")
def adaptive_max_pool2d(input, output_size):
    """``(output, indices)``."""
    return _pool(
        2,
        functools.partial(_adaptive_pool, "adaptive_max_pool2d", 2),
        input,
        tuple(output_size),
        "max",
        True,
    )


@register("aten.adaptive_max_pool3d.default")
def adaptive_max_pool3d(input, output_size):
    """``(output, indices)``."""
    return _pool(
        3,
        functools.partial(_adaptive_pool, "adaptive_max_pool3d", 3),
        input,
        tuple(output_size),
        "max",
        True,
    )


# ----------------------------------------------------------------- upsampling
def _source_scale(length_in, length_out, scale, align_corners):
    """ATen's ``area_pixel_compute_scale``: input steps per output step."""
    if align_corners:
        return (length_in - 1) / (length_out - 1) if length_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else length_in / length_out


def _cubic_near(x, a):
    """Cubic convolution's kernel for ``|x| <= 1``."""
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic_far(x, a):
    """Cubic convolution's kernel for ``1 < |x| < 2``."""
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _cubic_coefficients(t, a=-0.75):
    """The four weights of torch's cubic convolution (``A = −0.75``) at offset ``t``
    from the left neighbour; numpy or JAX arrays."""
    return [_cubic_far(t + 1, a), _cubic_near(t, a), _cubic_near(1 - t, a), _cubic_far(2 - t, a)]


def _linear_table(length_in, length_out, scale, align_corners):
    low, high, lam = _linear_weights(length_in, length_out, scale, align_corners)
    return np.stack([low, high], 1), np.stack([1 - lam, lam], 1)


def _cubic_table(length_in, length_out, scale, align_corners):
    step = _source_scale(length_in, length_out, scale, align_corners)
    out = np.arange(length_out, dtype=np.float64)
    source = out * step if align_corners else (out + 0.5) * step - 0.5  # not clamped
    low = np.minimum(np.floor(source), length_in - 1)
    t = np.clip(source - low, 0.0, 1.0)
    index = np.clip(low.astype(np.int64)[:, None] + np.arange(-1, 3), 0, length_in - 1)
    return index, np.stack(_cubic_coefficients(t), 1)


def _triangle(x):
    return np.maximum(1 - np.abs(x), 0.0)


def _keys_cubic(x):
    """Keys' cubic with ``A = −0.5`` (PIL's, which torch's anti-aliased bicubic follows)."""
    x = np.abs(x)
    return np.where(x < 1, _cubic_near(x, -0.5), np.where(x < 2, _cubic_far(x, -0.5), 0.0))


def _antialias_table(length_in, length_out, scale, align_corners, *, filter=_triangle, taps=2):
    """torch's anti-aliased weights (``_compute_weights_aa``): ``filter`` (``taps``
    wide) stretched by the scale when downsampling, normalised to sum 1."""
    step = _source_scale(length_in, length_out, scale, align_corners)
    support = taps / 2 * step if step >= 1.0 else taps / 2
    width = int(math.ceil(support)) * 2 + 1
    invscale = 1.0 / step if step >= 1.0 else 1.0
    center = step * (np.arange(length_out) + 0.5)
    start = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    stop = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), length_in)
    size = np.clip(stop - start, 0, width)
    offsets = np.arange(width)
    weight = filter((start[:, None] + offsets - center[:, None] + 0.5) * invscale)
    weight = np.where(offsets < size[:, None], weight, 0.0)
    total = weight.sum(1, keepdims=True)
    weight = np.where(total != 0, weight / np.where(total != 0, total, 1), weight)
    return np.minimum(start[:, None] + offsets, length_in - 1), weight


def _nearest_table(length_in, length_out, scale, align_corners):
    return _nearest_index(length_in, length_out, scale)[:, None], None


def _resample(input, output_size, scales, table, align_corners=False):
    """Separable resampling of `(N, C, *spatial)`: for each spatial dim, output ``i``
    is ``Σ_t weight[i, t] · input[index[i, t]]`` (``table`` gives both, static)."""
    y = input
    spatial = input.shape[2:]
    scales = scales if scales is not None else (None,) * len(spatial)
    for axis, (length_in, length_out, scale) in enumerate(zip(spatial, output_size, scales)):
        dim = 2 + axis
        index, weight = table(length_in, int(length_out), scale, align_corners)
        gathered = jnp.take(y, index, axis=dim)  # (.., out, taps, ..)
        if weight is None:
            y = jnp.squeeze(gathered, dim + 1)
            continue
        shape = [1] * gathered.ndim
        shape[dim], shape[dim + 1] = weight.shape
        y = jnp.sum(gathered * jnp.asarray(weight.reshape(shape), y.dtype), axis=dim + 1)
    return y


def _vec_sizes(input, output_size, scale_factors):
    """ATen's ``.vec`` overloads: the output size given, or ``⌊L · s⌋``."""
    spatial = input.shape[2:]
    if output_size is not None:
        return tuple(output_size), None
    scales = tuple(float(s) for s in scale_factors)
    return tuple(int(length * s) for length, s in zip(spatial, scales)), scales


@register("aten.upsample_nearest2d.vec")
def upsample_nearest2d_vec(input, output_size, scale_factors):
    sizes, scales = _vec_sizes(input, output_size, scale_factors)
    return _resample(input, sizes, scales, _nearest_table)


@register("aten.upsample_bilinear2d.vec")
def upsample_bilinear2d_vec(input, output_size, align_corners, scale_factors):
    sizes, scales = _vec_sizes(input, output_size, scale_factors)
    return _resample(input, sizes, scales, _linear_table, align_corners)


@register("aten.upsample_bilinear2d.default")
def upsample_bilinear2d(input, output_size, align_corners, scales_h=None, scales_w=None):
    return _resample(input, output_size, (scales_h, scales_w), _linear_table, align_corners)


@register("aten.upsample_trilinear3d.default")
def upsample_trilinear3d(
    input, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None
):
    return _resample(
        input, output_size, (scales_d, scales_h, scales_w), _linear_table, align_corners
    )


@register("aten.upsample_bicubic2d.default")
def upsample_bicubic2d(input, output_size, align_corners, scales_h=None, scales_w=None):
    """Cubic convolution (``A = −0.75``) over the 4 nearest inputs per dim, indices
    clamped at the borders."""
    return _resample(input, output_size, (scales_h, scales_w), _cubic_table, align_corners)


@register("aten._upsample_bilinear2d_aa.default")
def upsample_bilinear2d_aa(input, output_size, align_corners, scales_h=None, scales_w=None):
    return _resample(input, output_size, (scales_h, scales_w), _antialias_table, align_corners)


@register("aten._upsample_bicubic2d_aa.default")
def upsample_bicubic2d_aa(input, output_size, align_corners, scales_h=None, scales_w=None):
    return _resample(
        input,
        output_size,
        (scales_h, scales_w),
        functools.partial(_antialias_table, filter=_keys_cubic, taps=4),
        align_corners,
    )


# --------------------------------------------------------------- grid sampler
_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _clip(x, size):
    """torch's ``clip_coordinates``: into ``[0, size − 1]``; at or beyond a border the
    coordinate is the border and passes no gradient."""
    return jnp.where(x <= 0, 0.0, jnp.where(x >= size - 1, size - 1.0, x)).astype(x.dtype)


def _reflect(x, twice_low, twice_high):
    """torch's ``reflect_coordinates``: fold ``x`` into ``[low, high]`` by reflections."""
    if twice_low == twice_high:
        return jnp.zeros_like(x)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = x - low
    x = jnp.where(x < 0, -x, x)
    extra = jnp.fmod(x, span)
    flips = jnp.floor(x / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coordinate(x, size, padding_mode, align_corners):
    if padding_mode == _BORDER:
        return _clip(x, size)
    if padding_mode == _REFLECTION:
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        return _clip(x, size)
    return x


def _unnormalize(coordinate, size, align_corners):
    """``[−1, 1]`` to pixel coordinates: corner pixels' centres (``align_corners``) or
    their outer edges."""
    if align_corners:
        return (coordinate + 1) / 2 * (size - 1)
    return ((coordinate + 1) * size - 1) / 2


def _gather_points(flat, sizes, positions):
    """``flat`` `(N, C, P)` at integer ``positions`` (one `(K, N, Q)` array per spatial
    dim, slowest first): `(N, C, K, Q)`; points outside the input read 0 and pass no
    gradient."""
    inside = functools.reduce(
        jnp.logical_and, [(p >= 0) & (p < size) for p, size in zip(positions, sizes)]
    )
    index = jnp.zeros_like(positions[0])
    for p, size in zip(positions, sizes):
        index = index * size + jnp.clip(p, 0, size - 1)
    k, n, q = index.shape
    index = jnp.moveaxis(index, 0, 1).reshape((n, 1, k * q))
    values = jnp.take_along_axis(flat, index, axis=2).reshape((n, flat.shape[1], k, q))
    return jnp.where(jnp.moveaxis(inside, 0, 1)[:, None], values, jnp.zeros((), flat.dtype))


def _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners):
    """`(N, C, *spatial)` sampled at ``grid`` `(N, *out, n)` (``x`` first in the last
    dim, as torch). The ``K`` neighbours of every point (1 nearest, 2ⁿ linear, 4ⁿ
    cubic) are gathered at once and summed with their weights."""
    n, channels, sizes = input.shape[0], input.shape[1], input.shape[2:]
    out_shape = grid.shape[1:-1]
    flat = input.reshape((n, channels, math.prod(sizes)))
    int_dtype = jnp.int32 if flat.shape[2] < 2**31 else jnp.int64  # flat positions in a plane
    # one coordinate `(1, N, Q)` per spatial dim, slowest (D or H) first: grid holds (x, y[, z])
    coords = [
        _unnormalize(grid[..., k].reshape((1, n, -1)), size, align_corners)
        for k, size in zip(reversed(range(len(sizes))), sizes)
    ]
    if interpolation_mode == _NEAREST:
        positions = [
            jnp.round(_pad_coordinate(c, size, padding_mode, align_corners))
            for c, size in zip(coords, sizes)
        ]
        values = _gather_points(flat, sizes, [p.astype(int_dtype) for p in positions])
        return values.reshape((n, channels) + out_shape)
    if interpolation_mode == _BICUBIC:  # padding applies to each tap, not to the point
        taps = np.array(list(itertools.product(range(4), repeat=len(sizes))))
        floors = [jnp.floor(c) for c in coords]
        positions = [
            _pad_coordinate(f + (taps[:, axis, None, None] - 1), size, padding_mode, align_corners)
            for axis, (f, size) in enumerate(zip(floors, sizes))
        ]
        per_dim = [jnp.concatenate(_cubic_coefficients(c - f)) for c, f in zip(coords, floors)]
    else:
        taps = np.array(list(itertools.product(range(2), repeat=len(sizes))))
        coords = [
            _pad_coordinate(c, size, padding_mode, align_corners) for c, size in zip(coords, sizes)
        ]
        floors = [jnp.floor(c) for c in coords]
        positions = [f + taps[:, axis, None, None] for axis, f in enumerate(floors)]
        per_dim = [jnp.concatenate([1 - (c - f), c - f]) for c, f in zip(coords, floors)]
    weights = functools.reduce(jnp.multiply, [w[taps[:, axis]] for axis, w in enumerate(per_dim)])
    values = _gather_points(flat, sizes, [p.astype(int_dtype) for p in positions])
    output = jnp.sum(values * jnp.moveaxis(weights, 0, 1)[:, None], axis=2)
    return output.reshape((n, channels) + out_shape)


@register("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """Sample `(N, C, H, W)` at ``grid`` `(N, H_out, W_out, 2)` (or the 3-d forms)."""
    return _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners)


# ------------------------------------------------------------- embedding bags
_SUM, _MEAN, _MAX = 0, 1, 2


def _embedding_bag(
    weight,
    indices,
    offsets,
    scale_grad_by_freq,
    mode,
    per_sample_weights,
    include_last_offset,
    padding_idx,
    forward_only,
):
    """``(output, offset2bag, bag_size, max_indices)`` of torch's embedding bags.

    Bag ``b`` holds ``indices[offsets[b]:offsets[b + 1]]`` (the last runs to the end,
    or ``offsets`` ends with the end when ``include_last_offset``); entries equal to
    ``padding_idx`` (-1: none) are left out of every mode and of the mean's count; an
    empty bag is zeros. ``max`` takes, per feature, the first maximal row and passes
    it the whole gradient. Rows are gathered by ``functional.embedding``: its id
    check (a concrete id out of range is a ``ValueError``; under ``jit`` such an id
    reads NaN) and ``scale_grad_by_freq`` (frequencies over all of ``indices``).
    """
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    count, features = indices.shape[0], weight.shape[1]
    padding = padding_idx if padding_idx is not None and padding_idx >= 0 else None
    # torch's max-mode backward ignores scale_grad_by_freq ("not supported" for max)
    rows = embedding(
        indices,
        weight,
        padding,
        scale_grad_by_freq=bool(scale_grad_by_freq) and mode != _MAX,
        _where="_embedding_bag",
    )
    bag = (
        jnp.searchsorted(offsets, jnp.arange(count, dtype=offsets.dtype), side="right").astype(
            indices.dtype
        )
        - 1
    )
    valid = (bag >= 0) & (bag < bags)
    if padding is not None:
        valid = valid & (indices != padding)
    segment = jnp.where(valid, bag, bags)  # out of range: dropped by the segment sums
    sizes = jax.ops.segment_sum(valid.astype(indices.dtype), segment, bags)
    if mode == _MAX:
        masked = jnp.where(valid[:, None], rows, -jnp.inf)
        best = jax.ops.segment_max(masked, segment, bags)
        positions = jnp.where(
            valid[:, None] & (masked == best[jnp.clip(segment, 0, bags - 1)]),
            jnp.arange(count)[:, None],
            count,
        )
        first = jax.ops.segment_min(positions, segment, bags)  # (bags, features)
        padded = jnp.concatenate([rows, jnp.zeros((1, features), rows.dtype)])
        output = jnp.take_along_axis(padded, jnp.minimum(first, count), axis=0)
        # an empty bag (or one of padding only): torch's CPU max_indices is 0 there
        padded_ids = jnp.concatenate([indices, jnp.zeros((1,), indices.dtype)])
        max_indices = padded_ids[jnp.minimum(first, count)]
        return output, jnp.clip(bag, 0), sizes, max_indices
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None]
    output = jax.ops.segment_sum(jnp.where(valid[:, None], rows, 0), segment, bags)
    if mode == _MEAN:
        output = output / jnp.maximum(sizes, 1)[:, None].astype(output.dtype)
        return output, jnp.clip(bag, 0), sizes, sizes
    # torch's sum mode fills neither; the forward-only kernel sizes them by `offsets`
    unused = jnp.zeros((offsets.shape[0] if forward_only else bags,), indices.dtype)
    return output, jnp.clip(bag, 0), unused, unused


@register("aten._embedding_bag.default")
def embedding_bag(
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    """``mode`` 0 sum (``per_sample_weights`` scale the rows), 1 mean, 2 max."""
    return _embedding_bag(
        weight,
        indices,
        offsets,
        scale_grad_by_freq,
        mode,
        per_sample_weights,
        include_last_offset,
        padding_idx,
        False,
    )


@register("aten._embedding_bag_forward_only.default")
def embedding_bag_forward_only(
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    return _embedding_bag(
        weight,
        indices,
        offsets,
        scale_grad_by_freq,
        mode,
        per_sample_weights,
        include_last_offset,
        padding_idx,
        True,
    )


# ------------------------------------------------------------------ distances
def _norm_of(diff, p):
    """``‖diff‖_p`` over the last dim (``p = 0`` counts non-zeros)."""
    if p == 0:
        return jnp.sum(diff != 0, axis=-1).astype(diff.dtype)
    if p == 1:
        return jnp.sum(jnp.abs(diff), axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(diff * diff, axis=-1))
    if math.isinf(p):
        return jnp.max(jnp.abs(diff), axis=-1, initial=0.0)
    return jnp.sum(jnp.abs(diff) ** p, axis=-1) ** (1 / p)


def _norm_gradient(diff, dist, p):
    """torch's ``_cdist_backward`` / ``_pdist_backward``: ∂dist/∂diff, zero where the
    distance is zero."""
    dist = dist[..., None]
    zero = dist == 0
    sign = jnp.sign(diff)
    if p == 0:
        return jnp.zeros_like(diff)
    if p == 1:
        return sign
    if math.isinf(p):
        return sign * (jnp.abs(diff) == dist)
    safe = jnp.where(zero, 1.0, dist)
    if p == 2:
        grad = diff / safe
    elif p < 2:
        grad = sign * jnp.abs(diff) ** (p - 1) / safe ** (p - 1)
        if p < 1:
            zero = zero | (diff == 0)
    else:
        grad = diff * jnp.abs(diff) ** (p - 2) / safe ** (p - 1)
    return jnp.where(zero, 0.0, grad)


def _euclidean_by_matmul(x1, x2):
    """torch's ``_euclidean_dist``: ``√max(‖x‖² + ‖y‖² − 2x·y, 0)`` as one matmul."""
    norm1 = jnp.sum(x1 * x1, axis=-1, keepdims=True)
    norm2 = jnp.sum(x2 * x2, axis=-1, keepdims=True)
    left = jnp.concatenate([x1 * -2, norm1, jnp.ones_like(norm1)], axis=-1)
    right = jnp.concatenate([x2, jnp.ones_like(norm2), norm2], axis=-1)
    return jnp.sqrt(jnp.maximum(_matmul(left, jnp.swapaxes(right, -1, -2)), 0))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _distances(x1, x2, p, by_matmul):
    """`(..., P, M)` and `(..., R, M)` -> `(..., P, R)` p-norm distances."""
    if by_matmul:
        return _euclidean_by_matmul(x1, x2)
    return _norm_of(x1[..., :, None, :] - x2[..., None, :, :], p)


@_distances.defjvp
def _distances_jvp(p, by_matmul, primals, tangents):
    x1, x2 = primals
    dx1, dx2 = tangents
    dist = _distances(x1, x2, p, by_matmul)
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    grad = _norm_gradient(diff, dist, p)
    return dist, jnp.sum(grad * (dx1[..., :, None, :] - dx2[..., None, :, :]), axis=-1)


@register("aten._cdist_forward.default")
def cdist_forward(x1, x2, p, compute_mode):
    """``compute_mode`` None or 0: the matmul form for ``p = 2`` when either input
    has more than 25 rows; 1: always; 2: never."""
    rows = max(x1.shape[-2], x2.shape[-2])
    by_matmul = p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and rows > 25))
    return _distances(x1, x2, float(p), by_matmul)


@register("aten._pdist_forward.default")
def pdist_forward(input, p=2.0):
    """`(N, M)` -> the `(N (N − 1) / 2,)` distances of rows ``i < j``, row-major."""
    first, second = np.triu_indices(input.shape[0], k=1)
    return _distances(input, input, float(p), False)[first, second]
