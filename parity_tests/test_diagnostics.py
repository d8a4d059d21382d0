"""jaxgrad.diagnostics against torchref.diagnostics and hand-computed norms."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

import jaxgrad.nn
import torchref.models
from jaxgrad import diagnostics as jdiag
from jaxgrad.lessons import depth as jdepth
from jaxgrad.parity import assert_parity
from torchref import diagnostics as tdiag


def test_grouping_numeric_order_and_hand_norms():
    grads = {
        "10.weight": np.array([[3.0, 4.0]]),  # norm 5
        "2.weight": np.array([1.0, 2.0, 2.0]),  # norm 3
        "2.bias": np.zeros(2),
        "1.0.weight": jnp.array([[0.0, 12.0], [5.0, 0.0]]),  # norm 13
        "scale": np.array([2.0]),
        "frozen.weight": None,
    }
    norms = jdiag.layer_grad_norms(grads)
    assert list(norms) == ["1.0", "2", "10", ""]
    assert norms == {
        "1.0": {"weight": 13.0},
        "2": {"weight": 3.0, "bias": 0.0},
        "10": {"weight": 5.0},
        "": {"scale": 2.0},
    }
    assert all(type(v) is float for layer in norms.values() for v in layer.values())
    with pytest.raises(TypeError, match="`grads` is a list"):
        jdiag.layer_grad_norms([np.ones(2)])


@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
@pytest.mark.parametrize("jit", [True, False])
def test_layer_norms_match_torch_named_parameters(x64, seed, rng, activation, jit):
    module = torchref.models.mlp([5, 7, 7, 7, 3], activation, dtype=torch.float64)
    x = rng.standard_normal((6, 5))
    y = rng.integers(0, 3, 6)
    nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    expected = tdiag.layer_grad_norms(module)
    assert list(expected) == ["0", "2", "4", "6"]
    model, params = jaxgrad.nn.from_torch(module)
    grads = jdepth.weight_grads(model, params, jnp.asarray(x), jnp.asarray(y), jit=jit)
    assert grads["0.weight"].dtype == jnp.float64
    ours = jdiag.layer_grad_norms(grads)
    assert list(ours) == list(expected)
    assert_parity(expected, ours)  # float64 tier


def test_torch_twin_skips_missing_grads_and_orders_nested():
    module = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.Sigmoid()) for _ in range(11)])
    module[3][0].weight.requires_grad_(False)
    module(torch.ones(1, 2)).sum().backward()
    norms = tdiag.layer_grad_norms(module)
    assert list(norms)[:3] == ["0.0", "1.0", "2.0"] and list(norms)[-1] == "10.0"
    assert norms["3.0"] == {"bias": module[3][0].bias.grad.double().norm().item()}


def test_report_verdicts():
    healthy = jdiag.report_from_norms({"0": 1.0, "2": 4.0})
    assert (healthy.ratio, healthy.verdict) == (4.0, "healthy")
    vanishing = jdiag.report_from_norms({"0": 1.5e-5, "2": 0.3, "4": 0.49})
    assert vanishing.verdict == "vanishing" and vanishing.ratio == pytest.approx(0.49 / 1.5e-5)
    exploding = jdiag.report_from_norms({"0": 3.48e6, "2": 1.0})
    assert exploding.verdict == "exploding"
    at_threshold = jdiag.report_from_norms({"0": 1.0, "1": 100.0})
    assert at_threshold.verdict == "vanishing"
    just_below = jdiag.report_from_norms({"0": 1.0, "1": 99.0})
    assert just_below.verdict == "healthy"
    assert "last/first" in vanishing.table()
    with pytest.raises(ValueError, match="threshold"):
        jdiag.report_from_norms({"0": 1.0}, threshold=0.5)


def test_report_zero_and_nonfinite_without_nan():
    dead_first = jdiag.report_from_norms({"0": 0.0, "2": 0.0, "4": 0.2})
    assert dead_first.ratio == math.inf and dead_first.verdict == "vanishing"
    assert dead_first.zero_layers == ("0", "2")
    dead_last = jdiag.report_from_norms({"0": 0.2, "2": 0.0})
    assert dead_last.ratio == 0.0 and dead_last.verdict == "exploding"
    nothing = jdiag.report_from_norms({"0": 0.0, "2": 0.0})
    assert nothing.ratio is None and nothing.verdict == "no gradient"
    assert "undefined" in nothing.table()
    broken = jdiag.report_from_norms({"0": float("nan"), "2": 1.0})
    assert broken.verdict == "non-finite" and broken.nonfinite_layers == ("0",)
    assert broken.ratio is None


def test_gradient_report_from_grads_uses_weights_only():
    grads = {
        "0.weight": np.full((2, 2), 0.5),
        "0.bias": np.zeros(2),
        "2.weight": np.zeros((2, 2)),
        "4.weight": np.array([300.0]),
    }
    report = jdiag.gradient_report(grads)
    assert report.norms == {"0": 1.0, "2": 0.0, "4": 300.0}
    assert report.verdict == "vanishing" and report.zero_layers == ("2",)
    with pytest.raises(ValueError, match="no layer has a `kernel`"):
        jdiag.gradient_report(grads, param="kernel")


def test_dead_units_hand_and_torch(x64, seed):
    activations = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]])
    assert jdiag.dead_units(activations) == 0.5
    assert jdiag.dead_units({"1": activations, "3": np.ones((2, 3))}) == {"1": 0.5, "3": 0.0}
    assert jdiag.dead_units([activations]) == [0.5]
    with pytest.raises(ValueError, match="batch first"):
        jdiag.dead_units(np.ones(3))
    module = torchref.models.mlp([4, 8, 6, 2], "relu", dtype=torch.float64)
    with torch.no_grad():
        module[0].bias[:3] = -100.0  # three units of layer 1 can never fire
    x = torch.rand(16, 4, dtype=torch.float64)
    expected = tdiag.dead_units(tdiag.relu_activations(module, x))
    assert list(expected) == ["1", "3"] and expected["1"] >= 3 / 8
    model, params = jaxgrad.nn.from_torch(module)
    ours = jdiag.dead_units(jdiag.relu_activations(model, params, jnp.asarray(x.numpy())))
    assert ours == expected
