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
softplus(β, t)     x if β·x > t else log1p(e^{βx}) / β        1 if β·x > t else σ(βx)
silu               x · σ(x)                                   σ(x)(1 + x(1 − σ(x)))
mish               x · tanh(log1p(eˣ))                        tanh(sp) + x·σ(x)(1 − tanh²(sp))
softmax(dim)       e^{x − max} / Σ e^{x − max}                (autodiff)
log_softmax(dim)   x − max − log Σ e^{x − max}                (autodiff)
=================  =========================================  =================================

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


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _elu(x, alpha):
    # expm1 of the non-positive part only: the unselected branch must not overflow
    negative = jnp.asarray(alpha, x.dtype) * jnp.expm1(jnp.where(x > 0, 0, x))
    return jnp.where(x > 0, x, negative)


@_elu.defjvp
def _elu_jvp(alpha, primals, tangents):
    (x,), (dx,) = primals, tangents
    # torch's α·eˣ, not autodiff's (expm1(x) + 1)·α, which cancels for x ≪ 0
    # (relative error 1e-5 at x = −30), and α at exactly 0 (the x ≤ 0 branch)
    slope = jnp.where(x > 0, 1, jnp.asarray(alpha, x.dtype) * jnp.exp(jnp.where(x > 0, 0, x)))
    return _elu(x, alpha), dx * slope.astype(dx.dtype)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """``torch.nn.functional.elu``: ``x`` if ``x > 0`` else ``alpha·expm1(x)``."""
    return _elu(input, alpha)


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
            "include dim=X as an argument.", UserWarning, stacklevel=3)
        return 0 if ndim in (0, 1, 3) else 1
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"{name}: `dim` (={dim!r}) must be an int or None.")
    rank = max(ndim, 1)  # torch lets a 0-d tensor use dim 0 or -1
    if not -rank <= dim < rank:
        raise ValueError(
            f"{name}: `dim` (={dim}) is out of range for an input of {ndim} dims "
            f"(expected {-rank} ≤ dim < {rank}).")
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
