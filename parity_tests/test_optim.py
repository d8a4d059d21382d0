"""jaxgrad.optim against torch.optim: trajectories of params and state, defaults, conventions."""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from parity_checks.optimizers import (
    CONFIGS,
    FLOAT32_CONFIGS,
    config_label,
    fixed_grads_trajectories,
    optimizer_parity,
)

from jaxgrad import optim as joptim
from jaxgrad.parity import BIT_IDENTICAL, assert_parity, compare
from parity_tests._sampling import one_in

pytestmark = pytest.mark.usefixtures("seed")


# one configuration in two in the default run (sgd, sgd nesterov, adam with options,
# rmsprop), all eight in the exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize("name,hyper", one_in(2, CONFIGS), ids=[config_label(*c) for c in CONFIGS])
def test_trajectory_float64_100_steps(x64, name, hyper):
    report = optimizer_parity(name, hyper, "float64", 100)
    assert report.passed, report.table()
    assert {leaf.dtype for leaf in report.leaves} == {"float64"}
    # params, loss and at least one state tensor per parameter were compared
    assert any("state" in leaf.path for leaf in report.leaves) or (
        name == "sgd" and "momentum" not in hyper
    )


@pytest.mark.parametrize(
    "name,hyper", FLOAT32_CONFIGS, ids=[config_label(*c) for c in FLOAT32_CONFIGS]
)
def test_trajectory_float32_10_steps(name, hyper):
    report = optimizer_parity(name, hyper, "float32", 10)
    assert report.passed, report.table()
    assert {leaf.dtype for leaf in report.leaves} == {"float32"}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name,hyper", CONFIGS, ids=[config_label(*c) for c in CONFIGS])
def test_updates_for_given_gradients_jitted_and_not(x64, name, hyper, jit):
    reference, candidate = fixed_grads_trajectories(name, hyper, jit=jit)
    assert_parity(reference, candidate)


@pytest.mark.parametrize(
    "name,torch_cls",
    [
        ("sgd", torch.optim.SGD),
        ("adam", torch.optim.Adam),
        ("adamw", torch.optim.AdamW),
        ("rmsprop", torch.optim.RMSprop),
    ],
)
def test_argument_names_and_defaults_are_torchs(name, torch_cls):
    ours = inspect.signature(getattr(joptim, name)).parameters
    theirs = inspect.signature(torch_cls.__init__).parameters
    for arg, parameter in ours.items():
        assert arg in theirs, f"{name}: torch has no argument {arg!r}"
        expected = theirs[arg].default
        assert parameter.default == expected, (name, arg, parameter.default, expected)


def test_sgd_momentum_buffer_starts_at_first_gradient(x64):
    # torch: buf = grad on step 1 (not (1 - dampening) * grad from a zero buffer)
    params = {"w": jnp.array([1.0, -2.0])}
    grads = {"w": jnp.array([0.5, 0.25])}
    optimizer = joptim.sgd(lr=0.1, momentum=0.9, dampening=0.5)
    _, state = optimizer.update(grads, optimizer.init(params), params)
    buffer = joptim.torch_style_state(state)["w"]["momentum_buffer"]
    assert_parity(np.array([0.5, 0.25]), buffer, **BIT_IDENTICAL)
    _, state = optimizer.update(grads, state, params)
    buffer = joptim.torch_style_state(state)["w"]["momentum_buffer"]
    # hand derivation of step 2: 0.9 * g + 0.5 * g = 1.4 * g
    assert_parity(np.array([0.7, 0.35]), buffer)


def _differs_from_torch(name, hyper, other):
    reference, ours = fixed_grads_trajectories(name, hyper)
    assert_parity(reference, ours)
    _, theirs = fixed_grads_trajectories(name, hyper, jax_optimizer=other)
    return not compare(reference["params"], theirs["params"]).passed


def test_optax_trace_differs_from_torch_with_dampening(x64):
    # optax.trace starts from zeros and has no dampening
    assert _differs_from_torch(
        "sgd", dict(lr=0.1, momentum=0.9, dampening=0.3), optax.sgd(0.1, momentum=0.9)
    )


def test_rmsprop_eps_outside_sqrt_unlike_optax(x64):
    assert _differs_from_torch(
        "rmsprop", dict(lr=1e-2, eps=1e-2), optax.rmsprop(1e-2, decay=0.99, eps=1e-2)
    )


def test_centered_rmsprop_rounds_square_avg_minus_grad_avg_squared_once_like_torch(x64):
    """``square_avg − grad_avg²`` nearly cancels when the gradient is steady; torch forms
    it with ``addcmul(grad_avg, grad_avg, value=-1)``, an FMA on CPU (one rounding).

    One step from a state loaded into both optimizers, built so that every other
    operation of the step is exact (α = ½, a gradient with 11 significant bits, 52-bit
    averages): the new averages are ``A' = (A + g)/2`` and ``S' = A'²·(1 + ~1e-8)``, and
    only the rounding of ``S' − A'²`` is left to differ — rounding ``A'²`` first is off
    by ~1e-8 relative.
    """
    rng = np.random.default_rng(0)
    old_avg = np.round(rng.uniform(1.0, 2.0, (3, 4)) * 2.0**51) / 2.0**51
    grad = np.round(old_avg * 2.0**10) / 2.0**10  # g² is exact
    new_avg = (old_avg + grad) / 2  # exact
    new_square = np.round(new_avg**2 * (1 + 1e-8 * rng.uniform(1, 2, (3, 4))) * 2.0**50) / 2.0**50
    old_square = 2 * new_square - grad**2  # exact: S' = S/2 + g²/2 with no rounding
    start = rng.standard_normal((3, 4))
    hyper = dict(lr=1e-2, alpha=0.5, centered=True)
    weight = torch.tensor(start, requires_grad=True)
    torch_optimizer = torch.optim.RMSprop([weight], **hyper)
    torch_optimizer.state[weight] = {
        "step": torch.tensor(3.0),
        "square_avg": torch.tensor(old_square),
        "grad_avg": torch.tensor(old_avg),
    }
    weight.grad = torch.tensor(grad)
    torch_optimizer.step()
    optimizer = joptim.rmsprop(**hyper)
    params = {"w": jnp.asarray(start)}
    state = optimizer.init(params)
    state = (
        state[0]._replace(
            square_avg={"w": jnp.asarray(old_square)}, grad_avg={"w": jnp.asarray(old_avg)}
        ),
    ) + tuple(state[1:])
    updates, state = optimizer.update({"w": jnp.asarray(grad)}, state, params)
    assert_parity(
        {
            "square_avg": torch_optimizer.state[weight]["square_avg"],
            "grad_avg": torch_optimizer.state[weight]["grad_avg"],
        },
        {"square_avg": state[0].square_avg["w"], "grad_avg": state[0].grad_avg["w"]},
        **BIT_IDENTICAL,
    )  # the averages are exact on both sides
    assert_parity({"w": weight.detach()}, optax.apply_updates(params, updates))


def test_adamw_default_decay_is_torchs_not_optaxs(x64):
    assert inspect.signature(joptim.adamw).parameters["weight_decay"].default == 1e-2
    assert _differs_from_torch("adamw", {}, optax.adamw(1e-3))  # optax: 1e-4


def test_adam_weight_decay_is_coupled_not_decoupled(x64):
    hyper = dict(lr=1e-2, weight_decay=0.1)
    assert _differs_from_torch("adam", hyper, joptim.adamw(lr=1e-2, weight_decay=0.1))


def test_step_counter_matches_torch(x64):
    params = {"w": jnp.ones(3)}
    optimizer = joptim.adam()
    state = optimizer.init(params)
    for _ in range(7):
        _, state = optimizer.update({"w": jnp.ones(3)}, state, params)
    w = torch.ones(3, requires_grad=True)
    torch_opt = torch.optim.Adam([w])
    for _ in range(7):
        w.grad = torch.ones(3)
        torch_opt.step()
    assert int(joptim.torch_style_state(state)["w"]["step"]) == int(torch_opt.state[w]["step"])


def test_float64_state_dtypes(x64):
    params = {"w": jnp.ones(3, jnp.float64)}
    for factory in (
        joptim.sgd(0.1, momentum=0.9),
        joptim.adam(),
        joptim.adamw(),
        joptim.rmsprop(momentum=0.5, centered=True),
    ):
        updates, state = factory.update(params, factory.init(params), params)
        assert updates["w"].dtype == jnp.float64
        for field, value in joptim.torch_style_state(state)["w"].items():
            if field != "step":
                assert value.dtype == jnp.float64, field


@pytest.mark.parametrize(
    "call,error,fragment",
    [
        (lambda: joptim.sgd(lr=-1.0), ValueError, "`lr` (=-1.0) must be >= 0"),
        (lambda: joptim.sgd(lr="fast"), TypeError, "`lr` (='fast') must be a number"),
        (lambda: joptim.sgd(0.1, nesterov=True), ValueError, "`nesterov=True` requires `momentum`"),
        (
            lambda: joptim.adam(betas=(0.9, 1.0)),
            ValueError,
            "`betas[1]` (=1.0) must be >= 0.0 and < 1.0",
        ),
        (lambda: joptim.adam(betas=0.9), TypeError, "`betas` (=0.9) must be a pair"),
        (lambda: joptim.rmsprop(eps=-1e-8), ValueError, "`eps` (=-1e-08) must be >= 0"),
    ],
)
def test_bad_hyperparameters_raise_clear_errors(call, error, fragment):
    with pytest.raises(error) as info:
        call()
    assert fragment in str(info.value)


def test_adamw_update_without_params_raises():
    optimizer = joptim.adamw()
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="needs `params`"):
        optimizer.update(params, optimizer.init(params))


def test_trajectory_check_should_fail_for_a_wrong_optimizer(x64):
    # the check can fail: a learning rate 0.1 % off is caught
    assert _differs_from_torch("adam", dict(lr=1e-2), joptim.adam(lr=1e-2 * 1.001))


def test_optax_adam_without_weight_decay_already_matches_torch(x64):
    # the difference is only in weight decay and AdamW's default: plain Adam agrees
    assert not _differs_from_torch("adam", dict(lr=1e-2, eps=1e-3), optax.adam(1e-2, eps=1e-3))
