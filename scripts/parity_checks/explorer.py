"""The explorer page's torch column: every grad_fn's output against JAX's step, per node.

For an example the explorer opens, ``torchref.replay`` runs its exported graph through
torch's autograd and records what each ``grad_fn`` passed to each input; JAX's
``step_through`` gives the same (node, input) products. Both, and every input's
gradient, are compared at the float64 tier.
"""

from __future__ import annotations

import functools

import numpy as np

import jaxgrad
from jaxgrad.html import export_graph
from jaxgrad.html.examples import EXAMPLES, bind
from parity_checks.harness import Check
from torchref.replay import replay


def _keyed(steps, field: str) -> dict:
    """``{"grad_fn n1 -> n0 #k": value}``; ``#k`` tells apart the two inputs of ``w * w``."""
    keyed, seen = {}, {}
    for step in steps:
        pair = (step["node"], step["input"])
        seen[pair] = seen.get(pair, 0) + 1
        keyed[f"grad_fn {pair[0]} -> {pair[1]} #{seen[pair]}"] = np.asarray(step[field], np.float64)
    return keyed


def explorer_parity(key: str):
    example = EXAMPLES[key]
    graph = export_graph(example.fn, *bind(example.fn, example.point), title=example.title)
    torch_side = replay(graph)
    reference = _keyed(torch_side["passed"], "value")
    reference.update(
        {f"d{label}": np.asarray(v, np.float64) for label, v in torch_side["grads"].items()}
    )
    candidate = _keyed(graph["jax"]["steps"], "gradient")
    candidate.update(
        {f"d{label}": np.asarray(v, np.float64) for label, v in graph["jax"]["grads"].items()}
    )
    return jaxgrad.parity.compare(reference, candidate, name=f"explorer {key}: per node")


CHECKS = [
    Check(
        name=f"explorer {key}: grad_fn per node",
        dtype="float64",
        area="explorer",
        run=functools.partial(explorer_parity, key),
    )
    for key in ("tiny_relu", "neuron", "square_plus", "two_layer")
]
