"""The rest of torch.nn's activations against torch at their kinks, bounds and extremes.

module_db's samples are random normals and never land on a kink; these points do:
Hardtanh, Threshold, Hardshrink and Softshrink exactly at their bounds (torch's
backward is 0 there), PReLU, CELU and SELU at 0, LogSigmoid and Softsign far from 0,
and NaN (torch's kernels give the non-constant branch's gradient, 1 — or the slope
for PReLU). Compared in float64 at the float64 tier, NaN masks included. Then what
torch rejects, jaxgrad rejects, with the argument named.
"""

from __future__ import annotations

import dataclasses
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
    -40.0,
    -3.0,
    -2.0,
    -1.5,
    -1.0,
    -0.5,
    -1e-300,
    0.0,
    1e-300,
    0.25,
    0.5,
    1.0,
    1.5,
    2.0,
    2.0000001,
    3.0,
    40.0,
    800.0,
    float("nan"),
]

MODULES = {
    "Hardtanh": lambda: torch.nn.Hardtanh(),
    "Hardtanh(-2, 3)": lambda: torch.nn.Hardtanh(-2.0, 3.0),
    "Threshold(2, 1)": lambda: torch.nn.Threshold(2.0, 1.0),
    "Threshold(-1, 10)": lambda: torch.nn.Threshold(-1.0, 10.0),
    "Hardshrink": lambda: torch.nn.Hardshrink(),
    "Hardshrink(1.5)": lambda: torch.nn.Hardshrink(1.5),
    "Hardshrink(-0.5)": lambda: torch.nn.Hardshrink(-0.5),  # torch accepts it
    "Softshrink": lambda: torch.nn.Softshrink(),
    "Softshrink(0)": lambda: torch.nn.Softshrink(0.0),
    "CELU": lambda: torch.nn.CELU(),
    "CELU(alpha=2)": lambda: torch.nn.CELU(alpha=2.0),
    "CELU(alpha=-0.5)": lambda: torch.nn.CELU(alpha=-0.5),
    "SELU": lambda: torch.nn.SELU(),
    "LogSigmoid": lambda: torch.nn.LogSigmoid(),
    "Softsign": lambda: torch.nn.Softsign(),
    "Tanhshrink": lambda: torch.nn.Tanhshrink(),
    "PReLU": lambda: torch.nn.PReLU(),
    "PReLU(init=-1.5)": lambda: torch.nn.PReLU(init=-1.5),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_activation_matches_torch_at_kinks_and_extremes(name):
    x = torch.tensor(POINTS, dtype=D, requires_grad=True)
    module = MODULES[name]().to(D)
    report = layer_parity(module, x, name=name, fast_compile=True)
    assert report.passed, report.table()


def test_per_channel_prelu_glu_softmin_and_softmax2d_match_torch():
    points = torch.tensor(POINTS[:-1], dtype=D)
    x = points[torch.arange(2 * 3 * 4 * 6) % len(points)].reshape(2, 3, 4, 6).requires_grad_()
    for name, module in (
        ("PReLU(3)", torch.nn.PReLU(3, init=0.1)),
        ("GLU(dim=2)", torch.nn.GLU(2)),
        ("GLU", torch.nn.GLU()),
        ("Softmin(dim=1)", torch.nn.Softmin(dim=1)),
        ("Softmax2d", torch.nn.Softmax2d()),
    ):
        with torch.no_grad():
            for p in module.parameters():  # distinct slopes per channel
                p.copy_(torch.tensor([0.1, -0.7, 2.5]))
        small = (x.detach() / 100).requires_grad_() if "Soft" in name or "GLU" in name else x
        report = layer_parity(module.to(D), small, name=name, fast_compile=True)
        assert report.passed, report.table()


def test_hand_derived_gradients_at_the_bounds(x64):
    # torch's backward kernels, measured: 0 at each bound, 1 at NaN
    x = np.array([-1.0, 1.0, 0.5, np.nan])
    np.testing.assert_array_equal(jax.grad(lambda x: F.hardtanh(x).sum())(x), [0, 0, 1, 1])
    np.testing.assert_array_equal(
        jax.grad(lambda x: F.threshold(x, 0.5, 9.0).sum())(x), [0, 1, 0, 1]
    )
    x = np.array([-0.5, 0.5, 0.0, 0.6, np.nan])
    np.testing.assert_array_equal(jax.grad(lambda x: F.hardshrink(x).sum())(x), [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(jax.grad(lambda x: F.softshrink(x).sum())(x), [0, 0, 0, 1, 1])
    # PReLU: the slope at 0 and at NaN; CELU 1 at 0; SELU scale·alpha at 0
    weight = np.array([0.25])
    np.testing.assert_array_equal(
        jax.grad(lambda x: F.prelu(x, weight).sum())(np.array([0.0, np.nan, 1.0])), [0.25, 0.25, 1]
    )
    assert jax.grad(lambda x: F.celu(x, 2.0))(0.0) == 1.0
    np.testing.assert_allclose(jax.grad(F.selu)(0.0), 1.7580993408473766, rtol=1e-15)


def test_hardtanh_deprecated_keywords_warn_and_apply():
    with pytest.warns(FutureWarning, match="`min_value` is deprecated"):
        layer = nn.Hardtanh(min_value=-2.0)
    assert (layer.min_val, layer.max_val, layer.min_value) == (-2.0, 1.0, None)


def test_prelu_keeps_torchs_names_defaults_and_init(x64):
    layer = nn.PReLU(3, init=0.1, dtype="float64")
    params = layer.init(jax.random.key(0))
    assert list(params) == ["weight"] and params["weight"].shape == (3,)
    np.testing.assert_array_equal(params["weight"], [0.1, 0.1, 0.1])
    assert nn.PReLU().init(jax.random.key(0))["weight"].dtype == np.float32
    assert (nn.PReLU().init_value, nn.PReLU(4).num_slopes, layer.num_parameters()) == (0.25, 4, 3)
    assert dataclasses.replace(layer, dtype="float32") == nn.PReLU(3, 0.1, dtype="float32")


def _torch_raises(fn) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001 - torch raises RuntimeError, AssertionError, ValueError
        return True
    return False


@pytest.mark.parametrize(
    "torch_fn, jax_fn, match",
    [
        (
            lambda: torch.nn.GLU()(torch.ones(2, 3)),
            lambda: nn.GLU().apply({}, np.ones((2, 3))),
            "`dim`",
        ),
        (
            lambda: torch.nn.GLU()(torch.tensor(1.0)),
            lambda: nn.GLU().apply({}, np.float64(1.0)),
            "`input`",
        ),
        (
            lambda: torch.nn.GLU(2)(torch.ones(2, 4)),
            lambda: nn.GLU(2).apply({}, np.ones((2, 4))),
            "`dim`",
        ),
        (
            lambda: torch.nn.Softmax2d()(torch.ones(2, 3)),
            lambda: nn.Softmax2d().apply({}, np.ones((2, 3))),
            "`input`",
        ),
        (
            lambda: torch.nn.Softmax2d()(torch.ones(1, 2, 3, 4, 5)),
            lambda: nn.Softmax2d().apply({}, np.ones((1, 2, 3, 4, 5))),
            "`input`",
        ),
        (lambda: torch.nn.Softshrink(-0.5)(torch.ones(2)), lambda: nn.Softshrink(-0.5), "`lambd`"),
        (lambda: torch.nn.Hardtanh(1.0, -1.0), lambda: nn.Hardtanh(1.0, -1.0), "`max_val`"),
        (lambda: torch.nn.Hardtanh(1.0, 1.0), lambda: nn.Hardtanh(1.0, 1.0), "`max_val`"),
        (lambda: torch.nn.CELU(0.0)(torch.ones(2)), lambda: nn.CELU(0.0), "`alpha`"),
        (
            lambda: torch.nn.PReLU(3)(torch.ones(2, 4)),
            lambda: nn.PReLU(3).apply(
                nn.PReLU(3).init(jax.random.key(0)), np.ones((2, 4), np.float32)
            ),
            "`weight`",
        ),
        (
            lambda: torch.nn.PReLU(3)(torch.ones(3)),
            lambda: nn.PReLU(3).apply(nn.PReLU(3).init(jax.random.key(0)), np.ones(3, np.float32)),
            "`weight`",
        ),
        (
            lambda: torch.nn.PReLU(3)(torch.tensor(1.0)),
            lambda: nn.PReLU(3).apply(nn.PReLU(3).init(jax.random.key(0)), np.float32(1.0)),
            "0-dimensional `input`",
        ),
    ],
)
def test_what_torch_rejects_jaxgrad_rejects_naming_the_argument(torch_fn, jax_fn, match):
    assert _torch_raises(torch_fn)
    with pytest.raises(ValueError, match=match):
        jax_fn()


def test_traced_functional_forms_match_torch(x64):
    class Functional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(
                torch.tensor([0.2, -0.3, 1.5, 0.7, 0.1, -1.0], dtype=D)
            )

        def forward(self, x):
            f = torch.nn.functional
            return (
                f.hardtanh(x, -0.5, 0.5),
                f.threshold(x, 0.1, -2.0),
                f.hardshrink(x, 0.3),
                f.softshrink(x, 0.3),
                f.celu(x, 1.5),
                f.selu(x),
                f.logsigmoid(x),
                f.softsign(x),
                f.tanhshrink(x),
                f.glu(x, 1),
                f.prelu(x, self.weight),
                f.softmin(x, dim=1),
            )

    torch.manual_seed(0)
    x = torch.randn(2, 6, 4, dtype=D, requires_grad=True)  # 6 channels: one slope each
    module = Functional()
    report = layer_parity(module, x, name="functional", fast_compile=True)
    assert report.passed, report.table()


def test_softmin_implicit_dim_warns_like_torch():
    data = np.random.default_rng(0).standard_normal((2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch.nn.Softmin()(torch.from_numpy(data)).numpy()
    with jax.enable_x64(True), pytest.warns(UserWarning, match="Implicit dimension.*softmin"):
        got = nn.Softmin().apply({}, data)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
