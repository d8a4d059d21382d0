"""Convolutions lowered as patches and one matrix product, against torch.

``jaxgrad.nn.conv_lowering`` chooses how a convolution is compiled: XLA's convolution
op, or shifted strided slices stacked into a patch matrix and one ``dot_general``
(what jaxgrad's own loops use on the CPU, where XLA runs a convolution inside a loop
body without its fast path). Both must be torch's convolution: the patches lowering
is held to ``torch.nn.functional.conv{1,2,3}d`` in float64 (output and both
gradients), to XLA's lowering under ``jax.jvp``, and the ``"auto"`` rule is checked on
what a traced epoch contains.
"""

from __future__ import annotations

import itertools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import jaxgrad
from jaxgrad import losses, nn
from jaxgrad.nn.functional import _lowering
from jaxgrad.train.stateful import make_stateful_train_epoch, make_stateful_train_step

TORCH_CONV = {
    1: torch.nn.functional.conv1d,
    2: torch.nn.functional.conv2d,
    3: torch.nn.functional.conv3d,
}
# (spatial dims, groups, stride, dilation, padding): the default run takes, for each
# rank and groups, two of the eight stride/dilation/padding combinations, between them
# varying all three; the exhaustive run (CI) takes all 48
# (groups 4 is depthwise: one input channel per group, two output channels each)
_DEFAULT = {1: {(1, 1, 0), (2, 2, 1)}, 2: {(2, 1, 1), (1, 2, 0)}, 4: {(1, 1, 1), (2, 2, 0)}}
CASES = [
    pytest.param(
        n,
        groups,
        stride,
        dilation,
        padding,
        marks=() if (stride, dilation, padding) in _DEFAULT[groups] else pytest.mark.exhaustive,
    )
    for n, groups, stride, dilation, padding in itertools.product(
        (1, 2, 3), (1, 2, 4), (1, 2), (1, 2), (0, 1)
    )
]


def _conv_case(n, groups, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4) + (7, 6, 5)[:n])
    w = rng.standard_normal((8 if groups == 4 else 6, 4 // groups) + (3, 2, 2)[:n])
    return x, w


@pytest.mark.parametrize("n, groups, stride, dilation, padding", CASES)
def test_patches_match_torch_output_and_gradients(n, groups, stride, dilation, padding):
    x, w = _conv_case(n, groups)
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    expected = TORCH_CONV[n](
        tx, tw, stride=stride, padding=padding, dilation=dilation, groups=groups
    )
    cotangent = np.random.default_rng(1).standard_normal(tuple(expected.shape))
    expected.backward(torch.from_numpy(cotangent))

    def conv(x, w):
        return _lowering.conv_patches(
            x, w, (stride,) * n, [(padding, padding)] * n, (dilation,) * n, groups
        )

    with jax.enable_x64(True):
        got, vjp = jax.vjp(conv, x, w)
        dx, dw = vjp(cotangent)
    jaxgrad.assert_parity(expected.detach(), got)
    jaxgrad.assert_parity(tx.grad, dx)
    jaxgrad.assert_parity(tw.grad, dw)


@pytest.mark.parametrize("capture", ["layers", "export"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=4, padding_mode="reflect"),
        lambda: torch.nn.Conv1d(3, 3, 5, stride=2, dilation=2, groups=3),
    ],
    ids=["conv2d-reflect", "conv1d-dilated"],
)
def test_depthwise_layers_under_auto_match_torch(make, capture):
    """Depthwise layers converted by both front ends, under ``"auto"`` (patches on the
    CPU, in a per-call program): output, input, weight and bias gradients against
    torch in float64 (a 1.001-scaled patches output fails every case)."""
    torch.manual_seed(0)
    module = make().double()
    x = torch.randn(
        2,
        module.in_channels,
        *(12,) * (module.weight.ndim - 2),
        dtype=torch.float64,
        requires_grad=True,
    )
    expected = module(x)
    cotangent = torch.randn_like(expected)
    expected.backward(cotangent)
    with jax.enable_x64(True):
        model, params = nn.from_torch(module, example=(x.detach(),), capture=capture)
        got, vjp = jax.vjp(model.apply, params, x.detach().numpy())
        dparams, dx = vjp(cotangent.numpy())
    jaxgrad.assert_parity(expected.detach(), got)
    jaxgrad.assert_parity(x.grad, dx)
    jaxgrad.assert_parity(module.weight.grad, dparams["weight"])
    jaxgrad.assert_parity(module.bias.grad, dparams["bias"])


def test_patches_forward_mode_matches_xla_lowering():
    """``jax.jvp`` through both lowerings (torch has no forward-mode twin here)."""
    for n, groups in ((1, 1), (2, 2), (3, 1)):
        x, w = _conv_case(n, groups)
        rng = np.random.default_rng(2)
        tangents = (rng.standard_normal(x.shape), rng.standard_normal(w.shape))
        args = ((2,) * n, [(1, 2)] * n, (1,) * n, groups)  # asymmetric pads, as 'same'
        with jax.enable_x64(True):
            _, patches = jax.jvp(lambda x, w: _lowering.conv_patches(x, w, *args), (x, w), tangents)  # noqa: B023
            with nn.conv_lowering("xla"):
                _, xla = jax.jvp(lambda x, w: _lowering.convolve(x, w, *args), (x, w), tangents)  # noqa: B023
        jaxgrad.assert_parity(np.asarray(xla), patches)


def _has_conv(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "conv_general_dilated":
            return True
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            if _has_conv(sub):
                return True
    return False


def _scan_bodies(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            yield eqn.params["jaxpr"].jaxpr
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _scan_bodies(sub)


def test_auto_uses_patches_inside_jaxgrads_loops_only():
    torch.manual_seed(0)
    model, params, buffers = nn.from_torch(
        torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1),
            torch.nn.BatchNorm2d(4),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(64, 3),
        ),
        with_buffers=True,
    )
    optimizer = optax.sgd(0.1)
    opt_state = optimizer.init(params)
    xs, ys = jnp.zeros((3, 2, 1, 4, 4)), jnp.zeros((3, 2), jnp.int32)
    key = jax.random.key(0)
    step = make_stateful_train_step(model, losses.cross_entropy, optimizer, jit=False)
    step_jaxpr = jax.make_jaxpr(step)(params, buffers, opt_state, (xs[0], ys[0]), key).jaxpr
    assert _has_conv(step_jaxpr)  # small and outside loops: XLA's convolution

    def epoch_jaxpr(unroll, mode="auto"):
        epoch = make_stateful_train_epoch(model, losses.cross_entropy, optimizer, unroll=unroll)
        with nn.conv_lowering(mode):
            return jax.make_jaxpr(epoch)(params, buffers, opt_state, (xs, ys), key).jaxpr

    rolled = list(_scan_bodies(epoch_jaxpr(1)))
    assert rolled and not any(_has_conv(body) for body in rolled)  # patches in the loop
    assert _has_conv(epoch_jaxpr(True))  # fully unrolled: no loop, XLA's convolution
    assert any(_has_conv(body) for body in _scan_bodies(epoch_jaxpr(1, "xla")))  # forced


def test_auto_rule_groups_size_and_mode():
    small_x, small_w = (8, 4, 16, 16), (6, 4, 3, 3)  # 8·16·16 × 4·9 = 73,728 elements
    args = ((1, 1), [(1, 1)] * 2, (1, 1))
    assert _lowering.choose(small_x, small_w, *args, 1) == "xla"  # small, not in a loop
    assert _lowering.choose(small_x, (6, 4, 1, 1), (1, 1), [(0, 0)] * 2, (1, 1), 1) == "patches"
    large_x = (_lowering.PATCH_MIN // (16 * 16 * 4 * 9) + 1, 4, 16, 16)
    assert _lowering.choose(large_x, small_w, *args, 1) == "patches"  # large: patches anywhere
    assert _lowering.choose(small_x, (_lowering.WIDE, 4, 3, 3), *args, 1) == "patches"  # wide
    huge_x = (_lowering.PATCH_LIMIT // (16 * 16 * 4 * 9) + 1, 4, 16, 16)
    with _lowering.in_loop():
        assert _lowering.choose(small_x, small_w, *args, 1) == "patches"
        assert _lowering.choose(small_x, (6, 2, 3, 3), *args, 2) == "patches"  # grouped
        assert _lowering.choose(small_x, (8, 1, 3, 3), *args, 4) == "patches"  # depthwise
        assert _lowering.choose(huge_x, small_w, *args, 1) == "xla"  # patch matrix too big
        with _lowering.in_loop(False):  # a fully unrolled scan inside
            assert _lowering.choose(small_x, small_w, *args, 1) == "xla"
        with nn.conv_lowering("xla"):
            assert _lowering.choose(small_x, small_w, *args, 1) == "xla"
    # grouped outside loops too (MobileNet's and ResNeXt's per-step programs), within
    # the size limit
    assert _lowering.choose(small_x, (8, 1, 3, 3), *args, 4) == "patches"
    assert _lowering.choose(small_x, (6, 2, 3, 3), *args, 2) == "patches"
    # the limit counts every group's patches: 4 channels x 9 x N x 16 x 16 elements
    huge_depthwise_x = (_lowering.PATCH_LIMIT // (16 * 16 * 9 * 4) + 1, 4, 16, 16)
    assert _lowering.choose(huge_depthwise_x, (8, 1, 3, 3), *args, 4) == "xla"
    within = (_lowering.PATCH_LIMIT // (16 * 16 * 9 * 4), 4, 16, 16)
    assert _lowering.choose(within, (8, 1, 3, 3), *args, 4) == "patches"
    with nn.conv_lowering("xla"):
        assert _lowering.choose(small_x, (8, 1, 3, 3), *args, 4) == "xla"
    with nn.conv_lowering("patches"):
        assert _lowering.choose(small_x, small_w, *args, 2) == "patches"


def test_mode_from_environment_and_bad_modes(monkeypatch):
    monkeypatch.setenv("JAXGRAD_CONV", "patches")
    assert _lowering.current_mode() == "patches"
    with nn.conv_lowering("xla"):
        assert _lowering.current_mode() == "xla"
    monkeypatch.setenv("JAXGRAD_CONV", "fast")
    with pytest.raises(
        ValueError, match=r"\$JAXGRAD_CONV \(='fast'\) must be one of auto, xla, patches"
    ):
        _lowering.current_mode()
    with pytest.raises(ValueError, match=r"`mode` \(='im2col'\) must be one of"):
        with nn.conv_lowering("im2col"):
            pass


def test_xla_cpu_canonicalises_convolutions_only_outside_loops():
    """The mechanism the ``"auto"`` rule answers, read from XLA:CPU's compiled HLO:
    the same convolution is transposed into Eigen's form in the entry computation and
    left in torch's layout inside a ``lax.scan`` body (``xla_cpu.conv_summary``)."""
    from jaxgrad.train import xla_cpu

    if jax.default_backend() != "cpu":
        pytest.skip("a fact about XLA's CPU backend")
    x, w = jnp.ones((2, 3, 6, 6)), jnp.ones((4, 3, 3, 3))

    def conv(x, w):
        with nn.conv_lowering("xla"):
            return nn.functional.conv2d(x, w, padding=1)

    def scanned(xs, w):
        return jax.lax.scan(lambda c, x: (c, conv(x, w)), 0.0, xs)[1]

    entry = xla_cpu.conv_summary(xla_cpu.compiled_hlo(jax.jit(conv), x, w))
    loop = xla_cpu.conv_summary(xla_cpu.compiled_hlo(jax.jit(scanned), jnp.stack([x, x]), w))
    assert entry == {"entry": {"canonical": 1, "other": 0}, "loop": {"canonical": 0, "other": 0}}
    assert loop == {"entry": {"canonical": 0, "other": 0}, "loop": {"canonical": 0, "other": 1}}
    assert xla_cpu.canonical_labels("b01f_01io->b01f")
    assert not xla_cpu.canonical_labels("bf01_oi01->bf01") and not xla_cpu.canonical_labels("?")
