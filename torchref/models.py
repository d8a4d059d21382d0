"""Torch models the parity checks use, and numpy round-trips of their weights."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import nn

ACTIVATIONS = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "leaky_relu": nn.LeakyReLU,
    "identity": nn.Identity,
}


def mlp(sizes, activation: str = "relu", *, bias: bool = True,
        dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """``nn.Sequential(Linear, act, …, Linear)`` with no activation after the last layer.

    >>> mlp([784, 256, 10])   # the lessons' 203,530-parameter network
    """
    sizes = list(sizes)
    if len(sizes) < 2:
        raise ValueError(f"`sizes` (={sizes}) needs at least an input and an output width.")
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"`activation` (={activation!r}) must be one of {', '.join(ACTIVATIONS)}."
        )
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out, bias=bias, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def state_dict_numpy(module: nn.Module) -> dict[str, np.ndarray]:
    """``{name: numpy array}`` copies of ``module.state_dict()``."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_numpy(module: nn.Module, arrays: Mapping[str, np.ndarray]) -> nn.Module:
    """Load numpy (or any array-like) weights into ``module`` strictly; returns it.

    Dtypes must match the module's: a float64 array is not cast into a float32
    model behind the user's back.
    """
    own = module.state_dict()
    problems = []
    for name, target in own.items():
        if name in arrays:
            array = np.asarray(arrays[name])
            expected = str(target.dtype).replace("torch.", "")
            if array.dtype.name != expected:
                problems.append(f"`{name}`: dtype {array.dtype.name} != module's {expected}")
    if problems:
        raise ValueError("load_numpy: " + "; ".join(problems) + ".")
    module.load_state_dict(
        {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}, strict=True
    )
    return module
