"""``RNN``, ``LSTM``, ``GRU`` and their cells, mirroring ``torch.nn``.

Params carry torch's names and packed layouts, in torch's order: per layer ``k`` and
direction (``""`` or ``"_reverse"``) ``weight_ih_l{k}`` `(G·H, in)`, ``weight_hh_l{k}``
`(G·H, H_out)`, ``bias_ih_l{k}``, ``bias_hh_l{k}`` `(G·H,)` and, for ``LSTM`` with
``proj_size > 0``, ``weight_hr_l{k}`` `(proj_size, H)`; G is 1, 4 (i, f, g, o) or
3 (r, z, n). Every parameter starts ``U(−1/√H, 1/√H)`` like torch's.

``apply(params, input, hx=None, *, train=False, key=None)`` returns ``(output,
h_n)`` (``(output, (h_n, c_n))`` for LSTM). Input `(L, N, in)` (`(N, L, in)` with
``batch_first``) or unbatched `(L, in)`; ``hx`` `(D·num_layers, N, H_out)` (LSTM:
``(h_0, c_0)``, ``c_0`` `(D·num_layers, N, H)`), zeros when omitted. Inter-layer
``dropout`` is active with ``train=True`` and takes ``key``. Each direction of each
layer is one ``jax.lax.scan`` over time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import canonical_dtype, check_dtype_available, check_input_dtype
from jaxgrad.nn.embedding import where_of
from jaxgrad.nn.functional._recurrent import (
    GATES,
    gru_cell,
    lstm_cell,
    recurrent,
    rnn_relu_cell,
    rnn_tanh_cell,
)
from jaxgrad.nn.module import Module, layer_key, require_params


def _uniform_params(key, shapes: dict, hidden_size: int, dtype) -> dict:
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    keys = jax.random.split(key, max(len(shapes), 1))
    return {
        name: jax.random.uniform(k, shape, dtype, minval=-bound, maxval=bound)
        for k, (name, shape) in zip(keys, shapes.items())
    }


def _check_positive(layer: str, **values):
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{layer}: `{name}` (={value!r}) must be a positive int.")


def _check_state(where: str, name: str, state, expected: tuple):
    if tuple(state.shape) != expected:
        raise ValueError(f"{where}: `{name}` has shape {tuple(state.shape)}, expected {expected}.")


def _check_dtype(where: str, name: str, array, weight_dtype):
    """torch's RNN, LSTM and GRU refuse an input (or state) whose dtype is not their
    weights' ("RNN input dtype (torch.float64) does not match weight dtype
    (torch.float32)"), where JAX would promote and run a float32 model in float64.
    Dtypes are compared after JAX's canonicalisation: with ``jax_enable_x64`` off a
    float64 numpy input *is* float32 to JAX and passes."""
    got = np.dtype(jax.dtypes.canonicalize_dtype(jnp.result_type(array)))
    expected = np.dtype(jax.dtypes.canonicalize_dtype(weight_dtype))
    if got != expected:
        raise ValueError(
            f"{where}: `{name}` dtype ({got.name}) must match the weight dtype "
            f"({expected.name}), as torch requires. Cast it "
            f"(`{name}.astype({expected.name!r})`) or build the layer in {got.name} "
            f"(`dtype={got.name!r}`)."
        )


class _RNNBase(Module):
    """Shared by RNN, LSTM and GRU (torch's ``RNNBase``)."""

    @property
    def mode(self) -> str:
        raise NotImplementedError

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def output_size(self) -> int:
        proj = getattr(self, "proj_size", 0)
        return proj if proj > 0 else self.hidden_size

    def _validate(self, name: str):
        _check_positive(
            name,
            input_size=self.input_size,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
        )
        if not 0.0 <= self.dropout <= 1.0 or isinstance(self.dropout, bool):
            raise ValueError(f"{name}: `dropout` (={self.dropout!r}) must be a number in [0, 1].")
        for flag in ("bias", "batch_first", "bidirectional"):  # torch: "should be of type bool"
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise TypeError(
                    f"{name}: `{flag}` (={value!r}) must be a bool, got {type(value).__name__}."
                )
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    def _shapes(self) -> dict:
        gate_size = GATES[self.mode] * self.hidden_size
        proj = getattr(self, "proj_size", 0)
        shapes = {}
        for layer in range(self.num_layers):
            for direction in range(self.directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                layer_input = self.input_size if layer == 0 else self.output_size * self.directions
                shapes[f"weight_ih{suffix}"] = (gate_size, layer_input)
                shapes[f"weight_hh{suffix}"] = (gate_size, self.output_size)
                if self.bias:
                    shapes[f"bias_ih{suffix}"] = (gate_size,)
                    shapes[f"bias_hh{suffix}"] = (gate_size,)
                if proj > 0:
                    shapes[f"weight_hr{suffix}"] = (proj, self.hidden_size)
        return shapes

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        return _uniform_params(key, self._shapes(), self.hidden_size, dtype)

    def forward_with_state(self, params, input, hx=None, *, buffers, train, key, path):
        name = type(self).__name__
        where = where_of(name, path)
        require_params(where, params, tuple(self._shapes()))
        input = jnp.asarray(input)
        if input.ndim not in (2, 3):
            raise ValueError(
                f"{where}: `input` must be 3-D (batched) or 2-D (unbatched), got shape "
                f"{tuple(input.shape)}."
            )
        if input.shape[-1] != self.input_size:
            raise ValueError(
                f"{where}: `input` last dimension must be input_size={self.input_size}, "
                f"got shape {tuple(input.shape)}."
            )
        weight_dtype = jnp.result_type(params["weight_ih_l0"])
        _check_dtype(where, "input", input, weight_dtype)
        batched = input.ndim == 3
        if not batched:
            input = input[:, None]
        elif self.batch_first:
            input = jnp.swapaxes(input, 0, 1)
        batch = input.shape[1]
        stacked = self.num_layers * self.directions
        h_shape = (stacked, batch, self.output_size)
        c_shape = (stacked, batch, self.hidden_size)
        h0 = c0 = None
        if hx is not None:
            if self.mode == "LSTM":
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise TypeError(
                        f"{where}: `hx` must be a pair (h_0, c_0), got {type(hx).__name__}."
                    )
                h0, c0 = map(jnp.asarray, hx)
            else:
                h0 = jnp.asarray(hx)
            states = {"h_0": h0, "c_0": c0} if self.mode == "LSTM" else {"hx": h0}
            for label, state in states.items():
                _check_dtype(where, label, state, weight_dtype)
            _check_state(
                where,
                "h_0" if self.mode == "LSTM" else "hx",
                h0,
                h_shape if batched else (stacked, self.output_size),
            )
            if c0 is not None:
                _check_state(where, "c_0", c0, c_shape if batched else (stacked, self.hidden_size))
            if not batched:
                h0 = h0[:, None]
                c0 = None if c0 is None else c0[:, None]
        dtype = input.dtype
        if h0 is None:
            h0 = jnp.zeros(h_shape, dtype)
        if self.mode == "LSTM" and c0 is None:
            c0 = jnp.zeros(c_shape, dtype)
        keys = None
        if train and self.dropout > 0.0 and self.num_layers > 1:
            if key is None:
                raise ValueError(
                    f"{where}: inter-layer dropout (p={self.dropout}) with train=True needs "
                    "a PRNG key; pass `key=`."
                )
            keys = jax.random.split(layer_key(key, path), self.num_layers - 1)
        output, h_n, c_n = recurrent(
            self.mode,
            params,
            input,
            h0,
            c0,
            num_layers=self.num_layers,
            bidirectional=self.bidirectional,
            bias=self.bias,
            dropout=self.dropout,
            train=train,
            keys=keys,
            where=where,
        )
        if not batched:
            output, h_n = output[:, 0], h_n[:, 0]
            c_n = None if c_n is None else c_n[:, 0]
        elif self.batch_first:
            output = jnp.swapaxes(output, 0, 1)
        state = (h_n, c_n) if self.mode == "LSTM" else h_n
        return (output, state), dict(buffers)


@dataclasses.dataclass(frozen=True)
class RNN(_RNNBase):
    """``torch.nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh',
    bias=True, batch_first=False, dropout=0.0, bidirectional=False, device=None,
    dtype=None)``."""

    input_size: int
    hidden_size: int
    num_layers: int = 1
    nonlinearity: str = "tanh"
    bias: bool = True
    batch_first: bool = False
    dropout: float = 0.0
    bidirectional: bool = False
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"RNN: `nonlinearity` (={self.nonlinearity!r}) must be 'tanh' or 'relu'."
            )
        self._validate("RNN")

    @property
    def mode(self) -> str:
        return "RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU"


@dataclasses.dataclass(frozen=True)
class LSTM(_RNNBase):
    """``torch.nn.LSTM(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, device=None,
    dtype=None)``."""

    input_size: int
    hidden_size: int
    num_layers: int = 1
    bias: bool = True
    batch_first: bool = False
    dropout: float = 0.0
    bidirectional: bool = False
    proj_size: int = 0
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        if not isinstance(self.proj_size, int) or self.proj_size < 0:
            raise ValueError(f"LSTM: `proj_size` (={self.proj_size!r}) must be a non-negative int.")
        if self.proj_size >= self.hidden_size:
            raise ValueError(
                f"LSTM: `proj_size` (={self.proj_size}) must be smaller than `hidden_size` "
                f"(={self.hidden_size})."
            )
        self._validate("LSTM")

    mode = property(lambda self: "LSTM")


@dataclasses.dataclass(frozen=True)
class GRU(_RNNBase):
    """``torch.nn.GRU(input_size, hidden_size, num_layers=1, bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None)``."""

    input_size: int
    hidden_size: int
    num_layers: int = 1
    bias: bool = True
    batch_first: bool = False
    dropout: float = 0.0
    bidirectional: bool = False
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        self._validate("GRU")

    mode = property(lambda self: "GRU")


class _CellBase(Module):
    """Shared by the cells: params ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``."""

    def _gates(self) -> int:
        raise NotImplementedError

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        gate_size = self._gates() * self.hidden_size
        shapes = {
            "weight_ih": (gate_size, self.input_size),
            "weight_hh": (gate_size, self.hidden_size),
        }
        if self.bias:
            shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
        return _uniform_params(key, shapes, self.hidden_size, dtype)

    def forward_with_state(self, params, input, hx=None, *, buffers, train, key, path):
        del train, key
        name = type(self).__name__
        where = where_of(name, path)
        require_params(
            where,
            params,
            ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias else ()),
        )
        input = jnp.asarray(input)
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(
                f"{where}: `input` must be (N, {self.input_size}) or ({self.input_size},), "
                f"got shape {tuple(input.shape)}."
            )
        # torch's cells raise "mat1 and mat2 must have the same dtype" (a TypeError here)
        check_input_dtype(where, input, jnp.result_type(params["weight_ih"]))
        batched = input.ndim == 2
        if not batched:
            input = input[None]
        expected = (input.shape[0], self.hidden_size)
        states = None
        if hx is not None:
            states = list(hx) if isinstance(self, LSTMCell) else [hx]
            if isinstance(self, LSTMCell) and len(states) != 2:
                raise TypeError(f"{where}: `hx` must be a pair (h_0, c_0).")
            states = [jnp.asarray(s) for s in states]
            for label, s in zip(("h_0", "c_0") if len(states) == 2 else ("hx",), states):
                _check_state(where, label, s, expected if batched else (self.hidden_size,))
                check_input_dtype(where, s, jnp.result_type(params["weight_hh"]), argument=label)
            if not batched:
                states = [s[None] for s in states]
        else:
            count = 2 if isinstance(self, LSTMCell) else 1
            states = [jnp.zeros(expected, input.dtype)] * count
        args = (
            params["weight_ih"],
            params["weight_hh"],
            params.get("bias_ih"),
            params.get("bias_hh"),
        )
        out = self._cell(input, states[0] if len(states) == 1 else tuple(states), *args)
        if not batched:
            out = tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]
        return out, dict(buffers)


@dataclasses.dataclass(frozen=True)
class RNNCell(_CellBase):
    """``torch.nn.RNNCell(input_size, hidden_size, bias=True, nonlinearity='tanh',
    device=None, dtype=None)``: ``h' = act(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)``."""

    input_size: int
    hidden_size: int
    bias: bool = True
    nonlinearity: str = "tanh"
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        _check_positive("RNNCell", input_size=self.input_size, hidden_size=self.hidden_size)
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"RNNCell: `nonlinearity` (={self.nonlinearity!r}) must be 'tanh' or 'relu'."
            )
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    def _gates(self):
        return 1

    def _cell(self, *args):
        return (rnn_tanh_cell if self.nonlinearity == "tanh" else rnn_relu_cell)(*args)


@dataclasses.dataclass(frozen=True)
class LSTMCell(_CellBase):
    """``torch.nn.LSTMCell(input_size, hidden_size, bias=True, device=None,
    dtype=None)``: ``apply(params, x, (h, c)) -> (h', c')``."""

    input_size: int
    hidden_size: int
    bias: bool = True
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        _check_positive("LSTMCell", input_size=self.input_size, hidden_size=self.hidden_size)
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    def _gates(self):
        return 4

    def _cell(self, *args):
        return lstm_cell(*args)


@dataclasses.dataclass(frozen=True)
class GRUCell(_CellBase):
    """``torch.nn.GRUCell(input_size, hidden_size, bias=True, device=None,
    dtype=None)``: ``apply(params, x, h) -> h'``."""

    input_size: int
    hidden_size: int
    bias: bool = True
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        _check_positive("GRUCell", input_size=self.input_size, hidden_size=self.hidden_size)
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    def _gates(self):
        return 3

    def _cell(self, *args):
        return gru_cell(*args)
