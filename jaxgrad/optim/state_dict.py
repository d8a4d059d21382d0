"""torch's full ``optimizer.state_dict()`` from a jaxgrad optimizer state, and back.

torch's layout is ``{"state": {index: {field: tensor}}, "param_groups": [{hyper…,
"params": [index, …]}]}``: parameters are numbered in group order (every parameter of
the first group, then the second's…), each in the order the group lists them, and
each group carries every hyperparameter of its optimizer (torch's ``defaults`` with
the group's overrides). ``optimizer_state_dict`` writes that layout with numpy arrays
(``step`` a float32 0-d array, as torch keeps it); ``load_optimizer_state_dict`` reads
it into the state of a jaxgrad optimizer. With torch::

    sd = jaxgrad.optim.optimizer_state_dict(opt_state, params, jaxgrad.optim.adam, lr=1e-3)
    torch_optimizer.load_state_dict({
        "state": {i: {k: torch.from_numpy(v) for k, v in s.items()}
                  for i, s in sd["state"].items()},
        "param_groups": sd["param_groups"]})

The optimizer is described as ``param_groups`` describes it — the factory, its
keyword arguments and, for parameter groups, the same ``groups`` list — because an
optax transformation does not keep its hyperparameters. A scheduled ``lr`` (or
momentum / ``betas[0]``) is written as its value for the next step, as torch's group
holds it after as many ``scheduler.step()`` calls as steps taken; a ``OneCycleLR`` or
``CyclicLR`` schedule adds the entries torch's scheduler writes into each group
(``initial_lr``; OneCycleLR's ``max_lr``, ``min_lr``; ``max_momentum``,
``base_momentum``). Other schedulers' ``initial_lr`` is not known to a schedule and is
left out (torch's ``load_state_dict`` does not need it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.optim._args import value_at
from jaxgrad.optim.cycling import CyclingSchedule
from jaxgrad.optim.groups import group_order
from jaxgrad.optim.names import dotted_names
from jaxgrad.optim.state import (
    _STATE_TYPES,
    TORCH_FIELDS,
    _find_torch_states,
    _order_names,
    torch_style_state,
)


def _groups_of(params, groups) -> tuple[list[dict], list[list[str]]]:
    if groups is None:
        return [{}], [_order_names(params)]
    return list(groups), group_order(params, groups)


def _steps_taken(opt_state, count):
    if count is not None:
        return count
    for state in _find_torch_states(opt_state):
        return int(state.step)
    return None


def _group_entry(factory: Callable, options: dict, count) -> dict:
    parameters = inspect.signature(factory).parameters
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise TypeError(f"{factory.__name__} has no argument(s) {unknown}.")
    entry = {name: options.get(name, p.default) for name, p in parameters.items()}
    if getattr(factory, "__name__", "") == "adamw":  # torch's AdamW is Adam with this flag
        entry["decoupled_weight_decay"] = True
    scheduled = [name for name in ("lr", "momentum") if callable(entry.get(name))]
    if callable(entry.get("betas", (None,))[0]):
        scheduled.append("betas")
    if scheduled and count is None:
        raise ValueError(
            f"`count` is needed to write the scheduled {scheduled}: the "
            "optimizer state holds no step counter (plain SGD); pass count=."
        )
    for name in scheduled:
        value = entry[name]
        if name == "betas":
            entry[name] = (float(value_at(value[0], count)), value[1])
        else:
            entry[name] = float(value_at(value, count))
    if isinstance(entry["lr"], (jax.Array, np.ndarray)):
        entry["lr"] = np.asarray(entry["lr"])
    lr = options.get("lr")
    if isinstance(lr, CyclingSchedule):
        entry.update(lr.group_entries)
    return entry


def optimizer_state_dict(
    opt_state, params, optimizer: Callable, groups=None, *, count: int | None = None, **defaults
) -> dict[str, Any]:
    """torch's ``optimizer.state_dict()`` of a jaxgrad optimizer state.

    Args:
      opt_state: the optimizer's state (chains, ``freeze`` and ``param_groups`` included).
      params: the params dict, in torch's ``named_parameters()`` order (``init``,
        ``load_state_dict`` and ``from_torch`` keep it).
      optimizer: the factory the optimizer was built with (``jaxgrad.optim.adam``…).
      groups: the ``groups`` given to ``param_groups``, or None for one group.
      count: the steps taken; read from the state when it has a step counter.
      **defaults: the factory's keyword arguments (``param_groups``' ``defaults``).

    Returns:
      ``{"state": {index: {field: np.ndarray}}, "param_groups": [dict, …]}``.
    """
    group_list, members = _groups_of(params, groups)
    names = [name for group in members for name in group]
    count = _steps_taken(opt_state, count)
    fields = torch_style_state(opt_state, names)
    state = {}
    for index, name in enumerate(names):
        if name in fields:
            state[index] = {
                k: np.asarray(v, np.float32) if k == "step" else np.array(v)
                for k, v in fields[name].items()
            }
    param_groups, start = [], 0
    for group, group_names in zip(group_list, members):
        options = {**defaults, **{k: v for k, v in group.items() if k != "params"}}
        entry = _group_entry(optimizer, options, count)
        entry["params"] = list(range(start, start + len(group_names)))
        start += len(group_names)
        param_groups.append(entry)
    return {"state": state, "param_groups": param_groups}


def load_optimizer_state_dict(
    optimizer, params, state_dict, groups=None, *, count: int | None = None
):
    """The jaxgrad optimizer state holding a torch ``optimizer.state_dict()``.

    Args:
      optimizer: the jaxgrad optimizer (an optax transformation) to continue with.
      params: the params dict, in torch's order.
      state_dict: ``{"state": …, "param_groups": …}`` with numpy arrays or torch
        tensors (read by duck typing); the hyperparameters in ``param_groups`` are
        the optimizer's own and are not read, only each group's ``"params"``.
      groups: the ``groups`` given to ``param_groups``, or None for one group.
      count: the steps taken; read from torch's ``step`` when the state has one
        (every optimizer but SGD, whose state torch keeps without a step).

    Returns:
      ``optimizer.init(params)`` with torch's state in place, and the step count in
      every counter (the torch-rule states' ``step``, optax's schedule ``count``).

    Raises:
      ValueError: when the groups or the parameter count do not match, the steps
        differ between parameters or are unknown, a shape differs, or a state field
        torch holds has no place in the jaxgrad state.
    """
    _, members = _groups_of(params, groups)
    saved_groups = state_dict["param_groups"]
    if [len(g["params"]) for g in saved_groups] != [len(m) for m in members]:
        raise ValueError(
            f"`state_dict` has groups of {[len(g['params']) for g in saved_groups]} "
            f"parameters; the optimizer's groups have {[len(m) for m in members]}."
        )
    index_of: dict[str, int] = {}
    for saved, group_names in zip(saved_groups, members):
        index_of.update(zip(group_names, saved["params"]))
    saved_state = {
        index: {k: _numpy(v) for k, v in entry.items()}
        for index, entry in state_dict["state"].items()
    }
    steps = {int(entry["step"]) for entry in saved_state.values() if "step" in entry}
    if len(steps) > 1:
        raise ValueError(
            f"`state_dict` parameters have different `step` counts {sorted(steps)}; "
            "a jaxgrad optimizer takes its steps for all parameters at once."
        )
    if count is None:
        if not steps and saved_state:
            raise ValueError(
                "`count` (the steps taken) is needed: torch's SGD state keeps "
                "no `step`; pass count=."
            )
        count = steps.pop() if steps else 0
    used = set()

    def take(name, field, leaf):
        entry = saved_state.get(index_of.get(name), {})
        if field not in entry:
            return leaf
        used.add((index_of[name], field))
        value = entry[field]
        if tuple(value.shape) != tuple(leaf.shape):
            raise ValueError(
                f"`state_dict['state'][{index_of[name]}]['{field}']` has shape "
                f"{tuple(value.shape)}; parameter {name!r} has "
                f"{tuple(leaf.shape)}."
            )
        return jnp.asarray(value, leaf.dtype)

    def fill(node):
        if isinstance(node, tuple(_STATE_TYPES)):
            updates = {
                field: jax.tree.map(
                    lambda name, leaf, field=field: take(name, field, leaf),
                    dotted_names(getattr(node, field)),
                    getattr(node, field),
                )
                for field in TORCH_FIELDS
                if getattr(node, field, None) is not None
            }
            return node._replace(step=jnp.asarray(count, node.step.dtype), **updates)
        if hasattr(node, "_fields"):  # optax states: the schedule's `count` too
            children = [fill(child) for child in node]
            rebuilt = type(node)(*children)
            if "count" in node._fields:
                rebuilt = rebuilt._replace(count=jnp.asarray(count, node.count.dtype))
            return rebuilt
        if isinstance(node, (tuple, list)):
            return type(node)(fill(child) for child in node)
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        return node

    opt_state = fill(optimizer.init(params))
    left = sorted(
        (i, f) for i, e in saved_state.items() for f in e if f != "step" and (i, f) not in used
    )
    if left:
        raise ValueError(
            f"`state_dict` fields {left} (index, field) have no place in this "
            "optimizer's state: is it the same optimizer with the same options?"
        )
    return opt_state


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor, duck-typed
        value = value.detach().cpu().numpy()
    return np.asarray(value)
