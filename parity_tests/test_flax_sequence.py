"""``jaxgrad.flax`` for the sequence and transposed layers: stock ``nnx.MultiHeadAttention``,
``nnx.RNN`` of ``nnx.LSTMCell`` / ``nnx.SimpleCell`` / ``TorchGRUCell``,
``nnx.ConvTranspose``, convolutions with every ``padding_mode`` and ``InstanceNorm``
with running statistics — each against torch at the float64 tier (forward, then every
gradient mapped back to torch's names), the stock classes asserted, round trips
bit-exact, and bad input refused with every problem named at once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from jaxgrad.flax import from_nnx, grads_to_torch, modules, nnx_state_dict, sequence_modules, to_nnx
from jaxgrad.parity import assert_parity


def _instances(module, cls) -> list:
    return [node for _, node in nnx.iter_graph(module) if isinstance(node, cls)]


def _parity(torch_module, nnx_module, inputs, feed=None, rng=None, **kwargs):
    """Forward outputs (every array of torch's return value) and the gradients of
    ``sum(outputs · cotangents)`` for every parameter, torch against nnx."""
    feed = inputs if feed is None else feed
    torch_module.zero_grad(set_to_none=True)
    as_torch = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    as_jax = {k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    out = torch_module(*[torch.from_numpy(np.asarray(i)) for i in inputs], **as_torch)
    leaves = [t for t in jax.tree.leaves(out, is_leaf=lambda t: isinstance(t, torch.Tensor))
              if t is not None]
    cotangents = [rng.standard_normal(tuple(t.shape)) for t in leaves]
    sum(((t * torch.from_numpy(c)).nansum() for t, c in zip(leaves, cotangents))).backward()
    reference = {"outputs": [t.detach().numpy() for t in leaves],
                 "grads": {n: p.grad.numpy() for n, p in torch_module.named_parameters()}}

    def objective(mod):
        ys = jax.tree.leaves(mod(*[jnp.asarray(i) for i in feed], **as_jax))
        return sum(jnp.nansum(y * c) for y, c in zip(ys, cotangents)), ys

    (_, ys), grads = nnx.value_and_grad(objective, has_aux=True)(nnx_module)
    assert all(y.dtype == jnp.float64 for y in ys)
    assert_parity(reference, {"outputs": [np.asarray(y) for y in ys],
                              "grads": grads_to_torch(nnx_module, grads)})


def _round_trip(torch_module, nnx_module):
    state = {k: v.numpy() for k, v in torch_module.state_dict().items()}
    back = nnx_state_dict(nnx_module)
    assert list(back) == list(state)
    for name in state:
        np.testing.assert_array_equal(back[name], state[name], err_msg=name)
    torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()})


@pytest.mark.parametrize("cls, options", [
    (torch.nn.LSTM, dict(num_layers=2, bidirectional=True)),
    (torch.nn.LSTM, dict(batch_first=True)),
    (torch.nn.GRU, dict(num_layers=2, bidirectional=True, batch_first=True)),
    (torch.nn.RNN, dict(num_layers=2, nonlinearity="relu")),
], ids=["lstm-2-bi", "lstm-batch-first", "gru-2-bi-bf", "rnn-relu-2"])
def test_recurrent_layers_become_stock_nnx_rnns(x64, rng, cls, options):
    module = cls(3, 4, dtype=torch.float64, **options)
    nnx_module = to_nnx(module)
    cell = {torch.nn.LSTM: nnx.LSTMCell, torch.nn.GRU: sequence_modules.TorchGRUCell,
            torch.nn.RNN: nnx.SimpleCell}[cls]
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    assert len(_instances(nnx_module, nnx.RNN)) == layers
    assert len(_instances(nnx_module, cell)) == layers
    assert not _instances(nnx_module, modules.TorchLayer)
    x = rng.standard_normal((2, 5, 3))
    _parity(module, nnx_module, [x], rng=rng)
    _round_trip(module, nnx_module)


def test_lstm_initial_state_and_unbatched_input(x64, rng):
    module = torch.nn.LSTM(3, 4, num_layers=2, dtype=torch.float64)
    nnx_module = to_nnx(module)
    x, h0, c0 = (rng.standard_normal(s) for s in ((5, 2, 3), (2, 2, 4), (2, 2, 4)))
    ref, (h, c) = module(*map(torch.from_numpy, (x,)), (torch.from_numpy(h0), torch.from_numpy(c0)))
    out, (h_n, c_n) = nnx_module(jnp.asarray(x), (jnp.asarray(h0), jnp.asarray(c0)))
    assert_parity([t.detach().numpy() for t in (ref, h, c)], [np.asarray(t) for t in (out, h_n, c_n)])
    ref, _ = module(torch.from_numpy(x[:, 0]))
    assert_parity(ref.detach().numpy(), np.asarray(nnx_module(jnp.asarray(x[:, 0]))[0]))


def test_stock_gru_cell_reads_back_as_torch_with_zero_b_hn(x64, rng):
    """A GRU written in flax with the stock cell is torch's GRU with bias_hh = 0."""
    cell = nnx.GRUCell(3, 4, param_dtype=jnp.float64, rngs=nnx.Rngs(0))
    cell.dense_i.bias.set_value(jnp.asarray(rng.standard_normal(12)))
    hand = sequence_modules.TorchRecurrent("GRU", [nnx.RNN(cell, rngs=False)], batch_first=True,
                                           dropout=0.0)
    model, params = from_nnx(hand)
    torch_module = torch.nn.GRU(3, 4, batch_first=True, dtype=torch.float64)
    torch_module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()})
    assert not torch_module.bias_hh_l0.detach().any()
    x = rng.standard_normal((2, 5, 3))
    assert_parity(torch_module(torch.from_numpy(x))[0].detach().numpy(),
                  np.asarray(hand(jnp.asarray(x))[0]))


def test_recurrent_options_flax_cannot_express_are_refused_together():
    with pytest.raises(ValueError) as info:
        to_nnx(torch.nn.LSTM(3, 4, proj_size=2, bias=False))
    assert "`proj_size` (=2)" in str(info.value) and "`bias`=False" in str(info.value)


def test_hand_built_recurrent_stack_that_does_not_chain_lists_every_problem():
    rngs = nnx.Rngs(0)
    hand = sequence_modules.TorchRecurrent("LSTM", [
        nnx.RNN(nnx.LSTMCell(3, 4, rngs=rngs), rngs=False),
        nnx.RNN(nnx.LSTMCell(5, 4, rngs=rngs), rngs=False),
        nnx.RNN(nnx.GRUCell(4, 4, rngs=rngs), rngs=False)], batch_first=True, dropout=0.0)
    with pytest.raises(ValueError) as info:
        from_nnx(hand)
    message = str(info.value)
    assert "layers[1] forward: in_features 5, but the layer below gives 4" in message
    assert "layers[2] forward: GRUCell in a LSTM stack" in message


@pytest.mark.parametrize("batch_first, kdim", [(False, None), (True, 3)])
def test_attention_becomes_stock_multi_head_attention(x64, rng, batch_first, kdim):
    module = torch.nn.MultiheadAttention(4, 2, kdim=kdim, vdim=kdim, batch_first=batch_first,
                                         dtype=torch.float64)
    nnx_module = to_nnx(module)
    assert isinstance(nnx_module.attention, nnx.MultiHeadAttention)
    assert nnx_module.attention.query.kernel.get_value().shape == (4, 2, 2)  # (in, heads, head_dim)
    shape = (2, 5) if batch_first else (5, 2)
    q = rng.standard_normal((*shape, 4))
    kv = rng.standard_normal((*shape[:1], 6, kdim or 4) if batch_first else (6, 2, kdim or 4))
    padding = np.array([[False] * 5 + [True], [False, True, False, True, False, False]])
    causal = np.triu(np.ones((5, 6), bool), 1)
    for need_weights, average in ((True, True), (True, False), (False, True)):
        _parity(module, nnx_module, [q, kv, kv], rng=rng, need_weights=need_weights,
                average_attn_weights=average, key_padding_mask=padding, attn_mask=causal)
    _round_trip(module, nnx_module)


def test_fully_masked_rows_give_what_torch_gives(x64, rng):
    """torch fills -inf: NaN rows with need_weights=True, zero weights without;
    flax's own fill (the dtype minimum) would give the mean of the values."""
    module = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    nnx_module = to_nnx(module)
    x = rng.standard_normal((3, 2, 4))
    padding = np.array([[True, True, True], [False, True, False]])
    for need_weights in (True, False):
        ref = module(*(torch.from_numpy(x),) * 3, key_padding_mask=torch.from_numpy(padding),
                     need_weights=need_weights)
        out = nnx_module(*(jnp.asarray(x),) * 3, key_padding_mask=jnp.asarray(padding),
                         need_weights=need_weights)
        assert np.isnan(ref[0].detach().numpy()).any() == need_weights
        assert_parity([t.detach().numpy() for t in ref if t is not None],
                      [np.asarray(t) for t in out if t is not None])


def test_attention_options_flax_cannot_express_are_refused_together():
    with pytest.raises(ValueError) as info:
        to_nnx(torch.nn.Sequential(torch.nn.MultiheadAttention(4, 2, add_bias_kv=True,
                                                               add_zero_attn=True, kdim=3, vdim=5)))
    message = str(info.value)
    for part in ("`add_bias_kv`=True", "`add_zero_attn`=True", "`kdim` (=3) != `vdim` (=5)", "'0'"):
        assert part in message
    nnx_module = to_nnx(torch.nn.MultiheadAttention(4, 2))
    with pytest.raises(TypeError, match="`attn_mask` has dtype float32"):
        nnx_module(jnp.ones((3, 1, 4)), jnp.ones((3, 1, 4)), jnp.ones((3, 1, 4)),
                   attn_mask=jnp.zeros((3, 3)))
    hand = sequence_modules.TorchMultiheadAttention(nnx.MultiHeadAttention(
        4, 4, qkv_features=8, num_kv_heads=2, normalize_qk=True, decode=False, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError) as info:
        from_nnx(hand)
    for part in ("`qkv_features` (=8)", "`num_kv_heads` (=2)", "`normalize_qk`=True"):
        assert part in str(info.value)


@pytest.mark.parametrize("options", [
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=(2, 3), stride=(2, 1), padding=(0, 2), dilation=(1, 2)),
], ids=["stride2-outpad", "dilated-rect"])
def test_conv_transpose_becomes_stock_nnx_conv_transpose(x64, rng, options):
    module = torch.nn.Sequential(torch.nn.ConvTranspose2d(3, 2, **options)).double()
    nnx_module = to_nnx(module, layout="NCHW")
    assert [type(i).__name__ for i in nnx_module.layers] == ["ChannelsLast", "ConvTranspose",
                                                              "ChannelsFirst"]
    assert nnx_module.layers[1].transpose_kernel
    _parity(module, nnx_module, [rng.standard_normal((2, 3, 4, 5))], rng=rng)
    _round_trip(module, nnx_module)


def test_hand_built_conv_transpose_reads_back_or_is_refused(x64, rng):
    """flax's own kernel orientation (transpose_kernel=False: applied unflipped) and
    'VALID' padding are torch's weight flipped and padding 0; 'SAME' at stride 2 would
    need output_padding -1, which torch cannot have."""
    hand = nnx.ConvTranspose(2, 3, (3, 3), strides=2, padding="VALID", param_dtype=jnp.float64,
                             rngs=nnx.Rngs(0))
    model, params = from_nnx(nnx.Sequential(hand))
    torch_module = torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 3, 3, stride=2)).double()
    torch_module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()})
    x = rng.standard_normal((1, 2, 4, 4))
    assert_parity(torch_module(torch.from_numpy(x)).detach().numpy(),
                  np.asarray(jnp.moveaxis(hand(jnp.moveaxis(jnp.asarray(x), 1, -1)), -1, 1)))
    with pytest.raises(ValueError, match="output_padding=-1"):
        from_nnx(nnx.Sequential(nnx.ConvTranspose(2, 3, (3, 3), strides=2, rngs=nnx.Rngs(0))))
    with pytest.raises(ValueError, match="`groups` \\(=2\\)"):
        to_nnx(torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 4, 3, groups=2)))


@pytest.mark.parametrize("mode, options, kind", [
    ("circular", dict(padding=1), "Conv"),
    ("reflect", dict(padding="same", kernel_size=4), "Conv"),
    ("replicate", dict(padding=1), "TorchPaddedConv"),
    ("reflect", dict(padding=2, stride=2), "TorchPaddedConv"),
])
def test_padding_modes_map_to_flax_padding_or_an_explicit_pad(x64, rng, mode, options, kind):
    options = {"kernel_size": 3, **options}
    module = torch.nn.Sequential(torch.nn.Conv2d(2, 3, padding_mode=mode, **options)).double()
    nnx_module = to_nnx(module, layout="NCHW")
    layer = nnx_module.layers[1]
    assert type(layer).__name__ == kind
    if kind == "Conv":
        assert layer.padding == mode.upper()
    else:
        assert layer.conv.padding == "VALID" and layer.pad.mode == mode
    _parity(module, nnx_module, [rng.standard_normal((2, 2, 6, 7))], rng=rng)
    _round_trip(module, nnx_module)


def test_instance_norm_with_running_stats_trains_like_torch(x64, rng):
    module = torch.nn.Sequential(torch.nn.InstanceNorm2d(3, affine=True,
                                                         track_running_stats=True)).double()
    nnx_module = to_nnx(module, layout="NCHW")
    assert isinstance(nnx_module.layers[1], modules.TorchInstanceNorm)
    for _ in range(3):  # train mode: per-instance statistics, running ones updated
        x = rng.standard_normal((2, 3, 4, 5)) * 2 + 1
        _parity(module, nnx_module, [x], rng=rng)
    assert_parity({k: v.numpy() for k, v in module.state_dict().items()}, nnx_state_dict(nnx_module))
    module.eval()
    nnx_module.eval()
    _parity(module, nnx_module, [rng.standard_normal((2, 3, 4, 5))], rng=rng)


@pytest.mark.parametrize("name, stock", [("transformer", nnx.MultiHeadAttention),
                                         ("lstm", nnx.LSTMCell)])
def test_sequence_classifiers_run_on_stock_flax_layers(name, stock):
    """The parity report's `nnx transformer` / `nnx lstm` models: no TorchLayer left."""
    from torchref.sequence_models import sequence_model

    options = (dict(d_model=8, nhead=2, dim_feedforward=16, num_layers=1) if name == "transformer"
               else dict(hidden_size=8))
    nnx_module = to_nnx(sequence_model(name, num_classes=5, **options))
    assert _instances(nnx_module, stock) and _instances(nnx_module, nnx.Linear)
    assert not _instances(nnx_module, modules.TorchLayer)
    if name == "lstm":
        assert _instances(nnx_module, nnx.RNN)
