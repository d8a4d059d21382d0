"""``ctc_loss``: connectionist temporal classification, torch's forward and backward.

The loss is ``−log p(target | log_probs)`` summed over every alignment, computed with
the log-space forward (alpha) recursion of Graves et al. (2006) as a ``lax.scan`` over
time on the extended target ``blank, y1, blank, y2, …, blank``.

The gradient is torch's, not autodiff's. torch's ``ctc_loss`` backward returns
``exp(log_probs) − posterior`` (times the output's cotangent), where ``posterior[t, c]``
is the probability that an alignment emits ``c`` at ``t`` (from alpha and beta) — the
gradient with respect to the *logits* of a ``log_softmax``, which it assumes produced
``log_probs``. Autodiff of the loss with respect to ``log_probs`` gives ``−posterior``
alone. The two agree after a ``log_softmax`` (the ``exp(log_probs)`` term sums to zero
through it), but not on ``log_probs`` taken as the input, which is what a port
compares; so the backward here is torch's alpha–beta formula (a ``custom_vjp``), with
its conventions: an infinite loss (no alignment fits) has a NaN gradient on the
sample's first ``input_length`` steps, 0 after; ``zero_infinity=True`` makes that
sample's loss and gradient 0. Steps after a sample's ``input_length`` have gradient 0.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.losses._checks import check_floating, check_reduction, require

_NEG_INF = -jnp.inf


def _logsumexp(*terms):
    """torch's three-way log-sum-exp: the max is replaced by 0 when it is −inf."""
    stacked = jnp.stack(terms)
    top = jnp.max(stacked, axis=0)
    top = jnp.where(top == _NEG_INF, jnp.zeros_like(top), top)
    return jnp.log(jnp.sum(jnp.exp(stacked - top), axis=0)) + top


def _shift(values, by: int):
    """``values[..., s − by]`` along the last axis, −inf where ``s < by``."""
    by = min(by, values.shape[-1])
    pad = jnp.full(values.shape[:-1] + (by,), _NEG_INF, values.dtype)
    return jnp.concatenate([pad, values[..., : values.shape[-1] - by]], axis=-1)


def _unshift(values, by: int):
    """``values[..., s + by]`` along the last axis, −inf past the end."""
    by = min(by, values.shape[-1])
    pad = jnp.full(values.shape[:-1] + (by,), _NEG_INF, values.dtype)
    return jnp.concatenate([values[..., by:], pad], axis=-1)


def _lattice(targets, target_lengths, blank: int):
    """Extended labels `(N, 2S+1)`, the skip mask (``s`` may come from ``s − 2``), and the
    mask of states within each target."""
    batch, length = targets.shape
    states = 2 * length + 1
    position = jnp.arange(states)
    label_index = jnp.clip((position - 1) // 2, 0, max(length - 1, 0))
    odd = position % 2 == 1
    if length:
        labels = jnp.take_along_axis(
            targets, jnp.broadcast_to(label_index, (batch, states)), axis=1
        )
        previous = jnp.take_along_axis(
            targets, jnp.broadcast_to(jnp.clip(label_index - 1, 0, None), (batch, states)), axis=1
        )
    else:
        labels = previous = jnp.zeros((batch, states), targets.dtype)
    extended = jnp.where(odd, labels, blank)
    # torch's get_target_prime comparison: a label may skip the blank before it when it
    # differs from the previous label (the first label cannot skip)
    skip = odd & (position > 1) & (labels != previous)
    within = position[None, :] < (2 * target_lengths[:, None] + 1)
    return extended, skip, within


def _emissions(log_probs, extended):
    """``log_probs[t, n, extended[n, s]]`` as `(T, N, S')`."""
    index = jnp.broadcast_to(extended[None], (log_probs.shape[0],) + extended.shape)
    return jnp.take_along_axis(log_probs, index, axis=2)


def _alphas(emit, skip, within, input_lengths):
    steps = emit.shape[0]
    neg = jnp.asarray(_NEG_INF, emit.dtype)
    start = jnp.where(jnp.arange(emit.shape[2]) < 2, emit[0], neg)
    start = jnp.where(within, start, neg)

    def step(alpha, inputs):
        t, emit_t = inputs
        nxt = _logsumexp(alpha, _shift(alpha, 1), jnp.where(skip, _shift(alpha, 2), neg))
        nxt = jnp.where(within, nxt + emit_t, neg)
        # a sample keeps its last alpha once its input has ended
        nxt = jnp.where((t < input_lengths)[:, None], nxt, alpha)
        return nxt, nxt

    if steps == 0:
        return jnp.zeros((0,) + emit.shape[1:], emit.dtype), start
    final, rest = jax.lax.scan(step, start, (jnp.arange(1, steps), emit[1:]))
    return jnp.concatenate([start[None], rest]), final


def _nll(final, target_lengths, input_lengths):
    last = jnp.take_along_axis(final, (2 * target_lengths)[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(final, jnp.clip(2 * target_lengths - 1, 0, None)[:, None], axis=1)[
        :, 0
    ]
    before = jnp.where(target_lengths > 0, before, _NEG_INF)
    likelihood = _logsumexp(last, before)
    # an empty input emits only the empty target
    empty = jnp.where(
        target_lengths == 0, jnp.zeros_like(likelihood), jnp.full_like(likelihood, _NEG_INF)
    )
    return -jnp.where(input_lengths > 0, likelihood, empty)


def _betas(emit, skip, within, input_lengths, target_lengths):
    steps, _, states = emit.shape
    neg = jnp.asarray(_NEG_INF, emit.dtype)
    position = jnp.arange(states)
    ends = (position[None, :] == 2 * target_lengths[:, None]) | (
        (position[None, :] == 2 * target_lengths[:, None] - 1) & (target_lengths[:, None] > 0)
    )
    # s may step to s + 2 when s + 2 may skip
    skip_next = jnp.concatenate(
        [skip[:, 2:], jnp.zeros((skip.shape[0], min(2, states)), bool)], axis=1
    )

    def step(beta, inputs):
        t, emit_t = inputs
        carried = _logsumexp(beta, _unshift(beta, 1), jnp.where(skip_next, _unshift(beta, 2), neg))
        last_step = (t == input_lengths - 1)[:, None]
        nxt = jnp.where(last_step, jnp.where(ends, emit_t, neg), carried + emit_t)
        nxt = jnp.where(within & (t < input_lengths)[:, None], nxt, neg)
        return nxt, nxt

    init = jnp.full(emit.shape[1:], _NEG_INF, emit.dtype)
    _, betas = jax.lax.scan(step, init, (jnp.arange(steps), emit), reverse=True)
    return betas


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _ctc_nll(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    extended, skip, within = _lattice(targets, target_lengths, blank)
    _, final = _alphas(_emissions(log_probs, extended), skip, within, input_lengths)
    nll = _nll(final, target_lengths, input_lengths)
    if zero_infinity:
        nll = jnp.where(nll == jnp.inf, jnp.zeros_like(nll), nll)
    return nll


def _ctc_nll_fwd(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    extended, skip, within = _lattice(targets, target_lengths, blank)
    emit = _emissions(log_probs, extended)
    alphas, final = _alphas(emit, skip, within, input_lengths)
    nll = _nll(final, target_lengths, input_lengths)
    out = jnp.where(nll == jnp.inf, jnp.zeros_like(nll), nll) if zero_infinity else nll
    return out, (log_probs, targets, input_lengths, target_lengths, alphas, emit, nll)


def _ctc_nll_bwd(blank, zero_infinity, residuals, cotangent):
    log_probs, targets, input_lengths, target_lengths, alphas, emit, nll = residuals
    extended, skip, within = _lattice(targets, target_lengths, blank)
    betas = _betas(emit, skip, within, input_lengths, target_lengths)
    # log of sum over the states labelled c of alpha·beta, per (t, n, c)
    onehot = extended[:, :, None] == jnp.arange(log_probs.shape[2])  # (N, S', C)
    both = alphas + betas
    # torch's last step *assigns* the final blank's term, then the last label's: when
    # that label is the blank itself, the second overwrites the first (kept, as torch)
    position = jnp.arange(extended.shape[1])
    last_label = jnp.take_along_axis(
        extended, jnp.clip(2 * target_lengths - 1, 0, None)[:, None], axis=1
    )
    overwritten = (
        (position[None, :] == 2 * target_lengths[:, None])
        & (target_lengths[:, None] > 0)
        & (last_label == blank)
    )
    last_step = jnp.arange(log_probs.shape[0])[:, None] == input_lengths[None, :] - 1
    both = jnp.where(last_step[:, :, None] & overwritten[None], _NEG_INF, both)[:, :, :, None]
    masked = jnp.where(onehot[None], both, _NEG_INF)
    top = jnp.max(masked, axis=2)
    top = jnp.where(top == _NEG_INF, jnp.zeros_like(top), top)
    log_occupancy = jnp.log(jnp.sum(jnp.exp(masked - top[:, :, None]), axis=2)) + top
    grads = jnp.exp(log_probs) - jnp.exp(log_occupancy + nll[None, :, None] - log_probs)
    grads = grads * cotangent[None, :, None]
    running = (jnp.arange(log_probs.shape[0])[:, None] < input_lengths[None, :])[:, :, None]
    keep = running
    if zero_infinity:
        keep = keep & (nll != jnp.inf)[None, :, None]
    grads = jnp.where(keep, grads, jnp.zeros_like(grads))
    return grads, None, None, None


_ctc_nll.defvjp(_ctc_nll_fwd, _ctc_nll_bwd)
# compiled once per shape: the scans are many small ops, slow to dispatch one by one
_ctc_nll_compiled = jax.jit(_ctc_nll, static_argnums=(4, 5))


def _lengths(name: str, value, batch: int):
    array = jnp.asarray(value)
    if not jnp.issubdtype(array.dtype, jnp.integer):
        raise TypeError(f"ctc_loss: `{name}` must hold integers, got {array.dtype}.")
    if array.ndim > 1 or array.size != batch:
        raise ValueError(
            f"ctc_loss: `{name}` must hold one length per sample ({batch}), "
            f"got shape {tuple(array.shape)}."
        )
    return array.reshape(batch)


def _concrete_array(value):
    try:
        return np.asarray(value)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None


def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
):
    """``F.ctc_loss``: the negative log-likelihood of ``targets`` under every alignment.

    Args:
      log_probs: log-probabilities `(T, N, C)`, or unbatched `(T, C)`; floating.
      targets: integer labels in ``[0, C)``, padded `(N, S)` (each row's first
        ``target_lengths[n]`` entries), or all targets concatenated `(sum(target_lengths),)`;
        unbatched: `(S,)`.
      input_lengths: `(N,)` ints (array, list or tuple), each ``<= T``.
      target_lengths: `(N,)` ints, each ``<= S`` (padded targets).
      blank: the blank label.
      reduction: ``"mean"`` (each loss divided by its target length, clamped to at
        least 1, then the mean over the batch: torch's), ``"sum"`` or ``"none"``.
      zero_infinity: a sample no alignment fits (infinite loss) gets loss and gradient 0.

    Returns:
      A scalar, or the per-sample losses `(N,)` (`()` unbatched) with
      ``reduction="none"``.

    Raises:
      ValueError: an unknown ``reduction``, shapes that do not fit, a ``blank`` outside
        ``[0, C)``, or (concrete values) lengths out of range or a label outside
        ``[0, C)`` (under ``jit`` the affected losses are NaN).
      TypeError: a non-floating ``log_probs`` or non-integer ``targets`` / lengths.
    """
    loss = "ctc_loss"
    check_reduction(reduction)
    check_floating(loss, "log_probs", log_probs)
    if log_probs.ndim not in (2, 3):
        raise ValueError(
            f"{loss}: `log_probs` must be `(T, N, C)` or unbatched `(T, C)`, got "
            f"shape {tuple(log_probs.shape)}."
        )
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs[:, None, :]
        targets = jnp.asarray(targets)
        if targets.ndim != 1:
            raise ValueError(
                f"{loss}: unbatched `targets` must be 1-D `(S,)`, got shape {tuple(targets.shape)}."
            )
        targets = targets[None]
    steps, batch, num_classes = log_probs.shape
    if (
        isinstance(blank, bool)
        or not isinstance(blank, (int, np.integer))
        or not 0 <= blank < num_classes
    ):
        raise ValueError(
            f"{loss}: `blank` (={blank!r}) must be a class index in [0, {num_classes})."
        )
    targets = jnp.asarray(targets)
    if not jnp.issubdtype(targets.dtype, jnp.integer):
        raise TypeError(f"{loss}: `targets` must hold integer labels, got {targets.dtype}.")
    input_lengths = _lengths("input_lengths", input_lengths, batch)
    target_lengths = _lengths("target_lengths", target_lengths, batch)
    require(
        (input_lengths >= 0) & (input_lengths <= steps),
        f"{loss}: `input_lengths` must lie in [0, {steps}] (T).",
    )
    require(target_lengths >= 0, f"{loss}: `target_lengths` must be >= 0.")
    if targets.ndim == 2:
        if targets.shape[0] != batch:
            raise ValueError(
                f"{loss}: padded `targets` shape {tuple(targets.shape)} must "
                f"have the batch size {batch} first."
            )
        require(
            target_lengths <= targets.shape[1],
            f"{loss}: `target_lengths` must be <= the padded `targets` length {targets.shape[1]}.",
        )
    elif targets.ndim == 1:
        require(
            jnp.sum(target_lengths) <= targets.shape[0],
            f"{loss}: `targets` (concatenated) holds {targets.shape[0]} labels, fewer "
            "than the sum of `target_lengths`.",
        )
        targets = _pad_concatenated(targets, target_lengths)
    else:
        raise ValueError(
            f"{loss}: `targets` must be `(N, S)` or concatenated 1-D, got "
            f"shape {tuple(targets.shape)}."
        )
    used = jnp.arange(targets.shape[1])[None, :] < target_lengths[:, None]
    labels_ok = ~used | ((targets >= 0) & (targets < num_classes))
    require(labels_ok, f"{loss}: `targets` holds a label outside [0, {num_classes}).")
    valid = (
        jnp.all(labels_ok, axis=1)
        & (input_lengths >= 0)
        & (input_lengths <= steps)
        & (target_lengths >= 0)
        & (target_lengths <= targets.shape[1])
    )
    safe_targets = jnp.where(used, jnp.clip(targets, 0, num_classes - 1), blank)
    safe_inputs = jnp.clip(input_lengths, 0, steps)
    safe_lengths = jnp.clip(target_lengths, 0, targets.shape[1])
    nll = _ctc_nll_compiled(
        log_probs, safe_targets, safe_inputs, safe_lengths, int(blank), bool(zero_infinity)
    )
    nll = jnp.where(valid, nll, jnp.asarray(jnp.nan, nll.dtype))
    if reduction == "none":
        return nll[0] if unbatched else nll
    if reduction == "sum":
        return jnp.sum(nll)
    divisor = jnp.clip(target_lengths, 1, None).astype(nll.dtype)
    return jnp.mean(nll / divisor)


def _pad_concatenated(targets, target_lengths):
    """Concatenated targets to a padded `(N, S)` array (S the longest target when the
    lengths are concrete, the concatenation's length otherwise)."""
    lengths = _concrete_array(target_lengths)
    width = int(lengths.max(initial=0)) if lengths is not None else targets.shape[0]
    offsets = jnp.cumsum(target_lengths) - target_lengths
    index = offsets[:, None] + jnp.arange(width)[None, :]
    inside = jnp.arange(width)[None, :] < target_lengths[:, None]
    index = jnp.where(inside, jnp.clip(index, 0, max(targets.shape[0] - 1, 0)), 0)
    if targets.shape[0] == 0:
        return jnp.zeros((target_lengths.shape[0], width), targets.dtype)
    return jnp.where(inside, targets[index], 0)
