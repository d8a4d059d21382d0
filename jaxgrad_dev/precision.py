"""The precision a parity check runs at: ``jax_precision(dtype)``.

Float64 checks need jax's x64 mode on (off by default, and then a float64 array is
silently float32); every check, float32 too, runs its matmuls at the highest
precision, so an accelerator's faster default (TF32, bfloat16 passes) is never what
is compared with torch.
"""

from __future__ import annotations

import contextlib

import jax


@contextlib.contextmanager
def jax_precision(dtype: str):
    """x64 on for float64 work, and highest-precision matmuls either way."""
    with jax.default_matmul_precision("highest"):
        if dtype == "float64":
            with jax.enable_x64(True):
                yield
        else:
            yield
