"""detach / stop_gradient, retain_grad / intermediate_grads, autograd.grad / grad_wrt."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from parity_checks.autograd import (
    TAPS,
    detach_parity,
    freezing_parity,
    grad_wrt_parity,
    intermediate_parity,
    target_network_twins,
    two_layer_arrays,
    two_layer_jax,
    two_layer_torch,
)

from jaxgrad import autodiff as jautodiff
from jaxgrad.parity import BIT_IDENTICAL, assert_parity

pytestmark = pytest.mark.usefixtures("seed")


@pytest.mark.parametrize("jit", [False, True])
def test_intermediate_grads_equal_retain_grad_float64(x64, jit):
    report = intermediate_parity("float64", jit=jit)
    assert report.passed, report.table()
    assert {leaf.dtype for leaf in report.leaves} == {"float64"}
    assert len(report.leaves) == 1 + len(TAPS)


def test_intermediate_grads_float32():
    report = intermediate_parity("float32")
    assert report.passed, report.table()


def test_intermediate_grad_of_output_by_hand(x64):
    # d mean((out - y)^2) / d out = 2 (out - y) / out.size
    x, w1, b1, w2, b2, y = (
        jnp.asarray(np.random.default_rng(0).standard_normal(s))
        for s in [(5, 3), (4, 3), (4,), (2, 4), (2,), (5, 2)]
    )
    _, grads = jautodiff.intermediate_grads(two_layer_jax, (x, w1, b1, w2, b2, y), ["out"])
    out = jnp.tanh(x @ w1.T + b1) @ w2.T + b2
    assert_parity(np.asarray(2 * (out - y) / out.size), grads["out"])


def test_grad_wrt_equals_autograd_grad(x64):
    report = grad_wrt_parity("float64")
    assert report.passed, report.table()
    assert grad_wrt_parity("float32").passed


def test_grad_wrt_returns_gradients_in_the_order_asked(x64):
    """``torch.autograd.grad(loss, [b2, w1, b1])`` answers in that order, not sorted."""
    arrays = two_layer_arrays("float64")
    names = ["b2", "w1", "b1"]
    tensors = {k: torch.from_numpy(a).requires_grad_(k in names) for k, a in arrays.items()}
    reference = torch.autograd.grad(two_layer_torch(*tensors.values()), [tensors[n] for n in names])
    params = {k: jnp.asarray(a) for k, a in arrays.items()}
    candidate = jautodiff.grad_wrt(lambda p: two_layer_jax(**p), params, names)
    assert [g.shape for g in candidate] == [(2,), (4, 3), (4,)]
    assert_parity(list(reference), list(candidate))


def test_target_network_gradient_is_zero_in_jax_and_absent_in_torch(x64):
    reference, candidate = target_network_twins("float64")
    assert_parity(reference["online"], candidate["online"])
    assert all(g is None for g in reference["target"].values())
    zeros = jax.tree.map(np.zeros_like, candidate["target"])
    assert_parity(zeros, candidate["target"], **BIT_IDENTICAL)
    assert reference["target_requires_grad"] is False
    assert_parity(np.float64(reference["running"]), np.float64(candidate["running"]))
    assert detach_parity("float64").passed and detach_parity("float32").passed


def test_detach_row_judges_the_running_loss_at_the_tier_it_was_computed_in():
    # the float32 row's running total is float32 losses summed in a Python float:
    # float32 bits differ between CPUs, so the float64 tier would be luck
    for dtype in ("float32", "float64"):
        report = detach_parity(dtype)
        running = next(leaf for leaf in report.leaves if "running" in leaf.path)
        assert report.passed and running.dtype == "float64"
        assert (running.tier, running.tier_reason) == (dtype, "declared")


def test_stop_gradient_passes_the_value_bit_identical(x64):
    value = jnp.asarray(np.random.default_rng(1).standard_normal(4))
    assert_parity(value, jautodiff.detach(value), **BIT_IDENTICAL)
    grad = jax.grad(lambda v: jnp.sum(jautodiff.detach(v) * v))(value)
    assert_parity(value, grad, **BIT_IDENTICAL)  # only the undetached factor contributes


def test_item_cuts_the_graph_silently_in_torch_and_loudly_in_jax():
    # lesson 002: torch.tensor([float((x * 3).item())]) has no grad_fn
    x = torch.tensor(2.0, requires_grad=True)
    broken = torch.tensor([float((x * 3).item())], requires_grad=True)
    assert broken.grad_fn is None
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.grad(lambda v: v * float(v * 3))(2.0)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(jax.grad(lambda v: v * (v * 3).item()))(jnp.asarray(2.0))


def test_item_under_eager_grad_is_silent_too():
    # a caveat (jax 0.10): outside jit, ``.item()`` on a grad tracer returns a constant,
    # cutting the graph silently like torch: d/dv [v * 3v] is 12 at v=2, this gives 6
    value = jax.grad(lambda v: v * (v * 3).item())(jnp.asarray(2.0))
    assert float(value) == 6.0


def test_freezing_row_passes():
    report = freezing_parity("float32")
    assert report.passed, report.table()


@pytest.mark.parametrize(
    "call,error,fragment",
    [
        (
            lambda: jautodiff.intermediate_grads(
                lambda x, tap: tap("h", x * 2), (jnp.ones(3),), ["h"]
            ),
            ValueError,
            "`fn` must return a scalar to differentiate",
        ),
        (
            lambda: jautodiff.intermediate_grads(
                lambda x, tap: jnp.sum(tap("h", x)), (jnp.ones(3),), ["g"]
            ),
            ValueError,
            "`names` ['g'] were never tapped in `fn` (tapped: ['h'])",
        ),
        (
            lambda: jautodiff.intermediate_grads(
                lambda x, tap: jnp.sum(tap("h", tap("h", x))), (jnp.ones(3),), ["h"]
            ),
            ValueError,
            "`tap` name 'h' is used twice",
        ),
        (
            lambda: jautodiff.intermediate_grads(lambda x, tap: jnp.sum(x), (jnp.ones(3),), "h"),
            TypeError,
            "`names` (='h') must be a sequence",
        ),
        (
            lambda: jautodiff.grad_wrt(lambda p: jnp.sum(p["w"]), {"w": jnp.ones(2)}, ["v"]),
            ValueError,
            "`names` ['v'] are not in `params` (keys: ['w'])",
        ),
        (
            lambda: jautodiff.grad_wrt(lambda p: p["w"], {"w": jnp.ones(2)}, ["w"]),
            ValueError,
            "`loss_fn` must return a scalar",
        ),
    ],
)
def test_autodiff_errors(call, error, fragment):
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value)
