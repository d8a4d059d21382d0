"""The checker itself: every assertion helper has a should-pass and a should-fail twin."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxgrad import _tiers, parity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


@pytest.mark.parametrize(
    "factor,passes", [(0.9, True), (1.1, False)], ids=["just-inside", "just-outside"]
)
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
    assert parity.compare(reference, extra).structure_problems == ["not in reference: 1.weight"]


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


def _whole_leaf_errors(reference, candidate, rtol, atol):
    """The comparison's numbers computed on the whole leaf at once (by hand, numpy)."""
    finite = np.isfinite(reference)
    ref, cand = reference[finite], candidate[finite]
    abs_err = np.abs(cand - ref)
    allowed = atol + rtol * np.abs(ref)
    worst = int(np.argmax(abs_err - allowed))
    return abs_err.max(), int((abs_err > allowed).sum()), ref.size, ref[worst], cand[worst]


def test_a_leaf_is_compared_a_chunk_at_a_time_with_the_whole_leafs_numbers(monkeypatch):
    # chunks of 4 elements: the infinity, the NaN and the errors sit in different chunks,
    # and the worst error (index 29) in a later chunk than the first bad one (index 3)
    monkeypatch.setattr(_tiers, "CHUNK", 4)
    reference = np.linspace(1.0, 2.0, 37)
    reference[6], reference[13] = np.inf, np.nan
    candidate = reference.copy()
    candidate[3] += 1e-6
    candidate[29] -= 5e-6
    candidate[30] += 5e-6 * (1 - 1e-3)  # nearly as bad, after it: the first of the worst
    rtol, atol = parity.tolerance_for("float64")
    leaf = parity.compare({"w": reference}, {"w": candidate}).leaves[0]
    largest, bad, size, worst_ref, worst_cand = _whole_leaf_errors(reference, candidate, rtol, atol)
    assert leaf.max_abs_err == largest and size == 35
    assert f"{bad}/{size} elements outside" in leaf.problem and bad == 3
    assert f"reference {worst_ref:.17g}, candidate {worst_cand:.17g}" in leaf.problem
    assert worst_ref == reference[29]
    # a NaN or an infinity out of place in the last chunk still fails, counted whole
    moved = candidate.copy()
    moved[36] = np.nan
    problem = parity.compare({"w": reference}, {"w": moved}).leaves[0].problem
    assert problem == "NaN masks differ (1 NaN in reference, 2 in candidate)"
    moved[36] = -np.inf
    assert parity.compare({"w": reference}, {"w": moved}).leaves[0].problem == "infinities differ"


def test_comparing_a_large_leaf_holds_chunks_not_copies(monkeypatch):
    # measured on vgg11's 102M-element weight: whole-leaf temporaries took 7 GB; here a
    # 32 MB leaf read in chunks of 512 kB (its temporaries: about ten chunks)
    import tracemalloc

    monkeypatch.setattr(_tiers, "CHUNK", 1 << 16)
    rng = np.random.default_rng(0)
    reference = rng.standard_normal(64 * _tiers.CHUNK)
    candidate = reference * (1 + 1e-13)
    tracemalloc.start()
    try:
        report = parity.compare({"w": reference}, {"w": candidate})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.passed
    assert peak < reference.nbytes / 2, (
        f"{peak / 2**20:.0f} MB for a {reference.nbytes >> 20} MB leaf"
    )


def test_the_float32_rule_reads_a_large_leaf_in_chunks_too(monkeypatch):
    # a float32 leaf outside its tier is measured against the float64 answer (vgg19's
    # float32 gradient ran out of memory there, holding whole float64 copies)
    import tracemalloc

    monkeypatch.setattr(_tiers, "CHUNK", 1 << 16)
    rng = np.random.default_rng(1)
    exact = rng.standard_normal(64 * _tiers.CHUNK)  # the float64 answer, 32 MB
    reference = exact.astype(np.float32)
    candidate = (exact * (1 + 3e-5)).astype(np.float32)  # 3x the float32 tier off
    tracemalloc.start()
    try:
        leaf = parity.compare({"w": reference}, {"w": candidate}, reference64={"w": exact}).leaves[
            0
        ]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    allowed = 1e-6 * np.abs(exact).max() + 1e-5 * np.abs(exact)  # by hand, whole
    assert leaf.headroom == np.max(np.abs(candidate.astype(np.float64) - exact) / allowed)
    assert not leaf.passed and 2.5 < leaf.headroom < 3.5
    assert peak < exact.nbytes / 2, f"{peak / 2**20:.0f} MB for a {exact.nbytes >> 20} MB answer"


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


def _public_names(cls):
    names = [field.name for field in dataclasses.fields(cls)]
    return names + [
        n
        for n, v in vars(cls).items()
        if not n.startswith("_") and (isinstance(v, property) or callable(v))
    ]


def test_every_report_field_is_documented_in_its_docstring_and_docs_parity_md():
    section = open(os.path.join(ROOT, "docs", "parity.md")).read()
    section = section.split("## The report:", 1)[1].split("\n## ", 1)[0]
    for cls in (parity.LeafResult, parity.ParityReport):
        for name in _public_names(cls):
            assert name in cls.__doc__.split("Attributes:", 1)[1], (cls.__name__, name)
            assert f"`{name}`" in section or f"`{name}()`" in section, (cls.__name__, name)


def test_report_fields_mean_what_the_documentation_says():
    grads = {"w": np.ones((2, 2), np.float32) * 4, "b": np.ones(2, np.float32)}
    reference = {"out": np.array([2.0, 0.0, np.nan]), "grads": grads, "count": np.array(3)}
    candidate = {
        "out": np.array([2.0, 1e-13, np.nan]),
        "count": np.array(3),
        "grads": {"w": np.ones((2, 3), np.float32), "b": np.ones(2, np.float32)},
    }
    report = parity.compare(reference, candidate, name="doc")
    by_path = {leaf.path: leaf for leaf in report.leaves}
    assert list(by_path) == ["['count']", "['grads']['b']", "['grads']['w']", "['out']"]  # sorted
    out = by_path["['out']"]  # NaN compared by mask, left out; r = 0 vs 1e-13: rel inf, atol passes
    assert out.passed and out.max_abs_err == 1e-13 and out.max_rel_err == math.inf
    assert (out.rtol, out.atol, out.tier, out.tier_reason) == (1e-10, 1e-12, "float64", "dtype")
    assert out.rule == "tier" and math.isnan(out.headroom)  # no reference64: the tier only
    w = by_path["['grads']['w']"]  # stopped at the shape: nothing measured
    assert w.problem == "shape (2, 3) != reference (2, 2)" and w.shape == (2, 2) and w.rule == ""
    assert math.isnan(w.max_abs_err) and math.isnan(w.atol) and w.tier == ""
    assert by_path["['count']"].tier == "int64" and by_path["['count']"].atol == 0.0
    assert not report.passed and report.failures() == [w] and report.max_rel_err == math.inf
    assert report.dtypes == "float32,float64,int64" and report.structure_problems == []
    scaled = parity.compare(np.array([4.0, -8.0], np.float32), np.array([4.0, -8.0], np.float32))
    assert scaled.leaves[0].path == "<root>" and scaled.leaves[0].atol == pytest.approx(8e-6)
    missing = parity.compare({"a": np.ones(1), "b": np.ones(1)}, {"a": np.ones(1)})
    assert missing.structure_problems == ["missing from candidate: b"]
    assert [leaf.path for leaf in missing.leaves] == ["a"]  # a missing path has no LeafResult
    data = json.loads(report.to_json())
    assert data["leaves"][2]["max_abs_err"] is None  # NaN as null


# --- comparing nothing ---------------------------------------------------------------


def test_comparison_of_nothing_should_fail():
    for empty in ({}, [], {"params": {}}):
        report = parity.compare(empty, empty)
        assert not report.passed
        assert "nothing to compare" in report.table()
    with pytest.raises(AssertionError, match="nothing to compare"):
        parity.assert_parity({}, {})


def test_comparison_of_one_leaf_should_pass():
    assert parity.compare({"w": np.zeros(2)}, {"w": np.zeros(2)}).passed


# --- the tier of the arithmetic, whatever container holds it ---------------------------


def _float32_sums():
    """One float32 sum computed two ways whose bits differ: torch's vectorised reduction
    and a sequential float32 loop. Both are legitimate float32 results."""
    values = np.random.default_rng(3).standard_normal(4096).astype(np.float32)
    vectorised = torch.from_numpy(values).sum().item()  # a Python float, i.e. float64
    sequential = np.float32(0)
    for v in values:
        sequential = np.float32(sequential + v)
    return vectorised, float(sequential)


def test_upcast_float32_leaf_gets_float32_tier_should_pass():
    reference, candidate = _float32_sums()
    assert reference != candidate  # the bits differ: a float64-tier check would fail
    assert not parity.compare(reference, candidate, computed_in="float64").passed
    report = parity.compare({"loss": reference}, {"loss": candidate})
    assert report.passed, report.table()
    leaf = report.leaves[0]
    assert (leaf.dtype, leaf.tier, leaf.tier_reason) == (
        "float64",
        "float32",
        "float32-exact values",
    )
    assert "float64 (float32 tier)" in report.table()
    assert report.to_dict()["leaves"][0]["tier"] == "float32"


def test_upcast_float32_leaf_with_a_real_error_should_fail():
    reference, _ = _float32_sums()
    wrong = float(np.float32(reference * (1 + 1e-4)))
    report = parity.compare({"loss": reference}, {"loss": wrong})
    assert not report.passed and report.leaves[0].tier == "float32"


def test_declared_float32_computation_gets_float32_tier():
    # a float64 running total of float32 losses is not itself a float32 value
    losses = [np.float32(0.7342811), np.float32(0.51266325)]
    total = float(losses[0]) + float(losses[1])
    nudged = total * (1 + 3e-7)  # what another CPU's float32 kernels may give
    assert not parity.looks_float32(np.float64(total))
    assert not parity.compare({"running": total}, {"running": nudged}).passed
    report = parity.compare(
        {"running": total, "w": np.ones(2)},
        {"running": nudged, "w": np.ones(2)},
        computed_in={"running": "float32"},
    )
    assert report.passed, report.table()
    assert [(leaf.tier, leaf.tier_reason) for leaf in report.leaves] == [
        ("float32", "declared"),
        ("float64", "dtype"),
    ]
    assert parity.compare([total], [nudged], computed_in="float32").passed
    assert not parity.compare(
        {"running": total}, {"running": total * (1 + 1e-4)}, computed_in={"running": "float32"}
    ).passed


def test_detection_cannot_weaken_genuine_float64_checks():
    # exact small values (the lessons' 6.0, a step count, 0.375) have few significant
    # bits: they stay at the float64 tier, so a float32-sized error in them fails
    for exact in (6.0, 0.375, 3.0**5, 14.1):
        nearby = float(np.nextafter(np.float32(exact), np.float32(np.inf)))
        report = parity.compare(np.float64(exact), np.float64(nearby))
        assert not report.passed and report.leaves[0].tier == "float64", exact
    # a float64 result against a float32 one: float64 tier, failing, with a hint
    genuine = np.array([0.1, 1 / 3])
    silently_float32 = genuine.astype(np.float32).astype(np.float64)
    report = parity.compare(genuine, silently_float32)
    assert not report.passed and report.leaves[0].tier == "float64"
    assert "candidate's values are all float32 values" in report.table()
    # integers and float32 containers keep their own tiers
    assert parity.leaf_tier(np.arange(3), np.arange(3)) == ("int64", "dtype")
    assert parity.leaf_tier(np.ones(2, np.float32), np.ones(2, np.float32), "float32") == (
        "float32",
        "declared",
    )


def _float32_exact_noise(seed, scale):
    # float64 values with 24 significant bits: what a float64 gradient that is zero in
    # exact arithmetic held in OPT's tiny decoder (its key projection's bias: ~1e-17
    # beside gradients of ~1, 24 bits or fewer, so every value is a float32 value)
    values = np.random.default_rng(seed).standard_normal(8).astype(np.float32) * scale
    return values.astype(np.float64)


def test_float64_noise_around_zero_keeps_the_float64_tier():
    weight = np.random.default_rng(0).standard_normal((4, 4))
    reference = {"k.bias": _float32_exact_noise(1, 1e-17), "k.weight": weight}
    candidate = {"k.bias": _float32_exact_noise(2, 1e-17), "k.weight": weight.copy()}
    assert parity.looks_float32(reference["k.bias"])
    assert parity.looks_float32(candidate["k.bias"])
    report = parity.compare(reference, candidate)
    assert report.passed, report.table()
    bias = report.leaves[0]
    assert (bias.tier, bias.tier_reason, bias.atol) == (
        "float64",
        "zero in exact arithmetic",
        1e-12,
    )
    # alone, nothing says it is noise around zero: detected float32, held to 1e-6 of
    # its own scale, it fails (the misreading the rule removes)
    alone = parity.compare(reference["k.bias"], candidate["k.bias"])
    assert not alone.passed and alone.leaves[0].tier_reason == "float32-exact values"
    # the float64 tier still fails a real error in it
    wrong = dict(candidate, **{"k.bias": candidate["k.bias"] + 1e-9})
    assert not parity.compare(reference, wrong).passed
    # float32 noise around zero (~1e-7 of the neighbours) is still detected as float32
    float32_zero = {"k.bias": _float32_exact_noise(1, 1e-7), "k.weight": weight}
    other = {"k.bias": _float32_exact_noise(2, 1e-7), "k.weight": weight.copy()}
    leaf = parity.compare(float32_zero, other).leaves[0]
    assert (leaf.tier, leaf.tier_reason) == ("float32", "float32-exact values")


def test_significant_bits_and_looks_float32():
    bits = parity.significant_bits(np.array([6.0, 0.75, 0.0, 2.0**-12, np.float32(0.1), 0.1]))
    assert bits.tolist() == [2, 2, 0, 1, 24, 52]
    assert parity.looks_float32(np.array([np.float32(0.1), 6.0]))
    assert not parity.looks_float32(np.array([6.0, 0.5]))  # round: any precision
    assert not parity.looks_float32(np.array([np.float32(0.1), 0.1]))
    assert not parity.looks_float32(np.array([np.nan, np.inf]))
    assert not parity.looks_float32(np.ones(2, np.float32))  # only float64 holders


def test_computed_in_errors():
    with pytest.raises(ValueError, match=r"`computed_in` names 'runing'.*leaf paths: running"):
        parity.compare({"running": 1.0}, {"running": 1.0}, computed_in={"runing": "float32"})
    with pytest.raises(ValueError, match="must be one of float64, float32"):
        parity.compare({"a": 1.0}, {"a": 1.0}, computed_in="float16")
    with pytest.raises(ValueError, match="cannot hold its bits"):
        parity.compare(np.ones(2, np.float32), np.ones(2, np.float32), computed_in="float64")
    with pytest.raises(ValueError, match="`computed_in`"):
        parity.assert_parity({"a": 1.0}, {"a": 1.0}, computed_in={"b": "float32"})


def test_ambiguous_argmax_marks_near_ties_only():
    logits = np.array(
        [
            [1.0, 1.0000001, -2.0],  # a float32 near-tie
            [0.5, -0.5, 0.2],
            [3.0, 2.9999, 0.0],
        ],
        np.float32,
    )
    assert parity.ambiguous_argmax(logits).tolist() == [True, False, False]
    # at the float64 tier only (almost) exact ties are ambiguous
    assert parity.ambiguous_argmax(logits.astype(np.float64)).tolist() == [False] * 3
    assert parity.ambiguous_argmax(np.ones((2, 1), np.float32)).tolist() == [False, False]
    with pytest.raises(ValueError, match=r"shape \(n, classes\)"):
        parity.ambiguous_argmax(np.ones(3, np.float32))
