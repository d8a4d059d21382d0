"""Gradient clipping with torch's exact formulas, as functions and as optax transforms.

``clip_grad_norm`` is ``torch.nn.utils.clip_grad_norm_``: per-leaf ``norm_type``-norms,
the norm of those norms as ``total_norm``, then every leaf times
``min(max_norm / (total_norm + 1e-6), 1)``. The ``1e-6`` is torch's; optax's
``clip_by_global_norm`` scales by ``max_norm / total_norm`` instead, so the two
differ in the sixth-or-so digit whenever clipping happens (the clipped norm is
``max_norm · total/(total + 1e-6)``, just under ``max_norm``, in torch).

``clip_grad_value`` is ``torch.nn.utils.clip_grad_value_``: every element into
``[-clip_value, clip_value]``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

_TORCH_EPS = 1e-6


def _check_number(name: str, value, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` (={value!r}) must be a number.")
    value = float(value)
    if math.isnan(value) or (positive and value <= 0) or value < 0:
        raise ValueError(f"`{name}` (={value!r}) must be {'> 0' if positive else '>= 0'}.")
    return value


def _leaf_norm(leaf: jax.Array, norm_type: float) -> jax.Array:
    flat = jnp.ravel(leaf)
    if math.isinf(norm_type):
        return jnp.max(jnp.abs(flat)) if flat.size else jnp.zeros((), leaf.dtype)
    return jnp.linalg.norm(flat, ord=norm_type)


def global_norm(grads, norm_type: float = 2.0) -> jax.Array:
    """torch's ``total_norm``: the ``norm_type``-norm of the per-leaf norms, shape `()`.

    Args:
      grads: a pytree of gradient arrays.
      norm_type: the p of the p-norm (> 0); ``float("inf")`` for the max-abs norm.

    Returns:
      The total norm, a `()` array of the gradients' dtype.

    Raises:
      ValueError: ``grads`` without array leaves, or ``norm_type`` ≤ 0.
      TypeError: a ``norm_type`` that is not a number.
    """
    return total_of_norms(leaf_norms(grads, norm_type), norm_type)


def leaf_norms(grads, norm_type: float = 2.0) -> list:
    """Each array leaf's ``norm_type``-norm, in ``jax.tree.leaves`` order (`()` arrays);
    ``total_of_norms`` of them is ``global_norm(grads, norm_type)``, bit for bit."""
    norm_type = _check_number("norm_type", norm_type, positive=True)
    leaves = jax.tree.leaves(grads)
    if not leaves:
        raise ValueError("`grads` has no array leaves; there is nothing to clip.")
    return [_leaf_norm(leaf, norm_type) for leaf in leaves]


def total_of_norms(norms, norm_type: float = 2.0) -> jax.Array:
    """The ``norm_type``-norm of per-leaf norms (``leaf_norms``): torch's ``total_norm``."""
    return _leaf_norm(jnp.stack(norms), norm_type)


def clip_grad_norm(grads, max_norm: float, norm_type: float = 2.0):
    """Scale ``grads`` so their total norm is at most ``max_norm``, torch's way.

    Args:
      grads: a pytree of gradient arrays (any shapes, one floating dtype).
      max_norm: the largest allowed total norm.
      norm_type: the p of the p-norm; ``float("inf")`` for the max-abs norm.

    Returns:
      ``(clipped, total_norm)``: ``grads`` times ``min(max_norm / (total_norm + 1e-6), 1)``
      and the total norm *before* clipping, shape `()`.

    Raises:
      ValueError: a negative or NaN ``max_norm``, a ``norm_type`` ≤ 0, or ``grads``
        without array leaves.
      TypeError: a ``max_norm`` or ``norm_type`` that is not a number.
    """
    max_norm = _check_number("max_norm", max_norm)
    total_norm = global_norm(grads, norm_type)
    coef = jnp.minimum(max_norm / (total_norm + _TORCH_EPS), 1.0).astype(total_norm.dtype)
    clipped = jax.tree.map(lambda g: g * coef.astype(g.dtype), grads)
    return clipped, total_norm


def clip_grad_value(grads, clip_value: float):
    """Clamp every element of ``grads`` into ``[-clip_value, clip_value]`` (torch's
    ``clip_grad_value_``).

    Args:
      grads: a pytree of gradient arrays.
      clip_value: the bound, ≥ 0.

    Returns:
      The clamped pytree, same structure, shapes and dtypes.

    Raises:
      ValueError: a negative or NaN ``clip_value``.
      TypeError: a ``clip_value`` that is not a number.
    """
    clip_value = _check_number("clip_value", clip_value)
    return jax.tree.map(lambda g: jnp.clip(g, -clip_value, clip_value), grads)


def clip_grad_norm_transform(
    max_norm: float, norm_type: float = 2.0
) -> optax.GradientTransformation:
    """``clip_grad_norm`` as a stateless optax transformation (chain it before the
    optimizer); its arguments are refused as ``clip_grad_norm`` refuses them, when it is
    built.

    Args:
      max_norm: the largest allowed total norm.
      norm_type: the p of the p-norm; ``float("inf")`` for the max-abs norm.
    """
    _check_number("max_norm", max_norm)
    _check_number("norm_type", norm_type, positive=True)
    return optax.stateless(lambda updates, params: clip_grad_norm(updates, max_norm, norm_type)[0])


def clip_grad_value_transform(clip_value: float) -> optax.GradientTransformation:
    """``clip_grad_value`` as a stateless optax transformation (chain it before the
    optimizer); ``clip_value`` (the bound, ≥ 0) is refused as ``clip_grad_value`` refuses
    it, when it is built."""
    _check_number("clip_value", clip_value)
    return optax.stateless(lambda updates, params: clip_grad_value(updates, clip_value))
