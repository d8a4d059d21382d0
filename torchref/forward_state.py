"""Forwards that write their own state, as research code writes them.

Each module updates a parameter or buffer inside ``forward``, the way a PyTorch user
writes it; jaxgrad must return the new values as state or refuse the model by name:

- ``MomentumEncoder``: MoCo's key encoder, a copy of the query encoder with
  ``requires_grad=False``, moved towards it in a ``@torch.no_grad()`` method by
  ``pk.data = pk.data * m + pq.data * (1 - m)`` before it encodes the keys;
- ``EMATarget``: BYOL's target network, updated in place under ``torch.no_grad()``
  (``pt.mul_(m).add_(ps, alpha=1 - m)``);
- ``StepCounter``: ``self.steps += 1`` on a buffer that starts at 0, read after;
- ``VQEMACodebook``: a VQ-VAE whose codebook is an exponential moving average of the
  encodings assigned to each code (van den Oord et al., 2017, appendix), written with
  ``.data =`` in training mode, with the straight-through estimator;
- ``RunningAverage``: a buffer replaced by assignment (``self.avg = ...``).

``TrainableMomentumEncoder`` (the key encoder left trainable) and ``DataInPlaceEMA``
(``self.ema.data.mul_(...)``, a write through ``.data``'s alias that ``torch.export``
does not record) are what jaxgrad refuses.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F


def _mlp(features: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, out))


class MomentumEncoder(nn.Module):
    """MoCo (He et al., 2020): query logits against momentum-encoded keys.

    Input `(N, features)`; output `(N, N)` logits ``q · kᵀ / temperature`` (MoCo's
    encodings are L2-normalised; left out here so the layer path can trace it)."""

    def __init__(self, features=8, hidden=16, dim=4, momentum=0.9, temperature=0.5):
        super().__init__()
        self.momentum, self.temperature = momentum, temperature
        self.encoder_q = _mlp(features, hidden, dim)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for param in self.encoder_k.parameters():
            param.requires_grad = False
            param.data.mul_(0.5)  # start apart from the query encoder

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.momentum + param_q.data * (1.0 - self.momentum)

    def forward(self, x):
        q = self.encoder_q(x)
        self._momentum_update_key_encoder()
        k = self.encoder_k(x)
        return q @ k.T / self.temperature


class TrainableMomentumEncoder(MomentumEncoder):
    """The same, with the key encoder left trainable: torch then both trains it and
    overwrites it in the forward, which jaxgrad refuses."""

    def __init__(self, **options):
        super().__init__(**options)
        for param in self.encoder_k.parameters():
            param.requires_grad = True


class EMATarget(nn.Module):
    """BYOL (Grill et al., 2020): an online network and its EMA target.

    Input `(N, features)`; output `(N,)`: the squared distance of
    ``predictor(online(x))`` from ``target(x)`` per row (BYOL's loss, on vectors it
    normalises first; left out here so the layer path can trace it)."""

    def __init__(self, features=8, hidden=16, dim=4, momentum=0.9):
        super().__init__()
        self.momentum = momentum
        self.online = _mlp(features, hidden, dim)
        self.predictor = nn.Linear(dim, dim)
        self.target = copy.deepcopy(self.online)
        for param in self.target.parameters():
            param.requires_grad = False
            param.data.mul_(0.5)

    def forward(self, x):
        with torch.no_grad():
            for target, online in zip(self.target.parameters(), self.online.parameters()):
                target.mul_(self.momentum).add_(online, alpha=1 - self.momentum)
            projection = self.target(x)
        prediction = self.predictor(self.online(x))
        return (prediction - projection).pow(2).sum(-1)


class StepCounter(nn.Module):
    """A step counter on a buffer that starts at 0, read after the increment.

    Input `(N, features)`; output `(N, out)`."""

    def __init__(self, features=8, out=4):
        super().__init__()
        self.linear = nn.Linear(features, out)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps += 1
        return self.linear(x) / self.steps


class VQEMACodebook(nn.Module):
    """A VQ-VAE with an EMA codebook: encode, quantise to the nearest code, decode
    through the straight-through estimator; in training mode the codes move to the
    (Laplace-smoothed) average of the encodings assigned to them.

    Input `(N, features)`; output `(N, features)` reconstructions plus the
    commitment loss (a scalar, broadcast)."""

    def __init__(self, features=8, dim=3, codes=6, decay=0.8, eps=1e-5, commitment=0.25):
        super().__init__()
        self.decay, self.eps, self.commitment = decay, eps, commitment
        self.encoder = nn.Linear(features, dim)
        self.decoder = nn.Linear(dim, features)
        embedding = torch.randn(codes, dim)
        self.register_buffer("embedding", embedding)
        self.register_buffer("cluster_size", torch.ones(codes))
        self.register_buffer("embed_avg", embedding.clone())

    def forward(self, x):
        z = self.encoder(x)
        distances = (
            z.pow(2).sum(1, keepdim=True) - 2 * z @ self.embedding.T + self.embedding.pow(2).sum(1)
        )
        onehot = F.one_hot(distances.argmin(1), self.embedding.shape[0]).to(z.dtype)
        quantised = onehot @ self.embedding
        if self.training:
            with torch.no_grad():
                decay, codes = self.decay, self.embedding.shape[0]
                self.cluster_size.data = self.cluster_size * decay + (1 - decay) * onehot.sum(0)
                self.embed_avg.data = self.embed_avg * decay + (1 - decay) * onehot.T @ z
                total = self.cluster_size.sum()
                smoothed = (self.cluster_size + self.eps) / (total + codes * self.eps) * total
                self.embedding.data = self.embed_avg / smoothed.unsqueeze(1)
        loss = self.commitment * (z - quantised.detach()).pow(2).mean()
        return self.decoder(z + (quantised - z).detach()) + loss


class RunningAverage(nn.Module):
    """A running mean of the outputs, its buffer replaced by assignment.

    Input `(N, features)`; output `(N, out)`, centred by the running mean."""

    def __init__(self, features=8, out=4):
        super().__init__()
        self.linear = nn.Linear(features, out)
        self.register_buffer("avg", torch.zeros(out))

    def forward(self, x):
        y = self.linear(x)
        if self.training:
            self.avg = 0.9 * self.avg + 0.1 * y.detach().mean(0)
        return y - self.avg


class DataInPlaceEMA(nn.Module):
    """An EMA written through ``.data``'s alias (``self.ema.data.mul_(...)``), which
    ``torch.export`` does not record: jaxgrad refuses it by name.

    Input `(N, features)`; output `(N, out)`."""

    def __init__(self, features=8, out=4):
        super().__init__()
        self.linear = nn.Linear(features, out)
        self.register_buffer("ema", torch.zeros(out))

    def forward(self, x):
        y = self.linear(x)
        self.ema.data.mul_(0.9).add_(0.1 * y.detach().mean(0))
        return y * (1 + self.ema)


REPRODUCED = (MomentumEncoder, EMATarget, StepCounter, VQEMACodebook, RunningAverage)
REFUSED = (TrainableMomentumEncoder, DataInPlaceEMA)


def train_steps(module: nn.Module, x: torch.Tensor, steps: int = 3, lr: float = 0.1) -> list:
    """``steps`` SGD steps on ``sum(forward(x)²)``, the way a PyTorch user writes them:
    ``[(loss, outputs, state_dict after the step), ...]`` (copies)."""
    optimizer = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=lr)
    module.train()
    record = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = module(x)
        loss = out.pow(2).sum()
        loss.backward()
        optimizer.step()
        state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        record.append((loss.detach().clone(), out.detach().clone(), state))
    return record
