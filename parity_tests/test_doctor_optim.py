"""The optimizer doctor and training drift: each optimizer convention, planted in an
optax port written here (optax's own aliases or a hand-written transformation), is
ranked first; matching ports get a clean bill; bad input is a clear error."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

from jaxgrad.doctor import OPTIMIZER_CATALOGUE, diagnose_optimizer, training_drift

SHAPES = [(3, 2), (2,)]


def _run(make, tx, steps=3, **kw):
    rng = np.random.default_rng(1)
    start = [rng.normal(size=s) for s in SHAPES]
    grads = [[rng.normal(size=s) * 0.01 for s in SHAPES] for _ in range(steps)]
    params = [torch.nn.Parameter(torch.tensor(s)) for s in start]
    return diagnose_optimizer(make(params), tx, grads, **kw)


def _hand_adam(lr, b1=0.9, b2=0.999, eps=1e-8, *, eps_before_bc=False, bias_correction=True):
    """Adam written out, with one of two mistakes on request."""

    def init(p):
        return (jax.tree.map(jnp.zeros_like, p), jax.tree.map(jnp.zeros_like, p), 0)

    def update(g, state, p=None):
        m, v, t = state
        t += 1
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g**2, v, g)
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
        if eps_before_bc:
            u = jax.tree.map(lambda m, v: -lr * (m / c1) * jnp.sqrt(c2) / (jnp.sqrt(v) + eps), m, v)
        else:
            u = jax.tree.map(lambda m, v: -lr * (m / c1) / (jnp.sqrt(v / c2) + eps), m, v)
        return u, (m, v, t)

    return optax.GradientTransformation(init, update)


CASES = {
    "adam_eps_inside_sqrt": (
        lambda p: torch.optim.Adam(p, lr=0.1, eps=1e-3),
        optax.adam(0.1, eps=0.0, eps_root=1e-3),
        {},
    ),
    "adam_eps_before_bias_correction": (
        lambda p: torch.optim.Adam(p, lr=0.1, eps=1e-3),
        _hand_adam(0.1, eps=1e-3, eps_before_bc=True),
        {},
    ),
    "adam_no_bias_correction": (
        lambda p: torch.optim.Adam(p, lr=0.1),
        _hand_adam(0.1, bias_correction=False),
        {},
    ),
    "coupled_vs_decoupled_decay": (
        lambda p: torch.optim.Adam(p, lr=0.1, weight_decay=0.1),
        optax.adamw(0.1, weight_decay=0.1),
        {},
    ),
    "adamw_default_decay": (lambda p: torch.optim.AdamW(p, lr=0.1), optax.adamw(0.1), {}),
    "decay_dropped": (lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=0.1), optax.sgd(0.1), {}),
    "momentum_as_ema": (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        optax.chain(optax.ema(0.9, debias=False), optax.scale(-0.1)),
        {},
    ),
    "dampening_first_step": (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.5),
        optax.chain(optax.scale(0.5), optax.trace(0.9), optax.scale(-0.1)),
        {},
    ),
    "nesterov": (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        optax.sgd(0.1, momentum=0.9, nesterov=True),
        {},
    ),
    "rmsprop_eps_inside_sqrt": (
        lambda p: torch.optim.RMSprop(p, lr=0.01, eps=1e-3),
        optax.rmsprop(0.01, decay=0.99, eps=1e-3),
        {},
    ),
    "rmsprop_decay": (
        lambda p: torch.optim.RMSprop(p, lr=0.01),
        optax.rmsprop(0.01, eps=1e-8, eps_in_sqrt=False),
        {},
    ),
    "clipping_eps": (
        lambda p: torch.optim.SGD(p, lr=0.1),
        optax.chain(optax.clip_by_global_norm(1e-3), optax.sgd(0.1)),
        {"max_norm": 1e-3},
    ),
}


def test_every_entry_has_a_case():
    assert {e.name for e in OPTIMIZER_CATALOGUE} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_convention_ranked_first(x64, name):
    make, tx, kw = CASES[name]
    report = _run(make, tx, **kw)
    assert report.first_step == 1, str(report)
    assert report.twin_error < 1e-12, str(report)
    assert report.causes[0][0] == name and report.causes[0][3], str(report)
    assert f"[{name}]" in str(report)


@pytest.mark.parametrize(
    "make,tx",
    [
        (lambda p: torch.optim.Adam(p, lr=0.1), optax.adam(0.1)),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9)),
        (
            lambda p: torch.optim.RMSprop(p, lr=0.01),
            optax.rmsprop(0.01, decay=0.99, eps=1e-8, eps_in_sqrt=False),
        ),
    ],
)
def test_optimizer_clean_bill(x64, make, tx):
    report = _run(make, tx)
    assert report.first_step is None and "clean bill" in str(report)


def test_optimizer_bad_input(x64):
    p = [torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))]
    with pytest.raises(ValueError, match=r"`grads\[0\]` shapes \[\(3,\)\]"):
        diagnose_optimizer(torch.optim.SGD(p, lr=0.1), optax.sgd(0.1), [[np.zeros(3)]])
    with pytest.raises(ValueError, match="no optax twin for torch.optim.Adagrad"):
        diagnose_optimizer(torch.optim.Adagrad(p, lr=0.1), optax.sgd(0.1), [[np.ones(2)]])
    q = [torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))]
    with pytest.raises(ValueError, match="one param group, got 2"):
        diagnose_optimizer(
            torch.optim.SGD([{"params": p}, {"params": q}], lr=0.1),
            optax.sgd(0.1),
            [[np.ones(2), np.ones(2)]],
        )


def _runs(where):
    """Two 3-step SGD runs on loss = sum(w*x), the port's going wrong ``where``."""
    x = np.array([1.0, 2.0])
    steps_r, steps_p = [], []
    w_r = w_p = np.array([0.5, -0.5])
    for k in range(3):
        out_r, out_p = w_r @ x, w_p @ x + (1e-3 if where == "forward" and k == 1 else 0)
        g_r = x.copy()
        # a different forward output changes the gradient too (here: a loss scale)
        g_p = x * (1.01 if where in ("forward", "gradient") and k == 1 else 1.0)
        steps_r.append({"params": {"w": w_r}, "output": out_r, "grads": {"w": g_r}})
        steps_p.append({"params": {"w": w_p}, "output": out_p, "grads": {"w": g_p}})
        w_r = w_r - 0.1 * g_r
        w_p = w_p - (0.11 if where == "update" and k == 1 else 0.1) * g_p
    steps_r.append({"params": {"w": w_r}})
    steps_p.append({"params": {"w": w_p}})
    return steps_r, steps_p


@pytest.mark.parametrize("where", ["forward", "gradient", "update"])
def test_training_drift(where):
    report = training_drift(*_runs(where))
    assert (report.step, report.cause) == (1, where), str(report)


def test_training_drift_clean_and_bad_input():
    r, p = _runs(None)
    assert training_drift(r, p).step is None
    with pytest.raises(ValueError, match="different lengths"):
        training_drift(r, p[:-1])
    p[0] = {**p[0], "params": {"v": p[0]["params"]["w"]}}
    with pytest.raises(ValueError, match=r"entry 0: param names differ: reference only \['w'\]"):
        training_drift(r, p)
