"""``MultiheadAttention``, mirroring ``torch.nn.MultiheadAttention``.

Params, in torch's ``named_parameters()`` order: ``in_proj_weight`` `(3E, E)` (q, k,
v rows stacked) when ``kdim == vdim == embed_dim``, else ``q_proj_weight`` `(E, E)`,
``k_proj_weight`` `(E, kdim)`, ``v_proj_weight`` `(E, vdim)`; ``in_proj_bias``
`(3E,)`; ``bias_k``, ``bias_v`` `(1, 1, E)` with ``add_bias_kv``; ``out_proj.weight``
`(E, E)`, ``out_proj.bias``. flax's ``MultiHeadDotProductAttention`` keeps separate
``DenseGeneral`` kernels `(in, heads, head_dim)` instead.

``apply(params, query, key_input, value, key_padding_mask=None, need_weights=True,
attn_mask=None, average_attn_weights=True, is_causal=False, *, train=False,
key=None)`` returns ``(attn_output, attn_weights | None)`` as torch. The attention key
tensor is positional: ``key=`` is jaxgrad's PRNG key (attention dropout with
``train=True``). Boolean masks are True = **masked** here (torch's MHA convention;
SDPA's is the opposite).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxgrad._arrays import canonical_dtype, check_dtype_available
from jaxgrad.nn import init as initializers
from jaxgrad.nn.embedding import where_of
from jaxgrad.nn.functional._attention import check_prng_key
from jaxgrad.nn.functional._multihead import multi_head_attention_forward
from jaxgrad.nn.module import Module, layer_key, require_params


@dataclasses.dataclass(frozen=True)
class MultiheadAttention(Module):
    """``torch.nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True,
    add_bias_kv=False, add_zero_attn=False, kdim=None, vdim=None, batch_first=False,
    device=None, dtype=None)``.

    Inputs `(L, N, E)` (`(N, L, E)` with ``batch_first``) or unbatched `(L, E)`.
    """

    embed_dim: int
    num_heads: int
    dropout: float = 0.0
    bias: bool = True
    add_bias_kv: bool = False
    add_zero_attn: bool = False
    kdim: int | None = None
    vdim: int | None = None
    batch_first: bool = False
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "kdim", self.embed_dim if self.kdim is None else self.kdim)
        object.__setattr__(self, "vdim", self.embed_dim if self.vdim is None else self.vdim)
        if self.embed_dim <= 0 or self.num_heads <= 0:
            raise ValueError(
                f"MultiheadAttention: `embed_dim` (={self.embed_dim}) and `num_heads` "
                f"(={self.num_heads}) must be positive."
            )
        if self.embed_dim % self.num_heads:
            raise ValueError(
                f"MultiheadAttention: `embed_dim` (={self.embed_dim}) must be divisible by "
                f"`num_heads` (={self.num_heads})."
            )
        if not 0.0 <= self.dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: `dropout` (={self.dropout}) must be in [0, 1].")

    @property
    def packed(self) -> bool:
        """torch's ``_qkv_same_embed_dim``: one packed ``in_proj_weight``."""
        return self.kdim == self.embed_dim and self.vdim == self.embed_dim

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        E = self.embed_dim
        keys = jax.random.split(key, 6)
        params = {}
        if self.packed:
            params["in_proj_weight"] = initializers.xavier_uniform(keys[0], (3 * E, E), dtype)
        else:
            params["q_proj_weight"] = initializers.xavier_uniform(keys[0], (E, E), dtype)
            params["k_proj_weight"] = initializers.xavier_uniform(keys[1], (E, self.kdim), dtype)
            params["v_proj_weight"] = initializers.xavier_uniform(keys[2], (E, self.vdim), dtype)
        if self.bias:
            params["in_proj_bias"] = jnp.zeros((3 * E,), dtype)
        if self.add_bias_kv:
            params["bias_k"] = initializers.xavier_normal(keys[3], (1, 1, E), dtype)
            params["bias_v"] = initializers.xavier_normal(keys[4], (1, 1, E), dtype)
        params["out_proj.weight"] = initializers.torch_default_weight(
            keys[5], (E, E), dtype, fan_in=E
        )
        if self.bias:
            params["out_proj.bias"] = jnp.zeros((E,), dtype)
        return params

    def forward_with_state(
        self,
        params,
        query,
        key_input,
        value,
        /,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        *,
        buffers,
        train,
        key,
        path,
    ):
        where = where_of("MultiheadAttention", path)
        check_prng_key(key, where)
        require_params(where, params, self.init_names())
        query, key_input, value = map(jnp.asarray, (query, key_input, value))
        batched = query.ndim == 3
        if self.batch_first and batched:
            query, key_input, value = (jnp.swapaxes(t, 0, 1) for t in (query, key_input, value))
        dropout_key = None
        if train and self.dropout > 0.0:
            if key is None:
                raise ValueError(
                    f"{where}: dropout (p={self.dropout}) with train=True needs a PRNG key; "
                    "pass `key=`."
                )
            dropout_key = layer_key(key, path)
        for name, tensor, expected in (
            ("query", query, self.embed_dim),
            ("key_input", key_input, self.kdim),
            ("value", value, self.vdim),
        ):
            if tensor.shape[-1] != expected:
                raise ValueError(
                    f"{where}: `{name}` last dimension must be {expected}, got shape "
                    f"{tuple(tensor.shape)}."
                )
        out, weights = multi_head_attention_forward(
            query,
            key_input,
            value,
            self.embed_dim,
            self.num_heads,
            params.get("in_proj_weight"),
            params.get("in_proj_bias"),
            params.get("bias_k"),
            params.get("bias_v"),
            self.add_zero_attn,
            self.dropout,
            params["out_proj.weight"],
            params.get("out_proj.bias"),
            training=train,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            use_separate_proj_weight=not self.packed,
            q_proj_weight=params.get("q_proj_weight"),
            k_proj_weight=params.get("k_proj_weight"),
            v_proj_weight=params.get("v_proj_weight"),
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
            key=dropout_key,
            _where=where,
        )
        if self.batch_first and batched:
            out = jnp.swapaxes(out, 0, 1)
        return (out, weights), dict(buffers)

    def init_names(self) -> tuple:
        names = (
            ("in_proj_weight",)
            if self.packed
            else ("q_proj_weight", "k_proj_weight", "v_proj_weight")
        )
        if self.bias:
            names += ("in_proj_bias", "out_proj.bias")
        if self.add_bias_kv:
            names += ("bias_k", "bias_v")
        return names + ("out_proj.weight",)
