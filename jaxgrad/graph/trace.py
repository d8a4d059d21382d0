"""Graphs from jaxprs: what JAX records for the forward pass and for the VJP.

``trace(fn, *args)`` turns ``jax.make_jaxpr(fn)(*args)`` into a ``Graph``: one node per
argument leaf, constant and primitive application, each with its output shape, dtype
and its value at ``args``. Nested calls — ``jit``/``pjit``, ``custom_jvp_call``
(``jax.nn.relu`` is one), ``custom_vjp_call``, ``remat`` — are expanded: their
primitives appear in the graph with the call recorded in ``Node.scope``. Control flow
(``cond``, ``while``, ``scan``) stays one node.

``backward_graph(fn, *args)`` does the same for ``jax.vjp(fn, *args)[1]``: the
operations autodiff created for the backward pass, the seed gradient as input, the
values the forward pass saved as ``residual`` nodes, and one output per gradient.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np

from jaxgrad._labels import leaf_labels
from jaxgrad.graph.render import format_value
from jaxgrad.graph.types import Graph, Node, edges_from_inputs

_CALLS = {
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "remat",
    "remat2",
    "checkpoint",
}
_JAXPR_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_SHORT = 40  # params longer than this when printed are left out of Node.params


def dtype_name(dtype) -> str:
    """numpy's name, except JAX's ``float0`` (the "no gradient" type of integer inputs)."""
    return "float0" if np.dtype(dtype) == jax.dtypes.float0 else np.dtype(dtype).name


class _Builder:
    """Walks a jaxpr, evaluating as it goes, and collects nodes."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.evaluators: dict = {}  # operation node id -> (fn(*input values), input ids)
        self._calls = itertools.count(1)

    def add(self, **fields) -> str:
        node_id = f"n{len(self.nodes)}"
        self.nodes.append(Node(id=node_id, **fields))
        return node_id

    def value_node(self, value, kind: str, label: str, scope=()) -> str:
        array = np.asarray(value)
        return self.add(
            op=kind,
            kind=kind,
            label=label,
            shape=tuple(array.shape),
            dtype=dtype_name(array.dtype),
            value=array,
            scope=scope,
        )

    def read(self, env, atom, scope):
        """``(node id, value)`` of a jaxpr variable or literal."""
        if isinstance(atom, jcore.Literal):
            value = np.asarray(atom.val)
            return self.value_node(value, "constant", _format_scalar(value), scope), value
        return env[atom]

    def walk(self, jaxpr, env: dict, scope: tuple) -> None:
        for eqn in jaxpr.eqns:
            inputs = [self.read(env, atom, scope) for atom in eqn.invars]
            inner = _inner_jaxpr(eqn)
            if inner is not None:
                inner_jaxpr, consts = inner
                called = eqn.params.get("name") or getattr(
                    getattr(inner_jaxpr, "debug_info", None), "func_name", ""
                )
                call = f"{eqn.primitive.name} {called}".rstrip()
                inner_scope = scope + (f"{call} #{next(self._calls)}",)
                inner_env = {
                    var: (self.value_node(c, "constant", "const", inner_scope), np.asarray(c))
                    for var, c in zip(inner_jaxpr.constvars, consts)
                }
                inner_env.update(zip(inner_jaxpr.invars, inputs))
                self.walk(inner_jaxpr, inner_env, inner_scope)
                for outer, atom in zip(eqn.outvars, inner_jaxpr.outvars):
                    env[outer] = self.read(inner_env, atom, inner_scope)
                continue
            self.apply(eqn, inputs, env, scope)

    def apply(self, eqn, inputs, env, scope) -> None:
        primitive = eqn.primitive
        bound = primitive.get_bind_params(eqn.params)
        # jax < 0.7 returns (subfuns, params); later versions return params alone.
        subfuns, bind_params = bound if isinstance(bound, tuple) else ((), bound)

        def evaluate(*values):
            return primitive.bind(*subfuns, *values, **bind_params)

        outputs = evaluate(*[value for _, value in inputs])
        if not primitive.multiple_results:
            outputs = [outputs]
        params = {
            k: str(v)
            for k, v in eqn.params.items()
            if isinstance(v, (int, float, str, bool, tuple)) and len(str(v)) <= _SHORT
        }
        input_ids = tuple(node for node, _ in inputs)
        for index, (var, value) in enumerate(zip(eqn.outvars, outputs)):
            node_params = dict(params, output=str(index)) if len(outputs) > 1 else params
            value = np.asarray(value)
            node = self.add(
                op=primitive.name,
                kind="operation",
                label=primitive.name,
                inputs=input_ids,
                shape=tuple(value.shape),
                dtype=dtype_name(value.dtype),
                value=value,
                scope=scope,
                params=node_params,
            )
            if primitive.multiple_results:
                self.evaluators[node] = (lambda *v, i=index: evaluate(*v)[i], input_ids)
            else:
                self.evaluators[node] = (evaluate, input_ids)
            if not isinstance(var, jcore.DropVar):
                env[var] = (node, value)


def _inner_jaxpr(eqn):
    """``(jaxpr, consts)`` of a call to expand, or None for a primitive to keep whole."""
    if eqn.primitive.name not in _CALLS:
        return None
    return call_body(eqn)


def call_body(eqn):
    """``(jaxpr, consts)`` that a call-like equation (``pjit``, ``custom_jvp_call``,
    ``checkpoint``…) evaluates, when it holds one with the equation's own inputs and
    outputs; None otherwise."""
    for key in _JAXPR_PARAMS:
        inner = eqn.params.get(key)
        if isinstance(inner, jcore.ClosedJaxpr):
            jaxpr, consts = inner.jaxpr, inner.consts
        elif isinstance(inner, jcore.Jaxpr):
            jaxpr, consts = inner, []
        else:
            continue
        if len(jaxpr.invars) == len(eqn.invars) and len(jaxpr.outvars) == len(eqn.outvars):
            return jaxpr, consts
    return None


def _format_scalar(value: np.ndarray) -> str:
    if value.size != 1:
        return f"const {value.shape}"
    return format_value(value) if value.dtype.kind in "biuf" else dtype_name(value.dtype)


def _build(closed, in_values, in_labels, in_kind, out_labels, name, direction):
    builder = _Builder()
    env = {}
    for var, value, label in zip(closed.jaxpr.invars, in_values, in_labels):
        env[var] = (builder.value_node(value, in_kind, label), np.asarray(value))
    inputs = tuple(node for node, _ in env.values())
    for index, (var, value) in enumerate(zip(closed.jaxpr.constvars, closed.consts)):
        kind, label = (
            ("residual", f"saved[{index}]") if direction == "backward" else ("constant", "const")
        )
        env[var] = (builder.value_node(value, kind, label), np.asarray(value))
    builder.walk(closed.jaxpr, env, ())
    outputs = []
    for atom, label in zip(closed.jaxpr.outvars, out_labels):
        source, value = builder.read(env, atom, ())
        outputs.append(
            builder.add(
                op="output",
                kind="output",
                label=label,
                inputs=(source,),
                shape=tuple(np.shape(value)),
                dtype=dtype_name(np.asarray(value).dtype),
                value=np.asarray(value),
            )
        )
    nodes = tuple(builder.nodes)
    graph = Graph(
        name=name,
        direction=direction,
        nodes=nodes,
        edges=edges_from_inputs(nodes),
        inputs=inputs,
        outputs=tuple(outputs),
    )
    return graph, builder.evaluators


def _output_labels(out, given, default: str) -> list[str]:
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(out)[0]]
    if given is not None:
        given = [given] if isinstance(given, str) else list(given)
        if len(given) != len(paths):
            raise ValueError(f"`output_labels` (={given}) must name the {len(paths)} outputs.")
        return given
    return [default + path for path in paths]


def _fn_name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def trace_with_evaluators(fn: Callable, *args, output_labels=None):
    """``trace`` plus, per operation node, a function of its inputs' values (for
    ``step_through``)."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    labels = leaf_labels(fn, args)
    leaves = jax.tree_util.tree_leaves(tuple(args))
    return _build(
        closed,
        [jnp.asarray(x) for x in leaves],
        labels,
        "input",
        _output_labels(out_shape, output_labels, "out"),
        _fn_name(fn),
        "forward",
    )


def trace(fn: Callable, *args, output_labels: Sequence[str] | str | None = None) -> Graph:
    """The forward computation of ``fn(*args)`` as a ``Graph``.

    Args:
      fn: any JAX-traceable function of pytrees.
      *args: the point to evaluate at; each array leaf becomes an ``input`` node
        labelled by ``fn``'s parameter name and the leaf's path (``params['0.weight']``).
      output_labels: names for the output nodes (default ``out``, ``out[0]``, …).

    Returns:
      A ``Graph`` whose operation nodes carry the primitive name as ``op`` and their
      value at ``args``.
    """
    return trace_with_evaluators(fn, *args, output_labels=output_labels)[0]


def backward_graph(fn: Callable, *args, output_labels: Sequence[str] | str | None = None) -> Graph:
    """The reverse pass of ``fn`` at ``args``: the graph of ``jax.vjp(fn, *args)[1]``.

    The input is the seed gradient (ones shaped like ``fn``'s output, ``"seed"``);
    ``residual`` nodes are what the forward pass saved for the backward one; outputs
    are labelled ``d<input>`` (``dw1``, ``dparams['0.weight']``) unless
    ``output_labels`` names them.
    """
    out, vjp_fn = jax.vjp(fn, *args)
    seed = jax.tree_util.tree_map(jnp.ones_like, out)
    closed = jax.make_jaxpr(vjp_fn)(seed)
    seed_leaves = jax.tree_util.tree_leaves(seed)
    seed_labels = [
        "seed" if len(seed_leaves) == 1 else f"seed[{i}]" for i in range(len(seed_leaves))
    ]
    if output_labels is None:
        output_labels = [f"d{label}" for label in leaf_labels(fn, args)]
    return _build(
        closed,
        seed_leaves,
        seed_labels,
        "input",
        _output_labels(args, output_labels, "d"),
        f"{_fn_name(fn)} (vjp)",
        "backward",
    )[0]


__all__ = ["backward_graph", "trace", "trace_with_evaluators"]
