"""Torch models the parity checks use, and numpy round-trips of their weights."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

ACTIVATIONS = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "leaky_relu": nn.LeakyReLU,
    "identity": nn.Identity,
}


def mlp(
    sizes, activation: str = "relu", *, bias: bool = True, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """``nn.Sequential(Linear, act, …, Linear)`` with no activation after the last layer.

    >>> mlp([784, 256, 10])   # the lessons' 203,530-parameter network
    """
    sizes = list(sizes)
    if len(sizes) < 2:
        raise ValueError(f"`sizes` (={sizes}) needs at least an input and an output width.")
    if activation not in ACTIVATIONS:
        raise ValueError(f"`activation` (={activation!r}) must be one of {', '.join(ACTIVATIONS)}.")
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out, bias=bias, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def state_dict_numpy(module: nn.Module) -> dict[str, np.ndarray]:
    """``{name: numpy array}`` copies of ``module.state_dict()``."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_numpy(module: nn.Module, arrays: Mapping[str, np.ndarray]) -> nn.Module:
    """Load numpy (or any array-like) weights into ``module`` strictly; returns it.

    Dtypes must match the module's: a float64 array is not cast into a float32
    model behind the user's back.
    """
    own = module.state_dict()
    problems = []
    for name, target in own.items():
        if name in arrays:
            array = np.asarray(arrays[name])
            expected = str(target.dtype).replace("torch.", "")
            if array.dtype.name != expected:
                problems.append(f"`{name}`: dtype {array.dtype.name} != module's {expected}")
    if problems:
        raise ValueError("load_numpy: " + "; ".join(problems) + ".")
    module.load_state_dict(
        {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}, strict=True
    )
    return module


# ---------------------------------------------------------------- convolutional networks
# Two CNNs for 1×8×8 digits (``jaxgrad.data.load_digits``; inputs `(N, 1, 8, 8)`). jaxgrad
# builds their twins with ``jaxgrad.nn.from_torch``: ``cnn`` is a ``Sequential``, ``ResNet``
# has torchvision's custom forward and goes through ``torch.fx``.


def cnn(num_classes: int = 10, *, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """LeNet-style: two 3×3 conv + ReLU + 2×2 max-pool stages, then two Linear layers.

    `(N, 1, 8, 8)` -> `(N, 6, 4, 4)` -> `(N, 16, 2, 2)` -> 64 features (C,H,W order)
    -> 32 -> ``num_classes``.
    """
    return nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 2 * 2, 32),
        nn.ReLU(),
        nn.Linear(32, num_classes),
    ).to(dtype)


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: conv3×3-BN-ReLU-conv3×3-BN, plus the identity or a
    strided 1×1 conv + BN ``downsample`` branch, then ReLU."""

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """A small torchvision-style ResNet: 3×3 stem (no max-pool at 8×8), one stage per
    width (``layers`` BasicBlocks each, stride 2 from the second stage on, with a 1×1
    conv + BN downsample), global average pooling, Linear."""

    def __init__(self, layers=(1, 1), widths=(8, 16), num_classes: int = 10, in_channels: int = 1):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        for index, (blocks, width) in enumerate(zip(layers, widths)):
            setattr(
                self,
                f"layer{index + 1}",
                self._make_layer(width, blocks, stride=1 if index == 0 else 2),
            )
        self.num_stages = len(widths)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1], num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        stage = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        stage += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        for index in range(self.num_stages):
            x = getattr(self, f"layer{index + 1}")(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


def resnet(num_classes: int = 10, *, dtype: torch.dtype = torch.float32) -> ResNet:
    """``ResNet(layers=(1, 1), widths=(8, 16))``: 2 BasicBlocks, the second strided with a
    downsample branch; 5,122 parameters for 10 classes."""
    return ResNet(num_classes=num_classes).to(dtype)


CNN_MODELS = {"cnn": cnn, "resnet": resnet}
