"""``from_torch``: the jaxgrad twin of a torch module, read by duck typing.

No torch import here: a module is recognised by its class and read through the
attributes torch documents (``in_features``, ``negative_slope``, ``_modules``…).

A class is converted by ``_CONVERTERS`` only when it *is* torch's: defined in
``torch.nn``, or a subclass that keeps torch's ``forward``. A user's ``class
Linear(nn.Linear)`` with its own ``forward``, or a user module that happens to be
called ``Sequential``, is not torch's layer: like every module with custom forward
code it is traced with ``torch.fx`` (``jaxgrad.nn.fx``, which imports torch lazily).
"""

from __future__ import annotations

import dataclasses

from collections import OrderedDict

from jaxgrad._arrays import canonical_dtype
from jaxgrad.nn.activations import GELU, LeakyReLU, ReLU, Sigmoid, Tanh
from jaxgrad.nn.activations import (ELU, Hardsigmoid, Hardswish, LogSoftmax, Mish, ReLU6,
                                    SiLU, Softmax, Softplus)
from jaxgrad.nn.activations import (CELU, GLU, SELU, Hardshrink, Hardtanh, LogSigmoid, PReLU,
                                    Softmax2d, Softmin, Softshrink, Softsign, Tanhshrink,
                                    Threshold)
from jaxgrad.nn.container import Frozen, Sequential
from jaxgrad.nn.conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                             ConvTranspose3d)
from jaxgrad.nn.dropout import Dropout, Dropout1d, Dropout2d
from jaxgrad.nn.linear import Bilinear, Flatten, Identity, Linear
from jaxgrad.nn.fractional import FractionalMaxPool2d, FractionalMaxPool3d
from jaxgrad.nn.norm import BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d
from jaxgrad.nn.norm import BatchNorm3d, InstanceNorm3d, LocalResponseNorm
from jaxgrad.nn.padding import (CircularPad1d, CircularPad2d, ConstantPad1d, ConstantPad2d,
                                ReflectionPad1d, ReflectionPad2d, ReplicationPad1d,
                                ReplicationPad2d, ZeroPad1d, ZeroPad2d)
from jaxgrad.nn.padding import (CircularPad3d, ConstantPad3d, ReflectionPad3d,
                                ReplicationPad3d, ZeroPad3d)
from jaxgrad.nn.pool import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d,
                             AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d)
from jaxgrad.nn.pool import (AdaptiveAvgPool3d, AdaptiveMaxPool3d, AvgPool3d, LPPool1d,
                             LPPool2d, LPPool3d, MaxPool3d)
from jaxgrad.nn.upsample import Upsample


def _linear(module):
    return Linear(
        module.in_features,
        module.out_features,
        bias=module.bias is not None,
        dtype=canonical_dtype(module.weight.dtype),
    )


def _bilinear(module):
    return Bilinear(module.in1_features, module.in2_features, module.out_features,
                    bias=module.bias is not None, dtype=canonical_dtype(module.weight.dtype))


def _dtype_of(module):
    return canonical_dtype(next(iter(module.parameters())).dtype)


def _embedding(module):
    from jaxgrad.nn.embedding import Embedding

    return Embedding(module.num_embeddings, module.embedding_dim, module.padding_idx,
                     module.max_norm, module.norm_type, module.scale_grad_by_freq,
                     module.sparse, dtype=canonical_dtype(module.weight.dtype))


def _layer_norm(module):
    from jaxgrad.nn.layernorm import LayerNorm

    affine = module.elementwise_affine
    return LayerNorm(tuple(module.normalized_shape), module.eps, affine,
                     bias=affine and module.bias is not None,
                     dtype=canonical_dtype(module.weight.dtype) if affine else None)


def _rms_norm(module):
    from jaxgrad.nn.layernorm import RMSNorm

    affine = module.elementwise_affine
    return RMSNorm(tuple(module.normalized_shape), module.eps, affine,
                   dtype=canonical_dtype(module.weight.dtype) if affine else None)


def _multihead_attention(module):
    from jaxgrad.nn.attention import MultiheadAttention

    return MultiheadAttention(
        module.embed_dim, module.num_heads, module.dropout,
        bias=module.in_proj_bias is not None, add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn, kdim=module.kdim, vdim=module.vdim,
        batch_first=module.batch_first, dtype=canonical_dtype(module.out_proj.weight.dtype),
    )


def _recurrent(module):
    from jaxgrad.nn import recurrent

    common = dict(num_layers=module.num_layers, bias=module.bias,
                  batch_first=module.batch_first, dropout=float(module.dropout),
                  bidirectional=module.bidirectional, dtype=_dtype_of(module))
    name = type(module).__name__
    if name == "RNN":
        return recurrent.RNN(module.input_size, module.hidden_size,
                             nonlinearity=module.nonlinearity, **common)
    if name == "LSTM":
        return recurrent.LSTM(module.input_size, module.hidden_size,
                              proj_size=module.proj_size, **common)
    return recurrent.GRU(module.input_size, module.hidden_size, **common)


def _recurrent_cell(module):
    from jaxgrad.nn import recurrent

    name = type(module).__name__
    extra = {"nonlinearity": module.nonlinearity} if name == "RNNCell" else {}
    return getattr(recurrent, name)(module.input_size, module.hidden_size, bias=module.bias,
                                    dtype=_dtype_of(module), **extra)


def _transformer_activation(activation, path):
    if isinstance(activation, str):
        return activation
    name = getattr(activation, "__name__", None)
    # torch.nn.functional.relu is Python; F.gelu is a builtin of torch._C._nn
    if name in ("relu", "gelu") and getattr(activation, "__module__", None) in (
            "torch.nn.functional", "torch._C._nn"):
        return name
    if hasattr(activation, "_modules"):
        return _convert(activation, f"{path}.activation" if path else "activation")
    raise ValueError(
        f"from_torch: unsupported transformer activation {activation!r} at {path!r}; "
        "supported: 'relu', 'gelu', torch.nn.functional.relu / gelu, or a supported "
        "activation module."
    )


def _transformer_layer(module):
    from jaxgrad.nn import transformer

    cls = getattr(transformer, type(module).__name__)
    return cls(
        module.self_attn.embed_dim, module.self_attn.num_heads,
        dim_feedforward=module.linear1.out_features, dropout=float(module.dropout.p),
        activation=_transformer_activation(module.activation, ""),
        layer_norm_eps=module.norm1.eps, batch_first=module.self_attn.batch_first,
        norm_first=module.norm_first, bias=module.linear1.bias is not None,
        dtype=_dtype_of(module),
        attention_dropout=(None if module.self_attn.dropout == module.dropout.p
                           else float(module.self_attn.dropout)),
    )


def _transformer_stack(module):
    from jaxgrad.nn import transformer

    layer = _convert(module.layers[0], "layers.0")
    norm = None if module.norm is None else _convert(module.norm, "norm")
    if type(module).__name__ == "TransformerEncoder":
        return transformer.TransformerEncoder(
            layer, module.num_layers, norm,
            enable_nested_tensor=module.enable_nested_tensor,
            mask_check=getattr(module, "mask_check", True))
    return transformer.TransformerDecoder(layer, module.num_layers, norm)


def _transformer(module):
    """``nn.Transformer``: its two stacks converted as they are (so a custom encoder or
    decoder, or attributes changed after construction, carry over), the rest read from
    them for the hyperparameters torch does not store."""
    from jaxgrad.nn import transformer

    encoder = _convert(module.encoder, "encoder")
    decoder = _convert(module.decoder, "decoder")
    first = getattr(encoder, "encoder_layer", None)
    settings = {}
    if first is not None:
        settings = dict(dim_feedforward=first.dim_feedforward, dropout=first.dropout,
                        activation=first.activation, layer_norm_eps=first.layer_norm_eps,
                        norm_first=first.norm_first, bias=first.bias, dtype=first.dtype)
    return transformer.Transformer(
        module.d_model, module.nhead,
        num_encoder_layers=getattr(encoder, "num_layers", 0),
        num_decoder_layers=getattr(decoder, "num_layers", 0),
        custom_encoder=encoder, custom_decoder=decoder, batch_first=module.batch_first,
        **settings)


def _state_dtype(module):
    """The dtype of a layer's params or buffers (float32 when it has neither)."""
    for tensor in (getattr(module, "weight", None), getattr(module, "running_mean", None)):
        if tensor is not None:
            return canonical_dtype(tensor.dtype)
    return canonical_dtype(None)


def _norm(cls):
    def convert(module):
        return cls(module.num_features, eps=module.eps, momentum=module.momentum,
                   affine=module.affine, track_running_stats=module.track_running_stats,
                   dtype=_state_dtype(module), bias=_has_bias(module))
    return convert


def _group_norm(module):
    return GroupNorm(module.num_groups, module.num_channels, eps=module.eps,
                     affine=module.affine, dtype=_state_dtype(module), bias=_has_bias(module))


def _has_bias(module) -> bool:
    """torch ≥ 2.1's ``bias=`` of affine norms (without affine there is no bias anyway)."""
    return getattr(module, "bias", None) is not None or not module.affine


def _conv(cls):
    def convert(module):
        return cls(module.in_channels, module.out_channels, module.kernel_size,
                   stride=module.stride, padding=module.padding, dilation=module.dilation,
                   groups=module.groups, bias=module.bias is not None,
                   padding_mode=module.padding_mode,
                   dtype=canonical_dtype(module.weight.dtype))
    return convert


def _conv_transpose(cls):
    def convert(module):
        return cls(module.in_channels, module.out_channels, module.kernel_size,
                   stride=module.stride, padding=module.padding,
                   output_padding=module.output_padding, groups=module.groups,
                   bias=module.bias is not None, dilation=module.dilation,
                   padding_mode=module.padding_mode,
                   dtype=canonical_dtype(module.weight.dtype))
    return convert


def _fractional(cls):
    def convert(module):
        # torch's _random_samples is a buffer (None: drawn per call, here from `key`)
        return cls(module.kernel_size, module.output_size, module.output_ratio,
                   module.return_indices, module._random_samples)
    return convert


_CONVERTERS = {
    "Linear": _linear,
    "Bilinear": _bilinear,
    "ReLU": lambda m: ReLU(),
    "Sigmoid": lambda m: Sigmoid(),
    "Tanh": lambda m: Tanh(),
    "GELU": lambda m: GELU(approximate=m.approximate),
    "LeakyReLU": lambda m: LeakyReLU(negative_slope=m.negative_slope),
    "Identity": lambda m: Identity(),
    "Flatten": lambda m: Flatten(start_dim=m.start_dim, end_dim=m.end_dim),
    "BatchNorm1d": _norm(BatchNorm1d),
    "BatchNorm2d": _norm(BatchNorm2d),
    "BatchNorm3d": _norm(BatchNorm3d),
    "InstanceNorm1d": _norm(InstanceNorm1d),
    "InstanceNorm2d": _norm(InstanceNorm2d),
    "InstanceNorm3d": _norm(InstanceNorm3d),
    "GroupNorm": _group_norm,
    "Dropout": lambda m: Dropout(p=m.p, inplace=m.inplace),
    "Dropout1d": lambda m: Dropout1d(p=m.p, inplace=m.inplace),
    "Dropout2d": lambda m: Dropout2d(p=m.p, inplace=m.inplace),
    # CNN activations
    "ELU": lambda m: ELU(alpha=m.alpha),
    "Hardsigmoid": lambda m: Hardsigmoid(),
    "Hardswish": lambda m: Hardswish(),
    "LogSoftmax": lambda m: LogSoftmax(dim=m.dim),
    "Mish": lambda m: Mish(),
    "ReLU6": lambda m: ReLU6(),
    "SiLU": lambda m: SiLU(),
    "Softmax": lambda m: Softmax(dim=m.dim),
    "Softplus": lambda m: Softplus(beta=m.beta, threshold=m.threshold),
    # the rest of torch.nn's activations
    "CELU": lambda m: CELU(alpha=m.alpha),
    "GLU": lambda m: GLU(dim=m.dim),
    "Hardshrink": lambda m: Hardshrink(lambd=m.lambd),
    "Hardtanh": lambda m: Hardtanh(min_val=m.min_val, max_val=m.max_val),
    "LogSigmoid": lambda m: LogSigmoid(),
    "PReLU": lambda m: PReLU(m.num_parameters, m.init, dtype=canonical_dtype(m.weight.dtype)),
    "SELU": lambda m: SELU(),
    "Softmax2d": lambda m: Softmax2d(),
    "Softmin": lambda m: Softmin(dim=m.dim),
    "Softshrink": lambda m: Softshrink(lambd=m.lambd),
    "Softsign": lambda m: Softsign(),
    "Tanhshrink": lambda m: Tanhshrink(),
    "Threshold": lambda m: Threshold(m.threshold, m.value),
    # convolutions
    "Conv1d": _conv(Conv1d),
    "Conv2d": _conv(Conv2d),
    "Conv3d": _conv(Conv3d),
    "ConvTranspose1d": _conv_transpose(ConvTranspose1d),
    "ConvTranspose2d": _conv_transpose(ConvTranspose2d),
    "ConvTranspose3d": _conv_transpose(ConvTranspose3d),
    # pooling
    "AdaptiveAvgPool1d": lambda m: AdaptiveAvgPool1d(m.output_size),
    "AdaptiveAvgPool2d": lambda m: AdaptiveAvgPool2d(m.output_size),
    "AdaptiveMaxPool1d": lambda m: AdaptiveMaxPool1d(m.output_size, m.return_indices),
    "AdaptiveMaxPool2d": lambda m: AdaptiveMaxPool2d(m.output_size, m.return_indices),
    "AvgPool1d": lambda m: AvgPool1d(m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                     m.count_include_pad),
    "AvgPool2d": lambda m: AvgPool2d(m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                     m.count_include_pad, m.divisor_override),
    "MaxPool1d": lambda m: MaxPool1d(m.kernel_size, m.stride, m.padding, m.dilation,
                                     m.return_indices, m.ceil_mode),
    "MaxPool2d": lambda m: MaxPool2d(m.kernel_size, m.stride, m.padding, m.dilation,
                                     m.return_indices, m.ceil_mode),
    # padding and resampling
    "CircularPad1d": lambda m: CircularPad1d(m.padding),
    "CircularPad2d": lambda m: CircularPad2d(m.padding),
    "ConstantPad1d": lambda m: ConstantPad1d(m.padding, m.value),
    "ConstantPad2d": lambda m: ConstantPad2d(m.padding, m.value),
    "ReflectionPad1d": lambda m: ReflectionPad1d(m.padding),
    "ReflectionPad2d": lambda m: ReflectionPad2d(m.padding),
    "ReplicationPad1d": lambda m: ReplicationPad1d(m.padding),
    "ReplicationPad2d": lambda m: ReplicationPad2d(m.padding),
    "ZeroPad1d": lambda m: ZeroPad1d(m.padding),
    "ZeroPad2d": lambda m: ZeroPad2d(m.padding),
    # the 3-d family, power-average and fractional pooling, local response norm
    "AdaptiveAvgPool3d": lambda m: AdaptiveAvgPool3d(m.output_size),
    "AdaptiveMaxPool3d": lambda m: AdaptiveMaxPool3d(m.output_size, m.return_indices),
    "AvgPool3d": lambda m: AvgPool3d(m.kernel_size, m.stride, m.padding, m.ceil_mode,
                                     m.count_include_pad, m.divisor_override),
    "MaxPool3d": lambda m: MaxPool3d(m.kernel_size, m.stride, m.padding, m.dilation,
                                     m.return_indices, m.ceil_mode),
    "CircularPad3d": lambda m: CircularPad3d(m.padding),
    "ConstantPad3d": lambda m: ConstantPad3d(m.padding, m.value),
    "ReflectionPad3d": lambda m: ReflectionPad3d(m.padding),
    "ReplicationPad3d": lambda m: ReplicationPad3d(m.padding),
    "ZeroPad3d": lambda m: ZeroPad3d(m.padding),
    "LPPool1d": lambda m: LPPool1d(m.norm_type, m.kernel_size, m.stride, m.ceil_mode),
    "LPPool2d": lambda m: LPPool2d(m.norm_type, m.kernel_size, m.stride, m.ceil_mode),
    "LPPool3d": lambda m: LPPool3d(m.norm_type, m.kernel_size, m.stride, m.ceil_mode),
    "LocalResponseNorm": lambda m: LocalResponseNorm(m.size, m.alpha, m.beta, m.k),
    "FractionalMaxPool2d": _fractional(FractionalMaxPool2d),
    "FractionalMaxPool3d": _fractional(FractionalMaxPool3d),
    "Upsample": lambda m: Upsample(m.size, m.scale_factor, m.mode, m.align_corners,
                                   m.recompute_scale_factor),
    # sequence layers (issue 11)
    "Embedding": _embedding,
    "LayerNorm": _layer_norm,
    "RMSNorm": _rms_norm,
    "MultiheadAttention": _multihead_attention,
    "RNN": _recurrent,
    "LSTM": _recurrent,
    "GRU": _recurrent,
    "RNNCell": _recurrent_cell,
    "LSTMCell": _recurrent_cell,
    "GRUCell": _recurrent_cell,
    "TransformerEncoderLayer": _transformer_layer,
    "TransformerDecoderLayer": _transformer_layer,
    "TransformerEncoder": _transformer_stack,
    "TransformerDecoder": _transformer_stack,
    "Transformer": _transformer,
}
SUPPORTED = tuple(sorted([*_CONVERTERS, "Sequential"]))
"""The torch layer classes ``from_torch`` converts to jaxgrad layers, sorted (anything
else is traced with ``torch.fx`` or captured with ``torch.export``)."""


def _is_torch_module(cls) -> bool:
    return cls.__module__.startswith(("torch.nn.", "torch.ao.nn."))


def torch_class_name(module) -> str | None:
    """The name of the ``torch.nn`` class whose behaviour ``module`` has, or None.

    ``module``'s own class when torch defines it; otherwise the nearest torch class
    among its bases *if* ``forward`` is inherited unchanged from it (a subclass
    adding only a constructor). A subclass with its own ``forward`` is None: its
    code, not torch's layer, defines what it computes.
    """
    cls = type(module)
    for base in cls.__mro__:
        if _is_torch_module(base) and base.__name__ != "Module":
            if base is cls or getattr(cls, "forward", None) is getattr(base, "forward", None):
                return base.__name__
            return None
    return None


def where(path: str) -> str:
    """``"at 'layer1.0.bn1'"``, or ``"at the top level"``."""
    return f"at {path!r}" if path else "at the top level"


def convert_layer(module, path: str):
    """The twin of a module whose class torch defines, or a ValueError naming it."""
    name = torch_class_name(module)
    if name == "Sequential":
        children = OrderedDict()
        for child_name, child in module._modules.items():
            child_path = f"{path}.{child_name}" if path else child_name
            children[child_name] = _convert(child, child_path)
        return Sequential(children)
    # losses: no params; buffers weight / pos_weight, as in torch's state_dict. Imported
    # here because jaxgrad.losses builds its modules on jaxgrad.nn's Layer
    from jaxgrad.losses import modules as loss_modules

    if name in loss_modules.LOSS_MODULES:
        return loss_modules.from_torch(module)
    if name is not None and name.startswith("Lazy") and name not in _CONVERTERS:
        raise ValueError(
            f"from_torch: {type(module).__name__} {where(path)} is a lazy module whose "
            "parameters have no shape yet; run one forward in torch first (torch then "
            f"turns it into {name[len('Lazy'):]}), and convert that."
        )
    if name not in _CONVERTERS and type(module).__name__.endswith("Loss"):
        raise ValueError(
            f"from_torch: unsupported loss {type(module).__name__} {where(path)}; supported "
            f"losses are {', '.join(sorted(loss_modules.LOSS_MODULES))}."
        )
    if name not in _CONVERTERS:
        raise ValueError(
            f"from_torch: unsupported module {type(module).__name__} {where(path)}; "
            f"supported modules are {', '.join(SUPPORTED)}, the losses "
            f"{', '.join(sorted(loss_modules.LOSS_MODULES))}, and modules whose forward "
            "torch.fx traces into those."
        )
    return _CONVERTERS[name](module)


def _convert(module, path: str):
    if torch_class_name(module) is not None or _is_torch_module(type(module)):
        return convert_layer(module, path)
    from jaxgrad.nn import fx  # custom forward code: trace it (imports torch.fx)

    return fx.trace(module, path)


def from_torch(module, example=None, *, example_kwargs=None, with_buffers: bool = False,
               capture: str = "auto", dynamic_shapes="auto", batch_one: bool = False):
    """Build the jaxgrad twin of ``module`` and copy its weights.

    Two front ends (see "Capture" in the docs):

    - *layers*: a module made of supported layers (``SUPPORTED``), nested
      ``Sequential`` included, or with a custom ``forward`` that
      ``torch.fx.symbolic_trace`` can trace (residual blocks, ResNets): its calls
      become jaxgrad layers and ops (``jaxgrad.nn.fx``); ``jaxgrad.flax`` maps such a
      model to stock nnx layers. Needs no example.
    - *export*: anything else (Hugging Face transformers, vision transformers, a
      forward with shape assertions, ``torch.finfo``, tied weights, writes through
      views) is captured with ``torch.export`` on ``example`` and decomposed to core
      ATen ops (``jaxgrad.nn.export``). Every size torch's program does not fix stays
      symbolic: one capture runs at every batch size and sequence length the program
      accepts, and a shape it cannot take is refused by name before JAX runs.

    Either way ``apply(train=...)`` runs torch's training-mode or evaluation-mode
    forward, whichever is asked, and random ops take the explicit ``key``.

    Args:
      module: a torch ``nn.Module``.
      example: example positional input(s) of the forward: a tensor or a tuple of
        them (required by the export front end).
      example_kwargs: example keyword inputs (``{"attention_mask": mask}``).
      with_buffers: also return the module's buffers (BatchNorm running statistics),
        validated by ``model.load_buffers``.
      capture: ``"auto"`` (the layer path when the module converts and traces,
        else export), ``"layers"`` or ``"export"``.
      dynamic_shapes: for the export front end: ``"auto"`` (every size of every tensor
        input dynamic, ``torch.export.Dim.AUTO``; torch fixes what the model's code
        needs, and a model torch cannot capture so is captured at the example's
        shapes, ``model.shapes.static`` saying why), ``"batch"`` (only each tensor
        input's first size dynamic: every batch size from one capture, the other sizes
        the example's; much cheaper to capture where torch reasons slowly about image
        sides, e.g. Swin's window reshapes), ``None`` (the example's shapes), or a
        ``dynamic_shapes`` spec as ``torch.export.export`` takes it.
      batch_one: export front end: also capture the program at batch size 1. torch
        captures sizes 0 and 1 apart from the others (broadcasting treats them so),
        so a capture at batch 2 or more runs batches from 2 up; with this, ``apply``
        runs batch 1 too (one more capture).

    Returns:
      ``(model, params)``, or ``(model, params, buffers)`` with ``with_buffers=True``:
      the jaxgrad model and its params (and buffers), keyed like
      ``module.state_dict()``, with the module's dtype.

    Raises:
      ValueError: naming the first unsupported module's class and path, or the
        unmapped op, its node and module path; with ``capture="auto"`` and no
        ``example``, the layer path's reason and that an example would let export try.
    """
    if not any(cls.__name__ == "Module" and cls.__module__ == "torch.nn.modules.module"
               for cls in type(module).__mro__):  # duck typing: torch is not imported for this
        kind, given = type(module), repr(module)
        kind = kind.__qualname__ if kind.__module__ == "builtins" else (
            f"{kind.__module__}.{kind.__qualname__}")
        given = given if len(given) <= 80 else given[:77] + "..."
        raise TypeError(
            f"from_torch expects a torch `nn.Module`, got a `{kind}` ({given})"
            + ("; wrap a function in a module whose `forward` calls it." if callable(module)
               else ".")
        )
    if capture not in ("auto", "layers", "export"):
        raise ValueError(f"`capture` must be 'auto', 'layers' or 'export', got {capture!r}.")
    if example_kwargs is not None and not isinstance(example_kwargs, dict):
        raise TypeError(f"`example_kwargs` must be a dict of keyword inputs, got "
                        f"{type(example_kwargs).__name__}.")
    args = None if example is None else (tuple(example) if isinstance(example, (tuple, list))
                                          else (example,))
    untouched = _snapshot(module)
    try:
        model = _front_end(module, args, example_kwargs, capture, (dynamic_shapes, batch_one))
    finally:
        _restore(untouched)  # the user's module exactly as it was
    state = module.state_dict()
    params = model.load_state_dict(state)
    if with_buffers:
        return model, params, model.load_buffers(state)
    return model, params


def _front_end(module, args, example_kwargs, capture, shapes=("auto", False)):
    """The model from the front end ``capture`` names (``auto``: layers, then export).

    Parameters with ``requires_grad=False`` (a frozen backbone, Whisper's
    ``embed_positions``) are read through a stop-gradient on either front end (the
    layer path's model holds their names: ``GraphModule.frozen``, or ``Frozen``)."""
    frozen = tuple(name for name, p in module.named_parameters() if not p.requires_grad)
    if capture == "export":
        model = _capture_export(module, args, example_kwargs, frozen, shapes)
    else:
        try:
            model = _convert(module, "") if not frozen else _with_frozen(
                _convert(module, ""), frozen)
        except ValueError as layers_error:
            if capture == "layers":
                raise
            if args is None and example_kwargs is None:
                raise ValueError(
                    f"{layers_error} (from_torch tries torch.export next when it has an "
                    "example input: `from_torch(module, example=(x,))`.)"
                ) from layers_error
            try:
                model = _capture_export(module, args, example_kwargs, frozen, shapes)
            except ValueError as export_error:
                raise ValueError(
                    f"{export_error}\n(The layer path failed first: {layers_error})"
                ) from export_error
    return model


def _snapshot(module) -> list:
    """Every parameter and buffer of ``module`` with a copy of its value and flag: both
    front ends run the forward's Python (``torch.fx`` on proxies, a non-strict export
    on fake tensors), and a forward that writes a module tensor directly (timm's
    ``BatchNormAct2d`` adds 1 to its real ``num_batches_tracked`` while fx traces it)
    would change the user's module. Tensors are read through their own methods (no torch
    import here); a lazy module's uninitialised parameters have no value to keep."""
    tensors = {id(t): t for t in (*module.parameters(), *module.buffers())
               if not type(t).__name__.startswith("Uninitialized")}.values()
    return [(t, t.detach().clone(), t.requires_grad) for t in tensors]


def _restore(snapshot) -> None:
    """Put back what ``_snapshot`` saw: ``from_torch`` leaves the module as it found it."""
    for tensor, value, requires_grad in snapshot:
        if tensor.shape != value.shape:  # the forward resized it: put the old one back
            tensor.data = value
        elif not tensor.detach().equal(value):
            tensor.data.copy_(value)  # .data: outside autograd, as torch.no_grad would
        if tensor.requires_grad != requires_grad and tensor.is_leaf:
            tensor.requires_grad_(requires_grad)


def _with_frozen(model, frozen):
    """``model`` reading the parameters ``frozen`` through a stop-gradient: a traced
    ``GraphModule`` holds the names, any other model is wrapped (``Frozen``)."""
    if type(model).__name__ == "GraphModule":
        return dataclasses.replace(model, frozen=frozen)
    return Frozen(model, frozen)


def _capture_export(module, args, kwargs, frozen=(), shapes=("auto", False)):
    if args is None and not kwargs:
        raise ValueError(
            f"from_torch: capturing {type(module).__name__} with torch.export needs an "
            "example input: `from_torch(module, example=(x,))`."
        )
    from jaxgrad.nn import export  # imports torch.export, lazily

    return export.capture(module, args or (), kwargs or {}, frozen=frozen,
                          dynamic_shapes=shapes[0], batch_one=shapes[1])
