"""Every hand-written backward of ``jaxgrad.manual`` against torch autograd, float64.

The same numpy inputs go to ``jaxgrad.manual.FUNCTIONS[name]`` (jitted VJP of a
cotangent of ones) and to ``torchref.manual.REFERENCES[name]`` (``sum().backward()``);
outputs and every input gradient are compared at the float64 tier.
"""

from __future__ import annotations

import functools

import numpy as np

from jaxgrad import manual
from jaxgrad.parity import ParityReport, compare
from parity_checks.harness import Check, jax_precision
from torchref.manual import forward_backward


def manual_vs_torch(name: str, rng: np.random.Generator) -> ParityReport:
    inputs = manual.example_inputs(name, rng)
    reference = forward_backward(name, *inputs)
    with jax_precision("float64"):
        out, grads = manual.value_and_vjp(manual.FUNCTIONS[name], inputs, jit=True)
        return compare(
            {
                "output": reference["output"],
                "grads": [g for g in reference["grads"] if g is not None],
            },
            {"output": out, "grads": grads},
            name=f"manual.{name} vs torch autograd",
        )


CHECKS = [
    Check(
        name=f"manual {name} vs torch",
        dtype="float64",
        area="manual",
        run=functools.partial(lambda n: manual_vs_torch(n, np.random.default_rng(0)), name),
    )
    for name in manual.FUNCTIONS
]
