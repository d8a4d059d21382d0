"""Neural-network ATen ops: matrix products, convolution, normalisation, pooling,
resampling. Float64 in, float64 computed (matmul precision ``highest``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxgrad.nn.aten import register


@register("aten.addmm.default")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    product = jnp.matmul(mat1, mat2, precision=jax.lax.Precision.HIGHEST)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (input if beta == 1 else input * beta)


@register("aten.convolution.default")
def convolution(input, weight, bias, stride, padding, dilation, transposed,
                output_padding, groups):
    if transposed:
        raise NotImplementedError("transposed convolution")
    spatial = input.ndim - 2
    names = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW"),
             3: ("NCDHW", "OIDHW", "NCDHW")}[spatial]
    out = jax.lax.conv_general_dilated(
        input, weight, tuple(stride), [(p, p) for p in padding],
        rhs_dilation=tuple(dilation), dimension_numbers=names,
        feature_group_count=groups, precision=jax.lax.Precision.HIGHEST)
    if bias is not None:
        out = out + bias.reshape((1, -1) + (1,) * spatial)
    return out
