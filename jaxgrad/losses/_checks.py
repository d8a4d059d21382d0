"""Argument checks shared by every loss, and the checked (``checkify``) variant.

Shape and dtype problems are always a ``ValueError``/``TypeError`` naming the argument.
*Value* problems (a class index outside ``[0, C)``, a probability outside ``[0, 1]``, a
negative variance) can only be seen when the values are concrete:

- eagerly, and under ``jax.grad`` without ``jit``, they raise ``ValueError`` like torch;
- under ``jit`` (traced values) nothing can raise: the offending elements become NaN,
  which poisons any reduction — never a silently plausible number;
- ``checked(loss_fn)`` wraps a loss with ``jax.experimental.checkify`` so the same
  conditions become runtime errors inside ``jit``: it returns ``(error, value)`` and
  ``error.throw()`` raises.
"""

from __future__ import annotations

import contextvars
import functools

import jax
import jax.numpy as jnp
from jax.experimental import checkify

REDUCTIONS = ("mean", "sum", "none")
"""The ``reduction`` values every loss takes (``kl_div`` also ``"batchmean"``)."""

_CHECKIFY = contextvars.ContextVar("jaxgrad_losses_checkify", default=False)


def check_reduction(reduction, allowed=REDUCTIONS):
    if not isinstance(reduction, str) or reduction not in allowed:
        choices = ", ".join(repr(r) for r in allowed)
        raise ValueError(f"`reduction` (={reduction!r}) must be one of {choices}.")


def reduce(losses, reduction: str):
    if reduction == "mean":
        return jnp.mean(losses)
    if reduction == "sum":
        return jnp.sum(losses)
    return losses


def check_floating(loss: str, name: str, value):
    if not hasattr(value, "dtype") or not jnp.issubdtype(value.dtype, jnp.floating):
        dtype = getattr(value, "dtype", type(value).__name__)
        raise TypeError(f"{loss}: `{name}` must be a floating array, got {dtype}.")


def check_same_shape(loss: str, input, other, name: str = "target"):
    if tuple(input.shape) != tuple(other.shape):
        raise ValueError(
            f"{loss}: `{name}` shape {tuple(other.shape)} must equal `input` shape "
            f"{tuple(input.shape)} (jaxgrad does not broadcast losses)."
        )


def check_broadcastable(loss: str, name: str, value, shape):
    try:
        out = jnp.broadcast_shapes(tuple(value.shape), tuple(shape))
    except ValueError:
        out = None
    if out != tuple(shape):
        raise ValueError(
            f"{loss}: `{name}` shape {tuple(value.shape)} must broadcast to `input` shape "
            f"{tuple(shape)}."
        )


def check_number(loss: str, name: str, value, *, positive=False, nonnegative=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{loss}: `{name}` (={value!r}) must be a float or int.")
    if positive and not value > 0:
        raise ValueError(f"{loss}: `{name}` (={value!r}) must be > 0.")
    if nonnegative and not value >= 0:
        raise ValueError(f"{loss}: `{name}` (={value!r}) must be >= 0.")
    return value


def _concrete_bool(flag):
    """``bool(flag)`` when the value is known, None when traced under ``jit``."""
    try:
        return bool(flag)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError):
        return None


def require(ok, message: str):
    """Raise ``ValueError(message)`` when ``ok`` (a boolean array) is concretely False.

    Under ``jit`` the check is a ``checkify.check`` inside ``checked(...)``, and
    nothing otherwise (the caller makes the offending elements NaN).
    """
    all_ok = jnp.all(ok)
    known = _concrete_bool(all_ok)
    if known is False:
        raise ValueError(message)
    if known is None and _CHECKIFY.get():
        checkify.check(all_ok, message)


def checked(loss_fn):
    """``loss_fn`` with its value checks as ``checkify`` errors, usable under ``jit``.

    ``checked(cross_entropy)(logits, target)`` returns ``(error, loss)``; call
    ``error.throw()`` to raise when a class index was out of range (``error.get()`` is
    None when all checks passed). ``jax.jit(checked(cross_entropy))`` works.

    Args:
      loss_fn: a ``jaxgrad.losses`` function (or a function calling them).

    Returns:
      ``loss_fn`` wrapped by ``jax.experimental.checkify``: same arguments, returns
      ``(error, loss)``.
    """

    def with_checks(*args, **kwargs):
        token = _CHECKIFY.set(True)
        try:
            return loss_fn(*args, **kwargs)
        finally:
            _CHECKIFY.reset(token)

    return functools.wraps(loss_fn)(checkify.checkify(with_checks))
