"""Checkpoints of a torch training run: the twin of ``jaxgrad.train.checkpoint``.

Same layout and guarantees: ``DIR/ckpt-<global step, 8 digits>/`` holds
``params.safetensors`` (``module.state_dict()``, readable by
``jaxgrad.train.load_params``), ``optimizer.pt`` (``optimizer.state_dict()``) and
``meta.json`` (step, data position, seed, run configuration, sha256 per file). It is
written into a hidden temporary directory, renamed into place with ``os.replace``, and
only then named by ``DIR/LATEST``; loading verifies the hashes, the configuration, the
parameter names and shapes, and the optimizer's parameter groups, raising
``CheckpointError`` (a ``ValueError``) for anything that does not fit. Never imports jax.
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
VERSION = 1
LATEST = "LATEST"
PARAMS_FILE = "params.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, or does not fit the current run."""


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
    name = open(pointer).read().strip()
    path = os.path.join(directory, name)
    if not name or not os.path.isdir(path):
        raise CheckpointError(f"{pointer} names checkpoint {name!r}, which does not exist.")
    return path


def save_checkpoint(directory: str, *, module: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, meta: dict, keep: int = 2) -> str:
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
        with open(os.path.join(tmp, META_FILE), "w") as handle:
            json.dump({"format": FORMAT, "version": VERSION, **meta, "files": files}, handle,
                      indent=1, sort_keys=True)
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


def load_checkpoint(path: str, *, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    config: dict | None = None) -> dict:
    """Load a checkpoint into ``module`` and ``optimizer`` in place; return its meta.

    Raises:
      CheckpointError: unreadable or corrupt files, another configuration, or state
        that does not fit the module or the optimizer.
    """
    try:
        with open(os.path.join(path, META_FILE)) as handle:
            meta = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path}: cannot read {META_FILE} ({exc}).") from exc
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {path}: not a {FORMAT} v{VERSION} checkpoint.")
    for name, digest in meta.get("files", {}).items():
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path) or _sha256(file_path) != digest:
            raise CheckpointError(f"checkpoint {path}: {name} is missing or corrupt "
                                  "(sha256 does not match the one recorded when written).")
    if config is not None and meta.get("config") != config:
        stored = meta.get("config") or {}
        diffs = [f"{k}: checkpoint {stored.get(k)!r}, now {config.get(k)!r}"
                 for k in sorted(set(stored) | set(config)) if stored.get(k) != config.get(k)]
        raise CheckpointError(f"checkpoint {path} was written by a different run "
                              f"configuration ({'; '.join(diffs)}).")
    try:
        module.load_state_dict(safetensors.torch.load_file(os.path.join(path, PARAMS_FILE)),
                               strict=True)
        optimizer.load_state_dict(torch.load(os.path.join(path, OPTIMIZER_FILE),
                                             weights_only=True))
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit the model/optimizer: {exc}") from exc
    return meta
