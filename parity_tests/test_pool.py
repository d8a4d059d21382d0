"""Pooling against torch beyond module_db's samples: window rules, ties, NaN, float64.

Every case compares output (and indices), input gradient against a random cotangent,
at the float64 tier; the inputs with ties are small integers, so several elements of
a window share the maximum and torch's choice of the one that gets the gradient is
under test.
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

POOL_CASES = {
    "max1d ceil pad dilation": (
        P.MaxPool1d(3, 2, 1, dilation=2, ceil_mode=True, return_indices=True),
        (2, 2, 10),
    ),
    "max2d ceil_mode overhang": (
        P.MaxPool2d(2, 2, ceil_mode=True, return_indices=True),
        (1, 2, 5, 7),
    ),
    # ceil_mode's third window would start in the right padding ((3-1)·3 >= 5 + 1): dropped
    "max1d ceil window in padding": (
        P.MaxPool1d(3, 3, 1, ceil_mode=True, return_indices=True),
        (1, 2, 5),
    ),
    "max2d pad (1,0) stride (1,2)": (
        P.MaxPool2d((3, 2), (1, 2), (1, 0), return_indices=True),
        (1, 2, 5, 5),
    ),
    "max2d dilation 2": (P.MaxPool2d(2, 1, dilation=(2, 1)), (2, 1, 5, 4)),
    "avg1d ceil no pad count": (
        P.AvgPool1d(3, 2, 1, ceil_mode=True, count_include_pad=False),
        (2, 2, 8),
    ),
    "avg1d ceil pad count": (P.AvgPool1d(3, 2, 1, ceil_mode=True), (2, 2, 8)),
    "avg2d ceil overhang count_include_pad": (P.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 2, 6, 6)),
    "avg2d exclude pad": (
        P.AvgPool2d((3, 2), (2, 1), (1, 1), count_include_pad=False),
        (1, 2, 5, 4),
    ),
    "avg2d divisor 3 ceil": (P.AvgPool2d(2, 2, ceil_mode=True, divisor_override=3), (1, 1, 5, 5)),
    "adaptive avg1d 10->3": (P.AdaptiveAvgPool1d(3), (2, 2, 10)),
    "adaptive avg1d 3->5 (upsampling)": (P.AdaptiveAvgPool1d(5), (1, 2, 3)),
    "adaptive avg2d 7x5->(4,3)": (P.AdaptiveAvgPool2d((4, 3)), (1, 2, 7, 5)),
    "adaptive max1d 10->4": (P.AdaptiveMaxPool1d(4, return_indices=True), (2, 2, 10)),
    "adaptive max2d 7x5->(3,None)": (
        P.AdaptiveMaxPool2d((3, None), return_indices=True),
        (1, 2, 7, 5),
    ),
}


def _input(shape, ties=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if ties:
        x = torch.randint(0, 3, shape, generator=generator).to(D)
    else:
        x = torch.randn(shape, generator=generator, dtype=D)
    return x.requires_grad_()


@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_pool_options_match_torch(ties):
    failures = []
    for name, (module, shape) in POOL_CASES.items():
        if ties and "max" not in name:
            continue  # ties matter to max pooling only
        report = layer_parity(
            module, _input(shape, ties), name=f"{name} ties={ties}", fast_compile=True
        )
        assert len(report.leaves) >= 2, name
        if not report.passed:
            failures.append(report.table())
    assert not failures, "\n".join(failures)


def test_max_pool_with_nan_and_minus_inf_matches_torch():
    x = torch.tensor(
        [[[1.0, float("nan"), 2.0, float("nan"), -float("inf"), -float("inf")]]],
        dtype=D,
        requires_grad=True,
    )
    for module in (
        P.MaxPool1d(2, 2, return_indices=True),
        P.MaxPool1d(3, 1, 1, return_indices=True),
        P.AdaptiveMaxPool1d(2, return_indices=True),
    ):
        assert layer_parity(module, x, fast_compile=True).passed


def test_max_pool_gradient_goes_to_one_tied_element():
    # the hand-derived expectation: torch's first maximum in row-major window order
    x = np.array([[[[1.0, 1.0], [1.0, 0.0]]]])
    with jax.enable_x64(True):
        grad = jax.grad(lambda x: F.max_pool2d(x, 2).sum())(x)
    np.testing.assert_array_equal(grad, [[[[1.0, 0.0], [0.0, 0.0]]]])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: F.max_pool2d(x, 3, padding=2), "`padding` (=(2, 2)) must be at most half"),
        (lambda x: F.avg_pool2d(x, 2, padding=2), "`padding` (=(2, 2)) must be at most half"),
        (lambda x: F.max_pool2d(x, 0), "`kernel_size` (=0) must be positive"),
        (lambda x: F.max_pool2d(x, 2, stride=0), "`stride` (=0) must be positive"),
        (lambda x: F.max_pool2d(x, 9), "output size is 0"),
        (lambda x: F.avg_pool2d(x, 2, divisor_override=0), "`divisor_override` (=0)"),
        (lambda x: F.adaptive_avg_pool2d(x, (0, 2)), "`output_size` (=(0, 2))"),
        (
            lambda x: F.max_pool1d(x, 2),
            "expected a 2-d (unbatched, C L) or 3-d (batched, N C L) input, got shape (1, 2, 4, 4)",
        ),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises((ValueError, TypeError)) as info:
        call(np.zeros((1, 2, 4, 4)))
    assert message in str(info.value)


def test_bad_constructor_arguments_and_layer_path():
    with pytest.raises(
        ValueError, match=r"MaxPool2d: `kernel_size` \(=\(2, 0\)\) must be positive"
    ):
        nn.MaxPool2d((2, 0))
    with pytest.raises(TypeError, match=r"AvgPool1d: `stride` \(='2'\)"):
        nn.AvgPool1d(2, "2")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2))
    with pytest.raises(ValueError, match=r"MaxPool2d at '1': max_pool2d: the output size is 0"):
        model.apply(model.init(jax.random.key(0)), np.zeros((1, 1, 3, 3), np.float32))


def test_max_pool_keeps_signed_zeros_as_torch():
    """The chosen value is picked, not summed: exact, sign of zero included (torch
    returns the first maximum, −0.0 where it ties with +0.0)."""
    x = torch.tensor([[[-0.0, 0.0, 0.0, -0.0, -0.0, -0.0]]], dtype=D)
    expected = torch.nn.functional.max_pool1d(x, 2)
    with jax.enable_x64(True):
        got = np.asarray(F.max_pool1d(x.numpy(), 2))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(expected.numpy()))
