"""The regions of a captured program: one call of a leaf torch module each.

An ``ExportedModule`` (``from_torch`` through ``torch.export``) keeps, for every ATen
node, the torch module path it ran in. A *region* is one call of a leaf torch module
(a module none of whose submodules ran: ``Linear``, ``LayerNorm``,
``GELUActivation``…): the consecutive nodes of that path. Its input is the one value
its nodes read from outside it (parameters, buffers and constants aside), its outputs
the values read after it. The doctor compares and runs a port region by region
(``jaxgrad.doctor.regions``); the nnx twin runs the regions of layers stock flax has as
those layers (``jaxgrad.flax.program``). A region reading several outside values (an
attention module fed query and key) is not a region here.
"""

from __future__ import annotations

import dataclasses

from jaxgrad.nn.capture.program import SYM_OPS, Program
from jaxgrad.nn.capture.refs import Ref


@dataclasses.dataclass(frozen=True)
class Region:
    """One call of a leaf module: ``path``, ``index`` (its call number), ``nodes``,
    ``input`` (the outside value it reads) and ``outputs`` (its values read later)."""

    path: str
    index: int
    nodes: tuple
    input: str
    outputs: tuple


def _refs(value, found: list) -> list:
    if isinstance(value, Ref):
        found.append(value.name)
    elif isinstance(value, tuple):
        for item in value:
            _refs(item, found)
    return found


def regions(program: Program) -> list[Region]:
    """The regions of ``program`` with one outside input, in execution order."""
    state = {name for name, kind, _ in program.inputs if kind != "input"}
    # sizes (a dynamic capture's sym_size and arithmetic on it) are no outside *input*:
    # a layer run whole reads its sizes from its input
    state |= {node.name for node in program.nodes if node.target in SYM_OPS}
    paths = {node.path for node in program.nodes}
    leaves = {p for p in paths if p and not any(q.startswith(p + ".") for q in paths)}
    runs: list[list[int]] = []
    for i, node in enumerate(program.nodes):
        if node.path not in leaves:
            continue
        if runs and program.nodes[runs[-1][-1]].path == node.path and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    read_after: dict[str, int] = {}  # value name -> index of its last reader
    for i, node in enumerate(program.nodes):
        for name in _refs((node.args, node.kwargs), []):
            read_after[name] = i
    final = len(program.nodes)
    for item in (*program.outputs, *(ref for _, ref in program.buffer_updates)):
        for name in _refs(item, []):
            read_after[name] = final
    counts: dict[str, int] = {}
    found = []
    for indices in runs:
        nodes = tuple(program.nodes[i] for i in indices)
        inside = {n.name for n in nodes}
        outside = []
        for node in nodes:
            for name in _refs((node.args, node.kwargs), []):
                if name not in inside and name not in state and name not in outside:
                    outside.append(name)
        path = nodes[0].path
        index = counts.get(path, 0)
        counts[path] = index + 1
        # a size computed inside (sym_size of an intermediate) read later is no output:
        # the program evaluates it from its expression when the region runs whole
        outputs = tuple(
            n.name
            for n in nodes
            if read_after.get(n.name, -1) > indices[-1] and n.target not in SYM_OPS
        )
        if len(outside) == 1 and outputs:
            found.append(Region(path, index, nodes, outside[0], outputs))
    return found


def state_read(region: Region, program: Program) -> dict[str, str]:
    """``{placeholder name: state name}`` of the params, buffers and constants the
    region's nodes read."""
    state = {name: target for name, kind, target in program.inputs if kind != "input"}
    read = {}
    for node in region.nodes:
        for name in _refs((node.args, node.kwargs), []):
            if name in state:
                read[name] = state[name]
    return read


def readers(program: Program) -> dict[str, set]:
    """``{value name: names of the nodes that read it}`` (``"<output>"`` for the
    program's outputs and buffer writes)."""
    found: dict[str, set] = {}
    for node in program.nodes:
        for name in _refs((node.args, node.kwargs), []):
            found.setdefault(name, set()).add(node.name)
    for item in (*program.outputs, *(ref for _, ref in program.buffer_updates)):
        for name in _refs(item, []):
            found.setdefault(name, set()).add("<output>")
    return found


__all__ = ["Region", "regions", "state_read", "readers"]
