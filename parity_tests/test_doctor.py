"""The convention doctor: each catalogue entry, planted in a tiny port built here,
is ranked first; a correct port gets a clean bill; bad input is a clear error.

Expected values: torch runs the reference; the planted mistakes are written by hand
in the test (never by the doctor's own transformations)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import jaxgrad.nn as jnn
from jaxgrad.doctor import CATALOGUE, diagnose

D = torch.float64


def _port(tm):
    model, params, *rest = jnn.from_torch(tm, with_buffers=True)
    return model, dict(params), (rest[0] if rest else {})


def _first(report, name, layer):
    assert report.first_layer == layer, str(report)
    assert report.causes and report.causes[0].name == name, str(report)
    assert report.causes[0].explains, str(report)
    assert report.causes[0].error_before > report.causes[0].error_after


def _replace_leaf(model, index, layer):
    layers = list(model.layers)
    layers[index] = layer
    return jnn.Sequential(*layers)


def test_clean_bill_and_every_entry_named(x64):
    tm = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.GELU(), torch.nn.Linear(4, 3)
    ).to(D)
    model, params, _ = _port(tm)
    report = diagnose(tm, (model, params), torch.randn(5, 4, dtype=D))
    assert report.clean and report.first_layer is None and report.causes == []
    assert "clean bill" in str(report)
    assert [r["path"] for r in report.layers] == ["0", "1", "2", "3"]
    assert len({c.name for c in CATALOGUE}) == len(CATALOGUE)


def test_float32_port_is_judged_at_the_float32_tier():
    tm = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 3)
    )
    model, params, _ = _port(tm)
    x = torch.randn(16, 8)
    report = diagnose(tm, (model, params), x)
    assert report.clean and report.dtype == "float32", str(report)
    bad = _replace_leaf(model, 2, jnn.GELU(approximate="tanh"))  # 4.7e-4 is far over 1e-5
    _first(diagnose(tm, (bad, params), x), "gelu_variant", "2")


@dataclasses.dataclass(frozen=True)
class _Float32Linear(jnn.Linear):
    """A port that computes in its own dtype (float32 when jax_enable_x64 was off)."""

    def forward(self, params, x):
        return super().forward(params, np.asarray(x).astype(self.dtype))


@pytest.mark.parametrize("entry", ["norm_eps", "gelu_variant", "linear_transposed", "precision"])
def test_mlp_mistakes(x64, entry):
    tm = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.GELU(), torch.nn.Linear(4, 3)
    ).to(D)
    model, params, _ = _port(tm)
    x = torch.randn(6, 4, dtype=D)
    layer = {"norm_eps": "1", "gelu_variant": "2", "linear_transposed": "0", "precision": "3"}[
        entry
    ]
    if entry == "norm_eps":
        model = _replace_leaf(model, 1, jnn.LayerNorm(4, eps=1e-6, dtype="float64"))
    elif entry == "gelu_variant":
        model = _replace_leaf(model, 2, jnn.GELU(approximate="tanh"))
    elif entry == "linear_transposed":
        params["0.weight"] = np.asarray(params["0.weight"]).T
    else:
        model = _replace_leaf(model, 3, _Float32Linear(4, 3, dtype="float32"))
        params = {
            k: (np.asarray(v, np.float32) if k.startswith("3.") else v) for k, v in params.items()
        }
    report = diagnose(tm, (model, params), x)
    _first(report, entry, layer)
    assert f"layer `{layer}`" in report.verdict


def test_norm_eps_verdict_numbers(x64):
    tm = torch.nn.Sequential(torch.nn.LayerNorm(16)).to(D)
    model = jnn.Sequential(jnn.LayerNorm(16, eps=1e-6, dtype="float64"))
    _, params, _ = _port(tm)
    report = diagnose(tm, (model, params), torch.randn(4, 16, dtype=D))
    _first(report, "norm_eps", "0")
    # unit-variance rows: the error is Δeps/(2σ²)·|x̂| ≈ 4.5e-6·|x̂| (a few 1e-6)
    assert 1e-6 < report.causes[0].error_before < 5e-5
    assert "eps is 1e-06, torch uses 1e-05" in report.verdict


def _conv_net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 2, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2, ceil_mode=True),
        torch.nn.AvgPool2d(3, 1, 1),
    ).to(D)


@pytest.mark.parametrize(
    "entry", ["conv_kernel_layout", "conv_kernel_flip", "padding", "ceil_mode", "count_include_pad"]
)
def test_conv_mistakes(x64, entry):
    tm = _conv_net()
    model, params, _ = _port(tm)
    x = torch.randn(1, 2, 5, 5, dtype=D)
    w = np.asarray(params["0.weight"])
    layer = "0"
    if entry == "conv_kernel_layout":
        params["0.weight"] = w.transpose(2, 3, 1, 0).reshape(w.shape)  # HWIO read as OIHW
    elif entry == "conv_kernel_flip":
        params["0.weight"] = w[..., ::-1, ::-1].copy()
    elif entry == "padding":
        model = _replace_leaf(model, 0, dataclasses.replace(model.layers[0], padding=0))
    elif entry == "ceil_mode":
        layer = "2"
        model = _replace_leaf(model, 2, jnn.MaxPool2d(2))
    else:
        layer = "3"
        model = _replace_leaf(model, 3, jnn.AvgPool2d(3, 1, 1, count_include_pad=False))
    report = diagnose(tm, (model, params), x)
    _first(report, entry, layer)


class _BiasedVarBatchNorm(jnn.BatchNorm2d):
    """A port that accumulates the biased batch variance (flax's rule)."""

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        out, new = super().forward_with_state(
            params, x, buffers=buffers, train=train, key=key, path=path
        )
        if train:
            n = x.size // x.shape[1]
            m = self.momentum
            unbiased_part = new["running_var"] - (1 - m) * buffers["running_var"]
            new = {
                **new,
                "running_var": (1 - m) * buffers["running_var"] + unbiased_part * (n - 1) / n,
            }
        return out, new


@pytest.mark.parametrize("entry", ["bn_momentum", "bn_unbiased_running_var"])
def test_batch_norm_mistakes(x64, entry):
    tm = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2)).to(D)
    model, params, buffers = _port(tm)
    if entry == "bn_momentum":
        bn = jnn.BatchNorm2d(2, momentum=0.9, dtype="float64")
    else:
        bn = _BiasedVarBatchNorm(2, dtype="float64")
    model = _replace_leaf(model, 1, bn)
    report = diagnose(
        tm, (model, params), torch.randn(2, 1, 2, 2, dtype=D), buffers=buffers, train=True
    )
    _first(report, entry, "1")


def _mha():
    return torch.nn.MultiheadAttention(4, 2, batch_first=True).to(D)


def test_attention_packing(x64):
    tm = _mha()
    model, params, _ = _port(tm)
    w, b = np.asarray(params["in_proj_weight"]), np.asarray(params["in_proj_bias"])
    params["in_proj_weight"] = np.concatenate([w[4:8], w[0:4], w[8:]])  # k, q, v
    params["in_proj_bias"] = np.concatenate([b[4:8], b[0:4], b[8:]])
    q = torch.randn(2, 3, 4, dtype=D)
    report = diagnose(tm, (model, params), (q, q, q))
    _first(report, "attention_packing", "")
    assert "k,q,v" in report.causes[0].detail


@dataclasses.dataclass(frozen=True)
class _FlaxMaskMHA(jnn.MultiheadAttention):
    """A port that reads boolean masks as True = attend (flax, SDPA)."""

    def forward_with_state(self, params, q, k, v, /, key_padding_mask=None, **kw):
        if key_padding_mask is not None:
            key_padding_mask = ~np.asarray(key_padding_mask)
        return super().forward_with_state(params, q, k, v, key_padding_mask=key_padding_mask, **kw)


def test_mask_polarity(x64):
    tm = _mha()
    _, params, _ = _port(tm)
    model = _FlaxMaskMHA(4, 2, batch_first=True, dtype="float64")
    q = torch.randn(2, 3, 4, dtype=D)
    mask = torch.tensor([[False, True, False], [True, False, False]])
    report = diagnose(tm, (model, params), (q, q, q), kwargs={"key_padding_mask": mask})
    _first(report, "mask_polarity", "")


@dataclasses.dataclass(frozen=True)
class _FiniteFillMHA(jnn.MultiheadAttention):
    """A port that masks with a large finite value (flax's finfo.min) instead of -inf."""

    def forward_with_state(self, params, q, k, v, /, key_padding_mask=None, **kw):
        if key_padding_mask is not None:
            key_padding_mask = np.where(np.asarray(key_padding_mask), -1e300, 0.0)
        return super().forward_with_state(params, q, k, v, key_padding_mask=key_padding_mask, **kw)


def test_mask_fill(x64):
    tm = _mha()
    _, params, _ = _port(tm)
    model = _FiniteFillMHA(4, 2, batch_first=True, dtype="float64")
    q = torch.randn(2, 3, 4, dtype=D)
    mask = torch.tensor([[False, True, False], [True, True, True]])  # item 1 fully masked
    report = diagnose(tm, (model, params), (q, q, q), kwargs={"key_padding_mask": mask})
    _first(report, "mask_fill", "")


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_gate_order(x64, kind):
    tm = getattr(torch.nn, kind)(3, 2, batch_first=True).to(D)
    model, params, _ = _port(tm)
    blocks = 4 if kind == "LSTM" else 3
    for k in list(params):
        parts = np.split(np.asarray(params[k]), blocks)
        parts[0], parts[1] = parts[1], parts[0]  # f,i,g,o / z,r,n
        params[k] = np.concatenate(parts)
    report = diagnose(tm, (model, params), torch.randn(2, 4, 3, dtype=D))
    _first(report, kind.lower() + "_gate_order", "")


@pytest.mark.parametrize("kind, order", [("LSTM", (0, 3, 1, 2)), ("GRU", (1, 2, 0))])
def test_gate_order_that_is_not_its_own_inverse_is_named_and_undone(x64, kind, order):
    """The port stores torch's block ``order[j]`` at block j: a cycle (ONNX-style
    i,o,f,g; a rotation), whose undoing permutation differs from itself. The doctor
    must name the planted order and its fix must make the layer match torch."""
    tm = getattr(torch.nn, kind)(3, 2, batch_first=True).to(D)
    model, params, _ = _port(tm)
    labels = ("i", "f", "g", "o") if kind == "LSTM" else ("r", "z", "n")
    for k in list(params):
        parts = np.split(np.asarray(params[k]), len(labels))
        params[k] = np.concatenate([parts[p] for p in order])  # planted by hand
    report = diagnose(tm, (model, params), torch.randn(2, 4, 3, dtype=D))
    _first(report, kind.lower() + "_gate_order", "")
    assert f"order {','.join(labels[p] for p in order)};" in report.causes[0].detail, str(report)


def test_unexplained_error_shows_where_it_sits(x64):
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1)).to(D)
    model, params, _ = _port(tm)
    params["0.bias"] = np.asarray(params["0.bias"]) + np.array([0.0, 0.5, 0.0])
    report = diagnose(tm, (model, params), torch.randn(1, 2, 3, 3, dtype=D))
    assert report.first_layer == "0" and not any(c.explains for c in report.causes)
    assert "nothing in the catalogue explains it" in report.verdict
    assert "channels [1] of 3" in report.verdict


def test_resnet_graph_port(x64):
    from torchref.models import resnet

    tm = resnet(dtype=D).eval()
    model, params, buffers = _port(tm)
    x = torch.randn(1, 1, 8, 8, dtype=D)
    bad = dataclasses.replace(
        model,
        layers=tuple(
            (
                p,
                jnn.BatchNorm2d(layer.num_features, eps=1e-6, dtype="float64")
                if p == "layer1.0.bn2"
                else layer,
            )
            for p, layer in model.layers
        ),
    )
    report = diagnose(tm, (bad, params), x, buffers=buffers)
    _first(report, "norm_eps", "layer1.0.bn2")
    # every other layer of the traced port (relu called twice per block) is clean
    own = {(r["path"], r["index"]): r["exceeds"] for r in report.layers}
    assert own[("layer1.0.relu", 1)] is False and own[("fc", 0)] is False
    assert [k for k, v in own.items() if v] == [("layer1.0.bn2", 0)]


class _Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)) + x)


def test_error_between_layers(x64):
    tm = _Residual().to(D)
    model, params, _ = _port(tm)
    nodes = tuple(
        dataclasses.replace(n, target="operator.sub") if n.target == "operator.add" else n
        for n in model.nodes
    )
    assert nodes != model.nodes
    report = diagnose(
        tm, (dataclasses.replace(model, nodes=nodes), params), torch.randn(4, 3, dtype=D)
    )
    assert report.first_layer is None and not report.output_within_tier
    assert "made between layers, in the forward code before layer `fc2`" in report.verdict


class _NHWCFlatten(jnn.Flatten):
    """A port that flattens NHWC activations (flax's order)."""

    def forward(self, params, x):
        return super().forward(params, np.asarray(x).transpose(0, 2, 3, 1))


class _ConvHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(2, 3, 1), torch.nn.Linear(12, 2)

    def forward(self, x):
        return self.fc(torch.flatten(self.conv(x), 1))


def test_flatten_order_in_a_layer_and_between_layers(x64):
    tm = torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 1), torch.nn.Flatten(), torch.nn.Linear(12, 2)
    ).to(D)
    model, params, _ = _port(tm)
    x = torch.randn(2, 2, 2, 2, dtype=D)
    _first(diagnose(tm, (_replace_leaf(model, 1, _NHWCFlatten()), params), x), "flatten_order", "1")
    tm = _ConvHead().to(D)
    model, params, _ = _port(tm)
    nodes = tuple(n for n in model.nodes)
    flat = next(n for n in nodes if n.target == "torch.flatten")
    perm = dataclasses.replace(
        flat, name="nhwc", target="method.permute", args=(flat.args[0], 0, 2, 3, 1), kwargs=()
    )
    fx = __import__("jaxgrad.nn.capture.fx", fromlist=["Ref"])
    flat2 = dataclasses.replace(flat, args=(fx.Ref("nhwc"),) + flat.args[1:])
    nodes = tuple(x for n in nodes for x in ((perm, flat2) if n is flat else (n,)))
    report = diagnose(
        tm, (dataclasses.replace(model, nodes=nodes), params), torch.randn(2, 2, 2, 2, dtype=D)
    )
    assert report.first_layer is None and report.causes[0].name == "flatten_order", str(report)
    assert report.causes[0].explains and "before layer `fc`" in report.verdict


def test_plain_function_port(x64):
    """``(fn, params, names)``: the names override the search by value; a plain
    function is localised like any traced port (parity_tests/test_doctor_any_port.py)."""
    tm = torch.nn.Linear(3, 2).to(D)
    w, b = tm.weight.detach().numpy(), tm.bias.detach().numpy()
    x = torch.randn(4, 3, dtype=D)
    fn = lambda p, x: x @ p["kernel"] + p["b"]  # noqa: E731
    ok = diagnose(tm, (fn, {"kernel": w.T, "b": b}, {"kernel": "weight", "b": "bias"}), x)
    assert ok.clean and [r["path"] for r in ok.layers] == [""], str(ok)
    assert "weight -> kernel (transposed)" in ok.params
    partial = diagnose(tm, (fn, {"kernel": w.T, "b": b}, {"kernel": "weight"}), x)
    assert partial.clean and "bias -> b" in partial.params  # the rest found by value
    with pytest.raises(ValueError, match="port leaves bias not in the port"):
        diagnose(tm, (fn, {"kernel": w.T, "b": b}, {"bias": "bias"}), x)
    with pytest.raises(ValueError, match="torch names b not in the torch module"):
        diagnose(tm, (fn, {"kernel": w.T, "b": b}, {"b": "b"}), x)
    keyword = diagnose(tm, (fn, {"kernel": w.T, "b": b}), x, names={"b": "bias"})
    assert keyword.clean and "bias -> b" in keyword.params
    with pytest.raises(ValueError, match="`names` maps a traced port's leaves"):
        diagnose(tm, _port(tm)[:2], x, names={"b": "bias"})
    bad = diagnose(tm, (lambda p, x: x @ p["kernel"] + 2 * p["b"], {"kernel": w.T, "b": b}), x)
    assert bad.first_layer == "" and not bad.clean, str(bad)


def test_bad_input(x64):
    tm = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).to(D)
    model, params, _ = _port(tm)
    x = torch.randn(2, 3, dtype=D)
    renamed = {k.replace("2.", "out."): v for k, v in params.items()}
    with pytest.raises(
        ValueError,
        match=r"port params torch does not have: out.weight \(2, 3\) "
        r"\(same shape: 2.weight\?\).*torch params the port",
    ):
        diagnose(tm, (model, renamed), x)
    swapped = jnn.Sequential(
        {
            "2": jnn.Linear(3, 2, dtype="float64"),
            "1": jnn.Tanh(),
            "0": jnn.Linear(3, 3, dtype="float64"),
        }
    )
    with pytest.raises(ValueError, match="different order"):
        diagnose(tm, (swapped, params), torch.randn(2, 3, dtype=D))
    with pytest.raises(ValueError, match=r"rejects the example input \(\(2, 5\) float64\)"):
        diagnose(tm, (model, params), torch.randn(2, 5, dtype=D))
    with pytest.raises(TypeError, match="`port` must be"):
        diagnose(tm, model, x)
    extra = jnn.Sequential(
        {
            "0": jnn.Linear(3, 3, dtype="float64"),
            "1": jnn.Tanh(),
            "9": jnn.Tanh(),
            "2": jnn.Linear(3, 2, dtype="float64"),
        }
    )
    with pytest.raises(ValueError, match="no torch module of the same path: 9"):
        diagnose(tm, (extra, params), x)


def test_nnx_port(x64):
    import functools

    import jax

    from jaxgrad.flax import to_nnx

    tm = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.GELU(), torch.nn.Linear(4, 2)
    ).to(D)
    port = to_nnx(tm)
    x = torch.randn(3, 4, dtype=D)
    assert diagnose(tm, port, x).clean
    port.layers[1].epsilon = 1e-6  # flax's default eps
    port.layers[2] = functools.partial(jax.nn.gelu, approximate=True)  # jax's default GELU
    _first(diagnose(tm, port, x), "norm_eps", "1")
    port.layers[1].epsilon = 1e-5
    _first(diagnose(tm, port, x), "gelu_variant", "2")
