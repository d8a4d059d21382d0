"""Running one layer alone on given inputs: the doctor's input injection (each port
layer on torch's recorded input) and its catalogue trials (each variant of a layer on
the same input), with the precision a float64 comparison needs.

``run_layer(layer, params, buffers, args, kwargs, train, path, jit=...)`` returns the
layer's output and new buffers as numpy; ``jit=True`` compiles one program per layer
and options (the trials run many variants of one layer) and falls back to the eager
run for port code that cannot be traced. ``diagnose`` and ``anyport`` both run layers
through it.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import numpy as np

from jaxgrad.doctor.calls import numpy_tree


def precision_context(arrays):
    """x64 on when any of ``arrays`` is float64, and highest-precision matmuls either way."""
    wide = any(np.asarray(a).dtype == np.float64 for a in arrays if a is not None)
    stack = contextlib.ExitStack()
    if wide:
        stack.enter_context(jax.enable_x64(True))
    stack.enter_context(jax.default_matmul_precision("highest"))
    return stack


def _is_array(v):
    return isinstance(v, np.ndarray) or hasattr(v, "__jax_array__") or isinstance(v, jax.Array)


@functools.lru_cache(maxsize=256)
def _jitted(layer, train, path, static_kwargs, array_names):
    # one compilation per (layer, options): the catalogue's weight and mask variants
    # of a layer then reuse it (eager lax.scan would re-trace an LSTM per variant)
    def run(params, buffers, args, arrays):
        return layer.forward_with_state(
            params,
            *args,
            buffers=buffers,
            train=train,
            key=None,
            path=path,
            **dict(static_kwargs),
            **dict(zip(array_names, arrays)),
        )

    return jax.jit(run)


def run_layer(layer, params, buffers, args, kwargs, train, path, jit=False):
    """One layer on given inputs; ``jit`` for layers run many times (the trials)."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    out = None
    if jit:
        arrays = {k: v for k, v in kwargs.items() if _is_array(v)}
        static = tuple(sorted((k, v) for k, v in kwargs.items() if k not in arrays))
        try:
            fn = _jitted(layer, train, path, static, tuple(arrays))
            out, new = fn(dict(params), dict(buffers), tuple(args), tuple(arrays.values()))
        except Exception:  # noqa: BLE001 - untraceable port code: the eager run below
            out = None  # reproduces any genuine error with its own message
    if out is None:
        out, new = layer.forward_with_state(
            params, *args, buffers=buffers, train=train, key=None, path=path, **kwargs
        )
    return numpy_tree(out), {k: np.asarray(v) for k, v in new.items()}
