"""Every ``module_db`` sample of every registered class, forward and gradients, float64.

One test per class (its samples are looped inside, so the report stays readable);
the harness is ``parity_tests/module_db.py``. The harness itself is checked to fail:
a wrong converter, a declared refusal jaxgrad does not raise, and a refusal that does
not name its argument are each caught.
"""

from __future__ import annotations

import dataclasses

import pytest

from jaxgrad.nn import SUPPORTED
from jaxgrad.nn import convert
from parity_tests import module_db as harness


@pytest.mark.parametrize("name", sorted(harness.REGISTRY))
def test_module_db_samples(name):
    results = harness.run_class(name)
    assert results, f"module_db has no samples for {name}"
    failed = [r for r in results if r.status == "failed"]
    assert not failed, "\n".join(f"{r.label}: {r.detail}" for r in failed)
    # a refusal is counted only when jaxgrad's error named the argument (run_sample)
    assert all(r.detail for r in results if r.status in ("refused", "skipped"))


def test_every_supported_class_in_module_db_is_registered():
    in_db = set(harness.module_infos())
    assert sorted((set(SUPPORTED) & in_db) - set(harness.REGISTRY)) == []
    assert set(harness.REGISTRY) <= in_db


def _first_sample(name, training=False):
    info = harness.module_infos()[name]
    return info, harness.samples(info, training)[0]


def test_harness_catches_a_wrong_converter(monkeypatch):
    monkeypatch.setitem(convert._CONVERTERS, "LeakyReLU",
                        lambda m: convert.LeakyReLU(negative_slope=m.negative_slope * 1.001))
    info, sample = _first_sample("LeakyReLU")
    result = harness.run_sample(info, sample, training=False)
    assert result.status == "failed" and "FAIL" in result.detail


def test_harness_fails_a_declared_refusal_that_jaxgrad_runs(monkeypatch):
    monkeypatch.setitem(harness.REGISTRY, "ReLU",
                        dataclasses.replace(harness.REGISTRY["ReLU"], refused=lambda s: "inplace"))
    info, sample = _first_sample("ReLU")
    result = harness.run_sample(info, sample, training=True)
    assert result.status == "failed" and "declares `inplace` refused" in result.detail


def test_harness_counts_a_refusal_only_when_it_names_the_argument(monkeypatch):
    def refuse(module):
        raise ValueError("`negative_slope` is not supported")

    monkeypatch.setitem(convert._CONVERTERS, "LeakyReLU", refuse)
    info, sample = _first_sample("LeakyReLU")
    named = dataclasses.replace(harness.REGISTRY["LeakyReLU"], refused=lambda s: "negative_slope")
    monkeypatch.setitem(harness.REGISTRY, "LeakyReLU", named)
    assert harness.run_sample(info, sample, training=False).status == "refused"
    other = dataclasses.replace(named, refused=lambda s: "inplace")
    monkeypatch.setitem(harness.REGISTRY, "LeakyReLU", other)
    result = harness.run_sample(info, sample, training=False)
    assert result.status == "failed" and "expected a refusal naming `inplace`" in result.detail
