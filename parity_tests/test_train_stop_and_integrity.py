"""Stopping on SIGINT/SIGTERM without losing a step; checkpoints whose damage is named.

The signals are real: SIGINT sent to a ``scripts/train.py`` subprocess while it
trains, SIGTERM sent by ``train.main`` to its own process from inside the loop.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest
import train as train_script
from parity_checks.training import make_data

from jaxgrad.train import CheckpointError, checkpoint
from parity_tests.test_train_checkpoint import _torch_trainer, _trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_sigint_writes_final_checkpoints_and_the_exact_resume_command(tmp_path):
    """SIGINT as soon as training may start (the table header is printed once the
    handlers are installed): each framework saves the state after its current step."""
    from torchref import checkpoint as tcheckpoint

    ckpt = str(tmp_path / "ckpt")
    args = [
        "--framework",
        "both",
        "--model",
        "16",
        "--batch-size",
        "64",
        "--epochs",
        "10000",
        "--no-progress",
        "--checkpoint-dir",
        ckpt,
        "--checkpoint-every",
        "1000",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-u", "scripts/train.py", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    head = ""
    while not head.endswith("-" * 64 + "\n"):  # the line under the table header
        line = proc.stdout.readline()
        assert line, f"train.py ended early: {head}{proc.stderr.read()}"
        head += line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "SIGINT received" in out
    for framework, library in (("jax", checkpoint), ("torch", tcheckpoint)):
        match = re.search(rf"^{framework} checkpoint: (\S+) at step (\d+) ", out, re.M)
        assert match, out
        # the state after the step that was running: nothing lost, nothing repeated
        assert library.verify_checkpoint(match[1])["global_step"] == int(match[2])
        assert library.latest_verified(os.path.join(ckpt, framework)) == match[1]
    command = re.search(r"^resume with: (.*)$", out, re.M)[1]
    # the interpreter that ran it (.venv/bin/python after the README's install), never
    # a bare `python`, which in a fresh shell is another one, without jaxgrad
    assert command == shlex.join(
        [train_script.interpreter(), "scripts/train.py", *args, "--resume"]
    )


def test_sigterm_without_checkpoint_dir_says_nothing_can_be_resumed(monkeypatch, capsys):
    """A real SIGTERM to this process from inside the loop (the handler is installed
    then, so the timing cannot race), torch only."""
    sent, before = [], signal.getsignal(signal.SIGTERM)

    def update(self, losses):
        if not sent:
            sent.append(os.kill(os.getpid(), signal.SIGTERM))

    monkeypatch.setattr(train_script.Progress, "update", update)
    code = train_script.main(
        ["--framework", "torch", "--model", "16", "--batch-size", "64", "--epochs", "3"]
    )
    captured = capsys.readouterr()
    assert code == 143, captured.err
    assert re.search(r"^torch stopped at step 1 \(epoch 1, batch 1\)$", captured.out, re.M)
    assert "nothing was saved and this run cannot be resumed" in captured.out
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers are restored


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_request_stop_finishes_the_step_and_resume_loses_nothing(tmp_path, framework):
    """Bit-exactness of a resume is tested in test_train_checkpoint; here: the position."""
    x, y = make_data("float32")  # 64 examples: 8 steps per epoch
    build = _trainer if framework == "jax" else _torch_trainer
    stopped = build(tmp_path / "stopped")
    stopped.train_epoch(x, y)

    def on_steps(global_step, losses):
        if global_step == 11:  # between periodic checkpoints (every 3)
            stopped.request_stop()

    result = stopped.train_epoch(x, y, on_steps=on_steps)
    assert result.stopped and result.steps == 3
    assert (stopped.global_step, stopped.epoch, stopped.step_in_epoch) == (11, 1, 3)
    stopped.save()
    resumed = build(tmp_path / "stopped")
    assert resumed.resume()["global_step"] == 11
    assert resumed.train_epoch(x, y).steps == 5
    assert resumed.global_step == 16


def _edit_meta(path, **changes):
    meta_path = os.path.join(path, checkpoint.META_FILE)
    meta = json.load(open(meta_path))
    meta.update(changes)
    json.dump(meta, open(meta_path, "w"))


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_edited_meta_is_refused_and_a_damaged_latest_names_the_newest_intact(tmp_path, framework):
    from torchref import checkpoint as tcheckpoint

    x, y = make_data("float32")
    build = _trainer if framework == "jax" else _torch_trainer
    error_type = CheckpointError if framework == "jax" else tcheckpoint.CheckpointError
    trainer = build(tmp_path)  # checkpoints every 3 steps, the newest 2 kept
    trainer.train_epoch(x, y)
    newest = trainer.save()
    older = os.path.join(str(tmp_path), "ckpt-00000006")
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "ckpt-00000006", "ckpt-00000008"]

    _edit_meta(newest, step_in_epoch=5)  # a hand edit, e.g. to skip ahead in the data
    with pytest.raises(error_type, match="meta.json was modified after it was written") as info:
        build(tmp_path).resume()
    message = str(info.value)
    assert newest in message and f"newest intact checkpoint in {tmp_path} is {older}" in message
    assert info.value.intact == older
    assert build(tmp_path).resume(older)["global_step"] == 6  # the named one works

    os.remove(os.path.join(older, "meta.json"))
    with pytest.raises(error_type, match="No other checkpoint .* is intact") as info:
        build(tmp_path).resume()
    assert info.value.intact is None


def test_train_script_names_the_flag_that_resumes_from_the_intact_checkpoint(tmp_path, capsys):
    ckpt = str(tmp_path)
    args = [
        "--model",
        "16",
        "--batch-size",
        "128",
        "--epochs",
        "1",
        "--no-progress",
        "--checkpoint-dir",
        ckpt,
        "--checkpoint-every",
        "5",
    ]
    assert train_script.main(args) == 0  # 11 steps: checkpoints 5, 10 and the final 11
    params = os.path.join(ckpt, "ckpt-00000011", checkpoint.PARAMS_FILE)
    with open(params, "r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(b"\x00\x00\xc0\x7f")  # the last weight becomes NaN
    capsys.readouterr()
    assert train_script.main([*args, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: LATEST names a damaged")
    assert "params.safetensors is missing or corrupt" in err
    script = os.path.relpath(train_script.__file__)  # as the command is printed
    assert err.endswith(
        f"To resume from it: {train_script.interpreter()} {script} "
        + shlex.join(args)
        + " --resume-from ckpt-00000010"
    )
    assert train_script.main([*args, "--resume-from", "ckpt-00000010"]) == 0
    assert "jax resumed from step 10 (epoch 1, batch 10)" in capsys.readouterr().out


def test_a_scheduled_run_stopped_by_a_signal_resumes_bit_identically(tmp_path, monkeypatch, capsys):
    """--scheduler with --checkpoint-dir: SIGTERM mid-epoch (a real signal to this
    process, as above), then the printed resume command, ends where the uninterrupted
    run does, bit for bit: torch's scheduler state is in its checkpoint. torch only
    (jaxgrad's schedule step lives in its optimizer state: the next test).
    CosineAnnealingLR: torch's form is recursive in the current lr, so a scheduler
    restarted at step 0 diverges at once."""
    from jaxgrad.parity import BIT_IDENTICAL, assert_parity
    from jaxgrad.train import load_params

    common = [
        "--framework",
        "torch",
        "--model",
        "16",
        "--batch-size",
        "256",
        "--epochs",
        "1",
        "--no-progress",
        "--scheduler",
        "CosineAnnealingLR:eta_min=0.001",
    ]
    sent, update = [], train_script.Progress.update

    def stop_at_step_3(self, losses):
        update(self, losses)
        if self.done == 3 and not sent:
            sent.append(os.kill(os.getpid(), signal.SIGTERM))

    monkeypatch.setattr(train_script.Progress, "update", stop_at_step_3)
    ckpt = str(tmp_path / "ckpt")
    assert train_script.main([*common, "--checkpoint-dir", ckpt]) == 143
    out = capsys.readouterr().out
    command = re.search(r"^resume with: \S+ \S+ (.*)$", out, re.M)[1]
    assert shlex.split(command) == [*common, "--checkpoint-dir", ckpt, "--resume"]
    monkeypatch.setattr(train_script.Progress, "update", update)
    resumed = str(tmp_path / "resumed.safetensors")
    assert train_script.main([*shlex.split(command), "--save", resumed]) == 0
    assert "torch resumed from step 3 (epoch 1, batch 3)" in capsys.readouterr().out
    whole = str(tmp_path / "whole.safetensors")
    assert train_script.main([*common, "--save", whole]) == 0
    assert_parity(load_params(whole), load_params(resumed), **BIT_IDENTICAL)
    # another schedule (its length follows --epochs) is another run: refused by name
    code = train_script.main([*common[:7], "2", *common[8:], "--checkpoint-dir", ckpt, "--resume"])
    assert code == 2 and "scheduler: checkpoint ['CosineAnnealingLR'" in capsys.readouterr().err
