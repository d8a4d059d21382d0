"""Optimizers with torch.optim semantics, freezing and clipping, all as optax parts.

- ``sgd``, ``adam``, ``adamw``, ``rmsprop``: torch's argument names, defaults and
  update rules (state readable with ``torch_style_state``);
- ``freeze(optimizer, frozen)``: ``requires_grad=False`` for the optimizer;
- ``clip_grad_norm`` / ``clip_grad_value`` (functions) and ``clip_grad_norm_transform`` /
  ``clip_grad_value_transform`` (optax transforms) with torch's formulas.
"""

from jaxgrad.optim.clipping import clip_grad_norm
from jaxgrad.optim.clipping import clip_grad_norm_transform
from jaxgrad.optim.clipping import clip_grad_value
from jaxgrad.optim.clipping import clip_grad_value_transform
from jaxgrad.optim.clipping import global_norm
from jaxgrad.optim.freezing import count_trainable
from jaxgrad.optim.freezing import freeze
from jaxgrad.optim.freezing import frozen_mask
from jaxgrad.optim.names import dotted_names
from jaxgrad.optim.optimizers import AdamState
from jaxgrad.optim.optimizers import RmspropState
from jaxgrad.optim.optimizers import SgdMomentumState
from jaxgrad.optim.optimizers import adam
from jaxgrad.optim.optimizers import adamw
from jaxgrad.optim.optimizers import rmsprop
from jaxgrad.optim.optimizers import scale_by_torch_adam
from jaxgrad.optim.optimizers import scale_by_torch_momentum
from jaxgrad.optim.optimizers import scale_by_torch_rmsprop
from jaxgrad.optim.optimizers import sgd
from jaxgrad.optim.optimizers import torch_style_state
from jaxgrad.optim.trajectory import optimizer_trajectory

__all__ = [
    "AdamState",
    "RmspropState",
    "SgdMomentumState",
    "adam",
    "adamw",
    "clip_grad_norm",
    "clip_grad_norm_transform",
    "clip_grad_value",
    "clip_grad_value_transform",
    "count_trainable",
    "dotted_names",
    "freeze",
    "frozen_mask",
    "global_norm",
    "rmsprop",
    "scale_by_torch_adam",
    "scale_by_torch_momentum",
    "scale_by_torch_rmsprop",
    "sgd",
    "optimizer_trajectory",
    "torch_style_state",
]
