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

from jaxgrad.nn import functional as F
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


# --- the activations CNNs use: thin over jaxgrad.nn.functional (torch's backward at
# the kinks and constants lives there, next to each forward rule)


@dataclasses.dataclass(frozen=True)
class ReLU6(_Activation):
    """``torch.nn.ReLU6(inplace=False)``: ``min(max(x, 0), 6)``, gradient 0 at 0 and 6."""

    inplace: bool = False

    def forward(self, params, x):
        return F.relu6(x)


@dataclasses.dataclass(frozen=True)
class SiLU(_Activation):
    """``torch.nn.SiLU(inplace=False)``: ``x·σ(x)``."""

    inplace: bool = False

    def forward(self, params, x):
        return F.silu(x)


@dataclasses.dataclass(frozen=True)
class Hardswish(_Activation):
    """``torch.nn.Hardswish(inplace=False)``; gradient 0 at −3 and 1 at 3, as torch's."""

    inplace: bool = False

    def forward(self, params, x):
        return F.hardswish(x)


@dataclasses.dataclass(frozen=True)
class Hardsigmoid(_Activation):
    """``torch.nn.Hardsigmoid(inplace=False)``; gradient float32(1/6) inside (−3, 3)."""

    inplace: bool = False

    def forward(self, params, x):
        return F.hardsigmoid(x)


@dataclasses.dataclass(frozen=True)
class ELU(_Activation):
    """``torch.nn.ELU(alpha=1.0, inplace=False)``."""

    alpha: float = 1.0
    inplace: bool = False

    def forward(self, params, x):
        return F.elu(x, self.alpha)


@dataclasses.dataclass(frozen=True)
class Softplus(_Activation):
    """``torch.nn.Softplus(beta=1.0, threshold=20.0)``: linear where ``beta·x > threshold``."""

    beta: float = 1.0
    threshold: float = 20.0

    def forward(self, params, x):
        return F.softplus(x, self.beta, self.threshold)


@dataclasses.dataclass(frozen=True)
class Mish(_Activation):
    """``torch.nn.Mish(inplace=False)``: ``x·tanh(softplus(x))``."""

    inplace: bool = False

    def forward(self, params, x):
        return F.mish(x)


@dataclasses.dataclass(frozen=True)
class Softmax(_Activation):
    """``torch.nn.Softmax(dim=None)``. ``dim=None`` keeps torch's legacy implicit
    choice (dim 0 for 0-, 1- and 3-dimensional inputs, else 1) and warns, as torch."""

    dim: int | None = None

    def forward(self, params, x):
        return F.softmax(x, self.dim)


@dataclasses.dataclass(frozen=True)
class LogSoftmax(_Activation):
    """``torch.nn.LogSoftmax(dim=None)``; ``dim=None`` as ``Softmax``."""

    dim: int | None = None

    def forward(self, params, x):
        return F.log_softmax(x, self.dim)
