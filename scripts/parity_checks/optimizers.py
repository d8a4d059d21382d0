"""jaxgrad.optim vs torch.optim: parameters and optimizer state after every step.

A small tanh MLP `[6, 8, 3]` trained on one fixed batch with MSE: 100 steps in float64
(strict tier), 10 steps in float32 (float32 tier). Parameters, losses and every state
tensor (momentum_buffer, exp_avg, exp_avg_sq, square_avg, grad_avg) are compared at
every step, stacked along a leading axis.
"""

from __future__ import annotations

import copy
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

import jaxgrad.nn
import torchref
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.parity import ParityReport, compare
from parity_checks.harness import TORCH_DTYPES, Check, jax_precision
from torchref import optim as toptim
from torchref.schedulers import SteppedOptimizer

SIZES = [6, 8, 3]
STEPS = {"float64": 100, "float32": 10}
JAX_OPTIMIZERS = {
    "sgd": joptim.sgd,
    "adam": joptim.adam,
    "adamw": joptim.adamw,
    "rmsprop": joptim.rmsprop,
}

# Each hyperparameter path torch implements is exercised. The settings are chosen so
# the 100-step trajectory is well conditioned: perturbing the initial weights by 1e-15
# (relative) moves every recorded value by < 0.1 of the float64 tolerance, within JAX
# alone. Centered RMSprop with alpha=0.9 is not (the same perturbation moves it by 1e4×
# the tolerance: steps normalised by a nearly-cancelled variance amplify rounding), so
# no parity test at a fixed tolerance could be meaningful there.
CONFIGS = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("sgd", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("adam", dict(lr=1e-2)),
    ("adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adamw", dict(lr=1e-2)),
    ("rmsprop", dict(lr=1e-3)),
    ("rmsprop", dict(lr=1e-3, alpha=0.95, momentum=0.5, centered=True, weight_decay=0.01)),
]


# float32 (10 steps): the richest configuration of each optimizer, plus Nesterov
FLOAT32_CONFIGS = [CONFIGS[i] for i in (1, 2, 4, 5, 7)]

_SHORT = {
    "momentum": "mom",
    "dampening": "damp",
    "weight_decay": "wd",
    "nesterov": "nesterov",
    "centered": "ctr",
    "betas": "b",
    "eps": "eps",
    "alpha": "alpha",
    "lr": "lr",
}


def config_label(name: str, hyper: dict) -> str:
    return f"{name}(" + ", ".join(f"{k}={v}" for k, v in hyper.items()) + ")"


def short_label(name: str, hyper: dict) -> str:
    """``sgd(mom=0.9,damp=0.3,wd=0.01)``: the label without the learning rate, abbreviated."""
    parts = [
        f"{_SHORT[k]}" if v is True else f"{_SHORT[k]}={v}".replace(" ", "")
        for k, v in hyper.items()
        if k != "lr"
    ]
    return f"{name}(" + ",".join(parts) + ")"


def trajectories(
    name: str,
    hyper: dict,
    dtype: str,
    steps: int | None = None,
    *,
    jit: bool = True,
    jax_optimizer=None,
    seed: int = 0,
    max_norm: float | None = None,
    torch_scheduler=None,
    with_float64: bool = False,
) -> tuple:
    """``(torch trajectory, jax trajectory)`` of one optimizer on the small MLP.

    ``jax_optimizer`` replaces jaxgrad's optimizer (to show another one differs, or to
    give it a schedule). ``max_norm`` clips gradients before each step (torch's
    ``clip_grad_norm_``, jaxgrad's ``clip_grad_norm_transform``). ``torch_scheduler``
    (``optimizer -> scheduler``) is stepped after every torch optimizer step.
    ``with_float64``: also torch's run in float64 from the same starting values (the
    float32 weights and batch cast up), the ``reference64`` of
    ``jaxgrad.optim.trajectory.compare_trajectory``: returns three trajectories.
    """
    steps = STEPS[dtype] if steps is None else steps
    torch.manual_seed(seed)
    module = torchref.mlp(SIZES, "tanh", dtype=TORCH_DTYPES[dtype])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, SIZES[0])).astype(dtype)
    y = rng.standard_normal((16, SIZES[-1])).astype(dtype)
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(module)
        optimizer = jax_optimizer or JAX_OPTIMIZERS[name](**hyper)
        if max_norm is not None:
            optimizer = optax.chain(joptim.clip_grad_norm_transform(max_norm), optimizer)
        xj, yj = jnp.asarray(x), jnp.asarray(y)
        candidate = joptim.optimizer_trajectory(
            optimizer, lambda p: jlosses.mse_loss(model.apply(p, xj), yj), params, steps, jit=jit
        )
        candidate = np_tree(candidate)
    module64 = copy.deepcopy(module).double() if with_float64 else None

    def torch_run(module, x, y):
        torch_optimizer = toptim.make_optimizer(name, module.parameters(), **hyper)
        if torch_scheduler is not None:
            torch_optimizer = SteppedOptimizer(torch_optimizer, torch_scheduler(torch_optimizer))
        return toptim.optimizer_trajectory(
            module,
            torch_optimizer,
            torch.from_numpy(x),
            torch.from_numpy(y),
            torch.nn.functional.mse_loss,
            steps,
            max_norm=max_norm,
        )

    reference = torch_run(module, x, y)
    if not with_float64:
        return reference, candidate
    return reference, candidate, torch_run(module64, x.astype(np.float64), y.astype(np.float64))


def np_tree(tree):
    return jax.tree.map(np.asarray, tree)


def optimizer_parity(
    name: str, hyper: dict, dtype: str, steps: int | None = None, *, jit: bool = True
) -> ParityReport:
    reference, candidate = trajectories(name, hyper, dtype, steps, jit=jit)
    steps = STEPS[dtype] if steps is None else steps
    return compare(reference, candidate, name=f"{config_label(name, hyper)} {steps} steps {dtype}")


CHECKS = [
    Check(
        name=f"{short_label(name, hyper)} x{STEPS[dtype]}",
        dtype=dtype,
        area="optim",
        run=functools.partial(optimizer_parity, name, hyper, dtype),
    )
    for dtype, configs in (("float64", CONFIGS), ("float32", FLOAT32_CONFIGS))
    for name, hyper in configs
]


def fixed_grads_trajectories(
    name: str, hyper: dict, steps: int = 4, *, jit: bool = False, jax_optimizer=None, seed: int = 0
) -> tuple[dict, dict]:
    """``(torch, jax)`` param/state histories for given float64 gradients, no model.

    Torch gets ``p.grad = grads[k]; step()``; JAX gets ``optimizer.update(grads[k], …)``,
    eagerly by default (a handful of small ops: no compilation to wait for).
    """
    rng = np.random.default_rng(seed)
    start = rng.standard_normal((3, 4))
    grads = rng.standard_normal((steps, 3, 4))
    weight = torch.tensor(start, requires_grad=True)
    torch_optimizer = toptim.make_optimizer(name, [weight], **hyper)
    reference = {"params": [], "state": []}
    for grad in grads:
        weight.grad = torch.tensor(grad)
        torch_optimizer.step()
        reference["params"].append({"w": weight.detach().numpy().copy()})
        state = torch_optimizer.state[weight]
        reference["state"].append(
            {
                "w": {
                    k: state[k].numpy().copy()
                    for k in toptim.STATE_FIELDS
                    if isinstance(state.get(k), torch.Tensor)
                }
            }
        )
    with jax_precision("float64"):
        optimizer = jax_optimizer or JAX_OPTIMIZERS[name](**hyper)
        update = jax.jit(optimizer.update) if jit else optimizer.update
        params = {"w": jnp.asarray(start)}
        opt_state = optimizer.init(params)
        candidate = {"params": [], "state": []}
        for grad in grads:
            updates, opt_state = update({"w": jnp.asarray(grad)}, opt_state, params)
            params = optax.apply_updates(params, updates)
            candidate["params"].append(np_tree(params))
            candidate["state"].append(
                {
                    n: {k: np.asarray(v) for k, v in f.items() if k != "step"}
                    for n, f in joptim.torch_style_state(opt_state).items()
                }
            )
    return reference, candidate
