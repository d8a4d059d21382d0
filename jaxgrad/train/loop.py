"""The training loop around the jitted step: epochs, checkpoints, resume, faults.

``Trainer`` owns the run's state (params, optimizer state, global step, data
position) and advances it one epoch at a time with ``train_epoch``. Batches come
from ``jaxgrad.data.batch_indices(n, batch_size·accumulate, seed=seed, epoch=e,
drop_last=True)``, a pure function of ``(seed, epoch)``, so the data position is
just ``(epoch, batch within the epoch)`` and a resumed run regenerates the order.
That pair, the seed and the step are the run's whole RNG state.

A model with buffers (BatchNorm's running statistics) or random ops (dropout) is
trained with its ``buffers`` (``Trainer(..., buffers=model.init_buffers())``, or
``from_torch(..., with_buffers=True)``'s): each step is
``jaxgrad.train.stateful_step``'s, the training-mode forward's new buffers carried to
the next step and written into checkpoints beside the parameters (the checkpoint's
``params.safetensors`` is then the whole ``state_dict``), and step ``i`` of epoch ``e``
draws with ``fold_in(fold_in(key(seed), e), i)`` under every strategy, so a resumed
run draws what the uninterrupted one did.

- ``strategy="step"`` (the default, ``fused=False``) runs one jitted step per batch;
  ``"epoch"`` (``fused=True``) runs each stretch between checkpoints as one call of
  a rolled loop (``make_train_stretch``), ``"unroll:K"`` the same loop ``K`` steps
  per iteration, ``"unrolled"`` fully unrolled; ``"auto"`` measures them on the first
  batches and keeps the fastest for this run's length (``jaxgrad.train.strategy``).
  The epoch's batches are stacked once and every stretch is a ``[start, stop)`` of
  them, passed as traced integers: whatever ``checkpoint_every`` and the epoch
  length, and after a resume mid-epoch, a strategy compiles one call per epoch
  shape, and each step runs the same compiled code as in a run without
  checkpoints (same params, bit for bit). A resumed run keeps the strategy its
  checkpoint records, so resume is bit-exact.
- ``shard="data"`` (the default) replicates params and optimizer state on every
  device, ``"fsdp"`` splits each over the devices (``jaxgrad.train.fsdp``'s rules),
  ``"tensor"`` splits the Linear, attention and Embedding matrices over each process's
  devices (the batch then split over the processes only),
  ``"none"`` keeps one device; every batch is split over all the devices. The jitted
  step keeps the state in those shardings from step to step.
- Every ``checkpoint_every`` steps a checkpoint is written atomically
  (``jaxgrad.train.checkpoint``): full arrays, whatever the sharding, so it resumes on
  any device count.
- A non-finite loss raises ``NonFiniteLossError`` naming the step and the first
  parameter (in ``state_dict`` order) whose gradient is not finite, before any
  checkpoint of the bad state is written: the last good checkpoint stays ``LATEST``.
- ``request_stop()`` (safe to call from a signal handler: it only sets a flag) makes
  ``train_epoch`` return after the step, or fused stretch, that is running, with
  ``stopped=True`` and the data position at the next batch; ``save()`` then writes
  a checkpoint from which ``resume`` continues with no step lost or repeated.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

import jax
import numpy as np

from jaxgrad.data import batch_indices
from jaxgrad.optim.freezing import freeze_untrained
from jaxgrad.train import checkpoint as ckpt
from jaxgrad.train import fsdp
from jaxgrad.train import strategy as strategies
from jaxgrad.train.sharding import batch_shards, shard_batch
from jaxgrad.train.stateful_step import (
    make_stateful_train_step,
    make_stateful_train_stretch,
    step_key,
)
from jaxgrad.train.step import make_train_step, make_train_stretch


class NonFiniteLossError(FloatingPointError):
    """Raised when a step's loss is NaN or infinite; carries the step and parameter."""

    def __init__(
        self, message: str, *, global_step: int, parameter: str | None, last_checkpoint: str | None
    ):
        super().__init__(message)
        self.global_step = global_step
        self.parameter = parameter
        self.last_checkpoint = last_checkpoint


@dataclasses.dataclass
class EpochResult:
    """What one call of ``Trainer.train_epoch`` did."""

    epoch: int
    steps: int  # steps run in this call (fewer than an epoch after a resume)
    losses: np.ndarray  # `(steps,)` float32, one loss per step
    seconds: float
    examples: int
    stopped: bool = False  # True when `request_stop` ended the call before the epoch did

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.losses)) if self.losses.size else float("nan")


def check_batch(
    batch_size: int, accumulate: int, num_devices: int, num_examples: int | None = None
) -> None:
    """Raise ``ValueError`` unless a step's examples fit the devices and the data.

    A step takes ``batch_size · accumulate`` examples, split evenly over
    ``num_devices`` (data parallelism); ``drop_last`` batching needs at least one
    full step in ``num_examples``.

    Args:
      batch_size: examples per micro-batch.
      accumulate: micro-batches per step.
      num_devices: data-parallel devices the step is split over.
      num_examples: training examples (None: not checked against the data).

    Raises:
      ValueError: a step that does not split evenly over the devices, or is larger
        than the training set.
    """
    step = batch_size * accumulate
    if step % num_devices:
        raise ValueError(
            f"a step of {step} examples (batch size {batch_size} × accumulate {accumulate}) "
            f"does not divide over {num_devices} devices; use a batch size that makes it a "
            f"multiple of {num_devices}."
        )
    if num_examples is not None and step > num_examples:
        raise ValueError(
            f"a step of {step} examples (batch size {batch_size} × accumulate {accumulate}) "
            f"is larger than the {num_examples} training examples; no full batch fits."
        )


def _requested_strategy(
    strategy: str, total_steps: int | None
) -> tuple[str, strategies.Choice | None]:
    """A trainer's ``strategy=`` parsed, and its ``Choice``: ``"forced"``, or None for
    ``"auto"`` (chosen later by ``choose_strategy``); ``total_steps`` checked on the way.

    Raises:
      ValueError: an unknown ``strategy`` (``strategies.parse_strategy``), or a
        ``total_steps`` that is neither None nor an int >= 1.
    """
    requested = strategies.parse_strategy(strategy)
    choice = None if requested == "auto" else strategies.Choice(requested, "forced")
    if total_steps is not None and (not isinstance(total_steps, int) or total_steps < 1):
        raise ValueError(f"`total_steps` (={total_steps!r}) must be an int >= 1 or None.")
    return requested, choice


class Trainer:
    """A resumable, checkpointing training run of a ``jaxgrad.nn`` model.

    Args:
      model: the ``jaxgrad.nn`` model, as ``make_train_step``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``, as ``make_train_step``.
      optimizer: an optax transformation, already composed with clipping/freezing.
      params: initial parameters (flat dict, torch keys).
      buffers: the model's buffers (flat dict, torch keys; ``{}`` for a model that has
        none but draws random numbers in training), or None: a model without either.
      batch_size: examples per micro-batch; a step consumes ``batch_size·accumulate``.
      seed: the data-order seed.
      drop_last: train on full batches only (the default: torch's
        ``DataLoader(drop_last=True)``); False adds each epoch's shorter last batch, one
        step of its own shape (one more compilation; a fused strategy runs it after its
        stretches). Needs ``accumulate=1``.
      accumulate: micro-batches per step, passed to the step.
      compute_dtype: the step's compute dtype (``bfloat16``), passed to the step.
      fused: run stretches of steps as one ``lax.scan`` call (``strategy="epoch"``).
      strategy: ``"step"``, ``"epoch"``, ``"unroll:K"``, ``"unrolled"`` or ``"auto"``
        (probe each on the first batches, keep the fastest; ``choose_strategy``). None:
        ``"epoch"`` if ``fused`` else ``"step"``.
      total_steps: the run's planned steps, for ``"auto"``'s cost model (compile time
        weighs more in a short run). None: one epoch.
      strategy_cache: let ``"auto"`` read and write its probe cache
        (``jaxgrad.train.strategy.cache_path()``).
      devices: data-parallel over these devices (default: one, the default device);
        with several processes, every device of every process.
      shard: ``"data"`` params and optimizer state replicated on every device (the
        default), ``"fsdp"`` each split along one dimension over the devices, ``"tensor"``
        the matrices split by rows over each process's devices, ``"none"``
        one device (``jaxgrad.train.fsdp``).
      checkpoint_dir: where periodic checkpoints go (None: no checkpoints).
      checkpoint_every: write a checkpoint every this many steps.
      keep: how many of the newest checkpoints to keep.
      config: JSON-able description of the run, stored in checkpoints and required
        to match on resume.
    """

    def __init__(
        self,
        model,
        loss_fn: Callable,
        optimizer,
        params,
        *,
        buffers=None,
        batch_size: int,
        seed: int = 0,
        drop_last: bool = True,
        accumulate: int = 1,
        compute_dtype=None,
        fused: bool = False,
        strategy: str | None = None,
        total_steps: int | None = None,
        strategy_cache: bool = True,
        devices=None,
        shard: str = "data",
        checkpoint_dir: str | None = None,
        checkpoint_every: int | None = None,
        keep: int = 2,
        config: dict | None = None,
    ):
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"`checkpoint_every` (={checkpoint_every}) must be >= 1 or None.")
        if checkpoint_every is not None and checkpoint_dir is None:
            raise ValueError("`checkpoint_every` needs a `checkpoint_dir`.")
        # torch's loop never steps a parameter left without .grad (frozen, or read only
        # through detach / no_grad): nor does this one
        optimizer = freeze_untrained(optimizer, model)
        self.model, self.optimizer = model, optimizer
        self.batch_size, self.accumulate, self.seed = batch_size, accumulate, seed
        if not drop_last and accumulate != 1:
            raise ValueError(
                f"`drop_last=False` with `accumulate` (={accumulate}): a last batch shorter "
                "than a step does not split into equal micro-batches; keep drop_last=True."
            )
        self.drop_last = drop_last
        if strategy is None:
            strategy = "epoch" if fused else "step"
        elif fused and strategies.parse_strategy(strategy) == "step":
            raise ValueError(f"`fused=True` contradicts `strategy` (={strategy!r}); give one.")
        self.requested_strategy, self.strategy_choice = _requested_strategy(strategy, total_steps)
        self.total_steps, self.strategy_cache = total_steps, strategy_cache
        self.loss_fn, self.compute_dtype = loss_fn, compute_dtype
        self.checkpoint_dir, self.checkpoint_every, self.keep = (
            checkpoint_dir,
            checkpoint_every,
            keep,
        )
        self.config = dict(config or {})
        self.shard = fsdp.check_shard(shard)
        self.mesh = fsdp.shard_mesh(shard, devices or jax.devices()[:1])
        self.param_shardings = fsdp.param_shardings(params, self.mesh)
        self.opt_state_shardings = fsdp.opt_state_shardings(
            jax.eval_shape(optimizer.init, params), params, self.param_shardings, self.mesh
        )
        self.params = fsdp.place(params, self.param_shardings)
        self.opt_state = fsdp.place(optimizer.init(self.params), self.opt_state_shardings)
        replicated = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())
        self.buffers = None if buffers is None else fsdp.place(dict(buffers), replicated)
        self.global_step = 0
        self.epoch, self.step_in_epoch = 0, 0
        self.last_checkpoint: str | None = None
        self._stop_requested = False
        check_batch(batch_size, accumulate, batch_shards(self.mesh))
        options: dict = dict(accumulate=accumulate, compute_dtype=compute_dtype)
        if shard in ("fsdp", "tensor"):  # "data": XLA keeps the replication of the inputs
            options["shardings"] = (self.param_shardings, self.opt_state_shardings)
        make_step = make_stateful_train_step if self.stateful else make_train_step
        self._step = make_step(model, loss_fn, optimizer, **options)
        self._options = options
        self._epochs: dict = {}  # strategy -> jitted epoch function

    def _epoch_fn(self, strategy: str) -> Callable:
        """The jitted stretch call for ``strategy`` (built once per strategy):
        ``(params, opt_state, stacked epoch, start, stop)``, with buffers
        ``(params, buffers, opt_state, stacked epoch, start, stop, epoch key)``."""
        if strategy not in self._epochs:
            make = make_stateful_train_stretch if self.stateful else make_train_stretch
            self._epochs[strategy] = make(
                self.model,
                self.loss_fn,
                self.optimizer,
                unroll=strategies.scan_unroll(strategy),
                **self._options,
            )
        return self._epochs[strategy]

    # ----------------------------------------------- the state the compiled calls carry
    @property
    def stateful(self) -> bool:
        """Whether the model trains with buffers and keys (``stateful_step``'s steps)."""
        return self.buffers is not None

    def _state(self) -> tuple:
        if self.stateful:
            return (self.params, self.buffers, self.opt_state)
        return (self.params, self.opt_state)

    def _set_state(self, state) -> None:
        if self.stateful:
            self.params, self.buffers, self.opt_state = state
        else:
            self.params, self.opt_state = state

    def _placed_state(self) -> tuple:
        """Fresh copies of the state on its shardings (the probe's runners train them)."""
        placed = [
            fsdp.place(self.params, self.param_shardings),
            fsdp.place(self.opt_state, self.opt_state_shardings),
        ]
        if self.stateful:
            placed.insert(
                1,
                fsdp.place(
                    self.buffers, jax.tree_util.tree_map(lambda leaf: leaf.sharding, self.buffers)
                ),
            )
        return tuple(placed)

    def _run_step(self, state, batch, epoch: int, index: int):
        """One jitted step on ``state``: ``(state, metrics)``."""
        if self.stateful:
            *state, metrics = self._step(*state, batch, step_key(self.seed, epoch, index))
        else:
            *state, metrics = self._step(*state, batch)
        return tuple(state), metrics

    def _run_stretch(self, strategy: str, state, stacked, first: int, stop: int, epoch: int):
        """Steps ``[first, stop)`` of the stacked epoch in one call: ``(state, metrics)``."""
        extra = (step_key(self.seed, epoch),) if self.stateful else ()
        *state, metrics = self._epoch_fn(strategy)(
            *state, stacked, np.int32(first), np.int32(stop), *extra
        )
        return tuple(state), metrics

    @property
    def strategy(self) -> str | None:
        """The strategy in use (None while ``"auto"`` has not chosen yet)."""
        return None if self.strategy_choice is None else self.strategy_choice.strategy

    @property
    def fused(self) -> bool:
        """Whether steps run as fused ``lax.scan`` calls (every strategy but ``"step"``)."""
        return self.strategy not in (None, "step")

    def choose_strategy(
        self, x: np.ndarray, y: np.ndarray, *, total_steps: int | None = None
    ) -> strategies.Choice:
        """Resolve ``"auto"`` now (a probe on the first batches of ``(x, y)``, or the cache).

        The probe runs on copies of the parameters: the run's state is untouched. A
        forced or already chosen strategy is returned as it is.

        Args:
          x: `(n, *features)` training inputs; y: `(n,)` labels (numpy).
          total_steps: the run's steps for the cost model (default: ``total_steps``
            given to the trainer, else one epoch).

        Returns:
          The ``jaxgrad.train.strategy.Choice`` (``describe()`` for a printed line).
        """
        if self.strategy_choice is not None:
            return self.strategy_choice
        if jax.process_count() > 1:  # each process would probe alone and might disagree
            self.strategy_choice = strategies.Choice("step", "multi-process")
            return self.strategy_choice
        batches = self.batches(len(x), self.epoch)
        batches = [b for b in batches if len(b) == len(batches[0])]  # a short last one: not probed
        total = total_steps or self.total_steps or len(batches)
        # one fused call per stretch: an epoch, cut at each checkpoint; whatever their
        # lengths, they all run the one compiled call of the epoch's shape
        calls = -(-total // len(batches)) + (
            total // self.checkpoint_every if self.checkpoint_every else 0
        )
        epoch_stack: list = []  # the epoch's batches, stacked once for every fused runner

        def make_runners(names, steps):
            singles = [shard_batch((x[i], y[i]), self.mesh) for i in batches[:steps]]
            runners = {}
            for name in names:
                state = [self._placed_state()]
                if name == "unrolled":  # its compile grows with the stack: the probe's own
                    idx = np.stack(batches[:steps])
                    stacked = shard_batch((x[idx], y[idx]), self.mesh, stacked=True)
                elif name != "step":  # the run's own shape: its compile is the run's
                    if not epoch_stack:
                        idx = np.stack(batches)
                        epoch_stack.append(shard_batch((x[idx], y[idx]), self.mesh, stacked=True))
                    stacked = epoch_stack[0]

                def run(name=name, state=state, stacked=None if name == "step" else stacked):
                    if name == "step":
                        for index, batch in enumerate(singles):
                            state[0], _ = self._run_step(state[0], batch, self.epoch, index)
                    else:
                        state[0], _ = self._run_stretch(
                            name, state[0], stacked, 0, steps, self.epoch
                        )
                    jax.block_until_ready(state)

                runners[name] = run
            return runners

        key_parts = {
            "trainer": "Trainer (buffers)" if self.stateful else "Trainer",
            "model": strategies.describe_model(self.model),
            "loss": getattr(self.loss_fn, "__qualname__", repr(self.loss_fn)),
            "x": [list(x.shape[1:]), str(x.dtype)],
            "y": [list(y.shape[1:]), str(y.dtype)],
            "batch_size": self.batch_size,
            "accumulate": self.accumulate,
            "compute_dtype": str(self.compute_dtype),
            "devices": len(self.devices),
            **strategies.environment(self.devices[0]),
        }
        self.strategy_choice = strategies.select(
            make_runners,
            key_parts=key_parts,
            total_steps=total,
            call_lengths=[len(batches)],
            calls=calls,
            cache=self.strategy_cache,
        )
        return self.strategy_choice

    @property
    def devices(self) -> list:
        return list(self.mesh.devices.flat)

    # ----------------------------------------------------------------- checkpoints
    def _meta(self) -> dict:
        return {
            "global_step": self.global_step,
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "seed": self.seed,
            "strategy": self.strategy,
            "rng": {"data_order": f"numpy default_rng([{self.seed}, epoch])"},
            "config": self.config,
        }

    def save(self) -> str:
        """Checkpoint the current state into ``checkpoint_dir`` now; returns its path."""
        if self.checkpoint_dir is None:
            raise ValueError("Trainer.save: no `checkpoint_dir` was given.")
        if self.last_checkpoint == os.path.join(
            self.checkpoint_dir, ckpt.checkpoint_name(self.global_step)
        ):
            return self.last_checkpoint  # this very state is already on disk
        self.last_checkpoint = ckpt.save_checkpoint(
            self.checkpoint_dir,
            # with buffers: the whole state_dict, as torch's own checkpoint holds it
            params=self.params if self.buffers is None else {**self.params, **self.buffers},
            opt_state=self.opt_state,
            meta=self._meta(),
            keep=self.keep,
        )
        return self.last_checkpoint

    def resume(self, path: str | None = None) -> dict:
        """Restore the latest checkpoint of ``checkpoint_dir`` (or ``path``).

        Raises:
          CheckpointError: no checkpoint, a corrupt one (then ``.intact`` names the
            newest intact one), or one from another config. A resume never silently
            starts afresh, nor silently falls back to an older checkpoint.
        """
        if path is None:
            if self.checkpoint_dir is None:
                raise ValueError("Trainer.resume: no `checkpoint_dir` was given.")
            path = ckpt.latest_verified(self.checkpoint_dir)
            if path is None:
                raise ckpt.CheckpointError(
                    f"--resume: no checkpoint in {self.checkpoint_dir} (no {ckpt.LATEST} "
                    "file); nothing to resume from."
                )
        params, opt_state, meta = ckpt.load_checkpoint(
            path, model=self.model, opt_state_template=self.opt_state, config=self.config
        )
        # full arrays, placed by this run's rules: any device count, any process count
        self.params = fsdp.place(params, self.param_shardings)
        self.opt_state = fsdp.place(opt_state, self.opt_state_shardings)
        if self.stateful:
            buffers = ckpt.load_checkpoint_buffers(path, model=self.model)
            self.buffers = fsdp.place(
                buffers, jax.tree_util.tree_map(lambda leaf: leaf.sharding, self.buffers)
            )
        self.global_step = int(meta["global_step"])
        self.epoch, self.step_in_epoch = int(meta["epoch"]), int(meta["step_in_epoch"])
        self.last_checkpoint = path
        if self.requested_strategy == "auto" and meta.get("strategy"):
            # the resumed run's own strategy: the same compiled stretches, bit-exact
            self.strategy_choice = strategies.Choice(
                strategies.parse_strategy(meta["strategy"]), "checkpoint"
            )
        return meta

    # ---------------------------------------------------------------------- stopping
    def request_stop(self) -> None:
        """Stop ``train_epoch`` after the step (or fused stretch) now running."""
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    # ---------------------------------------------------------------------- epochs
    def batches(self, num_examples: int, epoch: int) -> list[np.ndarray]:
        """This run's index batches for ``epoch``: full batches, and with
        ``drop_last=False`` the shorter last one (the examples the full ones leave)."""
        batches = batch_indices(
            num_examples,
            self.batch_size * self.accumulate,
            seed=self.seed,
            epoch=epoch,
            drop_last=True,
        )
        remainder = num_examples % (self.batch_size * self.accumulate)
        if not self.drop_last and remainder and batches:
            if remainder % batch_shards(self.mesh):
                raise ValueError(
                    f"the last batch of an epoch holds {remainder} examples ({num_examples} "
                    f"% {self.batch_size}), which do not divide over "
                    f"{batch_shards(self.mesh)} devices; use drop_last=True (train.py: "
                    "without --keep-last-batch) or a batch size that leaves a multiple"
                )
            batches = batch_indices(
                num_examples, self.batch_size, seed=self.seed, epoch=epoch, drop_last=False
            )
        if not batches:
            raise ValueError(
                f"{num_examples} training examples make no full batch of "
                f"{self.batch_size * self.accumulate} (batch_size × accumulate)."
            )
        return batches

    def _stretches(self, start: int, total: int) -> list[tuple[int, int]]:
        """``[(first, stop), ...]`` batch ranges ending at checkpoint steps or epoch end."""
        if not self.fused:
            return [(i, i + 1) for i in range(start, total)]
        bounds, i, step = [], start, self.global_step
        while i < total:
            length = total - i
            if self.checkpoint_every:
                length = min(length, self.checkpoint_every - step % self.checkpoint_every)
            bounds.append((i, i + length))
            i, step = i + length, step + length
        return bounds

    def train_epoch(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        on_steps: Callable[[int, np.ndarray], None] | None = None,
    ) -> EpochResult:
        """Run the rest of the current epoch (all of it unless resumed mid-epoch).

        Args:
          x: `(n, *features)` training inputs; y: `(n,)` labels (numpy).
          on_steps: called after every call into compiled code with
            ``(global_step, losses of those steps)``: progress bars, fault injection.
        """
        if self.strategy_choice is None:
            self.choose_strategy(x, y)
        epoch, start = self.epoch, self.step_in_epoch
        batches = self.batches(len(x), epoch)
        losses, began, examples = [], time.perf_counter(), 0
        stopped = False
        # the full batches (a fused strategy stacks them), and a shorter last one that runs
        # as one step of its own shape
        full = len(batches) - (len(batches[-1]) != len(batches[0]))
        if self.fused:  # the whole epoch, once: every stretch is a [first, stop) of it
            idx = np.stack(batches[:full])
            stacked = shard_batch((x[idx], y[idx]), self.mesh, stacked=True)
        stretches = self._stretches(min(start, full), full)
        stretches += [(i, i + 1) for i in range(max(start, full), len(batches))]
        for first, stop in stretches:
            if self._stop_requested:
                stopped = True
                break
            if self.fused and stop <= full:
                assert self.strategy is not None  # fused: a strategy other than "step"
                state, metrics = self._run_stretch(
                    self.strategy, self._state(), stacked, first, stop, epoch
                )
                metrics = jax.tree_util.tree_map(lambda m: np.asarray(m)[first:stop], metrics)  # noqa: B023
            else:
                idx = batches[first]
                batch = shard_batch((x[idx], y[idx]), self.mesh)
                state, metrics = self._run_step(self._state(), batch, epoch, first)
            step_losses = np.atleast_1d(np.asarray(metrics["loss"]))
            bad = np.flatnonzero(~np.isfinite(step_losses))
            if bad.size:
                self._raise_non_finite(int(bad[0]), metrics, epoch, first)
            self._set_state(state)
            self.global_step += stop - first
            self.step_in_epoch = stop
            examples += sum(len(b) for b in batches[first:stop])
            losses.append(step_losses)
            if self.checkpoint_every and self.global_step % self.checkpoint_every == 0:
                if stop == len(batches):
                    self.epoch, self.step_in_epoch = epoch + 1, 0
                self.save()
            if on_steps is not None:
                on_steps(self.global_step, step_losses)
        if not stopped:
            self.epoch, self.step_in_epoch = epoch + 1, 0
        jax.block_until_ready(self.params)
        seconds = time.perf_counter() - began
        epoch_losses = np.concatenate(losses) if losses else np.zeros((0,), np.float32)
        return EpochResult(
            epoch, epoch_losses.size, epoch_losses, seconds, examples, stopped=stopped
        )

    def _raise_non_finite(self, offset: int, metrics, epoch: int, first: int):
        finite = {
            k: np.atleast_1d(np.asarray(v))[offset] for k, v in metrics["grads_finite"].items()
        }
        parameter = next((k for k in self.model.param_shapes() if not finite[k]), None)
        step = self.global_step + offset + 1  # steps are counted from 1
        loss = np.atleast_1d(np.asarray(metrics["loss"]))[offset]
        where = (
            f"first non-finite parameter gradient: {parameter!r}"
            if parameter
            else "every parameter gradient is finite"
        )
        kept = (
            f"last good checkpoint: {self.last_checkpoint}"
            if self.last_checkpoint
            else "no checkpoint was written yet"
        )
        raise NonFiniteLossError(
            f"non-finite loss ({loss}) at step {step} (epoch {epoch}, batch "
            f"{first + offset}); {where}; stopping, {kept}.",
            global_step=step,
            parameter=parameter,
            last_checkpoint=self.last_checkpoint,
        )
