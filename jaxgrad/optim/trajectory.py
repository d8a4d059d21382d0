"""Run an optax optimizer for N steps under ``lax.scan``, recording what torch records.

The twin of ``torchref.optim.optimizer_trajectory``: the same loop (gradient, update,
apply) with the parameters and the torch-named optimizer state of every step stacked
along a leading axis, ready for ``jaxgrad.parity.compare``, or for
``compare_trajectory``, which judges a float32 trajectory step by step against the
reference's own float32 rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgrad._arrays import to_numpy
from jaxgrad.optim.state import torch_style_state
from jaxgrad.parity import ParityReport, compare


def optimizer_trajectory(
    optimizer: optax.GradientTransformation,
    loss_fn: Callable,
    params,
    steps: int,
    *,
    jit: bool = True,
) -> dict:
    """``steps`` steps of ``optimizer`` on ``loss_fn(params) -> scalar``.

    Args:
      optimizer: an optax transformation (``jaxgrad.optim.adam(...)``…).
      loss_fn: ``loss_fn(params) -> scalar``.
      params: the starting parameters.
      steps: how many optimizer steps, ≥ 1.
      jit: ``True`` runs one compiled ``lax.scan``; ``False`` runs step by step, eagerly.

    Returns:
      ``{"loss": (steps,), "params": pytree of (steps, *shape),
      "state": {name: {field: (steps, *shape)}}}``; ``loss`` is the loss before each
      step, ``state`` comes from ``torch_style_state`` without the step counter.

    Raises:
      ValueError: ``steps`` that is not an int ≥ 1.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` (={steps!r}) must be an int >= 1.")
    value_and_grad = jax.value_and_grad(loss_fn)

    def step(carry, _):
        params, opt_state = carry
        loss, grads = value_and_grad(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), (loss, params, opt_state)

    def run(params):
        _, history = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
        return history

    def run_eagerly(params):
        # op by op, no compilation: faster than tracing a scan for a few steps
        carry, history = (params, optimizer.init(params)), []
        for _ in range(steps):
            carry, record = step(carry, None)
            history.append(record)
        return jax.tree.map(lambda *xs: jnp.stack(xs), *history)

    losses, param_history, state_history = (jax.jit(run) if jit else run_eagerly)(params)
    state = {
        name: {k: v for k, v in fields.items() if k != "step"}
        for name, fields in torch_style_state(state_history).items()
    }
    return {"loss": losses, "params": param_history, "state": state}


def _steps(tree, path: str) -> int:
    lengths = {
        np.shape(to_numpy(leaf))[0] if np.ndim(to_numpy(leaf)) else None
        for leaf in jax.tree_util.tree_leaves(tree)
    }
    if len(lengths) != 1 or None in lengths:
        raise ValueError(
            f"`{path}` must stack every leaf along one leading step axis (as "
            f"`optimizer_trajectory` returns it); got leading lengths {sorted(map(str, lengths))}."
        )
    (length,) = lengths
    assert length is not None  # refused above
    return length


def _step(tree, index: int):
    return jax.tree_util.tree_map(lambda leaf: to_numpy(leaf)[index], tree)


def compare_trajectory(
    reference, candidate, *, reference64=None, name: str = "", **options
) -> ParityReport:
    """Compare two trajectories step by step: each step's leaves judged on their own.

    Every leaf holds the steps along its leading axis (``optimizer_trajectory``'s and
    ``torchref.optim.optimizer_trajectory``'s layout). Each step is compared as its own
    pytree, ``{"step 1": ..., "step 2": ...}``, so each step's float32 tolerance is
    scaled by that step's values and, with ``reference64``, each step's float32 leaf is
    held to that step of the float64 run (``jaxgrad.parity.compare``'s calibrated rule):
    a float32 trajectory drifts from float64 as it runs, the reference's as much as
    the candidate's, and both are judged against the same exact answer at each step.

    Args:
      reference: the trusted trajectory (torch's), leaves `(steps, *shape)`.
      candidate: the trajectory under test, the same structure.
      reference64: the reference trajectory computed in float64 from the same starting
        values (the float32 weights and batch cast up), or None.
      name: a label carried into the report.
      **options: passed to ``compare``: ``rtol``, ``atol``, ``computed_in`` (a tier
        for every leaf: per-leaf paths gain the ``['step k']`` prefix).

    Returns:
      A ``ParityReport`` whose leaf paths start with ``['step k']`` (k from 1).

    Raises:
      ValueError: a tree whose leaves do not share one leading step axis, or two
        trajectories of different lengths; a bad ``reference64`` (as ``compare``).
    """
    steps = _steps(reference, "reference")
    for tree, label in ((candidate, "candidate"), (reference64, "reference64")):
        if tree is not None and _steps(tree, label) != steps:
            raise ValueError(f"`{label}` has {_steps(tree, label)} steps, the reference {steps}.")

    def by_step(tree):
        return None if tree is None else {f"step {k + 1}": _step(tree, k) for k in range(steps)}

    return compare(
        by_step(reference),
        by_step(candidate),
        reference64=by_step(reference64),
        name=name,
        **options,
    )
