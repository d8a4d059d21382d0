"""State a forward writes: returned as new state equal to torch's, or refused by name.

A momentum encoder's ``.data =`` update, an EMA target's in-place update under
``no_grad``, ``+=`` on a counter, an EMA codebook's ``.data =`` in training mode, a
buffer replaced by assignment: each converted model is run three times in each mode and
trained three SGD steps beside torch, in float64 (``parity_checks.forward_state``).
What jaxgrad cannot reproduce is refused naming the key, the construct and the module,
on every front end, with or without an example.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from parity_checks import forward_state as rows

import jaxgrad
from jaxgrad import nn
from jaxgrad_dev.precision import jax_precision
from torchref import forward_state as models


def _example(seed=3):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((6, 8)))


# auto takes the export front end for each (the layer path refuses them, below); the
# export front end named explicitly is the same capture, run by CI's long tests
@pytest.mark.parametrize("capture", ["auto", pytest.param("export", marks=pytest.mark.long)])
@pytest.mark.parametrize("model_class", models.REPRODUCED, ids=lambda c: c.__name__)
def test_written_state_is_returned_and_equals_torchs_over_calls_and_training(model_class, capture):
    reference, candidate = rows.trajectories(model_class, capture)
    report = jaxgrad.compare(reference, candidate)
    assert report.passed, report
    # the writes happened: torch's state moved, and jaxgrad's with it
    first, last = reference["steps"][0]["state"], reference["steps"][-1]["state"]
    assert any(not np.array_equal(first[k], last[k]) for k in first)


def test_a_parameter_the_forward_writes_becomes_state_not_a_parameter():
    torch.manual_seed(0)
    module = models.MomentumEncoder().double()
    with jax_precision("float64"):
        model, params, buffers = nn.from_torch(
            module, example=(_example(),), with_buffers=True, capture="export"
        )
    written = {k for k in module.state_dict() if k.startswith("encoder_k.")}
    assert written and written <= set(buffers) and not written & set(params)
    assert set(params) == {k for k, p in module.named_parameters() if p.requires_grad}
    # state_dict merges them back under torch's keys
    assert list(model.state_dict(params, buffers)) == list(module.state_dict())


@pytest.mark.parametrize(
    "model_class, keys, construct",
    [
        (models.MomentumEncoder, ["encoder_k.0.weight", "encoder_k.2.bias"], "`.data =`"),
        (models.EMATarget, ["target.0.weight"], "in-place"),
        (models.StepCounter, ["'steps'"], "in-place"),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
@pytest.mark.parametrize("example", [True, False], ids=["example", "no-example"])
def test_the_layer_path_refuses_a_write_its_graph_does_not_hold(
    model_class, keys, construct, example
):
    module = model_class().double()
    before = copy.deepcopy(module.state_dict())
    with jax_precision("float64"), pytest.raises(ValueError) as error:
        nn.from_torch(module, example=(_example(),) if example else None, capture="layers")
    message = str(error.value)
    assert all(key in message for key in keys), message
    assert construct in message and "writes its own state" in message
    assert "module 'encoder_k.0'" in message or model_class is not models.MomentumEncoder
    # and the module is left exactly as it was
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_a_trainable_parameter_the_forward_overwrites_is_refused_on_every_front_end():
    for capture in ("auto", "layers", "export"):
        with jax_precision("float64"), pytest.raises(ValueError, match=r"encoder_k\.0\.weight"):
            nn.from_torch(
                models.TrainableMomentumEncoder().double(), example=(_example(),), capture=capture
            )


@pytest.mark.parametrize("capture", ["auto", "export"])
def test_a_write_through_datas_alias_is_refused_by_name_not_dropped(capture):
    # torch.export records no mutation for `self.ema.data.mul_(...)`: only torch's own
    # forward, run by from_torch, shows the write
    with pytest.raises(ValueError) as error:
        nn.from_torch(models.DataInPlaceEMA().double(), example=(_example(),), capture=capture)
    message = str(error.value)
    assert "'ema'" in message and "in-place" in message and "the top-level module" in message


def test_data_assignment_of_another_shape_is_refused_naming_the_buffer():
    class Grows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 4)
            self.register_buffer("history", torch.zeros(0))

        def forward(self, x):
            y = self.linear(x)
            self.history.data = torch.cat([self.history, y.detach().mean().reshape(1)])
            return y

    with pytest.raises(ValueError, match=r"`\.data` of 'history'.*another shape"):
        nn.from_torch(Grows().double(), example=(_example(),), capture="export")


def test_from_torch_leaves_the_module_and_torchs_random_state_as_they_were():
    torch.manual_seed(1)
    module = models.StepCounter().double()
    tensors = {k: v for k, v in module.state_dict(keep_vars=True).items()}
    values = {k: v.detach().clone() for k, v in tensors.items()}
    rng = torch.get_rng_state()
    with jax_precision("float64"):
        nn.from_torch(module, example=(_example(),), with_buffers=True, capture="export")
    assert torch.equal(torch.get_rng_state(), rng)
    after = module.state_dict(keep_vars=True)
    assert all(after[k] is tensors[k] and torch.equal(after[k], values[k]) for k in tensors)
    assert module.training


def test_models_that_write_nothing_but_batchnorm_statistics_still_take_the_layer_path():
    module = torch.nn.Sequential(
        torch.nn.Linear(8, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU()
    ).double()
    with jax_precision("float64"):
        model, _ = nn.from_torch(module, example=(_example(),))
    assert type(model).__name__ != "ExportedModule"


def test_the_trainer_threads_a_momentum_encoders_key_parameters_as_torchs_loop_does(x64):
    # cross-entropy on the logits of each query against its batch's keys (MoCo's
    # InfoNCE, with shuffled labels); one epoch of 3 steps of 4 rows, SGD with momentum
    from jaxgrad import losses, optim
    from jaxgrad.data import batch_indices
    from jaxgrad.train.stateful import StatefulTrainer

    torch.manual_seed(5)
    module = models.MomentumEncoder().double()
    x = np.random.default_rng(5).standard_normal((12, 8))
    labels = np.tile(np.arange(4), 3)
    model, params, buffers = nn.from_torch(
        module, example=(torch.from_numpy(x[:4]),), with_buffers=True
    )
    trainer = StatefulTrainer(
        model,
        losses.cross_entropy,
        optim.sgd(lr=0.1, momentum=0.9),
        params,
        buffers,
        batch_size=4,
        seed=2,
    )
    trainer.train_epoch(x, labels)
    torch_opt = torch.optim.SGD(
        [p for p in module.parameters() if p.requires_grad], lr=0.1, momentum=0.9
    )
    module.train()
    for idx in batch_indices(12, 4, seed=2, epoch=0, drop_last=True):
        torch_opt.zero_grad()
        logits = module(torch.from_numpy(x[idx]))
        torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels[idx])).backward()
        torch_opt.step()
    expected = {k: v.numpy() for k, v in module.state_dict().items()}
    jaxgrad.assert_parity(expected, trainer.state_dict_numpy())  # the key encoder too
