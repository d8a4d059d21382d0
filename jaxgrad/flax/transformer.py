"""``TransformerEncoderLayer`` / ``TransformerDecoderLayer`` and their stacks
``TransformerEncoder`` / ``TransformerDecoder`` to the nnx twins of
``jaxgrad.flax.transformer_modules`` and back.

Every child keeps torch's name and becomes its stock twin: ``self_attn`` (and the
decoder's cross-attention ``multihead_attn``) ``TorchMultiheadAttention`` around
``nnx.MultiHeadAttention`` (``jaxgrad.flax.attention``), ``linear1``/``linear2``
``nnx.Linear``, ``norm1``…``norm3`` ``nnx.LayerNorm`` (torch's ``layer_norm_eps``),
the dropouts ``nnx.Dropout``; so params read back as ``layers.0.self_attn.in_proj_weight``,
``layers.1.norm3.bias``… exactly torch's keys. A stack's layers are separate nnx
modules (torch deep-copies one layer; each then trains on its own). Refused: an
``activation`` other than ``"relu"``/``"gelu"`` (a callable has no nnx form here) and a
stack ``norm`` other than a ``LayerNorm``.
"""

from __future__ import annotations

from jaxgrad import nn
from jaxgrad.flax import norms as norm_layers
from jaxgrad.flax import transformer_modules as t
from jaxgrad.flax._util import dtype_of, refuse
from jaxgrad.flax.attention import attention_from_nnx, attention_to_nnx
from jaxgrad.flax.linear import linear_from_nnx, linear_to_nnx

# torch class -> (nnx twin, attention children, norm children)
_LAYERS = {
    "TransformerEncoderLayer": (t.TorchTransformerEncoderLayer, ("self_attn",), ("norm1", "norm2")),
    "TransformerDecoderLayer": (
        t.TorchTransformerDecoderLayer,
        ("self_attn", "multihead_attn"),
        ("norm1", "norm2", "norm3"),
    ),
}
_STACKS = {
    "TransformerEncoder": t.TorchTransformerEncoder,
    "TransformerDecoder": t.TorchTransformerDecoder,
}


def layer_to_nnx(layer, params, buffers, dtype):
    from jaxgrad.nn.module import sub_dict

    name = type(layer).__name__
    if layer.activation not in ("relu", "gelu"):
        raise ValueError(
            f"to_nnx: {name} with `activation` (={layer.activation!r}) has no "
            "nnx form yet; use 'relu' or 'gelu'."
        )
    cls, attentions, norms = _LAYERS[name]
    kids = dict(layer.children())
    children = {
        child: attention_to_nnx(kids[child], sub_dict(params, child), {}, dtype)
        for child in attentions
    }
    children.update(
        {
            child: linear_to_nnx(kids[child], sub_dict(params, child), {}, dtype)
            for child in ("linear1", "linear2")
        }
    )
    children.update(
        {
            child: norm_layers.layer_norm_to_nnx(kids[child], sub_dict(params, child), {}, dtype)
            for child in norms
        }
    )
    return cls(
        **children, dropout=layer.dropout, activation=layer.activation, norm_first=layer.norm_first
    )


def stack_to_nnx(layer, params, buffers, dtype):
    from jaxgrad.nn.module import sub_dict

    name = type(layer).__name__
    layers = [
        layer_to_nnx(layer.layer, sub_dict(params, f"layers.{i}"), {}, dtype)
        for i in range(layer.num_layers)
    ]
    norm = None
    if layer.norm is not None:
        if type(layer.norm).__name__ != "LayerNorm":
            raise ValueError(
                f"to_nnx: {name} with `norm` of type "
                f"{type(layer.norm).__name__}; only a LayerNorm has an nnx form."
            )
        norm = norm_layers.layer_norm_to_nnx(layer.norm, sub_dict(params, "norm"), {}, dtype)
    return _STACKS[name](layers, norm)


def _prefixed(prefix: str, read) -> dict:
    return {f"{prefix}.{k}": v for k, v in read[1].items()}


def layer_from_nnx(module, context):
    name = next(n for n, (cls, _, _) in _LAYERS.items() if isinstance(module, cls))
    _, attentions, norms = _LAYERS[name]
    reads = {child: attention_from_nnx(getattr(module, child), context) for child in attentions}
    reads.update(
        {
            child: linear_from_nnx(getattr(module, child), context)
            for child in ("linear1", "linear2")
        }
    )
    reads.update(
        {child: norm_layers.layer_norm_from_nnx(getattr(module, child), context) for child in norms}
    )
    rates = {child: getattr(module, child).attention.dropout_rate for child in attentions}
    if len(set(rates.values())) > 1:  # torch's layer builds both with one dropout
        refuse(
            f"from_nnx: Torch{name} at {context.path or 'the top level'!r}",
            [f"the attentions' dropout rates differ ({rates})"],
        )
    attention, dropout = module.self_attn.attention, module.dropout.rate
    layer = getattr(nn, name)(
        attention.in_features,
        attention.num_heads,
        dim_feedforward=module.linear1.out_features,
        dropout=dropout,
        activation=module.activation,
        layer_norm_eps=module.norm1.epsilon,
        batch_first=module.self_attn.batch_first,
        norm_first=module.norm_first,
        bias=module.linear1.use_bias,
        dtype=dtype_of(module),
        attention_dropout=None if attention.dropout_rate == dropout else attention.dropout_rate,
    )
    params = {}
    for child, read in reads.items():
        params.update(_prefixed(child, read))
    return layer, params, {}


def stack_from_nnx(module, context):
    name = next(n for n, cls in _STACKS.items() if isinstance(module, cls))
    reads = [layer_from_nnx(layer, context) for layer in module.layers]
    different = [str(i) for i, read in enumerate(reads) if read[0] != reads[0][0]]
    if different:
        raise ValueError(
            f"from_nnx: Torch{name} at {context.path or 'the top level'!r}: "
            f"layers {', '.join(different)} differ from layer 0 in their "
            f"hyperparameters; torch's {name} copies one layer."
        )
    norm = None
    params = {}
    for i, read in enumerate(reads):
        params.update(_prefixed(f"layers.{i}", read))
    if module.norm is not None:
        norm_read = norm_layers.layer_norm_from_nnx(module.norm, context)
        norm = norm_read[0]
        params.update(_prefixed("norm", norm_read))
    return getattr(nn, name)(reads[0][0], len(reads), norm=norm), params, {}


TO_NNX = {**{name: layer_to_nnx for name in _LAYERS}, **{name: stack_to_nnx for name in _STACKS}}
FROM_NNX = {
    **{cls: layer_from_nnx for cls, _, _ in _LAYERS.values()},
    **{cls: stack_from_nnx for cls in _STACKS.values()},
}
