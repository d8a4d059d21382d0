"""Any port as ``fn(leaves, *inputs)``, traced, and every intermediate value recorded.

The doctor localises a port it knows nothing about by its values: the port is
traced once with ``jax.make_jaxpr`` and its jaxpr is evaluated equation by equation
on the example input (an interpreter in the manner of ``jax.core.eval_jaxpr``, going
into ``jit``, ``custom_jvp``/``custom_vjp`` and ``checkpoint`` bodies), recording each
equation's outputs. Every recorded value carries the parameter leaves it depends on
and whether it depends on the input at all (values computed from the parameters
alone, like a kernel's transpose, are not activations).

Accepted ports (``as_function``):

- a ``flax.nnx.Module`` with its own ``__call__``: its ``nnx.split`` state is the leaves;
- a pytree module (equinox style: a dataclass registered as a pytree, array fields,
  a ``__call__``): its array leaves;
- ``(fn, params)``: a plain ``fn(params, *inputs)`` with a params pytree of any
  nesting and names;
- any other callable ``fn(*inputs)``: the arrays it closes over (the jaxpr's
  constants) are its leaves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from jaxgrad.graph.trace import call_body


@dataclasses.dataclass
class PortFunction:
    """A port as ``fn(leaves, *inputs, **kwargs)`` over a flat list of named leaves."""

    fn: Callable
    names: list  # one dotted name per leaf (``fc1.kernel``, ``layers.0.weight``)
    leaves: list  # the arrays, as the port holds them
    kind: str  # "nnx module", "pytree module", "function", "closure"


def _key_name(key) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _path_name(path) -> str:
    parts = [_key_name(k) for k in path]
    if parts and parts[-1] == "value" and len(parts) > 1:  # nnx Variable's payload
        parts = parts[:-1]
    return ".".join(parts) or "<leaf>"


def _is_array(value) -> bool:
    return isinstance(value, (np.ndarray, jax.Array)) and np.dtype(value.dtype).kind in "fc"


def _split(tree):
    """``(names, arrays, rebuild)``: the floating array leaves of ``tree`` and a
    function putting new arrays in their places (other leaves kept as they are)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    where = [i for i, (_, v) in enumerate(flat) if _is_array(v)]
    names = [_path_name(flat[i][0]) for i in where]
    arrays = [flat[i][1] for i in where]
    values = [v for _, v in flat]

    def rebuild(new):
        out = list(values)
        for i, v in zip(where, new):
            out[i] = v
        return jax.tree_util.tree_unflatten(treedef, out)

    return names, arrays, rebuild


def as_function(port) -> PortFunction | None:
    """The port as a ``PortFunction``, or None when it is none of the forms above."""
    try:
        from flax import nnx
    except ImportError:  # pragma: no cover
        nnx = None
    if nnx is not None and isinstance(port, nnx.Module):
        graphdef, state = nnx.split(port)
        names, arrays, rebuild = _split(state)
        return PortFunction(
            lambda leaves, *xs, **kw: nnx.merge(graphdef, rebuild(leaves))(*xs, **kw),
            names,
            arrays,
            "nnx module",
        )
    if isinstance(port, tuple) and len(port) == 2 and callable(port[0]):
        fn, params = port
        names, arrays, rebuild = _split(params)
        return PortFunction(
            lambda leaves, *xs, **kw: fn(rebuild(leaves), *xs, **kw), names, arrays, "function"
        )
    if callable(port):
        names, arrays, rebuild = _split(port)
        if arrays:  # a pytree module: its array fields are the leaves
            return PortFunction(
                lambda leaves, *xs, **kw: rebuild(leaves)(*xs, **kw), names, arrays, "pytree module"
            )
        return PortFunction(lambda leaves, *xs, **kw: port(*xs, **kw), [], [], "closure")
    return None


@dataclasses.dataclass
class Value:
    """One recorded value of the port: an equation's output (or an input)."""

    array: np.ndarray
    where: str  # "input 0", "dot_general #12"
    order: int  # position in evaluation order
    leaves: frozenset  # indices of the parameter leaves it depends on


def _inner(eqn):
    """``(jaxpr, consts)`` of a call-like equation to evaluate inline, or None (loops and
    branches are evaluated whole)."""
    if eqn.primitive.name in ("scan", "while", "cond"):
        return None
    return call_body(eqn)


class _Recorder:
    def __init__(self):
        self.values: list[Value] = []
        self.counts: dict[str, int] = {}

    def record(self, name, value, leaves, uses_input):
        if not uses_input or not hasattr(value, "shape"):
            return
        array = np.asarray(value)
        if array.dtype.kind not in "fcb":
            return
        index = self.counts.get(name, 0)
        self.counts[name] = index + 1
        self.values.append(Value(array, f"{name} #{index}", len(self.values), leaves))

    def eval(self, jaxpr, consts, args, deps):
        from jax.extend import core

        env, dep = {}, {}

        def read(v):
            return v.val if isinstance(v, core.Literal) else env[v]

        def read_dep(v):
            return (frozenset(), False) if isinstance(v, core.Literal) else dep[v]

        for v, c in zip(jaxpr.constvars, consts):
            env[v], dep[v] = c, (frozenset(), False)
        for v, a, d in zip(jaxpr.invars, args, deps):
            env[v], dep[v] = a, d
        for eqn in jaxpr.eqns:
            invals = [read(v) for v in eqn.invars]
            ins = [read_dep(v) for v in eqn.invars]
            leaves = frozenset().union(*(d[0] for d in ins)) if ins else frozenset()
            uses = any(d[1] for d in ins)
            inner = _inner(eqn)
            if inner is not None:
                outs, out_deps = self.eval(inner[0], inner[1], invals, ins)
            else:
                params = eqn.primitive.get_bind_params(eqn.params)
                with eqn.ctx.manager:
                    outs = eqn.primitive.bind(*invals, **params)
                outs = outs if eqn.primitive.multiple_results else [outs]
                out_deps = [(leaves, uses)] * len(outs)
                for out, (ls, us) in zip(outs, out_deps):
                    self.record(eqn.primitive.name, out, ls, us)
            for v, out, d in zip(eqn.outvars, outs, out_deps):
                if not isinstance(v, core.DropVar):
                    env[v], dep[v] = out, d
        return [read(v) for v in jaxpr.outvars], [read_dep(v) for v in jaxpr.outvars]


def record(port: PortFunction, inputs: tuple, kwargs: dict):
    """Trace the port and evaluate it equation by equation on ``inputs``.

    Returns:
      ``(outputs, values)``: the port's outputs (a list of numpy arrays, flattened)
      and every recorded ``Value`` (the inputs first, then each equation's outputs
      that depend on an input, in evaluation order).

    Raises:
      Whatever ``jax.make_jaxpr`` raises on a port that cannot be traced (Python
      control flow on values): the caller falls back to the output only.
    """
    n_leaves, n_inputs = len(port.leaves), len(inputs)
    kw_names = sorted(kwargs)

    def flat(*arrays):
        leaves, xs = list(arrays[:n_leaves]), arrays[n_leaves : n_leaves + n_inputs]
        kw = dict(zip(kw_names, arrays[n_leaves + n_inputs :]))
        return port.fn(leaves, *xs, **kw)

    args = [*port.leaves, *inputs, *(kwargs[k] for k in kw_names)]
    closed = jax.make_jaxpr(flat)(*args)
    deps = [(frozenset([i]), False) for i in range(n_leaves)] + [(frozenset(), True)] * (
        len(args) - n_leaves
    )
    recorder = _Recorder()
    for i, x in enumerate(inputs):
        recorder.values.append(
            Value(np.asarray(x), f"input {i}", len(recorder.values), frozenset())
        )
    outs, _ = recorder.eval(closed.jaxpr, closed.consts, args, deps)
    const_leaves = [np.asarray(c) for c in closed.consts if _is_array(c)]
    return [np.asarray(o) for o in outs], recorder.values, const_leaves


__all__ = ["PortFunction", "Value", "as_function", "record"]
