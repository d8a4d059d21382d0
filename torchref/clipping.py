"""torch's gradient clipping on the lessons' "huge gradient" example (lesson 004, example 6).

The lesson clips a gradient of total norm ~3.48e6 to total norm 1.0 across all
parameters. ``huge_gradient_example`` builds one deliberately: a tanh MLP `[4, 8, 1]`
whose MSE loss is multiplied by ``loss_scale``, chosen so the float64 gradient's total
norm is exactly ``TARGET_NORM`` (lesson 004 prints 3.48e+06).
"""

from __future__ import annotations

import numpy as np
import torch

import torchref.models

TARGET_NORM = 3.48e6
SIZES = [4, 8, 1]


def _module_and_batch(seed: int):
    torch.manual_seed(seed)
    module = torchref.models.mlp(SIZES, "tanh", dtype=torch.float64)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, SIZES[0]))
    y = rng.standard_normal((8, SIZES[-1]))
    return module, x, y


def grads_of(
    module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_scale: float = 1.0
) -> dict:
    """``{name: .grad}`` after ``(loss_scale * mse(module(x), y)).backward()``."""
    module.zero_grad(set_to_none=True)
    (torch.nn.functional.mse_loss(module(x), y) * loss_scale).backward()
    return {n: p.grad.detach().clone() for n, p in module.named_parameters()}


def huge_gradient_example(dtype: str = "float64", seed: int = 0) -> dict:
    """``{"state_dict", "x", "y", "loss_scale"}`` (numpy, ``dtype``) of a ~3.48e6-norm gradient."""
    module, x, y = _module_and_batch(seed)
    base = grads_of(module, torch.from_numpy(x), torch.from_numpy(y))
    base_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in base.values()])).item()
    return {
        "state_dict": {k: v.detach().numpy().astype(dtype) for k, v in module.state_dict().items()},
        "x": x.astype(dtype),
        "y": y.astype(dtype),
        "loss_scale": TARGET_NORM / base_norm,
    }


def clipped(
    example: dict,
    *,
    max_norm: float | None = None,
    clip_value: float | None = None,
    norm_type: float = 2.0,
) -> dict:
    """torch's ``clip_grad_norm_`` / ``clip_grad_value_`` on the example's gradients.

    Returns:
      ``{"grads": {name: tensor}, "total_norm": tensor or None}`` after clipping.
    """
    dtype = getattr(torch, next(iter(example["state_dict"].values())).dtype.name)
    module = torchref.models.mlp(SIZES, "tanh", dtype=dtype)
    torchref.models.load_numpy(module, example["state_dict"])
    grads_of(
        module,
        torch.from_numpy(example["x"]),
        torch.from_numpy(example["y"]),
        example["loss_scale"],
    )
    total_norm = None
    if max_norm is not None:
        total_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm, norm_type)
    if clip_value is not None:
        torch.nn.utils.clip_grad_value_(module.parameters(), clip_value)
    return {"grads": {n: p.grad for n, p in module.named_parameters()}, "total_norm": total_norm}
