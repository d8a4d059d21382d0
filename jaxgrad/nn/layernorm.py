"""``LayerNorm`` and ``RMSNorm``, mirroring ``torch.nn``.

torch's ``LayerNorm`` eps is 1e-5 (flax 1e-6: ~1e-6 relative difference on unit-
variance rows, enough to fail a float32 logit check); ``bias=False`` drops the bias
but keeps the weight. ``RMSNorm``'s ``eps=None`` is the input dtype's machine epsilon.
Params: ``weight`` (ones) and ``bias`` (zeros), both of ``normalized_shape``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from jaxgrad._arrays import canonical_dtype, check_dtype_available
from jaxgrad.nn.embedding import where_of
from jaxgrad.nn.functional._layernorm import layer_norm, normalized_shape_tuple, rms_norm
from jaxgrad.nn.module import Module, require_params


@dataclasses.dataclass(frozen=True)
class LayerNorm(Module):
    """``torch.nn.LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True,
    bias=True, device=None, dtype=None)``. Input `(*, *normalized_shape)`."""

    normalized_shape: Any
    eps: float = 1e-5
    elementwise_affine: bool = True
    bias: bool = True
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "normalized_shape", normalized_shape_tuple(self.normalized_shape))

    def init(self, key):
        del key
        dtype = check_dtype_available(self.dtype, what="dtype")
        params = {}
        if self.elementwise_affine:
            params["weight"] = jnp.ones(self.normalized_shape, dtype)
            if self.bias:
                params["bias"] = jnp.zeros(self.normalized_shape, dtype)
        return params

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        del train, key
        where = where_of("LayerNorm", path)
        names = ("weight", "bias") if self.bias else ("weight",)
        require_params(where, params, names if self.elementwise_affine else ())
        out = layer_norm(
            x,
            self.normalized_shape,
            params.get("weight"),
            params.get("bias"),
            self.eps,
            _where=where,
        )
        return out, dict(buffers)


@dataclasses.dataclass(frozen=True)
class RMSNorm(Module):
    """``torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True,
    device=None, dtype=None)``. Input `(*, *normalized_shape)`."""

    normalized_shape: Any
    eps: float | None = None
    elementwise_affine: bool = True
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "normalized_shape", normalized_shape_tuple(self.normalized_shape))

    def init(self, key):
        del key
        dtype = check_dtype_available(self.dtype, what="dtype")
        if not self.elementwise_affine:
            return {}
        return {"weight": jnp.ones(self.normalized_shape, dtype)}

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        del train, key
        where = where_of("RMSNorm", path)
        require_params(where, params, ("weight",) if self.elementwise_affine else ())
        return rms_norm(
            x, self.normalized_shape, params.get("weight"), self.eps, _where=where
        ), dict(buffers)
