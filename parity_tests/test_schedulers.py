"""jaxgrad.optim.schedulers against torch.optim.lr_scheduler, step by step and in training."""

from __future__ import annotations

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from torch.optim import lr_scheduler as tsched

from jaxgrad import optim as joptim
from jaxgrad.optim import schedulers
from jaxgrad.parity import assert_parity

LR = 0.1
STEPS = 40
# (name, torch kwargs); the jaxgrad factory takes the same plus lr=LR
CASES = [
    ("StepLR", dict(step_size=7, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[3, 10, 10, 25], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.93)),
    ("CosineAnnealingLR", dict(T_max=15, eta_min=0.001)),
    ("CosineAnnealingWarmRestarts", dict(T_0=4, T_mult=2, eta_min=0.002)),
    ("CosineAnnealingWarmRestarts", dict(T_0=6)),
    ("LinearLR", dict(start_factor=0.2, end_factor=0.9, total_iters=12)),
    ("ConstantLR", dict(factor=0.25, total_iters=6)),
    ("PolynomialLR", dict(total_iters=30, power=2.0)),
    ("OneCycleLR", dict(max_lr=0.5, total_steps=STEPS, cycle_momentum=False)),
    ("OneCycleLR", dict(max_lr=0.5, total_steps=STEPS, cycle_momentum=False,
                        anneal_strategy="linear")),
    ("OneCycleLR", dict(max_lr=0.5, total_steps=STEPS, cycle_momentum=False, three_phase=True,
                        pct_start=0.25)),
]


def _torch_lrs(build, steps=STEPS, optimizer_cls=torch.optim.SGD):
    w = torch.zeros(1, requires_grad=True)
    optimizer = optimizer_cls([w], lr=LR)
    scheduler = build(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(scheduler.get_last_lr()[0])
        w.grad = torch.zeros(1)
        optimizer.step()
        scheduler.step()
    return np.asarray(lrs)


def _ours(name, kwargs):
    factory = getattr(schedulers, name)
    return factory(**kwargs) if name == "OneCycleLR" else factory(lr=LR, **kwargs)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_schedule_equals_get_last_lr_step_by_step(x64, name, kwargs):
    reference = _torch_lrs(lambda opt: getattr(tsched, name)(opt, **kwargs))
    sched = _ours(name, kwargs)
    eager = np.asarray([sched(t) for t in range(STEPS)])
    jitted = np.asarray(jax.jit(jax.vmap(sched))(jnp.arange(STEPS)))
    assert_parity(reference, eager)
    assert_parity(reference, jitted)


def test_lambda_and_sequential_lr(x64):
    reference = _torch_lrs(lambda opt: tsched.LambdaLR(opt, lambda t: 0.95 ** t + 0.01 * t))
    sched = schedulers.LambdaLR(lr=LR, lr_lambda=lambda t: 0.95 ** t + 0.01 * t)
    assert_parity(reference, np.asarray([sched(t) for t in range(STEPS)]))

    def torch_sequential(opt):
        warmup = tsched.LinearLR(opt, start_factor=0.1, total_iters=5)
        cosine = tsched.CosineAnnealingLR(opt, T_max=20)
        decay = tsched.ExponentialLR(opt, gamma=0.9)
        return tsched.SequentialLR(opt, [warmup, cosine, decay], milestones=[5, 25])
    reference = _torch_lrs(torch_sequential)
    sched = schedulers.SequentialLR([schedulers.LinearLR(lr=LR, start_factor=0.1, total_iters=5),
                                     schedulers.CosineAnnealingLR(lr=LR, T_max=20),
                                     schedulers.ExponentialLR(lr=LR, gamma=0.9)],
                                    milestones=[5, 25])
    assert_parity(reference, np.asarray([sched(t) for t in range(STEPS)]))


def test_schedule_inside_a_float64_training_trajectory(x64):
    # SGD with momentum under warmup + cosine, 30 steps: params equal step by step
    def torch_run():
        w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.Adam([w], lr=LR, weight_decay=0.01)
        scheduler = tsched.SequentialLR(optimizer, [
            tsched.LinearLR(optimizer, start_factor=0.1, total_iters=5),
            tsched.CosineAnnealingLR(optimizer, T_max=25)], milestones=[5])
        history = []
        for _ in range(30):
            optimizer.zero_grad()
            (torch.sin(w) * w).sum().backward()
            optimizer.step()
            scheduler.step()
            history.append(w.detach().numpy().copy())
        return np.stack(history)

    sched = schedulers.SequentialLR([schedulers.LinearLR(lr=LR, start_factor=0.1, total_iters=5),
                                     schedulers.CosineAnnealingLR(lr=LR, T_max=25)],
                                    milestones=[5])
    optimizer = joptim.adam(lr=sched, weight_decay=0.01)
    params = jnp.array([1.0, -2.0, 0.5])
    state = optimizer.init(params)
    grad = jax.grad(lambda w: (jnp.sin(w) * w).sum())
    history = []
    for _ in range(30):
        updates, state = optimizer.update(grad(params), state, params)
        params = optax.apply_updates(params, updates)
        history.append(np.asarray(params))
    assert_parity(torch_run(), np.stack(history))


@pytest.mark.parametrize("factory", sorted(joptim.OPTIMIZERS))
def test_every_optimizer_accepts_a_schedule(x64, factory):
    sched = schedulers.StepLR(lr=0.01, step_size=2, gamma=0.5)
    optimizer = joptim.OPTIMIZERS[factory](lr=sched)
    params = {"w": jnp.ones(2)}
    state = optimizer.init(params)
    for _ in range(3):
        updates, state = jax.jit(optimizer.update)(params, state, params)
    assert np.all(np.isfinite(np.asarray(updates["w"])))


def test_reduce_lr_on_plateau_matches_torch(x64):
    metrics = [1.0, 0.9, 0.95, 0.96, 0.97, 0.89, 0.9, 0.91, 0.92, 0.93, 0.94, 0.5, 0.6, 0.7,
               0.8, 0.9, 1.0, 1.1]
    for kwargs in (dict(patience=2, factor=0.5), dict(patience=1, cooldown=2, min_lr=0.02,
                                                      threshold_mode="abs", threshold=0.05),
                   dict(mode="max", patience=0)):
        w = torch.zeros(1, requires_grad=True)
        optimizer = torch.optim.SGD([w], lr=LR)
        torch_sched = tsched.ReduceLROnPlateau(optimizer, **kwargs)
        plateau = schedulers.ReduceLROnPlateau(lr=LR, **kwargs)
        state = plateau.init()
        step = jax.jit(plateau.step)
        for metric in metrics:
            torch_sched.step(metric)
            state = step(state, metric)
            assert math.isclose(float(state.lr), torch_sched.get_last_lr()[0], rel_tol=1e-12)


def test_plateau_lr_drives_an_injected_optimizer(x64):
    plateau = schedulers.ReduceLROnPlateau(lr=LR, patience=0, factor=0.5)
    optimizer = schedulers.injected_lr(joptim.sgd, lr=LR, momentum=0.9)
    params = {"w": jnp.ones(2)}
    opt_state = optimizer.init(params)
    state = plateau.step(plateau.step(plateau.init(), 1.0), 2.0)  # worse: halve
    opt_state.hyperparams["lr"] = state.lr
    updates, _ = optimizer.update(params, opt_state, params)
    assert_parity(np.array([-0.05, -0.05]), updates["w"])


@pytest.mark.parametrize("name", sorted(schedulers.SCHEDULERS))
def test_factory_signatures_are_torchs(name):
    ours = dict(inspect.signature(schedulers.SCHEDULERS[name]).parameters)
    theirs = dict(inspect.signature(getattr(tsched, name).__init__).parameters)
    for drop in ("self", "optimizer"):
        theirs.pop(drop)
    if name != "OneCycleLR" and name != "SequentialLR":
        assert list(ours)[0] == "lr"
        ours.pop("lr")
    assert list(ours) == list(theirs)
    for arg, parameter in ours.items():
        assert parameter.default == theirs[arg].default, (arg, parameter.default)


def test_scheduler_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`cycle_momentum=True`"):
        schedulers.OneCycleLR(max_lr=0.1, total_steps=100)
    with pytest.raises(ValueError, match="`last_epoch`"):
        schedulers.StepLR(lr=0.1, step_size=2, last_epoch=3)
    with pytest.raises(ValueError, match="`milestones`"):
        schedulers.SequentialLR([schedulers.ExponentialLR(lr=0.1, gamma=0.9)] * 2,
                                milestones=[])
    with pytest.raises(ValueError, match="`step_size`"):
        schedulers.StepLR(lr=0.1, step_size=0)
    with pytest.raises(ValueError, match="`mode`"):
        schedulers.ReduceLROnPlateau(lr=0.1, mode="lowest")
    past_end = schedulers.OneCycleLR(max_lr=0.1, total_steps=10, cycle_momentum=False)(11)
    assert np.isnan(float(past_end))  # torch raises past total_steps; never a number


@pytest.mark.parametrize("name", ["CosineAnnealingLR", "OneCycleLR", "PolynomialLR",
                                  "StepLR"])
def test_train_py_builders_agree_in_both_frameworks(x64, name):
    # scripts/train.py --scheduler: jaxgrad's for_run and torchref's scheduler_kwargs fill
    # the same arguments (the run's length, OneCycleLR's max_lr)
    from torchref import schedulers as tschedulers
    given = {"step_size": 4} if name == "StepLR" else {}
    kwargs = tschedulers.scheduler_kwargs(name, LR, 20, **given)
    reference = _torch_lrs(lambda opt: tschedulers.make_scheduler(name, opt, **kwargs), steps=20)
    sched = schedulers.for_run(name, LR, 20, **given)
    assert_parity(reference, np.asarray([sched(t) for t in range(20)]))
    with pytest.raises(ValueError, match="`scheduler`"):
        schedulers.for_run("LambdaLR", LR, 20)


def test_train_py_scheduler_option_parsing(capsys):
    import train  # scripts/train.py (scripts/ is on the test path)
    args = train.parse_args(["--scheduler", "StepLR:step_size=5,gamma=0.5"])
    assert args.scheduler == ("StepLR", {"step_size": 5, "gamma": 0.5})
    for bad in (["--scheduler", "StepLR:step_size"], ["--scheduler", "StepLR:gamma=x y"],
                ["--scheduler", "StepLR", "--resume", "--checkpoint-dir", "d"]):
        with pytest.raises(SystemExit) as info:
            train.parse_args(bad)
        assert info.value.code == 2
    assert "--scheduler" in capsys.readouterr().err


def test_conformance_script_arguments(capsys):
    import conformance_losses_optim as script
    with pytest.raises(SystemExit) as info:
        script.main(["--only", "everything"])
    assert info.value.code == 2
    assert "--only" in capsys.readouterr().err
