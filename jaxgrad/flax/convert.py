"""``to_nnx`` / ``from_nnx``: torch-keyed jaxgrad models as idiomatic ``flax.nnx``
modules, and back.

The nnx side is built from stock layers (``nnx.Linear``, ``nnx.Conv``,
``nnx.LayerNorm``, ``nnx.Embed``, ``nnx.Dropout``, ``nnx.Sequential``…) with every
hyperparameter set to torch's meaning, and from the few modules of
``jaxgrad.flax.modules`` where stock flax cannot express torch's behaviour.

Layout: flax works channels-last. A model whose input is an image (its first layer
that cares is a convolution, pooling or batch/group norm) takes NHWC input with
``layout="NHWC"`` (flax's idiom, the default) or torch's NCHW with
``layout="NCHW"``. Inside, activations stay channels-last while the layers allow
it; before a layer that reads torch's channel-first order (``Flatten``, ``Linear``
on a feature map, softmax over a dim) a ``ChannelsFirst`` adapter restores it, so
every parameter keeps torch's meaning and a following ``Linear`` needs no
permutation. With ``layout="NCHW"`` a spatial output is returned NCHW, as torch.

Each converter is one entry of ``_TO_NNX`` (jaxgrad class name → builder) and one
of ``_FROM_NNX`` (nnx class → reader); a layer is ``"cl"`` (works channels-last),
``"torch"`` (needs torch's order) or ``"any"`` (elementwise).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxgrad import nn
from jaxgrad.flax import attention, conv, linear, norms, sequence, transformer
from jaxgrad.flax import modules as m
from jaxgrad.flax import program as program_twin
from jaxgrad.flax._util import as_param as _param
from jaxgrad.flax._util import as_tuple as _tuple
from jaxgrad.flax._util import empty as _empty
from jaxgrad.flax._util import rngs as _rngs
from jaxgrad.flax._util import set_value as _set
from jaxgrad.flax._util import unset as _unset
from jaxgrad.flax._util import value_of as _value

LAYOUTS = ("NHWC", "NCHW")
"""``to_nnx``'s ``layout`` values: channels-last (flax's idiom) or torch's channels-first."""
_ADAPTERS = (m.ChannelsLast, m.ChannelsFirst)


# --------------------------------------------------------------------- to nnx
def _embedding(layer, params, buffers, dtype):
    for flag in ("max_norm",):
        if getattr(layer, flag, None) is not None:
            raise ValueError(f"to_nnx: Embedding with {flag} is not supported (in-place renorm).")
    if getattr(layer, "scale_grad_by_freq", False):
        raise ValueError("to_nnx: Embedding with scale_grad_by_freq=True is not supported.")
    if layer.padding_idx is None:
        module = _empty(
            lambda: nnx.Embed(
                layer.num_embeddings, layer.embedding_dim, param_dtype=dtype, rngs=_rngs()
            )
        )
    else:
        module = m.TorchEmbed(
            layer.num_embeddings,
            layer.embedding_dim,
            layer.padding_idx % layer.num_embeddings,
            param_dtype=dtype,
        )
    _set(module.embedding, params["weight"])
    return module


def _dropout(layer, params, buffers, dtype):
    # Dropout1d/2d drop whole channels: one draw per (sample, channel), broadcast over
    # the spatial axes of the channels-last activation
    name = type(layer).__name__
    broadcast = {"Dropout1d": (1,), "Dropout2d": (1, 2)}.get(name, ())
    return nnx.Dropout(rate=layer.p, broadcast_dims=broadcast, rngs=nnx.Rngs(dropout=0))


def _softplus(layer, params, buffers, dtype):
    from jaxgrad.nn import (
        functional as F,  # torch's beta and threshold; jax.nn.softplus has neither
    )

    return functools.partial(F.softplus, beta=layer.beta, threshold=layer.threshold)


def _mish(x):
    return x * jnp.tanh(jax.nn.softplus(x))


def _softmax(fn):
    def build(layer, params, buffers, dtype):
        if layer.dim is None:
            raise ValueError(
                f"to_nnx: {type(layer).__name__}(dim=None) picks its dim from the "
                "input's rank at run time; give `dim` explicitly."
            )
        return functools.partial(fn, axis=layer.dim)

    return build


def _flatten(layer, params, buffers, dtype):
    return m.TorchFlatten(layer.start_dim, layer.end_dim)


def _pool(layer, params, buffers, dtype):
    name = type(layer).__name__
    spatial = 2 if name.endswith("2d") else 1
    if name.startswith(("MaxPool", "AvgPool")):
        kernel = _tuple(layer.kernel_size, spatial)
        stride = _tuple(
            layer.stride if layer.stride not in (None, ()) else layer.kernel_size, spatial
        )
        pads = [(p, p) for p in _tuple(layer.padding, spatial)]
        plain = not getattr(layer, "ceil_mode", False)
        if name.startswith("MaxPool"):
            plain = (
                plain and set(_tuple(layer.dilation, spatial)) == {1} and not layer.return_indices
            )
            if plain:
                return functools.partial(
                    nnx.max_pool, window_shape=kernel, strides=stride, padding=pads
                )
        else:
            plain = plain and layer.divisor_override is None
            if plain:
                # count_include_pad=False: nnx.avg_pool counts in float64 under x64
                pool = nnx.avg_pool if layer.count_include_pad else m.avg_pool
                return functools.partial(
                    pool,
                    window_shape=kernel,
                    strides=stride,
                    padding=pads,
                    count_include_pad=layer.count_include_pad,
                )
    return m.TorchPool(layer)


def _torch_layer(layer, params, buffers, dtype):
    """The fallback: the jaxgrad layer itself inside an nnx module (``TorchLayer``)."""
    if not isinstance(layer, nn.Module):
        raise ValueError(f"to_nnx: {type(layer).__name__} is not a jaxgrad layer.")
    return m.TorchLayer(layer, params, buffers)


def _activation(fn: Callable) -> Callable:
    return lambda layer, params, buffers, dtype: fn


def _gelu(layer, params, buffers, dtype):
    # torch's default is the exact (erf) form; jax.nn.gelu defaults to tanh
    return functools.partial(nnx.gelu, approximate=layer.approximate == "tanh")


def _leaky_relu(layer, params, buffers, dtype):
    return functools.partial(nnx.leaky_relu, negative_slope=layer.negative_slope)


def _identity(layer, params, buffers, dtype):
    return _identity_fn


def _identity_fn(x):
    return x


# name -> (builder, layout need)
_TO_NNX: dict[str, tuple[Callable, str]] = {
    "Linear": (linear.linear_to_nnx, "torch"),
    **{name: (builder, "cl") for name, builder in conv.TO_NNX.items()},
    **norms.TO_NNX,
    "Embedding": (_embedding, "torch"),
    "Dropout": (_dropout, "any"),
    "Flatten": (_flatten, "torch"),
    "MaxPool1d": (_pool, "cl"),
    "MaxPool2d": (_pool, "cl"),
    "AvgPool1d": (_pool, "cl"),
    "AvgPool2d": (_pool, "cl"),
    "AdaptiveAvgPool1d": (_pool, "cl"),
    "AdaptiveAvgPool2d": (_pool, "cl"),
    "AdaptiveMaxPool1d": (_pool, "cl"),
    "AdaptiveMaxPool2d": (_pool, "cl"),
    "Dropout1d": (_dropout, "cl"),
    "Dropout2d": (_dropout, "cl"),
    "ReLU6": (_activation(nnx.relu6), "any"),
    "Hardswish": (_activation(nnx.hard_swish), "any"),
    "Hardsigmoid": (_activation(nnx.hard_sigmoid), "any"),
    "ELU": (lambda layer, p, b, d: functools.partial(nnx.elu, alpha=layer.alpha), "any"),
    "Softplus": (_softplus, "any"),
    "Mish": (_activation(_mish), "any"),
    "Softmax": (_softmax(nnx.softmax), "torch"),
    "LogSoftmax": (_softmax(nnx.log_softmax), "torch"),
    "ReLU": (_activation(nnx.relu), "any"),
    "Sigmoid": (_activation(nnx.sigmoid), "any"),
    "Tanh": (_activation(nnx.tanh), "any"),
    "SiLU": (_activation(nnx.silu), "any"),
    "GELU": (_gelu, "any"),
    "LeakyReLU": (_leaky_relu, "any"),
    "Identity": (_identity, "any"),
    **{
        name: (builder, "torch")
        for module in (attention, sequence, transformer)
        for name, builder in module.TO_NNX.items()
    },
}
SUPPORTED = tuple(sorted([*_TO_NNX, "Sequential"]))
"""The jaxgrad layer classes ``to_nnx`` maps to ``flax.nnx`` modules, sorted."""


def _need(layer) -> str:
    name = type(layer).__name__
    if name == "GraphModule":
        for node in layer.nodes:
            if node.op == "call_module":
                need = _need(dict(layer.layers)[node.target])
                if need != "any":
                    return need
        return "torch"
    if name == "Sequential":
        for child in layer.layers:
            need = _need(child)
            if need != "any":
                return need
        return "any"
    return _TO_NNX.get(name, (None, "torch"))[1]


class _Builder:
    def __init__(self, dtype, layout: str):
        self.dtype, self.layout = dtype, layout

    def sequential(self, model, params, buffers, state: str, path: str):
        items = []
        for name, layer in zip(model.names, model.layers):
            child = f"{path}.{name}" if path else name
            sub_params = nn.module.sub_dict(params, name)
            sub_buffers = nn.module.sub_dict(buffers, name)
            if type(layer).__name__ == "Sequential":
                module, state = self.sequential(layer, sub_params, sub_buffers, state, child)
                items.append(module)
                continue
            converted, state = self.layer(layer, sub_params, sub_buffers, state, child)
            items.extend(converted)
        return nnx.Sequential(*items), state

    def graph(self, graph, params, buffers, state: str, path: str):
        layers, needs = {}, {}
        for layer_path, layer in graph.layers:
            sub_params = nn.module.sub_dict(params, layer_path)
            sub_buffers = nn.module.sub_dict(buffers, layer_path)
            full = f"{path}.{layer_path}" if path else layer_path
            if type(layer).__name__ == "Sequential":
                module, _ = self.sequential(layer, sub_params, sub_buffers, "torch", full)
                needs[layer_path] = "torch"
            else:
                items, _ = self.layer(layer, sub_params, sub_buffers, "any", full)
                module, needs[layer_path] = items[-1], _need(layer)
            layers[layer_path] = module
        owned = {f"{p}." for p, _ in graph.layers}
        tensors = {
            k: _param(v)
            for k, v in {**params, **buffers}.items()
            if not any(k.startswith(prefix) for prefix in owned)
        }
        output = "cl" if self.layout == "NHWC" else "torch"
        return m.TorchGraph(graph, layers, needs, tensors, state, output), output

    def program(self, model, params, buffers):
        """An ``ExportedModule``: stock layers where the program has them
        (``jaxgrad.flax.program``), torch's ATen ops for the rest."""

        def make_layer(layer, layer_params, path):
            builder, need = _TO_NNX.get(type(layer).__name__, (None, None))
            if builder is None:
                return None
            try:
                return builder(layer, layer_params, {}, self.dtype), need
            except ValueError:  # a setting stock flax lacks: the layer stays in the program
                return None

        return program_twin.build(model, params, buffers, make_layer)

    def layer(self, layer, params, buffers, state: str, path: str):
        name = type(layer).__name__
        if name == "GraphModule":
            module, state = self.graph(layer, params, buffers, state, path)
            return [module], state
        if name == "ExportedModule":
            if state == "cl":
                return [m.ChannelsFirst(), self.program(layer, params, buffers)], "torch"
            return [self.program(layer, params, buffers)], "torch"
        builder, need = _TO_NNX.get(name, (_torch_layer, "torch"))
        items = []
        if need == "cl" and state == "torch":
            items.append(m.ChannelsLast())
            state = "cl"
        elif need == "torch" and state == "cl":
            items.append(m.ChannelsFirst())
            state = "torch"
        try:
            items.append(builder(layer, params, buffers, self.dtype))
        except ValueError as exc:  # the builders name the layer; the path is known here
            raise ValueError(f"{exc} (layer {path or 'at the top level'!r})") from None
        return items, state


class FrozenParam(nnx.Variable):
    """A parameter torch leaves without a gradient: ``requires_grad=False`` (a frozen
    backbone, Whisper's ``embed_positions``), or read only through ``detach`` or a
    ``no_grad`` region. Not an ``nnx.Param``, so ``nnx.grad`` and
    ``nnx.Optimizer(..., wrt=nnx.Param)`` skip it, as torch's ``backward`` and
    optimizers do; saved, loaded and read back to torch like any parameter."""


def _param_variables(module) -> list:
    """``(path, variable)`` of every ``nnx.Param`` of ``module``, in graph order."""
    return [(path, node) for path, node in nnx.iter_graph(module) if isinstance(node, nnx.Param)]


def _freeze(module, names) -> None:
    """Make the variables holding the torch parameters ``names`` ``FrozenParam``\\ s.

    Which variable holds which torch parameter is read back through ``from_nnx`` on a
    copy whose every ``nnx.Param`` is filled with its own index (a layout change, a
    transposed kernel, keeps a constant fill)."""
    if not names:
        return
    probe = nnx.clone(module)
    for index, (_, variable) in enumerate(_param_variables(probe)):
        variable.set_value(jnp.full(variable.get_value().shape, index, variable.get_value().dtype))
    read = _from_nnx(probe)[1]
    wanted = {}
    for name in names:
        values = np.asarray(read[name])
        if values.size:
            wanted[int(values.flat[0])] = name
    for index, (path, variable) in enumerate(_param_variables(module)):
        if index in wanted:
            parent = module
            for key in path[:-1]:
                parent = (
                    parent[key]
                    if isinstance(key, int) or not hasattr(parent, key)
                    else getattr(parent, key)
                )
            frozen = FrozenParam(variable.get_value())
            if isinstance(path[-1], int) or not hasattr(parent, path[-1]):
                parent[path[-1]] = frozen
            else:
                setattr(parent, path[-1], frozen)


def _is_torch_module(obj) -> bool:
    return hasattr(obj, "state_dict") and hasattr(obj, "named_modules") and hasattr(obj, "forward")


def to_nnx(
    source, params=None, buffers=None, *, layout: str = "NHWC", example=None, example_kwargs=None
) -> nnx.Module:
    """The ``flax.nnx`` twin of a jaxgrad model (with its params) or a torch module.

    Args:
      source: a ``jaxgrad.nn`` model, or a torch ``nn.Module`` (converted with
        ``jaxgrad.nn.from_torch(source, with_buffers=True)`` first).
      params: the jaxgrad model's params (torch ``state_dict`` keys); not with a
        torch module.
      buffers: the jaxgrad model's buffers, when it has any.
      layout: ``"NHWC"`` (flax's idiom) or ``"NCHW"`` (torch-shaped batches); only
        matters for a model whose input is an image.
      example: example positional inputs of a torch module that only
        ``torch.export`` can capture (``jaxgrad.nn.from_torch``). Such a model becomes
        a ``TorchProgram``: stock nnx layers for the torch layers flax has (``Linear``,
        ``Embedding``, ``LayerNorm``, convolutions…), torch's captured ATen program
        (torch's layout) for the rest (``jaxgrad.flax.program``).
      example_kwargs: example keyword inputs of such a module, as ``example``; given,
        the module is captured with ``torch.export`` (a ``TorchProgram`` is the only
        twin that takes inputs by name).

    Returns:
      An ``nnx.Sequential`` whose every parameter holds torch's values.

    Raises:
      ValueError: an unsupported layer (its class and path), a bad layout, or
        params/buffers that do not fit the model (every problem at once).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` (={layout!r}) must be one of {', '.join(LAYOUTS)}.")
    training = True
    if _is_torch_module(source):
        if params is not None or buffers is not None:
            raise ValueError(
                "to_nnx: pass `params`/`buffers` only with a jaxgrad model; a "
                "torch module carries its own."
            )
        training = source.training  # the twin starts in the torch module's mode
        source, params, buffers = nn.from_torch(
            source,
            example,
            example_kwargs=example_kwargs,
            with_buffers=True,
            capture="export" if example_kwargs else "auto",
        )
    if not isinstance(source, nn.Module):
        raise TypeError(
            f"to_nnx: `source` must be a jaxgrad.nn model or a torch module, got "
            f"{type(source).__name__}."
        )
    if params is None:
        raise ValueError("to_nnx: a jaxgrad model needs its `params`.")
    params = source.load_state_dict(params)
    buffers = source.load_buffers(buffers or {}) if source.buffer_shapes() else {}
    untrained = source.params_without_gradient(train=training)
    if type(source).__name__ == "Frozen":  # its frozen names become FrozenParams below
        source = source.layer
    dtypes = {np.dtype(v.dtype) for v in params.values()} or {np.dtype("float32")}
    if len(dtypes) != 1:
        raise ValueError(f"to_nnx: params mix dtypes {sorted(map(str, dtypes))}; use one.")
    dtype = dtypes.pop()
    model = source
    if type(source).__name__ != "Sequential":  # one layer: convert it as a one-child Sequential
        model = nn.Sequential(source)
        params = {f"0.{k}": v for k, v in params.items()}
        buffers = {f"0.{k}": v for k, v in buffers.items()}
    start = "cl" if (_need(model) == "cl" and layout == "NHWC") else "torch"
    module, state = _Builder(dtype, layout).sequential(model, params, buffers, start, "")
    if layout == "NCHW" and state == "cl":
        module = nnx.Sequential(*module.layers, m.ChannelsFirst())
    if source is not model:  # a single layer: unwrap when nothing was inserted
        layers = list(module.layers)
        if len(layers) == 1 and isinstance(layers[0], nnx.Module):
            module = layers[0]
    missed = _unset(module)
    if missed:  # a builder's bug, never the user's: say where
        raise RuntimeError(f"to_nnx: variables left without torch's values: {', '.join(missed)}.")
    _freeze(module, untrained)
    if not training:
        module.eval()  # nnx's switch: running averages, deterministic dropout
    return module


# ------------------------------------------------------------------- from nnx
def _from_embed(module, context):
    table = _value(module.embedding)
    layer = nn.Embedding(
        table.shape[0],
        table.shape[1],
        padding_idx=getattr(module, "padding_idx", None),
        dtype=table.dtype,
    )
    return layer, {"weight": table}, {}


def _from_pool_partial(fn, context):
    keywords = dict(fn.keywords)
    window = tuple(keywords["window_shape"])
    spatial = len(window)
    strides = tuple(keywords.get("strides") or window)
    pads = (
        conv.symmetric(keywords.get("padding", "VALID"), fn.func.__name__, context.path)
        or (0,) * spatial
    )
    if fn.func is nnx.max_pool:
        layer = getattr(nn, f"MaxPool{spatial}d")(window, stride=strides, padding=pads)
    else:
        layer = getattr(nn, f"AvgPool{spatial}d")(
            window,
            stride=strides,
            padding=pads,
            count_include_pad=keywords.get("count_include_pad", True),
        )
    return layer, {}, {}


_FROM_NNX: dict[type, Callable] = {
    nnx.Linear: linear.linear_from_nnx,
    **conv.FROM_NNX,
    **norms.FROM_NNX,
    nnx.Embed: _from_embed,
    m.TorchEmbed: _from_embed,
    nnx.Dropout: lambda module, context: (
        {(): nn.Dropout, (1,): nn.Dropout1d, (1, 2): nn.Dropout2d}[tuple(module.broadcast_dims)](
            p=module.rate
        ),
        {},
        {},
    ),
    m.TorchFlatten: lambda module, context: (nn.Flatten(module.start_dim, module.end_dim), {}, {}),
    m.TorchPool: lambda module, context: (module.layer, {}, {}),
    **attention.FROM_NNX,
    **sequence.FROM_NNX,
    **transformer.FROM_NNX,
    m.TorchLayer: lambda module, context: (
        module.layer,
        {k: _value(v) for k, v in module.params.items()},
        {k: _value(v) for k, v in module.buffers.items()},
    ),
    program_twin.TorchProgram: lambda module, context: _read_program(module, context),
}
_FUNCTIONS: dict[Any, Callable[[], Any]] = {
    nnx.relu: lambda: nn.ReLU(),
    nnx.sigmoid: lambda: nn.Sigmoid(),
    nnx.tanh: lambda: nn.Tanh(),
    nnx.silu: lambda: nn.SiLU(),
    nnx.relu6: lambda: nn.ReLU6(),
    nnx.hard_swish: lambda: nn.Hardswish(),
    nnx.hard_sigmoid: lambda: nn.Hardsigmoid(),
    _mish: lambda: nn.Mish(),
    _identity_fn: lambda: nn.Identity(),
}


class _Context:
    def __init__(self, gradients: bool = False):
        self.path = ""
        self.spatial = 0  # spatial dims of the last convolution seen (BatchNorm1d vs 2d)
        self.gradients = gradients  # reading nnx.grad's output, not parameters


def _read_graph(module, context):
    import dataclasses

    base = context.path
    layers, params, buffers = [], {}, {}
    for path, _ in module.graph.layers:
        context.path = f"{base}.{path}" if base else path
        layer, sub_params, sub_buffers = _read(module.layers[path], context)
        layers.append((path, layer))
        params.update({f"{path}.{k}": v for k, v in sub_params.items()})
        buffers.update({f"{path}.{k}": v for k, v in sub_buffers.items()})
    context.path = base
    kinds = {name: kind for name, _, _, kind in module.graph.tensors}
    for name, variable in module.tensors.items():
        (params if kinds.get(name) == "param" else buffers)[name] = _value(variable)
    return dataclasses.replace(module.graph, layers=tuple(layers)), params, buffers


def _read_program(module, context):
    """A ``TorchProgram``: its stock layers read back to torch's layout, under their
    module paths, with the program's own params and buffers."""
    base = context.path
    params = {k: _value(v) for k, v in module.params.items()}
    for path, layer_module in module.layers.items():
        context.path = f"{base}.{path}" if base else path
        _, sub_params, _ = _read(layer_module, context)
        params.update({f"{path}.{k}": v for k, v in sub_params.items()})
    context.path = base
    return module.model, params, {k: _value(v) for k, v in module.buffers.items()}


def _read(item, context):
    """One nnx item -> ``(layer, params, buffers)``; ``None`` for a layout adapter."""
    if isinstance(item, _ADAPTERS):
        return None
    if isinstance(item, m.TorchGraph):
        return _read_graph(item, context)
    if isinstance(item, nnx.Sequential):
        return _read_sequential(item, context)
    if isinstance(item, functools.partial):
        if item.func in (nnx.elu,):
            return nn.ELU(alpha=item.keywords.get("alpha", 1.0)), {}, {}
        if item.func in (nnx.softmax, nnx.log_softmax):
            cls = nn.Softmax if item.func is nnx.softmax else nn.LogSoftmax
            return cls(dim=item.keywords.get("axis", -1)), {}, {}
        if getattr(item.func, "__name__", "") == "softplus" and "threshold" in item.keywords:
            return (
                nn.Softplus(beta=item.keywords["beta"], threshold=item.keywords["threshold"]),
                {},
                {},
            )
        if item.func in (nnx.max_pool, nnx.avg_pool, m.avg_pool):
            return _from_pool_partial(item, context)
        if item.func is nnx.gelu:
            approximate = item.keywords.get("approximate", True)
            return nn.GELU(approximate="tanh" if approximate else "none"), {}, {}
        if item.func is nnx.leaky_relu:
            return nn.LeakyReLU(negative_slope=item.keywords.get("negative_slope", 0.01)), {}, {}
    if callable(item) and not isinstance(item, nnx.Module):
        if item is nnx.gelu:  # flax's default: the tanh approximation
            return nn.GELU(approximate="tanh"), {}, {}
        for fn, make in _FUNCTIONS.items():
            if item is fn:
                return make(), {}, {}
    reader = _FROM_NNX.get(type(item))
    if reader is None:
        raise ValueError(
            f"from_nnx: no torch twin for {type(item).__name__} at {context.path or 'the top level'!r}; "
            f"supported: {', '.join(sorted(t.__name__ for t in _FROM_NNX))}, nnx.Sequential and "
            "the activations relu, sigmoid, tanh, silu, gelu, leaky_relu."
        )
    return reader(item, context)


def _read_sequential(module, context):
    children, params, buffers = OrderedDict(), {}, {}
    base = context.path
    index = 0
    for item in module.layers:
        context.path = f"{base}.{index}" if base else str(index)
        read = _read(item, context)
        if read is None:
            continue
        layer, sub_params, sub_buffers = read
        children[str(index)] = layer
        params.update({f"{index}.{k}": v for k, v in sub_params.items()})
        buffers.update({f"{index}.{k}": v for k, v in sub_buffers.items()})
        index += 1
    context.path = base
    return nn.Sequential(children), params, buffers


def _shape_problems(model, path: str = "") -> list[str]:
    """Consecutive layers whose feature counts disagree, every one of them."""
    problems, width, last = [], None, None
    for name, layer in zip(model.names, model.layers):
        where = f"{path}.{name}" if path else name
        takes = next(
            (
                getattr(layer, a)
                for a in ("in_features", "in_channels", "num_features", "num_channels")
                if hasattr(layer, a)
            ),
            None,
        )
        if type(layer).__name__ == "Flatten":
            width = None  # the flattened width depends on the input's spatial size
            continue
        if takes is not None and width is not None and takes != width:
            problems.append(
                f"{where} ({type(layer).__name__}) takes {takes} features but {last} gives {width}"
            )
        gives = next(
            (getattr(layer, a) for a in ("out_features", "out_channels") if hasattr(layer, a)), None
        )
        if gives is not None:
            width, last = gives, f"{where} ({type(layer).__name__})"
    return problems


def from_nnx(module):
    """A ``flax.nnx`` module back to a torch-keyed jaxgrad model.

    Args:
      module: an ``nnx`` module built by ``to_nnx``, or by hand from the supported
        stock layers (``nnx.Sequential`` of ``nnx.Linear``, ``nnx.Conv``…).

    Returns:
      ``(model, params)``, or ``(model, params, buffers)`` when the model has buffers
      (BatchNorm), keyed like the torch module's ``state_dict()`` and in torch's
      layouts (``weight`` `(out, in)`, OIHW).

    Raises:
      ValueError: a module with no torch twin (its class and position), or layers
        whose shapes do not chain — every problem listed at once.
    """
    return _from_nnx(module)


def _from_nnx(module, gradients: bool = False):
    if not isinstance(module, nnx.Module) and not callable(module):
        raise TypeError(f"from_nnx: expected an nnx.Module, got {type(module).__name__}.")
    context = _Context(gradients)
    read = _read(module, context)
    if read is None:
        raise ValueError("from_nnx: the module is only a layout adapter.")
    model, params, buffers = read
    if type(model).__name__ == "Sequential":
        problems = _shape_problems(model)
        if problems:
            raise ValueError(
                "from_nnx: the layers do not fit together: " + "; ".join(problems) + "."
            )
    params = model.load_state_dict(params)
    if model.buffer_shapes():
        return model, params, model.load_buffers(buffers)
    return model, params


def nnx_state_dict(module) -> dict[str, np.ndarray]:
    """The torch ``state_dict`` (numpy arrays, torch keys and layouts) of an nnx module
    built by ``to_nnx`` or by hand from the supported layers:
    ``torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in ...})``.

    Args:
      module: the ``nnx`` module, as ``from_nnx`` takes it.

    Returns:
      ``{torch key: numpy array}``, params and buffers, in torch's layouts.

    Raises:
      ValueError: as ``from_nnx``.
    """
    read = from_nnx(module)
    model, params = read[0], read[1]
    buffers = read[2] if len(read) == 3 else None
    return model.state_dict(params, buffers)


def grads_to_torch(module, grads) -> dict[str, np.ndarray]:
    """``nnx.grad``'s gradients of ``module`` as a torch-keyed dict in torch's layouts
    (``weight`` `(out, in)`, OIHW): what ``{n: p.grad for n, p in named_parameters()}``
    holds after ``backward()`` on the twin.

    Args:
      module: the ``nnx`` module the gradients were taken of (left unchanged).
      grads: ``nnx.grad``'s result for ``module`` (an ``nnx.State`` of its params).

    Returns:
      ``{torch parameter name: numpy array}``.
    """
    copy = nnx.clone(module)  # split/merge would share the variables: the module keeps its params
    for _, variable in nnx.iter_graph(copy):
        if isinstance(variable, FrozenParam):  # no gradient in torch: zero, as jaxgrad's
            variable.set_value(jnp.zeros_like(variable.get_value()))
    nnx.update(copy, grads)
    return _from_nnx(copy, gradients=True)[1]


def is_image_model(model) -> bool:
    """Whether ``model``'s first layer that cares about layout works on images
    (convolution, pooling, batch or group norm): ``to_nnx``'s ``layout`` applies.

    Args:
      model: a ``jaxgrad.nn`` model.

    Returns:
      A bool.
    """
    return _need(model) == "cl"
