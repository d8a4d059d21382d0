"""``embedding`` and ``embedding_renorm``: ``torch.nn.functional.embedding`` as pure JAX.

torch's ``F.embedding(input, weight, padding_idx, max_norm, norm_type,
scale_grad_by_freq, sparse)`` is a row gather whose backward is a scatter-add, with
three twists, each reproduced here in value *and* gradient:

- ``padding_idx``: the gathered padding rows contribute no gradient (the output
  still holds the row's value; ``nn.Embedding`` also initialises that row to 0);
- ``scale_grad_by_freq``: each occurrence's gradient is divided by how often its
  index occurs in ``input`` (the mini-batch frequency);
- ``max_norm``: torch *renormalises the referenced rows of ``weight`` in place*
  (under ``no_grad``) before gathering, so every row whose ``norm_type``-norm
  exceeds ``max_norm`` is rescaled to ``max_norm / (norm + 1e-7)``. A pure function
  cannot mutate its argument, so jaxgrad splits that in two: ``embedding`` returns
  the output torch returns (computed from the renormalised rows) with torch's
  gradient (the renormalisation is not differentiated, as under ``no_grad``), and
  ``embedding_renorm(weight, input, max_norm, norm_type)`` returns the weight torch
  is left holding. To follow a torch training trajectory, replace the embedding
  weight by ``embedding_renorm(...)`` of the batch before the optimizer step applies
  the gradient (torch's step updates the already renormalised weight).

Out-of-range ids: torch raises ``IndexError``. jaxgrad raises ``ValueError`` when
``input`` is concrete (not traced). Under ``jit`` the values are unknown at trace
time; the gather then fills so an out-of-range id — negative ones included — yields a
row of NaN (never a silently clamped or wrapped valid row), and ``check_ids=True`` adds a
``jax.experimental.checkify`` check: run the function through
``checkify.checkify`` to get the error out of a jitted call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

_RENORM_EPS = 1e-7  # torch's embedding_renorm_: scale = max_norm / (norm + 1e-7)


def concrete_or_none(x):
    """``x`` as numpy when its values are known now, ``None`` when it is traced."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


def _check_indices(input, num_embeddings: int, where: str, check_ids: bool):
    if not jnp.issubdtype(jnp.asarray(input).dtype, jnp.integer):
        raise TypeError(
            f"{where}: `input` must hold integer token ids, got dtype {jnp.asarray(input).dtype}."
        )
    values = concrete_or_none(input)
    if values is not None:
        bad = values[(values < 0) | (values >= num_embeddings)]
        if bad.size:
            raise ValueError(
                f"{where}: token ids must lie in [0, {num_embeddings}) "
                f"(num_embeddings={num_embeddings}); got {bad.size} out of range, e.g. "
                f"{sorted(set(bad.tolist()))[:5]}."
            )
    elif check_ids:
        checkify.check(
            jnp.all((input >= 0) & (input < num_embeddings)),
            f"{where}: token ids must lie in [0, {num_embeddings})",
        )


def _gather(table, ids, fill_value):
    """``table[ids]`` along axis 0, ``fill_value`` for every id outside ``[0, len(table))``.

    ``jnp.take(..., mode="fill")`` wraps negative ids numpy-style first, so under
    ``jit`` id −1 would silently read the last row; here it is out of range like 5.
    """
    return table.at[ids].get(mode="fill", fill_value=fill_value, wrap_negative_indices=False)


def _padding_index(padding_idx, num_embeddings: int, where: str):
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(
            f"{where}: `padding_idx` (={padding_idx}) must be within num_embeddings "
            f"(={num_embeddings})."
        )
    return padding_idx % num_embeddings


def embedding_renorm(weight, input, max_norm: float, norm_type: float = 2.0):
    """The weight torch holds after ``F.embedding(input, weight, max_norm=...)``.

    Rows referenced by ``input`` whose ``norm_type``-norm exceeds ``max_norm`` are
    scaled by ``max_norm / (norm + 1e-7)``; other rows are unchanged.

    Args:
      weight: `(num_embeddings, embedding_dim)`.
      input: integer ids, any shape.
    """
    weight = jnp.asarray(weight)
    norms = jnp.linalg.norm(weight, ord=norm_type, axis=1)
    referenced = (
        jnp.zeros(weight.shape[0], bool)
        .at[jnp.ravel(input)]
        .set(True, mode="drop", wrap_negative_indices=False)
    )
    scale = jnp.where(
        referenced & (norms > max_norm),
        max_norm / (norms + _RENORM_EPS),
        jnp.ones_like(norms),
    )
    return weight * scale[:, None].astype(weight.dtype)


def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
    *,
    check_ids: bool = False,
    _where: str = "embedding",
):
    """``F.embedding``: rows of ``weight`` gathered at ``input``.

    Args:
      input: integer ids, any shape `(*)`.
      weight: `(num_embeddings, embedding_dim)`.
      padding_idx: rows at this id get no gradient (negative counts from the end).
      max_norm: renormalise referenced rows to at most this norm (see the module
        docstring: the output and gradient are torch's; ``embedding_renorm`` gives
        the weight torch mutates in place).
      norm_type: the p of the p-norm for ``max_norm``.
      scale_grad_by_freq: divide each row's gradient by its frequency in ``input``.
      sparse: torch's sparse-gradient flag; jax gradients are dense (same values).
      check_ids: under ``jit``, add a ``checkify`` check of the id range.

    Returns:
      `(*, embedding_dim)`.
    """
    del sparse  # a storage format for the gradient, not a different value
    weight = jnp.asarray(weight)
    if weight.ndim != 2:
        raise ValueError(
            f"{_where}: `weight` must be 2-D (num_embeddings, embedding_dim), got shape "
            f"{tuple(weight.shape)}."
        )
    num_embeddings = weight.shape[0]
    input = jnp.asarray(input)
    _check_indices(input, num_embeddings, _where, check_ids)
    padding = _padding_index(padding_idx, num_embeddings, _where)
    if max_norm is not None:
        # the renormalisation happens under no_grad in torch: value of the renormed
        # weight, gradient as if it were the weight itself
        weight = weight + jax.lax.stop_gradient(
            embedding_renorm(weight, input, max_norm, norm_type) - weight
        )
    rows = _gather(weight, input, jnp.nan)
    if scale_grad_by_freq:
        # (jnp.bincount would count a negative id as a 0)
        counts = (
            jnp.zeros(num_embeddings, jnp.int32)
            .at[jnp.ravel(input)]
            .add(1, mode="drop", wrap_negative_indices=False)
        )
        per_occurrence = _gather(counts, input, 1).astype(weight.dtype)
        # value unchanged (adds an exact 0), gradient divided by the frequency
        frozen = jax.lax.stop_gradient(rows)
        rows = frozen + (rows - frozen) / per_occurrence[..., None]
    if padding is not None:
        rows = jnp.where((input == padding)[..., None], jax.lax.stop_gradient(rows), rows)
    return rows
