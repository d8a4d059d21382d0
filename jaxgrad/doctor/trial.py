"""What a convention of the doctor's catalogue looks at (``Case``: the port's layer,
torch's twin, torch's inputs) and the variant of a layer it runs (``Trial``).

``catalogue`` builds the trials that undo a port's mistake, ``mistakes`` the trials
that make it on torch's own layer; both take a ``Case`` and return ``[(detail,
Trial), ...]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Case:
    """What a hypothesis may look at: the port layer and torch's twin of the layer.

    Attributes:
      layer, params: the port's layer and its params (torch names, torch layouts).
      torch_layer: torch's layer as a jaxgrad layer (``from_torch`` of the torch
        submodule): its fields are torch's hyperparameters. None when unsupported.
      class_name: the torch module's class name.
      args, kwargs: the torch layer's own inputs (numpy).
      train: whether the comparison runs in training mode.
    """

    layer: Any
    params: dict
    torch_layer: Any
    class_name: str
    args: tuple
    kwargs: dict
    train: bool
    buffers: dict = dataclasses.field(default_factory=dict)
    chw: tuple = ()  # (C, H, W) of torch's 4-d activations (flatten order)
    port_dtype: Any = None  # dtype of the port's value nearest the layer's output


@dataclasses.dataclass
class Trial:
    """A transformed port layer to run: ``None`` fields keep the port's own."""

    layer: Any = None
    params: dict | None = None
    args: tuple | None = None
    kwargs: dict | None = None
    fix_output: Callable | None = None  # (output, new_buffers, case) -> same
