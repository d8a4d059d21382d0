"""Computational graphs made visible: traced from jaxprs, rendered, stepped through.

- ``trace(fn, *args)`` / ``backward_graph(fn, *args)``: the forward pass and the VJP
  as a plain-data ``Graph`` (``jaxgrad.graph.types``);
- ``to_text`` / ``to_mermaid`` / ``to_dot``: render any ``Graph``, torchref's included;
- ``step_through(fn, *args)``: forward values node by node, then the backward pass as
  ``upstream × local = gradient``.
"""

from jaxgrad.graph.render import FORMATS, render, side_by_side, to_dot, to_mermaid, to_text
from jaxgrad.graph.step import StepThrough, step_through
from jaxgrad.graph.trace import backward_graph, trace
from jaxgrad.graph.types import Edge, Graph, Node, as_graph
