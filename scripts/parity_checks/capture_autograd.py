"""Report rows for autograd written inside a captured forward.

Two models research code is full of, each converted by both front ends and held to
torch's ``backward()`` in float64 (output and every parameter gradient of
``sum(c · output)``):

- a VQ-VAE-style quantiser: nearest codebook rows, the commitment loss with
  ``detach()`` on either side, and the straight-through estimator
  ``z + (quantised - z).detach()`` (value of the code, gradient of the identity);
- a BYOL/DINO-style student and frozen teacher: the teacher runs in a
  ``torch.no_grad()`` region in training mode, so it gets no gradient while its
  BatchNorm still updates its running statistics (compared too);

and a custom ``torch.autograd.Function`` whose backward is *not* the derivative of its
forward (a clipped straight-through rounding), which the export front end reproduces as
a ``jax.custom_vjp`` of its own captured backward.
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


class _Quantiser(tnn.Module):
    def __init__(self, features=6, codes=5):
        super().__init__()
        self.encode = tnn.Linear(features, 3)
        self.codebook = tnn.Parameter(torch.randn(codes, 3))
        self.decode = tnn.Linear(3, features)

    def forward(self, x):
        z = self.encode(x)
        distances = (z.unsqueeze(1) - self.codebook).pow(2).sum(-1)
        quantised = self.codebook[distances.argmin(-1)]
        commitment = ((quantised.detach() - z) ** 2).mean() + 0.25 * (
            (quantised - z.detach()) ** 2
        ).mean()
        return self.decode(z + (quantised - z).detach()) + commitment


class _StudentTeacher(tnn.Module):
    def __init__(self, features=6):
        super().__init__()
        self.student = tnn.Sequential(tnn.Linear(features, 8), tnn.ReLU(), tnn.Linear(8, 4))
        self.teacher = tnn.Sequential(
            tnn.Linear(features, 8), tnn.BatchNorm1d(8), tnn.ReLU(), tnn.Linear(8, 4)
        )

    def forward(self, x):
        with torch.no_grad():
            target = self.teacher(x)
        return self.student(x) - target


class _ClippedRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)  # straight through, inside [-1, 1]


class _RoundsActivations(tnn.Module):
    def __init__(self, features=6):
        super().__init__()
        self.fc, self.out = tnn.Linear(features, 8), tnn.Linear(8, 3)

    def forward(self, x):
        return self.out(_ClippedRound.apply(self.fc(x) * 2))


def _row(model_class, capture: str, train: bool = False) -> jaxgrad.ParityReport:
    torch.manual_seed(11)
    module = model_class().double()
    x = np.random.default_rng(11).standard_normal((7, 6))
    with jax_precision("float64"):
        model, params, buffers = nn.from_torch(
            module, example=(torch.from_numpy(x),), capture=capture, with_buffers=True
        )
        reference, candidate = grads_both(
            module, model, params, [x], train=train, buffers=buffers if buffers else None
        )
        if buffers:  # the statistics the teacher's BatchNorm updated under no_grad
            _, new_buffers = model.apply(params, x, buffers=buffers, train=train)
            reference["buffers"] = {
                k: v.numpy() for k, v in module.state_dict().items() if k in buffers
            }
            candidate["buffers"] = dict(new_buffers)
        return jaxgrad.compare(reference, candidate)


CHECKS = [
    *(
        Check(
            f"autograd in forward: straight-through VQ ({capture})",
            "float64",
            functools.partial(_row, _Quantiser, capture),
            area="capture",
        )
        for capture in ("layers", "export")
    ),
    *(
        Check(
            f"autograd in forward: no_grad teacher, train + buffers ({capture})",
            "float64",
            functools.partial(_row, _StudentTeacher, capture, True),
            area="capture",
        )
        for capture in ("layers", "export")
    ),
    Check(
        "autograd in forward: custom Function's own backward (export)",
        "float64",
        functools.partial(_row, _RoundsActivations, "auto"),
        area="capture",
    ),
]
