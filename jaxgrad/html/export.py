"""A scalar function's graph as plain JSON data, for the in-page interpreter of the explorer.

``export_graph(fn, *args)`` traces ``fn`` in float64 (``jaxgrad.graph.trace``) and
returns a dict the explorer page evaluates itself: every node with its primitive, its
inputs, its parameters and its value at ``args``; a layout (column = longest path from
an input); a slider range for every scalar input; and JAX's own numbers at ``args``
(``step_through``: each backward step as upstream, local derivative and product, and
the gradient of every input), which the page shows beside the ones it computes.

Only the primitives the page can interpret are accepted (``SUPPORTED``: the lessons'
elementwise arithmetic, ``exp``/``log``/``tanh``/``logistic``, ``max`` and ``min``, and
for small vectors ``dot_general`` of two vectors, ``reduce_sum`` and scalar
``broadcast_in_dim``). Nested calls are expanded by the tracer; of the custom
derivative rules only ``jax.nn.relu``'s is known to the page (its ``max(x, 0)`` node
carries ``rule: "relu"``: gradient 0 at exactly 0, where a bare ``max`` splits it ½/½),
so any other ``custom_jvp``/``custom_vjp`` call is refused rather than differentiated
differently from ``jax.grad``.

The dict is JSON-ready: numbers are Python floats (``json`` writes the shortest
round-trip form, which JavaScript's ``JSON.parse`` reads back to the same double),
vectors are lists.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.graph.step import step_through
from jaxgrad.graph.trace import trace

SUPPORTED = ("add", "sub", "mul", "div", "neg", "integer_pow", "square", "sqrt", "max", "min",
             "exp", "log", "tanh", "logistic", "dot_general", "reduce_sum", "broadcast_in_dim",
             "convert_element_type", "copy")
MAX_VECTOR = 16  # the page draws every element of a vector value
_VECTOR_DOT = ("(((0,), (0,)), ((), ()))", "(([0], [0]), ([], []))")  # contract axis 0 of both
_KNOWN_RULES = {"custom_jvp_call relu": "relu"}


def _value(array: np.ndarray):
    """A float for a scalar, a list of floats for a vector."""
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


def _check_node(node) -> dict:
    """The node's JSON parameters; ValueError for anything the page cannot interpret."""
    if node.op not in SUPPORTED:
        raise ValueError(
            f"`fn` uses the primitive {node.op!r} (node {node.id}), which the explorer page "
            f"does not interpret; supported: {', '.join(SUPPORTED)}."
        )
    shape = tuple(node.shape)
    if len(shape) > 1 or (shape and shape[0] > MAX_VECTOR):
        raise ValueError(
            f"node {node.id} ({node.op}) has shape {shape}; the explorer draws scalars and "
            f"vectors of at most {MAX_VECTOR} elements."
        )
    params = {}
    if node.op == "integer_pow":
        params["y"] = int(node.params["y"])
    elif node.op == "dot_general":
        if node.params.get("dimension_numbers") not in _VECTOR_DOT:
            raise ValueError(
                f"node {node.id}: the page computes dot_general of two vectors only "
                f"(dimension_numbers (([0], [0]), ([], []))), got "
                f"{node.params.get('dimension_numbers')}."
            )
    elif node.op == "reduce_sum" and len(shape) != 0:
        raise ValueError(f"node {node.id}: the page sums whole vectors only (to a scalar).")
    elif node.op == "broadcast_in_dim":
        params["size"] = int(shape[0]) if shape else 1
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


def export_graph(fn: Callable, *args, title: str = "", output_label: str = "L") -> dict:
    """The explorer's data for ``fn(*args)``.

    Args:
      fn: a JAX function of scalars (and small vectors) returning one scalar.
      *args: the starting point; each leaf becomes an input (labelled by ``fn``'s
        parameter names), cast to float64.
      title: a heading for the page.
      output_label: the name of the output (``dL/dw`` …).

    Returns:
      ``{"title", "output", "inputs", "nodes", "columns", "jax"}``; see the module
      docstring.

    Raises:
      ValueError: for a result that is not one floating scalar, a primitive the page
        cannot interpret, a vector longer than ``MAX_VECTOR``, or a custom rule it does
        not know.
    """
    # a list of numbers is one vector input, not a pytree of scalars
    args = tuple(np.asarray(a) if isinstance(a, (list, tuple)) else a for a in args)
    with jax.enable_x64(True):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        for index, leaf in enumerate(leaves):
            if not np.issubdtype(np.asarray(leaf).dtype, np.number):
                raise TypeError(f"argument leaf {index} (={leaf!r}) is not a number.")
        args64 = jax.tree_util.tree_unflatten(
            treedef, [jnp.asarray(np.asarray(leaf, np.float64)) for leaf in leaves])
        graph = trace(fn, *args64, output_labels=output_label)
        by_id = {n.id: n for n in graph.nodes}
        out = by_id[graph.outputs[0]]
        if len(graph.outputs) != 1 or out.shape != () or np.asarray(out.value).dtype.kind != "f":
            got = ", ".join(f"{by_id[o].dtype}{list(by_id[o].shape)}" for o in graph.outputs)
            raise ValueError(f"`fn` must return one floating scalar (a loss); it returns {got}.")
        walk = step_through(fn, *args64, output_label=output_label, verbose=False)

    inputs, nodes = [], []
    for node in graph.nodes:
        if node.kind == "input":
            _check_shape_only(node)
            entry = {"id": node.id, "label": node.label, "value": _value(node.value)}
            if node.shape == ():
                entry["slider"] = _slider(float(node.value))
            inputs.append(entry)
        elif node.kind == "operation":
            params = _check_node(node)
            entry = {"id": node.id, "op": node.op, "inputs": list(node.inputs),
                     "params": params, "value": _value(node.value)}
            rule = _rule(node.scope)
            if rule == "relu" and node.op != "max":
                rule = None  # the call's other primitives (jit wrappers) need no rule
            if rule:
                entry["rule"] = rule
            nodes.append(entry)
        elif node.kind == "constant":
            nodes.append({"id": node.id, "op": "constant", "inputs": [],
                          "value": _value(node.value)})
    drawn = [by_id[n["id"]] for n in inputs] + [by_id[n["id"]] for n in nodes
                                                if n["op"] != "constant"]
    columns = _columns(drawn)
    steps = [{"node": s.node, "input": s.input, "upstream": _value(s.upstream),
              "local": None if s.local is None else _value(s.local),
              "gradient": _value(s.gradient)} for s in walk.backward]
    return {
        "title": title or getattr(fn, "__name__", "fn"),
        "output": {"id": out.inputs[0], "label": output_label, "value": _value(out.value)},
        "inputs": inputs,
        "nodes": nodes,
        "columns": columns,
        "jax": {"version": jax.__version__, "steps": steps,
                "grads": {label: _value(g) for label, g in walk.grads.items()}},
    }


def _check_shape_only(node) -> None:
    shape = tuple(node.shape)
    if len(shape) > 1 or (shape and shape[0] > MAX_VECTOR):
        raise ValueError(
            f"input {node.label!r} has shape {shape}; the explorer takes scalars and vectors "
            f"of at most {MAX_VECTOR} elements."
        )


__all__ = ["MAX_VECTOR", "SUPPORTED", "export_graph"]
