"""Gradient accumulation the PyTorch way: ``.grad`` adds up across ``backward()`` calls.

``accumulate_grads`` is the idiomatic loop (``zero_grad()``, ``(loss / k).backward()``
per micro-batch, one ``step()`` afterwards); ``accumulation_trap`` is the lessons' bug,
``backward()`` on the same batch without ``zero_grad()`` (lesson 002, "The
accumulation trap").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def accumulate_grads(
    module: torch.nn.Module, loss_fn: Callable, micro_batches: Sequence, *, reduction: str = "mean"
) -> tuple[float, dict]:
    """``(loss, {name: grad})`` after one backward per micro-batch ``(x, y)``.

    ``"mean"`` divides each micro-batch loss by k before ``backward()``; ``"sum"`` does not.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"`reduction` (={reduction!r}) must be 'mean' or 'sum'.")
    k = len(micro_batches)
    module.zero_grad(set_to_none=True)
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(module(x), y)
        (loss / k if reduction == "mean" else loss).backward()
        total += loss.detach()
    loss = total / k if reduction == "mean" else total
    return loss, {n: p.grad.detach().clone() for n, p in module.named_parameters()}


def accumulation_trap(
    module: torch.nn.Module, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor, steps: int = 3
) -> list[dict]:
    """``.grad`` after each of ``steps`` ``backward()`` calls on the same batch, no zero_grad.

    Returns one ``{name: grad copy}`` per call: the k-th is k times the first.
    """
    module.zero_grad(set_to_none=True)
    history = []
    for _ in range(steps):
        loss_fn(module(x), y).backward()
        history.append({n: p.grad.detach().clone() for n, p in module.named_parameters()})
    return history


def train_with_accumulation(
    module: torch.nn.Module,
    loss_fn: Callable,
    micro_batches: Sequence,
    *,
    steps: int,
    lr: float,
    divide: bool = True,
) -> list[float]:
    """SGD for ``steps`` steps, each accumulating over all ``micro_batches``.

    ``divide=False`` is the bug of forgetting ``/ k``: the step is k times too large.
    Returns the mean micro-batch loss before each step.
    """
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss, _ = accumulate_grads(
            module, loss_fn, micro_batches, reduction="mean" if divide else "sum"
        )
        losses.append(float(loss) / (1 if divide else len(micro_batches)))
        optimizer.step()
    return losses
