"""``BatchNorm1d/2d/3d``, ``InstanceNorm1d/2d/3d``, ``GroupNorm``, ``LocalResponseNorm``,
mirroring ``torch.nn``.

Running statistics are explicit buffers under torch's names (``running_mean``,
``running_var``, ``num_batches_tracked``), threaded by ``forward_with_state``:

- ``train=True`` (torch's ``module.train()``) normalises with the batch statistics
  and returns the running ones updated exactly as torch updates them: ``momentum``
  (0.1) is the weight of the new batch, ``momentum=None`` a cumulative average
  (``1 / num_batches_tracked``), the running variance accumulates the *unbiased*
  batch variance while the input is normalised with the biased one;
- ``train=False`` (``module.eval()``) uses the running statistics and returns the
  buffers unchanged;
- ``track_running_stats=False``: no buffers, batch statistics in both modes.

``num_batches_tracked`` is torch's int64; JAX keeps it int32 unless
``jax_enable_x64`` is on (``load_buffers`` accepts torch's int64 when it fits).
Params: ``weight`` (ones) and ``bias`` (zeros), `(num_features,)`, when ``affine``
(``bias=False``, keyword-only as in torch ≥ 2.1: the weight alone).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import canonical_dtype, check_dtype_available
from jaxgrad.nn._layer import Layer
from jaxgrad.nn.functional import _norm
from jaxgrad.nn.module import Module, require_params

_STATS = ("running_mean", "running_var", "num_batches_tracked")


def _where(path: str) -> str:
    return f" at {path!r}" if path else ""


def check_input(
    layer, x, path: str, ranks: tuple, layout: str, channel_dim: int, channels: int
) -> None:
    """Raise naming the layer, its path, the input's shape and what was expected."""
    name = type(layer).__name__
    if x.ndim not in ranks:
        raise ValueError(
            f"{name}{_where(path)}: expected a {' or '.join(f'{r}-D' for r in ranks)} "
            f"input {layout}, got shape {tuple(x.shape)} ({x.ndim}-D)."
        )
    if x.shape[channel_dim] != channels:
        raise ValueError(
            f"{name}{_where(path)}: expected {channels} channels (dim {channel_dim} of "
            f"{layout}), got input shape {tuple(x.shape)}."
        )


def _affine_params(layer, params, affine: bool, bias: bool):
    """``(weight, bias)`` of an affine layer, None where it has none."""
    if not affine:
        return None, None
    require_params(type(layer).__name__, params, ("weight", "bias") if bias else ("weight",))
    return params["weight"], params.get("bias") if bias else None


def _require_buffers(layer, buffers, path: str) -> None:
    missing = [n for n in _STATS if n not in buffers]
    if missing:
        raise ValueError(
            f"{type(layer).__name__}{_where(path)}: `buffers` lacks "
            f"{', '.join(missing)} (got {sorted(buffers)}); this layer tracks running "
            "statistics: pass the model's buffers (`init_buffers()`, "
            "`load_buffers(state_dict)` or `from_torch(module, with_buffers=True)`)."
        )


@dataclasses.dataclass(frozen=True)
class _NormBase(Module):
    num_features: int
    eps: float = 1e-5
    momentum: float | None = 0.1
    affine: bool = True
    track_running_stats: bool = True
    device: Any = None  # accepted for signature parity; placement is jax's
    dtype: Any = None
    bias: bool = dataclasses.field(default=True, kw_only=True)  # torch ≥ 2.1: affine weight only

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        if (
            not isinstance(self.num_features, int)
            or isinstance(self.num_features, bool)
            or self.num_features <= 0
        ):
            raise ValueError(f"`num_features` (={self.num_features!r}) must be a positive int.")
        if self.momentum is not None and not 0.0 <= self.momentum <= 1.0:
            raise ValueError(f"`momentum` (={self.momentum}) must be in [0, 1] or None.")
        if not self.eps > 0:  # torch's batch_norm: "eps must be positive"
            raise ValueError(f"`eps` (={self.eps}) must be positive.")

    def init(self, key):
        del key  # deterministic: torch's reset_parameters sets ones and zeros
        if not self.affine:
            return {}
        dtype = check_dtype_available(self.dtype, what="dtype")
        params = {"weight": jnp.ones((self.num_features,), dtype)}
        if self.bias:
            params["bias"] = jnp.zeros((self.num_features,), dtype)
        return params

    def init_buffers(self):
        if not self.track_running_stats:
            return {}
        dtype = check_dtype_available(self.dtype, what="dtype")
        counter = jax.dtypes.canonicalize_dtype(np.int64)  # int32 without x64
        return {
            "running_mean": jnp.zeros((self.num_features,), dtype),
            "running_var": jnp.ones((self.num_features,), dtype),
            "num_batches_tracked": jnp.zeros((), counter),
        }

    def _affine_params(self, params):
        return _affine_params(self, params, self.affine, self.bias)


class _BatchNorm(_NormBase):
    _RANKS = ()
    _LAYOUT = ""

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        del key
        check_input(self, x, path, self._RANKS, self._LAYOUT, 1, self.num_features)
        weight, bias = self._affine_params(params)
        if not self.track_running_stats:
            out, _, _ = _norm.batch_norm_with_stats(
                x, None, None, weight, bias, True, 0.0, self.eps
            )
            return out, {}
        _require_buffers(self, buffers, path)
        if not train:
            out, _, _ = _norm.batch_norm_with_stats(
                x,
                buffers["running_mean"],
                buffers["running_var"],
                weight,
                bias,
                False,
                0.0,
                self.eps,
            )
            return out, dict(buffers)
        count = buffers["num_batches_tracked"] + 1
        # torch: momentum=None is a cumulative average, factor 1 / num_batches_tracked
        factor = (
            1.0 / count.astype(buffers["running_mean"].dtype)
            if self.momentum is None
            else self.momentum
        )
        out, mean, var = _norm.batch_norm_with_stats(
            x, buffers["running_mean"], buffers["running_var"], weight, bias, True, factor, self.eps
        )
        return out, {"running_mean": mean, "running_var": var, "num_batches_tracked": count}


@dataclasses.dataclass(frozen=True)
class BatchNorm1d(_BatchNorm):
    """``torch.nn.BatchNorm1d(num_features, eps=1e-05, momentum=0.1, affine=True,
    track_running_stats=True, device=None, dtype=None)``.

    Input `(N, C)` or `(N, C, L)`; statistics per channel over every other dim.
    """

    _RANKS = (2, 3)
    _LAYOUT = "(N, C) or (N, C, L)"


@dataclasses.dataclass(frozen=True)
class BatchNorm2d(_BatchNorm):
    """``torch.nn.BatchNorm2d(num_features, eps=1e-05, momentum=0.1, affine=True,
    track_running_stats=True, device=None, dtype=None)``.

    Input `(N, C, H, W)`; statistics per channel over `(N, H, W)`.
    """

    _RANKS = (4,)
    _LAYOUT = "(N, C, H, W)"


@dataclasses.dataclass(frozen=True)
class BatchNorm3d(_BatchNorm):
    """``torch.nn.BatchNorm3d(num_features, eps=1e-05, momentum=0.1, affine=True,
    track_running_stats=True, device=None, dtype=None)``.

    Input `(N, C, D, H, W)`; statistics per channel over `(N, D, H, W)`.
    """

    _RANKS = (5,)
    _LAYOUT = "(N, C, D, H, W)"


class _InstanceNorm(_NormBase):
    _SPATIAL = 0
    _LAYOUT = ""

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        del key
        unbatched = x.ndim == self._SPATIAL + 1
        check_input(
            self,
            x,
            path,
            (self._SPATIAL + 1, self._SPATIAL + 2),
            self._LAYOUT,
            0 if unbatched else 1,
            self.num_features,
        )
        weight, bias = self._affine_params(params)
        if unbatched:
            x = x[None]
        running_mean = running_var = None
        if self.track_running_stats:
            _require_buffers(self, buffers, path)
            running_mean, running_var = buffers["running_mean"], buffers["running_var"]
        use_input_stats = train or not self.track_running_stats
        # torch passes momentum=None as 0.0 here, and never counts batches
        momentum = 0.0 if self.momentum is None else self.momentum
        out, mean, var = _norm.instance_norm_with_stats(
            x, running_mean, running_var, weight, bias, use_input_stats, momentum, self.eps
        )
        new_buffers = dict(buffers)
        if self.track_running_stats and train:
            new_buffers.update(running_mean=mean, running_var=var)
        return (out[0] if unbatched else out), new_buffers


@dataclasses.dataclass(frozen=True)
class InstanceNorm1d(_InstanceNorm):
    """``torch.nn.InstanceNorm1d(num_features, eps=1e-05, momentum=0.1, affine=False,
    track_running_stats=False, device=None, dtype=None)``.

    Input `(N, C, L)` or `(C, L)`; each `(n, c)` row normalised over `L`.
    """

    affine: bool = False
    track_running_stats: bool = False
    _SPATIAL = 1
    _LAYOUT = "(N, C, L) or (C, L)"


@dataclasses.dataclass(frozen=True)
class InstanceNorm2d(_InstanceNorm):
    """``torch.nn.InstanceNorm2d(num_features, eps=1e-05, momentum=0.1, affine=False,
    track_running_stats=False, device=None, dtype=None)``.

    Input `(N, C, H, W)` or `(C, H, W)`; each `(n, c)` map normalised over `(H, W)`.
    """

    affine: bool = False
    track_running_stats: bool = False
    _SPATIAL = 2
    _LAYOUT = "(N, C, H, W) or (C, H, W)"


@dataclasses.dataclass(frozen=True)
class InstanceNorm3d(_InstanceNorm):
    """``torch.nn.InstanceNorm3d(num_features, eps=1e-05, momentum=0.1, affine=False,
    track_running_stats=False, device=None, dtype=None)``.

    Input `(N, C, D, H, W)` or `(C, D, H, W)`; each `(n, c)` volume normalised over
    `(D, H, W)`.
    """

    affine: bool = False
    track_running_stats: bool = False
    _SPATIAL = 3
    _LAYOUT = "(N, C, D, H, W) or (C, D, H, W)"


@dataclasses.dataclass(frozen=True)
class GroupNorm(Module):
    """``torch.nn.GroupNorm(num_groups, num_channels, eps=1e-05, affine=True,
    device=None, dtype=None)``.

    Input `(N, C, *)`; each sample's ``C`` channels split into ``num_groups`` groups
    normalised by their own mean and biased variance. No buffers: the same in
    training and evaluation. Params ``weight`` (ones), ``bias`` (zeros) `(C,)`.
    flax's ``GroupNorm`` defaults to ``epsilon=1e-6``; torch's is 1e-5.
    """

    num_groups: int
    num_channels: int
    eps: float = 1e-5
    affine: bool = True
    device: Any = None
    dtype: Any = None
    bias: bool = dataclasses.field(default=True, kw_only=True)

    def __post_init__(self):
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        if self.num_groups <= 0 or self.num_channels % self.num_groups:
            raise ValueError(
                f"`num_channels` (={self.num_channels}) must be divisible by "
                f"`num_groups` (={self.num_groups})."
            )

    def init(self, key):
        del key
        if not self.affine:
            return {}
        dtype = check_dtype_available(self.dtype, what="dtype")
        params = {"weight": jnp.ones((self.num_channels,), dtype)}
        if self.bias:
            params["bias"] = jnp.zeros((self.num_channels,), dtype)
        return params

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        del train, key
        if x.ndim < 2:
            raise ValueError(
                f"GroupNorm{_where(path)}: expected an input (N, C, *) of at least 2 dims, "
                f"got shape {tuple(x.shape)}."
            )
        check_input(self, x, path, (x.ndim,), "(N, C, *)", 1, self.num_channels)
        weight, bias = _affine_params(self, params, self.affine, self.bias)
        return _norm.group_norm(x, self.num_groups, weight, bias, self.eps), dict(buffers)


@dataclasses.dataclass(frozen=True)
class LocalResponseNorm(Layer):
    """``torch.nn.LocalResponseNorm(size, alpha=0.0001, beta=0.75, k=1.0)``.

    Input `(N, C, *)` with at least one dim after ``C``; each value divided by
    ``(k + alpha/size · Σ x²)^beta``, the sum over ``size`` neighbouring channels (zero
    beyond the first and last: ``size`` may exceed ``C``). No params, no buffers.
    """

    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0

    def __post_init__(self):
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 1:
            raise ValueError(f"LocalResponseNorm: `size` (={self.size!r}) must be a positive int.")

    def forward(self, params, x):
        return _norm.local_response_norm(x, self.size, self.alpha, self.beta, self.k)
