"""The lessons' depth experiments in PyTorch; the twin of ``jaxgrad.lessons.depth``.

Same functions, same arguments, idiomatic torch: ``backward()`` and ``.grad``.
"""

from __future__ import annotations

import torch
from torch import nn

from torchref.diagnostics import layer_grad_norms

LOSSES = {"cross_entropy": nn.functional.cross_entropy, "mse": nn.functional.mse_loss}
SIGMOID_CHAIN_INPUT = 0.5


def weight_grad_norms(
    module: nn.Module, x: torch.Tensor, y: torch.Tensor, *, loss: str = "cross_entropy"
) -> dict[str, float]:
    """One forward, one ``backward()``, ``{layer: ‖weight.grad‖}`` in layer order."""
    if loss not in LOSSES:
        raise ValueError(f"`loss` (={loss!r}) must be one of {', '.join(LOSSES)}.")
    module.zero_grad(set_to_none=True)
    LOSSES[loss](module(x), y).backward()
    norms = layer_grad_norms(module)
    return {layer: p["weight"] for layer, p in norms.items() if "weight" in p}


def sigmoid_chain_grad(
    x: float = SIGMOID_CHAIN_INPUT, n: int = 20, dtype: torch.dtype = torch.float64
) -> float:
    """d/dx σ(σ(…σ(x)…)) with ``n`` sigmoids."""
    leaf = torch.tensor(x, dtype=dtype, requires_grad=True)
    value = leaf
    for _ in range(n):
        value = torch.sigmoid(value)
    value.backward()
    return leaf.grad.item()


def repeated_multiply_grad(
    x: float = 1.0, factor: float = 3.0, n: int = 20, dtype: torch.dtype = torch.float64
) -> float:
    """d/dx of ``x`` multiplied by ``factor`` ``n`` times."""
    leaf = torch.tensor(x, dtype=dtype, requires_grad=True)
    value = leaf
    for _ in range(n):
        value = value * torch.tensor(factor, dtype=dtype)
    value.backward()
    return leaf.grad.item()


def sigmoid_bound(n: int, dtype: torch.dtype = torch.float32) -> float:
    """σ'(0)ⁿ with σ'(0) from ``backward()``."""
    leaf = torch.tensor(0.0, dtype=dtype, requires_grad=True)
    torch.sigmoid(leaf).backward()
    return (leaf.grad**n).item()
