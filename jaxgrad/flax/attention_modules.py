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
                               (with ``add_bias_kv``/``add_zero_attn`` or a float
                               mask: the stock projections and ``attention_fn``
                               called in torch's order, the extra keys/values and
                               the additive mask in between)
``TorchVdimAttention``         ``nnx.MultiHeadAttention`` whose ``value`` projection
                               reads ``vdim`` inputs (torch's ``kdim != vdim``;
                               flax's constructor has one ``in_kv_features``)
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


def torch_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    broadcast_dropout=True,
    dropout_rng=None,
    dropout_rate=0.0,
    deterministic=False,
    dtype=None,
    precision=None,
    module=None,
    promote_dtype=None,
    is_causal=False,
):
    """``nnx.dot_product_attention`` with torch's fully masked rows.

    flax fills masked logits with the dtype's minimum, so a row whose every key is
    masked gets uniform weights (the mean of the values); torch fills ``-inf``:
    ``need_weights=False`` (SDPA's safe softmax) gives weights 0, ``need_weights=True``
    NaN. ``module`` is set exactly when the weights are sown (``need_weights``).
    """
    kwargs = {} if promote_dtype is None else {"promote_dtype": promote_dtype}
    weights = dot_product_attention_weights(
        query,
        key,
        bias,
        mask,
        broadcast_dropout,
        dropout_rng,
        dropout_rate,
        deterministic,
        dtype,
        precision,
        None,
        is_causal=is_causal,
        **kwargs,
    )
    if mask is not None:
        dead = ~jnp.any(jnp.broadcast_to(mask, weights.shape), axis=-1, keepdims=True)
        weights = jnp.where(dead, jnp.nan if module is not None else 0.0, weights)
    if module is not None:
        module.sow(nnx.Intermediate, "attention_weights", weights)
    return jnp.einsum("...hqk,...khd->...qhd", weights, value, precision=precision)


def _as_flax_masks(name: str, mask, heads: int):
    """One of torch's masks -> ``(masked, additive)``, shaped to broadcast against flax's
    `(N, heads, L, S)` logits: ``masked`` boolean (True = masked, torch's polarity),
    ``additive`` the finite part of a float mask (``None`` for a boolean one).

    A float mask's ``-inf`` entries become ``masked``: flax then fills them with the
    dtype's minimum, which gives the same weights (``exp`` underflows to 0 exactly),
    a row of them is torch's fully masked row (``torch_attention``), and no ``-inf``
    reaches the softmax to turn its gradient into NaN."""
    mask = jnp.asarray(mask)
    if name == "attn_mask" and mask.ndim == 3:  # (N·heads, L, S)
        mask = mask.reshape(-1, heads, *mask.shape[-2:])
    elif name == "key_padding_mask":  # (N, S) or unbatched (S,)
        mask = mask.reshape(-1, 1, 1, mask.shape[-1])
    if mask.dtype == jnp.bool_:
        return mask, None
    if not jnp.issubdtype(mask.dtype, jnp.floating):
        raise TypeError(
            f"TorchMultiheadAttention: `{name}` has dtype {mask.dtype}; torch takes "
            "boolean (True = masked) or float (added to the logits) masks only."
        )
    masked = mask == -jnp.inf
    return masked, jnp.where(masked, jnp.zeros((), mask.dtype), mask)


def _pad_keys(mask, extra: int, value):
    """``mask`` with ``extra`` key columns of ``value`` appended (``bias_k`` and the
    zero attention add keys every query attends to)."""
    if mask is None or not extra:
        return mask
    return jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, extra)], constant_values=value)


class TorchMultiheadAttention(nnx.Module):
    """``torch.nn.MultiheadAttention`` around a stock ``nnx.MultiHeadAttention``
    (``attention``): ``query.kernel`` `(E, heads, head_dim)` = rows of torch's packed
    ``in_proj_weight`` `(3E, E)`, transposed and split; ``out.kernel``
    `(heads, head_dim, E)` = ``out_proj.weight``ᵀ. With ``kdim != vdim``,
    ``attention`` is a ``TorchVdimAttention``.

    What ``nnx.MultiHeadAttention``'s own call cannot express is ours, between its
    stock projections and its ``attention_fn``: ``bias_k``, ``bias_v`` `(heads, head_dim)`
    (``nnx.Param``: torch's `(1, 1, E)` with ``add_bias_kv``) appended to the projected
    keys and values, ``add_zero_attn``'s zero key and value per head after them, and
    float (additive) masks, which flax's boolean ``mask`` cannot carry (passed as
    the attention ``bias``). Otherwise the stock ``__call__`` runs.

    ``__call__(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` as torch:
    inputs `(L, N, E)` (`(N, L, E)` with ``batch_first``) or `(L, E)`; ``attn_mask``
    `(L, S)` or `(N·heads, L, S)` and ``key_padding_mask`` `(N, S)`, boolean (True =
    masked) or float (added to the logits). ``is_causal`` is torch's hint: it needs
    ``attn_mask``, and without ``key_padding_mask`` and ``need_weights`` the causal
    mask replaces it, as torch's SDPA call does. Returns ``(output, weights)``, weights
    `(N, L, S')` averaged over heads (`(N, heads, L, S')` with
    ``average_attn_weights=False``; ``S'`` counts the appended keys) or ``None``.
    """

    def __init__(
        self,
        attention: nnx.MultiHeadAttention,
        batch_first: bool = False,
        *,
        bias_k=None,
        bias_v=None,
        add_zero_attn: bool = False,
    ):
        if (bias_k is None) != (bias_v is None):
            raise ValueError(
                "TorchMultiheadAttention: `bias_k` and `bias_v` must be given "
                "together (torch's add_bias_kv)."
            )
        self.attention = attention
        self.batch_first = batch_first
        self.bias_k = None if bias_k is None else nnx.Param(jnp.asarray(bias_k))
        self.bias_v = None if bias_v is None else nnx.Param(jnp.asarray(bias_v))
        self.add_zero_attn = add_zero_attn

    def __call__(
        self,
        query,
        key=None,
        value=None,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        key = query if key is None else key
        value = key if value is None else value
        batched = query.ndim == 3
        q, k, v = (
            t if not batched else (t if self.batch_first else jnp.swapaxes(t, 0, 1))
            for t in (query, key, value)
        )
        if not batched:
            q, k, v = q[None], k[None], v[None]
        if is_causal and attn_mask is None:
            raise ValueError(
                "TorchMultiheadAttention: `is_causal`=True is a hint that needs "
                "the causal `attn_mask` too (torch raises the same)."
            )
        # torch then hands SDPA is_causal=True and never reads attn_mask
        causal = is_causal and key_padding_mask is None and not need_weights
        heads = self.attention.num_heads
        extra = (self.bias_k is not None) + bool(self.add_zero_attn)
        attend, bias = None, None  # flax's mask (True = attend) and the additive float mask
        for name, mask in (
            ("attn_mask", None if causal else attn_mask),
            ("key_padding_mask", key_padding_mask),
        ):
            if mask is None:
                continue
            masked, additive = _as_flax_masks(name, mask, heads)
            attend = ~masked if attend is None else attend & ~masked
            if additive is not None:
                bias = additive if bias is None else bias + additive
        attend, bias = _pad_keys(attend, extra, True), _pad_keys(bias, extra, 0)
        if causal:
            attend = jnp.tril(jnp.ones((q.shape[1], k.shape[1] + extra), bool))

        def attend_with(attention):
            if extra or bias is not None:
                return self._attend(q, k, v, attend, bias, need_weights)
            return attention(q, k, v, mask=attend, sow_weights=need_weights)

        weights = None
        if not need_weights:
            out = attend_with(self.attention)
        else:
            # flax's way to read sown values: nothing stays on the module, so the next
            # call sows afresh and nnx.grad sees no Intermediate
            out, sown = nnx.capture(attend_with, nnx.Intermediate)(self.attention)
            weights = sown["attention_weights"].get_value()[0]
            if average_attn_weights:
                weights = jnp.mean(weights, axis=1)
            if not batched:
                weights = weights[0]
        if not batched:
            out = out[0]
        elif not self.batch_first:
            out = jnp.swapaxes(out, 0, 1)
        return out, weights

    def _attend(self, q, k, v, mask, bias, need_weights: bool):
        """``nnx.MultiHeadAttention.__call__``'s steps on its own stock projections and
        ``attention_fn``, with torch's extra keys/values and the additive mask between.
        q `(N, L, E)`, k `(N, S, kdim)`, v `(N, S, vdim)` -> `(N, L, E)`."""
        a = self.attention
        q, k, v = a.query(q), a.key(k), a.value(v)  # (N, len, heads, head_dim)
        appended = [(self.bias_k[...], self.bias_v[...])] if self.bias_k is not None else []
        if self.add_zero_attn:  # after bias_kv, as torch
            zeros = jnp.zeros(k.shape[-2:], k.dtype)
            appended.append((zeros, zeros))
        for extra_k, extra_v in appended:
            shape = (k.shape[0], 1, *k.shape[-2:])
            k = jnp.concatenate([k, jnp.broadcast_to(extra_k.astype(k.dtype), shape)], axis=1)
            v = jnp.concatenate([v, jnp.broadcast_to(extra_v.astype(v.dtype), shape)], axis=1)
        dropout_rng = None
        if a.dropout_rate > 0.0:
            if a.deterministic is None:
                raise ValueError(
                    "TorchMultiheadAttention: the nnx.MultiHeadAttention has "
                    "dropout and `deterministic`=None; call .train() or .eval()."
                )
            if not a.deterministic:
                dropout_rng = a.rngs()
        x = a.attention_fn(
            q,
            k,
            v,
            bias=bias,
            mask=mask,
            dropout_rng=dropout_rng,
            dropout_rate=a.dropout_rate,
            broadcast_dropout=a.broadcast_dropout,
            deterministic=dropout_rng is None,
            dtype=a.dtype,
            precision=a.precision,
            module=a if need_weights else None,
        )
        return a.out(x)


class TorchVdimAttention(nnx.MultiHeadAttention):
    """``nnx.MultiHeadAttention`` whose ``value`` projection reads ``in_v_features``
    inputs: torch's ``vdim`` != ``kdim``. flax's constructor has one
    ``in_kv_features`` for both; its ``__call__`` projects keys and values apart, so
    only ``value`` (a stock ``nnx.LinearGeneral``, kernel `(vdim, heads, head_dim)` =
    torch's ``v_proj_weight``ᵀ split per head) is rebuilt."""

    def __init__(
        self, num_heads: int, in_features: int, *, in_v_features: int, rngs: nnx.Rngs, **options
    ):
        super().__init__(num_heads, in_features, rngs=rngs, **options)
        self.in_v_features = in_v_features
        self.value = nnx.LinearGeneral(
            in_v_features,
            (self.num_kv_heads, self.head_dim),
            use_bias=self.use_bias,
            dtype=self.dtype,
            param_dtype=self.param_dtype,
            precision=self.precision,
            rngs=rngs,
        )
