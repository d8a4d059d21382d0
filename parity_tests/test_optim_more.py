"""Adadelta, Rprop, Adafactor, Muon, LBFGS and the refused SparseAdam against torch.optim,
and the implementation flags that change torch's arithmetic."""

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
from parity_tests._sampling import one_in


def _torch_steps(cls, kwargs, start, grad_fn, steps):
    params = {n: torch.tensor(v, requires_grad=True) for n, v in start.items()}
    optimizer = cls(list(params.values()), **kwargs)
    for k in range(steps):
        for p in params.values():
            p.grad = grad_fn(p.detach(), k, torch)
        optimizer.step()
    return (
        {n: p.detach().numpy() for n, p in params.items()},
        {
            n: {f: (float(v) if f == "step" else v.numpy()) for f, v in optimizer.state[p].items()}
            for n, p in params.items()
        },
    )


def _jax_steps(optimizer, start, grad_fn, steps):
    params = {n: jnp.asarray(v) for n, v in start.items()}
    state = optimizer.init(params)
    for k in range(steps):
        grads = {n: grad_fn(p, k, jnp) for n, p in params.items()}
        updates, state = optimizer.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    fields = joptim.torch_style_state(state, list(start))
    return (
        {n: np.asarray(params[n]) for n in start},
        {
            n: {f: (float(v) if f == "step" else np.asarray(v)) for f, v in entry.items()}
            for n, entry in fields.items()
        },
    )


def _grad(p, k, xp):
    return xp.cos(p * 1.3 + 0.1 * k) + 0.1 * p


def _start(*shapes):
    rng = np.random.default_rng(sum(map(len, shapes)))
    return {f"p{i}": rng.standard_normal(shape) for i, shape in enumerate(shapes)}


# one in two in the default run (adafactor-3d, rprop, muon-no-momentum; Adadelta runs in
# test_optim_conformance.py and jitted under scan below), all six in the exhaustive run
@pytest.mark.parametrize(
    "name,kwargs,shapes",
    one_in(
        2,
        [
            pytest.param(
                "Adafactor",
                {"lr": 0.05, "weight_decay": 0.1},
                [(2, 3, 4), (5,), ()],
                id="adafactor-3d-vector-scalar",
            ),
            pytest.param(
                "Muon",
                {"nesterov": False, "adjust_lr_fn": "match_rms_adamw"},
                [(3, 5), (4, 2)],
                id="muon-match-rms-no-nesterov",
            ),
            pytest.param(
                "Rprop",
                {"etas": (0.3, 1.7), "step_sizes": (1e-3, 0.02)},
                [(2, 3), (4,)],
                id="rprop-bounds",
            ),
            pytest.param(
                "Adafactor",
                {"eps": (1e-4, 1e-2), "d": 1.2, "maximize": True},
                [(4, 2), (3,)],
                id="adafactor-eps-d-maximize",
            ),
            pytest.param(
                "Muon",
                {"lr": 0.02, "momentum": 0.0, "weight_decay": 0.0},
                [(2, 2)],
                id="muon-no-momentum",
            ),
            pytest.param(
                "Adadelta",
                {"lr": 0.5, "rho": 0.5, "eps": 1e-3, "weight_decay": 0.2},
                [(3, 2)],
                id="adadelta-options",
            ),
        ],
    ),
)
def test_new_optimizers_specifics_match_torch(x64, name, kwargs, shapes):
    """Factored and whole second moments, both Muon transposes and lr rules, Rprop's
    clamps: params and every state tensor after 12 float64 steps."""
    start = _start(*shapes)
    reference = _torch_steps(getattr(torch.optim, name), kwargs, start, _grad, 12)
    candidate = _jax_steps(conformance.factory_of(name)(**kwargs), start, _grad, 12)
    assert_parity(reference, candidate)


def test_adafactor_state_shapes_are_torchs(x64):
    start = _start((2, 3, 4), (5,))
    _, state = _torch_steps(torch.optim.Adafactor, {}, start, _grad, 1)
    _, ours = _jax_steps(joptim.adafactor(), start, _grad, 1)
    assert {n: {f: np.shape(v) for f, v in e.items()} for n, e in ours.items()} == {
        n: {f: np.shape(v) for f, v in e.items()} for n, e in state.items()
    }


@pytest.mark.parametrize("shape", [(2, 3), (3, 2), (4, 4), (1, 5), (6, 3)])
def test_newton_schulz_is_torchs_bfloat16_iteration_bit_for_bit(x64, shape):
    from torch.optim._muon import _zeropower_via_newtonschulz

    rng = np.random.default_rng(len(shape) + shape[0] * 7 + shape[1])
    for scale in (1e-3, 1.0, 30.0):
        grad = rng.standard_normal(shape) * scale
        theirs = _zeropower_via_newtonschulz(torch.tensor(grad), (3.4445, -4.7750, 2.0315), 5, 1e-7)
        ours = joptim.newton_schulz(jnp.asarray(grad))
        assert ours.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(ours.astype(jnp.float32)), theirs.float().numpy())


def test_muon_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match="only supports 2-d"):
        joptim.muon().init({"bias": jnp.zeros(3)})
    with pytest.raises(ValueError, match="`adjust_lr_fn`"):
        joptim.muon(adjust_lr_fn="arbitrary")
    with pytest.raises(ValueError, match="complex"):
        joptim.adafactor().init({"w": jnp.zeros((2, 2), jnp.complex64)})


@pytest.mark.parametrize("name", ["NAdam", "RAdam"])
def test_float32_tensor_lr_with_decoupled_weight_decay_matches_torch(x64, name):
    # torch's factor 1 - lr*wd is a float32 tensor: 2e-8 from the double one in one step
    kwargs = {"weight_decay": 0.1, "decoupled_weight_decay": True}
    reference = conformance.torch_trajectory(
        getattr(torch.optim, name), {"lr": torch.tensor(0.001), **kwargs}
    )
    factory = conformance.factory_of(name)
    assert_parity(reference, conformance.jax_trajectory(factory(lr=np.float32(0.001), **kwargs)))
    assert not compare(reference, conformance.jax_trajectory(factory(lr=0.001, **kwargs))).passed


@pytest.mark.parametrize(
    "name,flag",
    [
        ("ASGD", "foreach"),
        ("Adam", "differentiable"),
        ("AdamW", "differentiable"),
        ("NAdam", "differentiable"),
    ],
)
def test_refused_flags_do_change_torchs_arithmetic(x64, name, flag):
    """Each refused flag is one torch computes differently on CPU (so accepting it and
    computing the single-tensor rule would be a silent answer)."""
    cls = getattr(torch.optim, name)
    start = conformance._start()

    def run(**extra):
        # torch's differentiable path takes non-leaf parameters (a leaf cannot be updated
        # in place while it requires grad)
        params = [torch.tensor(v, requires_grad=True) for v in start.values()]
        if extra.get("differentiable"):
            params = [p.clone() for p in params]
        optimizer = cls(params, lr=0.01, **extra)
        for k in range(3):
            for p in params:
                p.grad = conformance._grad_torch(p.detach(), k)
            optimizer.step()
        return [p.detach().numpy() for p in params]

    assert not compare(run(), run(**{flag: True})).passed
    with pytest.raises(ValueError, match=f"`{flag}=True`"):
        conformance.factory_of(name)(**{flag: True})


def test_sparse_adam_is_listed_refused_with_its_reason():
    outcomes = conformance.refused_outcomes()
    assert {o.name.split("(")[0] for o in outcomes} == {"SparseAdam"}
    assert len(outcomes) == 4 and all(o.status == "refused" for o in outcomes)
    assert "dense" in outcomes[0].detail and "`SparseAdam`" in outcomes[0].detail


@pytest.mark.parametrize("name", ["Adadelta", "Rprop", "Adafactor", "Muon", "LBFGS"])
def test_new_argument_names_order_and_defaults_are_torchs(name):
    ours = inspect.signature(conformance.factory_of(name)).parameters
    theirs = dict(inspect.signature(getattr(torch.optim, name).__init__).parameters)
    theirs.pop("self")
    theirs.pop("params")
    assert list(ours) == list(theirs)
    for arg, parameter in ours.items():
        assert parameter.default == theirs[arg].default, arg
        assert parameter.kind == theirs[arg].kind, arg


def test_state_dict_of_a_new_optimizer_loads_into_torch_and_continues(x64):
    start = _start((2, 3), (4,))
    ours = joptim.rprop(lr=0.02)
    params = {n: jnp.asarray(v) for n, v in start.items()}
    state = ours.init(params)
    for k in range(3):
        updates, state = ours.update(
            {n: _grad(p, k, jnp) for n, p in params.items()}, state, params
        )
        params = optax.apply_updates(params, updates)
    saved = joptim.optimizer_state_dict(state, params, joptim.rprop, lr=0.02)
    tparams = [torch.tensor(np.asarray(params[n]), requires_grad=True) for n in start]
    torch_opt = torch.optim.Rprop(tparams, lr=0.02)
    torch_opt.load_state_dict(
        {
            "state": {
                i: {k: torch.from_numpy(np.asarray(v)) for k, v in entry.items()}
                for i, entry in saved["state"].items()
            },
            "param_groups": saved["param_groups"],
        }
    )
    for p in tparams:
        p.grad = _grad(p.detach(), 3, torch)
    torch_opt.step()
    updates, state = ours.update({n: _grad(p, 3, jnp) for n, p in params.items()}, state, params)
    params = optax.apply_updates(params, updates)
    assert_parity([p.detach().numpy() for p in tparams], [params[n] for n in start])
    back = joptim.load_optimizer_state_dict(ours, params, torch_opt.state_dict())
    assert_parity(joptim.torch_style_state(back, params), joptim.torch_style_state(state, params))


# ----------------------------------------------------------------------------- LBFGS


def _quadratic_problem():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 6))
    hessian = a @ a.T / 6 + np.eye(6)
    target = rng.standard_normal(6)
    return hessian, target


def _torch_lbfgs(loss_of, start, kwargs, steps):
    params = {n: torch.tensor(v, requires_grad=True) for n, v in start.items()}
    optimizer = torch.optim.LBFGS(list(params.values()), **kwargs)
    losses = []
    for _ in range(steps):

        def closure():
            optimizer.zero_grad()
            loss = loss_of(params, torch)
            loss.backward()
            return loss

        losses.append(float(optimizer.step(closure).detach()))
    state = optimizer.state[next(iter(params.values()))]
    return {
        "loss": np.array(losses),
        "params": {n: p.detach().numpy() for n, p in params.items()},
        "n_iter": state["n_iter"],
        "func_evals": state["func_evals"],
    }


def _jax_lbfgs(loss_of, start, kwargs, steps, *, jit=True):
    optimizer = joptim.lbfgs(**kwargs)
    params = {n: jnp.asarray(v) for n, v in start.items()}
    state = optimizer.init(params)
    value_and_grad = jax.value_and_grad(lambda p: loss_of(p, jnp))
    value_and_grad = jax.jit(value_and_grad) if jit else value_and_grad
    losses = []
    for _ in range(steps):
        loss, params, state = optimizer.step(value_and_grad, params, state)
        losses.append(float(loss))
    torch_view = joptim.torch_style_state(state, start)[next(iter(start))]
    return {
        "loss": np.array(losses),
        "params": {n: np.asarray(v) for n, v in params.items()},
        "n_iter": int(torch_view["n_iter"]),
        "func_evals": int(torch_view["func_evals"]),
    }


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_on_a_quadratic_matches_torch(x64, line_search_fn):
    hessian, target = _quadratic_problem()

    def loss_of(p, xp):
        u = p["x"] - (xp.asarray(target) if xp is jnp else torch.from_numpy(target))
        h = xp.asarray(hessian) if xp is jnp else torch.from_numpy(hessian)
        return 0.5 * (u @ (h @ u)) + 0.1 * (p["x"] ** 4).sum()

    start = {"x": np.zeros(6)}
    kwargs = {"lr": 0.5, "max_iter": 4, "line_search_fn": line_search_fn}
    reference = _torch_lbfgs(loss_of, start, kwargs, 3)
    candidate = _jax_lbfgs(loss_of, start, kwargs, 3, jit=False)
    assert (candidate["n_iter"], candidate["func_evals"]) == (
        reference["n_iter"],
        reference["func_evals"],
    )
    assert_parity(reference["params"], candidate["params"])
    assert_parity(reference["loss"], candidate["loss"])


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_trains_a_small_mlp_like_torch(x64, line_search_fn):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)
    ).double()
    start = {n: p.detach().numpy().copy() for n, p in mlp.named_parameters()}
    x = np.linspace(-1, 1, 24).reshape(8, 3)
    y = np.sin(x.sum(1, keepdims=True))

    def loss_of(p, xp):
        inputs, targets = (
            (jnp.asarray(x), jnp.asarray(y))
            if xp is jnp
            else (torch.from_numpy(x), torch.from_numpy(y))
        )
        hidden = xp.tanh(inputs @ p["0.weight"].T + p["0.bias"])
        return (((hidden @ p["2.weight"].T + p["2.bias"]) - targets) ** 2).mean()

    kwargs = {"max_iter": 5, "line_search_fn": line_search_fn, "history_size": 4}
    reference = _torch_lbfgs(loss_of, start, kwargs, 2)
    candidate = _jax_lbfgs(loss_of, start, kwargs, 2)
    assert (candidate["n_iter"], candidate["func_evals"]) == (
        reference["n_iter"],
        reference["func_evals"],
    )
    assert_parity(reference["params"], candidate["params"])
    assert reference["loss"][-1] < reference["loss"][0]


@pytest.mark.parametrize(
    "wrong", [{"history_size": 3}, {"lr": 1 + 1e-9}], ids=["history-too-short", "lr-1e-9-off"]
)
def test_lbfgs_harness_catches_a_wrong_optimizer(x64, wrong):
    reference = conformance.torch_lbfgs_trajectory({}, steps=4)
    twin = conformance.torch_lbfgs_trajectory({}, steps=4, reverse=True)
    right = conformance.jax_lbfgs_trajectory(joptim.lbfgs(), steps=4)
    assert conformance.calibrated_verdict(reference, right, twin)[0]
    candidate = conformance.jax_lbfgs_trajectory(joptim.lbfgs(**wrong), steps=4)
    assert not conformance.calibrated_verdict(reference, candidate, twin)[0]


def test_lbfgs_refusals_are_named():
    with pytest.raises(ValueError, match="`line_search_fn`"):
        joptim.lbfgs(line_search_fn="backtracking")
    with pytest.raises(ValueError, match="one-element"):
        joptim.lbfgs(lr=np.array([0.1, 0.1]))
    state = joptim.lbfgs().init({"w": jnp.zeros(2)})
    with pytest.raises(ValueError, match="`order` is needed"):
        joptim.torch_style_state(state)


# one in two in the default run (adadelta, muon), all four in the exhaustive run
@pytest.mark.parametrize("name", one_in(2, ["adadelta", "rprop", "muon", "adafactor"]))
def test_new_optimizers_run_jitted_under_scan(x64, name):
    """The new transforms are pure: ``optimizer_trajectory`` compiles them in one
    ``lax.scan`` and agrees with the eager steps."""
    start = {
        "w": jnp.asarray(np.linspace(-1.0, 1.0, 6).reshape(2, 3)),
        "v": jnp.asarray(np.linspace(0.5, 2.0, 8).reshape(4, 2)),
    }
    if name != "muon":
        start["b"] = jnp.asarray([0.3, -0.2, 0.1])

    def loss_fn(p):
        return sum(jnp.sum(jnp.sin(leaf) + 0.1 * leaf**2) for leaf in p.values())

    optimizer = getattr(joptim, name)()
    jitted = joptim.optimizer_trajectory(optimizer, loss_fn, start, 5, jit=True)
    eager = joptim.optimizer_trajectory(optimizer, loss_fn, start, 5, jit=False)
    assert_parity(eager["params"], jitted["params"])
    assert_parity(eager["state"], jitted["state"])


_FOREACH_REFUSED = {"ASGD"}
_DIFFERENTIABLE_REFUSED = {"Adam", "AdamW", "NAdam"}


def _flag_names(flag):
    from torch.testing._internal.common_optimizers import optim_db

    return sorted(
        info.optim_cls.__name__
        for info in optim_db
        if info.optim_cls.__name__ in conformance.SUPPORTED and flag in info.supported_impls
    )


# the supported optimizers optim_db (torch 2.13) says take each flag, written out: reading
# optim_db while collecting imports torch's test internals (5-10 s) in every xdist worker;
# the first test holds the lists to optim_db
FOREACH = [
    "ASGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
]
DIFFERENTIABLE = [
    "ASGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
]


def test_flag_lists_are_optim_dbs():
    assert FOREACH == _flag_names("foreach")
    assert DIFFERENTIABLE == _flag_names("differentiable")


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_true_is_torchs_foreach_path_or_refused(x64, name):
    kwargs = (
        {"lr": 0.01, "weight_decay": 0.1} if name in ("Adam", "ASGD", "NAdam") else {"lr": 0.01}
    )
    if name in _FOREACH_REFUSED:
        with pytest.raises(ValueError, match="`foreach=True`"):
            conformance.factory_of(name)(foreach=True, **kwargs)
        return
    reference = conformance.torch_trajectory(
        getattr(torch.optim, name), {**kwargs, "foreach": True}, steps=10
    )
    candidate = conformance.jax_trajectory(
        conformance.factory_of(name)(foreach=True, **kwargs), steps=10, name=name
    )
    assert_parity(reference, candidate)


@pytest.mark.parametrize("name", ["Adadelta", "Rprop", "Adafactor"])
def test_tensor_lr_with_foreach_is_accepted_as_torch_does(x64, name):
    lr = torch.tensor(0.5 if name == "Adafactor" else 0.01)  # both sides of min(lr, 1/√t)
    reference = conformance.torch_trajectory(
        getattr(torch.optim, name), {"lr": lr, "foreach": True}
    )
    candidate = conformance.jax_trajectory(
        conformance.factory_of(name)(lr=np.float32(lr.item()), foreach=True)
    )
    assert_parity(reference, candidate)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_differentiable_true_is_torchs_differentiable_path_or_refused(x64, name):
    kwargs = {"lr": 0.01}
    if name in _DIFFERENTIABLE_REFUSED:
        with pytest.raises(ValueError, match="`differentiable=True`"):
            conformance.factory_of(name)(differentiable=True, **kwargs)
        return
    start = conformance._start(name)
    # torch's differentiable path updates non-leaf parameters (a graph through the steps)
    params = [torch.tensor(v, requires_grad=True).clone() for v in start.values()]
    optimizer = getattr(torch.optim, name)(params, differentiable=True, **kwargs)
    for k in range(10):
        for p in params:
            p.grad = conformance._grad_torch(p.detach(), k)
        optimizer.step()
    candidate = conformance.jax_trajectory(
        conformance.factory_of(name)(differentiable=True, **kwargs), steps=10
    )
    assert_parity(
        [p.detach().numpy() for p in params], [candidate["history"][-1]["params"][n] for n in start]
    )
