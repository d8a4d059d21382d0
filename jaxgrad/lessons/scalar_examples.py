"""The lessons' scalar worked examples, by hand and with ``jax.grad``.

Each ``ScalarExample`` carries the numbers a lesson prints (``expected``: name →
(value, decimals printed)), a hand computation that applies the chain rule one local
derivative at a time, and a JAX loss differentiated by ``jax.grad``. The PyTorch
versions live in ``torchref.lessons``; ``scripts/hand_gradients.py`` prints all three.

Result dicts use these names: ``"L"`` (the loss or output), ``"dL/d<param>"`` for
each gradient, intermediate values by name (``"a"``), and ``"<param> after step"``
for one SGD step where the lesson takes one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxgrad.lessons.hand import Working

# The lessons by number and title (README, "The lessons"); they are not in the repository.
LESSON_000 = '000 "Computational Graphs" §2 (tiny ReLU network)'
LESSON_001 = '001 "Backpropagation and the Computational Graph" (one neuron, worked through)'
LESSON_002 = '002 "Backpropagation" (the chain rule, worked by hand)'
LESSON_004 = '004 "Forward Pass and Backpropagation"'


@dataclasses.dataclass(frozen=True)
class ScalarExample:
    """One worked example.

    Attributes:
      number: the example's number in the issue and the script (``"1"``, ``"1b"``).
      key: short identifier (``"tiny_relu"``).
      title: what the lesson computes.
      source: the lesson (file and section) the numbers come from.
      params: the differentiated scalars, by name.
      data: the constants (inputs, targets).
      loss: ``loss(params, data) -> (scalar, aux dict)`` written with jax.numpy.
      by_hand: ``by_hand(params, data) -> Working``: the chain rule, step by step.
      expected: the lesson's printed numbers: name → (value, decimals printed).
      lr: learning rate of the one SGD step the lesson takes, if any.
    """

    number: str
    key: str
    title: str
    source: str
    params: dict
    data: dict
    loss: Callable
    by_hand: Callable
    expected: dict
    lr: float | None = None


def jax_result(example: ScalarExample, dtype=jnp.float32) -> dict:
    """Every named quantity of ``example`` computed with JAX: forward, ``jax.grad``, step."""
    params = {k: jnp.asarray(v, dtype) for k, v in example.params.items()}
    data = {k: jnp.asarray(v, dtype) for k, v in example.data.items()}
    (loss, aux), grads = jax.value_and_grad(example.loss, has_aux=True)(params, data)
    result = {"L": float(loss)}
    result.update({k: float(v) for k, v in aux.items()})
    result.update({f"dL/d{k}": float(v) for k, v in grads.items()})
    if example.lr is not None:
        result.update({f"{k} after step": float(params[k] - example.lr * grads[k]) for k in params})
    return result


def hand_result(example: ScalarExample) -> tuple[dict, list]:
    """``(values, steps)`` of the hand computation, with the SGD step if the lesson takes one."""
    working = example.by_hand(dict(example.params), dict(example.data))
    if example.lr is not None:
        for k, v in example.params.items():
            working.let(
                f"{k} after step",
                f"{k} − lr · dL/d{k}",
                v - example.lr * working.values[f"dL/d{k}"],
            )
    return working.values, working.steps


# --- 1. One input, one hidden ReLU neuron, one output, squared loss -----------------


def _tiny_relu_loss(p, d):
    z1 = p["w1"] * d["x"] + p["b1"]
    a1 = jax.nn.relu(z1)
    z2 = p["w2"] * a1 + p["b2"]
    return (z2 - d["y"]) ** 2, {}


def _tiny_relu_by_hand(p, d) -> Working:
    w = Working()
    z1 = w.let("z1", "w1·x + b1", p["w1"] * d["x"] + p["b1"])
    a1 = w.let("a1", "relu(z1)", max(z1, 0.0))
    z2 = w.let("z2", "w2·a1 + b2", p["w2"] * a1 + p["b2"])
    w.let("L", "(z2 − y)²", (z2 - d["y"]) ** 2)
    dz2 = w.step("dL/dz2", "2(z2 − y)", 2.0, z2 - d["y"])
    w.step("dL/dw2", "dL/dz2 · a1", dz2, a1)
    w.step("dL/db2", "dL/dz2 · 1", dz2)
    da1 = w.step("dL/da1", "dL/dz2 · w2", dz2, p["w2"])
    relu_grad = 1.0 if z1 > 0 else 0.0
    dz1 = w.step("dL/dz1", "dL/da1 · relu′(z1)", da1, relu_grad)
    w.step("dL/dw1", "dL/dz1 · x", dz1, d["x"])
    w.step("dL/db1", "dL/dz1 · 1", dz1)
    return w


TINY_RELU = ScalarExample(
    number="1",
    key="tiny_relu",
    title="x → ReLU neuron → output, L = (z2 − y)²",
    source=LESSON_000,
    params={"w1": 0.5, "b1": 0.1, "w2": -1.5, "b2": 0.3},
    data={"x": 2.0, "y": 1.0},
    loss=_tiny_relu_loss,
    by_hand=_tiny_relu_by_hand,
    expected={
        "L": (5.5225, 4),
        "dL/dw1": (14.1, 4),
        "dL/db1": (7.05, 4),
        "dL/dw2": (-5.17, 4),
        "dL/db2": (-4.7, 4),
    },
)

DEAD_RELU = dataclasses.replace(
    TINY_RELU,
    number="1b",
    key="dead_relu",
    title="the same network with w1 = −0.5: the ReLU is dead",
    source=LESSON_000 + ", self-check question 1",
    params={"w1": -0.5, "b1": 0.1, "w2": -1.5, "b2": 0.3},
    expected={"dL/dw1": (0.0, 16), "dL/db1": (0.0, 16)},
)


# --- 2. a = w1·x, h = relu(a), y = w2·h, L = (y − t)² ------------------------------


def _two_weight_loss(p, d):
    a = p["w1"] * d["x"]
    h = jax.nn.relu(a)
    y = p["w2"] * h
    return (y - d["t"]) ** 2, {}


def _two_weight_by_hand(p, d) -> Working:
    w = Working()
    a = w.let("a", "w1·x", p["w1"] * d["x"])
    h = w.let("h", "relu(a)", max(a, 0.0))
    y = w.let("y", "w2·h", p["w2"] * h)
    w.let("L", "(y − t)²", (y - d["t"]) ** 2)
    dy = w.step("dL/dy", "2(y − t)", 2.0, y - d["t"])
    w.step("dL/dw2", "dL/dy · h", dy, h)
    dh = w.step("dL/dh", "dL/dy · w2", dy, p["w2"])
    da = w.step("dL/da", "dL/dh · relu′(a)", dh, 1.0 if a > 0 else 0.0)
    w.step("dL/dw1", "dL/da · x", da, d["x"])
    return w


TWO_WEIGHT = ScalarExample(
    number="2",
    key="two_weight",
    title="a = w1·x, h = relu(a), y = w2·h, L = (y − t)²",
    source=LESSON_002,
    params={"w1": 1.5, "w2": 2.0},
    data={"x": 2.0, "t": 5.0},
    loss=_two_weight_loss,
    by_hand=_two_weight_by_hand,
    expected={"L": (1.0, 0), "dL/dw2": (6.0, 0), "dL/dw1": (8.0, 0)},
)


# --- 3. y = w² + 2w at w = 3 ------------------------------------------------------


def _square_plus_loss(p, d):
    return p["w"] * p["w"] + 2 * p["w"], {}


def _square_plus_by_hand(p, d) -> Working:
    w = Working()
    w.let("L", "w² + 2w", p["w"] ** 2 + 2 * p["w"])
    # Two paths reach w: through w·w (local derivative 2w) and through 2w (local 2).
    via_square = w.step("dL/dw via w²", "2 · w", 2.0, p["w"])
    via_linear = w.step("dL/dw via 2w", "2", 2.0)
    w.let("dL/dw", "sum of both paths", via_square + via_linear)
    return w


SQUARE_PLUS = ScalarExample(
    number="3",
    key="square_plus",
    title="y = w² + 2w at w = 3",
    source=LESSON_004 + " (the syntax you will use)",
    params={"w": 3.0},
    data={},
    loss=_square_plus_loss,
    by_hand=_square_plus_by_hand,
    expected={"dL/dw": (8.0, 0)},
)


# --- 4. u = w·x + b, y = u² ---------------------------------------------------------


def _affine_square_loss(p, d):
    u = p["w"] * d["x"] + p["b"]
    return u**2, {"u": u}


def _affine_square_by_hand(p, d) -> Working:
    w = Working()
    u = w.let("u", "w·x + b", p["w"] * d["x"] + p["b"])
    w.let("L", "u²", u**2)
    du = w.step("dL/du", "2u", 2.0, u)
    w.step("dL/dw", "dL/du · x", du, d["x"])
    w.step("dL/db", "dL/du · 1", du)
    return w


AFFINE_SQUARE = ScalarExample(
    number="4",
    key="affine_square",
    title="u = w·x + b, y = u² (example 1)",
    source=LESSON_004 + " example 1",
    params={"w": 3.0, "b": 1.0},
    data={"x": 2.0},
    loss=_affine_square_loss,
    by_hand=_affine_square_by_hand,
    expected={"u": (7.0, 0), "L": (49.0, 0), "dL/dw": (28.0, 0), "dL/db": (14.0, 0)},
)


# --- 5. L = (W2·relu(W1·x) − 1)² ----------------------------------------------------


def _two_layer_scalar_loss(p, d):
    z1 = p["W1"] * d["x"]
    h = jax.nn.relu(z1)
    y = p["W2"] * h
    return (y - d["t"]) ** 2, {}


def _two_layer_scalar_by_hand(p, d) -> Working:
    w = Working()
    z1 = w.let("z1", "W1·x", p["W1"] * d["x"])
    h = w.let("h", "relu(z1)", max(z1, 0.0))
    y = w.let("y", "W2·h", p["W2"] * h)
    w.let("L", "(y − 1)²", (y - d["t"]) ** 2)
    dy = w.step("dL/dy", "2(y − 1)", 2.0, y - d["t"])
    w.step("dL/dW2", "dL/dy · h", dy, h)
    dh = w.step("dL/dh", "dL/dy · W2", dy, p["W2"])
    w.step("dL/dW1", "dL/dh · relu′(z1) · x", dh, 1.0 if z1 > 0 else 0.0, d["x"])
    return w


TWO_LAYER_SCALAR = ScalarExample(
    number="5",
    key="two_layer_scalar",
    title="L = (W2·relu(W1·x) − 1)² (example 2)",
    source=LESSON_004 + " example 2",
    params={"W1": 2.0, "W2": 3.0},
    data={"x": 1.0, "t": 1.0},
    loss=_two_layer_scalar_loss,
    by_hand=_two_layer_scalar_by_hand,
    expected={"L": (25.0, 0), "dL/dW2": (20.0, 0), "dL/dW1": (30.0, 0)},
)


# --- 6. One sigmoid neuron, one SGD step -------------------------------------------


def _sigmoid_neuron_loss(p, d):
    z = p["w"] * d["x"] + p["b"]
    a = jax.nn.sigmoid(z)
    return (a - d["y"]) ** 2, {"a": a}


def _sigmoid_neuron_by_hand(p, d) -> Working:
    w = Working()
    z = w.let("z", "w·x + b", p["w"] * d["x"] + p["b"])
    a = w.let("a", "σ(z)", 1.0 / (1.0 + math.exp(-z)))
    w.let("L", "(a − y)²", (a - d["y"]) ** 2)
    da = w.step("dL/da", "2(a − y)", 2.0, a - d["y"])
    dz = w.step("dL/dz", "dL/da · a(1 − a)", da, a * (1.0 - a))
    w.step("dL/dw", "dL/dz · x", dz, d["x"])
    w.step("dL/db", "dL/dz · 1", dz)
    return w


SIGMOID_NEURON = ScalarExample(
    number="6",
    key="sigmoid_neuron",
    title="z = w·x + b, a = σ(z), L = (a − y)², one SGD step with lr 0.1",
    source=LESSON_001,
    params={"w": 0.5, "b": 0.0},
    data={"x": 2.0, "y": 1.0},
    loss=_sigmoid_neuron_loss,
    by_hand=_sigmoid_neuron_by_hand,
    expected={"a": (0.731, 3), "L": (0.072, 3), "dL/dw": (-0.212, 3), "w after step": (0.521, 3)},
    lr=0.1,
)


EXAMPLES = (
    TINY_RELU,
    DEAD_RELU,
    TWO_WEIGHT,
    SQUARE_PLUS,
    AFFINE_SQUARE,
    TWO_LAYER_SCALAR,
    SIGMOID_NEURON,
)


def agrees_to_printed_digits(value: float, expected: float, decimals: int) -> bool:
    """True when ``value`` rounds to the lesson's number at the digits it printed."""
    return abs(value - expected) <= 0.5 * 10.0 ** (-decimals) + 1e-12 * abs(expected)
