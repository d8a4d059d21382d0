"""Loss modules through ``jaxgrad.nn.from_torch``: alone (no params, torch's
``weight`` / ``pos_weight`` buffers) and inside a traced forward, against torch's
value and input gradients in float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxgrad.nn
from jaxgrad import losses
from jaxgrad.parity import assert_parity
from parity_tests._sampling import one_in

_RNG = np.random.default_rng(12)


def _normal(*shape):
    return _RNG.standard_normal(shape)


def _log_softmax(*shape):
    x = _normal(*shape)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _classes(n, c):
    return _RNG.integers(0, c, n)


def _signs(n):
    return np.where(_RNG.random(n) < 0.5, -1.0, 1.0)


WEIGHT = np.array([0.5, 2.0, 1.5])
# name: (torch constructor kwargs, inputs, indices of the inputs differentiated)
CASES = {
    "CrossEntropyLoss": (
        dict(weight=WEIGHT, ignore_index=1, label_smoothing=0.1),
        (_normal(6, 3), _classes(6, 3)),
        (0,),
    ),
    "NLLLoss": (
        dict(weight=WEIGHT, ignore_index=2, reduction="sum"),
        (_log_softmax(6, 3), _classes(6, 3)),
        (0,),
    ),
    "MSELoss": (dict(reduction="sum"), (_normal(4, 3), _normal(4, 3)), (0, 1)),
    "L1Loss": ({}, (_normal(4, 3), _normal(4, 3)), (0,)),
    "BCELoss": (dict(weight=WEIGHT), (1 / (1 + np.exp(-_normal(4, 3))), _RNG.random((4, 3))), (0,)),
    "BCEWithLogitsLoss": (
        dict(weight=WEIGHT, pos_weight=np.array([1.0, 3.0, 0.5])),
        (_normal(4, 3), (_RNG.random((4, 3)) < 0.5) * 1.0),
        (0,),
    ),
    "SmoothL1Loss": (dict(beta=0.5), (_normal(4, 3), _normal(4, 3)), (0,)),
    "HuberLoss": (dict(delta=0.7, reduction="none"), (_normal(4, 3), _normal(4, 3)), (0,)),
    "KLDivLoss": (
        dict(reduction="batchmean", log_target=True),
        (_log_softmax(4, 3), _log_softmax(4, 3)),
        (0, 1),
    ),
    "CosineEmbeddingLoss": (dict(margin=0.2), (_normal(4, 3), _normal(4, 3), _signs(4)), (0, 1)),
    "MarginRankingLoss": (dict(margin=0.1), (_normal(5), _normal(5), _signs(5)), (0, 1)),
    "PoissonNLLLoss": (dict(full=True), (_normal(4, 3), _RNG.poisson(2.0, (4, 3)) * 1.0), (0,)),
    "GaussianNLLLoss": (
        dict(full=True),
        (_normal(4, 3), _normal(4, 3), 0.1 + _RNG.random((4, 3))),
        (0, 2),
    ),
    "SoftMarginLoss": ({}, (_normal(4, 3), _signs(12).reshape(4, 3)), (0,)),
    "MultiLabelSoftMarginLoss": (
        dict(weight=WEIGHT, reduction="none"),
        (_normal(4, 3), _classes(12, 2).reshape(4, 3)),
        (0,),
    ),
    "HingeEmbeddingLoss": (dict(margin=0.5), (_normal(6), _signs(6)), (0,)),
    "MultiMarginLoss": (
        dict(p=2, margin=0.7, weight=WEIGHT),
        (_normal(5, 3), _classes(5, 3)),
        (0,),
    ),
    "MultiLabelMarginLoss": (
        dict(reduction="sum"),
        (_normal(2, 3), np.array([[2, 0, -1], [1, -1, 0]])),
        (0,),
    ),
    "CTCLoss": (
        dict(blank=1, zero_infinity=True),
        (
            _log_softmax(7, 2, 4),
            np.array([[2, 3, 3], [0, 2, 2]]),
            np.array([7, 6]),
            np.array([3, 2]),
        ),
        (0,),
    ),
}
# LinearCrossEntropyLoss has params (its Linear's): test_losses_margin.py converts it


def test_every_supported_loss_has_a_case():
    assert sorted(CASES) == sorted(set(losses.LOSS_MODULES) - {"LinearCrossEntropyLoss"})


def _torch_kwargs(kwargs):
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


# one loss in three in the default run, every loss in the exhaustive run (CI: -m
# "exhaustive or long"); test_losses_conformance.py runs every loss module by default
@pytest.mark.parametrize("name", one_in(3, sorted(CASES)))
def test_loss_module_through_nn_from_torch(x64, name):
    kwargs, inputs, wrt = CASES[name]
    module = getattr(torch.nn, name)(**_torch_kwargs(kwargs))
    tensors = [torch.tensor(x, requires_grad=i in wrt) for i, x in enumerate(inputs)]
    value = module(*tensors)
    grads = torch.autograd.grad(value.sum(), [tensors[i] for i in wrt])
    reference = {"value": value.detach().numpy(), "grads": [g.numpy() for g in grads]}

    model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
    assert isinstance(model, losses.LOSS_MODULES[name])
    assert params == {}
    # a loss's weight / pos_weight are buffers in torch's state_dict; mirror it
    assert list(buffers) == list(module.state_dict())
    for key, array in module.state_dict().items():
        assert_parity(array.numpy(), buffers[key], rtol=0, atol=0)

    def loss(*args):
        full = list(inputs)
        for index, arg in zip(wrt, args):
            full[index] = arg
        output, new_buffers = model.apply(params, *map(jnp.asarray, full), buffers=buffers)
        assert new_buffers.keys() == buffers.keys()
        return output.sum(), output

    differentiated = [jnp.asarray(inputs[i]) for i in wrt]
    for run in (loss, jax.jit(loss)):
        (_, output), ours = jax.value_and_grad(run, argnums=tuple(range(len(wrt))), has_aux=True)(
            *differentiated
        )
        assert output.dtype == jnp.float64
        assert_parity(reference, {"value": output, "grads": list(ours)})
    # the loss called directly, with its own buffers, is the same loss
    assert_parity(reference["value"], model(*map(jnp.asarray, inputs)))
    assert model.state_dict(params, buffers).keys() == module.state_dict().keys()


def test_weighted_loss_without_buffers_is_refused_like_batchnorm(x64):
    model, params = jaxgrad.nn.from_torch(
        torch.nn.CrossEntropyLoss(weight=torch.from_numpy(WEIGHT))
    )
    with pytest.raises(ValueError, match=r"has buffers \(weight\); pass `buffers=`"):
        model.apply(params, jnp.zeros((2, 3)), jnp.array([0, 1]))
    unweighted, _ = jaxgrad.nn.from_torch(torch.nn.CrossEntropyLoss())
    assert unweighted.init_buffers() == {}


class _Classifier(torch.nn.Module):
    """A model whose forward returns its own loss (the Hugging Face pattern)."""

    def __init__(self, loss):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)
        )
        self.loss = loss

    def forward(self, x, target):
        return self.loss(self.net(x), target)


def test_loss_inside_a_traced_forward(x64):
    torch.manual_seed(0)
    module = _Classifier(
        torch.nn.CrossEntropyLoss(weight=torch.from_numpy(WEIGHT), label_smoothing=0.05)
    ).double()
    x, target = _normal(8, 4), _classes(8, 3)
    value = module(torch.from_numpy(x), torch.from_numpy(target))
    grads = torch.autograd.grad(value, list(module.parameters()))
    reference = {
        "value": value.detach().numpy(),
        "grads": {n: g.numpy() for (n, _), g in zip(module.named_parameters(), grads)},
    }

    model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
    assert list(buffers) == ["loss.weight"]
    assert [*params, *buffers] == list(module.state_dict())

    def loss(p):
        output, _ = model.apply(p, jnp.asarray(x), jnp.asarray(target), buffers=buffers)
        return output

    value, ours = jax.value_and_grad(loss)(params)
    assert_parity(reference, {"value": value, "grads": ours})


def test_loss_module_uses_the_buffers_it_is_given(x64):
    """A checkpoint's ``weight`` / ``pos_weight`` (torch's ``load_state_dict`` into a
    module built with others) are what ``apply(..., buffers=)`` computes with, alone
    and inside a traced forward, as torch's module computes with its loaded buffers."""
    loaded = {"weight": np.array([3.0, 0.25, 1.0]), "pos_weight": np.array([0.5, 2.0, 4.0])}
    logits, labels = _normal(6, 3), _classes(6, 3)
    cases = [
        (torch.nn.CrossEntropyLoss(weight=torch.tensor(WEIGHT)), ["weight"], (logits, labels)),
        (
            torch.nn.BCEWithLogitsLoss(
                weight=torch.tensor(WEIGHT), pos_weight=torch.ones(3, dtype=torch.float64)
            ),
            ["weight", "pos_weight"],
            (logits, (_RNG.random((6, 3)) < 0.5) * 1.0),
        ),
    ]
    for module, names, inputs in cases:
        model, params, _ = jaxgrad.nn.from_torch(module, with_buffers=True)
        module.load_state_dict({k: torch.from_numpy(loaded[k]) for k in names})
        # the twin copied torch's buffer: loading into torch in place leaves it as built
        np.testing.assert_array_equal(model.weight, WEIGHT)
        buffers = model.load_buffers({k: loaded[k] for k in names})
        value, _ = model.apply(params, *map(jnp.asarray, inputs), buffers=buffers)
        assert_parity(module(*map(torch.from_numpy, inputs)).numpy(), value)
    classifier = _Classifier(torch.nn.CrossEntropyLoss(weight=torch.tensor(WEIGHT))).double()
    model, params, _ = jaxgrad.nn.from_torch(classifier, with_buffers=True)
    classifier.loss.load_state_dict({"weight": torch.from_numpy(loaded["weight"])})
    x = _normal(6, 4)
    value, _ = model.apply(
        params,
        jnp.asarray(x),
        jnp.asarray(labels),
        buffers={"loss.weight": jnp.asarray(loaded["weight"])},
    )
    with torch.no_grad():
        assert_parity(classifier(torch.from_numpy(x), torch.from_numpy(labels)).numpy(), value)


def test_unsupported_loss_is_refused_naming_class_path_and_supported_set():
    supported = ", ".join(sorted(losses.LOSS_MODULES))
    with pytest.raises(ValueError) as info:
        jaxgrad.nn.from_torch(torch.nn.TripletMarginLoss())
    assert str(info.value) == (
        "from_torch: unsupported loss TripletMarginLoss at the top "
        f"level; supported losses are {supported}. (from_torch "
        "tries torch.export next when it has an example input: "
        "`from_torch(module, example=(x,))`.)"
    )
    with pytest.raises(
        ValueError,
        match=r"unsupported loss TripletMarginLoss at 'loss'; "
        r"supported losses are BCELoss, ",
    ):
        jaxgrad.nn.from_torch(_Classifier(torch.nn.TripletMarginLoss()))
