"""Computational graphs made visible: traced from jaxprs, rendered, stepped through.

- ``trace(fn, *args)`` / ``backward_graph(fn, *args)``: the forward pass and the VJP
  as a plain-data ``Graph`` (``jaxgrad.graph.types``);
- ``to_text`` / ``to_mermaid`` / ``to_dot``: render any ``Graph``, torchref's included;
- ``step_through(fn, *args)``: forward values node by node, then the backward pass as
  ``upstream × local = gradient``.
"""

from jaxgrad.graph.render import FORMATS
from jaxgrad.graph.render import render
from jaxgrad.graph.render import side_by_side
from jaxgrad.graph.render import to_dot
from jaxgrad.graph.render import to_mermaid
from jaxgrad.graph.render import to_text
from jaxgrad.graph.step import StepThrough
from jaxgrad.graph.step import step_through
from jaxgrad.graph.trace import backward_graph
from jaxgrad.graph.trace import trace
from jaxgrad.graph.types import Edge
from jaxgrad.graph.types import Graph
from jaxgrad.graph.types import Node
from jaxgrad.graph.types import as_graph
