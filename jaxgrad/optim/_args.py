"""Argument checks and the optax pieces every torch-rule optimizer shares (how a factory
puts them together: ``jaxgrad.optim._family``).

- hyperparameters are validated as torch validates them (``ValueError`` naming the
  argument, the value and the allowed range);
- ``lr`` is a float, a one-element array (torch's tensor ``lr``) or a schedule
  ``count -> lr`` (``jaxgrad.optim.schedulers``); SGD's / RMSprop's ``momentum`` and
  the Adam family's ``betas[0]`` are a float or a schedule (``OneCycleLR(...).momentum``,
  torch's ``cycle_momentum``); ``value_at`` resolves either for a step;
- torch's implementation flags: ``foreach`` (None/False/True) and ``differentiable``
  (False/True) do not change torch's arithmetic on CPU for most optimizers — jaxgrad
  computes torch's single-tensor rule, and every JAX update is differentiable — so they
  are accepted and ignored; where they do, they are refused by name (ASGD's
  ``foreach=True``; Adam's, AdamW's and NAdam's ``differentiable=True``, which take
  torch's capturable path); ``fused=True`` (a different kernel with its own rounding) and
  ``capturable=True`` (which torch refuses for CPU tensors; a jitted JAX step is
  always capturable) are refused by name, as are the combinations torch refuses.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax


def check_hyper(
    name: str, value, *, low: float = 0.0, high: float | None = None, open_high: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` (={value!r}) must be a number.")
    if (
        math.isnan(value)
        or value < low
        or (high is not None and (value >= high if open_high else value > high))
    ):
        bound = "" if high is None else (f" and < {high}" if open_high else f" and <= {high}")
        raise ValueError(f"`{name}` (={value!r}) must be >= {low}{bound}.")
    return float(value)


def check_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{name}` (={value!r}) must be an int >= {low}.")
    return value


def check_last_epoch(last_epoch) -> None:
    """Schedules take torch's ``last_epoch`` only as -1 (they resume from the count)."""
    if last_epoch != -1:
        raise ValueError(
            f"`last_epoch` (={last_epoch!r}) must be -1: a jaxgrad schedule is a "
            "pure function of the step count; resume by passing the count."
        )


def float_count(count) -> jax.Array:
    """A step count as the default float dtype, for schedule arithmetic."""
    return jnp.asarray(count).astype(jnp.result_type(float))


def int_count(count) -> jax.Array:
    """A step count as the default int dtype, for a user's function of the epoch: optax
    counts in int32, and ``1 / (epoch + 1)`` of an int32 is float32 even with x64."""
    count = jnp.asarray(count)
    return count.astype(jnp.result_type(int)) if jnp.issubdtype(count.dtype, jnp.integer) else count


def check_betas(betas) -> tuple:
    """``(beta1, beta2)``: Python floats in [0, 1); ``beta1`` may be a schedule."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"`betas` (={betas!r}) must be a pair (beta1, beta2).")
    if any(
        not isinstance(b, (int, float)) or isinstance(b, bool)
        for b in betas[int(callable(betas[0])) :]
    ):
        raise TypeError(
            f"`betas` (={betas!r}) must be two Python floats (beta1 may be a schedule, "
            "e.g. OneCycleLR(...).momentum); tensor betas (torch computes with them in "
            "their own dtype) are not supported."
        )
    b1 = (
        betas[0]
        if callable(betas[0])
        else check_hyper("betas[0]", betas[0], high=1.0, open_high=True)
    )
    b2 = check_hyper("betas[1]", betas[1], high=1.0, open_high=True)
    return b1, b2


def check_momentum(momentum):
    """A Python float >= 0, or a schedule ``count -> momentum``."""
    if callable(momentum):
        return momentum
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(
            f"`momentum` (={momentum!r}) must be a number or a schedule "
            "count -> momentum (e.g. OneCycleLR(...).momentum)."
        )
    return check_hyper("momentum", momentum)


def _as_array(value):
    if hasattr(value, "detach") and hasattr(value, "numel"):  # a torch tensor, duck-typed
        value = value.detach().cpu().numpy()
    return value


def check_lr(lr):
    """A float, a 0-d float array (from a one-element array or tensor), or a schedule."""
    if callable(lr):
        return lr
    lr = _as_array(lr)
    if hasattr(lr, "shape") and hasattr(lr, "dtype"):
        if int(np.prod(lr.shape)) != 1:
            raise ValueError(
                f"`lr` must be a float or a one-element array, got shape "
                f"{tuple(lr.shape)} (torch: 'Tensor lr must be 1-element')."
            )
        if not jnp.issubdtype(lr.dtype, jnp.floating):
            raise TypeError(f"`lr` array dtype {lr.dtype} must be floating.")
        lr = jnp.asarray(lr).reshape(())
        try:
            value = float(lr)
        except Exception:  # a traced lr: checked by the caller's jit, not here  # noqa: BLE001
            return lr
        if not value >= 0:
            raise ValueError(f"`lr` (={value!r}) must be >= 0.")
        return lr
    return check_hyper("lr", lr)


def check_flags(
    *, foreach=None, fused=None, differentiable=False, capturable=False, lr=None
) -> None:
    """Accept torch's implementation flags where they cannot change the result."""
    for name, value, allowed in (
        ("foreach", foreach, (None, False, True)),
        ("fused", fused, (None, False, True)),
        ("differentiable", differentiable, (False, True)),
        ("capturable", capturable, (False, True)),
    ):
        if not any(value is a for a in allowed):
            raise TypeError(f"`{name}` (={value!r}) must be one of {allowed}.")
    if fused:
        raise ValueError(
            "`fused=True` is not supported: torch's fused kernel rounds differently from "
            "its single-tensor rule, which is the one jaxgrad reproduces; pass fused=None."
        )
    if capturable:
        raise ValueError(
            "`capturable=True` is not supported: torch refuses it for CPU tensors, and a "
            "jitted jaxgrad step is always graph-capturable; pass capturable=False."
        )
    if foreach and lr is not None and not callable(lr) and hasattr(lr, "shape"):
        raise ValueError(
            "`lr` as an array is not supported with `foreach=True` (torch: 'lr as a Tensor "
            "is not supported for capturable=False and foreach=True')."
        )


def refuse_differentiable(optimizer: str, differentiable) -> None:
    """``differentiable=True`` where torch then takes its capturable path (Adam, AdamW,
    NAdam): the bias corrections on the float32 ``step`` tensor, in float32 arithmetic
    (7e-9 relative from the single-tensor rule after one step)."""
    if differentiable:
        raise ValueError(
            f"{optimizer}: `differentiable=True` is not supported: torch then computes the "
            "bias corrections on its float32 `step` tensor (its capturable path), 7e-9 "
            "relative from the single-tensor rule jaxgrad reproduces; every jaxgrad update "
            "is differentiable already, pass differentiable=False."
        )


def value_at(value, count):
    """A hyperparameter (``lr``, ``momentum``, ``beta1``) for the step after ``count``
    steps: ``schedule(count)`` or the constant itself."""
    return value(count) if callable(value) else value


def like_lr(lr_value, value):
    """``value`` as torch combines it with ``lr``: a Python number with a float ``lr``,
    the ``lr`` array's dtype with an array ``lr`` (torch's 0-d tensor arithmetic)."""
    if hasattr(lr_value, "dtype"):
        return jnp.asarray(value).astype(lr_value.dtype)
    return value


def maximize_transform() -> optax.GradientTransformation:
    """``maximize=True``: torch negates the gradient before anything else."""
    return optax.scale(-1.0)


def scale_by_lr(lr) -> optax.GradientTransformation:
    """``-lr * update`` for a float, an array or a schedule (``count`` from 0)."""
    return optax.scale_by_learning_rate(lr)
