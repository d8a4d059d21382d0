"""Layers mirroring ``torch.nn``: frozen dataclasses with pure ``init`` and ``apply``."""

from jaxgrad.nn.activations import ELU
from jaxgrad.nn.activations import GELU
from jaxgrad.nn.activations import Hardsigmoid
from jaxgrad.nn.activations import Hardswish
from jaxgrad.nn.activations import LeakyReLU
from jaxgrad.nn.activations import LogSoftmax
from jaxgrad.nn.activations import Mish
from jaxgrad.nn.activations import ReLU
from jaxgrad.nn.activations import ReLU6
from jaxgrad.nn.activations import SiLU
from jaxgrad.nn.activations import Sigmoid
from jaxgrad.nn.activations import Softmax
from jaxgrad.nn.activations import Softplus
from jaxgrad.nn.activations import Tanh
from jaxgrad.nn.container import ACTIVATIONS
from jaxgrad.nn.container import Sequential
from jaxgrad.nn.container import mlp
from jaxgrad.nn.convert import SUPPORTED
from jaxgrad.nn.convert import from_torch
from jaxgrad.nn.linear import Flatten
from jaxgrad.nn.linear import Identity
from jaxgrad.nn.linear import Linear
from jaxgrad.nn.module import Module
from jaxgrad.nn import init
