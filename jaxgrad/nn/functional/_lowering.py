"""How a convolution is lowered: XLA's convolution op, or patches and one matrix product.

Both compute torch's ``conv{1,2,3}d`` (input `(N, C, *spatial)`, weight
`(O, C / groups, *kernel)`, explicit pads, strides, dilations) and differentiate with
``jax.grad``, ``jax.vjp`` and ``jax.jvp`` alike; they differ in what XLA receives:

- ``"xla"``: one ``lax.conv_general_dilated`` in torch's layout. XLA:CPU runs it
  through Eigen's convolution only after its ``ConvCanonicalization`` pass has
  transposed it to NHWC / HWIO, and that pass visits the entry computation only
  (xla/service/cpu/conv_canonicalization.cc): inside a ``lax.scan`` or
  ``while_loop`` body, and for the gradients' convolutions, whose dimension numbers
  JAX permutes, the convolution stays as it is and is emitted as an elementwise loop
  nest. The ResNet of ``torchref.models`` trained 4–5× slower per step as one
  scan-fused epoch than one jitted call per step;
- ``"patches"``: the input with its batch and channel axes swapped (`(C, N,
  *spatial)`) and padded, the ``prod(kernel)`` shifted strided slices stacked into a
  patch matrix `(C·prod(kernel), N·prod(out))`, one ``dot_general`` of the weight as
  `(O, C·prod(kernel))` with it (a batched one over the groups), and the `(O, N,
  *out)` product's first two axes swapped back. Its gradients are matrix products,
  pads and slices: no convolution anywhere, in or out of a loop. It holds the patch
  matrix (``prod(kernel)`` times the input) for the backward pass. Stacking the
  slices of `(C, N, *spatial)` copies whole `N·prod(out)` runs, and the only
  transposes move the input and the output once each; the earlier row layout
  `(N·prod(out), C·prod(kernel))` needed the whole patch matrix transposed (XLA:CPU's
  transposes are slow): the converted resnet18's and mobilenet_v3_small's training
  steps ran 4–5 % faster (batch 16 at 64×64) and the digits ResNet's step with
  patches 6.3 -> 5.0 ms (batch 128; AVX-512 + AMX Xeon, 2 cores);
- ``"auto"`` (the default): on the CPU backend, for ungrouped convolutions whose patch
  matrix has at most ``PATCH_LIMIT`` elements, ``"patches"`` inside jaxgrad's own
  rolled loops (the scan-fused epoch, ``unroll=K``, gradient accumulation: code
  inside ``in_loop()``), for 1×1 kernels (a strided slice and a matrix product), for
  ``WIDE`` or more output channels, and for patch matrices of at least ``PATCH_MIN``
  elements; ``"xla"`` everywhere else. Measured forward and backward on an AMD EPYC
  (AVX2, 2 cores): resnet18's convolutions at batch 16 ran 1.1–2.9× faster as
  patches (its 1×1 stride-2 downsample 11.6×; the whole converted resnet18 trained
  at 64×64 3.2–4× faster per step), while the digit CNNs' small ones (batch 128,
  8×8 images, 1–16 channels) ran 0.65–1.5× as fast: below both thresholds XLA's
  convolution is kept. Grouped convolutions are patches on the CPU in and out of
  loops. Depthwise ones (``groups`` = channels: one input channel per group,
  MobileNet's and EfficientNet's): on an Intel Xeon (AVX-512, AMX, 2 cores)
  mobilenet_v3_small's ran 7–30× faster forward and backward than XLA's grouped
  convolution, and the converted model's training step 3.4× faster. Others
  (ResNeXt's 32 groups, RegNet's group widths): the gradient of a 3×3 convolution at
  batch 8 (128 channels at 16×16, 256 at 8×8, 512 at 4×4 in 32 groups; 48 in 6, 224 in
  28, 64 in 2) ran 17–165× faster as patches in float32 and 1.7–16× in float64 (AMD
  EPYC, AVX2, 2 cores): XLA:CPU emits the grouped convolution's gradients as loop
  nests (torchvision's resnext50_32x4d passed the garden's 300 s limit with them).
  ``PATCH_LIMIT`` counts the patch matrix of every group (rules revision 5; revision
  4 counted one group's, so a depthwise convolution's could be channels times over).

The mode is read when a function is traced: ``with conv_lowering("xla"): ...``
around the first call of a jitted function (a function traced earlier keeps the
lowering it was traced with), or ``$JAXGRAD_CONV`` for the process's default. Both
lowerings sum the same products and differ by summation order only: within the float64
tier in float64; in float32 a long sum (a weight gradient over a large batch and image)
can leave the float32 tier for either, as it does for torch's own, which
``jaxgrad.parity.compare(..., reference64=)`` judges.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os

import jax
import jax.numpy as jnp
from jax import lax

MODES = ("auto", "xla", "patches")
PATCH_LIMIT = 1 << 28  # at most this many elements in a patch matrix (1 GiB in float32)
PATCH_MIN = 1 << 20  # outside loops, patches from this many elements (4 MiB in float32)
WIDE = 32  # outside loops, patches from this many output channels
RULES = (
    5  # revision of the "auto" rules and the patch layout: part of the trainer's strategy-cache key
)
_override: list[str] = []
_loops: list[bool] = []


def _check_mode(mode, where: str) -> str:
    if mode not in MODES:
        raise ValueError(f"{where} (={mode!r}) must be one of {', '.join(MODES)}.")
    return mode


def current_mode() -> str:
    """The innermost ``conv_lowering`` mode, else ``$JAXGRAD_CONV``, else ``"auto"``."""
    if _override:
        return _override[-1]
    return _check_mode(os.environ.get("JAXGRAD_CONV", "auto"), "$JAXGRAD_CONV")


@contextlib.contextmanager
def conv_lowering(mode: str):
    """Compile the convolutions traced inside the block as ``mode``.

    - ``"xla"``: one XLA convolution (``lax.conv_general_dilated`` in torch's layout);
    - ``"patches"``: shifted strided slices stacked into a patch matrix and one matrix
      product (grouped: one per group); no convolution op at all. XLA:CPU runs a
      convolution inside a loop body (a ``lax.scan``) without its fast path, several
      times slower; patches do not depend on that. They hold ``prod(kernel)`` times
      the input for the backward pass;
    - ``"auto"`` (the default, or ``$JAXGRAD_CONV``), on the CPU backend and for
      patch matrices up to 2²⁸ elements: patches for grouped convolutions (depthwise
      as MobileNet's, or ResNeXt's 32 groups: XLA:CPU's grouped convolution was 7–165×
      slower forward and backward), and for ungrouped convolutions inside jaxgrad's
      own rolled loops (the scan-fused epoch, ``unroll=K``, gradient accumulation),
      for 1×1 kernels, for 32 or more output channels and for patch matrices of 2²⁰
      or more elements; XLA's convolution everywhere else (for the few-channel
      convolutions of small images it was about as fast).

    Both compute torch's convolution; float32 results differ by summation order only.
    The mode applies when a function is traced: wrap the first call of a jitted
    function (one traced before keeps its lowering)::

        with jaxgrad.nn.conv_lowering("xla"):
            params, opt_state, metrics = epoch(params, opt_state, batches)
    """
    _override.append(_check_mode(mode, "conv_lowering: `mode`"))
    try:
        yield
    finally:
        _override.pop()


@contextlib.contextmanager
def in_loop(loop: bool = True):
    """Mark the convolutions traced inside the block as inside a rolled loop body
    (``loop=False``: as not, e.g. a fully unrolled scan); ``"auto"`` reads it."""
    _loops.append(bool(loop))
    try:
        yield
    finally:
        _loops.pop()


def output_lengths(spatial, kernel, stride, pads, dilation) -> tuple:
    return tuple(
        (length + lo + hi - d * (k - 1) - 1) // s + 1
        for length, k, s, (lo, hi), d in zip(spatial, kernel, stride, pads, dilation)
    )


def choose(x_shape, w_shape, stride, pads, dilation, groups) -> str:
    """The lowering ``"auto"`` resolves to for these shapes (or the forced mode)."""
    mode = current_mode()
    if mode != "auto":
        return mode
    if jax.default_backend() != "cpu":
        return "xla"
    if not all(isinstance(size, int) for size in x_shape):
        return "xla"  # symbolic sizes (a jax.export artifact): XLA's convolution takes them
    out = output_lengths(x_shape[2:], w_shape[2:], stride, pads, dilation)
    # the patch matrix of every group: (C·prod(kernel), N·prod(out)), C = groups · C/groups
    elements = x_shape[0] * math.prod(out) * math.prod(w_shape[1:]) * groups
    if elements > PATCH_LIMIT:
        return "xla"
    if groups != 1:  # grouped (depthwise or ResNeXt's): patches, in and out of loops
        return "patches"
    in_loop = bool(_loops and _loops[-1])
    one_by_one = math.prod(w_shape[2:]) == 1
    wide = w_shape[0] >= WIDE or elements >= PATCH_MIN
    return "patches" if in_loop or one_by_one or wide else "xla"


def conv_patches(x, weight, stride, pads, dilation, groups: int = 1, precision=None):
    """``x`` `(N, C, *spatial)` convolved with ``weight`` `(O, C / groups, *kernel)`
    (no kernel flip, as torch), ``pads`` one ``(low, high)`` pair ≥ 0 per spatial dim:
    `(N, O, *out)`, as patches and one matrix product."""
    batch, channels = x.shape[:2]
    kernel = weight.shape[2:]
    # (C, N, *spatial): each shifted slice is then C runs of N·prod(out) values
    padded = jnp.pad(jnp.swapaxes(x, 0, 1), [(0, 0), (0, 0)] + [tuple(p) for p in pads])
    out = output_lengths(x.shape[2:], kernel, stride, pads, dilation)
    shifts = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        start = [0, 0] + [o * d for o, d in zip(offset, dilation)]
        limit = [channels, batch] + [
            s0 + (m - 1) * s + 1 for s0, m, s in zip(start[2:], out, stride)
        ]
        shifts.append(lax.slice(padded, start, limit, [1, 1] + list(stride)))
    # (C, K, N, *out): rows of the patch matrix channel-major, as the weight's (C, *kernel)
    cols = jnp.stack(shifts, axis=1)
    rows = batch * math.prod(out)
    width = channels // groups * math.prod(kernel)
    if groups == 1:  # (O, C·K) @ (C·K, N·out)
        y = lax.dot_general(
            weight.reshape(weight.shape[0], width),
            cols.reshape(width, rows),
            (((1,), (0,)), ((), ())),
            precision=precision,
        )
    else:  # per group g: (O/G, C/G·K) @ (C/G·K, N·out); channel g·O/G + o
        y = lax.dot_general(
            weight.reshape(groups, weight.shape[0] // groups, width),
            cols.reshape(groups, width, rows),
            (((2,), (1,)), ((0,), (0,))),
            precision=precision,
        )
    return jnp.swapaxes(y.reshape((weight.shape[0], batch) + out), 0, 1)


def convolve(x, weight, stride, pads, dilation, groups: int = 1, precision=None):
    """torch's convolution (`(N, C, *spatial)`, `(O, C / groups, *kernel)`, pads ≥ 0)
    lowered as ``choose`` says."""
    stride, dilation = tuple(stride), tuple(dilation)
    pads = [tuple(p) for p in pads]
    if choose(x.shape, weight.shape, stride, pads, dilation, groups) == "patches":
        return conv_patches(x, weight, stride, pads, dilation, groups, precision)
    # lax's default dimension numbers are torch's layouts (N C *spatial, O I *kernel)
    return lax.conv_general_dilated(
        x,
        weight,
        stride,
        pads,
        rhs_dilation=dilation,
        feature_group_count=groups,
        precision=precision,
    )
