"""``Upsample`` mirroring ``torch.nn.Upsample``, thin over ``F.interpolate``.

Modes ``'nearest'`` (torch's default), ``'linear'`` and ``'bilinear'``, with and
without ``align_corners``; index and weight rules are torch's (see
``jaxgrad.nn.functional._upsample``), not ``jax.image.resize``'s (which antialiases
when downsampling and has no ``align_corners``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxgrad.nn import functional as F
from jaxgrad.nn._layer import Layer
from jaxgrad.nn.functional._upsample import MODES


@dataclasses.dataclass(frozen=True)
class Upsample(Layer):
    """``torch.nn.Upsample(size=None, scale_factor=None, mode='nearest',
    align_corners=None, recompute_scale_factor=None)``. Input `(N, C, L)` or
    `(N, C, H, W)`."""

    size: Any = None
    scale_factor: Any = None
    mode: str = "nearest"
    align_corners: bool | None = None
    recompute_scale_factor: bool | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(
                f"Upsample: `mode` (={self.mode!r}) must be one of "
                f"{', '.join(map(repr, MODES))}; other torch modes are not "
                "implemented."
            )
        if self.mode == "nearest" and self.align_corners is not None:
            raise ValueError(
                f"Upsample: `align_corners` (={self.align_corners!r}) can only be "
                "set with the interpolating modes 'linear' and 'bilinear'."
            )
        if (self.size is None) == (self.scale_factor is None):
            raise ValueError(
                f"Upsample: exactly one of `size` (={self.size!r}) and "
                f"`scale_factor` (={self.scale_factor!r}) must be given."
            )

    def forward(self, params, x):
        return F.interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )
