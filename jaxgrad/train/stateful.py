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
- ``StatefulTrainer``: epochs on numpy data, the same batches as
  ``torchref.train.TorchTrainer`` (what ``scripts/train.py --model cnn|resnet`` runs),
  under an execution strategy (``jaxgrad.train.strategy``): one fused scan per epoch
  (``"epoch"``, the default), ``"unroll:K"``, ``"unrolled"``, one jitted step per batch
  (``"step"``), or ``"auto"`` (probed). Step ``i`` of an epoch gets
  ``fold_in(epoch key, i)`` under every strategy, so all draw the same randomness.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgrad.data import batch_indices
from jaxgrad.nn.functional._lowering import in_loop
from jaxgrad.optim import global_norm
from jaxgrad.optim.freezing import freeze_untrained
from jaxgrad.train import strategy as strategies
from jaxgrad.train.loop import EpochResult, _requested_strategy


def stateful_step_fn(model, loss_fn: Callable, optimizer: optax.GradientTransformation):
    """The un-jitted step (see the module docstring)."""

    def objective(params, buffers, batch, key):
        x, y = batch
        outputs, new_buffers = model.apply(params, x, buffers=buffers, train=True, key=key)
        return loss_fn(outputs, y), new_buffers

    def step(params, buffers, opt_state, batch, key):
        (loss, buffers), grads = jax.value_and_grad(objective, has_aux=True)(
            params, buffers, batch, key
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, buffers, opt_state, {"loss": loss, "grad_norm": global_norm(grads)}

    return step


def make_stateful_train_step(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    jit: bool = True,
    donate: bool = True,
) -> Callable:
    """A jitted ``(params, buffers, opt_state, (x, y), key) -> (params, buffers,
    opt_state, metrics)``; ``params``, ``buffers`` and ``opt_state`` are donated."""
    step = stateful_step_fn(model, loss_fn, optimizer)
    if not jit:
        return step
    return jax.jit(step, donate_argnums=(0, 1, 2) if donate else ())


def make_stateful_train_epoch(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    donate: bool = True,
    unroll: int | bool = 1,
) -> Callable:
    """A jitted ``(params, buffers, opt_state, (xs, ys), key) -> (params, buffers,
    opt_state, metrics)`` over batches stacked `(steps, batch, *)`, with
    ``jax.lax.scan``; step ``i`` gets ``fold_in(key, i)``; metrics gain a `(steps,)` axis.

    ``unroll`` is ``lax.scan``'s (True: no loop, at the price of a compilation that
    grows with the step count). On XLA's CPU backend a convolution inside a rolled loop
    body is not canonicalised and ran the ResNet of ``torchref.models`` 4–5× slower;
    convolutions traced in the rolled loop are lowered as patches and a matrix product
    instead (``jaxgrad.nn.functional._lowering``)."""
    step = stateful_step_fn(model, loss_fn, optimizer)

    def epoch(params, buffers, opt_state, batches, key):
        xs, ys = batches

        def body(carry, inputs):
            index, x, y = inputs
            params, buffers, opt_state, metrics = step(
                *carry, (x, y), jax.random.fold_in(key, index)
            )
            return (params, buffers, opt_state), metrics

        indices = jnp.arange(xs.shape[0])
        with in_loop(unroll is not True):  # convolutions in a rolled loop: patches
            (params, buffers, opt_state), metrics = jax.lax.scan(
                body, (params, buffers, opt_state), (indices, xs, ys), unroll=unroll
            )
        return params, buffers, opt_state, metrics

    return jax.jit(epoch, donate_argnums=(0, 1, 2) if donate else ())


def evaluate_stateful(
    model, params, buffers, x, y, *, loss_fn: Callable, batch_size: int = 1024
) -> dict:
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
        loss_sum, correct = batch_metrics(
            params,
            buffers,
            jnp.asarray(x[start : start + batch_size]),
            jnp.asarray(y[start : start + batch_size]),
        )
        total_loss += float(loss_sum)
        total_correct += int(correct)
    return {"loss": total_loss / n, "accuracy": total_correct / n, "examples": n}


class StatefulTrainer:
    """Epochs of a model with buffers, under an execution strategy (default: one fused
    ``lax.scan`` call per epoch).

    The buffer-threading counterpart of ``jaxgrad.train.Trainer`` (without its
    checkpoints, accumulation, clipping or sharding): the same batches
    (``jaxgrad.data.batch_indices`` with ``seed`` and the epoch, full batches only)
    as ``torchref.train.TorchTrainer``, so both frameworks see the same data.

    Args:
      model, loss_fn, optimizer: as ``make_stateful_train_step``.
      params, buffers: the initial state (flat dicts, torch keys).
      batch_size: examples per step; seed: the data-order and dropout seed.
      strategy: ``"epoch"`` (default), ``"step"``, ``"unroll:K"``, ``"unrolled"`` or
        ``"auto"`` (``jaxgrad.train.strategy``; resolved by ``choose_strategy``).
      total_steps: the run's planned steps for ``"auto"``'s cost model (None: one epoch).
      strategy_cache: let ``"auto"`` read and write its probe cache.

    Attributes:
      params, buffers, opt_state: the current state (replaced after every epoch).
      epoch, global_step: epochs and steps done.
      strategy_choice: the ``Choice`` in use (None until ``"auto"`` has chosen).
    """

    def __init__(
        self,
        model,
        loss_fn: Callable,
        optimizer: optax.GradientTransformation,
        params,
        buffers,
        *,
        batch_size: int,
        seed: int = 0,
        strategy: str = "epoch",
        total_steps: int | None = None,
        strategy_cache: bool = True,
    ):
        self.model, self.loss_fn, self.batch_size, self.seed = model, loss_fn, batch_size, seed
        # torch's loop never steps a parameter left without .grad: nor does this one
        optimizer = freeze_untrained(optimizer, model)
        self.optimizer = optimizer
        # copies: the steps donate their inputs, and the caller's arrays must survive
        self.params, self.buffers = jax.tree_util.tree_map(jnp.array, (dict(params), dict(buffers)))
        self.opt_state = optimizer.init(self.params)
        self.epoch = self.global_step = 0
        self.requested_strategy, self.strategy_choice = _requested_strategy(strategy, total_steps)
        self.total_steps, self.strategy_cache = total_steps, strategy_cache
        self._step = make_stateful_train_step(model, loss_fn, optimizer)
        self._epochs: dict = {}

    @property
    def strategy(self) -> str | None:
        """The strategy in use (None while ``"auto"`` has not chosen yet)."""
        return None if self.strategy_choice is None else self.strategy_choice.strategy

    def _epoch_fn(self, strategy: str) -> Callable:
        if strategy not in self._epochs:
            self._epochs[strategy] = make_stateful_train_epoch(
                self.model, self.loss_fn, self.optimizer, unroll=strategies.scan_unroll(strategy)
            )
        return self._epochs[strategy]

    def _run(self, strategy: str, state, xs, ys, key):
        """``(params, buffers, opt_state)`` after the stacked batches; losses `(steps,)`."""
        if strategy != "step":
            *state, metrics = self._epoch_fn(strategy)(*state, (xs, ys), key)
            return state, metrics["loss"]
        losses = []
        for i in range(xs.shape[0]):
            *state, metrics = self._step(*state, (xs[i], ys[i]), jax.random.fold_in(key, i))
            losses.append(metrics["loss"])
        return state, jnp.stack(losses)

    def choose_strategy(self, x, y, *, total_steps: int | None = None) -> strategies.Choice:
        """Resolve ``"auto"`` now: probe the candidates on copies of the state and the
        first batches of ``(x, y)`` (or read the cache); returns the ``Choice``."""
        if self.strategy_choice is not None:
            return self.strategy_choice
        batches = batch_indices(
            len(x), self.batch_size, seed=self.seed, epoch=self.epoch, drop_last=True
        )
        if not batches:
            raise ValueError(f"{len(x)} training examples make no full batch of {self.batch_size}.")
        key = jax.random.key(self.seed)

        def make_runners(names, steps):
            idx = np.stack(batches[:steps])
            xs, ys = jnp.asarray(x[idx]), jnp.asarray(y[idx])
            runners = {}
            for name in names:
                copy = jax.tree_util.tree_map(
                    jnp.array, (self.params, self.buffers, self.opt_state)
                )
                state = [copy]

                def run(name=name, state=state):
                    state[0], _ = self._run(name, state[0], xs, ys, key)
                    jax.block_until_ready(state[0])

                runners[name] = run
            return runners

        key_parts = {
            "trainer": "StatefulTrainer",
            "model": strategies.describe_model(self.model),
            "loss": getattr(self.loss_fn, "__qualname__", repr(self.loss_fn)),
            "x": [list(x.shape[1:]), str(x.dtype)],
            "y": [list(y.shape[1:]), str(y.dtype)],
            "batch_size": self.batch_size,
            **strategies.environment(),
        }
        self.strategy_choice = strategies.select(
            make_runners,
            key_parts=key_parts,
            total_steps=total_steps or self.total_steps or len(batches),
            call_lengths=[len(batches)],
            cache=self.strategy_cache,
        )
        return self.strategy_choice

    def train_epoch(self, x, y, *, on_steps: Callable | None = None):
        """One epoch over ``(x, y)`` (numpy); returns a ``jaxgrad.train.EpochResult``."""
        batches = batch_indices(
            len(x), self.batch_size, seed=self.seed, epoch=self.epoch, drop_last=True
        )
        if not batches:
            raise ValueError(f"{len(x)} training examples make no full batch of {self.batch_size}.")
        if self.strategy_choice is None:
            self.choose_strategy(x, y)
        idx = np.stack(batches)
        began = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(self.seed), self.epoch)
        (self.params, self.buffers, self.opt_state), losses = self._run(
            self.strategy,
            (self.params, self.buffers, self.opt_state),
            jnp.asarray(x[idx]),
            jnp.asarray(y[idx]),
            key,
        )
        losses = np.asarray(losses)  # the model's dtype: a float64 run records float64 losses
        seconds = time.perf_counter() - began
        if not np.all(np.isfinite(losses)):
            step = self.global_step + int(np.argmin(np.isfinite(losses))) + 1
            raise FloatingPointError(f"non-finite loss at step {step} (epoch {self.epoch + 1}).")
        self.global_step += len(batches)
        if on_steps is not None:
            on_steps(self.global_step, losses)
        result = EpochResult(
            self.epoch, len(batches), losses, seconds, len(batches) * self.batch_size
        )
        self.epoch += 1
        return result

    def evaluate(self, x, y) -> dict:
        return evaluate_stateful(self.model, self.params, self.buffers, x, y, loss_fn=self.loss_fn)

    def state_dict_numpy(self) -> dict:
        """Params and buffers in torch's order; integer counters as torch's int64."""
        state = self.model.state_dict(self.params, self.buffers)
        return {
            k: v.astype(np.int64) if np.issubdtype(v.dtype, np.integer) else v
            for k, v in state.items()
        }
