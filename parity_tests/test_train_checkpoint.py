"""Checkpoints: atomic, verified, torch-loadable; bit-exact resume; faults stop the run."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import safetensors.torch
import torch
import train as train_script
from parity_checks.training import SIZES, make_data

import jaxgrad
import torchref
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.data import batch_indices
from jaxgrad.parity import BIT_IDENTICAL, assert_parity
from jaxgrad.train import (
    CheckpointError,
    NonFiniteLossError,
    Trainer,
    checkpoint,
    latest_checkpoint,
    load_checkpoint,
    load_params,
    save_params,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"run": "test", "lr": 0.1}


def _trainer(directory, *, every=3, fused=False, config=CONFIG, sizes=SIZES, scheduler=None):
    torch.manual_seed(0)
    model, params = jaxgrad.nn.from_torch(torchref.mlp(sizes, "tanh"))
    kwargs = {"lr": 1e-2}
    if scheduler:  # as scripts/train.py --scheduler NAME builds it (OneCycleLR cycles betas[0])
        kwargs = joptim.schedulers.with_cycled_momentum(
            joptim.adam, {"lr": joptim.schedulers.for_run(scheduler, 1e-2, 16)}
        )
    return Trainer(
        model,
        jlosses.cross_entropy,
        joptim.adam(**kwargs),
        params,
        batch_size=8,
        seed=3,
        fused=fused,
        checkpoint_dir=str(directory),
        checkpoint_every=every,
        config=config,
    )


class Interrupt(Exception):
    pass


def _stop_at(step):
    def on_steps(global_step, losses):
        if global_step >= step:
            raise Interrupt

    return on_steps


@pytest.mark.parametrize(
    "fused,every,position,scheduler",
    [(False, 3, (9, 1, 1), None), (True, 4, (12, 1, 4), "OneCycleLR")],
)
def test_resume_mid_epoch_is_bit_exact(tmp_path, fused, every, position, scheduler):
    """Interrupted in epoch 2 after step 10 (fused: after the stretch ending at 12;
    checkpoints every 4 steps keep every stretch 4 long: one compilation per run).
    With a scheduler (train.py --scheduler): its step and OneCycleLR's cycled betas[0]
    are read at the optimizer's own count, which the checkpoint holds."""
    x, y = make_data("float32")  # 64 examples: 8 steps per epoch
    build = functools.partial(_trainer, fused=fused, every=every, scheduler=scheduler)
    plain = build(tmp_path / "plain")
    for _ in range(2):
        plain.train_epoch(x, y)
    stopped = build(tmp_path / "stopped")
    stopped.train_epoch(x, y)
    with pytest.raises(Interrupt):
        stopped.train_epoch(x, y, on_steps=_stop_at(10))
    resumed = build(tmp_path / "stopped")
    meta = resumed.resume()
    assert (meta["global_step"], meta["epoch"], meta["step_in_epoch"]) == position
    result = resumed.train_epoch(x, y)
    assert result.steps == 8 - position[2]
    assert resumed.global_step == plain.global_step == 16
    assert_parity(plain.params, resumed.params, **BIT_IDENTICAL)
    assert_parity(plain.opt_state, resumed.opt_state, **BIT_IDENTICAL)


def test_checkpoint_files_load_in_torch_and_round_trip(tmp_path):
    x, y = make_data("float32")
    trainer = _trainer(tmp_path, every=100)
    trainer.train_epoch(x, y)
    path = trainer.save()
    assert latest_checkpoint(str(tmp_path)) == path
    params, opt_state, meta = load_checkpoint(
        path, model=trainer.model, opt_state_template=trainer.opt_state, config=CONFIG
    )
    assert meta["global_step"] == 8 and meta["epoch"] == 1 and meta["step_in_epoch"] == 0
    assert_parity(trainer.params, params, **BIT_IDENTICAL)
    assert_parity(trainer.opt_state, opt_state, **BIT_IDENTICAL)
    # torch reads the params file as a state_dict, names and layouts unchanged
    state = safetensors.torch.load_file(os.path.join(path, checkpoint.PARAMS_FILE))
    module = torchref.mlp(SIZES, "tanh")
    module.load_state_dict(state, strict=True)
    assert_parity(trainer.params, dict(module.state_dict()), **BIT_IDENTICAL)
    # --save's file: written by jaxgrad, read by both; and one written by torch, read by jaxgrad
    saved = save_params(str(tmp_path / "final.safetensors"), trainer.params)
    assert_parity(trainer.params, safetensors.torch.load_file(saved), **BIT_IDENTICAL)
    safetensors.torch.save_file(dict(module.state_dict()), str(tmp_path / "torch.safetensors"))
    assert_parity(
        trainer.params,
        load_params(str(tmp_path / "torch.safetensors"), trainer.model),
        **BIT_IDENTICAL,
    )


def test_corrupt_or_mismatched_checkpoints_are_errors(tmp_path):
    x, y = make_data("float32")
    trainer = _trainer(tmp_path, every=100)
    trainer.train_epoch(x, y)
    path = trainer.save()

    with pytest.raises(
        CheckpointError, match="different run configuration.*lr: checkpoint 0.1, now 0.2"
    ):
        _trainer(tmp_path, config={**CONFIG, "lr": 0.2}).resume()
    with pytest.raises(CheckpointError, match="parameters do not fit the model"):
        _trainer(tmp_path, sizes=[10, 8, 4]).resume()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        _trainer(tmp_path / "empty").resume()

    params_file = os.path.join(path, checkpoint.PARAMS_FILE)
    data = bytearray(open(params_file, "rb").read())
    data[-3] ^= 0xFF  # one flipped bit pattern in the last weight
    open(params_file, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="params.safetensors is missing or corrupt"):
        _trainer(tmp_path).resume()

    with open(os.path.join(path, checkpoint.META_FILE), "w") as handle:
        handle.write('{"format": "jaxgrad-checkpoint", "vers')  # truncated
    with pytest.raises(CheckpointError, match="cannot read meta.json"):
        _trainer(tmp_path).resume()

    with open(os.path.join(tmp_path, checkpoint.LATEST), "w") as handle:
        handle.write("ckpt-00000099\n")
    with pytest.raises(CheckpointError, match="does not exist"):
        _trainer(tmp_path).resume()


def test_a_failed_write_never_becomes_latest(tmp_path, monkeypatch):
    x, y = make_data("float32")
    trainer = _trainer(tmp_path, every=100)
    good = trainer.save()
    os.makedirs(tmp_path / ".tmp-ckpt-00000005-deadbeef")  # what a SIGKILL mid-write leaves
    trainer.train_epoch(x, y)
    real_save = checkpoint.safetensors.numpy.save_file

    def crash_on_opt_state(tensors, filename, metadata=None):
        if filename.endswith(checkpoint.OPT_STATE_FILE):
            raise OSError("disk full")
        return real_save(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint.safetensors.numpy, "save_file", crash_on_opt_state)
    with pytest.raises(OSError, match="disk full"):
        trainer.save()
    monkeypatch.undo()
    assert latest_checkpoint(str(tmp_path)) == good
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt-")) == ["ckpt-00000000"]
    trainer.save()  # the next good save clears the leftovers
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def _save(directory, step, keep=2):
    return checkpoint.save_checkpoint(
        str(directory),
        params={"w": np.full(2, step, np.float32)},
        opt_state={"m": np.zeros(2, np.float32)},
        meta={"global_step": step},
        keep=keep,
    )


def test_a_crash_at_the_rename_leaves_latest_on_the_previous_checkpoint(tmp_path, monkeypatch):
    """``LATEST`` moves only after the new checkpoint is renamed into place."""
    good = _save(tmp_path, 1)
    real_replace = os.replace

    def crash_on_checkpoint_rename(src, dst):
        if os.path.basename(dst).startswith("ckpt-"):
            raise OSError("killed mid-rename")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", crash_on_checkpoint_rename)
    with pytest.raises(OSError, match="killed mid-rename"):
        _save(tmp_path, 2)
    monkeypatch.undo()
    assert latest_checkpoint(str(tmp_path)) == good


def test_pruning_keeps_the_newest_checkpoints(tmp_path):
    for step in range(1, 5):
        last = _save(tmp_path, step, keep=2)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("ckpt-")) == [
        "ckpt-00000003",
        "ckpt-00000004",
    ]
    assert latest_checkpoint(str(tmp_path)) == last


def test_non_finite_loss_names_step_and_parameter(tmp_path):
    x, y = make_data("float32")
    bad_row = 37
    x[bad_row, 2] = np.nan
    trainer = _trainer(tmp_path, every=2)
    position = [
        i
        for i, idx in enumerate(batch_indices(64, 8, seed=3, epoch=0, drop_last=True))
        if bad_row in idx
    ][0]
    with pytest.raises(NonFiniteLossError) as info:
        trainer.train_epoch(x, y)
    step = position + 1
    message = str(info.value)
    assert f"at step {step} (epoch 0, batch {position})" in message
    assert "first non-finite parameter gradient: '0.weight'" in message
    assert info.value.global_step == step and info.value.parameter == "0.weight"
    good = latest_checkpoint(str(tmp_path))
    if step > 2:
        expected = 2 * ((step - 1) // 2)
        assert good.endswith(checkpoint.checkpoint_name(expected))
        assert f"last good checkpoint: {good}" in message
        _, _, meta = load_checkpoint(
            good, model=trainer.model, opt_state_template=_trainer(tmp_path).opt_state
        )
        assert meta["global_step"] == expected


def _script(*args, env=None):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "train.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path, capsys):
    """A real SIGKILL between checkpoints; --resume must end bit-identical."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    # --strategy step: the kill lands after step 13 itself, not after a fused stretch
    common = [
        "--model",
        "16",
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--no-progress",
        "--checkpoint-every",
        "5",
        "--strategy",
        "step",
    ]
    ckpt = str(tmp_path / "ckpt")
    killed = _script(*common, "--checkpoint-dir", ckpt, "--debug-kill-at-step", "13", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert latest_checkpoint(ckpt).endswith("ckpt-00000010")  # 22 steps/epoch: mid-epoch 0
    resumed = _script(
        *common,
        "--checkpoint-dir",
        ckpt,
        "--resume",
        "--save",
        str(tmp_path / "resumed.safetensors"),
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "jax resumed from step 10 (epoch 1, batch 10)" in resumed.stdout
    # the uninterrupted run in this process (one subprocess fewer)
    assert (
        train_script.main(
            [
                *common,
                "--checkpoint-dir",
                str(tmp_path / "whole"),
                "--save",
                str(tmp_path / "whole.safetensors"),
            ]
        )
        == 0
    )
    assert re.search(r"^jax test accuracy: \d+\.\d%$", capsys.readouterr().out, re.M)
    assert_parity(
        load_params(str(tmp_path / "whole.safetensors")),
        load_params(str(tmp_path / "resumed.safetensors")),
        **BIT_IDENTICAL,
    )
    meta = json.load(open(os.path.join(latest_checkpoint(ckpt), "meta.json")))
    assert meta["global_step"] == 44


def _torch_trainer(directory, *, config=CONFIG):
    from torchref import train as ttrain

    torch.manual_seed(0)
    module = torchref.mlp(SIZES, "tanh")
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    return ttrain.TorchTrainer(
        module,
        optimizer,
        batch_size=8,
        seed=3,
        checkpoint_dir=str(directory),
        checkpoint_every=3,
        config=config,
    )


def test_torch_twin_resumes_bit_exactly_and_writes_jaxgrad_readable_params(tmp_path):
    from torchref import checkpoint as tcheckpoint
    from torchref import train as ttrain

    x, y = make_data("float32")
    plain = _torch_trainer(tmp_path / "plain")
    for _ in range(2):
        plain.train_epoch(x, y)
    stopped = _torch_trainer(tmp_path / "stopped")
    stopped.train_epoch(x, y)
    with pytest.raises(Interrupt):
        stopped.train_epoch(x, y, on_steps=_stop_at(10))
    resumed = _torch_trainer(tmp_path / "stopped")
    meta = resumed.resume()
    assert (meta["global_step"], meta["epoch"], meta["step_in_epoch"]) == (9, 1, 1)
    assert resumed.train_epoch(x, y).steps == 7
    assert_parity(plain.state_dict_numpy(), resumed.state_dict_numpy(), **BIT_IDENTICAL)
    model, _ = jaxgrad.nn.from_torch(resumed.module)
    params_file = os.path.join(resumed.save(), tcheckpoint.PARAMS_FILE)
    assert_parity(resumed.state_dict_numpy(), load_params(params_file, model), **BIT_IDENTICAL)
    with pytest.raises(tcheckpoint.CheckpointError, match="different run configuration"):
        _torch_trainer(tmp_path / "stopped", config={"run": "other"}).resume()
    with pytest.raises(tcheckpoint.CheckpointError, match="no checkpoint"):
        _torch_trainer(tmp_path / "empty").resume()

    x[37, 2] = np.nan
    with pytest.raises(
        ttrain.NonFiniteLossError, match="first non-finite parameter gradient: '0.weight'"
    ) as info:
        _torch_trainer(tmp_path / "nan").train_epoch(x, y)
    assert info.value.parameter == "0.weight"
