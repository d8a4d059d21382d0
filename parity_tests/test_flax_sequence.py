"""``jaxgrad.flax`` for the sequence and transposed layers: stock ``nnx.MultiHeadAttention``
(with torch's extras: ``add_bias_kv``, ``add_zero_attn``, ``vdim``, float masks), the
transformer decoder, ``nnx.RNN`` of ``TorchLSTMCell`` / ``TorchGRUCell`` / ``TorchRNNCell``
(the stock cells with torch's two biases; ``TorchProjLSTMCell`` for ``proj_size``; torch's
cell modules as ``TorchCell``), ``nnx.ConvTranspose`` (one per group when grouped),
convolutions with every ``padding_mode`` and ``InstanceNorm`` with running statistics —
each against torch at
the float64 tier (forward, then every gradient mapped back to torch's names), the
stock classes asserted, round trips bit-exact, and bad input refused with every
problem named at once.

What the parity report's ``nnx`` rows already run (a 2-layer bidirectional LSTM, the
LSTM/GRU/transformer classifiers and their 20-step training, ``ConvTranspose2d``
stride 2 with ``output_padding``, replicate and circular padding 1) is not re-run
here; each model is jitted once, every call of it in one compiled objective.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from jaxgrad.flax import (
    attention_modules,
    from_nnx,
    grads_to_torch,
    modules,
    nnx_state_dict,
    sequence_modules,
    to_nnx,
    transformer_modules,
)
from jaxgrad.parity import assert_parity
from parity_tests._sampling import one_in


def _instances(module, cls) -> list:
    return [node for _, node in nnx.iter_graph(module) if isinstance(node, cls)]


def _torch(tree):
    return jax.tree.map(lambda v: torch.from_numpy(v) if isinstance(v, np.ndarray) else v, tree)


@nnx.jit(static_argnums=1)
def _outputs_and_grads(module, spec, arrays, cotangents):
    """Every call of ``spec`` (``(treedef, static leaves)`` per call, array leaves taken
    from ``arrays`` in order) on ``module``; the gradient of ``sum(outputs · cotangents)``."""

    def objective(mod):
        arrays_left, ys = iter(arrays), []
        for treedef, static in spec:
            leaves = [next(arrays_left) if leaf is _ARRAY else leaf for leaf in static]
            args, kwargs = jax.tree.unflatten(treedef, leaves)
            ys += jax.tree.leaves(mod(*args, **kwargs))
        return sum(jnp.nansum(y * c) for y, c in zip(ys, cotangents)), ys

    (_, ys), grads = nnx.value_and_grad(objective, has_aux=True)(module)
    return ys, grads


_ARRAY = object()


def _parity(torch_module, nnx_module, calls, rng):
    """Forward outputs (every array of torch's return values) and the gradients of
    ``sum(outputs · cotangents)`` for every parameter, torch against nnx, for the
    ``calls`` (``(args, kwargs)`` of numpy arrays and static values, nested as the
    module takes them) together: one compiled objective per module and call pattern."""
    torch_module.zero_grad(set_to_none=True)
    outs = [torch_module(*_torch(args), **_torch(kwargs)) for args, kwargs in calls]
    leaves = jax.tree.leaves(outs)
    cotangents = [rng.standard_normal(tuple(t.shape)) for t in leaves]
    sum(((t * torch.from_numpy(c)).nansum() for t, c in zip(leaves, cotangents))).backward()
    reference = {
        "outputs": [t.detach().numpy() for t in leaves],
        "grads": {n: p.grad.numpy() for n, p in torch_module.named_parameters()},
    }
    spec, arrays = [], []
    for call in calls:
        flat, treedef = jax.tree.flatten(call)
        arrays += [jnp.asarray(v) for v in flat if isinstance(v, np.ndarray)]
        spec.append((treedef, tuple(_ARRAY if isinstance(v, np.ndarray) else v for v in flat)))
    ys, grads = _outputs_and_grads(nnx_module, tuple(spec), arrays, cotangents)
    assert all(y.dtype == jnp.float64 for y in ys)
    assert_parity(
        reference,
        {"outputs": [np.asarray(y) for y in ys], "grads": grads_to_torch(nnx_module, grads)},
    )


def _round_trip(torch_module, nnx_module):
    state = {k: v.numpy() for k, v in torch_module.state_dict().items()}
    back = nnx_state_dict(nnx_module)
    assert list(back) == list(state)
    for name in state:
        np.testing.assert_array_equal(back[name], state[name], err_msg=name)
    torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()})


def _empty(build):
    """A hand-built stock module without computing flax's initialisation (for checks
    that read its structure only)."""
    return nnx.eval_shape(build)


# ------------------------------------------------------------------ recurrent
_CELL = {
    torch.nn.LSTM: sequence_modules.TorchLSTMCell,
    torch.nn.GRU: sequence_modules.TorchGRUCell,
    torch.nn.RNN: sequence_modules.TorchRNNCell,
}
_STOCK = {torch.nn.LSTM: nnx.LSTMCell, torch.nn.GRU: nnx.GRUCell, torch.nn.RNN: nnx.SimpleCell}


# GRU and RNN in the default run (LSTM: test_lstm_proj_size_... below), LSTM in the
# exhaustive run too (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "cls, options",
    one_in(
        2,
        [
            pytest.param(
                torch.nn.GRU,
                dict(num_layers=2, bidirectional=True, batch_first=True),
                id="gru-2-bi-bf",
            ),
            pytest.param(torch.nn.LSTM, dict(num_layers=2, bias=False), id="lstm-2-nobias"),
            pytest.param(torch.nn.RNN, dict(num_layers=2, nonlinearity="relu"), id="rnn-relu-2"),
        ],
    ),
)
def test_recurrent_layers_become_stock_nnx_rnns(x64, rng, cls, options):
    """Each cell is the stock flax cell with torch's biases as separate Params; the
    LSTM also takes torch's initial state ``(h_0, c_0)`` and an unbatched input."""
    module = cls(3, 4, dtype=torch.float64, **options)
    nnx_module = to_nnx(module)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    assert len(_instances(nnx_module, nnx.RNN)) == layers
    cells = _instances(nnx_module, _CELL[cls])
    assert len(cells) == layers and all(isinstance(c, _STOCK[cls]) for c in cells)
    assert not _instances(nnx_module, modules.TorchLayer)
    biases = sum(1 for path, _ in nnx.iter_graph(nnx_module) if path and path[-1] == "bias")
    assert biases == (
        0 if options.get("bias") is False else 2 * layers * (4 if cls is torch.nn.LSTM else 1)
    )  # bias_ih, bias_hh apart
    x = rng.standard_normal((2, 3, 3) if options.get("batch_first") else (3, 2, 3))
    calls = [((x,), {})]
    if cls is torch.nn.LSTM:  # zero initial state, batched: the report's `nnx lstm` rows
        state = tuple(rng.standard_normal((2, 2, 4)) for _ in range(2))
        calls = [((x, state), {}), ((x[:, 0],), {})]
    _parity(module, nnx_module, calls, rng)
    _round_trip(module, nnx_module)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_bias_false_has_no_bias_on_either_side_and_round_trips(x64, cls):
    module = cls(3, 4, bias=False, bidirectional=True, dtype=torch.float64)
    nnx_module = to_nnx(module)
    linears = _instances(nnx_module, nnx.Linear)
    assert linears and not any(d.use_bias for d in linears)
    _round_trip(module, nnx_module)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_stock_cells_read_back_with_the_missing_bias_at_zero(x64, rng, cls):
    """A recurrent layer written in flax with the stock cell (one bias: ``nnx.LSTMCell``'s
    on ``h*``, ``nnx.GRUCell``'s and ``nnx.SimpleCell``'s on ``dense_i``) is torch's
    layer with the other bias 0; read as gradients, an LSTM/RNN bias gets the one
    bias's gradient on both sides, as torch's sum gives."""
    compute = {"dtype": jnp.float64} if cls is torch.nn.RNN else {}  # SimpleCell's: float32
    cell = _empty(lambda: _STOCK[cls](3, 4, param_dtype=jnp.float64, rngs=nnx.Rngs(0), **compute))
    for _, variable in nnx.iter_graph(cell):  # every kernel and the one bias, at random
        if isinstance(variable, nnx.Param):
            variable.set_value(jnp.asarray(rng.standard_normal(variable.get_value().shape) / 2))
    mode = {torch.nn.LSTM: "LSTM", torch.nn.GRU: "GRU", torch.nn.RNN: "RNN_TANH"}[cls]
    hand = sequence_modules.TorchRecurrent(
        mode, [nnx.RNN(cell, rngs=False)], batch_first=True, dropout=0.0
    )
    model, params = from_nnx(hand)
    torch_module = cls(3, 4, batch_first=True, dtype=torch.float64)
    torch_module.load_state_dict(_torch({k: np.array(v) for k, v in params.items()}))
    zero = torch_module.bias_ih_l0 if cls is torch.nn.LSTM else torch_module.bias_hh_l0
    assert not zero.detach().any()
    x = rng.standard_normal((2, 3, 3))
    if cls is torch.nn.GRU:  # b_hn enters as r ⊙ b_hn: its gradient is not dense_i's
        assert_parity(
            torch_module(torch.from_numpy(x))[0].detach().numpy(),
            np.asarray(hand(jnp.asarray(x))[0]),
        )
        grads = nnx.grad(lambda m: m(jnp.asarray(x))[0].sum())(hand)
        with pytest.raises(ValueError, match="`bias_hh` gradient .* cannot be read"):
            grads_to_torch(hand, grads)  # never a silent 0 for torch's b_hn gradient
    else:
        _parity(torch_module, hand, [((x,), {})], rng)


def test_lstm_proj_size_projects_the_hidden_state_like_torch(x64, rng):
    """``proj_size``: h = W_hr (o ⊙ tanh c) `(N, P)` with c `(N, H)`, the second layer
    reading the P features (P·D bidirectional: the same rule), from torch's zero state
    (a given state takes the unprojected LSTM's path, which the tests above run)."""
    module = torch.nn.LSTM(3, 4, proj_size=2, num_layers=2, dtype=torch.float64)
    nnx_module = to_nnx(module)
    cells = _instances(nnx_module, sequence_modules.TorchProjLSTMCell)
    assert len(cells) == 2 and all(isinstance(c, nnx.LSTMCell) for c in cells)
    assert cells[0].hr.kernel.get_value().shape == (4, 2) and cells[1].ii.in_features == 2
    _parity(module, nnx_module, [((rng.standard_normal((3, 2, 3)),), {})], rng)
    _round_trip(module, nnx_module)


def test_projected_cells_torch_cannot_hold_are_refused():
    def proj_cell(in_features):
        return sequence_modules.TorchProjLSTMCell(in_features, 4, 2, rngs=nnx.Rngs(0))

    mixed = _empty(
        lambda: sequence_modules.TorchRecurrent(
            "LSTM",
            [
                nnx.RNN(proj_cell(3), rngs=False),
                nnx.RNN(sequence_modules.TorchLSTMCell(2, 4, rngs=nnx.Rngs(0)), rngs=False),
            ],
            batch_first=False,
            dropout=0.0,
        )
    )
    with pytest.raises(ValueError, match=r"layers\[1\] forward: proj_features 0 != 2"):
        from_nnx(mixed)
    with pytest.raises(ValueError, match="torch's LSTMCell has no `proj_size`"):
        from_nnx(_empty(lambda: sequence_modules.TorchCell("LSTM", proj_cell(3))))


def test_hand_built_recurrent_stack_that_does_not_chain_lists_every_problem():
    hand = _empty(
        lambda: sequence_modules.TorchRecurrent(
            "LSTM",
            [
                nnx.RNN(nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0)), rngs=False),
                nnx.RNN(nnx.LSTMCell(5, 4, rngs=nnx.Rngs(0)), rngs=False),
                nnx.RNN(nnx.GRUCell(4, 4, rngs=nnx.Rngs(0)), rngs=False),
            ],
            batch_first=True,
            dropout=0.0,
        )
    )
    with pytest.raises(ValueError) as info:
        from_nnx(hand)
    message = str(info.value)
    assert "layers[1] forward: in_features 5, but the layer below gives 4" in message
    assert "layers[2] forward: GRUCell in a LSTM stack" in message
    residual = _empty(
        lambda: sequence_modules.TorchRecurrent(
            "RNN_TANH",
            [nnx.RNN(nnx.SimpleCell(3, 4, residual=True, rngs=nnx.Rngs(0)), rngs=False)],
            batch_first=True,
            dropout=0.0,
        )
    )
    with pytest.raises(ValueError, match="layers\\[0\\] forward: `residual`=True"):
        from_nnx(residual)
    wrong = _empty(lambda: sequence_modules.TorchCell("LSTM", nnx.GRUCell(3, 4, rngs=nnx.Rngs(0))))
    with pytest.raises(ValueError, match="cell: GRUCell in a LSTM TorchCell"):
        from_nnx(wrong)


class _Cells(torch.nn.Module):
    """torch's cell modules in a traced forward: an LSTMCell unrolled over 3 steps
    (zero, then carried state), a GRUCell and a relu RNNCell on its output, and the
    RNNCell on one unbatched row."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTMCell(3, 4)
        self.gru = torch.nn.GRUCell(4, 4, bias=False)
        self.rnn = torch.nn.RNNCell(4, 4, nonlinearity="relu")

    def forward(self, x):
        h, c = self.lstm(x[0])
        for t in (1, 2):
            h, c = self.lstm(x[t], (h, c))
        g = self.gru(h, c)
        return self.rnn(g, g), c, self.rnn(g[0])


def test_cell_modules_become_stock_cells_and_save_load_round_trips(x64, rng, tmp_path):
    from jaxgrad.flax import load_nnx, save_nnx

    torch.manual_seed(0)
    module = _Cells().double()
    nnx_module = to_nnx(module)
    for path, cell in (
        ("lstm", sequence_modules.TorchLSTMCell),
        ("gru", sequence_modules.TorchGRUCell),
        ("rnn", sequence_modules.TorchRNNCell),
    ):
        twin = nnx_module.layers[path]
        assert isinstance(twin, sequence_modules.TorchCell) and isinstance(twin.cell, cell)
    assert not _instances(nnx_module, modules.TorchLayer)
    _parity(module, nnx_module, [((rng.standard_normal((3, 2, 3)),), {})], rng)
    _round_trip(module, nnx_module)
    save_nnx(nnx_module, str(tmp_path / "cells.safetensors"))
    torch.manual_seed(1)
    fresh = to_nnx(_Cells().double())  # other weights, the same structure
    load_nnx(fresh, str(tmp_path / "cells.safetensors"))
    back = nnx_state_dict(fresh)
    for name, value in module.state_dict().items():
        np.testing.assert_array_equal(back[name], value.numpy(), err_msg=name)


# ------------------------------------------------------------------ attention
@pytest.fixture(scope="module")
def attention():
    """One float64 ``MultiheadAttention(4, 2)`` (sequence-first) and its twin, shared."""
    with jax.enable_x64(True):
        torch.manual_seed(0)
        module = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
        return module, to_nnx(module)


@pytest.mark.parametrize("batch_first, kdim", [(False, None), (True, 3)])
def test_attention_becomes_stock_multi_head_attention(x64, rng, attention, batch_first, kdim):
    """Padding and causal masks with every ``need_weights``/``average_attn_weights``
    combination (the report's row-attention model has no masks)."""
    if batch_first or kdim:
        module = torch.nn.MultiheadAttention(
            4, 2, kdim=kdim, vdim=kdim, batch_first=batch_first, dtype=torch.float64
        )
        nnx_module = to_nnx(module)
    else:
        module, nnx_module = attention
    assert isinstance(nnx_module.attention, nnx.MultiHeadAttention)
    assert nnx_module.attention.query.kernel.get_value().shape == (4, 2, 2)  # (in, heads, head_dim)
    shape = (2, 3) if batch_first else (3, 2)
    q = rng.standard_normal((*shape, 4))
    kv = rng.standard_normal((2, 4, kdim or 4) if batch_first else (4, 2, kdim or 4))
    masks = dict(
        key_padding_mask=np.array([[False] * 3 + [True], [False, True, False, True]]),
        attn_mask=np.triu(np.ones((3, 4), bool), 1),
    )
    _parity(
        module,
        nnx_module,
        [
            ((q, kv, kv), dict(masks, need_weights=need_weights, average_attn_weights=average))
            for need_weights, average in ((True, True), (True, False), (False, True))
        ],
        rng,
    )
    _round_trip(module, nnx_module)


def test_fully_masked_rows_give_what_torch_gives(x64, rng, attention):
    """torch fills -inf: NaN rows with need_weights=True, zero weights without;
    flax's own fill (the dtype minimum) would give the mean of the values."""
    module, nnx_module = attention
    x = rng.standard_normal((3, 2, 4))
    padding = np.array([[True, True, True], [False, True, False]])
    flags = (True, False)
    outs = nnx.jit(
        lambda mod, x, p: [mod(x, x, x, key_padding_mask=p, need_weights=w) for w in flags]
    )(nnx_module, jnp.asarray(x), jnp.asarray(padding))
    for need_weights, out in zip(flags, outs):
        ref = module(
            *(torch.from_numpy(x),) * 3,
            key_padding_mask=torch.from_numpy(padding),
            need_weights=need_weights,
        )
        assert np.isnan(ref[0].detach().numpy()).any() == need_weights
        assert_parity(
            [t.detach().numpy() for t in ref if t is not None],
            [np.asarray(t) for t in out if t is not None],
        )


def test_attention_extras_run_between_the_stock_projections(x64, rng):
    """``add_bias_kv``, ``add_zero_attn``, ``kdim != vdim`` (the stock layer, its value
    projection rebuilt for vdim) with boolean masks, then float (additive) masks with
    -inf entries: what nnx.MultiHeadAttention's own call cannot express runs between
    its stock projections and its attention_fn."""
    module = torch.nn.MultiheadAttention(
        4,
        2,
        add_bias_kv=True,
        add_zero_attn=True,
        kdim=3,
        vdim=5,
        batch_first=True,
        dtype=torch.float64,
    )
    with torch.no_grad():  # torch starts bias_k/bias_v random but in_proj_bias at 0
        module.in_proj_bias.copy_(torch.from_numpy(rng.standard_normal(12)))
    nnx_module = to_nnx(module)
    assert isinstance(nnx_module.attention, attention_modules.TorchVdimAttention)
    assert isinstance(nnx_module.attention, nnx.MultiHeadAttention)
    assert nnx_module.bias_k.get_value().shape == (2, 2)  # (heads, head_dim)
    q, k, v = (rng.standard_normal((2, n, d)) for n, d in ((3, 4), (4, 3), (4, 5)))
    padding = np.array([[False] * 3 + [True], [False, True, False, True]])
    causal = np.triu(np.ones((3, 4), bool), 1)
    additive = np.where(causal, -np.inf, rng.standard_normal((3, 4)))
    _parity(
        module,
        nnx_module,
        [
            ((q, k, v), dict(key_padding_mask=padding, attn_mask=causal)),
            (
                (q, k, v),
                dict(
                    key_padding_mask=np.where(padding, -np.inf, 0.5),
                    attn_mask=additive,
                    need_weights=False,
                ),
            ),
        ],
        rng,
    )
    _round_trip(module, nnx_module)


def test_float_mask_rows_of_minus_infinity_give_torchs_zeros_and_gradients(x64, rng, attention):
    """A float mask's -inf entries become flax's boolean mask: a row of them gives
    torch's 0 (need_weights=False), and no -inf reaches the softmax to make the
    gradients NaN."""
    module, nnx_module = attention
    x = rng.standard_normal((3, 2, 4))
    dead = np.where(np.arange(3)[:, None] == 1, -np.inf, rng.standard_normal((3, 3)))
    _parity(module, nnx_module, [((x, x, x), dict(attn_mask=dead, need_weights=False))], rng)


def test_attention_masks_hints_and_modules_torch_cannot_take_are_refused(attention):
    nnx_module = attention[1]
    x = jnp.ones((3, 1, 4))
    with pytest.raises(TypeError, match="`attn_mask` has dtype int32; torch takes boolean"):
        nnx_module(x, x, x, attn_mask=jnp.zeros((3, 3), jnp.int32))
    with pytest.raises(ValueError, match="`is_causal`=True is a hint that needs"):
        nnx_module(x, x, x, is_causal=True)
    hand = _empty(
        lambda: attention_modules.TorchMultiheadAttention(
            nnx.MultiHeadAttention(
                4,
                4,
                qkv_features=8,
                num_kv_heads=2,
                normalize_qk=True,
                decode=False,
                rngs=nnx.Rngs(0),
            )
        )
    )
    with pytest.raises(ValueError) as info:
        from_nnx(hand)
    for part in ("`qkv_features` (=8)", "`num_kv_heads` (=2)", "`normalize_qk`=True"):
        assert part in str(info.value)


# ---------------------------------------------------------------- transformer decoder
def _decoder(kind, rng):
    if kind == "stack":
        layer = torch.nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, dtype=torch.float64)
        module = torch.nn.TransformerDecoder(
            layer, 1, norm=torch.nn.LayerNorm(4, dtype=torch.float64)
        )
    else:
        module = torch.nn.TransformerDecoderLayer(
            4,
            2,
            6,
            dropout=0.0,
            activation="gelu",
            layer_norm_eps=1e-3,
            batch_first=True,
            norm_first=True,
            dtype=torch.float64,
        )
    with torch.no_grad():  # every parameter random (torch starts biases at 0, norms at 1)
        for p in module.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
    return module


@pytest.mark.parametrize(
    "kind", ["stack", "layer"], ids=["stack-post-norm-relu", "layer-pre-norm-gelu-batch-first"]
)
def test_transformer_decoder_becomes_stock_attention_linear_and_layer_norm(x64, rng, kind):
    """Self- and cross-attention on stock nnx.MultiHeadAttention under torch's child
    names; every mask torch takes (a causal tgt_mask with the tgt_is_causal hint, a
    float memory_mask, both padding masks; the memory_is_causal hint) and the stack's
    final norm. One layer per stack: each compiled layer costs seconds, and the
    stack code that places layers.0, layers.1… is the encoder's."""
    module = _decoder(kind, rng)
    nnx_module = to_nnx(module)
    layers = _instances(nnx_module, transformer_modules.TorchTransformerDecoderLayer)
    assert len(layers) == 1
    assert len(_instances(nnx_module, nnx.MultiHeadAttention)) == 2 * len(layers)
    assert _instances(nnx_module, nnx.LayerNorm) and not _instances(nnx_module, modules.TorchLayer)
    causal = np.triu(np.ones((3, 3), bool), 1)
    if kind == "stack":
        tgt, memory = rng.standard_normal((3, 2, 4)), rng.standard_normal((4, 2, 4))
        masks = dict(
            tgt_mask=causal,
            tgt_is_causal=True,
            memory_mask=np.where(np.eye(3, 4, dtype=bool), -1.5, 0.0),
            tgt_key_padding_mask=np.array([[False, False, True], [False] * 3]),
            memory_key_padding_mask=np.array([[False] * 3 + [True], [False] * 4]),
        )
    else:
        tgt, memory = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 4))
        masks = dict(
            tgt_mask=causal, memory_mask=np.triu(np.ones((3, 4), bool), 1), memory_is_causal=True
        )
    _parity(module, nnx_module, [((tgt, memory), masks)], rng)
    _round_trip(module, nnx_module)


# ---------------------------------------------------- transposed and padded convolutions
# numerics=False: the report's `nnx upconv` rows run that layer (forward, gradients,
# round trip); the class it becomes is asserted here
@pytest.mark.parametrize(
    "options, numerics",
    [
        (dict(kernel_size=3, stride=2, padding=1, output_padding=1), False),
        (
            dict(
                kernel_size=(2, 3),
                stride=(2, 1),
                padding=(0, 2),
                dilation=(1, 2),
                output_padding=(1, 1),
            ),
            True,
        ),
    ],
    ids=["stride2-outpad", "dilated-rect"],
)
def test_conv_transpose_becomes_stock_nnx_conv_transpose(x64, rng, options, numerics):
    module = torch.nn.Sequential(torch.nn.ConvTranspose2d(3, 2, **options)).double()
    nnx_module = to_nnx(module, layout="NCHW")
    assert [type(i).__name__ for i in nnx_module.layers] == [
        "ChannelsLast",
        "ConvTranspose",
        "ChannelsFirst",
    ]
    assert nnx_module.layers[1].transpose_kernel
    if numerics:
        _parity(module, nnx_module, [((rng.standard_normal((2, 3, 3, 4)),), {})], rng)
        _round_trip(module, nnx_module)


def test_hand_built_conv_transpose_reads_back_or_is_refused(x64, rng):
    """flax's own kernel orientation (transpose_kernel=False: applied unflipped) and
    'VALID' padding are torch's weight flipped and padding 0; 'SAME' at stride 2 would
    need output_padding -1, which torch cannot have."""
    hand = _empty(
        lambda: nnx.ConvTranspose(
            2, 3, (3, 3), strides=2, padding="VALID", param_dtype=jnp.float64, rngs=nnx.Rngs(0)
        )
    )
    for variable in (hand.kernel, hand.bias):
        variable.set_value(jnp.asarray(rng.standard_normal(variable.get_value().shape)))
    model, params = from_nnx(nnx.Sequential(hand))
    torch_module = torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 3, 3, stride=2)).double()
    torch_module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()})
    x = rng.standard_normal((1, 2, 4, 4))
    nhwc = nnx.jit(lambda mod, x: mod(x))(hand, jnp.moveaxis(jnp.asarray(x), 1, -1))
    assert_parity(
        torch_module(torch.from_numpy(x)).detach().numpy(), np.asarray(jnp.moveaxis(nhwc, -1, 1))
    )
    with pytest.raises(ValueError, match="output_padding=-1"):
        from_nnx(nnx.Sequential(nnx.ConvTranspose(2, 3, (3, 3), strides=2, rngs=nnx.Rngs(0))))


def test_grouped_conv_transpose_is_one_stock_conv_transpose_per_group(x64, rng):
    """Each group a stock nnx.ConvTranspose on its slice of channels, weight rows and
    bias (the code is the same for 1-d)."""
    module = torch.nn.Sequential(
        torch.nn.ConvTranspose2d(
            6, 4, 3, stride=2, padding=1, output_padding=1, dilation=(1, 2), groups=2
        )
    ).double()
    shape = (2, 6, 3, 3)
    nnx_module = to_nnx(module, layout="NCHW")
    grouped = nnx_module.layers[1]
    assert isinstance(grouped, modules.TorchGroupedConvTranspose)
    assert len(grouped.convs) == module[0].groups
    assert all(type(c) is nnx.ConvTranspose and c.transpose_kernel for c in grouped.convs)
    _parity(module, nnx_module, [((rng.standard_normal(shape),), {})], rng)
    _round_trip(module, nnx_module)


@pytest.mark.parametrize(
    "mode, options, kind, numerics",
    [
        ("circular", dict(padding=1), "Conv", False),  # numerics: the `nnx upconv` rows
        ("reflect", dict(padding="same", kernel_size=4), "Conv", True),
        ("replicate", dict(padding=1), "TorchPaddedConv", False),
        ("reflect", dict(padding=2, stride=2), "TorchPaddedConv", True),
    ],
)
def test_padding_modes_map_to_flax_padding_or_an_explicit_pad(
    x64, rng, mode, options, kind, numerics
):
    options = {"kernel_size": 3, **options}
    module = torch.nn.Sequential(torch.nn.Conv2d(2, 3, padding_mode=mode, **options)).double()
    nnx_module = to_nnx(module, layout="NCHW")
    layer = nnx_module.layers[1]
    assert type(layer).__name__ == kind
    if kind == "Conv":
        assert layer.padding == mode.upper()
    else:
        assert layer.conv.padding == "VALID" and layer.pad.mode == mode
    if numerics:
        _parity(module, nnx_module, [((rng.standard_normal((2, 2, 5, 6)),), {})], rng)
        _round_trip(module, nnx_module)


def test_instance_norm_with_running_stats_trains_like_torch(x64, rng):
    module = torch.nn.Sequential(
        torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True)
    ).double()
    nnx_module = to_nnx(module, layout="NCHW")
    assert isinstance(nnx_module.layers[1], modules.TorchInstanceNorm)
    for _ in range(3):  # train mode: per-instance statistics, running ones updated
        x = rng.standard_normal((2, 3, 3, 4)) * 2 + 1
        _parity(module, nnx_module, [((x,), {})], rng)
    assert_parity(
        {k: v.numpy() for k, v in module.state_dict().items()}, nnx_state_dict(nnx_module)
    )
    module.eval()
    nnx_module.eval()
    _parity(module, nnx_module, [((rng.standard_normal((2, 3, 3, 4)),), {})], rng)


@pytest.mark.parametrize(
    "name, stock", [("transformer", nnx.MultiHeadAttention), ("lstm", nnx.LSTMCell)]
)
def test_sequence_classifiers_run_on_stock_flax_layers(name, stock):
    """The parity report's `nnx transformer` / `nnx lstm` models: no TorchLayer left."""
    from torchref.sequence_models import sequence_model

    options = (
        dict(d_model=8, nhead=2, dim_feedforward=16, num_layers=1)
        if name == "transformer"
        else dict(hidden_size=8)
    )
    nnx_module = to_nnx(sequence_model(name, num_classes=5, **options))
    assert _instances(nnx_module, stock) and _instances(nnx_module, nnx.Linear)
    assert not _instances(nnx_module, modules.TorchLayer)
    if name == "lstm":
        assert _instances(nnx_module, nnx.RNN)
