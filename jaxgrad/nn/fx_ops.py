"""The one op table of traced forwards: torch function and method calls -> JAX.

``from_torch`` traces a custom ``forward`` with ``torch.fx`` (``jaxgrad.nn.fx``);
every ``call_function`` and ``call_method`` node of the graph is looked up here by
its qualified name and run on JAX arrays with torch's argument names:

- functions by where torch defines them: ``"operator.add"``, ``"torch.cat"``,
  ``"torch.nn.functional.relu"``, ``"builtins.getattr"``;
- tensor methods as ``"method.NAME"`` (``"method.view"``, ``"method.size"``); an
  in-place method (``add_``) runs as its out-of-place twin, after ``fx`` has
  checked nothing else reads the tensor it overwrote;
- any ``torch.nn.functional.X`` missing here falls back to
  ``jaxgrad.nn.functional.X`` when that exists (same names and signatures), so a
  new functional form plugs in without touching this table.

An entry is ``Op(fn, stateful=False)``. A stateful op (dropout) is called with
``context=OpContext(train, key, path)`` besides torch's arguments. Other modules
add entries with ``register_op(name, fn)``. Nothing here imports torch.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxgrad.nn.functional import _dropout


class Op(NamedTuple):
    fn: Callable
    stateful: bool = False  # called with ``context=OpContext(...)``


class OpContext(NamedTuple):
    train: bool  # the model's mode: replaces the ``self.training`` a forward read
    key: object  # this op's own jax.random key (``layer_key(key, path)``), or None
    path: str  # the op's path in the model: the module path and the node name


OPS: dict[str, Op] = {}


def register_op(name: str, fn: Callable, *, stateful: bool = False) -> None:
    """Add ``name`` (``"torch.X"``, ``"torch.nn.functional.X"``, ``"method.X"``…)."""
    OPS[name] = Op(fn, stateful)


def _dims(args) -> tuple:
    """``view(2, 3)`` and ``view((2, 3))`` alike."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _size(input, dim=None):
    return tuple(input.shape) if dim is None else input.shape[dim]


def _flatten(input, start_dim=0, end_dim=-1):
    ndim = input.ndim
    if ndim == 0:
        return input.reshape(1)
    start, end = start_dim % ndim, end_dim % ndim
    merged = math.prod(input.shape[start:end + 1])
    return input.reshape(input.shape[:start] + (merged,) + input.shape[end + 1:])


def _transpose(input, dim0, dim1):
    return jnp.swapaxes(input, dim0, dim1)


def _reduce(fn):
    def reduce(input, dim=None, keepdim=False, *, dtype=None):
        if isinstance(dim, list):
            dim = tuple(dim)
        out = fn(input, axis=dim, keepdims=keepdim)
        return out if dtype is None else out.astype(dtype)
    return reduce


def _squeeze(input, dim=None):
    if dim is None:
        return jnp.squeeze(input)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(d for d in dims if input.shape[d] == 1)  # torch ignores size != 1
    return jnp.squeeze(input, dims) if dims else input


def _add(input, other, *, alpha=1):
    return input + other * alpha if alpha != 1 else input + other


def _sub(input, other, *, alpha=1):
    return input - other * alpha if alpha != 1 else input - other


def _div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return jnp.true_divide(input, other)
    if rounding_mode == "floor":
        return jnp.floor_divide(input, other)
    return jnp.trunc(jnp.true_divide(input, other))


def _getattr(obj, name):
    if name in ("shape", "ndim", "dtype", "T", "mT"):
        if name == "mT":
            return jnp.swapaxes(obj, -1, -2)
        value = getattr(obj, name)
        return tuple(value) if name == "shape" else value
    raise ValueError(f"getattr: attribute {name!r} (supported: shape, ndim, dtype, T, mT)")


def _linear(input, weight, bias=None):
    out = jnp.matmul(input, weight.T)
    return out if bias is None else out + bias


def _relu(input, inplace=False):
    del inplace
    return jax.nn.relu(input)


def _cat(tensors, dim=0):
    return jnp.concatenate(list(tensors), axis=dim)


def _stack(tensors, dim=0):
    return jnp.stack(list(tensors), axis=dim)


def _softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.astype(dtype)
    return jax.nn.softmax(x, axis=dim)


def _log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.astype(dtype)
    return jax.nn.log_softmax(x, axis=dim)


def _dropout_op(function):
    def dropout(input, p=0.5, training=True, inplace=False, *, context):
        # `training` is the mode the forward read at trace time (`self.training`);
        # the model's mode at call time replaces it.
        del training, inplace
        if context.train and 0.0 < p and context.key is None:
            raise ValueError(
                f"{function.__name__} at {context.path!r}: `train=True` needs a `key=` "
                "(a jax.random key) for the dropout mask, got key=None."
            )
        return function(input, p, context.train, key=context.key)
    return dropout


def _stateful_norm(name):
    def refuse(*args, **kwargs):
        raise ValueError(
            f"torch.nn.functional.{name} in a traced forward updates running statistics "
            f"in place, which a pure function cannot do; use the module (nn.BatchNorm2d, "
            f"nn.InstanceNorm2d…), whose buffers jaxgrad threads."
        )
    return refuse


_ELEMENTWISE = {
    "relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh, "exp": jnp.exp,
    "log": jnp.log, "sqrt": jnp.sqrt, "abs": jnp.abs, "neg": jnp.negative,
    "rsqrt": jax.lax.rsqrt,
}

_FUNCTIONS = {
    "operator.add": operator.add, "operator.sub": operator.sub,
    "operator.mul": operator.mul, "operator.truediv": operator.truediv,
    "operator.floordiv": operator.floordiv, "operator.matmul": operator.matmul,
    "operator.neg": operator.neg, "operator.pow": operator.pow,
    "operator.getitem": operator.getitem, "operator.mod": operator.mod,
    # in-place operators run out of place (fx checks the overwritten value is dead)
    "operator.iadd": operator.add, "operator.isub": operator.sub,
    "operator.imul": operator.mul, "operator.itruediv": operator.truediv,
    "builtins.getattr": _getattr,
    "torch.add": _add, "torch.sub": _sub, "torch.mul": operator.mul, "torch.div": _div,
    "torch.matmul": jnp.matmul, "torch.cat": _cat, "torch.concat": _cat,
    "torch.stack": _stack, "torch.flatten": _flatten,
    "torch.reshape": lambda input, shape: jnp.reshape(input, tuple(shape)),
    "torch.permute": lambda input, dims: jnp.transpose(input, tuple(dims)),
    "torch.transpose": _transpose, "torch.squeeze": _squeeze,
    "torch.unsqueeze": lambda input, dim: jnp.expand_dims(input, dim),
    "torch.mean": _reduce(jnp.mean), "torch.sum": _reduce(jnp.sum),
    "torch.nn.functional.relu": _relu,
    "torch.nn.functional.linear": _linear,
    "torch.nn.functional.softmax": _softmax,
    "torch.nn.functional.log_softmax": _log_softmax,
    "torch.nn.functional.batch_norm": _stateful_norm("batch_norm"),
    "torch.nn.functional.instance_norm": _stateful_norm("instance_norm"),
}
_FUNCTIONS.update({f"torch.{name}": fn for name, fn in _ELEMENTWISE.items()})

_METHODS = {
    "view": lambda input, *shape: jnp.reshape(input, _dims(shape)),
    "reshape": lambda input, *shape: jnp.reshape(input, _dims(shape)),
    "size": _size,
    "dim": lambda input: input.ndim,
    "flatten": _flatten,
    "permute": lambda input, *dims: jnp.transpose(input, _dims(dims)),
    "transpose": _transpose,
    "t": lambda input: input.T,
    "contiguous": lambda input, memory_format=None: input,
    "mean": _reduce(jnp.mean), "sum": _reduce(jnp.sum),
    "add": _add, "sub": _sub, "mul": operator.mul, "div": _div,
    "matmul": jnp.matmul,
    "squeeze": _squeeze,
    "unsqueeze": lambda input, dim: jnp.expand_dims(input, dim),
    "softmax": lambda input, dim, dtype=None: _softmax(input, dim, dtype=dtype),
    "log_softmax": lambda input, dim, dtype=None: _log_softmax(input, dim, dtype=dtype),
    **_ELEMENTWISE,
}

for _name, _fn in _FUNCTIONS.items():
    register_op(_name, _fn)
for _name, _fn in _METHODS.items():
    register_op(f"method.{_name}", _fn)
for _name in ("dropout", "dropout1d", "dropout2d"):
    register_op(f"torch.nn.functional.{_name}", _dropout_op(getattr(_dropout, _name)),
                stateful=True)


def lookup(name: str) -> Op | None:
    """The entry for ``name``, the ``jaxgrad.nn.functional`` fallback, or None."""
    if name in OPS:
        return OPS[name]
    prefix = "torch.nn.functional."
    if name.startswith(prefix):
        from jaxgrad.nn import functional

        fn = getattr(functional, name[len(prefix):], None)
        if callable(fn):
            return Op(fn)
    return None


def in_place_twin(name: str) -> str | None:
    """``"method.add_"`` -> ``"method.add"``; ``"operator.iadd"`` -> itself (mapped
    above); None when ``name`` is not an in-place op."""
    if name.startswith("method.") and name.endswith("_") and not name.endswith("__"):
        return name[:-1]
    if name.startswith("operator.i") and name in OPS:
        return name
    return None


def supported() -> list[str]:
    """Every name in the table, for error messages."""
    return sorted(OPS)


__all__ = ["OPS", "Op", "OpContext", "register_op", "lookup", "in_place_twin", "supported"]
