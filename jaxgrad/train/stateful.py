"""Training steps for models with buffers (BatchNorm) or randomness (Dropout).

The twin of ``jaxgrad.train.step`` for models whose ``apply`` needs ``buffers`` and a
``key``. A step is one pure function

    ``(params, buffers, opt_state, batch, key) -> (params, buffers, opt_state, metrics)``

— torch's ``module.train(); loss = loss_fn(module(x), y); loss.backward();
optimizer.step()``, where the forward also updates the running statistics: the
buffers returned by the training-mode forward become the next step's buffers.
Gradients are taken with respect to ``params`` only, as torch's buffers get none.

- ``batch`` is ``(x, y)``; ``key`` a ``jax.random`` key for this step (dropout masks;
  layers derive their own from it by path); ``metrics`` is ``{"loss", "grad_norm"}``.
- ``make_stateful_train_epoch`` scans a stack of batches in one compiled call, the
  step's key being ``fold_in(key, step index)``.
- ``evaluate_stateful``: evaluation mode (running statistics, no dropout).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from jaxgrad.optim import global_norm


def stateful_step_fn(model, loss_fn: Callable, optimizer: optax.GradientTransformation):
    """The un-jitted step (see the module docstring)."""

    def objective(params, buffers, batch, key):
        x, y = batch
        outputs, new_buffers = model.apply(params, x, buffers=buffers, train=True, key=key)
        return loss_fn(outputs, y), new_buffers

    def step(params, buffers, opt_state, batch, key):
        (loss, buffers), grads = jax.value_and_grad(objective, has_aux=True)(
            params, buffers, batch, key)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, buffers, opt_state, {"loss": loss, "grad_norm": global_norm(grads)}

    return step


def make_stateful_train_step(model, loss_fn: Callable, optimizer: optax.GradientTransformation,
                             *, jit: bool = True, donate: bool = True) -> Callable:
    """A jitted ``(params, buffers, opt_state, (x, y), key) -> (params, buffers,
    opt_state, metrics)``; ``params``, ``buffers`` and ``opt_state`` are donated."""
    step = stateful_step_fn(model, loss_fn, optimizer)
    if not jit:
        return step
    return jax.jit(step, donate_argnums=(0, 1, 2) if donate else ())


def make_stateful_train_epoch(model, loss_fn: Callable,
                              optimizer: optax.GradientTransformation, *,
                              donate: bool = True) -> Callable:
    """A jitted ``(params, buffers, opt_state, (xs, ys), key) -> (params, buffers,
    opt_state, metrics)`` over batches stacked `(steps, batch, *)`, with
    ``jax.lax.scan``; step ``i`` gets ``fold_in(key, i)``; metrics gain a `(steps,)` axis."""
    step = stateful_step_fn(model, loss_fn, optimizer)

    def epoch(params, buffers, opt_state, batches, key):
        xs, ys = batches

        def body(carry, inputs):
            index, x, y = inputs
            params, buffers, opt_state, metrics = step(*carry, (x, y),
                                                       jax.random.fold_in(key, index))
            return (params, buffers, opt_state), metrics

        indices = jnp.arange(xs.shape[0])
        (params, buffers, opt_state), metrics = jax.lax.scan(
            body, (params, buffers, opt_state), (indices, xs, ys))
        return params, buffers, opt_state, metrics

    return jax.jit(epoch, donate_argnums=(0, 1, 2) if donate else ())


def evaluate_stateful(model, params, buffers, x, y, *, loss_fn: Callable,
                      batch_size: int = 1024) -> dict:
    """Mean loss and accuracy in evaluation mode (running statistics, no dropout).

    Args:
      x: inputs `(n, *features)`; y: integer labels `(n,)`.

    Returns:
      ``{"loss": float, "accuracy": float in [0, 1], "examples": n}``.
    """
    n = len(x)
    if n == 0:
        raise ValueError("evaluate_stateful: `x` is empty.")

    @jax.jit
    def batch_metrics(params, buffers, x, y):
        outputs, _ = model.apply(params, x, buffers=buffers)
        return loss_fn(outputs, y) * x.shape[0], jnp.sum(jnp.argmax(outputs, -1) == y)

    total_loss, total_correct = 0.0, 0
    for start in range(0, n, batch_size):
        loss_sum, correct = batch_metrics(params, buffers, jnp.asarray(x[start:start + batch_size]),
                                          jnp.asarray(y[start:start + batch_size]))
        total_loss += float(loss_sum)
        total_correct += int(correct)
    return {"loss": total_loss / n, "accuracy": total_correct / n, "examples": n}
