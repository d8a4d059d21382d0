"""Property-based parity: hypothesis draws small architectures and inputs; float64, strict tier."""

from __future__ import annotations

import jax
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from parity_checks.harness import model_parity, random_batch

import torchref

architectures = st.fixed_dictionaries(
    {
        "sizes": st.lists(st.integers(1, 6), min_size=2, max_size=5),
        "activation": st.sampled_from(list(torchref.models.ACTIVATIONS)),
        "bias": st.booleans(),
        "batch": st.integers(1, 4),
        "loss": st.sampled_from(["mse", "cross_entropy"]),
        "seed": st.integers(0, 2**31 - 1),
    }
)


@settings(derandomize=True, deadline=None, max_examples=12)
@given(architecture=architectures)
def test_random_mlps_match_torch_in_float64(architecture):
    with jax.enable_x64(True):
        torch.manual_seed(architecture["seed"])
        module = torchref.mlp(
            architecture["sizes"],
            architecture["activation"],
            bias=architecture["bias"],
            dtype=torch.float64,
        )
        rng = np.random.default_rng(architecture["seed"])
        sizes = architecture["sizes"]
        x, y = random_batch(
            rng, architecture["batch"], sizes[0], sizes[-1], "float64", architecture["loss"]
        )
        report = model_parity(module, x, y, loss=architecture["loss"], jit=True)
        assert report.passed, report.table()
        assert {leaf.dtype for leaf in report.leaves} == {"float64"}
