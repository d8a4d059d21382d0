"""``scaled_dot_product_attention`` and ``multi_head_attention_forward`` as in torch.

Mask polarity — the porting pitfall these functions exist to get right:

- ``scaled_dot_product_attention``: a **boolean** ``attn_mask`` is True = *attend*
  (as flax); a float mask is *added* to the scores;
- ``multi_head_attention_forward`` / ``MultiheadAttention`` / the Transformer layers:
  a boolean ``attn_mask`` or ``key_padding_mask`` is True = *masked* (the opposite);
  a float one is added.

Masked scores are filled with ``-inf`` as torch does (flax fills with the dtype's
minimum). A query row whose keys are all masked then gives what torch gives:
``scaled_dot_product_attention`` (and ``multi_head_attention_forward`` with
``need_weights=False``, which calls it) returns 0 for that row, with zero
gradient (torch's ``_safe_softmax``); ``multi_head_attention_forward`` with
``need_weights=True`` (the default) applies a plain softmax and returns NaN.

The PRNG: jaxgrad's randomness is the keyword-only ``key=`` (a ``jax.random``
key, used for attention dropout). torch's *key tensor* is therefore
positional-only here: ``scaled_dot_product_attention(query, key_input, value, /,
attn_mask=None, ..., key=None)``. Passing an array that is not a PRNG key as
``key=`` raises, saying so.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.functional import _dropout


def check_prng_key(key, where: str):
    """Raise when ``key=`` received torch's key *tensor* rather than a PRNG key."""
    if key is None:
        return
    array = jnp.asarray(key) if not hasattr(key, "dtype") else key
    is_typed = jnp.issubdtype(array.dtype, jax.dtypes.prng_key)
    is_raw = array.dtype == jnp.uint32 and array.shape == (2,)
    if not (is_typed or is_raw):
        raise TypeError(
            f"{where}: `key=` is the jax.random PRNG key (for dropout), got an array of "
            f"shape {tuple(array.shape)} and dtype {array.dtype}. Pass the attention "
            "key tensor positionally: (query, key_input, value)."
        )


def dropout_keep(x, p: float, key, where: str):
    """``F.dropout(x, p)`` in training mode, raising with ``where`` (the layer's path)
    when the PRNG key is missing."""
    if p == 0.0:
        return x
    if key is None:
        raise ValueError(
            f"{where}: dropout (p={p}) in training mode needs a PRNG key; pass `key=` "
            "(jax.random.key(seed)) or use train=False."
        )
    return _dropout.dropout(x, p, True, key=key)


def _check_mask_dtype(mask, name: str, where: str):
    dtype = jnp.asarray(mask).dtype
    if dtype != jnp.bool_ and not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{where}: `{name}` must be bool or floating, got dtype {dtype}.")


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def safe_softmax(scores, axis: int = -1):
    """Softmax over ``axis``; a row of all ``-inf`` gives 0 (value and gradient).

    The row's maximum, which any stable softmax computes, also tells whether the
    row is all ``-inf``, so the safe softmax costs what ``jax.nn.softmax`` costs: every
    other row gets ``jax.nn.softmax``'s formula and derivative (``y ⊙ (ẋ − Σ y ⊙ ẋ)``).
    Not its bits: XLA fuses the two programs differently (float32, jitted: values 1 ulp
    apart, gradients 6e-7 relative), which the float32 tier absorbs. (Testing
    ``all(scores == -inf)`` first and masking before and after the softmax made the
    attention core's forward and backward a third slower on XLA:CPU.)
    """
    row_max = jnp.max(scores, axis, keepdims=True)
    all_masked = row_max == -jnp.inf
    unnormalized = jnp.exp(scores - jnp.where(all_masked, jnp.zeros((), scores.dtype), row_max))
    total = jnp.sum(unnormalized, axis, keepdims=True)
    return unnormalized / jnp.where(all_masked, jnp.ones((), scores.dtype), total)


@safe_softmax.defjvp
def _safe_softmax_jvp(axis, primals, tangents):
    (scores,), (scores_dot,) = primals, tangents
    weights = safe_softmax(scores, axis)
    # an all -inf row has weights 0, so its tangent is 0
    return weights, weights * (scores_dot - (weights * scores_dot).sum(axis, keepdims=True))


def scaled_dot_product_attention(
    query,
    key_input,
    value,
    /,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale=None,
    enable_gqa: bool = False,
    *,
    key=None,
    _where: str = "scaled_dot_product_attention",
):
    """``F.scaled_dot_product_attention``: ``softmax(q kᵀ · scale + bias) v``.

    Args:
      query: `(*, Hq, L, E)`; key_input: `(*, H, S, E)`; value: `(*, H, S, Ev)`
        (``H == Hq`` unless ``enable_gqa``, then ``Hq % H == 0``).
      attn_mask: bool (True = attend) or float (added), broadcastable to `(*, Hq, L, S)`.
      dropout_p: dropout on the attention weights; applied whenever > 0, as in torch
        (the functional has no train flag), so it needs ``key``.
      is_causal: top-left-aligned lower-triangular mask; exclusive with ``attn_mask``.
      scale: defaults to ``1/√E``.
      key: ``jax.random`` key for the dropout.

    Returns:
      `(*, Hq, L, Ev)`.
    """
    check_prng_key(key, _where)
    query, key_input, value = map(jnp.asarray, (query, key_input, value))
    if is_causal and attn_mask is not None:
        raise ValueError(f"{_where}: `is_causal=True` and an `attn_mask` are exclusive; pass one.")
    L, S = query.shape[-2], key_input.shape[-2]
    scale_factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and query.ndim >= 3 and key_input.shape[-3] != query.shape[-3]:
        heads_q, heads_kv = query.shape[-3], key_input.shape[-3]
        if heads_q % heads_kv:
            raise ValueError(
                f"{_where}: with `enable_gqa`, the query heads (={heads_q}) must be a "
                f"multiple of the key/value heads (={heads_kv})."
            )
        key_input = jnp.repeat(key_input, heads_q // heads_kv, axis=-3)
        value = jnp.repeat(value, heads_q // heads_kv, axis=-3)
    # the scale multiplies the query, `(…, L, E)`, not the scores, `(…, L, S)`: on XLA:CPU
    # a scale on the scores lands in the kernel library's fused backward as a whole
    # `(…, L, S)` array of the constant, written and read every step
    scores = jnp.matmul(
        query * jnp.asarray(scale_factor, query.dtype), jnp.swapaxes(key_input, -1, -2)
    )
    if is_causal:
        causal = jnp.tril(jnp.ones((L, S), bool))
        scores = jnp.where(causal, scores, -jnp.inf)
    if attn_mask is not None:
        _check_mask_dtype(attn_mask, "attn_mask", _where)
        attn_mask = jnp.asarray(attn_mask)
        try:
            np.broadcast_shapes(attn_mask.shape, scores.shape)
        except ValueError:
            raise ValueError(
                f"{_where}: `attn_mask` of shape {tuple(attn_mask.shape)} does not broadcast "
                f"to the attention scores' shape {tuple(scores.shape)} (…, L={L}, S={S})."
            ) from None
        if attn_mask.dtype == jnp.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)  # True = attend
        else:
            scores = scores + attn_mask.astype(scores.dtype)
    weights = safe_softmax(scores)
    if dropout_p > 0.0:
        weights = dropout_keep(weights, dropout_p, key, _where)
    return jnp.matmul(weights, value)
