"""The naive (finite-difference) gradient against backward; scripts/cost.py relations."""

from __future__ import annotations

import cost as cost_script
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxgrad.nn
import torchref.models
from jaxgrad import losses
from jaxgrad.lessons.cost import median_seconds, naive_gradient
from jaxgrad.parity import assert_parity
from torchref.cost import naive_gradient as torch_naive_gradient

FD_TIER = dict(rtol=1e-6, atol=1e-8)  # the parity policy's finite-difference tier


def test_naive_gradient_matches_backward_both_frameworks(x64, seed, rng):
    module = torchref.models.mlp([4, 5, 3], "sigmoid", dtype=torch.float64)
    x, y = rng.standard_normal((6, 4)), rng.integers(0, 3, 6)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    torch_loss = lambda: torch.nn.functional.cross_entropy(module(xt), yt)  # noqa: E731
    torch_loss().backward()
    backward = {n: p.grad.clone() for n, p in module.named_parameters()}
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    assert_parity(backward, torch_naive_gradient(module, torch_loss, eps=1e-6), **FD_TIER)
    assert_parity(before, dict(module.named_parameters()), rtol=0.0, atol=0.0)  # restored exactly
    model, params = jaxgrad.nn.from_torch(module)
    loss = lambda p: losses.cross_entropy(model.apply(p, jnp.asarray(x)), jnp.asarray(y))  # noqa: E731
    naive = naive_gradient(loss, params, eps=1e-6)
    assert naive["0.weight"].dtype == jnp.float64
    assert_parity(backward, naive, **FD_TIER)


def test_naive_gradient_should_fail_on_wrong_reference(x64):
    params = {"w": jnp.array([1.0, 2.0])}
    naive = naive_gradient(lambda p: jnp.sum(p["w"] ** 3), params, eps=1e-6)
    with pytest.raises(AssertionError):
        assert_parity({"w": np.array([3.0, 12.0]) * 1.001}, naive, **FD_TIER)
    assert_parity({"w": np.array([3.0, 12.0])}, naive, **FD_TIER)


def test_median_seconds_counts_calls():
    calls = []
    median_seconds(lambda: calls.append(1), 3, warmup=1, min_sample=0.0)
    assert len(calls) == 4
    with pytest.raises(ValueError, match="repeats"):
        median_seconds(lambda: None, 0)


def test_lesson_parameter_counts():
    # 784·256+256 + 256·10+10 and four hidden layers of 2048 (our 14.2M reading)
    assert 784 * 256 + 256 + 256 * 10 + 10 == 203_530
    big = cost_script.NETWORKS["lesson 14.2M"]
    count = sum(a * b + b for a, b in zip(big[:-1], big[1:]))
    assert count == 14_217_226 and round(count / 1e6, 1) == 14.2
    assert (
        sum(
            p.numel()
            for p in torchref.models.mlp(cost_script.NETWORKS["lesson 203,530"]).parameters()
        )
        == 203_530
    )


def test_cost_script_runs_quick(tmp_path):
    results = cost_script.main(["--quick", "--repeats", "1", "--json", str(tmp_path / "c.json")])
    for row in {**results["networks"], **results["finite_difference"]}.values():
        assert row["params"] == sum(a * b + b for a, b in zip(row["sizes"][:-1], row["sizes"][1:]))
        for side in ("torch", "jax"):
            assert row[f"{side}_forward"] > 0 and row[f"{side}_forward_backward"] > 0
    for row in results["networks"].values():
        for side in ("torch", "jax"):
            expected = row["params"] * (
                2 * row[f"{side}_forward"] + row[f"{side}_overhead_per_param_used"]
            )
            assert row[f"{side}_naive_extrapolated"] == pytest.approx(expected, rel=1e-12)
