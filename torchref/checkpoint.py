"""Checkpoints of a torch training run: the twin of ``jaxgrad.train.checkpoint``.

Same layout and guarantees: ``DIR/ckpt-<global step, 8 digits>/`` holds
``params.safetensors`` (``module.state_dict()``, readable by
``jaxgrad.train.load_params``), ``optimizer.pt`` (``optimizer.state_dict()``) and
``meta.json`` (step, data position, seed, run configuration, sha256 per file, and
``meta_sha256`` of the record itself, so an edited ``meta.json`` is refused). It is
written into a hidden temporary directory, renamed into place with ``os.replace``, and
only then named by ``DIR/LATEST``; loading verifies the hashes, the configuration, the
parameter names and shapes, and the optimizer's parameter groups, raising
``CheckpointError`` (a ``ValueError``) for anything that does not fit. When ``LATEST``
names a damaged checkpoint, ``latest_verified`` names the newest intact one
(``CheckpointError.intact``). Never imports jax.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid

import safetensors.torch
import torch

FORMAT = "torchref-checkpoint"
VERSION = 2  # 2: meta.json carries its own sha256
LATEST = "LATEST"
PARAMS_FILE = "params.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, or does not fit the current run;
    ``intact`` names the newest intact checkpoint of a damaged one's directory."""

    intact: str | None = None


def meta_digest(record: dict) -> str:
    """sha256 of ``record`` without its ``meta_sha256`` field, as canonical JSON."""
    body = {k: v for k, v in record.items() if k != "meta_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _durable(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(directory: str) -> str | None:
    """The checkpoint ``DIR/LATEST`` names, None if there is none; error if it vanished."""
    pointer = os.path.join(directory, LATEST)
    if not os.path.isfile(pointer):
        return None
    with open(pointer) as handle:
        name = handle.read().strip()
    path = os.path.join(directory, name)
    if not name or not os.path.isdir(path):
        raise CheckpointError(f"{pointer} names checkpoint {name!r}, which does not exist.")
    return path


def save_checkpoint(
    directory: str,
    *,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict,
    keep: int = 2,
) -> str:
    """Write module and optimizer state atomically; point ``LATEST`` at it; keep ``keep``."""
    os.makedirs(directory, exist_ok=True)
    name = f"ckpt-{int(meta['global_step']):08d}"
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".tmp-{name}-{uuid.uuid4().hex}")
    os.makedirs(tmp)
    try:
        state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
        safetensors.torch.save_file(state, os.path.join(tmp, PARAMS_FILE))
        torch.save(optimizer.state_dict(), os.path.join(tmp, OPTIMIZER_FILE))
        files = {f: _sha256(os.path.join(tmp, f)) for f in (PARAMS_FILE, OPTIMIZER_FILE)}
        record = {"format": FORMAT, "version": VERSION, **meta, "files": files}
        record["meta_sha256"] = meta_digest(record)
        with open(os.path.join(tmp, META_FILE), "w") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
        for f in (PARAMS_FILE, OPTIMIZER_FILE, META_FILE):
            _durable(os.path.join(tmp, f))
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
        pointer_tmp = os.path.join(directory, f".tmp-{LATEST}-{uuid.uuid4().hex}")
        with open(pointer_tmp, "w") as handle:
            handle.write(name + "\n")
        _durable(pointer_tmp)
        os.replace(pointer_tmp, os.path.join(directory, LATEST))
        _durable(directory)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    names = sorted(n for n in os.listdir(directory) if n.startswith("ckpt-"))
    for stale in [n for n in names[:-keep] if n != name]:
        shutil.rmtree(os.path.join(directory, stale))
    return final


def verify_checkpoint(path: str) -> dict:
    """The checkpoint's meta after checking its integrity: ``meta.json`` readable, of
    this format, unmodified (``meta_sha256``), every listed file present and unchanged."""
    try:
        with open(os.path.join(path, META_FILE)) as handle:
            meta = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path}: cannot read {META_FILE} ({exc}).") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} does not describe a {FORMAT} v{VERSION} checkpoint."
        )
    if meta.get("meta_sha256") != meta_digest(meta):
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} was modified after it was written "
            "(its sha256 does not match the meta_sha256 recorded in it); "
            "refusing to use it."
        )
    for name, digest in meta.get("files", {}).items():
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path) or _sha256(file_path) != digest:
            raise CheckpointError(
                f"checkpoint {path}: {name} is missing or corrupt "
                "(sha256 does not match the one recorded when written)."
            )
    return meta


def newest_intact(directory: str, *, exclude: str | None = None) -> str | None:
    """The newest ``ckpt-*`` of ``directory`` that passes ``verify_checkpoint``."""
    for name in sorted((n for n in os.listdir(directory) if n.startswith("ckpt-")), reverse=True):
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
    """``latest_checkpoint`` after ``verify_checkpoint`` (None without ``LATEST``); a
    damaged one raises ``CheckpointError`` naming the newest intact one (``.intact``)."""
    try:
        path = latest_checkpoint(directory)
        if path is not None:
            verify_checkpoint(path)
        return path
    except CheckpointError as exc:
        with open(os.path.join(directory, LATEST)) as handle:
            named = os.path.join(directory, handle.read().strip())
        intact = newest_intact(directory, exclude=named)
        hint = (
            f" The newest intact checkpoint in {directory} is {intact}."
            if intact
            else f" No other checkpoint in {directory} is intact."
        )
        error = CheckpointError(f"{LATEST} names a damaged checkpoint: {exc}{hint}")
        error.intact = intact
        raise error from exc


def load_checkpoint(
    path: str,
    *,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    config: dict | None = None,
) -> dict:
    """Load a checkpoint into ``module`` and ``optimizer`` in place; return its meta.

    Raises:
      CheckpointError: unreadable or corrupt files, another configuration, or state
        that does not fit the module or the optimizer.
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
            f"checkpoint {path} was written by a different run configuration ({'; '.join(diffs)})."
        )
    try:
        module.load_state_dict(
            safetensors.torch.load_file(os.path.join(path, PARAMS_FILE)), strict=True
        )
        optimizer.load_state_dict(torch.load(os.path.join(path, OPTIMIZER_FILE), weights_only=True))
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit the model/optimizer: {exc}") from exc
    return meta
