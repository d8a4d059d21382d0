"""A small CNN built from the new layers: from_torch, parity, jit, vmap, error paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxgrad
from jaxgrad import nn
from jaxgrad_dev.layer_parity import layer_parity

P = torch.nn


def _torch_cnn():
    torch.manual_seed(0)
    return P.Sequential(
        P.Conv2d(1, 4, 3, padding=1, padding_mode="reflect"),
        P.Hardswish(),
        P.MaxPool2d(2, ceil_mode=True),
        P.Sequential(P.Conv2d(4, 4, 3, padding="same", groups=2), P.SiLU()),
        P.Upsample(scale_factor=2, mode="bilinear"),
        P.AvgPool2d(3, 2, 1),
        P.AdaptiveAvgPool2d((2, 3)),
        P.Flatten(),
        P.Linear(24, 3),
        P.LogSoftmax(dim=1),
    ).double()


def test_cnn_matches_torch_forward_and_gradients():
    x = torch.randn(2, 1, 7, 7, dtype=torch.float64, requires_grad=True)
    report = layer_parity(_torch_cnn(), x, name="small cnn", fast_compile=True)
    assert report.passed, report.table()
    assert "['param_grads']['3.0.weight']" in [leaf.path for leaf in report.leaves]


def test_vmap_over_unbatched_inputs_equals_the_batched_call():
    # unbatched (C, H, W) inputs, as torch accepts them, make these layers vmappable
    # one image at a time (not Upsample: torch reads a 3-d input as (N, C, L))
    with jax.enable_x64(True):
        model, params = nn.from_torch(
            P.Sequential(
                P.Conv2d(2, 3, 3, padding=1), P.MaxPool2d(2), P.ReflectionPad2d(1)
            ).double()
        )
        x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 2, 4, 4)))
        batched = model.apply(params, x)
        mapped = jax.vmap(lambda image: model.apply(params, image))(x)
    jaxgrad.assert_parity(batched, mapped)


def test_error_inside_a_model_names_the_layer_path():
    with jax.enable_x64(True):
        model, params = nn.from_torch(_torch_cnn())
        with pytest.raises(
            ValueError,
            match=r"Conv2d at '0': Conv2d: `in_channels` \(=1\) must "
            r"match the input's channel dimension \(=3",
        ):
            model.apply(params, jnp.zeros((2, 3, 7, 7)))
        with pytest.raises(
            ValueError,
            match=r"Conv2d at '0': pad: reflect padding \(=1, 1\) must "
            r"be smaller than the padded dimension \(=1\)",
        ):
            model.apply(params, jnp.zeros((2, 1, 1, 1)))
    nested = nn.Sequential(nn.ReLU(), nn.Sequential(nn.Identity(), nn.Conv1d(2, 2, 3)))
    with pytest.raises(ValueError, match=r"Conv1d at '1.1': Conv1d: expected a 2-d"):
        nested.apply(nested.init(jax.random.key(0)), jnp.zeros((2, 2, 5, 5)))
