"""Sequence classifiers of the 8×8 digits, idiomatic torch (custom ``forward`` code).

- ``RowRNNClassifier``: an image is 8 rows of 8 pixels; an ``nn.LSTM`` or ``nn.GRU``
  (``batch_first``) reads the rows and a ``Linear`` classifies the last output;
- ``TokenTransformerClassifier``: the 64 pixel intensities (integers 0–16) are
  tokens: ``nn.Embedding`` plus a learned position embedding, an
  ``nn.TransformerEncoder``, mean over positions, ``Linear``.

Their forwards are user code, so ``jaxgrad.nn.from_torch`` converts them through
``torch.fx``: the jaxgrad twins come from the same weights.
"""

from __future__ import annotations

import torch
from torch import nn

SEQUENCE_MODELS = ("transformer", "lstm", "gru")
ROWS, COLUMNS, LEVELS = 8, 8, 17  # 8×8 images, intensities 0…16


class RowRNNClassifier(nn.Module):
    """``(N, 64)`` pixels -> rows ``(N, 8, 8)`` -> LSTM/GRU -> last output -> logits ``(N, 10)``."""

    def __init__(
        self,
        cell: str = "lstm",
        hidden_size: int = 64,
        num_classes: int = 10,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        if cell not in ("lstm", "gru"):
            raise ValueError(f"`cell` (={cell!r}) must be 'lstm' or 'gru'.")
        recurrent = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = recurrent(COLUMNS, hidden_size, batch_first=True, dtype=dtype)
        self.head = nn.Linear(hidden_size, num_classes, dtype=dtype)

    def forward(self, pixels):
        rows = pixels.reshape(-1, ROWS, COLUMNS)
        outputs = self.rnn(rows)[0]
        return self.head(outputs[:, -1])


class TokenTransformerClassifier(nn.Module):
    """``(N, 64)`` int64 tokens -> Embedding + position -> TransformerEncoder -> mean -> logits."""

    def __init__(
        self,
        d_model: int = 32,
        nhead: int = 4,
        dim_feedforward: int = 64,
        num_layers: int = 2,
        dropout: float = 0.0,
        num_classes: int = 10,
        length: int = ROWS * COLUMNS,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        self.embed = nn.Embedding(LEVELS, d_model, dtype=dtype)
        # N(0, 1) like the token embedding: a smaller scale drowns the positions
        self.position = nn.Parameter(torch.randn(length, d_model, dtype=dtype))
        layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward, dropout, batch_first=True, dtype=dtype
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes, dtype=dtype)

    def forward(self, tokens):
        hidden = self.encoder(self.embed(tokens) + self.position)
        return self.head(hidden.mean(dim=1))


def sequence_model(
    name: str, *, seed: int = 0, dtype: torch.dtype = torch.float32, **options
) -> nn.Module:
    """``"transformer"``, ``"lstm"`` or ``"gru"``, initialised from ``seed``."""
    if name not in SEQUENCE_MODELS:
        raise ValueError(f"`name` (={name!r}) must be one of {', '.join(SEQUENCE_MODELS)}.")
    torch.manual_seed(seed)
    if name == "transformer":
        return TokenTransformerClassifier(dtype=dtype, **options)
    return RowRNNClassifier(name, dtype=dtype, **options)
