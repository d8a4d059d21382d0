"""``Embedding``, mirroring ``torch.nn.Embedding``.

``weight`` `(num_embeddings, embedding_dim)` is drawn from N(0, 1) like torch (flax's
``Embed`` uses variance 1/features) and its ``padding_idx`` row is zeroed at init and
gets no gradient (flax has no ``padding_idx``). ``max_norm``: torch renormalises the
referenced rows of the weight *in place* during the forward; jaxgrad returns the same
output and gradient, and ``Embedding.renorm(params, input)`` returns the params torch
is left holding (see ``jaxgrad.nn.functional.embedding``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from jaxgrad._arrays import canonical_dtype, check_dtype_available
from jaxgrad.nn.functional._embedding import embedding, embedding_renorm
from jaxgrad.nn.module import Module, require_params


def where_of(layer: str, path: str) -> str:
    """``"Embedding at 'encoder.tok'"`` for error messages (the top level has no path)."""
    return f"{layer} at {path!r}" if path else layer


@dataclasses.dataclass(frozen=True)
class Embedding(Module):
    """``torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx=None,
    max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False, device=None,
    dtype=None)``.

    Params: ``weight`` `(num_embeddings, embedding_dim)`. Input: integer ids `(*)`;
    output `(*, embedding_dim)`. Options of ``apply``: ``check_ids=True`` adds a
    ``checkify`` range check for jitted calls (concrete ids are always checked).
    """

    num_embeddings: int
    embedding_dim: int
    padding_idx: int | None = None
    max_norm: float | None = None
    norm_type: float = 2.0
    scale_grad_by_freq: bool = False
    sparse: bool = False
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        for name in ("num_embeddings", "embedding_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Embedding: `{name}` (={value!r}) must be a non-negative int.")
        if self.padding_idx is not None:
            if not -self.num_embeddings <= self.padding_idx < self.num_embeddings:
                raise ValueError(
                    f"Embedding: `padding_idx` (={self.padding_idx}) must be within "
                    f"num_embeddings (={self.num_embeddings})."
                )
            # torch stores the non-negative index
            object.__setattr__(self, "padding_idx", self.padding_idx % self.num_embeddings)

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        weight = jax.random.normal(key, (self.num_embeddings, self.embedding_dim), dtype)
        if self.padding_idx is not None:
            weight = weight.at[self.padding_idx].set(0)
        return {"weight": weight}

    def forward_with_state(
        self, params, input, *, buffers, train, key, path, check_ids: bool = False
    ):
        del train, key
        where = where_of("Embedding", path)
        require_params(where, params, ("weight",))
        out = embedding(
            input,
            params["weight"],
            self.padding_idx,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            self.sparse,
            check_ids=check_ids,
            _where=where,
        )
        return out, dict(buffers)

    def renorm(self, params, input) -> dict:
        """The params torch holds after this forward: with ``max_norm``, the referenced
        rows renormalised (torch does it in place); without, ``params`` unchanged."""
        if self.max_norm is None:
            return dict(params)
        return {
            **params,
            "weight": embedding_renorm(params["weight"], input, self.max_norm, self.norm_type),
        }
