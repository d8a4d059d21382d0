"""Every ``module_db`` sample of every registered class, forward and gradients, float64
(one in nine for the eight recurrent, attention and transformer classes in the default
run, one in 24 for Transformer, one in three for eight 3-d pools and norms; every sample
in the ``exhaustive`` test, which CI runs).

One test per class (its samples are looped inside, so the report stays readable);
the harness is ``jaxgrad_dev/module_db.py``. The harness itself is checked to fail:
a wrong converter, a declared refusal jaxgrad does not raise, and a refusal that does
not name its argument are each caught.
"""

from __future__ import annotations

import dataclasses

import pytest

from jaxgrad.nn import SUPPORTED
from jaxgrad.nn.capture import layers as convert
from jaxgrad_dev import module_db as harness

# 30-40 s each for all their samples on a 2-core machine (16-67 samples per mode, each
# compiled programs): the default run takes one in nine of them, the first sample of each
# mode included (~27 of the suite's worker-seconds, 77 at one in three: each class's first
# programs are most of what is left); the exhaustive test adds the rest (CI: `pytest -m
# "exhaustive or long"`)
SLOW = {
    "GRU",
    "LSTM",
    "MultiheadAttention",
    "RNN",
    "Transformer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
}
SLOW_EVERY = 9
EVERY = {
    "Transformer": 24,  # 64 samples of a whole encoder-decoder: one in 24 by default
    "TransformerDecoderLayer": 99,
}  # its first sample of each mode by default
# 1.5-3 s each for all their samples (3-d pools, the batch and group norms): one in three
# by default, the first sample of each mode included; all in the exhaustive test
MEDIUM = {
    "AdaptiveMaxPool3d",
    "AvgPool3d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "GroupNorm",
}
MEDIUM_EVERY = 3


def _every(name):
    """The default run's stride through ``name``'s samples."""
    if name in SLOW:
        return EVERY.get(name, SLOW_EVERY)
    return MEDIUM_EVERY if name in MEDIUM else 1


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(harness.REGISTRY)],
)
def test_module_db_samples(name):
    results = harness.run_class(name, every=_every(name))
    assert results, f"module_db has no samples for {name}"
    failed = [r for r in results if r.status == "failed"]
    assert not failed, "\n".join(f"{r.label}: {r.detail}" for r in failed)
    errors = harness.run_error_samples(name)  # what torch rejects, jaxgrad rejects
    assert all(r.status == "rejected" for r in errors), [
        r.desc for r in errors if r.status != "rejected"
    ]
    # a refusal is counted only when jaxgrad's error named the argument (run_sample)
    assert all(r.detail for r in results if r.status in ("refused", "skipped"))


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", sorted(SLOW | MEDIUM))
def test_module_db_every_sample(name):
    results = harness.run_class(name)
    failed = [r for r in results if r.status == "failed"]
    assert results and not failed, "\n".join(f"{r.label}: {r.detail}" for r in failed)
    assert all(r.detail for r in results if r.status in ("refused", "skipped"))


def test_every_supported_class_in_module_db_is_registered():
    in_db = set(harness.module_infos())
    assert sorted((set(SUPPORTED) & in_db) - set(harness.REGISTRY)) == []
    assert set(harness.REGISTRY) <= in_db


def _first_sample(name, training=False):
    info = harness.module_infos()[name]
    return info, harness.samples(info, training)[0]


def test_harness_catches_a_wrong_converter(monkeypatch):
    monkeypatch.setitem(
        convert._CONVERTERS,
        "LeakyReLU",
        lambda m: convert.LeakyReLU(negative_slope=m.negative_slope * 1.001),
    )
    info, sample = _first_sample("LeakyReLU")
    result = harness.run_sample(info, sample, training=False)
    assert result.status == "failed" and "FAIL" in result.detail


def test_harness_fails_a_declared_refusal_that_jaxgrad_runs(monkeypatch):
    monkeypatch.setitem(
        harness.REGISTRY,
        "ReLU",
        dataclasses.replace(harness.REGISTRY["ReLU"], refused=lambda s: "inplace"),
    )
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


def test_conformance_script_prints_counts_and_rejects_unknown_classes(capsys):
    import conformance

    assert conformance.main(["--class", "ReLU6"]) == 0
    out = capsys.readouterr().out
    assert "ReLU6" in out and "train" in out and "1 classes of module_db's" in out
    with pytest.raises(SystemExit) as info:
        conformance.main(["--class", "NoSuchLayer"])
    assert info.value.code == 2


def _gru_pair():
    """GRU's first training-mode and evaluation-mode samples: the same configuration."""
    info = harness.module_infos()["GRU"]
    return info, harness.samples(info, True)[0], harness.samples(info, False)[0]


def test_an_eval_sample_reuses_a_program_only_when_both_frameworks_modes_agree(monkeypatch):
    info, train, evaluation = _gru_pair()
    verified = {}
    assert harness.run_sample(info, train, True, verified).status == "passed"
    assert len(verified) == 1
    reused = harness.run_sample(info, evaluation, False, verified)
    assert reused.status == "passed" and "same program as GRU[train]" in reused.detail
    assert harness.run_sample(info, evaluation, False).detail == ""  # run in full

    # torch's evaluation mode computes something else: the sample runs in full, and fails
    original = harness.torch_side

    def eval_differs(module, args, kwargs):
        reference, spec, cotangents = original(module, args, kwargs)
        if not module.training:
            reference["outputs"][0] = reference["outputs"][0] * (1 + 1e-6)
        return reference, spec, cotangents

    monkeypatch.setattr(harness, "torch_side", eval_differs)
    result = harness.run_sample(info, evaluation, False, verified)
    assert result.status == "failed" and "FAIL" in result.detail


def test_an_eval_sample_whose_twin_reads_the_mode_runs_in_full(monkeypatch):
    import jaxgrad

    original = jaxgrad.nn.GRU.forward_with_state

    def eval_differs(self, params, *args, train, **kwargs):
        (output, h_n), buffers = original(self, params, *args, train=train, **kwargs)
        return (output if train else output * (1 + 1e-6), h_n), buffers

    monkeypatch.setattr(jaxgrad.nn.GRU, "forward_with_state", eval_differs)
    info, train, evaluation = _gru_pair()
    verified = {}
    assert harness.run_sample(info, train, True, verified).status == "passed"
    result = harness.run_sample(info, evaluation, False, verified)
    assert result.status == "failed" and "FAIL" in result.detail


def test_a_twin_with_active_dropout_has_a_different_program_in_each_mode(x64):
    """Dropout p=0.5 draws from the key in training mode only: the two modes' programs
    must differ (no reuse), and one mode's program is the same on two calls."""
    import torch

    import jaxgrad
    from jaxgrad_dev.layer_parity import forward_program

    torch.manual_seed(0)
    module = torch.nn.TransformerEncoderLayer(4, 2, 8, dropout=0.5).double()
    model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
    x = torch.randn(5, 2, 4, dtype=torch.float64)
    train = forward_program(model, params, buffers, (x,), {}, True)
    assert train == forward_program(model, params, buffers, (torch.randn_like(x),), {}, True)
    assert train != forward_program(model, params, buffers, (x,), {}, False)
