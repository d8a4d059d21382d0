"""``multi_head_attention_forward``: torch's ``F.multi_head_attention_forward`` in JAX.

The same steps, in the same order, as torch's reference implementation (the path
``nn.MultiheadAttention`` takes whenever autograd is on): project with the packed
``in_proj_weight`` `(3E, E)` (rows ``[0:E]`` = q, ``[E:2E]`` = k, ``[2E:3E]`` = v) or
the separate ``q/k/v_proj_weight``; append ``bias_k``/``bias_v`` and a zero
key/value (``add_zero_attn``), padding the masks with an attending column; merge
``key_padding_mask`` into ``attn_mask``; then either compute the weights explicitly
(``need_weights=True``: plain softmax, NaN on fully masked rows) or call
``scaled_dot_product_attention`` (0 on fully masked rows).

Boolean masks here are True = **masked** (the opposite of SDPA). Inputs are
sequence-first: query `(L, N, E)`, key/value `(S, N, kdim|vdim)`, or unbatched
`(L, E)`. As in ``_attention``, the attention key tensor is positional-only and
``key=`` is the PRNG key for dropout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxgrad.nn.functional._attention import (
    _check_mask_dtype,
    check_prng_key,
    dropout_keep,
    scaled_dot_product_attention,
)


def _linear(x, weight, bias):
    y = jnp.matmul(x, weight.T)
    return y if bias is None else y + bias


def _canonical_mask(mask, name, dtype, where):
    """bool (True = masked) -> float with ``-inf``; float masks pass unchanged."""
    if mask is None:
        return None
    _check_mask_dtype(mask, name, where)
    mask = jnp.asarray(mask)
    if mask.dtype == jnp.bool_:
        return jnp.where(mask, jnp.asarray(-jnp.inf, dtype), jnp.zeros((), dtype))
    return mask


def _shape_check(query, key_input, value, key_padding_mask, attn_mask, num_heads, where):
    if query.ndim not in (2, 3):
        raise ValueError(
            f"{where}: `query` must be 2-D (unbatched) or 3-D (batched), got shape "
            f"{tuple(query.shape)}."
        )
    batched = query.ndim == 3
    if key_input.ndim != query.ndim or value.ndim != query.ndim:
        raise ValueError(
            f"{where}: for a {query.ndim}-D `query`, key and value must be {query.ndim}-D, "
            f"got shapes {tuple(key_input.shape)} and {tuple(value.shape)}."
        )
    if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
        raise ValueError(
            f"{where}: `key_padding_mask` must be {query.ndim - 1}-D for a "
            f"{'batched' if batched else 'unbatched'} query, got shape "
            f"{tuple(key_padding_mask.shape)}."
        )
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        raise ValueError(
            f"{where}: `attn_mask` must be 2-D (L, S) or 3-D (N·num_heads, L, S), got "
            f"shape {tuple(attn_mask.shape)}."
        )
    return batched


def multi_head_attention_forward(
    query,
    key_input,
    value,
    /,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight,
    in_proj_bias,
    bias_k,
    bias_v,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight,
    out_proj_bias,
    training: bool = True,
    key_padding_mask=None,
    need_weights: bool = True,
    attn_mask=None,
    use_separate_proj_weight: bool = False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    static_k=None,
    static_v=None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
    *,
    key=None,
    _where: str = "multi_head_attention_forward",
):
    """``F.multi_head_attention_forward``; returns ``(attn_output, attn_weights | None)``.

    Shapes: query `(L, N, E)` or `(L, E)`; key_input `(S, N, kdim)`; value
    `(S, N, vdim)`; ``key_padding_mask`` `(N, S)`; ``attn_mask`` `(L, S)` or
    `(N·num_heads, L, S)`. Output `(L, N, E)`; weights `(N, L, S)` averaged over
    heads, or `(N, num_heads, L, S)` with ``average_attn_weights=False``.
    """
    check_prng_key(key, _where)
    query, key_input, value = map(jnp.asarray, (query, key_input, value))
    if key_padding_mask is not None:
        key_padding_mask = jnp.asarray(key_padding_mask)
    if attn_mask is not None:
        attn_mask = jnp.asarray(attn_mask)
    batched = _shape_check(query, key_input, value, key_padding_mask, attn_mask, num_heads, _where)
    if not batched:
        query, key_input, value = query[:, None], key_input[:, None], value[:, None]
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask[None]
    tgt_len, bsz, embed_dim = query.shape
    src_len = key_input.shape[0]
    dtype = query.dtype
    key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", dtype, _where)
    if is_causal and attn_mask is None:
        raise ValueError(
            f"{_where}: `is_causal=True` is a hint that needs the causal `attn_mask` "
            "itself (as torch: Transformer.generate_square_subsequent_mask)."
        )
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # SDPA builds the causal mask itself
    else:
        attn_mask = _canonical_mask(attn_mask, "attn_mask", dtype, _where)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise ValueError(
            f"{_where}: `embed_dim` (={embed_dim_to_check}) must match the query's last "
            f"dimension (query shape {tuple(query.shape)})."
        )
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise ValueError(
            f"{_where}: `embed_dim` (={embed_dim}) must be divisible by `num_heads` (={num_heads})."
        )
    if use_separate_proj_weight:
        if key_input.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"{_where}: key's sequence and batch dims {tuple(key_input.shape[:2])} must "
                f"match value's {tuple(value.shape[:2])}."
            )
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = jnp.split(in_proj_bias, 3)
        q = _linear(query, q_proj_weight, b_q)
        k = _linear(key_input, k_proj_weight, b_k)
        v = _linear(value, v_proj_weight, b_v)
    else:
        if key_input.shape != value.shape:
            raise ValueError(
                f"{_where}: key shape {tuple(key_input.shape)} must match value shape "
                f"{tuple(value.shape)}."
            )
        w_q, w_k, w_v = jnp.split(in_proj_weight, 3)
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = jnp.split(in_proj_bias, 3)
        q, k, v = _linear(query, w_q, b_q), _linear(key_input, w_k, b_k), _linear(value, w_v, b_v)

    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if attn_mask.shape != (tgt_len, src_len):
                raise ValueError(
                    f"{_where}: the 2-D `attn_mask` has shape {tuple(attn_mask.shape)}, "
                    f"expected (L, S) = {(tgt_len, src_len)}."
                )
            attn_mask = attn_mask[None]
        elif attn_mask.shape != (bsz * num_heads, tgt_len, src_len):
            raise ValueError(
                f"{_where}: the 3-D `attn_mask` has shape {tuple(attn_mask.shape)}, "
                f"expected (N·num_heads, L, S) = {(bsz * num_heads, tgt_len, src_len)}."
            )

    def pad_column(mask):
        return None if mask is None else jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, 1)])

    if bias_k is not None and bias_v is not None:
        if static_k is not None or static_v is not None:
            raise ValueError(f"{_where}: `bias_k`/`bias_v` cannot be added to a static key/value.")
        k = jnp.concatenate([k, jnp.tile(bias_k, (1, bsz, 1))])
        v = jnp.concatenate([v, jnp.tile(bias_v, (1, bsz, 1))])
        attn_mask, key_padding_mask = pad_column(attn_mask), pad_column(key_padding_mask)
    elif (bias_k is None) != (bias_v is None):
        raise ValueError(f"{_where}: `bias_k` and `bias_v` must be given together.")

    q = jnp.swapaxes(q.reshape(tgt_len, bsz * num_heads, head_dim), 0, 1)
    k = (
        static_k
        if static_k is not None
        else jnp.swapaxes(k.reshape(k.shape[0], bsz * num_heads, head_dim), 0, 1)
    )
    v = (
        static_v
        if static_v is not None
        else jnp.swapaxes(v.reshape(v.shape[0], bsz * num_heads, head_dim), 0, 1)
    )
    for name, static in (("static_k", static_k), ("static_v", static_v)):
        if static is not None and (
            static.shape[0] != bsz * num_heads or static.shape[2] != head_dim
        ):
            raise ValueError(
                f"{_where}: `{name}` has shape {tuple(static.shape)}, expected "
                f"({bsz * num_heads}, S, {head_dim})."
            )
    if add_zero_attn:
        zeros = jnp.zeros((bsz * num_heads, 1, head_dim), k.dtype)
        k = jnp.concatenate([k, zeros], axis=1)
        v = jnp.concatenate([v, zeros], axis=1)
        attn_mask, key_padding_mask = pad_column(attn_mask), pad_column(key_padding_mask)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        if key_padding_mask.shape != (bsz, src_len):
            raise ValueError(
                f"{_where}: `key_padding_mask` has shape {tuple(key_padding_mask.shape)}, "
                f"expected (N, S) = {(bsz, src_len)} (batch {bsz}, source length {src_len})."
            )
        expanded = jnp.broadcast_to(
            key_padding_mask.reshape(bsz, 1, 1, src_len), (bsz, num_heads, 1, src_len)
        ).reshape(bsz * num_heads, 1, src_len)
        attn_mask = expanded if attn_mask is None else attn_mask + expanded
    if not training:
        dropout_p = 0.0

    if need_weights:
        q_scaled = q * (1.0 / float(head_dim)) ** 0.5
        scores = jnp.matmul(q_scaled, jnp.swapaxes(k, -2, -1))
        if attn_mask is not None:
            scores = attn_mask + scores
        weights = _softmax(scores)
        if dropout_p > 0.0:
            weights = dropout_keep(weights, dropout_p, key, _where)
        out = jnp.matmul(weights, v)
        out = jnp.swapaxes(out, 0, 1).reshape(tgt_len * bsz, embed_dim)
        out = _linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = jnp.mean(weights, axis=1)
        if not batched:
            out, weights = out[:, 0], weights[0]
        return out, weights

    if attn_mask is not None:
        if attn_mask.shape[0] == 1 and attn_mask.ndim == 3:
            attn_mask = attn_mask[None]
        else:
            attn_mask = attn_mask.reshape(bsz, num_heads, -1, src_len)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = scaled_dot_product_attention(
        q, k, v, attn_mask, dropout_p, is_causal, key=key, _where=_where
    )
    out = jnp.transpose(out, (2, 0, 1, 3)).reshape(bsz * tgt_len, embed_dim)
    out = _linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
    if not batched:
        out = out[:, 0]
    return out, None


def _softmax(scores):
    """Plain softmax (NaN on a row of all ``-inf``, as torch's explicit path)."""
    return jax.nn.softmax(scores, axis=-1)
