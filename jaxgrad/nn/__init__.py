"""Layers mirroring ``torch.nn``: frozen dataclasses with pure ``init`` and ``apply``."""

from jaxgrad.nn.activations import GELU
from jaxgrad.nn.activations import LeakyReLU
from jaxgrad.nn.activations import ReLU
from jaxgrad.nn.activations import Sigmoid
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
from jaxgrad.nn.dropout import Dropout
from jaxgrad.nn.dropout import Dropout1d
from jaxgrad.nn.dropout import Dropout2d
from jaxgrad.nn.norm import BatchNorm1d
from jaxgrad.nn.norm import BatchNorm2d
from jaxgrad.nn.norm import GroupNorm
from jaxgrad.nn.norm import InstanceNorm1d
from jaxgrad.nn.norm import InstanceNorm2d
