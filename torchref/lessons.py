"""The lessons' worked examples written the way a PyTorch user writes them.

Each function builds leaf tensors with ``requires_grad=True``, runs the forward
expression, calls ``backward()`` and reads ``.grad`` — the same computations as
``jaxgrad.lessons``, written a second time, independently. Results use the same
names (``"L"``, ``"dL/dw1"``, ``"w after step"``) so the two can be compared.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def _leaves(values: dict, dtype) -> dict:
    return {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in values.items()}


def _const(values: dict, dtype) -> dict:
    return {k: torch.tensor(v, dtype=dtype) for k, v in values.items()}


def tiny_relu(params, data, dtype=torch.float32) -> dict:
    p, d = _leaves(params, dtype), _const(data, dtype)
    L = ((p["w2"] * torch.relu(p["w1"] * d["x"] + p["b1"]) + p["b2"]) - d["y"]) ** 2
    L.backward()
    return {"L": L.item(), **{f"dL/d{k}": v.grad.item() for k, v in p.items()}}


def two_weight(params, data, dtype=torch.float32) -> dict:
    p, d = _leaves(params, dtype), _const(data, dtype)
    a = p["w1"] * d["x"]
    h = torch.relu(a)
    y = p["w2"] * h
    loss = (y - d["t"]) ** 2
    loss.backward()
    return {"L": loss.item(), "dL/dw1": p["w1"].grad.item(), "dL/dw2": p["w2"].grad.item()}


def square_plus(params, data, dtype=torch.float32) -> dict:
    w = torch.tensor(params["w"], dtype=dtype, requires_grad=True)
    y = w * w + 2 * w
    y.backward()
    return {"L": y.item(), "dL/dw": w.grad.item()}


def affine_square(params, data, dtype=torch.float32) -> dict:
    x = torch.tensor(data["x"], dtype=dtype)
    w = torch.tensor(params["w"], dtype=dtype, requires_grad=True)
    b = torch.tensor(params["b"], dtype=dtype, requires_grad=True)
    u = w * x + b
    y = u**2
    y.backward()
    return {"u": u.item(), "L": y.item(), "dL/dw": w.grad.item(), "dL/db": b.grad.item()}


def two_layer_scalar(params, data, dtype=torch.float32) -> dict:
    x = torch.tensor(data["x"], dtype=dtype)
    W1 = torch.tensor(params["W1"], dtype=dtype, requires_grad=True)
    W2 = torch.tensor(params["W2"], dtype=dtype, requires_grad=True)
    z1 = W1 * x
    h = torch.relu(z1)
    y = W2 * h
    loss = (y - data["t"]) ** 2
    loss.backward()
    return {"L": loss.item(), "dL/dW1": W1.grad.item(), "dL/dW2": W2.grad.item()}


def sigmoid_neuron(params, data, dtype=torch.float32, lr: float = 0.1) -> dict:
    p, d = _leaves(params, dtype), _const(data, dtype)
    a = torch.sigmoid(p["w"] * d["x"] + p["b"])
    loss = (a - d["y"]) ** 2
    loss.backward()
    result = {
        "a": a.item(),
        "L": loss.item(),
        "dL/dw": p["w"].grad.item(),
        "dL/db": p["b"].grad.item(),
    }
    optimizer = torch.optim.SGD(p.values(), lr=lr)
    optimizer.step()
    result.update({f"{k} after step": v.item() for k, v in p.items()})
    return result


EXAMPLES = {
    "tiny_relu": tiny_relu,
    "dead_relu": tiny_relu,
    "two_weight": two_weight,
    "square_plus": square_plus,
    "affine_square": affine_square,
    "two_layer_scalar": two_layer_scalar,
    "sigmoid_neuron": sigmoid_neuron,
}


# --- the two-layer network of lesson 001 -------------------------------------------


def two_layer_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1), nn.Sigmoid()).double()


def two_layer_gradients(state_dict: dict, X: np.ndarray, y: np.ndarray) -> dict:
    """One ``backward()`` on the lesson's batch; ``.grad`` keyed like ``state_dict()``."""
    model = two_layer_model()
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state_dict.items()})
    loss = nn.BCELoss()(model(torch.from_numpy(X)), torch.from_numpy(y))
    loss.backward()
    return {k: p.grad.numpy().copy() for k, p in model.named_parameters()}


def two_layer_train(
    state_dict: dict,
    X: np.ndarray,
    y: np.ndarray,
    steps: int = 400,
    lr: float = 0.5,
    report_every: int = 100,
) -> list:
    """``[(step, loss, accuracy), …]`` of plain SGD, the idiomatic torch loop."""
    model = two_layer_model()
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state_dict.items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    criterion = nn.BCELoss()
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    history = []
    for step in range(steps + 1):
        optimizer.zero_grad()
        out = model(X)
        loss = criterion(out, y)
        if step % report_every == 0:
            history.append((step, loss.item(), ((out > 0.5).double() == y).double().mean().item()))
        if step == steps:
            break
        loss.backward()
        optimizer.step()
    return history
