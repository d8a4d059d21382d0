"""Small ``flax.nnx`` modules for what stock flax cannot express with torch's meaning.

Each is used by ``jaxgrad.flax.to_nnx`` only where the stock layer would compute
something else; the table in ``docs/flax.md`` lists them:

=====================  =================================================================
module                 why stock flax is not enough
=====================  =================================================================
``TorchBatchNorm``     torch accumulates the *unbiased* batch variance into
                       ``running_var`` (normalising with the biased one) and supports
                       ``momentum=None`` (cumulative average); ``nnx.BatchNorm``
                       accumulates the biased variance
``ChannelsFirst`` /    layout adapters: NCHW ↔ NHWC at the model's edges and before an
``ChannelsLast``       operation that reads torch's channel-first order (``Flatten``)
``TorchFlatten``       ``torch.flatten(x, start_dim, end_dim)``; flax has no flatten layer
``TorchPad``           torch's ``padding_mode`` reflect / replicate / circular before a
                       conv (``nnx.Conv`` pads with zeros only)
``TorchPool``          pooling with ``ceil_mode``, ``divisor_override``, dilation or
                       adaptive windows that do not divide the input (``nnx.max_pool`` /
                       ``nnx.avg_pool`` have none of these)
``TorchEmbed``         ``padding_idx``: that row's gradient is zero (``nnx.Embed`` has no
                       ``padding_idx``)
=====================  =================================================================

All of them work on channels-last activations, flax's idiom.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx


class ChannelsLast(nnx.Module):
    """``(N, C, *spatial) -> (N, *spatial, C)``: torch-shaped batches into flax layout."""

    def __call__(self, x):
        return jnp.moveaxis(x, 1, -1)


class ChannelsFirst(nnx.Module):
    """``(N, *spatial, C) -> (N, C, *spatial)``: back to torch's channel-first order."""

    def __call__(self, x):
        return jnp.moveaxis(x, -1, 1)


class TorchFlatten(nnx.Module):
    """``torch.nn.Flatten(start_dim, end_dim)`` on a channel-first array."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        self.start_dim, self.end_dim = start_dim, end_dim

    def __call__(self, x):
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        merged = 1
        for size in x.shape[start:end + 1]:
            merged *= size
        return x.reshape(x.shape[:start] + (merged,) + x.shape[end + 1:])


class TorchBatchNorm(nnx.Module):
    """torch's ``BatchNorm{1,2}d`` on channels-last input, as an nnx module.

    Params ``scale`` `(C,)` and ``bias`` `(C,)` (``nnx.BatchNorm``'s names); batch
    statistics ``mean``, ``var`` `(C,)` and ``num_batches_tracked`` `()`.
    ``momentum`` keeps torch's meaning (weight of the *new* batch; ``None`` =
    cumulative average); ``running_var`` accumulates the unbiased variance.
    ``use_running_average`` is flax's switch (``True`` = torch's ``eval()``).
    """

    def __init__(self, num_features: int, *, momentum: float | None = 0.1,
                 epsilon: float = 1e-5, affine: bool = True,
                 track_running_stats: bool = True, use_running_average: bool = False,
                 param_dtype: Any = jnp.float32):
        self.num_features, self.momentum, self.epsilon = num_features, momentum, epsilon
        self.affine, self.track_running_stats = affine, track_running_stats
        self.use_running_average = use_running_average
        if affine:
            self.scale = nnx.Param(jnp.ones((num_features,), param_dtype))
            self.bias = nnx.Param(jnp.zeros((num_features,), param_dtype))
        if track_running_stats:
            self.mean = nnx.BatchStat(jnp.zeros((num_features,), param_dtype))
            self.var = nnx.BatchStat(jnp.ones((num_features,), param_dtype))
            self.num_batches_tracked = nnx.BatchStat(jnp.zeros((), jnp.int32))

    def __call__(self, x, use_running_average: bool | None = None):
        use_running = self.use_running_average if use_running_average is None else use_running_average
        axes = tuple(range(x.ndim - 1))
        if use_running and self.track_running_stats:
            mean, var = self.mean[...], self.var[...]
        else:
            mean = jnp.mean(x, axes)
            var = jnp.mean(jnp.square(x - mean), axes)  # two-pass, biased: torch normalises with it
            if not use_running and self.track_running_stats:
                count = x.size // x.shape[-1]
                tracked = self.num_batches_tracked[...] + 1
                self.num_batches_tracked[...] = tracked
                weight = (1.0 / tracked.astype(x.dtype) if self.momentum is None
                          else jnp.asarray(self.momentum, x.dtype))
                unbiased = var * (count / max(count - 1, 1))
                stop = jax.lax.stop_gradient
                self.mean[...] = (1 - weight) * self.mean[...] + weight * stop(mean)
                self.var[...] = (1 - weight) * self.var[...] + weight * stop(unbiased)
        y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)
        if self.affine:
            y = y * self.scale[...] + self.bias[...]
        return y


class TorchPad(nnx.Module):
    """Pad the spatial axes of a channels-last array as torch's ``padding_mode`` does."""

    _MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}

    def __init__(self, pads: tuple, mode: str):
        self.pads, self.mode = tuple(tuple(p) for p in pads), mode

    def __call__(self, x):
        widths = [(0, 0)] + list(self.pads) + [(0, 0)]
        return jnp.pad(x, widths, mode=self._MODES[self.mode])


class TorchPool(nnx.Module):
    """A torch pooling layer the stock ``nnx`` pools cannot express, on channels-last
    input: the jaxgrad twin's functional form applied channel-first in between."""

    def __init__(self, layer):
        self.layer = layer  # a jaxgrad.nn pooling layer: static hyperparameters

    def __call__(self, x):
        y = self.layer.apply({}, jnp.moveaxis(x, -1, 1))
        if isinstance(y, tuple):  # return_indices
            raise ValueError("to_nnx: pooling with return_indices=True has no nnx form.")
        return jnp.moveaxis(y, 1, -1)


class TorchEmbed(nnx.Module):
    """``torch.nn.Embedding`` with ``padding_idx``: lookup whose padding row gets no
    gradient. Param ``embedding`` `(num_embeddings, features)` as ``nnx.Embed``."""

    def __init__(self, num_embeddings: int, features: int, padding_idx: int | None,
                 param_dtype: Any = jnp.float32):
        self.num_embeddings, self.features, self.padding_idx = num_embeddings, features, padding_idx
        self.embedding = nnx.Param(jnp.zeros((num_embeddings, features), param_dtype))

    def __call__(self, ids):
        table = self.embedding[...]
        if self.padding_idx is not None:
            keep = (jnp.arange(self.num_embeddings) != self.padding_idx)[:, None]
            table = jnp.where(keep, table, jax.lax.stop_gradient(table))
        return jnp.take(table, ids, axis=0)
