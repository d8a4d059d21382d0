"""The naive gradient of lesson 000 in PyTorch: nudge one parameter at a time.

The twin of ``jaxgrad.lessons.cost.naive_gradient``: central differences under
``torch.no_grad()``, two forward passes per parameter, each parameter restored
exactly after its nudge.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


@torch.no_grad()
def naive_gradient(
    module: nn.Module, loss: Callable[[], torch.Tensor], *, eps: float = 1e-3
) -> dict[str, torch.Tensor]:
    """``{name: gradient}`` of ``loss()`` (which runs ``module``) by central differences."""
    grads = {}
    for name, param in module.named_parameters():
        flat = param.view(-1)
        grad = torch.empty_like(flat)
        for index in range(flat.numel()):
            original = flat[index].item()
            flat[index] = original + eps
            plus = loss().item()
            flat[index] = original - eps
            minus = loss().item()
            flat[index] = original
            grad[index] = (plus - minus) / (2 * eps)
        grads[name] = grad.view_as(param)
    return grads
