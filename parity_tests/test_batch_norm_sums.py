"""torch's batch norm with its statistics summed by ``torch.mean``: the float64 training
rule's run for BatchNorm's own rounding (``parity_checks._batch_norm_sums``).

The same computation twice: ``batch_norm_by_mean`` against ``F.batch_norm`` (output,
every gradient, the running statistics) at the float64 tier; its statistics against the
exact ones (``math.fsum``); the rule's run against torch's own step.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from parity_checks import _zoo
from parity_checks._batch_norm_sums import BatchNormByMean, batch_norm_by_mean, has_batch_norm

import jaxgrad

# How far a tree sum's statistics may lie from the exact ones, in ulps: its rounding
# grows with log2 of the values a channel holds (13 at 10,000), not with their number,
# and the running variance adds two roundings (n / (n - 1), the momentum's product).
# Measured here over 8 seeds at 10,000 and 40,000 values: at most 3. torch's kernel lies
# 54 ulps off at 10,000 (scripts/batch_norm_sums.py); the vector width of another CPU
# changes a tree sum's order, hence the margin.
TREE_ULPS = 6


def _exact_mean(x: np.ndarray) -> np.ndarray:
    """Each channel's mean of ``x`` `(N, C, *)`, summed exactly (``math.fsum``)."""
    rows = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)
    return np.array([math.fsum(row) / row.size for row in rows])


@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (2, 3, 4, 5, 6), (6, 3)])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_by_mean_is_torchs_batch_norm(shape, momentum):
    """Output, input/weight/bias gradients and both running statistics (the unbiased
    variance accumulated) agree with ``F.batch_norm`` in training mode at the float64
    tier: another summation order, not another formula."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape) * 3 + 1
    weight, bias = rng.standard_normal(3), rng.standard_normal(3)
    cotangent = torch.from_numpy(rng.standard_normal(shape))
    results = []
    for function in (F.batch_norm, batch_norm_by_mean):
        leaves = [torch.tensor(a, requires_grad=True) for a in (x, weight, bias)]
        running = [
            torch.full((3,), 0.5, dtype=torch.float64),
            torch.full((3,), 2.0, dtype=torch.float64),
        ]
        out = function(leaves[0], *running, *leaves[1:], True, momentum, 1e-5)
        (out * cotangent).sum().backward()
        results.append(
            {
                "output": out.detach().numpy(),
                "grads": [leaf.grad.numpy() for leaf in leaves],
                "running": [r.numpy() for r in running],
            }
        )
    report = jaxgrad.parity.compare(results[0], results[1], computed_in="float64")
    assert report.passed, report.table()
    assert not np.array_equal(results[1]["running"][1], [2.0] * 3)  # updated in place


def test_batch_norm_by_mean_sums_near_exactly_and_refuses_evaluation_mode():
    """At 40,000 values a channel its running mean (momentum 1: the batch mean itself) is
    within ``TREE_ULPS`` of the exact mean; evaluation mode has no batch sum to reorder and a
    single value a channel no variance: each raises, naming what to do."""
    x = np.random.default_rng(1).standard_normal((1, 2, 200, 200)) + 0.3
    running_mean = torch.zeros(2, dtype=torch.float64)
    batch_norm_by_mean(torch.from_numpy(x), running_mean, None, training=True, momentum=1.0)
    exact = _exact_mean(x)
    ulps = np.abs(running_mean.numpy() - exact) / np.spacing(np.abs(exact))
    assert np.all(ulps <= TREE_ULPS), ulps
    with pytest.raises(ValueError, match="call F.batch_norm"):
        batch_norm_by_mean(torch.from_numpy(x), None, None, training=False)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        batch_norm_by_mean(torch.ones(1, 2, dtype=torch.float64), None, None, training=True)


def test_the_mode_replaces_training_batch_norms_only():
    """``BatchNormByMean`` runs every training-mode ``F.batch_norm`` (an
    ``nn.BatchNorm2d``'s) as ``batch_norm_by_mean`` and counts it; in evaluation mode
    torch's own kernel runs, bit for bit."""
    torch.manual_seed(0)
    layer = torch.nn.BatchNorm2d(3).double()
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
    with BatchNormByMean() as mode:
        trained = layer(x)
    assert mode.calls == 1
    expected = F.batch_norm(x, None, None, layer.weight, layer.bias, True)
    assert jaxgrad.parity.compare(expected.detach().numpy(), trained.detach().numpy()).passed
    layer.eval()
    with BatchNormByMean() as mode:
        evaluated = layer(x)
    assert mode.calls == 0 and torch.equal(evaluated, layer(x))
    assert has_batch_norm(torch.nn.Sequential(torch.nn.Linear(2, 2), layer))
    assert not has_batch_norm(torch.nn.Linear(2, 2))


def _step(module, args, targets):
    """torch's training step of ``module`` (in place): ``(state before, rng state,
    record after)``."""
    optimizer = _zoo.toptim.make_optimizer("sgd", module.parameters(), **_zoo.SGD)
    start = _zoo._torch_state(module, optimizer)
    rng_state = torch.get_rng_state()
    record, _ = _zoo.torch_step(module, optimizer, [torch.from_numpy(args[0])], {}, targets)
    return start, rng_state, record


def test_the_rules_batch_norm_run_is_torchs_step_summed_otherwise():
    """``torch_noise_step(..., "BatchNorm by torch.mean")``: torch's training step again
    with the statistics summed by ``torch.mean``: on a small BatchNorm CNN every
    parameter, momentum buffer and running statistic within the float64 tier of torch's
    own step (the same loss included); a model without BatchNorm has no statistics to
    reorder (None: no run)."""
    how = "BatchNorm by torch.mean"
    assert how in _zoo.NOISE_RUNS
    torch.manual_seed(0)
    conv, head = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(64, 2)
    module = torch.nn.Sequential(conv, torch.nn.BatchNorm2d(4), torch.nn.Flatten(), head)
    plain = torch.nn.Sequential(copy.deepcopy(conv), torch.nn.Flatten(), copy.deepcopy(head))
    args = (np.random.default_rng(1).standard_normal((4, 3, 6, 6)),)
    for model in (module, plain):
        model.double().train()
        targets = _zoo._targets(model(torch.from_numpy(args[0])))
        start, rng_state, reference = _step(model, args, targets)
        run = _zoo.torch_noise_step(model, start, rng_state, args, {}, targets, how, draws=[])
        if model is plain:
            assert run is None
            continue
        report = jaxgrad.parity.compare(reference, run, computed_in="float64")
        assert report.passed, report.table()
        assert not np.array_equal(
            run["buffers"]["1.running_var"], start["buffers"]["1.running_var"]
        )


def test_the_script_measures_each_way_against_the_exact_statistics(capsys):
    """``scripts/batch_norm_sums.py``: the exact statistics of integers (every sum exact)
    are their own; ``torch.mean``'s and jaxgrad's statistics lie within ``TREE_ULPS`` of the
    exact ones at 10,000 values a channel; each shape prints a row for every way."""
    import batch_norm_sums

    whole = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    mean, variance = batch_norm_sums.exact_statistics(whole)
    by_channel = np.moveaxis(whole, 1, 0).reshape(3, -1)
    assert np.array_equal(mean, by_channel.mean(axis=1))
    assert np.array_equal(variance, by_channel.var(axis=1, ddof=1))
    x = np.random.default_rng(2).standard_normal((1, 3, 100, 100)) * 2 + 0.7
    mean, variance = batch_norm_sums.exact_statistics(x)
    found = batch_norm_sums.statistics(x)
    assert set(found) == {"torch kernel", "torch kernel, channels-last", "torch.mean", "jaxgrad"}
    for way in ("torch.mean", "jaxgrad"):
        got_mean, got_var = found[way]
        assert batch_norm_sums.ulps(got_mean, mean) <= TREE_ULPS, way
        assert batch_norm_sums.ulps(got_var, variance) <= TREE_ULPS, way
    assert batch_norm_sums.main(["--shapes", "4x2x3x3,5x2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line[:1].isdigit()]
    assert len(rows) == 4 + 3  # an image: both torch layouts; (N, C): no channels-last
