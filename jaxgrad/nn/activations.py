"""Elementwise activations mirroring ``torch.nn``: no parameters, ``init`` returns ``{}``.

Defaults follow torch, not the JAX ecosystem: ``GELU()`` is the exact erf form
(``jax.nn.gelu`` defaults to the tanh approximation) and ``LeakyReLU`` slopes 0.01.
``inplace=`` is accepted for signature parity; nothing in JAX is in place.

Each forward rule sits next to the derivative autodiff takes from it, for the reader:

======================  =====================================  ==========================
layer                   forward                                derivative
======================  =====================================  ==========================
ReLU                    max(x, 0)                              1 if x > 0 else 0 (0 at 0)
LeakyReLU(s)            x if x > 0 else s·x                    1 if x > 0 else s
Sigmoid                 1 / (1 + e^-x)                         σ(x)(1 − σ(x)) ≤ 0.25
Tanh                    tanh x                                 1 − tanh² x
GELU('none')            x·Φ(x)                                 Φ(x) + x·φ(x)
GELU('tanh')            ½x(1 + tanh(√(2/π)(x + 0.044715x³)))   (autodiff of the formula)
======================  =====================================  ==========================
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxgrad.nn.module import Module


class _Activation(Module):
    def init(self, key):
        return {}


@dataclasses.dataclass(frozen=True)
class ReLU(_Activation):
    """``torch.nn.ReLU(inplace=False)``. Gradient at exactly 0 is 0, as torch's."""

    inplace: bool = False

    def forward(self, params, x):
        # jax.nn.relu's custom JVP gives 0 at x == 0, like torch's threshold_backward;
        # a bare jnp.maximum(x, 0) would split it 0.5 / 0.5.
        return jax.nn.relu(x)


@dataclasses.dataclass(frozen=True)
class LeakyReLU(_Activation):
    """``torch.nn.LeakyReLU(negative_slope=0.01, inplace=False)``."""

    negative_slope: float = 1e-2
    inplace: bool = False

    def forward(self, params, x):
        return jnp.where(x > 0, x, x * jnp.asarray(self.negative_slope, x.dtype))


@dataclasses.dataclass(frozen=True)
class Sigmoid(_Activation):
    """``torch.nn.Sigmoid()``."""

    def forward(self, params, x):
        return jax.nn.sigmoid(x)


@dataclasses.dataclass(frozen=True)
class Tanh(_Activation):
    """``torch.nn.Tanh()``."""

    def forward(self, params, x):
        return jnp.tanh(x)


@dataclasses.dataclass(frozen=True)
class GELU(_Activation):
    """``torch.nn.GELU(approximate='none')``; ``'tanh'`` selects the approximation."""

    approximate: str = "none"

    def __post_init__(self):
        if self.approximate not in ("none", "tanh"):
            raise ValueError(
                f"`approximate` (={self.approximate!r}) must be 'none' or 'tanh'."
            )

    def forward(self, params, x):
        return jax.nn.gelu(x, approximate=self.approximate == "tanh")
