"""A user's own model for `scripts/train.py --model docs/train_net.py:Net`: a small CNN
with BatchNorm on the 8×8 digits read as `(n, 1, 8, 8)` images (docs/training.md)."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10, width=16):
        super().__init__()
        # no bias before BatchNorm (torchvision's ResNets neither): BatchNorm removes it
        self.conv1 = nn.Conv2d(1, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = nn.functional.max_pool2d(x, 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))
