"""nnx modules around the stock recurrent layers, for torch's calling conventions.

The parameters live in stock flax layers — ``nnx.RNN`` of the stock cells (subclassed
only to give both sides a bias), ``nnx.Bidirectional``, ``nnx.Linear`` — and these
modules only translate torch's call into flax's (attention:
``jaxgrad.flax.attention_modules``; transformers: ``jaxgrad.flax.transformer_modules``):

=============================  ===========================================================
module                         what it translates
=============================  ===========================================================
``TorchRecurrent``             ``torch.nn.RNN/LSTM/GRU``: ``num_layers``,
                               ``bidirectional`` (``nnx.Bidirectional``),
                               ``batch_first``, inter-layer dropout, torch's state
                               ``h`` / ``(h, c)`` `(D·layers, N, H)` ↔ flax's carry
                               ``h`` / ``(c, h)`` per layer and direction
``TorchLSTMCell``              ``nnx.LSTMCell`` whose input-side ``ii, if_, ig, io``
                               have a bias too: torch's ``bias_ih`` and ``bias_hh``
                               are two ``Param`` and train as torch's (flax's one
                               bias per gate would move their sum twice as far)
``TorchProjLSTMCell``          ``TorchLSTMCell`` with torch's ``proj_size``: the
                               hidden state projected, ``h = W_hr (o ⊙ tanh c)``
                               (``nnx.LSTMCell`` has no projection)
``TorchRNNCell``               ``nnx.SimpleCell`` whose recurrent ``dense_h`` has a
                               bias too (``bias_hh``), for the same reason
``TorchGRUCell``               ``nnx.GRUCell`` whose recurrent ``dense_h`` has a bias:
                               torch's ``n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``
                               (``nnx.GRUCell`` has no ``b_hn``)
``TorchCell``                  ``torch.nn.LSTMCell/GRUCell/RNNCell``: one cell, torch's
                               ``cell(input, hx)`` and ``(h, c)`` ↔ flax's
                               ``cell(carry, x)`` and ``(c, h)``
=============================  ===========================================================

All three cells take ``use_bias=False`` (torch's ``bias=False``: no bias on either side).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

RECURRENT_MODES = ("RNN_TANH", "RNN_RELU", "LSTM", "GRU")


# ------------------------------------------------------------------ recurrent
def _biased(layer: nnx.Linear, use_bias: bool, param_dtype, rngs: nnx.Rngs) -> nnx.Linear:
    """``layer`` (a stock cell's) rebuilt with or without a bias, its kernel (and so
    flax's initialisation of it) kept; a new bias starts at zero, as flax's."""
    rebuilt = nnx.Linear(
        layer.in_features,
        layer.out_features,
        use_bias=use_bias,
        bias_init=nnx.initializers.zeros_init(),
        dtype=layer.dtype,
        param_dtype=param_dtype,
        rngs=rngs,
    )
    rebuilt.kernel = layer.kernel
    return rebuilt


class TorchLSTMCell(nnx.LSTMCell):
    """torch's LSTM cell: ``nnx.LSTMCell`` whose input-side layers carry a bias too.

    ``ii, if_, ig, io`` `(in, H)` hold the rows i, f, g, o of ``weight_ih``ᵀ and
    ``bias_ih``; ``hi, hf, hg, ho`` `(H, H)` those of ``weight_hh``ᵀ and ``bias_hh``.
    flax's own cell has one bias per gate (on ``h*``, "only one needs a bias"): the
    forward is the same, but an optimizer step moves torch's two parameters' sum twice
    as far as it moves flax's one. ``use_bias=False`` drops both (torch's
    ``bias=False``). ``__call__`` is ``nnx.LSTMCell``'s.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        use_bias: bool = True,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        super().__init__(in_features, hidden_features, param_dtype=param_dtype, rngs=rngs)
        for name in ("ii", "if_", "ig", "io", "hi", "hf", "hg", "ho"):
            setattr(self, name, _biased(getattr(self, name), use_bias, param_dtype, rngs))


class TorchProjLSTMCell(TorchLSTMCell):
    """torch's LSTM cell with ``proj_size`` P > 0: ``TorchLSTMCell`` whose new hidden
    state is projected, ``h' = W_hr (o ⊙ tanh c')`` `(N, P)`, while ``c`` stays
    `(N, H)`. ``hr`` (``nnx.Linear`` `(H, P)`, no bias) holds ``weight_hr``ᵀ; the
    hidden-side ``hi, hf, hg, ho`` read the P-wide ``h``: kernels `(P, H)` =
    rows of ``weight_hh`` `(4H, P)`ᵀ. ``nnx.LSTMCell`` has no projection, so
    ``__call__`` is its own (``nnx.LSTMCell``'s, plus ``hr``); ``initialize_carry``
    gives ``h`` P features (zeros, torch's default state).
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        proj_features: int,
        *,
        use_bias: bool = True,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        super().__init__(
            in_features, hidden_features, use_bias=use_bias, param_dtype=param_dtype, rngs=rngs
        )
        self.proj_features = proj_features
        for name in ("hi", "hf", "hg", "ho"):
            setattr(
                self,
                name,
                nnx.Linear(
                    proj_features,
                    hidden_features,
                    use_bias=use_bias,
                    bias_init=nnx.initializers.zeros_init(),
                    param_dtype=param_dtype,
                    rngs=rngs,
                ),
            )
        self.hr = nnx.Linear(
            hidden_features, proj_features, use_bias=False, param_dtype=param_dtype, rngs=rngs
        )

    def __call__(self, carry, inputs):
        c, h = carry  # c (N, H), h (N, P)
        i = self.gate_fn(self.ii(inputs) + self.hi(h))
        f = self.gate_fn(self.if_(inputs) + self.hf(h))
        g = self.activation_fn(self.ig(inputs) + self.hg(h))
        o = self.gate_fn(self.io(inputs) + self.ho(h))
        new_c = f * c + i * g
        new_h = self.hr(o * self.activation_fn(new_c))
        return (new_c, new_h), new_h

    def initialize_carry(self, input_shape, rngs=None, carry_init=None):
        c, _ = super().initialize_carry(input_shape, rngs, carry_init)
        return c, jnp.zeros(c.shape[:-1] + (self.proj_features,), c.dtype)


def state_features(cell) -> int:
    """The width of a cell's hidden state ``h``: ``proj_features`` for a
    ``TorchProjLSTMCell``, else ``hidden_features``."""
    return getattr(cell, "proj_features", cell.hidden_features)


class TorchRNNCell(nnx.SimpleCell):
    """torch's RNN cell: ``nnx.SimpleCell`` whose recurrent ``dense_h`` carries a bias too.

    ``dense_i`` `(in, H)` holds ``weight_ih``ᵀ and ``bias_ih``, ``dense_h`` `(H, H)`
    ``weight_hh``ᵀ and ``bias_hh``: ``h' = act(W_ih x + b_ih + W_hh h + b_hh)``, two
    parameters trained as torch's (flax's cell has only ``b_i``). ``use_bias=False``
    drops both. Its compute ``dtype`` is ``param_dtype`` (``nnx.SimpleCell``'s
    defaults to float32). ``__call__`` is ``nnx.SimpleCell``'s.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        activation_fn=nnx.tanh,
        use_bias: bool = True,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        super().__init__(
            in_features,
            hidden_features,
            activation_fn=activation_fn,
            dtype=param_dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.dense_i = _biased(self.dense_i, use_bias, param_dtype, rngs)
        self.dense_h = _biased(self.dense_h, use_bias, param_dtype, rngs)


class TorchGRUCell(nnx.GRUCell):
    """torch's GRU cell: ``nnx.GRUCell`` with a bias on ``dense_h`` too.

    ``dense_i`` `(in, 3H)` holds ``weight_ih``ᵀ and ``bias_ih``, ``dense_h`` `(H, 3H)`
    ``weight_hh``ᵀ and ``bias_hh``, gates r, z, n as torch's. flax's own cell has no
    ``b_hn`` (the bias inside ``r ⊙ (W_hn h + b_hn)``), which no renaming of the
    other biases can stand in for; ``__call__`` is ``nnx.GRUCell``'s.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        use_bias: bool = True,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ):
        super().__init__(in_features, hidden_features, param_dtype=param_dtype, rngs=rngs)
        self.dense_i = _biased(self.dense_i, use_bias, param_dtype, rngs)
        self.dense_h = _biased(self.dense_h, use_bias, param_dtype, rngs)


class TorchRecurrent(nnx.Module):
    """``torch.nn.RNN`` / ``LSTM`` / ``GRU`` as a stack of stock ``nnx.RNN`` layers.

    ``layers[k]`` is ``nnx.RNN(cell)`` or, bidirectional,
    ``nnx.Bidirectional(nnx.RNN(cell), nnx.RNN(cell))``; cells are ``TorchLSTMCell``,
    ``TorchRNNCell`` or ``TorchGRUCell`` (or, written by hand, the stock cells they
    extend; ``TorchProjLSTMCell`` with ``proj_size``). ``__call__(input, hx=None)`` as
    torch: input `(L, N, in)` (`(N, L, in)` with ``batch_first``) or `(L, in)`; ``hx``
    `(D·layers, N, H_out)` (LSTM: ``(h_0, c_0)``, ``c_0`` `(D·layers, N, H)`; ``H_out``
    is ``proj_size`` when set, else H). Returns ``(output, h_n)`` (LSTM:
    ``(output, (h_n, c_n))``). ``dropout`` (``nnx.Dropout``) acts between layers.
    """

    def __init__(
        self, mode: str, layers: list, *, batch_first: bool, dropout: float, seed: int = 0
    ):
        assert mode in RECURRENT_MODES, mode
        self.mode, self.batch_first = mode, batch_first
        self.layers = nnx.List(layers)
        self.dropout = nnx.Dropout(dropout, rngs=nnx.Rngs(dropout=seed))

    @property
    def bidirectional(self) -> bool:
        return isinstance(self.layers[0], nnx.Bidirectional)

    def __call__(self, input, hx=None):
        batched = input.ndim == 3
        x = input if not batched else (input if self.batch_first else jnp.swapaxes(input, 0, 1))
        if not batched:
            x = x[None]
        directions = 2 if self.bidirectional else 1
        if hx is None:  # torch's zeros; the stock layers hold no carry rngs (rngs=False)
            cell = (self.layers[0].forward_rnn if directions == 2 else self.layers[0]).cell
            shape = (len(self.layers) * directions, x.shape[0])
            h0 = jnp.zeros(shape + (state_features(cell),), x.dtype)
            c0 = (
                jnp.zeros(shape + (cell.hidden_features,), x.dtype) if self.mode == "LSTM" else None
            )
        else:
            h0, c0 = hx if self.mode == "LSTM" else (hx, None)
            if not batched:
                h0 = h0[:, None]
                c0 = None if c0 is None else c0[:, None]
        states = [
            h0[i] if c0 is None else (c0[i], h0[i])  # flax's carry is (c, h)
            for i in range(h0.shape[0])
        ]
        finals = []
        for index, layer in enumerate(self.layers):
            if index:
                x = self.dropout(x)
            carry = states[index * directions : (index + 1) * directions]
            carry = tuple(carry) if directions == 2 else carry[0]
            carry, x = layer(x, initial_carry=carry, return_carry=True)
            finals.extend(carry if directions == 2 else (carry,))
        if self.mode == "LSTM":
            state = (jnp.stack([h for _, h in finals]), jnp.stack([c for c, _ in finals]))
        else:
            state = jnp.stack(finals)
        if not batched:
            x = x[0]
            state = jax.tree.map(lambda s: s[:, 0], state)
        elif not self.batch_first:
            x = jnp.swapaxes(x, 0, 1)
        return x, state


class TorchCell(nnx.Module):
    """``torch.nn.LSTMCell`` / ``GRUCell`` / ``RNNCell`` around one cell (``cell``:
    ``TorchLSTMCell``, ``TorchGRUCell``, ``TorchRNNCell`` or the stock cell each extends).

    ``__call__(input, hx=None)`` as torch: input `(N, in)` or `(in,)`; ``hx`` `(N, H)`
    (LSTM: ``(h, c)``), zeros when ``None``. Returns ``h'`` (LSTM: ``(h', c')``) — flax's
    cell takes and returns the carry ``(c, h)`` first.
    """

    def __init__(self, mode: str, cell):
        assert mode in RECURRENT_MODES, mode
        self.mode, self.cell = mode, cell

    def __call__(self, input, hx=None):
        batched = input.ndim == 2
        x = input if batched else input[None]
        if hx is None:
            zeros = jnp.zeros((x.shape[0], self.cell.hidden_features), x.dtype)
            hx = (zeros, zeros) if self.mode == "LSTM" else zeros
        elif not batched:
            hx = jax.tree.map(lambda s: s[None], tuple(hx) if self.mode == "LSTM" else hx)
        carry = (hx[1], hx[0]) if self.mode == "LSTM" else hx
        carry, _ = self.cell(carry, x)
        out = (carry[1], carry[0]) if self.mode == "LSTM" else carry
        return out if batched else jax.tree.map(lambda s: s[0], out)
