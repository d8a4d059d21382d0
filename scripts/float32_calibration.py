#!/usr/bin/env python
"""Measure the float32 rounding of torch and jaxgrad against float64, per leaf.

The measurement behind ``jaxgrad.parity.CALIBRATION_MULTIPLE`` (docs/parity.md,
"float32 calibrated by the reference's own rounding"). For each model, on copied
weights and the same inputs (the float64 model is an exact copy of the float32 one,
so float64 computes exactly what float32 approximates), in evaluation mode: the output
and every parameter gradient of ``sum(c * output)`` (a fixed float32 cotangent c) from
torch in float64 (the answer), torch in float32 (the reference), torch in float32 in
other summation orders (channels-last tensors for images, the batch reversed) and
jaxgrad in float32 (``from_torch``). Each float32 result's distance from the float64
answer is measured per leaf in units of the float32 tier (``jaxgrad.parity.headroom``:
max |x - x64| / (1e-6 max|x64| + 1e-5 |x64|)).

Columns: the leaves (output + gradients); how many leaves torch's own float32 and
jaxgrad's miss the tier of the float64 answer, and the worst of each; the leaves
outside the tier between jaxgrad and torch's float32 (what the tier alone fails); the
largest ratio another correct float32 computation (torch in another order, jaxgrad)
lies from float64 over torch's default, over the leaves where that computation misses
the tier (the multiple a calibrated rule needs to pass correct results); and the leaves
``compare(..., reference64=...)`` fails with the multiple in force. Leaves zero in
exact arithmetic are measured at their neighbours' scale, as ``compare`` does.

Models: mlp (64-128-128-10, GELU), cnn (two conv-BatchNorm-ReLU blocks and a linear
head, 8 images of 16x16), transformer (nn.TransformerEncoderLayer, d_model 64, 4
heads, batch 4 x 16 tokens), adamw (a float32 trajectory: 10 AdamW steps of a Linear
feeding BatchNorm1d, every parameter, loss and optimizer state judged step by step,
torch's other order being the batch reversed), and any zoo model by name (resnet18,
swin_t: the zoo's inputs; torchvision is the optional zoo extra).

Exit status: 0; 2 for bad arguments.

Examples:
  python scripts/float32_calibration.py
  python scripts/float32_calibration.py --models mlp,cnn,transformer,adamw,resnet18,swin_t
"""

from __future__ import annotations

import argparse
import sys
import time

OWN = ("mlp", "cnn", "transformer")
TRAJECTORIES = ("adamw",)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--models",
        default=",".join(OWN + TRAJECTORIES),
        metavar="A,B",
        help="comma-separated: mlp, cnn, transformer, adamw, or zoo model "
        f"names (default: {','.join(OWN + TRAJECTORIES)})",
    )
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models:
        parser.error("--models: name at least one model")
    import _zoo_models  # no torch

    for name in args.models:
        if name not in OWN + TRAJECTORIES:
            try:
                _zoo_models.select(name)
            except ValueError as error:
                parser.error(f"--models: {error}")
    return parser, args


def own_model(name: str):
    """``(module, args, kwargs)``: a float32 torch model of ``OWN`` and its inputs."""
    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "mlp":
        module = nn.Sequential(
            nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10)
        )
        x = rng.standard_normal((32, 64))
    elif name == "cnn":
        module = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
        x = rng.standard_normal((8, 3, 16, 16))
        module.train()
        with torch.no_grad():  # non-trivial running statistics for evaluation mode
            module(torch.from_numpy(x.astype(np.float32)))
    else:
        module = nn.TransformerEncoderLayer(
            64, 4, dim_feedforward=128, dropout=0.0, batch_first=True
        )
        x = rng.standard_normal((4, 16, 64))
    return module.float().eval(), (x.astype(np.float32),), {}


def adamw_trajectories(scale: float = 1.0, reverse: bool = False) -> tuple:
    """``(torch float32, torch float64, jaxgrad float32)`` trajectories of 10 AdamW steps
    (lr 1e-2) of a Linear feeding BatchNorm1d, tanh, Linear (6-16-3, training mode, MSE
    on one fixed batch of 32): the Linear's bias gradient is 0 in exact arithmetic, so
    float32 noise sets the sign of Adam's steps on it. The float64 run starts from the
    same float32 weights and batch. ``scale`` multiplies jaxgrad's output (a planted
    mistake); ``reverse`` feeds torch's float32 run the batch in reverse order (another
    summation order, the same answer)."""
    import copy

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import jaxgrad
    from jaxgrad import losses as jlosses
    from jaxgrad import optim as joptim
    from torchref import optim as toptim

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).train()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.standard_normal((32, 3)).astype(np.float32)

    def torch_run(dtype, order=slice(None)):
        copied = copy.deepcopy(module).to(dtype)
        return toptim.optimizer_trajectory(
            copied,
            torch.optim.AdamW(copied.parameters(), lr=1e-2),
            torch.from_numpy(x[order].copy()).to(dtype),
            torch.from_numpy(y[order].copy()).to(dtype),
            torch.nn.functional.mse_loss,
            10,
        )

    model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)

    def loss(p):
        out, _ = model.apply(p, jnp.asarray(x), train=True, buffers=buffers)
        return jlosses.mse_loss(out * scale, jnp.asarray(y))

    candidate = joptim.optimizer_trajectory(joptim.adamw(lr=1e-2), loss, params, 10)
    reference = torch_run(torch.float32, slice(None, None, -1) if reverse else slice(None))
    return reference, torch_run(torch.float64), jax.tree.map(np.asarray, candidate)


def measure_adamw() -> dict:
    """``measure``'s result for ``adamw_trajectories``, leaf by leaf and step by step."""
    import jax
    import numpy as np

    from jaxgrad.optim.trajectory import compare_trajectory
    from jaxgrad.parity import rounding

    reference, exact, candidate = adamw_trajectories()
    reversed_run = adamw_trajectories(reverse=True)[0]

    def by_step(tree):  # compare_trajectory's layout: {"step k": the tree at step k}
        return {
            f"step {k + 1}": jax.tree.map(lambda leaf: np.asarray(leaf)[k], tree)  # noqa: B023
            for k in range(10)
        }

    answer = by_step(exact)
    torch32, ours = rounding(by_step(reference), answer), rounding(by_step(candidate), answer)
    other = rounding(by_step(reversed_run), answer)
    rows = [
        {"path": path, "torch": mine, "jaxgrad": ours[path], "orders": [other[path]]}
        for path, mine in torch32.items()
    ]
    return {
        "rows": rows,
        "plain": compare_trajectory(reference, candidate),
        "calibrated": compare_trajectory(reference, candidate, reference64=exact),
    }


def measure(built, dynamic_shapes="auto") -> dict:
    """Per-leaf headrooms of torch's float32 runs and jaxgrad's against torch's float64,
    and the verdicts of ``compare`` with and without ``reference64``."""
    import _zoo_models as zoo_models
    from parity_checks._zoo import convert, jax_eval, torch_eval, torch_float32_runs

    from jaxgrad.parity import compare, rounding

    module64, args64, kwargs64 = zoo_models.instance(built, "float64")
    reference64, cotangents = torch_eval(module64, args64, kwargs64)
    module32, args32, kwargs32 = zoo_models.instance(built, "float32")
    model, params, buffers, _ = convert(module32, args32, kwargs32, dynamic_shapes=dynamic_shapes)
    reference32, _ = torch_eval(module32, args32, kwargs32, cotangents)
    candidate32 = jax_eval(model, params, buffers, args32, kwargs32, cotangents)
    others = [
        rounding({"grads": run["grads"]}, {"grads": reference64["grads"]})
        for run in torch_float32_runs(module32, args32, kwargs32, cotangents)
    ]
    torch32, ours = rounding(reference32, reference64), rounding(candidate32, reference64)
    rows = [
        {
            "path": path,
            "torch": mine,
            "jaxgrad": ours[path],
            "orders": [run[path] for run in others if path in run],
        }
        for path, mine in torch32.items()
    ]
    plain = compare(reference32, candidate32)
    calibrated = compare(reference32, candidate32, reference64=reference64)
    return {"rows": rows, "plain": plain, "calibrated": calibrated}


def summary(name: str, found: dict) -> dict:
    rows = found["rows"]

    def needed(values, base):
        # the multiple of torch's own headroom a correct result needs where it misses
        return max([v / base for v, base in zip(values, base) if v > 1.0 and base > 0], default=0.0)

    torch_h = [r["torch"] for r in rows]
    ours = [r["jaxgrad"] for r in rows]
    order_h = [max(r["orders"], default=0.0) for r in rows]
    rules = {}
    for leaf in found["calibrated"].leaves:
        if leaf.passed and leaf.rule != "tier":
            rules[leaf.rule] = rules.get(leaf.rule, 0) + 1
    return {
        "model": name,
        "leaves": len(rows),
        "torch_miss": sum(h > 1 for h in torch_h),
        "torch_worst": max(torch_h),
        "jax_miss": sum(h > 1 for h in ours),
        "jax_worst": max(ours),
        "order_worst": max(order_h),
        "tier_fails": len(found["plain"].failures()),
        "jax_ratio": needed(ours, torch_h),
        "order_ratio": needed(order_h, torch_h),
        "calibrated_fails": len(found["calibrated"].failures()),
        "rules": rules,
    }


def main(argv=None) -> int:
    _, args = parse_args(argv)
    import jax
    import torch

    torch.set_num_threads(1)
    jax.config.update("jax_enable_x64", True)
    import _zoo_models as zoo_models

    from jaxgrad.parity import CALIBRATION_MULTIPLE

    header = (
        f"{'model':<22} {'leaves':>6}  {'torch f32 > tier':>16}  {'jaxgrad > tier':>14}  "
        f"{'other orders':>12}  {'tier fails':>10}  {'needs x':>13}  "
        f"{'fails at ' + format(CALIBRATION_MULTIPLE, 'g') + 'x':>10}  rules"
    )
    print(header)
    print("-" * len(header))
    for name in args.models:
        began = time.perf_counter()
        if name == "adamw":
            found = measure_adamw()
        else:
            if name in OWN:
                found = measure(own_model(name))
            else:  # the zoo's model, captured as the zoo captures it
                entry = zoo_models.select(name)[0]
                found = measure(zoo_models.build(entry), entry.dynamic_shapes)
        row = summary(name, found)
        rules = ", ".join(f"{k} {v}" for k, v in sorted(row["rules"].items())) or "-"
        print(
            f"{name:<22} {row['leaves']:>6}  "
            f"{row['torch_miss']:>4} (max {row['torch_worst']:5.2f})  "
            f"{row['jax_miss']:>3} (max {row['jax_worst']:5.2f})  "
            f"{'max ' + format(row['order_worst'], '.2f'):>12}  {row['tier_fails']:>10}  "
            f"{row['jax_ratio']:5.2f} / {row['order_ratio']:5.2f}  "
            f"{row['calibrated_fails']:>10}  {rules}",
            flush=True,
        )
        print(f"  ({time.perf_counter() - began:.0f} s)", file=sys.stderr, flush=True)
    print(
        "\nheadrooms in units of the float32 tier against torch float64 (the largest over a "
        "model's leaves);\n'needs x': the largest ratio jaxgrad / torch's other summation "
        "orders lie from float64 over torch's default,\nover the leaves where they miss the "
        "tier; 'rules': the leaves compare(..., reference64=...) passes by each rule."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
