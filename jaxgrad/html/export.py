"""A scalar function's graph as plain JSON data, for the in-page interpreter of the explorer.

``export_graph(fn, *args)`` traces ``fn`` in float64 (``jaxgrad.graph.trace``) and
returns a dict the explorer page evaluates itself: every node with its primitive, its
inputs, its parameters and its value at ``args``; a layout (column = longest path from
an input); a slider range for every scalar input; and JAX's own numbers at ``args``
(``step_through``: each backward step as upstream, local derivative and product, and
the gradient of every input), which the page shows beside the ones it computes.

Only the primitives the page can interpret are accepted (``SUPPORTED``: the lessons'
elementwise arithmetic, ``exp``/``log``/``log1p``/``tanh``/``logistic``, ``max`` and
``min``, with lax's implicit broadcasting of size-1 dimensions; ``dot_general`` without
batch dimensions, ``reduce_sum``, ``transpose``, ``broadcast_in_dim`` and reshapes), on
scalars, vectors and matrices of at most ``MAX_ELEMENTS`` elements. Structural
primitives become index maps computed here (``gather``: which input element each
output element is, found by running the primitive on the input's flat indices;
``scatter`` for sums; ``triples`` for dot products), so the page only gathers and adds. Nested calls are expanded by the tracer; of the custom
derivative rules only ``jax.nn.relu``'s is known to the page (its ``max(x, 0)`` node
carries ``rule: "relu"``: gradient 0 at exactly 0, where a bare ``max`` splits it ½/½),
so any other ``custom_jvp``/``custom_vjp`` call is refused rather than differentiated
differently from ``jax.grad``.

The dict is JSON-ready: numbers are Python floats (``json`` writes the shortest
round-trip form, which JavaScript's ``JSON.parse`` reads back to the same double),
arrays are flat row-major lists with their ``shape`` beside them.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.graph.step import step_through
from jaxgrad.graph.trace import trace_with_evaluators

ELEMENTWISE = (
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "integer_pow",
    "square",
    "sqrt",
    "max",
    "min",
    "exp",
    "log",
    "log1p",
    "tanh",
    "logistic",
    "convert_element_type",
    "copy",
)
GATHERS = ("transpose", "broadcast_in_dim", "reshape", "squeeze", "expand_dims")
SUPPORTED = ELEMENTWISE + GATHERS + ("dot_general", "reduce_sum")
MAX_ELEMENTS = 64  # the page keeps every element of every value
MAX_RANK = 2
_KNOWN_RULES = {"custom_jvp_call relu": "relu"}


def _value(array: np.ndarray):
    """A float for a scalar, a flat (row-major) list of floats otherwise."""
    array = np.asarray(array, np.float64)
    return float(array) if array.ndim == 0 else [float(v) for v in array.ravel()]


def _rule(scope: tuple) -> str | None:
    """``"relu"`` inside ``jax.nn.relu``; None outside any custom rule; raises for others."""
    for call in scope:
        name = call.rsplit(" #", 1)[0]
        if name.startswith(("custom_jvp_call", "custom_vjp_call")):
            if name not in _KNOWN_RULES:
                raise ValueError(
                    f"`fn` calls {name!r}, whose custom derivative rule the explorer page "
                    f"cannot reproduce (it knows {', '.join(_KNOWN_RULES)}); write the "
                    f"function with plain primitives."
                )
            return _KNOWN_RULES[name]
    return None


def _check_shape(what: str, shape) -> None:
    shape = tuple(shape)
    if len(shape) > MAX_RANK or math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(
            f"{what} has shape {shape}; the explorer takes scalars, vectors and matrices "
            f"of at most {MAX_ELEMENTS} elements."
        )


def _grid(shape) -> np.ndarray:
    """Each element's own flat index, shaped ``shape``."""
    return np.arange(math.prod(shape)).reshape(shape)


def _contracted(node) -> list:
    """``[lhs axis, rhs axis]`` a dot_general contracts."""
    (lhs_c, rhs_c), _ = ast.literal_eval(node.params["dimension_numbers"])
    return [int(lhs_c[0]), int(rhs_c[0])]


def _dot_triples(node, shapes) -> list:
    """``[[out, lhs, rhs], …]`` flat indices: ``out[o] += lhs[a] * rhs[b]`` for each."""
    try:
        (lhs_c, rhs_c), (lhs_b, rhs_b) = ast.literal_eval(node.params["dimension_numbers"])
    except (KeyError, ValueError, SyntaxError) as exc:
        raise ValueError(f"node {node.id}: cannot read dot_general's dimension numbers") from exc
    if lhs_b or rhs_b:
        raise ValueError(f"node {node.id}: the page computes dot_general without batch dims.")
    if len(lhs_c) != 1 or len(rhs_c) != 1:
        raise ValueError(f"node {node.id}: the page contracts dot_general over one axis only.")
    lhs_shape, rhs_shape = shapes
    lhs, rhs = _grid(lhs_shape), _grid(rhs_shape)
    lhs_free = [d for d in range(len(lhs_shape)) if d not in lhs_c]
    rhs_free = [d for d in range(len(rhs_shape)) if d not in rhs_c]
    # dot_general's output: the lhs free dims, then the rhs free dims, in order
    lhs = np.transpose(lhs, lhs_free + list(lhs_c)).reshape([lhs_shape[d] for d in lhs_free] + [-1])
    rhs = np.transpose(rhs, rhs_free + list(rhs_c)).reshape([rhs_shape[d] for d in rhs_free] + [-1])
    lhs_rows = lhs.reshape(-1, lhs.shape[-1])
    rhs_rows = rhs.reshape(-1, rhs.shape[-1])
    triples = []
    for i, lhs_row in enumerate(lhs_rows):
        for j, rhs_row in enumerate(rhs_rows):
            out = i * len(rhs_rows) + j
            triples.extend([out, int(a), int(b)] for a, b in zip(lhs_row, rhs_row))
    return triples


def _check_node(node, shapes, evaluator) -> dict:
    """The node's JSON parameters (index maps for structural primitives, computed here
    with numpy or with the primitive itself); ValueError for anything the page cannot
    interpret."""
    if node.op not in SUPPORTED:
        raise ValueError(
            f"`fn` uses the primitive {node.op!r} (node {node.id}), which the explorer page "
            f"does not interpret; supported: {', '.join(SUPPORTED)}."
        )
    _check_shape(f"node {node.id} ({node.op})", node.shape)
    out_shape = tuple(node.shape)
    params = {}
    if node.op in ELEMENTWISE:
        # lax broadcasts size-1 dimensions implicitly ((6, 4) + (1, 4)): where an input's
        # shape differs from the output's (scalars aside), the page gathers through a map
        maps = [
            None
            if tuple(s) in ((), out_shape)
            else np.broadcast_to(_grid(s), out_shape).ravel().tolist()
            for s in shapes
        ]
        if any(m is not None for m in maps):
            params["broadcast"] = maps
    if node.op == "integer_pow":
        params["y"] = int(node.params["y"])
    elif node.op in GATHERS:
        # each output element is one input element: the primitive itself, run on the
        # input's flat indices, says which
        evaluate, _ = evaluator
        with jax.enable_x64(True):
            indices = np.asarray(evaluate(np.asarray(_grid(shapes[0]), np.float64)))
        params["gather"] = [int(i) for i in indices.ravel()]
        for name in ("permutation", "broadcast_dimensions"):  # for torch's replay
            if name in node.params:
                params[name] = [int(d) for d in ast.literal_eval(node.params[name])]
    elif node.op == "reduce_sum":
        axes = tuple(ast.literal_eval(node.params.get("axes", "()")))
        kept = _grid(out_shape).reshape([1 if d in axes else n for d, n in enumerate(shapes[0])])
        params["scatter"] = np.broadcast_to(kept, shapes[0]).ravel().tolist()
        params["size"] = math.prod(out_shape)
        params["axes"] = list(axes)
    elif node.op == "dot_general":
        params["triples"] = _dot_triples(node, shapes)
        params["size"] = math.prod(out_shape)
        params["contract"] = _contracted(node)
    return params


def _columns(nodes: list) -> dict:
    """Column of each drawn node: an operation one right of its deepest drawn input, an
    input one left of its first consumer (so a bias sits beside the add that takes it)."""
    column = {}
    for node in nodes:
        if node.kind == "operation":
            drawn = [column[i] for i in node.inputs if i in column]
            column[node.id] = 1 + max(drawn) if drawn else 1
        else:
            column[node.id] = 0
    # ops counted every input as column 0; now shift each input right to its consumer
    for node in nodes:
        if node.kind != "operation":
            consumers = [column[n.id] for n in nodes if node.id in n.inputs]
            column[node.id] = max(0, min(consumers) - 1) if consumers else 0
    return column


def _slider(value: float) -> dict:
    """A range around ``value`` wide enough to saturate a sigmoid or kill a ReLU."""
    half = 2.0 * max(1.0, math.ceil(abs(value)))
    return {"min": round(value - half, 2), "max": round(value + half, 2), "step": 0.01}


def as_float64(args: tuple) -> tuple:
    """``args`` with every leaf a float64 jax array (call with x64 enabled); a (nested)
    list of numbers is one array, not a pytree of scalars."""
    args = tuple(np.asarray(a) if isinstance(a, (list, tuple)) else a for a in args)
    leaves, treedef = jax.tree_util.tree_flatten(args)
    for index, leaf in enumerate(leaves):
        if not np.issubdtype(np.asarray(leaf).dtype, np.number):
            raise TypeError(f"argument leaf {index} (={leaf!r}) is not a number.")
    return jax.tree_util.tree_unflatten(
        treedef, [jnp.asarray(np.asarray(leaf, np.float64)) for leaf in leaves]
    )


def export_graph(fn: Callable, *args, title: str = "", output_label: str = "L") -> dict:
    """The explorer's data for ``fn(*args)``.

    Args:
      fn: a JAX function of scalars (and small arrays) returning one scalar.
      *args: the starting point; each leaf becomes an input (labelled by ``fn``'s
        parameter names), cast to float64.
      title: a heading for the page.
      output_label: the name of the output (``dL/dw`` …).

    Returns:
      ``{"title", "output", "inputs", "nodes", "columns", "jax"}``; see the module
      docstring.

    Raises:
      ValueError: for a result that is not one floating scalar, a primitive the page
        cannot interpret, an array beyond ``MAX_ELEMENTS`` elements or rank 2, or a
        custom rule it does not know.
    """
    with jax.enable_x64(True):
        args64 = as_float64(args)
        for index, leaf in enumerate(jax.tree_util.tree_leaves(args64)):
            _check_shape(f"argument leaf {index}", leaf.shape)
        graph, evaluators = trace_with_evaluators(fn, *args64, output_labels=output_label)
        by_id = {n.id: n for n in graph.nodes}
        out = by_id[graph.outputs[0]]
        if len(graph.outputs) != 1 or out.shape != () or np.asarray(out.value).dtype.kind != "f":
            got = ", ".join(f"{by_id[o].dtype}{list(by_id[o].shape)}" for o in graph.outputs)
            raise ValueError(f"`fn` must return one floating scalar (a loss); it returns {got}.")

    inputs, nodes = [], []
    for node in graph.nodes:
        if node.kind == "input":
            _check_shape(f"input {node.label!r}", node.shape)
            entry = {
                "id": node.id,
                "label": node.label,
                "shape": list(node.shape),
                "value": _value(node.value),
            }
            if node.shape == ():
                entry["slider"] = _slider(float(node.value))
            inputs.append(entry)
        elif node.kind == "operation":
            params = _check_node(
                node, [tuple(by_id[i].shape) for i in node.inputs], evaluators[node.id]
            )
            entry = {
                "id": node.id,
                "op": node.op,
                "inputs": list(node.inputs),
                "shape": list(node.shape),
                "params": params,
                "value": _value(node.value),
            }
            rule = _rule(node.scope)
            if rule == "relu" and node.op != "max":
                rule = None  # the call's other primitives (jit wrappers) need no rule
            if rule:
                entry["rule"] = rule
            nodes.append(entry)
        elif node.kind == "constant":
            _check_shape(f"constant {node.id}", node.shape)
            nodes.append(
                {
                    "id": node.id,
                    "op": "constant",
                    "inputs": [],
                    "shape": list(node.shape),
                    "value": _value(node.value),
                }
            )
    drawn = [by_id[n["id"]] for n in inputs] + [
        by_id[n["id"]] for n in nodes if n["op"] != "constant"
    ]
    columns = _columns(drawn)
    with jax.enable_x64(True):  # JAX's own numbers, node by node, once the graph is accepted
        walk = step_through(fn, *args64, output_label=output_label, verbose=False)
    steps = [
        {
            "node": s.node,
            "input": s.input,
            "upstream": _value(s.upstream),
            "local": None if s.local is None else _value(s.local),
            "gradient": _value(s.gradient),
        }
        for s in walk.backward
    ]
    return {
        "title": title or getattr(fn, "__name__", "fn"),
        "output": {"id": out.inputs[0], "label": output_label, "value": _value(out.value)},
        "inputs": inputs,
        "nodes": nodes,
        "columns": columns,
        "jax": {
            "version": jax.__version__,
            "steps": steps,
            "grads": {label: _value(g) for label, g in walk.grads.items()},
        },
    }


__all__ = ["MAX_ELEMENTS", "SUPPORTED", "as_float64", "export_graph"]
