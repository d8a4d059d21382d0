"""Report rows for ``from_torch``'s export front end (``torch.export``, the ATen table).

One small model holds what the front end must keep from a real one: a shape assertion
(``torch._assert``, which ``torch.fx.symbolic_trace`` cannot take, so the layer path
refuses it and export captures it), a non-persistent int64 ``position_ids`` buffer
sliced to the input's length (a constant of the program), an output head tied to the
embedding (one parameter), a write through a view (reproduced), a squeeze-excitation
gate through ``hardsigmoid`` (torch's float32(1/6) in its backward), dropout and
stochastic depth in training. Each row compares the output and every parameter
gradient of ``sum(c · output)`` with torch in float64: evaluation mode, and training
mode on torch's own random draws (recorded, then handed to the program's random ops);
and the same model's flax twin (``to_nnx``: a ``TorchProgram`` running ``fc`` and
``gate`` as stock ``nnx.Linear`` layers, the tied embedding/head in torch's program),
its gradients read back to torch's names and layouts with ``grads_to_torch``.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn as tnn

import jaxgrad
from jaxgrad import nn
from parity_checks._capture_parity import grads_both
from parity_checks.harness import Check, jax_precision


class _Captured(tnn.Module):
    def __init__(self, vocab=11, n=6, d=8, p_depth=0.5):
        super().__init__()
        self.embed, self.pos = tnn.Embedding(vocab, d), tnn.Embedding(n, d)
        self.register_buffer("position_ids", torch.arange(n)[None], persistent=False)
        self.fc, self.gate = tnn.Linear(d, d), tnn.Linear(d, d)
        self.drop, self.p_depth = tnn.Dropout(0.2), p_depth
        self.head = tnn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, ids):
        torch._assert(ids.shape[1] <= self.position_ids.shape[1], "sequence too long")
        h = self.embed(ids) + self.pos(self.position_ids[:, : ids.shape[1]])
        y = self.fc(h)
        y.view(-1).mul_(0.5)  # a write through a view: y halves too
        y = self.drop(torch.relu(y))
        y = y * torch.nn.functional.hardsigmoid(self.gate(y.mean(1, keepdim=True)))
        if self.training:  # stochastic depth, per sample
            keep = 1.0 - self.p_depth
            noise = torch.empty(ids.shape[0], 1, 1, dtype=y.dtype).bernoulli_(keep)
            y = y * noise.div_(keep)
        return self.head(h + y)


def _row(train: bool) -> jaxgrad.ParityReport:
    torch.manual_seed(5)
    module = _Captured().double()
    ids = np.random.default_rng(5).integers(0, 11, (4, 5))
    with jax_precision("float64"):
        model, params = nn.from_torch(module, example=(torch.from_numpy(ids),))
        if type(model).__name__ != "ExportedModule":
            raise AssertionError(f"expected the export front end, from_torch gave {model!r}")
        torch.manual_seed(6)  # torch's draws in training, recorded and handed over
        reference, candidate = grads_both(
            module, model, params, [ids], train=train, draws=True if train else None
        )
        return jaxgrad.compare(reference, candidate)


def _nnx_row() -> jaxgrad.ParityReport:
    import jax.numpy as jnp
    from flax import nnx

    from jaxgrad.flax import grads_to_torch, to_nnx

    torch.manual_seed(5)
    module = _Captured().double().eval()
    ids = np.random.default_rng(5).integers(0, 11, (4, 5))
    out = module(torch.from_numpy(ids))
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()
    reference = {
        "output": out.detach().numpy(),
        "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
    }
    with jax_precision("float64"):
        twin = to_nnx(module, example=(torch.from_numpy(ids),))
        stock = getattr(twin, "stock_layers", {})
        if stock.get("fc") != "Linear" or stock.get("gate") != "Linear":
            raise AssertionError(f"expected fc and gate as stock nnx.Linear, got {stock!r}")

        def objective(twin):
            value = twin(jnp.asarray(ids))
            return jnp.sum(value * cotangent), value

        (_, value), grads = nnx.value_and_grad(objective, has_aux=True)(twin)
        return jaxgrad.compare(reference, {"output": value, "grads": grads_to_torch(twin, grads)})


def _shapes_row() -> jaxgrad.ParityReport:
    """One capture at other shapes than the example's: batch 1 (torch's batch-1 program,
    ``batch_one=True``), a larger batch and another length, output and every gradient
    in both modes (training on torch's draws); and the ``save_exported`` artifact,
    reloaded with ``load_exported``, at a shape the example did not have."""
    import os
    import tempfile

    torch.manual_seed(5)
    module = _Captured().double()
    rng = np.random.default_rng(5)
    with jax_precision("float64"):
        model, params = nn.from_torch(
            module, example=(torch.from_numpy(rng.integers(0, 11, (4, 5))),), batch_one=True
        )
        reference, candidate = {}, {}
        for shape in ((1, 5), (7, 5), (3, 6), (2, 2)):
            ids = rng.integers(0, 11, shape)
            for train in (False, True):
                label = f"{shape} {'train' if train else 'eval'}"
                torch.manual_seed(6)
                reference[label], candidate[label] = grads_both(
                    module, model, params, [ids], train=train, draws=True if train else None
                )
        ids = rng.integers(0, 11, (6, 3))
        module.eval()
        reference["artifact (6, 3)"] = module(torch.from_numpy(ids)).detach().numpy()
        with tempfile.TemporaryDirectory(prefix="jaxgrad-report-") as folder:
            path = os.path.join(folder, "captured.jaxgrad")
            nn.save_exported(path, model, params)
            candidate["artifact (6, 3)"] = np.asarray(nn.load_exported(path)(ids))
        return jaxgrad.compare(reference, candidate)


CHECKS = [
    Check(
        "captured (export) forward+grads", "float64", functools.partial(_row, False), area="capture"
    ),
    Check(
        "captured (export) train, torch's draws",
        "float64",
        functools.partial(_row, True),
        area="capture",
    ),
    Check("captured (export) nnx twin forward+grads", "float64", _nnx_row, area="capture"),
    Check(
        "captured (export) one capture at other shapes, and its artifact",
        "float64",
        _shapes_row,
        area="capture",
    ),
]
