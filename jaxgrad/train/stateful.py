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
- ``StatefulTrainer``: epochs of the fused step on numpy data, the same batches as
  ``torchref.train.TorchTrainer`` (what ``scripts/train.py --model cnn|resnet`` runs).
"""

from __future__ import annotations

import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgrad.data import batch_indices
from jaxgrad.optim import global_norm
from jaxgrad.train.loop import EpochResult


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
                              donate: bool = True, unroll: int | bool = 1) -> Callable:
    """A jitted ``(params, buffers, opt_state, (xs, ys), key) -> (params, buffers,
    opt_state, metrics)`` over batches stacked `(steps, batch, *)`, with
    ``jax.lax.scan``; step ``i`` gets ``fold_in(key, i)``; metrics gain a `(steps,)` axis.

    ``unroll`` is ``lax.scan``'s: on XLA's CPU backend, convolutions inside a rolled
    loop ran about 6× slower than the same step called once per batch (measured on the
    ResNet of ``torchref.models``; partial unrolling did not help); ``unroll=True``
    removes the loop at the price of a compilation that grows with the step count."""
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
            body, (params, buffers, opt_state), (indices, xs, ys), unroll=unroll)
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


class StatefulTrainer:
    """Epochs of a model with buffers, one fused ``lax.scan`` call per epoch.

    The buffer-threading counterpart of ``jaxgrad.train.Trainer`` (without its
    checkpoints, accumulation, clipping or sharding): the same batches
    (``jaxgrad.data.batch_indices`` with ``seed`` and the epoch, full batches only)
    as ``torchref.train.TorchTrainer``, so both frameworks see the same data.

    Attributes:
      params, buffers, opt_state: the current state (replaced after every epoch).
      epoch, global_step: epochs and steps done.
    """

    def __init__(self, model, loss_fn: Callable, optimizer: optax.GradientTransformation,
                 params, buffers, *, batch_size: int, seed: int = 0):
        self.model, self.loss_fn, self.batch_size, self.seed = model, loss_fn, batch_size, seed
        self.params, self.buffers = dict(params), dict(buffers)
        self.opt_state = optimizer.init(self.params)
        self.epoch = self.global_step = 0
        self._epoch = make_stateful_train_epoch(model, loss_fn, optimizer)

    def train_epoch(self, x, y, *, on_steps: Callable | None = None):
        """One epoch over ``(x, y)`` (numpy); returns a ``jaxgrad.train.EpochResult``."""
        batches = batch_indices(len(x), self.batch_size, seed=self.seed, epoch=self.epoch,
                                drop_last=True)
        if not batches:
            raise ValueError(f"{len(x)} training examples make no full batch of "
                             f"{self.batch_size}.")
        idx = np.stack(batches)
        began = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(self.seed), self.epoch)
        self.params, self.buffers, self.opt_state, metrics = self._epoch(
            self.params, self.buffers, self.opt_state, (jnp.asarray(x[idx]), jnp.asarray(y[idx])),
            key)
        losses = np.asarray(metrics["loss"], np.float32)
        seconds = time.perf_counter() - began
        if not np.all(np.isfinite(losses)):
            step = self.global_step + int(np.argmin(np.isfinite(losses))) + 1
            raise FloatingPointError(f"non-finite loss at step {step} (epoch {self.epoch + 1}).")
        self.global_step += len(batches)
        if on_steps is not None:
            on_steps(self.global_step, losses)
        result = EpochResult(self.epoch, len(batches), losses, seconds,
                             len(batches) * self.batch_size)
        self.epoch += 1
        return result

    def evaluate(self, x, y) -> dict:
        return evaluate_stateful(self.model, self.params, self.buffers, x, y, loss_fn=self.loss_fn)

    def state_dict_numpy(self) -> dict:
        """Params and buffers in torch's order; integer counters as torch's int64."""
        state = self.model.state_dict(self.params, self.buffers)
        return {k: v.astype(np.int64) if np.issubdtype(v.dtype, np.integer) else v
                for k, v in state.items()}
