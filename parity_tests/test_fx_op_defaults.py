"""Traced torch functions whose defaults and modes differ from JAX's nearest function.

``torch.flatten(x)`` without arguments flattens *everything* (``start_dim=0``), unlike
``nn.Flatten`` (``start_dim=1``); ``torch.div(..., rounding_mode="trunc")`` rounds
toward zero, ``"floor"`` toward minus infinity (``jnp.floor_divide``). Each traced
model runs in both frameworks, float64, compared at the float64 tier; the inputs have
negative quotients with fractional parts, where trunc and floor differ.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from jaxgrad import nn
from jaxgrad.parity import assert_parity


class _Defaults(torch.nn.Module):
    def forward(self, x):
        return (
            torch.flatten(x),
            x.flatten(),
            torch.flatten(x, 1),
            torch.div(x, -0.7, rounding_mode="trunc"),
            x.div(0.7, rounding_mode="trunc"),
            torch.div(x, 0.7, rounding_mode="floor"),
        )


def test_flatten_without_arguments_and_div_rounding_modes_match_torch(x64):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)) * 3
    module = _Defaults()
    expected = module(torch.from_numpy(x))
    assert [tuple(e.shape) for e in expected[:3]] == [(24,), (24,), (2, 12)]
    quotient = torch.from_numpy(x) / -0.7  # the case tells trunc from floor:
    assert torch.equal(expected[3], torch.trunc(quotient))
    assert not torch.equal(expected[3], torch.floor(quotient))
    model, params = nn.from_torch(module)
    assert_parity(expected, jax.jit(model.apply)(params, jnp.asarray(x)))
