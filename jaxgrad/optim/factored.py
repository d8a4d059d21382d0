"""torch.optim's Adafactor as an optax transformation.

torch's ``Adafactor`` (not the paper's, nor optax's ``adafactor``): no momentum, the
second moment factored over the last two dimensions of every parameter with two or
more dimensions (``row_var`` of shape ``(..., m, 1)``, ``col_var`` of ``(..., 1, n)``)
and kept whole for a vector (``variance``). At step ``t``:

- ``beta2_t = 1 − t^beta2_decay`` (the running averages lerp towards the new squared
  gradient by ``t^beta2_decay``);
- ``rho_t = min(lr, 1/√t)`` and ``alpha = max(eps[1], RMS(p)) · rho_t``, with the
  parameter's RMS taken before the weight decay;
- ``p *= 1 − lr·weight_decay`` (decoupled), then
  ``p −= alpha / max(1, RMS(u)/d) · u`` with ``u = g / √max(v̂, eps[0]²)``,
  ``v̂ = row_var·col_var / max(mean(row_var), eps[0])`` for a matrix.

``eps[0]`` None is the parameter dtype's machine epsilon, as torch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgrad.optim._args import check_hyper
from jaxgrad.optim._family import (
    check_lr_and_flags,
    refuse_complex,
    scalar_like,
    torch_chain,
    torch_lerp,
    torch_rule,
)
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.state import register_state


@register_state
class AdafactorState(NamedTuple):
    """``adafactor``'s state, torch's ``optimizer.state[p]``.

    Attributes:
      row_var: like params, ``(..., m, 1)`` for a parameter of 2 or more dimensions,
        None for a vector or scalar.
      col_var: like params, ``(..., 1, n)`` for a parameter of 2 or more dimensions,
        None otherwise.
      variance: like params for a vector or scalar, None for the factored ones.
    """

    step: jax.Array
    row_var: Any
    col_var: Any
    variance: Any


def _check_eps(eps) -> tuple:
    if not isinstance(eps, (tuple, list)) or len(eps) != 2:
        raise TypeError(f"`eps` (={eps!r}) must be a pair (eps1 or None, eps2).")
    eps1 = None if eps[0] is None else check_hyper("eps[0]", eps[0])
    return eps1, check_hyper("eps[1]", eps[1])


def adafactor(
    lr=1e-2,
    beta2_decay: float = -0.8,
    eps=(None, 1e-3),
    d: float = 1.0,
    weight_decay: float = 0.0,
    *,
    foreach=None,
    maximize: bool = False,
) -> optax.GradientTransformation:
    """``torch.optim.Adafactor``: factored second moments, relative step sizes, update
    clipping (torch's variant; see the module's docstring for the rule).

    ``maximize`` and ``foreach`` are every factory's (``jaxgrad.optim``).

    Args:
      lr: the step size's cap ``rho_t = min(lr, 1/√t)``: a float, a one-element array
        (torch's tensor ``lr``) or a schedule ``count -> lr``.
      beta2_decay: the decay rate's exponent, ``<= 0``: the running averages move by
        ``t^beta2_decay`` at step ``t``.
      eps: ``(eps1, eps2)``: ``eps1`` (None: the dtype's machine epsilon) floors the
        variance estimate (squared) and the row mean; ``eps2`` floors the parameter's RMS
        in the relative step size.
      d: the clipping threshold, ``>= 1``: the update's RMS is capped at ``d``.
      weight_decay: decoupled decay, ``p *= 1 − lr·weight_decay`` before the step.

    Returns:
      The transformation; its state holds ``AdafactorState``; its ``update`` needs
      ``params``.

    Raises:
      ValueError: torch's argument errors (``beta2_decay > 0``, ``eps[0] < 0``,
        ``d < 1``, a negative ``lr`` or ``weight_decay``); complex parameters at ``init``.
    """
    # torch takes a tensor lr with foreach=True here
    lr = check_lr_and_flags(lr, lr_with_foreach=False, foreach=foreach)
    check_momentum_follows(lr, None, None, "adafactor")
    beta2_decay = check_hyper("beta2_decay", beta2_decay, low=float("-inf"), high=0.0)
    eps1, eps2 = _check_eps(eps)
    d = check_hyper("d", d, low=1.0)
    weight_decay = check_hyper("weight_decay", weight_decay)

    def factored(shape_of):
        return lambda params: jax.tree.map(
            lambda p: jnp.zeros(shape_of(p.shape), p.dtype) if p.ndim > 1 else None, params
        )

    def rule(updates, state, params, step):
        lr_t, t = step.lr, step.t
        weight = t**beta2_decay  # torch: step_float ** beta2_decay
        inv_sqrt = 1 / t**0.5
        lr_is_array = hasattr(lr_t, "dtype") and not callable(lr)

        def one(p, g, row, col, var):
            floor = float(np.finfo(p.dtype).eps) if eps1 is None else eps1
            rms = jnp.maximum(eps2, jnp.sqrt(jnp.sum(p * p)) / p.size**0.5)
            if lr_is_array:
                # torch: min(lr, 1/√t) keeps the float32 tensor lr when it is the
                # smaller, and alpha then becomes a tensor of lr's dtype
                use_lr = ~(inv_sqrt < lr_t)
                alpha_lr = rms.astype(lr_t.dtype) * lr_t
                alpha = jnp.where(use_lr, alpha_lr.astype(p.dtype), rms * inv_sqrt)
            else:
                alpha = (
                    rms * jnp.minimum(lr_t, inv_sqrt)
                    if callable(lr)
                    else rms * jnp.where(inv_sqrt < lr_t, inv_sqrt, lr_t)
                )
            if g.ndim > 1:
                row_mean = jnp.sqrt(jnp.sum(g * g, axis=-1, keepdims=True)) ** 2 / g.shape[-1]
                col_mean = jnp.sqrt(jnp.sum(g * g, axis=-2, keepdims=True)) ** 2 / g.shape[-2]
                row = torch_lerp(row, row_mean, weight)
                col = torch_lerp(col, col_mean, weight)
                row_norm = jnp.maximum(
                    jnp.mean(row, axis=-2, keepdims=True), scalar_like(floor, row)
                )
                estimate = row * col / row_norm
            else:
                var = torch_lerp(var, g * g, weight)
                estimate = var
            direction = 1 / jnp.sqrt(jnp.maximum(estimate, scalar_like(floor * floor, g))) * g
            denom = jnp.maximum(
                1.0, jnp.sqrt(jnp.sum(direction * direction)) / (direction.size**0.5 * d)
            )
            if lr_is_array:
                scale = jnp.where(
                    use_lr, (-alpha_lr / denom.astype(lr_t.dtype)).astype(p.dtype), -alpha / denom
                )
            else:
                scale = -alpha / denom
            decayed = p
            if weight_decay:
                factor = (
                    1 - lr_t * scalar_like(weight_decay, jnp.asarray(lr_t))
                    if lr_is_array
                    else 1 - lr_t * weight_decay
                )
                decayed = p * scalar_like(factor, p)
            new = decayed + scalar_like(scale, p) * direction
            return new - p, row, col, var

        leaves, treedef = jax.tree.flatten(updates)
        flat = [
            treedef.flatten_up_to(tree)
            for tree in (params, state.row_var, state.col_var, state.variance)
        ]
        results = [one(p, g, r, c, v) for g, p, r, c, v in zip(leaves, *flat)]
        new, rows, cols, variances = (treedef.unflatten([r[i] for r in results]) for i in range(4))
        return new, {"row_var": rows, "col_var": cols, "variance": variances}

    # weight decay is decoupled (inside the rule, as torch's), so none is chained here
    return torch_chain(
        maximize,
        0.0,
        torch_rule(
            AdafactorState,
            rule,
            lr=lr,
            needs_params="adafactor",
            check_params=lambda params: refuse_complex("Adafactor", params),
            row_var=factored(lambda s: (*s[:-1], 1)),
            col_var=factored(lambda s: (*s[:-2], 1, s[-1])),
            variance=lambda params: jax.tree.map(
                lambda p: None if p.ndim > 1 else jnp.zeros_like(p), params
            ),
        ),
    )
