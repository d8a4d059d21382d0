"""Symbolic sizes of a captured program: ``SymDim``, ``ShapeSpec``.

``torch.export`` captures a model with dynamic dimensions (``Dim.AUTO``): a size it
does not fix is a symbol (``s17``), a size computed from sizes an expression over
symbols (``4*(s53 - 2)*(s0 - 2)``), and what the model's code needs of the sizes is a
*guard* (``s27*s53 == 32``: the ``Linear`` after a flatten) or a range (``s17 >= 2``:
torch specialises the sizes 0 and 1). This module holds those expressions without
torch or sympy, and evaluates them when a program runs: JAX traces per shape, so a
symbol is a Python int at trace time (or a ``jax.export`` dimension variable while
exporting), and the program's recorded shapes are checked against them.

An expression is a nested tuple: an ``int``, ``("sym", name)``, or
``(op, *operands)`` with ``op`` among ``_OPS`` below; it is stored as JSON in an
exported artifact (``jaxgrad.nn.capture.artifact``), so it never goes through ``eval``.

``ShapeSpec.check`` is what ``ExportedModule.apply`` runs first: every tensor input's
fixed sizes, the sizes it shares with other inputs, the ranges and the guards, each
failure a ``ValueError`` naming the input, the dimension and the constraint.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np


def _product(*values):
    result = 1
    for value in values:
        result = result * value
    return result


def _total(*values):
    result = 0
    for value in values:
        result = result + value
    return result


_OPS = {
    "add": _total,
    "mul": _product,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "max": max,
    "min": min,
    "eq": operator.eq,
    "ne": operator.ne,
    "ge": operator.ge,
    "gt": operator.gt,
    "le": operator.le,
    "lt": operator.lt,
    "and": lambda *v: all(v),
    "or": lambda *v: any(v),
    "not": operator.not_,
}
_INFIX = {
    "add": " + ",
    "mul": "*",
    "eq": " == ",
    "ne": " != ",
    "ge": " >= ",
    "gt": " > ",
    "le": " <= ",
    "lt": " < ",
    "and": " and ",
    "or": " or ",
    "mod": " % ",
    "floordiv": " // ",
    "pow": "**",
}


class Unbound(KeyError):
    """An expression names a symbol the caller did not bind."""


def evaluate(expr, dims: dict):
    """``expr``'s value with the symbols in ``dims`` (Python ints, or ``jax.export``
    dimension variables); ``Unbound`` when it names another symbol."""
    if isinstance(expr, (bool, int)):
        return expr
    op = expr[0]
    if op == "sym":
        if expr[1] not in dims:
            raise Unbound(expr[1])
        return dims[expr[1]]
    return _OPS[op](*(evaluate(item, dims) for item in expr[1:]))


def symbols(expr) -> set:
    """The symbol names ``expr`` reads."""
    if isinstance(expr, (bool, int)):
        return set()
    if expr[0] == "sym":
        return {expr[1]}
    return set().union(*(symbols(item) for item in expr[1:]))


def text(expr, name=lambda symbol: symbol) -> str:
    """``expr`` written out, each symbol as ``name(symbol)``."""
    if isinstance(expr, (bool, int)):
        return str(expr)
    op, items = expr[0], expr[1:]
    if op == "sym":
        return name(items[0])
    parts = [text(item, name) for item in items]
    parts = [
        f"({p})"
        if not isinstance(item, int)
        and item[0] not in ("sym", "mul", "pow")
        and op in ("mul", "pow", "mod", "floordiv")
        else p
        for p, item in zip(parts, items)
    ]
    if op == "not":
        return f"not ({parts[0]})"
    if op in ("max", "min"):
        return f"{op}({', '.join(parts)})"
    return _INFIX[op].join(parts).replace("+ -1*", "- ")


@dataclasses.dataclass(frozen=True)
class SymDim:
    """A size torch left symbolic: ``expr`` over the capture's symbols."""

    expr: tuple

    def __str__(self) -> str:
        return text(self.expr)

    @property
    def symbol(self) -> str | None:
        """The symbol's name when the size is one symbol alone (an input's size)."""
        return self.expr[1] if self.expr[0] == "sym" else None


def concrete(shape, dims: dict) -> tuple:
    """``shape`` (ints and ``SymDim``\\ s) with ``dims``; an unbound symbol stays a
    ``SymDim``."""
    out = []
    for size in shape:
        if isinstance(size, SymDim):
            try:
                size = evaluate(size.expr, dims)
            except Unbound:
                pass
        out.append(size)
    return tuple(out)


def is_symbolic(shape) -> bool:
    return any(isinstance(size, SymDim) for size in shape)


def bind(shapes, dims: dict | None = None) -> dict:
    """``{symbol: size}`` from ``((symbolic shape, actual shape), ...)``: every size
    that is one symbol alone binds it (the first occurrence wins)."""
    dims = {} if dims is None else dims
    for shape, actual in shapes:
        for size, value in zip(shape, actual):
            if isinstance(size, SymDim) and size.symbol is not None:
                dims.setdefault(size.symbol, value)
    return dims


@dataclasses.dataclass(frozen=True)
class ShapeSpec:
    """What torch's program accepts of its inputs' sizes.

    Attributes:
      ranges: ``((symbol, low, high or None), ...)``: each symbol's value range.
      guards: ``((expr, why), ...)``: conditions torch recorded while capturing (a
        boolean expression and the torch check that recorded it).
      fixed: ``((symbol or "", why), ...)``: why torch fixed sizes the example had
        (the torch check that specialised them), for messages.
      static: empty when the capture kept dimensions dynamic; otherwise why every
        size is the example's (``dynamic_shapes=None`` asked for, or what the
        dynamic capture could not take).
      example: ``((symbol, size), ...)``: each symbol's size in the example (for what
        is decided once, at the example's shapes: the nnx twin's stock layers).
      first_only: non-empty when the caller kept only each input's first size dynamic
        (``dynamic_shapes="batch"``): why the other sizes are the example's.
    """

    ranges: tuple = ()
    guards: tuple = ()
    fixed: tuple = ()
    static: str = ""
    example: tuple = ()
    first_only: str = ""

    def check(self, where: str, input_meta, leaves) -> dict:
        """``{symbol: size}`` of these inputs, after checking every size; ``where``
        begins each message (``"BertModel.apply"``).

        Raises:
          ValueError: naming the input, the dimension and what torch's program needs.
        """
        seen = {}  # symbol -> "input 0 dim 2"
        dims: dict = {}
        for index, meta in input_meta:
            if not hasattr(meta, "shape"):
                continue
            actual = tuple(np.shape(leaves[index]))
            if len(actual) != len(meta.shape):
                raise ValueError(
                    f"{where}: input {index} has {len(actual)} dimensions "
                    f"{list(actual)}, the captured program takes {len(meta.shape)} "
                    f"({meta.describe()})."
                )
            for axis, (size, value) in enumerate(zip(meta.shape, actual)):
                if not isinstance(value, (int, np.integer)):
                    continue  # a jax.export dimension variable: the export checks it
                label = f"input {index} dim {axis}"
                if isinstance(size, int):
                    if value != size:
                        why = self.first_only if axis and self.first_only else (self._why_fixed())
                        raise ValueError(f"{where}: {label} must be {size}, got {value} ({why})")
                    continue
                symbol = size.symbol
                if symbol is not None and symbol not in dims:
                    dims[symbol], seen[symbol] = value, label
                    continue
                try:
                    expected = evaluate(size.expr, dims)
                except Unbound:
                    continue
                if expected != value:
                    same = seen.get(symbol, text(size.expr, lambda s: seen.get(s, s)))
                    raise ValueError(
                        f"{where}: {label} must equal {same} ({expected}: torch's "
                        f"program uses one size for both), got {value}."
                    )
        name = lambda symbol: seen.get(symbol, symbol)  # noqa: E731 - a one-line lookup
        for symbol, low, high in self.ranges:
            if symbol not in dims:
                continue
            value = dims[symbol]
            if value < low or (high is not None and value > high):
                bound = f">= {low}" if value < low else f"<= {high}"
                extra = (
                    " torch.export specialises sizes 0 and 1 (broadcasting treats them "
                    "apart), so a capture at a larger size takes sizes from 2 up: "
                    "convert with `from_torch(..., batch_one=True)` for a program of "
                    "batch 1 too, or with an example of this size."
                    if value < low and low == 2
                    else ""
                )
                raise ValueError(
                    f"{where}: {name(symbol)} must be {bound} for torch's captured "
                    f"program, got {value}.{extra}"
                )
        for expr, why in self.guards:
            try:
                ok = evaluate(expr, dims)
            except Unbound:
                continue
            if not ok:
                got = ", ".join(f"{name(s)} = {dims[s]}" for s in sorted(symbols(expr)))
                raise ValueError(
                    f"{where}: the inputs' sizes break a condition torch's program "
                    f"was captured under: {text(expr, name)} ({why}); got {got}."
                )
        return dims

    def _why_fixed(self) -> str:
        if self.static:
            return f"the model was captured at the example's shapes: {self.static}"
        reasons = sorted({why for _, why in self.fixed if why})
        checks = f" ({'; '.join(reasons)})" if reasons else ""
        return (
            f"torch.export fixed this size while capturing{checks}: the model's code "
            "needs it, e.g. a Linear's in_features after a flatten, or a branch on it"
        )


def as_json(value):
    """A shape or expression as JSON (tuples as lists, ``SymDim`` tagged)."""
    if isinstance(value, SymDim):
        return {"sym": as_json(value.expr)}
    if isinstance(value, tuple):
        return [as_json(v) for v in value]
    return value


def from_json(value):
    """The inverse of ``as_json``."""
    if isinstance(value, dict) and set(value) == {"sym"}:
        return SymDim(from_json(value["sym"]))
    if isinstance(value, list):
        return tuple(from_json(v) for v in value)
    return value


__all__ = [
    "SymDim",
    "ShapeSpec",
    "evaluate",
    "symbols",
    "text",
    "concrete",
    "bind",
    "is_symbolic",
    "as_json",
    "from_json",
    "Unbound",
]
