"""A captured node's arguments: ``Ref`` (another node's value), ``SliceArg``, ``DictArg``.

Both front ends (``fx``'s ``Node``, ``export``'s ``OpNode``) store a call's arguments
as hashable tuples of these, and the program interpreter (``program.run``), its
regions and the doctor read them: the types live here, below all of them.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Ref:
    """An argument that is the value of the node called ``name``."""

    name: str


@dataclasses.dataclass(frozen=True)
class SliceArg:
    """A ``slice`` (unhashable before Python 3.12) inside a node's arguments."""

    start: Any
    stop: Any
    step: Any


@dataclasses.dataclass(frozen=True)
class DictArg:
    """A ``dict`` inside a node's arguments or output, as ``((key, value), ...)``."""

    items: tuple


__all__ = ["Ref", "SliceArg", "DictArg"]
