"""torch.optim's Muon as an optax transformation.

Muon orthogonalises each 2-d parameter's momentum with a quintic Newton–Schulz
iteration. torch runs that iteration in bfloat16 (``grad.bfloat16()``), so jaxgrad
does too, operation for operation: the matrix (transposed when it has more rows than
columns) is divided by its Frobenius norm (clamped at ``eps``), then ``ns_steps`` times
``A = X Xᵀ``, ``B = b·A + c·A A``, ``X = a·X + B X``, each product accumulated in
float32 and each result rounded to bfloat16, as torch's CPU ``addmm`` does. On small
matrices this is bit-identical to torch's CPU result; on large ones (tens of rows)
torch's CPU GEMM sums in another float32 order, and an element can land one bfloat16
step away.

The rest is float64 where the parameter is: ``buf ← lerp(buf, g, 1 − momentum)``,
the direction ``lerp(g, buf, momentum)`` (Nesterov) or ``buf``, ``p *= 1 − lr·wd``,
``p −= adjusted_lr · NS(direction)`` with ``adjusted_lr = lr·√max(1, A/B)``
("original", the default) or ``0.2·lr·√max(A, B)`` ("match_rms_adamw").
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim._args import check_hyper, check_int, check_lr, like_lr
from jaxgrad.optim._family import refuse_complex, scalar_like, torch_lerp, torch_rule
from jaxgrad.optim.cycling import check_momentum_follows
from jaxgrad.optim.state import register_state

_ADJUST = (None, "original", "match_rms_adamw")


def newton_schulz(
    matrix: jax.Array,
    ns_coefficients=(3.4445, -4.7750, 2.0315),
    ns_steps: int = 5,
    eps: float = 1e-7,
) -> jax.Array:
    """torch's ``_zeropower_via_newtonschulz``: ``matrix`` orthogonalised, in bfloat16.

    Args:
      matrix: `(rows, columns)`, any float dtype (converted to bfloat16 first).
      ns_coefficients: ``(a, b, c)`` of the quintic iteration.
      ns_steps: iterations, fewer than 100.
      eps: the floor of the Frobenius norm the matrix is divided by.

    Returns:
      `(rows, columns)` bfloat16.

    Raises:
      ValueError: a matrix that is not 2-d, ``ns_steps >= 100`` or coefficients that are
        not three numbers (torch's errors).
    """
    if ns_steps >= 100:
        raise ValueError(
            f"`ns_steps` (={ns_steps}) must be < 100 (torch: 'Number of steps "
            "must be less than 100 for computational efficiency')."
        )
    if matrix.ndim != 2:
        raise ValueError(f"`matrix` of shape {matrix.shape} must be 2-d.")
    if len(ns_coefficients) != 3:
        raise ValueError(f"`ns_coefficients` (={ns_coefficients!r}) must be three numbers.")
    a, b, c = (float(x) for x in ns_coefficients)
    bf16, f32 = jnp.bfloat16, jnp.float32

    def product(x, y):  # bfloat16 operands, float32 accumulation
        return jnp.matmul(x.astype(f32), y.astype(f32), precision=jax.lax.Precision.HIGHEST)

    x = matrix.astype(bf16)
    wide = matrix.shape[0] > matrix.shape[1]
    if wide:
        x = x.T
    norm = jnp.sqrt(jnp.sum(jnp.square(x.astype(f32)))).astype(bf16)
    norm = jnp.maximum(norm, jnp.asarray(eps, bf16))
    x = (x.astype(f32) / norm.astype(f32)).astype(bf16)
    for _ in range(ns_steps):
        gram = product(x, x.T).astype(bf16)
        update = (
            jnp.asarray(b, f32) * gram.astype(f32) + jnp.asarray(c, f32) * product(gram, gram)
        ).astype(bf16)
        x = (jnp.asarray(a, f32) * x.astype(f32) + product(update, x)).astype(bf16)
    return x.T if wide else x


def _adjusted_lr(lr, adjust_lr_fn, shape):
    rows, columns = shape[:2]
    if adjust_lr_fn in (None, "original"):
        ratio = math.sqrt(max(1, rows / columns))
    else:
        ratio = 0.2 * math.sqrt(max(rows, columns))
    return lr * like_lr(lr, ratio)


@register_state(torch_step=False)
class MuonState(NamedTuple):
    """``muon``'s state, torch's ``optimizer.state[p]``: ``momentum_buffer``, like
    params; ``step`` counts the steps for a scheduled ``lr`` (torch keeps none)."""

    step: jax.Array
    momentum_buffer: Any


def muon(
    lr=1e-3,
    weight_decay: float = 0.1,
    momentum: float = 0.95,
    nesterov: bool = True,
    ns_coefficients=(3.4445, -4.7750, 2.0315),
    eps: float = 1e-7,
    ns_steps: int = 5,
    adjust_lr_fn=None,
) -> optax.GradientTransformation:
    """``torch.optim.Muon``: momentum orthogonalised by Newton–Schulz, 2-d parameters only.

    Args:
      lr: the learning rate: a float, a one-element array (torch's tensor ``lr``) or a
        schedule ``count -> lr``.
      weight_decay: decoupled decay, ``p *= 1 − lr·weight_decay`` (torch's default 0.1).
      momentum: the momentum factor.
      nesterov: use ``lerp(g, buf, momentum)`` instead of ``buf``.
      ns_coefficients: ``(a, b, c)`` of the Newton–Schulz iteration.
      eps: the floor of the norm the direction is divided by.
      ns_steps: Newton–Schulz iterations, fewer than 100.
      adjust_lr_fn: None or ``"original"`` (``lr·√max(1, rows/columns)``) or
        ``"match_rms_adamw"`` (``0.2·lr·√max(rows, columns)``).

    Returns:
      An ``optax.GradientTransformation`` whose state holds torch's ``optimizer.state``
      (``MuonState``); ``init`` refuses a parameter that is not 2-d, as torch's
      constructor does (give those to another optimizer, e.g. with ``param_groups`` or
      ``optax.multi_transform``).

    Raises:
      ValueError: torch's argument errors (a negative ``lr``, ``momentum`` or
        ``weight_decay``, an unknown ``adjust_lr_fn``, ``ns_steps >= 100``); at ``init``,
        a parameter that is not 2-d or is complex.
      TypeError: a hyperparameter of the wrong type.
    """
    lr = check_lr(lr)
    check_momentum_follows(lr, None, None, "muon")
    momentum = check_hyper("momentum", momentum)
    weight_decay = check_hyper("weight_decay", weight_decay)
    eps = check_hyper("eps", eps, low=float("-inf"))
    ns_steps = check_int("ns_steps", ns_steps, low=0)
    if adjust_lr_fn not in _ADJUST:
        raise ValueError(
            f"`adjust_lr_fn` (={adjust_lr_fn!r}) must be one of {_ADJUST} "
            f"(torch: 'Adjust learning rate function {adjust_lr_fn} is not "
            "supported')."
        )
    if ns_steps >= 100:
        raise ValueError(f"`ns_steps` (={ns_steps}) must be < 100, as torch.")
    if not isinstance(ns_coefficients, (tuple, list)) or len(ns_coefficients) != 3:
        raise ValueError(f"`ns_coefficients` (={ns_coefficients!r}) must be three numbers.")

    def check_params(params):
        refuse_complex("Muon", params)
        for path, leaf in jax.tree_util.tree_leaves_with_path(params):
            if jnp.ndim(leaf) != 2:
                raise ValueError(
                    f"`params` {jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}: Muon "
                    "only supports 2-d parameters (as torch); optimise the others with "
                    "another optimizer (param_groups or optax.multi_transform)."
                )

    def rule(updates, state, params, step):
        lr_t = step.lr
        buffers = jax.tree.map(
            lambda b, g: torch_lerp(b, g, 1 - momentum), state.momentum_buffer, updates
        )

        def step_of(p, g, buf):
            direction = torch_lerp(g, buf, momentum) if nesterov else buf
            orthogonal = newton_schulz(direction, ns_coefficients, ns_steps, eps)
            decayed = p * scalar_like(1 - lr_t * like_lr(lr_t, weight_decay), p)
            adjusted = _adjusted_lr(lr_t, adjust_lr_fn, p.shape)
            return decayed + scalar_like(-adjusted, p) * orthogonal.astype(p.dtype) - p

        new = jax.tree.map(step_of, params, updates, buffers)
        return new, {"momentum_buffer": buffers}

    return torch_rule(MuonState, rule, lr=lr, needs_params="muon", check_params=check_params)
