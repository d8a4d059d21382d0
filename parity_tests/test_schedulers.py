"""jaxgrad.optim.schedulers against torch.optim.lr_scheduler, step by step and in training."""

from __future__ import annotations

import inspect
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from parity_checks.optimizers import trajectories
from torch.optim import lr_scheduler as tsched

from jaxgrad import optim as joptim
from jaxgrad.optim import schedulers
from jaxgrad.parity import assert_parity
from parity_tests._sampling import one_in
from torchref import optim as toptim

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
    (
        "OneCycleLR",
        dict(max_lr=0.5, total_steps=STEPS, cycle_momentum=False, anneal_strategy="linear"),
    ),
    (
        "OneCycleLR",
        dict(max_lr=0.5, total_steps=STEPS, cycle_momentum=False, three_phase=True, pct_start=0.25),
    ),
    # the edges: torch's get_last_lr() stays factor * lr when total_iters=0 (its closed
    # form says lr); PolynomialLR reaches 0 exactly, also under jit, for a power < 1
    ("ConstantLR", dict(factor=0.0, total_iters=0)),
    ("ConstantLR", dict(factor=0.4, total_iters=0)),
    ("PolynomialLR", dict(total_iters=30, power=0.5)),
    ("PolynomialLR", dict(total_iters=5, power=0.5)),
    ("MultiplicativeLR", dict(lr_lambda=lambda epoch: 0.95)),
    ("MultiplicativeLR", dict(lr_lambda=lambda epoch: 0.9 + 0.01 * (epoch % 3))),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=5, cycle_momentum=False)),
    (
        "CyclicLR",
        dict(
            base_lr=0.01,
            max_lr=0.1,
            step_size_up=4,
            step_size_down=7,
            mode="triangular2",
            cycle_momentum=False,
        ),
    ),
    (
        "CyclicLR",
        dict(
            base_lr=0.02,
            max_lr=0.3,
            step_size_up=3,
            step_size_down=5,
            mode="exp_range",
            gamma=0.97,
            cycle_momentum=False,
        ),
    ),
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
    return factory(**kwargs) if name in ("OneCycleLR", "CyclicLR") else factory(lr=LR, **kwargs)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}{i}" for i, (n, _) in enumerate(CASES)])
def test_schedule_equals_get_last_lr_step_by_step(x64, name, kwargs):
    reference = _torch_lrs(lambda opt: getattr(tsched, name)(opt, **kwargs))
    sched = _ours(name, kwargs)
    eager = np.asarray([sched(t) for t in range(STEPS)])
    jitted = np.asarray(jax.jit(jax.vmap(sched))(jnp.arange(STEPS)))
    assert_parity(reference, eager)
    assert_parity(reference, jitted)
    assert eager.dtype == jitted.dtype == np.float64
    # an lr torch takes to 0 is 0 here too, not 1e-10 (a power < 1 magnifies jit's rounding)
    np.testing.assert_array_equal(eager[reference == 0], 0.0)
    np.testing.assert_array_equal(jitted[reference == 0], 0.0)


def test_lambda_and_sequential_lr(x64):
    reference = _torch_lrs(lambda opt: tsched.LambdaLR(opt, lambda t: 0.95**t + 0.01 * t))
    sched = schedulers.LambdaLR(lr=LR, lr_lambda=lambda t: 0.95**t + 0.01 * t)
    assert_parity(reference, np.asarray([sched(t) for t in range(STEPS)]))

    def torch_sequential(opt):
        warmup = tsched.LinearLR(opt, start_factor=0.1, total_iters=5)
        cosine = tsched.CosineAnnealingLR(opt, T_max=20)
        decay = tsched.ExponentialLR(opt, gamma=0.9)
        return tsched.SequentialLR(opt, [warmup, cosine, decay], milestones=[5, 25])

    reference = _torch_lrs(torch_sequential)
    sched = schedulers.SequentialLR(
        [
            schedulers.LinearLR(lr=LR, start_factor=0.1, total_iters=5),
            schedulers.CosineAnnealingLR(lr=LR, T_max=20),
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
        ],
        milestones=[5, 25],
    )
    assert_parity(reference, np.asarray([sched(t) for t in range(STEPS)]))


def test_schedule_inside_a_float64_training_trajectory(x64):
    # SGD with momentum under warmup + cosine, 30 steps: params equal step by step
    def torch_run():
        w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.Adam([w], lr=LR, weight_decay=0.01)
        scheduler = tsched.SequentialLR(
            optimizer,
            [
                tsched.LinearLR(optimizer, start_factor=0.1, total_iters=5),
                tsched.CosineAnnealingLR(optimizer, T_max=25),
            ],
            milestones=[5],
        )
        history = []
        for _ in range(30):
            optimizer.zero_grad()
            (torch.sin(w) * w).sum().backward()
            optimizer.step()
            scheduler.step()
            history.append(w.detach().numpy().copy())
        return np.stack(history)

    sched = schedulers.SequentialLR(
        [
            schedulers.LinearLR(lr=LR, start_factor=0.1, total_iters=5),
            schedulers.CosineAnnealingLR(lr=LR, T_max=25),
        ],
        milestones=[5],
    )
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
    metrics = [
        1.0,
        0.9,
        0.95,
        0.96,
        0.97,
        0.89,
        0.9,
        0.91,
        0.92,
        0.93,
        0.94,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.1,
    ]
    for kwargs in (
        dict(patience=2, factor=0.5),
        dict(patience=1, cooldown=2, min_lr=0.02, threshold_mode="abs", threshold=0.05),
        dict(mode="max", patience=0),
    ):
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


def test_reduce_lr_on_plateau_every_mode_threshold_and_cooldown_matches_torch(x64):
    """Every (mode, threshold_mode, cooldown) against torch step by step: the lr and
    the state torch keeps (best, num_bad_epochs, cooldown_counter). The metrics move
    by less than the 10 % threshold, so 'better' depends on which side of best the
    threshold lies; with cooldown=2 and patience=1 a reduction needs two bad epochs
    counted after each cooldown, never the ones counted during it. All eight cases
    run as one jitted program (a scan each)."""
    rng = np.random.default_rng(0)
    rising = np.cumprod(1 + 0.3 * rng.random(30) * rng.choice([1, -0.2], 30))  # +-, mostly up
    metrics = {"min": 1 / rising, "max": rising}
    cases = {
        (mode, threshold_mode, cooldown): dict(
            mode=mode,
            threshold_mode=threshold_mode,
            threshold=0.1,
            patience=1,
            cooldown=cooldown,
            factor=0.5,
        )
        for mode in metrics
        for threshold_mode in ("rel", "abs")
        for cooldown in (0, 2)
    }

    @jax.jit
    def histories(metrics):
        out = {}
        for case, kwargs in cases.items():
            plateau = schedulers.ReduceLROnPlateau(lr=LR, **kwargs)
            step = lambda state, metric, plateau=plateau: (plateau.step(state, metric),) * 2
            out["/".join(map(str, case))] = jax.lax.scan(step, plateau.init(), metrics[case[0]])[1]
        return out

    ours = jax.tree.map(np.asarray, histories(metrics))  # on the host: no op per element
    for case, kwargs in cases.items():
        w = torch.zeros(1, requires_grad=True)
        torch_sched = tsched.ReduceLROnPlateau(torch.optim.SGD([w], lr=LR), **kwargs)
        history = ours["/".join(map(str, case))]
        for epoch, metric in enumerate(metrics[case[0]]):
            torch_sched.step(float(metric))
            got = (
                float(history.lr[epoch]),
                float(history.best[epoch]),
                int(history.num_bad_epochs[epoch]),
                int(history.cooldown_counter[epoch]),
            )
            expected = (
                torch_sched.get_last_lr()[0],
                torch_sched.best,
                torch_sched.num_bad_epochs,
                torch_sched.cooldown_counter,
            )
            assert got == pytest.approx(expected, rel=1e-12), (kwargs, epoch)
        assert len(set(np.asarray(history.lr).tolist())) > 2, kwargs  # several reductions


def test_plateau_lr_drives_an_injected_optimizer(x64):
    plateau = schedulers.ReduceLROnPlateau(lr=LR, patience=0, factor=0.5)
    optimizer = schedulers.injected_lr(joptim.sgd, lr=LR, momentum=0.9)
    params = {"w": jnp.ones(2)}
    opt_state = optimizer.init(params)
    state = plateau.step(plateau.step(plateau.init(), 1.0), 2.0)  # worse: halve
    opt_state.hyperparams["lr"] = state.lr
    updates, _ = optimizer.update(params, opt_state, params)
    assert_parity(np.array([-0.05, -0.05]), updates["w"])


def test_every_torch_scheduler_has_a_factory():
    theirs = {
        name
        for name, cls in vars(tsched).items()
        if isinstance(cls, type)
        and issubclass(cls, tsched.LRScheduler)
        and not name.startswith("_")
        and name != "LRScheduler"
    }
    assert len(theirs) == 15
    assert theirs == set(schedulers.SCHEDULERS) | {"ReduceLROnPlateau"}
    assert set(tsched.__all__) - {"LRScheduler"} == theirs


@pytest.mark.parametrize("name", sorted(schedulers.SCHEDULERS))
def test_factory_signatures_are_torchs(name):
    ours = dict(inspect.signature(schedulers.SCHEDULERS[name]).parameters)
    theirs = dict(inspect.signature(getattr(tsched, name).__init__).parameters)
    theirs.pop("self")
    if list(theirs)[0] == "optimizer":  # ChainedScheduler's is an optional last argument
        theirs.pop("optimizer")
    if name not in ("OneCycleLR", "CyclicLR", "SequentialLR", "ChainedScheduler"):
        assert list(ours)[0] == "lr"
        ours.pop("lr")
    assert list(ours) == list(theirs)
    for arg, parameter in ours.items():
        assert parameter.default == theirs[arg].default, (arg, parameter.default)


def test_scheduler_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`last_epoch`"):
        schedulers.StepLR(lr=0.1, step_size=2, last_epoch=3)
    with pytest.raises(ValueError, match="`milestones`"):
        schedulers.SequentialLR([schedulers.ExponentialLR(lr=0.1, gamma=0.9)] * 2, milestones=[])
    with pytest.raises(ValueError, match="`step_size`"):
        schedulers.StepLR(lr=0.1, step_size=0)
    with pytest.raises(ValueError, match="`mode`"):
        schedulers.ReduceLROnPlateau(lr=0.1, mode="lowest")
    past_end = schedulers.OneCycleLR(max_lr=0.1, total_steps=10, cycle_momentum=False)(11)
    assert np.isnan(float(past_end))  # torch raises past total_steps; never a number


@pytest.mark.parametrize("name", ["CosineAnnealingLR", "OneCycleLR", "PolynomialLR", "StepLR"])
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
    for bad in (["--scheduler", "StepLR:step_size"], ["--scheduler", "StepLR:gamma=x y"]):
        with pytest.raises(SystemExit) as info:
            train.parse_args(bad)
        assert info.value.code == 2
    assert "--scheduler" in capsys.readouterr().err
    # the scheduler's state is checkpointed: a scheduled run resumes (test_train_stop_and_integrity)
    args = train.parse_args(
        ["--scheduler", "StepLR:step_size=2", "--resume", "--checkpoint-dir", "d"]
    )
    assert args.resume and args.scheduler == ("StepLR", {"step_size": 2})
    # StepLR without its required step_size is refused before training (issue 44)
    with pytest.raises(SystemExit) as info:
        train.parse_args(["--scheduler", "StepLR"])
    assert info.value.code == 2


def test_conformance_script_arguments(capsys):
    import conformance_losses_optim as script

    with pytest.raises(SystemExit) as info:
        script.main(["--only", "everything"])
    assert info.value.code == 2
    assert "--only" in capsys.readouterr().err


# ------------------------------------------------- OneCycleLR with cycle_momentum=True

ONE_CYCLE = [
    dict(max_lr=0.05, total_steps=STEPS),
    dict(max_lr=0.05, total_steps=STEPS, anneal_strategy="linear"),
    dict(
        max_lr=0.05,
        total_steps=STEPS,
        three_phase=True,
        pct_start=0.25,
        base_momentum=0.8,
        max_momentum=0.9,
    ),
]


def _torch_momenta(kwargs, optimizer_cls):
    """The momentum (``betas[0]`` for Adam) torch's OneCycleLR gives each step."""
    w = torch.zeros(1, requires_grad=True)
    optimizer = optimizer_cls([w], lr=LR)
    scheduler = tsched.OneCycleLR(optimizer, **kwargs)
    values = []
    for _ in range(STEPS):
        group = optimizer.param_groups[0]
        values.append(group["betas"][0] if "betas" in group else group["momentum"])
        w.grad = torch.zeros(1)
        optimizer.step()
        scheduler.step()
    return np.asarray(values)


@pytest.mark.parametrize(
    "kwargs",
    ONE_CYCLE + [dict(max_lr=0.05, total_steps=STEPS, base_momentum=0.9, max_momentum=0.7)],
)
def test_one_cycle_momentum_equals_torchs_step_by_step(x64, kwargs):
    # base_momentum > max_momentum: torch accepts it and cycles the other way round
    sched = schedulers.OneCycleLR(**kwargs)
    for optimizer_cls in (torch.optim.SGD, torch.optim.Adam):
        reference = _torch_momenta(kwargs, optimizer_cls)
        assert_parity(reference, np.asarray([sched.momentum(t) for t in range(STEPS)]))
        assert_parity(reference, np.asarray(jax.jit(jax.vmap(sched.momentum))(jnp.arange(STEPS))))
    assert_parity(
        _torch_lrs(lambda opt: tsched.OneCycleLR(opt, **kwargs)),
        np.asarray([sched(t) for t in range(STEPS)]),
    )


# (optimizer, hyperparameters shared by both frameworks); the schedule replaces lr and
# the momentum / betas[0] in jaxgrad, as torch's OneCycleLR overwrites them in the group
CYCLED_OPTIMIZERS = [
    ("sgd", dict(lr=LR)),
    ("sgd", dict(lr=LR, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("sgd", dict(lr=LR, momentum=0.9, dampening=0.3)),
    ("adam", dict(lr=LR, betas=(0.9, 0.99), weight_decay=0.01)),
    ("adamw", dict(lr=LR, amsgrad=True)),
    ("rmsprop", dict(lr=LR, momentum=0.5)),
]


# every optimizer with the default cosine annealing; both others with two of them
TRAJECTORY_CASES = [(*c, 0) for c in CYCLED_OPTIMIZERS] + [
    (*CYCLED_OPTIMIZERS[i], k) for i in (1, 3) for k in (1, 2)
]
TRAJECTORY_STEPS = 30


# one in three in the default run (sgd0-cos, adam3-cos, sgd1-linear, adam3-three_phase:
# every strategy), the rest in the exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "name,hyper,strategy",
    one_in(3, TRAJECTORY_CASES),
    ids=[
        f"{n}{CYCLED_OPTIMIZERS.index((n, h))}-{('cos', 'linear', 'three_phase')[k]}"
        for n, h, k in TRAJECTORY_CASES
    ],
)
def test_one_cycle_training_trajectory_float64(x64, name, hyper, strategy):
    kwargs = dict(ONE_CYCLE[strategy], total_steps=TRAJECTORY_STEPS)
    if name in ("adam", "adamw", "rmsprop"):
        kwargs["max_lr"] = 0.01
    sched = schedulers.OneCycleLR(**kwargs)
    factory = getattr(joptim, name)
    optimizer = factory(**schedulers.with_cycled_momentum(factory, dict(hyper, lr=sched)))
    reference, candidate = trajectories(
        name,
        hyper,
        "float64",
        TRAJECTORY_STEPS,
        jit=False,
        jax_optimizer=optimizer,
        torch_scheduler=lambda opt: tsched.OneCycleLR(opt, **kwargs),
    )
    report = assert_parity(reference, candidate)
    assert any("state" in leaf.path for leaf in report.leaves)
    assert {leaf.dtype for leaf in report.leaves} == {"float64"}


@pytest.mark.parametrize("name", ["adamax", "nadam", "radam"])
def test_one_cycle_beta1_of_the_other_adam_variants(x64, name):
    # fixed gradients on one tensor (their trajectories on the MLP are in test_optim_db)
    kwargs = dict(max_lr=0.01, total_steps=STEPS)
    grads = np.random.default_rng(0).standard_normal((STEPS, 3))
    weight = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64, requires_grad=True)
    torch_optimizer = toptim.make_optimizer(name, [weight])
    scheduler = tsched.OneCycleLR(torch_optimizer, **kwargs)
    reference = []
    for grad in grads:
        weight.grad = torch.from_numpy(grad.copy())
        torch_optimizer.step()
        scheduler.step()
        reference.append(weight.detach().numpy().copy())
    sched = schedulers.OneCycleLR(**kwargs)
    optimizer = getattr(joptim, name)(lr=sched, betas=(sched.momentum, 0.999))
    params = jnp.array([1.0, -0.5, 0.25])
    state = optimizer.init(params)
    ours = []
    for grad in grads:
        updates, state = optimizer.update(jnp.asarray(grad), state, params)
        params = optax.apply_updates(params, updates)
        ours.append(np.asarray(params))
    assert_parity(np.stack(reference), np.stack(ours))


def test_one_cycle_default_is_the_issues_example(x64):
    sched = schedulers.OneCycleLR(max_lr=0.1, total_steps=100)
    sgd = joptim.sgd(lr=sched, momentum=sched.momentum)
    adam = joptim.adam(lr=sched, betas=(sched.momentum, 0.999))
    params = {"w": jnp.ones(2)}
    for optimizer in (sgd, adam):
        updates, _ = jax.jit(optimizer.update)(params, optimizer.init(params), params)
        assert np.all(np.isfinite(np.asarray(updates["w"])))
    assert sched.group_entries == {
        "initial_lr": 0.004,
        "max_lr": 0.1,
        "min_lr": 4e-07,
        "max_momentum": 0.95,
        "base_momentum": 0.85,
    }
    off = schedulers.OneCycleLR(max_lr=0.1, total_steps=100, cycle_momentum=False)
    assert off.momentum is None
    joptim.sgd(lr=off, momentum=0.9)  # nothing cycled: any momentum


def test_one_cycle_momentum_left_out_is_refused():
    sched = schedulers.OneCycleLR(max_lr=0.1, total_steps=100)
    # torch would cycle these; a constant (or none) would silently differ
    for build, argument in (
        (lambda: joptim.sgd(lr=sched), "`momentum` (=0.0)"),
        (lambda: joptim.sgd(lr=sched, momentum=0.9), "`momentum` (=0.9)"),
        (lambda: joptim.rmsprop(lr=sched), "`momentum` (=0.0)"),
        (lambda: joptim.adam(lr=sched), "`betas[0]` (=0.9)"),
        (lambda: joptim.nadam(lr=sched), "`betas[0]` (=0.9)"),
    ):
        with pytest.raises(ValueError, match=r"cycle_momentum=True.*" + re.escape(argument)):
            build()
    other = schedulers.OneCycleLR(max_lr=0.1, total_steps=100)
    with pytest.raises(ValueError, match="betas"):
        joptim.adamw(lr=sched, betas=(other.momentum, 0.999))
    with pytest.raises(ValueError, match="cycle_momentum"):
        joptim.param_groups(joptim.adam, [{}], lr=sched)


@pytest.mark.parametrize("name", ["adagrad", "asgd"])
def test_one_cycle_on_an_optimizer_without_momentum_both_raise(name):
    weight = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="must support momentum or beta1") as theirs:
        tsched.OneCycleLR(toptim.make_optimizer(name, [weight]), max_lr=0.1, total_steps=10)
    sched = schedulers.OneCycleLR(max_lr=0.1, total_steps=10)
    with pytest.raises(ValueError, match=re.escape(str(theirs.value))):
        getattr(joptim, name)(lr=sched)
    with pytest.raises(ValueError, match="no momentum or betas"):
        schedulers.with_cycled_momentum(getattr(joptim, name), {"lr": sched})
    getattr(joptim, name)(
        lr=schedulers.OneCycleLR(max_lr=0.1, total_steps=10, cycle_momentum=False)
    )


def test_one_cycle_bad_arguments_are_named():
    weight = torch.zeros(1, requires_grad=True)
    for bad, match in (
        (dict(pct_start=1), "`pct_start` (=1)"),
        (dict(anneal_strategy="cosine"), "`anneal_strategy`"),
        (dict(total_steps=0), "`total_steps` (=0)"),
    ):
        kwargs = dict(dict(max_lr=0.1, total_steps=10), **bad)
        with pytest.raises(ValueError):  # torch refuses each too
            tsched.OneCycleLR(torch.optim.SGD([weight]), **kwargs)
        with pytest.raises(ValueError, match=re.escape(match)):
            schedulers.OneCycleLR(**kwargs)
    # torch does not check the momenta; its optimizers would refuse them
    with pytest.raises(ValueError, match=re.escape("`base_momentum` (=-0.1) must be >= 0")):
        schedulers.OneCycleLR(max_lr=0.1, total_steps=10, base_momentum=-0.1)
    with pytest.raises(ValueError, match=re.escape("`max_momentum` (=1.0)")):
        schedulers.OneCycleLR(max_lr=0.1, total_steps=10, max_momentum=1.0)
    sched = schedulers.OneCycleLR(max_lr=0.1, total_steps=10)
    with pytest.raises(ValueError, match=r"`schedulers\[1\]` cycles momentum"):
        schedulers.SequentialLR(
            [schedulers.ExponentialLR(lr=0.1, gamma=0.9), sched], milestones=[3]
        )
    with pytest.raises(TypeError, match="`momentum`"):
        joptim.sgd(lr=0.1, momentum="0.9")
    zero_first = schedulers.OneCycleLR(
        max_lr=0.1, total_steps=10, max_momentum=0.0, base_momentum=0.5
    )
    with pytest.raises(ValueError, match="`dampening` != 0"):
        joptim.sgd(lr=zero_first, momentum=zero_first.momentum, dampening=0.1)
    with pytest.raises(ValueError, match="step 0"):
        joptim.rmsprop(lr=zero_first, momentum=zero_first.momentum)
