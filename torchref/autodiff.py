"""torch's ``retain_grad()``, ``autograd.grad`` and ``detach()``, for the parity checks.

``retain_grads(fn, args, names)`` runs ``fn(*args, tap=tap)`` — the same tap-marked
function style as ``jaxgrad.autodiff.intermediate_grads`` — calling ``.retain_grad()``
on every tapped tensor, then ``backward()``, and returns the tapped tensors' ``.grad``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def retain_grads(fn: Callable, args: Sequence[torch.Tensor], names: Sequence[str]):
    """``(output, {name: .grad of the tapped tensor})`` after ``output.backward()``."""
    tapped = {}

    def tap(name, value):
        value.retain_grad()
        tapped[name] = value
        return value

    out = fn(*args, tap=tap)
    out.backward()
    return out.detach(), {n: tapped[n].grad for n in names}


def target_network_step(
    online: torch.nn.Module, target_net: torch.nn.Module, batches: Sequence[torch.Tensor]
) -> dict:
    """Lesson 002's target network: ``mse(online(x), target_net(x).detach())`` per batch.

    Gradients accumulate into ``online`` over the batches (one ``zero_grad`` first);
    ``running`` is the ``loss.detach().item()`` total, a number holding no graph.

    Returns:
      ``{"online": {name: grad}, "target": {name: grad or None}, "running": float,
      "target_requires_grad": bool}``
    """
    online.zero_grad(set_to_none=True)
    target_net.zero_grad(set_to_none=True)
    running = 0.0
    target_requires_grad = None
    for x in batches:
        target = target_net(x).detach()
        target_requires_grad = target.requires_grad
        loss = torch.nn.functional.mse_loss(online(x), target)
        loss.backward()
        running += loss.detach().item()
    return {
        "online": {n: p.grad for n, p in online.named_parameters()},
        "target": {n: p.grad for n, p in target_net.named_parameters()},
        "running": running,
        "target_requires_grad": target_requires_grad,
    }
