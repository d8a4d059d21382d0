"""jaxgrad.manual: every hand-written backward checked three ways.

1. against ``jax.grad`` of the plain forward rule (autodiff's own backward);
2. against central differences (``jaxgrad.gradcheck``);
3. against torch autograd on the same inputs (``torchref.manual.REFERENCES``).
Plus the independent library twins: ``jaxgrad.nn`` layers and ``jaxgrad.losses``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from parity_checks.manual import manual_vs_torch

import jaxgrad.losses as L
import jaxgrad.nn as jnn
from jaxgrad import manual
from jaxgrad.gradcheck import gradcheck
from jaxgrad.parity import assert_parity
from torchref.manual import REFERENCES

NAMES = list(manual.FUNCTIONS)


def _vjp(fn, inputs, cotangent, jit=True):
    return manual.value_and_vjp(fn, inputs, cotangent, jit=jit)


def test_every_function_has_references():
    assert set(manual.FUNCTIONS) == set(manual.PLAIN) == set(REFERENCES)


@pytest.mark.parametrize("name", NAMES)
def test_matches_jax_grad_of_plain_function(name, x64, rng):
    """Jitted (one compilation instead of one per primitive); see also the eager twin test."""
    inputs = [jnp.asarray(x) for x in manual.example_inputs(name, rng)]
    hand, plain = manual.FUNCTIONS[name], manual.PLAIN[name]
    cotangent = jnp.asarray(rng.standard_normal(jnp.shape(plain(*inputs))))
    out, grads = _vjp(hand, inputs, cotangent)
    ref_out, ref_grads = _vjp(plain, inputs, cotangent)
    assert out.dtype == jnp.float64
    assert_parity({"out": ref_out, "grads": ref_grads}, {"out": out, "grads": grads})


@pytest.mark.parametrize("name", NAMES)
def test_passes_gradcheck(name, rng):
    inputs = manual.example_inputs(name, rng)
    fn = manual.FUNCTIONS[name]
    weights = rng.standard_normal(np.shape(manual.PLAIN[name](*map(jnp.asarray, inputs))))
    report = gradcheck(lambda *a: jnp.sum(weights * fn(*a)), *inputs)
    assert report.passed, report.table()


@pytest.mark.parametrize("name", NAMES)
def test_matches_torch_autograd(name, rng):
    """The parity-report row, jitted: output and every input gradient at the float64 tier."""
    report = manual_vs_torch(name, rng)
    assert report.passed, report.table()
    assert report.dtypes == "float64"


def test_matches_library_twins(x64, rng):
    """The same functions written independently elsewhere in jaxgrad."""
    x, weight, bias = map(jnp.asarray, manual.example_inputs("linear", rng))
    layer = jnn.Linear(3, 2, dtype="float64")
    twins = {
        "linear": (
            lambda x, w, b: manual.linear(x, w, b),
            lambda x, w, b: layer.apply({"weight": w, "bias": b}, x),
            (x, weight, bias),
        ),
        "relu": (manual.relu, lambda x: jnn.ReLU().apply({}, x), (x,)),
        "sigmoid": (manual.sigmoid, lambda x: jnn.Sigmoid().apply({}, x), (x,)),
        "tanh": (manual.tanh, lambda x: jnn.Tanh().apply({}, x), (x,)),
    }
    for name, (hand, twin, args) in twins.items():
        cotangent = jnp.asarray(rng.standard_normal(twin(*args).shape))
        assert_parity(
            _vjp(twin, list(args), cotangent), _vjp(hand, list(args), cotangent), name=name
        )
    logits, target = map(jnp.asarray, manual.example_inputs("softmax_cross_entropy", rng))
    assert_parity(
        jax.jit(jax.value_and_grad(L.cross_entropy))(logits, target),
        jax.jit(jax.value_and_grad(manual.softmax_cross_entropy))(logits, target),
    )
    logits, target = map(jnp.asarray, manual.example_inputs("sigmoid_binary_cross_entropy", rng))
    both = (0, 1)
    bce = jax.jit(jax.value_and_grad(L.binary_cross_entropy_with_logits, both))
    assert_parity(
        bce(logits, target),
        jax.jit(jax.value_and_grad(manual.sigmoid_binary_cross_entropy, both))(logits, target),
    )


def test_eager_matches_jit(x64, rng):
    inputs = manual.example_inputs("layer_norm", rng)
    cotangent = rng.standard_normal(inputs[0].shape)
    assert_parity(
        _vjp(manual.layer_norm, inputs, cotangent, jit=True),
        _vjp(manual.layer_norm, inputs, cotangent, jit=False),
    )


def test_relu_gradient_at_zero_is_zero_like_torch(x64):
    assert jax.grad(lambda x: manual.relu(x).sum())(jnp.zeros(2)).tolist() == [0.0, 0.0]


def test_sigmoid_bce_backward_is_a_minus_y_over_n(x64):
    """The lessons' cancellation: no a(1 − a) factor, so a saturated wrong unit still learns."""
    logits, target = jnp.asarray([[-30.0, 0.0, 4.0]]), jnp.asarray([[1.0, 0.5, 0.0]])
    grad = jax.grad(manual.sigmoid_binary_cross_entropy)(logits, target)
    expected = (1 / (1 + np.exp(-np.asarray(logits))) - np.asarray(target)) / 3
    assert_parity(expected, grad)
    assert abs(float(grad[0, 0])) > 0.33  # σ(−30) ≈ 1e-13, yet the gradient is ≈ −1/3


def test_bad_shapes_are_named(x64):
    with pytest.raises(ValueError, match="`weight` shape"):
        manual.linear(jnp.ones((2, 3)), jnp.ones((2, 4)), jnp.ones(2))
    with pytest.raises(ValueError, match="`bias` shape"):
        manual.linear(jnp.ones((2, 3)), jnp.ones((2, 3)), jnp.ones(3))
    with pytest.raises(ValueError, match="`weight`"):
        manual.layer_norm(jnp.ones((2, 3)), jnp.ones(2), jnp.ones(3))
    with pytest.raises(ValueError, match="integer target"):
        manual.softmax_cross_entropy(jnp.ones((2, 3)), jnp.ones(2))
    with pytest.raises(ValueError, match="`target` shape"):
        manual.sigmoid_binary_cross_entropy(jnp.ones((2, 3)), jnp.ones(3))
