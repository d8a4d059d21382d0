"""``MultiheadAttention`` to the stock ``nnx.MultiHeadAttention`` and back.

- ``MultiheadAttention`` -> ``TorchMultiheadAttention`` around ``nnx.MultiHeadAttention``:
  the packed ``in_proj_weight`` `(3E, E)` (or ``q/k/v_proj_weight``) split into the
  q/k/v ``LinearGeneral`` kernels `(in, heads, head_dim)`, ``out_proj.weight`` `(E, E)`
  into ``out.kernel`` `(heads, head_dim, E)`; ``kdim == vdim`` becomes
  ``in_kv_features``, ``kdim != vdim`` a ``TorchVdimAttention`` (the stock layer with
  its ``value`` projection built for ``vdim``); ``add_bias_kv``'s ``bias_k``/``bias_v``
  `(1, 1, E)` become ``TorchMultiheadAttention`` Params `(heads, head_dim)`, and
  ``add_zero_attn`` its flag. Read back, the key/value kernels' input widths are
  ``kdim``/``vdim``.

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
    E, heads = layer.embed_dim, layer.num_heads
    head_dim = E // heads
    options = dict(
        qkv_features=E,
        out_features=E,
        in_kv_features=layer.kdim,
        dropout_rate=layer.dropout,
        broadcast_dropout=False,  # torch drops per element
        deterministic=False,
        use_bias=layer.bias,
        attention_fn=a.torch_attention,
        decode=False,
        param_dtype=dtype,
    )
    if layer.kdim == layer.vdim:
        attention = empty(
            lambda: nnx.MultiHeadAttention(heads, E, **options, rngs=nnx.Rngs(0, dropout=0))
        )
    else:  # flax's one in_kv_features: the value projection rebuilt for vdim
        attention = empty(
            lambda: a.TorchVdimAttention(
                heads, E, in_v_features=layer.vdim, **options, rngs=nnx.Rngs(0, dropout=0)
            )
        )
    if attention.rngs is not None:  # the dropout stream (dropout > 0): real keys
        attention.rngs = nnx.Rngs(dropout=0).dropout.fork()
    if layer.packed:
        w_q, w_k, w_v = np.split(as_numpy(params["in_proj_weight"]), 3)
    else:
        w_q, w_k, w_v = (as_numpy(params[f"{n}_proj_weight"]) for n in "qkv")
    for name, weight in (("query", w_q), ("key", w_k), ("value", w_v)):
        # torch (out, in), rows head-major -> flax (in, heads, head_dim)
        set_value(getattr(attention, name).kernel, weight.T.reshape(-1, heads, head_dim))
    set_value(
        attention.out.kernel, as_numpy(params["out_proj.weight"]).T.reshape(heads, head_dim, E)
    )
    if layer.bias:
        for name, bias in zip(
            ("query", "key", "value"), np.split(as_numpy(params["in_proj_bias"]), 3)
        ):
            set_value(getattr(attention, name).bias, bias.reshape(heads, head_dim))
        set_value(attention.out.bias, params["out_proj.bias"])
    extras = {}
    if layer.add_bias_kv:  # torch's (1, 1, E) -> the key projection's (heads, head_dim)
        extras = {
            f"bias_{n}": as_numpy(params[f"bias_{n}"]).reshape(heads, head_dim).astype(dtype)
            for n in "kv"
        }
    return a.TorchMultiheadAttention(
        attention, batch_first=layer.batch_first, add_zero_attn=layer.add_zero_attn, **extras
    )


def attention_from_nnx(module, context):
    attention = module.attention
    E, heads = attention.in_features, attention.num_heads
    problems = []
    for name, value in (
        ("qkv_features", attention.qkv_features),
        ("out_features", attention.out_features),
    ):
        if value != E:
            problems.append(
                f"`{name}` (={value}) != `in_features` (={E}): torch projects to embed_dim"
            )
    if attention.num_kv_heads != heads:
        problems.append(
            f"`num_kv_heads` (={attention.num_kv_heads}) != `num_heads` (={heads}): "
            "torch has no grouped-query attention"
        )
    if attention.normalize_qk:
        problems.append("`normalize_qk`=True: torch has no QK normalisation")
    refuse(f"from_nnx: MultiHeadAttention at {context.path or 'the top level'!r}", problems)
    # the kernels' input widths: a TorchVdimAttention's value reads vdim, not in_kv_features
    kdim, vdim = (value_of(getattr(attention, n).kernel).shape[0] for n in ("key", "value"))
    layer = nn.MultiheadAttention(
        E,
        heads,
        dropout=attention.dropout_rate,
        bias=attention.use_bias,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        kdim=kdim,
        vdim=vdim,
        batch_first=module.batch_first,
        dtype=dtype_of(attention),
    )
    w_q, w_k, w_v = (
        value_of(getattr(attention, n).kernel).reshape(-1, E).T for n in ("query", "key", "value")
    )
    params = (
        {"in_proj_weight": np.concatenate([w_q, w_k, w_v])}
        if layer.packed
        else {"q_proj_weight": w_q, "k_proj_weight": w_k, "v_proj_weight": w_v}
    )
    params["out_proj.weight"] = value_of(attention.out.kernel).reshape(E, E).T
    if attention.use_bias:
        params["in_proj_bias"] = np.concatenate(
            [value_of(getattr(attention, n).bias).reshape(-1) for n in ("query", "key", "value")]
        )
        params["out_proj.bias"] = value_of(attention.out.bias)
    if module.bias_k is not None:
        params["bias_k"], params["bias_v"] = (
            value_of(b).reshape(1, 1, E) for b in (module.bias_k, module.bias_v)
        )
    return layer, params, {}


TO_NNX = {"MultiheadAttention": attention_to_nnx}
FROM_NNX = {a.TorchMultiheadAttention: attention_from_nnx}
