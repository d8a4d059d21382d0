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
from jaxgrad.nn.linear import Flatten, Identity, Linear


def _linear(module):
    return Linear(
        module.in_features,
        module.out_features,
        bias=module.bias is not None,
        dtype=canonical_dtype(module.weight.dtype),
    )


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
