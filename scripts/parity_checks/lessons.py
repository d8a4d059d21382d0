"""The lessons' worked examples: jax.grad against torch backward(), in float64."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
import torchref
from jaxgrad.lessons import EXAMPLES, jax_result, two_layer
from parity_checks.harness import Check


def _scalar_example(example):
    with jax.enable_x64(True):
        candidate = jax_result(example, jnp.float64)
    reference = torchref.lessons.EXAMPLES[example.key](
        example.params, example.data, dtype=torch.float64
    )
    shared = {k: np.float64(v) for k, v in reference.items() if k in candidate}
    return jaxgrad.parity.compare(
        shared, {k: np.float64(candidate[k]) for k in shared}, name=example.title
    )


def _two_layer_gradients():
    data = two_layer.lesson_data()
    reference = torchref.lessons.two_layer_gradients(
        two_layer.torch_state_dict(data), data["X"], data["y"]
    )
    with jax.enable_x64(True):
        candidate = two_layer.jax_gradients(data)
    return jaxgrad.parity.compare(reference, candidate, name="two-layer gradients")


def _two_layer_training():
    data = two_layer.lesson_data()
    reference = torchref.lessons.two_layer_train(
        two_layer.torch_state_dict(data), data["X"], data["y"]
    )
    with jax.enable_x64(True):
        candidate = two_layer.jax_train(data)
    return jaxgrad.parity.compare(
        np.array(reference),
        np.array(candidate),
        name="two-layer 400-step trajectory (step, loss, accuracy)",
    )


CHECKS = [
    Check(
        name=f"lesson example {ex.number}: {ex.key}",
        dtype="float64",
        area="lessons",
        run=functools.partial(_scalar_example, ex),
    )
    for ex in EXAMPLES
] + [
    Check(
        name="lesson example 7: two-layer gradients",
        dtype="float64",
        area="lessons",
        run=_two_layer_gradients,
    ),
    Check(
        name="lesson example 7: 400 GD steps",
        dtype="float64",
        area="lessons",
        run=_two_layer_training,
    ),
]
