"""Training runs, step by step: jaxgrad's jitted step against torch's imperative loop.

- a 10-step float32 run (SGD with momentum, Adam): parameters after every step and
  every step's loss, compared at the float32 tier;
- accumulation in training: 4 micro-batches per step with clipping, both sides;
- data parallelism: the same run on 4 (simulated) devices and on 1. When this
  process has fewer than 4 devices the 4-device run happens in a subprocess started
  with ``--xla_force_host_platform_device_count=4``.

Both sides start from the same weights (torch's initialisation, copied) and see the
same batches (``jaxgrad.data.batch_indices``).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
import torchref
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.data import batch_indices
from jaxgrad.parity import ParityReport
from jaxgrad.train import Trainer, build_optimizer, make_train_step
from parity_checks.harness import TORCH_DTYPES, Check, jax_precision
from torchref import optim as toptim
from torchref import train as ttrain

SIZES = [10, 16, 16, 4]
EXAMPLES = 64
DATA_PARALLEL_DEVICES = 4
OPTIMIZERS = {
    "sgd": {"lr": 0.1, "momentum": 0.9},
    "adam": {"lr": 1e-2},
}


def make_data(dtype: str, examples: int = EXAMPLES, seed: int = 0):
    """Standard-normal inputs `(examples, SIZES[0])` and int64 labels `(examples,)`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((examples, SIZES[0])).astype(dtype)
    y = rng.integers(0, SIZES[-1], size=examples).astype(np.int64)
    return x, y


def trajectories(
    optimizer: str,
    dtype: str,
    *,
    steps: int = 10,
    batch_size: int = 16,
    accumulate: int = 1,
    clip: float | None = None,
    jit: bool = True,
    seed: int = 0,
    jax_lr_scale: float = 1.0,
) -> tuple[dict, dict]:
    """Run ``steps`` training steps in both frameworks; return ``(torch, jax)`` records.

    Each record is ``{"loss": (steps,), "params": {name: (steps, *shape)}}``: every
    step's loss and the parameters after every step. ``jax_lr_scale`` ≠ 1 gives the
    JAX side a wrong learning rate, for the tests that show a mismatch is caught.
    """
    torch.manual_seed(seed)
    module = torchref.mlp(SIZES, "tanh", dtype=TORCH_DTYPES[dtype])
    x, y = make_data(dtype, seed=seed)
    step_examples = batch_size * accumulate
    batches = []
    epoch = 0
    while len(batches) < steps:
        batches += batch_indices(len(x), step_examples, seed=seed, epoch=epoch, drop_last=True)
        epoch += 1
    batches = batches[:steps]
    hyper = OPTIMIZERS[optimizer]

    torch_opt = toptim.make_optimizer(optimizer, module.parameters(), **hyper)
    reference = {"loss": [], "params": []}
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(module)
        jax_hyper = dict(hyper, lr=hyper["lr"] * jax_lr_scale)
        jax_opt = build_optimizer(getattr(joptim, optimizer)(**jax_hyper), clip=clip)
        step = make_train_step(
            model, jlosses.cross_entropy, jax_opt, accumulate=accumulate, jit=jit
        )
        opt_state = jax_opt.init(params)
        candidate = {"loss": [], "params": []}
        for idx in batches:
            loss = ttrain.train_step(
                module,
                torch_opt,
                torch.nn.functional.cross_entropy,
                torch.from_numpy(x[idx]),
                torch.from_numpy(y[idx]),
                accumulate=accumulate,
                clip=clip,
            )
            reference["loss"].append(loss.numpy())
            reference["params"].append(torchref.state_dict_numpy(module))
            params, opt_state, metrics = step(
                params, opt_state, (jnp.asarray(x[idx]), jnp.asarray(y[idx]))
            )
            candidate["loss"].append(np.asarray(metrics["loss"]))
            candidate["params"].append(model.state_dict(params))
    return _stacked(reference), _stacked(candidate)


def _stacked(record: dict) -> dict:
    return {
        "loss": np.stack(record["loss"]),
        "params": {k: np.stack([p[k] for p in record["params"]]) for k in record["params"][0]},
    }


def _trajectory_check(optimizer: str, dtype: str, **options) -> ParityReport:
    reference, candidate = trajectories(optimizer, dtype, **options)
    return jaxgrad.parity.compare(
        reference, candidate, name=f"10 training steps, {optimizer} {options}"
    )


# ----------------------------------------------------------------- data parallel
def data_parallel_runs(num_devices: int = DATA_PARALLEL_DEVICES) -> dict:
    """Train the same run on 1 device and, data-parallel, on ``num_devices`` devices.

    Returns:
      ``{"single": params, "parallel": params, "devices": [str]}`` as numpy.
    """
    devices = jax.devices()
    if len(devices) < num_devices:
        raise ValueError(f"{num_devices} devices needed, JAX sees {len(devices)}.")
    torch.manual_seed(0)
    module = torchref.mlp(SIZES, "tanh")
    x, y = make_data("float32")
    results = {}
    with jax_precision("float32"):
        model, params = jaxgrad.nn.from_torch(module)
        for name, use in (("single", devices[:1]), ("parallel", devices[:num_devices])):
            trainer = Trainer(
                model,
                jlosses.cross_entropy,
                joptim.sgd(lr=0.1, momentum=0.9),
                dict(params),
                batch_size=16,
                seed=0,
                devices=use,
            )
            for _ in range(2):
                trainer.train_epoch(x, y)
            results[name] = model.state_dict(trainer.params)
    # the devices the trained parameters actually live on, not the ones asked for
    results["devices"] = sorted(str(d) for d in trainer.params["0.weight"].sharding.device_set)
    return results


@functools.cache
def _run_data_parallel_subprocess(num_devices: int) -> dict:
    # cached: the report row and the test of the same run share one subprocess
    # (its inputs are fixed; each call would train the same thing again)
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={num_devices}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    scripts = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(scripts)
    env["PYTHONPATH"] = os.pathsep.join([root, scripts, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.npz")
        proc = subprocess.run(
            [sys.executable, "-m", "parity_checks.training", out, str(num_devices)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode:
            raise RuntimeError(f"data-parallel subprocess failed:\n{proc.stderr[-2000:]}")
        with np.load(out) as data:
            return {
                "single": {k[7:]: data[k] for k in data.files if k.startswith("single/")},
                "parallel": {k[9:]: data[k] for k in data.files if k.startswith("parallel/")},
                "devices": list(data["devices"]),
            }


def data_parallel_report(num_devices: int = DATA_PARALLEL_DEVICES) -> ParityReport:
    """4-device data-parallel training against 1 device, float32 tier."""
    if len(jax.devices()) >= num_devices:
        results = data_parallel_runs(num_devices)
    else:
        results = _run_data_parallel_subprocess(num_devices)
    if len(results["devices"]) != num_devices:
        raise AssertionError(f"ran on {results['devices']}, not {num_devices} devices")
    return jaxgrad.parity.compare(
        results["single"],
        results["parallel"],
        name=f"data-parallel on {len(results['devices'])} devices vs 1 device",
    )


CHECKS = [
    *[
        Check(
            name=f"train 10 steps {optimizer}",
            dtype="float32",
            area="train",
            run=functools.partial(_trajectory_check, optimizer, "float32"),
        )
        for optimizer in OPTIMIZERS
    ],
    Check(
        name="train 10 steps accumulate=4 clip=1",
        dtype="float32",
        area="train",
        run=functools.partial(
            _trajectory_check, "sgd", "float32", batch_size=4, accumulate=4, clip=1.0
        ),
    ),
    Check(
        name=f"train data-parallel {DATA_PARALLEL_DEVICES} devices",
        dtype="float32",
        area="train",
        run=data_parallel_report,
    ),
]


if __name__ == "__main__":  # the subprocess of ``data_parallel_report``
    out_path, count = sys.argv[1], int(sys.argv[2])
    found = data_parallel_runs(count)
    np.savez(
        out_path,
        devices=np.array(found["devices"]),
        **{f"single/{k}": v for k, v in found["single"].items()},
        **{f"parallel/{k}": v for k, v in found["parallel"].items()},
    )
