"""BatchNorm / InstanceNorm / GroupNorm / Dropout: torch conventions, mask statistics,
and every bad input named by the layer's path.

The step-by-step parity (outputs, gradients, buffers against torch, float64 and
float32, torch's dropout masks injected) is in ``scripts/parity_checks/state_layers.py``,
run by ``test_parity_report.py``.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxgrad import nn
from jaxgrad.nn import functional as F


def test_batchnorm_update_is_torchs_momentum_and_unbiased_variance(x64, rng):
    # hand derivation: one step from (0, 1) with momentum 0.1 over n = 4 values
    x = rng.standard_normal((4, 2))
    layer = nn.BatchNorm1d(2, dtype="float64")
    _, buffers = layer.apply(
        layer.init(jax.random.key(0)), jnp.asarray(x), buffers=layer.init_buffers(), train=True
    )
    np.testing.assert_allclose(buffers["running_mean"], 0.1 * x.mean(0), rtol=1e-14)
    np.testing.assert_allclose(buffers["running_var"], 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-14)
    assert int(buffers["num_batches_tracked"]) == 1


def test_momentum_none_is_a_cumulative_average(x64, rng):
    layer = nn.BatchNorm1d(3, momentum=None, affine=False, dtype="float64")
    batches = [rng.standard_normal((5, 3)) for _ in range(3)]
    buffers = layer.init_buffers()
    for batch in batches:
        _, buffers = layer.apply({}, jnp.asarray(batch), buffers=buffers, train=True)
    np.testing.assert_allclose(
        buffers["running_mean"], np.mean([b.mean(0) for b in batches], axis=0), rtol=1e-13
    )
    assert int(buffers["num_batches_tracked"]) == 3


def test_eval_uses_running_statistics_and_returns_buffers_unchanged(x64, rng):
    layer = nn.BatchNorm2d(2, dtype="float64")
    buffers = {
        "running_mean": jnp.array([1.0, -1.0]),
        "running_var": jnp.array([4.0, 0.25]),
        "num_batches_tracked": jnp.array(7),
    }
    x = rng.standard_normal((2, 2, 3, 3))
    y, after = layer.apply(layer.init(jax.random.key(0)), jnp.asarray(x), buffers=buffers)
    expected = (x - np.array([1.0, -1.0])[:, None, None]) / np.sqrt(
        np.array([4.0, 0.25])[:, None, None] + 1e-5
    )
    np.testing.assert_allclose(y, expected, rtol=1e-13)
    assert all(after[k] is buffers[k] or np.array_equal(after[k], buffers[k]) for k in buffers)


def test_torch_defaults_and_state_dict_names():
    assert nn.BatchNorm2d(4).init_buffers().keys() == {
        "running_mean",
        "running_var",
        "num_batches_tracked",
    }
    assert nn.BatchNorm2d(4, track_running_stats=False).init_buffers() == {}
    assert nn.InstanceNorm2d(4).init(jax.random.key(0)) == {}  # affine=False by default
    assert nn.InstanceNorm2d(4).init_buffers() == {}
    assert nn.GroupNorm(2, 4).init(jax.random.key(0)).keys() == {"weight", "bias"}
    assert nn.Dropout().p == 0.5 and nn.BatchNorm1d(3).momentum == 0.1
    assert nn.BatchNorm1d(3).eps == nn.GroupNorm(1, 3).eps == 1e-5  # flax: 1e-6
    torch_bn = torch.nn.BatchNorm2d(4)
    model, params, buffers = nn.from_torch(torch_bn, with_buffers=True)
    assert model.state_dict(params, buffers).keys() == torch_bn.state_dict().keys()


def _train_apply(layer, x, key):
    return jax.jit(lambda x, key: layer.apply({}, x, train=True, key=key))(x, key)


def test_dropout_mask_statistics():
    x = jnp.ones((200, 50))
    y = _train_apply(nn.Dropout(0.3), x, jax.random.key(0))
    kept = np.asarray(y != 0)
    # keep rate 0.7 within 5 binomial standard deviations of 10 000 draws
    assert abs(kept.mean() - 0.7) < 5 * np.sqrt(0.7 * 0.3 / kept.size)
    np.testing.assert_array_equal(np.asarray(y)[kept], np.float32(1 / 0.7))  # 1/(1-p)
    for layer, shape in ((nn.Dropout1d(0.5), (40, 30, 6)), (nn.Dropout2d(0.5), (40, 30, 3, 2))):
        y = np.asarray(_train_apply(layer, jnp.ones(shape), jax.random.key(1)))
        per_channel = y.reshape(shape[0], shape[1], -1)
        # whole channels: every value of a channel kept or dropped together
        assert np.all(per_channel.min(-1) == per_channel.max(-1))
        rate = (per_channel[..., 0] != 0).mean()
        assert abs(rate - 0.5) < 5 * np.sqrt(0.25 / (shape[0] * shape[1]))


def test_dropout2d_on_a_3d_input_draws_a_mask_per_sample_and_channel_like_torch():
    """torch reads a 3-D input of Dropout2d as `(N, C, L)`: one draw per (sample,
    channel), so two samples' masks agree on a channel only by chance (half the
    time at p = 0.5), never by construction. Shown on torch's own masks, then held
    for jaxgrad's layer and functional form."""
    shape = (40, 30, 5)

    def disagreement(y):  # fraction of (n, c) whose keep bit differs from sample 0's
        kept = np.asarray(y)[..., 0] != 0
        assert np.all((np.asarray(y) != 0) == kept[..., None])  # whole channels
        return (kept[1:] != kept[:1]).mean()

    torch.manual_seed(0)
    with warnings.catch_warnings():  # torch warns that it reads 3-D input as (N, C, L)
        warnings.simplefilter("ignore", UserWarning)
        torch_y = torch.nn.functional.dropout2d(torch.ones(shape), 0.5, training=True)
    draws = (shape[0] - 1) * shape[1]
    for y in (
        torch_y.numpy(),
        _train_apply(nn.Dropout2d(0.5), jnp.ones(shape), jax.random.key(2)),
        F.dropout2d(jnp.ones(shape), 0.5, key=jax.random.key(3)),
    ):
        assert abs(disagreement(y) - 0.5) < 5 * np.sqrt(0.25 / draws)


def test_dropout_keys_eval_and_edge_probabilities():
    x = jnp.arange(1.0, 13.0).reshape(3, 4)
    model = nn.Sequential(nn.Dropout(0.5), nn.Dropout(0.5))
    np.testing.assert_array_equal(model.apply({}, x), x)  # eval: identity
    run = jax.jit(lambda key: model.apply({}, x, train=True, key=key))
    a, b, c = run(jax.random.key(3)), run(jax.random.key(3)), run(jax.random.key(4))
    np.testing.assert_array_equal(a, b)  # same key, same masks
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(nn.Dropout(1.0).apply({}, x, train=True), jnp.zeros_like(x))
    np.testing.assert_array_equal(nn.Dropout(0.0).apply({}, x, train=True), x)
    mask = np.array([[1, 0, 1, 0]] * 3, bool)
    np.testing.assert_array_equal(F.dropout(x, 0.5, mask=mask), x * mask * 2.0)


def test_functional_forms_match_torch(x64, rng):
    x = rng.standard_normal((3, 4, 5))
    w, b = rng.standard_normal(4), rng.standard_normal(4)
    tx, tw, tb = map(torch.from_numpy, (x, w, b))
    np.testing.assert_allclose(
        F.group_norm(jnp.asarray(x), 2, w, b),
        torch.nn.functional.group_norm(tx, 2, tw, tb),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        F.instance_norm(jnp.asarray(x)),
        torch.nn.functional.instance_norm(tx),
        rtol=1e-12,
        atol=1e-14,
    )
    rm, rv = np.zeros(4), np.ones(4)
    trm, trv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    expected = torch.nn.functional.batch_norm(tx, trm, trv, tw, tb, training=True)
    out, new_mean, new_var = F.batch_norm_with_stats(jnp.asarray(x), rm, rv, w, b, True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(new_mean, trm, rtol=1e-12, atol=1e-15)  # torch updated in place
    np.testing.assert_allclose(new_var, trv, rtol=1e-12)
    np.testing.assert_allclose(
        F.batch_norm(jnp.asarray(x), rm, rv, w, b, True), expected, rtol=1e-12, atol=1e-14
    )


# ------------------------------------------------------------------ bad input
def _bn_model():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.2))


def test_wrong_rank_and_channels_name_the_path():
    model = nn.Sequential(nn.Identity(), nn.BatchNorm1d(4))
    with pytest.raises(
        ValueError,
        match=r"BatchNorm1d at '1': expected 4 channels .*got "
        r"input shape \(2, 5\)",
    ):
        model.apply(model.init(jax.random.key(0)), jnp.ones((2, 5)), buffers=model.init_buffers())
    with pytest.raises(
        ValueError,
        match=r"BatchNorm2d at '0': expected a 4-D input "
        r"\(N, C, H, W\), got shape \(2, 3\)",
    ):
        nn.Sequential(nn.BatchNorm2d(3)).apply(
            {"0.weight": jnp.ones(3), "0.bias": jnp.zeros(3)},
            jnp.ones((2, 3)),
            buffers=buffers_of(nn.BatchNorm2d(3), "0"),
        )
    with pytest.raises(
        ValueError,
        match=r"GroupNorm: expected 6 channels .*got input shape "
        r"\(2, 4, 3\)",
    ):
        nn.GroupNorm(2, 6).apply(nn.GroupNorm(2, 6).init(None), jnp.ones((2, 4, 3)))
    with pytest.raises(ValueError, match=r"InstanceNorm2d: expected a 3-D or 4-D input"):
        nn.InstanceNorm2d(3).apply({}, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"Dropout2d at '0': dropout2d: `input` must be"):
        nn.Sequential(nn.Dropout2d()).apply({}, jnp.ones((2, 3)), train=True, key=jax.random.key(0))


def buffers_of(layer, prefix):
    return {f"{prefix}.{k}": v for k, v in layer.init_buffers().items()}


def test_batchnorm_without_buffers_and_missing_running_var():
    model = _bn_model()
    params = model.init(jax.random.key(0))
    with pytest.raises(
        ValueError,
        match=r"has buffers \(1.running_mean, 1.running_var, "
        r"1.num_batches_tracked\).*buffers=",
    ):
        model.apply(params, jnp.ones((2, 3)))
    state = model.state_dict(params, model.init_buffers())
    del state["1.running_var"]
    with pytest.raises(
        ValueError,
        match=r"load_buffers for Sequential: missing keys: "
        r"1.running_var",
    ):
        model.load_buffers(state)
    with pytest.raises(ValueError, match=r"BatchNorm1d at 'bn': `buffers` lacks running_var"):
        nn.BatchNorm1d(4).forward_with_state(
            nn.BatchNorm1d(4).init(None),
            jnp.ones((2, 4)),
            buffers={"running_mean": jnp.zeros(4), "num_batches_tracked": jnp.array(0)},
            train=True,
            key=None,
            path="bn",
        )


def test_dropout_in_training_without_key_names_the_path():
    model = _bn_model()
    params, buffers = model.init(jax.random.key(0)), model.init_buffers()
    with pytest.raises(
        ValueError,
        match=r"Dropout\(p=0.2\) at '2': `train=True` needs a "
        r"`key=`.*got key=None",
    ):
        model.apply(params, jnp.ones((2, 3)), buffers=buffers, train=True)
    with pytest.raises(ValueError, match=r"training mode needs randomness: pass `key=`"):
        F.dropout(jnp.ones(3), 0.5)
    with pytest.raises(ValueError, match=r"`p` \(=1.5\) must be a dropout probability"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match=r"`mask` shape \(2,\) does not broadcast"):
        F.dropout(jnp.ones((3, 3)), 0.5, mask=np.ones(2, bool))


def test_constructor_and_training_errors():
    with pytest.raises(
        ValueError,
        match=r"`num_channels` \(=5\) must be divisible by "
        r"`num_groups` \(=2\)",
    ):
        nn.GroupNorm(2, 5)
    with pytest.raises(ValueError, match=r"`num_features` \(=0\) must be a positive int"):
        nn.BatchNorm2d(0)
    layer = nn.BatchNorm1d(3)
    with pytest.raises(
        ValueError,
        match=r"more than 1 value per channel when training, got "
        r"input shape \(1, 3\)",
    ):
        layer.apply(layer.init(None), jnp.ones((1, 3)), buffers=layer.init_buffers(), train=True)


def test_parity_rows_catch_flaxs_momentum_convention(monkeypatch):
    """The state-layer parity fails when the twin uses flax's momentum meaning (weight
    of the old average): only the running statistics differ, and they are caught."""
    from parity_checks.state_layers import state_layer_parity

    from jaxgrad.nn.capture import layers as convert

    assert state_layer_parity("BatchNorm1d (N,C)", "float64").passed
    monkeypatch.setitem(
        convert._CONVERTERS,
        "BatchNorm1d",
        lambda m: nn.BatchNorm1d(m.num_features, momentum=1 - m.momentum, dtype="float64"),
    )
    report = state_layer_parity("BatchNorm1d (N,C)", "float64")
    failing = {leaf.path for leaf in report.leaves if not leaf.passed}
    assert "['buffers'][0]['running_mean']" in failing
    assert not any("outputs'][0]" in path or "outputs'][1]" in path for path in failing)
