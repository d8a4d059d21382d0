"""Freezing parameters: torch's requires_grad=False vs jaxgrad.optim.freeze.

Lesson 002's model, Linear(64,128) -> ReLU -> Linear(128,10), with the first layer
frozen:
  1. trainable parameter count (the lesson prints 1290) in both frameworks;
  2. gradients still flow through the frozen layer to its input;
  3. AdamW (weight decay 0.1) for a few steps: the frozen layer stays bit-identical
     in jaxgrad, the trained layer equals torch's;
  4. the trap: AdamW built over all parameters, the layer frozen afterwards. With
     zero_grad(set_to_none=False) the frozen layer keeps a zero .grad, so AdamW still
     decays it and its exp_avg still moves it — it drifts. jaxgrad's freeze: zero drift.
"""

from __future__ import annotations

import argparse

import numpy as np


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=5, help="AdamW steps (default 5)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps (={args.steps}) must be >= 1")
    import jax
    import jax.numpy as jnp
    import torch
    from parity_checks.autograd import frozen_model, frozen_training

    import jaxgrad.nn
    from jaxgrad import losses as jlosses
    from jaxgrad import optim as joptim
    from torchref import optim as toptim

    jax.config.update("jax_default_matmul_precision", "highest")
    jax.config.update("jax_enable_x64", True)

    module, x, labels = frozen_model("float64")
    model, params = jaxgrad.nn.from_torch(module)
    toptim.freeze(module, ["0"])
    print("1. Trainable parameters with layer 0 frozen (lesson 002 prints 1290)")
    print(
        f"  torch   sum(p.numel() for p in model.parameters() if p.requires_grad) = "
        f"{toptim.count_trainable(module)}"
    )
    print(
        f"  jaxgrad count_trainable(params, frozen={{'0'}})                    = "
        f"{joptim.count_trainable(params, {'0'})}\n"
    )

    print("2. Gradients flow through the frozen layer")
    x_torch = torch.from_numpy(x).requires_grad_(True)
    torch.nn.functional.cross_entropy(module(x_torch), torch.from_numpy(labels)).backward()
    grad_x = jax.grad(
        lambda x_: jlosses.cross_entropy(model.apply(params, x_), jnp.asarray(labels))
    )(jnp.asarray(x))
    print(
        f"  torch   model[0].weight.grad = {module[0].weight.grad}, "
        f"model[2].weight.grad norm = {module[2].weight.grad.norm().item():.6f}"
    )
    print(
        f"  |d loss / d input|: torch {x_torch.grad.norm().item():.12f}   "
        f"jaxgrad {float(jnp.linalg.norm(grad_x)):.12f}\n"
    )

    print(f"3. AdamW(lr=1e-2, weight_decay=0.1), {args.steps} steps, layer 0 frozen (float64)")
    start, torch_params, jax_params = frozen_training("float64", steps=args.steps)
    for name in start:
        change = np.max(np.abs(jax_params[name] - start[name]))
        diff = np.max(np.abs(jax_params[name] - torch_params[name]))
        print(f"  {name:<9} jaxgrad max |change| {change:.3e}   max |jaxgrad - torch| {diff:.1e}")
    print()

    print(f"4. The trap: AdamW built first, layer 0 frozen after 2 steps, {args.steps} more steps")
    for set_to_none in (False, True):
        module, x, labels = frozen_model("float64")
        drift = toptim.late_freeze_drift(
            module,
            torch.from_numpy(x),
            torch.from_numpy(labels),
            torch.nn.functional.cross_entropy,
            ["0"],
            warmup_steps=2,
            frozen_steps=args.steps,
            set_to_none=set_to_none,
        )
        print(
            f"  torch, zero_grad(set_to_none={set_to_none!s:<5}): frozen drift "
            + ", ".join(f"{k} {v:.3e}" for k, v in drift.items())
        )
    frozen = {k: v for k, v in jax_params.items() if k.startswith("0.")}
    drift = {k: float(np.max(np.abs(frozen[k] - start[k]))) for k in frozen}
    print(
        "  jaxgrad freeze(adamw(...), {'0'}):         frozen drift "
        + ", ".join(f"{k} {v:.3e}" for k, v in drift.items())
    )


if __name__ == "__main__":
    main()
