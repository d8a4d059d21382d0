"""nnx modules around the stock ``nnx.MultiHeadAttention``, for torch's
``nn.MultiheadAttention`` calling convention.

The parameters live in the stock layer (its ``query``, ``key``, ``value`` and ``out``
``nnx.LinearGeneral``); these modules only translate torch's call into flax's:

=============================  ===========================================================
module                         what it translates
=============================  ===========================================================
``TorchMultiheadAttention``    torch's ``(query, key, value, key_padding_mask,
                               need_weights, attn_mask, average_attn_weights)`` and
                               ``(L, N, E)`` layout into ``nnx.MultiHeadAttention``'s
                               batch-first call; boolean masks True = **masked**
                               (torch) into flax's True = attend; returns
                               ``(output, weights | None)``
``torch_attention``            the ``attention_fn`` given to ``nnx.MultiHeadAttention``:
                               flax's ``dot_product_attention`` except on fully masked
                               rows, which give torch's answer (weights 0, or NaN when
                               ``need_weights``) instead of flax's uniform weights
=============================  ===========================================================
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn.attention import dot_product_attention_weights


def torch_attention(query, key, value, bias=None, mask=None, broadcast_dropout=True,
                    dropout_rng=None, dropout_rate=0.0, deterministic=False, dtype=None,
                    precision=None, module=None, promote_dtype=None, is_causal=False):
    """``nnx.dot_product_attention`` with torch's fully masked rows.

    flax fills masked logits with the dtype's minimum, so a row whose every key is
    masked gets uniform weights (the mean of the values); torch fills ``-inf``:
    ``need_weights=False`` (SDPA's safe softmax) gives weights 0, ``need_weights=True``
    NaN. ``module`` is set exactly when the weights are sown (``need_weights``).
    """
    kwargs = {} if promote_dtype is None else {"promote_dtype": promote_dtype}
    weights = dot_product_attention_weights(
        query, key, bias, mask, broadcast_dropout, dropout_rng, dropout_rate, deterministic,
        dtype, precision, None, is_causal=is_causal, **kwargs)
    if mask is not None:
        dead = ~jnp.any(jnp.broadcast_to(mask, weights.shape), axis=-1, keepdims=True)
        weights = jnp.where(dead, jnp.nan if module is not None else 0.0, weights)
    if module is not None:
        module.sow(nnx.Intermediate, "attention_weights", weights)
    return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)


def _boolean(name: str, mask):
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_:
        raise TypeError(
            f"TorchMultiheadAttention: `{name}` has dtype {mask.dtype}; nnx.MultiHeadAttention "
            "takes boolean masks only (an additive float mask has no flax form). Pass a "
            "boolean mask, True = masked as torch's.")
    return mask


class TorchMultiheadAttention(nnx.Module):
    """``torch.nn.MultiheadAttention`` around a stock ``nnx.MultiHeadAttention``
    (``attention``): ``query.kernel`` `(E, heads, head_dim)` = rows of torch's packed
    ``in_proj_weight`` `(3E, E)`, transposed and split; ``out.kernel``
    `(heads, head_dim, E)` = ``out_proj.weight``ᵀ.

    ``__call__(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` as torch:
    inputs `(L, N, E)` (`(N, L, E)` with ``batch_first``) or `(L, E)`; boolean
    ``attn_mask`` `(L, S)` or `(N·heads, L, S)` and ``key_padding_mask`` `(N, S)`,
    True = masked. Returns ``(output, weights)``, weights `(N, L, S)` averaged over
    heads (`(N, heads, L, S)` with ``average_attn_weights=False``) or ``None``.
    """

    def __init__(self, attention: nnx.MultiHeadAttention, batch_first: bool = False):
        self.attention = attention
        self.batch_first = batch_first

    def __call__(self, query, key=None, value=None, key_padding_mask=None,
                 need_weights: bool = True, attn_mask=None, average_attn_weights: bool = True,
                 is_causal: bool = False):
        del is_causal  # torch's hint: the mask is given too
        key = query if key is None else key
        value = key if value is None else value
        batched = query.ndim == 3
        q, k, v = (t if not batched else (t if self.batch_first else jnp.swapaxes(t, 0, 1))
                   for t in (query, key, value))
        if not batched:
            q, k, v = q[None], k[None], v[None]
        heads = self.attention.num_heads
        attend = None
        if attn_mask is not None:
            masked = _boolean("attn_mask", attn_mask)
            if masked.ndim == 3:  # (N·heads, L, S)
                masked = masked.reshape(-1, heads, *masked.shape[-2:])
            attend = ~masked
        if key_padding_mask is not None:
            padded = _boolean("key_padding_mask", key_padding_mask)
            padded = padded.reshape(-1, 1, 1, padded.shape[-1])
            attend = ~padded if attend is None else attend & ~padded
        out = self.attention(q, k, v, mask=attend, sow_weights=need_weights)
        weights = None
        if need_weights:
            # pop: the next call sows afresh, and nnx.grad sees no Intermediate left
            weights = self.attention.attention_weights.get_value()[0]
            del self.attention.attention_weights
            if average_attn_weights:
                weights = jnp.mean(weights, axis=1)
            if not batched:
                weights = weights[0]
        if not batched:
            out = out[0]
        elif not self.batch_first:
            out = jnp.swapaxes(out, 0, 1)
        return out, weights
