"""Data parallelism with ``jax.sharding``: one code path for 1 CPU, N CPUs, GPUs, TPUs.

A ``Mesh`` with one axis, ``"batch"``, spans the chosen devices. Parameters and
optimizer state are replicated (``NamedSharding(mesh, P())``); every batch is split
along its example axis (``P("batch")``, or ``P(None, "batch")`` for an epoch's
stacked `(steps, batch, ...)` arrays). The step itself is unchanged: ``jax.jit``
sees the shardings of its inputs and inserts the gradient all-reduce (the mean over
the global batch is an ordinary ``jnp.mean``), which is what torch's
``DistributedDataParallel`` does by hand with its bucketed all-reduce.

Parameter sharding (``shard="fsdp"``: each device keeps a part of every parameter and
of its optimizer state) is ``jaxgrad.train.fsdp``; its mesh too splits every batch over
all devices.

Several simulated CPU devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
before JAX starts. Several hosts: ``initialize_distributed()`` calls
``jax.distributed.initialize`` when its environment is present; each process then
feeds its own slice of the global batch (``jax.make_array_from_process_local_data``).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

BATCH_AXIS = "batch"
# axes that split the model, not the batch (jaxgrad.train.fsdp's "tensor" mode)
MODEL_AXES = ("tensor",)
PLATFORMS = ("cpu", "gpu", "tpu")
# Variables under which jax.distributed.initialize() finds its coordinator itself.
_DISTRIBUTED_ENV = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")


def initialize_distributed() -> bool:
    """Join a multi-host run if the environment describes one; True if it did.

    Reads ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``
    (or the cluster's own variables, which ``jax.distributed.initialize`` detects on
    Slurm and Cloud TPU). Without them this is a no-op: a single-host run.

    Returns:
      True when this process is part of a multi-process run (``jax.distributed`` is
      initialized, by this call or an earlier one), False for a single host.
    """
    address = next((os.environ[v] for v in _DISTRIBUTED_ENV if os.environ.get(v)), None)
    if address is None:
        return False
    if jax.distributed.is_initialized():  # a second call joins nothing twice
        return True
    kwargs = {"coordinator_address": address}
    if os.environ.get("JAX_NUM_PROCESSES"):
        kwargs["num_processes"] = int(os.environ["JAX_NUM_PROCESSES"])
    if os.environ.get("JAX_PROCESS_ID"):
        kwargs["process_id"] = int(os.environ["JAX_PROCESS_ID"])
    jax.distributed.initialize(**kwargs)
    return True


def select_devices(platform: str | None = None) -> list:
    """Every visible device of ``platform`` (``"cpu"``, ``"gpu"``, ``"tpu"``; None: default).

    Args:
      platform: ``"cpu"``, ``"gpu"``, ``"tpu"``, or None for jax's default backend.

    Returns:
      A list of jax devices (at least one).

    Raises:
      ValueError: naming the platform asked for and the ones that are available.
    """
    if platform is None:
        return jax.devices()
    if platform not in PLATFORMS:
        raise ValueError(f"`device` (={platform!r}) must be one of {', '.join(PLATFORMS)}.")
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    if not devices:
        available = sorted({d.platform for d in jax.devices()})
        raise ValueError(
            f"`device` (={platform!r}): JAX sees no {platform} device; available: "
            f"{', '.join(available)}."
        )
    return devices


def data_parallel_mesh(devices=None) -> Mesh:
    """A one-axis mesh (``"batch"``) over ``devices`` (default: all visible devices).

    Args:
      devices: the devices to split batches over (None: ``jax.devices()``).

    Returns:
      A ``jax.sharding.Mesh`` with the one axis ``"batch"``.
    """
    devices = list(jax.devices() if devices is None else devices)
    return Mesh(np.array(devices), (BATCH_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_axes(mesh: Mesh) -> tuple[str, ...]:
    """The mesh axes a batch's examples are split over: every axis but the model axes
    (``MODEL_AXES``: a tensor-parallel axis holds slices of the weights and sees the
    whole of its data shard's batch)."""
    return tuple(name for name in mesh.axis_names if name not in MODEL_AXES)


def batch_shards(mesh: Mesh) -> int:
    """How many pieces a batch is split into over ``mesh`` (the sizes of ``batch_axes``)."""
    return int(np.prod([mesh.shape[name] for name in batch_axes(mesh)]))


def batch_sharding(mesh: Mesh, *, stacked: bool = False) -> NamedSharding:
    """Split the example axis over ``batch_axes(mesh)`` (``"batch"``, ``("data", "fsdp")``
    or, beside a tensor axis, ``"data"``): axis 0 of a batch, axis 1 of stacked
    `(steps, batch, ...)`."""
    names = batch_axes(mesh)
    axes = names[0] if len(names) == 1 else names
    spec = PartitionSpec(None, axes) if stacked else PartitionSpec(axes)
    return NamedSharding(mesh, spec)


def replicate(tree, mesh: Mesh):
    """Copy every leaf of ``tree`` (params, optimizer state) onto every device of ``mesh``.

    Always a copy (``place_leaf``): the train step donates what it is given, and the
    caller's arrays must survive that.

    Args:
      tree: any pytree of arrays.
      mesh: the data-parallel mesh (``data_parallel_mesh``).

    Returns:
      The same pytree, every leaf replicated over ``mesh``.
    """
    sharding = replicated(mesh)
    return jax.tree_util.tree_map(lambda leaf: place_leaf(leaf, sharding), tree)


def place_leaf(leaf, sharding):
    """One array on ``sharding``, in fresh buffers that no device and no caller shares.

    ``jax.device_put(..., may_alias=False)`` from one device to a sharding that
    replicates over that device may keep the source buffer there, and the train step's
    donation then deletes the caller's array; so each device's shard is copied from the
    host. An array already spread over several processes is resharded by a jitted copy
    (every process holds only its own shards).

    Args:
      leaf: a ``jax.Array`` or anything ``np.asarray`` takes; with several processes,
        the same full value in every process, or an array that spans them.
      sharding: where it goes.

    Returns:
      A ``jax.Array`` on ``sharding``.
    """
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        return jax.jit(jnp.copy, out_shardings=sharding)(leaf)
    host = np.asarray(leaf)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: np.array(host[index]))


def shard_batch(batch, mesh: Mesh, *, stacked: bool = False):
    """Split every leaf of ``batch`` over the mesh along its example axis.

    ``batch`` is the global batch, as every process of a run computes it from
    ``(seed, epoch)``; with several processes each keeps its own contiguous slice
    (``jax.make_array_from_process_local_data``) and never sends the rest anywhere.

    Args:
      batch: a pytree of arrays whose example axis is axis 0 (or axis 1 of stacked
        `(steps, batch, ...)` arrays with ``stacked=True``).
      mesh: the data-parallel mesh.
      stacked: the leaves are stacked steps, `(steps, batch, ...)`.

    Returns:
      The same pytree, every leaf a global array sharded along its example axis.

    Raises:
      ValueError: when the example count does not divide by the number of devices.
    """
    sharding = batch_sharding(mesh, stacked=stacked)
    axis = 1 if stacked else 0
    devices = batch_shards(mesh)

    def place(array):
        array = np.asarray(array)
        if array.shape[axis] % devices:
            raise ValueError(
                f"batch of {array.shape[axis]} examples does not divide over "
                f"{devices} devices; use a batch size that is a multiple of the "
                "device count."
            )
        if jax.process_count() > 1:
            local = np.array_split(array, jax.process_count(), axis=axis)[jax.process_index()]
            return jax.make_array_from_process_local_data(sharding, local, array.shape)
        return jax.device_put(array, sharding)

    return jax.tree_util.tree_map(place, batch)


def describe_devices(devices) -> str:
    """``"4 × cpu (cpu)"``: count, platform and device kinds, for logs."""
    devices = list(devices)
    kinds = sorted({getattr(d, "device_kind", d.platform) for d in devices})
    return f"{len(devices)} × {devices[0].platform} ({', '.join(kinds)})"


def param_bytes(tree) -> tuple[int, int]:
    """``(total, per_device)``: the bytes of ``tree``'s arrays, and the most any one device holds.

    ``total`` counts every leaf once at its global shape; ``per_device`` is the largest
    sum, over this process's devices, of the shards each holds (``addressable_shards``).
    Replicated leaves count in full on every device; a host (numpy) leaf counts on none.

    Args:
      tree: a pytree of ``jax.Array`` (or numpy) leaves.

    Returns:
      Two ints, in bytes.
    """
    total, held = 0, {}
    for leaf in jax.tree_util.tree_leaves(tree):
        total += int(np.prod(np.shape(leaf))) * np.dtype(leaf.dtype).itemsize
        for shard in getattr(leaf, "addressable_shards", ()):
            held[shard.device] = held.get(shard.device, 0) + shard.data.nbytes
    return total, max(held.values(), default=0)
