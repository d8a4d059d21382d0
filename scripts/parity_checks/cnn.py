"""The CNNs of ``torchref.models`` against their ``from_torch`` twins, on 8×8 digits.

- ``cnn`` (a ``Sequential``; conv, max-pool, flatten in C,H,W order, linear), float64:
  output, input and parameter gradients of one forward/backward (``forward_parity``
  also runs the ResNet, in training mode, for either dtype);
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
from jaxgrad_dev.layer_parity import layer_parity
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


def train_mode_trajectories(
    module: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    steps: int,
    batch_size: int = BATCH_SIZE,
    seed: int = 0,
    hyper: dict = SGD,
) -> tuple[dict, dict]:
    """Train any torch classifier and its ``from_torch`` twin side by side in training mode.

    SGD with ``hyper``, cross-entropy, the same batches (``batch_indices`` of ``seed``,
    epoch 0); the twin starts from ``module``'s current weights and buffers. Use it on
    your own model: ``jaxgrad.parity.compare(*train_mode_trajectories(model, x, y,
    steps=20))`` inside ``jax.enable_x64`` for a float64 module.

    Returns:
      ``(torch, jax)`` records ``{"loss": (steps,), "params", "optimizer_state",
      "buffers"}``, each ``{name: (steps, *shape)}`` after every step.
    """
    module.train()
    batches = batch_indices(len(x), batch_size, seed=seed, epoch=0, drop_last=True)[:steps]
    if len(batches) < steps:
        raise ValueError(
            f"{len(x)} examples give {len(batches)} batches of {batch_size}, "
            f"fewer than `steps` (={steps})."
        )
    torch_opt = toptim.make_optimizer("sgd", module.parameters(), **hyper)
    reference = {"loss": [], "params": [], "optimizer_state": [], "buffers": []}
    candidate = {"loss": [], "params": [], "optimizer_state": [], "buffers": []}
    model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
    optimizer = joptim.sgd(**hyper)
    step = make_stateful_train_step(model, jlosses.cross_entropy, optimizer)
    opt_state = optimizer.init(params)
    for index in batches:
        torch_opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(
            module(torch.from_numpy(x[index])), torch.from_numpy(y[index])
        )
        loss.backward()
        torch_opt.step()
        reference["loss"].append(loss.detach().numpy())
        reference["params"].append(
            {n: p.detach().numpy().copy() for n, p in module.named_parameters()}
        )
        reference["optimizer_state"].append(toptim.named_state(module, torch_opt))
        reference["buffers"].append({n: b.numpy().copy() for n, b in module.named_buffers()})

        params, buffers, opt_state, metrics = step(
            params, buffers, opt_state, (jnp.asarray(x[index]), jnp.asarray(y[index])), None
        )
        candidate["loss"].append(np.asarray(metrics["loss"]))
        candidate["params"].append({k: np.asarray(v) for k, v in params.items()})
        candidate["optimizer_state"].append(
            {
                n: {k: np.asarray(v) for k, v in fields.items() if k != "step"}
                for n, fields in joptim.torch_style_state(opt_state).items()
            }
        )
        candidate["buffers"].append({k: np.asarray(v) for k, v in buffers.items()})
    return _stacked(reference), _stacked(candidate)


def resnet_trajectories(
    steps: int = TRAJECTORY_STEPS, *, dtype: str = "float64", seed: int = 0
) -> tuple[dict, dict]:
    """``train_mode_trajectories`` of ``torchref.models.resnet`` on the digits."""
    torch.manual_seed(seed)
    module = torchref.models.resnet(dtype=TORCH_DTYPES[dtype])
    x, y = digit_images(dtype)
    with jax_precision(dtype):
        return train_mode_trajectories(module, x, y, steps=steps, seed=seed)


def _stacked(record: dict) -> dict:
    def stack(items):
        if isinstance(items[0], dict):
            return {k: stack([item[k] for item in items]) for k in items[0]}
        return np.stack(items)

    return {key: stack(values) for key, values in record.items()}


def _trajectory_check():
    reference, candidate = resnet_trajectories()
    return jaxgrad.parity.compare(
        reference,
        candidate,
        name=f"resnet {TRAJECTORY_STEPS} training steps, train mode, sgd {SGD}",
    )


def resnet_fused_epoch(steps: int = TRAJECTORY_STEPS, *, seed: int = 0) -> tuple[dict, dict]:
    """The ResNet's float64 training run as jaxgrad's scan-fused epoch (one rolled
    ``lax.scan``, where ``conv_lowering("auto")`` lowers the convolutions as patches on
    the CPU) against torch's loop: every step's loss, and the parameters, momentum
    buffers and BatchNorm buffers after the last step."""
    from jaxgrad.train.stateful import make_stateful_train_epoch

    torch.manual_seed(seed)
    module = torchref.models.resnet(dtype=torch.float64)
    x, y = digit_images("float64")
    batches = batch_indices(len(x), BATCH_SIZE, seed=seed, epoch=0, drop_last=True)[:steps]
    with jax_precision("float64"):
        model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        reference, _ = train_mode_trajectories(module, x, y, steps=steps, seed=seed)
        optimizer = joptim.sgd(**SGD)
        epoch = make_stateful_train_epoch(model, jlosses.cross_entropy, optimizer)
        xs = jnp.asarray(np.stack([x[i] for i in batches]))
        ys = jnp.asarray(np.stack([y[i] for i in batches]))
        params, buffers, opt_state, metrics = epoch(
            params, buffers, optimizer.init(params), (xs, ys), jax.random.key(seed)
        )
    last = {key: {k: v[-1] for k, v in reference[key].items()} for key in ("params", "buffers")}
    last["optimizer_state"] = {
        n: {k: v[-1] for k, v in fields.items()}
        for n, fields in reference["optimizer_state"].items()
    }
    candidate = {
        "params": {k: np.asarray(v) for k, v in params.items()},
        "buffers": {k: np.asarray(v) for k, v in buffers.items()},
        "optimizer_state": {
            n: {k: np.asarray(v) for k, v in fields.items() if k != "step"}
            for n, fields in joptim.torch_style_state(opt_state).items()
        },
    }
    return ({"loss": reference["loss"], **last}, {"loss": np.asarray(metrics["loss"]), **candidate})


def _fused_epoch_check():
    return jaxgrad.parity.compare(
        *resnet_fused_epoch(),
        name=f"resnet {TRAJECTORY_STEPS} steps as one scan-fused epoch, sgd {SGD}",
    )


def resnet_trainer_accumulated_and_resumed(*, seed: int = 0) -> tuple[dict, dict]:
    """The ResNet's float64 epoch through ``StatefulTrainer`` (``Trainer`` with buffers)
    with ``accumulate=2`` (BatchNorm's statistics moving once per micro-batch), stopped
    after 5 steps, checkpointed and resumed into a new trainer, against torch's own
    ``TorchTrainer`` with ``accumulate=2``: the parameters and buffers after the epoch."""
    import tempfile

    from jaxgrad.train.stateful import StatefulTrainer
    from torchref import train as ttrain

    torch.manual_seed(seed)
    module = torchref.models.resnet(dtype=torch.float64)
    x, y = digit_images("float64")
    options = dict(batch_size=BATCH_SIZE, seed=seed, accumulate=2)
    torch_trainer = ttrain.TorchTrainer(
        module, toptim.make_optimizer("sgd", module.parameters(), **SGD), **options
    )
    with jax_precision("float64"), tempfile.TemporaryDirectory() as directory:
        model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        torch_trainer.train_epoch(x, y)

        def trainer():
            return StatefulTrainer(
                model, jlosses.cross_entropy, joptim.sgd(**SGD), params, buffers,
                strategy="step", checkpoint_dir=directory, **options,
            )  # fmt: skip

        first = trainer()
        first.train_epoch(x, y, on_steps=lambda step, _: step == 5 and first.request_stop())
        first.save()
        resumed = trainer()
        resumed.resume()
        resumed.train_epoch(x, y)
        candidate = resumed.state_dict_numpy()
    return torchref.state_dict_numpy(module), candidate


def _trainer_check():
    return jaxgrad.parity.compare(
        *resnet_trainer_accumulated_and_resumed(),
        name=f"resnet epoch, accumulate 2, stopped at step 5 and resumed, sgd {SGD}",
    )


CHECKS = [
    *[
        Check(
            name=f"{name} forward+backward (digits)",
            dtype=dtype,
            area="cnn",
            run=functools.partial(forward_parity, name, dtype),
        )
        # the ResNet's forward and gradients are checked inside the trajectory below
        for name, dtype in (("cnn", "float64"),)
    ],
    Check(
        name=f"resnet train {TRAJECTORY_STEPS} steps +buffers",
        dtype="float64",
        area="cnn",
        run=_trajectory_check,
    ),
    Check(
        name=f"resnet fused epoch {TRAJECTORY_STEPS} steps (conv patches)",
        dtype="float64",
        area="cnn",
        run=_fused_epoch_check,
    ),
    Check(
        name="resnet Trainer with buffers: accumulate 2, resumed",
        dtype="float64",
        area="cnn",
        run=_trainer_check,
    ),
]
