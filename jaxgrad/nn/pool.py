"""Pooling layers mirroring ``torch.nn``, thin over ``jaxgrad.nn.functional``.

``MaxPool1d/2d``, ``AvgPool1d/2d``, ``AdaptiveAvgPool1d/2d``, ``AdaptiveMaxPool1d/2d``:
no parameters; constructor arguments, defaults and stored values as torch's (``stride``
defaults to ``kernel_size``). The window rules — ``ceil_mode``, ``count_include_pad``,
``divisor_override``, adaptive windows, max-pool indices and gradients at ties — are
torch's and are described in ``jaxgrad.nn.functional._pool``. Inputs are
`(N, C, *spatial)` or unbatched `(C, *spatial)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxgrad.nn import functional as F
from jaxgrad.nn._layer import Layer
from jaxgrad.nn.functional._args import ntuple


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
        _check_window(self, self._n, (("kernel_size", 1), ("stride", 1), ("padding", 0),
                                      ("dilation", 1)))

    def forward(self, params, x):
        pool = F.max_pool1d if self._n == 1 else F.max_pool2d
        return pool(x, self.kernel_size, self.stride, self.padding, self.dilation,
                    ceil_mode=self.ceil_mode, return_indices=self.return_indices)


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
class AvgPool1d(Layer):
    """``torch.nn.AvgPool1d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True)``."""

    kernel_size: Any
    stride: Any = None
    padding: Any = 0
    ceil_mode: bool = False
    count_include_pad: bool = True

    def __post_init__(self):
        _check_window(self, 1, (("kernel_size", 1), ("stride", 1), ("padding", 0)))

    def forward(self, params, x):
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


@dataclasses.dataclass(frozen=True)
class AvgPool2d(Layer):
    """``torch.nn.AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False,
    count_include_pad=True, divisor_override=None)``."""

    kernel_size: Any
    stride: Any = None
    padding: Any = 0
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None

    def __post_init__(self):
        _check_window(self, 2, (("kernel_size", 1), ("stride", 1), ("padding", 0)))
        if self.divisor_override is not None and (
                not isinstance(self.divisor_override, int) or self.divisor_override == 0):
            raise ValueError(f"AvgPool2d: `divisor_override` (={self.divisor_override!r}) must "
                             "be a non-zero int or None.")

    def forward(self, params, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


@dataclasses.dataclass(frozen=True)
class AdaptiveAvgPool1d(Layer):
    """``torch.nn.AdaptiveAvgPool1d(output_size)``: window ``i`` is
    ``[⌊i·L/out⌋, ⌈(i + 1)·L/out⌉)``."""

    output_size: Any

    def forward(self, params, x):
        return F.adaptive_avg_pool1d(x, self.output_size)


@dataclasses.dataclass(frozen=True)
class AdaptiveAvgPool2d(Layer):
    """``torch.nn.AdaptiveAvgPool2d(output_size)``: an int, or ``(H, W)`` whose entries
    may be ``None`` (keep that input size)."""

    output_size: Any

    def forward(self, params, x):
        return F.adaptive_avg_pool2d(x, self.output_size)


@dataclasses.dataclass(frozen=True)
class AdaptiveMaxPool1d(Layer):
    """``torch.nn.AdaptiveMaxPool1d(output_size, return_indices=False)``."""

    output_size: Any
    return_indices: bool = False

    def forward(self, params, x):
        return F.adaptive_max_pool1d(x, self.output_size, self.return_indices)


@dataclasses.dataclass(frozen=True)
class AdaptiveMaxPool2d(Layer):
    """``torch.nn.AdaptiveMaxPool2d(output_size, return_indices=False)``."""

    output_size: Any
    return_indices: bool = False

    def forward(self, params, x):
        return F.adaptive_max_pool2d(x, self.output_size, self.return_indices)
