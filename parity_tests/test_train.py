"""jaxgrad.train's step, epoch and evaluation against torch's loop, and their options."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from parity_checks.training import SIZES, make_data, trajectories

import jaxgrad
import torchref
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.parity import BIT_IDENTICAL, ambiguous_argmax, assert_parity, compare
from jaxgrad.train import (
    Trainer,
    build_optimizer,
    data_parallel_mesh,
    evaluate,
    make_train_epoch,
    make_train_step,
    select_devices,
    shard_batch,
)
from torchref import optim as toptim
from torchref import train as ttrain


@pytest.mark.parametrize("optimizer,jit,steps", [("sgd", True, 5), ("adam", False, 3)])
def test_trajectory_matches_torch_float64(x64, optimizer, jit, steps):
    reference, candidate = trajectories(optimizer, "float64", steps=steps, jit=jit)
    assert candidate["params"]["0.weight"].dtype == np.float64
    assert candidate["loss"].dtype == np.float64
    assert_parity(reference, candidate)


def test_accumulation_and_clipping_match_torch_float64(x64):
    reference, candidate = trajectories(
        "adam", "float64", steps=4, batch_size=4, accumulate=4, clip=0.5
    )
    assert_parity(reference, candidate)


def test_weight_decay_trains_like_torch(x64):
    """Decay needs the parameters inside the step: AdamW's decoupled decay gives torch's
    weights after two steps."""
    name, hyper = "adamw", {"lr": 1e-2, "weight_decay": 0.1}
    torch.manual_seed(3)
    module = torchref.mlp(SIZES, "tanh", dtype=torch.float64)
    model, params = jaxgrad.nn.from_torch(module)
    x, y = make_data("float64")
    torch_opt = toptim.make_optimizer(name, module.parameters(), **hyper)
    opt = getattr(joptim, name)(**hyper)
    step = make_train_step(model, jlosses.cross_entropy, opt)
    state = opt.init(params)
    for batch in (slice(0, 16), slice(16, 32)):
        ttrain.train_step(
            module,
            torch_opt,
            torch.nn.functional.cross_entropy,
            torch.from_numpy(x[batch]),
            torch.from_numpy(y[batch]),
        )
        params, state, _ = step(params, state, (x[batch], y[batch]))
    assert_parity(torchref.state_dict_numpy(module), model.state_dict(params))


def test_trajectory_check_catches_a_wrong_learning_rate(x64):
    """_should_fail: torch at lr 0.1, jax at lr 0.1·1.001 must not pass."""
    reference, candidate = trajectories("sgd", "float64", steps=2, jax_lr_scale=1.001)
    report = compare(reference, candidate)
    assert not report.passed
    assert any(f.path.startswith("['params']") for f in report.failures())


def _setup(dtype="float32", optimizer=None):
    torch.manual_seed(1)
    module = torchref.mlp(SIZES, "tanh", dtype=getattr(torch, dtype))
    model, params = jaxgrad.nn.from_torch(module)
    optimizer = optimizer or joptim.sgd(lr=0.1, momentum=0.9)
    x, y = make_data(dtype)
    return module, model, params, optimizer, x, y


def test_fused_epoch_equals_step_loop():
    """lax.scan over the steps gives what calling the jitted step in a loop gives."""
    _, model, params, opt, x, y = _setup()
    idx = np.stack(jaxgrad.data.batch_indices(len(x), 8, seed=0, epoch=0, drop_last=True))
    step = make_train_step(model, jlosses.cross_entropy, opt, donate=False)
    looped, state, losses = params, opt.init(params), []
    for i in idx:
        looped, state, metrics = step(looped, state, (x[i], y[i]))
        losses.append(metrics["loss"])
    epoch = make_train_epoch(model, jlosses.cross_entropy, opt, donate=False)
    fused, _, metrics = epoch(params, opt.init(params), (x[idx], y[idx]))
    assert metrics["loss"].shape == (len(idx),)
    assert metrics["grads_finite"]["0.weight"].shape == (len(idx),)
    # Same float32 ops, but XLA may fuse a scan body differently from a lone step:
    # the float32 tier, not bit-identity.
    assert_parity(
        {"params": looped, "loss": np.stack(losses)}, {"params": fused, "loss": metrics["loss"]}
    )


@pytest.mark.parametrize("case", ["finite", "nan input", "huge finite"])
def test_step_metrics_are_the_direct_computations(case):
    """grad_norm is global_norm(grads) (float32 tier), and grads_finite each parameter's
    jnp.all(jnp.isfinite(g)), computed independently here: also when one input is NaN
    (non-finite gradients) and when the gradients are finite but their sums of squares
    overflow float32 (the loss scaled by 1e30: the step reads only the norms unless
    they are non-finite, then the gradients themselves)."""
    _, model, params, opt, x, y = _setup()
    x, y = np.array(x[:8]), y[:8]
    if case == "nan input":
        x[0, 0] = np.nan
    scale = 1e30 if case == "huge finite" else 1.0

    def loss_fn(outputs, targets):
        return scale * jlosses.cross_entropy(outputs, targets)

    step = make_train_step(model, loss_fn, opt, donate=False)
    _, _, metrics = step(params, opt.init(params), (x, y))
    grads = jax.grad(lambda p: loss_fn(model.apply(p, x), y))(params)
    expected = {k: bool(jnp.all(jnp.isfinite(g))) for k, g in grads.items()}
    assert {k: bool(v) for k, v in metrics["grads_finite"].items()} == expected
    norm = np.asarray(jax.jit(joptim.global_norm)(grads))
    # two jitted programs may sum in different orders: the float32 tier, NaN and ±∞
    # where the reference has them
    assert_parity({"grad_norm": norm}, {"grad_norm": np.asarray(metrics["grad_norm"])})
    # each case is what it claims to be
    assert all(expected.values()) == (case != "nan input")
    assert np.isfinite(norm) == (case == "finite")


def test_frozen_parameters_stay_bit_identical_and_buffers_are_donated():
    _, model, params, _, x, y = _setup()
    opt = build_optimizer(joptim.adam(lr=1e-2), clip=1.0, frozen=["0"])
    step = make_train_step(model, jlosses.cross_entropy, opt)
    first = jax.tree.map(jnp.array, params)  # a copy the step may consume
    new, state = first, opt.init(first)
    for _ in range(3):
        new, state, _ = step(new, state, (x[:16], y[:16]))
    assert first["0.weight"].is_deleted()  # donated: updated in place
    assert_parity(
        {k: params[k] for k in ("0.weight", "0.bias")},
        {k: new[k] for k in ("0.weight", "0.bias")},
        **BIT_IDENTICAL,
    )
    assert not np.array_equal(np.asarray(params["2.weight"]), np.asarray(new["2.weight"]))


def test_clip_norm_counts_only_trainable_parameters_like_torch(x64):
    """torch clips over the trainable parameters: a frozen one has no ``.grad`` to count.

    The clip threshold sits below the trainable gradients' norm, so the step is
    clipped; counting the frozen layer's gradients too would shrink it further.
    """
    torch.manual_seed(2)
    module = torchref.mlp(SIZES, "tanh", dtype=torch.float64)
    model, params = jaxgrad.nn.from_torch(module)
    x, y = make_data("float64")
    trainable = ttrain.freeze(module, ["0.weight", "0.bias"])
    ttrain.train_step(
        module,
        torch.optim.SGD(trainable, lr=0.5),
        torch.nn.functional.cross_entropy,
        torch.from_numpy(x[:16]),
        torch.from_numpy(y[:16]),
        clip=0.05,
    )
    clipped_norm = float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in trainable]))
    )
    assert clipped_norm == pytest.approx(0.05, rel=1e-4)  # the clip was active
    opt = build_optimizer(joptim.sgd(lr=0.5), clip=0.05, frozen=["0"])
    step = make_train_step(model, jlosses.cross_entropy, opt, jit=False)
    new, _, _ = step(params, opt.init(params), (x[:16], y[:16]))
    assert_parity(torchref.state_dict_numpy(module), model.state_dict(new))


def test_accumulate_equals_one_big_batch():
    """Mean of K equal micro-batch means == the big batch's mean: same gradient."""
    _, model, params, opt, x, y = _setup()
    big = make_train_step(model, jlosses.cross_entropy, opt, donate=False)
    acc = make_train_step(model, jlosses.cross_entropy, opt, accumulate=4, donate=False)
    out_big = big(params, opt.init(params), (x[:32], y[:32]))
    out_acc = acc(params, opt.init(params), (x[:32], y[:32]))
    assert_parity(
        {"params": out_big[0], "loss": out_big[2]["loss"]},
        {"params": out_acc[0], "loss": out_acc[2]["loss"]},
    )


def test_trainer_step_draws_batch_size_times_accumulate_examples_like_torch():
    """A step consumes ``batch_size·accumulate`` examples, full steps only, in a fresh
    order each epoch: 60 examples, 4×4 → 3 steps per epoch, the same steps (and
    weights, float32 tier) as torch's ``TorchTrainer`` over two epochs."""
    module, model, params, _, x, y = _setup()
    x, y = x[:60], y[:60]  # the last 12 examples make no full step
    opt = joptim.sgd(lr=0.1)
    trainer = Trainer(model, jlosses.cross_entropy, opt, params, batch_size=4, accumulate=4)
    twin = ttrain.TorchTrainer(
        module, torch.optim.SGD(module.parameters(), lr=0.1), batch_size=4, accumulate=4
    )
    for _ in range(2):
        result, expected = trainer.train_epoch(x, y), twin.train_epoch(x, y)
        assert result.steps == expected.steps == 3
        assert result.examples == expected.examples == 48
    assert_parity(torchref.state_dict_numpy(module), model.state_dict(trainer.params))


def test_accumulate_rejects_uneven_batch():
    _, model, params, opt, x, y = _setup()
    step = make_train_step(model, jlosses.cross_entropy, opt, accumulate=3, donate=False)
    with pytest.raises(ValueError, match="micro-batches"):
        step(params, opt.init(params), (x[:8], y[:8]))
    with pytest.raises(ValueError, match="accumulate"):
        make_train_step(model, jlosses.cross_entropy, opt, accumulate=0)


def test_bfloat16_mixed_precision_keeps_float32_master_weights():
    _, model, params, opt, x, y = _setup()
    step = make_train_step(
        model, jlosses.cross_entropy, opt, compute_dtype="bfloat16", donate=False
    )
    new, state, metrics = step(params, opt.init(params), (x[:32], y[:32]))
    loss32 = jlosses.cross_entropy(model.apply(params, jnp.asarray(x[:32])), y[:32])
    assert new["0.weight"].dtype == jnp.float32
    assert all(
        leaf.dtype == jnp.float32
        for leaf in jax.tree.leaves(state)
        if jnp.issubdtype(leaf.dtype, jnp.floating)
    )
    assert metrics["loss"].dtype == jnp.float32
    # bfloat16 keeps 8 significant bits: the loss agrees to about 2^-8 relative.
    np.testing.assert_allclose(metrics["loss"], loss32, rtol=2e-2)
    assert float(metrics["loss"]) != float(loss32)  # bf16 really was used
    with pytest.raises(ValueError, match="compute_dtype"):
        make_train_step(model, jlosses.cross_entropy, opt, compute_dtype="float16")


def test_bfloat16_leaves_token_ids_integers():
    """``train.py --model transformer --precision bfloat16``: the ids reach the
    Embedding as integers (bfloat16 holds integers exactly only up to 256; torch's
    autocast leaves them alone), and each row is the weight's row, rounded to bfloat16."""
    from jaxgrad.train.step import forward

    model = jaxgrad.nn.Sequential(jaxgrad.nn.Embedding(300, 4))
    params = {"0.weight": np.random.default_rng(0).standard_normal((300, 4)).astype(np.float32)}
    ids = jnp.array([[0, 257, 299], [255, 256, 3]])  # 257 and 299 have no bfloat16 twin
    rows = forward(model, "bfloat16", params, ids)
    expected = np.asarray(params["0.weight"])[np.asarray(ids)]  # the gather, by hand
    assert rows.dtype == jnp.float32
    np.testing.assert_array_equal(
        np.asarray(rows), expected.astype(jnp.bfloat16).astype(np.float32)
    )


def test_evaluate_matches_torch():
    module, model, params, _, x, y = _setup()
    expected = ttrain.evaluate(module, x, y, batch_size=24)
    got = evaluate(model, params, x, y, loss_fn=jlosses.cross_entropy, batch_size=24)
    # argmax of float32 logits: rows whose top two logits are within the float32 tier
    # may go either way on another framework or CPU; only those may differ
    ambiguous = ambiguous_argmax(module(torch.from_numpy(x)).detach())
    assert abs(got["accuracy"] - expected["accuracy"]) * len(y) <= ambiguous.sum() + 1e-9
    assert got["examples"] == expected["examples"] == len(y)
    assert_parity(np.float32(expected["loss"]), np.float32(got["loss"]))


def test_devices_and_sharding_errors():
    with pytest.raises(ValueError, match="tpu"):
        select_devices("tpu")
    with pytest.raises(ValueError, match="must be one of"):
        select_devices("quantum")
    mesh = data_parallel_mesh()
    batch = shard_batch((np.zeros((8, 3), np.float32),), mesh)
    assert batch[0].shape == (8, 3)


def test_torch_train_step_accumulation_equals_big_batch():
    """The torch twin's K backward() calls on loss/K give the big batch's gradient."""
    module, _, _, _, x, y = _setup()
    twin = torchref.mlp(SIZES, "tanh")
    twin.load_state_dict(module.state_dict())
    opt_a = torch.optim.SGD(module.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(twin.parameters(), lr=0.1)
    xb, yb = torch.from_numpy(x[:32]), torch.from_numpy(y[:32])
    loss_a = ttrain.train_step(
        module, opt_a, torch.nn.functional.cross_entropy, xb, yb, accumulate=4
    )
    loss_b = ttrain.train_step(twin, opt_b, torch.nn.functional.cross_entropy, xb, yb)
    assert_parity(torchref.state_dict_numpy(twin), torchref.state_dict_numpy(module))
    assert_parity(loss_b, loss_a)
