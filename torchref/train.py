"""The PyTorch twin of ``jaxgrad.train``: the imperative loop, compiled or not, and DDP.

One step is the idiom every torch user writes::

    optimizer.zero_grad(set_to_none=True)
    for micro_x, micro_y in micro_batches:        # accumulate=K: K backward() calls
        (loss_fn(module(micro_x), micro_y) / K).backward()   # .grad += ...
    clip_grad_norm_(trainable, clip)                 # optional
    optimizer.step()

``TorchTrainer`` runs epochs of it over the batches ``jaxgrad.data.batch_indices``
gives (re-derived by ``torchref.data.batch_order``, same ``(seed, epoch)``), so the
JAX and the torch loop see the same examples in the same order.
``compile=True`` wraps the module in ``torch.compile``. ``run_ddp`` trains with
``DistributedDataParallel`` on the gloo backend, one process per rank on
127.0.0.1, and returns rank 0's all-reduced gradients and final weights.
Never imports jax.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from torchref import checkpoint
from torchref.data import batch_order
from torchref.models import load_numpy, mlp, state_dict_numpy

DEVICES = {"cpu": "cpu", "gpu": "cuda"}


def torch_device(name: str) -> torch.device:
    """``"cpu"`` or ``"gpu"`` (CUDA) as a ``torch.device``; raises when absent."""
    if name not in DEVICES:
        raise ValueError(
            f"`device` (={name!r}) must be one of {', '.join(DEVICES)} for torch "
            "(torch has no TPU backend without torch_xla)."
        )
    if name == "gpu" and not torch.cuda.is_available():
        raise ValueError("`device` (='gpu'): torch sees no CUDA device.")
    return torch.device(DEVICES[name])


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels (CUDA is asynchronous; a timer must not stop early)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def freeze(module: torch.nn.Module, frozen) -> list[torch.nn.Parameter]:
    """``requires_grad_(False)`` on the named parameters; returns the trainable ones.

    Build the optimizer from the returned list (lesson 002: freezing after the
    optimizer holds the parameters lets momentum and weight decay move them).
    """
    named = dict(module.named_parameters())
    unknown = [n for n in frozen if n not in named]
    if unknown:
        raise ValueError(f"`frozen` names unknown parameters: {', '.join(unknown)}.")
    for name in frozen:
        named[name].requires_grad_(False)
    return [p for p in module.parameters() if p.requires_grad]


def check_autocast(module: torch.nn.Module, x, dtype: torch.dtype = torch.bfloat16) -> None:
    """One forward and backward of a copy of ``module`` under ``torch.autocast(dtype)``
    on ``x`` (a few examples, numpy): a kernel without a ``dtype`` form on this machine
    (oneDNN's CPU LSTM has no bfloat16 one without AVX-512 BF16) is a ``ValueError``
    before training starts, not a crash at its first step."""
    import copy

    probe = copy.deepcopy(module)
    device = next(probe.parameters()).device
    inputs = torch.from_numpy(np.asarray(x)).to(device)
    try:  # fork_rng: a dropout in the probe must not move the training's random stream
        forked = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=forked), torch.autocast(device.type, dtype=dtype):
            outputs = probe(inputs)
            outputs.float().sum().backward()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = first.rstrip(".")
        raise ValueError(
            f"torch cannot run {type(module).__name__} under "
            f"autocast({str(dtype).replace('torch.', '')}) on {device.type}: "
            f"{first}"
        ) from None


def train_step(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    accumulate: int = 1,
    clip: float | None = None,
    autocast_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One optimizer step on the batch ``(x, y)``, split into ``accumulate`` micro-batches.

    Returns the batch's mean loss as a detached 0-d tensor (no host sync).
    """
    if x.shape[0] % accumulate:
        raise ValueError(
            f"batch of {x.shape[0]} examples does not split into `accumulate` "
            f"(={accumulate}) equal micro-batches."
        )
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=x.device)
    for micro_x, micro_y in zip(x.chunk(accumulate), y.chunk(accumulate)):
        with torch.autocast(
            x.device.type,
            dtype=autocast_dtype or torch.bfloat16,
            enabled=autocast_dtype is not None,
        ):
            outputs = module(micro_x)
        loss = loss_fn(outputs.float() if autocast_dtype else outputs, micro_y) / accumulate
        loss.backward()
        total = total + loss.detach()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_([p for p in module.parameters() if p.requires_grad], clip)
    optimizer.step()
    return total


@dataclasses.dataclass
class TorchEpochResult:
    epoch: int
    steps: int
    losses: np.ndarray  # `(steps,)` float32 (float64 for a float64 model)
    seconds: float
    examples: int
    stopped: bool = False  # True when `request_stop` ended the call before the epoch did

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.losses)) if self.losses.size else float("nan")


class NonFiniteLossError(FloatingPointError):
    """A NaN/inf loss; ``parameter`` is the first (``named_parameters`` order) whose
    ``.grad`` is not finite, ``global_step`` counts from 1."""

    def __init__(self, message: str, *, global_step: int, parameter: str | None):
        super().__init__(message)
        self.global_step, self.parameter = global_step, parameter


class TorchTrainer:
    """Epochs of ``train_step`` over ``(seed, epoch)``-ordered full batches.

    Args:
      module: the model (moved to ``device``); optimizer: over its trainable params.
      batch_size: examples per micro-batch; a step consumes ``batch_size·accumulate``.
      drop_last: full batches only (the default, ``DataLoader(drop_last=True)``); False
        also trains on each epoch's shorter last batch (with ``accumulate=1``).
      compile: wrap the module in ``torch.compile`` (first step pays the compile).
      autocast_dtype: ``torch.bfloat16`` for mixed precision, None for full.
      checkpoint_dir, checkpoint_every, config: periodic atomic checkpoints
        (``torchref.checkpoint``); ``resume()`` continues from the latest.

    ``request_stop()`` (only sets a flag: safe from a signal handler) makes
    ``train_epoch`` return after the step that is running, positioned at the next
    batch, so that ``save()`` then ``resume()`` loses and repeats no step.
    """

    def __init__(
        self,
        module,
        optimizer,
        loss_fn: Callable = F.cross_entropy,
        *,
        batch_size: int,
        seed: int = 0,
        drop_last: bool = True,
        accumulate: int = 1,
        clip: float | None = None,
        compile: bool = False,
        device: str = "cpu",
        autocast_dtype: torch.dtype | None = None,
        checkpoint_dir: str | None = None,
        checkpoint_every: int | None = None,
        config: dict | None = None,
    ):
        self.device = torch_device(device)
        self.module = module.to(self.device)
        self.forward = torch.compile(self.module) if compile else self.module
        self.optimizer, self.loss_fn = optimizer, loss_fn
        self.batch_size, self.seed, self.accumulate, self.clip = batch_size, seed, accumulate, clip
        if not drop_last and accumulate != 1:
            raise ValueError(
                f"drop_last=False with accumulate={accumulate}: a last batch shorter than a "
                "step does not split into equal micro-batches; keep drop_last=True."
            )
        self.drop_last = drop_last
        self.autocast_dtype = autocast_dtype
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every
        self.config = dict(config or {})
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        self._loss_dtype = torch.float32  # the last step's, for the epoch's loss record
        self.last_checkpoint: str | None = None
        self._stop_requested = False

    def request_stop(self) -> None:
        """Stop ``train_epoch`` after the step now running."""
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def save(self) -> str:
        """Checkpoint the current state now (a no-op if this step is already saved)."""
        name = os.path.join(self.checkpoint_dir, f"ckpt-{self.global_step:08d}")
        if self.last_checkpoint != name:
            self.last_checkpoint = checkpoint.save_checkpoint(
                self.checkpoint_dir,
                module=self.module,
                optimizer=self.optimizer,
                meta={
                    "global_step": self.global_step,
                    "epoch": self.epoch,
                    "step_in_epoch": self.step_in_epoch,
                    "seed": self.seed,
                    "config": self.config,
                },
            )
        return self.last_checkpoint

    def resume(self, path: str | None = None) -> dict:
        """Load ``path``, or the latest checkpoint of ``checkpoint_dir``; an error if there
        is none, or if it is damaged (``.intact`` then names the newest intact one)."""
        if path is None:
            path = checkpoint.latest_verified(self.checkpoint_dir)
        if path is None:
            raise checkpoint.CheckpointError(
                f"--resume: no checkpoint in {self.checkpoint_dir} (no {checkpoint.LATEST} "
                "file); nothing to resume from."
            )
        meta = checkpoint.load_checkpoint(
            path, module=self.module, optimizer=self.optimizer, config=self.config
        )
        self.global_step, self.epoch = int(meta["global_step"]), int(meta["epoch"])
        self.step_in_epoch, self.last_checkpoint = int(meta["step_in_epoch"]), path
        return meta

    def train_epoch(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        on_steps: Callable[[int, np.ndarray], None] | None = None,
    ) -> TorchEpochResult:
        """Run the rest of the current epoch (all of it unless resumed mid-epoch)."""
        step_size = self.batch_size * self.accumulate
        epoch = self.epoch
        order = batch_order(len(x), seed=self.seed, epoch=epoch)
        total = len(order) // step_size if self.drop_last else -(-len(order) // step_size)
        x_all = torch.from_numpy(np.asarray(x)).to(self.device)
        y_all = torch.from_numpy(np.asarray(y)).to(self.device)
        self.module.train()
        losses, began, examples = [], time.perf_counter(), 0
        stopped = False
        for index in range(self.step_in_epoch, total):
            if self._stop_requested:
                stopped = True
                break
            idx = torch.from_numpy(order[index * step_size : (index + 1) * step_size]).to(
                self.device
            )
            loss = train_step(
                self.forward,
                self.optimizer,
                self.loss_fn,
                x_all[idx],
                y_all[idx],
                accumulate=self.accumulate,
                clip=self.clip,
                autocast_dtype=self.autocast_dtype,
            )
            value = loss.item()  # one sync per step: the finiteness check needs it
            self._loss_dtype = loss.dtype
            if not np.isfinite(value):
                self._raise_non_finite(value, index)
            losses.append(value)
            examples += len(idx)
            self.global_step += 1
            # the position of the next batch: what a checkpoint written now resumes at
            self.epoch, self.step_in_epoch = (
                (epoch + 1, 0) if index + 1 == total else (epoch, index + 1)
            )
            if self.checkpoint_every and self.global_step % self.checkpoint_every == 0:
                self.save()
            if on_steps is not None:
                on_steps(self.global_step, np.array([value], np.float32))
        synchronize(self.device)
        seconds = time.perf_counter() - began
        # float32, or float64 for a float64 model: the loss as torch computed it
        dtype = np.float64 if self._loss_dtype == torch.float64 else np.float32
        losses = np.asarray(losses, dtype)
        if not stopped:
            self.epoch, self.step_in_epoch = epoch + 1, 0
        return TorchEpochResult(epoch, losses.size, losses, seconds, examples, stopped=stopped)

    def _raise_non_finite(self, value: float, index: int):
        parameter = next(
            (
                n
                for n, p in self.module.named_parameters()
                if p.grad is not None and not torch.isfinite(p.grad).all()
            ),
            None,
        )
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
            f"non-finite loss ({value}) at step {self.global_step + 1} (epoch {self.epoch}, "
            f"batch {index}); {where}; stopping, {kept}.",
            global_step=self.global_step + 1,
            parameter=parameter,
        )

    def state_dict_numpy(self) -> dict[str, np.ndarray]:
        return state_dict_numpy(self.module)


@torch.no_grad()
def evaluate(
    module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    loss_fn: Callable = F.cross_entropy,
    batch_size: int = 1024,
    device: str = "cpu",
) -> dict:
    """Mean loss and accuracy of ``module`` on ``(x, y)``; ``module.eval()`` and no graph."""
    target = torch_device(device)
    module.eval()
    total_loss, correct = 0.0, 0
    for start in range(0, len(x), batch_size):
        xb = torch.from_numpy(np.asarray(x[start : start + batch_size])).to(target)
        yb = torch.from_numpy(np.asarray(y[start : start + batch_size])).to(target)
        outputs = module(xb).float()
        total_loss += float(loss_fn(outputs, yb, reduction="sum"))
        correct += int((outputs.argmax(dim=-1) == yb).sum())
    return {"loss": total_loss / len(x), "accuracy": correct / len(x), "examples": len(x)}


# ------------------------------------------------------------------------------ DDP
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_worker(
    rank: int,
    world_size: int,
    port: int,
    sizes,
    activation: str,
    weights: dict,
    x: np.ndarray,
    y: np.ndarray,
    lr: float,
    steps: int,
    out_dir: str,
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        module = load_numpy(mlp(sizes, activation, dtype=torch.from_numpy(x).dtype), weights)
        ddp = torch.nn.parallel.DistributedDataParallel(module)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        shard = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
        xb, yb = torch.from_numpy(x[shard]), torch.from_numpy(y[shard])
        first_grads = None
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(xb), yb).backward()  # DDP all-reduces (averages) .grad
            if first_grads is None:
                first_grads = {n: p.grad.numpy().copy() for n, p in module.named_parameters()}
            optimizer.step()
        if rank == 0:
            np.savez(
                os.path.join(out_dir, "result.npz"),
                **{f"grad/{k}": v for k, v in first_grads.items()},
                **{f"param/{k}": v for k, v in state_dict_numpy(module).items()},
            )
        dist.barrier()  # no rank tears gloo down while another still talks to it
    finally:
        dist.destroy_process_group()
    # Skip interpreter teardown: about one exit in six, a gloo/c10d background thread
    # outlives the C++ static destructors and the process aborts ("terminate called
    # without an active exception") after all work is done and written. An exception
    # above still propagates to the parent as usual.
    os._exit(0)


def run_ddp(
    sizes,
    activation: str,
    weights: dict,
    x: np.ndarray,
    y: np.ndarray,
    *,
    world_size: int = 2,
    lr: float = 0.1,
    steps: int = 1,
) -> dict:
    """Train an ``mlp(sizes, activation)`` with DDP (gloo, 127.0.0.1) on ``world_size``
    processes, each taking an equal contiguous shard of ``(x, y)`` every step.

    Returns:
      ``{"grads": {name: array}, "params": {name: array}}``: rank 0's gradients of the
      first step after DDP's all-reduce, and its weights after ``steps`` SGD steps.
    """
    if len(x) % world_size:
        raise ValueError(f"{len(x)} examples do not split over `world_size` (={world_size}).")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory() as out_dir:
        torch.multiprocessing.start_processes(
            _ddp_worker,
            nprocs=world_size,
            start_method="spawn",
            args=(
                world_size,
                _free_port(),
                list(sizes),
                activation,
                dict(weights),
                np.asarray(x),
                np.asarray(y),
                lr,
                steps,
                out_dir,
            ),
        )
        with np.load(os.path.join(out_dir, "result.npz")) as data:
            grads = {k[5:]: data[k] for k in data.files if k.startswith("grad/")}
            params = {k[6:]: data[k] for k in data.files if k.startswith("param/")}
    return {"grads": grads, "params": params}
