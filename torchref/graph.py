"""The graph PyTorch's autograd records, walked from ``grad_fn`` / ``next_functions``.

``autograd_graph(tensor)`` returns the same plain-data structure as
``jaxgrad.graph``: ``Graph``/``Node``/``Edge`` with identical fields (this module
cannot import ``jaxgrad``, whose package imports jax; ``jaxgrad.graph.as_graph``
converts, and a test keeps the fields identical). What torch records *is* a backward
graph, so edges run the way gradients flow: from the output tensor to its
``grad_fn`` (``SumBackward0``), along ``next_functions`` (``PowBackward0``,
``ReluBackward0``, …) to the ``AccumulateGrad`` nodes, and from each to the leaf
tensor whose ``.grad`` it fills. Inputs that do not require grad have no node
(torch records ``None`` for them). ``Node.params["saved"]`` lists the tensors a node
saved for backward (``self``, ``other``, ``result``…): the activation memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class Node:  # fields identical to jaxgrad.graph.types.Node
    id: str
    op: str
    kind: str
    label: str
    inputs: tuple = ()
    shape: tuple | None = None
    dtype: str | None = None
    value: Any = dataclasses.field(default=None, compare=False, repr=False)
    scope: tuple = ()
    params: dict = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class Edge:  # fields identical to jaxgrad.graph.types.Edge
    source: str
    target: str
    position: int


@dataclasses.dataclass(frozen=True)
class Graph:  # fields identical to jaxgrad.graph.types.Graph
    name: str
    direction: str
    nodes: tuple
    edges: tuple
    inputs: tuple
    outputs: tuple


def _dtype(tensor) -> str:
    return str(tensor.dtype).replace("torch.", "")


def _saved(fn) -> str:
    names = []
    for attribute in dir(fn):
        if attribute.startswith("_saved_") and not attribute.endswith("_raw"):
            names.append(attribute[len("_saved_") :])
    return ", ".join(names)


def autograd_graph(
    tensor: torch.Tensor, names: Mapping[str, torch.Tensor] | None = None, *, label: str = "loss"
) -> Graph:
    """Walk ``tensor.grad_fn`` into a ``Graph`` (direction ``"backward"``).

    Args:
      tensor: the output (usually the loss) whose graph to show; must have a
        ``grad_fn``.
      names: ``{name: leaf tensor}`` to label leaves (``dict(model.named_parameters())``
        works); unnamed leaves are ``leaf0``, ``leaf1``, …
      label: the output tensor's label.

    Raises:
      ValueError: if ``tensor`` has no ``grad_fn`` (a leaf, or computed without grad).
    """
    if tensor.grad_fn is None:
        raise ValueError(
            f"autograd_graph: `tensor` has no grad_fn (is_leaf={tensor.is_leaf}, "
            f"requires_grad={tensor.requires_grad}): no graph was recorded for it."
        )
    leaf_names = {id(t): n for n, t in (names or {}).items()}
    # Kahn's algorithm over next_functions: a node is listed once every node that
    # sends it a gradient has been, so ids come out in the order backward() runs.
    pending, order, seen = {}, [], {tensor.grad_fn}
    stack = [tensor.grad_fn]
    while stack:
        fn = stack.pop()
        for child, _ in fn.next_functions:
            if child is not None:
                pending[child] = pending.get(child, 0) + 1
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    ready = [tensor.grad_fn]
    while ready:
        fn = ready.pop(0)
        order.append(fn)
        for child, _ in fn.next_functions:
            if child is not None:
                pending[child] -= 1
                if pending[child] == 0:
                    ready.append(child)

    nodes = [
        Node(
            id="n0",
            op="input",
            kind="input",
            label=label,
            shape=tuple(tensor.shape),
            dtype=_dtype(tensor),
            value=tensor.detach().cpu().numpy().copy(),
        )
    ]
    ids = {fn: f"n{i + 1}" for i, fn in enumerate(order)}
    inputs_of = {tensor.grad_fn: [("n0", 0)]}
    for fn in order:
        for position, (child, _) in enumerate(fn.next_functions):
            if child is not None:
                inputs_of.setdefault(child, []).append((ids[fn], position))
    leaves = []
    for fn in order:
        saved = _saved(fn)
        nodes.append(
            Node(
                id=ids[fn],
                op=type(fn).__name__,
                kind="operation",
                label=type(fn).__name__,
                inputs=tuple(source for source, _ in inputs_of[fn]),
                params={"saved": saved} if saved else {},
            )
        )
        if hasattr(fn, "variable"):
            leaves.append((fn, fn.variable))
    outputs = []
    for index, (fn, leaf) in enumerate(leaves):
        leaf_id = f"n{len(nodes)}"
        nodes.append(
            Node(
                id=leaf_id,
                op="leaf",
                kind="leaf",
                label=leaf_names.get(id(leaf), f"leaf{index}"),
                inputs=(ids[fn],),
                shape=tuple(leaf.shape),
                dtype=_dtype(leaf),
                value=leaf.detach().cpu().numpy().copy(),
            )
        )
        outputs.append(leaf_id)
    edges = tuple(
        Edge(source, node.id, position)
        for node in nodes
        for position, source in enumerate(node.inputs)
    )
    return Graph(
        name=f"{label} (torch autograd)",
        direction="backward",
        nodes=tuple(nodes),
        edges=edges,
        inputs=("n0",),
        outputs=tuple(outputs),
    )


def lesson_expression(w1=0.5, b1=0.1, w2=-1.5, b2=0.3, x=2.0, y=1.0, dtype=torch.float64) -> dict:
    """Lesson 000's ``L = ((w2 * relu(w1 * x + b1) + b2) - y) ** 2`` with its leaves.

    Returns ``{"L": loss, "leaves": {"w1": …, "b1": …, "w2": …, "b2": …}}``; nothing
    is differentiated yet, so the graph is intact.
    """
    leaves = {
        k: torch.tensor(v, dtype=dtype, requires_grad=True)
        for k, v in dict(w1=w1, b1=b1, w2=w2, b2=b2).items()
    }
    x, y = torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)
    loss = ((leaves["w2"] * torch.relu(leaves["w1"] * x + leaves["b1"]) + leaves["b2"]) - y) ** 2
    return {"L": loss, "leaves": leaves}


def seed_neuron(w1=0.5, w2=-0.8, b=0.0, x1=2.0, x2=0.0, y=1.0, dtype=torch.float64) -> dict:
    """Lesson 001's two-input neuron ``L = (σ(w1·x1 + w2·x2 + b) − y)²`` with its leaves."""
    leaves = {
        k: torch.tensor(v, dtype=dtype, requires_grad=True)
        for k, v in dict(w1=w1, w2=w2, b=b).items()
    }
    x1, x2, y = (torch.tensor(v, dtype=dtype) for v in (x1, x2, y))
    a = torch.sigmoid(leaves["w1"] * x1 + leaves["w2"] * x2 + leaves["b"])
    return {"L": (a - y) ** 2, "leaves": leaves}


def lesson_002_example(dtype=torch.float32) -> dict:
    """Lesson 002's ``x = tensor([2.0], requires_grad=True); h = (x*3).relu();
    loss = (h**2).sum()``, plus ``broken``, rebuilt from ``.item()`` (the graph is cut)."""
    x = torch.tensor([2.0], dtype=dtype, requires_grad=True)
    h = (x * 3).relu()
    loss = (h**2).sum()
    broken = torch.tensor([float((x * 3).item())], dtype=dtype, requires_grad=True)
    return {"x": x, "h": h, "loss": loss, "broken": broken}
