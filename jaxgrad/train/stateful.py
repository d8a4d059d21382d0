"""Training models with buffers (BatchNorm) or randomness (Dropout).

The steps are ``jaxgrad.train.stateful_step``'s (re-exported here): one pure function

    ``(params, buffers, opt_state, batch, key) -> (params, buffers, opt_state, metrics)``

— torch's ``module.train(); loss = loss_fn(module(x), y); loss.backward();
optimizer.step()``, where the forward also updates the running statistics.

``StatefulTrainer`` is ``jaxgrad.train.Trainer`` given the model's buffers (what
``scripts/train.py`` runs for the CNN presets and converted torch modules): the same
batches as ``torchref.train.TorchTrainer``, every execution strategy, checkpoints with
the buffers, bit-exact resume, accumulation, clipping (in the optimizer) and sharding;
its default strategy is one fused call per epoch (``"epoch"``). Step ``i`` of epoch
``e`` draws with ``fold_in(fold_in(key(seed), e), i)`` under every strategy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import optax

from jaxgrad.train.checkpoint import gather_to_host
from jaxgrad.train.loop import Trainer
from jaxgrad.train.stateful_step import (
    evaluate_stateful,
    make_stateful_train_epoch,
    make_stateful_train_step,
    make_stateful_train_stretch,
    stateful_step_fn,
)

__all__ = [
    "StatefulTrainer",
    "evaluate_stateful",
    "make_stateful_train_epoch",
    "make_stateful_train_step",
    "make_stateful_train_stretch",
    "stateful_step_fn",
]


class StatefulTrainer(Trainer):
    """Epochs of a model with buffers, under an execution strategy (default: one fused
    call per epoch): ``Trainer`` with ``buffers``.

    Args:
      model: a ``jaxgrad.nn`` model whose ``apply`` takes ``buffers`` and ``key``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``.
      optimizer: an optax transformation.
      params: the initial parameters (flat dict, torch keys).
      buffers: the initial buffers (flat dict, torch keys; ``{}`` for none).
      batch_size: examples per micro-batch.
      seed: the data-order and dropout seed.
      strategy: ``"epoch"`` (default), ``"step"``, ``"unroll:K"``, ``"unrolled"`` or
        ``"auto"`` (``jaxgrad.train.strategy``; resolved by ``choose_strategy``).
      total_steps: the run's planned steps for ``"auto"``'s cost model (None: one epoch).
      strategy_cache: let ``"auto"`` read and write its probe cache.
      **options: the rest of ``Trainer``'s (``accumulate``, ``devices``, ``shard``,
        ``checkpoint_dir``, ``checkpoint_every``, ``keep``, ``config``).

    Attributes:
      params, buffers, opt_state: the current state.
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
        **options,
    ):
        super().__init__(
            model,
            loss_fn,
            optimizer,
            params,
            buffers=dict(buffers),
            batch_size=batch_size,
            seed=seed,
            strategy=strategy,
            total_steps=total_steps,
            strategy_cache=strategy_cache,
            **options,
        )

    def evaluate(self, x, y) -> dict:
        """Mean loss and accuracy in evaluation mode (``evaluate_stateful``)."""
        return evaluate_stateful(self.model, self.params, self.buffers, x, y, loss_fn=self.loss_fn)

    def state_dict_numpy(self) -> dict:
        """Params and buffers in torch's order (gathered to the host: any sharding);
        integer counters as torch's int64."""
        params, buffers = gather_to_host((self.params, self.buffers))
        state = self.model.state_dict(params, buffers)
        return {
            k: v.astype(np.int64) if np.issubdtype(v.dtype, np.integer) else v
            for k, v in state.items()
        }
