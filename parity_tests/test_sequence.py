"""Sequence layers: what the parity rows (``parity_checks.sequence``, run by
``test_parity_report``) and ``module_db`` do not cover — torch's conventions shown
directly, jit / grad / vmap, dropout keys, torch's fast path, and every bad input."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental import checkify
from parity_checks._twin import twin_parity

import jaxgrad
from jaxgrad import nn
from jaxgrad.nn import functional as JF
from jaxgrad.nn.functional._attention import safe_softmax
from torchref.sequence_models import sequence_model


# ------------------------------------------------------------------ conventions
def test_parameter_names_and_layouts_match_torch(x64):
    torch.manual_seed(0)
    pairs = [
        (
            torch.nn.MultiheadAttention(4, 2, kdim=3, vdim=5, add_bias_kv=True),
            nn.MultiheadAttention(4, 2, kdim=3, vdim=5, add_bias_kv=True),
        ),
        (
            torch.nn.LSTM(3, 4, 2, bidirectional=True, proj_size=2),
            nn.LSTM(3, 4, 2, bidirectional=True, proj_size=2),
        ),
        (torch.nn.GRU(3, 4, bias=False), nn.GRU(3, 4, bias=False)),
        (torch.nn.TransformerDecoderLayer(4, 2, 8), nn.TransformerDecoderLayer(4, 2, 8)),
        (torch.nn.LayerNorm((2, 3), bias=False), nn.LayerNorm((2, 3), bias=False)),
    ]
    for module, layer in pairs:
        expected = [(k, tuple(v.shape)) for k, v in module.named_parameters()]
        assert [(k, tuple(s.shape)) for k, s in layer.param_shapes().items()] == expected


def test_default_init_follows_torch(x64):
    key = jax.random.key(0)
    mha = jax.jit(nn.MultiheadAttention(8, 2, dtype="float64").init)(key)
    bound = math.sqrt(6.0 / (8 + 24))  # xavier_uniform on (3E, E)
    assert 0.8 * bound < float(jnp.max(jnp.abs(mha["in_proj_weight"]))) <= bound
    assert not jnp.any(mha["in_proj_bias"]) and not jnp.any(mha["out_proj.bias"])
    lstm = jax.jit(nn.LSTM(3, 16, dtype="float64").init)(key)
    assert all(float(jnp.max(jnp.abs(v))) <= 0.25 for v in lstm.values())  # 1/√16
    embed = jax.jit(nn.Embedding(200, 8, padding_idx=-1, dtype="float64").init)(key)
    assert not jnp.any(embed["weight"][199]) and 0.8 < float(jnp.std(embed["weight"])) < 1.2
    norm = nn.LayerNorm(4).init(key)
    assert jnp.all(norm["weight"] == 1) and jnp.all(norm["bias"] == 0)
    stack = jax.jit(nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8), 2).init)(key)
    # torch deep-copies one initialised layer: both layers start identical
    stack = {k: np.asarray(v) for k, v in stack.items()}
    assert all(
        np.array_equal(stack[f"layers.0.{k}"], stack[f"layers.1.{k}"])
        for k in nn.TransformerEncoderLayer(4, 2, 8).param_shapes()
    )


def test_layer_norm_eps_is_torch_default_not_flax(x64):
    module = torch.nn.LayerNorm(4, dtype=torch.float64)
    x = np.random.default_rng(0).standard_normal((3, 4)) * 1e-3  # low variance: eps matters
    assert twin_parity(module, (x,)).passed
    flax_eps = lambda m: (
        nn.LayerNorm(4, eps=1e-6, dtype="float64"),  # noqa: E731
        {k: jnp.asarray(v.detach().numpy()) for k, v in m.state_dict().items()},
    )
    assert not twin_parity(module, (x,), convert=flax_eps).passed


def test_embedding_padding_row_gets_no_gradient(x64):
    layer = nn.Embedding(4, 3, padding_idx=1, dtype="float64")
    params = {"weight": jnp.ones((4, 3))}
    ids = jnp.array([1, 1, 2])
    grads = jax.grad(lambda p: jnp.sum(layer.apply(p, ids) ** 2))(params)["weight"]
    assert not jnp.any(grads[1]) and jnp.all(grads[2] == 2)
    # the output still reads the row's value (a trained or loaded non-zero row)
    assert jnp.array_equal(layer.apply(params, ids)[0], jnp.ones(3))


def test_functional_embedding_negative_padding_idx_counts_from_the_end_like_torch(x64):
    """``F.embedding(..., padding_idx=-1)``: the last row is the padding row, which
    gets no gradient (torch wraps the index; the layer's own check is separate)."""
    weight = np.random.default_rng(0).standard_normal((5, 3))
    ids = np.array([[4, 1, 4], [0, 4, 2]])
    cotangent = np.random.default_rng(1).standard_normal((2, 3, 3))
    w = torch.from_numpy(weight).requires_grad_()
    out = torch.nn.functional.embedding(torch.from_numpy(ids), w, padding_idx=-1)
    (out * torch.from_numpy(cotangent)).sum().backward()
    assert not w.grad[4].any()  # torch: the padding row gets nothing
    got, vjp = jax.vjp(
        lambda w: JF.embedding(jnp.asarray(ids), w, padding_idx=-1), jnp.asarray(weight)
    )
    jaxgrad.parity.assert_parity(
        {"output": out.detach(), "grad": w.grad},
        {"output": got, "grad": vjp(jnp.asarray(cotangent))[0]},
    )


def test_embedding_max_norm_weight_matches_torch_after_forward(x64):
    torch.manual_seed(0)
    module = torch.nn.Embedding(6, 3, max_norm=1.0, norm_type=1.5, dtype=torch.float64)
    before = module.weight.detach().numpy().copy()
    ids = np.array([[0, 3], [3, 5]])
    module(torch.from_numpy(ids))  # renormalises rows 0, 3, 5 in place
    layer = nn.Embedding(6, 3, max_norm=1.0, norm_type=1.5, dtype="float64")
    after = layer.renorm({"weight": jnp.asarray(before)}, jnp.asarray(ids))["weight"]
    jaxgrad.parity.assert_parity(module.weight.detach(), after)
    assert not np.allclose(before, module.weight.detach().numpy())  # the case is not vacuous


def test_embedding_ids_out_of_range(x64):
    layer = nn.Embedding(5, 2, dtype="float64")
    params = layer.init(jax.random.key(0))
    with pytest.raises(ValueError, match=r"Embedding: token ids must lie in \[0, 5\).*\[5, 7\]"):
        layer.apply(params, jnp.array([0, 5, 7]))
    with pytest.raises(IndexError):
        torch.nn.Embedding(5, 2)(torch.tensor([0, 5]))  # torch raises too
    # under jit the values are unknown: the row is NaN, never a clamped valid row
    out = jax.jit(layer.apply)(params, jnp.array([0, 5]))
    assert jnp.all(jnp.isnan(out[1])) and not jnp.any(jnp.isnan(out[0]))
    checked = checkify.checkify(jax.jit(lambda p, i: layer.apply(p, i, check_ids=True)))
    error, _ = checked(params, jnp.array([0, 5]))
    with pytest.raises(checkify.JaxRuntimeError, match=r"token ids must lie in \[0, 5\)"):
        error.throw()
    error, _ = checked(params, jnp.array([0, 4]))
    error.throw()  # in range: no error
    with pytest.raises(TypeError, match="integer token ids"):
        layer.apply(params, jnp.array([0.0, 1.0]))


def test_sdpa_options_match_torch_directly(x64):
    """The report's SDPA rows, held here directly on other shapes (one jitted program
    for every case): grouped query heads (query head h reads key head h // 2: `repeat`,
    not `tile`), a causal mask top-left aligned when L < S and when L > S, and a value
    width Ev != E (the scale is 1/√E, E the query's width). Output and the gradients of
    ``Σ c·output`` w.r.t. q, k and v against torch's."""
    rng = np.random.default_rng(8)
    cases = {}  # name: (kwargs, (heads_q, heads_kv, L, S, E, Ev))
    for name, kwargs, dims in (
        ("enable_gqa", {"enable_gqa": True}, (4, 2, 3, 3, 4, 4)),
        ("is_causal L<S", {"is_causal": True}, (2, 2, 3, 5, 4, 4)),
        ("is_causal L>S", {"is_causal": True}, (2, 2, 5, 3, 4, 4)),
        ("value width Ev=5", {}, (2, 2, 3, 4, 4, 5)),
    ):
        heads_q, heads_kv, L, S, E, Ev = dims
        arrays = (
            rng.standard_normal((2, heads_q, L, E)),
            rng.standard_normal((2, heads_kv, S, E)),
            rng.standard_normal((2, heads_kv, S, Ev)),
            rng.standard_normal((2, heads_q, L, Ev)),
        )
        cases[name] = (kwargs, arrays)
    references = {}
    for name, (kwargs, (q, k, v, cotangent)) in cases.items():
        tensors = [torch.from_numpy(t).requires_grad_() for t in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*tensors, **kwargs)
        (out * torch.from_numpy(cotangent)).sum().backward()
        references[name] = {"output": out.detach(), "grads": [t.grad for t in tensors]}

    @jax.jit
    def ours(arrays):
        results = {}
        for name, (kwargs, _) in cases.items():
            q, k, v, cotangent = arrays[name]
            out, vjp = jax.vjp(
                lambda *qkv, kw=kwargs: JF.scaled_dot_product_attention(*qkv, **kw), q, k, v
            )
            results[name] = {"output": out, "grads": list(vjp(cotangent))}
        return results

    candidates = ours({name: arrays for name, (_, arrays) in cases.items()})
    reports = [
        jaxgrad.parity.compare(references[name], candidates[name], name=name) for name in cases
    ]
    assert all(r.passed for r in reports), "\n".join(r.table() for r in reports if not r.passed)


def test_batched_attention_per_head_weights_match_torch(x64):
    """``need_weights=True, average_attn_weights=False`` on a batch: weights
    `(N, num_heads, L, S)`, batch major, as torch returns them."""
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(6, 3, batch_first=True, dtype=torch.float64)
    q = np.random.default_rng(4).standard_normal((3, 4, 6))
    kv = np.random.default_rng(5).standard_normal((3, 5, 6))
    report = twin_parity(module, (q, kv, kv), {"need_weights": True, "average_attn_weights": False})
    assert report.passed, report.table()
    assert any(leaf.shape == (3, 3, 4, 5) for leaf in report.leaves)  # the weights were compared


def test_stacked_recurrent_dropout_spares_the_last_layer_like_torch(x64):
    """torch drops out between stacked layers only: the top layer's output at the last
    step is its final hidden state, bit for bit, in training mode too. (LSTM; GRU and
    RNN share the stacking code.)"""
    x = np.random.default_rng(6).standard_normal((4, 3, 2))
    torch.manual_seed(0)
    module = torch.nn.LSTM(2, 5, num_layers=2, dropout=0.5, dtype=torch.float64)
    out, (h_n, _) = module.train()(torch.from_numpy(x))
    assert torch.equal(out[-1], h_n[-1])  # torch's convention, in training mode
    model, params = nn.from_torch(module)

    @jax.jit
    def run(params, x, key):
        trained, (h_n, _) = model.apply(params, x, train=True, key=key)
        return trained, h_n, model.apply(params, x)[0]

    trained, h_n, evaluated = run(params, jnp.asarray(x), jax.random.key(0))
    assert not jnp.allclose(trained, evaluated)  # the dropout did act between the layers
    np.testing.assert_array_equal(trained[-1], h_n[-1])


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_short_and_long_sequences_match_torch(cell, x64):
    """A sequence of at most FULL_UNROLL_MAX steps is scanned without a loop, a longer
    one with it: both, bidirectional and stacked, against torch in float64 (outputs,
    final states, every parameter and input gradient)."""
    from jaxgrad.nn.functional._recurrent import FULL_UNROLL_MAX

    torch.manual_seed(0)
    module = getattr(torch.nn, cell)(3, 4, num_layers=2, bidirectional=True, dtype=torch.float64)
    for length in (FULL_UNROLL_MAX, FULL_UNROLL_MAX + 1):
        x = np.random.default_rng(length).standard_normal((length, 2, 3))
        report = twin_parity(module, (x,))
        assert report.passed, report.table()


def test_sdpa_fully_masked_row_is_zero_with_finite_gradients(x64):
    q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, 3, 4)))
    attend = jnp.array([[True, False, True], [False, False, False], [True, True, True]])

    def total(q):
        return jnp.sum(JF.scaled_dot_product_attention(q, q, q, attend))

    value, grads = jax.jit(jax.value_and_grad(total))(q)
    assert jnp.isfinite(value) and jnp.all(jnp.isfinite(grads))  # no NaN leaks back
    assert not jnp.any(JF.scaled_dot_product_attention(q, q, q, attend)[:, :, 1])


def test_safe_softmax_is_torchs_with_its_gradient_and_tangent(x64):
    """``safe_softmax`` (the attention's softmax) against ``torch._safe_softmax`` in
    float64: rows with no, some and all scores at ``-inf``, value and vector-Jacobian
    product; its forward-mode rule against central differences on the unmasked rows."""
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((4, 5, 6)) * 3
    scores[0, 1, [0, 2, 5]] = -np.inf  # partly masked row
    scores[1, 2, :] = -np.inf  # fully masked rows
    scores[3, 0, :] = -np.inf
    cotangent = rng.standard_normal(scores.shape)
    scores_t = torch.tensor(scores, requires_grad=True)
    expected = torch.ops.aten._safe_softmax(scores_t, -1)
    (expected_grad,) = torch.autograd.grad(expected, scores_t, torch.tensor(cotangent))
    weights, vjp = jax.vjp(jax.jit(safe_softmax), jnp.asarray(scores))
    (grad,) = vjp(jnp.asarray(cotangent))
    assert weights.dtype == grad.dtype == jnp.float64
    jaxgrad.parity.assert_parity(weights, expected.detach().numpy())
    jaxgrad.parity.assert_parity(grad, expected_grad.numpy())
    assert not jnp.any(weights[1, 2]) and not jnp.any(grad[1, 2])  # zeros, never NaN
    finite = scores[2]  # no -inf anywhere: central differences along a direction
    direction = rng.standard_normal(finite.shape)
    _, tangent = jax.jvp(safe_softmax, (jnp.asarray(finite),), (jnp.asarray(direction),))
    eps = 1e-6
    central = (
        np.asarray(safe_softmax(jnp.asarray(finite + eps * direction)))
        - np.asarray(safe_softmax(jnp.asarray(finite - eps * direction)))
    ) / (2 * eps)
    np.testing.assert_allclose(tangent, central, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------- jit, grad, vmap
@pytest.mark.parametrize("name", ["lstm", "mha", "encoder"])
def test_jit_grad_vmap(name, x64):
    rng = np.random.default_rng(1)
    if name == "lstm":
        layer = nn.LSTM(3, 4, bidirectional=True, dtype="float64")
        fn = lambda p, x: layer.apply(p, x)[0]  # noqa: E731  unbatched (L, in)
        xs = rng.standard_normal((3, 5, 3))
    elif name == "mha":
        layer = nn.MultiheadAttention(4, 2, dtype="float64")
        fn = lambda p, x: layer.apply(p, x, x, x)[0]  # noqa: E731
        xs = rng.standard_normal((3, 5, 4))
    else:
        layer = nn.TransformerEncoderLayer(4, 2, 6, dtype="float64")
        fn = layer.apply
        xs = rng.standard_normal((3, 5, 4))
    params = layer.init(jax.random.key(0))
    xs = jnp.asarray(xs)
    eager = jnp.stack([jax.jit(fn)(params, x) for x in xs])
    batched = jax.jit(jax.vmap(fn, in_axes=(None, 0)))(params, xs)
    jaxgrad.parity.assert_parity(eager, batched)
    grads = jax.jit(jax.grad(lambda p: jnp.sum(jax.vmap(fn, in_axes=(None, 0))(p, xs) ** 2)))(
        params
    )
    assert set(grads) == set(params) and all(jnp.all(jnp.isfinite(g)) for g in grads.values())


# ------------------------------------------------------------------------ dropout
def test_dropout_needs_a_key_and_is_keyed_by_path(x64):
    layer = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.5, dtype="float64")
    stack = nn.TransformerEncoder(layer, 1)
    params = stack.init(jax.random.key(0))
    x = jnp.asarray(np.random.default_rng(2).standard_normal((5, 2, 4)))
    with pytest.raises(ValueError, match=r"'layers.0.self_attn'.*key"):
        stack.apply(params, x, train=True)
    train = jax.jit(lambda key: stack.apply(params, x, train=True, key=key))
    evaluate = jax.jit(lambda key: stack.apply(params, x, key=key))
    first = train(jax.random.key(1))
    assert jnp.array_equal(first, train(jax.random.key(1)))
    assert not jnp.allclose(first, train(jax.random.key(2)))
    assert jnp.array_equal(evaluate(jax.random.key(1)), evaluate(jax.random.key(2)))
    lstm = nn.LSTM(3, 4, 2, dropout=0.5, dtype="float64")
    lstm_params = lstm.init(jax.random.key(0))
    with pytest.raises(ValueError, match="LSTM: inter-layer dropout"):
        lstm.apply(lstm_params, x[..., :3], train=True)
    # (dropout 0 in train mode against torch's train(): the module_db samples)


def test_layer_dropout_parity_with_torch_masks_injected(x64):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.3, dtype=torch.float64)
    layer.self_attn.dropout = 0.0  # SDPA's internal mask cannot be captured; the rest can
    stack = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    masks = {}

    def capture(path):
        def hook(module, inputs, output):
            masks[path] = (output != 0).numpy()

        return hook

    for i in range(2):
        for name in ("dropout", "dropout1", "dropout2"):
            getattr(stack.layers[i], name).register_forward_hook(capture(f"layers.{i}.{name}"))
    x = np.random.default_rng(5).standard_normal((5, 2, 4))
    report = twin_parity(stack, (x,), train=True, jax_only={"dropout_masks": masks})
    assert len(masks) == 6 and not all(m.all() for m in masks.values())
    assert report.passed, report.table()


# ------------------------------------------------------------- torch's fast path
def test_torch_fast_path_differs_only_at_padded_positions():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(2, 5, 4)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():  # eval + no_grad + padding mask: nested tensors
        fast = encoder(x, src_key_padding_mask=padding).numpy()
    model, params = nn.from_torch(encoder)
    ours = np.asarray(
        jax.jit(model.apply)(
            params, jnp.asarray(x.numpy()), src_key_padding_mask=jnp.asarray(padding.numpy())
        )
    )
    keep = ~padding.numpy()
    jaxgrad.parity.assert_parity(fast[keep], ours[keep])
    assert np.all(fast[~keep] == 0) and np.all(ours[~keep] != 0)


def test_fx_converts_user_sequence_models():
    small = {
        "gru": dict(hidden_size=4),
        "transformer": dict(d_model=4, nhead=2, dim_feedforward=8, num_layers=1),
    }
    for name, x in (
        ("gru", np.random.default_rng(3).random((2, 64), np.float32)),
        ("transformer", np.random.default_rng(3).integers(0, 17, (2, 64))),
    ):
        module = sequence_model(name, **small[name])
        model, params = nn.from_torch(module)
        assert type(model).__name__ == "GraphModule"
        jaxgrad.parity.assert_parity(
            module(torch.from_numpy(x)).detach(), jax.jit(model.apply)(params, jnp.asarray(x))
        )


# ---------------------------------------------------------------------- bad input
def test_bad_attention_inputs_name_the_layer_path(x64):
    with pytest.raises(
        ValueError, match=r"`embed_dim` \(=6\) must be divisible by `num_heads` \(=4\)"
    ):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match=r"`d_model` \(=6\) must be divisible by `nhead` \(=4\)"):
        nn.TransformerEncoderLayer(6, 4)
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 6, dtype="float64"), 2)
    params = stack.init(jax.random.key(0))
    x = jnp.zeros((5, 2, 4))
    cases = [
        (
            dict(mask=jnp.zeros((4, 5), bool)),
            r"'layers.0.self_attn'.*2-D `attn_mask` has shape \(4, 5\), expected \(L, S\) = \(5, 5\)",
        ),
        (
            dict(mask=jnp.zeros((5, 5), jnp.int32)),
            r"'layers.0.self_attn'.*`attn_mask` must be bool or floating, got dtype int32",
        ),
        (
            dict(src_key_padding_mask=jnp.zeros((3, 5), bool)),
            r"'layers.0.self_attn'.*`key_padding_mask` has shape \(3, 5\), expected \(N, S\) = \(2, 5\)",
        ),
        (dict(is_causal=True), r"`is_causal=True` is a hint that needs the causal `attn_mask`"),
    ]
    for kwargs, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            stack.apply(params, x, **kwargs)
    mha = nn.MultiheadAttention(4, 2, dtype="float64")
    mha_params = mha.init(jax.random.key(0))
    with pytest.raises(
        ValueError,
        match=r"MultiheadAttention: `query` last dimension must be 4, got shape \(5, 2, 3\)",
    ):
        mha.apply(mha_params, x[..., :3], x, x)
    with pytest.raises(TypeError, match="`key=` is the jax.random PRNG key.*positionally"):
        mha.apply(mha_params, x, x, x, key=x)
    with pytest.raises(ValueError, match=r"attn_mask` of shape \(3,\) does not broadcast"):
        JF.scaled_dot_product_attention(x, x, x, jnp.zeros((3,), bool))


def test_bad_recurrent_states_name_received_and_expected(x64):
    lstm = nn.Sequential(nn.LSTM(3, 4, 2, dtype="float64"))
    params = lstm.init(jax.random.key(0))
    x = jnp.zeros((5, 2, 3))
    h, c = jnp.zeros((2, 2, 4)), jnp.zeros((2, 2, 4))
    with pytest.raises(
        ValueError, match=r"LSTM at '0': `h_0` has shape \(1, 2, 4\), expected \(2, 2, 4\)"
    ):
        lstm[0].forward_with_state(
            params and lstm.layer_params(params, 0),
            x,
            (h[:1], c),
            buffers={},
            train=False,
            key=None,
            path="0",
        )
    with pytest.raises(ValueError, match=r"`c_0` has shape \(2, 3, 4\), expected \(2, 2, 4\)"):
        nn.LSTM(3, 4, 2, dtype="float64").apply(
            lstm.layer_params(params, 0), x, (h, jnp.zeros((2, 3, 4)))
        )
    with pytest.raises(
        ValueError, match=r"GRU: `input` last dimension must be input_size=3, got shape \(5, 2, 4\)"
    ):
        gru = nn.GRU(3, 4, dtype="float64")
        gru.apply(gru.init(jax.random.key(0)), jnp.zeros((5, 2, 4)))
    cell = nn.GRUCell(3, 4, dtype="float64")
    with pytest.raises(ValueError, match=r"GRUCell: `hx` has shape \(3, 4\), expected \(2, 4\)"):
        cell.apply(cell.init(jax.random.key(0)), jnp.zeros((2, 3)), jnp.zeros((3, 4)))
    with pytest.raises(
        ValueError, match=r"`proj_size` \(=4\) must be smaller than `hidden_size` \(=4\)"
    ):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(
        ValueError, match=r"`padding_idx` \(=5\) must be within num_embeddings \(=5\)"
    ):
        nn.Embedding(5, 2, padding_idx=5)
    with pytest.raises(
        ValueError,
        match=r"`normalized_shape` \(=\[3\]\) must match the input's last 1 dims; got input shape \(2, 4\)",
    ):
        nn.LayerNorm(3).apply(
            nn.LayerNorm(3).init(jax.random.key(0)), jnp.zeros((2, 4), jnp.float32)
        )


def test_from_torch_refuses_an_unknown_transformer_activation():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = torch.nn.TransformerEncoderLayer(4, 2, 8, activation=lambda x: x * 2)
    with pytest.raises(ValueError, match="unsupported transformer activation"):
        nn.from_torch(layer)
