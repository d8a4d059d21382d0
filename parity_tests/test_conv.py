"""Convolutions against torch beyond module_db's samples: every option, float64.

The parity report's rows (``scripts/parity_checks/cnn_layers.py``) cover one
configuration per layer; these cover the rest. Each case is a torch module; ``layer_parity`` converts it with ``from_torch`` and
compares output, input gradient and parameter gradients (against a random
cotangent) at the float64 tier. Cases are looped inside one test per family to keep
the suite fast.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import jaxgrad
from jaxgrad import nn
from jaxgrad.nn import functional as F
from jaxgrad_dev.layer_parity import layer_parity

D = torch.float64

CONV_CASES = {
    "1d dilation 2 groups 2": (torch.nn.Conv1d(4, 2, 3, dilation=2, groups=2), (1, 4, 9)),
    "1d same even kernel dilated": (
        torch.nn.Conv1d(2, 2, 4, padding="same", dilation=2),
        (1, 2, 9),
    ),
    "1d valid no bias": (torch.nn.Conv1d(2, 3, 2, padding="valid", bias=False), (2, 2, 5)),
    "1d circular": (torch.nn.Conv1d(2, 2, 3, padding=2, padding_mode="circular"), (1, 2, 5)),
    "2d stride (2,1) pad (1,2)": (
        torch.nn.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 2)),
        (2, 2, 5, 4),
    ),
    "2d groups 3 depthwise": (torch.nn.Conv2d(3, 6, 3, groups=3), (1, 3, 5, 5)),
    "2d dilation (2,1)": (torch.nn.Conv2d(2, 2, 3, dilation=(2, 1), padding=1), (1, 2, 7, 5)),
    "2d same even kernel": (torch.nn.Conv2d(2, 2, (4, 3), padding="same"), (1, 2, 6, 5)),
    "2d reflect": (torch.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode="reflect"), (1, 2, 5, 6)),
    "2d replicate stride 2": (
        torch.nn.Conv2d(2, 3, 3, stride=2, padding=1, padding_mode="replicate"),
        (2, 2, 6, 5),
    ),
    "2d circular": (torch.nn.Conv2d(2, 2, 3, padding=1, padding_mode="circular"), (1, 2, 4, 5)),
    "t1d groups 2 dilation 2": (torch.nn.ConvTranspose1d(4, 6, 3, groups=2, dilation=2), (1, 4, 5)),
    "t1d padding beyond kernel": (
        torch.nn.ConvTranspose1d(2, 2, 2, stride=3, padding=2),
        (1, 2, 5),
    ),
    "t2d stride (2,3) out_pad (1,2)": (
        torch.nn.ConvTranspose2d(2, 3, 3, stride=(2, 3), output_padding=(1, 2)),
        (1, 2, 3, 3),
    ),
    "t2d groups 2 no bias": (
        torch.nn.ConvTranspose2d(4, 2, (2, 3), groups=2, bias=False, padding=1),
        (2, 4, 3, 4),
    ),
    "t2d dilation 2 out_pad 1": (
        torch.nn.ConvTranspose2d(2, 2, 3, stride=1, dilation=2, output_padding=1),
        (1, 2, 3, 3),
    ),
}


def _input(shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=D).requires_grad_()


def test_conv_options_match_torch():
    torch.manual_seed(0)
    failures = []
    for name, (module, shape) in CONV_CASES.items():
        report = layer_parity(module.to(D), _input(shape), name=name, fast_compile=True)
        assert len(report.leaves) >= 3, name  # output, input grad, weight grad
        if not report.passed:
            failures.append(report.table())
    assert not failures, "\n".join(failures)


def test_conv_transpose_output_size_matches_torch():
    torch.manual_seed(0)
    module = torch.nn.ConvTranspose2d(2, 2, 3, stride=3, padding=1).to(D)
    x = _input((1, 2, 3, 3))
    for size in ((7, 7), (8, 9), (1, 2, 9, 8)):
        assert layer_parity(module, x, output_size=size, name=str(size), fast_compile=True).passed
    with pytest.raises(ValueError, match="`output_size`"), jax.enable_x64(True):
        model, params = nn.from_torch(module)
        model.apply(params, np.zeros((1, 2, 3, 3)), output_size=(10, 10))


def test_init_shapes_and_torch_default_bounds():
    layer = nn.Conv2d(4, 6, (3, 2), groups=2)
    params = layer.init(jax.random.key(0))
    assert params["weight"].shape == (6, 2, 3, 2) and params["bias"].shape == (6,)
    bound = 1 / np.sqrt(2 * 3 * 2)  # fan_in = in_channels / groups · kH · kW
    assert np.abs(params["weight"]).max() <= bound and np.abs(params["weight"]).max() > 0.8 * bound
    assert np.abs(params["bias"]).max() <= bound
    t = nn.ConvTranspose1d(4, 6, 3, groups=2).init(jax.random.key(0))
    assert t["weight"].shape == (4, 3, 3)  # (in, out / groups, k)
    assert np.abs(t["weight"]).max() <= 1 / np.sqrt(3 * 3)
    torch_module = torch.nn.Conv2d(4, 6, (3, 2), groups=2)
    assert list(layer.param_shapes()) == [k for k, _ in torch_module.named_parameters()]


def test_conv_transpose_init_bounds_are_torchs_with_groups():
    """A transposed weight is `(in, out / groups, *k)`: torch's fan-in is
    `out / groups · prod(k)` (``_calculate_fan_in_and_fan_out`` reads dimension 1),
    neither `in · prod(k)` nor `out · prod(k)`. Bounds from torch; jaxgrad's draws must
    reach within 10 % of them (96 and 72 uniform weights) and never pass them."""
    cases = [
        (nn.ConvTranspose1d(4, 32, 3, groups=4), torch.nn.ConvTranspose1d(4, 32, 3, groups=4)),
        (
            nn.ConvTranspose2d(6, 4, (3, 2), groups=2),
            torch.nn.ConvTranspose2d(6, 4, (3, 2), groups=2),
        ),
    ]
    for layer, module in cases:
        fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(module.weight)
        bound = 1 / np.sqrt(fan_in)  # kaiming_uniform(a=√5) and the bias: U(±1/√fan_in)
        assert np.abs(module.weight.detach().numpy()).max() <= bound  # torch's own draw
        params = jax.jit(layer.init)(jax.random.key(1))  # one program, not one per op
        assert params["weight"].shape == tuple(module.weight.shape)
        weight, bias = np.abs(params["weight"]).max(), np.abs(params["bias"]).max()
        assert 0.9 * bound < weight <= bound, (type(layer).__name__, weight, bound)
        assert bias <= bound, (type(layer).__name__, bias, bound)


def test_functional_conv_matches_torch_with_jit():
    rng = np.random.default_rng(0)
    x, w, b = (
        rng.standard_normal((2, 4, 6, 5)),
        rng.standard_normal((6, 2, 3, 3)),
        rng.standard_normal(6),
    )
    expected = torch.nn.functional.conv2d(
        *map(torch.from_numpy, (x, w, b)), stride=2, padding=1, groups=2
    )
    with jax.enable_x64(True):
        got = jax.jit(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2))(x, w, b)
    jaxgrad.assert_parity(expected, got)


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: nn.Conv2d(2, 3, 3, stride=2, padding="same"),
            "`padding`='same' is not supported for strided",
        ),
        (lambda: nn.Conv2d(2, 3, 3, padding_mode="mirror"), "`padding_mode` (='mirror')"),
        (lambda: nn.Conv2d(2, 3, 0), "`kernel_size` (=0) must be positive"),
        (lambda: nn.Conv2d(2, 3, 3, stride=(1, 0)), "`stride` (=(1, 0)) must be positive"),
        (lambda: nn.Conv2d(2, 3, (3, 3, 3)), "`kernel_size` (=(3, 3, 3)) must be an int or 2 ints"),
        (lambda: nn.Conv2d(2, 3, 3, padding=-1), "`padding` (=-1) must be non-negative"),
        (
            lambda: nn.Conv2d(3, 4, 3, groups=2),
            "`in_channels` (=3) must be divisible by `groups` (=2)",
        ),
        (lambda: nn.Conv1d(2, 3, 3, padding="full"), "`padding` (='full')"),
        (
            lambda: nn.ConvTranspose2d(2, 3, 3, padding_mode="reflect"),
            "`padding_mode` (='reflect') must be 'zeros'",
        ),
        (
            lambda: nn.ConvTranspose2d(2, 3, 3, stride=2, output_padding=2),
            "`output_padding` (=(2, 2))",
        ),
        (lambda: nn.Conv2d(2, 3, 2.5), "`kernel_size` (=2.5) must be an int"),
    ],
)
def test_bad_constructor_arguments_are_named(build, message):
    with pytest.raises((ValueError, TypeError)) as info:
        build()
    assert message in str(info.value)


def test_bad_inputs_name_the_argument_and_the_layer_path():
    conv = nn.Conv2d(3, 4, 3)
    params = conv.init(jax.random.key(0))
    with pytest.raises(
        ValueError, match=r"expected a 3-d \(unbatched, C H W\) or 4-d .* got shape \(3, 5\)"
    ):
        conv.apply(params, np.zeros((3, 5), np.float32))
    with pytest.raises(
        ValueError, match=r"`in_channels` \(=3\) must match the input's channel dimension \(=2"
    ):
        conv.apply(params, np.zeros((1, 2, 5, 5), np.float32))
    model = nn.Sequential(nn.Identity(), nn.ReLU(), nn.Conv2d(5, 2, 3))
    with pytest.raises(
        ValueError, match=r"Conv2d at '2': Conv2d: `in_channels` \(=5\) must match .*\(=3"
    ):
        model.apply(model.init(jax.random.key(0)), np.zeros((1, 3, 7, 7), np.float32))
    with pytest.raises(ValueError, match="kernel .* is larger than the padded input"):
        conv.apply(params, np.zeros((1, 3, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"`groups` \(=2\) must divide"):
        F.conv2d(np.zeros((1, 4, 5, 5)), np.zeros((3, 2, 3, 3)), groups=2)
    with pytest.raises(ValueError, match=r"`padding`='same' is not supported for strided"):
        F.conv1d(np.zeros((1, 2, 5)), np.zeros((3, 2, 3)), stride=2, padding="same")
