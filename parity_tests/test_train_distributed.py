"""Data parallelism: 4 simulated JAX devices vs 1, and torch DDP (gloo, 2 processes) vs both."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
from parity_checks.training import SIZES, data_parallel_report, make_data

import jaxgrad
import torchref
from jaxgrad import losses as jlosses
from jaxgrad.parity import assert_parity, compare
from torchref import train as ttrain


# long (~9 s, a subprocess with 4 simulated devices): CI's -m "exhaustive or long" run,
# and the parity report's data-parallel row (scripts/parity.py)
@pytest.mark.long
def test_four_simulated_devices_match_one_device():
    """Runs in a subprocess with --xla_force_host_platform_device_count=4 (unless this
    process already has 4 devices); the trained parameters must agree at float32 tier."""
    report = data_parallel_report(4)
    assert "on 4 devices" in report.name
    assert report.passed, report.table()


def test_data_parallel_report_should_fail_on_different_params():
    """_should_fail: the comparison behind the row flags a 1e-3 relative change."""
    torch.manual_seed(0)
    params = torchref.state_dict_numpy(torchref.mlp(SIZES, "tanh"))
    nudged = {k: v * np.float32(1.001) for k, v in params.items()}
    assert not compare(params, nudged).passed


# long (~13 s, two gloo processes): CI's -m "exhaustive or long" run
@pytest.mark.slow
@pytest.mark.long
def test_ddp_allreduced_gradient_equals_big_batch_and_jaxgrad():
    """2 gloo processes on 127.0.0.1, each half the batch: DDP's averaged .grad equals
    the one-process big-batch .grad and jax.grad of the same mean loss."""
    torch.manual_seed(0)
    module = torchref.mlp(SIZES, "tanh")
    weights = torchref.state_dict_numpy(module)
    x, y = make_data("float32", examples=32)
    result = ttrain.run_ddp(SIZES, "tanh", weights, x, y, world_size=2, lr=0.1, steps=2)

    module.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    big_batch = {name: p.grad for name, p in module.named_parameters()}
    assert_parity(big_batch, result["grads"])

    model, params = jaxgrad.nn.from_torch(module)
    grads = jax.grad(lambda p: jlosses.cross_entropy(model.apply(p, jnp.asarray(x)), y))(params)
    assert_parity(big_batch, grads)
    assert_parity(result["grads"], grads)

    # and two SGD steps with DDP end where two big-batch steps end
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(2):
        ttrain.train_step(
            module,
            optimizer,
            torch.nn.functional.cross_entropy,
            torch.from_numpy(x),
            torch.from_numpy(y),
        )
    assert_parity(torchref.state_dict_numpy(module), result["params"])


def test_initialize_distributed_reads_the_environment(monkeypatch):
    from jaxgrad.train import sharding

    calls = []
    monkeypatch.setattr(sharding.jax.distributed, "initialize", lambda **kw: calls.append(kw))
    for name in (
        "JAX_COORDINATOR_ADDRESS",
        "COORDINATOR_ADDRESS",
        "JAX_NUM_PROCESSES",
        "JAX_PROCESS_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    assert sharding.initialize_distributed() is False and calls == []  # single host
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    assert sharding.initialize_distributed() is True
    assert calls == [{"coordinator_address": "10.0.0.1:1234", "num_processes": 2, "process_id": 1}]


# -- several real processes: jax.distributed with a localhost coordinator ---------------

TRAIN = Path(__file__).resolve().parent.parent / "scripts" / "train.py"
# 2 epochs of 5 steps (1437 digits // 256): a short trajectory, the float32 tier
SHORT_RUN = ("--epochs", "2", "--batch-size", "256", "--framework", "jax", "--no-progress")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _start(cwd, args, *, devices, process=None, processes=None, port=None):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(name, None)
    if processes is not None:
        env.update(
            JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
            JAX_NUM_PROCESSES=str(processes),
            JAX_PROCESS_ID=str(process),
        )
    return subprocess.Popen(
        [sys.executable, str(TRAIN), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(procs, timeout=240):
    try:
        return [p.communicate(timeout=timeout) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


# long (~25 s: three training processes): CI's -m "exhaustive or long" run
@pytest.mark.long
def test_two_real_processes_of_two_devices_train_as_one_process_of_four(tmp_path):
    """2 processes × 2 CPU devices joined by jax.distributed give the parameters of one
    process on 4 devices (the same global batch, split the same way) at the float32 tier
    of a ≤10-step trajectory; only process 0 writes the files and the log."""
    port = _free_port()
    out = ("--save", "params.safetensors", "--json", "run.json")
    (tmp_path / "two").mkdir()
    (tmp_path / "one").mkdir()
    pair = [
        _start(tmp_path / "two", SHORT_RUN + out, devices=2, process=i, processes=2, port=port)
        for i in (0, 1)
    ]
    single = _start(tmp_path / "one", SHORT_RUN + out, devices=4)
    (out0, err0, rc0), (out1, err1, rc1), (_, err_single, rc_single) = _finish(pair + [single])
    assert (rc0, rc1, rc_single) == (0, 0, 0), (err0[-2000:], err1[-2000:], err_single[-2000:])
    assert "jax test accuracy" in out0
    assert "data: digits" not in out1 and "accuracy" not in out1  # process 1 logs nothing

    record = json.loads((tmp_path / "two" / "run.json").read_text())
    assert (record["devices"], record["processes"], record["shard"]) == (4, 2, "data")
    two = safetensors.numpy.load_file(str(tmp_path / "two" / "params.safetensors"))
    one = safetensors.numpy.load_file(str(tmp_path / "one" / "params.safetensors"))
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "params.safetensors",
        "run.json",
    ]
    # the bytes, counted from the saved file: replicated, every device holds them all
    nbytes = sum(v.nbytes for v in two.values())
    assert record["param_bytes"] == nbytes and record["param_bytes_per_device"] == nbytes
    assert json.loads((tmp_path / "one" / "run.json").read_text())["processes"] == 1
    assert_parity(one, two)


# long (~12 s: four processes, each joining a coordinator): CI's -m "exhaustive or long" run
@pytest.mark.long
def test_several_processes_refuse_what_runs_in_one_process_only(tmp_path):
    """A torch run or --shard none with JAX_NUM_PROCESSES set: one line each at start,
    exit status 2, before anything is trained (checkpoints, --save of sharded parameters
    and converted models do run across processes: test_train_fsdp.py)."""
    cases = {
        ("--framework", "both"): "--framework both: torch's loop runs in one process",
        ("--shard", "none"): "--shard none trains on one device",
    }
    for args, expected in cases.items():
        (done,) = _finish(
            [_start(tmp_path, args, devices=1, process=0, processes=1, port=_free_port())]
        )
        out, err, rc = done
        assert rc == 2 and expected in err, (args, err[-2000:])
        assert "epoch" not in out  # refused before the table
