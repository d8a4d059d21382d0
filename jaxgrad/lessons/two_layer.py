"""The lessons' two-layer network, X `(6, 3)` → tanh(4) → sigmoid(1), binary cross-entropy.

Source: lesson 001, "Backpropagation and the Computational Graph" (each gradient, by
hand, checked numerically).
Data and weights come from ``numpy.random.default_rng(0)`` in the lesson's order;
weights ~ N(0, 0.5). Three implementations of the same network:

- ``numpy_backward``: the backward pass written by hand in numpy, one chain-rule line
  per gradient (sigmoid + BCE collapse to ``dL/dz2 = (a2 − y)/n``);
- ``jax_model``: ``jaxgrad.nn`` layers differentiated by ``jax.grad``;
- ``torchref.lessons.two_layer_torch``: ``nn.Sequential`` and ``backward()``.

Layout: the lesson multiplies ``X @ W1`` with ``W1`` `(3, 4)`; torch's ``Linear(3, 4)``
stores ``weight`` `(4, 3)`, its transpose. ``torch_state_dict`` does that conversion
once, so all three start from identical numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad import losses, nn

STEPS = 400
LR = 0.5
REPORT_EVERY = 100


def lesson_data() -> dict:
    """X `(6, 3)`, y `(6, 1)`, W1 `(3, 4)`, b1 `(1, 4)`, W2 `(4, 1)`, b2 `(1, 1)`, float64."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 3))
    y = rng.integers(0, 2, (6, 1)).astype(float)
    W1 = rng.normal(0, 0.5, (3, 4))
    b1 = np.zeros((1, 4))
    W2 = rng.normal(0, 0.5, (4, 1))
    b2 = np.zeros((1, 1))
    return {"X": X, "y": y, "W1": W1, "b1": b1, "W2": W2, "b2": b2}


def numpy_forward(X, y, W1, b1, W2, b2):
    """The cached intermediates ``z1, a1, z2, a2`` and the loss."""
    z1 = X @ W1 + b1
    a1 = np.tanh(z1)
    z2 = a1 @ W2 + b2
    a2 = 1.0 / (1.0 + np.exp(-z2))
    loss = -np.mean(y * np.log(a2) + (1 - y) * np.log(1 - a2))
    return z1, a1, z2, a2, loss


def numpy_backward(X, y, W1, b1, W2, b2) -> dict:
    """Gradients of the loss by hand, each line one application of the chain rule."""
    z1, a1, z2, a2, _ = numpy_forward(X, y, W1, b1, W2, b2)
    n = len(X)
    dz2 = (a2 - y) / n  # sigmoid′ cancels against the BCE derivative
    dW2 = a1.T @ dz2
    db2 = dz2.sum(axis=0, keepdims=True)
    da1 = dz2 @ W2.T
    dz1 = da1 * (1 - np.tanh(z1) ** 2)
    dW1 = X.T @ dz1
    db1 = dz1.sum(axis=0, keepdims=True)
    return {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}


def numeric_gradients(data: dict, h: float = 1e-6) -> dict:
    """Central differences ``(L(p + h) − L(p − h)) / 2h`` for every element (float64)."""
    names = ("W1", "b1", "W2", "b2")
    grads = {}
    for name in names:
        grad = np.zeros_like(data[name])
        for index in np.ndindex(grad.shape):
            up = {k: data[k].copy() for k in names}
            down = {k: data[k].copy() for k in names}
            up[name][index] += h
            down[name][index] -= h
            loss_up = numpy_forward(data["X"], data["y"], *(up[k] for k in names))[4]
            loss_down = numpy_forward(data["X"], data["y"], *(down[k] for k in names))[4]
            grad[index] = (loss_up - loss_down) / (2 * h)
        grads[name] = grad
    return grads


def numpy_train(data: dict, steps: int = STEPS, lr: float = LR) -> list:
    """Plain gradient descent with the hand backward: ``[(step, loss, accuracy), …]``
    every ``REPORT_EVERY`` steps, steps 0…``steps`` inclusive, as the lesson prints."""
    params = {k: data[k].copy() for k in ("W1", "b1", "W2", "b2")}
    history = []
    for step in range(steps + 1):
        *_, a2, loss = numpy_forward(data["X"], data["y"], *params.values())
        if step % REPORT_EVERY == 0:
            history.append((step, float(loss), float(((a2 > 0.5) == data["y"]).mean())))
        if step == steps:
            break
        grads = numpy_backward(data["X"], data["y"], *params.values())
        params = {k: params[k] - lr * grads[k] for k in params}
    return history


def torch_state_dict(data: dict) -> dict:
    """The lesson's weights in torch's layout: ``Linear.weight = W.T``, bias flattened."""
    return {
        "0.weight": data["W1"].T.copy(),
        "0.bias": data["b1"].reshape(-1).copy(),
        "2.weight": data["W2"].T.copy(),
        "2.bias": data["b2"].reshape(-1).copy(),
    }


def from_torch_layout(grads: dict) -> dict:
    """Gradients keyed like torch back in the lesson's layout, for comparison."""
    return {
        "W1": np.asarray(grads["0.weight"]).T,
        "b1": np.asarray(grads["0.bias"]).reshape(1, -1),
        "W2": np.asarray(grads["2.weight"]).T,
        "b2": np.asarray(grads["2.bias"]).reshape(1, -1),
    }


def jax_model() -> nn.Sequential:
    """``Linear(3, 4) → Tanh → Linear(4, 1) → Sigmoid`` in float64."""
    return nn.Sequential(
        nn.Linear(3, 4, dtype=jnp.float64),
        nn.Tanh(),
        nn.Linear(4, 1, dtype=jnp.float64),
        nn.Sigmoid(),
    )


def jax_loss(params, X, y):
    return losses.binary_cross_entropy(jax_model().apply(params, X), y)


def jax_gradients(data: dict) -> dict:
    """``jax.grad`` of the loss, keyed like torch. Needs x64 enabled."""
    params = jax_model().load_state_dict(torch_state_dict(data))
    return jax.grad(jax_loss)(params, jnp.asarray(data["X"]), jnp.asarray(data["y"]))


def jax_train(data: dict, steps: int = STEPS, lr: float = LR) -> list:
    """``numpy_train`` with ``jax.grad`` and a jitted update; same history format."""
    model = jax_model()
    params = model.load_state_dict(torch_state_dict(data))
    X, y = jnp.asarray(data["X"]), jnp.asarray(data["y"])

    @jax.jit
    def update(params):
        grads = jax.grad(jax_loss)(params, X, y)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)

    @jax.jit
    def evaluate(params):
        a2 = model.apply(params, X)
        return jax_loss(params, X, y), jnp.mean(((a2 > 0.5) == y).astype(a2.dtype))

    history = []
    for step in range(steps + 1):
        if step % REPORT_EVERY == 0:
            loss, accuracy = evaluate(params)
            history.append((step, float(loss), float(accuracy)))
        if step == steps:
            break
        params = update(params)
    return history
