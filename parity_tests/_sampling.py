"""What the default run samples of a parametrization; the rest runs in CI's second command.

``one_in(every, params)`` keeps the first of each ``every`` consecutive params as they are
(the default run takes them) and marks the others ``exhaustive`` (or ``marker``), which
``pytest -m "exhaustive or long"`` runs (CI runs both commands, see ``.ci/run``). Nothing
is dropped: every param is still collected, with its id and its own marks.

Order a list so that a one-in-``every`` slice still varies every option (each family,
optimizer, loss, dtype) before thinning it.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from _pytest.mark.structures import ParameterSet


def one_in(every: int, params: Iterable, marker=pytest.mark.exhaustive) -> list:
    """The params with one in ``every`` left to the default run.

    Args:
        every: the stride, ``>= 1``; param ``i`` stays unmarked when ``i % every == 0``
            (the first, then every ``every``-th), ``1`` keeps them all.
        params: plain values (one argname), tuples (one value per argname, as
            ``parametrize("a,b", [(1, 2)])`` reads them; a single argname whose values
            are tuples passes them as ``pytest.param(value)``) or ``pytest.param``
            objects, whose ids and marks are kept, ``marker`` added to theirs.
        marker: the mark of those the default run leaves out (``pytest.mark.exhaustive``
            or ``pytest.mark.long``).

    Returns:
        a list for ``pytest.mark.parametrize``: the kept params unchanged, the others as
        ``pytest.param(*values, id=..., marks=[*their marks, marker])``.

    Raises:
        ValueError: ``every`` is not a positive integer.
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"`every` must be a positive integer, got {every!r}")
    out = []
    for i, param in enumerate(params):
        if i % every == 0:
            out.append(param)
        elif isinstance(param, ParameterSet):
            out.append(pytest.param(*param.values, id=param.id, marks=[*param.marks, marker]))
        elif isinstance(param, tuple):
            out.append(pytest.param(*param, marks=marker))
        else:
            out.append(pytest.param(param, marks=marker))
    return out
