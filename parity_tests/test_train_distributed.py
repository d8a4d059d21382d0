"""Data parallelism: 4 simulated JAX devices vs 1, and torch DDP (gloo, 2 processes) vs both."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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
