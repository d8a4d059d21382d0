"""jaxgrad.nn against torch.nn: signatures, keys, layouts, initialisation, forward and gradients."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from parity_checks.harness import model_parity, random_batch
from torch import nn as tnn

import jaxgrad
import torchref
from jaxgrad import nn
from jaxgrad._arrays import check_input_dtype
from parity_tests._sampling import one_in

ACTIVATIONS = list(torchref.models.ACTIVATIONS)


@pytest.mark.parametrize(
    "name", ["Linear", "ReLU", "LeakyReLU", "GELU", "Flatten", "Sigmoid", "Tanh"]
)
def test_constructor_arguments_and_defaults_match_torch(name):
    torch_params = inspect.signature(getattr(tnn, name)).parameters
    fields = {f.name: f.default for f in dataclasses.fields(getattr(nn, name))}
    expected = {
        k: p.default
        for k, p in torch_params.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    assert list(fields) == list(expected)
    for key, default in expected.items():
        if default is not inspect.Parameter.empty:
            assert fields[key] == default, key


@pytest.mark.parametrize("sizes", [[3, 5], [784, 256, 10], [4, 8, 8, 2]])
def test_state_dict_keys_and_shapes_match_torch(sizes):
    reference = torchref.mlp(sizes).state_dict()
    shapes = nn.mlp(sizes).param_shapes()
    assert list(shapes) == list(reference)
    assert {k: tuple(v.shape) for k, v in shapes.items()} == {
        k: tuple(v.shape) for k, v in reference.items()
    }
    assert nn.mlp(sizes).num_parameters() == sum(v.numel() for v in reference.values())


def test_lessons_network_has_203530_parameters():
    # lesson 000 §1: "the 203,530 parameters of the network in lesson 03" (784-256-10)
    assert nn.mlp([784, 256, 10]).num_parameters() == 203_530


def test_nested_and_named_sequential_keys_match_torch():
    torch_model = tnn.Sequential(
        OrderedDict(encoder=tnn.Sequential(tnn.Linear(4, 3), tnn.ReLU()), head=tnn.Linear(3, 2))
    )
    model = nn.Sequential(
        OrderedDict(encoder=nn.Sequential(nn.Linear(4, 3), nn.ReLU()), head=nn.Linear(3, 2))
    )
    assert list(model.param_shapes()) == list(torch_model.state_dict())
    converted, params = nn.from_torch(torch_model)
    assert converted == model
    assert list(params) == ["encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"]


def test_default_init_is_torch_kaiming_uniform_and_fan_in_bias():
    # kaiming_uniform(a=√5): bound = √(2/(1+5)) · √(3/fan_in) = 1/√fan_in (derivation in
    # jaxgrad.nn.init); a uniform U(-b, b) has standard deviation b/√3.
    fan_in, fan_out = 784, 256
    params = nn.Linear(fan_in, fan_out).init(jax.random.key(0))
    bound = 1 / math.sqrt(fan_in)
    weight = np.asarray(params["weight"])
    assert weight.dtype == np.float32 and weight.shape == (fan_out, fan_in)
    assert np.abs(weight).max() <= bound
    assert np.abs(weight).max() > 0.999 * bound
    assert weight.std() == pytest.approx(bound / math.sqrt(3), rel=0.01)
    assert abs(weight.mean()) < 0.01 * bound
    bias = np.asarray(params["bias"])
    assert np.abs(bias).max() <= bound and bias.std() == pytest.approx(
        bound / math.sqrt(3), rel=0.15
    )
    # torch's own draw obeys the same bound: the same distribution, not the same numbers
    torch_weight = tnn.Linear(fan_in, fan_out).weight.detach().numpy()
    assert np.abs(torch_weight).max() <= bound
    assert torch_weight.std() == pytest.approx(weight.std(), rel=0.02)


@pytest.mark.parametrize("in_features,out_features", [(1, 1), (4, 3), (16, 16)])
def test_linear_weight_and_bias_are_independent_draws(in_features, out_features):
    """torch draws weight and bias one after the other from its generator: no bias
    entry repeats a weight entry (a repeat of a continuous draw means a reused key)."""
    params = nn.Linear(in_features, out_features).init(jax.random.key(0))
    weight, bias = np.asarray(params["weight"]), np.asarray(params["bias"])
    assert not np.isin(bias, weight).any()
    # and both are drawn afresh for every key, as torch's next reset_parameters()
    again = nn.Linear(in_features, out_features).init(jax.random.key(1))
    assert not np.isin(np.asarray(again["bias"]), bias).any()


def test_sequential_layers_draw_independent_weights():
    """Equal-shaped layers of one model get different weights, as torch's layers drawn
    one after another from its generator (a key reused for every layer would not)."""
    params = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)).init(jax.random.key(0))
    assert not np.isin(np.asarray(params["2.weight"]), np.asarray(params["0.weight"])).any()
    assert not np.isin(np.asarray(params["2.bias"]), np.asarray(params["0.bias"])).any()


def test_float64_without_x64_is_a_clear_error():
    with pytest.raises(ValueError, match="jax_enable_x64 is off"):
        nn.Linear(2, 3, dtype=jnp.float64).init(jax.random.key(0))


def test_dtype_argument_accepts_torch_dtypes(x64):
    params = nn.Linear(2, 3, dtype=torch.float64).init(jax.random.key(0))
    assert params["weight"].dtype == jnp.float64
    _, converted = nn.from_torch(tnn.Linear(2, 3).double())
    assert converted["weight"].dtype == jnp.float64


# activation x depth x dtype: one in three in the default run (the stride, 3, is prime to
# the 10 depth-dtype pairs, so every activation, depth and dtype still runs), the rest in
# the exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "activation,depth,dtype",
    one_in(
        3,
        [
            (activation, depth, dtype)
            for activation in ACTIVATIONS
            for depth in [0, 1, 2, 3, 4]
            for dtype in ["float64", "float32"]
        ],
    ),
)
def test_mlp_forward_and_gradients_match_torch(request, activation, depth, dtype, seed, rng):
    """Built twice: converted with ``from_torch``, and natively with ``jaxgrad.nn.mlp`` and
    ``load_state_dict``; jitted for one route and not the other, alternating by depth."""
    if dtype == "float64":
        request.getfixturevalue("x64")
    sizes = [6] + [7] * depth + [3]
    torch_model = torchref.mlp(sizes, activation, dtype=getattr(torch, dtype))
    x, y = random_batch(rng, 5, sizes[0], sizes[-1], dtype)
    report = model_parity(torch_model, x, y, jit=depth % 2 == 0)
    assert report.passed, report.table()
    assert {leaf.dtype for leaf in report.leaves} == {dtype}

    model = nn.mlp(sizes, activation, dtype=dtype)
    params = model.load_state_dict(torch_model.state_dict())
    apply = model.apply if depth % 2 == 0 else jax.jit(model.apply)
    out = apply(params, jnp.asarray(x))
    assert out.dtype == dtype
    jaxgrad.assert_parity(torch_model(torch.from_numpy(x)), out)


def test_flatten_and_identity_match_torch(x64, rng):
    x = rng.standard_normal((2, 3, 4, 5))
    for kwargs in ({}, {"start_dim": 0}, {"start_dim": 1, "end_dim": 2}, {"start_dim": -2}):
        reference = tnn.Flatten(**kwargs)(torch.from_numpy(x))
        jaxgrad.assert_parity(reference, nn.Flatten(**kwargs).apply({}, jnp.asarray(x)))
    jaxgrad.assert_parity(x, nn.Identity(54, unused=True).apply({}, jnp.asarray(x)))


def test_relu_gradient_at_zero_is_zero_like_torch(x64):
    x = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64, requires_grad=True)
    torch.relu(x).sum().backward()
    grad = jax.grad(lambda v: nn.ReLU().apply({}, v).sum())(jnp.array([-1.0, 0.0, 1.0]))
    jaxgrad.assert_parity(x.grad, grad, **jaxgrad.parity.BIT_IDENTICAL)


def test_leaky_relu_gradient_at_zero_is_the_slope_like_torch(x64):
    # torch's leaky_relu_backward: grad if x > 0 else grad·slope — at exactly 0, the slope
    values = [-1.0, 0.0, 1.0]
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    tnn.LeakyReLU(0.2)(x).sum().backward()
    grad = jax.grad(lambda v: nn.LeakyReLU(0.2).apply({}, v).sum())(jnp.array(values))
    jaxgrad.assert_parity(x.grad, grad, **jaxgrad.parity.BIT_IDENTICAL)
    assert float(grad[1]) == 0.2


def test_from_torch_keeps_every_non_default_hyperparameter(x64, rng):
    """Each converter reads the module's hyperparameters, not the class defaults."""
    torch_model = tnn.Sequential(
        tnn.Flatten(1, 2),
        tnn.Linear(6, 5, bias=False, dtype=torch.float64),
        tnn.LeakyReLU(0.3),
        tnn.Linear(5, 4, dtype=torch.float64),
        tnn.GELU("tanh"),
    )
    model, params = nn.from_torch(torch_model)
    assert model == nn.Sequential(
        nn.Flatten(1, 2),
        nn.Linear(6, 5, bias=False, dtype="float64"),
        nn.LeakyReLU(0.3),
        nn.Linear(5, 4, dtype="float64"),
        nn.GELU("tanh"),
    )
    x = rng.standard_normal((3, 2, 3))
    jaxgrad.assert_parity(torch_model(torch.from_numpy(x)), model.apply(params, jnp.asarray(x)))


def test_gelu_default_is_exact_erf_not_jax_tanh_default(x64):
    x = jnp.linspace(-3, 3, 13)
    exact = torch.nn.functional.gelu(torch.from_numpy(np.array(x)))
    jaxgrad.assert_parity(exact, nn.GELU().apply({}, x))
    # jax.nn.gelu's own default is the tanh approximation: a porting pitfall
    assert not jaxgrad.compare(exact, jax.nn.gelu(x)).passed


def test_state_dict_round_trips_into_torch(x64, rng):
    model = nn.mlp([4, 5, 2], "tanh", dtype="float64")
    params = model.init(jax.random.key(1))
    torch_model = torchref.mlp([4, 5, 2], "tanh", dtype=torch.float64)
    torchref.load_numpy(torch_model, model.state_dict(params))
    x = rng.standard_normal((3, 4))
    jaxgrad.assert_parity(torch_model(torch.from_numpy(x)), model(params, jnp.asarray(x)))


def test_sequential_slicing_and_intermediates(x64, rng):
    model = nn.mlp([4, 5, 5, 2], "relu", dtype="float64")
    params = model.init(jax.random.key(0))
    x = jnp.asarray(rng.standard_normal((3, 4)))
    outputs = model.intermediates(params, x)
    assert len(outputs) == len(model) == 5
    jaxgrad.assert_parity(outputs[-1], model(params, x), **jaxgrad.parity.BIT_IDENTICAL)
    head = model[:2]
    assert head.names == ("0", "1")
    jaxgrad.assert_parity(outputs[1], head(params, x), **jaxgrad.parity.BIT_IDENTICAL)


@pytest.mark.parametrize(
    "layer_dtype,input_dtype", [("float32", "float64"), ("float64", "float32")]
)
def test_linear_refuses_an_input_of_another_dtype_like_torch(x64, layer_dtype, input_dtype):
    torch_layer = tnn.Linear(3, 2, dtype=getattr(torch, layer_dtype))
    x = np.ones((4, 3), input_dtype)
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype"):
        torch_layer(torch.from_numpy(x))
    model, params = nn.from_torch(torch_layer)
    message = (
        rf"Linear: `input` dtype {input_dtype} does not match the layer's "
        rf"{layer_dtype} parameters.*mat1 and mat2.*x\.astype\('{layer_dtype}'\)"
    )
    with pytest.raises(TypeError, match=message):
        model.apply(params, jnp.asarray(x))
    with pytest.raises(TypeError, match=message):
        jax.jit(model.apply)(params, jnp.asarray(x))
    with pytest.raises(TypeError, match=r"`input` dtype int32 .*\)\.$"):  # no "build in int32"
        model.apply(params, jnp.ones((4, 3), jnp.int32))
    # the same dtype passes, and agrees with torch
    same = x.astype(layer_dtype)
    jaxgrad.assert_parity(
        torch_layer(torch.from_numpy(same)), model.apply(params, jnp.asarray(same))
    )


def test_float64_numpy_input_without_x64_is_float32_to_jax():
    # with jax_enable_x64 off JAX cannot hold float64: the input is float32 to it
    model = nn.Linear(3, 2)
    out = model.apply(model.init(jax.random.key(0)), np.ones((1, 3)))
    assert out.dtype == jnp.float32
    check_input_dtype("Layer", np.ones(2), "float32")
    with pytest.raises(TypeError, match="Layer: `weights` dtype int32"):
        check_input_dtype("Layer", np.ones(2, np.int64), "float32", argument="weights")


def test_load_state_dict_compiles_nothing_and_never_aliases_torch_memory():
    """Loading weights is a host-side copy: no XLA program per parameter shape (jax 0.10
    compiles one for ``jnp.asarray`` of a numpy array), and the arrays are fresh, so a
    donated jitted step cannot overwrite the torch tensors they came from."""
    from jax import monitoring

    # shapes no other test uses, so nothing could come from an earlier compilation; the
    # twin is built directly (``from_torch`` would load the same shapes first)
    torch_model = tnn.Sequential(tnn.Linear(13, 11), tnn.ReLU(), tnn.Linear(11, 7)).double()
    model = nn.Sequential(
        nn.Linear(13, 11, dtype="float64"), nn.ReLU(), nn.Linear(11, 7, dtype="float64")
    )
    compiled = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(kwargs.get("fun_name"))

    with jax.enable_x64(True):
        monitoring.register_event_duration_secs_listener(listen)
        try:
            params = model.load_state_dict(torch_model.state_dict())
        finally:
            monitoring.unregister_event_duration_listener(listen)
        assert compiled == []
        assert params["0.weight"].dtype == jnp.float64
        loaded = np.asarray(params["0.weight"]).copy()
        with torch.no_grad():
            torch_model[0].weight.add_(1.0)
        # the jax array kept the values it was loaded with
        np.testing.assert_array_equal(np.asarray(params["0.weight"]), loaded)
        np.testing.assert_array_equal(loaded + 1.0, torch_model[0].weight.detach().numpy())
