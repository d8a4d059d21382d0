"""``Sequential`` and the ``mlp`` builder.

``Sequential(*layers)`` or ``Sequential(OrderedDict(name=layer, ...))``, as torch.
Its params are the children's params prefixed by the child's name, so keys come out
``"0.weight"``, ``"2.bias"``, ``"1.0.weight"`` for nested containers — exactly torch's
``state_dict()`` keys.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping

import jax

from jaxgrad.nn.activations import GELU, LeakyReLU, ReLU, Sigmoid, Tanh
from jaxgrad.nn.linear import Identity, Linear
from jaxgrad.nn.module import Module, child_path, sub_dict


@dataclasses.dataclass(frozen=True, init=False)
class Sequential(Module):
    """``torch.nn.Sequential``: applies its layers in order.

    Attributes:
      layers: the child layers, in order.
      names: the child names (``"0"``, ``"1"``, … unless built from a mapping).
    """

    layers: tuple
    names: tuple

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], Mapping):
            named = list(layers[0].items())
        else:
            named = [(str(i), layer) for i, layer in enumerate(layers)]
        for name, layer in named:
            if not isinstance(layer, Module):
                raise TypeError(
                    f"Sequential: child {name!r} is a {type(layer).__name__}, expected a "
                    "jaxgrad.nn layer (use jaxgrad.nn.from_torch to convert a torch module)."
                )
            if "." in name or not name:
                raise ValueError(f"Sequential: child name {name!r} must be non-empty, without '.'.")
        object.__setattr__(self, "names", tuple(n for n, _ in named))
        object.__setattr__(self, "layers", tuple(layer for _, layer in named))

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(OrderedDict(zip(self.names[index], self.layers[index])))
        return self.layers[index]

    def params_without_gradient(self, train: bool = True) -> tuple:
        """Its children's (a traced child reading a parameter only through ``detach``
        or ``no_grad``), under their paths."""
        return tuple(
            f"{name}.{inner}"
            for name, layer in zip(self.names, self.layers)
            for inner in layer.params_without_gradient(train)
        )

    def init(self, key):
        params = {}
        keys = jax.random.split(key, max(len(self.layers), 1))
        for name, layer, layer_key in zip(self.names, self.layers, keys):
            for pname, value in layer.init(layer_key).items():
                params[f"{name}.{pname}"] = value
        return params

    def init_buffers(self):
        return {
            f"{name}.{bname}": value
            for name, layer in zip(self.names, self.layers)
            for bname, value in layer.init_buffers().items()
        }

    def state_dict_keys(self):
        return [
            f"{name}.{key}"
            for name, layer in zip(self.names, self.layers)
            for key in layer.state_dict_keys()
        ]

    def layer_params(self, params, index: int) -> dict:
        """The params of child ``index`` with its prefix removed."""
        return sub_dict(params, self.names[index])

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        new_buffers = {}
        for name, layer in zip(self.names, self.layers):
            x, child_buffers = layer.forward_with_state(
                sub_dict(params, name),
                x,
                buffers=sub_dict(buffers, name),
                train=train,
                key=key,
                path=child_path(path, name),
            )
            new_buffers.update({f"{name}.{k}": v for k, v in child_buffers.items()})
        return x, new_buffers

    def intermediates(self, params, x, *, buffers=None, train=False, key=None) -> list:
        """Every child's output, in order: ``[layer0(x), layer1(layer0(x)), ...]``."""
        outputs = []
        for index, (name, layer) in enumerate(zip(self.names, self.layers)):
            x, _ = layer.forward_with_state(
                self.layer_params(params, index),
                x,
                buffers=sub_dict(buffers or {}, name),
                train=train,
                key=key,
                path=name,
            )
            outputs.append(x)
        return outputs


ACTIVATIONS = {
    "relu": ReLU,
    "sigmoid": Sigmoid,
    "tanh": Tanh,
    "gelu": GELU,
    "gelu_tanh": lambda: GELU(approximate="tanh"),
    "leaky_relu": LeakyReLU,
    "identity": Identity,
}
"""``mlp``'s activation names: each a factory of the layer placed between two
``Linear`` layers (``"gelu_tanh"`` is ``GELU(approximate="tanh")``)."""


def mlp(sizes, activation: str = "relu", *, bias: bool = True, dtype=None) -> Sequential:
    """``Linear(sizes[0], sizes[1]) → act → … → Linear(sizes[-2], sizes[-1])``.

    No activation after the last layer; the twin of ``torchref.models.mlp``, with the
    same keys (``"0.weight"``, ``"2.weight"``, …).

    Args:
      sizes: layer widths, at least two: input, hidden…, output.
      activation: one of ``ACTIVATIONS`` (``"relu"``, ``"sigmoid"``, ``"tanh"``,
        ``"gelu"``, ``"gelu_tanh"``, ``"leaky_relu"``, ``"identity"``).
      bias: give every ``Linear`` a bias.
      dtype: the parameters' dtype (None: float32, torch's default).

    Returns:
      A ``Sequential``: input `(*, sizes[0])`, output `(*, sizes[-1])`.

    Raises:
      ValueError: fewer than two sizes, or an unknown activation.
    """
    sizes = list(sizes)
    if len(sizes) < 2:
        raise ValueError(f"`sizes` (={sizes}) needs at least an input and an output width.")
    if activation not in ACTIVATIONS:
        raise ValueError(f"`activation` (={activation!r}) must be one of {', '.join(ACTIVATIONS)}.")
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(Linear(fan_in, fan_out, bias=bias, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return Sequential(*layers)


@dataclasses.dataclass(frozen=True)
class Frozen(Module):
    """A converted model some of whose parameters torch has with ``requires_grad=False``
    (``from_torch`` wraps a model the layer path built, when it is not a traced
    ``GraphModule``, which holds the names itself).

    Attributes:
      layer: the model.
      names: the frozen parameters' ``state_dict`` keys: read through a stop-gradient,
        so they get no gradient, as in torch; still in ``params`` and ``state_dict``.
    """

    layer: Module
    names: tuple

    def init(self, key):
        return self.layer.init(key)

    def init_buffers(self):
        return self.layer.init_buffers()

    def state_dict_keys(self):
        return self.layer.state_dict_keys()

    def params_without_gradient(self, train: bool = True) -> tuple:
        inner = self.layer.params_without_gradient(train)
        return tuple(self.names) + tuple(n for n in inner if n not in self.names)

    def forward_with_state(self, params, *inputs, buffers, train, key, path, **options):
        params = {k: jax.lax.stop_gradient(v) if k in self.names else v for k, v in params.items()}
        return self.layer.forward_with_state(
            params, *inputs, buffers=buffers, train=train, key=key, path=path, **options
        )
