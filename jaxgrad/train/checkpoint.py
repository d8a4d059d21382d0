"""Checkpoints: atomic on disk, verified on load, never silently skipped.

A checkpoint is a directory ``DIR/ckpt-<global step, 8 digits>/`` holding

- ``params.safetensors``: the parameters keyed like torch's ``state_dict()``;
  ``safetensors.torch.load_file`` gives a dict torch's ``load_state_dict`` accepts;
- ``opt_state.safetensors``: every optimizer-state leaf, keyed by its pytree path;
- ``meta.json``: global step, data position (epoch, batch within the epoch), seed
  and RNG, the run's configuration, a sha256 of each file, and ``meta_sha256``, the
  sha256 of this record itself (canonical JSON without that field), so an edited
  ``meta.json`` is refused like a corrupt parameter file. (The hashes detect
  corruption and hand edits; they are not a signature.)

Atomicity: everything is written into a hidden ``DIR/.tmp-…`` directory, flushed,
then renamed into place with ``os.replace``; only then is ``DIR/LATEST`` (one line,
the checkpoint's name) replaced, again by rename. A process killed at any moment
leaves ``LATEST`` naming a complete checkpoint (or absent); half-written temporary
directories are never read and are removed by the next save.

Sharded and multi-process runs write the same files: full arrays under the same keys,
gathered to the host first (``gather_to_host``: ``process_allgather`` when the arrays
span several processes; every process calls ``save_checkpoint``, process 0 alone
writes, and the others wait for it). A resumed run places the full arrays by its own
shardings (``jaxgrad.train.fsdp``), so a checkpoint of 2 processes × 2 devices with
sharded parameters resumes in 1 process on 1 device, and back. This format, rather
than one file per shard: it does not depend on the device count, it is verified by
the hashes below like any other, and it is the very file a one-device run (or torch's
``load_state_dict``) reads. Its bound is one host's memory, which must hold the whole
model and optimizer state once while saving; beyond that, per-shard asynchronous
checkpoints (orbax) are the tool.

Loading checks the hashes, the parameter names/shapes/dtypes against the model,
the optimizer-state structure against a fresh ``optimizer.init``, and the stored
configuration against the current one; each failure is a ``CheckpointError``
(a ``ValueError``) saying what differs. When the checkpoint ``LATEST`` names is
corrupt, ``latest_verified`` says so and names the newest checkpoint of the
directory that is intact (``CheckpointError.intact``), to resume from explicitly.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid

import jax
import numpy as np
import safetensors.numpy
from jax.experimental import multihost_utils

FORMAT = "jaxgrad-checkpoint"
VERSION = 2  # 2: meta.json carries its own sha256
LATEST = "LATEST"
PARAMS_FILE = "params.safetensors"
OPT_STATE_FILE = "opt_state.safetensors"
META_FILE = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, or does not fit the current run.

    ``intact``: when the checkpoint is damaged, the newest intact checkpoint of the
    same directory (or None); set by ``latest_verified``.
    """

    intact: str | None = None


def meta_digest(record: dict) -> str:
    """sha256 of ``record`` without its ``meta_sha256`` field, as canonical JSON."""
    body = {k: v for k, v in record.items() if k != "meta_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keyed_leaves(tree):
    """``({key: leaf}, treedef)``: a flat params dict keeps its own (torch) keys,
    any other pytree is keyed by ``jax.tree_util.keystr`` of each leaf's path."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    flat_dict = isinstance(tree, dict) and all(len(path) == 1 for path, _ in leaves)
    keyed = {
        (path[0].key if flat_dict else jax.tree_util.keystr(path)): leaf for path, leaf in leaves
    }
    return keyed, treedef


def _numpy_tree(tree) -> dict[str, np.ndarray]:
    """``{key: numpy array}`` for every leaf, keys as ``_keyed_leaves``."""
    keyed, _ = _keyed_leaves(tree)
    # np.array, not np.ascontiguousarray: the latter turns 0-d leaves (step counts) into (1,)
    return {k: np.array(v, order="C") for k, v in keyed.items()}


def gather_to_host(tree):
    """Every leaf of ``tree`` as one full host array, wherever its shards are.

    With arrays spread over several processes (not fully addressable) this is a
    collective: every process must call it, and every one gets the full arrays
    (``jax.experimental.multihost_utils.process_allgather``). Otherwise the leaves are
    returned as they are (``np.array`` gathers the shards of this process's devices).

    Args:
      tree: a pytree of ``jax.Array`` or numpy leaves.

    Returns:
      The same pytree; leaves that spanned processes as numpy arrays of their global
      shape.
    """
    spread = any(
        isinstance(leaf, jax.Array) and not leaf.is_fully_addressable
        for leaf in jax.tree_util.tree_leaves(tree)
    )
    return multihost_utils.process_allgather(tree, tiled=True) if spread else tree


def save_params(path: str, params, *, metadata: dict[str, str] | None = None) -> str:
    """Write ``params`` (flat, torch keys) to a safetensors file atomically; return path.

    Args:
      path: the file to write; its directory is created if missing. Written to a
        temporary file, synced, then renamed: a crash leaves the old file or the new.
      params: a flat ``{torch key: array}`` dict (jax or numpy arrays).
      metadata: string entries for the file's header.

    Returns:
      ``path``. ``torch_module.load_state_dict(safetensors.torch.load_file(path))``
      reads it on the torch side.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}-{os.path.basename(path)}")
    try:
        safetensors.numpy.save_file(_numpy_tree(params), tmp, metadata=metadata)
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load_params(path: str, model=None):
    """Parameters from a safetensors file written by either framework.

    With ``model`` the arrays are validated (names, shapes, dtypes) by
    ``model.load_state_dict`` and returned as jax arrays; otherwise as numpy.

    Args:
      path: a ``.safetensors`` file keyed like torch's ``state_dict()``.
      model: a ``jaxgrad.nn`` model to validate and load into (optional).

    Returns:
      ``{torch key: array}``: jax arrays with ``model``, numpy arrays without.

    Raises:
      CheckpointError: a missing or unreadable file.
      ValueError: with ``model``, every missing or unexpected key and every shape or
        dtype mismatch (``load_state_dict``).
    """
    arrays = _read_safetensors(path)
    return arrays if model is None else model.load_state_dict(arrays)


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise CheckpointError(f"no such file: {path}")
    try:
        return dict(safetensors.numpy.load_file(path))
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc}).") from exc


def checkpoint_name(global_step: int) -> str:
    return f"ckpt-{global_step:08d}"


def latest_checkpoint(directory: str) -> str | None:
    """The path ``DIR/LATEST`` names, or None when no checkpoint was ever completed.

    Args:
      directory: the checkpoint directory of a run.

    Returns:
      The checkpoint's path, or None.

    Raises:
      CheckpointError: when ``LATEST`` names a checkpoint that is not there.
    """
    pointer = os.path.join(directory, LATEST)
    if not os.path.isfile(pointer):
        return None
    name = _read_pointer(directory)
    path = os.path.join(directory, name)
    if not name or not os.path.isdir(path):
        raise CheckpointError(
            f"{pointer} names checkpoint {name!r}, which does not exist in {directory}."
        )
    return path


def save_checkpoint(directory: str, *, params, opt_state, meta: dict, keep: int = 2) -> str:
    """Write a checkpoint atomically, point ``LATEST`` at it, keep the newest ``keep``.

    With several processes every process calls this (the gather is a collective);
    process 0 writes and the others return once it has.

    Args:
      params: flat dict of arrays, torch ``state_dict`` keys; sharded arrays are
        written whole (``gather_to_host``).
      opt_state: the optimizer state pytree.
      meta: JSON-serialisable; must hold ``"global_step"``.

    Returns:
      The checkpoint's directory.
    """
    if keep < 1:
        raise ValueError(f"`keep` (={keep}) must be >= 1.")
    name = checkpoint_name(int(meta["global_step"]))
    final = os.path.join(directory, name)
    params, opt_state = gather_to_host((params, opt_state))
    if jax.process_count() > 1:
        try:
            if jax.process_index() == 0:
                _write_checkpoint(directory, name, params, opt_state, meta, keep)
        finally:  # nobody goes on (to exit, to read it) before it is complete, or failed
            multihost_utils.sync_global_devices(f"jaxgrad checkpoint {final}")
        return final
    return _write_checkpoint(directory, name, params, opt_state, meta, keep)


def _write_checkpoint(directory: str, name: str, params, opt_state, meta: dict, keep: int) -> str:
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".tmp-{name}-{uuid.uuid4().hex}")
    os.makedirs(tmp)
    try:
        safetensors.numpy.save_file(_numpy_tree(params), os.path.join(tmp, PARAMS_FILE))
        safetensors.numpy.save_file(_numpy_tree(opt_state), os.path.join(tmp, OPT_STATE_FILE))
        files = {f: _sha256(os.path.join(tmp, f)) for f in (PARAMS_FILE, OPT_STATE_FILE)}
        record = {"format": FORMAT, "version": VERSION, **meta, "files": files}
        record["meta_sha256"] = meta_digest(record)
        with open(os.path.join(tmp, META_FILE), "w") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
        for f in (PARAMS_FILE, OPT_STATE_FILE, META_FILE):
            _fsync(os.path.join(tmp, f))
        if os.path.exists(final):  # a rerun of the same step replaces the old copy
            shutil.rmtree(final)
        os.replace(tmp, final)
        _write_pointer(directory, name)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    _prune(directory, keep=keep, current=name)
    return final


def _write_pointer(directory: str, name: str) -> None:
    tmp = os.path.join(directory, f".tmp-{LATEST}-{uuid.uuid4().hex}")
    with open(tmp, "w") as handle:
        handle.write(name + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, os.path.join(directory, LATEST))
    _fsync(directory)


def _prune(directory: str, *, keep: int, current: str) -> None:
    names = sorted(n for n in os.listdir(directory) if n.startswith("ckpt-"))
    stale = [n for n in names[:-keep] if n != current]
    stale += [n for n in os.listdir(directory) if n.startswith(".tmp-")]
    for name in stale:
        path = os.path.join(directory, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def verify_checkpoint(path: str) -> dict:
    """The checkpoint's meta after checking its integrity (nothing about the run).

    Checks that ``meta.json`` is readable, of this format and version, unmodified
    (``meta_sha256``), and that every file it lists is present with its sha256.

    Args:
      path: a ``ckpt-*`` directory.

    Returns:
      The checkpoint's ``meta.json`` as a dict.

    Raises:
      CheckpointError: naming the checkpoint and the file that fails.
    """
    meta_path = os.path.join(path, META_FILE)
    try:
        with open(meta_path) as handle:
            meta = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path}: cannot read {META_FILE} ({exc}).") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        found = meta if not isinstance(meta, dict) else (meta.get("format"), meta.get("version"))
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} describes {found!r}, not a {FORMAT!r} "
            f"v{VERSION} checkpoint."
        )
    if meta.get("meta_sha256") != meta_digest(meta):
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} was modified after it was written (its "
            "sha256 does not match the meta_sha256 recorded in it); refusing to use it."
        )
    for name, digest in meta.get("files", {}).items():
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path) or _sha256(file_path) != digest:
            raise CheckpointError(
                f"checkpoint {path}: {name} is missing or corrupt (sha256 does not match "
                "the one recorded when it was written)."
            )
    return meta


def newest_intact(directory: str, *, exclude: str | None = None) -> str | None:
    """The newest ``ckpt-*`` of ``directory`` that passes ``verify_checkpoint``.

    Args:
      directory: the checkpoint directory of a run.
      exclude: a checkpoint path to skip (the damaged one ``LATEST`` names).

    Returns:
      The checkpoint's path, or None when no intact one is left.
    """
    names = sorted((n for n in os.listdir(directory) if n.startswith("ckpt-")), reverse=True)
    for name in names:
        path = os.path.join(directory, name)
        if exclude is not None and os.path.abspath(path) == os.path.abspath(exclude):
            continue
        try:
            verify_checkpoint(path)
        except CheckpointError:
            continue
        return path
    return None


def latest_verified(directory: str) -> str | None:
    """``latest_checkpoint`` after ``verify_checkpoint``; None when there is no ``LATEST``.

    Args:
      directory: the checkpoint directory of a run.

    Returns:
      The verified checkpoint's path, or None.

    Raises:
      CheckpointError: when ``LATEST`` names a missing or damaged checkpoint; the
        message and ``.intact`` name the newest intact checkpoint of ``directory``.
    """
    try:
        path = latest_checkpoint(directory)
        if path is not None:
            verify_checkpoint(path)
        return path
    except CheckpointError as exc:
        named = os.path.join(directory, _read_pointer(directory))
        intact = newest_intact(directory, exclude=named)
        hint = (
            f" The newest intact checkpoint in {directory} is {intact}."
            if intact
            else f" No other checkpoint in {directory} is intact."
        )
        error = CheckpointError(f"{LATEST} names a damaged checkpoint: {exc}{hint}")
        error.intact = intact
        raise error from exc


def _read_pointer(directory: str) -> str:
    with open(os.path.join(directory, LATEST)) as handle:
        return handle.read().strip()


def load_checkpoint(path: str, *, model, opt_state_template, config: dict | None = None):
    """Read a checkpoint and check it against the current run.

    Args:
      path: a checkpoint directory (see ``latest_checkpoint``).
      model: validates parameter names, shapes and dtypes.
      opt_state_template: ``optimizer.init(params)`` of the current run; gives the
        structure, shapes and dtypes the stored state must have.
      config: when given, must equal the stored ``meta["config"]``.

    Returns:
      ``(params, opt_state, meta)`` with jax arrays.

    Raises:
      CheckpointError: naming the file, and the keys or settings that differ.
    """
    meta = verify_checkpoint(path)
    if config is not None and meta.get("config") != config:
        stored = meta.get("config") or {}
        diffs = [
            f"{k}: checkpoint {stored.get(k)!r}, now {config.get(k)!r}"
            for k in sorted(set(stored) | set(config))
            if stored.get(k) != config.get(k)
        ]
        raise CheckpointError(
            f"checkpoint {path} was written by a different run configuration ("
            + "; ".join(diffs)
            + "). Resume with the same settings or another directory."
        )
    try:
        params = model.load_state_dict(_read_safetensors(os.path.join(path, PARAMS_FILE)))
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path}: parameters do not fit the model: {exc}") from exc
    opt_state = _restore_tree(
        _read_safetensors(os.path.join(path, OPT_STATE_FILE)), opt_state_template, path
    )
    return params, opt_state, meta


def load_checkpoint_buffers(path: str, *, model):
    """The buffers (BatchNorm's running statistics) of a checkpoint whose
    ``params.safetensors`` holds the whole ``state_dict`` (a ``Trainer`` with buffers
    writes it so), validated by ``model.load_buffers``; call after ``load_checkpoint``,
    which verified the files.

    Raises:
      CheckpointError: a buffer is missing or does not fit the model.
    """
    try:
        return model.load_buffers(_read_safetensors(os.path.join(path, PARAMS_FILE)))
    except ValueError as exc:
        raise CheckpointError(f"checkpoint {path}: buffers do not fit the model: {exc}") from exc


def _restore_tree(arrays: dict, template, path: str):
    expected, treedef = _keyed_leaves(template)
    problems = []
    missing = [k for k in expected if k not in arrays]
    extra = [k for k in arrays if k not in expected]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if extra:
        problems.append(f"unexpected {', '.join(extra)}")
    for key, leaf in expected.items():
        if key in arrays:
            # the template's shape and dtype, never its values: they may span processes
            got, shape, dtype = arrays[key], np.shape(leaf), np.dtype(leaf.dtype)
            if got.shape != shape or got.dtype != dtype:
                problems.append(
                    f"{key}: {got.dtype}{list(got.shape)} != expected {dtype}{list(shape)}"
                )
    if problems:
        raise CheckpointError(
            f"checkpoint {path}: optimizer state does not fit the current optimizer ("
            + "; ".join(problems)
            + ")."
        )
    return jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(arrays[k]) for k in expected])
