"""CyclicLR, MultiplicativeLR, ChainedScheduler and SequentialLR's restarts against torch's
own schedulers stepping a real optimizer: the lr (``get_last_lr()`` after each
``scheduler.step()``) and the momentum step by step, eagerly and under ``jit``, float64."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from parity_checks.optimizers import trajectories
from torch.optim import lr_scheduler as tsched

from jaxgrad import optim as joptim
from jaxgrad.optim import schedulers
from jaxgrad.parity import assert_parity
from parity_tests._sampling import one_in

LR = 0.1
STEPS = 40


def _torch_run(build, steps=STEPS, optimizer_cls=torch.optim.SGD):
    """``(lrs, momenta)`` torch uses at each of ``steps`` optimizer steps under the
    scheduler ``build(optimizer)`` (momenta: the group's ``momentum`` / ``betas[0]``)."""
    w = torch.zeros(1, requires_grad=True)
    optimizer = optimizer_cls([w], lr=LR)
    scheduler = build(optimizer)
    lrs, momenta = [], []
    for _ in range(steps):
        group = optimizer.param_groups[0]
        lrs.append(scheduler.get_last_lr()[0])
        momenta.append(group["betas"][0] if "betas" in group else group.get("momentum", 0.0))
        w.grad = torch.zeros(1)
        optimizer.step()
        scheduler.step()
    return np.asarray(lrs), np.asarray(momenta)


def _assert_schedule(reference, schedule, steps=STEPS):
    """``schedule`` equals ``reference`` at steps 0.. eagerly and vmapped under jit."""
    eager = np.asarray([schedule(t) for t in range(steps)])
    jitted = np.asarray(jax.jit(jax.vmap(schedule))(jnp.arange(steps)))
    assert eager.dtype == jitted.dtype == np.float64
    assert_parity(reference, eager)
    assert_parity(reference, jitted)


# ------------------------------------------------------------------------------ CyclicLR

CYCLIC = [
    dict(base_lr=0.01, max_lr=0.1, step_size_up=5),
    dict(
        base_lr=0.01,
        max_lr=0.1,
        step_size_up=4,
        step_size_down=7,
        mode="triangular2",
        base_momentum=0.7,
        max_momentum=0.95,
    ),
    dict(base_lr=0.02, max_lr=0.3, step_size_up=3, step_size_down=5, mode="exp_range", gamma=0.97),
    dict(base_lr=0.01, max_lr=0.1, step_size_up=6, step_size_down=0),  # a sawtooth
    dict(base_lr=0.01, max_lr=0.1, step_size_up=3, scale_fn=lambda cycle: 0.8**cycle),
    dict(
        base_lr=0.01,
        max_lr=0.1,
        step_size_up=3,
        step_size_down=4,
        scale_fn=lambda step: 1 / (1 + 0.1 * step),
        scale_mode="iterations",
    ),
    dict(base_lr=0.1, max_lr=0.01, step_size_up=2, base_momentum=0.9, max_momentum=0.8),
]


# optimizer x CyclicLR: one in two in the default run (every CyclicLR, both optimizers),
# the rest in the exhaustive run (CI: -m "exhaustive or long"); ids as two parametrizes
@pytest.mark.parametrize(
    "kwargs,optimizer_cls",
    one_in(
        2,
        [
            pytest.param(kwargs, cls, id=f"{which}-cyclic{i}")
            for cls, which in [(torch.optim.SGD, "momentum"), (torch.optim.Adam, "betas0")]
            for i, kwargs in enumerate(CYCLIC)
        ],
    ),
)
def test_cyclic_lr_and_momentum_equal_torchs_step_by_step(x64, kwargs, optimizer_cls):
    # torch writes the momentum into SGD's `momentum` and Adam's `betas[0]` every step
    lrs, momenta = _torch_run(
        lambda opt: tsched.CyclicLR(opt, **kwargs), optimizer_cls=optimizer_cls
    )
    sched = schedulers.CyclicLR(**kwargs)
    _assert_schedule(lrs, sched)
    _assert_schedule(momenta, sched.momentum)
    assert schedulers.CyclicLR(**kwargs, cycle_momentum=False).momentum is None


CYCLED_OPTIMIZERS = [
    ("sgd", dict(lr=LR)),
    ("sgd", dict(lr=LR, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam", dict(lr=LR, betas=(0.9, 0.99), weight_decay=0.01)),
    ("rmsprop", dict(lr=LR, momentum=0.5)),
]


# one in two in the default run (sgd0, adam2), the rest in the exhaustive run
@pytest.mark.parametrize(
    "name,hyper",
    one_in(2, CYCLED_OPTIMIZERS),
    ids=[f"{n}{i}" for i, (n, _) in enumerate(CYCLED_OPTIMIZERS)],
)
def test_cyclic_lr_training_trajectory_float64(x64, name, hyper):
    # SGD's default momentum=0 too: torch's CyclicLR sets it to max_momentum, so the
    # jaxgrad optimizer gets sched.momentum
    kwargs = dict(
        base_lr=0.001,
        max_lr=0.01 if name != "sgd" else 0.05,
        step_size_up=4,
        step_size_down=6,
        mode="triangular2",
    )
    sched = schedulers.CyclicLR(**kwargs)
    factory = getattr(joptim, name)
    optimizer = factory(**schedulers.with_cycled_momentum(factory, dict(hyper, lr=sched)))
    reference, candidate = trajectories(
        name,
        hyper,
        "float64",
        30,
        jit=False,
        jax_optimizer=optimizer,
        torch_scheduler=lambda opt: tsched.CyclicLR(opt, **kwargs),
    )
    report = assert_parity(reference, candidate)
    assert any("state" in leaf.path for leaf in report.leaves)
    assert {leaf.dtype for leaf in report.leaves} == {"float64"}


def test_cyclic_lr_group_entries_are_what_torch_writes():
    for cycle_momentum in (True, False):
        kwargs = dict(base_lr=0.01, max_lr=0.1, step_size_up=3, cycle_momentum=cycle_momentum)
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
        before = set(optimizer.param_groups[0])
        tsched.CyclicLR(optimizer, **kwargs)
        group = optimizer.param_groups[0]
        theirs = {key: group[key] for key in set(group) - before}
        assert schedulers.CyclicLR(**kwargs).group_entries == theirs


def test_cyclic_lr_momentum_left_out_is_refused():
    sched = schedulers.CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=3)
    # torch turns SGD's momentum=0 into max_momentum: a constant would silently differ
    with pytest.raises(
        ValueError,
        match=r"cycle_momentum=True.*max_momentum=0\.9.*" + re.escape("`momentum` (=0.0)"),
    ):
        joptim.sgd(lr=sched)
    with pytest.raises(ValueError, match=re.escape("`betas[0]` (=0.9)")):
        joptim.adam(lr=sched)
    joptim.sgd(lr=sched, momentum=sched.momentum)
    joptim.adam(lr=sched, betas=(sched.momentum, 0.999))
    joptim.sgd(lr=schedulers.CyclicLR(base_lr=0.01, max_lr=0.1, cycle_momentum=False), momentum=0.5)


@pytest.mark.parametrize("name", ["adagrad", "asgd"])
def test_cyclic_lr_on_an_optimizer_without_momentum_both_raise(name):
    from torchref import optim as toptim

    weight = torch.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="must support momentum or beta1") as theirs:
        tsched.CyclicLR(toptim.make_optimizer(name, [weight]), base_lr=0.01, max_lr=0.1)
    sched = schedulers.CyclicLR(base_lr=0.01, max_lr=0.1)
    with pytest.raises(ValueError, match=re.escape(str(theirs.value))):
        getattr(joptim, name)(lr=sched)
    getattr(joptim, name)(lr=schedulers.CyclicLR(base_lr=0.01, max_lr=0.1, cycle_momentum=False))


def test_cyclic_lr_bad_arguments_are_named():
    weight = torch.zeros(1, requires_grad=True)
    for bad, match, error in (
        (dict(step_size_up=0), "`step_size_up` (=0)", ZeroDivisionError),
        (dict(mode="triangle"), "`mode` (='triangle')", ValueError),
    ):
        kwargs = dict(dict(base_lr=0.01, max_lr=0.1), **bad)
        with pytest.raises(error):  # torch refuses each too
            tsched.CyclicLR(torch.optim.SGD([weight], lr=LR), **kwargs)
        with pytest.raises(ValueError, match=re.escape(match)):
            schedulers.CyclicLR(**kwargs)
    # torch reads any other scale_mode as "iterations"; a typo is refused here
    with pytest.raises(ValueError, match=re.escape("`scale_mode` (='iteration')")):
        schedulers.CyclicLR(0.01, 0.1, scale_fn=lambda x: 1.0, scale_mode="iteration")
    with pytest.raises(TypeError, match="`scale_fn`"):
        schedulers.CyclicLR(0.01, 0.1, scale_fn=0.5)
    with pytest.raises(TypeError, match="`base_lr`"):
        schedulers.CyclicLR([0.01, 0.02], 0.1)  # one lr per group: not a schedule
    with pytest.raises(ValueError, match=re.escape("`max_momentum` (=1.0)")):
        schedulers.CyclicLR(0.01, 0.1, max_momentum=1.0)


# ---------------------------------------------------------------------- MultiplicativeLR


def test_multiplicative_lr_calls_lr_lambda_with_python_ints_outside_jit(x64):
    # torch passes the epoch as an int: Python control flow works outside jit
    def lr_lambda(epoch):
        return 0.5 if epoch in (3, 7) else (1.02 if epoch < 10 else 0.97)

    lrs, _ = _torch_run(lambda opt: tsched.MultiplicativeLR(opt, lr_lambda))
    sched = schedulers.MultiplicativeLR(lr=LR, lr_lambda=lr_lambda)
    assert_parity(lrs, np.asarray([sched(t) for t in range(STEPS)]))
    # the same written with jnp runs under jit too (a while loop over the epochs)
    jnp_lambda = lambda epoch: jnp.where(
        (epoch == 3) | (epoch == 7),
        0.5,  # noqa: E731
        jnp.where(epoch < 10, 1.02, 0.97),
    )
    _assert_schedule(lrs, schedulers.MultiplicativeLR(lr=LR, lr_lambda=jnp_lambda))


def test_multiplicative_lr_bad_arguments_both_raise():
    weight = torch.zeros(1, requires_grad=True)
    with pytest.raises(TypeError, match="lr_lambda should be a function"):
        tsched.MultiplicativeLR(torch.optim.SGD([weight], lr=LR), 0.95)
    with pytest.raises(TypeError, match=re.escape("`lr_lambda` (=0.95)")):
        schedulers.MultiplicativeLR(lr=LR, lr_lambda=0.95)
    with pytest.raises(ValueError, match="`last_epoch`"):
        schedulers.MultiplicativeLR(lr=LR, lr_lambda=lambda epoch: 0.95, last_epoch=4)


# ---------------------------------------------------------------------- ChainedScheduler

# (id, torch schedulers of an optimizer, the same in jaxgrad); built in the listed order
CHAINS = [
    (
        "constant-exponential",  # torch's docstring example
        lambda o: [tsched.ConstantLR(o, factor=0.1, total_iters=20), tsched.ExponentialLR(o, 0.9)],
        lambda: [
            schedulers.ConstantLR(lr=LR, factor=0.1, total_iters=20),
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
        ],
    ),
    (
        "every-scaling-kind",
        lambda o: [
            tsched.LinearLR(o, start_factor=0.2, total_iters=8),
            tsched.StepLR(o, 6, 0.5),
            tsched.PolynomialLR(o, total_iters=30, power=0.5),
            tsched.MultiStepLR(o, [0, 3, 10, 10], gamma=0.8),
            tsched.MultiplicativeLR(o, lambda epoch: 1.0 - 0.002 * (epoch % 5)),
        ],
        lambda: [
            schedulers.LinearLR(lr=LR, start_factor=0.2, total_iters=8),
            schedulers.StepLR(lr=LR, step_size=6, gamma=0.5),
            schedulers.PolynomialLR(lr=LR, total_iters=30, power=0.5),
            schedulers.MultiStepLR(lr=LR, milestones=[0, 3, 10, 10], gamma=0.8),
            schedulers.MultiplicativeLR(lr=LR, lr_lambda=lambda epoch: 1.0 - 0.002 * (epoch % 5)),
        ],
    ),
    (
        "constant-total-iters-0",
        lambda o: [tsched.ExponentialLR(o, 0.95), tsched.ConstantLR(o, factor=0.5, total_iters=0)],
        lambda: [
            schedulers.ExponentialLR(lr=LR, gamma=0.95),
            schedulers.ConstantLR(lr=LR, factor=0.5, total_iters=0),
        ],
    ),
    (
        "lambda-then-exponential",  # LambdaLR sets the lr: only the next ratio survives
        lambda o: [tsched.LambdaLR(o, lambda epoch: 1 + epoch), tsched.ExponentialLR(o, 0.9)],
        lambda: [
            schedulers.LambdaLR(lr=LR, lr_lambda=lambda epoch: 1 + epoch),
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
        ],
    ),
    (
        "exponential-then-lambda",
        lambda o: [tsched.ExponentialLR(o, 0.9), tsched.LambdaLR(o, lambda epoch: 0.97**epoch)],
        lambda: [
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
            schedulers.LambdaLR(lr=LR, lr_lambda=lambda epoch: 0.97**epoch),
        ],
    ),
    (
        "warm-restarts-step",
        lambda o: [tsched.CosineAnnealingWarmRestarts(o, 5, 2), tsched.StepLR(o, 3, 0.5)],
        lambda: [
            schedulers.CosineAnnealingWarmRestarts(lr=LR, T_0=5, T_mult=2),
            schedulers.StepLR(lr=LR, step_size=3, gamma=0.5),
        ],
    ),
    (
        "cyclic-built-second",  # its first lr is the group's initial_lr, not base_lr
        lambda o: [
            tsched.ExponentialLR(o, 0.9),
            tsched.CyclicLR(o, 0.01, 0.1, 4, cycle_momentum=False),
            tsched.ConstantLR(o, 0.5, 7),
        ],
        lambda: [
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
            schedulers.CyclicLR(0.01, 0.1, 4, cycle_momentum=False),
            schedulers.ConstantLR(lr=LR, factor=0.5, total_iters=7),
        ],
    ),
    (
        "one-cycle-then-cyclic",
        lambda o: [
            tsched.OneCycleLR(o, 0.5, total_steps=50, cycle_momentum=False),
            tsched.CyclicLR(o, 0.01, 0.1, 3, cycle_momentum=False),
        ],
        lambda: [
            schedulers.OneCycleLR(0.5, total_steps=50, cycle_momentum=False),
            schedulers.CyclicLR(0.01, 0.1, 3, cycle_momentum=False),
        ],
    ),
    (
        "cosine-exponential",  # past T_max torch's cosine adds to 0: a replay
        lambda o: [tsched.CosineAnnealingLR(o, T_max=4), tsched.ExponentialLR(o, 0.9)],
        lambda: [
            schedulers.CosineAnnealingLR(lr=LR, T_max=4),
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
        ],
    ),
    (
        "linear-cosine-eta-min-exponential",
        lambda o: [
            tsched.LinearLR(o, 0.3, total_iters=5),
            tsched.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
            tsched.ExponentialLR(o, 0.97),
        ],
        lambda: [
            schedulers.LinearLR(lr=LR, start_factor=0.3, total_iters=5),
            schedulers.CosineAnnealingLR(lr=LR, T_max=7, eta_min=0.01),
            schedulers.ExponentialLR(lr=LR, gamma=0.97),
        ],
    ),
    (
        "cosine-alone",
        lambda o: [tsched.CosineAnnealingLR(o, T_max=9, eta_min=0.02)],
        lambda: [schedulers.CosineAnnealingLR(lr=LR, T_max=9, eta_min=0.02)],
    ),
]


# one chain in three in the default run, every chain in the exhaustive run (CI)
@pytest.mark.parametrize(
    "theirs,ours", one_in(3, [c[1:] for c in CHAINS]), ids=[c[0] for c in CHAINS]
)
def test_chained_scheduler_equals_torchs_step_by_step(x64, theirs, ours):
    lrs, _ = _torch_run(lambda opt: tsched.ChainedScheduler(theirs(opt)))
    # torch's optimizer= argument only checks that the schedulers share it
    with_optimizer, _ = _torch_run(lambda opt: tsched.ChainedScheduler(theirs(opt), optimizer=opt))
    np.testing.assert_array_equal(lrs, with_optimizer)
    _assert_schedule(lrs, schedulers.ChainedScheduler(ours()))


def test_chained_scheduler_nested_is_flattened(x64):
    def theirs(opt):
        inner = tsched.ChainedScheduler(
            [tsched.StepLR(opt, 2, 0.5), tsched.ExponentialLR(opt, 0.9)]
        )
        return tsched.ChainedScheduler([inner, tsched.CosineAnnealingLR(opt, T_max=6)])

    lrs, _ = _torch_run(theirs)
    inner = schedulers.ChainedScheduler(
        [
            schedulers.StepLR(lr=LR, step_size=2, gamma=0.5),
            schedulers.ExponentialLR(lr=LR, gamma=0.9),
        ]
    )
    _assert_schedule(
        lrs, schedulers.ChainedScheduler([inner, schedulers.CosineAnnealingLR(lr=LR, T_max=6)])
    )


@pytest.mark.parametrize("jit", [False, True])
def test_chained_scheduler_training_trajectory_float64(x64, jit):
    # Adam under warmup x exponential decay x cosine: params and state after every step
    def theirs(opt):
        return tsched.ChainedScheduler(
            [
                tsched.LinearLR(opt, start_factor=0.1, total_iters=5),
                tsched.ExponentialLR(opt, gamma=0.95),
                tsched.CosineAnnealingLR(opt, T_max=12),
            ],
            optimizer=opt,
        )

    hyper = dict(lr=0.01, weight_decay=0.01)
    sched = schedulers.ChainedScheduler(
        [
            schedulers.LinearLR(lr=0.01, start_factor=0.1, total_iters=5),
            schedulers.ExponentialLR(lr=0.01, gamma=0.95),
            schedulers.CosineAnnealingLR(lr=0.01, T_max=12),
        ]
    )
    optimizer = joptim.adam(**dict(hyper, lr=sched))
    reference, candidate = trajectories(
        "adam", hyper, "float64", 30, jit=jit, jax_optimizer=optimizer, torch_scheduler=theirs
    )
    report = assert_parity(reference, candidate)
    assert {leaf.dtype for leaf in report.leaves} == {"float64"}


def test_chained_scheduler_refusals_are_named():
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=LR)
    exponential = schedulers.ExponentialLR(lr=LR, gamma=0.9)
    # what torch refuses
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        tsched.ChainedScheduler([])
    with pytest.raises(ValueError, match="expects at least one scheduler"):
        schedulers.ChainedScheduler([])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        tsched.ChainedScheduler([tsched.ReduceLROnPlateau(optimizer)])
    with pytest.raises(ValueError, match=r"`schedulers\[1\]` is a ReduceLROnPlateau"):
        schedulers.ChainedScheduler([exponential, schedulers.ReduceLROnPlateau(lr=LR)])
    # what a pure schedule cannot express, each by name
    for build, error, match in (
        (
            lambda: schedulers.ChainedScheduler([exponential], optimizer=joptim.sgd()),
            ValueError,
            r"`optimizer` \(=.*\) must be None",
        ),
        (
            lambda: schedulers.ChainedScheduler([exponential, lambda t: 0.1]),
            TypeError,
            r"`schedulers\[1\]` \(=<function",
        ),
        (
            lambda: schedulers.ChainedScheduler(
                [exponential, schedulers.CyclicLR(base_lr=0.01, max_lr=0.1)]
            ),
            ValueError,
            r"`schedulers\[1\]` \(CyclicLR\) cycles momentum",
        ),
        (
            lambda: schedulers.ChainedScheduler(
                [schedulers.SequentialLR([exponential, exponential], milestones=[2])]
            ),
            ValueError,
            r"`schedulers\[0\]` is a SequentialLR",
        ),
        (
            lambda: schedulers.ChainedScheduler([exponential, exponential]),
            ValueError,
            r"one ExponentialLR twice \(positions 0 and 1",
        ),
        (
            lambda: schedulers.ChainedScheduler(
                [exponential, schedulers.StepLR(lr=0.2, step_size=3)]
            ),
            ValueError,
            r"ExponentialLR has lr=0\.1, StepLR \(position 1\) has lr=0\.2",
        ),
        (
            lambda: schedulers.ChainedScheduler(
                [
                    schedulers.CyclicLR(0.01, 0.1, cycle_momentum=False),
                    schedulers.LambdaLR(lr=LR, lr_lambda=lambda t: 1.0),
                ]
            ),
            ValueError,
            r"LambdaLR \(position 1\) reads the optimizer's `initial_lr`",
        ),
    ):
        with pytest.raises(error, match=match):
            build()


# ---------------------------------------------------- SequentialLR restarts, ConstantLR edges


def test_sequential_lr_restarts_as_torch_does(x64):
    # at a milestone torch restarts a scheduler with its closed form at 0: ConstantLR with
    # total_iters=0 gives lr there (and keeps it), while alone it gives factor * lr;
    # MultiplicativeLR has no closed form and multiplies the lr the previous one left
    def theirs(opt):
        return tsched.SequentialLR(
            opt,
            [
                tsched.ConstantLR(opt, factor=0.5, total_iters=0),
                tsched.ExponentialLR(opt, 0.8),
                tsched.MultiplicativeLR(opt, lambda epoch: 0.3 if epoch == 0 else 0.95),
                tsched.ConstantLR(opt, factor=0.25, total_iters=0),
                tsched.MultiplicativeLR(opt, lambda epoch: 1.0 - 0.01 * epoch),
            ],
            milestones=[3, 9, 20, 26],
        )

    lrs, _ = _torch_run(theirs)
    sched = schedulers.SequentialLR(
        [
            schedulers.ConstantLR(lr=LR, factor=0.5, total_iters=0),
            schedulers.ExponentialLR(lr=LR, gamma=0.8),
            schedulers.MultiplicativeLR(
                lr=LR, lr_lambda=lambda epoch: jnp.where(epoch == 0, 0.3, 0.95)
            ),
            schedulers.ConstantLR(lr=LR, factor=0.25, total_iters=0),
            schedulers.MultiplicativeLR(lr=LR, lr_lambda=lambda epoch: 1.0 - 0.01 * epoch),
        ],
        milestones=[3, 9, 20, 26],
    )
    _assert_schedule(lrs, sched)


def test_sequential_lr_refuses_composite_children():
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=LR)
    chained = tsched.ChainedScheduler([tsched.ExponentialLR(optimizer, 0.9)])
    scheduler = tsched.SequentialLR(
        optimizer, [tsched.StepLR(optimizer, 2), chained], milestones=[2]
    )
    with pytest.raises(NotImplementedError):  # torch, at the milestone
        for _ in range(3):
            optimizer.step()
            scheduler.step()
    ours = schedulers.ChainedScheduler([schedulers.ExponentialLR(lr=LR, gamma=0.9)])
    with pytest.raises(ValueError, match=r"`schedulers\[1\]` is a ChainedScheduler"):
        schedulers.SequentialLR([schedulers.StepLR(lr=LR, step_size=2), ours], milestones=[2])


def test_constant_lr_with_factor_0_is_nan_where_torch_raises(x64):
    # torch's step total_iters multiplies by 1 / factor: ZeroDivisionError
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=LR)
    scheduler = tsched.ConstantLR(optimizer, factor=0.0, total_iters=3)
    lrs = []
    with pytest.raises(ZeroDivisionError):
        for _ in range(STEPS):
            lrs.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
    assert lrs == [0.0, 0.0, 0.0]
    sched = schedulers.ConstantLR(lr=LR, factor=0.0, total_iters=3)
    for values in (
        np.asarray([sched(t) for t in range(6)]),
        np.asarray(jax.jit(jax.vmap(sched))(jnp.arange(6))),
    ):
        np.testing.assert_array_equal(values[:3], 0.0)
        assert np.isnan(values[3:]).all()


def test_schedules_keep_float64_at_optax_int32_counts(x64):
    # optax counts steps in int32; a user's function of it (1 / (epoch + 1)) gets the
    # default int, so the rate is not rounded to float32 in a float64 run
    count = jnp.asarray(7, jnp.int32)
    reciprocal = lambda epoch: 1 / (epoch + 1)  # noqa: E731
    for sched in (
        schedulers.LambdaLR(lr=LR, lr_lambda=reciprocal),
        schedulers.MultiplicativeLR(lr=LR, lr_lambda=lambda epoch: 1 - reciprocal(epoch + 9)),
        schedulers.CyclicLR(0.01, 0.1, 3, scale_fn=reciprocal),
        schedulers.CyclicLR(0.01, 0.1, 3, mode="triangular2"),
        schedulers.ChainedScheduler(
            [
                schedulers.LambdaLR(lr=LR, lr_lambda=reciprocal),
                schedulers.ExponentialLR(lr=LR, gamma=0.9),
            ]
        ),
    ):
        for value in (sched(count), jax.jit(sched)(count)):
            assert value.dtype == jnp.float64, sched.name
    lrs, _ = _torch_run(lambda opt: tsched.LambdaLR(opt, reciprocal))
    assert_parity(
        lrs,
        np.asarray(
            jax.vmap(schedulers.LambdaLR(lr=LR, lr_lambda=reciprocal))(
                jnp.arange(STEPS, dtype=jnp.int32)
            )
        ),
    )
