"""The 3-d family, power-average and fractional pooling, local response norm, against torch.

Beyond module_db's samples: the options its few 3-d samples leave out (groups,
dilation, padding modes, ``output_padding``, ``ceil_mode`` windows that start in the
padding, ties), the gradient of ``LPPool`` where a window is all zeros (torch: 0, not
NaN), ``LocalResponseNorm`` over more channels than the input has, and fractional
pooling with torch's random samples injected — or JAX's, handed to torch. Every
case compares outputs, input and parameter gradients against a random cotangent,
and buffers, at the float64 tier (``layer_parity``).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

from jaxgrad import nn
from jaxgrad.nn import functional as F
from jaxgrad_dev.layer_parity import layer_parity

D = torch.float64
P = torch.nn

CASES = {
    "conv3d groups dilation stride padding": (
        lambda: P.Conv3d(
            4, 6, (3, 2, 3), stride=(2, 1, 1), padding=(1, 0, 2), dilation=(1, 2, 1), groups=2
        ),
        (2, 4, 5, 6, 5),
    ),
    "conv3d same reflect": (
        lambda: P.Conv3d(2, 3, (3, 2, 3), padding="same", padding_mode="reflect"),
        (1, 2, 4, 5, 4),
    ),
    "conv3d replicate no bias": (
        lambda: P.Conv3d(2, 2, 2, padding=(1, 2, 0), bias=False, padding_mode="replicate"),
        (2, 3, 4, 3),
    ),
    "conv3d circular dilation": (
        lambda: P.Conv3d(2, 4, 3, padding=2, dilation=2, groups=2, padding_mode="circular"),
        (1, 2, 4, 5, 6),
    ),
    "conv_transpose3d output_padding groups dilation": (
        lambda: P.ConvTranspose3d(
            4,
            6,
            (2, 3, 2),
            stride=(2, 1, 3),
            padding=(0, 1, 1),
            output_padding=(1, 0, 2),
            groups=2,
            dilation=(1, 2, 1),
        ),
        (2, 4, 3, 4, 3),
    ),
    "max3d ceil window in padding, dilation": (
        lambda: P.MaxPool3d(
            (3, 2, 3), (3, 2, 2), (1, 1, 1), dilation=(1, 2, 1), ceil_mode=True, return_indices=True
        ),
        (1, 2, 5, 6, 6),
    ),
    "avg3d ceil exclude pad": (
        lambda: P.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
        (1, 2, 6, 5, 6),
    ),
    "avg3d ceil include pad divisor": (
        lambda: P.AvgPool3d((2, 3, 2), 2, (1, 1, 0), ceil_mode=True, divisor_override=5),
        (2, 1, 5, 5, 4),
    ),
    "adaptive max3d (None, 3, 4) indices": (
        lambda: P.AdaptiveMaxPool3d((None, 3, 4), return_indices=True),
        (1, 2, 3, 7, 5),
    ),
    "adaptive avg3d upsampling": (lambda: P.AdaptiveAvgPool3d((4, 2, 6)), (2, 3, 5, 3)),
    "batchnorm3d cumulative average": (lambda: P.BatchNorm3d(3, momentum=None), (2, 3, 2, 3, 2)),
    "instancenorm3d tracking affine": (
        lambda: P.InstanceNorm3d(2, affine=True, track_running_stats=True),
        (2, 2, 3, 2, 3),
    ),
    "reflection pad3d": (lambda: P.ReflectionPad3d((2, 0, 1, 2, 1, 1)), (1, 2, 3, 3, 4)),
    "replication pad3d": (lambda: P.ReplicationPad3d((0, 3, 2, 1, 1, 0)), (2, 2, 3, 4)),
    "circular pad3d whole size": (lambda: P.CircularPad3d((3, 1, 2, 2, 0, 1)), (1, 1, 2, 2, 3)),
    "constant pad3d negative crops": (
        lambda: P.ConstantPad3d((-1, 2, 0, -2, 1, -1), 2.5),
        (1, 2, 3, 4, 4),
    ),
    "lp_pool1d p=3 stride ceil": (lambda: P.LPPool1d(3, 3, 2, ceil_mode=True), (2, 2, 8)),
    "lp_pool2d p=inf": (lambda: P.LPPool2d(float("inf"), (2, 3)), (1, 2, 5, 7)),
    "lp_pool3d p=-inf stride": (lambda: P.LPPool3d(-float("inf"), 2, (1, 2, 2)), (1, 2, 3, 4, 4)),
    "lrn size > channels 3-d": (lambda: P.LocalResponseNorm(7, 0.1, 0.6, 0.5), (2, 3, 5)),
    "lrn even size 4-d": (lambda: P.LocalResponseNorm(4, 2.0, 1.5, 1.0), (1, 5, 3, 2)),
    "lrn size > channels 6-d": (lambda: P.LocalResponseNorm(9), (2, 4, 2, 3, 2, 2)),
}


def _input(shape, ties=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if ties:
        x = torch.randint(0, 3, shape, generator=generator).to(D)
    else:
        x = torch.randn(shape, generator=generator, dtype=D)
    return x.requires_grad_()


# evaluation mode where it differs: the normalisation layers' running statistics
MODES = [(name, True) for name in sorted(CASES)] + [
    (name, False) for name in sorted(CASES) if "norm3d" in name
]


@pytest.mark.parametrize(
    "name, training", MODES, ids=[f"{n}-{'train' if t else 'eval'}" for n, t in MODES]
)
def test_options_module_db_leaves_out_match_torch(name, training):
    make, shape = CASES[name]
    torch.manual_seed(0)
    module = make().to(D)
    if not training:  # evaluation with running statistics that are not the defaults
        for buffer, value in (("running_mean", 0.3), ("running_var", 1.7)):
            if getattr(module, buffer, None) is not None:
                getattr(module, buffer).fill_(value)
    report = layer_parity(module, _input(shape), training=training, name=name, fast_compile=True)
    assert report.passed, report.table()


def test_max_pool3d_gradient_goes_to_torchs_tied_element():
    module = P.MaxPool3d(2, 1, 1, ceil_mode=True, return_indices=True)
    assert layer_parity(module, _input((2, 2, 3, 4, 3), ties=True), fast_compile=True).passed
    # by hand: every element ties; the first in (d, h, w) order gets the gradient
    with jax.enable_x64(True):
        grad = jax.grad(lambda x: F.max_pool3d(x, 2).sum())(np.ones((1, 1, 2, 2, 2)))
    expected = np.zeros((1, 1, 2, 2, 2))
    expected[0, 0, 0, 0, 0] = 1.0
    np.testing.assert_array_equal(grad, expected)


@pytest.mark.parametrize("norm_type", [2, 1.5, 3.0])
def test_lp_pool_gradient_is_zero_on_an_all_zero_window(x64, norm_type):
    """``(Σ x^p)^(1/p)`` has an infinite derivative at 0; torch's
    ``sign(a)·relu(|a|)`` makes it 0. One all-zero window, one ordinary one."""
    x = torch.tensor([[[0.0, 0.0, 0.5, 2.0]]], dtype=D, requires_grad=True)
    report = layer_parity(P.LPPool1d(norm_type, 2), x, fast_compile=True)
    assert report.passed, report.table()
    grad = jax.grad(lambda x: F.lp_pool1d(x, norm_type, 2).sum())(x.detach().numpy())
    assert np.all(grad[..., :2] == 0.0) and np.all(np.isfinite(grad))


def test_lp_pool_with_a_negative_input_gives_torchs_nan_gradients():
    # x^1.5 of a negative value is NaN: torch's relu passes the NaN on (jax.nn.relu's
    # gradient would stop it), so the whole window's gradient is NaN in both
    x = torch.tensor([[[-1.0, 0.5, 0.0, 0.0, 1.0, 2.0]]], dtype=D, requires_grad=True)
    assert layer_parity(P.LPPool1d(1.5, 2), x, fast_compile=True).passed


def _fractional(cls, kernel, size, shape, samples, ties=False, **options):
    module = cls(kernel, output_size=size, _random_samples=samples, **options).to(D)
    return layer_parity(module, _input(shape, ties), name=cls.__name__, fast_compile=True)


@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_fractional_max_pool_with_torchs_samples_matches(ties):
    generator = torch.Generator().manual_seed(3)
    samples = torch.rand(2, 3, 2, generator=generator, dtype=D)
    assert _fractional(
        P.FractionalMaxPool2d, (2, 3), (4, 3), (2, 3, 6, 7), samples, ties, return_indices=True
    ).passed
    samples = torch.rand(2, 3, 3, generator=generator, dtype=D)
    assert _fractional(
        P.FractionalMaxPool3d,
        (3, 1, 2),
        (3, 5, 2),
        (2, 3, 6, 6, 5),
        samples,
        ties,
        return_indices=True,
    ).passed
    # output 1 along a dim (the window sits at L − k) and a window as large as the input
    samples = torch.rand(1, 2, 2, generator=generator, dtype=D)
    assert _fractional(P.FractionalMaxPool2d, (5, 2), (1, 4), (1, 2, 5, 5), samples, ties).passed


def test_fractional_max_pool_with_nan_matches_torch():
    x = torch.randn(1, 1, 5, 5, dtype=D)
    x[0, 0, 1, 1] = x[0, 0, 3, 2] = float("nan")
    samples = torch.tensor([[[0.3, 0.8]]], dtype=D)
    module = P.FractionalMaxPool2d(
        2, output_size=(3, 3), return_indices=True, _random_samples=samples
    )
    assert layer_parity(module, x.requires_grad_(), fast_compile=True).passed


def test_fractional_max_pool_draws_from_the_key_and_torch_agrees_given_those_draws(x64):
    model = nn.Sequential(nn.FractionalMaxPool3d(2, output_ratio=0.5))
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 7, 5))
    first = model.apply({}, x, key=jax.random.key(1))
    np.testing.assert_array_equal(first, model.apply({}, x, key=jax.random.key(1)))
    assert not np.array_equal(first, model.apply({}, x, key=jax.random.key(2)))
    # the same draws, made explicit and given to torch: torch's output
    own = nn.module.layer_key(jax.random.key(1), "0")
    samples = jax.random.uniform(own, (2, 3, 3), jax.numpy.float64)
    expected = torch.nn.functional.fractional_max_pool3d(
        torch.from_numpy(x),
        2,
        output_ratio=0.5,
        _random_samples=torch.from_numpy(np.array(samples)),
    )
    np.testing.assert_array_equal(first, expected.numpy())
    with pytest.raises(ValueError, match=r"FractionalMaxPool3d at '0'.*`key=`"):
        model.apply({}, x)


def test_fractional_max_pool_keeps_torchs_samples_as_a_buffer(x64):
    samples = torch.rand(2, 3, 2, dtype=D)
    module = P.FractionalMaxPool2d(2, output_size=(3, 3), _random_samples=samples)
    model, params, buffers = nn.from_torch(module, with_buffers=True)
    assert params == {} and list(buffers) == ["_random_samples"]
    assert list(model.state_dict(params, buffers)) == list(module.state_dict())
    with pytest.raises(ValueError, match="_random_samples"):
        model.apply({}, np.zeros((2, 3, 6, 6)))  # the buffers are required


def _both_raise(torch_call, jax_call, match):
    with pytest.raises(Exception):  # noqa: B017 - torch's type varies by op and version
        torch_call()
    with pytest.raises((ValueError, TypeError), match=match):
        jax_call()


def test_what_torch_rejects_jaxgrad_rejects(x64):
    x5 = torch.randn(1, 2, 5, 5, 5, dtype=D)
    samples = torch.rand(1, 2, 3, dtype=D)
    # 3-d fractional pooling needs output + kernel − 1 below the input size (2-d: at most)
    _both_raise(
        lambda: F_torch.fractional_max_pool3d(x5, 2, (4, 4, 4), _random_samples=samples),
        lambda: F.fractional_max_pool3d(x5.numpy(), 2, (4, 4, 4), _random_samples=samples.numpy()),
        "`kernel_size`",
    )
    x3 = x5[0, :, 0]  # unbatched (C, H, W): samples (1, C, 2)
    assert F.fractional_max_pool2d(
        x3.numpy(), 2, (4, 4), _random_samples=samples[..., :2].numpy()
    ).shape == (2, 4, 4)
    wrong = torch.rand(1, 3, 2, dtype=D)  # 3 channels for an input of 2
    _both_raise(
        lambda: F_torch.fractional_max_pool2d(x3, 2, (2, 2), _random_samples=wrong),
        lambda: F.fractional_max_pool2d(x3.numpy(), 2, (2, 2), _random_samples=wrong.numpy()),
        "`_random_samples`",
    )
    _both_raise(
        lambda: P.FractionalMaxPool3d(2, output_ratio=1.5),
        lambda: nn.FractionalMaxPool3d(2, output_ratio=1.5),
        "`output_ratio`",
    )
    _both_raise(
        lambda: P.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5),
        lambda: nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5),
        "`output_size`",
    )
    _both_raise(
        lambda: F_torch.local_response_norm(x5[0, 0, 0], 2),
        lambda: F.local_response_norm(x5[0, 0, 0].numpy(), 2),
        "3-D or higher",
    )
    _both_raise(
        lambda: P.Conv3d(2, 2, 2)(x5[0, 0]),
        lambda: nn.Conv3d(2, 2, 2).apply(
            nn.Conv3d(2, 2, 2).init(jax.random.key(0)), x5[0, 0].numpy()
        ),
        "4-d",
    )
    _both_raise(
        lambda: P.ReflectionPad3d(5)(x5),
        lambda: nn.ReflectionPad3d(5).apply({}, x5.numpy()),
        "reflect padding",
    )
    _both_raise(
        lambda: P.AvgPool3d(2, padding=2)(x5),
        lambda: nn.AvgPool3d(2, padding=2).apply({}, x5.numpy()),
        "`padding`",
    )
    _both_raise(
        lambda: P.ConvTranspose3d(2, 2, 2, stride=2, output_padding=2).double()(x5),
        lambda: nn.ConvTranspose3d(2, 2, 2, stride=2, output_padding=2),
        "`output_padding`",
    )


F_torch = torch.nn.functional
