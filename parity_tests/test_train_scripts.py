"""scripts/train.py and scripts/bench.py, run in-process on tiny settings."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import bench
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import train

import torchref
from jaxgrad.parity import BIT_IDENTICAL, assert_parity
from jaxgrad.train import load_params


def test_train_both_frameworks_end_to_end(tmp_path, capsys):
    save, plot, report = (tmp_path / "p.safetensors", tmp_path / "loss.png", tmp_path / "h.json")
    code = train.main(
        [
            "--framework",
            "both",
            "--epochs",
            "1",
            "--model",
            "16",
            "--batch-size",
            "64",
            "--no-progress",
            "--save",
            str(save),
            "--plot",
            str(plot),
            "--json",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"^jax test accuracy: \d+\.\d%$", out, re.M)
    assert re.search(r"^torch test accuracy: \d+\.\d%$", out, re.M)
    assert "jax devices: 1 × cpu" in out and "drift of jax from torch" in out
    assert open(plot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    history = json.load(open(report))
    assert [r["framework"] for r in history["epochs"]] == ["jax", "torch"]
    assert len(history["losses"]["jax"]) == len(history["losses"]["torch"]) == 1438 // 64
    # same weights, same batches: the first step's loss agrees to float32 rounding
    np.testing.assert_allclose(
        history["losses"]["jax"][0], history["losses"]["torch"][0], rtol=1e-5
    )
    # the saved file is a torch state_dict, and jaxgrad reads it back unchanged
    module = torchref.mlp([64, 16, 10])
    module.load_state_dict(safetensors.torch.load_file(str(save)), strict=True)
    assert_parity(torchref.state_dict_numpy(module), load_params(str(save)), **BIT_IDENTICAL)
    torch_file = tmp_path / "p.torch.safetensors"
    module.load_state_dict(safetensors.torch.load_file(str(torch_file)), strict=True)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--resume"], "--resume needs --checkpoint-dir"),
        (["--model", "wide"], "--model 'wide'"),
        (["--epochs", "0"], "--epochs must be >= 1"),
        (["--model", "lstm", "--activation", "tanh"], "--model lstm does not support --activation"),
        (["--model", "cnn", "--precision", "bfloat16"], "--model cnn does not support --precision"),
        (
            ["--model", "resnet", "--kwargs", '{"width": 2}'],
            "--kwargs and --config build a --model MODULE:NAME",
        ),
        (["--model", "m.py:Net", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
        # every scheduler argument, before any data is read or any training starts
        (
            ["--scheduler", "StepLR:gamma=0.5"],
            "--scheduler StepLR: missing required argument "
            "step_size; expected StepLR:step_size=...,gamma=0.1,last_epoch=-1 (torch's StepLR "
            "arguments; the learning rate comes from --lr)",
        ),
        (
            ["--scheduler", "StepLR:step_size=5,gama=0.5"],
            "--scheduler StepLR: unknown argument gama",
        ),
        (["--scheduler", "StepLR:step_size=0"], "`step_size` (=0) must be an int >= 1"),
        (
            ["--scheduler", "CosineAnnealingLR:eta_min=-1"],
            "--scheduler CosineAnnealingLR: `eta_min`",
        ),
        (["--scheduler", "Steplr"], "--scheduler Steplr: `scheduler` (='Steplr') must be one of"),
    ],
)
def test_train_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        train.main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_train_torch_bfloat16_lstm_runs_or_is_refused_before_training(capsys):
    """torch's CPU LSTM (oneDNN) has no bfloat16 kernel without AVX-512 BF16: one
    forward and backward under autocast before training tells, and the run is refused
    naming the way out; where the kernel exists, the run trains. Never a crash."""
    code = train.main(
        [
            "--model",
            "lstm",
            "--precision",
            "bfloat16",
            "--framework",
            "torch",
            "--epochs",
            "1",
            "--batch-size",
            "719",
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert code in (0, 2), captured.err
    if code == 2:
        assert captured.err.startswith(
            "error: --precision bfloat16 --model lstm: torch cannot "
            "run RowRNNClassifier under autocast(bfloat16) on cpu"
        )
        assert "use --precision float32, or --framework jax" in captured.err
        assert "epoch  framework" not in captured.out  # refused before training
    else:
        assert "torch test accuracy" in captured.out


def test_train_resume_without_checkpoint_and_divergence_are_clear(tmp_path, capsys):
    code = train.main(["--checkpoint-dir", str(tmp_path), "--resume", "--no-progress"])
    assert code == 2
    assert "no checkpoint in" in capsys.readouterr().err
    code = train.main(
        [
            "--lr",
            "1e30",
            "--model",
            "16",
            "--epochs",
            "1",
            "--no-progress",
            "--checkpoint-dir",
            str(tmp_path),
            "--checkpoint-every",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert re.search(r"non-finite loss \((nan|inf)\) at step \d+ \(epoch 0, batch \d+\)", err)
    assert "last good checkpoint" in err


def test_train_flops_by_hand():
    # 784-256-10 at batch 2: forward 2·2·(784·256 + 256·10); backward adds dW for both
    # layers and dX for the second only.
    forward = 2 * 2 * (784 * 256 + 256 * 10)
    backward = forward + 2 * 2 * 256 * 10
    assert bench.train_flops([784, 256, 10], 2) == forward + backward


def test_bench_quick_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = bench.main(
        [
            "--quick",
            "--only",
            "784-256-10 b128",
            "--rounds",
            "1",
            "--steps",
            "2",
            "--warmup-rounds",
            "2",
            "--peak-size",
            "128",
            "--json",
            str(out),
            "--strict",
        ]
    )
    data = json.load(open(out))
    # --strict: exit 3 exactly when the run judged itself untrusted (a busy or quiet
    # machine may give either; the verdict and the exit status must agree)
    assert code == (0 if data["trusted"] else bench.UNTRUSTED_EXIT)
    result = data["results"][0]
    row = result["contenders"]
    assert set(row) == {"jax step", "jax epoch", "jax default", "torch eager"}
    assert result["strategy"]["strategy"] in ("step", "epoch", "unrolled")  # 2-step rows
    assert row["torch eager"]["vs_torch_eager"] == 1.0
    assert data["matmul_peak"]["peak_gflops"] > 0
    assert result["trusted"] == (not result["untrusted_reasons"])
    assert len(result["warmups"]["jax epoch"]["seconds"]) == 2  # the cap: two to compare
    assert data["check"]["cpu"]["model"] and data["check"]["load_after"] >= 0
    printed = capsys.readouterr().out
    assert "vector extensions:" in printed and "run check: load average" in printed
    goals = printed[printed.index("goals (jax default vs torch eager") : printed.index("\nwrote ")]
    if data["trusted"]:
        assert re.search(r"\(goal >= 2\.00x\): (met|NOT met)", goals)
    else:  # an untrusted run gives no verdict and no ratio in the goals
        assert "untrusted, no verdict" in goals and "met" not in goals.replace("no verdict", "")


def test_train_reads_fashion_mnist_from_data_dir(tmp_path, capsys):
    from parity_tests.test_data import write_fashion

    write_fashion(tmp_path, np.random.default_rng(0), n_train=64, n_test=8)
    assert (
        train.main(
            [
                "--data-dir",
                str(tmp_path),
                "--model",
                "lesson",
                "--epochs",
                "1",
                "--batch-size",
                "32",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "data: fashion-mnist, 64 train / 8 test, model: mlp [784, 256, 10]" in out
    assert re.search(r"^jax test accuracy: \d+\.\d%$", out, re.M)
    with pytest.raises(SystemExit) as info:  # found before anything is loaded
        train.main(["--data-dir", str(tmp_path / "missing"), "--no-progress"])
    assert info.value.code == 2
    assert "--data-dir" in capsys.readouterr().err


def test_train_float64_both_frameworks_agree_at_the_float64_tier(tmp_path):
    """--precision float64 --framework both: the same weights and batches in float64 on
    both sides; torch's parameters, read back from its own saved file, are the reference
    for jax's at the float64 tier (rtol 1e-10), after 2 epochs of 22 steps. A subprocess:
    float64 turns on jax's x64 flag for the whole process."""
    save, report = tmp_path / "p.safetensors", tmp_path / "h.json"
    argv = ["--framework", "both", "--precision", "float64", "--epochs", "2", "--model", "32"]
    argv += ["--no-progress", "--save", str(save), "--json", str(report)]
    done = subprocess.run(
        [sys.executable, str(Path(train.__file__)), *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    jax_params = safetensors.numpy.load_file(str(save))
    torch_params = safetensors.numpy.load_file(str(tmp_path / "p.torch.safetensors"))
    assert {v.dtype for v in [*jax_params.values(), *torch_params.values()]} == {
        np.dtype("float64")
    }
    assert_parity(torch_params, jax_params)  # float64 arrays: the float64 tier
    history = json.load(open(report))
    assert [d["epoch"] for d in history["drift"]] == [1, 2]
    assert all(d["max_rel"] <= 1e-10 for d in history["drift"]), history["drift"]
    np.testing.assert_allclose(
        history["losses"]["jax"], history["losses"]["torch"], rtol=1e-10, atol=1e-12
    )


def test_train_float64_is_refused_where_it_is_not_built(capsys):
    """The sequence presets refuse --precision float64 with one line."""
    assert train.main(["--precision", "float64", "--model", "transformer"]) == 2
    assert "float64 trains the MLP preset and converted torch modules" in (capsys.readouterr().err)


# long (~15 s: three float64 runs in subprocesses): CI's -m "exhaustive or long" run
@pytest.mark.long
def test_train_float64_resumes_bit_exactly_with_adamw_and_a_scheduler(tmp_path):
    """An uninterrupted float64 run against one resumed from its step-80 checkpoint: the
    final parameters of both frameworks are bit-identical (AdamW, CosineAnnealingLR)."""
    argv = ["--framework", "both", "--precision", "float64", "--epochs", "2", "--model", "32"]
    argv += ["--optimizer", "adamw", "--scheduler", "CosineAnnealingLR", "--no-progress"]
    argv += ["--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "40"]

    def run(*extra):
        done = subprocess.run(
            [sys.executable, str(Path(train.__file__)), *argv, *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    run("--save", str(tmp_path / "full.safetensors"))
    out = run("--resume-from", "ckpt-00000080", "--save", str(tmp_path / "res.safetensors"))
    assert "jax resumed from step 80" in out and "torch resumed from step 80" in out
    for suffix in ("", ".torch"):
        full = safetensors.numpy.load_file(str(tmp_path / f"full{suffix}.safetensors"))
        resumed = safetensors.numpy.load_file(str(tmp_path / f"res{suffix}.safetensors"))
        assert {v.dtype for v in full.values()} == {np.dtype("float64")}
        assert_parity(full, resumed, **BIT_IDENTICAL)
