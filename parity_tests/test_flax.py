"""``jaxgrad.flax``: torch modules as ``flax.nnx`` modules and back, against torch.

The same model three times — torch, the nnx twin from ``to_nnx``, and the jaxgrad
model ``from_nnx`` reads back — compared at the float64 tier: forward, gradients
mapped back to torch's names and layouts, and a training trajectory driven by
``nnx.Optimizer`` with jaxgrad's torch-semantics optimizer.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from parity_checks.nnx_interop import nnx_trajectory

import jaxgrad
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.flax import from_nnx, grads_to_torch, nnx_state_dict, to_nnx
from jaxgrad.parity import assert_parity


def _mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(6, 5),
        torch.nn.GELU(),
        torch.nn.Linear(5, 4),
        torch.nn.LeakyReLU(0.2),
        torch.nn.Linear(4, 3),
    ).double()


def _torch_grads(module, x, y):
    module.zero_grad(set_to_none=True)
    out = module(x)
    torch.nn.functional.cross_entropy(out, y).backward()
    return out.detach().numpy(), {n: p.grad.numpy() for n, p in module.named_parameters()}


def _nnx_grads(nnx_module, x, y):
    def loss(module):
        out = module(x)
        return jlosses.cross_entropy(out, y), out

    (_, out), grads = nnx.value_and_grad(loss, has_aux=True)(nnx_module)
    return np.asarray(out), grads_to_torch(nnx_module, grads)


def test_mlp_forward_and_grads_match_torch(x64, seed):
    module = _mlp()
    x = torch.randn(7, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (7,))
    out_ref, grads_ref = _torch_grads(module, x, y)
    nnx_module = to_nnx(module)
    assert nnx_module.layers[0].kernel.get_value().shape == (6, 5)  # flax (in, out)
    out, grads = _nnx_grads(nnx_module, jnp.asarray(x.numpy()), jnp.asarray(y.numpy()))
    assert out.dtype == np.float64
    assert_parity({"output": out_ref, "grads": grads_ref}, {"output": out, "grads": grads})


def test_round_trips_are_bit_exact(x64, seed):
    module = _mlp()
    state = {k: v.numpy() for k, v in module.state_dict().items()}
    back = nnx_state_dict(to_nnx(module))
    assert list(back) == list(state)
    for name in state:
        np.testing.assert_array_equal(back[name], state[name])
    module.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()})  # torch accepts it
    model, params = jaxgrad.nn.from_torch(module)
    model2, params2 = from_nnx(to_nnx(model, params))
    assert model2.state_dict_keys() == model.state_dict_keys()
    for name in params:
        np.testing.assert_array_equal(params2[name], params[name])


def test_exact_gelu_is_mapped_and_flax_default_reads_back_as_tanh():
    nnx_module = to_nnx(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.GELU()))
    gelu = nnx_module.layers[1]
    assert gelu.func is nnx.gelu and gelu.keywords == {"approximate": False}
    # a hand-written flax model using nnx.gelu as is gets torch's tanh variant back
    hand = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.gelu)
    model, _ = from_nnx(hand)
    assert model[1] == jaxgrad.nn.GELU(approximate="tanh")


def test_training_trajectory_with_nnx_optimizer_matches_torch(x64, seed):
    """Adam with coupled weight decay, torch's semantics, driven by nnx.Optimizer."""
    module = _mlp()
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((32, 6)), rng.integers(0, 3, 32)
    reference, candidate = nnx_trajectory(
        module,
        x,
        y,
        steps=20,
        torch_optimizer=torch.optim.Adam(module.parameters(), lr=1e-2, weight_decay=0.01),
        jax_optimizer=joptim.adam(lr=1e-2, weight_decay=0.01),
    )
    assert_parity(reference, candidate)


def test_unsupported_layer_is_named_with_its_path():
    module = torch.nn.Sequential(
        torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.PixelShuffle(2))
    )
    with pytest.raises(ValueError, match=r"PixelShuffle at '1\.0'"):
        to_nnx(module)


def test_hand_built_model_with_mismatched_shapes_lists_every_problem():
    rngs = nnx.Rngs(0)
    hand = nnx.Sequential(
        nnx.Linear(3, 4, rngs=rngs),
        nnx.relu,
        nnx.Linear(5, 2, rngs=rngs),
        nnx.Linear(3, 1, rngs=rngs),
    )
    with pytest.raises(ValueError) as info:
        from_nnx(hand)
    message = str(info.value)
    assert "2 (Linear) takes 5 features but 0 (Linear) gives 4" in message
    assert "3 (Linear) takes 3 features but 2 (Linear) gives 2" in message


def test_bad_arguments_are_refused():
    module = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="layout"):
        to_nnx(module, layout="NWHC")
    with pytest.raises(ValueError, match="only with a jaxgrad model"):
        to_nnx(module, params={})
    model = jaxgrad.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="needs its `params`"):
        to_nnx(model)
    with pytest.raises(ValueError, match="missing keys: bias"):
        to_nnx(model, {"weight": np.zeros((2, 2), np.float32)})


def test_grads_to_torch_leaves_the_module_unchanged(x64):
    module = _mlp()
    nnx_module = to_nnx(module)
    before = nnx_state_dict(nnx_module)
    x, y = jnp.ones((2, 6)), jnp.array([0, 1])
    grads = nnx.grad(lambda mod: jlosses.cross_entropy(mod(x), y))(nnx_module)
    grads_to_torch(nnx_module, grads)
    after = nnx_state_dict(nnx_module)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


class _Residual(torch.nn.Module):
    """A custom forward (through torch.fx) with BatchNorm, a skip and a head."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.fc2 = torch.nn.Linear(6, 6)
        self.head = torch.nn.Sequential(
            torch.nn.SiLU(), torch.nn.Dropout(0.0), torch.nn.Linear(6, 3)
        )

    def forward(self, x):
        y = torch.relu(self.bn(self.fc1(x)))
        return self.head(x + self.fc2(y))


def test_traced_forward_with_batch_norm_trains_like_torch(x64, seed):
    """20 SGD steps in train mode: parameters and BatchNorm's running statistics
    (torch's momentum and unbiased running variance) after every step."""
    module = _Residual().double()
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((40, 6)), rng.integers(0, 3, 40)
    reference, candidate = nnx_trajectory(
        module,
        x,
        y,
        steps=20,
        torch_optimizer=torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9),
        jax_optimizer=joptim.sgd(lr=0.1, momentum=0.9),
    )
    assert int(candidate[-1]["bn.num_batches_tracked"]) == 20
    assert_parity(reference, candidate)


class _KeywordTensors(torch.nn.Module):
    """A traced function call whose keyword arguments are the module's own tensors,
    as timm's ConvNeXt calls ``F.layer_norm(x, shape, weight=..., bias=...)``."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4))
        self.bias = torch.nn.Parameter(torch.randn(4))
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(
            torch.nn.functional.layer_norm(x, (4,), weight=self.weight, bias=self.bias, eps=1e-6)
        )


def test_traced_call_with_tensors_as_keyword_arguments(x64):
    module = _KeywordTensors().double()
    x = np.random.default_rng(0).standard_normal((2, 4))
    assert_parity(module(torch.from_numpy(x)).detach().numpy(), np.asarray(to_nnx(module)(x)))


def test_twin_starts_in_the_torch_modules_mode(x64):
    module = _Residual().double()
    module(torch.randn(8, 6, dtype=torch.float64))  # running stats away from 0 and 1
    x = torch.randn(5, 6, dtype=torch.float64)
    for mode in ("train", "eval"):
        getattr(module, mode)()
        with torch.no_grad():
            ref = module(x).numpy()
        nnx_module = to_nnx(module)
        assert_parity(ref, np.asarray(nnx_module(jnp.asarray(x.numpy()))))


@pytest.mark.parametrize(
    "layer",
    [
        torch.nn.ReLU6(),
        torch.nn.Hardswish(),
        torch.nn.Hardsigmoid(),
        torch.nn.ELU(0.7),
        torch.nn.Softplus(beta=2.0, threshold=3.0),
        torch.nn.Mish(),
        torch.nn.Softmax(dim=1),
        torch.nn.LogSoftmax(dim=0),
        torch.nn.SiLU(),
        torch.nn.GELU("tanh"),
    ],
    ids=lambda layer: type(layer).__name__,
)
def test_activations_match_torch_and_read_back(x64, layer):
    x = torch.linspace(-7, 7, 30, dtype=torch.float64).reshape(5, 6)
    nnx_module = to_nnx(torch.nn.Sequential(layer))
    assert_parity(layer(x).numpy(), np.asarray(nnx_module(jnp.asarray(x.numpy()))))
    model, _ = from_nnx(nnx_module)
    assert type(model[0]).__name__ == type(layer).__name__


def test_channel_dropout_and_instance_norm_map_to_stock_flax(x64):
    module = torch.nn.Sequential(torch.nn.InstanceNorm1d(3, affine=True), torch.nn.Dropout1d(0.5))
    with torch.no_grad():
        module[0].weight.copy_(torch.tensor([1.0, 2.0, 3.0]))
    nnx_module = to_nnx(module.double().eval(), layout="NCHW")
    kinds = [type(item).__name__ for item in nnx_module.layers]
    assert kinds == ["ChannelsLast", "GroupNorm", "Dropout", "ChannelsFirst"]
    assert tuple(nnx_module.layers[2].broadcast_dims) == (1,)  # whole channels dropped
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    assert_parity(module(x).detach().numpy(), np.asarray(nnx_module(jnp.asarray(x.numpy()))))


def test_hand_built_flax_cnn_reads_back_as_torch(x64):
    """A CNN written in flax by hand (stock nnx.Conv with explicit pads, nnx.BatchNorm,
    nnx.max_pool) becomes a torch state_dict that torch runs to the same output."""
    rngs = nnx.Rngs(0)
    hand = nnx.Sequential(
        nnx.Conv(1, 4, (3, 3), padding=((1, 1), (1, 1)), param_dtype=jnp.float64, rngs=rngs),
        nnx.BatchNorm(
            4, momentum=0.9, use_running_average=True, param_dtype=jnp.float64, rngs=rngs
        ),
        nnx.relu,
        functools.partial(nnx.max_pool, window_shape=(2, 2), strides=(2, 2)),
    )
    model, params, buffers = from_nnx(hand)
    assert [type(layer).__name__ for layer in model.layers] == [
        "Conv2d",
        "BatchNorm2d",
        "ReLU",
        "MaxPool2d",
    ]
    assert model[1].momentum == pytest.approx(0.1)  # flax 0.9 weighs the old average
    torch_module = (
        torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        .double()
        .eval()
    )
    torch_module.load_state_dict(
        {k: torch.from_numpy(v) for k, v in model.state_dict(params, buffers).items()}
    )
    x = np.random.default_rng(0).standard_normal((2, 1, 6, 6))
    out = hand(jnp.moveaxis(jnp.asarray(x), 1, -1))
    assert_parity(
        torch_module(torch.from_numpy(x)).detach().numpy(), np.asarray(jnp.moveaxis(out, -1, 1))
    )


def test_flax_same_padding_is_refused_with_the_reason():
    hand = nnx.Sequential(nnx.Conv(1, 2, (3, 3), strides=2, rngs=nnx.Rngs(0)))  # flax: 'SAME'
    with pytest.raises(ValueError, match="'SAME' depends on the input size"):
        from_nnx(hand)


_USER_MODEL = '''
import torch
from torch import nn


class Net(nn.Module):
    """Conv features read row by row by an LSTM: a tuple-returning layer inside a
    traced forward, and two sources of random-number state in the nnx twin."""

    def __init__(self, hidden=8):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.rnn = nn.LSTM(4 * 4, hidden, batch_first=True)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(hidden, 3)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)  # (N, 4, 4, 4)
        rows, _ = self.rnn(torch.flatten(x.permute(0, 2, 1, 3), 2))  # 4 rows of 4x4 features
        return self.out(self.drop(rows[:, -1]))
'''


# long (~8 s, the port script end to end): CI's -m "exhaustive or long" run
@pytest.mark.long
def test_port_script_converts_proves_saves_and_reloads_a_users_model(tmp_path, capsys, monkeypatch):
    """Dropout and an LSTM (whose output is a tuple) in one model: the port passes,
    the file holds the random-number state, reloads bit for bit, and runs like torch."""
    import port

    (tmp_path / "user_net.py").write_text(_USER_MODEL)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "net.safetensors"
    code = port.main(
        ["user_net:Net", "--input-shape", "2,1,8,8", "--out", str(out), "--kwargs", '{"hidden": 6}']
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "parity float64" in printed and "FAIL" not in printed
    assert "bn" in printed and "TorchBatchNorm" in printed
    assert "rnn   LSTM" in printed  # the per-layer row of a layer returning (output, (h, c))
    assert "reloaded into a fresh twin" in printed and "bit-identical: PASS" in printed
    assert "to_nnx(Net(hidden=6).eval()" in printed
    # the saved state loads into a fresh twin and runs like torch
    import importlib
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        torch_module = importlib.import_module("user_net").Net(hidden=6).eval()
    finally:
        sys.path.remove(str(tmp_path))
    from safetensors import safe_open

    from jaxgrad.flax import load_nnx

    with safe_open(str(out), "np") as handle:
        assert "drop.rngs.key" in handle.metadata()["jaxgrad.prng_keys"]
    torch.manual_seed(123)  # other weights, so loading must replace them all
    twin = to_nnx(type(torch_module)(hidden=6).eval())
    load_nnx(twin, str(out))
    saved = nnx_state_dict(twin)
    torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in saved.items()})
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    assert_parity(
        torch_module(torch.from_numpy(x)).detach().numpy(),
        np.asarray(twin(jnp.moveaxis(jnp.asarray(x), 1, -1))),
    )


def test_save_nnx_stores_dropout_random_state_and_load_nnx_resumes_its_stream(tmp_path):
    """A model with dropout holds typed PRNG keys (nnx.Rngs): saved as key data with
    their implementation, reloaded so the next mask is the one the saved model would
    draw; a file whose key is of another implementation is refused by name."""
    from jaxgrad.flax import load_nnx, save_nnx

    def build(seed):  # the output's zeros are the dropout mask
        torch.manual_seed(seed)
        return to_nnx(
            torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Dropout(0.5))
        )  # train mode: dropout on

    saved = build(0)
    x = np.ones((16, 6), np.float32)
    first_mask = np.asarray(saved(x)) == 0  # one draw: the stream's counter moves on
    path = str(tmp_path / "dropout.safetensors")
    save_nnx(saved, path)
    fresh = build(1)
    load_nnx(fresh, path)
    after_saved, after_fresh = np.asarray(saved(x)), np.asarray(fresh(x))
    assert np.array_equal(after_saved, after_fresh)  # the same weights and the same next mask
    assert 0 < first_mask.sum() < first_mask.size
    assert not np.array_equal(after_saved == 0, first_mask)  # a new mask: fresh did not restart
    fresh.layers[2].rngs.key.set_value(jax.random.key(0, impl="rbg"))
    with pytest.raises(
        ValueError,
        match="`layers.2.rngs.key`: file has a threefry2x32 PRNG key, module has a rbg PRNG key",
    ):
        load_nnx(fresh, path)


_GELU_MLP = """
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2))
"""


def test_port_script_exits_1_only_for_a_failed_check_and_3_for_a_crash(
    tmp_path, capsys, monkeypatch
):
    """A planted convention bug (GELU's tanh form) fails the parity checks and a
    planted no-op load fails the reload: exit 1 with both FAILs printed. A crash inside
    the port is exit 3 with its traceback, never 1."""
    import port

    from jaxgrad.flax import convert

    (tmp_path / "gelu_mlp.py").write_text(_GELU_MLP)
    monkeypatch.chdir(tmp_path)
    argv = ["gelu_mlp:mlp", "--input-shape", "5,3", "--out", str(tmp_path / "m.safetensors")]
    _, need = convert._TO_NNX["GELU"]
    monkeypatch.setitem(
        convert._TO_NNX,
        "GELU",
        (lambda layer, p, b, d: functools.partial(nnx.gelu, approximate=True), need),
    )
    monkeypatch.setattr("jaxgrad.flax.load_nnx", lambda module, path: None)
    assert port.main(argv) == 1
    printed = capsys.readouterr().out
    assert "parity float64: output and 4 parameter gradients" in printed and ": FAIL" in printed
    assert "bit-identical: FAIL" in printed

    def crash(*args, **kwargs):
        raise RuntimeError("planted crash")

    monkeypatch.setattr("parity_checks.nnx_interop.port_parity", crash)
    assert port.main(argv) == 3
    err = capsys.readouterr().err
    assert "RuntimeError: planted crash" in err and "exit status 3" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["user_net:Missing", "--input-shape", "2,1,8,8"], "has no 'Missing'"),
        (["no_such_module:Net", "--input-shape", "2,1,8,8"], "cannot import"),
        (["user_net:Net", "--input-shape", "2,0,8"], "every dimension must be positive"),
        (["user_net:Net", "--input-shape", "2,3,8,8"], "rejects an input of shape"),
        (["user_net:Net", "--input-shape", "2,1,8,8", "--kwargs", "[1]"], "JSON object"),
        (
            ["user_net:Net", "--input-shape", "2,1,8,8", "--state-dict", "list.pt"],
            "expected a state_dict (names -> tensors), got list",
        ),
    ],
)
def test_port_script_refuses_bad_input_with_exit_2(tmp_path, monkeypatch, capsys, argv, message):
    import port

    (tmp_path / "user_net.py").write_text(_USER_MODEL)
    torch.save([torch.zeros(2)], tmp_path / "list.pt")  # a valid torch file, not a state_dict
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        port.main(argv + ["--out", str(tmp_path / "x.safetensors")])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()


def test_port_script_refuses_an_unwritable_output(tmp_path, capsys):
    import port

    with pytest.raises(SystemExit) as info:
        port.main(["m:C", "--input-shape", "1,2", "--out", str(tmp_path / "no" / "x.safetensors")])
    assert info.value.code == 2 and "does not exist" in capsys.readouterr().err


# long (~13 s, every convention planted and checked): CI's -m "exhaustive or long" run
@pytest.mark.slow
@pytest.mark.long
def test_every_convention_is_mapped_and_matters(x64):
    """scripts/flax_conventions.py's rows: with the mapping, rounding level against
    torch; with flax's default left in place, a visible error."""
    from parity_checks.nnx_interop import measure_conventions

    rows = measure_conventions()
    assert len(rows) >= 12
    for row in rows:
        assert row["mapped"] <= 1e-12, row
        unmapped = row["unmapped"]
        assert (
            unmapped != unmapped
            or abs(unmapped - (1.0 if row["unit"] == "std ratio" else 0.0)) > 1e-4
        ), row


def test_layers_without_a_flax_form_run_inside_nnx_as_jaxgrad_layers(x64):
    """Padding and Upsample have no stock flax twin with torch's meaning: they run as
    TorchLayer (the jaxgrad layer, params as nnx.Param), between stock layers."""
    module = torch.nn.Sequential(
        torch.nn.ConvTranspose2d(2, 3, 3, stride=2),
        torch.nn.ReflectionPad2d(1),
        torch.nn.Upsample(scale_factor=2, mode="bilinear"),
        torch.nn.Conv2d(3, 2, 3),
    ).double()
    nnx_module = to_nnx(module, layout="NCHW")
    kinds = [type(item).__name__ for item in nnx_module.layers]
    assert kinds == [
        "ChannelsLast",
        "ConvTranspose",
        "ChannelsFirst",
        "TorchLayer",
        "TorchLayer",
        "ChannelsLast",
        "Conv",
        "ChannelsFirst",
    ]
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    cotangent = torch.randn(2, 2, 20, 20, dtype=torch.float64)
    module.zero_grad()
    out = module(x)
    (out * cotangent).sum().backward()

    def loss(mod):
        logits = mod(jnp.asarray(x.numpy()))
        return jnp.sum(logits * jnp.asarray(cotangent.numpy())), logits

    (_, logits), grads = nnx.value_and_grad(loss, has_aux=True)(nnx_module)
    assert_parity(
        {
            "out": out.detach().numpy(),
            "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
        },
        {"out": np.asarray(logits), "grads": grads_to_torch(nnx_module, grads)},
    )
    back = nnx_state_dict(nnx_module)
    for name, value in module.state_dict().items():
        np.testing.assert_array_equal(back[name], value.numpy())


def _norm_matches_torch(module, x, rng, layout="NHWC"):
    """``module`` with random parameters against its ``to_nnx`` twin on ``x``: forward
    and every gradient of ``Σ c·output`` at the float64 tier; returns the twin."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape))))
    cotangent = rng.standard_normal(x.shape)
    out = module(torch.from_numpy(x))
    (out * torch.from_numpy(cotangent)).sum().backward()
    nnx_module = to_nnx(module, layout=layout)

    def loss(mod):
        y = mod(jnp.asarray(x))
        return jnp.sum(y * jnp.asarray(cotangent)), y

    (_, y), grads = nnx.value_and_grad(loss, has_aux=True)(nnx_module)
    assert_parity(
        {
            "out": out.detach().numpy(),
            "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
        },
        {"out": np.asarray(y), "grads": grads_to_torch(nnx_module, grads)},
    )
    return nnx_module


@pytest.mark.parametrize(
    "make, shape, layout",
    [
        (lambda: torch.nn.LayerNorm(6), (5, 6), "NHWC"),
        (lambda: torch.nn.GroupNorm(2, 4), (2, 4, 3, 3), "NCHW"),
        (lambda: torch.nn.RMSNorm(6), (5, 6), "NHWC"),
    ],
    ids=["LayerNorm", "GroupNorm", "RMSNorm-default-eps"],
)
def test_norm_layers_keep_torchs_epsilon(x64, rng, make, shape, layout):
    """Rows of variance 1e-6, where torch's eps 1e-5 and flax's default 1e-6 scale the
    output 2.3x apart: forward and every gradient against torch. RMSNorm's default
    eps=None is torch.finfo(dtype).eps (2.2e-16 in float64), not flax's 1e-6, which
    would scale rows of mean square 1e-6 by 1/√2."""
    module = torch.nn.Sequential(make()).double()
    nnx_module = _norm_matches_torch(module, rng.standard_normal(shape) * 1e-3, rng, layout)
    if isinstance(module[0], torch.nn.RMSNorm):
        assert nnx_module.layers[0].epsilon == torch.finfo(torch.float64).eps


@pytest.mark.parametrize(
    "make, stock",
    [
        (lambda: torch.nn.LayerNorm((2, 4)), nnx.LayerNorm),
        (lambda: torch.nn.LayerNorm((2, 4), bias=False), nnx.LayerNorm),
        (lambda: torch.nn.RMSNorm((2, 4), eps=1e-5), nnx.RMSNorm),
    ],
    ids=["LayerNorm", "LayerNorm-no-bias", "RMSNorm"],
)
def test_multi_axis_norms_become_stock_norms_over_the_trailing_axes(x64, rng, make, stock):
    """torch's normalized_shape (2, 4) is a stock norm over axes (-2, -1) whose flat
    (8,) scale flax reshapes onto them: forward and gradients against torch, and the
    state dict back bit for bit."""
    module = torch.nn.Sequential(make()).double()
    nnx_module = _norm_matches_torch(module, rng.standard_normal((3, 2, 4)), rng)
    assert type(nnx_module.layers[0]) is stock
    back = nnx_state_dict(nnx_module)
    assert back.keys() == module.state_dict().keys()
    for name, value in module.state_dict().items():
        np.testing.assert_array_equal(back[name], value.numpy())


@pytest.mark.parametrize("use_scale, use_bias", [(False, True), (True, False)])
def test_hand_built_group_norm_with_one_affine_param_reads_back_exactly(
    x64, rng, use_scale, use_bias
):
    """torch's GroupNorm has both affine params or none: the one flax left out reads
    back at its identity (scale 1, bias 0), and torch then computes flax's output;
    its gradient is not in flax's, so grads_to_torch refuses instead of inventing one."""
    hand = nnx.eval_shape(
        lambda: nnx.GroupNorm(  # no init computed: the one param is set
            4,
            num_groups=2,
            use_scale=use_scale,
            use_bias=use_bias,
            use_fast_variance=False,
            epsilon=1e-5,
            param_dtype=jnp.float64,
            rngs=nnx.Rngs(0),
        )
    )
    present = hand.scale if use_scale else hand.bias
    present.set_value(jnp.asarray(rng.standard_normal(4)))
    torch_module = torch.nn.GroupNorm(2, 4).double()
    torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in nnx_state_dict(hand).items()})
    x = rng.standard_normal((2, 4, 3))
    out = nnx.jit(lambda mod, x: mod(x))(hand, jnp.moveaxis(jnp.asarray(x), 1, -1))
    assert_parity(
        torch_module(torch.from_numpy(x)).detach().numpy(), np.asarray(jnp.moveaxis(out, -1, 1))
    )
    missing = "weight" if use_bias else "bias"
    np.testing.assert_array_equal(
        getattr(torch_module, missing).detach().numpy(),
        np.ones(4) if missing == "weight" else np.zeros(4),
    )
    grads = nnx.state(hand, nnx.Param)  # grads_to_torch refuses on the structure alone
    with pytest.raises(ValueError, match=f"torch's `{missing}` has no gradient"):
        grads_to_torch(hand, grads)


_ONE_AFFINE_PARAM = {
    # name: (the stock nnx layer, its torch twin, the torch param flax has no gradient of)
    "LayerNorm-bias-only": (
        lambda: nnx.LayerNorm(
            4,
            use_scale=False,
            use_bias=True,
            epsilon=1e-5,
            use_fast_variance=False,
            param_dtype=jnp.float64,
            rngs=nnx.Rngs(0),
        ),
        lambda: torch.nn.LayerNorm(4),
        "weight",
    ),
    "LayerNorm-scale-only": (  # torch's bias=False: exact, gradients too
        lambda: nnx.LayerNorm(
            4,
            use_scale=True,
            use_bias=False,
            epsilon=1e-5,
            use_fast_variance=False,
            param_dtype=jnp.float64,
            rngs=nnx.Rngs(0),
        ),
        lambda: torch.nn.LayerNorm(4, bias=False),
        None,
    ),
    "RMSNorm-no-scale": (  # nnx.RMSNorm has no bias: use_scale=False is torch's affine=False
        lambda: nnx.RMSNorm(4, use_scale=False, param_dtype=jnp.float64, rngs=nnx.Rngs(0)),
        lambda: torch.nn.RMSNorm(4, eps=1e-6, elementwise_affine=False),
        None,
    ),
    "BatchNorm-bias-only": (
        lambda: nnx.BatchNorm(
            4,
            use_scale=False,
            use_bias=True,
            use_running_average=True,
            param_dtype=jnp.float64,
            rngs=nnx.Rngs(0),
        ),
        lambda: torch.nn.BatchNorm1d(4).eval(),
        "weight",
    ),
    "BatchNorm-scale-only": (
        lambda: nnx.BatchNorm(
            4,
            use_scale=True,
            use_bias=False,
            use_running_average=True,
            param_dtype=jnp.float64,
            rngs=nnx.Rngs(0),
        ),
        lambda: torch.nn.BatchNorm1d(4).eval(),
        "bias",
    ),
}


@pytest.mark.parametrize("name", list(_ONE_AFFINE_PARAM))
def test_hand_built_norm_with_one_affine_param_reads_back_exactly(x64, rng, name):
    """LayerNorm and BatchNorm as GroupNorm above: a param torch needs and flax left out
    reads back at its identity and torch computes flax's output, and grads_to_torch
    refuses its gradient; a form torch has (LayerNorm bias=False) is exact, gradients too."""
    make, make_torch, missing = _ONE_AFFINE_PARAM[name]
    hand = nnx.eval_shape(make)  # no init computed: every variable is set below
    for _, variable in nnx.iter_graph(hand):
        if isinstance(variable, nnx.Variable):  # BatchNorm's running var must be positive
            shape = variable.get_value().shape
            variable.set_value(jnp.asarray(rng.uniform(0.5, 2.0, shape)))
    torch_module = make_torch().double()
    torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in nnx_state_dict(hand).items()})
    x = rng.standard_normal((3, 4))
    cotangent = rng.standard_normal((3, 4))

    def loss(mod, x):
        y = mod(x)
        return jnp.sum(y * cotangent), y

    (_, out), grads = nnx.jit(nnx.value_and_grad(loss, has_aux=True))(hand, jnp.asarray(x))
    assert out.dtype == np.float64
    torch_out = torch_module(torch.from_numpy(x))
    assert_parity(torch_out.detach().numpy(), np.asarray(out))
    read = from_nnx(hand)  # BatchNorm's has buffers: (model, params, buffers)
    if len(read) == 3:
        read_back, _ = read[0].apply(read[1], jnp.asarray(x), buffers=read[2])
    else:
        read_back = read[0].apply(read[1], jnp.asarray(x))
    assert read_back.dtype == np.float64
    assert_parity(np.asarray(out), np.asarray(read_back))
    if missing is not None:
        np.testing.assert_array_equal(
            getattr(torch_module, missing).detach().numpy(),
            np.ones(4) if missing == "weight" else np.zeros(4),
        )
        with pytest.raises(
            ValueError,
            match=f"nnx.{type(hand).__name__} at 'the top level'"
            f".*torch's `{missing}` has no gradient",
        ):
            grads_to_torch(hand, grads)
    elif list(torch_module.parameters()):
        (torch_out * torch.from_numpy(cotangent)).sum().backward()
        assert_parity(
            {n: p.grad.numpy() for n, p in torch_module.named_parameters()},
            grads_to_torch(hand, grads),
        )
    else:
        assert grads_to_torch(hand, grads) == {}


@pytest.mark.parametrize(
    "make, named",
    [
        (
            lambda r: nnx.LayerNorm(4, reduction_axes=(-3, -1), feature_axes=(-3, -1), rngs=r),
            ["`reduction_axes`=(-3, -1)", "`feature_axes`=(-3, -1)"],
        ),
        (
            lambda r: nnx.LayerNorm(4, reduction_axes=(-2, -1), feature_axes=-1, rngs=r),
            ["`reduction_axes`=(-2, -1)"],
        ),
        # trailing axes, but how 8 flat features split over them is not in the module
        (
            lambda r: nnx.LayerNorm(8, reduction_axes=(-2, -1), feature_axes=(-2, -1), rngs=r),
            ["trailing axes (-2, -1)", "torch_normalized_shape"],
        ),
        (lambda r: nnx.RMSNorm(4, reduction_axes=-2, rngs=r), ["`reduction_axes`=-2"]),
        (
            lambda r: nnx.GroupNorm(4, num_groups=2, reduction_axes=(1, 2, 3), rngs=r),
            ["`reduction_axes`=(1, 2, 3)"],
        ),
        (
            lambda r: nnx.BatchNorm(4, axis=1, axis_name="batch", rngs=r),
            ["`axis`=1", "`axis_name`='batch'"],
        ),
    ],
)
def test_hand_built_norm_over_other_axes_is_refused_by_name(make, named):
    """A norm normalising other axes than torch's layer would read back as a layer that
    computes something else (main: silently, as a last-axis LayerNorm); every such
    setting is named at once."""
    hand = nnx.eval_shape(lambda: nnx.Sequential(make(nnx.Rngs(0))))
    with pytest.raises(ValueError) as info:
        from_nnx(hand)
    for text in named:
        assert text in str(info.value)
    assert "at '0'" in str(info.value) or "at 'layers.0'" in str(info.value), str(info.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool_twin_keeps_the_input_dtype_under_x64(dtype, count_include_pad, x64):
    """``nnx.avg_pool(count_include_pad=False)`` counts each window's real elements by
    pooling ``jnp.ones`` of the default dtype: float64 under x64, which made a float32
    twin's output float64. The twin keeps torch's dtype, matches torch at its tier
    (forward and input gradient), and converts back with ``from_nnx``."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=count_include_pad)
    ).to(dtype)
    nnx_module = to_nnx(module)
    x = torch.randn(2, 3, 7, 7, dtype=dtype, requires_grad=True)
    cotangent = torch.randn(2, 3, 4, 4, dtype=dtype)
    (module(x) * cotangent).sum().backward()

    def objective(inputs):
        out = nnx_module(inputs)
        return jnp.sum(jnp.moveaxis(out, -1, 1) * jnp.asarray(cotangent.numpy())), out

    (_, out), grad = jax.value_and_grad(objective, has_aux=True)(
        jnp.moveaxis(jnp.asarray(x.detach().numpy()), 1, -1)
    )
    numpy_dtype = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
    assert out.dtype == numpy_dtype and grad.dtype == numpy_dtype
    assert_parity(
        {"output": module(x).detach().numpy(), "input grad": x.grad.numpy()},
        {
            "output": np.moveaxis(np.asarray(out), -1, 1),
            "input grad": np.moveaxis(np.asarray(grad), -1, 1),
        },
    )
    model, _ = from_nnx(nnx_module)
    (layer,) = model.layers
    assert (type(layer).__name__, layer.count_include_pad) == ("AvgPool2d", count_include_pad)
