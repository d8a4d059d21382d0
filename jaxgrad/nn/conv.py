"""Convolutions mirroring ``torch.nn``: ``Conv1d/2d/3d``, ``ConvTranspose1d/2d/3d``, thin
over ``jaxgrad.nn.functional``.

Each layer keeps torch's conventions, not flax's: NCHW / NCDHW inputs (or unbatched),
weights ``(out_channels, in_channels / groups, *kernel)`` — ``(in_channels,
out_channels / groups, *kernel)`` for the transposed ones — explicit symmetric
``padding`` defaulting to 0 (flax: ``'SAME'``), ``padding_mode`` ``'zeros'``,
``'reflect'``, ``'replicate'`` or ``'circular'``, and torch's default initialisation
(weight kaiming_uniform(a=√5) = U(±1/√fan_in), bias U(±1/√fan_in) with
``fan_in = weight.shape[1] · prod(kernel)``; flax: lecun_normal, zero bias).
Spatial arguments are stored as tuples, as torch stores them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax

from jaxgrad._arrays import canonical_dtype, check_dtype_available
from jaxgrad.nn import functional as F
from jaxgrad.nn import init as initializers
from jaxgrad.nn._layer import Layer
from jaxgrad.nn.functional._args import check_input_rank, ntuple
from jaxgrad.nn.functional._conv import same_padding
from jaxgrad.nn.module import require_params

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_CONVOLUTIONS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _check_channels(name: str, in_channels, out_channels, groups) -> None:
    for arg, value in (
        ("in_channels", in_channels),
        ("out_channels", out_channels),
        ("groups", groups),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < (arg == "groups"):
            what = "a positive" if arg == "groups" else "a non-negative"
            raise ValueError(f"{name}: `{arg}` (={value!r}) must be {what} int.")
    for arg, value in (("in_channels", in_channels), ("out_channels", out_channels)):
        if value % groups:
            raise ValueError(
                f"{name}: `{arg}` (={value}) must be divisible by `groups` (={groups})."
            )


def _init(key, shape, dtype, fan_in: int, bias: bool, out_channels: int) -> dict:
    w_key, b_key = jax.random.split(key)
    params = {"weight": initializers.torch_default_weight(w_key, shape, dtype, fan_in=fan_in)}
    if bias:
        params["bias"] = initializers.fan_in_uniform(b_key, (out_channels,), dtype, fan_in=fan_in)
    return params


@dataclasses.dataclass(frozen=True)
class _ConvNd(Layer):
    in_channels: int
    out_channels: int
    kernel_size: Any
    stride: Any = 1
    padding: Any = 0
    dilation: Any = 1
    groups: int = 1
    bias: bool = True
    padding_mode: str = "zeros"
    device: Any = None  # accepted for signature parity with torch; placement is jax's
    dtype: Any = None  # None means torch's default, float32

    _n = 0

    def __post_init__(self):
        name, n = type(self).__name__, self._n
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        _check_channels(name, self.in_channels, self.out_channels, self.groups)
        for arg, minimum in (("kernel_size", 1), ("stride", 1), ("dilation", 1)):
            object.__setattr__(
                self, arg, ntuple(arg, getattr(self, arg), n, minimum=minimum, where=name)
            )
        if isinstance(self.padding, str):
            if self.padding not in ("same", "valid"):
                raise ValueError(
                    f"{name}: `padding` (={self.padding!r}) must be 'same', "
                    f"'valid', an int or {n} ints."
                )
            if self.padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(
                    f"{name}: `padding`='same' is not supported for strided "
                    f"convolutions (`stride`={self.stride}), as in torch."
                )
        else:
            object.__setattr__(
                self, "padding", ntuple("padding", self.padding, n, minimum=0, where=name)
            )
        if self.padding_mode not in PADDING_MODES:
            raise ValueError(
                f"{name}: `padding_mode` (={self.padding_mode!r}) must be one of "
                f"{', '.join(map(repr, PADDING_MODES))}."
            )

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        per_group = self.in_channels // self.groups
        shape = (self.out_channels, per_group, *self.kernel_size)
        return _init(
            key, shape, dtype, per_group * math.prod(self.kernel_size), self.bias, self.out_channels
        )

    def forward(self, params, x):
        name = type(self).__name__
        require_params(name, params, ("weight", "bias") if self.bias else ("weight",))
        check_input_rank(name, x, self._n, channels=self.in_channels)
        padding = self.padding
        if self.padding_mode != "zeros":
            if padding == "valid":
                padding = (0,) * self._n
            pairs = (
                same_padding(self.kernel_size, self.dilation)
                if padding == "same"
                else [(p, p) for p in padding]
            )
            # torch pads the input first, then convolves unpadded (last dim first)
            torch_order = tuple(p for pair in reversed(pairs) for p in pair)
            x = F.pad(x, torch_order, mode=self.padding_mode)
            padding = 0
        return _CONVOLUTIONS[self._n](
            x,
            params["weight"],
            params.get("bias"),
            self.stride,
            padding,
            self.dilation,
            self.groups,
        )


@dataclasses.dataclass(frozen=True)
class Conv1d(_ConvNd):
    """``torch.nn.Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    dilation=1, groups=1, bias=True, padding_mode='zeros', device=None, dtype=None)``.

    Params: ``weight`` `(out_channels, in_channels / groups, k)`, ``bias``
    `(out_channels,)`. Input `(N, in_channels, L)` or `(in_channels, L)`.
    """

    _n = 1


@dataclasses.dataclass(frozen=True)
class Conv2d(_ConvNd):
    """``torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    dilation=1, groups=1, bias=True, padding_mode='zeros', device=None, dtype=None)``.

    Params: ``weight`` `(out_channels, in_channels / groups, kH, kW)` (OIHW), ``bias``
    `(out_channels,)`. Input `(N, in_channels, H, W)` (NCHW) or `(in_channels, H, W)`.
    """

    _n = 2


@dataclasses.dataclass(frozen=True)
class Conv3d(_ConvNd):
    """``torch.nn.Conv3d(in_channels, out_channels, kernel_size, stride=1, padding=0,
    dilation=1, groups=1, bias=True, padding_mode='zeros', device=None, dtype=None)``.

    Params: ``weight`` `(out_channels, in_channels / groups, kD, kH, kW)` (OIDHW),
    ``bias`` `(out_channels,)`. Input `(N, in_channels, D, H, W)` (NCDHW) or
    `(in_channels, D, H, W)`.
    """

    _n = 3


@dataclasses.dataclass(frozen=True)
class _ConvTransposeNd(Layer):
    in_channels: int
    out_channels: int
    kernel_size: Any
    stride: Any = 1
    padding: Any = 0
    output_padding: Any = 0
    groups: int = 1
    bias: bool = True
    dilation: Any = 1
    padding_mode: str = "zeros"
    device: Any = None
    dtype: Any = None

    _n = 0

    def __post_init__(self):
        name, n = type(self).__name__, self._n
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        _check_channels(name, self.in_channels, self.out_channels, self.groups)
        for arg, minimum in (
            ("kernel_size", 1),
            ("stride", 1),
            ("dilation", 1),
            ("padding", 0),
            ("output_padding", 0),
        ):
            object.__setattr__(
                self, arg, ntuple(arg, getattr(self, arg), n, minimum=minimum, where=name)
            )
        if self.padding_mode != "zeros":
            raise ValueError(
                f"{name}: `padding_mode` (={self.padding_mode!r}) must be 'zeros': "
                "torch supports no other for transposed convolutions."
            )
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise ValueError(
                    f"{name}: `output_padding` (={self.output_padding}) must be "
                    f"smaller than either `stride` (={self.stride}) or `dilation` "
                    f"(={self.dilation})."
                )

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        per_group = self.out_channels // self.groups
        shape = (self.in_channels, per_group, *self.kernel_size)
        return _init(
            key, shape, dtype, per_group * math.prod(self.kernel_size), self.bias, self.out_channels
        )

    def forward(self, params, x, output_size=None):
        """``output_size`` (the full shape or its spatial part) picks ``output_padding``
        between the sizes the stride makes ambiguous, as torch's ``forward``."""
        name = type(self).__name__
        require_params(name, params, ("weight", "bias") if self.bias else ("weight",))
        check_input_rank(name, x, self._n, channels=self.in_channels)
        output_padding = self.output_padding
        if output_size is not None:
            output_padding = self._output_padding(x, output_size)
        return _TRANSPOSED[self._n](
            x,
            params["weight"],
            params.get("bias"),
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
        )

    def _output_padding(self, x, output_size) -> tuple:
        name, n = type(self).__name__, self._n
        size = tuple(output_size)[-n:] if len(tuple(output_size)) >= n else None
        if size is None or len(tuple(output_size)) not in (n, x.ndim):
            raise ValueError(
                f"{name}: `output_size` (={output_size!r}) must have {n} or {x.ndim} entries."
            )
        smallest = F.transposed_output_size(
            x.shape[-n:], self.kernel_size, self.stride, self.padding, (0,) * n, self.dilation
        )
        padding = tuple(want - low for want, low in zip(size, smallest))
        for extra, s in zip(padding, self.stride):
            if not 0 <= extra < s:
                raise ValueError(
                    f"{name}: `output_size` (={tuple(output_size)}) must lie between "
                    f"{smallest} and "
                    f"{tuple(low + st - 1 for low, st in zip(smallest, self.stride))}."
                )
        return padding


@dataclasses.dataclass(frozen=True)
class ConvTranspose1d(_ConvTransposeNd):
    """``torch.nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=1,
    padding=0, output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros',
    device=None, dtype=None)``: the gradient of ``Conv1d``.

    Params: ``weight`` `(in_channels, out_channels / groups, k)`, ``bias``
    `(out_channels,)`. Output length ``(L − 1)·s − 2p + d·(k − 1) + output_padding + 1``.
    """

    _n = 1


@dataclasses.dataclass(frozen=True)
class ConvTranspose2d(_ConvTransposeNd):
    """``torch.nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1,
    padding=0, output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros',
    device=None, dtype=None)``: the gradient of ``Conv2d``.

    Params: ``weight`` `(in_channels, out_channels / groups, kH, kW)`, ``bias``
    `(out_channels,)`.
    """

    _n = 2


@dataclasses.dataclass(frozen=True)
class ConvTranspose3d(_ConvTransposeNd):
    """``torch.nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=1,
    padding=0, output_padding=0, groups=1, bias=True, dilation=1, padding_mode='zeros',
    device=None, dtype=None)``: the gradient of ``Conv3d``.

    Params: ``weight`` `(in_channels, out_channels / groups, kD, kH, kW)`, ``bias``
    `(out_channels,)`. Input `(N, in_channels, D, H, W)` or `(in_channels, D, H, W)`.
    """

    _n = 3
