"""Gradient accumulation: explicit sum == one big batch == torch's .grad accumulation == optax.MultiSteps."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import jaxgrad.nn
import torchref
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.accumulate import accumulate_grads, leading_axis, split_batch
from jaxgrad.parity import BIT_IDENTICAL, assert_parity, compare
from torchref import accumulate as taccumulate

pytestmark = pytest.mark.usefixtures("seed")

K, MICRO = 4, 3


def _setup(rng, dtype):
    module = torchref.mlp([4, 6, 2], "tanh", dtype=getattr(torch, dtype))
    x = rng.standard_normal((K * MICRO, 4)).astype(dtype)
    y = rng.standard_normal((K * MICRO, 2)).astype(dtype)
    model, params = jaxgrad.nn.from_torch(module)

    def loss_fn(params, batch):
        bx, by = batch
        return jlosses.mse_loss(model.apply(params, bx), by)

    return module, model, params, loss_fn, x, y


def _torch_micro_batches(x, y):
    return [
        (
            torch.from_numpy(x[i * MICRO : (i + 1) * MICRO]),
            torch.from_numpy(y[i * MICRO : (i + 1) * MICRO]),
        )
        for i in range(K)
    ]


@pytest.mark.parametrize("jit", [False, True])
def test_accumulation_equals_big_batch_and_torch_float64(x64, rng, jit):
    module, _, params, loss_fn, x, y = _setup(rng, "float64")
    micro = split_batch((jnp.asarray(x), jnp.asarray(y)), K)
    accumulate = functools.partial(accumulate_grads, loss_fn)
    loss, grads = (jax.jit(accumulate) if jit else accumulate)(params, micro)
    torch_loss, torch_grads = taccumulate.accumulate_grads(
        module, torch.nn.functional.mse_loss, _torch_micro_batches(x, y)
    )
    assert_parity({"loss": torch_loss, "grads": torch_grads}, {"loss": loss, "grads": grads})
    big_loss, big_grads = jax.value_and_grad(loss_fn)(params, (jnp.asarray(x), jnp.asarray(y)))
    assert_parity({"loss": big_loss, "grads": big_grads}, {"loss": loss, "grads": grads})
    assert all(g.dtype == jnp.float64 for g in jax.tree.leaves(grads))


def test_accumulation_float32(rng):
    module, _, params, loss_fn, x, y = _setup(rng, "float32")
    loss, grads = accumulate_grads(
        loss_fn, params, split_batch((jnp.asarray(x), jnp.asarray(y)), K)
    )
    torch_loss, torch_grads = taccumulate.accumulate_grads(
        module, torch.nn.functional.mse_loss, _torch_micro_batches(x, y)
    )
    assert_parity({"loss": torch_loss, "grads": torch_grads}, {"loss": loss, "grads": grads})
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads))


def test_sum_reduction_is_torch_without_divide(x64, rng):
    module, _, params, loss_fn, x, y = _setup(rng, "float64")
    loss, grads = accumulate_grads(
        loss_fn, params, split_batch((jnp.asarray(x), jnp.asarray(y)), K), reduction="sum"
    )
    torch_loss, torch_grads = taccumulate.accumulate_grads(
        module, torch.nn.functional.mse_loss, _torch_micro_batches(x, y), reduction="sum"
    )
    assert_parity({"loss": torch_loss, "grads": torch_grads}, {"loss": loss, "grads": grads})


def test_optax_multisteps_equals_one_accumulated_step(x64, rng):
    module, _, params, loss_fn, x, y = _setup(rng, "float64")
    micro = split_batch((jnp.asarray(x), jnp.asarray(y)), K)
    # torch: accumulate with / k, then one SGD step
    taccumulate.accumulate_grads(module, torch.nn.functional.mse_loss, _torch_micro_batches(x, y))
    torch.optim.SGD(module.parameters(), lr=0.1).step()
    # jaxgrad: accumulate_grads then one step
    _, grads = accumulate_grads(loss_fn, params, micro)
    optimizer = joptim.sgd(0.1)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    stepped = optax.apply_updates(params, updates)
    torch_params = torchref.models.state_dict_numpy(module)
    assert_parity(torch_params, stepped)

    grad_fn = jax.jit(jax.grad(loss_fn))

    def multi_steps(accumulator_dtype):
        # optax.MultiSteps: k micro-steps, the update happens on the k-th
        dtype = {} if accumulator_dtype is None else {"accumulator_dtype": accumulator_dtype}
        multi = optax.MultiSteps(joptim.sgd(0.1), every_k_schedule=K, **dtype)
        update = jax.jit(multi.update)
        state, multi_params = multi.init(params), params
        for i in range(K):
            batch = jax.tree.map(lambda leaf: leaf[i], micro)  # noqa: B023
            grads = grad_fn(multi_params, batch)
            updates, state = update(grads, state, multi_params)
            multi_params = optax.apply_updates(multi_params, updates)
        return multi_params

    assert_parity(torch_params, multi_steps(jnp.float64))
    # porting pitfall: MultiSteps accumulates in float32 by default, even for float64 params
    assert not compare(torch_params, multi_steps(None)).passed


def test_optax_multisteps_float32(rng):
    module, _, params, loss_fn, x, y = _setup(rng, "float32")
    micro = split_batch((jnp.asarray(x), jnp.asarray(y)), K)
    taccumulate.accumulate_grads(module, torch.nn.functional.mse_loss, _torch_micro_batches(x, y))
    torch.optim.SGD(module.parameters(), lr=0.1).step()
    multi = optax.MultiSteps(joptim.sgd(0.1), every_k_schedule=K)
    state, multi_params = multi.init(params), params
    update, grad_fn = jax.jit(multi.update), jax.jit(jax.grad(loss_fn))
    for i in range(K):
        grads = grad_fn(multi_params, jax.tree.map(lambda leaf: leaf[i], micro))  # noqa: B023
        updates, state = update(grads, state, multi_params)
        multi_params = optax.apply_updates(multi_params, updates)
    assert_parity(torchref.models.state_dict_numpy(module), multi_params)


def test_clip_after_accumulation_in_torchs_order(x64, rng):
    # torch: backward per micro-batch -> clip_grad_norm_ -> step; jaxgrad: accumulate -> clip -> sgd
    module, _, params, loss_fn, x, y = _setup(rng, "float64")
    taccumulate.accumulate_grads(module, torch.nn.functional.mse_loss, _torch_micro_batches(x, y))
    total_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), 0.05)
    torch.optim.SGD(module.parameters(), lr=0.5).step()
    _, grads = accumulate_grads(loss_fn, params, split_batch((jnp.asarray(x), jnp.asarray(y)), K))
    assert float(joptim.global_norm(grads)) > 0.05  # clipping really happens
    optimizer = optax.chain(joptim.clip_grad_norm_transform(0.05), joptim.sgd(0.5))
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    assert_parity(torchref.models.state_dict_numpy(module), optax.apply_updates(params, updates))
    assert_parity(total_norm, joptim.global_norm(grads))


def test_lesson_two_micro_batches_equal_combined_float32():
    # lesson 004, example 5: Linear(3, 1), two micro-batches of 4 weighted by 1/2
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x1, x2 = torch.randn(4, 3), torch.randn(4, 3)
    y1, y2 = torch.randn(4, 1), torch.randn(4, 1)
    loss, grads = taccumulate.accumulate_grads(
        model, lambda out, y: ((out - y) ** 2).mean(), [(x1, y1), (x2, y2)]
    )
    model.zero_grad()
    ((model(torch.cat([x1, x2])) - torch.cat([y1, y2])) ** 2).mean().backward()
    combined = {n: p.grad for n, p in model.named_parameters()}
    report = assert_parity(combined, grads)  # torch's own two paths, float32 tier
    assert report.max_abs_err < 1e-6  # the lesson measured ~3e-8
    jmodel, params = jaxgrad.nn.from_torch(model)
    micro = (
        jnp.stack([jnp.asarray(x1.numpy()), jnp.asarray(x2.numpy())]),
        jnp.stack([jnp.asarray(y1.numpy()), jnp.asarray(y2.numpy())]),
    )
    _, jgrads = accumulate_grads(
        lambda p, b: jnp.mean((jmodel.apply(p, b[0]) - b[1]) ** 2), params, micro
    )
    assert_parity(grads, jgrads)


def test_accumulation_trap_grows_1x_2x_3x_and_jax_does_not(x64, rng):
    # lesson 002: backward() three times without zero_grad() -> norm 1x, 2x, 3x
    module = torch.nn.Linear(4, 1).double()
    x, y = rng.standard_normal((8, 4)), rng.standard_normal((8, 1))
    history = taccumulate.accumulation_trap(
        module, torch.nn.functional.mse_loss, torch.from_numpy(x), torch.from_numpy(y)
    )
    norms = np.array([h["weight"].norm().item() for h in history])
    assert_parity(np.array([1.0, 2.0, 3.0]), norms / norms[0])
    model, params = jaxgrad.nn.from_torch(module)
    grad_fn = jax.grad(lambda p: jlosses.mse_loss(model.apply(p, jnp.asarray(x)), jnp.asarray(y)))
    grads = [grad_fn(params) for _ in range(3)]
    assert_parity(grads[0], grads[2], **BIT_IDENTICAL)  # no hidden state
    running = jax.tree.map(jnp.zeros_like, params)
    for step, grad in enumerate(grads):
        running = jax.tree.map(jnp.add, running, grad)  # the explicit sum torch does
        assert_parity(history[step], running)


def test_forgetting_to_divide_doubles_learning_rate(x64, rng):
    # k = 2: the loop without "/ k" at lr equals the correct loop at 2 * lr, exactly so for SGD
    module, _, _, _, x, y = _setup(rng, "float64")
    state = torchref.models.state_dict_numpy(module)
    micro = _torch_micro_batches(x, y)[:2]
    runs = {}
    for label, divide, lr in (
        ("bug", False, 0.05),
        ("double_lr", True, 0.1),
        ("correct", True, 0.05),
    ):
        torchref.models.load_numpy(module, state)
        taccumulate.train_with_accumulation(
            module, torch.nn.functional.mse_loss, micro, steps=5, lr=lr, divide=divide
        )
        runs[label] = torchref.models.state_dict_numpy(module)
    assert_parity(runs["double_lr"], runs["bug"])
    assert not compare(runs["correct"], runs["bug"]).passed


def test_split_batch_is_torch_chunk(rng):
    """Micro-batch i holds the same examples as torch's ``x.chunk(k)[i]``: contiguous
    slices, which matters as soon as a layer sees per-micro-batch statistics."""
    x = rng.standard_normal((12, 2))
    labels = np.arange(12)
    micro_x, micro_labels = split_batch((x, labels), 4)
    for i, (chunk_x, chunk_labels) in enumerate(
        zip(torch.from_numpy(x).chunk(4), torch.from_numpy(labels).chunk(4))
    ):
        assert_parity(chunk_x, micro_x[i], **BIT_IDENTICAL)
        assert_parity(chunk_labels, micro_labels[i], **BIT_IDENTICAL)


@pytest.mark.parametrize(
    "micro_batches,error,fragment",
    [
        (
            (jnp.ones((3, 2)), jnp.ones((4, 2))),
            ValueError,
            "disagree on the leading (micro-batch) axis: [0]: 3, [1]: 4",
        ),
        ((jnp.ones(()), jnp.ones((4, 2))), ValueError, "leaf [0] is a scalar"),
        ((), ValueError, "has no array leaves"),
        ((jnp.ones((0, 2)), jnp.ones((0, 1))), ValueError, "zero micro-batches"),
        (
            [(jnp.ones((3, 2)), jnp.ones((3, 1)))] * 2,
            TypeError,
            "is a list of 2 micro-batches (torch's `for x, y in micro_batches` form)",
        ),
        (
            [{"x": jnp.ones((3, 2))}],
            TypeError,
            "jax.tree.map(lambda *xs: jnp.stack(xs), *micro_batches)",
        ),
    ],
)
def test_micro_batch_errors(micro_batches, error, fragment):
    with pytest.raises(error) as info:
        accumulate_grads(lambda p, b: jnp.sum(p), jnp.ones(2), micro_batches)
    assert fragment in str(info.value)


def test_non_scalar_loss_and_bad_reduction_raise():
    params, micro = jnp.ones(2), jnp.ones((3, 2))
    with pytest.raises(
        ValueError, match=r"must return a scalar loss per micro-batch; it returned shape \(2,\)"
    ):
        accumulate_grads(lambda p, b: p * b, params, micro)
    with pytest.raises(ValueError, match=r"`reduction` \(='max'\) must be one of"):
        accumulate_grads(lambda p, b: jnp.sum(p * b), params, micro, reduction="max")
    with pytest.raises(ValueError, match="cannot be split into k=4"):
        split_batch(jnp.ones((6, 2)), 4)
    assert leading_axis({"x": jnp.ones((5, 1)), "y": jnp.ones(5)}) == 5


def test_a_stacked_list_of_micro_batches_should_pass():
    # the fix the list error suggests gives the same result as split_batch
    x, y = jnp.arange(12.0).reshape(6, 2), jnp.arange(6.0)
    pairs = [(x[:3], y[:3]), (x[3:], y[3:])]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *pairs)
    assert leading_axis(stacked) == 2 and leading_axis([x, y]) == 6  # a list of leaves is fine
    loss_fn = lambda p, b: jnp.sum(p * b[0]) + jnp.sum(b[1])  # noqa: E731
    assert_parity(
        accumulate_grads(loss_fn, jnp.ones(2), stacked),
        accumulate_grads(loss_fn, jnp.ones(2), split_batch((x, y), 2)),
        **BIT_IDENTICAL,
    )


@pytest.mark.parametrize(
    "batch,k,error,fragment",
    [
        (
            (jnp.ones((6, 2)), jnp.ones(5)),
            2,
            ValueError,
            "`batch` leaves disagree on the leading (batch) axis: [0]: 6, [1]: 5",
        ),
        ({"x": jnp.ones((6, 2)), "n": jnp.ones(())}, 2, ValueError, "leaf ['n'] is a scalar"),
        ((jnp.ones((2, 2)),), 3, ValueError, "cannot be split into k=3 equal, non-empty"),
        ((jnp.ones((0, 2)),), 1, ValueError, "leading size 0 cannot be split"),
        ((jnp.ones((6, 2)),), 0, ValueError, "`k` (=0) must be >= 1"),
        ((jnp.ones((6, 2)),), 2.0, TypeError, "`k` must be an int, got float"),
        (jnp.ones((6, 2)), jnp.ones(6), TypeError, "split_batch((x, y), k)"),
        ((), 2, ValueError, "`batch` has no array leaves"),
    ],
)
def test_split_batch_errors(batch, k, error, fragment):
    with pytest.raises(error) as info:
        split_batch(batch, k)
    assert fragment in str(info.value)
