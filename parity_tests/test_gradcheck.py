"""jaxgrad.gradcheck: passes on every layer and loss, catches a 0.1 % error, agrees with torch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from parity_checks.gradcheck import (
    input_shapes,
    layer_cases,
    layer_gradcheck,
    loss_cases,
    loss_gradcheck,
)

import jaxgrad.losses as L
import jaxgrad.nn as jnn
from jaxgrad.gradcheck import gradcheck
from jaxgrad.manual import scaled_backward
from jaxgrad.parity import compare
from parity_tests._sampling import one_in
from torchref.gradcheck import strict_gradcheck
from torchref.manual import scaled_backward as torch_scaled_backward


def test_every_layer_has_a_case():
    """Every class from_torch supports has a gradcheck: here, or a "gradcheck nn.…"
    row of the parity report (CNN, normalisation, dropout and sequence layers)."""
    import re

    from parity_checks import all_checks, cnn_layers

    rows = " ".join(c.name for c in all_checks() if c.name.startswith("gradcheck nn."))
    covered = {name.split("(")[0] for name in [*layer_cases(), *cnn_layers.LAYERS]}
    covered |= set(re.findall(r"[A-Z][A-Za-z0-9]*", rows))
    # stacks of TransformerEncoderLayer / DecoderLayer (+ LayerNorm), each gradchecked;
    # the stacks themselves are held to torch by their parity rows only
    composites = {"TransformerEncoder", "TransformerDecoder"}
    assert set(jnn.SUPPORTED) - composites <= covered, set(jnn.SUPPORTED) - composites - covered


# one layer row in two and one loss row in two in the default run (every row of both
# in the exhaustive run, CI: -m "exhaustive or long")
@pytest.mark.parametrize("name", one_in(2, list(layer_cases())))
def test_gradcheck_passes_on_layer(name, x64, rng):
    report = layer_gradcheck(name, rng)
    assert report.passed, report.table()
    layer, shape = layer_cases()[name]
    assert (
        report.n_checked
        == report.n_parameters
        == sum(int(np.prod(s)) for s in input_shapes(shape)) + layer.num_parameters()
    )


def test_every_loss_has_a_case():
    # the functional losses (the loss modules are thin over them; module_db holds them)
    functions = {n for n in L.__all__ if n.islower() and callable(getattr(L, n))}
    functions -= {"checked", "from_torch"}  # helpers, not losses
    covered = {loss.__name__ for loss, _, _ in loss_cases(np.random.default_rng(0)).values()}
    assert functions <= covered, functions - covered


@pytest.mark.parametrize("name", one_in(2, list(loss_cases(np.random.default_rng(0)))))
def test_gradcheck_passes_on_loss(name, rng):
    report = loss_gradcheck(name, rng)
    assert report.passed, report.table()
    # integer class targets are held fixed, float targets are differentiated too
    _, inputs, _ = loss_cases(np.random.default_rng(0))[name]
    assert report.n_parameters == sum(x.size for x in inputs if x.dtype.kind == "f")


# one row in three in the default run (layers, then losses: both kinds), every row in the
# exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "kind, name",
    one_in(
        3,
        [
            *[("layer", name) for name in layer_cases()],
            *[("loss", name) for name in loss_cases(np.random.default_rng(0))],
        ],
    ),
)
def test_backward_scaled_by_1_001_caught_on_every_row(kind, name):
    """Every layer and loss with a gradcheck row: a 0.1 % wrong backward fails it."""
    check = layer_gradcheck if kind == "layer" else loss_gradcheck
    assert not check(name, np.random.default_rng(0), backward_scale=1.001).passed


@pytest.mark.parametrize(
    "row, wrong",
    [
        ("BatchNorm1d, BatchNorm2d, BatchNorm3d", "BatchNorm3d"),
        ("InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, GroupNorm", "InstanceNorm3d affine"),
    ],
)
def test_backward_scaled_by_1_001_caught_on_a_state_layer_row(row, wrong):
    """A 0.1 % wrong backward of one layer of a multi-layer state-layer row fails the
    row, on that layer's leaves only (the rows' passing runs are the parity report's)."""
    from parity_checks.state_layers import GRADCHECKS, state_layer_gradcheck

    report = state_layer_gradcheck(GRADCHECKS[row], wrong=wrong)
    failing = {leaf.path for leaf in report.leaves if not leaf.passed}
    assert failing == {
        f"params['{wrong}']['weight']",
        f"params['{wrong}']['bias']",
        f"inputs['{wrong}']",
    }


@pytest.mark.long  # compiles a transformer twice (~10 s on a loaded machine)
def test_backward_scaled_by_1_001_caught_on_the_transformer_row():
    from parity_checks.sequence import layer_gradcheck as sequence_gradcheck

    assert not sequence_gradcheck("Transformer", backward_scale=1.001).passed


def _large_sum_of_squares(seed):
    """``mse_loss(reduction="sum")`` ≈ 1e3 with small gradient elements."""
    x = np.random.default_rng(seed).standard_normal((4, 3)) * 1e-2
    x[0, 0] = 31.6
    return (lambda x, t: L.mse_loss(x, t, reduction="sum")), x, np.zeros((4, 3))


@pytest.mark.parametrize("seed", [0, 1])
def test_rounding_of_a_large_value_is_no_false_alarm_should_pass(seed):
    fn, x, target = _large_sum_of_squares(seed)
    report = gradcheck(fn, x, target)
    assert report.passed, report.table()
    value = float(np.sum(x**2))
    assert report.value == pytest.approx(value)
    assert report.rounding == pytest.approx(4 * 2.0**-52 * value / 1e-6)
    assert f"rounding allowance {report.rounding:.2g} (|f| = {value:.6g})" in report.table()
    assert 8e-7 < report.rounding < 9e-7
    # the false alarm the allowance removes: the quotient's rounding error, ~1e-7,
    # is above the fixed atol of 1e-8
    assert not gradcheck(fn, x, target, rounding_ulps=0).passed


@pytest.mark.parametrize("seed", [0, 1])
def test_rounding_of_a_large_value_with_wrong_backward_should_fail(seed):
    fn, x, target = _large_sum_of_squares(seed)
    report = gradcheck(scaled_backward(fn, 1.001), x, target)
    assert not report.passed and report.worst[0].where.startswith("x[")


def _small_model(w, x):
    return jnp.sum(jnp.tanh(x @ w.T) ** 2)


@pytest.mark.parametrize("mode", ["full", "directions"])
def test_correct_backward_should_pass(mode, rng):
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    report = gradcheck(scaled_backward(_small_model, 1.0), w, x, mode=mode, n_directions=4)
    assert report.passed, report.table()


@pytest.mark.parametrize(
    "mode, scale", [("full", 1.001), ("directions", 1.001), ("full", 1 - 1e-5)]
)
def test_scaled_backward_should_fail(mode, scale, rng):
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    report = gradcheck(scaled_backward(_small_model, scale), w, x, mode=mode, n_directions=4)
    assert not report.passed
    worst = report.worst[0]
    assert not worst.passed and worst.abs_diff > worst.allowed
    assert "FAIL" in report.table()


def test_report_lists_worst_first_and_names_elements(rng):
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    report = gradcheck(scaled_backward(_small_model, 1.001), w, x, num_worst=3)
    ratios = [row.abs_diff / row.allowed for row in report.worst]
    assert len(ratios) == 3 and ratios == sorted(ratios, reverse=True)
    assert report.worst[0].where.startswith(("w[", "x["))
    row = report.worst[0]
    np.testing.assert_allclose(row.analytic, 1.001 * row.numeric, rtol=1e-6)


def test_refuses_float32_unless_asked(rng):
    w = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((5, 4))
    with pytest.raises(ValueError, match=r"`w` is float32.*cancellation"):
        gradcheck(_small_model, w, x)
    report = gradcheck(_small_model, w, x, allow_float32=True)
    assert report.passed
    assert any("float64 copies" in note and "w" in note for note in report.notes)


def test_turns_x64_on_and_says_so(rng):
    assert not jax.config.jax_enable_x64
    report = gradcheck(_small_model, rng.standard_normal((3, 4)), rng.standard_normal((5, 4)))
    assert any("jax_enable_x64" in note for note in report.notes)
    assert not jax.config.jax_enable_x64  # restored afterwards


def test_no_x64_note_when_already_on(x64, rng):
    report = gradcheck(_small_model, rng.standard_normal((3, 4)), rng.standard_normal((5, 4)))
    assert report.notes == []


def test_jit_and_eager_agree(rng):
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    jitted = gradcheck(_small_model, w, x, jit=True)
    eager = gradcheck(_small_model, w, x, jit=False)
    assert jitted.passed and eager.passed
    assert compare(jitted.numeric, eager.numeric, rtol=1e-6, atol=1e-8).passed
    assert compare(jitted.analytic, eager.analytic).passed


def test_bad_arguments(rng):
    w = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match="`mode`"):
        gradcheck(jnp.sum, w, mode="random")
    with pytest.raises(ValueError, match="`eps`"):
        gradcheck(jnp.sum, w, eps=0.0)
    with pytest.raises(ValueError, match=r"`rounding_ulps` \(=-1\)"):
        gradcheck(jnp.sum, w, rounding_ulps=-1)
    with pytest.raises(ValueError, match="scalar"):
        gradcheck(jnp.tanh, w)
    with pytest.raises(ValueError, match="float32"):
        gradcheck(lambda w: jnp.sum(w.astype(jnp.float32)), w)
    with pytest.raises(ValueError, match="no floating-point input"):
        gradcheck(lambda n: jnp.sum(n * 1.0), np.arange(3))


def test_a_function_that_needs_concrete_values_is_told_why_not_that_it_is_not_scalar(rng):
    """Python control flow on an array cannot be traced (jax raises a TypeError
    subclass); the error says that and how to write it, not "must return a scalar"."""

    def piecewise(w):
        return jnp.sum(w**2) if float(jnp.sum(w)) > 0 else jnp.sum(w**3)

    w = np.abs(rng.standard_normal((2, 3)))
    with pytest.raises(ValueError, match=r"cannot be traced.*jnp.where") as info:
        gradcheck(piecewise, w)
    assert "must return a scalar" not in str(info.value)

    def branchless(w):
        return jnp.where(jnp.sum(w) > 0, jnp.sum(w**2), jnp.sum(w**3))

    assert gradcheck(branchless, w).passed


# --- agreement with torch.autograd.gradcheck at the same strict tolerances -------------


def _torch_model(w, x):
    return torch.sum(torch.tanh(x @ w.T) ** 2)


@pytest.mark.parametrize("scale", [1.0, 1.001])
def test_agrees_with_torch_gradcheck(scale, rng):
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    ours = gradcheck(scaled_backward(_small_model, scale), w, x).passed
    inputs = (torch.tensor(w, requires_grad=True), torch.tensor(x, requires_grad=True))
    theirs = strict_gradcheck(torch_scaled_backward(_torch_model, scale), inputs)
    assert ours == theirs == (scale == 1.0)


def test_torch_default_tolerances_miss_a_0_1_percent_error(rng):
    """Why the strict tier: torch's defaults (atol 1e-5, rtol 1e-3) pass the planted bug."""
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    inputs = (torch.tensor(w, requires_grad=True), torch.tensor(x, requires_grad=True))
    wrong = torch_scaled_backward(_torch_model, 1.001)
    assert strict_gradcheck(wrong, inputs, atol=1e-5, rtol=1e-3)
    assert not strict_gradcheck(wrong, inputs)
    assert not gradcheck(scaled_backward(_small_model, 1.001), w, x).passed
