"""``jaxgrad.parity.compare`` against its documented rule (docs/parity.md), on leaves
that the held-out audit of issue 55 found the suite did not exercise: each expected
verdict is the rule applied by hand.

- "NaN masks are compared, never zeroed": a leaf larger than one chunk of the
  comparison (``CHUNK`` elements, the real size) whose NaN mismatch sits only in its
  first chunk still fails, as one whose mismatch sits in its last.
- "zero in exact arithmetic": a leaf's tolerance is scaled by its *neighbours* — the
  other leaves under the same parent — not by the whole tree: a near-zero bias 1e-5 off
  beside weights of ~1 fails, even where another model in the tree holds values of 1e3.
- "leaves that are themselves zero do not count" as neighbours: two near-zero sibling
  biases do not set each other's scale, so correct float32 noise on them passes.
"""

from __future__ import annotations

import numpy as np

from jaxgrad import _tiers, parity

TIER = parity.TOLERANCES["float32"]


def test_a_nan_mismatch_in_the_first_chunk_of_a_large_leaf_fails():
    size = _tiers.CHUNK + 5  # two chunks: the NaN in the first, the second identical
    reference = np.linspace(1.0, 2.0, size)
    candidate = reference.copy()
    reference[3] = np.nan  # the candidate computed a number where torch has NaN
    report = parity.compare({"w": reference}, {"w": candidate})
    (leaf,) = report.leaves
    assert not report.passed
    assert leaf.problem == "NaN masks differ (1 NaN in reference, 0 in candidate)"
    # and the other way round, the NaN on the candidate's side
    report = parity.compare({"w": candidate}, {"w": reference})
    assert report.leaves[0].problem == "NaN masks differ (0 NaN in reference, 1 in candidate)"


def _model(scale, bias_exact, bias_reference, bias_candidate):
    """``(exact, reference, candidate)`` of one model: a float32 weight of magnitude
    ``scale`` (the same on both sides) and a bias zero in exact arithmetic."""
    weight = np.array([scale, -0.5 * scale, 0.25 * scale])
    return (
        {"weight": weight, "bias": np.array(bias_exact)},
        {"weight": weight.astype(np.float32), "bias": np.array(bias_reference, np.float32)},
        {"weight": weight.astype(np.float32), "bias": np.array(bias_candidate, np.float32)},
    )


def test_zero_in_exact_arithmetic_is_scaled_by_the_leafs_own_neighbours_not_the_whole_tree():
    # model "small": weights of magnitude 1; its bias is 1e-17 in float64, float32 noise
    # of 1e-8 in the reference, and 1e-5 in the candidate: 10 tiers at its neighbours'
    # scale (1e-6 x 1), and 1000x the reference's own distance. Model "large" beside it
    # holds weights of 1e3 (its own bias exact), which must not widen that tolerance.
    small = _model(1.0, [1e-17, -2e-17], [1e-8, -1e-8], [1e-5, -1e-8])
    large = _model(1e3, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    exact, reference, candidate = ({"small": small[i], "large": large[i]} for i in range(3))
    report = parity.compare(reference, candidate, reference64=exact)
    leaves = {leaf.path: leaf for leaf in report.leaves}
    bias = leaves["['small']['bias']"]
    tolerance = TIER.atol * 1.0 + TIER.rtol * 2e-17  # the neighbours' scale: 1 (by hand)
    assert not bias.passed and "zero in exact arithmetic" in bias.problem
    assert abs(bias.headroom - (1e-5 - 1e-17) / tolerance) < 1e-3 * bias.headroom
    assert [leaf.path for leaf in report.failures()] == ["['small']['bias']"]
    # the same noise at the reference's size passes, by the zero rule
    quiet = {**candidate, "small": {**candidate["small"], "bias": reference["small"]["bias"]}}
    assert parity.compare(reference, quiet, reference64=exact).passed


def test_two_near_zero_siblings_do_not_set_each_others_scale():
    # conv1.bias and conv2.bias, both feeding BatchNorm (zero in exact arithmetic: 1e-17
    # and 2e-17), under the parent "bn_free" of one model whose weights are ~1. Zero
    # leaves do not count as neighbours: each bias is scaled by the weights (1), and
    # float32 noise of 5e-8 (0.05 of the tier at that scale) passes, although the
    # reference's own noise (1e-9) is 50 times smaller.
    exact = {
        "weight": np.array([1.0, -0.75, 0.5]),
        "bn_free": {"conv1.bias": np.array([1e-17, -1e-17]), "conv2.bias": np.array([2e-17])},
    }
    reference = {
        "weight": exact["weight"].astype(np.float32),
        "bn_free": {
            "conv1.bias": np.array([1e-9, -1e-9], np.float32),
            "conv2.bias": np.array([1e-9], np.float32),
        },
    }
    candidate = {
        "weight": reference["weight"],
        "bn_free": {
            "conv1.bias": np.array([5e-8, -5e-8], np.float32),
            "conv2.bias": np.array([-5e-8], np.float32),
        },
    }
    assert not parity.compare(reference, candidate).passed  # the tier alone fails them
    report = parity.compare(reference, candidate, reference64=exact)
    assert report.passed, report.table()
    for path in ("['bn_free']['conv1.bias']", "['bn_free']['conv2.bias']"):
        leaf = {leaf.path: leaf for leaf in report.leaves}[path]
        assert leaf.rule == "zero in exact arithmetic"
        assert abs(leaf.headroom - 5e-8 / TIER.atol) < 1e-3  # at the weights' scale, 1
