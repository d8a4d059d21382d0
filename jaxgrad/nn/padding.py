"""Padding layers mirroring ``torch.nn``: ``ZeroPad``, ``ConstantPad``, ``ReflectionPad``,
``ReplicationPad`` and ``CircularPad``, 1d, 2d and 3d, thin over ``F.pad``.

``padding`` is an int (every side) or torch's tuple, last dim first: ``(left, right)``
for 1d, ``(left, right, top, bottom)`` for 2d, ``(left, right, top, bottom, front,
back)`` for 3d; the layer stores the tuple, as torch.
Inputs are `(N, C, *spatial)` or unbatched `(C, *spatial)`. Reflection needs each pad
smaller than the padded size, circular at most the size; zero and constant pads may be
negative (they crop), as torch's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxgrad.nn import functional as F
from jaxgrad.nn._layer import Layer
from jaxgrad.nn.functional._args import check_input_rank, ntuple


@dataclasses.dataclass(frozen=True)
class _PadNd(Layer):
    """One padding family over ``_n`` spatial dims: ``F.pad`` in mode ``_mode``."""

    padding: Any

    _n = 0
    _mode = "constant"

    def __post_init__(self):
        minimum = -(2**62) if self._mode == "constant" else 0
        object.__setattr__(
            self,
            "padding",
            ntuple(
                "padding", self.padding, 2 * self._n, minimum=minimum, where=type(self).__name__
            ),
        )

    def _value(self):
        return None

    def forward(self, params, x):
        check_input_rank(type(self).__name__, x, self._n)
        return F.pad(x, self.padding, mode=self._mode, value=self._value())


@dataclasses.dataclass(frozen=True)
class _ConstantPadNd(_PadNd):
    value: float = 0.0

    def _value(self):
        return self.value


@dataclasses.dataclass(frozen=True)
class _ReflectionPadNd(_PadNd):
    _mode = "reflect"


@dataclasses.dataclass(frozen=True)
class _ReplicationPadNd(_PadNd):
    _mode = "replicate"


@dataclasses.dataclass(frozen=True)
class _CircularPadNd(_PadNd):
    _mode = "circular"


@dataclasses.dataclass(frozen=True)
class ZeroPad1d(_PadNd):
    """``torch.nn.ZeroPad1d(padding)``."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class ZeroPad2d(_PadNd):
    """``torch.nn.ZeroPad2d(padding)``: ``(left, right, top, bottom)``."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class ZeroPad3d(_PadNd):
    """``torch.nn.ZeroPad3d(padding)``: ``(left, right, top, bottom, front, back)``."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class ConstantPad1d(_ConstantPadNd):
    """``torch.nn.ConstantPad1d(padding, value)``."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class ConstantPad2d(_ConstantPadNd):
    """``torch.nn.ConstantPad2d(padding, value)``."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class ConstantPad3d(_ConstantPadNd):
    """``torch.nn.ConstantPad3d(padding, value)``."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class ReflectionPad1d(_ReflectionPadNd):
    """``torch.nn.ReflectionPad1d(padding)``: mirror without repeating the edge."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class ReflectionPad2d(_ReflectionPadNd):
    """``torch.nn.ReflectionPad2d(padding)``: mirror without repeating the edge."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class ReflectionPad3d(_ReflectionPadNd):
    """``torch.nn.ReflectionPad3d(padding)``: mirror without repeating the edge."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class ReplicationPad1d(_ReplicationPadNd):
    """``torch.nn.ReplicationPad1d(padding)``: repeat the edge value."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class ReplicationPad2d(_ReplicationPadNd):
    """``torch.nn.ReplicationPad2d(padding)``: repeat the edge value."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class ReplicationPad3d(_ReplicationPadNd):
    """``torch.nn.ReplicationPad3d(padding)``: repeat the edge value."""

    _n = 3


@dataclasses.dataclass(frozen=True)
class CircularPad1d(_CircularPadNd):
    """``torch.nn.CircularPad1d(padding)``: wrap around."""

    _n = 1


@dataclasses.dataclass(frozen=True)
class CircularPad2d(_CircularPadNd):
    """``torch.nn.CircularPad2d(padding)``: wrap around."""

    _n = 2


@dataclasses.dataclass(frozen=True)
class CircularPad3d(_CircularPadNd):
    """``torch.nn.CircularPad3d(padding)``: wrap around."""

    _n = 3
