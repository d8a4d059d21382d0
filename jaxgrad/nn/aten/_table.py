"""The ATen table itself: ``OPS``, ``register`` and ``lookup`` (the families below it
register into it; ``jaxgrad.nn.aten`` re-exports it, see its docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class AtenOp(NamedTuple):
    fn: Callable  # fn(*args, **kwargs), or fn(draw, *args, **kwargs) for a random op
    sample: Callable | None = None  # random ops: sample(key, *args, **kwargs) -> draw


OPS: dict[str, AtenOp] = {}


def register(*names: str, sample: Callable | None = None, replace: bool = False):
    """Decorator: ``fn`` implements the ATen overloads ``names``.

    Args:
      names: ``"aten.add.Tensor"``, ``"aten.relu.default"``…
      sample: for a random op, ``sample(key, *args, **kwargs) -> draw``.
      replace: allow replacing an entry that exists (refused otherwise, so two
        modules cannot silently define the same op twice).
    """

    def decorate(fn):
        for name in names:
            if name in OPS and not replace:
                raise ValueError(
                    f"register: {name!r} is already in the ATen table "
                    f"({OPS[name].fn.__module__}.{OPS[name].fn.__qualname__}); pass "
                    "`replace=True` to replace it."
                )
            OPS[name] = AtenOp(fn, sample)
        return fn

    return decorate


def lookup(name: str) -> AtenOp | None:
    """The entry for ``name`` (``"aten.add.Tensor"``), or None."""
    return OPS.get(name)


def supported() -> list[str]:
    """Every overload in the table, sorted."""
    return sorted(OPS)


__all__ = ["AtenOp", "OPS", "register", "lookup", "supported"]
