"""Report rows for state a forward writes (a momentum encoder, an EMA codebook).

Each model of ``torchref.forward_state`` that jaxgrad reproduces is converted by
``from_torch`` and run twice over, against torch, in float64:

- three calls in training mode, then three in evaluation mode, each output and the
  whole ``state_dict`` after it (the parameters and buffers the forward wrote, returned
  by ``apply`` as new state and threaded into the next call);
- three SGD steps on ``sum(output²)``: torch's ``zero_grad`` / ``backward`` / ``step``
  against ``jax.value_and_grad`` with the new state threaded, each step's loss, output
  and ``state_dict``.
"""

from __future__ import annotations

import copy
import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
from jaxgrad import nn
from parity_checks.harness import Check, jax_precision
from torchref import forward_state

CALLS = 3
LR = 0.1


def _numpy(tree):
    return jax.tree_util.tree_map(lambda v: np.asarray(v), tree)


def _torch_calls(module, x) -> list:
    record = []
    for train in (True, False):
        module.train(train)
        for _ in range(CALLS):
            with torch.no_grad():
                out = module(x)
            state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
            record.append({"output": out.numpy().copy(), "state": state})
    return record


def _jax_calls(model, params, buffers, x) -> list:
    record = []
    for train in (True, False):
        for _ in range(CALLS):
            out, buffers = model.apply(params, x, buffers=buffers, train=train)
            record.append({"output": out, "state": model.state_dict(params, buffers)})
    return record


def _jax_steps(model, params, buffers, x) -> list:
    def objective(params, buffers):
        out, new_buffers = model.apply(params, x, buffers=buffers, train=True)
        return jnp.sum(out**2), (out, new_buffers)

    step = jax.jit(jax.value_and_grad(objective, has_aux=True))
    record = []
    for _ in range(CALLS):
        (loss, (out, buffers)), grads = step(params, buffers)
        params = {k: v - LR * grads[k] for k, v in params.items()}
        record.append({"loss": loss, "output": out, "state": model.state_dict(params, buffers)})
    return record


def trajectories(model_class, capture: str = "auto", seed: int = 7) -> tuple[dict, dict]:
    """``(torch's record, jaxgrad's record)`` of ``model_class``'s three calls in each
    mode and three training steps, in float64, as trees for ``jaxgrad.compare``."""
    torch.manual_seed(seed)
    module = model_class().double()
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((6, 8)))
    calls_module, steps_module = copy.deepcopy(module), copy.deepcopy(module)
    with jax_precision("float64"):
        model, params, buffers = nn.from_torch(
            module, example=(x,), capture=capture, with_buffers=True
        )
        xs = x.numpy()
        candidate = {
            "calls": _jax_calls(model, params, buffers, xs),
            "steps": _jax_steps(model, params, buffers, xs),
        }
    reference = {
        "calls": _torch_calls(calls_module, x),
        "steps": [
            {"loss": loss.numpy(), "output": out.numpy(), "state": _numpy(state)}
            for loss, out, state in forward_state.train_steps(steps_module, x, CALLS, LR)
        ],
    }
    return reference, _numpy(candidate)


def _row(model_class, capture: str) -> jaxgrad.ParityReport:
    reference, candidate = trajectories(model_class, capture)
    return jaxgrad.compare(reference, candidate)


CHECKS = [
    Check(
        f"forward writes state: {label} ({capture}), 3 calls + 3 SGD steps",
        "float64",
        functools.partial(_row, model_class, capture),
        area="capture",
    )
    for label, model_class in (
        ("MoCo momentum encoder", forward_state.MomentumEncoder),
        ("VQ-VAE EMA codebook", forward_state.VQEMACodebook),
    )
    for capture in ("auto",)
]
