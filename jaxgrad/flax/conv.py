"""Convolutions to stock ``flax.nnx`` layers and back: ``Conv1d/2d`` (every
``padding_mode``) and ``ConvTranspose1d/2d``.

- ``Conv`` -> ``nnx.Conv``: weight OIHW -> kernel HWIO; explicit symmetric pads,
  never ``'SAME'``; ``padding='same'`` as torch pads it (the odd one on the right).
  ``padding_mode`` ``'circular'`` / ``'reflect'`` with the pads flax's ``'CIRCULAR'`` /
  ``'REFLECT'`` apply (``((k−1)//2, k//2)`` of the dilated kernel) -> those; any other
  non-zeros case (``'replicate'``, other pads) -> ``TorchPaddedConv``: ``TorchPad``
  then a VALID ``nnx.Conv``.
- ``ConvTranspose`` -> ``nnx.ConvTranspose(transpose_kernel=True)``: weight
  `(in, out, *k)` -> kernel `(*k, out, in)` (``lax.conv_transpose`` flips it and swaps
  its channel axes: torch's "gradient of a conv" definition), explicit pads
  ``(d(k−1) − p, d(k−1) − p + output_padding)`` on the stride-dilated input.
  ``groups > 1`` -> ``TorchGroupedConvTranspose``: one such ``nnx.ConvTranspose`` per
  group (``nnx.ConvTranspose`` has no ``feature_group_count``), group g taking the
  weight rows ``[g·in/G, (g+1)·in/G)`` `(in/G, out/G, *k)` and its slice of the bias.

``from_nnx`` reads either kernel orientation (``transpose_kernel=False`` kernels are
flipped back) and flax's string paddings, refusing what no torch layer computes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from flax import nnx

from jaxgrad import nn
from jaxgrad.flax import modules as m
from jaxgrad.flax._util import as_numpy, as_tuple, empty, refuse, rngs, set_value, value_of

_FLAX_MODES = {"circular": "CIRCULAR", "reflect": "REFLECT"}


def _torch_pads(layer, spatial: int) -> list[tuple[int, int]]:
    kernel_size, dilation = as_tuple(layer.kernel_size, spatial), as_tuple(layer.dilation, spatial)
    if layer.padding == "valid":
        return [(0, 0)] * spatial
    if layer.padding == "same":  # torch: total d(k-1), the odd one on the right
        return [
            (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
            for k, d in zip(kernel_size, dilation)
        ]
    return [(p, p) for p in as_tuple(layer.padding, spatial)]


def _flax_same_pads(kernel_size, dilation) -> list[tuple[int, int]]:
    """The pads of flax's ``'CIRCULAR'`` / ``'REFLECT'``: ``((k−1)//2, k//2)``, k dilated."""
    return [((d * (k - 1)) // 2, (d * (k - 1) + 1) // 2) for k, d in zip(kernel_size, dilation)]


def conv_to_nnx(layer, params, buffers, dtype):
    spatial = params["weight"].ndim - 2
    kernel_size, dilation = as_tuple(layer.kernel_size, spatial), as_tuple(layer.dilation, spatial)
    pads = _torch_pads(layer, spatial)
    mode = getattr(layer, "padding_mode", "zeros")
    padded = None
    padding = pads
    if mode != "zeros":
        if mode in _FLAX_MODES and pads == _flax_same_pads(kernel_size, dilation):
            padding = _FLAX_MODES[mode]
        else:
            padded, padding = m.TorchPad(pads, mode), "VALID"
    module = empty(
        lambda: nnx.Conv(
            layer.in_channels,
            layer.out_channels,
            kernel_size,
            strides=as_tuple(layer.stride, spatial),
            padding=padding,
            kernel_dilation=dilation,
            feature_group_count=layer.groups,
            use_bias=layer.bias,
            param_dtype=dtype,
            rngs=rngs(),
        )
    )
    # torch OIHW -> flax HWIO
    set_value(module.kernel, np.moveaxis(as_numpy(params["weight"]), (0, 1), (-1, -2)))
    if layer.bias:
        set_value(module.bias, params["bias"])
    return module if padded is None else m.TorchPaddedConv(padded, module)


def symmetric(pads, what: str, path: str) -> tuple:
    """flax's explicit ``(low, high)`` pairs as torch's one pad per side; ``None`` for
    ``'VALID'``. Raises for ``'SAME'`` and asymmetric pairs."""
    if isinstance(pads, str):
        if pads.upper() == "VALID":
            return None
        raise ValueError(
            f"from_nnx: {what} at {path!r} uses padding={pads!r}; flax's 'SAME' depends on the "
            "input size and pads asymmetrically at stride > 1 (e.g. (2, 3) where torch pads "
            "(3, 3)); torch has no such layer. Give explicit (low, high) pairs."
        )
    pairs = [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in pads]
    if any(lo != hi for lo, hi in pairs):
        raise ValueError(
            f"from_nnx: {what} at {path!r} pads asymmetrically {pairs}; torch pads each side "
            "equally (insert a ZeroPad2d in torch for the extra side)."
        )
    return tuple(lo for lo, _ in pairs)


def _pads_as_torch(pairs, strides, what: str, path: str):
    """Pairs flax pads with -> torch's ``padding`` (ints, or ``'same'`` for the
    even-kernel stride-1 case torch pads one more on the right)."""
    if all(lo == hi for lo, hi in pairs):
        return tuple(lo for lo, _ in pairs)
    if all(hi - lo in (0, 1) for lo, hi in pairs) and set(strides) == {1}:
        return "same"
    raise ValueError(
        f"from_nnx: {what} at {path!r} pads {pairs} at strides {strides}; torch pads "
        "each side equally (or as padding='same' at stride 1)."
    )


def conv_from_nnx(module, context):
    inner = module.conv if isinstance(module, m.TorchPaddedConv) else module
    kernel = value_of(inner.kernel)  # HWIO
    spatial = kernel.ndim - 2
    if spatial not in (1, 2):
        raise ValueError(
            f"from_nnx: nnx.Conv with {spatial} spatial dims at {context.path!r}; "
            "jaxgrad has Conv1d and Conv2d."
        )
    kernel_size = as_tuple(inner.kernel_size, spatial)
    strides = as_tuple(inner.strides or 1, spatial)
    dilation = as_tuple(inner.kernel_dilation or 1, spatial)
    mode = "zeros"
    if isinstance(module, m.TorchPaddedConv):
        mode = module.pad.mode
        padding = _pads_as_torch(module.pad.pads, strides, "TorchPaddedConv", context.path)
    elif isinstance(inner.padding, str) and inner.padding.upper() in ("CIRCULAR", "REFLECT"):
        mode = inner.padding.lower()
        padding = _pads_as_torch(
            _flax_same_pads(kernel_size, dilation),
            strides,
            f"nnx.Conv(padding={inner.padding!r})",
            context.path,
        )
    elif isinstance(inner.padding, str) and inner.padding.upper() == "CAUSAL":
        raise ValueError(
            f"from_nnx: nnx.Conv at {context.path!r} uses padding='CAUSAL' (left "
            "only); torch pads each side equally."
        )
    else:
        padding = symmetric(inner.padding, "nnx.Conv", context.path) or (0,) * spatial
    layer = getattr(nn, f"Conv{spatial}d")(
        inner.in_features,
        inner.out_features,
        kernel_size,
        stride=strides,
        padding=padding,
        dilation=dilation,
        groups=inner.feature_group_count,
        bias=inner.use_bias,
        padding_mode=mode,
        dtype=kernel.dtype,
    )
    params = {"weight": np.moveaxis(kernel, (-1, -2), (0, 1))}
    if inner.use_bias:
        params["bias"] = value_of(inner.bias)
    context.spatial = spatial
    return layer, params, {}


# -------------------------------------------------------------- transposed
def conv_transpose_to_nnx(layer, params, buffers, dtype):
    spatial = params["weight"].ndim - 2
    kernel_size = as_tuple(layer.kernel_size, spatial)
    dilation = as_tuple(layer.dilation, spatial)
    pads = [
        (d * (k - 1) - p, d * (k - 1) - p + op)
        for k, d, p, op in zip(
            kernel_size,
            dilation,
            as_tuple(layer.padding, spatial),
            as_tuple(layer.output_padding, spatial),
        )
    ]
    groups = layer.groups
    weights = np.split(as_numpy(params["weight"]), groups)  # (in/G, out/G, *k) per group
    biases = np.split(as_numpy(params["bias"]), groups) if layer.bias else [None] * groups
    convs = []
    for weight, bias in zip(weights, biases):
        module = empty(
            lambda: nnx.ConvTranspose(
                layer.in_channels // groups,
                layer.out_channels // groups,
                kernel_size,
                strides=as_tuple(layer.stride, spatial),
                padding=pads,
                kernel_dilation=dilation,
                use_bias=layer.bias,
                transpose_kernel=True,
                param_dtype=dtype,
                rngs=rngs(),
            )
        )
        # torch (in, out, *k) -> (*k, out, in): the forward conv's HWIO, flipped by lax
        set_value(module.kernel, np.moveaxis(weight, (0, 1), (-1, -2)))
        if layer.bias:
            set_value(module.bias, bias)
        convs.append(module)
    return convs[0] if groups == 1 else m.TorchGroupedConvTranspose(convs)


def _transpose_pads(padding, kernel_size, strides, dilation):
    """flax's padding of ``lax.conv_transpose`` as explicit pairs (jax's own rule for
    'SAME' / 'VALID', on the dilated kernel)."""
    if isinstance(padding, str):
        pairs = []
        for k, s, d in zip(kernel_size, strides, dilation):
            k = d * (k - 1) + 1
            if padding.upper() == "SAME":
                total = k + s - 2
                low = k - 1 if s > k - 1 else -(-total // 2)
            elif padding.upper() == "VALID":
                total, low = k + s - 2 + max(k - s, 0), k - 1
            else:
                return None
            pairs.append((low, total - low))
        return pairs
    if isinstance(padding, int):
        return [(padding, padding)] * len(kernel_size)
    return [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in padding]


def conv_transpose_from_nnx(module, context):
    kernel = value_of(module.kernel)
    spatial = kernel.ndim - 2
    where = f"from_nnx: nnx.ConvTranspose at {context.path or 'the top level'!r}"
    if spatial not in (1, 2):
        raise ValueError(f"{where}: {spatial} spatial dims; jaxgrad has ConvTranspose1d and 2d.")
    kernel_size = as_tuple(module.kernel_size, spatial)
    strides = as_tuple(module.strides or 1, spatial)
    dilation = as_tuple(module.kernel_dilation or 1, spatial)
    pairs = _transpose_pads(module.padding, kernel_size, strides, dilation)
    problems = []
    if module.mask is not None:
        problems.append("a kernel `mask`: torch has none")
    if pairs is None:
        problems.append(f"padding={module.padding!r}: torch pads with zeros only")
        pairs = [(d * (k - 1), d * (k - 1)) for k, d in zip(kernel_size, dilation)]
    padding, output_padding = [], []
    for (low, high), k, s, d in zip(pairs, kernel_size, strides, dilation):
        p, extra = d * (k - 1) - low, high - low
        if p < 0 or not 0 <= extra < max(s, d):
            problems.append(
                f"pads ({low}, {high}) at kernel {k}, stride {s}, dilation {d} give "
                f"torch padding={p}, output_padding={extra}; torch needs padding ≥ 0 "
                f"and 0 ≤ output_padding < max(stride, dilation)"
            )
        padding.append(p)
        output_padding.append(extra)
    refuse(where, problems)
    if module.transpose_kernel:  # (*k, out, in)
        weight = np.moveaxis(kernel, (-1, -2), (0, 1))
    else:  # (*k, in, out), applied unflipped: torch's weight is its spatial flip
        weight = np.moveaxis(np.flip(kernel, tuple(range(spatial))), (-2, -1), (0, 1))
    layer = getattr(nn, f"ConvTranspose{spatial}d")(
        weight.shape[0],
        weight.shape[1],
        kernel_size,
        stride=strides,
        padding=tuple(padding),
        output_padding=tuple(output_padding),
        bias=module.use_bias,
        dilation=dilation,
        dtype=kernel.dtype,
    )
    params = {"weight": np.ascontiguousarray(weight)}
    if module.use_bias:
        params["bias"] = value_of(module.bias)
    context.spatial = spatial
    return layer, params, {}


def grouped_conv_transpose_from_nnx(module, context):
    """Each group read as one ``ConvTranspose``; torch's layer stacks their weights
    (``(in, out/G, *k)``: group g's input channels are rows g·in/G…) and biases."""
    base = context.path
    reads = []
    for index, conv in enumerate(module.convs):
        context.path = f"{base}.convs.{index}" if base else f"convs.{index}"
        reads.append(conv_transpose_from_nnx(conv, context))
    context.path = base
    first = reads[0][0]
    different = [str(i) for i, read in enumerate(reads) if read[0] != first]
    if different:
        raise ValueError(
            f"from_nnx: TorchGroupedConvTranspose at {base or 'the top level'!r}: "
            f"groups {', '.join(different)} differ from group 0 in their "
            "hyperparameters; torch's groups share them."
        )
    groups = len(reads)
    layer = dataclasses.replace(
        first,
        in_channels=first.in_channels * groups,
        out_channels=first.out_channels * groups,
        groups=groups,
    )
    params = {name: np.concatenate([read[1][name] for read in reads]) for name in reads[0][1]}
    return layer, params, {}


TO_NNX = {
    "Conv1d": conv_to_nnx,
    "Conv2d": conv_to_nnx,
    "ConvTranspose1d": conv_transpose_to_nnx,
    "ConvTranspose2d": conv_transpose_to_nnx,
}
FROM_NNX = {
    nnx.Conv: conv_from_nnx,
    m.TorchPaddedConv: conv_from_nnx,
    nnx.ConvTranspose: conv_transpose_from_nnx,
    m.TorchGroupedConvTranspose: grouped_conv_transpose_from_nnx,
}
