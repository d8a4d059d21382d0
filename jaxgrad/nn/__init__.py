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
from jaxgrad.nn.attention import MultiheadAttention
from jaxgrad.nn.embedding import Embedding
from jaxgrad.nn.layernorm import LayerNorm
from jaxgrad.nn.layernorm import RMSNorm
from jaxgrad.nn.recurrent import GRU
from jaxgrad.nn.recurrent import GRUCell
from jaxgrad.nn.recurrent import LSTM
from jaxgrad.nn.recurrent import LSTMCell
from jaxgrad.nn.recurrent import RNN
from jaxgrad.nn.recurrent import RNNCell
