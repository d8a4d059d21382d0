"""One recorded call of one layer (``Call``), and the numpy copies it holds.

A ``Call`` is one call of one module: its path (``layer1.0.conv1``), the call index
(a module called twice, like a ResNet block's shared ``relu``, has calls 0 and 1),
its positional inputs, keyword inputs, output and (for BatchNorm) buffers after the
call, all as numpy arrays copied when recorded (torch's in-place ops overwrite them
later). ``capture`` records them on the torch side and through a port's taps,
``regions`` for each region of a captured program.

``numpy_copy`` copies what torch hands a hook (tensors read by duck typing, nested in
tuples, lists and dicts); ``numpy_tree`` what a jax layer returns.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass
class Call:
    """One call of one layer: ``path`` (module path), ``index`` (call number)."""

    path: str
    index: int
    class_name: str
    args: tuple
    kwargs: dict
    output: Any
    buffers: dict = dataclasses.field(default_factory=dict)


def numpy_copy(value):
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return np.array(value.detach().cpu().numpy())  # a copy: in-place ops follow
    if isinstance(value, (tuple, list)):
        return type(value)(numpy_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: numpy_copy(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return np.array(value)


def numpy_tree(value):
    if isinstance(value, (tuple, list)):
        return type(value)(numpy_tree(v) for v in value)
    if value is None:
        return None
    return np.asarray(value)
