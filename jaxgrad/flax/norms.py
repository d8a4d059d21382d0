"""Normalisation layers, torch <-> flax.nnx: BatchNorm, InstanceNorm, GroupNorm,
LayerNorm and RMSNorm (the builders and readers ``convert`` dispatches to).

- to nnx: ``BatchNorm`` becomes ``TorchBatchNorm`` (ours: torch's momentum and unbiased
  running variance), ``InstanceNorm`` with running statistics ``TorchInstanceNorm``
  (ours) and without them a stock ``nnx.GroupNorm`` of one channel per group;
  ``GroupNorm``, ``LayerNorm`` and ``RMSNorm`` the stock layers with torch's epsilon
  and a two-pass variance; a ``normalized_shape`` over k > 1 axes a stock norm over the
  trailing axes with flat ``(prod(shape),)`` parameters, flax's own reshape onto them.
- from nnx: the same back, plus hand-built stock ``nnx.BatchNorm`` (flax's momentum
  ``m`` is torch's ``1 - m``) and norms with only one affine parameter (the other at its
  identity; ``grads_to_torch`` refuses its gradient); norms over other axes than
  torch's are refused by name.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxgrad import nn
from jaxgrad.flax import modules as m
from jaxgrad.flax._util import as_numpy, as_tuple, dtype_of, empty, rngs, set_value, value_of


def batch_norm_to_nnx(layer, params, buffers, dtype):
    module = m.TorchBatchNorm(
        layer.num_features,
        momentum=layer.momentum,
        epsilon=layer.eps,
        affine=layer.affine,
        track_running_stats=layer.track_running_stats,
        param_dtype=dtype,
    )
    if layer.affine:
        set_value(module.scale, params["weight"])
        set_value(module.bias, params["bias"])
    if layer.track_running_stats:
        set_value(module.mean, buffers["running_mean"])
        set_value(module.var, buffers["running_var"])
        set_value(module.num_batches_tracked, buffers["num_batches_tracked"])
    return module


def _stock_group_norm(channels: int, groups: int, eps: float, affine: bool, params, dtype):
    """A stock ``nnx.GroupNorm`` with torch's ``eps`` and a two-pass variance."""
    module = empty(
        lambda: nnx.GroupNorm(
            channels,
            num_groups=groups,
            epsilon=eps,
            use_bias=affine,
            use_scale=affine,
            use_fast_variance=False,
            param_dtype=dtype,
            rngs=rngs(),
        )
    )
    if affine:
        set_value(module.scale, params["weight"])
        set_value(module.bias, params["bias"])
    return module


def group_norm_to_nnx(layer, params, buffers, dtype):
    return _stock_group_norm(
        layer.num_channels, layer.num_groups, layer.eps, layer.affine, params, dtype
    )


def _trailing_axes(shape: tuple) -> dict:
    """nnx's arguments for a norm over torch's ``normalized_shape`` (the trailing
    ``len(shape)`` axes): ``num_features`` their product, ``reduction_axes`` and
    ``feature_axes`` those axes. flax reshapes its flat ``(prod(shape),)`` scale and bias
    to them (``_normalize``), so they are torch's ``weight`` raveled in C order."""
    axes = tuple(range(-len(shape), 0))
    return {
        "num_features": int(np.prod(shape)),
        "reduction_axes": axes[0] if len(axes) == 1 else axes,
        "feature_axes": axes[0] if len(axes) == 1 else axes,
    }


def _mark_shape(module, shape: tuple):
    """Record torch's ``normalized_shape`` on a multi-axis stock norm: its flat scale
    does not say how the trailing axes split (8 features over (2, 4) or (4, 2))."""
    if len(shape) > 1:
        module.torch_normalized_shape = tuple(int(n) for n in shape)
    return module


def layer_norm_to_nnx(layer, params, buffers, dtype):
    shape = as_tuple(layer.normalized_shape, 1)
    affine = layer.elementwise_affine
    use_bias = affine and getattr(layer, "bias", True)
    module = empty(
        lambda: nnx.LayerNorm(
            **_trailing_axes(shape),
            epsilon=layer.eps,
            use_scale=affine,
            use_bias=use_bias,
            use_fast_variance=False,
            param_dtype=dtype,
            rngs=rngs(),
        )
    )
    if affine:
        set_value(module.scale, as_numpy(params["weight"]).reshape(-1))
    if use_bias:
        set_value(module.bias, as_numpy(params["bias"]).reshape(-1))
    return _mark_shape(module, shape)


def rms_norm_to_nnx(layer, params, buffers, dtype):
    shape = as_tuple(layer.normalized_shape, 1)
    # torch's eps=None is the dtype's machine epsilon; flax's default is 1e-6
    eps = layer.eps if layer.eps is not None else float(jnp.finfo(dtype).eps)
    module = empty(
        lambda: nnx.RMSNorm(
            **_trailing_axes(shape),
            epsilon=eps,
            use_scale=layer.elementwise_affine,
            param_dtype=dtype,
            rngs=rngs(),
        )
    )
    if layer.elementwise_affine:
        set_value(module.scale, as_numpy(params["weight"]).reshape(-1))
    return _mark_shape(module, shape)


def instance_norm_to_nnx(layer, params, buffers, dtype):
    spatial = 2 if type(layer).__name__.endswith("2d") else 1
    if layer.track_running_stats:
        module = m.TorchInstanceNorm(
            layer.num_features,
            spatial,
            momentum=layer.momentum,
            epsilon=layer.eps,
            affine=layer.affine,
            param_dtype=dtype,
        )
        set_value(module.mean, buffers["running_mean"])
        set_value(module.var, buffers["running_var"])
        set_value(module.num_batches_tracked, buffers["num_batches_tracked"])
        if layer.affine:
            set_value(module.scale, params["weight"])
            set_value(module.bias, params["bias"])
        return module
    # instance norm is group norm with one channel per group
    return _stock_group_norm(
        layer.num_features, layer.num_features, layer.eps, layer.affine, params, dtype
    )


def torch_instance_norm_from_nnx(module, context):
    cls = getattr(nn, f"InstanceNorm{module.spatial}d")
    layer = cls(
        module.num_features,
        eps=module.epsilon,
        momentum=module.momentum,
        affine=module.affine,
        track_running_stats=True,
        dtype=dtype_of(module),
    )
    params = (
        {"weight": value_of(module.scale), "bias": value_of(module.bias)} if module.affine else {}
    )
    buffers = {
        "running_mean": value_of(module.mean),
        "running_var": value_of(module.var),
        "num_batches_tracked": value_of(module.num_batches_tracked),
    }
    return layer, params, buffers


def torch_batch_norm_from_nnx(module, context):
    cls = getattr(nn, f"BatchNorm{context.spatial or 1}d")
    layer = cls(
        module.num_features,
        eps=module.epsilon,
        momentum=module.momentum,
        affine=module.affine,
        track_running_stats=module.track_running_stats,
        dtype=dtype_of(module),
    )
    params = (
        {"weight": value_of(module.scale), "bias": value_of(module.bias)} if module.affine else {}
    )
    buffers = {}
    if module.track_running_stats:
        buffers = {
            "running_mean": value_of(module.mean),
            "running_var": value_of(module.var),
            "num_batches_tracked": value_of(module.num_batches_tracked),
        }
    return layer, params, buffers


def batch_norm_from_nnx(module, context):
    _refuse_other_axes(
        module,
        context,
        "each channel (the last axis in nnx) over the batch and spatial axes",
        axis=-1,
    )
    # flax's momentum weighs the old average: torch's is 1 - momentum
    cls = getattr(nn, f"BatchNorm{context.spatial or 1}d")
    affine = module.use_scale or module.use_bias
    # the parameters' dtype, never the statistics' (see below)
    dtype = value_of(
        module.scale if module.use_scale else module.bias if module.use_bias else module.mean
    ).dtype
    layer = cls(
        module.num_features,
        eps=module.epsilon,
        momentum=1.0 - module.momentum,
        affine=affine,
        dtype=dtype,
    )
    params = _affine_params(module, context, module.num_features, dtype) if affine else {}
    # nnx keeps its statistics in float32 whatever param_dtype is; a torch module has one
    # dtype, so they take the parameters' (float32 -> float64 is exact)
    buffers = {
        "running_mean": value_of(module.mean).astype(dtype),
        "running_var": value_of(module.var).astype(dtype),
        "num_batches_tracked": np.zeros((), np.int64),
    }
    return layer, params, buffers


def _affine_params(module, context, features: int, dtype) -> dict[str, np.ndarray]:
    """torch's ``weight`` and ``bias`` of a stock nnx norm layer with ``use_scale`` or
    ``use_bias``, where torch has both or neither (``BatchNorm``, ``GroupNorm``, a
    ``LayerNorm`` without a scale): the one flax left out reads back at its identity
    (weight ones, bias zeros), the same forward, as ``x̂ · 1 + 0`` is ``x̂``. Its
    gradient is not in flax's, so ``grads_to_torch`` refuses it rather than invent one."""
    if context.gradients and module.use_scale != module.use_bias:
        missing = "weight" if module.use_bias else "bias"
        raise ValueError(
            f"grads_to_torch: nnx.{type(module).__name__} at {context.path or 'the top level'!r} "
            f"has use_scale={module.use_scale}, use_bias={module.use_bias}: torch's `{missing}` "
            "has no gradient in flax's; give the layer both (or neither) to compare "
            "gradients with torch's"
        )
    return {
        "weight": value_of(module.scale) if module.use_scale else np.ones(features, dtype),
        "bias": value_of(module.bias) if module.use_bias else np.zeros(features, dtype),
    }


def _refuse_other_axes(module, context, meaning: str, **torch_axes) -> None:
    """A stock norm that normalises, or keeps its statistics, over other axes than torch's
    layer does has no torch form: refused by name (all such settings at once) rather than
    read back as a layer that normalises something else. ``axis_name`` (statistics
    across devices) is torch's ``SyncBatchNorm``, not a layer ``from_nnx`` builds."""

    def canonical(value):
        return (
            tuple(value)
            if isinstance(value, (list, tuple))
            else (value if value is None else (value,))
        )

    wrong = [
        f"`{name}`={getattr(module, name)!r} (torch's: {want!r})"
        for name, want in {**torch_axes, "axis_name": None}.items()
        if canonical(getattr(module, name, want)) != canonical(want)
    ]
    if wrong:
        raise ValueError(
            f"from_nnx: nnx.{type(module).__name__} at {context.path or 'the top level'!r} "
            f"has {', '.join(wrong)}: torch's {type(module).__name__} normalises {meaning}; "
            "build the layer with those defaults to read it back"
        )


def group_norm_from_nnx(module, context):
    _refuse_other_axes(
        module,
        context,
        "each group of channels over it and every spatial axis (channels last)",
        reduction_axes=None,
    )
    affine = module.use_scale or module.use_bias
    # nnx.GroupNorm keeps no feature count: num_groups and group_size (both always set)
    channels = module.num_groups * module.group_size
    layer = nn.GroupNorm(
        module.num_groups, channels, eps=module.epsilon, affine=affine, dtype=dtype_of(module)
    )
    params = _affine_params(module, context, channels, dtype_of(module)) if affine else {}
    return layer, params, {}


def _normalized_shape(module, context) -> tuple[int, ...]:
    """torch's ``normalized_shape`` of a stock ``nnx.LayerNorm``/``nnx.RMSNorm``: its
    features for the last axis; for trailing axes ``(-k, …, -1)`` (both reduction and
    feature axes) the shape ``to_nnx`` recorded. Any other axes: refused by name."""

    def canonical(value):
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)

    axes = canonical(module.reduction_axes)
    trailing = tuple(range(-len(axes), 0))
    meaning = "its trailing normalized_shape axes, scaled per element of them"
    if len(axes) > 1 and axes == trailing and canonical(module.feature_axes) == trailing:
        _refuse_other_axes(
            module,
            context,
            meaning,
            reduction_axes=module.reduction_axes,
            feature_axes=module.feature_axes,
        )  # axis_name
        recorded = getattr(module, "torch_normalized_shape", None)
        if (
            recorded is not None
            and len(recorded) == len(axes)
            and int(np.prod(recorded)) == module.num_features
        ):
            return tuple(recorded)
        raise ValueError(
            f"from_nnx: nnx.{type(module).__name__} at {context.path or 'the top level'!r} "
            f"normalises the trailing axes {axes} with {module.num_features} flat features, "
            "but does not say how they split over those axes: set "
            "`module.torch_normalized_shape` to torch's normalized_shape (as to_nnx does), "
            f"a tuple of {len(axes)} sizes whose product is {module.num_features}"
        )
    _refuse_other_axes(module, context, meaning, reduction_axes=-1, feature_axes=-1)
    return (module.num_features,)


def layer_norm_from_nnx(module, context):
    shape = _normalized_shape(module, context)
    # torch's LayerNorm has a weight-only form (bias=False) but no bias-only one
    layer = nn.LayerNorm(
        shape if len(shape) > 1 else shape[0],
        eps=module.epsilon,
        elementwise_affine=module.use_scale or module.use_bias,
        bias=module.use_bias,
        dtype=dtype_of(module),
    )
    if module.use_bias:
        params = _affine_params(module, context, module.num_features, dtype_of(module))
    else:
        params = {"weight": value_of(module.scale)} if module.use_scale else {}
    return layer, {k: np.reshape(v, shape) for k, v in params.items()}, {}


def rms_norm_from_nnx(module, context):
    shape = _normalized_shape(module, context)
    layer = nn.RMSNorm(
        shape if len(shape) > 1 else shape[0],
        eps=module.epsilon,
        elementwise_affine=module.use_scale,
        dtype=dtype_of(module),
    )
    params = {"weight": value_of(module.scale)} if module.use_scale else {}
    return layer, {k: np.reshape(v, shape) for k, v in params.items()}, {}


TO_NNX = {  # torch class name -> (builder, layout need)
    "BatchNorm1d": (batch_norm_to_nnx, "cl"),
    "BatchNorm2d": (batch_norm_to_nnx, "cl"),
    "GroupNorm": (group_norm_to_nnx, "cl"),
    "InstanceNorm1d": (instance_norm_to_nnx, "cl"),
    "InstanceNorm2d": (instance_norm_to_nnx, "cl"),
    "LayerNorm": (layer_norm_to_nnx, "torch"),
    "RMSNorm": (rms_norm_to_nnx, "torch"),
}
FROM_NNX = {
    m.TorchBatchNorm: torch_batch_norm_from_nnx,
    m.TorchInstanceNorm: torch_instance_norm_from_nnx,
    nnx.BatchNorm: batch_norm_from_nnx,
    nnx.GroupNorm: group_norm_from_nnx,
    nnx.LayerNorm: layer_norm_from_nnx,
    nnx.RMSNorm: rms_norm_from_nnx,
}
