"""Layers mirroring ``torch.nn``: frozen dataclasses with pure ``init`` and ``apply``."""

from jaxgrad.nn import init
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
from jaxgrad.nn.aten._autograd import register_autograd_function
from jaxgrad.nn.attention import MultiheadAttention
from jaxgrad.nn.capture import SUPPORTED, from_torch, fx
from jaxgrad.nn.capture.artifact import ExportedArtifact, load_exported, save_exported
from jaxgrad.nn.container import ACTIVATIONS, Frozen, Sequential, mlp
from jaxgrad.nn.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from jaxgrad.nn.dropout import Dropout, Dropout1d, Dropout2d
from jaxgrad.nn.embedding import Embedding
from jaxgrad.nn.fractional import FractionalMaxPool2d, FractionalMaxPool3d
from jaxgrad.nn.functional._lowering import conv_lowering
from jaxgrad.nn.layernorm import LayerNorm, RMSNorm
from jaxgrad.nn.linear import Bilinear, Flatten, Identity, Linear
from jaxgrad.nn.module import Module
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
from jaxgrad.nn.recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from jaxgrad.nn.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from jaxgrad.nn.upsample import Upsample
