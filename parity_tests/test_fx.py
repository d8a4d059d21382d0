"""``from_torch`` of custom forwards through ``torch.fx``, and the class-identity rule.

Torch is the reference: every traced model is run in both frameworks on copied
weights, float64, and compared at the float64 tier (outputs, gradients with respect
to params and input, buffers after a training step).
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch import nn as tnn

from jaxgrad import nn
from jaxgrad.parity import assert_parity


class Block(tnn.Module):
    """A residual MLP block: the BasicBlock pattern with Linear for Conv."""

    def __init__(self, width):
        super().__init__()
        self.fc1 = tnn.Linear(width, width)
        self.bn1 = tnn.BatchNorm1d(width)
        self.relu = tnn.ReLU(inplace=True)
        self.fc2 = tnn.Linear(width, width)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.fc1(x)))
        out = self.fc2(out)
        out += identity
        return TF.relu(out)


class Net(tnn.Module):
    def __init__(self, p=0.25):
        super().__init__()
        self.stem = tnn.Linear(4, 6)
        self.blocks = tnn.Sequential(Block(6), Block(6))
        self.scale = tnn.Parameter(torch.tensor([1.5]))
        self.head = tnn.Linear(12, 3)
        self.p = p

    def forward(self, x):
        x = self.stem(x) * self.scale
        x = self.blocks(x)
        x = torch.cat([x, TF.dropout(x, self.p, self.training)], dim=1)
        return self.head(x.view(x.size(0), -1))


def _torch_step(module, x, cotangent, train):
    module.train(train)
    module.zero_grad(set_to_none=True)
    x = torch.from_numpy(x).requires_grad_(True)
    out = module(x)
    (out * torch.from_numpy(cotangent)).sum().backward()
    return {
        "output": out.detach().numpy(),
        "input": x.grad.numpy(),
        "params": {n: p.grad.numpy() for n, p in module.named_parameters()},
        "buffers": {n: b.numpy().copy() for n, b in module.named_buffers()},
    }


def _jax_step(model, params, buffers, x, cotangent, train):
    def objective(params, x):
        out, new = model.apply(params, x, buffers=buffers, train=train, key=None)
        return jnp.sum(out * cotangent), (out, new)

    (grads, grad_x), (out, new) = jax.jit(jax.grad(objective, argnums=(0, 1), has_aux=True))(
        params, jnp.asarray(x)
    )
    return {
        "output": out,
        "input": grad_x,
        "params": grads,
        "buffers": {
            k: np.asarray(v).astype(np.int64) if k.endswith("tracked") else v
            for k, v in new.items()
        },
    }


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_traced_residual_net_matches_torch(x64, rng, train):
    torch.manual_seed(0)
    net = Net(p=0.0).double()  # p=0: training-mode dropout is the identity on both sides
    model, params, buffers = nn.from_torch(net, with_buffers=True)
    assert isinstance(model, nn.fx.GraphModule)
    assert model.state_dict_keys() == list(net.state_dict())  # incl. blocks.1.bn1.running_var
    x = rng.standard_normal((5, 4))
    cotangent = rng.standard_normal((5, 3))
    # train: batch statistics, running statistics updated, num_batches_tracked counted
    assert_parity(
        _torch_step(net, x, cotangent, train),
        _jax_step(model, params, buffers, x, cotangent, train),
    )


def test_traced_model_works_under_vmap_and_dropout_takes_a_key(x64, rng):
    torch.manual_seed(1)
    net = Net().double().eval()
    model, params, buffers = nn.from_torch(net, with_buffers=True)
    x = jnp.asarray(rng.standard_normal((4, 4)))

    @jax.jit
    def both(params, x, key):
        batched, _ = model.apply(params, x, buffers=buffers)
        per_example = jax.vmap(lambda row: model.apply(params, row[None], buffers=buffers)[0])(x)
        train, _ = model.apply(params, x, buffers=buffers, train=True, key=key)
        return batched, per_example[:, 0], train

    batched, per_example, train = both(params, x, jax.random.key(0))
    np.testing.assert_allclose(per_example, batched, rtol=1e-13)
    np.testing.assert_array_equal(train, both(params, x, jax.random.key(0))[2])
    assert not np.array_equal(train, both(params, x, jax.random.key(1))[2])
    with pytest.raises(ValueError, match=r"dropout at 'dropout': `train=True` needs a `key=`"):
        model.apply(params, x, buffers=buffers, train=True)


class Linear(tnn.Linear):
    """A user's class named like torch's, with its own forward."""

    def forward(self, x):
        return 2.0 * TF.linear(x, self.weight, self.bias)


class Sequential(tnn.Module):
    """A user module named ``Sequential`` that applies its children in reverse."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = tnn.ModuleList(layers)

    def forward(self, x):
        for layer in reversed(self.layers):
            x = layer(x)
        return x


class PlainSubclass(tnn.Linear):
    """Only a constructor: torch's forward, so torch's Linear it is."""

    def __init__(self):
        super().__init__(3, 2)


def test_user_classes_named_like_torchs_go_through_tracing(x64, rng):
    torch.manual_seed(2)
    x = rng.standard_normal((2, 3))
    for module in (
        Linear(3, 3).double(),
        Sequential(tnn.Linear(3, 2), tnn.Tanh(), tnn.Linear(3, 3)).double(),
    ):
        model, params = nn.from_torch(module)
        assert isinstance(model, nn.fx.GraphModule), type(module).__name__
        expected = module(torch.from_numpy(x)).detach().numpy()
        assert_parity(expected, model.apply(params, jnp.asarray(x)))
    model, _ = nn.from_torch(PlainSubclass())
    assert type(model) is nn.Linear
    # a custom block inside torch's Sequential: traced there, keys prefixed as torch's
    outer = tnn.Sequential(Block(3), tnn.Linear(3, 2)).double().eval()
    model, params, buffers = nn.from_torch(outer, with_buffers=True)
    assert isinstance(model[0], nn.fx.GraphModule)
    assert model.state_dict_keys() == list(outer.state_dict())
    assert_parity(
        outer(torch.from_numpy(x)).detach().numpy(),
        model.apply(params, jnp.asarray(x), buffers=buffers)[0],
    )


class Untraceable(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 3)

    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow
            return self.fc(x)
        return x


class UsesLogdet(tnn.Module):
    def forward(self, x):
        return torch.logdet(x)


class ThroughAView(tnn.Module):
    def forward(self, x):
        y = x * 2
        flat = y.view(-1)
        flat.add_(1)  # writes y through the view
        return y


class Wrapper(tnn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = tnn.Sequential(tnn.Identity(), inner)

    def forward(self, x):
        return self.inner(x)


class Tied(tnn.Module):
    def __init__(self):
        super().__init__()
        self.a = tnn.Linear(2, 2)
        self.b = self.a

    def forward(self, x):
        return self.b(self.a(x))


def test_untraceable_unmapped_and_unsupported_are_named():
    with pytest.raises(
        ValueError,
        match=r"cannot trace Untraceable at the top level with "
        r"torch.fx.symbolic_trace",
    ):
        nn.from_torch(Untraceable())
    with pytest.raises(
        ValueError,
        match=r"unmapped op torch.logdet at node 'logdet' "
        r"\(call_function .*\) in Wrapper at 'inner.1'",
    ):
        nn.from_torch(Wrapper(UsesLogdet()), capture="layers")
    with pytest.raises(ValueError, match=r"unsupported module PixelShuffle at 'inner.1'"):
        nn.from_torch(Wrapper(tnn.PixelShuffle(2)), capture="layers")
    with pytest.raises(
        ValueError,
        match=r"node 'add_' .* overwrites 'view' in place and "
        r"'view' is a view of another value",
    ):
        nn.from_torch(ThroughAView())
    with pytest.raises(ValueError, match=r"shares parameters between names \(a.weight = b.weight"):
        nn.from_torch(Tied())


def test_import_jaxgrad_works_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import jaxgrad, jaxgrad.nn, jaxgrad.nn.capture.fx, jaxgrad.nn.capture.fx_ops\n"
        "print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "ok", result.stderr[-2000:]
