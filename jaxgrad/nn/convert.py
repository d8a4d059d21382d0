"""``from_torch``: the jaxgrad twin of a torch module, read by duck typing.

No torch import: a module is recognised by its class name and read through the
attributes torch documents (``in_features``, ``negative_slope``, ``_modules``…).
"""

from __future__ import annotations

from collections import OrderedDict

from jaxgrad._arrays import canonical_dtype
from jaxgrad.nn.activations import GELU, LeakyReLU, ReLU, Sigmoid, Tanh
from jaxgrad.nn.activations import (ELU, Hardsigmoid, Hardswish, LogSoftmax, Mish, ReLU6,
                                    SiLU, Softmax, Softplus)
from jaxgrad.nn.container import Sequential
from jaxgrad.nn.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from jaxgrad.nn.linear import Flatten, Identity, Linear
from jaxgrad.nn.padding import (CircularPad1d, CircularPad2d, ConstantPad1d, ConstantPad2d,
                                ReflectionPad1d, ReflectionPad2d, ReplicationPad1d,
                                ReplicationPad2d, ZeroPad1d, ZeroPad2d)
from jaxgrad.nn.pool import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d,
                             AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d)
from jaxgrad.nn.upsample import Upsample


def _linear(module):
    return Linear(
        module.in_features,
        module.out_features,
        bias=module.bias is not None,
        dtype=canonical_dtype(module.weight.dtype),
    )


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


_CONVERTERS = {
    "Linear": _linear,
    "ReLU": lambda m: ReLU(),
    "Sigmoid": lambda m: Sigmoid(),
    "Tanh": lambda m: Tanh(),
    "GELU": lambda m: GELU(approximate=m.approximate),
    "LeakyReLU": lambda m: LeakyReLU(negative_slope=m.negative_slope),
    "Identity": lambda m: Identity(),
    "Flatten": lambda m: Flatten(start_dim=m.start_dim, end_dim=m.end_dim),
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
    # convolutions
    "Conv1d": _conv(Conv1d),
    "Conv2d": _conv(Conv2d),
    "ConvTranspose1d": _conv_transpose(ConvTranspose1d),
    "ConvTranspose2d": _conv_transpose(ConvTranspose2d),
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
    "Upsample": lambda m: Upsample(m.size, m.scale_factor, m.mode, m.align_corners,
                                   m.recompute_scale_factor),
}
SUPPORTED = tuple(sorted([*_CONVERTERS, "Sequential"]))


def _convert(module, path: str):
    name = type(module).__name__
    if name == "Sequential":
        children = OrderedDict()
        for child_name, child in module._modules.items():
            child_path = f"{path}.{child_name}" if path else child_name
            children[child_name] = _convert(child, child_path)
        return Sequential(children)
    if name not in _CONVERTERS:
        where = f"at {path!r}" if path else "at the top level"
        raise ValueError(
            f"from_torch: unsupported module {name} {where}; supported modules are "
            f"{', '.join(SUPPORTED)}."
        )
    return _CONVERTERS[name](module)


def from_torch(module, *, with_buffers: bool = False):
    """Build the jaxgrad twin of ``module`` and copy its weights.

    Args:
      module: a torch ``nn.Module`` made of supported layers (``SUPPORTED``),
        nested ``Sequential`` included.
      with_buffers: also return the module's buffers (BatchNorm running statistics),
        validated by ``model.load_buffers``.

    Returns:
      ``(model, params)``, or ``(model, params, buffers)`` with ``with_buffers=True``:
      the jaxgrad model and its params (and buffers), keyed like
      ``module.state_dict()``, with the module's dtype.

    Raises:
      ValueError: naming the first unsupported module's class and path.
    """
    model = _convert(module, "")
    state = module.state_dict()
    params = model.load_state_dict(state)
    if with_buffers:
        return model, params, model.load_buffers(state)
    return model, params
