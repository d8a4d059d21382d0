"""Stepping through a graph: forward values node by node, then the chain rule node by node.

``step_through(fn, *args)`` traces ``fn`` (``jaxgrad.graph.trace``), prints each
node's value in forward order, then walks the nodes in reverse, printing for every
(operation, input) pair ``upstream × local = gradient`` — the lessons' "each node
prints the multiplication it did". Gradients reaching a value along several paths are
summed, and the sum is printed.

The local derivative of each node is that of its primitive alone (``jax.jvp`` /
``jax.vjp`` of one primitive application). Inside ``custom_jvp``/``custom_vjp`` calls
the expanded primitives are differentiated, not the custom rule: the two agree except
at ties (``max(x, 0)`` at exactly ``x = 0`` splits the gradient ½/½ where
``jax.nn.relu``'s rule gives 0). For arrays the step is a vector-Jacobian product and
is printed as ``vjp(upstream) = gradient``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from jaxgrad.graph.render import format_value, reference
from jaxgrad.graph.trace import trace_with_evaluators
from jaxgrad.graph.types import Graph

_DIFFERENTIABLE = ("input", "operation")


@dataclasses.dataclass(frozen=True)
class BackwardStep:
    """The gradient passing through one operation to one of its inputs."""

    node: str  # id of the operation node
    op: str
    input: str  # id of the input node receiving the gradient
    upstream: np.ndarray  # dL/d(node output)
    local: np.ndarray | None  # d(node)/d(input) when both are scalars, else None
    gradient: np.ndarray  # this path's contribution to dL/d(input)


@dataclasses.dataclass
class StepThrough:
    """What ``step_through`` printed, and the numbers behind it."""

    graph: Graph
    forward: list  # (reference, value) per input and operation, in order
    backward: list  # BackwardStep, in the order they were taken
    grads: dict  # input label -> dL/d(input), for every floating input
    lines: list

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _is_float(node) -> bool:
    # "float0" (JAX's no-gradient type) is not a numpy dtype name
    return node.dtype not in (None, "float0") and np.dtype(node.dtype).kind == "f"


def step_through(
    fn: Callable, *args, output_label: str = "L", verbose: bool = True, file=None
) -> StepThrough:
    """Print the forward pass, then the backward pass as ``upstream × local = gradient``.

    Args:
      fn: a JAX function returning one scalar (a loss), as ``backward()`` requires.
      *args: the point to evaluate at (see ``trace`` for the labels).
      output_label: the name the output goes by (``dL/d…`` is printed with it).
      verbose: print the walk (False: only return it).
      file: the text stream to print to; None is the current ``sys.stdout``.

    Returns:
      A ``StepThrough``: the graph, the forward values, every backward step and the
      gradient of every floating input, keyed by label.

    Raises:
      ValueError: if ``fn`` does not return a single floating scalar.
    """
    graph, evaluators = trace_with_evaluators(fn, *args, output_labels=output_label)
    by_id = {n.id: n for n in graph.nodes}
    if (
        len(graph.outputs) != 1
        or by_id[graph.outputs[0]].value.size != 1
        or not _is_float(by_id[graph.outputs[0]])
    ):
        raise ValueError(
            "step_through: `fn` must return one floating scalar (a loss), got outputs "
            + ", ".join(f"{by_id[o].dtype}{list(by_id[o].shape)}" for o in graph.outputs)
            + "."
        )
    lines, forward = ["forward (left to right, every value kept for the backward pass):"], []
    for node in graph.nodes:
        if node.kind in ("constant", "residual"):
            continue
        ref = reference(node)
        args_text = ", ".join(reference(by_id[i]) for i in node.inputs)
        if node.kind == "operation":
            params = ", ".join(f"{k}={v}" for k, v in node.params.items() if k in ("y", "axes"))
            params = f"[{params}]" if params else ""
            where = f"   (inside {node.scope[-1]})" if node.scope else ""
            lines.append(
                f"  {ref} = {node.op}{params}({args_text}) = {format_value(node.value)}{where}"
            )
        elif node.kind == "output":
            lines.append(f"  {node.label} = {args_text} = {format_value(node.value)}")
        else:
            lines.append(f"  {node.label} = {format_value(node.value)}")
        forward.append((ref if node.kind != "output" else node.label, node.value))

    output = by_id[graph.outputs[0]]
    name = output.label
    grads = {output.inputs[0]: np.ones_like(output.value)}
    paths = {output.inputs[0]: 1}
    lines.append(f"backward (right to left; the gradient starts at {name} as 1):")
    lines.append(f"  d{name}/d{name} = 1")
    steps = []
    for node in reversed(graph.nodes):
        if node.kind != "operation" or node.id not in grads:
            continue
        upstream = grads[node.id]
        if paths[node.id] > 1:
            lines.append(
                f"  d{name}/d{node.id} = sum over its {paths[node.id]} paths = "
                f"{format_value(upstream)}"
            )
        for step in _local_steps(node, by_id, evaluators[node.id], upstream):
            steps.append(step)
            target = by_id[step.input]
            arrow = f"  {reference(target)} <- {node.op} {node.id}: "
            if step.local is not None:
                lines.append(
                    arrow + f"upstream {format_value(upstream)} × local "
                    f"{format_value(step.local)} = {format_value(step.gradient)}"
                )
            else:
                lines.append(
                    arrow + f"vjp(upstream {format_value(upstream)}) = "
                    f"{format_value(step.gradient)}"
                )
            grads[step.input] = grads.get(step.input, 0) + step.gradient
            paths[step.input] = paths.get(step.input, 0) + 1

    lines.append("gradients:")
    input_grads = {}
    for node_id in graph.inputs:
        node = by_id[node_id]
        if not _is_float(node):
            continue
        gradient = np.asarray(grads.get(node_id, np.zeros_like(node.value)), node.dtype)
        input_grads[node.label] = gradient
        note = "" if node_id in grads else "   (no path to the output)"
        if paths.get(node_id, 0) > 1:
            note = f"   (sum over its {paths[node_id]} paths)"
        lines.append(f"  d{name}/d{node.label} = {format_value(gradient)}{note}")
    result = StepThrough(
        graph=graph, forward=forward, backward=steps, grads=input_grads, lines=lines
    )
    if verbose:
        print(result, file=file)
    return result


def _local_steps(node, by_id, evaluator, upstream) -> list[BackwardStep]:
    """One ``BackwardStep`` per floating, non-constant input of ``node``."""
    evaluate, input_ids = evaluator
    values = [by_id[i].value for i in input_ids]
    positions = [
        p
        for p, i in enumerate(input_ids)
        if by_id[i].kind in _DIFFERENTIABLE and _is_float(by_id[i])
    ]
    if not positions:
        return []

    def local_fn(*chosen):
        full = list(values)
        for p, value in zip(positions, chosen):
            full[p] = value
        return evaluate(*full)

    primals = [values[p] for p in positions]
    _, vjp_fn = jax.vjp(local_fn, *primals)
    contributions = vjp_fn(np.asarray(upstream, node.dtype))
    scalar = node.value.size == 1
    steps = []
    for k, (p, contribution) in enumerate(zip(positions, contributions)):
        local = None
        if scalar and values[p].size == 1:
            tangents = [
                np.ones_like(v) if j == k else np.zeros_like(v) for j, v in enumerate(primals)
            ]
            local = np.asarray(jax.jvp(local_fn, primals, tangents)[1])
        steps.append(
            BackwardStep(
                node=node.id,
                op=node.op,
                input=input_ids[p],
                upstream=np.asarray(upstream),
                local=local,
                gradient=np.asarray(contribution),
            )
        )
    return steps


__all__ = ["BackwardStep", "StepThrough", "step_through"]
