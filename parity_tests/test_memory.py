"""Saved-for-backward accounting (torch hooks, JAX residuals), checkpointing, bf16.

Expected byte counts are derived by hand from the shapes; the script is run on its
quick size and checked for relations (equalities, halvings), never timings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import memory as memory_script
import numpy as np
import pytest
import torch
from torch import nn

import jaxgrad.nn
from jaxgrad import losses
from jaxgrad import memory as jmemory
from jaxgrad.parity import BIT_IDENTICAL, assert_parity
from torchref import memory as tmemory


def test_torch_saved_bytes_by_hand():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    x = torch.randn(5, 3, dtype=torch.float64)
    _, counts = tmemory.saved_bytes(lambda: module(x), module.parameters(), [x])
    # The first Linear saves only its input x (for ∂/∂W1): x needs no gradient, so W1
    # is not needed. ReLU saves its output, which the second Linear saves again (one
    # storage) with its weight (a view, to send the gradient back to the ReLU).
    assert counts["inputs"] == 5 * 3 * 8
    assert counts["activations"] == 5 * 4 * 8
    assert counts["parameters"] == 2 * 4 * 8
    assert counts["total"] == 120 + 160 + 64
    with torch.no_grad():
        _, nothing = tmemory.saved_bytes(lambda: module(x), module.parameters(), [x])
    assert nothing["total"] == 0 and nothing["tensors"] == 0


def test_jax_residuals_by_hand(x64):
    w, x = jnp.ones((3, 4)), jnp.ones((2, 3))
    residuals = jmemory.saved_residuals(lambda w, x: jnp.sum(jnp.tanh(x @ w)), w, x)
    assert all(r.dtype == np.float64 for r in residuals)
    kinds = jmemory.classify(residuals, batch_size=2)
    assert kinds["arguments"] == (3 * 4 + 2 * 3) * 8
    assert kinds["activations"] > 0 and kinds["activations"] % (2 * 4 * 8) == 0
    assert kinds["total"] == sum(r.nbytes for r in residuals)


def test_compiled_memory_gradients_are_the_outputs():
    torch.manual_seed(0)
    model, params = jaxgrad.nn.from_torch(
        torch.nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    )
    x, y = jnp.ones((4, 6)), jnp.zeros(4, jnp.int32)
    stats = jmemory.compiled_memory(
        jax.grad(lambda p: losses.cross_entropy(model.apply(p, x), y)), params
    )
    # the gradients, plus XLA's tuple of 4 output pointers (8 bytes each)
    assert stats["outputs"] - (6 * 5 + 5 + 5 * 3 + 3) * 4 in (0, 4 * 8)


@pytest.mark.parametrize("every", [1, 2, 3, 4])
@pytest.mark.parametrize("jit", [True, False])
def test_checkpointed_gradients_bit_identical(x64, seed, rng, every, jit):
    module = torch.nn.Sequential(
        nn.Linear(5, 8), nn.Sigmoid(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)
    ).double()
    model, params = jaxgrad.nn.from_torch(module)
    x = rng.standard_normal((7, 5))
    loss = lambda apply: lambda p: jnp.sum(apply(p, jnp.asarray(x)) ** 2)  # noqa: E731
    wrap = jax.jit if jit else (lambda f: f)
    plain = wrap(jax.grad(loss(model.apply)))(params)
    checked = wrap(jax.grad(loss(jmemory.checkpointed_apply(model, every=every))))(params)
    assert checked["0.weight"].dtype == jnp.float64
    assert_parity(plain, checked, **BIT_IDENTICAL)
    xt = torch.from_numpy(x)
    module.zero_grad()
    (module(xt) ** 2).sum().backward()
    reference = {n: p.grad.clone() for n, p in module.named_parameters()}
    module.zero_grad()
    (tmemory.checkpointed_forward(module, xt, every=every) ** 2).sum().backward()
    assert_parity(reference, {n: p.grad for n, p in module.named_parameters()}, **BIT_IDENTICAL)


def test_checkpoint_argument_errors():
    module = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="`every` \\(=0\\)"):
        tmemory.chunks(module, 0)
    model, _ = jaxgrad.nn.from_torch(module)
    with pytest.raises(ValueError, match="`every` \\(=0\\)"):
        jmemory.checkpointed_apply(model, every=0)
    with pytest.raises(TypeError, match="Sequential"):
        jmemory.checkpointed_apply(module, every=1)


def test_memory_script_relations(tmp_path):
    results = memory_script.main(["--quick", "--repeats", "1", "--json", str(tmp_path / "m.json")])
    sizes, batch = results["config"]["sizes"], results["config"]["batch"]
    hidden_bytes = [batch * width * 4 for width in sizes[1:-1]]
    graph = results["forward"]["torch"]["graph_saved"]
    assert graph["activations"] == sum(hidden_bytes)  # the ReLU outputs, once each
    assert graph["inputs"] == batch * sizes[0] * 4
    assert results["forward"]["torch"]["no_grad_saved"]["total"] == 0
    rows = results["checkpointing"]
    for row in rows.values():
        assert row["jax_bit_identical"] and row.get("torch_bit_identical", True)
    plain, layer, block = (
        rows[k]["torch_saved"]["activations"] for k in ("plain", "per layer", "blocks of 2 layers")
    )
    assert layer == plain  # per-layer checkpointing saves nothing
    assert block < plain
    jax_plain, jax_layer, jax_block = (
        rows[k]["jax_residuals"]["activations"]
        for k in ("plain", "per layer", "blocks of 2 layers")
    )
    assert jax_block < jax_layer < jax_plain
    assert rows["blocks of 2, dots_saveable"]["jax_residuals"]["activations"] > jax_block
    for key in ("torch_saved", "jax_residuals"):
        f32 = results["bfloat16"]["float32"][key]["activations"]
        assert results["bfloat16"]["bfloat16"][key]["activations"] * 2 == f32
    grad_out = results["forward"]["jax"]["compiled"]["forward_backward"]["outputs"]
    assert results["forward"]["torch"]["gradient_bytes"] == results["config"]["params"] * 4
    n_leaves = 2 * (len(sizes) - 1)  # + XLA's tuple of output pointers, 8 bytes each
    assert grad_out - results["config"]["params"] * 4 in (0, 8 * n_leaves)
