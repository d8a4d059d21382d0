"""Reading arrays and dtypes from any framework without importing it.

jaxgrad never imports torch. Where it must read a torch tensor or a torch dtype
(``load_state_dict``, ``from_torch``, ``parity.compare``) it duck-types: a tensor is
anything with ``detach()`` and ``numpy()``; a torch dtype prints as ``torch.float32``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def to_numpy(value: Any) -> np.ndarray:
    """Return ``value`` as a numpy array: torch tensors, jax arrays, numpy, scalars.

    A torch tensor is detached and moved to the CPU first (duck-typed, no torch
    import). bfloat16 torch tensors have no numpy twin, so they come through
    float32 and are cast to ``ml_dtypes.bfloat16`` (exact: bf16 ⊂ f32).
    """
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            return tensor.float().numpy().astype(jnp.bfloat16)
        return tensor.numpy()
    return np.asarray(value)


def to_device(value: Any, dtype: Any = None) -> jax.Array:
    """A fresh jax array from host data (numpy arrays, torch tensors), cast on the host.

    For arrays, the same values and dtype as ``jnp.array(value, dtype=dtype, copy=True)``
    (a Python scalar comes back strongly typed, not weakly), without
    compiling anything: jax 0.10 compiles a small program per shape and dtype for
    ``jnp.asarray``/``jnp.array`` of host data and for an on-device cast, where
    ``jax.device_put`` of a numpy array only copies. Never a view of the caller's
    memory, so donating it to a jitted step cannot overwrite a torch tensor.
    """
    return jax.device_put(np.array(to_numpy(value), dtype=dtype, copy=True))


def canonical_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from a numpy/jax dtype, a string, or a torch dtype (duck-typed).

    >>> canonical_dtype("float64"), canonical_dtype(jnp.float32)
    (dtype('float64'), dtype('float32'))
    """
    if dtype is None:
        return np.dtype("float32")
    text = str(dtype)
    if text.startswith("torch."):
        text = text[len("torch.") :]
        if text == "double":
            text = "float64"
        elif text == "float":
            text = "float32"
        elif text == "half":
            text = "float16"
        return np.dtype(jnp.dtype(text))
    return np.dtype(jnp.dtype(dtype))


def check_dtype_available(dtype: Any, *, what: str = "dtype") -> np.dtype:
    """Return the canonical dtype, raising if JAX would silently downcast it.

    Without ``jax_enable_x64`` JAX turns float64 into float32 without a word; a
    parity check built on that would compare the wrong precision.
    """
    dtype = canonical_dtype(dtype)
    if dtype.itemsize == 8 and not jax.config.jax_enable_x64:
        raise ValueError(
            f"`{what}` (={dtype}) needs 64-bit JAX, but jax_enable_x64 is off, so JAX "
            "would silently compute in 32 bits. Enable it first: "
            "`jax.config.update('jax_enable_x64', True)` or `with jax.enable_x64(True):`."
        )
    return dtype


def check_input_dtype(
    layer_name: str, x: Any, expected_dtype: Any, *, argument: str = "input"
) -> None:
    """Raise where torch would: a layer's input must have its parameters' dtype.

    torch refuses ``Linear(float32)(float64 input)`` ("mat1 and mat2 must have the same
    dtype"); JAX would silently promote to the wider dtype and compute a float32 model
    in float64 (or the reverse), so a parity check would compare the wrong precision.
    Dtypes are compared after JAX's canonicalisation: with ``jax_enable_x64`` off a
    float64 numpy input *is* float32 to JAX and passes.

    Args:
      layer_name: how the error names the layer (``"Linear"``, or its path).
      x: the input array `(*, ...)`.
      expected_dtype: the dtype of the layer's parameters.
      argument: the input's name in the error.

    Raises:
      TypeError: when the dtypes differ, naming both and the two ways to fix it.
    """
    got = jax.dtypes.canonicalize_dtype(jnp.result_type(x))
    expected = jax.dtypes.canonicalize_dtype(expected_dtype)
    if got != expected:
        got, expected = np.dtype(got).name, np.dtype(expected).name
        rebuild = f" or build the layer in {got}" if jnp.issubdtype(got, jnp.floating) else ""
        raise TypeError(
            f"{layer_name}: `{argument}` dtype {got} does not match the layer's {expected} "
            f'parameters (torch raises "mat1 and mat2 must have the same dtype"). Cast '
            f"the input (`x.astype({expected!r})`){rebuild}."
        )
