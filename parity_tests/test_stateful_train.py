"""``jaxgrad.train.stateful``: steps that thread BatchNorm buffers, against torch.

The ResNet's 20-step float64 trajectory is a parity-report row
(``scripts/parity_checks/cnn.py``); here a small BatchNorm MLP checks the fused epoch
and the trainer against torch's loop, and ``train.py --model cnn`` its refusals.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import train as train_script

from jaxgrad import losses, nn, optim
from jaxgrad.data import batch_indices
from jaxgrad.parity import assert_parity
from jaxgrad.train.stateful import StatefulTrainer, make_stateful_train_step


def _torch_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(5, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
    ).double()


def test_trainer_epoch_matches_torch_loop_params_and_buffers(x64, rng):
    module = _torch_model()
    x = rng.standard_normal((40, 5))
    y = rng.integers(0, 3, 40)
    model, params, buffers = nn.from_torch(module, with_buffers=True)
    trainer = StatefulTrainer(
        model,
        losses.cross_entropy,
        optim.sgd(lr=0.1, momentum=0.9),
        params,
        buffers,
        batch_size=8,
        seed=3,
    )
    result = trainer.train_epoch(x, y)
    assert result.steps == 5 and trainer.global_step == 5
    torch_opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    module.train()
    for epoch in range(1):
        for idx in batch_indices(40, 8, seed=3, epoch=epoch, drop_last=True):
            torch_opt.zero_grad()
            torch.nn.functional.cross_entropy(
                module(torch.from_numpy(x[idx])), torch.from_numpy(y[idx])
            ).backward()
            torch_opt.step()
    expected = {k: v.numpy() for k, v in module.state_dict().items()}
    assert_parity(expected, trainer.state_dict_numpy())  # incl. int64 num_batches_tracked
    module.eval()
    with torch.no_grad():
        logits = module(torch.from_numpy(x))
    evaluation = trainer.evaluate(x, y)
    assert evaluation["accuracy"] == float((logits.argmax(-1).numpy() == y).mean())
    np.testing.assert_allclose(
        evaluation["loss"],
        torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)),
        rtol=1e-12,
    )


def test_step_without_buffers_is_refused_naming_them(x64):
    module = _torch_model()
    model, params = nn.from_torch(module)
    optimizer = optim.sgd(lr=0.1)
    step = make_stateful_train_step(model, losses.cross_entropy, optimizer, jit=False)
    with pytest.raises(ValueError, match=r"has buffers \(1.running_mean"):
        step(
            params,
            None,
            optimizer.init(params),
            (jnp.ones((4, 5)), jnp.zeros(4, int)),
            jax.random.key(0),
        )


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--activation", "tanh"], "--activation"),
        (["--data-dir", "x"], "--data-dir"),
    ],
)
def test_train_script_refuses_options_the_cnns_lack(flags, named, capsys):
    with pytest.raises(SystemExit) as info:
        train_script.parse_args(["--model", "resnet", *flags])
    assert info.value.code == 2
    assert f"--model resnet does not support {named}" in capsys.readouterr().err


def test_a_model_that_draws_nothing_steps_without_a_key(x64):
    """key=None (a model without random ops), alone and with accumulate=2: the same bits
    as with a key, and BatchNorm's buffers move once per micro-batch."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 3)
    ).double()
    model, params, buffers = nn.from_torch(module, with_buffers=True)
    optimizer = optim.sgd(lr=0.1)
    batch = (jnp.linspace(-1.0, 1.0, 32).reshape(8, 4), jnp.arange(8) % 3)
    for accumulate in (1, 2):
        step = make_stateful_train_step(
            model, losses.cross_entropy, optimizer, jit=False, accumulate=accumulate
        )
        keyless = step(params, buffers, optimizer.init(params), batch, None)
        keyed = step(params, buffers, optimizer.init(params), batch, jax.random.key(0))
        assert_parity(keyed[0], keyless[0], rtol=0, atol=0)
        assert int(keyless[1]["1.num_batches_tracked"]) == accumulate
