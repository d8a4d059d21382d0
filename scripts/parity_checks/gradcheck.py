"""Gradient checks (central differences, float64) of every jaxgrad.nn layer and loss.

Each row is ``jaxgrad.gradcheck`` of ``sum(c · layer(params, x))`` for a fixed random
cotangent ``c`` (so the whole VJP is checked, not only its sum), or of a loss, at
the finite-difference tier (eps 1e-6, atol 1e-8, rtol 1e-6): the report's numbers
are numeric vs analytic gradients.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxgrad.losses as L
import jaxgrad.nn as jnn
from jaxgrad.gradcheck import GradcheckReport, gradcheck
from jaxgrad.manual import scaled_backward
from parity_checks.harness import Check


def layer_cases() -> dict:
    """``{name: (layer, input shape)}``: every ``jaxgrad.nn`` layer, in float64; a list
    of shapes for a layer of several inputs (``input_shapes``)."""
    f64 = "float64"
    return {
        "Linear": (jnn.Linear(3, 2, dtype=f64), (4, 3)),
        "ReLU": (jnn.ReLU(), (3, 4)),
        "LeakyReLU": (jnn.LeakyReLU(0.1), (3, 4)),
        "Sigmoid": (jnn.Sigmoid(), (3, 4)),
        "Tanh": (jnn.Tanh(), (3, 4)),
        "GELU": (jnn.GELU(), (3, 4)),
        "GELU(tanh)": (jnn.GELU(approximate="tanh"), (3, 4)),
        # the rest of torch.nn's activations (kinks at ±1, ±0.5, 0.1: standard normal
        # inputs sit ≥ 1e-6 from them, so central differences see one branch)
        "CELU": (jnn.CELU(alpha=1.5), (3, 4)),
        "SELU": (jnn.SELU(), (3, 4)),
        "GLU": (jnn.GLU(dim=-1), (3, 4)),
        "Hardtanh": (jnn.Hardtanh(), (3, 4)),
        "Threshold": (jnn.Threshold(0.1, 20.0), (3, 4)),
        "Hardshrink": (jnn.Hardshrink(), (3, 4)),
        "Softshrink": (jnn.Softshrink(), (3, 4)),
        "LogSigmoid": (jnn.LogSigmoid(), (3, 4)),
        "Softsign": (jnn.Softsign(), (3, 4)),
        "Tanhshrink": (jnn.Tanhshrink(), (3, 4)),
        "Softmin": (jnn.Softmin(dim=1), (3, 4)),
        "Softmax2d": (jnn.Softmax2d(), (2, 3, 2, 2)),
        "PReLU(3)": (jnn.PReLU(3, dtype=f64), (2, 3, 4)),
        "Identity": (jnn.Identity(), (3, 4)),
        "Flatten": (jnn.Flatten(), (2, 3, 2)),
        "Sequential": (jnn.mlp([3, 4, 2], "tanh", dtype=f64), (5, 3)),
        # the 3-d family, tiny (every element of a 3-d conv is a vmapped pair of
        # forwards); standard normal inputs have no ties within a max-pool window
        "Conv3d(s2, p1)": (jnn.Conv3d(2, 2, 2, stride=2, padding=1, dtype=f64), (1, 2, 3, 3, 3)),
        "ConvTranspose3d(s2, p1, out_pad 1, groups 2)": (
            jnn.ConvTranspose3d(
                2, 2, 2, stride=2, padding=1, output_padding=1, groups=2, dtype=f64
            ),
            (1, 2, 2, 2, 2),
        ),
        "MaxPool3d(2, 2, 1, ceil_mode)": (jnn.MaxPool3d(2, 2, 1, ceil_mode=True), (1, 2, 3, 4, 3)),
        "AvgPool3d(3, 2, 1, ceil_mode, excl. pad)": (
            jnn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
            (1, 1, 4, 3, 3),
        ),
        "AvgPool3d(divisor 3)": (jnn.AvgPool3d((1, 2, 2), divisor_override=3), (2, 2, 2, 2)),
        "AdaptiveAvgPool3d(3x4x5 -> 2x3x2)": (jnn.AdaptiveAvgPool3d((2, 3, 2)), (1, 1, 3, 4, 5)),
        "AdaptiveMaxPool3d(3x4x5 -> 2x2x3)": (jnn.AdaptiveMaxPool3d((2, 2, 3)), (1, 1, 3, 4, 5)),
        "ZeroPad3d((1, -1, 0, 1, 2, 0))": (jnn.ZeroPad3d((1, -1, 0, 1, 2, 0)), (1, 1, 2, 2, 3)),
        "ConstantPad3d(1, 0.5)": (jnn.ConstantPad3d(1, 0.5), (1, 2, 2, 2)),
        "ReflectionPad3d((1, 1, 0, 2, 1, 0))": (
            jnn.ReflectionPad3d((1, 1, 0, 2, 1, 0)),
            (1, 1, 2, 3, 2),
        ),
        "ReplicationPad3d((2, 0, 1, 1, 0, 1))": (
            jnn.ReplicationPad3d((2, 0, 1, 1, 0, 1)),
            (1, 1, 2, 2, 2),
        ),
        "CircularPad3d((1, 0, 0, 2, 1, 1))": (
            jnn.CircularPad3d((1, 0, 0, 2, 1, 1)),
            (1, 1, 2, 2, 2),
        ),
        # power averages with even p (an odd or fractional p is NaN on a negative window
        # sum, torch's as well), ceil_mode's partial windows, p = inf (the max of |x|:
        # inputs sit >= 0.1 from 0 and without ties)
        "LPPool1d(4, 3, 2)": (jnn.LPPool1d(4, 3, 2), (2, 2, 7)),
        "LPPool1d(inf, 3, 2)": (jnn.LPPool1d(float("inf"), 3, 2), (2, 2, 7)),
        "LPPool2d(2, 2, ceil_mode)": (jnn.LPPool2d(2, 2, ceil_mode=True), (1, 2, 5, 5)),
        "LPPool3d(2.0, 2)": (jnn.LPPool3d(2.0, 2), (1, 2, 2, 4, 2)),
        # alpha large enough that the neighbours' term is a real part of the gradient
        "LocalResponseNorm(3, alpha 0.5, k 2)": (
            jnn.LocalResponseNorm(3, 0.5, 0.75, 2.0),
            (2, 4, 2, 3),
        ),
        "LocalResponseNorm(size 6 > C)": (jnn.LocalResponseNorm(6, 0.3), (2, 4, 3)),
        # fixed windows: torch's _random_samples buffer, so the function is deterministic
        "FractionalMaxPool2d(2, output 3)": (
            jnn.FractionalMaxPool2d(
                2, output_size=3, _random_samples=np.array([[[0.2, 0.7], [0.55, 0.35]]])
            ),
            (1, 2, 5, 5),
        ),
        "FractionalMaxPool3d(2, ratio 0.5)": (
            jnn.FractionalMaxPool3d(
                2, output_ratio=0.5, _random_samples=np.array([[[0.3, 0.8, 0.45]]])
            ),
            (1, 1, 5, 4, 4),
        ),
        # two inputs: a list of shapes
        "Bilinear": (jnn.Bilinear(3, 2, 4, dtype=f64), [(5, 3), (5, 2)]),
    }


def input_shapes(shape) -> list[tuple]:
    """The shapes of a ``layer_cases`` entry's inputs: one shape, or a list of them."""
    return list(shape) if isinstance(shape, list) else [shape]


def loss_cases(rng: np.random.Generator) -> dict:
    """``{name: (loss, inputs, kwargs)}``: every ``jaxgrad.losses`` loss and option."""
    logits = rng.standard_normal((4, 3))
    probs = rng.uniform(0.05, 0.95, (4, 3))
    targets = rng.uniform(size=(4, 3))
    classes = rng.integers(0, 3, (4,))
    soft = rng.dirichlet(np.ones(3), size=4)
    signs = np.array([1, -1, 1, -1])  # cosine / ranking targets: ±1, not differentiated
    return {
        "mse_loss": (L.mse_loss, (logits, targets), {}),
        "mse_loss sum": (L.mse_loss, (logits, targets), dict(reduction="sum")),
        "cross_entropy": (L.cross_entropy, (logits, classes), {}),
        "cross_entropy probs": (L.cross_entropy, (logits, soft), {}),
        "cross_entropy smoothing": (L.cross_entropy, (logits, classes), dict(label_smoothing=0.1)),
        "binary_cross_entropy": (L.binary_cross_entropy, (probs, targets), {}),
        "bce_with_logits": (L.binary_cross_entropy_with_logits, (logits, targets), {}),
        "bce_with_logits pos_weight": (
            L.binary_cross_entropy_with_logits,
            (logits, targets),
            dict(pos_weight=np.array([0.5, 2.0, 3.0]), reduction="sum"),
        ),
        "nll_loss": (L.nll_loss, (np.log(soft), classes), {}),
        "l1_loss": (L.l1_loss, (logits, targets), {}),
        "smooth_l1_loss": (L.smooth_l1_loss, (logits, targets), dict(beta=0.5)),
        "huber_loss": (L.huber_loss, (logits, targets), dict(delta=0.5)),
        "kl_div batchmean": (L.kl_div, (np.log(soft), probs), dict(reduction="batchmean")),
        "cosine_embedding_loss": (
            L.cosine_embedding_loss,
            (logits, probs, signs),
            dict(margin=-0.5),
        ),
        "margin_ranking_loss": (
            L.margin_ranking_loss,
            (logits[:, 0], probs[:, 0], signs),
            dict(margin=0.1),
        ),
        "poisson_nll_loss": (L.poisson_nll_loss, (logits, targets * 3), {}),
        "gaussian_nll_loss": (L.gaussian_nll_loss, (logits, targets, probs), {}),
        # margin losses: standard normal scores sit away from the kinks
        "soft_margin_loss": (L.soft_margin_loss, (logits, np.sign(targets - 0.5)), {}),
        "multilabel_soft_margin_loss": (
            L.multilabel_soft_margin_loss,
            (logits, (targets > 0.5) * 1.0),
            {},
        ),
        "hinge_embedding_loss": (
            L.hinge_embedding_loss,
            (logits, np.sign(targets - 0.5)),
            dict(margin=0.3),
        ),
        "multi_margin_loss p=2": (
            L.multi_margin_loss,
            (logits * 2, classes),
            dict(p=2, weight=np.array([0.5, 2.0, 3.0])),
        ),
        "multilabel_margin_loss": (
            L.multilabel_margin_loss,
            (logits * 2, np.array([[0, -1, 0]] * 4)),
            {},
        ),
        "linear_cross_entropy": (
            L.linear_cross_entropy,
            (logits, rng.standard_normal((5, 3)), rng.integers(0, 5, (4,))),
            {},
        ),
        # torch's (and jaxgrad's) ctc gradient is the logits' through a log_softmax
        # (see jaxgrad/losses/_ctc.py): checked there, against central differences
        "ctc_loss": (
            _ctc_after_log_softmax,
            (rng.standard_normal((6, 2, 4)), np.array([[1, 2, 2], [3, 1, 0]])),
            {},
        ),
    }


@functools.wraps(L.ctc_loss)
def _ctc_after_log_softmax(logits, targets):
    return L.ctc_loss(jax.nn.log_softmax(logits, axis=2), targets, (6, 5), (3, 2))


def _planted(fn, backward_scale: float):
    """``fn``, or ``fn`` with its backward scaled (a planted bug the check must catch)."""
    return fn if backward_scale == 1.0 else scaled_backward(fn, backward_scale)


def layer_gradcheck(
    name: str, rng: np.random.Generator, backward_scale: float = 1.0
) -> GradcheckReport:
    layer, shape = layer_cases()[name]
    with jax.enable_x64(True):
        # random parameters of the right shapes; init's distributions are not under test
        # (numpy, and the output's shape from eval_shape: nothing compiled before gradcheck)
        params = {k: rng.standard_normal(s.shape) for k, s in layer.param_shapes().items()}
        xs = [rng.standard_normal(s) for s in input_shapes(shape)]
        xs = [
            np.where(np.abs(x) < 0.1, x + 0.2 * np.sign(x), x)  # away from ReLU's kink
            for x in xs
        ]
        # fixed buffers (FractionalMaxPool's _random_samples), held constant
        buffers = layer.init_buffers() or None

        def forward(params, *xs):
            if buffers is None:
                return layer.apply(params, *xs)
            return layer.apply(params, *xs, buffers=buffers)[0]

        cotangent = rng.standard_normal(jax.eval_shape(forward, params, *xs).shape)
        return gradcheck(
            _planted(lambda params, *xs: jnp.sum(cotangent * forward(params, *xs)), backward_scale),
            params,
            *xs,
            name=f"gradcheck {name}",
        )


def loss_gradcheck(
    name: str, rng: np.random.Generator, backward_scale: float = 1.0
) -> GradcheckReport:
    loss, inputs, kwargs = loss_cases(rng)[name]
    if backward_scale == 1.0:
        return gradcheck(lambda *a: loss(*a, **kwargs), *inputs, name=f"gradcheck {name}")
    # the planted backward scales floating gradients; integer targets are closed over
    floating = [x.dtype.kind == "f" for x in inputs]

    def with_fixed_targets(*float_inputs):
        given = iter(float_inputs)
        return loss(*(next(given) if f else x for f, x in zip(floating, inputs)), **kwargs)

    return gradcheck(
        _planted(with_fixed_targets, backward_scale),
        *(x for f, x in zip(floating, inputs) if f),
        name=f"gradcheck {name}",
    )


def _row(check, name):
    return check(name, np.random.default_rng(0)).parity


CHECKS = [
    Check(
        name=f"gradcheck nn.{name}",
        dtype="float64",
        area="gradcheck",
        run=functools.partial(_row, layer_gradcheck, name),
    )
    for name in layer_cases()
] + [
    Check(
        name=f"gradcheck loss {name}",
        dtype="float64",
        area="gradcheck",
        run=functools.partial(_row, loss_gradcheck, name),
    )
    for name in loss_cases(np.random.default_rng(0))
]
