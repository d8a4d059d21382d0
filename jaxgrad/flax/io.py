"""Saving and loading an ``nnx`` module's state as safetensors, keyed by nnx paths.

``save_nnx(module, path, metadata)`` writes every variable (params and batch stats)
under its nnx path (``"layers.0.kernel"``), atomically (a temporary file renamed
into place). ``load_nnx(module, path)`` validates every key, shape and dtype of
the file against ``module`` — all problems reported at once — and updates it.
"""

from __future__ import annotations

import os
import tempfile

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxgrad.nn.module import _key_problems


def _flat(module) -> dict[str, nnx.Variable]:
    return {".".join(map(str, path)): node for path, node in nnx.iter_graph(module)
            if isinstance(node, nnx.Variable)}


def save_nnx(module, path: str, metadata: dict[str, str] | None = None) -> None:
    """Write ``module``'s variables to ``path`` (safetensors), atomically."""
    from safetensors.numpy import save_file

    arrays = {name: np.array(var.get_value(), order="C", copy=True)  # keeps 0-d arrays 0-d
              for name, var in _flat(module).items()}
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    os.close(fd)
    try:
        save_file(arrays, tmp, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_nnx(module, path: str) -> None:
    """Load ``path`` (written by ``save_nnx``) into ``module`` in place.

    Raises:
      ValueError: every missing or unexpected key and every shape or dtype mismatch.
    """
    from safetensors.numpy import load_file

    stored = load_file(path)
    variables = _flat(module)
    problems = _key_problems(variables, stored)  # the same wording as load_state_dict
    for name, var in variables.items():
        if name in stored:
            want = np.asarray(var.get_value())
            if stored[name].shape != want.shape or stored[name].dtype != want.dtype:
                problems.append(f"`{name}`: file has {stored[name].dtype}{list(stored[name].shape)}, "
                                f"module has {want.dtype}{list(want.shape)}")
    if problems:
        raise ValueError(f"load_nnx({path!r}): " + "; ".join(problems) + ".")
    for name, var in variables.items():
        var.set_value(jnp.asarray(stored[name]))
