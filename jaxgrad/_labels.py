"""Naming the leaves of a function's arguments for reports and drawings."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import jax


def leaf_labels(fn: Callable, args: Sequence) -> list[str]:
    """One label per leaf of ``args``: ``fn``'s parameter name plus the pytree path.

    >>> leaf_labels(lambda params, x: 0, ({"weight": 1.0}, 2.0))
    ["params['weight']", 'x']

    Arguments beyond the named positional parameters are ``args[i]``.
    """
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        parameters = []
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    labels = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        position = path[0].idx
        base = names[position] if position < len(names) else f"args[{position}]"
        labels.append(base + jax.tree_util.keystr(path[1:]))
    return labels
