"""Every ATen table entry at the boundaries where torch defines a value (issue 44).

``test_edges.py`` holds eleven edges (pow at 0**0, hardtanh/clamp at their bounds, the
2-norm of a zero vector, duplicate writes, scatter_reduce ties…). This file holds the
same kind of sample for every other entry of ``jaxgrad.nn.aten`` that has such a
point, family by family:

- kinks: the subgradient torch picks at 0, at a breakpoint, at a tie of two operands,
  for a step function (0), at a multiple of the divisor;
- zeros: 0/0, a function's pole or branch point, a zero vector's norm, a constant
  row's variance, a softmax row holding -inf, a saturated sigmoid;
- ties: which index torch returns (the first, for ``max.dim``, ``argmax``, a stable
  sort, a pooling window) and where the gradient goes (that index, or split evenly
  for ``amax``/``max()``);
- duplicates: repeated indices in every gather, scatter and embedding entry.

Each sample is explicit (never random); torch's value and vector-Jacobian product are
computed here in float64 and compared at the float64 tier, NaN masks included, integer
outputs exactly. Then captured models reach the composites torch decomposes into these
entries (hardswish, celu, softshrink, xlogy, std, cosine_similarity, index_add,
index_copy…) at the same edges. Where torch's own forward is nondeterministic
(``scatter`` without a reduction writing different values at one position), only the
deterministic part is compared: the gradient, and the value away from that position.
The mutation corpus ``jaxgrad_dev/mutations/edges_tables.yaml`` plants a bug in each
family that these must catch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch import nn as tnn

from jaxgrad import nn, parity
from jaxgrad.nn import aten

D = torch.float64
NAN, INF = math.nan, math.inf


# ---------------------------------------------------------------------- helpers
def _cotangent(shape, which=0):
    """A fixed cotangent with no zero and no two neighbours equal (a wrong split of the
    gradient cannot cancel out); output ``which`` of several gets its own scale."""
    ramp = 1.0 + 0.125 * (np.arange(int(np.prod(shape))) % 7)
    return np.asarray(ramp * (1.0 + which), np.float64).reshape(shape)


def _to_torch(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [torch.from_numpy(v.copy()) for v in value]
    return value


def _to_jax(value):
    if isinstance(value, np.ndarray):
        return jnp.asarray(value)
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return tuple(jnp.asarray(v) for v in value)
    return value


def _floating(array) -> bool:
    return np.issubdtype(np.dtype(array.dtype), np.floating)


def _torch_answer(torch_fn, arrays, differentiable):
    """torch's outputs and the VJP of its floating outputs with respect to the
    ``differentiable`` positions (a ``None`` gradient is a zero)."""
    leaves = [_to_torch(a) for a in arrays]
    for i in differentiable:
        leaves[i].requires_grad_(True)
    out = torch_fn(*leaves)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    used = [(k, o) for k, o in enumerate(outs) if o.requires_grad]
    grads = (
        torch.autograd.grad(
            [o for _, o in used],
            [leaves[i] for i in differentiable],
            [torch.from_numpy(_cotangent(tuple(o.shape), k)) for k, o in used],
            allow_unused=True,
        )
        if used and differentiable
        else [None] * len(differentiable)
    )
    return (
        [o.detach().numpy() for o in outs],
        [
            np.zeros(leaves[i].shape) if g is None else g.numpy(force=True)
            for i, g in zip(differentiable, grads)
        ],
    )


def _jax_answer(jax_fn, arrays, differentiable):
    values = [_to_jax(a) for a in arrays]

    def run(*diff):
        full = list(values)
        for i, value in zip(differentiable, diff):
            full[i] = value
        out = jax_fn(*full)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    outs = run(*[values[i] for i in differentiable])
    floats = [k for k, o in enumerate(outs) if _floating(o)]
    if not differentiable or not floats:
        return outs, []
    _, vjp = jax.vjp(lambda *d: [run(*d)[k] for k in floats], *[values[i] for i in differentiable])
    return outs, list(
        vjp([jnp.asarray(_cotangent(outs[k].shape, k), outs[k].dtype) for k in floats])
    )


def _assert_matches(torch_fn, jax_fn, arrays, differentiable=(0,), value_mask=None):
    """Values and VJPs at the float64 tier (pinned), NaN masks compared; integer
    outputs (indices) equal exactly, in int64. ``value_mask`` (per output, or None):
    only where it is True is the value compared (torch's nondeterministic writes)."""
    expected, expected_grads = _torch_answer(torch_fn, arrays, differentiable)
    outs, grads = _jax_answer(jax_fn, arrays, differentiable)
    assert len(outs) == len(expected)
    floats, float_expected = [], []
    for k, (out, ref) in enumerate(zip(outs, expected)):
        assert tuple(out.shape) == ref.shape, (k, out.shape, ref.shape)
        if not _floating(ref):
            assert np.dtype(out.dtype) == ref.dtype, (k, out.dtype, ref.dtype)
            np.testing.assert_array_equal(np.asarray(out), ref, err_msg=f"output {k}")
            continue
        assert out.dtype == jnp.float64, (k, out.dtype)
        mask = None if value_mask is None else value_mask[k]
        floats.append(out if mask is None else jnp.where(mask, out, 0))
        float_expected.append(ref if mask is None else np.where(mask, ref, 0))
    if not floats:  # indices only (argmax): compared above
        return
    report = parity.compare(
        {"value": float_expected, "grads": expected_grads},
        {"value": floats, "grads": grads},
        computed_in="float64",
    )
    assert report.passed, report.table()


def _torch_op(overload):
    return eval(f"torch.ops.{overload}")  # noqa: S307 - "aten.X.Y", the table's own names


def _assert_entry_matches(
    overload, arrays, kwargs=None, differentiable=(0,), wrap=None, value_mask=None
):
    """The table's entry for ``overload`` against torch's op on the same arguments
    (``wrap`` picks outputs of both, e.g. the ones torch fills)."""
    kwargs = kwargs or {}
    wrap = wrap or (lambda out: out)
    entry = aten.lookup(overload).fn
    _assert_matches(
        lambda *a: wrap(_torch_op(overload)(*a, **kwargs)),
        lambda *a: wrap(entry(*a, **kwargs)),
        arrays,
        differentiable,
        value_mask,
    )


def _assert_capture_matches(module, *arrays):
    """``module`` captured with torch.export: outputs and input VJPs against torch's."""
    module = module.to(D)
    example = tuple(torch.from_numpy(a.copy()) for a in arrays)
    # at the example's shapes: these tests are about values at edges (test_dynamic_shapes.py
    # holds the symbolic sizes)
    model, params = nn.from_torch(module, example=example, capture="export", dynamic_shapes=None)
    _assert_matches(module, lambda *a: model.apply(params, *a), arrays, tuple(range(len(arrays))))


def _a(*values):
    return np.array(values, np.float64)


def _i(*values):
    return np.array(values, np.int64)


def _case(case_id, overload, *args, differentiable=(0,), marks=(), **kwargs):
    return pytest.param(overload, args, kwargs, differentiable, id=case_id, marks=marks)


def _after(x, toward):
    return float(np.nextafter(x, toward))


# ------------------------------------------------------------------- 1. kinks
# the subgradient torch's backward picks exactly at a kink, a breakpoint or a tie
AROUND_ZERO = _a(-2.0, -1e-300, -0.0, 0.0, 1e-300, 1.5, NAN)
HALVES = _a(-2.5, -1.5, -0.5, -0.0, 0.5, 1.5, 2.5, 3.0, _after(0.5, 0.0), -1e-300)
SELU = dict(alpha=1.6732632423543772848170429916717, scale=1.0507009873554804934193349852946)
# multiples of the divisor (both signs), a zero dividend of either sign, a zero divisor,
# an infinite divisor; the quotient 0.3/0.1 rounds just below 3
DIVIDENDS = _a(6.0, -6.0, 6.0, -6.0, 0.0, -0.0, 7.5, 5.0, 1.0, -1.0, 0.3)
DIVISORS = _a(3.0, 3.0, -3.0, -3.0, 2.0, 2.0, 2.5, 0.0, INF, INF, 0.1)

KINKS = [
    _case("abs-at-0", "aten.abs.default", AROUND_ZERO),  # sgn: 0 at ±0 and NaN
    _case("sign-is-a-step", "aten.sign.default", AROUND_ZERO),
    _case("relu-at-0", "aten.relu.default", AROUND_ZERO),  # 0 at 0, passed at NaN
    _case("leaky_relu-at-0", "aten.leaky_relu.default", AROUND_ZERO, 0.2),  # slope at 0
    _case("leaky_relu-slope-above-1", "aten.leaky_relu.default", AROUND_ZERO, 1.5),
    _case("elu-at-0", "aten.elu.default", AROUND_ZERO),  # alpha·exp(0) at 0
    _case("celu-at-0", "aten.elu.default", AROUND_ZERO, 2.0, 1, 0.5),
    _case("selu-at-0", "aten.elu.default", AROUND_ZERO, SELU["alpha"], SELU["scale"], 1),
    # hardsigmoid_backward: grad/6 strictly inside (-3, 3), 0 at both breakpoints
    _case(
        "hardsigmoid-at-±3",
        "aten.hardsigmoid.default",
        _a(-4.0, -3.0, _after(-3.0, 0.0), 0.0, _after(3.0, 0.0), 3.0, 4.0, NAN),
    ),
    # maximum/minimum: a tie splits ½/½ (-0.0 and 0.0 tie too), NaN gives both all
    _case(
        "maximum-ties",
        "aten.maximum.default",
        _a(1.0, 2.0, -0.0, 0.0, NAN, 3.0, NAN),
        _a(1.0, 2.0, 0.0, -0.0, 1.0, NAN, NAN),
        differentiable=(0, 1),
    ),
    _case(
        "minimum-ties",
        "aten.minimum.default",
        _a(1.0, 2.0, -0.0, 0.0, NAN, 3.0, NAN),
        _a(1.0, 2.0, 0.0, -0.0, 1.0, NAN, NAN),
        differentiable=(0, 1),
    ),
    _case(
        "maximum-broadcast-ties",
        "aten.maximum.default",
        _a(1.0, 2.0, 1.0, 0.0),
        _a(1.0),
        differentiable=(0, 1),
    ),
    # where: the unselected operand gets 0, even where it is inf or NaN
    _case(
        "where-unselected-nan",
        "aten.where.self",
        np.array([True, False, True, False]),
        _a(1.0, INF, NAN, 2.0),
        _a(NAN, 3.0, -1.0, -INF),
        differentiable=(1, 2),
    ),
    *[
        _case(f"{name}-is-a-step", f"aten.{name}.default", HALVES)
        for name in ("round", "floor", "ceil", "trunc")
    ],  # round: half to even
    _case(
        "round-decimals-halves",
        "aten.round.decimals",
        _a(0.125, 0.375, -0.125, 2.5, 1.05),
        decimals=2,
    ),
    _case(
        "round-negative-decimals", "aten.round.decimals", _a(15.0, 25.0, -5.0, 35.0), decimals=-1
    ),
    # remainder: d/dother = -floor_divide(self, other); fmod: -trunc(self / other)
    _case(
        "remainder-at-multiples",
        "aten.remainder.Tensor",
        DIVIDENDS,
        DIVISORS,
        differentiable=(0, 1),
    ),
    _case("fmod-at-multiples", "aten.fmod.Tensor", DIVIDENDS, DIVISORS, differentiable=(0, 1)),
    _case("remainder-scalar-at-multiples", "aten.remainder.Scalar", DIVIDENDS, 3.0),
    _case("fmod-scalar-at-multiples", "aten.fmod.Scalar", DIVIDENDS, -3.0),
    # rounding division: a step function, gradient 0 even by a zero divisor
    _case(
        "div-trunc-by-zero",
        "aten.div.Tensor_mode",
        _a(0.0, 1.0, -1.0, 7.0, -7.0),
        _a(0.0, 0.0, -0.0, 2.0, 2.0),
        differentiable=(0, 1),
        rounding_mode="trunc",
    ),
    _case(
        "div-floor-by-zero",
        "aten.div.Tensor_mode",
        _a(0.0, 1.0, -1.0, 7.0, -7.0),
        _a(0.0, 0.0, -0.0, 2.0, 2.0),
        differentiable=(0, 1),
        rounding_mode="floor",
    ),
]


@pytest.mark.parametrize("overload, args, kwargs, differentiable", KINKS)
def test_pointwise_entries_take_torchs_subgradient_at_kinks(
    x64, overload, args, kwargs, differentiable
):
    _assert_entry_matches(overload, args, kwargs, differentiable)


# ------------------------------------------------- 2. zeros, poles, saturation
ZERO_DIVISION = (
    _a(0.0, 0.0, 1.0, -1.0, 0.0, -0.0, 1e-300, INF),
    _a(0.0, -0.0, 0.0, -0.0, 2.0, 3.0, 1e-300, INF),
)
POLES = _a(0.0, -0.0, -1.0, 1e-300, 1.0, 4.0, INF)
SATURATED = _a(-800.0, -40.0, -20.0, 20.0, 40.0, 800.0, INF, -INF, NAN)
SOFTMAX_ROWS = np.array(
    [[0.0, -INF, 1.0], [-INF, -INF, -INF], [-INF, 5.0, -INF], [800.0, -800.0, 0.0], [INF, 0.0, 1.0]]
)
ZERO_ROWS = np.array(
    [[0.0, 0.0, 0.0], [3.0, -3.0, 1.0], [-0.0, 0.0, 0.0], [2.0, 0.0, -2.0], [1e-200, 0.0, 0.0]]
)

ZEROS = [
    _case("div-0/0", "aten.div.Tensor", *ZERO_DIVISION, differentiable=(0, 1)),
    _case("div-scalar-by-0", "aten.div.Scalar", _a(0.0, 1.0, -1.0), 0.0),
    *[
        _case(f"{name}-at-its-pole", f"aten.{name}.default", POLES)
        for name in ("sqrt", "rsqrt", "log", "log2", "log10", "reciprocal", "exp")
    ],
    _case(
        "log1p-at--1",
        "aten.log1p.default",
        _a(-1.0, _after(-1.0, -2.0), _after(-1.0, 0.0), 0.0, -0.0, INF),
    ),
    *[
        _case(f"{name}-at-±1", f"aten.{name}.default", _a(-1.0, 1.0, _after(1.0, 2.0), 0.0, -0.0))
        for name in ("asin", "acos", "atanh", "erfinv")
    ],
    _case("acosh-at-1", "aten.acosh.default", _a(1.0, _after(1.0, 0.0), 2.0, INF)),
    _case(
        "atan2-at-the-origin",
        "aten.atan2.default",
        _a(0.0, -0.0, 0.0, -0.0, 1.0, 0.0, 0.0),
        _a(0.0, 0.0, -0.0, -0.0, 0.0, -1.0, 2.0),
        differentiable=(0, 1),
    ),
    # pow beyond test_edges.py: negative bases, fractional and negative powers of ±0
    _case(
        "pow-negative-bases-and-zero",
        "aten.pow.Tensor_Tensor",
        _a(-2.0, -2.0, -0.0, 0.0, 0.0, -8.0, 1.0, -0.0),
        _a(2.0, 0.5, 2.0, -2.0, 0.5, 1.0 / 3.0, 0.0, -1.0),
        differentiable=(0, 1),
    ),
    *[
        _case(f"pow-scalar-exponent-{e}", "aten.pow.Tensor_Scalar", _a(0.0, -0.0, -1.0, 2.0), e)
        for e in (0.5, -1.0, -0.5, 2.0, 3)
    ],
    _case(
        "pow-zero-base-negative-exponents",
        "aten.pow.Scalar",
        0.0,
        _a(-1.0, -0.5, 0.5, 2.0, 0.0),
        differentiable=(1,),
    ),
    _case(
        "pow-negative-scalar-base",
        "aten.pow.Scalar",
        -2.0,
        _a(2.0, 0.5, 0.0, 3.0),
        differentiable=(1,),
    ),
    *[
        _case(f"{name}-saturated", f"aten.{name}.default", SATURATED)
        for name in ("sigmoid", "tanh")
    ],
    # softmax rows holding -inf (0 there), all -inf (NaN; safe_softmax: 0), +inf (NaN)
    _case("softmax-with-inf", "aten._softmax.default", SOFTMAX_ROWS, 1, False),
    _case("log_softmax-with-inf", "aten._log_softmax.default", SOFTMAX_ROWS, 1, False),
    _case("safe_softmax-with-inf", "aten._safe_softmax.default", SOFTMAX_ROWS, 1),
    # norm_backward at zero vectors and at ties, every kind of ord
    *[
        _case(
            f"vector_norm-ord-{o}-zero-rows",
            "aten.linalg_vector_norm.default",
            ZERO_ROWS,
            o,
            [-1],
            False,
        )
        for o in (INF, -INF, 1, 0.5, 3, 0, -1, 1.5)
    ],
    _case("vector_norm-ord-inf-zero-vector", "aten.linalg_vector_norm.default", np.zeros(4), INF),
    # var_backward at constant rows: 2(x - mean)/(N - correction) = 0
    *[
        _case(
            f"var-constant-correction-{c}",
            "aten.var.correction",
            np.array([[2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [-1e300, -1e300, -1e300]]),
            [1],
            correction=c,
        )
        for c in (0, 1)
    ],
    _case("var-constant-all", "aten.var.correction", np.full((2, 3), 0.5)),
]


@pytest.mark.parametrize("overload, args, kwargs, differentiable", ZEROS)
def test_entries_at_zeros_poles_and_saturation_match_torch(
    x64, overload, args, kwargs, differentiable
):
    _assert_entry_matches(overload, args, kwargs, differentiable)


# ---------------------------------------------------------------------- 3. ties
TIED = np.array(
    [[1.0, 3.0, 3.0, -2.0], [3.0, 0.0, -2.0, -2.0], [5.0, 5.0, 5.0, 5.0], [-0.0, 0.0, 1.0, -1.0]]
)
TIED_NAN = np.array([[1.0, NAN, 3.0, NAN], [2.0, 2.0, 0.0, 0.0]])
# products and cumulative products with one zero and with two in a row
WITH_ZEROS = np.array(
    [
        [2.0, 0.0, 3.0, 4.0],
        [0.0, 0.0, 2.0, 3.0],
        [1.0, 2.0, 0.0, 0.0],
        [-0.0, 1.0, 2.0, 3.0],
        [1.5, 2.0, -1.0, 3.0],
    ]
)
PLANE = np.array(
    [[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 0.0, 2.0], [3.0, 0.0, 3.0, 3.0], [0.0, 3.0, 3.0, 3.0]]]]
)  # equal values in every 2x2 window
POINTS = np.array([[0.0, 0.0], [1.0, 2.0], [1.0, 2.0], [-1.0, 2.0]])  # a repeated point

TIES = [
    # max()/min(): split evenly among the tied extrema (among the NaNs if any)
    *[
        _case(f"{name}-all-ties", f"aten.{name}.default", data)
        for name in ("max", "min")
        for data in (TIED, TIED_NAN, np.full((2, 2), 4.0))
    ],
    # max.dim/min.dim: the first extremum, which gets the whole gradient
    *[
        _case(f"{name}-dim-ties", f"aten.{name}.dim", data, dim, keepdim)
        for name in ("max", "min")
        for data in (TIED, TIED_NAN)
        for dim, keepdim in ((1, False), (0, True))
    ],
    # amax/amin: split evenly among the ties of each reduced slice (NaN: NaN)
    *[
        _case(f"{name}-ties", f"aten.{name}.default", data, dim, keepdim)
        for name in ("amax", "amin")
        for data in (TIED, TIED_NAN)
        for dim, keepdim in (([1], False), ([0, 1], True), ([], False))
    ],
    # argmax/argmin: the first occurrence
    *[
        _case(f"{name}-ties", f"aten.{name}.default", data, dim, keepdim, differentiable=())
        for name in ("argmax", "argmin")
        for data in (TIED, TIED_NAN)
        for dim, keepdim in ((1, False), (None, False), (0, True))
    ],
    # sort (torch's CPU sort is stable: ties keep their order, NaN last), topk
    *[
        _case(f"sort-ties-descending-{d}", "aten.sort.default", data, 1, d)
        for data in (TIED, TIED_NAN)
        for d in (False, True)
    ],
    _case("sort-stable-ties", "aten.sort.stable", TIED, stable=True, dim=0, descending=True),
    # products: torch's prod_backward is exact with one zero (the others' product) and two
    _case("prod-one-zero", "aten.prod.default", _a(2.0, 0.0, 3.0, -1.5)),
    _case("prod-two-zeros", "aten.prod.default", _a(2.0, 0.0, 3.0, -0.0)),
    _case("prod-dim-zeros", "aten.prod.dim_int", WITH_ZEROS, 1),
    _case("cumprod-zeros", "aten.cumprod.default", WITH_ZEROS, 1),
    # max pooling: the first maximum of each window (scan order), overlapping windows add
    _case(
        "max_pool2d-ties-overlapping", "aten.max_pool2d_with_indices.default", PLANE, [2, 2], [1, 1]
    ),
    _case(
        "max_pool2d-ties-padded",
        "aten.max_pool2d_with_indices.default",
        PLANE,
        [2, 2],
        [2, 2],
        [1, 1],
    ),
    _case(
        "max_pool2d-ties-dilated-ceil",
        "aten.max_pool2d_with_indices.default",
        PLANE,
        [2, 2],
        [2, 2],
        [0, 0],
        [2, 2],
        True,
    ),
    _case(
        "max_pool3d-all-equal",
        "aten.max_pool3d_with_indices.default",
        np.full((1, 1, 2, 3, 3), 2.0),
        [2, 2, 2],
        [1, 1, 1],
    ),
    _case("adaptive_max_pool2d-ties", "aten.adaptive_max_pool2d.default", PLANE, [3, 3]),
    # distances at zero (torch's _cdist_backward / _pdist_backward: 0 there) and at ties
    *[
        _case(
            f"cdist-zero-distance-p{p}",
            "aten._cdist_forward.default",
            POINTS,
            POINTS[1:],
            p,
            None,
            differentiable=(0, 1),
        )
        for p in (0.0, 0.5, 1.0, 2.0, 3.0, INF)
    ],
    *[
        _case(f"pdist-zero-distance-p{p}", "aten._pdist_forward.default", POINTS, p)
        for p in (0.5, 1.0, 2.0, 3.0, INF)
    ],
]


@pytest.mark.parametrize("overload, args, kwargs, differentiable", TIES)
def test_reductions_at_ties_pick_torchs_index_and_split_the_gradient_like_torch(
    x64, overload, args, kwargs, differentiable
):
    _assert_entry_matches(overload, args, kwargs, differentiable)


def _tie_group_sums(data, grad):
    """Per row, the gradient summed over each group of equal inputs (NaNs one group)."""
    sums = []
    for row, g in zip(data, grad):
        keys = np.where(np.isnan(row), np.inf, row)
        sums.extend(g[keys == value].sum() for value in np.unique(keys))
    return np.array(sums)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_at_ties_matches_torchs_values_and_the_gradient_of_each_tied_group(x64, k, largest):
    """Which of several tied elements torch's ``topk`` returns is not documented (its
    CPU kernel partially sorts: the row [5, 5, 5, 5] gives index 2 first), so its
    indices are not compared. What is determined is: the values, every returned index
    pointing at its value (no index twice), and the gradient summed over each group of
    tied inputs, since the gradient follows the returned indices."""
    x = torch.from_numpy(TIED.copy()).requires_grad_(True)
    values, indices = torch.topk(x, k, 1, largest)
    cotangent = _cotangent(tuple(values.shape))
    (grad,) = torch.autograd.grad(values, x, torch.from_numpy(cotangent))
    entry = aten.lookup("aten.topk.default").fn
    ours, our_indices = entry(jnp.asarray(TIED), k, 1, largest)
    (our_grad,) = jax.vjp(lambda a: entry(a, k, 1, largest)[0], jnp.asarray(TIED))[1](
        jnp.asarray(cotangent)
    )
    our_indices = np.asarray(our_indices)
    assert our_indices.dtype == np.int64 and ours.dtype == jnp.float64
    assert all(len(set(row)) == k for row in our_indices.tolist())
    np.testing.assert_array_equal(np.take_along_axis(TIED, our_indices, 1), np.asarray(ours))
    scattered = np.zeros_like(TIED)
    np.put_along_axis(scattered, our_indices, cotangent, 1)
    np.testing.assert_array_equal(np.asarray(our_grad), scattered)  # where its indices point
    report = parity.compare(
        {"values": values.detach().numpy(), "groups": _tie_group_sums(TIED, grad.numpy())},
        {"values": ours, "groups": _tie_group_sums(TIED, np.asarray(our_grad))},
        computed_in="float64",
    )
    assert report.passed, report.table()


# ---------------------------------------------------------- 4. duplicate indices
TABLE = np.arange(1.0, 13.0).reshape(4, 3)
ROWS = _i(1, 3, 1, 1, -3)  # row 1 four times (-3 is row 1 too)
INDEX = np.array([[2, 0, 2], [2, 2, 0], [0, 0, 2]])  # every column writes twice
SRC = np.array([[0.5, 2.0, -1.0], [0.0, 3.0, 0.0], [4.0, 0.0, 2.0]])  # zeros for prod
INPUT = np.array([[1.0, 0.0, 2.0], [3.0, 4.0, -1.0], [0.0, 5.0, 6.0]])
SRC_TWO_ZEROS = np.array([[0.0, 2.0, -1.0], [0.0, 3.0, 0.0], [4.0, 0.0, 2.0]])  # (2, 0) twice

DUPLICATES = [
    _case("index-repeated-rows", "aten.index.Tensor", TABLE, [ROWS]),
    _case("index-repeated-pairs", "aten.index.Tensor", TABLE, [_i(0, 2, 0, 0), _i(1, 2, 1, -2)]),
    # values broadcast over duplicate rows: each duplicate's cotangent, then summed
    *[
        _case(
            f"index_put-broadcast-accumulate-{acc}",
            "aten.index_put.default",
            TABLE,
            [ROWS],
            _a(7.0, 8.0, 9.0),
            acc,
            differentiable=(0, 2),
        )
        for acc in (False, True)
    ],
    _case(
        "index_put-accumulate-pairs",
        "aten.index_put.default",
        TABLE,
        [_i(0, 2, 0, 0), _i(1, 2, 1, -2)],
        _a(5.0, -1.0, 2.0, 3.0),
        True,
        differentiable=(0, 2),
    ),
    _case("scatter-value-duplicates", "aten.scatter.value", INPUT, 0, INDEX, 2.5),
    _case(
        "scatter_add-duplicates-dim1",
        "aten.scatter_add.default",
        INPUT,
        1,
        INDEX[:2, :2],
        SRC[:2, :2],
        differentiable=(0, 3),
    ),
    *[
        _case(
            f"scatter_reduce-{reduce}-include_self-{include}",
            "aten.scatter_reduce.two",
            INPUT,
            0,
            INDEX,
            SRC,
            reduce,
            include_self=include,
            differentiable=(0, 3),
        )
        for reduce in ("sum", "prod", "mean", "amax", "amin")
        for include in (True, False)
    ],
    *[
        _case(
            f"scatter_reduce-prod-two-zeros-include_self-{include}",
            "aten.scatter_reduce.two",
            INPUT,
            0,
            INDEX,
            SRC_TWO_ZEROS,
            "prod",
            include_self=include,
            differentiable=(0, 3),
        )
        for include in (True, False)
    ],
    _case(
        "gather-duplicates",
        "aten.gather.default",
        TABLE,
        1,
        np.array([[0, 0], [2, 2], [1, 1], [0, 2]]),
    ),
    _case(
        "gather-duplicates-dim0", "aten.gather.default", TABLE, 0, np.array([[3, 3, 3], [3, 0, 3]])
    ),
    _case("index_select-duplicates", "aten.index_select.default", TABLE, 0, _i(2, 0, 2, 2)),
    _case("index_select-duplicates-dim1", "aten.index_select.default", TABLE, 1, _i(1, 1)),
    # embedding: padding rows get nothing; scale_grad_by_freq divides by the count
    *[
        _case(
            f"embedding-duplicates-padding-{pad}-freq-{freq}",
            "aten.embedding.default",
            TABLE,
            np.array([[1, 2, 1], [1, 3, 2]]),
            pad,
            freq,
        )
        for pad in (-1, 1, 2)
        for freq in (False, True)
    ],
]

BAG_INDICES, BAG_OFFSETS = _i(1, 1, 2, 0, 2, 2, 3, 1), _i(0, 3, 3, 6)  # bag 1 empty
BAG_INDICES_TWICE = _i(1, 1, 3, 2, 2, 0, 0, 3)  # each id twice
BAG_WEIGHT = np.array([[1.0, 4.0], [2.0, 4.0], [2.0, 1.0], [0.5, 0.5]])  # ties by feature
BAG_SAMPLES = _a(0.5, -1.0, 2.0, 1.5, 0.0, 3.0, 1.0, 0.25)


@pytest.mark.parametrize("overload, args, kwargs, differentiable", DUPLICATES)
def test_gathers_and_scatters_with_duplicate_indices_match_torch(
    x64, overload, args, kwargs, differentiable
):
    _assert_entry_matches(overload, args, kwargs, differentiable)


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_bag_with_duplicates_and_ties_matches_torch(x64, mode, padding_idx):
    """Repeated ids within and across bags, an empty bag, a bag of padding only, per-
    feature ties between rows for ``max`` (torch: the first maximal row gets the
    gradient; an empty bag's ``max_indices`` is 0). torch's sum and mean modes leave
    ``max_indices`` unfilled: the output is compared there.

    ``scale_grad_by_freq`` is ignored by torch's ``max`` backward (documented as not
    supported there); it is held where every id occurs equally often: torch 2.13's
    CPU backward divides by the count of the wrong id where counts differ (pytorch
    issue 190063, fixed after 2.13); jaxgrad divides by each id's own count, as
    ``embedding``, CUDA and the fixed kernel do."""
    pick = (lambda out: (out[0], out[3])) if mode == 2 else (lambda out: out[0])
    samples = BAG_SAMPLES if mode == 0 else None
    for freq, indices in ((False, BAG_INDICES), (True, BAG_INDICES_TWICE)):
        args = (BAG_WEIGHT, indices, BAG_OFFSETS, freq, mode, False, samples, False, padding_idx)
        _assert_entry_matches(
            "aten._embedding_bag.default", args, None, (0, 6) if mode == 0 else (0,), wrap=pick
        )


def test_scatter_of_different_values_at_one_position_matches_torchs_deterministic_part(x64):
    """torch's ``scatter`` writing different values at one position keeps one of them,
    which one unspecified; its backward is not: every written value gets its position's
    cotangent, the input none there. Values are compared away from those positions."""
    index = np.array([[1, 0, 2], [1, 0, 0]])
    src = np.array([[4.0, -2.0, 6.0], [0.5, 3.0, 7.0]])  # (1, 0) and (0, 1) written twice
    written_twice = np.zeros((3, 3), bool)
    written_twice[1, 0] = written_twice[0, 1] = True
    _assert_entry_matches(
        "aten.scatter.src", (INPUT, 0, index, src), None, (0, 3), value_mask=[~written_twice]
    )
    _assert_entry_matches(
        "aten.index_put.default",
        (TABLE, [ROWS], np.arange(15.0).reshape(5, 3)),
        None,
        (0, 2),
        value_mask=[np.arange(4)[:, None] != 1],
    )


# ----------------------------------------- 5. composites, through captured models
class Kinks(tnn.Module):
    """Composites torch decomposes into table entries, each at its kink."""

    def forward(self, x):
        return (
            TF.celu(x, 2.0),
            TF.selu(x),
            TF.threshold(x, 0.5, -2.0),
            TF.softshrink(x, 0.5),
            TF.hardshrink(x, 0.5),
            x.clamp_min(0.5),
            x.clamp_max(-0.5),
            TF.leaky_relu(x, 0.1),
            TF.softplus(x, 2.0, 10.0),
            TF.prelu(x, torch.tensor([0.25], dtype=x.dtype)),
            torch.frac(x),
            torch.sgn(x),
            TF.logsigmoid(x),
        )


KINK_POINTS = _a(
    -4.0, -3.0, -1.0, -0.5, -1e-300, -0.0, 0.0, 1e-300, 0.5, 1.0, 3.0, 4.0, 5.0, 40.0, -800.0, 300.0
)


def test_activation_composites_at_their_kinks_through_a_captured_model(x64):
    _assert_capture_matches(Kinks(), KINK_POINTS)


class Zeros(tnn.Module):
    def forward(self, x, y):
        return (
            TF.cosine_similarity(x.reshape(2, 3), y.reshape(2, 3)),
            TF.normalize(x.reshape(2, 3)),
            torch.logsumexp(x.reshape(2, 3), 1),
            TF.smooth_l1_loss(x, y, reduction="none", beta=0.5),
            TF.huber_loss(x, y, reduction="none", delta=0.5),
            torch.logaddexp(x, y),
        )


ZERO_X = _a(0.0, 0.0, 0.0, 0.5, -1.0, 0.0)
ZERO_Y = _a(0.0, 2.0, -0.0, 0.0, 1.5, 2.0)
CONSTANT_ROWS = _a(1.0, 1.0, 1.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("y", [ZERO_Y, CONSTANT_ROWS], ids=["zeros", "constant-rows"])
def test_zero_division_composites_through_a_captured_model(x64, y):
    """The cosine similarity and normalisation of zero vectors, smooth_l1/huber at their
    breakpoint, logaddexp of equal operands."""
    _assert_capture_matches(Zeros(), ZERO_X, y)


class SpecialisedBackwards(tnn.Module):
    def forward(self, x, y):
        return (
            torch.xlogy(x, y),
            torch.std(y.reshape(2, 3), dim=1),
            torch.sinc(x),
            TF.hardswish(6 * y - 3),
        )


# torch.export decomposes xlogy into where(x == 0, 0, x * log(y)), std into sqrt(var),
# sinc into where(x == 0, 1, sin(pi x) / (pi x)) and hardswish into x * clamp(x + 3, 0,
# 6) / 6, whose autodiff differs from torch's own backward at these edges (0 * inf = NaN
# where torch defines 0; 0 where xlogy's d/dx is log(y); the clamp's bounds): the four
# are kept whole (jaxgrad.nn.capture.export.decompositions) and mapped with torch's derivatives
@pytest.mark.parametrize("y", [ZERO_Y, CONSTANT_ROWS], ids=["zeros", "constant-rows"])
def test_xlogy_std_and_sinc_at_zero_through_a_captured_model(x64, y):
    _assert_capture_matches(SpecialisedBackwards(), ZERO_X, y)


class Ties(tnn.Module):
    def forward(self, x):
        plane = x.reshape(1, 1, 4, 4)
        return (
            TF.max_pool2d(plane, 2, 1),
            TF.max_pool2d(plane, 3, 2, padding=1),
            TF.adaptive_max_pool2d(plane, 3),
            x.max(),
            x.reshape(4, 4).max(dim=0)[0],
            torch.amax(x.reshape(4, 4), 1),
            torch.aminmax(x.reshape(4, 4), dim=0)[0],
            x.reshape(4, 4).sort(dim=1, descending=True)[0],
            x.reshape(4, 4).argmax(dim=1),
            torch.quantile(x.reshape(4, 4), 0.5, dim=1),
        )


def test_ties_through_a_captured_model(x64):
    _assert_capture_matches(Ties(), PLANE.reshape(-1))


class Duplicates(tnn.Module):
    def forward(self, x, source):
        rows = torch.tensor([2, 0, 2, 2])
        same = source[:1].expand(4, 3)  # index_copy: equal values where rows repeat
        return (
            x.index_add(0, rows, source),
            x.index_add(0, rows, source, alpha=-0.5),
            x.index_copy(0, rows, same),
            x.index_fill(0, rows, 3.0),
            x[rows],
            torch.take_along_dim(x, torch.tensor([[0, 0, 2]]), dim=1),
            TF.embedding(torch.tensor([[1, 2, 1], [1, 3, 2]]), x, padding_idx=2),
            TF.nll_loss(TF.log_softmax(x, 1), torch.tensor([0, 0, 2, 0]), reduction="none"),
        )


def test_duplicate_indices_through_a_captured_model(x64):
    _assert_capture_matches(Duplicates(), TABLE, np.arange(12.0).reshape(4, 3) * 0.5 - 2.0)
