"""What JAX keeps for the backward pass: residuals, compiled memory, checkpointing.

Contract: JAX has no graph object; what PyTorch saves on ``ctx`` during the forward,
JAX calls *residuals* — the values ``jax.vjp`` carries from the forward to the
backward. This module measures them three ways:

- ``saved_residuals(fn, *args)``: the residual list of ``jax.ad_checkpoint``'s
  ``print_saved_residuals`` as data (shape, dtype, bytes, where it came from) — the
  eager, unoptimised view;
- ``vjp_residuals(fn, *args)``: the leaves of the jitted ``jax.vjp`` closure, i.e.
  what a compiled forward hands to its backward ("the forward with graph");
- ``compiled_memory(fn, *args)``: XLA's ``memory_analysis()`` of the compiled
  program (argument, output and temporary bytes).

Differentiate with respect to what needs a gradient only (``lambda p: loss(p, x)``):
like torch, JAX then keeps nothing for the input's gradient. Residuals are split
into ``arguments`` (the caller's arrays and captured constants, already in memory),
``activations`` (floats whose leading dimension is the batch: what grows with batch
size), ``masks`` (boolean residuals such as ReLU's ``x > 0``) and ``other`` (float
copies of weights, such as transposes).
``checkpointed_apply`` wraps consecutive children of a ``Sequential`` in
``jax.checkpoint`` with a policy; the torch twin is ``torchref.memory``.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.container import Sequential


class Residual(NamedTuple):
    shape: tuple  # the residual's shape
    dtype: np.dtype  # its dtype
    nbytes: int  # prod(shape) * itemsize
    source: str  # "from the argument x", "output of tanh from …"


_SHORT_DTYPES = {
    "f32": "float32",
    "f64": "float64",
    "f16": "float16",
    "bf16": "bfloat16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "bool": "bool",
}


def _residual(shape, dtype, source: str) -> Residual:
    dtype = np.dtype(jnp.dtype(dtype))
    shape = tuple(int(d) for d in shape)
    return Residual(shape, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, source)


def saved_residuals(fn: Callable, *args) -> list[Residual]:
    """The residuals ``jax.vjp(fn, *args)`` saves, eagerly traced (no XLA optimisation).

    Uses the data behind ``jax.ad_checkpoint.print_saved_residuals``; where that
    private helper is gone, parses the public printout instead.
    """
    try:
        from jax._src.ad_checkpoint import saved_residuals as _saved
    except ImportError:  # pragma: no cover - depends on the JAX version
        _saved = None
    if _saved is not None:
        return [_residual(aval.shape, aval.dtype, source) for aval, source in _saved(fn, *args)]
    buffer = io.StringIO()  # pragma: no cover
    with contextlib.redirect_stdout(buffer):
        jax.ad_checkpoint.print_saved_residuals(fn, *args)
    residuals = []
    for line in buffer.getvalue().splitlines():
        match = re.match(r"(\w+)\[([\d,]*)\]\s+(.*)", line)
        if match:
            shape = tuple(int(d) for d in match.group(2).split(",") if d)
            residuals.append(
                _residual(shape, _SHORT_DTYPES.get(match.group(1), match.group(1)), match.group(3))
            )
    return residuals


def vjp_residuals(fn: Callable, *args) -> list[Residual]:
    """The arrays inside the jitted ``jax.vjp`` closure: what a compiled forward keeps.

    Shapes only (``jax.eval_shape``): nothing is computed.
    """
    closure = jax.eval_shape(lambda *a: jax.vjp(fn, *a)[1], *args)
    return [
        _residual(leaf.shape, leaf.dtype, "vjp closure")
        for leaf in jax.tree_util.tree_leaves(closure)
    ]


def classify(residuals, batch_size: int) -> dict[str, int]:
    """Bytes by kind: ``arguments`` (the caller's arrays: arguments and captured
    constants, already in memory); ``masks`` (non-float, e.g. ReLU's bool mask);
    ``activations`` (float, leading dim = batch); ``other`` (float, e.g. transposed
    weights)."""
    totals = {"arguments": 0, "activations": 0, "masks": 0, "other": 0}
    for residual in residuals:
        if residual.source.startswith(("from the argument", "from a constant")):
            totals["arguments"] += residual.nbytes
        elif not np.issubdtype(residual.dtype, np.floating) and residual.dtype.name != "bfloat16":
            totals["masks"] += residual.nbytes
        elif residual.shape and residual.shape[0] == batch_size:
            totals["activations"] += residual.nbytes
        else:
            totals["other"] += residual.nbytes
    totals["total"] = sum(totals.values())
    return totals


def compiled_memory(fn: Callable, *args) -> dict[str, int]:
    """XLA's memory analysis of ``jax.jit(fn)`` on ``args``, in bytes.

    Returns:
      ``{"arguments", "outputs", "temporaries", "aliased"}``; the temporaries hold
      every intermediate the compiled program needs at once, residuals included.
    """
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    if stats is None:  # pragma: no cover - some backends report nothing
        raise RuntimeError("this JAX backend gives no memory_analysis() for compiled programs.")
    return {
        "arguments": int(stats.argument_size_in_bytes),
        "outputs": int(stats.output_size_in_bytes),
        "temporaries": int(stats.temp_size_in_bytes),
        "aliased": int(stats.alias_size_in_bytes),
    }


def checkpointed_apply(model: Sequential, *, every: int, policy=None) -> Callable:
    """``apply(params, x)`` recomputing each run of ``every`` children in the backward.

    Each chunk ``model[i:i + every]`` runs under ``jax.checkpoint(policy=policy)``:
    only the chunk's inputs are saved (``policy=None`` saves nothing inside;
    ``jax.checkpoint_policies.dots_saveable`` keeps matmul outputs). ``every=2``
    on an MLP is per-layer (Linear + activation); ``every=4`` is blocks of two layers.
    """
    if not isinstance(model, Sequential):
        raise TypeError(f"`model` is a {type(model).__name__}; expected a jaxgrad.nn.Sequential.")
    if int(every) != every or every < 1:
        raise ValueError(f"`every` (={every}) must be a positive integer number of children.")
    chunks = [model[start : start + every] for start in range(0, len(model), every)]
    chunk_fns = [jax.checkpoint(chunk.apply, policy=policy) for chunk in chunks]

    def apply(params, x):
        for chunk, chunk_fn in zip(chunks, chunk_fns):
            prefixes = tuple(name + "." for name in chunk.names)
            x = chunk_fn({k: v for k, v in params.items() if k.startswith(prefixes)}, x)
        return x

    return apply


def cast_floats(tree, dtype):
    """Every floating leaf of ``tree`` cast to ``dtype`` (e.g. ``jnp.bfloat16``)."""
    return jax.tree_util.tree_map(
        lambda leaf: leaf.astype(dtype) if jnp.issubdtype(leaf.dtype, jnp.floating) else leaf, tree
    )
