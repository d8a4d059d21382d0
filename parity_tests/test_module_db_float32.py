"""module_db samples in float32 on both sides, judged with the calibrated float32
verdict (``jaxgrad_dev/module_db.py``, ``run_sample_float32``): torch's float64 run of
each sample (the module ``.double()``, the same values, the same cotangent) is the
float64 answer; a leaf outside the float32 tier passes when jaxgrad is within the tier
of it or within ``CALIBRATION_MULTIPLE`` times torch float32's own distance from it.

A few classes here (every sample; GRU one in 18 in the default run, one in six in the
exhaustive run, CI: -m "exhaustive or long"), all of them through
``scripts/conformance.py --dtype float32``. The mode is checked to fail: a converter
wrong by 1e-4 relative (ten float32 tiers, far above torch's own rounding) is caught.
"""

from __future__ import annotations

import pytest

from jaxgrad.nn.capture import layers as convert
from jaxgrad_dev import module_db as harness

CLASSES = {"Linear": 1, "Conv2d": 1, "BatchNorm2d": 1, "LayerNorm": 1, "GRU": 18}
EXHAUSTIVE = {"GRU": 6}  # GRU's samples one in six: ~7 s


@pytest.mark.parametrize(
    "name,every",
    [
        *(pytest.param(name, every, id=name) for name, every in CLASSES.items()),
        *(
            pytest.param(name, every, marks=pytest.mark.exhaustive, id=f"{name}-one-in-{every}")
            for name, every in EXHAUSTIVE.items()
        ),
    ],
)
def test_float32_samples_pass_the_calibrated_verdict(name, every):
    results = harness.run_class(name, every=every, dtype="float32")
    assert results
    failed = [r for r in results if r.status == "failed"]
    assert not failed, "\n".join(f"{r.label}: {r.detail}" for r in failed)
    ran = [r for r in results if r.report is not None]
    assert ran and all(
        leaf.dtype in ("float32", "int32", "int64", "None") for r in ran for leaf in r.report.leaves
    ), "not run in float32"
    rules = harness.rules(results)
    assert set(rules) <= {
        "tier",
        "float64 answer",
        "reference rounding",
        "zero in exact arithmetic",
        "integer value",
    }, rules


def test_float32_mode_compares_num_batches_tracked_by_value():
    results = harness.run_class("BatchNorm2d", dtype="float32")
    assert harness.rules(results).get("integer value", 0) > 0  # int32 against int64


def test_float32_mode_catches_a_planted_mistake(monkeypatch):
    monkeypatch.setitem(
        convert._CONVERTERS,
        "LeakyReLU",
        lambda m: convert.LeakyReLU(negative_slope=m.negative_slope * 1.0001),
    )
    info = harness.module_infos()["LeakyReLU"]
    sample = harness.samples(info, True)[0]
    result = harness.run_sample_float32(info, sample, training=True)
    assert result.status == "failed" and "against the float64 answer" in result.detail, (
        result.detail
    )


def test_float32_mode_rejects_an_unknown_dtype():
    with pytest.raises(ValueError, match="`dtype`"):
        harness.run_class("Linear", dtype="float16")


def test_conformance_script_float32(capsys):
    import conformance

    assert conformance.main(["--class", "ReLU6", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "leaves of passed samples by rule: tier" in out
    assert "float32, judged against torch's float64 run" in out
