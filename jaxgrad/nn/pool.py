"""Pooling layers mirroring ``torch.nn``, thin over ``jaxgrad.nn.functional``.

``MaxPool1d/2d/3d``, ``AvgPool1d/2d/3d``, ``AdaptiveAvgPool1d/2d/3d``,
``AdaptiveMaxPool1d/2d/3d``, ``LPPool1d/2d/3d``: no parameters; constructor
arguments, defaults and stored values as torch's (``stride`` defaults to
``kernel_size``). The window rules — ``ceil_mode``, ``count_include_pad``,
``divisor_override``, adaptive windows, max-pool indices and gradients at ties, the
power average's gradient at 0 — are torch's and are described in
``jaxgrad.nn.functional._pool``. Each family is one class generic in the number of
spatial dims ``_n``; inputs are `(N, C, *spatial)` or unbatched `(C, *spatial)`.
``FractionalMaxPool2d/3d`` (random windows) are in ``jaxgrad.nn.fractional``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxgrad.nn import functional as F
from jaxgrad.nn._layer import Layer
from jaxgrad.nn.functional._args import ntuple

_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_ADAPTIVE_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
_ADAPTIVE_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
_LP_POOL = {1: F.lp_pool1d, 2: F.lp_pool2d, 3: F.lp_pool3d}


def _check_window(layer, n: int, names) -> None:
    where = type(layer).__name__
    for name, minimum in names:
        value = getattr(layer, name)
        if name == "stride" and value is None:
            continue
        ntuple(name, value, n, minimum=minimum, where=where)


@dataclasses.dataclass(frozen=True)
class _MaxPoolNd(Layer):
    kernel_size: Any
    stride: Any = None
    padding: Any = 0
    dilation: Any = 1
    return_indices: bool = False
    ceil_mode: bool = False

    _n = 0

    def __post_init__(self):
        _check_window(
            self, self._n, (("kernel_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1))
        )

    def forward(self, params, x):
        return _MAX_POOL[self._n](
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.dilation,
            ceil_mode=self.ceil_mode,
            return_indices=self.return_indices,
        )


@dataclasses.dataclass(frozen=True)
class MaxPool1d(_MaxPoolNd):
    """``torch.nn.MaxPool1d(kernel_size, stride=None, padding=0, dilation=1,
    return_indices=False, ceil_mode=False)``."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class MaxPool2d(_MaxPoolNd):
    """``torch.nn.MaxPool2d(kernel_size, stride=None, padding=0, dilation=1,
    return_indices=False, ceil_mode=False)``; indices are flat ``h·W + w``, as torch's."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class MaxPool3d(_MaxPoolNd):
    """``torch.nn.MaxPool3d(kernel_size, stride=None, padding=0, dilation=1,
    return_indices=False, ceil_mode=False)``: input `(N, C, D, H, W)` or `(C, D, H, W)`;
    indices are flat ``d·H·W + h·W + w``, as torch's."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class _AvgPoolNd(Layer):
    kernel_size: Any
    stride: Any = None
    padding: Any = 0
    ceil_mode: bool = False
    count_include_pad: bool = True

    _n = 0

    def __post_init__(self):
        _check_window(self, self._n, (("kernel_size", 1), ("stride", 1), ("padding", 0)))

    def _options(self) -> tuple:
        return ()

    def forward(self, params, x):
        return _AVG_POOL[self._n](
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            *self._options(),
        )


@dataclasses.dataclass(frozen=True)
class AvgPool1d(_AvgPoolNd):
    """``torch.nn.AvgPool1d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True)``."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class _AvgPoolDivisorNd(_AvgPoolNd):
    divisor_override: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.divisor_override is not None and (
            not isinstance(self.divisor_override, int) or self.divisor_override == 0
        ):
            raise ValueError(
                f"{type(self).__name__}: `divisor_override` "
                f"(={self.divisor_override!r}) must be a non-zero int or None."
            )

    def _options(self) -> tuple:
        return (self.divisor_override,)


@dataclasses.dataclass(frozen=True)
class AvgPool2d(_AvgPoolDivisorNd):
    """``torch.nn.AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None)``."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class AvgPool3d(_AvgPoolDivisorNd):
    """``torch.nn.AvgPool3d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None)``: input `(N, C, D, H, W)` or
    `(C, D, H, W)`."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class _AdaptiveAvgPoolNd(Layer):
    output_size: Any

    _n = 0

    def forward(self, params, x):
        return _ADAPTIVE_AVG[self._n](x, self.output_size)


@dataclasses.dataclass(frozen=True)
class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """``torch.nn.AdaptiveAvgPool1d(output_size)``: window ``i`` is
    ``[⌊i·L/out⌋, ⌈(i + 1)·L/out⌉)``."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """``torch.nn.AdaptiveAvgPool2d(output_size)``: an int, or ``(H, W)`` whose entries
    may be ``None`` (keep that input size)."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """``torch.nn.AdaptiveAvgPool3d(output_size)``: an int, or ``(D, H, W)`` whose
    entries may be ``None`` (keep that input size)."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class _AdaptiveMaxPoolNd(Layer):
    output_size: Any
    return_indices: bool = False

    _n = 0

    def forward(self, params, x):
        return _ADAPTIVE_MAX[self._n](x, self.output_size, self.return_indices)


@dataclasses.dataclass(frozen=True)
class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """``torch.nn.AdaptiveMaxPool1d(output_size, return_indices=False)``."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """``torch.nn.AdaptiveMaxPool2d(output_size, return_indices=False)``."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """``torch.nn.AdaptiveMaxPool3d(output_size, return_indices=False)``; indices are
    flat ``d·H·W + h·W + w``."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class _LPPoolNd(Layer):
    norm_type: float
    kernel_size: Any
    stride: Any = None
    ceil_mode: bool = False

    _n = 0

    def __post_init__(self):
        if isinstance(self.norm_type, bool) or not isinstance(self.norm_type, (int, float)):
            raise TypeError(
                f"{type(self).__name__}: `norm_type` (={self.norm_type!r}) must be a number."
            )
        _check_window(self, self._n, (("kernel_size", 1), ("stride", 1)))

    def forward(self, params, x):
        return _LP_POOL[self._n](x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


@dataclasses.dataclass(frozen=True)
class LPPool1d(_LPPoolNd):
    """``torch.nn.LPPool1d(norm_type, kernel_size, stride=None, ceil_mode=False)``:
    ``(Σ_window x^p)^(1/p)`` over `(N, C, L)` or `(C, L)`."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class LPPool2d(_LPPoolNd):
    """``torch.nn.LPPool2d(norm_type, kernel_size, stride=None, ceil_mode=False)``:
    input `(N, C, H, W)` or `(C, H, W)`."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class LPPool3d(_LPPoolNd):
    """``torch.nn.LPPool3d(norm_type, kernel_size, stride=None, ceil_mode=False)``:
    input `(N, C, D, H, W)` or `(C, D, H, W)`."""

    _n = 3
