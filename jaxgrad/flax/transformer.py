"""``TransformerEncoderLayer`` / ``TransformerEncoder`` to their nnx twins of
``jaxgrad.flax.transformer_modules`` (stock ``nnx.MultiHeadAttention``, ``nnx.Linear``,
``nnx.LayerNorm``, ``nnx.Dropout`` under torch's child names) and back.
"""

from __future__ import annotations

from jaxgrad import nn
from jaxgrad.flax import transformer_modules as t
from jaxgrad.flax._util import dtype_of
from jaxgrad.flax.attention import attention_from_nnx, attention_to_nnx


def encoder_layer_to_nnx(layer, params, buffers, dtype):
    from jaxgrad.flax import convert  # the Linear and LayerNorm builders live there
    from jaxgrad.nn.module import sub_dict

    if layer.activation not in ("relu", "gelu"):
        raise ValueError(f"to_nnx: TransformerEncoderLayer with `activation` "
                         f"(={layer.activation!r}) has no nnx form yet; use 'relu' or 'gelu'.")
    kids = dict(layer.children())

    def build(name, builder):
        return builder(kids[name], sub_dict(params, name), {}, dtype)

    return t.TorchTransformerEncoderLayer(
        build("self_attn", attention_to_nnx), build("linear1", convert._linear),
        build("linear2", convert._linear), build("norm1", convert._layer_norm),
        build("norm2", convert._layer_norm), dropout=layer.dropout,
        activation=layer.activation, norm_first=layer.norm_first)


def encoder_to_nnx(layer, params, buffers, dtype):
    from jaxgrad.flax import convert
    from jaxgrad.nn.module import sub_dict

    layers = [encoder_layer_to_nnx(layer.encoder_layer, sub_dict(params, f"layers.{i}"), {}, dtype)
              for i in range(layer.num_layers)]
    norm = None
    if layer.norm is not None:
        if type(layer.norm).__name__ != "LayerNorm":
            raise ValueError(f"to_nnx: TransformerEncoder with `norm` of type "
                             f"{type(layer.norm).__name__}; only a LayerNorm has an nnx form.")
        norm = convert._layer_norm(layer.norm, sub_dict(params, "norm"), {}, dtype)
    return t.TorchTransformerEncoder(layers, norm)


def _prefixed(prefix: str, read) -> dict:
    return {f"{prefix}.{k}": v for k, v in read[1].items()}


def encoder_layer_from_nnx(module, context):
    from jaxgrad.flax import convert

    attention, read_attention = module.self_attn.attention, attention_from_nnx(module.self_attn, context)
    reads = {name: reader(getattr(module, name), context) for name, reader in (
        ("linear1", convert._from_linear), ("linear2", convert._from_linear),
        ("norm1", convert._from_layer_norm), ("norm2", convert._from_layer_norm))}
    dropout = module.dropout.rate
    layer = nn.TransformerEncoderLayer(
        attention.in_features, attention.num_heads, dim_feedforward=module.linear1.out_features,
        dropout=dropout, activation=module.activation, layer_norm_eps=module.norm1.epsilon,
        batch_first=module.self_attn.batch_first, norm_first=module.norm_first,
        bias=module.linear1.use_bias, dtype=dtype_of(module),
        attention_dropout=None if attention.dropout_rate == dropout else attention.dropout_rate)
    params = _prefixed("self_attn", read_attention)
    for name, read in reads.items():
        params.update(_prefixed(name, read))
    return layer, params, {}


def encoder_from_nnx(module, context):
    from jaxgrad.flax import convert

    reads = [encoder_layer_from_nnx(layer, context) for layer in module.layers]
    different = [str(i) for i, read in enumerate(reads) if read[0] != reads[0][0]]
    if different:
        raise ValueError(f"from_nnx: TorchTransformerEncoder at {context.path or 'the top level'!r}: "
                         f"layers {', '.join(different)} differ from layer 0 in their "
                         "hyperparameters; torch's TransformerEncoder copies one layer.")
    norm = None
    params = {}
    for i, read in enumerate(reads):
        params.update(_prefixed(f"layers.{i}", read))
    if module.norm is not None:
        norm_read = convert._from_layer_norm(module.norm, context)
        norm = norm_read[0]
        params.update(_prefixed("norm", norm_read))
    return nn.TransformerEncoder(reads[0][0], len(reads), norm=norm), params, {}


TO_NNX = {"TransformerEncoderLayer": encoder_layer_to_nnx, "TransformerEncoder": encoder_to_nnx}
FROM_NNX = {t.TorchTransformerEncoderLayer: encoder_layer_from_nnx,
            t.TorchTransformerEncoder: encoder_from_nnx}
