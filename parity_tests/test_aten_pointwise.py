"""Pointwise ATen entries that no ``op_db`` sample reaches, and their value checks.

``make_fx`` records ``x - 2``, ``2 ** x`` and ``x // 2`` as the ``.Tensor`` overloads
(the number wrapped), so the ``.Scalar`` overloads, ``copy``, ``lift_fresh_copy``
and the bitwise ops (no float64 OpInfo) reach the table only from other programs
(decompositions, ``torch.export`` of real models) or from slow OpInfos. Each is called here directly, in torch through
``torch.ops.aten`` and in jaxgrad through the table, on integer, bool and float64
inputs: values and dtypes compared at the float64 tier, and for floating inputs the
vector-Jacobian product too.

Integer division by zero raises in torch; the table raises too when the divisor is
concrete (a program run eagerly), and under ``jit`` gives XLA's value.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxgrad import parity
from jaxgrad.nn import aten

_INTS = np.array([[-7, 0, 5], [3, -2, 12]], dtype=np.int64)
_BOOLS = np.array([[True, False, True], [False, False, True]])
_FLOATS = np.array([[-7.5, 0.25, 5.0], [3.0, -2.5, 0.0]])

CASES = [
    ("aten.sub.Scalar", (_FLOATS, 2.5), {"alpha": 2}),
    ("aten.sub.Scalar", (_INTS, 3), {}),
    ("aten.sub.Scalar", (_INTS, 0.5), {}),  # int tensor - float number: default float
    ("aten.pow.Scalar", (2.0, _FLOATS), {}),
    ("aten.pow.Scalar", (0.0, np.array([0.0, 1.5, 2.0, -1.0])), {}),  # torch's d/dexponent at 0
    ("aten.pow.Scalar", (3, np.array([0, 1, 4], dtype=np.int64)), {}),
    ("aten.copy.default", (np.zeros((2, 3)), np.array([1.5, -2.0, 4.0])), {}),
    ("aten.copy.default", (_INTS, _FLOATS), {}),  # cast to self's dtype: truncation
    ("aten.div.Scalar", (_FLOATS, 4.0), {}),
    ("aten.div.Scalar", (_INTS, 4), {}),  # true division: the default float
    ("aten.div.Scalar_mode", (_FLOATS, 2.0), {"rounding_mode": "floor"}),
    ("aten.div.Scalar_mode", (_FLOATS, -2.0), {"rounding_mode": "trunc"}),
    ("aten.div.Scalar_mode", (_INTS, 2), {"rounding_mode": "floor"}),
    ("aten.div.Scalar_mode", (_INTS, -2), {"rounding_mode": "trunc"}),
    ("aten.lift_fresh_copy.default", (_FLOATS,), {}),
    ("aten.bitwise_not.default", (_INTS,), {}),
    ("aten.bitwise_not.default", (_BOOLS,), {}),
    ("aten.bitwise_and.Tensor", (_INTS, _INTS[::-1].copy()), {}),
    ("aten.bitwise_or.Tensor", (_BOOLS, _BOOLS[::-1].copy()), {}),
    ("aten.bitwise_xor.Tensor", (_INTS, _INTS[::-1].copy()), {}),
    ("aten.bitwise_and.Scalar", (_INTS, 6), {}),
    ("aten.bitwise_or.Scalar", (_BOOLS, True), {}),
    ("aten.bitwise_xor.Scalar", (_INTS, 5), {}),
]


def _torch_value(value):
    return torch.from_numpy(value.copy()) if isinstance(value, np.ndarray) else value


def _cotangent(shape):
    return np.asarray(1.0 + 0.125 * (np.arange(int(np.prod(shape))) % 7)).reshape(shape)


def _torch_op(overload):
    if overload == "aten.copy.default":  # no derivative of its own: copy_ on a clone has one
        return lambda input, src: input.clone().copy_(src)
    return eval(f"torch.ops.{overload}")  # noqa: S307 - "aten.X.Y", our own table's names


def _reference(overload, args, kwargs):
    """torch's result and the VJP with respect to every float64 tensor argument."""
    op = _torch_op(overload)
    leaves = [_torch_value(a) for a in args]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            leaf.requires_grad_(True)
    out = op(*leaves, **kwargs)
    floating = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.requires_grad]
    result = {"value": out.detach()}
    if floating and out.requires_grad:
        cotangent = torch.from_numpy(_cotangent(tuple(out.shape)))
        grads = torch.autograd.grad(out, floating, cotangent, allow_unused=True)
        result["grads"] = [torch.zeros_like(f) if g is None else g for g, f in zip(grads, floating)]
    return result


def _candidate(overload, args, kwargs, with_grads):
    entry = aten.lookup(overload).fn
    values = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    floating = [
        i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype == np.float64
    ]
    if not with_grads:
        return {"value": entry(*values, **kwargs)}

    def of_floating(*diff):
        full = list(values)
        for i, value in zip(floating, diff):
            full[i] = value
        return entry(*full, **kwargs)

    out, vjp = jax.vjp(of_floating, *[values[i] for i in floating])
    return {"value": out, "grads": list(vjp(jnp.asarray(_cotangent(out.shape), out.dtype)))}


@pytest.mark.parametrize(
    "overload, args, kwargs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_unsampled_pointwise_overloads_match_torch(x64, overload, args, kwargs):
    reference = _reference(overload, args, kwargs)
    candidate = _candidate(overload, args, kwargs, "grads" in reference)
    report = parity.compare(reference, candidate)
    assert report.passed, report.table()


_SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, -2.5, 1.0, 3.0])
_PAIRS = (np.repeat(_SPECIAL, _SPECIAL.size), np.tile(_SPECIAL, _SPECIAL.size))

SPECIAL_CASES = [  # where autodiff of the forward differs from torch's backward formula
    ("aten.abs.default", (_SPECIAL,), {}),  # sgn(NaN) = 0
    ("aten.sign.default", (_SPECIAL,), {}),  # sign(NaN) = 0
    ("aten.relu.default", (_SPECIAL,), {}),  # passes the gradient where the result is NaN
    ("aten.rsqrt.default", (_SPECIAL,), {}),  # -0.5·result³: +inf at -0.0
    ("aten.div.Tensor", _PAIRS, {}),  # d/dother = -(a/b)/b: finite at b = 1e-300
    ("aten.atan2.default", _PAIRS, {}),  # 1/(a² + b²) masked to 0 where that is 0
    ("aten.maximum.default", _PAIRS, {}),  # NaN: both operands get the gradient
    ("aten.minimum.default", _PAIRS, {}),
    ("aten.max.default", (np.array([1.0, np.nan, 2.0, np.nan]),), {}),  # split among NaNs
    ("aten.var.correction", (np.stack(_PAIRS, 1), [1]), {}),  # 2(x - mean)/(N - c) at inf
    ("aten.linalg_vector_norm.default", (np.stack(_PAIRS, 1), 1, [1]), {}),
    ("aten.linalg_vector_norm.default", (np.stack(_PAIRS, 1), float("inf"), [1]), {}),
]


@pytest.mark.parametrize(
    "overload, args, kwargs",
    SPECIAL_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(SPECIAL_CASES)],
)
def test_nan_inf_and_signed_zero_follow_torchs_backward(x64, overload, args, kwargs):
    reference = _reference(overload, args, kwargs)
    report = parity.compare(reference, _candidate(overload, args, kwargs, True))
    assert report.passed, report.table()


@pytest.mark.parametrize(
    "overload, args",
    [
        ("aten.div.Tensor_mode", (_INTS, np.array([1, 0, 2]))),
        ("aten.remainder.Scalar", (_INTS, 0)),
        ("aten.fmod.Tensor", (_INTS, np.zeros(3, np.int64))),
    ],
)
def test_integer_division_by_zero_raises_eagerly_as_in_torch(x64, overload, args):
    kwargs = {"rounding_mode": "floor"} if overload.startswith("aten.div") else {}
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        _torch_op(overload)(*[_torch_value(a) for a in args], **kwargs)
    entry = aten.lookup(overload).fn
    values = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ZeroDivisionError, match="integer division by zero"), jax.disable_jit():
        entry(*values, **kwargs)
    if isinstance(args[1], np.ndarray):  # a traced divisor cannot raise: XLA's value
        jax.jit(lambda a, b: entry(a, b, **kwargs))(*values)


def test_a_negative_integer_power_is_refused_as_in_torch(x64):
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.ops.aten.pow.Tensor_Scalar(torch.from_numpy(_INTS), -1)
    with pytest.raises(ValueError, match="negative integer powers"):
        aten.lookup("aten.pow.Tensor_Scalar").fn(jnp.asarray(_INTS), -1)


_DTYPES = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.float32: np.float32,
    torch.float64: np.float64,
}


def test_type_promotion_is_torchs_result_type(x64):
    """Every pair of dtypes, as dimensioned or zero-dim tensors, and each dtype with a
    Python bool, int and float: ``_promote.result_type`` against ``torch.result_type``."""
    from jaxgrad.nn.aten._promote import result_type

    wrong = []
    for (a, np_a), (b, np_b) in itertools.product(_DTYPES.items(), repeat=2):
        for shape_a, shape_b in (((2,), (2,)), ((2,), ()), ((), (2,)), ((), ())):
            expected = torch.result_type(
                torch.zeros(shape_a, dtype=a), torch.zeros(shape_b, dtype=b)
            )
            got = result_type(jnp.zeros(shape_a, np_a), jnp.zeros(shape_b, np_b))
            if np.dtype(got) != np.dtype(_DTYPES[expected]):
                wrong.append((a, shape_a, b, shape_b, expected, got))
    for (a, np_a), number, shape in itertools.product(_DTYPES.items(), (True, 2, 2.5), ((2,), ())):
        expected = torch.result_type(torch.zeros(shape, dtype=a), number)
        got = result_type(jnp.zeros(shape, np_a), number)
        if np.dtype(got) != np.dtype(_DTYPES[expected]):
            wrong.append((a, shape, number, expected, got))
    assert not wrong, wrong
