"""The checker itself: every assertion helper has a should-pass and a should-fail twin."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxgrad import parity


def tree(dtype="float64", scale=1.0):
    rng = np.random.default_rng(0)
    return {
        "0.weight": (rng.standard_normal((4, 3)) * scale).astype(dtype),
        "0.bias": (rng.standard_normal(4) * scale).astype(dtype),
    }


def test_identical_trees_pass(x64):
    report = parity.compare(tree(), {k: jnp.asarray(v) for k, v in tree().items()})
    assert report.passed
    assert report.max_abs_err == 0.0


def test_off_by_one_part_in_1e5_fails_float64(x64):
    candidate = {k: v * (1 + 1e-5) for k, v in tree().items()}
    report = parity.compare(tree(), candidate)
    assert not report.passed
    assert all("outside rtol=1e-10" in leaf.problem for leaf in report.failures())
    with pytest.raises(AssertionError, match="0.weight"):
        parity.assert_parity(tree(), candidate)


def test_float64_tier_boundary():
    reference = np.array([1.0, 2.0])
    inside = reference * (1 + 5e-11)  # rtol 1e-10 admits half of it
    outside = reference * (1 + 5e-10)
    assert parity.compare(reference, inside).passed
    assert not parity.compare(reference, outside).passed


def test_float32_tier_scales_atol_with_reference_magnitude():
    reference = np.array([1000.0, 0.0], dtype=np.float32)
    # atol = 1e-6 * 1000 = 1e-3 absolute for the zero element
    assert parity.compare(reference, np.array([1000.0, 5e-4], np.float32)).passed
    assert not parity.compare(reference, np.array([1000.0, 5e-3], np.float32)).passed
    assert not parity.compare(reference, np.array([1000.5, 0.0], np.float32)).passed


# The error each tier allows an element, |c − r| ≤ atol + rtol·|r|, written out by hand.
TIER_BOUNDARIES = {
    "float64 rtol": ("float64", [1e6], 1e-10 * 1e6 + 1e-12),
    "float64 atol": ("float64", [0.0], 1e-12),
    "float32 rtol": ("float32", [1000.0], 1e-5 * 1000 + 1e-6 * 1000),  # at max|reference|
    "float32 atol": ("float32", [1000.0, 0.0], 1e-6 * 1000),  # scaled by max|reference|
}


@pytest.mark.parametrize("factor,passes", [(0.9, True), (1.1, False)],
                         ids=["just-inside", "just-outside"])
@pytest.mark.parametrize("tier", TIER_BOUNDARIES)
def test_each_tier_boundary(tier, factor, passes):
    """10 % inside each tier's allowed error passes, 10 % outside fails: a loosened or
    tightened tolerance (rtol 1e-5 → 1e-4, atol unscaled…) cannot go unnoticed."""
    dtype, values, allowed = TIER_BOUNDARIES[tier]
    reference = np.array(values, dtype)
    candidate = np.array(values, np.float64)
    candidate[-1] += factor * allowed
    candidate = candidate.astype(dtype)
    # the perturbation survives rounding to the tier's dtype to within 1 %
    assert abs(float(candidate[-1]) - values[-1]) == pytest.approx(factor * allowed, rel=1e-2)
    assert parity.compare(reference, candidate).passed is passes


def test_structure_compared_before_values():
    reference = tree()
    missing = {"0.weight": reference["0.weight"]}
    report = parity.compare(reference, missing)
    assert not report.passed
    assert report.structure_problems == ["missing from candidate: 0.bias"]
    extra = {**reference, "1.weight": np.zeros(2)}
    assert parity.compare(reference, extra).structure_problems == [
        "not in reference: 1.weight"
    ]


def test_shape_and_dtype_compared_before_values():
    reference = tree()
    transposed = {**reference, "0.weight": reference["0.weight"].T}
    assert "shape (3, 4) != reference (4, 3)" in parity.compare(reference, transposed).table()
    downcast = {k: v.astype(np.float32) for k, v in reference.items()}
    report = parity.compare(reference, downcast)
    assert not report.passed
    assert "dtype float32 != reference float64" in report.table()


def test_nan_masks_compared_never_zeroed():
    reference = np.array([1.0, np.nan, 3.0])
    assert parity.compare(reference, reference.copy()).passed
    assert not parity.compare(reference, np.array([1.0, 2.0, 3.0])).passed
    assert not parity.compare(np.array([1.0, 2.0, 3.0]), reference).passed
    assert not parity.compare(np.array([np.inf]), np.array([-np.inf])).passed


def test_bit_identical_tier():
    reference = np.array([1.0, 2.0])
    assert parity.compare(reference, reference.copy(), **parity.BIT_IDENTICAL).passed
    nudged = np.nextafter(reference, 3.0)
    assert not parity.compare(reference, nudged, **parity.BIT_IDENTICAL).passed
    assert parity.compare(reference, nudged).passed  # the float64 tier admits 1 ulp


def test_reads_torch_tensors_and_none_leaves():
    weight = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    reference = {"weight": weight, "frozen": None}
    assert parity.compare(reference, {"weight": weight.detach().numpy(), "frozen": None}).passed
    report = parity.compare(reference, {"weight": weight.detach().numpy(), "frozen": np.zeros(2)})
    assert not report.passed
    assert "reference is None" in report.table()


def test_none_leaves_of_nested_trees_are_compared_not_dropped():
    """torch's frozen ``.grad`` is None inside nested records too ({"grads": {...}})."""
    reference = {"grads": {"0.weight": None, "2.weight": np.ones(2)}}
    same = parity.compare(reference, {"grads": {"0.weight": None, "2.weight": np.ones(2)}})
    assert same.passed and "['grads']['0.weight']" in [leaf.path for leaf in same.leaves]
    report = parity.compare(reference, {"grads": {"0.weight": np.zeros(2), "2.weight": np.ones(2)}})
    assert not report.passed
    assert "reference is None" in report.table()


def test_nested_pytrees_use_key_paths():
    reference = {"params": tree(), "step": np.int64(3)}
    candidate = {"params": tree(), "step": np.int64(4)}
    report = parity.compare(reference, candidate)
    assert not report.passed
    assert [leaf.path for leaf in report.failures()] == ["['step']"]


def test_integers_compared_exactly_and_half_precision_needs_explicit_tolerance():
    assert not parity.compare(np.array([1, 2]), np.array([1, 3])).passed
    half = np.array([1.0], np.float16)
    with pytest.raises(ValueError, match="pass `rtol` and `atol` explicitly"):
        parity.compare(half, half)
    assert parity.compare(half, half, rtol=1e-3, atol=0.0).passed


def test_report_renders_as_table_and_json():
    report = parity.compare(tree(), {k: v * (1 + 1e-5) for k, v in tree().items()}, name="demo")
    text = report.table()
    assert text.splitlines()[0] == "demo"
    assert "FAIL" in text.splitlines()[-1]
    data = json.loads(report.to_json())
    assert data["passed"] is False
    assert {leaf["path"] for leaf in data["leaves"]} == {"0.weight", "0.bias"}
    assert data["leaves"][0]["max_rel_err"] == pytest.approx(1e-5, rel=1e-6)
