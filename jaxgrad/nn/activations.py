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
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from jaxgrad._arrays import canonical_dtype, check_dtype_available, check_input_dtype
from jaxgrad.nn import functional as F
from jaxgrad.nn.module import Module, require_params


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
            raise ValueError(f"`approximate` (={self.approximate!r}) must be 'none' or 'tanh'.")

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


@dataclasses.dataclass(frozen=True)
class Softmin(_Activation):
    """``torch.nn.Softmin(dim=None)``: ``softmax(-x)``; ``dim=None`` as ``Softmax``."""

    dim: int | None = None

    def forward(self, params, x):
        return F.softmin(x, self.dim)


@dataclasses.dataclass(frozen=True)
class Softmax2d(_Activation):
    """``torch.nn.Softmax2d()``: softmax over the channels of a `(N, C, H, W)` or
    `(C, H, W)` input (dimension −3)."""

    def forward(self, params, x):
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected `input` to be 3D or 4D, got {x.ndim}D instead.")
        return F.softmax(x, -3)


# --- the rest of torch.nn's elementwise activations (forward rules and torch's
# derivatives, kinks included, in jaxgrad.nn.functional._activation)


@dataclasses.dataclass(frozen=True)
class CELU(_Activation):
    """``torch.nn.CELU(alpha=1.0, inplace=False)``: ``x`` if ``x > 0`` else
    ``alpha·expm1(x / alpha)``; ``alpha`` must not be 0."""

    alpha: float = 1.0
    inplace: bool = False

    def __post_init__(self):
        if self.alpha == 0:
            raise ValueError(
                'CELU: `alpha` (=0) cannot be 0 (torch: "ZeroDivisionError: '
                'alpha cannot be 0 for CELU").'
            )

    def forward(self, params, x):
        return F.celu(x, self.alpha)


@dataclasses.dataclass(frozen=True)
class SELU(_Activation):
    """``torch.nn.SELU(inplace=False)``: ``scale·ELU(x, alpha)`` with torch's
    constants (alpha ≈ 1.6733, scale ≈ 1.0507)."""

    inplace: bool = False

    def forward(self, params, x):
        return F.selu(x)


@dataclasses.dataclass(frozen=True)
class GLU(_Activation):
    """``torch.nn.GLU(dim=-1)``: ``a·σ(b)``, ``a`` and ``b`` the two halves of the
    input along ``dim`` (whose size must be even); output `(*, size / 2, *)`."""

    dim: int = -1

    def forward(self, params, x):
        return F.glu(x, self.dim)


@dataclasses.dataclass(frozen=True)
class Hardtanh(_Activation):
    """``torch.nn.Hardtanh(min_val=-1.0, max_val=1.0, inplace=False, min_value=None,
    max_value=None)``: ``min(max(x, min_val), max_val)``; gradient 0 at both bounds.

    ``min_value`` / ``max_value`` are torch's deprecated spellings: given, they
    replace ``min_val`` / ``max_val`` and warn, as torch's constructor does.
    """

    min_val: float = -1.0
    max_val: float = 1.0
    inplace: bool = False
    min_value: float | None = None
    max_value: float | None = None

    def __post_init__(self):
        for old, new in (("min_value", "min_val"), ("max_value", "max_val")):
            if getattr(self, old) is not None:
                warnings.warn(
                    f"keyword argument `{old}` is deprecated and rename to `{new}`",
                    FutureWarning,
                    stacklevel=3,
                )
                object.__setattr__(self, new, getattr(self, old))
                object.__setattr__(self, old, None)
        if not self.max_val > self.min_val:
            raise ValueError(
                f"Hardtanh: `max_val` (={self.max_val}) must be greater than "
                f"`min_val` (={self.min_val})."
            )

    def forward(self, params, x):
        return F.hardtanh(x, self.min_val, self.max_val)


@dataclasses.dataclass(frozen=True)
class Threshold(_Activation):
    """``torch.nn.Threshold(threshold, value, inplace=False)``: ``x`` if
    ``x > threshold`` else ``value``; gradient 0 at ``threshold``."""

    threshold: float
    value: float
    inplace: bool = False

    def forward(self, params, x):
        return F.threshold(x, self.threshold, self.value)


@dataclasses.dataclass(frozen=True)
class Hardshrink(_Activation):
    """``torch.nn.Hardshrink(lambd=0.5)``: 0 on ``[-lambd, lambd]``, else ``x``."""

    lambd: float = 0.5

    def forward(self, params, x):
        return F.hardshrink(x, self.lambd)


@dataclasses.dataclass(frozen=True)
class Softshrink(_Activation):
    """``torch.nn.Softshrink(lambd=0.5)``: 0 on ``[-lambd, lambd]``, else ``x`` moved
    ``lambd`` towards 0; ``lambd`` must be ≥ 0 (torch checks it at the forward,
    jaxgrad at construction)."""

    lambd: float = 0.5

    def __post_init__(self):
        if not self.lambd >= 0:
            raise ValueError(f"Softshrink: `lambd` (={self.lambd!r}) must be ≥ 0.")

    def forward(self, params, x):
        return F.softshrink(x, self.lambd)


@dataclasses.dataclass(frozen=True)
class LogSigmoid(_Activation):
    """``torch.nn.LogSigmoid()``: ``log σ(x) = −softplus(−x)``."""

    def forward(self, params, x):
        return F.logsigmoid(x)


@dataclasses.dataclass(frozen=True)
class Softsign(_Activation):
    """``torch.nn.Softsign()``: ``x / (1 + |x|)``."""

    def forward(self, params, x):
        return F.softsign(x)


@dataclasses.dataclass(frozen=True)
class Tanhshrink(_Activation):
    """``torch.nn.Tanhshrink()``: ``x − tanh x``."""

    def forward(self, params, x):
        return F.tanhshrink(x)


@dataclasses.dataclass(frozen=True, init=False)
class PReLU(Module):
    """``torch.nn.PReLU(num_parameters=1, init=0.25, device=None, dtype=None)``:
    ``x`` if ``x > 0`` else ``weight·x``.

    Params: ``weight`` `(num_parameters,)`, every entry ``init`` (torch's
    ``constant_``). One slope for the whole input, or one per channel — the input's
    dimension 1, whose size must then be ``num_parameters``.

    The constructor takes torch's arguments; two are stored under other names because
    every jaxgrad layer has methods called ``init(key)`` and ``num_parameters()``:
    ``num_parameters`` as ``num_slopes``, ``init`` as ``init_value`` (the constructor
    also takes these two names, which ``dataclasses.replace`` passes).
    """

    num_slopes: int = 1
    init_value: float = 0.25
    device: Any = None  # accepted for signature parity with torch; placement is jax's
    dtype: Any = None  # None means torch's default, float32

    def __init__(
        self,
        num_parameters: int = 1,
        init: float = 0.25,
        device: Any = None,
        dtype: Any = None,
        *,
        num_slopes: int | None = None,
        init_value: float | None = None,
    ):
        count = num_parameters if num_slopes is None else num_slopes
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"`num_parameters` (={count!r}) must be a non-negative int.")
        object.__setattr__(self, "num_slopes", count)
        object.__setattr__(self, "init_value", float(init if init_value is None else init_value))
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "dtype", canonical_dtype(dtype))

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        return {"weight": jnp.full((self.num_slopes,), self.init_value, dtype)}

    def forward(self, params, x):
        require_params("PReLU", params, ("weight",))
        check_input_dtype("PReLU", x, params["weight"].dtype)
        return F.prelu(x, params["weight"])
