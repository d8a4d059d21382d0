"""jaxgrad.losses against PyTorch's own loss samples, and the silent wrong answers fixed.

``op_db`` / ``module_db`` samples: every float64 sample of a supported loss must match
torch (value and gradients at the float64 tier) or be refused with an error naming
the argument; every error input torch rejects must be rejected (the harness lives in
``scripts/parity_checks/_conformance_losses.py``, shared with
``scripts/conformance.py``).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from parity_checks import _conformance_losses as conformance

from jaxgrad import losses
from jaxgrad.parity import assert_parity

ACCEPTED = {"pass", "refused", "rejected"}


def _assert_all_accepted(outcomes):
    bad = [o for o in outcomes if o.status not in ACCEPTED]
    assert not bad, "\n".join(
        f"{o.source} {o.name}[{o.index}] {o.status}: {o.detail[:400]}" for o in bad
    )


# one sample in 18 of each loss (the first included: every loss still runs) and every
# error input in the default run (~34 worker-seconds, 56 at one in six: the first sample
# of each loss, its primitives compiled eagerly, is most of what is left); every sample
# (757 op_db samples in torch 2.13) in the exhaustive run (CI: -m "exhaustive or long")
EVERY = 18
SELECTIONS = [
    pytest.param(EVERY, marks=pytest.mark.slow, id=f"one-in-{EVERY}"),
    pytest.param(1, marks=pytest.mark.exhaustive, id="every-sample"),
]


# op_db's loss samples: each loss's first sample compiled eagerly is most of the cost at
# any stride (~25 worker-seconds at one in 18); test_losses.py holds every functional
# loss to torch in the default run, so all of these run in the exhaustive run only
@pytest.mark.parametrize(
    "every",
    [pytest.param(EVERY, marks=pytest.mark.exhaustive, id=f"one-in-{EVERY}"), SELECTIONS[1]],
)
def test_op_db_loss_samples_and_error_inputs(every):
    outcomes = conformance.op_outcomes(every=every)
    _assert_all_accepted(outcomes)
    names = {o.name for o in outcomes if o.source == "op_db"}
    assert names == {n.replace("nn.functional.", "") for n in conformance.LOSS_OPS}
    samples = [o for o in outcomes if o.source == "op_db"]
    passed = sum(o.status == "pass" for o in samples)
    assert passed >= 0.98 * len(samples) and len(samples) >= 590 // every, (passed, len(samples))
    assert any(o.source == "op_db errors" for o in outcomes)


# module_db's loss samples repeat op_db's losses as modules (test_losses_from_torch.py
# converts every loss module in the default run): all of them in the exhaustive run only
@pytest.mark.parametrize(
    "every",
    [pytest.param(EVERY, marks=pytest.mark.exhaustive, id=f"one-in-{EVERY}"), SELECTIONS[1]],
)
def test_module_db_loss_samples_and_error_inputs(every):
    outcomes = conformance.module_outcomes(every=every)
    _assert_all_accepted(outcomes)
    assert {o.name for o in outcomes} == set(losses.LOSS_MODULES)
    assert all(o.status == "pass" for o in outcomes if o.source == "module_db")


def test_the_harness_catches_a_wrong_loss(x64):
    # should-fail twin: a loss 1e-9 relative off is a failure, a vague error is not a refusal
    x = torch.randn(4, 3, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 1])
    report = conformance.compare_call(
        F.cross_entropy, lambda i, t: losses.cross_entropy(i, t) * (1 + 1e-9), (x, y), {}
    )
    assert not report.passed

    def vague(*args):
        raise ValueError("bad input")

    outcome = conformance._classify(
        "op_db", "x", 0, lambda: conformance.compare_call(F.cross_entropy, vague, (x, y), {})
    )
    assert outcome.status == "error"


# ------------------------------------------------------------ silent wrong answers


def test_default_ignore_index_mean_is_over_non_ignored_targets(x64):
    # main divided by all N: 0.822 where torch gives 1.233
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [1.5, -0.5, 0.0]])
    target = np.array([0, -100, 2])
    expected = F.cross_entropy(torch.tensor(logits), torch.tensor(target))
    got = losses.cross_entropy(jnp.asarray(logits), jnp.asarray(target))
    assert_parity(expected, got)
    by_hand = -(jax.nn.log_softmax(logits[0])[0] + jax.nn.log_softmax(logits[2])[2]) / 2
    assert abs(float(got) - float(by_hand)) < 1e-12


def test_weighted_mean_divides_by_the_weights_of_kept_targets(x64):
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [1.5, -0.5, 0.0], [0.0, 1.0, 2.0]])
    target = np.array([0, 1, 2, 1])
    weight = np.array([0.2, 3.0, 1.5])
    for kwargs in ({"ignore_index": 1}, {"label_smoothing": 0.3, "ignore_index": 2}, {}):
        expected = F.cross_entropy(
            torch.tensor(logits), torch.tensor(target), weight=torch.tensor(weight), **kwargs
        )
        got = losses.cross_entropy(
            jnp.asarray(logits), jnp.asarray(target), weight=jnp.asarray(weight), **kwargs
        )
        assert_parity(expected, got)


@pytest.mark.parametrize("bad", [3, -1])
@pytest.mark.parametrize("fn", [losses.cross_entropy, losses.nll_loss])
def test_out_of_range_class_index_raises_like_torch(fn, bad):
    logits = jnp.zeros((2, 3))
    target = jnp.array([0, bad])
    with pytest.raises((IndexError, RuntimeError)):
        getattr(F, fn.__name__)(torch.zeros(2, 3), torch.tensor([0, bad]))
    with pytest.raises(ValueError, match=r"`target` holds a class index outside \[0, 3\)"):
        fn(logits, target)
    # concrete target under grad: still checked
    with pytest.raises(ValueError, match="`target`"):
        jax.grad(lambda x: fn(x, target))(logits)


def test_out_of_range_class_index_under_jit_is_nan_and_checked_raises():
    logits = jnp.zeros((2, 3))
    target = jnp.array([0, 3])
    assert np.isnan(float(jax.jit(losses.cross_entropy)(logits, target)))
    per_sample = jax.jit(lambda x, t: losses.nll_loss(x, t, reduction="none"))(logits, target)
    assert not np.isnan(float(per_sample[0])) and np.isnan(float(per_sample[1]))
    error, value = jax.jit(losses.checked(losses.cross_entropy))(logits, target)
    with pytest.raises(Exception, match="class index outside"):
        error.throw()
    error, value = jax.jit(losses.checked(losses.cross_entropy))(logits, jnp.array([0, 2]))
    assert error.get() is None and np.isfinite(float(value))


@pytest.mark.parametrize("p", [1.5, -0.25])
def test_bce_probability_outside_unit_interval_raises_like_torch(p):
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([p, 0.5]), torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="`input` must be a probability in"):
        losses.binary_cross_entropy(jnp.array([p, 0.5]), jnp.array([1.0, 0.0]))
    jitted = jax.jit(losses.binary_cross_entropy)(jnp.array([p, 0.5]), jnp.array([1.0, 0.0]))
    assert np.isnan(float(jitted))
    error, _ = losses.checked(losses.binary_cross_entropy)(
        jnp.array([p, 0.5]), jnp.array([1.0, 0.0])
    )
    with pytest.raises(Exception, match="probability"):
        error.throw()


def test_gaussian_negative_variance_raises_like_torch():
    with pytest.raises(ValueError, match="var has negative"):
        F.gaussian_nll_loss(torch.zeros(3), torch.zeros(3), torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="`var` has negative entries"):
        losses.gaussian_nll_loss(jnp.zeros(3), jnp.zeros(3), jnp.array([1.0, -1.0, 1.0]))


def test_cross_entropy_jitted_and_not_agree(x64, rng):
    logits = jnp.asarray(rng.standard_normal((4, 3, 2)))
    target = rng.integers(0, 3, (4, 2))
    target[0, 0] = -100
    target = jnp.asarray(target)
    weight = jnp.asarray(rng.uniform(0.5, 2.0, 3))

    def fn(x):
        return losses.cross_entropy(x, target, weight=weight, label_smoothing=0.1)

    assert_parity(
        jax.value_and_grad(fn)(logits), jax.jit(jax.value_and_grad(fn))(logits), rtol=0, atol=0
    )


# --------------------------------------------------------------------- modules


@pytest.mark.parametrize("name", sorted(losses.LOSS_MODULES))
def test_loss_module_signatures_are_torchs(name):
    ours = inspect.signature(losses.LOSS_MODULES[name]).parameters
    theirs = dict(inspect.signature(getattr(torch.nn, name).__init__).parameters)
    theirs.pop("self")
    assert list(ours) == list(theirs)
    for arg, parameter in ours.items():
        assert parameter.default == theirs[arg].default, (arg, parameter.default)
        assert parameter.kind == theirs[arg].kind, arg


def test_loss_module_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`size_average`"):
        losses.CrossEntropyLoss(size_average=True)
    with pytest.raises(ValueError, match="`reduction`"):
        losses.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="`delta`"):
        losses.HuberLoss(delta=0.0)
    with pytest.raises(TypeError, match="`delta`"):
        losses.HuberLoss(delta=1j)
    with pytest.raises(ValueError, match="unsupported loss module TripletMarginLoss"):
        losses.from_torch(torch.nn.TripletMarginLoss())


def test_from_torch_copies_weight_buffers(x64):
    weight = torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
    module = torch.nn.CrossEntropyLoss(weight=weight, ignore_index=1, label_smoothing=0.2)
    twin = losses.from_torch(module)
    assert isinstance(twin, losses.CrossEntropyLoss)
    assert twin.ignore_index == 1 and twin.label_smoothing == 0.2
    np.testing.assert_array_equal(twin.weight, weight.numpy())


def test_bad_loss_arguments_name_the_argument():
    x = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="`weight` shape"):
        losses.cross_entropy(x, jnp.array([0, 1]), weight=jnp.ones(2))
    with pytest.raises(ValueError, match="`ignore_index`"):
        losses.cross_entropy(x, jnp.ones((2, 3)), ignore_index=1)
    with pytest.raises(TypeError, match="`target`"):
        losses.cross_entropy(x, jnp.ones((2, 3), jnp.int32))
    with pytest.raises(ValueError, match="`reduction`"):
        losses.kl_div(x, x, reduction="avg")
    with pytest.raises(ValueError, match="`beta`"):
        losses.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(ValueError, match="`var` shape"):
        losses.gaussian_nll_loss(x, x, jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="`pos_weight` shape"):
        losses.binary_cross_entropy_with_logits(x, x, pos_weight=jnp.ones(2))
    with pytest.raises(ValueError, match="`target` length"):
        losses.cosine_embedding_loss(x, x, jnp.ones(3))


def test_bce_gradient_at_saturated_probabilities_is_torchs(x64):
    # torch differentiates with its own formula, not through the log clamp
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.3])
    t = np.array([1.0, 0.0, 0.0, 1.0, 0.6])
    conformance_report = conformance.compare_call(
        lambda a, b: F.binary_cross_entropy(a, b, reduction="none"),
        lambda a, b: losses.binary_cross_entropy(a, b, reduction="none"),
        (torch.tensor(p), torch.tensor(t)),
        {},
    )
    assert conformance_report.passed, conformance_report.table()
