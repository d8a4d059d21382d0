import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, features=16, hidden=32, classes=4):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        self.up = nn.Linear(features, hidden)
        self.act = nn.GELU()
        self.down = nn.Linear(hidden, features)
        self.head = nn.Linear(features, classes)

    def forward(self, x):
        x = x + self.down(self.act(self.up(self.norm(x))))
        return self.head(torch.relu(x))
