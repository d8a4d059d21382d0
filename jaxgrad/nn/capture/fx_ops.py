"""The one op table of traced forwards: torch function and method calls -> JAX.

``from_torch`` traces a custom ``forward`` with ``torch.fx`` (``jaxgrad.nn.capture.fx``);
every ``call_function`` and ``call_method`` node of the graph is looked up here by
its qualified name and run on JAX arrays with torch's argument names:

- functions by where torch defines them: ``"operator.add"``, ``"torch.cat"``,
  ``"torch.nn.functional.relu"``, ``"builtins.getattr"``;
- tensor methods as ``"method.NAME"`` (``"method.view"``, ``"method.size"``); an
  in-place method (``add_``) runs as its out-of-place twin, after ``fx`` has
  checked that nothing aliases the tensor it overwrote (later reads then read the
  result); ``VIEWS`` names the ops whose result may share memory with an input;
- any ``torch.nn.functional.X`` missing here falls back to
  ``jaxgrad.nn.functional.X`` when that exists (same names and signatures), so a
  new functional form plugs in without touching this table.

An entry is ``Op(fn, stateful=False)``. A stateful op (dropout, a Bernoulli draw) is
called with ``context=OpContext(train, key, path)`` besides torch's arguments.
``F.dropout`` obeys its ``training`` argument as torch does: a forward passing
``self.training`` drops in training mode only (``from_torch`` traces each mode), and
``F.dropout(x, p)`` without it drops in both modes, as in torch, so it needs a key
even with ``train=False``. Other modules add entries with ``register_op(name, fn)``;
replacing a built-in entry takes ``replace=True``. Nothing here imports torch.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn import functional
from jaxgrad.nn.functional import _dropout


class Op(NamedTuple):
    fn: Callable
    stateful: bool = False  # called with ``context=OpContext(...)``


class OpContext(NamedTuple):
    train: bool  # the model's mode: replaces the ``self.training`` a forward read
    key: object  # this op's own jax.random key (``layer_key(key, path)``), or None
    path: str  # the op's path in the model: the module path and the node name


OPS: dict[str, Op] = {}


def register_op(name: str, fn: Callable, *, stateful: bool = False, replace: bool = False) -> None:
    """Add ``name`` (``"torch.X"``, ``"torch.nn.functional.X"``, ``"method.X"``…).

    Raises:
      ValueError: ``name`` is in the table already and ``replace`` is False: a
        built-in entry is replaced only when asked.
    """
    if name in OPS and not replace:
        raise ValueError(
            f"register_op: {name!r} is already in the op table "
            f"({getattr(OPS[name].fn, '__qualname__', OPS[name].fn)}); pass `replace=True` "
            "to replace it."
        )
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
    merged = math.prod(input.shape[start : end + 1])
    return input.reshape(input.shape[:start] + (merged,) + input.shape[end + 1 :])


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
    if _is_integer(input) and _is_integer(other):  # torch keeps integers integers
        a, b = jnp.broadcast_arrays(jnp.asarray(input), jnp.asarray(other))
        dtype = jnp.result_type(a, b)
        return jax.lax.div(a.astype(dtype), b.astype(dtype))  # rounds toward zero
    return jnp.trunc(jnp.true_divide(input, other))


def _is_integer(value) -> bool:
    dtype = getattr(value, "dtype", None)
    return (
        jnp.issubdtype(dtype, jnp.integer)
        if dtype is not None
        else isinstance(value, int) and not isinstance(value, bool)
    )


def _stop_gradient(value):
    """``detach()``, ``.data``, a value computed under ``no_grad``: no gradient flows
    back through the arrays of ``value`` (sizes and other Python values pass)."""
    return jax.tree_util.tree_map(
        lambda v: jax.lax.stop_gradient(v) if hasattr(v, "dtype") and hasattr(v, "shape") else v,
        value,
    )


def _getattr(obj, name):
    if name == "device":  # one device per array here; factories ignore `device=`
        return "cpu"
    if name == "data":  # `.data`: the same values, cut from autograd, like detach()
        return _stop_gradient(obj)
    if name in ("shape", "ndim", "dtype", "T", "mT"):
        if name == "mT":
            return jnp.swapaxes(obj, -1, -2)
        value = getattr(obj, name)
        return tuple(value) if name == "shape" else value
    raise ValueError(
        f"getattr: attribute {name!r} (supported: shape, ndim, dtype, device, T, mT, data)"
    )


def _linear(input, weight, bias=None):
    out = jnp.matmul(input, weight.T)
    return out if bias is None else out + bias


def _cat(tensors, dim=0):
    return jnp.concatenate(list(tensors), axis=dim)


def _stack(tensors, dim=0):
    return jnp.stack(list(tensors), axis=dim)


def _dropout_op(function):
    def dropout(input, p=0.5, training=True, inplace=False, *, context):
        # `training` is what the forward passed in the mode being traced (each mode
        # has its own graph): `self.training`, or torch's default True
        del inplace
        if training and 0.0 < p < 1.0 and context.key is None:
            why = (
                "`train=True` needs"
                if context.train
                else "torch drops even in eval mode here (F.dropout without `training=`), so "
                "`train=False` needs"
            )
            raise ValueError(
                f"{function.__name__} at {context.path!r}: {why} a `key=` "
                "(a jax.random key) for the dropout mask, got key=None."
            )
        return function(input, p, bool(training), key=context.key)

    return dropout


def _bernoulli(input, p=None, *, generator=None, context):
    """``t.bernoulli_(p)`` (stochastic depth's noise) or ``torch.bernoulli(probs)``."""
    del generator
    if context.key is None:
        raise ValueError(
            f"bernoulli at {context.path!r}: drawing random numbers needs a "
            "`key=` (a jax.random key), got key=None."
        )
    probs = input if p is None else p
    return jax.random.bernoulli(context.key, probs, input.shape).astype(input.dtype)


def _stateful_norm(name):
    def refuse(*args, **kwargs):
        raise ValueError(
            f"torch.nn.functional.{name} in a traced forward updates running statistics "
            f"in place, which a pure function cannot do; use the module (nn.BatchNorm2d, "
            f"nn.InstanceNorm2d…), whose buffers jaxgrad threads."
        )

    return refuse


def _torch_dtype(dtype, *values):
    """torch's default dtype for a factory: int64 for integers, float32 otherwise."""
    if dtype is not None:
        return dtype
    if all(
        isinstance(v, (bool, int)) or (hasattr(v, "dtype") and jnp.issubdtype(v.dtype, jnp.integer))
        for v in values
        if v is not None
    ):
        return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    return jnp.float32


def _arange(
    start,
    end=None,
    step=1,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    requires_grad=False,
    out=None,
):
    del layout, device, pin_memory, requires_grad, out
    if end is None:
        start, end = 0, start
    return jnp.arange(start, end, step, dtype=_torch_dtype(dtype, start, end, step))


def _extremum(reduce, pairwise, arg):
    def extremum(input, dim=None, keepdim=False, *, out=None):
        del out
        if dim is None:
            return reduce(input)
        if hasattr(dim, "shape"):  # torch.max(a, b): elementwise
            return pairwise(input, dim)
        values = reduce(input, axis=dim, keepdims=keepdim)
        indices = arg(input, axis=dim, keepdims=keepdim)
        return values, indices  # torch's (values, indices) namedtuple, by position

    return extremum


def _chunk(input, chunks, dim=0):
    size = input.shape[dim]
    if size == 0:  # torch: `chunks` empty chunks (a step of 0 would never advance)
        return tuple(input for _ in range(chunks))
    step = -(-size // chunks)  # torch: ceil(size / chunks) per chunk, fewer chunks allowed
    return tuple(
        jax.lax.slice_in_dim(input, start, min(start + step, size), axis=dim)
        for start in range(0, size, step)
    )


def _split(tensor, split_size_or_sections, dim=0):
    size = tensor.shape[dim]
    if isinstance(split_size_or_sections, int):
        if size == 0:  # torch: one empty piece, whatever the split size (0 included)
            return (tensor,)
        bounds = list(range(0, size, split_size_or_sections)) + [size]
    else:
        if sum(split_size_or_sections) != size:
            raise ValueError(
                f"split: sections {list(split_size_or_sections)} must sum to "
                f"the dimension's size ({size})."
            )
        bounds = [0]
        for section in split_size_or_sections:
            bounds.append(bounds[-1] + section)
    return tuple(jax.lax.slice_in_dim(tensor, a, b, axis=dim) for a, b in zip(bounds, bounds[1:]))


def _unbind(input, dim=0):
    return tuple(jnp.take(input, i, axis=dim) for i in range(input.shape[dim]))


def _cumsum(input, dim, *, dtype=None, out=None):
    del out
    if dtype is None and (jnp.issubdtype(input.dtype, jnp.integer) or input.dtype == bool):
        dtype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32  # torch sums ints in int64
    return jnp.cumsum(input, axis=dim, dtype=dtype)


def _einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = tuple(operands[0])
    return jnp.einsum(equation, *operands, precision=jax.lax.Precision.HIGHEST)


def _expand(input, *sizes):
    sizes = _dims(sizes)
    lead = len(sizes) - input.ndim
    shape = tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    return jnp.broadcast_to(input, shape)


def _factory(fill):
    def make(
        *size,
        dtype=None,
        layout=None,
        device=None,
        pin_memory=False,
        requires_grad=False,
        out=None,
        memory_format=None,
    ):
        del layout, device, pin_memory, requires_grad, out, memory_format
        return jnp.full(_dims(size), fill, _torch_dtype(dtype, float(fill)))

    return make


def _new(fill):
    def new(
        input, *size, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False
    ):
        del layout, device, pin_memory, requires_grad
        return jnp.full(_dims(size), fill, input.dtype if dtype is None else dtype)

    return new


def _new_full(
    input,
    size,
    fill_value,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=False,
    requires_grad=False,
):
    del layout, device, pin_memory, requires_grad
    return jnp.full(tuple(size), fill_value, input.dtype if dtype is None else dtype)


def _comparison(array_fn, python_fn):
    def compare(input, other):
        if isinstance(input, jax.Array) or isinstance(other, jax.Array) or hasattr(input, "shape"):
            return array_fn(input, other)
        return python_fn(input, other)  # sizes: static, so a Python bool

    return compare


_COMPARISONS = {
    name: _comparison(array_fn, getattr(operator, name))
    for name, array_fn in (
        ("eq", jnp.equal),
        ("ne", jnp.not_equal),
        ("lt", jnp.less),
        ("le", jnp.less_equal),
        ("gt", jnp.greater),
        ("ge", jnp.greater_equal),
    )
}


def _assert(condition, message):
    """``torch._assert``: shapes are static here, so a size check is a Python bool."""
    if isinstance(condition, (bool, np.bool_)) and not condition:
        raise ValueError(f"torch._assert failed: {message}")


_ELEMENTWISE = {
    "relu": functional.relu,
    "sigmoid": jax.nn.sigmoid,
    "tanh": jnp.tanh,
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "abs": jnp.abs,
    "neg": jnp.negative,
    "rsqrt": jax.lax.rsqrt,
    # straight-through estimators' quantisers (torch.round: halves to even, as jnp)
    "round": lambda input, *, decimals=0: jnp.round(input, decimals),
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "trunc": jnp.trunc,
    "sign": jnp.sign,
}

_FUNCTIONS = {
    "operator.add": operator.add,
    "operator.sub": operator.sub,
    "operator.mul": operator.mul,
    "operator.truediv": operator.truediv,
    "operator.floordiv": operator.floordiv,
    "operator.matmul": operator.matmul,
    "operator.neg": operator.neg,
    "operator.pow": operator.pow,
    "operator.getitem": operator.getitem,
    "operator.mod": operator.mod,
    # in-place operators run out of place (fx checks the overwritten value is dead)
    "operator.iadd": operator.add,
    "operator.isub": operator.sub,
    "operator.imul": operator.mul,
    "operator.itruediv": operator.truediv,
    "builtins.getattr": _getattr,
    "torch.add": _add,
    "torch.sub": _sub,
    "torch.mul": operator.mul,
    "torch.div": _div,
    "torch.matmul": jnp.matmul,
    "torch.cat": _cat,
    "torch.concat": _cat,
    "torch.stack": _stack,
    "torch.flatten": _flatten,
    "torch.reshape": lambda input, shape: jnp.reshape(input, tuple(shape)),
    "torch.permute": lambda input, dims: jnp.transpose(input, tuple(dims)),
    "torch.transpose": _transpose,
    "torch.squeeze": _squeeze,
    "torch.unsqueeze": lambda input, dim: jnp.expand_dims(input, dim),
    "torch.mean": _reduce(jnp.mean),
    "torch.sum": _reduce(jnp.sum),
    "torch.nn.functional.linear": _linear,
    "torch.softmax": functional.softmax,
    "torch.log_softmax": functional.log_softmax,
    # F.threshold is torch's `_threshold` (the first name fx finds for it)
    "torch.nn.functional._threshold": functional.threshold,
    "torch.threshold": functional.threshold,
    "torch.celu": functional.celu,
    "torch.selu": functional.selu,
    "torch.nn.functional.batch_norm": _stateful_norm("batch_norm"),
    "torch.detach": _stop_gradient,
    # what jaxgrad.nn.capture.fx adds after a node computed with torch's grad mode off
    "jaxgrad.stop_gradient": _stop_gradient,
    "torch.nn.functional.instance_norm": _stateful_norm("instance_norm"),
}
_FUNCTIONS.update({f"torch.{name}": fn for name, fn in _ELEMENTWISE.items()})
_FUNCTIONS.update({f"operator.{name}": fn for name, fn in _COMPARISONS.items()})
_FUNCTIONS.update({f"torch.{name}": fn for name, fn in _COMPARISONS.items()})
_FUNCTIONS.update(
    {
        "torch.arange": _arange,
        "torch._assert": _assert,
        "torch.max": _extremum(jnp.max, jnp.maximum, jnp.argmax),
        "torch.min": _extremum(jnp.min, jnp.minimum, jnp.argmin),
        "torch.chunk": _chunk,
        "torch.split": _split,
        "torch.unbind": _unbind,
        "torch.cumsum": _cumsum,
        "torch.einsum": _einsum,
        "torch.zeros": _factory(0.0),
        "torch.ones": _factory(1.0),
        "torch.empty": _factory(0.0),  # torch leaves it undefined; zeros here
    }
)

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
    "detach": _stop_gradient,  # detach_() too: later reads read the detached value
    "pow": lambda input, exponent: input**exponent,
    "argmin": lambda input, dim=None, keepdim=False: jnp.argmin(input, dim, keepdims=keepdim),
    "argmax": lambda input, dim=None, keepdim=False: jnp.argmax(input, dim, keepdims=keepdim),
    "mean": _reduce(jnp.mean),
    "sum": _reduce(jnp.sum),
    "add": _add,
    "sub": _sub,
    "mul": operator.mul,
    "div": _div,
    "matmul": jnp.matmul,
    "squeeze": _squeeze,
    "unsqueeze": lambda input, dim: jnp.expand_dims(input, dim),
    "softmax": lambda input, dim, dtype=None: functional.softmax(input, dim, dtype=dtype),
    "log_softmax": lambda input, dim, dtype=None: functional.log_softmax(input, dim, dtype=dtype),
    "max": _extremum(jnp.max, jnp.maximum, jnp.argmax),
    "min": _extremum(jnp.min, jnp.minimum, jnp.argmin),
    "chunk": _chunk,
    "split": _split,
    "unbind": _unbind,
    "cumsum": _cumsum,
    "expand": _expand,
    "expand_as": lambda input, other: jnp.broadcast_to(input, other.shape),
    "new_empty": _new(0.0),
    "new_zeros": _new(0.0),
    "new_ones": _new(1.0),
    "new_full": _new_full,
    **_COMPARISONS,
    **_ELEMENTWISE,
}

# ops whose result may share memory with an input in torch (a view or the input
# itself): an in-place write to their result is not reproduced by the layer path
VIEWS = frozenset(
    {
        "operator.getitem",
        "builtins.getattr",
        "torch.flatten",
        "torch.reshape",
        "torch.permute",
        "torch.transpose",
        "torch.squeeze",
        "torch.unsqueeze",
        "torch.chunk",
        "torch.split",
        "torch.unbind",
        *(
            f"method.{name}"
            for name in (
                "view",
                "view_as",
                "reshape",
                "reshape_as",
                "flatten",
                "permute",
                "transpose",
                "t",
                "contiguous",
                "squeeze",
                "unsqueeze",
                "expand",
                "expand_as",
                "chunk",
                "split",
                "unbind",
                "detach",
                "narrow",
                "select",
                "unfold",
                "as_strided",
                "diagonal",
                "T",
                "mT",
                "real",
                "imag",
                "unflatten",
                "movedim",
                "swapaxes",
                "to",
                "type",
                "float",
                "double",
                "half",
                "type_as",
            )
        ),
    }
)

for _name, _fn in _FUNCTIONS.items():
    register_op(_name, _fn)
for _name, _fn in _METHODS.items():
    register_op(f"method.{_name}", _fn)
for _name in ("dropout", "dropout1d", "dropout2d"):
    register_op(
        f"torch.nn.functional.{_name}", _dropout_op(getattr(_dropout, _name)), stateful=True
    )
register_op("method.bernoulli", _bernoulli, stateful=True)  # t.bernoulli_(p) too
register_op("torch.bernoulli", _bernoulli, stateful=True)


def lookup(name: str) -> Op | None:
    """The entry for ``name``, the ``jaxgrad.nn.functional`` fallback, or None."""
    if name in OPS:
        return OPS[name]
    prefix = "torch.nn.functional."
    if name.startswith(prefix):
        fn = getattr(functional, name[len(prefix) :], None)
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


__all__ = ["OPS", "Op", "OpContext", "VIEWS", "register_op", "lookup", "in_place_twin", "supported"]
