"""Padding and ``Upsample`` against torch: every mode, non-integer scales, float64."""

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
    "zero pad negative crops": (P.ZeroPad2d((1, -1, -2, 2)), (1, 2, 4, 5)),
    "constant pad 1d value": (P.ConstantPad1d((2, 0), 3.5), (2, 3, 4)),
    "reflection 2d widest": (P.ReflectionPad2d((3, 3, 2, 1)), (1, 2, 3, 4)),
    "replication 2d wide": (P.ReplicationPad2d((4, 0, 1, 5)), (2, 3, 3)),
    "circular 2d full wrap": (P.CircularPad2d((3, 1, 2, 2)), (1, 1, 2, 3)),
    "nearest x2": (P.Upsample(scale_factor=2), (1, 2, 3, 4)),
    "nearest size 5x4->7x3": (P.Upsample(size=(7, 3)), (1, 2, 5, 4)),
    "nearest scale 1.5 (float32 index)": (P.Upsample(scale_factor=1.5), (1, 1, 5, 7)),
    "nearest 1d scale 0.6": (P.Upsample(scale_factor=0.6), (2, 2, 9)),
    "bilinear x2": (P.Upsample(scale_factor=2, mode="bilinear"), (1, 2, 3, 4)),
    "bilinear align_corners x2": (
        P.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
        (1, 2, 3, 4),
    ),
    "bilinear size down 7x6->3x4": (P.Upsample(size=(3, 4), mode="bilinear"), (1, 2, 7, 6)),
    "bilinear align size up": (
        P.Upsample(size=(5, 1), mode="bilinear", align_corners=True),
        (2, 1, 3, 4),
    ),
    "bilinear scale (1.7, 0.8)": (
        P.Upsample(scale_factor=(1.7, 0.8), mode="bilinear"),
        (1, 1, 4, 5),
    ),
    "bilinear recompute scale": (
        P.Upsample(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
        (1, 1, 4, 5),
    ),
    "linear 1d": (P.Upsample(scale_factor=2.5, mode="linear"), (2, 2, 4)),
    "linear 1d align": (P.Upsample(size=7, mode="linear", align_corners=True), (1, 2, 4)),
}


def test_padding_and_upsample_match_torch():
    failures = []
    generator = torch.Generator().manual_seed(0)
    for name, (module, shape) in CASES.items():
        x = torch.randn(shape, generator=generator, dtype=D).requires_grad_()
        report = layer_parity(module, x, name=name, fast_compile=True)
        assert len(report.leaves) == 2, name  # output and input gradient
        if not report.passed:
            failures.append(report.table())
    assert not failures, "\n".join(failures)


def test_interpolate_functional_under_jit():
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 3))
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(x), size=(6, 5), mode="bilinear", align_corners=True
    )
    with jax.enable_x64(True):
        got = jax.jit(lambda x: F.interpolate(x, size=(6, 5), mode="bilinear", align_corners=True))(
            x
        )
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: F.pad(x, (1, 2, 3)), "`pad` (=(1, 2, 3)) must have an even length"),
        (lambda x: F.pad(x, (1, 1), mode="mirror"), "`mode` (='mirror')"),
        (lambda x: F.pad(x, (4, 0), mode="reflect"), "reflect padding (=4, 0) must be smaller"),
        (lambda x: F.pad(x, (5, 0), mode="circular"), "circular padding (=5, 0) must be at most"),
        (lambda x: F.pad(x, (1, 1), mode="reflect", value=2.0), "`value` (=2.0) is only used"),
        (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), "`mode` (='bicubic')"),
        (
            lambda x: F.interpolate(x, scale_factor=2, align_corners=True),
            "`align_corners` (=True) can only",
        ),
        (lambda x: F.interpolate(x, size=3, scale_factor=2), "exactly one of `size`"),
        (lambda x: F.interpolate(x, scale_factor=2, mode="linear"), "mode 'linear' takes a 3-d"),
        (
            lambda x: F.interpolate(x, scale_factor=0.1),
            "`scale_factor` (=0.1) gives an empty output",
        ),
        (lambda x: F.interpolate(x, scale_factor=2, antialias=True), "`antialias` (=True)"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises((ValueError, TypeError)) as info:
        call(np.zeros((1, 2, 4, 4)))
    assert message in str(info.value)


def test_bad_layer_arguments_and_input_rank():
    with pytest.raises(
        ValueError, match=r"ReflectionPad2d: `padding` \(=\(1, -1, 0, 0\)\) must be non-negative"
    ):
        nn.ReflectionPad2d((1, -1, 0, 0))
    with pytest.raises(
        ValueError, match=r"ZeroPad2d: `padding` \(=\(1, 2\)\) must be an int or 4 ints"
    ):
        nn.ZeroPad2d((1, 2))
    with pytest.raises(ValueError, match="Upsample: `mode` \\(='area'\\)"):
        nn.Upsample(scale_factor=2, mode="area")
    with pytest.raises(ValueError, match=r"ReflectionPad2d: expected a 3-d .* got shape \(4, 4\)"):
        nn.ReflectionPad2d(1).apply({}, np.zeros((4, 4)))
