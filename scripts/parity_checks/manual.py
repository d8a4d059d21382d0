"""Every hand-written backward of ``jaxgrad.manual`` against torch autograd, float64.

The same numpy inputs go to ``jaxgrad.manual.FUNCTIONS[name]`` (jitted VJP of a
cotangent of ones) and to ``torchref.manual.REFERENCES[name]`` (``sum().backward()``);
outputs and every input gradient are compared at the float64 tier.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad import manual
from jaxgrad.parity import ParityReport, compare
from parity_checks.harness import Check, jax_precision
from torchref.manual import forward_backward


def hand_vjp(fn, inputs):
    """Output of ``fn`` and its VJP of ones for each floating input (jit-compiled)."""
    positions = [i for i, x in enumerate(inputs) if x.dtype.kind == "f"]

    @jax.jit
    def run(inputs):
        def of_floats(*floats):
            full = list(inputs)
            for i, value in zip(positions, floats):
                full[i] = value
            return fn(*full)

        out, vjp_fn = jax.vjp(of_floats, *[inputs[i] for i in positions])
        return out, list(vjp_fn(jnp.ones_like(out)))

    return run([jnp.asarray(x) for x in inputs])


def manual_vs_torch(name: str, rng: np.random.Generator) -> ParityReport:
    inputs = manual.example_inputs(name, rng)
    reference = forward_backward(name, *inputs)
    with jax_precision("float64"):
        out, grads = hand_vjp(manual.FUNCTIONS[name], inputs)
        return compare(
            {"output": reference["output"],
             "grads": [g for g in reference["grads"] if g is not None]},
            {"output": out, "grads": grads},
            name=f"manual.{name} vs torch autograd",
        )


CHECKS = [
    Check(name=f"manual {name} vs torch", dtype="float64", area="manual",
          run=functools.partial(lambda n: manual_vs_torch(n, np.random.default_rng(0)), name))
    for name in manual.FUNCTIONS
]
