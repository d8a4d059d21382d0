"""torch's parameter groups, chosen by parameter-name patterns.

torch writes ``AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
lr=1e-3)``; jaxgrad writes::

    param_groups(adamw, [{"params": ["*.bias", "*norm*"], "weight_decay": 0.0},
                         {}],  # every other parameter
                 lr=1e-3)

Each group is a dict: ``"params"`` is a glob pattern (``fnmatch`` on the dotted name,
``"0.weight"``, ``"encoder.*.bias"``) or a list of them, and every other key overrides
the factory's keyword arguments for that group. At most one group may leave
``"params"`` out: it takes every parameter no other group selects. The result is an
``optax.multi_transform``; each group keeps its own state, readable together with
``torch_style_state`` (pass ``order=group_order(params, groups)`` for torch's order,
which lists the parameters group by group).

Errors, all at ``init`` (the first time the parameter names are known): a pattern
that matches no parameter, a parameter selected by two groups (torch: "some
parameters appear in more than one parameter group"), and a parameter selected by
no group when there is no catch-all group (torch would silently never update it).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

import jax
import optax

from jaxgrad.optim.names import dotted_names


def _patterns(group: dict, index: int):
    if "params" not in group or group["params"] is None:
        return None
    patterns = group["params"]
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str) for p in patterns):
        raise TypeError(
            f"`groups[{index}]['params']` (={group['params']!r}) must be a name "
            "pattern or a list of name patterns."
        )
    return list(patterns)


def _check_groups(groups) -> list[list[str] | None]:
    if not isinstance(groups, (list, tuple)) or not groups:
        raise TypeError(f"`groups` (={groups!r}) must be a non-empty list of dicts.")
    patterns = []
    for index, group in enumerate(groups):
        if not isinstance(group, dict):
            raise TypeError(f"`groups[{index}]` (={group!r}) must be a dict.")
        patterns.append(_patterns(group, index))
    rest = [i for i, p in enumerate(patterns) if p is None]
    if len(rest) > 1:
        raise ValueError(
            f"`groups` {rest} all leave out 'params'; at most one group may "
            "take the remaining parameters."
        )
    return patterns


def group_order(params, groups) -> list[list[str]]:
    """The dotted parameter names of each group, in ``params``' order.

    Args:
      params: the parameters (flat torch-keyed dict, or a nested pytree).
      groups: the groups, as ``param_groups`` takes them.

    Returns:
      One list of names per group, in the order of ``groups``.

    Raises:
      ValueError: for a pattern matching nothing, a name in two groups, or a name in
        no group without a catch-all group.
    """
    patterns = _check_groups(groups)
    names = (
        list(params)
        if isinstance(params, dict) and not any(isinstance(v, dict) for v in params.values())
        else jax.tree.leaves(dotted_names(params))
    )
    members: list[list[str]] = [[] for _ in groups]
    owner: dict[str, int] = {}
    for index, group_patterns in enumerate(patterns):
        if group_patterns is None:
            continue
        for pattern in group_patterns:
            matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
            if not matched:
                raise ValueError(
                    f"`groups[{index}]` pattern {pattern!r} matches no parameter; "
                    f"parameter names are {names}."
                )
        for name in names:
            if any(fnmatch.fnmatchcase(name, p) for p in group_patterns):
                if name in owner and owner[name] != index:
                    raise ValueError(
                        f"parameter {name!r} is selected by `groups[{owner[name]}]` and "
                        f"`groups[{index}]`; a parameter may appear in one group only."
                    )
                owner[name] = index
                members[index].append(name)
    rest = [i for i, p in enumerate(patterns) if p is None]
    unassigned = [n for n in names if n not in owner]
    if rest:
        members[rest[0]] = unassigned
    elif unassigned:
        raise ValueError(
            f"parameters {unassigned} are in no group; add a group without "
            "'params' to take them (torch would never update them)."
        )
    return members


def param_groups(
    optimizer: Callable[..., optax.GradientTransformation], groups, **defaults
) -> optax.GradientTransformation:
    """``optimizer(**defaults | group)`` for each group's parameters.

    Args:
      optimizer: a factory taking torch's keyword arguments (``jaxgrad.optim.adamw``…).
      groups: a list of dicts, see the module docstring.
      **defaults: the factory's arguments shared by every group (torch's
        ``defaults``), e.g. ``lr=1e-3``.

    Returns:
      An optax transformation; ``init`` validates the groups against the params.

    Raises:
      TypeError: an ``optimizer`` that is not a factory, or a malformed group.
      ValueError: at ``init``, as ``group_order``.
    """
    if not callable(optimizer):
        raise TypeError(
            f"`optimizer` (={optimizer!r}) must be an optimizer factory such "
            "as jaxgrad.optim.adamw."
        )
    _check_groups(groups)
    transforms = {}
    for index, group in enumerate(groups):
        options = {**defaults, **{k: v for k, v in group.items() if k != "params"}}
        try:
            transforms[f"group{index}"] = optimizer(**options)
        except TypeError as error:
            raise TypeError(f"`groups[{index}]`: {error}") from None

    def labels(params):
        members = group_order(params, groups)
        label_of = {name: f"group{i}" for i, names in enumerate(members) for name in names}
        return jax.tree.map(lambda name: label_of[name], dotted_names(params))

    return optax.multi_transform(transforms, labels)
