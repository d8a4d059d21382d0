"""The lessons' two small graphs, as functions of named scalars (names become labels).

- ``lesson_expression``: lesson 000 §2, ``L = ((w2·relu(w1·x + b1) + b2) − y)²`` at
  x = 2, y = 1, w1 = 0.5, b1 = 0.1, w2 = −1.5, b2 = 0.3: L = 5.5225 and gradients
  14.1, 7.05, −5.17, −4.7 for w1, b1, w2, b2 (lesson 000, "Computational Graphs").
- ``seed_neuron``: lesson 001's two-input neuron ``m1 = w1·x1, m2 = w2·x2, s = m1 + m2,
  z = s + b, a = σ(z), L = (a − y)²``. With x1 = 2, w1 = 0.5, b = 0, y = 1 and a second
  input x2 = 0 it reproduces the lesson's one-input worked numbers — z = 1, a = 0.731,
  L = 0.072, ∂L/∂a = −0.538, a(1 − a) = 0.197, ∂L/∂w1 = −0.212 — and shows its other
  point: the weight of a zero input gets exactly zero gradient (lesson 001,
  "Backpropagation and the Computational Graph").
"""

from __future__ import annotations

import jax

from jaxgrad.lessons.scalar_examples import TINY_RELU


def lesson_expression(w1, b1, w2, b2, x, y):
    """Lesson 000's tiny ReLU network as one expression of six scalars."""
    return TINY_RELU.loss({"w1": w1, "b1": b1, "w2": w2, "b2": b2}, {"x": x, "y": y})[0]


LESSON_EXPRESSION_ARGS = dict(TINY_RELU.params, **TINY_RELU.data)


def seed_neuron(w1, w2, b, x1, x2, y):
    """Lesson 001's neuron with two inputs, a sigmoid and a squared loss."""
    m1 = w1 * x1
    m2 = w2 * x2
    s = m1 + m2
    z = s + b
    a = jax.nn.sigmoid(z)
    return (a - y) ** 2


SEED_NEURON_ARGS = dict(w1=0.5, w2=-0.8, b=0.0, x1=2.0, x2=0.0, y=1.0)
