"""The layers front end of ``from_torch``: one converter per torch layer class.

No torch import here: a module is recognised by its class and read through the
attributes torch documents (``in_features``, ``negative_slope``, ``_modules``…).

A class is converted by ``_CONVERTERS`` only when it *is* torch's: defined in
``torch.nn``, or a subclass that keeps torch's ``forward``. A user's ``class
Linear(nn.Linear)`` with its own ``forward``, or a user module that happens to be
called ``Sequential``, is not torch's layer: like every module with custom forward
code it is traced with ``torch.fx`` (``jaxgrad.nn.capture.fx``, which imports torch
lazily), which converts the torch layers it calls here.
"""

from __future__ import annotations

from collections import OrderedDict

from jaxgrad._arrays import canonical_dtype
from jaxgrad.nn.activations import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmax2d,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
)
from jaxgrad.nn.container import Sequential
from jaxgrad.nn.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from jaxgrad.nn.dropout import Dropout, Dropout1d, Dropout2d
from jaxgrad.nn.fractional import FractionalMaxPool2d, FractionalMaxPool3d
from jaxgrad.nn.linear import Bilinear, Flatten, Identity, Linear
from jaxgrad.nn.norm import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LocalResponseNorm,
)
from jaxgrad.nn.padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from jaxgrad.nn.pool import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    LPPool1d,
    LPPool2d,
    LPPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)
from jaxgrad.nn.upsample import Upsample


def _linear(module):
    return Linear(
        module.in_features,
        module.out_features,
        bias=module.bias is not None,
        dtype=canonical_dtype(module.weight.dtype),
    )


def _bilinear(module):
    return Bilinear(
        module.in1_features,
        module.in2_features,
        module.out_features,
        bias=module.bias is not None,
        dtype=canonical_dtype(module.weight.dtype),
    )


def _dtype_of(module):
    return canonical_dtype(next(iter(module.parameters())).dtype)


def _embedding(module):
    from jaxgrad.nn.embedding import Embedding

    return Embedding(
        module.num_embeddings,
        module.embedding_dim,
        module.padding_idx,
        module.max_norm,
        module.norm_type,
        module.scale_grad_by_freq,
        module.sparse,
        dtype=canonical_dtype(module.weight.dtype),
    )


def _layer_norm(module):
    from jaxgrad.nn.layernorm import LayerNorm

    affine = module.elementwise_affine
    return LayerNorm(
        tuple(module.normalized_shape),
        module.eps,
        affine,
        bias=affine and module.bias is not None,
        dtype=canonical_dtype(module.weight.dtype) if affine else None,
    )


def _rms_norm(module):
    from jaxgrad.nn.layernorm import RMSNorm

    affine = module.elementwise_affine
    return RMSNorm(
        tuple(module.normalized_shape),
        module.eps,
        affine,
        dtype=canonical_dtype(module.weight.dtype) if affine else None,
    )


def _multihead_attention(module):
    from jaxgrad.nn.attention import MultiheadAttention

    return MultiheadAttention(
        module.embed_dim,
        module.num_heads,
        module.dropout,
        bias=module.in_proj_bias is not None,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        kdim=module.kdim,
        vdim=module.vdim,
        batch_first=module.batch_first,
        dtype=canonical_dtype(module.out_proj.weight.dtype),
    )


def _recurrent(module):
    from jaxgrad.nn import recurrent

    common = dict(
        num_layers=module.num_layers,
        bias=module.bias,
        batch_first=module.batch_first,
        dropout=float(module.dropout),
        bidirectional=module.bidirectional,
        dtype=_dtype_of(module),
    )
    name = type(module).__name__
    if name == "RNN":
        return recurrent.RNN(
            module.input_size, module.hidden_size, nonlinearity=module.nonlinearity, **common
        )
    if name == "LSTM":
        return recurrent.LSTM(
            module.input_size, module.hidden_size, proj_size=module.proj_size, **common
        )
    return recurrent.GRU(module.input_size, module.hidden_size, **common)


def _recurrent_cell(module):
    from jaxgrad.nn import recurrent

    name = type(module).__name__
    extra = {"nonlinearity": module.nonlinearity} if name == "RNNCell" else {}
    return getattr(recurrent, name)(
        module.input_size, module.hidden_size, bias=module.bias, dtype=_dtype_of(module), **extra
    )


def _transformer_activation(activation, path, convert_child):
    if isinstance(activation, str):
        return activation
    name = getattr(activation, "__name__", None)
    # torch.nn.functional.relu is Python; F.gelu is a builtin of torch._C._nn
    if name in ("relu", "gelu") and getattr(activation, "__module__", None) in (
        "torch.nn.functional",
        "torch._C._nn",
    ):
        return name
    if hasattr(activation, "_modules"):
        return convert_child(activation, f"{path}.activation" if path else "activation")
    raise ValueError(
        f"from_torch: unsupported transformer activation {activation!r} at {path!r}; "
        "supported: 'relu', 'gelu', torch.nn.functional.relu / gelu, or a supported "
        "activation module."
    )


def _transformer_layer(module, convert_child):
    from jaxgrad.nn import transformer

    cls = getattr(transformer, type(module).__name__)
    return cls(
        module.self_attn.embed_dim,
        module.self_attn.num_heads,
        dim_feedforward=module.linear1.out_features,
        dropout=float(module.dropout.p),
        activation=_transformer_activation(module.activation, "", convert_child),
        layer_norm_eps=module.norm1.eps,
        batch_first=module.self_attn.batch_first,
        norm_first=module.norm_first,
        bias=module.linear1.bias is not None,
        dtype=_dtype_of(module),
        attention_dropout=(
            None
            if module.self_attn.dropout == module.dropout.p
            else float(module.self_attn.dropout)
        ),
    )


def _transformer_stack(module, convert_child):
    from jaxgrad.nn import transformer

    layer = convert_child(module.layers[0], "layers.0")
    norm = None if module.norm is None else convert_child(module.norm, "norm")
    if type(module).__name__ == "TransformerEncoder":
        return transformer.TransformerEncoder(
            layer,
            module.num_layers,
            norm,
            enable_nested_tensor=module.enable_nested_tensor,
            mask_check=getattr(module, "mask_check", True),
        )
    return transformer.TransformerDecoder(layer, module.num_layers, norm)


def _transformer(module, convert_child):
    """``nn.Transformer``: its two stacks converted as they are (so a custom encoder or
    decoder, or attributes changed after construction, carry over), the rest read from
    them for the hyperparameters torch does not store."""
    from jaxgrad.nn import transformer

    encoder = convert_child(module.encoder, "encoder")
    decoder = convert_child(module.decoder, "decoder")
    first = getattr(encoder, "encoder_layer", None)
    settings = {}
    if first is not None:
        settings = dict(
            dim_feedforward=first.dim_feedforward,
            dropout=first.dropout,
            activation=first.activation,
            layer_norm_eps=first.layer_norm_eps,
            norm_first=first.norm_first,
            bias=first.bias,
            dtype=first.dtype,
        )
    return transformer.Transformer(
        module.d_model,
        module.nhead,
        num_encoder_layers=getattr(encoder, "num_layers", 0),
        num_decoder_layers=getattr(decoder, "num_layers", 0),
        custom_encoder=encoder,
        custom_decoder=decoder,
        batch_first=module.batch_first,
        **settings,
    )


def _state_dtype(module):
    """The dtype of a layer's params or buffers (float32 when it has neither)."""
    for tensor in (getattr(module, "weight", None), getattr(module, "running_mean", None)):
        if tensor is not None:
            return canonical_dtype(tensor.dtype)
    return canonical_dtype(None)


def _norm(cls):
    def convert(module):
        return cls(
            module.num_features,
            eps=module.eps,
            momentum=module.momentum,
            affine=module.affine,
            track_running_stats=module.track_running_stats,
            dtype=_state_dtype(module),
            bias=_has_bias(module),
        )

    return convert


def _group_norm(module):
    return GroupNorm(
        module.num_groups,
        module.num_channels,
        eps=module.eps,
        affine=module.affine,
        dtype=_state_dtype(module),
        bias=_has_bias(module),
    )


def _has_bias(module) -> bool:
    """torch ≥ 2.1's ``bias=`` of affine norms (without affine there is no bias anyway)."""
    return getattr(module, "bias", None) is not None or not module.affine


def _conv(cls):
    def convert(module):
        return cls(
            module.in_channels,
            module.out_channels,
            module.kernel_size,
            stride=module.stride,
            padding=module.padding,
            dilation=module.dilation,
            groups=module.groups,
            bias=module.bias is not None,
            padding_mode=module.padding_mode,
            dtype=canonical_dtype(module.weight.dtype),
        )

    return convert


def _conv_transpose(cls):
    def convert(module):
        return cls(
            module.in_channels,
            module.out_channels,
            module.kernel_size,
            stride=module.stride,
            padding=module.padding,
            output_padding=module.output_padding,
            groups=module.groups,
            bias=module.bias is not None,
            dilation=module.dilation,
            padding_mode=module.padding_mode,
            dtype=canonical_dtype(module.weight.dtype),
        )

    return convert


def _fractional(cls):
    def convert(module):
        # torch's _random_samples is a buffer (None: drawn per call, here from `key`)
        return cls(
            module.kernel_size,
            module.output_size,
            module.output_ratio,
            module.return_indices,
            module._random_samples,
        )

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
    "AvgPool1d": lambda m: AvgPool1d(
        m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad
    ),
    "AvgPool2d": lambda m: AvgPool2d(
        m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, m.divisor_override
    ),
    "MaxPool1d": lambda m: MaxPool1d(
        m.kernel_size, m.stride, m.padding, m.dilation, m.return_indices, m.ceil_mode
    ),
    "MaxPool2d": lambda m: MaxPool2d(
        m.kernel_size, m.stride, m.padding, m.dilation, m.return_indices, m.ceil_mode
    ),
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
    "AvgPool3d": lambda m: AvgPool3d(
        m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, m.divisor_override
    ),
    "MaxPool3d": lambda m: MaxPool3d(
        m.kernel_size, m.stride, m.padding, m.dilation, m.return_indices, m.ceil_mode
    ),
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
    "Upsample": lambda m: Upsample(
        m.size, m.scale_factor, m.mode, m.align_corners, m.recompute_scale_factor
    ),
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
_NESTED = {
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerDecoder",
    "Transformer",
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


def convert_layer(module, path: str, convert_child=None):
    """The twin of a module whose class torch defines, or a ValueError naming it.

    ``convert_child(child, path)`` converts the children of a ``Sequential`` or a
    transformer (``from_torch`` passes the one that traces a child with custom forward
    code through ``torch.fx``); by default each child must be a layer of this table."""
    name = torch_class_name(module)
    if name == "Sequential":
        children = OrderedDict()
        for child_name, child in module._modules.items():
            child_path = f"{path}.{child_name}" if path else child_name
            children[child_name] = (convert_child or convert_layer)(child, child_path)
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
            f"turns it into {name[len('Lazy') :]}), and convert that."
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
    if name in _NESTED:  # layers holding layers: their children through convert_child
        return _CONVERTERS[name](module, convert_child or convert_layer)
    return _CONVERTERS[name](module)


__all__ = ["SUPPORTED", "convert_layer", "torch_class_name", "where"]
