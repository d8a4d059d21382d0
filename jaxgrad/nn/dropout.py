"""``Dropout``, ``Dropout1d``, ``Dropout2d``, mirroring ``torch.nn``.

``p`` is torch's probability of *dropping* (stax's ``rate`` is the keep probability).
``train=False`` is the identity. ``train=True`` needs randomness: the layer draws its
mask from ``layer_key(key, path)``, its own key derived from the caller's and its
path in the model, so the same key gives the same masks whatever else the model
holds; without a key it raises, naming its path. ``mask=`` (a keep-mask, True =
kept) replaces the draw, to inject torch's masks: ``Dropout(0.2).apply({}, x,
train=True, mask=m)``.
"""

from __future__ import annotations

import dataclasses

from jaxgrad.nn.functional import _dropout
from jaxgrad.nn.module import Module, layer_key


@dataclasses.dataclass(frozen=True)
class _DropoutBase(Module):
    p: float = 0.5
    inplace: bool = False  # accepted for signature parity; nothing in JAX is in place

    _FUNCTION = None

    def __post_init__(self):
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(
                f"`p` (={self.p}) must be a dropout probability in [0, 1], torch's "
                "probability of zeroing (not the keep rate)."
            )

    def init(self, key):
        return {}

    def forward_with_state(self, params, x, *, buffers, train, key, path, mask=None):
        active = train and 0.0 < self.p < 1.0  # p == 1 zeroes, p == 0 copies: no draw
        if active and key is None and mask is None:
            where = f"at {path!r}" if path else "at the top level"
            raise ValueError(
                f"{type(self).__name__}(p={self.p}) {where}: `train=True` needs a "
                "`key=` (a jax.random key) for the dropout mask, got key=None; pass "
                "`train=False` for evaluation."
            )
        function = type(self)._FUNCTION
        own_key = layer_key(key, path) if active and mask is None else None
        try:
            return function(x, self.p, train, key=own_key, mask=mask), dict(buffers)
        except ValueError as error:  # the functional form knows no path: add it
            where = f" at {path!r}" if path else ""
            raise ValueError(f"{type(self).__name__}{where}: {error}") from None


@dataclasses.dataclass(frozen=True)
class Dropout(_DropoutBase):
    """``torch.nn.Dropout(p=0.5, inplace=False)``: any input shape; each element kept
    with probability ``1 − p`` and scaled by ``1 / (1 − p)``."""

    _FUNCTION = staticmethod(_dropout.dropout)


@dataclasses.dataclass(frozen=True)
class Dropout1d(_DropoutBase):
    """``torch.nn.Dropout1d(p=0.5, inplace=False)``: whole channels of `(N, C, L)` or
    `(C, L)`; the mask is `(N, C, 1)`."""

    _FUNCTION = staticmethod(_dropout.dropout1d)


@dataclasses.dataclass(frozen=True)
class Dropout2d(_DropoutBase):
    """``torch.nn.Dropout2d(p=0.5, inplace=False)``: whole channels of `(N, C, H, W)`;
    the mask is `(N, C, 1, 1)` (a 3-D input is read as `(N, C, L)`, as torch does)."""

    _FUNCTION = staticmethod(_dropout.dropout2d)
