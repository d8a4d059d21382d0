"""Every CNN layer (convolution, pooling, padding, resampling, activation) vs torch.

Parity rows: the torch layer and its ``from_torch`` twin on the same input, output
(and max-pool indices), input gradient and parameter gradients against a random
cotangent, in float64 and float32, each at its tier (``jaxgrad_dev.layer_parity``).
Gradcheck rows: the jaxgrad layer's VJP against central differences in float64 (the
``gradcheck`` pattern: ``sum(c · layer(params, x))`` for a fixed random ``c``). Inputs
are tiny (parameters and input together within one 128-row chunk of the full
gradcheck); the options chosen are the ones the JAX ecosystem does differently
(strides with padding, ``ceil_mode``, ``count_include_pad``, non-dividing adaptive
windows, ``align_corners``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
from jaxgrad.gradcheck import gradcheck
from jaxgrad_dev.layer_parity import layer_parity
from parity_checks.harness import TORCH_DTYPES, Check

P = torch.nn

# name: (torch module factory, input shape)
LAYERS = {
    "Conv1d(s2, p1, groups 2)": (lambda: P.Conv1d(4, 2, 3, 2, 1, groups=2), (2, 4, 7)),
    "Conv2d(s2, p1, dilation 2)": (lambda: P.Conv2d(2, 3, 3, 2, 1, dilation=2), (1, 2, 5, 5)),
    "Conv2d('same', reflect)": (
        lambda: P.Conv2d(2, 2, 4, padding="same", padding_mode="reflect"),
        (1, 2, 5, 5),
    ),
    "ConvTranspose1d(s2, out_pad 1)": (lambda: P.ConvTranspose1d(2, 3, 3, 2, 1, 1), (2, 2, 4)),
    "ConvTranspose2d(s2, groups 2)": (
        lambda: P.ConvTranspose2d(4, 2, 3, 2, 1, groups=2),
        (1, 4, 3, 3),
    ),
    "MaxPool1d(3, 2, 1, ceil_mode)": (
        lambda: P.MaxPool1d(3, 2, 1, ceil_mode=True, return_indices=True),
        (2, 2, 8),
    ),
    "MaxPool2d(3, 2, 1, ceil_mode)": (
        lambda: P.MaxPool2d(3, 2, 1, ceil_mode=True, return_indices=True),
        (1, 2, 6, 6),
    ),
    "AvgPool1d(3, 2, 1, excl. pad)": (
        lambda: P.AvgPool1d(3, 2, 1, count_include_pad=False),
        (2, 2, 7),
    ),
    "AvgPool2d(3, 2, 1, ceil_mode)": (lambda: P.AvgPool2d(3, 2, 1, ceil_mode=True), (1, 2, 6, 6)),
    "AdaptiveAvgPool1d(10 -> 3)": (lambda: P.AdaptiveAvgPool1d(3), (2, 2, 10)),
    "AdaptiveAvgPool2d(7x5 -> 3x2)": (lambda: P.AdaptiveAvgPool2d((3, 2)), (1, 2, 7, 5)),
    "AdaptiveMaxPool1d(10 -> 4)": (lambda: P.AdaptiveMaxPool1d(4), (2, 2, 10)),
    "AdaptiveMaxPool2d(7x5 -> 3x2)": (
        lambda: P.AdaptiveMaxPool2d((3, 2), return_indices=True),
        (1, 2, 7, 5),
    ),
    "ZeroPad2d((1, 2, 0, 3))": (lambda: P.ZeroPad2d((1, 2, 0, 3)), (1, 2, 3, 3)),
    "ReflectionPad2d(2)": (lambda: P.ReflectionPad2d(2), (1, 2, 3, 4)),
    "ReplicationPad2d((3, 0, 1, 2))": (lambda: P.ReplicationPad2d((3, 0, 1, 2)), (1, 2, 3, 3)),
    "ZeroPad1d((2, -1))": (lambda: P.ZeroPad1d((2, -1)), (2, 3)),
    "ConstantPad1d(2, 1.5)": (lambda: P.ConstantPad1d(2, 1.5), (1, 2, 3)),
    "ConstantPad2d((1, 0, 2, 1), -1)": (lambda: P.ConstantPad2d((1, 0, 2, 1), -1.0), (2, 2, 3)),
    "ReflectionPad1d((2, 1))": (lambda: P.ReflectionPad1d((2, 1)), (1, 2, 4)),
    "ReplicationPad1d((0, 3))": (lambda: P.ReplicationPad1d((0, 3)), (2, 3)),
    "CircularPad1d((3, 1))": (lambda: P.CircularPad1d((3, 1)), (1, 2, 3)),
    "CircularPad2d((1, 2, 2, 0))": (lambda: P.CircularPad2d((1, 2, 2, 0)), (1, 1, 3, 3)),
    "Upsample(x2, nearest)": (lambda: P.Upsample(scale_factor=2), (1, 2, 3, 3)),
    "Upsample(x1.5, bilinear)": (
        lambda: P.Upsample(scale_factor=1.5, mode="bilinear"),
        (1, 2, 4, 3),
    ),
    "Upsample(5x4, bilinear, align)": (
        lambda: P.Upsample(size=(5, 4), mode="bilinear", align_corners=True),
        (1, 2, 3, 3),
    ),
    "ReLU6": (P.ReLU6, (3, 8)),
    "SiLU": (P.SiLU, (3, 8)),
    "Hardswish": (P.Hardswish, (3, 8)),
    "Hardsigmoid": (P.Hardsigmoid, (3, 8)),
    "ELU(alpha 0.5)": (lambda: P.ELU(0.5), (3, 8)),
    "Softplus(beta 2, threshold 3)": (lambda: P.Softplus(2.0, 3.0), (3, 8)),
    "Mish": (P.Mish, (3, 8)),
    "Softmax(dim 1)": (lambda: P.Softmax(dim=1), (3, 8)),
    "LogSoftmax(dim 0)": (lambda: P.LogSoftmax(dim=0), (3, 8)),
}


def _input(shape, dtype: str, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # scaled so the activations' kinks and thresholds (±3, 6, beta·x = 3) are crossed
    x = 4 * torch.randn(shape, generator=generator, dtype=torch.float64)
    return x.to(TORCH_DTYPES[dtype]).requires_grad_()


def layer_row(name: str, dtype: str):
    factory, shape = LAYERS[name]
    torch.manual_seed(0)
    module = factory().to(TORCH_DTYPES[dtype])
    if dtype == "float32" and getattr(module, "return_indices", False):
        # indices are int64 in torch; JAX's integers are int32 unless x64 is on, so
        # indices are compared in the float64 rows (x64 on) only
        module.return_indices = False
    return layer_parity(module, _input(shape, dtype), name=f"{name} {dtype}")


def layer_gradcheck(name: str):
    """Central differences of the jaxgrad twin, float64, parameters and input."""
    factory, shape = LAYERS[name]
    torch.manual_seed(0)
    with jax.enable_x64(True):
        model, params = jaxgrad.nn.from_torch(factory().double())
        x = _input(shape, "float64").detach().numpy()
        rng = np.random.default_rng(1)
        outputs = jax.tree.leaves(jax.eval_shape(model.apply, params, x))  # nothing compiled
        cotangent = rng.standard_normal(outputs[0].shape)

        def objective(params, x):
            return jnp.sum(cotangent * jax.tree.leaves(model.apply(params, x))[0])

        return gradcheck(objective, params, x, name=f"gradcheck {name}").parity


CHECKS = [
    Check(name=f"nn.{name}", dtype=dtype, area="cnn", run=functools.partial(layer_row, name, dtype))
    for name in LAYERS
    for dtype in ("float64", "float32")
] + [
    Check(
        name=f"gradcheck nn.{name}",
        dtype="float64",
        area="gradcheck",
        run=functools.partial(layer_gradcheck, name),
    )
    for name in LAYERS
]
