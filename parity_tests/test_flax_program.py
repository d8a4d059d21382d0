"""A model only ``torch.export`` captures, as an nnx module: ``TorchProgram``.

The layers stock flax has run as stock nnx layers, the rest as torch's ATen program;
the same model three times — torch, the nnx twin, the jaxgrad model ``from_nnx`` reads
back — compared at the float64 tier: forward and every gradient in evaluation mode,
the training-mode forward with BatchNorm's running statistics, and the state_dict.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

from jaxgrad.flax import from_nnx, grads_to_torch, nnx_state_dict, to_nnx
from jaxgrad.flax.program import TorchProgram
from jaxgrad.parity import assert_parity

torch.set_num_threads(1)


class Tagger(torch.nn.Module):
    """Token ids → per-token logits: an embedding tied to the output head, a Linear and
    a LayerNorm, a Conv1d over the sequence, a BatchNorm1d, and a shape assertion
    ``torch.fx`` cannot trace."""

    def __init__(self, vocab=11, width=6):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.proj = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.conv = torch.nn.Conv1d(width, width, 3, padding=1)
        self.bn = torch.nn.BatchNorm1d(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one tensor in torch
        self.register_buffer("scale", torch.tensor(0.5, dtype=torch.float64), persistent=False)

    def forward(self, ids):
        torch._assert(ids.shape[1] == 5, "five tokens")
        h = self.norm(torch.nn.functional.gelu(self.proj(self.embed(ids))))
        h = self.bn(self.conv(h.transpose(1, 2))).transpose(1, 2)
        return self.head(h * self.scale)


def _model():
    torch.manual_seed(0)
    module = Tagger().double()
    with torch.no_grad():  # running statistics away from their defaults
        module.bn.running_mean.uniform_(-0.5, 0.5)
        module.bn.running_var.uniform_(0.5, 1.5)
    return module


def _ids():
    return torch.from_numpy(np.random.default_rng(3).integers(0, 11, (4, 5)))


def test_stock_layers_where_flax_has_them_the_program_for_the_rest(x64):
    """proj, norm and conv become nnx.Linear, nnx.LayerNorm and nnx.Conv; the tied
    embedding/head pair and the BatchNorm (buffers) stay in torch's program."""
    module, ids = _model().eval(), _ids()
    twin = to_nnx(module, example=(ids,))
    assert isinstance(twin, TorchProgram)
    assert twin.stock_layers == {"proj": "Linear", "norm": "LayerNorm", "conv": "Conv"}
    assert set(twin.program_layers()) == {"embed", "bn"}
    assert twin.layers["proj"].kernel.get_value().shape == (6, 6)  # flax (in, out)
    assert set(twin.params) == {"embed.weight", "bn.weight", "bn.bias"}  # torch's names


def test_forward_and_every_gradient_match_torch(x64):
    module, ids = _model().eval(), _ids()
    out = module(ids)
    cotangent = torch.from_numpy(np.random.default_rng(4).standard_normal(tuple(out.shape)))
    (out * cotangent).sum().backward()
    reference = {
        "output": out.detach().numpy(),
        "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
    }
    twin = to_nnx(module, example=(ids,))

    def objective(twin):
        value = twin(jnp.asarray(ids.numpy()))
        return jnp.sum(value * jnp.asarray(cotangent.numpy())), value

    (_, value), grads = nnx.value_and_grad(objective, has_aux=True)(twin)
    assert_parity(reference, {"output": value, "grads": grads_to_torch(twin, grads)})


def test_training_forward_updates_batchnorm_statistics_as_torch(x64):
    module, ids = _model().train(), _ids()
    twin = to_nnx(module, example=(ids,))
    assert not twin.deterministic  # torch's train(): the training-mode program
    expected = module(ids).detach().numpy()
    value = twin(jnp.asarray(ids.numpy()))
    assert_parity(
        {
            "output": expected,
            "running_mean": module.bn.running_mean.numpy(),
            "running_var": module.bn.running_var.numpy(),
        },
        {
            "output": value,
            "running_mean": twin.buffers["bn.running_mean"][...],
            "running_var": twin.buffers["bn.running_var"][...],
        },
    )


def test_read_back_gives_torchs_state_dict(x64):
    module, ids = _model().eval(), _ids()
    twin = to_nnx(module, example=(ids,))
    state = nnx_state_dict(twin)
    expected = {k: v.numpy() for k, v in module.state_dict().items()}
    assert set(state) == set(expected)  # head.weight: the tie's second name, written back
    for name, value in expected.items():
        np.testing.assert_array_equal(state[name], value, err_msg=name)
    model, params, buffers = from_nnx(twin)
    again = to_nnx(model, params, buffers)
    again.eval()
    twin.eval()
    np.testing.assert_array_equal(
        np.asarray(again(jnp.asarray(ids.numpy()))), np.asarray(twin(jnp.asarray(ids.numpy())))
    )
