"""Attention, recurrent and transformer layers to stock ``flax.nnx`` layers and back.

Each torch layer becomes the stock flax layer with torch's meaning, inside a small
module of ``jaxgrad.flax.sequence_modules`` that keeps torch's calling convention:

- ``MultiheadAttention`` -> ``nnx.MultiHeadAttention``: the packed ``in_proj_weight``
  `(3E, E)` split into the q/k/v ``LinearGeneral`` kernels `(E, heads, head_dim)`,
  ``out_proj.weight`` `(E, E)` into ``out.kernel`` `(heads, head_dim, E)`;
  ``kdim == vdim`` becomes ``in_kv_features``. Refused: ``add_bias_kv``,
  ``add_zero_attn``, ``kdim != vdim`` (flax has one ``in_kv_features``).
- ``LSTM`` -> ``nnx.RNN(nnx.LSTMCell)`` per layer (``nnx.Bidirectional`` when
  bidirectional): rows i, f, g, o of ``weight_ih``/``weight_hh`` to the kernels
  ``ii, if_, ig, io`` / ``hi, hf, hg, ho``; ``bias_ih + bias_hh`` to the ``h*`` biases.
  ``RNN`` -> ``nnx.SimpleCell`` (the summed bias on ``dense_i``). ``GRU`` ->
  ``TorchGRUCell``. Refused: ``proj_size > 0``, ``bias=False`` for LSTM/RNN (the stock
  cells always carry a bias, which would train where torch has none).
- ``TransformerEncoderLayer`` / ``TransformerEncoder`` -> their nnx twins built from the
  above, ``nnx.Linear`` and ``nnx.LayerNorm``.

Builders take ``(layer, params, buffers, dtype)`` and return the nnx module; readers
take ``(module, context)`` and return ``(jaxgrad layer, params, buffers)``.
"""

from __future__ import annotations

import numpy as np
from flax import nnx

from jaxgrad import nn
from jaxgrad.flax import sequence_modules as s
from jaxgrad.flax._util import as_numpy, dtype_of, refuse, set_value, value_of

_CELLS = {"LSTM": "nnx.LSTMCell", "GRU": "TorchGRUCell", "RNN_TANH": "nnx.SimpleCell",
          "RNN_RELU": "nnx.SimpleCell"}
_LSTM_GATES = (("ii", "hi"), ("if_", "hf"), ("ig", "hg"), ("io", "ho"))  # torch rows i, f, g, o


# ------------------------------------------------------------------ attention
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
    attention = nnx.MultiHeadAttention(
        heads, E, qkv_features=E, out_features=E, in_kv_features=layer.kdim,
        dropout_rate=layer.dropout, broadcast_dropout=False,  # torch drops per element
        deterministic=False, use_bias=layer.bias, attention_fn=s.torch_attention,
        decode=False, param_dtype=dtype, rngs=nnx.Rngs(0, dropout=0))
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
    return s.TorchMultiheadAttention(attention, batch_first=layer.batch_first)


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


# ------------------------------------------------------------------ recurrent
def _cell(mode: str, in_features: int, hidden: int, bias: bool, dtype):
    rngs = nnx.Rngs(0)
    if mode == "LSTM":
        return nnx.LSTMCell(in_features, hidden, param_dtype=dtype, rngs=rngs)
    if mode == "GRU":
        return s.TorchGRUCell(in_features, hidden, use_bias=bias, param_dtype=dtype, rngs=rngs)
    activation = nnx.tanh if mode == "RNN_TANH" else nnx.relu
    return nnx.SimpleCell(in_features, hidden, activation_fn=activation, dtype=dtype,
                          param_dtype=dtype,  # its compute dtype defaults to float32
                          rngs=rngs)


def _load_cell(cell, mode: str, params: dict, suffix: str, bias: bool) -> None:
    w_ih, w_hh = as_numpy(params[f"weight_ih{suffix}"]), as_numpy(params[f"weight_hh{suffix}"])
    summed = (as_numpy(params[f"bias_ih{suffix}"]) + as_numpy(params[f"bias_hh{suffix}"])
              if bias else None)
    if mode == "LSTM":
        for (i_name, h_name), rows_i, rows_h, b in zip(
                _LSTM_GATES, np.split(w_ih, 4), np.split(w_hh, 4), np.split(summed, 4)):
            set_value(getattr(cell, i_name).kernel, rows_i.T)
            set_value(getattr(cell, h_name).kernel, rows_h.T)
            set_value(getattr(cell, h_name).bias, b)
    elif mode == "GRU":  # both biases kept: dense_h's is torch's b_hh, b_hn included
        set_value(cell.dense_i.kernel, w_ih.T)
        set_value(cell.dense_h.kernel, w_hh.T)
        if bias:
            set_value(cell.dense_i.bias, params[f"bias_ih{suffix}"])
            set_value(cell.dense_h.bias, params[f"bias_hh{suffix}"])
    else:
        set_value(cell.dense_i.kernel, w_ih.T)
        set_value(cell.dense_h.kernel, w_hh.T)
        set_value(cell.dense_i.bias, summed)


def _suffixes(num_layers: int, directions: int):
    return [[f"_l{k}" + ("_reverse" if d else "") for d in range(directions)]
            for k in range(num_layers)]


def recurrent_to_nnx(layer, params, buffers, dtype):
    name, mode = type(layer).__name__, layer.mode
    problems = []
    if getattr(layer, "proj_size", 0):
        problems.append(f"`proj_size` (={layer.proj_size}) > 0: nnx.LSTMCell has no projection")
    if not layer.bias and mode != "GRU":
        problems.append(f"`bias`=False: {_CELLS[mode]} always carries a bias, which would "
                        "train where torch has none")
    refuse(f"to_nnx: {name}", problems)
    H, directions = layer.hidden_size, layer.directions
    layers, record = [], {}
    for k, suffixes in enumerate(_suffixes(layer.num_layers, directions)):
        in_features = layer.input_size if k == 0 else H * directions
        rnns = []
        for suffix in suffixes:
            cell = _cell(mode, in_features, H, layer.bias, dtype)
            _load_cell(cell, mode, params, suffix, layer.bias)
            rnns.append(nnx.RNN(cell, rngs=False))
            if mode != "GRU":
                record.update({f"{b}{suffix}": as_numpy(params[f"{b}{suffix}"])
                               for b in ("bias_ih", "bias_hh")})
        layers.append(rnns[0] if directions == 1 else
                      nnx.Bidirectional(rnns[0], rnns[1], rngs=False))
    return s.TorchRecurrent(mode, layers, batch_first=layer.batch_first, dropout=layer.dropout,
                            torch_biases=record)


def _split_bias(module, summed: np.ndarray, suffix: str, gradients: bool):
    """torch's two biases from flax's sum: the converted pair while the sum is
    unchanged, else the converted ``bias_ih`` and the rest on ``bias_hh``; a cell
    written in flax (nothing recorded) gets ``bias_ih = 0``. Read as gradients, each
    torch bias has the sum's gradient."""
    if gradients:
        return summed, summed.copy()
    record = module.torch_biases
    if f"bias_ih{suffix}" not in record:
        return np.zeros_like(summed), summed
    b_ih, b_hh = value_of(record[f"bias_ih{suffix}"]), value_of(record[f"bias_hh{suffix}"])
    if np.array_equal(b_ih + b_hh, summed):
        return b_ih, b_hh
    return b_ih, summed - b_ih


def _read_cell(module, cell, mode: str, suffix: str, gradients: bool) -> dict:
    if mode == "LSTM":
        w_ih = np.concatenate([value_of(getattr(cell, i).kernel).T for i, _ in _LSTM_GATES])
        w_hh = np.concatenate([value_of(getattr(cell, h).kernel).T for _, h in _LSTM_GATES])
        summed = np.concatenate([value_of(getattr(cell, h).bias) for _, h in _LSTM_GATES])
    else:
        w_ih, w_hh = value_of(cell.dense_i.kernel).T, value_of(cell.dense_h.kernel).T
        summed = value_of(cell.dense_i.bias) if cell.dense_i.use_bias else None
    params = {f"weight_ih{suffix}": w_ih, f"weight_hh{suffix}": w_hh}
    if mode == "GRU":
        if cell.dense_i.use_bias:  # stock nnx.GRUCell: no recurrent bias, torch's b_hh = 0
            params[f"bias_ih{suffix}"] = summed
            params[f"bias_hh{suffix}"] = (value_of(cell.dense_h.bias) if cell.dense_h.use_bias
                                          else np.zeros_like(summed))
    else:
        params[f"bias_ih{suffix}"], params[f"bias_hh{suffix}"] = _split_bias(module, summed, suffix, gradients)
    return params


def _cell_mode(cell) -> str | None:
    if isinstance(cell, nnx.LSTMCell):
        return "LSTM"
    if isinstance(cell, nnx.GRUCell):
        return "GRU"
    if isinstance(cell, nnx.SimpleCell):
        return {nnx.tanh: "RNN_TANH", nnx.relu: "RNN_RELU"}.get(cell.activation_fn)
    return None


def recurrent_from_nnx(module, context):
    where = f"from_nnx: {type(module).__name__} at {context.path or 'the top level'!r}"
    bidirectional = module.bidirectional
    layers = [[layer.forward_rnn, layer.backward_rnn] if bidirectional else [layer]
              for layer in module.layers]
    directions = 2 if bidirectional else 1
    hidden = layers[0][0].cell.hidden_features
    input_size = layers[0][0].cell.in_features
    problems = []
    for k, rnns in enumerate(layers):
        if len(rnns) != directions or not all(isinstance(r, nnx.RNN) for r in rnns):
            problems.append(f"layers[{k}] is {type(module.layers[k]).__name__}; every layer must "
                            "be an nnx.RNN, or every layer an nnx.Bidirectional of two")
            continue
        for rnn, direction in zip(rnns, ("forward", "reverse")):
            cell, at = rnn.cell, f"layers[{k}] {direction}"
            if _cell_mode(cell) != module.mode:
                problems.append(f"{at}: {type(cell).__name__} in a {module.mode} stack "
                                f"(expected {_CELLS[module.mode]})")
                continue
            if cell.hidden_features != hidden:
                problems.append(f"{at}: hidden_features {cell.hidden_features} != {hidden}")
            expected = input_size if k == 0 else hidden * directions
            if cell.in_features != expected:
                problems.append(f"{at}: in_features {cell.in_features}, but the layer below "
                                f"gives {expected}")
            gates = (getattr(cell, "gate_fn", nnx.sigmoid), getattr(cell, "activation_fn", nnx.tanh))
            if module.mode in ("LSTM", "GRU") and gates != (nnx.sigmoid, nnx.tanh):
                problems.append(f"{at}: gate_fn/activation_fn other than sigmoid/tanh")
    refuse(where, problems)
    cls = {"LSTM": nn.LSTM, "GRU": nn.GRU}.get(module.mode, nn.RNN)
    options = {} if cls is not nn.RNN else {
        "nonlinearity": "tanh" if module.mode == "RNN_TANH" else "relu"}
    first = layers[0][0].cell
    bias = module.mode != "GRU" or first.dense_i.use_bias
    layer = cls(input_size, hidden, num_layers=len(layers), bias=bias,
                batch_first=module.batch_first, dropout=module.dropout.rate,
                bidirectional=bidirectional, dtype=dtype_of(first), **options)
    params = {}
    for rnns, suffixes in zip(layers, _suffixes(len(layers), directions)):
        for rnn, suffix in zip(rnns, suffixes):
            params.update(_read_cell(module, rnn.cell, module.mode, suffix, context.gradients))
    return layer, params, {}


# ---------------------------------------------------------------- transformer
def encoder_layer_to_nnx(layer, params, buffers, dtype):
    from jaxgrad.flax import convert  # the Linear and LayerNorm builders live there
    from jaxgrad.nn.module import sub_dict

    if layer.activation not in ("relu", "gelu"):
        raise ValueError(f"to_nnx: TransformerEncoderLayer with `activation` "
                         f"(={layer.activation!r}) has no nnx form yet; use 'relu' or 'gelu'.")
    kids = dict(layer.children())

    def build(name, builder):
        return builder(kids[name], sub_dict(params, name), {}, dtype)

    return s.TorchTransformerEncoderLayer(
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
    return s.TorchTransformerEncoder(layers, norm)


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


TO_NNX = {
    "MultiheadAttention": attention_to_nnx,
    "LSTM": recurrent_to_nnx,
    "GRU": recurrent_to_nnx,
    "RNN": recurrent_to_nnx,
    "TransformerEncoderLayer": encoder_layer_to_nnx,
    "TransformerEncoder": encoder_to_nnx,
}
FROM_NNX = {
    s.TorchMultiheadAttention: attention_from_nnx,
    s.TorchRecurrent: recurrent_from_nnx,
    s.TorchTransformerEncoderLayer: encoder_layer_from_nnx,
    s.TorchTransformerEncoder: encoder_from_nnx,
}
