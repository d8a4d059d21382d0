"""jaxgrad.optim.optimizer_state_dict / load_optimizer_state_dict against torch's
``optimizer.state_dict()`` / ``load_state_dict``: same layout, and a trajectory handed
over between the frameworks mid-way continues identically (float64)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from torch.optim import lr_scheduler as tsched

import jaxgrad.nn
from jaxgrad import optim as joptim
from jaxgrad.optim import schedulers
from jaxgrad.parity import assert_parity
from torchref import optim as toptim

X = np.random.default_rng(0).standard_normal((5, 3))
# (optimizer, defaults, overrides of the second group: the bias)
CASES = [
    ("sgd", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), dict(lr=0.05)),
    ("adam", dict(lr=0.01, amsgrad=True, weight_decay=0.01), dict(weight_decay=0.0)),
    ("adamw", dict(lr=0.01), dict(lr=0.02, betas=(0.8, 0.9))),
    ("rmsprop", dict(lr=0.01, momentum=0.5, centered=True), dict(alpha=0.9)),
    ("nadam", dict(lr=0.01), dict(lr=0.005)),
    ("asgd", dict(lr=0.01, t0=2.0), dict(lambd=1e-3)),
    ("adagrad", dict(lr=0.1, lr_decay=0.01), dict(eps=1e-6)),
]
IDS = [name for name, _, _ in CASES]


def _module():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2).double()


def _loss(output):
    return (
        (output.sin() * output).sum()
        if isinstance(output, torch.Tensor)
        else (jnp.sin(output) * output).sum()
    )


def _torch_optimizer(name, module, defaults, overrides):
    return toptim.make_optimizer(
        name, [{"params": [module.weight]}, {"params": [module.bias], **overrides}], **defaults
    )


def _torch_steps(module, optimizer, steps, scheduler=None):
    x = torch.from_numpy(X)
    history = []
    for _ in range(steps):
        optimizer.zero_grad()
        _loss(module(x)).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.append({n: p.detach().numpy().copy() for n, p in module.named_parameters()})
    return history


def _jax_setup(name, defaults, overrides):
    model, params = jaxgrad.nn.from_torch(_module())
    groups = [{"params": "weight"}, {"params": "bias", **overrides}]
    optimizer = joptim.param_groups(joptim.OPTIMIZERS[name], groups, **defaults)
    return model, params, groups, optimizer


def _jax_steps(model, optimizer, params, state, steps):
    grad = jax.grad(lambda p: _loss(model.apply(p, jnp.asarray(X))))
    history = []
    for _ in range(steps):
        updates, state = optimizer.update(grad(params), state, params)
        params = optax.apply_updates(params, updates)
        history.append({k: np.asarray(v) for k, v in params.items()})
    return params, state, history


def _to_torch(state_dict):
    return {
        "state": {
            i: {k: torch.from_numpy(np.array(v)) for k, v in entry.items()}
            for i, entry in state_dict["state"].items()
        },
        "param_groups": state_dict["param_groups"],
    }


def _assert_same_state_dict(theirs, ours):
    assert ours["param_groups"] == theirs["param_groups"]
    assert list(ours["state"]) == list(theirs["state"])
    for index, entry in theirs["state"].items():
        assert sorted(ours["state"][index]) == sorted(entry)
        for field, value in entry.items():
            assert ours["state"][index][field].dtype == value.numpy().dtype, (index, field)
            assert_parity(
                value.numpy(), ours["state"][index][field], name=f"state[{index}][{field}]"
            )


@pytest.mark.parametrize("name,defaults,overrides", CASES, ids=IDS)
def test_state_dict_is_torchs_after_k_steps(x64, name, defaults, overrides):
    module = _module()
    optimizer = _torch_optimizer(name, module, defaults, overrides)
    _torch_steps(module, optimizer, 4)
    model, params, groups, jax_optimizer = _jax_setup(name, defaults, overrides)
    _, state, _ = _jax_steps(model, jax_optimizer, params, jax_optimizer.init(params), 4)
    ours = joptim.optimizer_state_dict(state, params, joptim.OPTIMIZERS[name], groups, **defaults)
    _assert_same_state_dict(optimizer.state_dict(), ours)


@pytest.mark.parametrize("name,defaults,overrides", CASES, ids=IDS)
def test_handover_jax_to_torch_and_back_continues_the_trajectory(x64, name, defaults, overrides):
    # 3 steps in jaxgrad, its state_dict loaded into a fresh torch optimizer, 3 more
    # in both; and torch's state_dict after 3 steps loaded into jaxgrad, 3 more in both
    model, params, groups, jax_optimizer = _jax_setup(name, defaults, overrides)
    factory = joptim.OPTIMIZERS[name]
    params, state, _ = _jax_steps(model, jax_optimizer, params, jax_optimizer.init(params), 3)
    module = _module()
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in params.items()})
    optimizer = _torch_optimizer(name, module, defaults, overrides)
    optimizer.load_state_dict(
        _to_torch(joptim.optimizer_state_dict(state, params, factory, groups, **defaults))
    )
    reference = _torch_steps(module, optimizer, 3)
    _, _, ours = _jax_steps(model, jax_optimizer, params, state, 3)
    assert_parity(reference, ours)

    count = {"count": 3} if name == "sgd" else {}  # torch's SGD keeps no step
    restored = joptim.load_optimizer_state_dict(
        jax_optimizer, params, _to_torch_copy(optimizer), groups, **count
    )
    current = {k: jnp.asarray(v.detach().numpy()) for k, v in module.named_parameters()}
    reference = _torch_steps(module, optimizer, 3)
    _, _, ours = _jax_steps(model, jax_optimizer, current, restored, 3)
    assert_parity(reference, ours)


def _to_torch_copy(optimizer):
    return {
        "state": {
            i: {k: v.clone() for k, v in entry.items()}
            for i, entry in optimizer.state_dict()["state"].items()
        },
        "param_groups": optimizer.state_dict()["param_groups"],
    }


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("OneCycleLR", dict(max_lr=0.05, total_steps=20, three_phase=True)),
        ("CyclicLR", dict(base_lr=0.01, max_lr=0.05, step_size_up=3, mode="triangular2")),
    ],
)
@pytest.mark.parametrize(
    "factory,torch_cls", [(joptim.sgd, torch.optim.SGD), (joptim.adam, torch.optim.Adam)]
)
def test_one_cycle_groups_hold_what_torchs_scheduler_wrote(x64, factory, torch_cls, name, kwargs):
    # OneCycleLR and CyclicLR write their entries (initial_lr, max_momentum, ...) and the
    # momentum / betas[0] they cycle into every group
    module = _module()
    optimizer = torch_cls(module.parameters(), lr=0.1)
    _torch_steps(module, optimizer, 7, getattr(tsched, name)(optimizer, **kwargs))
    sched = getattr(schedulers, name)(**kwargs)
    options = schedulers.with_cycled_momentum(factory, {"lr": sched})
    model, params = jaxgrad.nn.from_torch(_module())
    jax_optimizer = factory(**options)
    _, state, _ = _jax_steps(model, jax_optimizer, params, jax_optimizer.init(params), 7)
    ours = joptim.optimizer_state_dict(state, params, factory, **options)
    theirs = optimizer.state_dict()
    for key in ("lr", "momentum"):
        if key in theirs["param_groups"][0]:
            assert_parity(theirs["param_groups"][0].pop(key), ours["param_groups"][0].pop(key))
    if "betas" in theirs["param_groups"][0]:
        assert_parity(
            np.asarray(theirs["param_groups"][0].pop("betas")),
            np.asarray(ours["param_groups"][0].pop("betas")),
        )
    _assert_same_state_dict(theirs, ours)


def test_state_dict_bad_input_is_named(x64):
    model, params, groups, optimizer = _jax_setup("adam", dict(lr=0.01), {})
    state = optimizer.init(params)
    with pytest.raises(TypeError, match=r"adam has no argument\(s\) \['momentum'\]"):
        joptim.optimizer_state_dict(state, params, joptim.adam, groups, momentum=0.9)
    sd = joptim.optimizer_state_dict(state, params, joptim.adam, groups, lr=0.01)
    with pytest.raises(ValueError, match=r"groups of \[1, 1\] parameters; .* \[2\]"):
        joptim.load_optimizer_state_dict(joptim.adam(), params, sd)
    sgd = joptim.sgd(lr=schedulers.StepLR(lr=0.1, step_size=2))
    with pytest.raises(ValueError, match="`count`"):
        joptim.optimizer_state_dict(
            sgd.init(params), params, joptim.sgd, lr=schedulers.StepLR(lr=0.1, step_size=2)
        )
    momentum_sgd = joptim.sgd(lr=0.1, momentum=0.9)
    torch_like = {
        "state": {0: {"momentum_buffer": np.zeros((2, 3))}},
        "param_groups": [{"params": [0, 1]}],
    }
    with pytest.raises(ValueError, match="count="):
        joptim.load_optimizer_state_dict(momentum_sgd, params, torch_like)
    torch_like["state"][0]["momentum_buffer"] = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"\['momentum_buffer'\]` has shape \(3, 2\)"):
        joptim.load_optimizer_state_dict(momentum_sgd, params, torch_like, count=1)
    torch_like["state"][0] = {"step": np.float32(1), "exp_avg": np.zeros((2, 3))}
    with pytest.raises(ValueError, match=r"\(0, 'exp_avg'\).*no place"):
        joptim.load_optimizer_state_dict(momentum_sgd, params, torch_like)
