"""jaxgrad.optim against PyTorch's own optimizer database, flags, lr arrays and groups."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from parity_checks import _conformance_optim as conformance

from jaxgrad import optim as joptim
from jaxgrad.parity import assert_parity, compare

# one configuration in nine of each optimizer (the first included: every optimizer still
# runs) in the default run (~10 worker-seconds, 25 at one in three); every configuration
# in the exhaustive run (CI: -m "exhaustive or long")
EVERY = 9


@pytest.mark.parametrize(
    "every",
    [
        pytest.param(EVERY, marks=pytest.mark.slow, id=f"one-in-{EVERY}"),
        pytest.param(1, marks=pytest.mark.exhaustive, id="every-config"),
    ],
)
def test_optim_db_configurations_30_float64_steps(every):
    outcomes = conformance.config_outcomes(every=every)
    bad = [o for o in outcomes if o.status != "pass"]
    refused = [o for o in bad if o.name.split("(")[0] in conformance.REFUSED]
    assert all(o.status == "refused" for o in refused)
    bad = [o for o in bad if o not in refused]
    assert not bad, "\n".join(f"{o.name} {o.status}: {o.detail[:600]}" for o in bad)
    assert {o.name.split("(")[0] for o in outcomes} == set(conformance.SUPPORTED) | set(
        conformance.REFUSED
    )
    if every == 1:
        assert sum(o.status == "pass" for o in outcomes) >= 59 + 23 + 5


def test_optim_db_error_inputs_rejected_as_torch():
    outcomes = conformance.error_outcomes()
    bad = [o for o in outcomes if o.status not in ("rejected", "not applicable")]
    assert not bad, "\n".join(f"{o.name}[{o.index}] {o.status}: {o.detail}" for o in bad)
    assert sum(o.status == "rejected" for o in outcomes) >= 58


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("Adagrad", {"lr": 0.1, "lr_decay": 0.3, "initial_accumulator_value": 0.2}),
        ("NAdam", {"lr": 0.01}),  # momentum_decay: mu_t and the look-ahead mu_{t+1}
        ("RAdam", {"lr": 0.01}),  # rho_t crosses 5 at step 6 (4.99 at step 5)
    ],
    ids=["Adagrad(lr_decay,init_acc)", "NAdam()", "RAdam()"],
)
def test_adaptive_optimizer_specifics_match_torch(x64, name, kwargs):
    """30 float64 steps of the options whose conventions differ from optax's."""
    reference = conformance.torch_trajectory(getattr(torch.optim, name), kwargs)
    factory = joptim.OPTIMIZERS[conformance.SUPPORTED[name]]
    assert_parity(reference, conformance.jax_trajectory(factory(**kwargs)))


def test_adagrad_eps_outside_the_square_root_like_torch(x64):
    # gradients of 1e-5: sqrt(sum) + eps and sqrt(sum + eps) differ by 40 %
    grad = np.array([1e-5, -3e-6, 2e-4])
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adagrad([p], lr=0.1)
    p.grad = torch.from_numpy(grad)
    optimizer.step()
    ours = joptim.adagrad(lr=0.1)
    params = {"p": jnp.zeros(3)}
    updates, _ = ours.update({"p": jnp.asarray(grad)}, ours.init(params), params)
    assert_parity(p.detach().numpy(), np.asarray(updates["p"]))


def test_the_harness_catches_a_wrong_optimizer(x64):
    reference = conformance.torch_trajectory(torch.optim.Adam, {"lr": 1e-2}, steps=3)
    candidate = conformance.jax_trajectory(joptim.adam(lr=1e-2 * (1 + 1e-9)), steps=3)
    assert not compare(reference, candidate).passed


@pytest.mark.parametrize("name", sorted(joptim.OPTIMIZERS))
def test_argument_names_order_and_defaults_are_torchs(name):
    torch_cls = getattr(torch.optim, {v: k for k, v in conformance.SUPPORTED.items()}[name])
    ours = inspect.signature(joptim.OPTIMIZERS[name]).parameters
    theirs = dict(inspect.signature(torch_cls.__init__).parameters)
    theirs.pop("self")
    theirs.pop("params")
    assert list(ours) == list(theirs)
    for arg, parameter in ours.items():
        assert parameter.default == theirs[arg].default, (arg, parameter.default)
        assert parameter.kind == theirs[arg].kind, arg


def test_default_flags_passed_explicitly_are_accepted(x64):
    flags = dict(foreach=None, fused=None, differentiable=False, capturable=False)
    params = {"w": jnp.arange(3.0)}
    plain, explicit = joptim.adam(lr=0.1), joptim.adam(lr=0.1, **flags)
    for foreach in (True, False):
        same = joptim.adam(lr=0.1, foreach=foreach, differentiable=False)
        for optimizer in (explicit, same):
            a, _ = plain.update(params, plain.init(params), params)
            b, _ = optimizer.update(params, optimizer.init(params), params)
            assert_parity(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: joptim.adam(fused=True), "`fused=True`"),
        (lambda: joptim.adamw(capturable=True), "`capturable=True`"),
        (lambda: joptim.sgd(lr=np.array(0.1), foreach=True), "`lr` as an array"),
        (lambda: joptim.adam(lr=np.array([0.1, 0.1])), "one-element"),
        (lambda: joptim.adam(betas=(0.9, np.array(0.99))), "`betas`"),
        (lambda: joptim.nadam(momentum_decay=-0.2), "`momentum_decay`"),
        (lambda: joptim.adagrad(lr_decay=-0.5), "`lr_decay`"),
        (lambda: joptim.sgd(foreach="yes"), "`foreach`"),
        (lambda: joptim.asgd(foreach=True), "`foreach=True`"),
        (lambda: joptim.adam(differentiable=True), "`differentiable=True`"),
        (lambda: joptim.nadam(differentiable=True), "`differentiable=True`"),
    ],
)
def test_refused_flags_and_values_are_named(call, fragment):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "name,kwargs", [("AdamW", {}), ("NAdam", {"weight_decay": 0.1}), ("Adagrad", {"lr_decay": 0.5})]
)
def test_float32_array_lr_rounds_like_torchs_tensor_lr(x64, name, kwargs):
    # torch does the lr arithmetic of a float32 tensor lr in float32 (AdamW: 5e-8 apart
    # from the same lr as a Python float); jaxgrad keeps the array's dtype the same way
    lr = torch.tensor(0.001)
    reference = conformance.torch_trajectory(getattr(torch.optim, name), {"lr": lr, **kwargs})
    factory = joptim.OPTIMIZERS[conformance.SUPPORTED[name]]
    candidate = conformance.jax_trajectory(factory(lr=np.float32(0.001), **kwargs))
    assert compare(reference, candidate).passed
    if name == "AdamW":
        as_float = conformance.jax_trajectory(factory(lr=float(lr), **kwargs))
        assert not compare(reference, as_float).passed


# ---------------------------------------------------------------- parameter groups


def _torch_grouped(steps=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2)
    ).double()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and n != "1.weight"]
    no_decay = [
        p for n, p in model.named_parameters() if not (n.endswith("weight") and n != "1.weight")
    ]
    optimizer = torch.optim.AdamW(
        [{"params": decay}, {"params": no_decay, "weight_decay": 0.0, "lr": 0.05}],
        lr=0.01,
        weight_decay=0.1,
    )
    start = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    x = torch.linspace(-1, 1, 15, dtype=torch.float64).reshape(5, 3)
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()
        optimizer.step()
    return model, optimizer, start, x


def test_param_groups_no_decay_on_biases_and_norms_matches_torch(x64):
    model, optimizer, start, x = _torch_grouped()
    params = {n: jnp.asarray(v) for n, v in start.items()}
    grouped = joptim.param_groups(
        joptim.adamw,
        [{"params": ["*.bias", "1.*"], "weight_decay": 0.0, "lr": 0.05}, {}],
        lr=0.01,
        weight_decay=0.1,
    )
    xj = jnp.asarray(x.numpy())

    def loss(p):
        h = xj @ p["0.weight"].T + p["0.bias"]
        mean = h.mean(-1, keepdims=True)
        var = ((h - mean) ** 2).mean(-1, keepdims=True)
        h = (h - mean) / jnp.sqrt(var + 1e-5) * p["1.weight"] + p["1.bias"]
        return ((h @ p["2.weight"].T + p["2.bias"]) ** 2).sum()

    state = grouped.init(params)
    for _ in range(5):
        updates, state = grouped.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, updates)
    reference = {n: p.detach() for n, p in model.named_parameters()}
    assert_parity(reference, params)
    torch_order = [n for n, _ in model.named_parameters()]
    # the dict built from torch's named_parameters() keeps torch's order (apply_updates
    # returns sorted keys: JAX flattens dicts in sorted order)
    ours = joptim.torch_style_state(state, order=start)
    assert list(ours) == torch_order  # torch's order, not JAX's sorted one
    for name, p in model.named_parameters():
        assert_parity(optimizer.state[p]["exp_avg"], ours[name]["exp_avg"])
    by_index = joptim.torch_state_dict(state, start)
    assert sorted(by_index) == list(range(len(torch_order)))


def test_param_group_errors_are_named():
    params = {"0.weight": jnp.ones((2, 2)), "0.bias": jnp.ones(2)}
    with pytest.raises(ValueError, match=r"pattern '\*norm\*' matches no parameter"):
        joptim.param_groups(joptim.sgd, [{"params": "*norm*"}, {}], lr=0.1).init(params)
    with pytest.raises(ValueError, match="selected by `groups\\[0\\]` and `groups\\[1\\]`"):
        joptim.param_groups(joptim.sgd, [{"params": "0.*"}, {"params": "*.bias"}], lr=0.1).init(
            params
        )
    with pytest.raises(ValueError, match="are in no group"):
        joptim.param_groups(joptim.sgd, [{"params": "*.bias"}], lr=0.1).init(params)
    with pytest.raises(TypeError, match="`groups\\[0\\]`"):
        joptim.param_groups(joptim.sgd, [{"params": "*.bias", "betas": (0.9, 0.9)}, {}], lr=0.1)
    with pytest.raises(ValueError, match="`order` lacks"):
        optimizer = joptim.adam()
        joptim.torch_style_state(optimizer.init(params), order=["0.weight"])
