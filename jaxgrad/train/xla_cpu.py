"""What XLA:CPU made of a compiled step: which library runs each dot, what gets copied.

Contract: ``hlo_summary(text)`` reads the optimised HLO text of one compiled
function (``jax.jit(f).lower(*args).compile().as_text()``, or a file written by
``XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text``) and counts, without running
anything:

- ``dots``: every ``dot`` instruction, split into ``library_dots`` (inside a fusion
  handed to a kernel library: ``{"__ynn_fusion": n, ...}``, the kind XLA writes in
  the fusion's ``backend_config``) and ``plain_dots`` (left to XLA's own dot
  emitter), each with its contracting dimensions (``"lhs{0} rhs{0}"`` is a
  transposed left operand, e.g. a weight gradient ``g.T @ x``);
- ``copies``: ``copy`` instructions of arrays with at least ``min_copy_elements``
  elements (a donated parameter that must survive its own update is copied);
- ``fusions``: fusion instructions by kind (``kLoop``, ``kCustom``, ...).

``conv_summary(text)`` counts convolutions by where they run (the entry computation
or a loop body) and whether they are in the one form XLA:CPU runs through Eigen's
convolution (see ``jaxgrad.nn.conv_lowering``).

Why this matters: with jax 0.10.2 on x86 the forward ``x @ W.T`` and the input
gradient ``g @ W`` of a ``Linear`` become YNNPACK fusions, while the weight
gradient ``g.T @ x`` (contracting the batch, the left operand's dimension 0) stays
a plain XLA dot; the two can run at different speeds on different CPUs. Which
kernels a CPU gets is the first thing to know before comparing its timings.
"""

from __future__ import annotations

import collections
import re

_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*(?P<shape>\S+)\s+"
    r"(?P<op>[\w\-]+)\((?P<operands>[^)]*)\)(?P<rest>.*)$"
)
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(?P<name>[\w.\-]+)\s*(?:\(.*\))?.*\{\s*$")
_COMMENT = re.compile(r"/\*.*?\*/")
_DIMS = re.compile(r"(lhs|rhs)_contracting_dims=\{([\d,]*)\}")
_KIND = re.compile(r'"kind"\s*:\s*"(?P<kind>[^"]+)"')
_CALLS = re.compile(r"calls=%(?P<callee>[\w.\-]+)")
_FUSION_KIND = re.compile(r"kind=(?P<kind>k\w+)")


def _computation_name(line: str) -> str | None:
    """The name a computation's header line opens (``%region_0.73 (...) -> ... {``),
    else None; tuple shapes there carry ``/*index=5*/`` comments."""
    match = _COMPUTATION.match(line)
    if match and "=" not in _COMMENT.sub("", line).split("{")[0]:
        return match.group("name")
    return None


def _elements(shape: str) -> int:
    """``f32[2048,784]{1,0}`` -> 1605632; a scalar ``f32[]`` -> 1."""
    match = re.search(r"\[([\d,]*)\]", shape)
    if match is None:
        return 0
    count = 1
    for size in filter(None, match.group(1).split(",")):
        count *= int(size)
    return count


def hlo_summary(text: str, *, min_copy_elements: int = 1024) -> dict:
    """Dots by library and contracting dims, large copies and fusion kinds of HLO ``text``.

    Returns ``{"dots": int, "library_dots": {kind: {dims: n}}, "plain_dots": {dims: n},
    "copies": [(shape, count)], "fusions": {kind: n}}``.
    """
    computation = None
    dots_in = collections.defaultdict(collections.Counter)  # computation -> dims -> n
    callers = {}  # fused computation -> library kind of the fusion calling it (or None)
    copies, fusions = collections.Counter(), collections.Counter()
    for line in text.splitlines():
        name = _computation_name(line)
        if name:
            computation = name
            continue
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        op, rest, shape = match.group("op"), match.group("rest"), match.group("shape")
        if op == "dot":
            dims = dict(_DIMS.findall(rest))
            dots_in[computation][f"lhs{{{dims.get('lhs', '')}}} rhs{{{dims.get('rhs', '')}}}"] += 1
        elif op == "copy" and _elements(shape) >= min_copy_elements:
            copies[shape.split("{")[0]] += 1
        elif op == "fusion":
            kind = _FUSION_KIND.search(rest)
            fusions[kind.group("kind") if kind else "unknown"] += 1
            callee = _CALLS.search(rest)
            library = _KIND.search(rest)
            if callee:
                callers[callee.group("callee")] = library.group("kind") if library else None
    library_dots = collections.defaultdict(collections.Counter)
    plain_dots = collections.Counter()
    for computation, dims in dots_in.items():
        kind = callers.get(computation)
        (library_dots[kind] if kind else plain_dots).update(dims)
    return {
        "dots": sum(sum(d.values()) for d in dots_in.values()),
        "library_dots": {k: dict(v) for k, v in library_dots.items()},
        "plain_dots": dict(plain_dots),
        "copies": sorted(copies.items()),
        "fusions": dict(fusions),
    }


_CALLEES = re.compile(r"(?:calls|body|condition|to_apply)=%(?P<callee>[\w.\-]+)")
_WHILE_BODY = re.compile(r"body=%(?P<body>[\w.\-]+)")
_DIM_LABELS = re.compile(r"dim_labels=(?P<labels>[\w>\-]+)")


def canonical_labels(labels: str) -> bool:
    """Whether convolution ``dim_labels`` are the form XLA:CPU hands to Eigen's
    convolution: batch first and features last (``b01f``), kernel ``…io``, e.g.
    ``b01f_01io->b01f``. Any other form XLA:CPU's ``ConvCanonicalization`` pass
    transposes into it, but that pass only visits the entry computation."""
    try:
        lhs, rest = labels.split("_", 1)
        rhs, out = rest.split("->")
    except ValueError:
        return False
    return (
        lhs[0] == "b" and lhs[-1] == "f" and out[0] == "b" and out[-1] == "f" and rhs[-2:] == "io"
    )


def conv_summary(text: str) -> dict:
    """Convolutions of HLO ``text`` by where they run and their form.

    Returns ``{"entry": {"canonical": n, "other": n}, "loop": {...}}``: ``loop`` counts
    the convolutions inside a ``while`` body (a ``lax.scan``), including the fusions
    it calls; ``entry`` every other one. ``canonical`` as ``canonical_labels``; on
    XLA:CPU an ``other`` convolution inside a loop is emitted as a plain loop nest,
    without Eigen's convolution.
    """
    computation = None
    callees = collections.defaultdict(set)
    bodies = set()
    convs = collections.defaultdict(list)  # computation -> [canonical?]
    for line in text.splitlines():
        name = _computation_name(line)
        if name:
            computation = name
            continue
        # a while's tuple shape has spaces and parentheses: read its line as text
        callees[computation].update(m.group("callee") for m in _CALLEES.finditer(line))
        if " while(" in line:
            bodies.update(m.group("body") for m in _WHILE_BODY.finditer(line))
        match = _INSTRUCTION.match(line)
        if match is not None and match.group("op") == "convolution":
            labels = _DIM_LABELS.search(match.group("rest"))
            convs[computation].append(bool(labels) and canonical_labels(labels.group("labels")))
    in_loop, pending = set(), list(bodies)
    while pending:
        name = pending.pop()
        if name not in in_loop:
            in_loop.add(name)
            pending.extend(callees.get(name, ()))
    summary = {
        "entry": collections.Counter(canonical=0, other=0),
        "loop": collections.Counter(canonical=0, other=0),
    }
    for name, forms in convs.items():
        for canonical in forms:
            summary["loop" if name in in_loop else "entry"][
                "canonical" if canonical else "other"
            ] += 1
    return {where: dict(counts) for where, counts in summary.items()}


def compiled_hlo(fn, *args) -> str:
    """Optimised HLO text of the jitted ``fn`` compiled for ``args`` (arrays or
    ``jax.ShapeDtypeStruct``); nothing is executed."""
    return fn.lower(*args).compile().as_text()
