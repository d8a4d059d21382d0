#!/usr/bin/env python
"""Measure how far torch's and jaxgrad's batch-norm statistics lie from the exact ones.

For each shape (float64 values drawn normal, mean 0.7, standard deviation 2), one
training-mode batch norm at momentum 1, so the running buffers hold the batch's own
mean and unbiased variance, computed four ways: torch's kernel on a contiguous tensor
and on a channels-last one (``F.batch_norm``), torch's ``torch.mean`` (the float64
training rule's "BatchNorm by torch.mean" run, ``parity_checks._batch_norm_sums``) and
jaxgrad (``jaxgrad.nn.functional.batch_norm_with_stats``, jitted). Each is printed as
the largest distance over the channels from the exact statistic, in units in the last
place (ulps) of it: the mean summed by ``math.fsum``, the variance in extended
precision from the exact mean.

torch's CPU kernel sums each channel in one sequential loop, whose rounding grows with
the values a channel holds; ``torch.mean`` and XLA sum in a tree. A training step
amplifies that rounding into gradients through the layers after it (torchvision's s3d
on one 16x224x224 clip: up to 17x the float64 tier between torch and jaxgrad, and as
far between torch's kernel and torch's own ``torch.mean``), which is why the zoo's
float64 training rule measures torch against itself with its statistics summed by
``torch.mean`` too.

Exit status: 0; 2 for bad arguments.

Examples:
  python scripts/batch_norm_sums.py
  python scripts/batch_norm_sums.py --shapes 1x64x8x112x112,2x64x32x32
"""

from __future__ import annotations

import argparse
import math
import sys

SHAPES = "8x64x8x8,2x64x32x32,1x192x8x56x56,1x64x8x112x112"


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(size) for size in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape: sizes joined by 'x', e.g. 2x64x32x32"
        ) from None
    if len(shape) < 2 or min(shape) < 1 or shape[0] * math.prod(shape[2:]) < 2:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a batch-norm input is (N, C, *): at least 2 sizes, each 1 or "
            "more, and more than one value a channel"
        )
    return shape


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--shapes",
        default=SHAPES,
        metavar="NxCxHxW,...",
        help=f"comma-separated input shapes (N, C, *), (default: {SHAPES})",
    )
    args = parser.parse_args(argv)
    try:
        args.shapes = [_shape(text) for text in args.shapes.split(",")]
    except argparse.ArgumentTypeError as error:
        parser.error(f"--shapes: {error}")
    return args


def exact_statistics(x):
    """Each channel's exact mean (``math.fsum``) and unbiased variance (extended
    precision, from the exact mean) of ``x`` `(N, C, *)`: two `(C,)` float64 arrays."""
    import numpy as np

    rows = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)
    means = np.array([math.fsum(row) / row.size for row in rows])
    variances = np.array(
        [
            math.fsum(((row.astype(np.longdouble) - mean) ** 2).astype(np.float64).tolist())
            / (row.size - 1)
            for row, mean in zip(rows, means)
        ]
    )
    return means, variances


def statistics(x) -> dict:
    """``{way: (mean, unbiased variance)}``: the running buffers of one training-mode
    batch norm at momentum 1 on ``x``, each way the script's docstring names."""
    import jax
    import numpy as np
    import torch
    import torch.nn.functional as F
    from parity_checks._batch_norm_sums import batch_norm_by_mean

    from jaxgrad.nn.functional import batch_norm_with_stats

    channels = x.shape[1]
    ways = [("torch kernel", torch.from_numpy(x), F.batch_norm)]
    if x.ndim in (4, 5):  # the layouts torch has for images and clips
        layout = torch.channels_last if x.ndim == 4 else torch.channels_last_3d
        moved = torch.from_numpy(x).contiguous(memory_format=layout)
        ways.append(("torch kernel, channels-last", moved, F.batch_norm))
    ways.append(("torch.mean", torch.from_numpy(x), batch_norm_by_mean))
    found = {}
    for way, tensor, function in ways:
        mean = torch.zeros(channels, dtype=torch.float64)
        var = torch.ones(channels, dtype=torch.float64)
        function(tensor, mean, var, None, None, True, 1.0, 1e-5)
        found[way] = (mean.numpy(), var.numpy())
    with jax.enable_x64(True):
        zeros, ones = np.zeros(channels), np.ones(channels)
        step = jax.jit(lambda a: batch_norm_with_stats(a, zeros, ones, None, None, True, 1.0)[1:])
        found["jaxgrad"] = tuple(np.asarray(v) for v in step(x))
    return found


def ulps(values, exact) -> float:
    """The largest distance of ``values`` from ``exact``, in ulps of ``exact``."""
    import numpy as np

    return float(np.max(np.abs(values - exact) / np.spacing(np.abs(exact))))


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np

    rng = np.random.default_rng(0)
    header = f"{'shape':<18} {'values/channel':>14}  {'way':<28} {'mean ulps':>10} {'var ulps':>10}"
    print(header)
    print("-" * len(header))
    for shape in args.shapes:
        x = rng.standard_normal(shape) * 2 + 0.7
        mean, variance = exact_statistics(x)
        count = x.size // x.shape[1]
        label = "x".join(str(size) for size in shape)
        for way, (got_mean, got_var) in statistics(x).items():
            print(
                f"{label:<18} {count:>14,}  {way:<28} "
                f"{ulps(got_mean, mean):>10.0f} {ulps(got_var, variance):>10.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
