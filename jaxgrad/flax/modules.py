"""Small ``flax.nnx`` modules for what stock flax cannot express with torch's meaning.

Each is used by ``jaxgrad.flax.to_nnx`` only where the stock layer would compute
something else; the table in ``docs/flax.md`` lists them:

| module | why stock flax is not enough |
|---|---|
| ``TorchBatchNorm`` | torch accumulates the *unbiased* batch variance into ``running_var`` (normalising with the biased one) and supports ``momentum=None`` (cumulative average); ``nnx.BatchNorm`` accumulates the biased variance |
| ``ChannelsFirst`` / ``ChannelsLast`` | layout adapters: NCHW ↔ NHWC at the model's edges and before an operation that reads torch's channel-first order (``Flatten``) |
| ``TorchFlatten`` | ``torch.flatten(x, start_dim, end_dim)``; flax has no flatten layer |
| ``TorchPaddedConv`` | torch's ``padding_mode`` ``'replicate'`` (and reflect / circular with pads other than flax's ``'REFLECT'``/``'CIRCULAR'``, which pad ``((k−1)//2, k//2)``): ``TorchPad`` then a VALID ``nnx.Conv`` |
| ``TorchGroupedConvTranspose`` | ``ConvTranspose`` with ``groups > 1``: one stock ``nnx.ConvTranspose`` per group (``nnx.ConvTranspose`` has no ``feature_group_count``) |
| ``TorchInstanceNorm`` | ``InstanceNorm`` with ``track_running_stats=True``: per-instance statistics in training, running ones (torch's momentum, the batch average of the unbiased instance variances) in eval; stock ``nnx.GroupNorm`` keeps no statistics |
| ``TorchPool`` | pooling with ``ceil_mode``, ``divisor_override``, dilation or adaptive windows that do not divide the input (``nnx.max_pool`` / ``nnx.avg_pool`` have none of these) |
| ``TorchEmbed`` | ``padding_idx``: that row's gradient is zero (``nnx.Embed`` has no ``padding_idx``) |
| ``avg_pool`` (a function) | ``count_include_pad=False`` in the input's dtype: ``nnx.avg_pool`` divides by a window count summed from ``jnp.ones`` (float64 under x64), which turns a float32 input's output float64 |

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
        for size in x.shape[start : end + 1]:
            merged *= size
        return x.reshape(x.shape[:start] + (merged,) + x.shape[end + 1 :])


class TorchBatchNorm(nnx.Module):
    """torch's ``BatchNorm{1,2}d`` on channels-last input, as an nnx module.

    Params ``scale`` `(C,)` and ``bias`` `(C,)` (``nnx.BatchNorm``'s names); batch
    statistics ``mean``, ``var`` `(C,)` and ``num_batches_tracked`` `()`.
    ``momentum`` keeps torch's meaning (weight of the *new* batch; ``None`` =
    cumulative average); ``running_var`` accumulates the unbiased variance.
    ``use_running_average`` is flax's switch (``True`` = torch's ``eval()``).
    """

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float | None = 0.1,
        epsilon: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        use_running_average: bool = False,
        param_dtype: Any = jnp.float32,
    ):
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
        use_running = (
            self.use_running_average if use_running_average is None else use_running_average
        )
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
                weight = (
                    1.0 / tracked.astype(x.dtype)
                    if self.momentum is None
                    else jnp.asarray(self.momentum, x.dtype)
                )
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


class TorchPaddedConv(nnx.Module):
    """torch's ``Conv{1,2}d`` with a ``padding_mode`` flax cannot express: ``pad``
    (``TorchPad``, the mode and torch's pads) then ``conv``, a VALID ``nnx.Conv``."""

    def __init__(self, pad: TorchPad, conv: nnx.Conv):
        self.pad, self.conv = pad, conv

    def __call__(self, x):
        return self.conv(self.pad(x))


class TorchGroupedConvTranspose(nnx.Module):
    """torch's ``ConvTranspose{1,2}d`` with ``groups`` G > 1 on channels-last input:
    ``convs``, G stock ``nnx.ConvTranspose`` (``transpose_kernel=True``), group g
    reading input channels ``[g·in/G, (g+1)·in/G)`` and writing output channels
    ``[g·out/G, (g+1)·out/G)``. ``nnx.ConvTranspose`` has no ``feature_group_count``
    (``lax.conv_transpose`` takes none). Group g's kernel `(*k, out/G, in/G)` is
    torch's weight rows ``[g·in/G, (g+1)·in/G)`` of `(in, out/G, *k)`, moved."""

    def __init__(self, convs: list):
        self.convs = nnx.List(convs)

    def __call__(self, x):
        parts = jnp.split(x, len(self.convs), axis=-1)
        return jnp.concatenate([conv(part) for conv, part in zip(self.convs, parts)], axis=-1)


class TorchInstanceNorm(nnx.Module):
    """torch's ``InstanceNorm{1,2}d(track_running_stats=True)`` on channels-last input.

    Params ``scale``, ``bias`` `(C,)` when ``affine``; statistics ``mean``, ``var``
    `(C,)` and ``num_batches_tracked`` `()` (torch keeps the counter and never
    advances it). Training normalises each `(n, c)` slice by its own biased
    variance and moves the running statistics by ``momentum`` (``None``: not at
    all, as torch passes 0) towards the batch mean of the instance means and of the
    unbiased instance variances; ``use_running_average=True`` (``eval()``)
    normalises with the running statistics.
    """

    def __init__(
        self,
        num_features: int,
        spatial: int,
        *,
        momentum: float | None = 0.1,
        epsilon: float = 1e-5,
        affine: bool = False,
        use_running_average: bool = False,
        param_dtype: Any = jnp.float32,
    ):
        self.num_features, self.spatial, self.momentum = num_features, spatial, momentum
        self.epsilon, self.affine = epsilon, affine
        self.use_running_average = use_running_average
        if affine:
            self.scale = nnx.Param(jnp.ones((num_features,), param_dtype))
            self.bias = nnx.Param(jnp.zeros((num_features,), param_dtype))
        self.mean = nnx.BatchStat(jnp.zeros((num_features,), param_dtype))
        self.var = nnx.BatchStat(jnp.ones((num_features,), param_dtype))
        self.num_batches_tracked = nnx.BatchStat(jnp.zeros((), jnp.int32))

    def __call__(self, x, use_running_average: bool | None = None):
        use_running = (
            self.use_running_average if use_running_average is None else use_running_average
        )
        if use_running:
            mean, var = self.mean[...], self.var[...]
        else:
            axes = tuple(range(x.ndim - 1 - self.spatial, x.ndim - 1))
            mean = jnp.mean(x, axes, keepdims=True)
            var = jnp.mean(jnp.square(x - mean), axes, keepdims=True)  # two-pass, biased
            count = 1
            for axis in axes:
                count *= x.shape[axis]
            momentum = 0.0 if self.momentum is None else self.momentum
            batch_axes = tuple(range(x.ndim - 1))
            stop = jax.lax.stop_gradient
            batch_mean = jnp.mean(stop(mean), batch_axes)
            batch_var = jnp.mean(stop(var), batch_axes) * (count / max(count - 1, 1))
            self.mean[...] = (1 - momentum) * self.mean[...] + momentum * batch_mean
            self.var[...] = (1 - momentum) * self.var[...] + momentum * batch_var
        y = (x - mean) * jax.lax.rsqrt(var + self.epsilon)
        if self.affine:
            y = y * self.scale[...] + self.bias[...]
        return y


def avg_pool(inputs, window_shape, strides=None, padding="VALID", count_include_pad=True):
    """``nnx.avg_pool`` (same arguments, channels-last ``inputs``) whose output keeps
    the input's dtype. With ``count_include_pad=False`` flax divides by the number of
    real elements in each window, counted by pooling ``jnp.ones`` of the default
    dtype: float64 when ``jax_enable_x64`` is on, so a float32 input came out float64.
    Here the count is pooled in the input's dtype (window counts are small integers,
    exact in any float dtype), so the division is the float32 one torch makes.

    Args:
      inputs: `(batch, *spatial, features)`.
      window_shape: the window, one int per spatial dimension.
      strides: one int per spatial dimension (default: all 1, as flax).
      padding: ``"VALID"``, ``"SAME"`` or ``(low, high)`` pairs per spatial dimension.
      count_include_pad: divide by the window's size (True) or by its real elements.
    """
    if count_include_pad:
        return nnx.avg_pool(inputs, window_shape, strides, padding, count_include_pad=True)
    from flax.linen import pooling

    total = pooling.pool(inputs, 0.0, jax.lax.add, window_shape, strides, padding)
    ones_shape = inputs.shape[:-1] + (1,)  # as flax: one count per window, broadcast
    if len(ones_shape) - 2 == len(window_shape):  # batched: the same counts for every row
        ones_shape = (1,) + ones_shape[1:]
    counts = pooling.pool(
        jnp.ones(ones_shape, inputs.dtype), 0.0, jax.lax.add, window_shape, strides, padding
    )
    return total / counts


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

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        padding_idx: int | None,
        param_dtype: Any = jnp.float32,
    ):
        self.num_embeddings, self.features, self.padding_idx = num_embeddings, features, padding_idx
        self.embedding = nnx.Param(jnp.zeros((num_embeddings, features), param_dtype))

    def __call__(self, ids):
        table = self.embedding[...]
        if self.padding_idx is not None:
            keep = (jnp.arange(self.num_embeddings) != self.padding_idx)[:, None]
            table = jnp.where(keep, table, jax.lax.stop_gradient(table))
        return jnp.take(table, ids, axis=0)


class TorchGraph(nnx.Module):
    """A traced torch ``forward`` (``jaxgrad.nn.capture.fx.GraphModule``) as an nnx module:
    ``__call__`` follows the traced graph, calling nnx twins of the torch layers
    (held in ``layers``, an ``nnx.Dict`` keyed by torch module path) and the op
    table's JAX functions for the torch function calls in between.

    Activations stay channels-last between layers that allow it; before an op of
    the table (which keeps torch's semantics, e.g. ``torch.cat(dim=1)``) they are
    moved back to torch's channel-first order, unless the op is elementwise.
    ``deterministic`` is nnx's mode switch (``module.eval()`` sets it): a forward that
    reads ``self.training`` runs torch's evaluation-mode graph when it is True.
    """

    def __init__(
        self,
        graph,
        layers: dict,
        needs: dict,
        tensors: dict,
        input_layout: str,
        output_layout: str = "torch",
    ):
        self.graph = graph  # the jaxgrad GraphModule: nodes and names, static
        self.layers = nnx.Dict(layers)
        self.needs = needs  # module path -> "cl" | "torch" | "any"
        self.tensors = nnx.Dict({k: nnx.Param(v) for k, v in tensors.items()})
        self.input_layout = input_layout  # "cl" when image inputs arrive channels-last
        self.output_layout = output_layout  # "cl": spatial outputs returned channels-last
        self.deterministic = False  # torch's train(); eval() sets it

    def __call__(self, *inputs, capture: dict | None = None):
        """The traced forward; ``capture``, when a dict, receives every layer's output
        in torch's layout under its module path (for per-layer comparisons)."""
        from jaxgrad.nn.capture import fx, fx_ops

        env, layout = {}, {}

        def torch_order(name):
            value = env[name]
            if layout.get(name) == "cl" and getattr(value, "ndim", 0) >= 3:
                return jnp.moveaxis(value, -1, 1)
            return value

        def args_of(node_args, keep_cl: bool):
            def read(arg):
                if isinstance(arg, fx.Ref):
                    return env[arg.name] if keep_cl else torch_order(arg.name)
                if isinstance(arg, (tuple, list)):
                    return type(arg)(read(a) for a in arg)
                if isinstance(arg, fx.SliceArg):
                    return slice(read(arg.start), read(arg.stop), read(arg.step))
                return arg

            return [read(a) for a in node_args]

        position = 0
        for node in self.graph.nodes_for(not self.deterministic):
            if node.op == "placeholder":
                env[node.name] = inputs[position] if position < len(inputs) else node.args[0]
                layout[node.name] = self.input_layout
                position += 1
            elif node.op == "get_attr":
                env[node.name], layout[node.name] = self.tensors[node.target][...], "torch"
            elif node.op == "call_module":
                need = self.needs[node.target]
                if len(node.args) != 1 or not isinstance(node.args[0], fx.Ref) or node.kwargs:
                    args = args_of(node.args, keep_cl=False)
                    kwargs = dict((k, args_of((v,), keep_cl=False)[0]) for k, v in node.kwargs)
                    env[node.name] = self.layers[node.target](*args, **kwargs)
                    layout[node.name] = "torch"
                    continue
                source = node.args[0].name
                if need == "cl" and layout[source] != "cl":
                    value = env[source]
                    value = jnp.moveaxis(value, 1, -1) if value.ndim >= 3 else value
                    out_layout = "cl"
                elif need == "torch":
                    value, out_layout = torch_order(source), "torch"
                else:
                    value, out_layout = env[source], layout[source]
                env[node.name], layout[node.name] = self.layers[node.target](value), out_layout
                if capture is not None:
                    capture[node.target] = torch_order(node.name)
            elif node.op == "call_op":
                refs = [a.name for a in node.args if isinstance(a, fx.Ref)]
                same = len({layout[r] for r in refs}) == 1 and not node.kwargs
                elementwise = node.target in _ELEMENTWISE and same
                op = fx_ops.lookup(node.target)
                args = args_of(node.args, keep_cl=elementwise)
                # keyword arguments may be earlier nodes too (F.layer_norm(..., weight=w))
                kwargs = dict((k, args_of((v,), keep_cl=False)[0]) for k, v in node.kwargs)
                if op.stateful:
                    raise ValueError(
                        f"to_nnx: the op {node.target} at node {node.name!r} draws "
                        "random numbers; use an nn.Dropout module instead."
                    )
                env[node.name] = op.fn(*args, **kwargs)
                layout[node.name] = layout[refs[0]] if elementwise else "torch"
            else:
                (result,) = node.args
                if isinstance(result, fx.Ref):
                    # a channels-last image stays so in NHWC mode; torch-ordered values as they are
                    return (
                        env[result.name] if self.output_layout == "cl" else torch_order(result.name)
                    )
                return args_of((result,), keep_cl=False)[0]
        raise AssertionError("a traced graph ends with an output node")


_ELEMENTWISE = {
    "operator.add",
    "operator.sub",
    "operator.mul",
    "operator.truediv",
    "operator.iadd",
    "operator.isub",
    "operator.imul",
    "torch.add",
    "torch.sub",
    "torch.mul",
    "method.add",
    "method.sub",
    "method.mul",
    "torch.relu",
    "method.relu",
    "torch.nn.functional.relu",
    "torch.sigmoid",
    "torch.tanh",
    "method.sigmoid",
    "method.tanh",
}


class TorchLayer(nnx.Module):
    """Any jaxgrad layer inside an nnx model, for the layers stock flax cannot express
    and no small module above covers: its params (``nnx.Param``) and buffers
    (``nnx.BatchStat``) under their torch names, its forward the jaxgrad layer's
    (torch's layout). ``deterministic`` is nnx's mode switch (``module.eval()`` sets
    it): ``False`` is torch's ``train()``, drawing dropout masks from ``rngs``."""

    def __init__(self, layer, params: dict, buffers: dict, seed: int = 0):
        self.layer = layer
        self.params = nnx.Dict({k: nnx.Param(jnp.asarray(v)) for k, v in params.items()})
        self.buffers = nnx.Dict({k: nnx.BatchStat(jnp.asarray(v)) for k, v in buffers.items()})
        self.deterministic = False
        self.rngs = nnx.Rngs(dropout=seed)

    def __call__(self, *inputs, **options):
        params = {k: v[...] for k, v in self.params.items()}
        buffers = {k: v[...] for k, v in self.buffers.items()}
        train = not self.deterministic
        key = self.rngs.dropout() if train else None
        output, new = self.layer.forward_with_state(
            params, *inputs, buffers=buffers, train=train, key=key, path="", **options
        )
        for name, value in new.items():
            self.buffers[name][...] = value
        return output
