"""Each loss written twice — torch.nn.functional and jaxgrad.losses — values and input gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jaxgrad import losses, parity

REDUCTIONS = ("mean", "sum", "none")


def torch_value_and_input_grad(fn, input, target, **kwargs):
    x = torch.tensor(input, requires_grad=True)
    out = fn(x, torch.tensor(target), **kwargs)
    out.sum().backward()
    return out.detach().numpy(), x.grad.numpy()


def jax_value_and_input_grad(fn, input, target, **kwargs):
    out, vjp = jax.vjp(lambda x: fn(x, jnp.asarray(target), **kwargs), jnp.asarray(input))
    (grad,) = vjp(jnp.ones_like(out))
    return out, grad


def check(torch_fn, jax_fn, input, target, **kwargs):
    reference = torch_value_and_input_grad(torch_fn, input, target, **kwargs)
    candidate = jax_value_and_input_grad(jax_fn, input, target, **kwargs)
    assert candidate[0].dtype == input.dtype
    parity.assert_parity(reference, candidate)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_mse_loss(request, rng, reduction, dtype):
    if dtype == "float64":
        request.getfixturevalue("x64")
    x = rng.standard_normal((5, 3)).astype(dtype)
    y = rng.standard_normal((5, 3)).astype(dtype)
    check(F.mse_loss, losses.mse_loss, x, y, reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy_integer_targets(x64, rng, reduction, label_smoothing):
    logits = rng.standard_normal((6, 4)) * 3
    target = rng.integers(0, 4, 6)
    check(
        F.cross_entropy,
        losses.cross_entropy,
        logits,
        target,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )


def test_cross_entropy_probability_targets_and_unbatched(x64, rng):
    logits = rng.standard_normal((6, 4))
    probs = rng.dirichlet(np.ones(4), size=6)
    check(F.cross_entropy, losses.cross_entropy, logits, probs, label_smoothing=0.2)
    check(F.cross_entropy, losses.cross_entropy, logits[0], np.int64(2))


def test_cross_entropy_is_stable_for_huge_logits(x64):
    logits = np.array([[1000.0, -1000.0, 0.0]])
    check(F.cross_entropy, losses.cross_entropy, logits, np.array([1]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(x64, rng, reduction):
    probs = rng.uniform(0.01, 0.99, (7, 2))
    target = rng.integers(0, 2, (7, 2)).astype(np.float64)
    check(F.binary_cross_entropy, losses.binary_cross_entropy, probs, target, reduction=reduction)


def test_binary_cross_entropy_clamps_log_at_minus_100_like_torch(x64):
    probs = np.array([0.0, 1.0, 0.5])
    target = np.array([1.0, 0.0, 1.0])
    reference = F.binary_cross_entropy(torch.tensor(probs), torch.tensor(target), reduction="none")
    candidate = losses.binary_cross_entropy(
        jnp.asarray(probs), jnp.asarray(target), reduction="none"
    )
    parity.assert_parity(reference, candidate)
    assert float(candidate[0]) == 100.0  # -log clamped: the lesson-free fact torch documents


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("with_pos_weight", [False, True])
def test_binary_cross_entropy_with_logits(x64, rng, reduction, with_pos_weight):
    logits = rng.standard_normal((5, 3)) * 40  # far into saturation
    target = rng.integers(0, 2, (5, 3)).astype(np.float64)
    kwargs = {"reduction": reduction}
    if with_pos_weight:
        weight = rng.uniform(0.5, 3.0, 3)
        reference = torch_value_and_input_grad(
            F.binary_cross_entropy_with_logits,
            logits,
            target,
            pos_weight=torch.tensor(weight),
            **kwargs,
        )
        candidate = jax_value_and_input_grad(
            losses.binary_cross_entropy_with_logits,
            logits,
            target,
            pos_weight=jnp.asarray(weight),
            **kwargs,
        )
        parity.assert_parity(reference, candidate)
    else:
        check(
            F.binary_cross_entropy_with_logits,
            losses.binary_cross_entropy_with_logits,
            logits,
            target,
            **kwargs,
        )


def test_binary_cross_entropy_with_logits_is_finite_for_huge_float32_logits():
    """torch's stable form: e^100 overflows float32, the loss of logit −100 with target 1
    is still 100 and its gradient −1."""
    logits = np.array([-100.0, -20.0, 0.0, 20.0, 100.0], np.float32)
    target = np.array([1.0, 0.0, 1.0, 1.0, 0.0], np.float32)
    reference = torch_value_and_input_grad(
        F.binary_cross_entropy_with_logits, logits, target, reduction="none"
    )
    candidate = jax_value_and_input_grad(
        losses.binary_cross_entropy_with_logits, logits, target, reduction="none"
    )
    parity.assert_parity(reference, candidate)
    assert float(candidate[0][0]) == 100.0


@pytest.mark.parametrize("with_pos_weight", [False, True])
def test_binary_cross_entropy_with_logits_gradient_at_logit_zero(x64, with_pos_weight):
    """Zero logits (a zero-initialised head) sit on the kinks of |x| and max(−x, 0):
    torch's backward gives (w·t + 1 − t)·σ(0) − w·t there, e.g. −½ for t = 1, w = 1."""
    logits, target = np.zeros(3), np.array([1.0, 0.0, 0.25])
    kwargs = {"reduction": "none"}
    weight = np.array([2.0, 3.0, 0.5]) if with_pos_weight else np.ones(3)
    torch_kwargs = dict(kwargs, pos_weight=torch.tensor(weight)) if with_pos_weight else kwargs
    jax_kwargs = dict(kwargs, pos_weight=jnp.asarray(weight)) if with_pos_weight else kwargs
    reference = torch_value_and_input_grad(
        F.binary_cross_entropy_with_logits, logits, target, **torch_kwargs
    )
    candidate = jax_value_and_input_grad(
        losses.binary_cross_entropy_with_logits, logits, target, **jax_kwargs
    )
    parity.assert_parity(reference, candidate)
    by_hand = (weight * target + 1 - target) * 0.5 - weight * target
    parity.assert_parity(by_hand, candidate[1])


def test_bce_with_logits_pos_weight_weighs_only_the_positive_term_soft_targets(x64, rng):
    """``pos_weight`` multiplies the ``t·log σ(x)`` term only: with 0/1 targets that is
    the same as weighing the whole loss by ``1 + (w − 1)·t``, with soft targets it is not."""
    logits = rng.standard_normal((4, 3)) * 3
    target = rng.uniform(0.1, 0.9, (4, 3))  # label-smoothed / soft targets
    weight = np.array([0.5, 2.0, 3.0])
    for reduction in REDUCTIONS:
        reference = torch_value_and_input_grad(
            F.binary_cross_entropy_with_logits,
            logits,
            target,
            pos_weight=torch.tensor(weight),
            reduction=reduction,
        )
        candidate = jax_value_and_input_grad(
            losses.binary_cross_entropy_with_logits,
            logits,
            target,
            pos_weight=jnp.asarray(weight),
            reduction=reduction,
        )
        parity.assert_parity(reference, candidate)
    # by hand, one element: −(w·t·log σ(x) + (1 − t)·log(1 − σ(x)))
    x, t, w = 0.7, 0.3, 2.0
    sigma = 1 / (1 + np.exp(-x))
    expected = -(w * t * np.log(sigma) + (1 - t) * np.log(1 - sigma))
    got = losses.binary_cross_entropy_with_logits(
        jnp.array([x]), jnp.array([t]), pos_weight=jnp.array([w])
    )
    parity.assert_parity(np.float64(expected), got)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_weighted_regression_losses_reduce_as_torch(x64, rng, reduction):
    """torch's ``weight=``: mse_loss and l1_loss take the weighted mean
    ``Σ w·l / Σ w``, huber_loss the plain mean of ``w·l``. Value and input gradient."""
    x, y = rng.standard_normal((4, 3)) * 2, rng.standard_normal((4, 3))
    weight = rng.random((4, 3)) * 3  # Σ w far from the element count: the means differ
    for name, extra in (("mse_loss", {}), ("l1_loss", {}), ("huber_loss", {"delta": 0.7})):
        torch_x = torch.from_numpy(x).requires_grad_()
        out = getattr(F, name)(
            torch_x,
            torch.from_numpy(y),
            reduction=reduction,
            weight=torch.from_numpy(weight),
            **extra,
        )
        out.sum().backward()
        fn = getattr(losses, name)
        got, vjp = jax.vjp(
            lambda x: fn(  # noqa: B023
                x,
                jnp.asarray(y),
                reduction=reduction,
                weight=jnp.asarray(weight),
                **extra,  # noqa: B023
            ),
            jnp.asarray(x),
        )
        parity.assert_parity(
            (out.detach(), torch_x.grad),
            (got, vjp(jnp.ones_like(got))[0]),
            name=f"{name} {reduction}",
        )


def test_gaussian_nll_gradient_passes_the_variance_clamp_as_torch(x64, rng):
    """torch clamps ``var`` at ``eps`` in place under ``no_grad``: the value uses
    ``max(var, eps)``, and the gradient reaches the clamped entries (0 and 1e-9 here)
    as the derivative at ``eps``, not 0. Gradients w.r.t. input and var."""
    x, y = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    var = np.abs(rng.standard_normal((2, 4))) + 0.1
    var[0, 1], var[1, 2] = 0.0, 1e-9  # below eps = 1e-6
    tensors = [torch.from_numpy(t).requires_grad_() for t in (x, var)]
    out = F.gaussian_nll_loss(
        tensors[0], torch.from_numpy(y), tensors[1], full=True, reduction="sum"
    )
    out.backward()
    assert tensors[1].grad[0, 1] != 0  # torch's straight-through gradient
    value, grads = jax.jit(
        jax.value_and_grad(
            lambda x, var: losses.gaussian_nll_loss(x, y, var, full=True, reduction="sum"),
            argnums=(0, 1),
        )
    )(x, var)
    parity.assert_parity((out.detach(), tensors[0].grad, tensors[1].grad), (value, *grads))


def test_bad_reduction_and_shape_mismatch_are_clear_errors():
    x = jnp.zeros((4, 1))
    with pytest.raises(ValueError, match=r"`reduction` \(='avg'\) must be one of"):
        losses.mse_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match=r"target` shape \(4,\) must equal `input` shape \(4, 1\)"):
        losses.mse_loss(x, jnp.zeros(4))
    with pytest.raises(ValueError, match=r"`target` shape \(4, 1\) must be `input` shape"):
        losses.cross_entropy(jnp.zeros((4, 3)), jnp.zeros((4, 1), jnp.int32))
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.cross_entropy(jnp.zeros((4, 3)), jnp.zeros(4, jnp.int32), label_smoothing=1.5)
