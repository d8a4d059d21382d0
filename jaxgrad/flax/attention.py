"""``MultiheadAttention`` to the stock ``nnx.MultiHeadAttention`` and back.

- ``MultiheadAttention`` -> ``TorchMultiheadAttention`` around ``nnx.MultiHeadAttention``:
  the packed ``in_proj_weight`` `(3E, E)` split into the q/k/v ``LinearGeneral`` kernels
  `(E, heads, head_dim)`, ``out_proj.weight`` `(E, E)` into ``out.kernel``
  `(heads, head_dim, E)`; ``kdim == vdim`` becomes ``in_kv_features``. Refused:
  ``add_bias_kv``, ``add_zero_attn``, ``kdim != vdim`` (flax has one ``in_kv_features``).

The builder takes ``(layer, params, buffers, dtype)`` and returns the nnx module; the
reader takes ``(module, context)`` and returns ``(jaxgrad layer, params, buffers)``.
"""

from __future__ import annotations

import numpy as np
from flax import nnx

from jaxgrad import nn
from jaxgrad.flax import attention_modules as a
from jaxgrad.flax._util import as_numpy, dtype_of, empty, refuse, set_value, value_of


def attention_to_nnx(layer, params, buffers, dtype):
    problems = []
    if layer.add_bias_kv:
        problems.append("`add_bias_kv`=True (bias_k/bias_v appended to the keys and values) "
                        "has no nnx.MultiHeadAttention form")
    if layer.add_zero_attn:
        problems.append("`add_zero_attn`=True has no nnx.MultiHeadAttention form")
    if layer.kdim != layer.vdim:
        problems.append(f"`kdim` (={layer.kdim}) != `vdim` (={layer.vdim}): "
                        "nnx.MultiHeadAttention has one `in_kv_features`")
    refuse("to_nnx: MultiheadAttention", problems)
    E, heads = layer.embed_dim, layer.num_heads
    head_dim = E // heads
    attention = empty(lambda: nnx.MultiHeadAttention(
        heads, E, qkv_features=E, out_features=E, in_kv_features=layer.kdim,
        dropout_rate=layer.dropout, broadcast_dropout=False,  # torch drops per element
        deterministic=False, use_bias=layer.bias, attention_fn=a.torch_attention,
        decode=False, param_dtype=dtype, rngs=nnx.Rngs(0, dropout=0)))
    if attention.rngs is not None:  # the dropout stream (dropout > 0): real keys
        attention.rngs = nnx.Rngs(dropout=0).dropout.fork()
    if layer.packed:
        w_q, w_k, w_v = np.split(as_numpy(params["in_proj_weight"]), 3)
    else:
        w_q, w_k, w_v = (as_numpy(params[f"{n}_proj_weight"]) for n in "qkv")
    for name, weight in (("query", w_q), ("key", w_k), ("value", w_v)):
        # torch (out, in), rows head-major -> flax (in, heads, head_dim)
        set_value(getattr(attention, name).kernel, weight.T.reshape(-1, heads, head_dim))
    set_value(attention.out.kernel, as_numpy(params["out_proj.weight"]).T.reshape(heads, head_dim, E))
    if layer.bias:
        for name, bias in zip(("query", "key", "value"), np.split(as_numpy(params["in_proj_bias"]), 3)):
            set_value(getattr(attention, name).bias, bias.reshape(heads, head_dim))
        set_value(attention.out.bias, params["out_proj.bias"])
    return a.TorchMultiheadAttention(attention, batch_first=layer.batch_first)


def attention_from_nnx(module, context):
    attention = module.attention
    E, heads = attention.in_features, attention.num_heads
    problems = []
    for name, value in (("qkv_features", attention.qkv_features),
                        ("out_features", attention.out_features)):
        if value != E:
            problems.append(f"`{name}` (={value}) != `in_features` (={E}): torch projects to "
                            "embed_dim")
    if attention.num_kv_heads != heads:
        problems.append(f"`num_kv_heads` (={attention.num_kv_heads}) != `num_heads` (={heads}): "
                        "torch has no grouped-query attention")
    if attention.normalize_qk:
        problems.append("`normalize_qk`=True: torch has no QK normalisation")
    refuse(f"from_nnx: MultiHeadAttention at {context.path or 'the top level'!r}", problems)
    kdim = attention.in_kv_features
    layer = nn.MultiheadAttention(E, heads, dropout=attention.dropout_rate, bias=attention.use_bias,
                                  kdim=kdim, vdim=kdim, batch_first=module.batch_first,
                                  dtype=dtype_of(attention))
    w_q, w_k, w_v = (value_of(getattr(attention, n).kernel).reshape(-1, E).T
                     for n in ("query", "key", "value"))
    params = ({"in_proj_weight": np.concatenate([w_q, w_k, w_v])} if layer.packed else
              {"q_proj_weight": w_q, "k_proj_weight": w_k, "v_proj_weight": w_v})
    params["out_proj.weight"] = value_of(attention.out.kernel).reshape(E, E).T
    if attention.use_bias:
        params["in_proj_bias"] = np.concatenate(
            [value_of(getattr(attention, n).bias).reshape(-1) for n in ("query", "key", "value")])
        params["out_proj.bias"] = value_of(attention.out.bias)
    return layer, params, {}


TO_NNX = {"MultiheadAttention": attention_to_nnx}
FROM_NNX = {a.TorchMultiheadAttention: attention_from_nnx}
