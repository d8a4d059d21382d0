"""Recurrent layers to stock ``flax.nnx`` layers and back.

Each torch layer becomes the stock flax layer with torch's meaning, inside a small
module of ``jaxgrad.flax.sequence_modules`` that keeps torch's calling convention
(attention: ``jaxgrad.flax.attention``; transformers: ``jaxgrad.flax.transformer``):

- ``LSTM`` / ``GRU`` / ``RNN`` -> ``nnx.RNN`` per layer and direction
  (``nnx.Bidirectional`` when bidirectional) of ``TorchLSTMCell`` / ``TorchGRUCell`` /
  ``TorchRNNCell``: the stock ``nnx.LSTMCell`` / ``nnx.GRUCell`` / ``nnx.SimpleCell``
  with a bias on both sides, so torch's ``bias_ih`` (input side) and ``bias_hh``
  (hidden side) are two ``nnx.Param`` trained as torch's. LSTM rows i, f, g, o of
  ``weight_ih``/``weight_hh`` and the biases go to ``ii, if_, ig, io`` /
  ``hi, hf, hg, ho``. ``bias=False``: no bias on either side. ``proj_size`` P > 0:
  ``TorchProjLSTMCell`` (``weight_hr`` `(P, H)` -> ``hr.kernel`` `(H, P)`, ``weight_hh``
  `(4H, P)` -> ``hi..ho`` `(P, H)`, the layers above reading ``P·D`` features). Read back, a side without a bias (a stock cell written in flax:
  ``nnx.LSTMCell``'s ``i*``, ``nnx.GRUCell``'s and ``nnx.SimpleCell``'s ``dense_h``)
  is torch's bias at 0.
- ``LSTMCell`` / ``GRUCell`` / ``RNNCell`` -> ``TorchCell`` around the same cells,
  torch's ``cell(input, hx)`` call.

Builders take ``(layer, params, buffers, dtype)`` and return the nnx module; readers
take ``(module, context)`` and return ``(jaxgrad layer, params, buffers)``.
"""

from __future__ import annotations

import numpy as np
from flax import nnx

from jaxgrad import nn
from jaxgrad.flax import sequence_modules as s
from jaxgrad.flax._util import as_numpy, dtype_of, empty, refuse, set_value, value_of

_CELLS = {
    "LSTM": "TorchLSTMCell or nnx.LSTMCell",
    "GRU": "TorchGRUCell or nnx.GRUCell",
    "RNN_TANH": "TorchRNNCell or nnx.SimpleCell(tanh)",
    "RNN_RELU": "TorchRNNCell or nnx.SimpleCell(relu)",
}
_LSTM_GATES = (("ii", "hi"), ("if_", "hf"), ("ig", "hg"), ("io", "ho"))  # torch rows i, f, g, o


# ------------------------------------------------------------------ recurrent
def _cell(mode: str, in_features: int, hidden: int, bias: bool, dtype, proj: int = 0):
    """The empty cell (``_util.empty``): ``_load_cell`` sets every variable."""

    def build():
        rngs = nnx.Rngs(0)
        if mode == "LSTM" and proj:
            return s.TorchProjLSTMCell(
                in_features, hidden, proj, use_bias=bias, param_dtype=dtype, rngs=rngs
            )
        if mode == "LSTM":
            return s.TorchLSTMCell(in_features, hidden, use_bias=bias, param_dtype=dtype, rngs=rngs)
        if mode == "GRU":
            return s.TorchGRUCell(in_features, hidden, use_bias=bias, param_dtype=dtype, rngs=rngs)
        activation = nnx.tanh if mode == "RNN_TANH" else nnx.relu
        return s.TorchRNNCell(
            in_features,
            hidden,
            activation_fn=activation,
            use_bias=bias,
            param_dtype=dtype,
            rngs=rngs,
        )

    return empty(build)


def _sides(cell, mode: str) -> list[tuple[nnx.Linear, nnx.Linear]]:
    """The cell's ``(input-side, hidden-side)`` ``nnx.Linear`` pairs, in torch's row
    order: one pair per gate i, f, g, o for an LSTM, one pair otherwise."""
    if mode == "LSTM":
        return [(getattr(cell, i), getattr(cell, h)) for i, h in _LSTM_GATES]
    return [(cell.dense_i, cell.dense_h)]


def _load_cell(cell, mode: str, params: dict, suffix: str, bias: bool) -> None:
    """torch's ``weight_ih``/``weight_hh`` (rows split per gate for an LSTM) to the
    input-/hidden-side kernels, ``bias_ih``/``bias_hh`` to their biases."""
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
    arrays = [np.split(as_numpy(params[f"{n}{suffix}"]), 4 if mode == "LSTM" else 1) for n in names]
    for k, (dense_i, dense_h) in enumerate(_sides(cell, mode)):
        set_value(dense_i.kernel, arrays[0][k].T)
        set_value(dense_h.kernel, arrays[1][k].T)
        if bias:
            set_value(dense_i.bias, arrays[2][k])
            set_value(dense_h.bias, arrays[3][k])
    if isinstance(cell, s.TorchProjLSTMCell):  # weight_hr (P, H) -> hr.kernel (H, P)
        set_value(cell.hr.kernel, as_numpy(params[f"weight_hr{suffix}"]).T)


def _suffixes(num_layers: int, directions: int):
    return [
        [f"_l{k}" + ("_reverse" if d else "") for d in range(directions)] for k in range(num_layers)
    ]


def recurrent_to_nnx(layer, params, buffers, dtype):
    mode, proj = layer.mode, getattr(layer, "proj_size", 0)
    H, directions = layer.hidden_size, layer.directions
    layers = []
    for k, suffixes in enumerate(_suffixes(layer.num_layers, directions)):
        in_features = layer.input_size if k == 0 else layer.output_size * directions
        rnns = []
        for suffix in suffixes:
            cell = _cell(mode, in_features, H, layer.bias, dtype, proj)
            _load_cell(cell, mode, params, suffix, layer.bias)
            rnns.append(nnx.RNN(cell, rngs=False))
        layers.append(
            rnns[0] if directions == 1 else nnx.Bidirectional(rnns[0], rnns[1], rngs=False)
        )
    return s.TorchRecurrent(mode, layers, batch_first=layer.batch_first, dropout=layer.dropout)


def _has_bias(cell, mode: str) -> bool:
    return any(d.use_bias for pair in _sides(cell, mode) for d in pair)


def _read_bias(dense_i, dense_h, mode: str, gradients: bool):
    """``(bias_ih, bias_hh)`` rows of one input/hidden pair. A side without a bias (a
    stock flax cell: ``nnx.LSTMCell``'s ``i*``, ``nnx.SimpleCell``'s and
    ``nnx.GRUCell``'s ``dense_h``) is torch's bias at 0. Read as gradients, the missing
    side of an LSTM/RNN has the other side's gradient (torch adds the two); a GRU's
    missing hidden side has none that flax's gradients determine, and is refused."""
    b_i = value_of(dense_i.bias) if dense_i.use_bias else None
    b_h = value_of(dense_h.bias) if dense_h.use_bias else None
    if gradients and mode == "GRU" and b_i is not None and b_h is None:
        raise ValueError(
            "grads_to_torch: this stock nnx.GRUCell has no hidden-side bias, so torch's "
            "`bias_hh` gradient (its b_hn enters as r * (W_hn h + b_hn)) cannot be read "
            "from flax's gradients; build the model with to_nnx (TorchGRUCell has both "
            "biases) to compare gradients with torch's"
        )
    if b_i is None and b_h is None:
        zeros = np.zeros(dense_i.out_features, dtype_of(dense_i))
        return zeros, zeros.copy()
    if gradients and mode != "GRU":  # GRU's b_hn enters as r ⊙ b_hn: not the same gradient
        b_i, b_h = (b_h.copy() if b_i is None else b_i), (b_i.copy() if b_h is None else b_h)
    return (np.zeros_like(b_h) if b_i is None else b_i), (
        np.zeros_like(b_i) if b_h is None else b_h
    )


def _read_cell(cell, mode: str, suffix: str, bias: bool, gradients: bool) -> dict:
    sides = _sides(cell, mode)
    params = {
        f"weight_ih{suffix}": np.concatenate([value_of(i.kernel).T for i, _ in sides]),
        f"weight_hh{suffix}": np.concatenate([value_of(h.kernel).T for _, h in sides]),
    }
    if bias:
        pairs = [_read_bias(i, h, mode, gradients) for i, h in sides]
        params[f"bias_ih{suffix}"] = np.concatenate([p[0] for p in pairs])
        params[f"bias_hh{suffix}"] = np.concatenate([p[1] for p in pairs])
    if isinstance(cell, s.TorchProjLSTMCell):
        params[f"weight_hr{suffix}"] = value_of(cell.hr.kernel).T
    return params


def _cell_mode(cell) -> str | None:
    if isinstance(cell, nnx.LSTMCell):
        return "LSTM"
    if isinstance(cell, nnx.GRUCell):
        return "GRU"
    if isinstance(cell, nnx.SimpleCell):
        return {nnx.tanh: "RNN_TANH", nnx.relu: "RNN_RELU"}.get(cell.activation_fn)
    return None


def _cell_problems(cell, mode: str, at: str) -> list[str] | None:
    """What torch cannot compute in ``cell`` for a ``mode`` layer; ``None`` when the
    cell is of another kind altogether."""
    if _cell_mode(cell) != mode:
        return None
    problems = []
    gates = (getattr(cell, "gate_fn", nnx.sigmoid), getattr(cell, "activation_fn", nnx.tanh))
    if mode in ("LSTM", "GRU") and gates != (nnx.sigmoid, nnx.tanh):
        problems.append(f"{at}: gate_fn/activation_fn other than sigmoid/tanh")
    if getattr(cell, "residual", False):
        problems.append(
            f"{at}: `residual`=True (h added to the pre-activation): torch's RNN has no residual"
        )
    return problems


def recurrent_from_nnx(module, context):
    where = f"from_nnx: {type(module).__name__} at {context.path or 'the top level'!r}"
    bidirectional = module.bidirectional
    layers = [
        [layer.forward_rnn, layer.backward_rnn] if bidirectional else [layer]
        for layer in module.layers
    ]
    directions = 2 if bidirectional else 1
    hidden = layers[0][0].cell.hidden_features
    proj = getattr(layers[0][0].cell, "proj_features", 0)
    input_size = layers[0][0].cell.in_features
    problems = []
    for k, rnns in enumerate(layers):
        if len(rnns) != directions or not all(isinstance(r, nnx.RNN) for r in rnns):
            problems.append(
                f"layers[{k}] is {type(module.layers[k]).__name__}; every layer must "
                "be an nnx.RNN, or every layer an nnx.Bidirectional of two"
            )
            continue
        for rnn, direction in zip(rnns, ("forward", "reverse")):
            cell, at = rnn.cell, f"layers[{k}] {direction}"
            kind = _cell_problems(cell, module.mode, at)
            if kind is None:
                problems.append(
                    f"{at}: {type(cell).__name__} in a {module.mode} stack "
                    f"(expected {_CELLS[module.mode]})"
                )
                continue
            problems += kind
            if cell.hidden_features != hidden:
                problems.append(f"{at}: hidden_features {cell.hidden_features} != {hidden}")
            if getattr(cell, "proj_features", 0) != proj:
                problems.append(
                    f"{at}: proj_features {getattr(cell, 'proj_features', 0)} != "
                    f"{proj} (torch projects every layer or none)"
                )
            expected = input_size if k == 0 else (proj or hidden) * directions
            if cell.in_features != expected:
                problems.append(
                    f"{at}: in_features {cell.in_features}, but the layer below gives {expected}"
                )
    refuse(where, problems)
    cls = {"LSTM": nn.LSTM, "GRU": nn.GRU}.get(module.mode, nn.RNN)
    options = (
        {}
        if cls is not nn.RNN
        else {"nonlinearity": "tanh" if module.mode == "RNN_TANH" else "relu"}
    )
    first = layers[0][0].cell
    bias = any(_has_bias(rnn.cell, module.mode) for rnns in layers for rnn in rnns)
    if proj:
        options["proj_size"] = proj
    layer = cls(
        input_size,
        hidden,
        num_layers=len(layers),
        bias=bias,
        batch_first=module.batch_first,
        dropout=module.dropout.rate,
        bidirectional=bidirectional,
        dtype=dtype_of(first),
        **options,
    )
    params = {}
    for rnns, suffixes in zip(layers, _suffixes(len(layers), directions)):
        for rnn, suffix in zip(rnns, suffixes):
            params.update(_read_cell(rnn.cell, module.mode, suffix, bias, context.gradients))
    return layer, params, {}


_CELL_CLASSES = {
    "LSTM": nn.LSTMCell,
    "GRU": nn.GRUCell,
    "RNN_TANH": nn.RNNCell,
    "RNN_RELU": nn.RNNCell,
}


def cell_to_nnx(layer, params, buffers, dtype):
    """``LSTMCell`` / ``GRUCell`` / ``RNNCell`` -> ``TorchCell`` around the cell that
    the layer of the same kind uses, with the same weights and biases (no suffix)."""
    name = type(layer).__name__
    mode = {"LSTMCell": "LSTM", "GRUCell": "GRU"}.get(name) or (
        "RNN_TANH" if layer.nonlinearity == "tanh" else "RNN_RELU"
    )
    cell = _cell(mode, layer.input_size, layer.hidden_size, layer.bias, dtype)
    _load_cell(cell, mode, params, "", layer.bias)
    return s.TorchCell(mode, cell)


def cell_from_nnx(module, context):
    cell, mode = module.cell, module.mode
    at = context.path or "the top level"
    problems = _cell_problems(cell, mode, "cell")
    if problems is None:
        problems = [f"cell: {type(cell).__name__} in a {mode} TorchCell (expected {_CELLS[mode]})"]
    elif isinstance(cell, s.TorchProjLSTMCell):
        problems.append("cell: TorchProjLSTMCell; torch's LSTMCell has no `proj_size`")
    refuse(f"from_nnx: TorchCell at {at!r}", problems)
    bias = _has_bias(cell, mode)
    options = (
        {"nonlinearity": "tanh" if mode == "RNN_TANH" else "relu"} if mode.startswith("RNN") else {}
    )
    layer = _CELL_CLASSES[mode](
        cell.in_features, cell.hidden_features, bias=bias, dtype=dtype_of(cell), **options
    )
    return layer, _read_cell(cell, mode, "", bias, context.gradients), {}


TO_NNX = {
    "LSTM": recurrent_to_nnx,
    "GRU": recurrent_to_nnx,
    "RNN": recurrent_to_nnx,
    "LSTMCell": cell_to_nnx,
    "GRUCell": cell_to_nnx,
    "RNNCell": cell_to_nnx,
}
FROM_NNX = {
    s.TorchRecurrent: recurrent_from_nnx,
    s.TorchCell: cell_from_nnx,
}
