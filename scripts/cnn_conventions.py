#!/usr/bin/env python
"""CNN conventions, measured: torch vs the JAX-ecosystem default vs jaxgrad.

Each row computes one thing three ways on the same float64 input: with torch, with
the call a port would reach for in JAX/flax (``lax`` ``'SAME'`` padding as flax
``nn.Conv``'s default, ``flax.linen.max_pool``/``avg_pool``, ``jax.image.resize``,
``jax.nn`` activations and their autodiff gradients), and with jaxgrad's twin. It
prints the largest absolute (and relative) difference of each from torch, or the
shapes when they differ.

Examples:
  python scripts/cnn_conventions.py
"""

from __future__ import annotations

import argparse
import sys


def rows():
    """``[(convention, torch, jax_default, jaxgrad)]``: three arrays per row (thunks)."""
    import flax.linen as fl
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    import torch.nn.functional as TF
    from jax import lax

    from jaxgrad.nn import functional as F

    rng = np.random.default_rng(0)
    image = rng.standard_normal((1, 1, 8, 8))
    line = rng.standard_normal((1, 1, 10))
    weight = rng.standard_normal((1, 1, 3, 3))
    t = torch.from_numpy

    def nhwc(fn, x):  # flax pools take channels last
        return jnp.transpose(fn(jnp.transpose(x, (0, 2, 3, 1))), (0, 3, 1, 2))

    def grad_at(fn, points):
        return jax.vmap(jax.grad(fn))(jnp.asarray(points))

    def torch_grad_at(fn, points):
        x = torch.tensor(points, dtype=torch.float64, requires_grad=True)
        fn(x).sum().backward()
        return x.grad

    resize = jax.image.resize
    return [
        (
            "conv k3 s2 padding=1 vs 'SAME' (flax default)",
            lambda: TF.conv2d(t(image), t(weight), stride=2, padding=1),
            lambda: lax.conv_general_dilated(
                image, weight, (2, 2), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
            ),
            lambda: F.conv2d(image, weight, stride=2, padding=1),
        ),
        (
            "max pool 2 ceil_mode=True (flax: none)",
            lambda: TF.max_pool2d(t(image[..., :5, :5]), 2, ceil_mode=True),
            lambda: nhwc(lambda x: fl.max_pool(x, (2, 2), (2, 2)), image[..., :5, :5]),
            lambda: F.max_pool2d(image[..., :5, :5], 2, ceil_mode=True),
        ),
        (
            "avg pool 3 s2 p1 ceil_mode=True",
            lambda: TF.avg_pool2d(t(image[..., :6, :6]), 3, 2, 1, ceil_mode=True),
            lambda: nhwc(
                lambda x: fl.avg_pool(x, (3, 3), (2, 2), ((1, 1), (1, 1))), image[..., :6, :6]
            ),
            lambda: F.avg_pool2d(image[..., :6, :6], 3, 2, 1, ceil_mode=True),
        ),
        (
            "adaptive avg pool 10 -> 3 vs avg_pool(3, 3)",
            lambda: TF.adaptive_avg_pool1d(t(line), 3),
            lambda: jnp.transpose(
                fl.avg_pool(jnp.transpose(line, (0, 2, 1)), (3,), (3,)), (0, 2, 1)
            ),
            lambda: F.adaptive_avg_pool1d(line, 3),
        ),
        (
            "bilinear x2 up vs jax.image.resize",
            lambda: TF.interpolate(t(image), scale_factor=2, mode="bilinear"),
            lambda: resize(image, (1, 1, 16, 16), "bilinear"),
            lambda: F.interpolate(image, scale_factor=2, mode="bilinear"),
        ),
        (
            "bilinear 8 -> 3 down (resize antialiases)",
            lambda: TF.interpolate(t(image), size=(3, 3), mode="bilinear"),
            lambda: resize(image, (1, 1, 3, 3), "bilinear"),
            lambda: F.interpolate(image, size=(3, 3), mode="bilinear"),
        ),
        (
            "bilinear align_corners=True x2",
            lambda: TF.interpolate(t(image), scale_factor=2, mode="bilinear", align_corners=True),
            lambda: resize(image, (1, 1, 16, 16), "bilinear"),
            lambda: F.interpolate(image, scale_factor=2, mode="bilinear", align_corners=True),
        ),
        (
            "nearest 8 -> 5",
            lambda: TF.interpolate(t(image), size=(5, 5)),
            lambda: resize(image, (1, 1, 5, 5), "nearest"),
            lambda: F.interpolate(image, size=(5, 5)),
        ),
        (
            "relu6 grad at 0, 3, 6 (jax.nn.relu6)",
            lambda: torch_grad_at(TF.relu6, [0.0, 3.0, 6.0]),
            lambda: grad_at(jax.nn.relu6, [0.0, 3.0, 6.0]),
            lambda: grad_at(F.relu6, [0.0, 3.0, 6.0]),
        ),
        (
            "hardswish grad at -3, 0, 3 (jax.nn.hard_swish)",
            lambda: torch_grad_at(TF.hardswish, [-3.0, 0.0, 3.0]),
            lambda: grad_at(jax.nn.hard_swish, [-3.0, 0.0, 3.0]),
            lambda: grad_at(F.hardswish, [-3.0, 0.0, 3.0]),
        ),
        (
            "hardsigmoid grad at 1 (torch: float32 1/6)",
            lambda: torch_grad_at(TF.hardsigmoid, [1.0]),
            lambda: grad_at(jax.nn.hard_sigmoid, [1.0]),
            lambda: grad_at(F.hardsigmoid, [1.0]),
        ),
        (
            "elu grad at -30 (autodiff of expm1)",
            lambda: torch_grad_at(TF.elu, [-30.0]),
            lambda: grad_at(jax.nn.elu, [-30.0]),
            lambda: grad_at(F.elu, [-30.0]),
        ),
        (
            "softmax of a 3-d input, no dim (torch: dim 0)",
            lambda: torch.nn.Softmax()(t(image[0])),
            lambda: jax.nn.softmax(image[0]),
            lambda: F.softmax(image[0]),
        ),
    ]


def _difference(reference, value) -> str:
    import numpy as np

    reference, value = np.asarray(reference), np.asarray(value)
    if reference.shape != value.shape:
        return f"shape {value.shape[-2:]} vs {reference.shape[-2:]}"
    error = np.abs(reference - value)
    relative = np.max(error / np.maximum(np.abs(reference), np.finfo(np.float64).tiny))
    return f"{np.max(error):.1e} (rel {relative:.0e})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(argv)

    import warnings

    import jax
    import numpy as np

    header = f"{'convention':<48} {'JAX default vs torch':>22} {'jaxgrad vs torch':>20}"
    print(header)
    print("-" * len(header))
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's and jaxgrad's implicit-dim warnings
        for name, torch_fn, jax_fn, jaxgrad_fn in rows():
            reference = np.asarray(torch_fn().detach())
            print(
                f"{name:<48} {_difference(reference, jax_fn()):>22} "
                f"{_difference(reference, jaxgrad_fn()):>20}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
