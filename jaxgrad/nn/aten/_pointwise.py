"""Elementwise ATen ops: arithmetic, comparisons, logic, math functions, activations,
casts and copies.

Each entry computes in torch's result dtype (``_promote``: binary ops promote their
operands first, so the arithmetic runs in torch's dtype and never in JAX's; math
functions of an integer or bool input compute in the default float), and
differentiates as torch's backward formula does (``derivatives.yaml``). Where JAX's
derivative of the same forward differs, the entry is a ``jax.custom_jvp`` carrying
torch's rule next to its forward:

================  ==============================================================
op                torch's derivative (where autodiff of the forward differs)
================  ==============================================================
abs               ``sgn(x)``: 0 at 0 and at NaN (JAX: 1, NaN); ``sign(NaN)`` is 0
relu              passes the gradient where the result is > 0 or NaN
rsqrt             ``−½·result³`` (+inf at −0.0, where JAX's ``−½·result/x`` is −inf)
div               d/dother: ``−(self/other)/other`` (JAX's ``−self·other⁻²``
                  overflows to inf·0 = NaN for ``other`` ≈ 1e-300)
atan2             ``other/(self² + other²)``, ``−self/(…)``, 0 where the sum is 0
maximum, minimum  ties split ½/½; where one operand is NaN both get the gradient
clamp             passes the gradient to ``self`` on ``min ≤ x ≤ max`` (the
                  boundaries included; JAX's max/min split ties ½/½); ``min``
                  gets it where ``x < min < max``, ``max`` where ``x > max`` or
                  ``max < min``
hardtanh          passes it strictly inside ``(min_val, max_val)`` only
elu               ``scale·input_scale·alpha·exp(input_scale·x)`` for ``x ≤ 0``
pow               d/dbase: 0 where the exponent is 0; d/dexponent:
                  ``result·log(base)``, 0 where ``base == 0`` and exponent ≥ 0
                  (JAX: NaN for base 0 with a negative exponent)
div (rounding),   0 (a step function; the IEEE branch at a zero divisor must not
floor, trunc…     leak ``inf·0`` into the gradient)
remainder         d/dother: ``−floor_divide(self, other)`` with torch's rounding
================  ==============================================================

Value errors torch raises while running (an integer division by zero) are raised
here when the operands are concrete (eager, ``jax.disable_jit``); a traced
program cannot raise, and integer division by zero then gives XLA's value.
"""

from __future__ import annotations

import builtins
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn import functional
from jaxgrad.nn.aten._promote import (
    canonical,
    compiled,
    float_of,
    is_floating,
    is_tensor,
    promote,
    result_type,
)
from jaxgrad.nn.aten._table import register
from jaxgrad.nn.functional._embedding import concrete_or_none


def _as_float(input):
    """``input`` in the dtype a float-valued math function returns for it."""
    dtype = float_of(input.dtype)
    return input if input.dtype == dtype else input.astype(dtype)


# ------------------------------------------------------------------ arithmetic
@register("aten.add.Tensor", "aten.add.Scalar")
def add(input, other, alpha=1):
    (input, other), _ = promote(input, other)
    return input + (other * alpha if alpha != 1 else other)


@register("aten.sub.Tensor", "aten.sub.Scalar")
def sub(input, other, alpha=1):
    (input, other), dtype = promote(input, other)
    if dtype == np.bool_:
        raise TypeError(
            "sub: subtracting two bool tensors is not supported (torch refuses "
            "it too); use `logical_xor`."
        )
    return input - (other * alpha if alpha != 1 else other)


@register("aten.mul.Tensor", "aten.mul.Scalar")
def mul(input, other):
    (input, other), dtype = promote(input, other)
    return input & other if dtype == np.bool_ else input * other


@register("aten.neg.default")
def neg(input):
    if input.dtype == np.bool_:
        raise TypeError(
            "neg: negating a bool tensor is not supported (torch refuses it "
            "too); use `logical_not`."
        )
    return -input


def _check_divisor(other, op: str):
    """torch raises for an integer division by zero; so do we, when values are known."""
    values = concrete_or_none(other) if is_tensor(other) else np.asarray(other)
    if values is not None and np.any(values == 0):
        raise ZeroDivisionError(f"{op}: integer division by zero (`other` holds a 0).")


def _floor_divide_float(a, b):
    """torch's ``div_floor_floating``: Python's ``a // b`` for floats."""
    mod = jnp.fmod(a, b)
    div = (a - mod) / b
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = jnp.floor(div)
    floored = jnp.where(div - floored > 0.5, floored + 1, floored)
    floored = jnp.where(div == 0, jnp.copysign(jnp.zeros_like(div), a / b), floored)
    return jnp.where(b == 0, a / b, floored)


@compiled  # a dozen primitives: one program, not a compile each
def _rounded_divide(a, b, rounding_mode: str, dtype):
    if jnp.issubdtype(dtype, jnp.integer) or dtype == np.bool_:
        _check_divisor(b, f"div(rounding_mode={rounding_mode!r})")
        if dtype == np.bool_:
            a, b = a.astype(np.uint8), b.astype(np.uint8)
        out = jax.lax.div(a, b) if rounding_mode == "trunc" else jnp.floor_divide(a, b)
        return out.astype(dtype)
    out = jnp.trunc(a / b) if rounding_mode == "trunc" else _floor_divide_float(a, b)
    return jax.lax.stop_gradient(out)


# d/dother is torch's -(a / b) / b, finite where JAX's -a·b⁻² overflows (b = 1e-300)
_divide = jax.custom_jvp(jnp.divide)  # operands broadcast to one shape
_divide.defjvps(lambda da, out, a, b: da / b, lambda db, out, a, b: -db * (out / b))


@register("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div(input, other, *, rounding_mode=None):
    """``torch.div``: true division (integers divide as the default float) unless
    ``rounding_mode`` is ``'trunc'`` or ``'floor'``, which keep the promoted dtype
    and have gradient 0."""
    if rounding_mode not in (None, "trunc", "floor"):
        raise ValueError(
            f"div: `rounding_mode` (={rounding_mode!r}) must be None, 'trunc' or 'floor'."
        )
    (input, other), dtype = promote(input, other)
    if rounding_mode is None:
        return _divide(*jnp.broadcast_arrays(_as_float(input), _as_float(other)))
    return _rounded_divide(input, other, rounding_mode, dtype)


@register("aten.fmod.Tensor", "aten.fmod.Scalar")
def fmod(input, other):
    """``torch.fmod``: the remainder takes the sign of the dividend."""
    (input, other), dtype = promote(input, other)
    if not is_floating(dtype):
        _check_divisor(other, "fmod")
    return jnp.fmod(input, other)


_remainder = jax.custom_jvp(jnp.remainder)  # operands broadcast to one shape
_remainder.defjvps(lambda da, out, a, b: da, lambda db, out, a, b: -db * _floor_divide_float(a, b))


@register("aten.remainder.Tensor", "aten.remainder.Scalar")
@compiled
def remainder(input, other):
    """``torch.remainder``: the remainder takes the sign of the divisor."""
    (input, other), dtype = promote(input, other)
    if not is_floating(dtype):
        _check_divisor(other, "remainder")
        return jnp.remainder(input, other)
    return _remainder(*jnp.broadcast_arrays(input, other))


# ------------------------------------------------------------------------ pow
_pow = jax.custom_jvp(jnp.power)  # operands broadcast to one shape
_pow.defjvps(
    lambda dbase, result, base, exponent: (
        dbase * jnp.where(exponent == 0, 0, exponent * jnp.power(base, exponent - 1))
    ),
    lambda dexponent, result, base, exponent: (
        dexponent * jnp.where((base == 0) & (exponent >= 0), 0, result * jnp.log(base))
    ),
)


def _integer_power(base, exponent):
    values = np.asarray(exponent) if not is_tensor(exponent) else concrete_or_none(exponent)
    if values is not None and np.any(values < 0):
        raise ValueError(
            "pow: integers to negative integer powers are not allowed (torch "
            f"refuses them); got the exponent {values.min()}."
        )
    if not is_tensor(exponent):
        return jax.lax.integer_pow(base, int(exponent))
    return jnp.power(base, exponent)


@register("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar")
@compiled
def pow(input, exponent):
    """``torch.pow`` (``input`` or ``exponent`` may be a number): integers stay
    integers (a negative integer exponent is refused, as torch does)."""
    dtype = canonical(result_type(input, exponent))
    if not is_floating(dtype):
        base = jnp.asarray(input, dtype)
        if is_tensor(exponent):
            exponent = exponent.astype(dtype)
        return _integer_power(base, exponent).astype(dtype)
    if not is_tensor(exponent) and exponent in (0.5, -0.5):
        return (_sqrt_power if exponent > 0 else _rsqrt_power)(jnp.asarray(input, dtype))
    (input, exponent), _ = promote(input, exponent)
    return _pow(*jnp.broadcast_arrays(input, exponent))


# torch's kernel for a tensor to the number ±0.5 is sqrt / rsqrt (so (-0.0) ** 0.5 is -0.0
# and (-0.0) ** -0.5 is -inf, where IEEE pow gives 0 and +inf), and its backward is
# exponent · self ** (exponent - 1) through the same kernel: 0.5 · rsqrt(x), -0.5 · x ** -1.5
_sqrt_power = jax.custom_jvp(jnp.sqrt)
_sqrt_power.defjvps(lambda dx, out, x: dx * (0.5 * jax.lax.rsqrt(x)))
_rsqrt_power = jax.custom_jvp(jax.lax.rsqrt)
_rsqrt_power.defjvps(lambda dx, out, x: dx * (-0.5 * jnp.power(x, -1.5)))


# ----------------------------------------------------------------- comparisons
def _comparison(compare):
    def op(input, other):
        (input, other), _ = promote(input, other)
        return compare(input, other)

    op.__name__ = compare.__name__
    op.__doc__ = f"``torch.{compare.__name__}`` after torch's promotion; a bool tensor."
    return op


for _name, _compare in (
    ("eq", jnp.equal),
    ("ne", jnp.not_equal),
    ("lt", jnp.less),
    ("le", jnp.less_equal),
    ("gt", jnp.greater),
    ("ge", jnp.greater_equal),
):
    register(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_comparison(_compare))


def _share(loses, tie):
    """torch's weight of one operand of ``maximum``/``minimum``: 0 where it loses, ½ on
    a tie, else 1 (both operands 1 where one is NaN: neither loses nor ties)."""
    return jnp.where(loses, 0.0, jnp.where(tie, 0.5, 1.0))


_maximum = jax.custom_jvp(jnp.maximum)  # operands broadcast to one shape
_maximum.defjvps(
    lambda da, out, a, b: da * _share(a < b, a == b).astype(da.dtype),
    lambda db, out, a, b: db * _share(a > b, a == b).astype(db.dtype),
)
_minimum = jax.custom_jvp(jnp.minimum)
_minimum.defjvps(
    lambda da, out, a, b: da * _share(a > b, a == b).astype(da.dtype),
    lambda db, out, a, b: db * _share(a < b, a == b).astype(db.dtype),
)


def _extremum(pick, input, other):
    (input, other), _ = promote(input, other)
    return pick(*jnp.broadcast_arrays(input, other))


@register("aten.maximum.default")
def maximum(input, other):
    """NaN propagates; ties split the gradient ½/½, as torch's ``maximum``."""
    return _extremum(_maximum, input, other)


@register("aten.minimum.default")
def minimum(input, other):
    return _extremum(_minimum, input, other)


@register("aten.where.self")
def where(condition, input, other):
    (input, other), _ = promote(input, other)
    return jnp.where(condition.astype(bool), input, other)


# ----------------------------------------------------------------------- logic
def _logical(combine):
    def op(input, other):
        return combine(input.astype(bool), other.astype(bool))

    op.__name__ = combine.__name__
    return op


for _name, _combine in (
    ("logical_and", jnp.logical_and),
    ("logical_or", jnp.logical_or),
    ("logical_xor", jnp.logical_xor),
):
    register(f"aten.{_name}.default")(_logical(_combine))


@register("aten.logical_not.default")
def logical_not(input):
    return jnp.logical_not(input.astype(bool))


def _bitwise(combine):
    def op(input, other):
        (input, other), dtype = promote(input, other)
        if is_floating(dtype):
            raise TypeError(f"{combine.__name__}: takes integer or bool tensors, got {dtype}.")
        return combine(input, other)

    op.__name__ = combine.__name__
    return op


for _name, _combine in (
    ("bitwise_and", jnp.bitwise_and),
    ("bitwise_or", jnp.bitwise_or),
    ("bitwise_xor", jnp.bitwise_xor),
):
    register(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_bitwise(_combine))


@register("aten.bitwise_not.default")
def bitwise_not(input):
    if is_floating(input.dtype):
        raise TypeError(f"bitwise_not: takes integer or bool tensors, got {input.dtype}.")
    return jnp.invert(input)


# ------------------------------------------------------------ math functions
_rsqrt = jax.custom_jvp(jax.lax.rsqrt)
_rsqrt.defjvps(lambda dx, out, x: dx * (-0.5 * out * out * out))  # torch's: ±inf right at ±0


_FLOAT_FUNCTIONS = {
    "acos": jnp.arccos,
    "acosh": jnp.arccosh,
    "asin": jnp.arcsin,
    "asinh": jnp.arcsinh,
    "atan": jnp.arctan,
    "atanh": jnp.arctanh,
    "cos": jnp.cos,
    "cosh": jnp.cosh,
    "erf": jax.scipy.special.erf,
    "erfinv": jax.scipy.special.erfinv,
    "exp": jnp.exp,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "log2": jnp.log2,
    "reciprocal": jnp.reciprocal,
    "rsqrt": _rsqrt,
    "sigmoid": jax.nn.sigmoid,
    "sin": jnp.sin,
    "sinh": jnp.sinh,
    "sqrt": jnp.sqrt,
    "tan": jnp.tan,
    "tanh": jnp.tanh,
}


def _float_function(name, fn):
    def op(input):
        return fn(_as_float(input))

    op.__name__ = name
    op.__doc__ = f"``torch.{name}``: integer and bool inputs give the default float."
    return op


for _name, _fn in _FLOAT_FUNCTIONS.items():
    register(f"aten.{_name}.default")(_float_function(_name, _fn))


def _atan2_scale(a, b):
    """torch's ``1 / (a² + b²)``, 0 where that sum is 0 (or underflows)."""
    denominator = a * a + b * b
    return jnp.where(denominator == 0, 0, 1 / denominator)


_atan2 = jax.custom_jvp(jnp.arctan2)  # operands broadcast to one shape
_atan2.defjvps(
    lambda da, out, a, b: da * b * _atan2_scale(a, b),
    lambda db, out, a, b: db * -a * _atan2_scale(a, b),
)


@register("aten.atan2.default")
def atan2(input, other):
    (input, other), _ = promote(input, other)
    return _atan2(*jnp.broadcast_arrays(_as_float(input), _as_float(other)))


def _xlogy_value(x, y):
    """torch's xlogy: NaN where ``y`` is NaN, else 0 where ``x == 0``, else x·log(y)."""
    safe = jnp.where(x == 0, 1, y)  # no log(0)·0 in the branch the where drops
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log(safe)))


_xlogy = jax.custom_jvp(_xlogy_value)  # operands broadcast to one shape
# torch's derivatives: d/dx log(y), 0 where x == 0 and y <= 0 (the directional derivative
# along x = 0, pytorch#80770); d/dy x / y. Autodiff of the where gives d/dx 0 at x == 0.
_xlogy.defjvps(
    lambda dx, out, x, y: (
        dx * jnp.where((x == 0) & (y <= 0), 0, jnp.log(jnp.where((x == 0) & (y <= 0), 1, y)))
    ),
    lambda dy, out, x, y: dy * x / y,
)


@register("aten.xlogy.Tensor")
def xlogy(input, other):
    """``torch.xlogy``, kept whole by ``export.decompositions``: decomposed (where(x == 0,
    0, x·log(y))) its gradient to ``x`` is 0 at ``x == 0``, where torch's is log(y)."""
    (input, other), _ = promote(input, other)
    return _xlogy(*jnp.broadcast_arrays(_as_float(input), _as_float(other)))


@register("aten.sinc.default")
def sinc(input):
    """``sin(πx)/(πx)``, 1 at 0, kept whole by ``export.decompositions``: decomposed (a
    where over the quotient) its gradient at 0 is 0·inf = NaN, where torch's is 0
    (``jnp.sinc``'s own derivative at 0)."""
    return jnp.sinc(_as_float(input))


@register("aten.hardswish.default")
def hardswish(input):
    """``x·clamp(x + 3, 0, 6)/6``, kept whole by ``export.decompositions``: torch's
    backward is 0 for x ≤ −3 and 1 for x ≥ 3 (the decomposed clamp passes its bounds:
    −0.5 at −3, 1.5 at 3)."""
    return functional.hardswish(input)


@jax.custom_jvp
def _abs(x):
    return jnp.abs(x)


_abs.defjvps(lambda dx, result, x: dx * torch_sign(x))


@register("aten.abs.default")
def abs(input):
    """``torch.abs``: gradient ``sign(x)``, 0 at 0 and NaN."""
    if input.dtype == np.bool_:
        return input
    return _abs(input) if is_floating(input.dtype) else jnp.abs(input)


def torch_sign(x):
    """torch's ``(0 < x) - (x < 0)``: 0 for NaN (JAX's sign: NaN)."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


@register("aten.sign.default")
def sign(input):
    return input if input.dtype == np.bool_ else torch_sign(input)


def _step(fn):
    def op(input):
        if not is_floating(input.dtype):
            return input  # torch: the identity on integers
        return fn(input)

    op.__name__ = fn.__name__
    return op


for _name, _fn in (
    ("ceil", jnp.ceil),
    ("floor", jnp.floor),
    ("trunc", jnp.trunc),
    ("round", jnp.round),
):  # jnp.round: half to even, as torch
    register(f"aten.{_name}.default")(_step(_fn))


@register("aten.round.decimals")
def round_decimals(input, *, decimals=0):
    """``torch.round(x, decimals=d)``: ``nearbyint(x·10ᵈ) / 10ᵈ`` (``x / 10⁻ᵈ`` first
    for negative ``d``), half to even; gradient 0."""
    if not is_floating(input.dtype):
        return input
    scale = jnp.asarray(10.0 ** builtins.abs(decimals), input.dtype)
    if decimals >= 0:
        return jnp.round(input * scale) / scale
    return jnp.round(input / scale) * scale


@register("aten.isnan.default")
def isnan(input):
    return jnp.isnan(input)


@register("aten.isinf.default")
def isinf(input):
    return jnp.isinf(input)


# ---------------------------------------------------------------- activations
@jax.custom_jvp
def _relu(x):
    return jnp.maximum(x, jnp.zeros((), x.dtype))


_relu.defjvps(lambda dx, out, x: jnp.where(out <= 0, 0, dx))  # torch's threshold_backward


@register("aten.relu.default")
def relu(input):
    """Gradient 0 where the result is ≤ 0, passed where it is NaN, as torch's."""
    return _relu(input)


@register("aten.leaky_relu.default")
def leaky_relu(input, negative_slope=0.01):
    return functional.leaky_relu(input, negative_slope)


@register("aten.gelu.default")
@compiled
def gelu(input, *, approximate="none"):
    return functional.gelu(input, approximate)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def _elu(x, alpha, scale, input_scale):
    negative = (alpha * scale) * jnp.expm1(jnp.where(x > 0, 0, x) * input_scale)
    return jnp.where(x > 0, x * scale, negative)


@_elu.defjvp
def _elu_jvp(alpha, scale, input_scale, primals, tangents):
    (x,), (dx,) = primals, tangents
    negative = input_scale * (alpha * scale) * jnp.exp(jnp.where(x > 0, 0, x) * input_scale)
    # torch's elu_backward: the exponential branch on x <= 0 only (NaN takes `scale`)
    slope = jnp.where(x <= 0, negative.astype(x.dtype), jnp.asarray(scale, x.dtype))
    return _elu(x, alpha, scale, input_scale), dx * slope


@register("aten.elu.default")
@compiled
def elu(input, alpha=1, scale=1, input_scale=1):
    """``scale·x`` for ``x > 0``, else ``scale·alpha·expm1(input_scale·x)`` (SELU is
    ``elu`` with its two constants)."""
    return _elu(input, float(alpha), float(scale), float(input_scale))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _hardtanh(x, low, high):
    return jnp.minimum(jnp.maximum(x, low), high)


@_hardtanh.defjvp
def _hardtanh_jvp(low, high, primals, tangents):
    (x,), (dx,) = primals, tangents
    inside = (x > low) & (x < high)
    return _hardtanh(x, low, high), jnp.where(inside, dx, jnp.zeros_like(dx))


@register("aten.hardtanh.default")
@compiled
def hardtanh(input, min_val=-1, max_val=1):
    """``clamp(x, min_val, max_val)``; gradient 0 at both bounds (``relu6`` is
    ``hardtanh(0, 6)``)."""
    if not is_floating(input.dtype):
        return jnp.clip(input, min_val, max_val).astype(input.dtype)
    return _hardtanh(input, min_val, max_val)


@register("aten.hardsigmoid.default")
def hardsigmoid(input):
    """``min(max(x + 3, 0), 6) / 6``, kept whole by ``export.decompositions``: torch's
    backward multiplies by float32(1/6) = 0.16666667163… in every dtype, which the
    decomposed form (add, clamp, div) would not (3e-8 relative in float64)."""
    return functional.hardsigmoid(input)


# ---------------------------------------------------------------------- clamp
@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _clamp(x, low, high, has_low, has_high):
    if has_low:
        x = jnp.maximum(x, low)
    if has_high:
        x = jnp.minimum(x, high)
    return x


@_clamp.defjvp
def _clamp_jvp(has_low, has_high, primals, tangents):
    (x, low, high), (dx, dlow, dhigh) = primals, tangents
    out = _clamp(x, low, high, has_low, has_high)
    zero = jnp.zeros(out.shape, out.dtype)
    passes = jnp.ones(out.shape, bool)
    if has_low:
        passes = passes & (x >= low)
    if has_high:
        passes = passes & (x <= high)
    tangent = jnp.where(passes, dx, zero)
    if has_low:
        below = (x < low) & (low < high) if has_high else x < low
        tangent = tangent + jnp.where(below, dlow, zero)
    if has_high:
        above = (x > high) | (high < low) if has_low else x > high
        tangent = tangent + jnp.where(above, dhigh, zero)
    return out, tangent


@register("aten.clamp.default", "aten.clamp.Tensor")
def clamp(input, min=None, max=None):
    """``min(max(x, min), max)`` (``max`` wins where ``min > max``); the gradient passes
    to ``x`` on ``min ≤ x ≤ max``, the bounds included, as torch's ``clamp``."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of `min` and `max` must be given.")
    (input, low, high), dtype = promote(input, min, max)
    if not is_floating(dtype):
        low_clamped = input if low is None else jnp.maximum(input, low)
        return low_clamped if high is None else jnp.minimum(low_clamped, high)
    shape = jnp.broadcast_shapes(*(np.shape(v) for v in (input, low, high) if v is not None))
    fill = jnp.zeros(shape, dtype)
    return _clamp(
        jnp.broadcast_to(input, shape),
        fill if low is None else jnp.broadcast_to(low, shape),
        fill if high is None else jnp.broadcast_to(high, shape),
        low is not None,
        high is not None,
    )


# ------------------------------------------------------------- casts, copies
@register("aten._to_copy.default")
def to_copy(
    input,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    """``tensor.to(dtype)``: a cast (devices, layouts and memory formats are not
    jaxgrad's: one device per array, no strides)."""
    if dtype is None:
        return input
    return input.astype(canonical(dtype))


@register("aten.clone.default")
def clone(input, *, memory_format=None):
    return input


@register("aten.alias.default", "aten.lift_fresh_copy.default")
def alias(input):
    return input


@register("aten.copy.default")
def copy(input, src, non_blocking=False):
    """``self.copy_(src)`` made functional: ``src`` broadcast to ``self``'s shape and
    cast to its dtype (the result carries no gradient to ``self``)."""
    return jnp.broadcast_to(src.astype(input.dtype), input.shape)
