"""Activations of ``torch.nn.functional``: same names, signatures and defaults.

Each forward rule sits next to its derivative. Where torch's backward kernel is not
the derivative autodiff would take from the forward formula — at the kinks, and in
one constant — the rule is a ``jax.custom_jvp`` carrying torch's backward:

=================  =========================================  =================================
function           forward                                    derivative (torch's kernel)
=================  =========================================  =================================
relu6              min(max(x, 0), 6)                          1 on 0 < x < 6, else 0 (0 at 0, 6)
hardsigmoid        min(max(x + 3, 0), 6) / 6                  1/6 on −3 < x < 3, else 0; the 1/6
                                                              is float32(1/6) = 0.16666667163…
                                                              in every dtype, as torch's kernel
hardswish          x · min(max(x + 3, 0), 6) / 6              0 for x ≤ −3, x/3 + ½ on (−3, 3),
                                                              1 for x ≥ 3
elu(α)             x if x > 0 else α·expm1(x)                 1 if x > 0 else α·eˣ (α at 0;
                                                              not autodiff's α(expm1(x) + 1))
celu(α)            x if x > 0 else α·expm1(x/α)               1 if x > 0 else e^{x/α} (1 at 0)
selu               s·x if x > 0 else s·a·expm1(x)             s if x > 0 else s·a·eˣ (s·a at 0)
softplus(β, t)     x if β·x > t else log1p(e^{βx}) / β        1 if β·x > t else σ(βx)
silu               x · σ(x)                                   σ(x)(1 + x(1 − σ(x)))
mish               x · tanh(log1p(eˣ))                        tanh(sp) + x·σ(x)(1 − tanh²(sp))
softmax(dim)       e^{x − max} / Σ e^{x − max}                (autodiff)
log_softmax(dim)   x − max − log Σ e^{x − max}                (autodiff)
softmin(dim)       softmax(−x)                                (autodiff)
hardtanh(lo, hi)   min(max(x, lo), hi)                        1 on lo < x < hi, else 0
threshold(t, v)    x if x > t else v                          1 if x > t else 0 (0 at t)
hardshrink(λ)      0 on [−λ, λ], else x                       0 on [−λ, λ], else 1
softshrink(λ)      0 on [−λ, λ], else x ∓ λ                   0 on [−λ, λ], else 1
prelu(w)           x if x > 0 else w·x                        1 if x > 0 else w (w at 0);
                                                              ∂/∂w: 0 if x > 0 else x
logsigmoid         −softplus(−x)                              σ(−x)
softsign           x / (1 + |x|)                              1 / (1 + |x|)²
tanhshrink         x − tanh x                                 tanh² x
glu(dim)           a·σ(b), (a, b) the halves along dim        (autodiff)
=================  =========================================  =================================

The piecewise-linear ones (hardtanh to prelu) are ``jnp.where`` on torch's own
comparisons, so autodiff already gives torch's kernel, NaN included (the
non-constant branch: gradient 1, or ``w`` for prelu). At NaN torch's backward
kernels, like these, take the branch whose comparison is false.

``inplace=`` is accepted for signature parity (nothing in JAX is in place).
``softmax``/``log_softmax`` with ``dim=None`` follow torch's legacy implicit choice —
dim 0 for 0-, 1- and 3-dimensional inputs, dim 1 otherwise — and warn, as torch does.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np


def relu(input, inplace: bool = False):
    """``torch.nn.functional.relu``: gradient 0 at 0, as torch's."""
    return jax.nn.relu(input)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """``torch.nn.functional.leaky_relu``: gradient ``negative_slope`` at 0."""
    return jnp.where(input > 0, input, input * jnp.asarray(negative_slope, input.dtype))


def gelu(input, approximate: str = "none"):
    """``torch.nn.functional.gelu``: the exact erf form unless ``approximate='tanh'``."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"`approximate` (={approximate!r}) must be 'none' or 'tanh'.")
    return jax.nn.gelu(input, approximate=approximate == "tanh")


def sigmoid(input):
    """``torch.sigmoid``."""
    return jax.nn.sigmoid(input)


def tanh(input):
    """``torch.tanh``."""
    return jnp.tanh(input)


@jax.custom_jvp
def _relu6(x):
    return jnp.clip(x, 0, 6)


@_relu6.defjvp
def _relu6_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    inside = (x > 0) & (x < 6)
    return _relu6(x), jnp.where(inside, dx, jnp.zeros_like(dx))


def relu6(input, inplace: bool = False):
    """``torch.nn.functional.relu6``: ``min(max(x, 0), 6)``; gradient 0 at 0 and 6."""
    return _relu6(input)


@jax.custom_jvp
def _hardsigmoid(x):
    return jnp.clip(x + 3, 0, 6) / 6


@_hardsigmoid.defjvp
def _hardsigmoid_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    # torch's kernel multiplies by the float32 constant 1.0f / 6.0f in every dtype
    one_sixth = jnp.asarray(np.float32(1.0) / np.float32(6.0), x.dtype)
    inside = (x > -3) & (x < 3)
    return _hardsigmoid(x), jnp.where(inside, dx * one_sixth, jnp.zeros_like(dx))


def hardsigmoid(input, inplace: bool = False):
    """``torch.nn.functional.hardsigmoid``: ``min(max(x + 3, 0), 6) / 6``."""
    return _hardsigmoid(input)


@jax.custom_jvp
def _hardswish(x):
    return x * jnp.clip(x + 3, 0, 6) / 6


@_hardswish.defjvp
def _hardswish_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    slope = jnp.where(x <= -3, 0, jnp.where(x < 3, x / 3 + 0.5, 1)).astype(dx.dtype)
    return _hardswish(x), dx * slope


def hardswish(input, inplace: bool = False):
    """``torch.nn.functional.hardswish``: ``x · min(max(x + 3, 0), 6) / 6``."""
    return _hardswish(input)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def _elu(x, alpha, scale=1.0, input_scale=1.0):
    # torch's one ELU kernel serves elu, celu and selu: x <= 0 ? scale·α·expm1(
    # input_scale·x) : scale·x, tested on x <= 0 as torch's is, so NaN takes the linear
    # branch. expm1 of the non-positive part only: the unselected branch must not overflow
    negative_part = x <= 0
    scaled = jnp.asarray(input_scale, x.dtype) * jnp.where(negative_part, x, 0)
    negative = jnp.asarray(alpha * scale, x.dtype) * jnp.expm1(scaled)
    return jnp.where(negative_part, negative, x * jnp.asarray(scale, x.dtype))


@_elu.defjvp
def _elu_jvp(alpha, scale, input_scale, primals, tangents):
    (x,), (dx,) = primals, tangents
    # torch's input_scale·scale·α·e^{input_scale·x}, not autodiff's derivative of
    # expm1, which cancels for x ≪ 0 (relative error 2e-4 at x = −30); the x ≤ 0
    # branch at exactly 0, and the linear branch's `scale` at NaN, as torch's kernel
    negative_part = x <= 0
    scaled = jnp.asarray(input_scale, x.dtype) * jnp.where(negative_part, x, 0)
    negative = jnp.asarray(input_scale * alpha * scale, x.dtype) * jnp.exp(scaled)
    slope = jnp.where(negative_part, negative, jnp.asarray(scale, x.dtype))
    return _elu(x, alpha, scale, input_scale), dx * slope.astype(dx.dtype)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """``torch.nn.functional.elu``: ``x`` if ``x > 0`` else ``alpha·expm1(x)``."""
    return _elu(input, alpha)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """``torch.nn.functional.celu``: ``x`` if ``x > 0`` else ``alpha·expm1(x / alpha)``;
    gradient ``e^{x/alpha}`` for ``x ≤ 0`` (1 at 0)."""
    if alpha == 0:
        raise ValueError(
            'celu: `alpha` (=0) cannot be 0 (torch: "ZeroDivisionError: '
            'alpha cannot be 0 for CELU").'
        )
    return _elu(input, alpha, 1.0, 1.0 / alpha)


# torch's constants (Klambauer et al. 2017), as written in its ELU kernel's callers
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace: bool = False):
    """``torch.nn.functional.selu``: ``scale·(x if x > 0 else alpha·expm1(x))``;
    gradient ``scale·alpha`` at 0."""
    return _elu(input, _SELU_ALPHA, _SELU_SCALE)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """``torch.nn.functional.softplus``: ``log1p(exp(beta·x)) / beta``, linear where
    ``beta·x > threshold``."""
    scaled = input * jnp.asarray(beta, input.dtype)
    linear = scaled > threshold
    smooth = jnp.log1p(jnp.exp(jnp.where(linear, 0, scaled))) / jnp.asarray(beta, input.dtype)
    return jnp.where(linear, input, smooth)


def silu(input, inplace: bool = False):
    """``torch.nn.functional.silu``: ``x·σ(x)``."""
    return input * jax.nn.sigmoid(input)


@jax.custom_jvp
def _mish(x):
    return x * jnp.tanh(jnp.log1p(jnp.exp(x)))


@_mish.defjvp
def _mish_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    # torch's kernel: σ(x) instead of eˣ/(1 + eˣ), which is NaN once eˣ overflows
    tanh_softplus = jnp.tanh(jnp.log1p(jnp.exp(x)))
    slope = tanh_softplus + x * jax.nn.sigmoid(x) * (1 - tanh_softplus * tanh_softplus)
    return _mish(x), dx * slope


def mish(input, inplace: bool = False):
    """``torch.nn.functional.mish``: ``x·tanh(softplus(x))``."""
    return _mish(input)


def _softmax_dim(name: str, ndim: int, dim: int | None) -> int:
    if dim is None:
        warnings.warn(
            f"Implicit dimension choice for {name} has been deprecated. Change the call to "
            "include dim=X as an argument.",
            UserWarning,
            stacklevel=3,
        )
        return 0 if ndim in (0, 1, 3) else 1
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{name}: `dim` (={dim!r}) must be an int or None.")
    rank = max(ndim, 1)  # torch lets a 0-d tensor use dim 0 or -1
    if not -rank <= dim < rank:
        raise ValueError(
            f"{name}: `dim` (={dim}) is out of range for an input of {ndim} dims "
            f"(expected {-rank} ≤ dim < {rank})."
        )
    return dim


def softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    """``torch.nn.functional.softmax`` along ``dim`` (``dtype``: cast first, as torch)."""
    if dtype is not None:
        input = input.astype(dtype)
    dim = _softmax_dim("softmax", input.ndim, dim)
    if input.ndim == 0:
        return jax.nn.softmax(input[None], axis=0)[0]
    return jax.nn.softmax(input, axis=dim)


def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    """``torch.nn.functional.log_softmax`` along ``dim``."""
    if dtype is not None:
        input = input.astype(dtype)
    dim = _softmax_dim("log_softmax", input.ndim, dim)
    if input.ndim == 0:
        return jax.nn.log_softmax(input[None], axis=0)[0]
    return jax.nn.log_softmax(input, axis=dim)


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    """``torch.nn.functional.softmin``: ``softmax(-x)`` along ``dim``."""
    if dtype is not None:
        input = input.astype(dtype)
    dim = _softmax_dim("softmin", input.ndim, dim)
    if input.ndim == 0:
        return jax.nn.softmax(-input[None], axis=0)[0]
    return jax.nn.softmax(-input, axis=dim)


# --- piecewise-linear activations. Written with ``jnp.where`` on torch's own
# comparisons, so autodiff of the forward *is* torch's backward kernel: 0 at each
# boundary (the constant branch includes it) and the identity's 1 at NaN (every
# comparison with NaN is false, in both kernels)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """``torch.nn.functional.hardtanh``: ``min(max(x, min_val), max_val)``; gradient 1
    strictly inside, 0 at and beyond ``min_val`` and ``max_val``."""
    low, high = jnp.asarray(min_val, input.dtype), jnp.asarray(max_val, input.dtype)
    return jnp.where(input <= low, low, jnp.where(input >= high, high, input))


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """``torch.nn.functional.threshold``: ``x`` if ``x > threshold`` else ``value``;
    gradient 0 at ``threshold``."""
    return jnp.where(input <= threshold, jnp.asarray(value, input.dtype), input)


def hardshrink(input, lambd: float = 0.5):
    """``torch.nn.functional.hardshrink``: 0 on ``[-lambd, lambd]``, else ``x``."""
    inside = (input >= -lambd) & (input <= lambd)
    return jnp.where(inside, jnp.zeros_like(input), input)


def softshrink(input, lambd: float = 0.5):
    """``torch.nn.functional.softshrink``: 0 on ``[-lambd, lambd]``, else ``x`` moved
    ``lambd`` towards 0. ``lambd`` must be ≥ 0, as torch checks."""
    if not lambd >= 0:
        raise ValueError(f"softshrink: `lambd` (={lambd!r}) must be ≥ 0.")
    inside = (input >= -lambd) & (input <= lambd)
    lambd = jnp.asarray(lambd, input.dtype)
    shrunk = jnp.where(input > lambd, input - lambd, input + lambd)
    return jnp.where(inside, jnp.zeros_like(input), shrunk)


# --- smooth elementwise forms: autodiff of the formula is torch's backward


def logsigmoid(input):
    """``torch.nn.functional.logsigmoid``: ``−softplus(−x)``, stable at both ends."""
    return jax.nn.log_sigmoid(input)


def softsign(input):
    """``torch.nn.functional.softsign``: ``x / (1 + |x|)`` (|x|'s gradient 0 at 0)."""
    return input / (1 + jnp.abs(input))


def tanhshrink(input):
    """``torch.nn.functional.tanhshrink``: ``x − tanh x``."""
    return input - jnp.tanh(input)


def glu(input, dim: int = -1):
    """``torch.nn.functional.glu``: ``a·σ(b)`` of the two halves of ``input`` along
    ``dim``, whose size must be even."""
    if input.ndim == 0:
        raise ValueError(
            "glu: `input` is 0-dimensional; glu does not support scalars "
            "because halving size must be even."
        )
    if not isinstance(dim, int) or isinstance(dim, bool) or not -input.ndim <= dim < input.ndim:
        raise ValueError(
            f"glu: `dim` (={dim!r}) is out of range for an input of {input.ndim} dims."
        )
    size = input.shape[dim]
    if size % 2:
        raise ValueError(
            f"glu: halving dimension `dim` (={dim}) must be even, but it is of size {size}."
        )
    first, second = jnp.split(input, 2, axis=dim)
    return first * jax.nn.sigmoid(second)


def prelu(input, weight):
    """``torch.nn.functional.prelu``: ``x`` if ``x > 0`` else ``weight·x``.

    ``weight`` `(1,)` or `(C,)`: one slope, or one per channel, the input's dimension 1
    (an input of fewer than 2 dimensions has one channel, and a 0-d input takes one
    slope only). The gradient at 0 is ``weight``, as torch's kernel.
    """
    if weight.ndim > 1:
        raise ValueError(f"prelu: `weight` must be a scalar or 1-D, got {weight.ndim} dims.")
    slopes = weight.size
    if slopes != 1:
        if input.ndim == 0:
            raise ValueError(
                f"prelu: a 0-dimensional `input` takes one slope, `weight` "
                f'has {slopes} (torch: "Not allow zero-dim input tensor").'
            )
        channels = input.shape[1] if input.ndim > 1 else 1
        if channels != slopes:
            raise ValueError(
                f"prelu: `weight` has {slopes} parameters but the input has {channels} "
                "channels (dimension 1; 1 for an input of fewer than 2 dimensions)."
            )
        weight = weight.reshape((slopes,) + (1,) * (input.ndim - 2))
    else:
        weight = weight.reshape(())
    return jnp.where(input > 0, input, weight * input)
