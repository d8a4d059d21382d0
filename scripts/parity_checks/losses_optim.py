"""Parity rows for the losses, optimizers and schedulers of issue 12 (float64, cheap).

Losses: value and input gradients of the torch conventions that are easy to get
wrong (weighted mean over non-ignored targets, label smoothing with both, `(N, C, d)`
inputs, BCE weights, ``kl_div`` batchmean, Gaussian NLL's clamped variance). The
exhaustive op_db / module_db / optim_db runs are ``scripts/conformance_losses_optim.py``.
Optimizers: 30 float64 steps, parameters and every state tensor. Schedulers: the
factories' learning rates against ``get_last_lr()`` (ReduceLROnPlateau, a state machine
of a metric, is in parity_tests/test_schedulers.py only).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler as tsched

from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.optim import schedulers
from jaxgrad.parity import compare
from parity_checks import _conformance_losses as closses
from parity_checks import _conformance_optim as coptim
from parity_checks.harness import Check, jax_precision
from parity_checks.optimizers import trajectories as optimizer_trajectories


def _tensor(rng, shape, low=None, high=None):
    if low is None:
        return torch.tensor(rng.standard_normal(shape))
    return torch.tensor(rng.uniform(low, high, shape))


def _loss_case(name):
    rng = np.random.default_rng(0)
    if name == "cross_entropy (N,C,d) wt,ignore,smooth":
        target = torch.tensor(rng.integers(0, 4, (3, 5)))
        target[0, 1] = -100
        return (
            F.cross_entropy,
            jlosses.cross_entropy,
            (_tensor(rng, (3, 4, 5)), target),
            dict(weight=_tensor(rng, 4, 0.5, 2.0), label_smoothing=0.1),
        )
    if name == "nll_loss weight ignore_index=1 sum":
        return (
            F.nll_loss,
            jlosses.nll_loss,
            (_tensor(rng, (6, 3)), torch.tensor(rng.integers(0, 3, 6))),
            dict(weight=_tensor(rng, 3, 0.5, 2.0), ignore_index=1, reduction="sum"),
        )
    if name == "binary_cross_entropy weight":
        return (
            F.binary_cross_entropy,
            jlosses.binary_cross_entropy,
            (_tensor(rng, (4, 3), 0.05, 0.95), _tensor(rng, (4, 3), 0, 1)),
            dict(weight=_tensor(rng, 3, 0.5, 2.0)),
        )
    if name == "bce_with_logits weight+pos_weight":
        return (
            F.binary_cross_entropy_with_logits,
            jlosses.binary_cross_entropy_with_logits,
            (_tensor(rng, (4, 3)), _tensor(rng, (4, 3), 0, 1)),
            dict(weight=_tensor(rng, (4, 1), 0.5, 2.0), pos_weight=_tensor(rng, 3, 0.5, 3.0)),
        )
    if name == "kl_div batchmean log_target":
        return (
            F.kl_div,
            jlosses.kl_div,
            (
                torch.log_softmax(_tensor(rng, (4, 5)), 1),
                torch.log_softmax(_tensor(rng, (4, 5)), 1),
            ),
            dict(reduction="batchmean", log_target=True),
        )
    if name == "huber_loss delta=0.5":
        return (
            F.huber_loss,
            jlosses.huber_loss,
            (_tensor(rng, (5, 3)), _tensor(rng, (5, 3))),
            dict(delta=0.5),
        )
    if name == "gaussian_nll_loss var clamped, full":
        var = _tensor(rng, (5, 1), 0.0, 0.5)
        var[0, 0] = 1e-9
        return (
            F.gaussian_nll_loss,
            jlosses.gaussian_nll_loss,
            (_tensor(rng, (5, 3)), _tensor(rng, (5, 3)), var),
            dict(full=True, eps=1e-3),
        )
    raise KeyError(name)


LOSS_ROWS = (
    "cross_entropy (N,C,d) wt,ignore,smooth",
    "nll_loss weight ignore_index=1 sum",
    "binary_cross_entropy weight",
    "bce_with_logits weight+pos_weight",
    "kl_div batchmean log_target",
    "huber_loss delta=0.5",
    "gaussian_nll_loss var clamped, full",
)


def loss_parity(name):
    torch_fn, jax_fn, args, kwargs = _loss_case(name)
    with jax_precision("float64"):
        return closses.compare_call(torch_fn, jax_fn, args, kwargs)


OPTIMIZER_ROWS = [
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1)),
    ("Adamax", dict(lr=0.01, weight_decay=0.1, maximize=True)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.006, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("ASGD", dict(lr=0.02, t0=5, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True)),
]


OPTIMIZER_LABELS = [
    "adagrad(lr_decay,wd,init_acc=0.1)",
    "adamax(wd,maximize)",
    "nadam(wd,mom_decay,decoupled)",
    "radam(wd)",
    "asgd(t0=5,wd)",
    "adam(wd,amsgrad,maximize)",
    "sgd(mom,nesterov,maximize)",
]


def optimizer_parity(name, kwargs):
    factory = joptim.OPTIMIZERS[coptim.SUPPORTED[name]]
    reference = coptim.torch_trajectory(getattr(torch.optim, name), kwargs)
    with jax_precision("float64"):
        candidate = coptim.jax_trajectory(factory(**kwargs))
    return compare(reference, candidate)


SCHEDULER_CASES = [
    ("StepLR", dict(step_size=7, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[3, 10])),
    ("ExponentialLR", dict(gamma=0.93)),
    ("CosineAnnealingLR", dict(T_max=15, eta_min=1e-3)),
    ("CosineAnnealingWarmRestarts", dict(T_0=4, T_mult=2)),
    ("LinearLR", dict(total_iters=12)),
    ("ConstantLR", dict(factor=0.25)),
    ("PolynomialLR", dict(total_iters=30, power=2.0)),
    ("OneCycleLR", dict(max_lr=0.5, total_steps=40, cycle_momentum=False, three_phase=True)),
]


def scheduler_parity():
    reference, candidate = {}, {}
    for name, kwargs in SCHEDULER_CASES:
        w = torch.zeros(1, requires_grad=True)
        optimizer = torch.optim.SGD([w], lr=0.1)
        scheduler = getattr(tsched, name)(optimizer, **kwargs)
        lrs = []
        for _ in range(40):
            lrs.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
        reference[name] = np.asarray(lrs)
        with jax_precision("float64"):
            factory = getattr(schedulers, name)
            sched = factory(**kwargs) if name == "OneCycleLR" else factory(lr=0.1, **kwargs)
            candidate[name] = np.asarray([sched(t) for t in range(40)])
    return compare(reference, candidate)


def _lr_scheduler_parity(cases, steps=40):
    """``(label, torch scheduler of an SGD optimizer, jaxgrad schedule)``: the rates, the
    jaxgrad ones jitted (as an optimizer's update reads them)."""
    reference, candidate = {}, {}
    for label, theirs, ours in cases:
        optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        scheduler = theirs(optimizer)
        lrs = []
        for _ in range(steps):
            lrs.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
        reference[label] = np.asarray(lrs)
        with jax_precision("float64"):
            candidate[label] = np.asarray(jax.jit(jax.vmap(ours()))(jnp.arange(steps)))
    return compare(reference, candidate)


# the other schedulers, composed as torch steps them, and two edges where torch's
# get_last_lr() leaves its closed form (ConstantLR total_iters=0) or jit's rounding
# would leave 0 (PolynomialLR power < 1)
MORE_SCHEDULER_CASES = [
    (
        "CyclicLR triangular2",
        lambda o: tsched.CyclicLR(o, 0.01, 0.1, 4, 7, "triangular2", cycle_momentum=False),
        lambda: schedulers.CyclicLR(0.01, 0.1, 4, 7, "triangular2", cycle_momentum=False),
    ),
    (
        "MultiplicativeLR",
        lambda o: tsched.MultiplicativeLR(o, lambda e: 0.9 + 0.01 * (e % 3)),
        lambda: schedulers.MultiplicativeLR(lr=0.1, lr_lambda=lambda e: 0.9 + 0.01 * (e % 3)),
    ),
    (
        "ChainedScheduler LambdaLR, ExponentialLR",
        lambda o: tsched.ChainedScheduler(
            [tsched.LambdaLR(o, lambda e: 1 + e), tsched.ExponentialLR(o, 0.9)]
        ),
        lambda: schedulers.ChainedScheduler(
            [
                schedulers.LambdaLR(lr=0.1, lr_lambda=lambda e: 1 + e),
                schedulers.ExponentialLR(lr=0.1, gamma=0.9),
            ]
        ),
    ),
    (
        "ChainedScheduler CosineAnnealingLR, StepLR",
        lambda o: tsched.ChainedScheduler(
            [tsched.CosineAnnealingLR(o, T_max=6, eta_min=1e-3), tsched.StepLR(o, 4, 0.5)]
        ),
        lambda: schedulers.ChainedScheduler(
            [
                schedulers.CosineAnnealingLR(lr=0.1, T_max=6, eta_min=1e-3),
                schedulers.StepLR(lr=0.1, step_size=4, gamma=0.5),
            ]
        ),
    ),
    (
        "ConstantLR total_iters=0",
        lambda o: tsched.ConstantLR(o, factor=0.5, total_iters=0),
        lambda: schedulers.ConstantLR(lr=0.1, factor=0.5, total_iters=0),
    ),
    (
        "PolynomialLR power=0.5",
        lambda o: tsched.PolynomialLR(o, total_iters=30, power=0.5),
        lambda: schedulers.PolynomialLR(lr=0.1, total_iters=30, power=0.5),
    ),
]


# OneCycleLR with torch's default cycle_momentum=True: the MLP trained 30 steps, params
# and optimizer state compared after every step (jaxgrad gets `sched.momentum`)
ONE_CYCLE_ROWS = [
    ("sgd(nesterov),cos", "sgd", dict(lr=0.1, momentum=0.9, nesterov=True), dict(max_lr=0.05)),
    (
        "adam(wd),3-phase",
        "adam",
        dict(lr=0.1, weight_decay=0.01),
        dict(max_lr=0.01, three_phase=True),
    ),
    ("adamw,linear", "adamw", dict(lr=0.1), dict(max_lr=0.01, anneal_strategy="linear")),
]


def one_cycle_parity(name, hyper, kwargs, steps=30):
    kwargs = dict(kwargs, total_steps=steps)
    factory = joptim.OPTIMIZERS[name]
    with jax_precision("float64"):
        sched = schedulers.OneCycleLR(**kwargs)
        optimizer = factory(**schedulers.with_cycled_momentum(factory, dict(hyper, lr=sched)))
        reference, candidate = optimizer_trajectories(
            name,
            hyper,
            "float64",
            steps,
            jit=False,
            jax_optimizer=optimizer,
            torch_scheduler=lambda opt: tsched.OneCycleLR(opt, **kwargs),
        )
    return compare(reference, candidate)


CHECKS = (
    [
        Check(
            name=f"loss {name}",
            dtype="float64",
            area="losses",
            run=functools.partial(loss_parity, name),
        )
        for name in LOSS_ROWS
    ]
    + [
        Check(
            name=f"{label} x30",
            dtype="float64",
            area="optim",
            run=functools.partial(optimizer_parity, name, kwargs),
        )
        for label, (name, kwargs) in zip(OPTIMIZER_LABELS, OPTIMIZER_ROWS)
    ]
    + [
        Check(
            name="schedulers: 9 classes x40 get_last_lr",
            dtype="float64",
            area="optim",
            run=scheduler_parity,
        )
    ]
    + [
        Check(
            name="schedulers: Cyclic,Multiplicative,Chained,edges x40",
            dtype="float64",
            area="optim",
            run=functools.partial(_lr_scheduler_parity, MORE_SCHEDULER_CASES),
        )
    ]
    + [
        Check(
            name=f"schedulers: OneCycleLR momentum {label} x30",
            dtype="float64",
            area="optim",
            run=functools.partial(one_cycle_parity, name, hyper, kwargs),
        )
        for label, name, hyper, kwargs in ONE_CYCLE_ROWS
    ]
)
