"""What the explorer can open: the lessons' worked examples, or a function the user names.

``EXAMPLES`` maps the keys of ``scripts/hand_gradients.py`` (``tiny_relu``,
``sigmoid_neuron``…, ``two_layer``: the 6×3 batch network, its parameters keyed like
torch's ``state_dict``) and ``neuron`` (lesson 001's two-input neuron, the graph its
interactive explorer draws) to a function and its starting point.
``load_function("package.module:function")`` imports a user's function and
``parse_arguments(["w=0.5", "x=[1, 2]"])`` reads its example arguments.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
from collections.abc import Callable

import numpy as np

from jaxgrad.graph import examples as graph_examples
from jaxgrad.lessons import EXAMPLES as LESSON_EXAMPLES
from jaxgrad.lessons import two_layer


@dataclasses.dataclass(frozen=True)
class Explorable:
    key: str
    title: str
    fn: Callable  # positional parameters named like the lesson's quantities
    point: dict  # name -> starting value


def _named(example) -> Callable:
    """``example.loss(params, data)`` as a function of one named scalar per quantity."""
    names = list(example.params) + list(example.data)

    def loss(*values):
        point = dict(zip(names, values))
        return example.loss(
            {k: point[k] for k in example.params}, {k: point[k] for k in example.data}
        )[0]

    loss.__name__ = example.key
    loss.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    )
    return loss


EXAMPLES = {
    ex.key: Explorable(ex.key, f"{ex.number}. {ex.title}", _named(ex), dict(ex.params, **ex.data))
    for ex in LESSON_EXAMPLES
}
EXAMPLES["neuron"] = Explorable(
    "neuron",
    "lesson 001's neuron: L = (σ(w1·x1 + w2·x2 + b) − y)²",
    graph_examples.seed_neuron,
    dict(graph_examples.SEED_NEURON_ARGS),
)


def _two_layer_loss(params, X, y):
    """The lesson's binary cross-entropy written out, −mean(y log p + (1−y) log(1−p)):
    the page shows every elementary step (``jaxgrad.losses.binary_cross_entropy``
    adds torch's range check and hand-written backward, which the page does not run).
    Equal to it for every p strictly between 0 and 1."""
    import jax.numpy as jnp

    p = two_layer.jax_model().apply(params, X)
    return -jnp.mean(y * jnp.log(p) + (1 - y) * jnp.log(1 - p))


def _two_layer() -> Explorable:
    data = two_layer.lesson_data()
    params = {k: np.asarray(v) for k, v in two_layer.torch_state_dict(data).items()}
    return Explorable(
        "two_layer",
        "7. two-layer network X(6×3) → tanh(4) → sigmoid(1), binary cross-entropy",
        _two_layer_loss,
        {"params": params, "X": data["X"], "y": data["y"]},
    )


EXAMPLES["two_layer"] = _two_layer()


def load_function(spec: str) -> Callable:
    """The function named ``"package.module:function"``; ValueError if there is none."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"`function` (={spec!r}) must look like package.module:function.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"`function` (={spec!r}): cannot import {module_name!r}: {exc}") from exc
    fn = module
    for part in attribute.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"`function` (={spec!r}): {module_name!r} has no {attribute!r}.")
    if not callable(fn):
        raise ValueError(f"`function` (={spec!r}) is a {type(fn).__name__}, not a function.")
    return fn


def parse_arguments(texts) -> dict:
    """``["w=0.5", "x=[1, 2]"]`` -> ``{"w": 0.5, "x": [1.0, 2.0]}`` (finite numbers only)."""
    point = {}
    for text in texts:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ValueError(f"argument {text!r} must look like NAME=NUMBER or NAME=[N, N, …].")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = None
        values = value if isinstance(value, list) else [value]
        if not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        ):
            raise ValueError(
                f"argument {text!r}: {raw!r} is not a finite number or a non-empty list of them."
            )
        if name in point:
            raise ValueError(f"argument {name!r} is given twice.")
        point[name] = [float(v) for v in value] if isinstance(value, list) else float(value)
    return point


def bind(fn: Callable, point: dict) -> list:
    """``point``'s values in the order of ``fn``'s positional parameters; ValueError on a
    missing or unknown name."""
    try:
        parameters = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot read the parameters of {fn!r}: {exc}") from exc
    names = [p.name for p in parameters]
    required = [p.name for p in parameters if p.default is inspect.Parameter.empty]
    unknown = [n for n in point if n not in names]
    missing = [n for n in required if n not in point]
    if unknown or missing:
        raise ValueError(
            f"the arguments must name {getattr(fn, '__name__', 'fn')}'s parameters "
            f"({', '.join(names)}): "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unknown {', '.join(unknown)}" if unknown else "",
                )
                if part
            )
            + "."
        )
    return [point[n] for n in names if n in point]


__all__ = ["EXAMPLES", "Explorable", "bind", "load_function", "parse_arguments"]
