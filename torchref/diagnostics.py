"""Per-layer gradient norms and dead ReLU units of a torch module.

The twin of ``jaxgrad.diagnostics`` over ``module.named_parameters()`` after
``backward()``: the same grouping by module prefix in numeric layer order, the same
float64 Frobenius norms, so the two frameworks' numbers can be put side by side.
The vanishing / exploding verdict is a pure function of the norms; take these norms
to ``jaxgrad.diagnostics.report_from_norms`` (in scripts and tests, which import both).
"""

from __future__ import annotations

import torch
from torch import nn


def layer_order_key(name: str) -> tuple:
    """Sort key putting ``"2"`` before ``"10"`` (numeric components as numbers)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split("."))


def layer_grad_norms(module: nn.Module) -> dict[str, dict[str, float]]:
    """``{"0": {"weight": norm, "bias": norm}, ...}`` from each parameter's ``.grad``.

    Parameters whose ``.grad`` is None (frozen, or no backward yet) are skipped.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"`module` is a {type(module).__name__}; expected a torch.nn.Module.")
    named = [(name.rpartition("."), p) for name, p in module.named_parameters()]
    grouped: dict[str, dict[str, float]] = {}
    for (layer, _, param), p in sorted(named, key=lambda item: layer_order_key(item[0][0])):
        if p.grad is not None:
            grouped.setdefault(layer, {})[param] = p.grad.detach().double().norm().item()
    return grouped


def relu_activations(module: nn.Sequential, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{child_name: output}`` of every ``nn.ReLU`` child, captured by forward hooks."""
    captured: dict[str, torch.Tensor] = {}
    handles = [
        child.register_forward_hook(
            lambda _m, _inp, out, name=name: captured.__setitem__(name, out.detach())
        )
        for name, child in module.named_children()
        if isinstance(child, nn.ReLU)
    ]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured


def dead_units(activations):
    """Fraction of units of `(batch, units)` never positive; dict/list in, dict/list out."""
    if isinstance(activations, dict):
        return {name: dead_units(value) for name, value in activations.items()}
    if isinstance(activations, (list, tuple)):
        return [dead_units(value) for value in activations]
    if activations.dim() < 2:
        raise ValueError(
            f"`activations` has shape {tuple(activations.shape)}; expected `(batch, units...)`."
        )
    alive = (activations > 0).any(dim=0)
    return 1.0 - alive.double().mean().item()
