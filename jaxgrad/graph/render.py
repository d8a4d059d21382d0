"""Rendering a ``Graph`` as plain text, Mermaid (``flowchart LR``) or Graphviz DOT.

The renderers read the graph's fields only, so they draw ``torchref.graph`` graphs too.
Nested calls (``Node.scope``) become Mermaid subgraphs and DOT clusters; values are
shown for scalars and small arrays, summarised otherwise.
"""

from __future__ import annotations

import numpy as np

FORMATS = ("text", "mermaid", "dot")
_SHOWN = 4  # arrays up to this many elements are printed in full


def format_value(value) -> str:
    """``1.1``, ``[0.5, -1]`` or ``f64[3,4] |max| 2.1`` (``""`` for None)."""
    if value is None:
        return ""
    array = np.asarray(value)
    if array.dtype.kind == "V":  # JAX's float0: the cotangent of an integer input
        return "no gradient"
    if array.dtype.kind not in "biuf":
        return str(array.dtype)
    if array.size == 1:
        if array.dtype.kind != "f":
            return str(array.item())
        return f"{array.item() + 0.0:.6g}"  # + 0.0 prints −0 as 0
    if array.size <= _SHOWN:
        return "[" + ", ".join(format_value(v) for v in array.ravel()) + "]"
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    biggest = float(np.max(np.abs(finite))) if finite.size else float("nan")
    return f"{array.size} values, |max| {biggest:.4g}"


def type_string(node) -> str:
    """``f64[3,4]`` — jaxpr's notation; ``?`` where the graph did not record it."""
    if node.dtype is None:
        return "?"
    short = {
        "float64": "f64",
        "float32": "f32",
        "float16": "f16",
        "bfloat16": "bf16",
        "int64": "i64",
        "int32": "i32",
        "bool": "bool",
    }.get(node.dtype, node.dtype)
    shape = "?" if node.shape is None else ",".join(map(str, node.shape))
    return f"{short}[{shape}]"


def reference(node) -> str:
    """How other lines refer to a node: inputs by label, operations by id."""
    return node.id if node.kind == "operation" else node.label


def _params(node) -> str:
    return " ".join(
        f"{k}={v}"
        for k, v in node.params.items()
        if k in ("y", "axes", "permutation", "output", "saved")
    )


def _title(node) -> str:
    return f"{node.label} {_params(node)}".rstrip()


def to_text(graph) -> str:
    """One line per node: ``n5 = mul(w1, x)  f64[]  = 1``, nested calls indented."""
    by_id = {n.id: n for n in graph.nodes}
    lines = [
        f"{graph.name} ({graph.direction}): {len(graph.inputs)} inputs, "
        f"{sum(n.kind == 'operation' for n in graph.nodes)} operations, "
        f"{len(graph.outputs)} outputs"
    ]
    previous = ()
    for node in graph.nodes:
        depth = len(node.scope)
        for level in range(depth):
            if previous[: level + 1] != node.scope[: level + 1]:
                lines.append("  " * (level + 1) + f"[{node.scope[level]}]")
        previous = node.scope
        args = ", ".join(reference(by_id[i]) for i in node.inputs)
        if node.kind == "operation":
            head = f"{node.id} = {node.label}({args})"
        elif node.kind in ("output", "leaf") and node.inputs:
            head = f"{node.label} ({node.kind}) <- {args}"
        else:
            head = f"{node.label} ({node.kind})"
        value = format_value(node.value)
        kind = "" if node.dtype is None else type_string(node)
        params = _params(node)
        lines.append(
            "  " * (depth + 1)
            + f"{head:<34} {kind:<9} "
            + (f"= {value}" if value else "")
            + (f"   {params}" if params else "")
        )
    return "\n".join(line.rstrip() for line in lines)


def _escape(text: str, quote: str) -> str:
    return text.replace('"', quote)


def _scope_tree(graph):
    """``{scope tuple: [node, ...]}`` and the ordered list of scopes, parents first."""
    members, order = {}, []
    for node in graph.nodes:
        for depth in range(len(node.scope) + 1):
            scope = node.scope[:depth]
            if scope not in members:
                members[scope] = []
                order.append(scope)
        members[node.scope].append(node)
    return members, order


def _box(node) -> str:
    value = format_value(node.value)
    body = _title(node) + (f"<br/>{type_string(node)}" if node.dtype else "")
    return body + (f" = {value}" if value else "")


def to_mermaid(graph) -> str:
    """``flowchart LR``: inputs as stadiums, operations as boxes, nested calls as subgraphs."""
    members, order = _scope_tree(graph)
    shapes = {
        "input": ('(["', '"])'),
        "constant": ('[/"', '"/]'),
        "residual": ('[("', '")]'),
        "output": ('(["', '"])'),
        "leaf": ('(["', '"])'),
    }
    lines = ["flowchart LR"]
    scope_ids = {scope: f"s{i}" for i, scope in enumerate(order)}

    def emit(scope, indent):
        for node in members[scope]:
            open_, close = shapes.get(node.kind, ('["', '"]'))
            lines.append(f"{indent}{node.id}{open_}{_escape(_box(node), '#quot;')}{close}")
        for child in order:
            if len(child) == len(scope) + 1 and child[: len(scope)] == scope:
                lines.append(
                    f'{indent}subgraph {scope_ids[child]}["{_escape(child[-1], "#quot;")}"]'
                )
                emit(child, indent + "    ")
                lines.append(f"{indent}end")

    emit((), "    ")
    lines.extend(f"    {e.source} --> {e.target}" for e in graph.edges)
    for kind, style in (
        ("input", "fill:#e8f0fe"),
        ("output", "fill:#e6f4ea"),
        ("leaf", "fill:#e6f4ea"),
        ("residual", "fill:#fef7e0"),
    ):
        ids = [n.id for n in graph.nodes if n.kind == kind]
        if ids:
            lines.append(f"    classDef {kind} {style}")
            lines.append(f"    class {','.join(ids)} {kind}")
    return "\n".join(lines)


def to_dot(graph) -> str:
    """Graphviz DOT, left to right; nested calls as ``cluster`` subgraphs."""
    members, order = _scope_tree(graph)
    shapes = {
        "input": "ellipse",
        "constant": "plaintext",
        "residual": "note",
        "output": "doubleoctagon",
        "leaf": "ellipse",
    }
    lines = [
        f'digraph "{_escape(graph.name, chr(39))}" {{',
        "    rankdir=LR;",
        '    node [shape=box, fontname="monospace"];',
    ]
    clusters = {scope: f"cluster_{i}" for i, scope in enumerate(order)}

    def emit(scope, indent):
        for node in members[scope]:
            label = _escape(_box(node).replace("<br/>", "\\n"), '\\"')
            shape = shapes.get(node.kind, "box")
            lines.append(f'{indent}{node.id} [label="{label}", shape={shape}];')
        for child in order:
            if len(child) == len(scope) + 1 and child[: len(scope)] == scope:
                lines.append(f"{indent}subgraph {clusters[child]} {{")
                lines.append(f'{indent}    label="{_escape(child[-1], chr(39))}"; style=dashed;')
                emit(child, indent + "    ")
                lines.append(f"{indent}}}")

    emit((), "    ")
    lines.extend(f"    {e.source} -> {e.target};" for e in graph.edges)
    lines.append("}")
    return "\n".join(lines)


def side_by_side(*blocks: str, titles=None, gap: int = 4) -> str:
    """Text blocks as columns, each as wide as its longest line."""
    columns = [block.splitlines() for block in blocks]
    if titles is not None:
        columns = [[title, "-" * len(title)] + lines for title, lines in zip(titles, columns)]
    widths = [max(map(len, lines), default=0) for lines in columns]
    height = max(map(len, columns), default=0)
    rows = []
    for i in range(height):
        cells = [
            (lines[i] if i < len(lines) else "").ljust(width)
            for lines, width in zip(columns, widths)
        ]
        rows.append((" " * gap).join(cells).rstrip())
    return "\n".join(rows)


def render(graph, format: str = "text") -> str:
    """``to_text`` / ``to_mermaid`` / ``to_dot`` by name."""
    if format not in FORMATS:
        raise ValueError(f"`format` (={format!r}) must be one of {', '.join(FORMATS)}.")
    return {"text": to_text, "mermaid": to_mermaid, "dot": to_dot}[format](graph)


__all__ = [
    "FORMATS",
    "format_value",
    "render",
    "side_by_side",
    "to_dot",
    "to_mermaid",
    "to_text",
    "type_string",
]
