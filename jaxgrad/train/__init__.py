"""Jit-compiled training: steps, scan-fused epochs, data parallelism, checkpoints.

- ``step``: ``make_train_step`` / ``make_train_epoch`` / ``make_train_stretch`` /
  ``evaluate`` (pure, jitted);
- ``sharding``: a ``Mesh`` over the batch axis, for 1..N devices and several hosts;
- ``checkpoint``: atomic, verified checkpoints; safetensors params keyed like torch;
- ``loop``: ``Trainer``, the resumable loop with periodic checkpoints and a
  non-finite-loss stop;
- ``strategy``: which execution strategy a run uses (per-step jit, scan-fused epoch,
  ``unroll=K``, fully unrolled), forced or chosen by a cached probe (``"auto"``);
- ``benchmark``: a speed measurement's verdict on itself (load, per-row spread,
  warm-up, the peak probe, CPU);
- ``xla_cpu``: which kernels XLA:CPU compiled a step into (``hlo_summary``);
- ``host_memory``: ``keep_freed_host_memory``, so XLA:CPU's per-call buffers are reused
  instead of page-faulting every step.
"""

from jaxgrad.train.checkpoint import CheckpointError
from jaxgrad.train.checkpoint import latest_checkpoint
from jaxgrad.train.checkpoint import latest_verified
from jaxgrad.train.checkpoint import load_checkpoint
from jaxgrad.train.checkpoint import load_params
from jaxgrad.train.checkpoint import newest_intact
from jaxgrad.train.checkpoint import save_checkpoint
from jaxgrad.train.checkpoint import save_params
from jaxgrad.train.checkpoint import verify_checkpoint
from jaxgrad.train.host_memory import HostMemory
from jaxgrad.train.host_memory import keep_freed_host_memory
from jaxgrad.train.loop import EpochResult
from jaxgrad.train.loop import check_batch
from jaxgrad.train.loop import NonFiniteLossError
from jaxgrad.train.loop import Trainer
from jaxgrad.train.sharding import data_parallel_mesh
from jaxgrad.train.sharding import initialize_distributed
from jaxgrad.train.sharding import replicate
from jaxgrad.train.sharding import select_devices
from jaxgrad.train.sharding import shard_batch
from jaxgrad.train.step import build_optimizer
from jaxgrad.train.step import compute_dtype_error
from jaxgrad.train.step import evaluate
from jaxgrad.train.step import make_train_epoch
from jaxgrad.train.step import make_train_step
from jaxgrad.train.step import make_train_stretch
from jaxgrad.train.strategy import Choice
from jaxgrad.train.strategy import parse_strategy
