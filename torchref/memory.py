"""What PyTorch saves for backward, counted exactly; checkpointing; the twin of
``jaxgrad.memory``.

``saved_bytes(fn, parameters, inputs)`` runs ``fn()`` under
``torch.autograd.graph.saved_tensors_hooks`` and records every tensor autograd packs
for the backward. Tensors are de-duplicated by storage (a ReLU's output saved again
as the next Linear's input is one tensor), then split into ``parameters`` (storage
of a model parameter — referenced, not copied: ``addmm`` saves ``weight.t()``, a
view), ``inputs`` (storage of a given input) and ``activations`` (new memory that
lives until the backward frees it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def saved_bytes(
    fn: Callable[[], torch.Tensor],
    parameters: Iterable[torch.Tensor] = (),
    inputs: Iterable[torch.Tensor] = (),
) -> tuple[torch.Tensor, dict[str, int]]:
    """Run ``fn()`` and count the bytes autograd saves for its backward.

    Returns:
      ``(fn's output, {"parameters", "inputs", "activations", "total", "tensors"})``.
    """
    parameter_storage = {p.untyped_storage().data_ptr() for p in parameters}
    input_storage = {t.untyped_storage().data_ptr() for t in inputs}
    seen: dict[tuple, tuple[str, int]] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() in parameter_storage:
            kind = "parameters"
        elif storage.data_ptr() in input_storage:
            kind = "inputs"
        else:
            kind = "activations"
        # one storage counted once, whatever views of it are saved
        seen[(storage.data_ptr(), kind)] = (kind, storage.nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = fn()
    totals = {"parameters": 0, "inputs": 0, "activations": 0}
    for kind, nbytes in seen.values():
        totals[kind] += nbytes
    totals["total"] = sum(totals.values())
    totals["tensors"] = len(seen)
    return output, totals


def chunks(module: nn.Sequential, every: int) -> list[nn.Sequential]:
    """Consecutive runs of ``every`` children (sharing the module's parameters)."""
    if int(every) != every or every < 1:
        raise ValueError(f"`every` (={every}) must be a positive integer number of children.")
    children = list(module.children())
    return [
        nn.Sequential(*children[start : start + every]) for start in range(0, len(children), every)
    ]


def checkpointed_forward(module: nn.Sequential, x: torch.Tensor, *, every: int) -> torch.Tensor:
    """``module(x)`` with each run of ``every`` children under ``torch.utils.checkpoint``.

    Non-reentrant checkpointing (``use_reentrant=False``, torch's recommendation):
    only each chunk's input is saved; the chunk is recomputed during the backward.
    """
    for chunk in chunks(module, every):
        x = checkpoint(chunk, x, use_reentrant=False)
    return x
