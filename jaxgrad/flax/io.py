"""Saving and loading an ``nnx`` module's state as safetensors, keyed by nnx paths.

``save_nnx(module, path, metadata)`` writes every variable (params, batch stats and
random-number state) under its nnx path (``"layers.0.kernel"``), atomically (a
temporary file renamed into place). ``load_nnx(module, path)`` validates every key,
shape and dtype of the file against ``module`` — all problems reported at once —
and updates it.

Random-number state: a module with dropout holds ``nnx.Rngs`` streams, whose
``key`` variables are typed PRNG keys (``key<fry>``), which no file format stores.
``save_nnx`` writes each as its key data (``jax.random.key_data``: ``uint32``, `(2,)`
for threefry) and records the key implementation of every such entry in the file's
metadata under ``"jaxgrad.prng_keys"`` (JSON ``{path: impl name}``); ``load_nnx``
wraps the data back with ``jax.random.wrap_key_data`` and refuses a file whose
implementation differs from the module's. The streams' ``count`` variables are
plain ``uint32`` arrays. So a reloaded module continues the same dropout stream the
saved one would have drawn next.
"""

from __future__ import annotations

import json
import os
import tempfile

import jax
import numpy as np
from flax import nnx

from jaxgrad._arrays import to_device
from jaxgrad.nn.module import _key_problems

PRNG_KEYS = "jaxgrad.prng_keys"  # the metadata entry naming the key-data tensors


def _flat(module) -> dict[str, nnx.Variable]:
    return {
        ".".join(map(str, path)): node
        for path, node in nnx.iter_graph(module)
        if isinstance(node, nnx.Variable)
    }


def _is_key(value) -> bool:
    return jax.dtypes.issubdtype(getattr(value, "dtype", None), jax.dtypes.prng_key)


def _stored_form(value) -> tuple[np.ndarray, str | None]:
    """``(numpy array, key implementation or None)`` of a variable's value."""
    if _is_key(value):
        return np.array(jax.random.key_data(value), copy=True), str(jax.random.key_impl(value))
    return np.array(value, order="C", copy=True), None  # keeps 0-d arrays 0-d


def save_nnx(module, path: str, metadata: dict[str, str] | None = None) -> None:
    """Write ``module``'s variables to ``path`` (safetensors), atomically.

    Args:
      module: an ``nnx.Module``; every ``nnx.Variable`` is written under its path.
      path: the file to write (its directory must exist).
      metadata: string entries stored in the file's header (``"jaxgrad.prng_keys"``
        is reserved: it records which entries are PRNG key data).

    Raises:
      ValueError: ``metadata`` that uses the reserved key.
    """
    from safetensors.numpy import save_file

    metadata = dict(metadata or {})
    if PRNG_KEYS in metadata:
        raise ValueError(
            f"save_nnx: the metadata key {PRNG_KEYS!r} is reserved (it records "
            "the PRNG keys' implementations)."
        )
    arrays, keys = {}, {}
    for name, var in _flat(module).items():
        arrays[name], impl = _stored_form(var.get_value())
        if impl is not None:
            keys[name] = impl
    if keys:
        metadata[PRNG_KEYS] = json.dumps(keys, sort_keys=True)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    os.close(fd)
    try:
        save_file(arrays, tmp, metadata=metadata or None)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_nnx(module, path: str) -> None:
    """Load ``path`` (written by ``save_nnx``) into ``module`` in place.

    Args:
      module: an ``nnx.Module`` of the saved model's structure (a fresh ``to_nnx``
        twin); its variables are overwritten.
      path: the safetensors file.

    Raises:
      ValueError: every missing or unexpected key, every shape or dtype mismatch, and
        every PRNG key stored as plain data (or the reverse) or with another key
        implementation than the module's.
    """
    from safetensors import safe_open

    with safe_open(path, framework="np") as handle:
        stored = {name: handle.get_tensor(name) for name in handle.keys()}
        header = handle.metadata() or {}
    stored_keys = json.loads(header.get(PRNG_KEYS, "{}"))
    variables = _flat(module)
    problems = _key_problems(variables, stored)  # the same wording as load_state_dict
    for name, var in variables.items():
        if name not in stored:
            continue
        want, impl = _stored_form(var.get_value())
        if impl != stored_keys.get(name):
            problems.append(
                f"`{name}`: file has "
                + (f"a {stored_keys[name]} PRNG key" if name in stored_keys else "a plain array")
                + ", module has "
                + (f"a {impl} PRNG key" if impl else "a plain array")
            )
        elif stored[name].shape != want.shape or stored[name].dtype != want.dtype:
            problems.append(
                f"`{name}`: file has {stored[name].dtype}{list(stored[name].shape)}, "
                f"module has {want.dtype}{list(want.shape)}"
            )
    if problems:
        raise ValueError(f"load_nnx({path!r}): " + "; ".join(problems) + ".")
    for name, var in variables.items():
        if name in stored_keys:
            var.set_value(jax.random.wrap_key_data(to_device(stored[name]), impl=stored_keys[name]))
        else:
            var.set_value(to_device(stored[name]))
