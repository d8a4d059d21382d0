"""scripts/bench.py --zoo's torchax contender computes jaxgrad's step.

The bench times torchax (``torchax.extract_jax``) against jaxgrad's ``from_torch`` on
the same torch module, the same batch and the same optimizer update; its ratios mean
something only if the two jitted steps compute the same thing. Here, on a tiny
Conv2d-BatchNorm-ReLU-Linear model in training mode (batch statistics), jaxgrad's loss
and gradients are the reference and torchax's are held to the float32 tier, then one
jitted step of each (SGD with momentum) to the same tier on the new parameters and
optimizer state. Nothing here is timed.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest
import torch

from parity_tests._zoo_extra import requires

pytestmark = requires("torchax")

import bench  # noqa: E402
from parity_checks._zoo import square_loss_jax  # noqa: E402

from jaxgrad import nn, optim  # noqa: E402
from jaxgrad.parity import assert_parity  # noqa: E402
from jaxgrad.train.stateful import make_stateful_train_step  # noqa: E402


@pytest.fixture(autouse=True)
def _mha_fastpath_restored():
    """Importing torchax turns off torch's MultiheadAttention fast path for the whole
    process; the tests that run after this one in the same worker get it back."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    yield
    torch.backends.mha.set_fastpath_enabled(enabled)


def tiny_model() -> torch.nn.Module:
    # no bias before the BatchNorm (as torchvision's convolutions): its true gradient is
    # exactly 0, so both frameworks' values would be rounding noise with nothing to compare
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, bias=False),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 5),
    ).train()


def test_torchax_step_matches_jaxgrads(seed, rng):
    module = tiny_model()
    x = rng.standard_normal((6, 3, 6, 6)).astype(np.float32)
    batch = (jax.numpy.asarray(x), jax.numpy.zeros((), np.float32))
    key = jax.random.key(seed)
    optimizer = optim.sgd(lr=bench.LR, momentum=bench.MOMENTUM)

    model, params, buffers = nn.from_torch(copy.deepcopy(module), with_buffers=True)

    def jaxgrad_objective(params, buffers, batch, key):
        outputs, _ = model.apply(params, batch[0], buffers=buffers, train=True, key=key)
        return square_loss_jax(outputs)

    loss, grads = jax.value_and_grad(jaxgrad_objective)(params, buffers, batch, key)

    tx_params, tx_buffers, objective = bench.torchax_objective(
        copy.deepcopy(module), square_loss_jax
    )
    assert sorted(tx_params) == sorted(params)  # the state_dict keys, parameters only
    tx_loss, tx_grads = jax.value_and_grad(objective)(tx_params, tx_buffers, batch, key)
    assert_parity(
        {"loss": loss, "grads": grads},
        {"loss": tx_loss, "grads": tx_grads},
        name="torchax loss and gradients vs jaxgrad's",
    )

    step = make_stateful_train_step(model, square_loss_jax, optimizer, donate=False)
    new_params, _, new_state, metrics = step(params, buffers, optimizer.init(params), batch, key)
    tx_step = jax.jit(bench.torchax_step_fn(objective, optimizer))
    tx_new_params, _, tx_new_state, tx_metrics = tx_step(
        tx_params, tx_buffers, optimizer.init(tx_params), batch, key
    )
    assert_parity(
        {"loss": metrics["loss"], "params": new_params, "opt_state": new_state},
        {"loss": tx_metrics["loss"], "params": tx_new_params, "opt_state": tx_new_state},
        name="one jitted SGD-momentum step, torchax vs jaxgrad",
    )
