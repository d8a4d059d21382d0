"""Convolutions of ``torch.nn.functional`` over 1 to 3 spatial dims, in torch's layouts.

``lax.conv_general_dilated`` takes torch's layouts as they are (dimension numbers
``NCHW, OIHW, NCHW``), so no transpose is needed; on the CPU a convolution may instead
be lowered as patches and one matrix product (``jaxgrad.nn.functional._lowering``:
XLA:CPU's convolutions are slow inside loops). What differs from the JAX
ecosystem (flax ``nn.Conv``: NHWC / HWIO, ``padding='SAME'`` by default):

- ``padding`` is explicit and symmetric: an int or one int per spatial dim, default 0;
- ``'same'`` pads ``d·(k − 1)`` in total, ``⌊total / 2⌋`` before and the rest after, and
  is refused for strides > 1, as torch refuses it (TF/flax ``'SAME'`` at stride 2 pads
  by the stride, e.g. (2, 3) where a torch port of a ``padding=3`` layer pads (3, 3));
- ``conv_transpose`` is the gradient of the convolution with the same arguments: the
  weight is `(in_channels, out_channels / groups, *kernel)`, and the output grows by
  ``output_padding`` on the far side. It is computed as a convolution of the input
  dilated by ``stride`` with the spatially flipped, in/out-swapped kernel, padded
  ``d·(k − 1) − padding`` (negative pads crop).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxgrad.nn.functional._args import check_input_rank, ntuple
from jaxgrad.nn.functional._lowering import convolve

_DIMENSION_NUMBERS = {
    1: ("NCH", "OIH", "NCH"),
    2: ("NCHW", "OIHW", "NCHW"),
    3: ("NCDHW", "OIDHW", "NCDHW"),
}


def _check_weight(where: str, input, weight, n: int, groups: int, transposed: bool):
    if weight.ndim != n + 2:
        raise ValueError(
            f"{where}: `weight` must have {n + 2} dims, got shape {tuple(weight.shape)}."
        )
    batched = check_input_rank(where, input, n)
    channels = input.shape[1 if batched else 0]
    expected = weight.shape[0] if transposed else weight.shape[1] * groups
    if channels != expected:
        what = "weight.shape[0]" if transposed else "weight.shape[1] × groups"
        raise ValueError(
            f"{where}: the input's channel dimension (={channels}, input shape "
            f"{tuple(input.shape)}) must equal {what} (={expected}, weight shape "
            f"{tuple(weight.shape)}, `groups`={groups})."
        )
    return batched


def same_padding(kernel_size, dilation) -> list[tuple[int, int]]:
    """torch's ``padding='same'``: ``d·(k − 1)`` in total, the extra one after."""
    pads = []
    for k, d in zip(kernel_size, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _padding_pairs(where: str, padding, n: int, kernel_size, stride, dilation):
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * n
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError(
                    f"{where}: `padding`='same' is not supported for strided convolutions "
                    f"(`stride`={tuple(stride)}), as in torch; pad explicitly."
                )
            return same_padding(kernel_size, dilation)
        raise ValueError(
            f"{where}: `padding` (={padding!r}) must be 'same', 'valid', an int or {n} ints."
        )
    return [(p, p) for p in ntuple("padding", padding, n, minimum=0, where=where)]


def _conv(where: str, n: int, input, weight, bias, stride, padding, dilation, groups):
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{where}: `groups` (={groups!r}) must be a positive int.")
    batched = _check_weight(where, input, weight, n, groups, transposed=False)
    stride = ntuple("stride", stride, n, minimum=1, where=where)
    dilation = ntuple("dilation", dilation, n, minimum=1, where=where)
    if weight.shape[0] % groups:
        raise ValueError(
            f"{where}: `groups` (={groups}) must divide the weight's "
            f"out_channels (={weight.shape[0]})."
        )
    pads = _padding_pairs(where, padding, n, weight.shape[2:], stride, dilation)
    for length, (lo, hi), k, d in zip(input.shape[-n:], pads, weight.shape[2:], dilation):
        if length + lo + hi < d * (k - 1) + 1:
            raise ValueError(
                f"{where}: the kernel (size {tuple(weight.shape[2:])}, `dilation`="
                f"{tuple(dilation)}) is larger than the padded input (shape "
                f"{tuple(input.shape)}, padding {pads})."
            )
    x = input if batched else input[None]
    y = convolve(x, weight, stride, pads, dilation, groups)
    if bias is not None:
        y = y + bias.reshape((-1,) + (1,) * n)
    return y if batched else y[0]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv1d``: input `(N, C_in, L)` or `(C_in, L)`, weight
    `(C_out, C_in / groups, k)`, bias `(C_out,)`."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv2d``: input `(N, C_in, H, W)` or `(C_in, H, W)`, weight
    `(C_out, C_in / groups, kH, kW)`, bias `(C_out,)`."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv3d``: input `(N, C_in, D, H, W)` or `(C_in, D, H, W)`,
    weight `(C_out, C_in / groups, kD, kH, kW)` (OIDHW), bias `(C_out,)`."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def transposed_output_size(size, kernel_size, stride, padding, output_padding, dilation):
    """``(L − 1)·s − 2p + d·(k − 1) + output_padding + 1`` per spatial dim."""
    return tuple(
        (length - 1) * s - 2 * p + d * (k - 1) + op + 1
        for length, k, s, p, op, d in zip(
            size, kernel_size, stride, padding, output_padding, dilation
        )
    )


def _conv_transpose(
    where, n, input, weight, bias, stride, padding, output_padding, groups, dilation
):
    if isinstance(padding, str):
        raise ValueError(
            f"{where}: `padding` (={padding!r}) must be an int or {n} ints; "
            "torch's transposed convolutions take no string padding."
        )
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{where}: `groups` (={groups!r}) must be a positive int.")
    batched = _check_weight(where, input, weight, n, groups, transposed=True)
    stride = ntuple("stride", stride, n, minimum=1, where=where)
    padding = ntuple("padding", padding, n, minimum=0, where=where)
    dilation = ntuple("dilation", dilation, n, minimum=1, where=where)
    output_padding = ntuple("output_padding", output_padding, n, minimum=0, where=where)
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= max(s, d):
            raise ValueError(
                f"{where}: `output_padding` (={output_padding}) must be smaller than either "
                f"`stride` (={stride}) or `dilation` (={dilation}), as in torch."
            )
    if weight.shape[0] % groups:
        raise ValueError(
            f"{where}: `groups` (={groups}) must divide the weight's "
            f"in_channels (={weight.shape[0]})."
        )
    kernel = weight.shape[2:]
    c_in, c_out_per_group = weight.shape[0], weight.shape[1]
    # (C_in, C_out/g, *k) -> (C_out, C_in/g, *k), spatially flipped
    w = weight.reshape((groups, c_in // groups, c_out_per_group) + kernel)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * c_out_per_group, c_in // groups) + kernel)
    w = jnp.flip(w, axis=tuple(range(2, n + 2)))
    pads = [
        (d * (k - 1) - p, d * (k - 1) - p + op)
        for k, p, op, d in zip(kernel, padding, output_padding, dilation)
    ]
    size = transposed_output_size(
        input.shape[-n:], kernel, stride, padding, output_padding, dilation
    )
    if any(length <= 0 for length in size):
        raise ValueError(
            f"{where}: `padding` (={padding}) leaves no output: size {size} for "
            f"an input of shape {tuple(input.shape)}."
        )
    x = input if batched else input[None]
    y = lax.conv_general_dilated(
        x,
        w,
        window_strides=(1,) * n,
        padding=pads,
        lhs_dilation=stride,
        rhs_dilation=dilation,
        feature_group_count=groups,
        dimension_numbers=_DIMENSION_NUMBERS[n],
    )
    if bias is not None:
        y = y + bias.reshape((-1,) + (1,) * n)
    return y if batched else y[0]


def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """``torch.nn.functional.conv_transpose1d``: input `(N, C_in, L)` or `(C_in, L)`,
    weight `(C_in, C_out / groups, k)`, bias `(C_out,)`."""
    return _conv_transpose(
        "conv_transpose1d",
        1,
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
    )


def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """``torch.nn.functional.conv_transpose2d``: input `(N, C_in, H, W)` or
    `(C_in, H, W)`, weight `(C_in, C_out / groups, kH, kW)`, bias `(C_out,)`."""
    return _conv_transpose(
        "conv_transpose2d",
        2,
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
    )


def conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """``torch.nn.functional.conv_transpose3d``: input `(N, C_in, D, H, W)` or
    `(C_in, D, H, W)`, weight `(C_in, C_out / groups, kD, kH, kW)`, bias `(C_out,)`."""
    return _conv_transpose(
        "conv_transpose3d",
        3,
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
    )
