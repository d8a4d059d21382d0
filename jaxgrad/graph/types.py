"""The plain-data graph every jaxgrad and torchref graph function returns.

A ``Graph`` is nodes and edges, nothing else: no jax, no torch, values as numpy
arrays. ``torchref.graph`` cannot import this module (importing anything under
``jaxgrad`` runs the package ``__init__``, which imports jax), so it declares
dataclasses with exactly these fields; ``as_graph`` converts either into this type
and a test keeps the field lists identical. The renderers read fields only.

Edges point the way data flows: ``source → target`` means the target consumes what
the source produced. In a forward graph that is the forward computation; in a
backward graph (``backward_graph``, torch's ``grad_fn`` graph) it is the gradient
flowing from the loss towards the leaves.
"""

from __future__ import annotations

import dataclasses
from typing import Any

KINDS = (
    "input",  # an argument of the traced function, or the seed gradient of a backward graph
    "constant",  # a literal or a captured constant
    "residual",  # a value the forward pass saved for the backward pass
    "operation",  # one primitive (JAX) or one autograd Node (torch's grad_fn)
    "output",  # a result of the function, labelled with its name
    "leaf",  # torch: a leaf tensor whose .grad the backward pass fills
)
DIRECTIONS = ("forward", "backward")


@dataclasses.dataclass(frozen=True)
class Node:
    """One node. ``op`` is the primitive's name (``mul``, ``max``, ``integer_pow``) or
    torch's Node class (``MulBackward0``, ``AccumulateGrad``); for the other kinds it
    repeats ``kind``."""

    id: str  # unique in the graph: "n0", "n1", … in topological order
    op: str
    kind: str  # one of KINDS
    label: str  # what a drawing shows: "w1", "mul", "dL/dw1", "SumBackward0"
    inputs: tuple = ()  # ids of the nodes this one consumes, in argument order
    shape: tuple | None = None  # None where the framework does not record it
    dtype: str | None = None
    value: Any = dataclasses.field(default=None, compare=False, repr=False)  # numpy
    scope: tuple = ()  # enclosing nested calls, outermost first: ("custom_jvp_call relu #1", …)
    params: dict = dataclasses.field(default_factory=dict, compare=False)  # short, as str


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str
    target: str
    position: int  # which argument of ``target`` the edge feeds


@dataclasses.dataclass(frozen=True)
class Graph:
    name: str
    direction: str  # one of DIRECTIONS
    nodes: tuple
    edges: tuple
    inputs: tuple  # node ids where data enters
    outputs: tuple  # node ids of the results

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(f"no node {node_id!r} in graph {self.name!r}")

    def ops(self) -> list[str]:
        """The ``op`` of every operation node, in order."""
        return [n.op for n in self.nodes if n.kind == "operation"]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def edges_from_inputs(nodes) -> tuple:
    """The ``Edge`` list implied by each node's ``inputs``."""
    return tuple(
        Edge(source, node.id, position)
        for node in nodes
        for position, source in enumerate(node.inputs)
    )


def as_graph(graph) -> Graph:
    """This module's ``Graph`` from any object with its fields (e.g. ``torchref.graph.Graph``)."""
    if isinstance(graph, Graph):
        return graph
    try:
        nodes = tuple(
            Node(**{f.name: getattr(n, f.name) for f in dataclasses.fields(Node)})
            for n in graph.nodes
        )
        edges = tuple(
            Edge(**{f.name: getattr(e, f.name) for f in dataclasses.fields(Edge)})
            for e in graph.edges
        )
        return Graph(
            name=graph.name,
            direction=graph.direction,
            nodes=nodes,
            edges=edges,
            inputs=tuple(graph.inputs),
            outputs=tuple(graph.outputs),
        )
    except AttributeError as exc:
        raise TypeError(
            f"`graph` (a {type(graph).__name__}) lacks the fields of jaxgrad.graph.Graph: {exc}"
        ) from exc
