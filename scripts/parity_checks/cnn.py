"""The CNNs of ``torchref.models`` against their ``from_torch`` twins, on 8×8 digits.

- ``cnn`` (a ``Sequential``) and ``resnet`` (torchvision-style custom forward, traced
  with ``torch.fx``): output, input and parameter gradients and buffers of one
  forward/backward, training mode for the ResNet (batch statistics, running
  statistics updated), float64 and float32;
- a 20-step float64 training trajectory of the ResNet in training mode, SGD with
  momentum: every step's loss, and after every step the parameters, the optimizer
  state (torch's ``momentum_buffer``) and the buffers (``running_mean``,
  ``running_var``, ``num_batches_tracked``), at the float64 tier.

Both sides start from torch's initial weights (copied) and see the same batches
(``jaxgrad.data.batch_indices``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
import torchref
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.data import batch_indices, load_digits
from jaxgrad.train.stateful import make_stateful_train_step
from parity_checks._layer_parity import layer_parity
from parity_checks.harness import TORCH_DTYPES, Check, jax_precision
from torchref import optim as toptim

TRAJECTORY_STEPS = 20
BATCH_SIZE = 16
SGD = {"lr": 0.05, "momentum": 0.9}


def digit_images(dtype: str, count: int | None = None):
    """Digits as images `(n, 1, 8, 8)` scaled to [0, 1], and labels `(n,)` int64."""
    data = load_digits(dtype=dtype)
    x = (data.x_train / 16.0).astype(dtype).reshape(-1, 1, 8, 8)
    y = data.y_train.astype(np.int64)
    return (x, y) if count is None else (x[:count], y[:count])


def forward_parity(name: str, dtype: str):
    """One forward/backward of ``torchref.models.CNN_MODELS[name]`` and its twin."""
    torch.manual_seed(0)
    module = torchref.models.CNN_MODELS[name](dtype=TORCH_DTYPES[dtype])
    x, _ = digit_images(dtype, 8)
    inputs = torch.from_numpy(x).requires_grad_(True)
    # x64 on in float32 too, only so that num_batches_tracked is torch's int64: the
    # params and inputs stay float32, and compare checks every float leaf is float32
    with jax.enable_x64(True):
        return layer_parity(module, inputs, training=name == "resnet", name=f"{name} forward")


def resnet_trajectories(steps: int = TRAJECTORY_STEPS, *, dtype: str = "float64",
                        seed: int = 0) -> tuple[dict, dict]:
    """``(torch, jax)`` records: ``{"loss": (steps,), "params", "optimizer_state",
    "buffers"}``, each ``{name: (steps, *shape)}`` after every step."""
    torch.manual_seed(seed)
    module = torchref.models.resnet(dtype=TORCH_DTYPES[dtype]).train()
    x, y = digit_images(dtype)
    batches = batch_indices(len(x), BATCH_SIZE, seed=seed, epoch=0, drop_last=True)[:steps]
    torch_opt = toptim.make_optimizer("sgd", module.parameters(), **SGD)
    reference = {"loss": [], "params": [], "optimizer_state": [], "buffers": []}
    candidate = {"loss": [], "params": [], "optimizer_state": [], "buffers": []}
    with jax_precision(dtype):
        model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        optimizer = joptim.sgd(**SGD)
        step = make_stateful_train_step(model, jlosses.cross_entropy, optimizer)
        opt_state = optimizer.init(params)
        for index in batches:
            torch_opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(module(torch.from_numpy(x[index])),
                                                     torch.from_numpy(y[index]))
            loss.backward()
            torch_opt.step()
            reference["loss"].append(loss.detach().numpy())
            reference["params"].append({n: p.detach().numpy().copy()
                                        for n, p in module.named_parameters()})
            reference["optimizer_state"].append(toptim.named_state(module, torch_opt))
            reference["buffers"].append({n: b.numpy().copy() for n, b in module.named_buffers()})

            params, buffers, opt_state, metrics = step(
                params, buffers, opt_state, (jnp.asarray(x[index]), jnp.asarray(y[index])), None)
            candidate["loss"].append(np.asarray(metrics["loss"]))
            candidate["params"].append({k: np.asarray(v) for k, v in params.items()})
            candidate["optimizer_state"].append(
                {n: {k: np.asarray(v) for k, v in fields.items() if k != "step"}
                 for n, fields in joptim.torch_style_state(opt_state).items()})
            candidate["buffers"].append({k: np.asarray(v) for k, v in buffers.items()})
    return _stacked(reference), _stacked(candidate)


def _stacked(record: dict) -> dict:
    def stack(items):
        if isinstance(items[0], dict):
            return {k: stack([item[k] for item in items]) for k in items[0]}
        return np.stack(items)
    return {key: stack(values) for key, values in record.items()}


def _trajectory_check():
    reference, candidate = resnet_trajectories()
    return jaxgrad.parity.compare(
        reference, candidate,
        name=f"resnet {TRAJECTORY_STEPS} training steps, train mode, sgd {SGD}")


CHECKS = [
    *[Check(name=f"{name} forward+backward (digits)", dtype=dtype, area="cnn",
            run=functools.partial(forward_parity, name, dtype))
      for name, dtype in (("cnn", "float64"), ("resnet", "float64"), ("resnet", "float32"))],
    Check(name=f"resnet train {TRAJECTORY_STEPS} steps +buffers", dtype="float64", area="cnn",
          run=_trajectory_check),
]
