"""scripts/doctor.py: a user's model and port through the command line, bad arguments."""

from __future__ import annotations

import pytest

_USER = """
import dataclasses

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def good(module):
    import jaxgrad.nn as jnn
    return jnn.from_torch(module)


def bad(module):
    import jaxgrad.nn as jnn
    model, params = jnn.from_torch(module)
    layers = dict(model.layers)
    layers["body.1"] = jnn.LayerNorm(4, eps=1e-6, dtype="float64")
    return dataclasses.replace(model, layers=tuple(layers.items())), params
"""


_TOKENS = """
import torch


class TokenNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, ids):
        return self.head(self.embed(ids).mean(dim=1))


def build(module):
    import jaxgrad.nn as jnn
    return jnn.from_torch(module)
"""


def test_user_session_with_token_ids(tmp_path, capsys, monkeypatch):
    """--int-input VOCAB feeds int64 ids in [0, VOCAB) (an Embedding refuses floats,
    and the refusal points at the option)."""
    import doctor

    (tmp_path / "user_tokens.py").write_text(_TOKENS)
    monkeypatch.chdir(tmp_path)
    argv = ["user_tokens:TokenNet", "--port", "user_tokens:build", "--input-shape", "2,5"]
    assert doctor.main(argv) == 2
    assert "give --int-input VOCAB for int64 inputs" in capsys.readouterr().err
    assert doctor.main([*argv, "--int-input", "100"]) == 0
    printed = capsys.readouterr().out
    assert "clean bill" in printed and "Embedding" in printed


@pytest.mark.parametrize(
    "builder, code, text",
    [
        ("good", 0, "clean bill"),
        ("bad", 1, "layer `body.1` (LayerNorm): eps is 1e-06, torch uses 1e-05"),
    ],
)
def test_user_session(tmp_path, capsys, monkeypatch, builder, code, text):
    import doctor

    (tmp_path / "user_doc.py").write_text(_USER)
    monkeypatch.chdir(tmp_path)
    got = doctor.main(["user_doc:Net", "--port", f"user_doc:{builder}", "--input-shape", "3,4"])
    printed = capsys.readouterr().out
    assert got == code, printed
    assert text in printed


def test_user_session_rejected_input(tmp_path, capsys, monkeypatch):
    import doctor

    (tmp_path / "user_doc.py").write_text(_USER)
    monkeypatch.chdir(tmp_path)
    assert doctor.main(["user_doc:Net", "--port", "user_doc:good", "--input-shape", "3,5"]) == 2
    assert "rejects the example input ((3, 5) float64)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "give --demo NAME, or REFERENCE with --port and --input-shape"),
        (["--demo", "resnet", "a:B"], "--demo takes no REFERENCE"),
        (["a:B", "--port", "nocolon", "--input-shape", "2"], "--port 'nocolon' must be"),
        (
            ["no_such_module_anywhere:B", "--port", "c:d", "--input-shape", "2"],
            "REFERENCE: cannot import 'no_such_module_anywhere'",
        ),
        (["a:B", "--port", "c:d", "--input-shape", "2,0"], "every dimension must be positive"),
        (["--demo", "nope"], "invalid choice"),
        (
            ["a:B", "--port", "c:d", "--input-shape", "2", "--int-input", "0"],
            "--int-input must be >= 1 (got 0)",
        ),
        (["--demo", "resnet", "--int-input", "10"], "--demo takes no --int-input"),
    ],
)
def test_bad_arguments(capsys, argv, message):
    import doctor

    with pytest.raises(SystemExit) as exit_info:
        doctor.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


_PORTS = """
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def _np(t):
    return t.detach().numpy()


def forward(params, x):  # a plain function, flax names and layouts
    h = x @ params["dense"]["kernel"] + params["dense"]["bias"]
    mean = h.mean(-1, keepdims=True)
    h = (h - mean) / jnp.sqrt(h.var(-1, keepdims=True) + params["eps"]) * params["ln"]["scale"] \\
        + params["ln"]["bias"]
    return jnp.tanh(h) @ params["head"]["kernel"] + params["head"]["bias"]


def convert(module):
    sd = {k: _np(v) for k, v in module.state_dict().items()}
    return {"dense": {"kernel": sd["body.0.weight"].T, "bias": sd["body.0.bias"]},
            "ln": {"scale": sd["body.1.weight"], "bias": sd["body.1.bias"]},
            "head": {"kernel": sd["head.weight"].T, "bias": sd["head.bias"]}, "eps": 1e-5}


class Custom(nnx.Module):  # a custom nnx module with flax's LayerNorm default (eps 1e-6)
    def __init__(self, module):
        sd = {k: jnp.asarray(_np(v)) for k, v in module.state_dict().items()}
        rngs = nnx.Rngs(0)
        self.dense = nnx.Linear(4, 4, param_dtype=jnp.float64, rngs=rngs)
        self.ln = nnx.LayerNorm(4, param_dtype=jnp.float64, rngs=rngs)
        self.head = nnx.Linear(4, 2, param_dtype=jnp.float64, rngs=rngs)
        for var, value in ((self.dense.kernel, sd["body.0.weight"].T),
                           (self.dense.bias, sd["body.0.bias"]),
                           (self.ln.scale, sd["body.1.weight"]), (self.ln.bias, sd["body.1.bias"]),
                           (self.head.kernel, sd["head.weight"].T), (self.head.bias, sd["head.bias"])):
            var.set_value(value)

    def __call__(self, x):
        return self.head(jnp.tanh(self.ln(self.dense(x))))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Pytree:  # equinox style: torch layouts
    w1: jax.Array
    b1: jax.Array
    g: jax.Array
    b: jax.Array
    w2: jax.Array
    b2: jax.Array

    def __call__(self, x):
        h = x @ self.w1.T + self.b1
        mean = h.mean(-1, keepdims=True)
        h = (h - mean) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5) * self.g + self.b
        return jnp.tanh(h) @ self.w2 + self.b2  # w2 kept (in, out)


def pytree(module):
    sd = {k: _np(v) for k, v in module.state_dict().items()}
    return Pytree(sd["body.0.weight"], sd["body.0.bias"], sd["body.1.weight"], sd["body.1.bias"],
                  sd["head.weight"].T, sd["head.bias"])
"""


@pytest.mark.parametrize(
    "argv, code, texts",
    [
        (
            ["--port", "user_ports:forward", "--params", "user_ports:convert"],
            0,
            [
                "port: a function, traced",
                "body.0.weight -> dense.kernel (transposed)",
                "clean bill",
            ],
        ),
        (
            ["--port", "user_ports:Custom"],
            1,
            [
                "port: a nnx module, traced",
                "layer `body.1` (LayerNorm): eps is 1e-06, torch uses 1e-05",
                "[norm_eps]",
            ],
        ),
        (["--port", "user_ports:pytree"], 0, ["port: a pytree module, traced", "clean bill"]),
    ],
)
def test_user_session_any_port(tmp_path, capsys, monkeypatch, x64, argv, code, texts):
    import doctor

    (tmp_path / "user_doc.py").write_text(_USER)
    (tmp_path / "user_ports.py").write_text(_PORTS)
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "doctor.html"
    got = doctor.main(["user_doc:Net", *argv, "--input-shape", "3,4", "--html", str(page)])
    printed = capsys.readouterr().out
    assert got == code, printed
    for text in texts:
        assert text in printed, printed
    assert "the port: a " in page.read_text()  # the correspondence, on the page too


def test_params_needs_port_and_no_demo(capsys):
    import doctor

    with pytest.raises(SystemExit):
        doctor.parse_args(["--demo", "resnet", "--params", "a:b"])
    assert "--demo takes no REFERENCE, --port or --params" in capsys.readouterr().err
