"""The state-and-randomness contract of ``jaxgrad.nn.Module``, on a toy layer.

A ``Counter`` has one buffer (``count``, torch's ``num_batches_tracked`` pattern) that
``train=True`` increments, and draws one uniform number from its own key: enough to
check how ``Sequential`` threads buffers, modes and keys, and what is refused.
"""

import dataclasses
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxgrad import nn
from jaxgrad.nn.module import Module, layer_key


@dataclasses.dataclass(frozen=True)
class Counter(Module):
    def init(self, key):
        return {}

    def init_buffers(self):
        return {"count": jnp.zeros((), jnp.int32)}

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        if not train:
            return x, dict(buffers)
        noise = jax.random.uniform(layer_key(key, path), ())
        return x + noise, {"count": buffers["count"] + 1}


def _model():
    return nn.Sequential(nn.Linear(3, 3), Counter(), nn.Sequential(nn.ReLU(), Counter()))


def test_buffers_are_named_and_ordered_like_torch():
    model = _model()
    assert model.init_buffers().keys() == {"1.count", "2.1.count"}
    # torch's order: each child's parameters, then its buffers, child by child
    assert model.state_dict_keys() == ["0.weight", "0.bias", "1.count", "2.1.count"]


def test_train_updates_buffers_and_eval_leaves_them():
    model = _model()
    params, buffers = model.init(jax.random.key(0)), model.init_buffers()
    x = jnp.ones((2, 3))
    _, after_train = model.apply(params, x, buffers=buffers, train=True, key=jax.random.key(1))
    assert {k: int(v) for k, v in after_train.items()} == {"1.count": 1, "2.1.count": 1}
    y_eval, after_eval = model.apply(params, x, buffers=after_train)
    assert {k: int(v) for k, v in after_eval.items()} == {"1.count": 1, "2.1.count": 1}
    np.testing.assert_array_equal(
        y_eval, jax.nn.relu(model[0].apply(model.layer_params(params, 0), x))
    )


def test_a_layers_randomness_depends_on_its_path_only():
    key = jax.random.key(7)
    x = jnp.zeros(())
    alone = nn.Sequential(Counter())
    shifted = nn.Sequential(nn.Identity(), Counter())  # the counter now lives at "1"
    y_alone, _ = alone.apply({}, x, buffers=alone.init_buffers(), train=True, key=key)
    y_again, _ = alone.apply({}, x, buffers=alone.init_buffers(), train=True, key=key)
    y_shifted, _ = shifted.apply({}, x, buffers=shifted.init_buffers(), train=True, key=key)
    assert y_alone == y_again
    assert y_alone == jax.random.uniform(layer_key(key, "0"), ())
    assert y_shifted == jax.random.uniform(layer_key(key, "1"), ())
    assert y_alone != y_shifted


def test_model_with_buffers_refuses_a_call_without_them():
    model = _model()
    params = model.init(jax.random.key(0))
    with pytest.raises(ValueError, match=r"has buffers \(1.count, 2.1.count\).*buffers="):
        model.apply(params, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="missing keys: 2.1.count"):
        model.apply(params, jnp.ones((2, 3)), buffers={"1.count": jnp.zeros((), jnp.int32)})


def test_load_state_dict_takes_a_full_state_dict_and_load_buffers_checks_buffers():
    model = _model()
    params, buffers = model.init(jax.random.key(0)), model.init_buffers()
    full = model.state_dict(params, buffers)
    assert list(full) == model.state_dict_keys()
    assert model.load_state_dict(full).keys() == params.keys()
    assert model.load_buffers(full).keys() == buffers.keys()
    with pytest.raises(ValueError, match="missing keys: 1.count"):
        model.load_buffers({k: v for k, v in full.items() if k != "1.count"})
    with pytest.raises(ValueError, match="unexpected keys: 9.count"):
        model.load_buffers({**full, "9.count": np.zeros((), np.int32)})
    with pytest.raises(ValueError, match="has buffers"):
        model.state_dict(params)
    # torch's int64 counter loads into int32 when x64 is off, when it fits
    int64 = {**full, "1.count": np.array(3, np.int64)}
    assert int(model.load_buffers(int64)["1.count"]) == 3


def test_buffer_free_models_keep_their_one_value_apply():
    model = nn.mlp([3, 4, 2])
    params = model.init(jax.random.key(0))
    y = model.apply(params, jnp.ones((1, 3)))
    y2, buffers = model.apply(params, jnp.ones((1, 3)), buffers={})
    np.testing.assert_array_equal(y, y2)
    assert buffers == {} and model.init_buffers() == {}


_INIT_CALLS = []


@dataclasses.dataclass(frozen=True)
class Scale(Module):
    """One (n,) parameter and one (n,) buffer; records every call of its inits."""

    n: int

    def init(self, key):
        _INIT_CALLS.append(("params", self.n))
        return {"scale": jax.random.normal(key, (self.n,))}

    def init_buffers(self):
        _INIT_CALLS.append(("buffers", self.n))
        return {"total": jnp.zeros((self.n,))}

    def forward(self, params, x):
        return x * params["scale"]


class MutableScale(Module):
    """Not a frozen dataclass: its size may change after construction."""

    def __init__(self, n):
        self.n = n

    init, init_buffers, forward = Scale.init, Scale.init_buffers, Scale.forward


def test_shapes_trace_once_per_equal_frozen_layer_and_x64_is_part_of_the_key():
    first, second, other = Scale(3), Scale(3), Scale(4)
    expected = jax.eval_shape(lambda: first.init(jax.random.key(0)))
    _INIT_CALLS.clear()
    assert first.param_shapes() == {"scale": expected["scale"]}
    assert second.param_shapes() == first.param_shapes()  # an equal layer: no new trace
    assert other.param_shapes()["scale"].shape == (4,)
    assert first.buffer_shapes()["total"].shape == (3,) and second.buffer_shapes()
    assert _INIT_CALLS == [("params", 3), ("params", 4), ("buffers", 3)]
    with jax.enable_x64(True):
        assert first.param_shapes()["scale"].dtype == np.float64  # traced again
    assert first.param_shapes()["scale"].dtype == np.float32
    assert _INIT_CALLS[3:] == [("params", 3)]
    first.param_shapes().pop("scale")  # the caller's own copy: the next call is whole
    assert list(first.param_shapes()) == ["scale"]


@dataclasses.dataclass(frozen=True)
class Watched(Scale):
    """A frozen layer holding an object (as the doctor's taps hold their recorder)."""

    watcher: object = None


def test_shapes_of_a_layer_that_can_change_or_holds_an_object_are_traced_every_call():
    layer = MutableScale(3)
    assert layer.param_shapes()["scale"].shape == (3,)
    layer.n = 5
    assert layer.param_shapes()["scale"].shape == (5,)
    # a frozen layer holding an array: traced, not cached
    weighted, _ = nn.from_torch(torch.nn.CrossEntropyLoss(weight=torch.ones(4)))
    assert weighted.buffer_shapes()["weight"].shape == (4,)
    # or any other object: traced every call, and nothing keeps the object alive
    watcher = type("Watcher", (), {})()
    alive = weakref.ref(watcher)
    _INIT_CALLS.clear()
    watched = Watched(2, watcher)
    assert watched.param_shapes() == watched.param_shapes()
    assert _INIT_CALLS == [("params", 2), ("params", 2)]
    del watched, watcher
    assert alive() is None
