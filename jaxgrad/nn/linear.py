"""``Linear``, ``Bilinear``, ``Identity`` and ``Flatten``, mirroring ``torch.nn``.

``Linear.weight`` has torch's layout ``(out_features, in_features)`` and
``y = x @ weight.T + bias`` — flax's ``Dense`` stores the transpose, ``(in, out)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxgrad._arrays import canonical_dtype, check_dtype_available, check_input_dtype
from jaxgrad.nn import init as initializers
from jaxgrad.nn.functional._args import check_sizes
from jaxgrad.nn.module import Module, require_params


@dataclasses.dataclass(frozen=True)
class Linear(Module):
    """``torch.nn.Linear(in_features, out_features, bias=True, device=None, dtype=None)``.

    Params: ``weight`` `(out_features, in_features)`, ``bias`` `(out_features,)`.
    Input `(*, in_features)`, output `(*, out_features)`.
    """

    in_features: int
    out_features: int
    bias: bool = True
    device: Any = None  # accepted for signature parity with torch; placement is jax's
    dtype: Any = None  # None means torch's default, float32

    def __post_init__(self):
        # numpy/jax/torch/str spellings of one dtype compare equal after this
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        check_sizes(self, ("in_features", "out_features"))

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        w_key, b_key = jax.random.split(key)
        fan_in = self.in_features
        params = {
            "weight": initializers.torch_default_weight(
                w_key, (self.out_features, self.in_features), dtype, fan_in=fan_in
            )
        }
        if self.bias:
            params["bias"] = initializers.fan_in_uniform(
                b_key, (self.out_features,), dtype, fan_in=fan_in
            )
        return params

    def forward(self, params, x):
        require_params("Linear", params, ("weight", "bias") if self.bias else ("weight",))
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"Linear: `in_features` (={self.in_features}) must match the input's "
                f"last dimension (input shape {tuple(x.shape)})."
            )
        check_input_dtype("Linear", x, params["weight"].dtype)
        y = jnp.matmul(x, params["weight"].T)
        if self.bias:
            y = y + params["bias"]
        return y


@dataclasses.dataclass(frozen=True)
class Bilinear(Module):
    """``torch.nn.Bilinear(in1_features, in2_features, out_features, bias=True, device=None,
    dtype=None)``: ``y[k] = x1 @ weight[k] @ x2 + bias[k]``.

    Params: ``weight`` `(out_features, in1_features, in2_features)`, ``bias``
    `(out_features,)`; both uniform in ``±1/sqrt(in1_features)`` (torch's init).
    Inputs `(*, in1_features)` and `(*, in2_features)` with the same leading shape
    (or unbatched `(in1_features,)` and `(in2_features,)`); output `(*, out_features)`.
    """

    in1_features: int
    in2_features: int
    out_features: int
    bias: bool = True
    device: Any = None  # accepted for signature parity with torch; placement is jax's
    dtype: Any = None  # None means torch's default, float32

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        check_sizes(self, ("in1_features", "in2_features", "out_features"))
        if self.in1_features == 0:
            raise ValueError("`in1_features` (=0) must be > 0 (torch's init divides by it).")

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        w_key, b_key = jax.random.split(key)
        bound = 1.0 / math.sqrt(self.in1_features)
        shape = (self.out_features, self.in1_features, self.in2_features)
        params = {"weight": jax.random.uniform(w_key, shape, dtype, -bound, bound)}
        if self.bias:
            params["bias"] = jax.random.uniform(b_key, (self.out_features,), dtype, -bound, bound)
        return params

    def forward(self, params, x1, x2):
        require_params("Bilinear", params, ("weight", "bias") if self.bias else ("weight",))
        if x1.shape[-1:] != (self.in1_features,) or x2.shape[-1:] != (self.in2_features,):
            raise ValueError(
                f"Bilinear: `in1_features` (={self.in1_features}) and `in2_features` "
                f"(={self.in2_features}) must match the inputs' last dimensions (input1 "
                f"shape {tuple(x1.shape)}, input2 shape {tuple(x2.shape)})."
            )
        if x1.shape[:-1] != x2.shape[:-1]:
            raise ValueError(
                f"Bilinear: `input1` and `input2` must have the same batch "
                f"shape, got {tuple(x1.shape)} and {tuple(x2.shape)}."
            )
        check_input_dtype("Bilinear", x1, params["weight"].dtype)
        check_input_dtype("Bilinear", x2, params["weight"].dtype)
        y = jnp.einsum("...i,kij,...j->...k", x1, params["weight"], x2)
        if self.bias:
            y = y + params["bias"]
        return y


@dataclasses.dataclass(frozen=True, init=False)
class Identity(Module):
    """``torch.nn.Identity(*args, **kwargs)``: arguments are accepted and ignored."""

    def __init__(self, *args, **kwargs):
        del args, kwargs

    def init(self, key):
        return {}

    def forward(self, params, x):
        return x


@dataclasses.dataclass(frozen=True)
class Flatten(Module):
    """``torch.nn.Flatten(start_dim=1, end_dim=-1)``: merges dims in C-order (row-major).

    On NCHW activations this gives torch's C,H,W feature order; flax's NHWC
    flatten gives H,W,C — a porting pitfall.
    """

    start_dim: int = 1
    end_dim: int = -1

    def init(self, key):
        return {}

    def forward(self, params, x):
        ndim = x.ndim
        start = self.start_dim % ndim if ndim else 0
        end = self.end_dim % ndim if ndim else 0
        if start > end:
            raise ValueError(
                f"Flatten: `start_dim` (={self.start_dim}) comes after `end_dim` "
                f"(={self.end_dim}) for an input of {ndim} dims."
            )
        merged = 1
        for size in x.shape[start : end + 1]:
            merged *= size
        return x.reshape(x.shape[:start] + (merged,) + x.shape[end + 1 :])
