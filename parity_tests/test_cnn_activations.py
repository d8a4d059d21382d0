"""The CNN activations against torch at their kinks, thresholds and extremes, float64.

The points are chosen where autodiff of the forward formula and torch's backward
kernel disagree unless the derivative is written as torch's: ReLU6 at 0 and 6,
Hardswish and Hardsigmoid at ±3, ELU at 0, Softplus at its threshold, Mish and
Softplus far from 0 (overflow), Hardsigmoid's float32 constant 1/6.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
import torch

from jaxgrad import nn
from jaxgrad.nn import functional as F
from jaxgrad_dev.layer_parity import layer_parity

D = torch.float64
POINTS = [
    -800.0,
    -30.0,
    -20.0,
    -6.0,
    -3.0,
    -2.5,
    -1.0,
    -1e-300,
    0.0,
    1e-300,
    0.5,
    2.5,
    3.0,
    6.0,
    10.0,
    20.0,
    20.000001,
    40.0,
    800.0,
]

MODULES = {
    "ReLU6": torch.nn.ReLU6(),
    "Hardswish": torch.nn.Hardswish(),
    "Hardsigmoid": torch.nn.Hardsigmoid(),
    "ELU": torch.nn.ELU(),
    "ELU(alpha=0.5)": torch.nn.ELU(alpha=0.5),
    "Softplus": torch.nn.Softplus(),
    "Softplus(beta=2, threshold=5)": torch.nn.Softplus(beta=2.0, threshold=5.0),
    "SiLU": torch.nn.SiLU(),
    "Mish": torch.nn.Mish(),
    "Softmax(dim=0)": torch.nn.Softmax(dim=0),
    "LogSoftmax(dim=-1)": torch.nn.LogSoftmax(dim=-1),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_activation_matches_torch_at_kinks_and_extremes(name):
    x = torch.tensor(POINTS, dtype=D, requires_grad=True)
    if name.startswith(("Softmax", "LogSoftmax")):
        x = torch.linspace(-5, 5, 12, dtype=D).reshape(3, 4).requires_grad_()
    report = layer_parity(MODULES[name], x, name=name, fast_compile=True)
    assert report.passed, report.table()


def test_hand_derived_gradients_at_the_kinks():
    # torch's documented backward: 0 at the ends of ReLU6's linear piece; Hardswish
    # 0 at -3, 1 at 3; Hardsigmoid float32(1/6) strictly inside (-3, 3)
    with jax.enable_x64(True):
        x = np.array([0.0, 6.0, 3.0, -3.0, 1.0])
        np.testing.assert_array_equal(jax.grad(lambda x: F.relu6(x).sum())(x), [0, 0, 1, 0, 1])
        np.testing.assert_array_equal(
            jax.grad(lambda x: F.hardswish(x).sum())(x), [0.5, 1, 1, 0, 1 / 3 + 0.5]
        )
        sixth = float(np.float32(1) / np.float32(6))
        np.testing.assert_array_equal(
            jax.grad(lambda x: F.hardsigmoid(x).sum())(x), [sixth, 0, 0, 0, sixth]
        )


def test_softmax_implicit_dim_follows_torch_and_warns():
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    for shape in ((4,), (2, 3, 4), (2, 3), (1, 2, 3, 4)):
        data = np.resize(x, shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = torch.nn.Softmax()(torch.from_numpy(data)).numpy()
        with jax.enable_x64(True), pytest.warns(UserWarning, match="Implicit dimension"):
            got = nn.Softmax().apply({}, data)
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_bad_softmax_dim_is_named():
    with pytest.raises(ValueError, match=r"`dim` \(=2\) is out of range for an input of 2 dims"):
        F.softmax(np.zeros((2, 3)), 2)
    with pytest.raises(TypeError, match=r"`dim` \(=1.0\) must be an int"):
        F.log_softmax(np.zeros((2, 3)), 1.0)
