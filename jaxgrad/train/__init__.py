"""Jit-compiled training: steps, scan-fused epochs, data parallelism, checkpoints.

- ``step``: ``make_train_step`` / ``make_train_epoch`` / ``make_train_stretch`` /
  ``evaluate`` (pure, jitted);
- ``sharding``: a ``Mesh`` over the batch axis, for 1..N devices and several hosts;
- ``fsdp``: where parameters and optimizer state live (``shard="none"|"data"|"fsdp"|"tensor"``),
  one rule from each parameter's torch shape;
- ``checkpoint``: atomic, verified checkpoints; safetensors params keyed like torch;
- ``loop``: ``Trainer``, the resumable loop with periodic checkpoints and a
  non-finite-loss stop; given ``buffers``, it trains models with BatchNorm statistics
  and random ops (``stateful_step``'s steps; ``StatefulTrainer``);
- ``strategy``: which execution strategy a run uses (per-step jit, scan-fused epoch,
  ``unroll=K``, fully unrolled), forced or chosen by a cached probe (``"auto"``);
- ``benchmark``: a speed measurement's verdict on itself (load, per-row spread,
  warm-up, the peak probe, CPU);
- ``xla_cpu``: which kernels XLA:CPU compiled a step into (``hlo_summary``);
- ``host_memory``: ``keep_freed_host_memory``, so XLA:CPU's per-call buffers are reused
  instead of page-faulting every step.
"""

from jaxgrad.train.checkpoint import (
    CheckpointError,
    gather_to_host,
    latest_checkpoint,
    latest_verified,
    load_checkpoint,
    load_params,
    newest_intact,
    save_checkpoint,
    save_params,
    verify_checkpoint,
)
from jaxgrad.train.fsdp import (
    opt_state_shardings,
    param_shardings,
    partition_spec,
    place,
    shard_mesh,
    tensor_partition_spec,
)
from jaxgrad.train.host_memory import HostMemory, keep_freed_host_memory
from jaxgrad.train.loop import EpochResult, NonFiniteLossError, Trainer, check_batch
from jaxgrad.train.sharding import (
    data_parallel_mesh,
    initialize_distributed,
    param_bytes,
    replicate,
    select_devices,
    shard_batch,
)
from jaxgrad.train.stateful import StatefulTrainer
from jaxgrad.train.step import (
    build_optimizer,
    compute_dtype_error,
    evaluate,
    make_train_epoch,
    make_train_step,
    make_train_stretch,
)
from jaxgrad.train.strategy import Choice, parse_strategy
