"""PyTorch's default initialisation distributions, as pure functions of a key.

``nn.Linear`` (and every torch layer built on ``reset_parameters``) draws
``weight ~ kaiming_uniform(a=√5)``, which works out to ``U(-1/√fan_in, 1/√fan_in)``,
and ``bias ~ U(-1/√fan_in, 1/√fan_in)``. Flax and stax default to lecun_normal and
zero bias instead — a porting pitfall (docs/library.md, "Porting pitfalls").
"""

from __future__ import annotations

import math

import jax


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """torch.nn.init.calculate_gain for the nonlinearities jaxgrad supports."""
    if nonlinearity in ("linear", "identity", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    raise ValueError(
        f"`nonlinearity` (={nonlinearity!r}) must be one of 'linear', 'identity', "
        "'sigmoid', 'tanh', 'relu', 'leaky_relu'."
    )


def kaiming_uniform(
    key, shape, dtype, *, a: float = 0.0, fan_in: int, nonlinearity: str = "leaky_relu"
):
    """``torch.nn.init.kaiming_uniform_``: ``U(-b, b)`` with ``b = gain·√(3/fan_in)``."""
    gain = calculate_gain(nonlinearity, a)
    bound = gain * math.sqrt(3.0 / fan_in)
    return jax.random.uniform(key, shape, dtype, minval=-bound, maxval=bound)


def fan_in_uniform(key, shape, dtype, *, fan_in: int):
    """Torch's default bias: ``U(-1/√fan_in, 1/√fan_in)`` (0 bound when fan_in is 0)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return jax.random.uniform(key, shape, dtype, minval=-bound, maxval=bound)


def torch_default_weight(key, shape, dtype, *, fan_in: int):
    """The weight init of ``nn.Linear``/``nn.Conv*``: kaiming_uniform with a=√5."""
    return kaiming_uniform(key, shape, dtype, a=math.sqrt(5.0), fan_in=fan_in)


def fans(shape) -> tuple[int, int]:
    """torch's ``_calculate_fan_in_and_fan_out``: ``(size(1)·rf, size(0)·rf)``, ``rf`` the
    product of the dims after the second."""
    receptive = math.prod(shape[2:]) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def xavier_uniform(key, shape, dtype, *, gain: float = 1.0):
    """``torch.nn.init.xavier_uniform_``: ``U(-b, b)``, ``b = gain·√(6/(fan_in+fan_out))``."""
    fan_in, fan_out = fans(shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return jax.random.uniform(key, shape, dtype, minval=-bound, maxval=bound)


def xavier_normal(key, shape, dtype, *, gain: float = 1.0):
    """``torch.nn.init.xavier_normal_``: ``N(0, gain²·2/(fan_in+fan_out))``."""
    fan_in, fan_out = fans(shape)
    return gain * math.sqrt(2.0 / (fan_in + fan_out)) * jax.random.normal(key, shape, dtype)


__all__ = [
    "calculate_gain",
    "kaiming_uniform",
    "fan_in_uniform",
    "torch_default_weight",
    "xavier_uniform",
    "xavier_normal",
]
