"""Helpers shared by the converters of ``jaxgrad.flax``: setting an nnx variable from a
torch-layout array, reading one back, and the argument checks that refuse by name."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxgrad._arrays import to_device


def as_tuple(value, n: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def as_numpy(value) -> np.ndarray:
    return np.asarray(value)


def as_param(array, dtype=None):
    """A fresh jax array (never a view of torch's memory), cast on the host."""
    return to_device(array, dtype)


def set_value(variable, array) -> None:
    variable.set_value(as_param(array, variable.get_value().dtype))


def rngs():
    """Initialisation keys for stock layers whose every parameter is overwritten."""
    return nnx.Rngs(0)


def empty(factory):
    """The stock layer ``factory()`` builds, without computing its initialisation
    (``nnx.eval_shape``: every variable a shape and dtype until set). For builders that
    set every parameter afterwards: flax's initialisers compile once per shape, most of
    ``to_nnx``'s time otherwise. ``unset`` finds any variable left unset."""
    return nnx.eval_shape(factory)


def unset(module) -> list[str]:
    """Paths of ``module``'s variables still holding a shape (built by ``empty``, never set)."""
    return [
        ".".join(map(str, path))
        for path, node in nnx.iter_graph(module)
        if isinstance(node, nnx.Variable) and isinstance(node.get_value(), jax.ShapeDtypeStruct)
    ]


def value_of(variable) -> np.ndarray:
    return np.array(variable.get_value(), copy=True)


def dtype_of(module) -> Any:
    """The floating dtype of ``module``'s first variable (float32 when it has none)."""
    for _, node in nnx.iter_graph(module):
        if isinstance(node, nnx.Variable) and hasattr(node.get_value(), "dtype"):
            value = node.get_value()
            if jnp.issubdtype(value.dtype, jnp.floating):
                return np.dtype(value.dtype)
    return np.dtype("float32")


def refuse(what: str, problems: list[str]) -> None:
    """One ``ValueError`` listing every problem of ``what`` at once."""
    if problems:
        raise ValueError(f"{what}: " + "; ".join(problems) + ".")
