"""torch's type promotion, for the ATen table (``torch.result_type``).

Operands are ranked in three priority groups: dimensioned tensors, zero-dim tensors,
Python numbers ("wrapped numbers"). Within a group dtypes promote as usual; across
groups a lower-priority group only decides the result when its *category* (bool <
integer < float < complex) is higher: ``float32_tensor * float64_zero_dim`` is
float32, ``int64_tensor * 2.5`` is the default float dtype (float32), ``uint8 +
int8`` is int16. JAX's own promotion differs (a float64 zero-dim array wins), so
every binary entry of the table promotes here first.

Reference: c10/core/ScalarType.h and aten/src/ATen/native/TypeProperties.cpp
(``update_result_type_state``, ``combine_categories``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

DEFAULT_FLOAT = np.dtype("float32")  # torch.get_default_dtype() at capture


def _category(dtype) -> int:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return 0
    if jnp.issubdtype(dtype, jnp.integer):
        return 1
    if jnp.issubdtype(dtype, jnp.floating):
        return 2
    return 3  # complex


def _wrapped_dtype(value) -> np.dtype:
    """The dtype a Python number takes in torch's promotion."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(value, (int, np.integer)):
        return np.dtype(np.int64)
    if isinstance(value, (float, np.floating)):
        return DEFAULT_FLOAT
    if isinstance(value, (complex, np.complexfloating)):
        return np.dtype(np.complex64) if DEFAULT_FLOAT == np.float32 else np.dtype(np.complex128)
    raise TypeError(f"type promotion: unsupported operand {value!r} ({type(value).__name__})")


def _promote(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return np.dtype(jnp.promote_types(a, b))


def _combine(higher, lower):
    if higher is None:
        return lower
    if lower is None:
        return higher
    if _category(higher) == 3:
        return higher
    if _category(lower) == 3:
        if _category(higher) == 2:
            return np.dtype(jnp.result_type(higher, np.complex64))
        return lower
    if _category(higher) == 2:
        return higher
    if higher == np.bool_ or _category(lower) == 2:
        return _promote(higher, lower)
    return higher


def is_tensor(value) -> bool:
    return isinstance(value, (jax.Array, np.ndarray)) or hasattr(value, "aval")


def result_type(*operands) -> np.dtype:
    """torch's result dtype for ``operands`` (JAX arrays or Python numbers), before
    jax's canonicalisation; None operands are skipped."""
    dim = zero = wrapped = None
    for value in operands:
        if value is None:
            continue
        if is_tensor(value):
            dtype = np.dtype(value.dtype)
            if np.ndim(value) > 0:
                dim = _promote(dim, dtype)
            else:
                zero = _promote(zero, dtype)
        else:
            wrapped = _promote(wrapped, _wrapped_dtype(value))
    result = _combine(dim, _combine(zero, wrapped))
    if result is None:
        raise TypeError("type promotion needs at least one operand")
    return result


def canonical(dtype) -> np.dtype:
    """``dtype`` as JAX holds it (int64 -> int32 and float64 -> float32 without x64)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(dtype)))


def promote(*operands):
    """``operands`` cast to their torch result dtype (numbers become arrays), and that
    dtype (canonical for JAX)."""
    dtype = canonical(result_type(*operands))
    return [
        None
        if v is None
        else jnp.asarray(v, dtype)
        if not is_tensor(v)
        else v.astype(dtype)
        if v.dtype != dtype
        else v
        for v in operands
    ], dtype


def is_floating(dtype) -> bool:
    return _category(dtype) >= 2


def float_of(dtype) -> np.dtype:
    """The dtype an op that always returns floats (``div``, ``sqrt``, ``mean``) gives
    for an input of ``dtype``: itself when floating, else the default float."""
    return np.dtype(dtype) if is_floating(dtype) else canonical(DEFAULT_FLOAT)


# --------------------------------------------------------------- compiling
def compiled(fn):
    """``fn`` run as one compiled program per combination of array shapes and dtypes
    and non-array arguments (numbers, dims, dtypes, strings: static).

    Eagerly (a model applied without ``jax.jit``, the op_db harness), JAX compiles
    every primitive separately, and every primitive of a ``custom_jvp`` rule again
    under differentiation; one program per entry keeps that to one compile for the
    forward and one for the backward. That pays for entries of many primitives
    (rounding division, ``pow``'s and ``elu``'s rules, ``logcumsumexp``: 3-5x less
    compile time over their samples) and costs for entries of one or two, whose
    primitives eager JAX shares between entries and shapes (``sort``, ``amax``: 2-5x
    more), so it is applied per entry. Inside a caller's ``jit`` it is inlined.
    Under ``jax.disable_jit()`` ``fn`` runs on concrete values, so its value checks
    (an integer division by zero) can raise.
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        dynamic = tuple(i for i, leaf in enumerate(leaves) if is_tensor(leaf))
        static = tuple(
            (i, _static_key(leaf)) for i, leaf in enumerate(leaves) if not is_tensor(leaf)
        )
        program = _program(fn, tree, dynamic, static)
        return program(*(leaves[i] for i in dynamic))

    return call


def _static_key(value):
    """A cache key equal only for interchangeable values: 1, 1.0 and True hash alike
    but promote differently; -0.0 equals 0.0 and NaN equals nothing."""
    if isinstance(value, float):
        return float, value.hex()
    return type(value), value


def _static_value(key):
    kind, value = key
    return float.fromhex(value) if kind is float else value


@functools.lru_cache(maxsize=4096)
def _program(fn, tree, dynamic, static):
    def run(*arrays):
        leaves = [None] * (len(dynamic) + len(static))
        for i, array in zip(dynamic, arrays):
            leaves[i] = array
        for i, key in static:
            leaves[i] = _static_value(key)
        args, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
        return fn(*args, **kwargs)

    return jax.jit(run)
