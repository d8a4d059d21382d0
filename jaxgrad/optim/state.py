"""Reading optimizer state back in torch's layouts.

Every jaxgrad torch-rule transform keeps its state in a NamedTuple whose fields carry
torch's names (``exp_avg``, ``sum``, ``mu_product``…), each a pytree shaped like the
params. ``torch_style_state`` gathers them into ``{param name: {field: array}}``
(torch's ``optimizer.state[p]``), in torch's parameter order when given the params;
``torch_state_dict`` gives torch's ``optimizer.state_dict()["state"]`` layout, keyed by
the parameter's index.

JAX flattens dicts in sorted-key order, so the state itself cannot remember the
order in which torch's ``named_parameters()`` lists the parameters: pass the params
dict (``model.init`` / ``load_state_dict`` / ``from_torch`` keep torch's order) or the
list of names as ``order``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax

from jaxgrad.optim.names import dotted_names

TORCH_FIELDS = (
    "momentum_buffer",
    "exp_avg",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "square_avg",
    "grad_avg",
    "sum",
    "exp_inf",
    "mu_product",
    "eta",
    "mu",
    "ax",
    "acc_delta",
    "prev",
    "step_size",
    "row_var",
    "col_var",
    "variance",
)
_STATE_TYPES: list[type] = []
_WITHOUT_STEP: set[type] = set()
_WHOLE_STATES: dict[type, Any] = {}


def register_whole_state(cls: type, torch_view) -> None:
    """Mark a NamedTuple state that torch keeps whole under its first parameter
    (LBFGS: flat vectors and lists, not trees shaped like the params);
    ``torch_view(state) -> {field: value}`` gives torch's entry."""
    _STATE_TYPES.append(cls)
    _WITHOUT_STEP.add(cls)
    _WHOLE_STATES[cls] = torch_view


def register_state(cls: type | None = None, *, torch_step: bool = True):
    """Mark a NamedTuple state class (fields ``step`` + torch names) as torch-readable.

    ``torch_step=False`` for a state whose torch twin keeps no ``step`` (SGD's).
    """

    def register(cls):
        _STATE_TYPES.append(cls)
        if not torch_step:
            _WITHOUT_STEP.add(cls)
        return cls

    return register if cls is None else register(cls)


def _find_torch_states(opt_state) -> list:
    found = []

    def visit(node):
        if isinstance(node, tuple(_STATE_TYPES)):
            found.append(node)
        elif isinstance(node, (tuple, list)):
            for child in node:
                visit(child)
        elif isinstance(node, dict):
            for child in node.values():
                visit(child)
        elif hasattr(node, "_fields"):  # other optax NamedTuples, e.g. multi_transform
            for child in node:
                visit(child)
        elif hasattr(node, "inner_state"):
            visit(node.inner_state)

    visit(opt_state)
    return found


def _order_names(order) -> list[str]:
    if isinstance(order, dict):
        return (
            jax.tree.leaves(dotted_names(order))
            if any(isinstance(v, dict) for v in order.values())
            else list(order)
        )
    if isinstance(order, str) or not isinstance(order, Iterable):
        raise TypeError(f"`order` (={order!r}) must be the params dict or a list of names.")
    return list(order)


def torch_style_state(opt_state, order=None) -> dict[str, dict[str, Any]]:
    """``{param name: {"step": …, "exp_avg": …, …}}``, the layout of torch's ``optimizer.state``.

    Args:
      opt_state: the optimizer state (any nesting: chains, ``freeze``, param groups).
      order: the params dict, or the parameter names in torch's order; without it
        the names come in JAX's sorted order.

    Parameters that hold no state (frozen ones under ``freeze``; all of them for plain
    SGD without momentum, like torch's ``momentum_buffer=None``) are left out.

    Returns:
      ``{dotted param name: {field: array}}``, fields named as torch names them.

    Raises:
      ValueError: when ``order`` misses a name that has state, or is missing for a
        state torch keeps whole under the first parameter (``lbfgs``).
    """
    result: dict[str, dict[str, Any]] = {}
    for state in _find_torch_states(opt_state):
        if type(state) in _WHOLE_STATES:
            if order is None:
                raise ValueError(
                    "`order` is needed: this optimizer's state (torch keeps it "
                    "whole under the first parameter) is not shaped like the "
                    "params; pass the params dict or the names."
                )
            first = _order_names(order)[0]
            result[first] = _WHOLE_STATES[type(state)](state)
            continue
        for field in TORCH_FIELDS:
            tree = getattr(state, field, None)
            if tree is None:
                continue
            names = dotted_names(tree)
            for name, leaf in zip(jax.tree.leaves(names), jax.tree.leaves(tree)):
                entry = result.setdefault(name, {})
                if type(state) not in _WITHOUT_STEP:
                    entry["step"] = state.step
                entry[field] = leaf
    if order is None:
        return result
    names = _order_names(order)
    missing = sorted(set(result) - set(names))
    if missing:
        raise ValueError(
            f"`order` lacks {missing}, which hold optimizer state; `order` has {names}."
        )
    return {name: result[name] for name in names if name in result}


def torch_state_dict(opt_state, params) -> dict[int, dict[str, Any]]:
    """torch's ``optimizer.state_dict()["state"]``: ``{index: {field: array}}``.

    ``index`` is the parameter's position in ``params`` (torch's
    ``named_parameters()`` order, which ``from_torch`` and ``init`` keep).

    Args:
      opt_state: the optimizer state (any nesting: chains, ``freeze``, param groups).
      params: the params dict, or the parameter names in torch's order.

    Returns:
      ``{index: {field: array}}`` for the parameters that hold state.

    Raises:
      TypeError: ``params`` that is neither a dict nor a list of names.
    """
    names = _order_names(params)
    state = torch_style_state(opt_state, names)
    return {index: state[name] for index, name in enumerate(names) if name in state}
