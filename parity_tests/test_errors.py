"""Bad input gets a clear error naming what was wrong and what was expected."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn as tnn

import torchref
from jaxgrad import nn


@pytest.fixture
def model_and_weights():
    torch_model = torchref.mlp([4, 3, 2])
    return nn.mlp([4, 3, 2]), torchref.state_dict_numpy(torch_model)


def test_load_state_dict_reports_a_missing_key(model_and_weights):
    model, weights = model_and_weights
    del weights["2.bias"]
    with pytest.raises(ValueError, match="missing keys: 2.bias"):
        model.load_state_dict(weights)


def test_load_state_dict_reports_an_unexpected_key(model_and_weights):
    model, weights = model_and_weights
    weights["4.weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="unexpected keys: 4.weight"):
        model.load_state_dict(weights)


def test_load_state_dict_reports_a_transposed_weight(model_and_weights):
    model, weights = model_and_weights
    weights["0.weight"] = weights["0.weight"].T
    with pytest.raises(
        ValueError,
        match=r"`0.weight`: shape \(4, 3\) does not match the model's "
        r"\(3, 4\) \(transposed\?",
    ):
        model.load_state_dict(weights)


def test_load_state_dict_refuses_float16_instead_of_casting(model_and_weights):
    model, weights = model_and_weights
    weights["0.bias"] = weights["0.bias"].astype(np.float16)
    with pytest.raises(
        ValueError, match="`0.bias`: dtype float16 does not match the model's float32"
    ):
        model.load_state_dict(weights)


def test_load_state_dict_reports_every_problem_at_once(model_and_weights):
    model, weights = model_and_weights
    weights["0.weight"] = weights["0.weight"].T
    weights["0.bias"] = weights["0.bias"].astype(np.float16)
    del weights["2.bias"]
    weights["extra"] = np.zeros(1)
    with pytest.raises(ValueError) as info:
        model.load_state_dict(weights)
    message = str(info.value)
    for fragment in (
        "missing keys: 2.bias",
        "unexpected keys: extra",
        "`0.weight`: shape",
        "`0.bias`: dtype float16",
    ):
        assert fragment in message


def test_load_state_dict_accepts_torch_numpy_and_jax_values(model_and_weights):
    model, weights = model_and_weights
    torch_values = {k: torch.from_numpy(v).requires_grad_() for k, v in weights.items()}
    jax_values = {k: jnp.asarray(v) for k, v in weights.items()}
    for mapping in (weights, torch_values, jax_values):
        params = model.load_state_dict(mapping)
        assert list(params) == list(weights)
        np.testing.assert_array_equal(params["0.weight"], weights["0.weight"])


def test_from_torch_names_the_unsupported_class_and_its_path():
    torch_model = tnn.Sequential(tnn.Linear(4, 4), tnn.Sequential(tnn.PixelShuffle(2), tnn.ReLU()))
    with pytest.raises(
        ValueError,
        match=r"unsupported module PixelShuffle at '1.0'; supported "
        r"modules are .*Linear, .*Sequential",
    ):
        nn.from_torch(torch_model)
    with pytest.raises(ValueError, match="unsupported module PixelUnshuffle at the top level"):
        nn.from_torch(tnn.PixelUnshuffle(2))


def test_linear_rejects_an_input_of_the_wrong_width():
    layer = nn.Linear(3, 2)
    params = layer.init(jax.random.key(0))
    with pytest.raises(
        ValueError,
        match=r"`in_features` \(=3\) must match the input's last "
        r"dimension \(input shape \(5, 4\)\)",
    ):
        layer.apply(params, jnp.zeros((5, 4)))


def test_apply_with_another_layers_params_is_a_clear_error():
    layer = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="lacks 'weight', 'bias'"):
        layer.apply({"0.weight": jnp.zeros((2, 3))}, jnp.zeros((1, 3)))


def test_builders_reject_bad_arguments():
    with pytest.raises(ValueError, match="`activation` \\(='swish'\\) must be one of"):
        nn.mlp([2, 3], "swish")
    with pytest.raises(ValueError, match="needs at least an input and an output"):
        nn.mlp([2])
    with pytest.raises(ValueError, match="`in_features` \\(=-1\\)"):
        nn.Linear(-1, 2)
    with pytest.raises(TypeError, match="expected a jaxgrad.nn layer"):
        nn.Sequential(tnn.Linear(2, 2))
    with pytest.raises(ValueError, match="`approximate`"):
        nn.GELU(approximate="fast")


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_apply_refuses_a_torch_tensor_saying_how_to_convert_it(capture):
    """Not jax's `Cannot interpret 'torch.float32' as a data type`, on both front ends
    (the export one's ExportedModule too). (`jax.jit(model.apply)` refuses the tensor
    itself, naming its type and path, before apply runs.)"""
    torch_model = torchref.mlp([4, 3, 2])
    model, params = nn.from_torch(torch_model, torch.zeros(2, 4), capture=capture)
    x = torch.zeros(2, 4)
    message = (
        r"input 0 is a torch tensor \(torch.float32, shape \[2, 4\]\); jaxgrad takes "
        r"jax or numpy arrays: convert it with `jnp.asarray\(t.detach\(\).numpy\(\)\)`"
    )
    with pytest.raises(TypeError, match=message):
        model.apply(params, x)
    torch_params = {k: torch.from_numpy(np.asarray(v)) for k, v in params.items()}
    with pytest.raises(TypeError, match="param `0.weight` is a torch tensor"):
        model.apply(torch_params, jnp.zeros((2, 4)))
    # the conversion the message gives works
    y = model.apply(params, jnp.asarray(x.detach().numpy()))
    np.testing.assert_allclose(np.asarray(y), torch_model(x).detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_apply_names_a_transposed_parameter(model_and_weights, jit):
    model, weights = model_and_weights
    params = model.load_state_dict(weights)
    params["2.weight"] = params["2.weight"].T
    apply = jax.jit(model.apply) if jit else model.apply
    with pytest.raises(
        ValueError,
        match=r"Sequential.apply: params do not fit the model: "
        r"`2.weight`: shape \(3, 2\) does not match the "
        r"model's \(2, 3\) \(transposed\?",
    ):
        apply(params, jnp.zeros((5, 4)))


def test_from_torch_refuses_what_is_not_a_torch_module():
    with pytest.raises(
        TypeError,
        match=r"from_torch expects a torch `nn.Module`, got a "
        r"`function` \(<function .*\); wrap a "
        r"function in a module whose `forward` calls it",
    ):
        nn.from_torch(lambda x: x)
    with pytest.raises(TypeError, match=r"got a `numpy.ndarray` \(array\(\[0., 0.\]\)\)\.$"):
        nn.from_torch(np.zeros(2))
