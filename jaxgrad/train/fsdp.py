"""Where each parameter and optimizer-state leaf lives: ``shard="none" | "data" | "fsdp" |
"tensor"``.

The mesh spans every device of every process, and the batch is split over all of them
(``"tensor"``: over the processes); what the modes change is where the parameters and
the optimizer state are kept:

| ``shard`` | mesh (axis names and sizes, N devices) | parameters and optimizer state |
|---|---|---|
| ``none`` | ``("batch",)``: one device | on that device |
| ``data`` | ``("batch",)``: N | replicated on every device (data parallelism, torch's DDP) |
| ``fsdp`` | ``("data", "fsdp")``: 1 × N | each split along one dimension over ``fsdp`` (torch's FSDP / ZeRO-3) |
| ``tensor`` | ``("data", "tensor")``: P processes × their D devices | Linear, attention and Embedding matrices split by rows over ``tensor`` (each process's devices), the rest replicated; the batch split over ``data`` (the processes) only |

The one rule (``partition_spec``) reads a parameter's torch shape, never its model:

| a parameter of torch shape ``s`` | is split over the ``fsdp`` axis (size N) along |
|---|---|
| ``s[0] % N == 0`` | dim 0: Linear's ``out_features``, Conv's out channels, Embedding's rows, LSTM's gate rows ``4·hidden``, a norm's or a bias's features |
| else some ``s[d] % N == 0`` | the largest such ``d`` (the first of equals): ``in_features`` of a classifier whose 10 classes do not divide |
| no dimension divides, or ``s == ()`` | nowhere: replicated (small biases, odd sizes, scalars) |

``"tensor"`` (``tensor_partition_spec``) splits only what tensor parallelism splits: a
2-D parameter (``Linear.weight`` `(out, in)`, attention's ``in_proj_weight`` `(3E, E)`
and ``out_proj.weight``, ``Embedding.weight`` `(num, dim)`) along dim 0 when it divides
by D (Megatron's column-parallel split: each device computes a slice of the output
features, ``Embedding``'s a slice of the vocabulary), and the bias that goes with such a
weight (``fc.bias`` with ``fc.weight``, ``in_proj_bias`` with ``in_proj_weight``) the
same way; convolutions, norms and everything else stay replicated. It is tensor
parallelism within each process's devices and data parallelism across processes, the
usual layout (the devices of one host share the fastest links). XLA inserts the
all-gathers and reductions between the split layers: which devices compute what changes,
never the result (the float64 tier against one device).

An optimizer-state leaf that mirrors a parameter (optax states hold dicts keyed like
params: ``momentum_buffer['0.weight']``, ``exp_avg_sq['2.bias']``) is placed like that
parameter: matched by the nearest dict key on its path and its shape. Everything else
(``step`` counts, schedule state) is replicated.

Nothing is hand-written about the collectives: ``jax.jit`` sees the shardings and XLA
inserts the all-gathers of the forward and the gradients' reduce-scatter.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxgrad.train.sharding import MODEL_AXES, data_parallel_mesh, place_leaf

SHARD_MODES = ("none", "data", "fsdp", "tensor")
DATA_AXIS = "data"
FSDP_AXIS = "fsdp"
TENSOR_AXIS = "tensor"
assert (TENSOR_AXIS,) == MODEL_AXES  # the batch is not split over it (sharding.batch_axes)


def check_shard(shard: str) -> str:
    """``shard`` itself when it is one of ``SHARD_MODES``.

    Raises:
      ValueError: naming ``shard``, its value and the modes there are.
    """
    if shard not in SHARD_MODES:
        raise ValueError(f"`shard` (={shard!r}) must be one of {', '.join(SHARD_MODES)}.")
    return shard


def shard_mesh(shard: str, devices=None) -> Mesh:
    """The mesh of a run in mode ``shard`` over ``devices`` (module docstring's table).

    Args:
      shard: ``"none"``, ``"data"`` or ``"fsdp"``.
      devices: the devices, every process's (None: ``jax.devices()``); ``"none"``
        takes exactly one.

    Returns:
      ``"none"`` / ``"data"``: the one-axis ``("batch",)`` mesh of
      ``data_parallel_mesh``; ``"fsdp"``: a `(1, N)` mesh with axes
      ``("data", "fsdp")``, the devices in the order given (so each process's
      devices hold one contiguous slice of the batch, as in ``"data"``); ``"tensor"``:
      a `(P, D)` mesh with axes ``("data", "tensor")``, row p the devices of process p.

    Raises:
      ValueError: an unknown ``shard``, ``"none"`` with more than one device, or
        ``"tensor"`` over processes holding different numbers of devices.
    """
    devices = list(jax.devices() if devices is None else devices)
    if check_shard(shard) == "none" and len(devices) != 1:
        raise ValueError(
            f"`shard` (='none') trains on one device; `devices` holds {len(devices)}: "
            "pass one device, or shard='data' / 'fsdp' to use them all."
        )
    if shard == "fsdp":
        return Mesh(np.array(devices).reshape(1, len(devices)), (DATA_AXIS, FSDP_AXIS))
    if shard == "tensor":
        by_process: dict[int, list] = {}
        for device in devices:
            by_process.setdefault(device.process_index, []).append(device)
        counts = {len(group) for group in by_process.values()}
        if len(counts) != 1:
            raise ValueError(
                "`shard` (='tensor') splits the weights over each process's devices; the "
                f"processes hold different numbers of them ({sorted(counts)})."
            )
        rows = [by_process[p] for p in sorted(by_process)]
        return Mesh(np.array(rows), (DATA_AXIS, TENSOR_AXIS))
    return data_parallel_mesh(devices)


def partition_spec(shape: tuple[int, ...], fsdp_size: int) -> PartitionSpec:
    """The one rule: which dimension of a parameter of ``shape`` is split over ``fsdp``.

    Args:
      shape: the parameter's torch shape, e.g. `(out_features, in_features)`.
      fsdp_size: the ``fsdp`` axis' size N (1: nothing is split).

    Returns:
      ``PartitionSpec`` with ``"fsdp"`` at dim 0 when ``shape[0]`` divides by N, else at
      the largest dimension that does (the first of equals), else ``PartitionSpec()``
      (replicated; scalars too).

    Raises:
      ValueError: ``fsdp_size`` not an int >= 1.
    """
    if not isinstance(fsdp_size, int) or fsdp_size < 1:
        raise ValueError(f"`fsdp_size` (={fsdp_size!r}) must be an int >= 1.")
    shape = tuple(shape)
    if fsdp_size == 1 or not shape:
        return PartitionSpec()
    if shape[0] % fsdp_size == 0:
        dim = 0
    else:
        dividing = [d for d, size in enumerate(shape) if size % fsdp_size == 0]
        if not dividing:
            return PartitionSpec()
        dim = max(dividing, key=lambda d: (shape[d], -d))
    return PartitionSpec(*([None] * dim), FSDP_AXIS)


def tensor_partition_spec(key: str, shape: tuple[int, ...], params, tensor_size: int):
    """The ``"tensor"`` rule (module docstring): ``PartitionSpec("tensor")`` for a 2-D
    parameter whose rows divide by ``tensor_size`` and for the 1-D bias paired with such a
    weight (``X.bias`` / ``X.weight``, ``X_bias`` / ``X_weight``); else replicated.

    Args:
      key: the parameter's torch key (``"encoder.0.fc.weight"``).
      shape: its torch shape.
      params: every parameter (``{key: array or shape struct}``), for the bias' weight.
      tensor_size: the ``tensor`` axis' size D.

    Returns:
      A ``PartitionSpec``.
    """
    shape = tuple(shape)

    def splits(shape) -> bool:
        return len(shape) == 2 and tensor_size > 1 and shape[0] % tensor_size == 0

    if splits(shape):
        return PartitionSpec(TENSOR_AXIS)
    if len(shape) == 1 and key.endswith("bias"):
        weight = np.shape(params.get(key[: -len("bias")] + "weight", ()))
        if splits(weight) and weight[0] == shape[0]:
            return PartitionSpec(TENSOR_AXIS)
    return PartitionSpec()


def param_shardings(params, mesh: Mesh) -> dict:
    """``{torch key: NamedSharding}``: each parameter placed by ``partition_spec`` (an
    ``fsdp`` axis) or ``tensor_partition_spec`` (a ``tensor`` axis).

    A mesh with neither (``"none"``, ``"data"``) replicates every parameter.

    Args:
      params: flat ``{torch key: array}`` (arrays or ``jax.ShapeDtypeStruct``; only the
        shapes are read).
      mesh: ``shard_mesh``'s mesh.

    Returns:
      A dict with the keys of ``params``.
    """
    if TENSOR_AXIS in mesh.shape:
        size = mesh.shape[TENSOR_AXIS]
        return {
            key: NamedSharding(mesh, tensor_partition_spec(key, np.shape(value), params, size))
            for key, value in params.items()
        }
    size = dict(mesh.shape).get(FSDP_AXIS, 1)
    return {
        key: NamedSharding(mesh, partition_spec(np.shape(value), size))
        for key, value in params.items()
    }


def opt_state_shardings(opt_state, params, shardings: dict, mesh: Mesh):
    """The optimizer state's shardings: a leaf that mirrors a parameter gets its sharding.

    A leaf mirrors parameter ``k`` when the nearest dict key on its path is ``k`` and its
    shape is ``params[k]``'s (``exp_avg['0.weight']``); every other leaf (``step``,
    schedule counters, a state keyed otherwise) is replicated.

    Args:
      opt_state: the optimizer state pytree (arrays or ``jax.eval_shape``'s structs).
      params: flat ``{torch key: array}`` (for the shapes).
      shardings: ``param_shardings(params, mesh)``.
      mesh: the mesh.

    Returns:
      A pytree like ``opt_state`` with a ``NamedSharding`` for each leaf.
    """
    replicated = NamedSharding(mesh, PartitionSpec())

    def place(path, leaf):
        keys = [entry.key for entry in path if isinstance(entry, jax.tree_util.DictKey)]
        key = keys[-1] if keys else None
        if key in params and np.shape(leaf) == np.shape(params[key]):
            return shardings[key]
        return replicated

    return jax.tree_util.tree_map_with_path(place, opt_state)


def place(tree, shardings):
    """``tree``'s leaves on their ``shardings`` (a pytree like ``tree``, or one sharding).

    Always fresh buffers, one per device (``place_leaf``), as ``replicate``. With several
    processes every process passes the same full values (host or fully addressable
    arrays) and keeps its own shards; an array already spread over processes is
    resharded by a jitted copy.

    Args:
      tree: any pytree of arrays (`params`, the optimizer state).
      shardings: ``param_shardings`` / ``opt_state_shardings`` of it, or one sharding.

    Returns:
      The same pytree of ``jax.Array`` on those shardings.
    """
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree_util.tree_map(lambda _: shardings, tree)
    return jax.tree_util.tree_map(place_leaf, tree, shardings)
