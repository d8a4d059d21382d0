"""Run an optax optimizer for N steps under ``lax.scan``, recording what torch records.

The twin of ``torchref.optim.optimizer_trajectory``: the same loop (gradient, update,
apply) with the parameters and the torch-named optimizer state of every step stacked
along a leading axis, ready for ``jaxgrad.parity.compare``.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim.state import torch_style_state


def optimizer_trajectory(optimizer: optax.GradientTransformation,
                         loss_fn: Callable, params, steps: int, *, jit: bool = True) -> dict:
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
    state = {name: {k: v for k, v in fields.items() if k != "step"}
             for name, fields in torch_style_state(state_history).items()}
    return {"loss": losses, "params": param_history, "state": state}
