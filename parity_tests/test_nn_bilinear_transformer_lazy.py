"""``Bilinear``, the full ``Transformer`` and the lazy convolutions against torch: init
(torch's distributions and names), forward and gradients in float64, masks, and the
lazy modules' refusal before torch has materialised them."""

from __future__ import annotations

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxgrad
from jaxgrad import parity

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def _grads_torch(module, inputs, **kwargs):
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    out = module(*leaves, **kwargs)
    names = [n for n, _ in module.named_parameters()]
    grads = torch.autograd.grad(out.sum(), leaves + [p for _, p in module.named_parameters()])
    return (
        out.detach().numpy(),
        [g.numpy() for g in grads[: len(leaves)]],
        {n: g.numpy() for n, g in zip(names, grads[len(leaves) :])},
    )


def _grads_jax(model, params, inputs, **kwargs):
    def loss(p, *xs):
        return jnp.sum(model(p, *xs, **kwargs))

    arrays = [jnp.asarray(x.numpy()) for x in inputs]
    out = model(params, *arrays, **kwargs)
    grads = jax.grad(loss, argnums=tuple(range(len(arrays) + 1)))(params, *arrays)
    return out, list(grads[1:]), grads[0]


# ---------------------------------------------------------------------- Bilinear


def test_bilinear_init_names_shapes_and_bounds(x64):
    layer = jaxgrad.nn.Bilinear(5, 3, 400, dtype="float64")
    params = layer.init(jax.random.key(0))
    torch_layer = torch.nn.Bilinear(5, 3, 400)
    assert {k: v.shape for k, v in params.items()} == {
        k: tuple(v.shape) for k, v in torch_layer.state_dict().items()
    }
    bound = 1 / np.sqrt(5)  # torch: U(±1/sqrt(in1_features)) for weight and bias
    for value in params.values():
        assert np.abs(np.asarray(value)).max() <= bound
        assert np.abs(np.asarray(value)).max() > 0.95 * bound
    assert not jaxgrad.nn.Bilinear(5, 3, 4, bias=False).init(jax.random.key(0)).keys() - {"weight"}


def test_bilinear_from_torch_with_several_batch_axes(x64):
    torch.manual_seed(0)
    module = torch.nn.Bilinear(3, 2, 4).double()
    model, params = jaxgrad.nn.from_torch(module)
    assert model == jaxgrad.nn.Bilinear(3, 2, 4, dtype="float64")
    x1, x2 = torch.randn(2, 5, 3, dtype=torch.float64), torch.randn(2, 5, 2, dtype=torch.float64)
    reference = _grads_torch(module, [x1, x2])
    parity.assert_parity(reference, _grads_jax(model, params, [x1, x2]))


def test_bilinear_rejects_what_torch_rejects(x64):
    module = torch.nn.Bilinear(3, 2, 4).double()
    model, params = jaxgrad.nn.from_torch(module)
    for x1, x2 in [((5, 3), (4, 2)), ((5, 3), (5, 3))]:
        a, b = torch.zeros(x1, dtype=torch.float64), torch.zeros(x2, dtype=torch.float64)
        with pytest.raises(RuntimeError):
            module(a, b)
        with pytest.raises(ValueError, match="`"):
            model(params, jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    with pytest.raises(ValueError):
        torch.nn.Bilinear(0, 2, 4)
    with pytest.raises(ValueError, match="`in1_features`"):
        jaxgrad.nn.Bilinear(0, 2, 4)


# ------------------------------------------------------------------- Transformer


def test_transformer_init_has_torchs_names_order_and_xavier_bounds(x64):
    torch_model = torch.nn.Transformer(8, 2, 2, 1, 16, norm_first=True)
    model = jaxgrad.nn.Transformer(8, 2, 2, 1, 16, norm_first=True)
    params = model.init(jax.random.key(0))
    expected = {k: tuple(v.shape) for k, v in torch_model.state_dict().items()}
    assert list(params) == list(expected)
    assert {k: v.shape for k, v in params.items()} == expected
    assert all(v.dtype == jnp.float32 for v in params.values())
    # torch's _reset_parameters: xavier_uniform_ on every matrix; layers drawn separately
    in_proj = np.asarray(params["encoder.layers.0.self_attn.in_proj_weight"])
    assert np.abs(in_proj).max() <= np.sqrt(6 / (8 + 24))
    assert np.abs(np.asarray(params["encoder.layers.0.linear1.weight"])).max() <= np.sqrt(6 / 24)
    assert not np.array_equal(in_proj, params["encoder.layers.1.self_attn.in_proj_weight"])
    np.testing.assert_array_equal(params["decoder.norm.weight"], np.ones(8))


def test_square_subsequent_mask_is_torchs():
    for size in (0, 1, 4):
        expected = torch.nn.Transformer.generate_square_subsequent_mask(size).numpy()
        ours = jaxgrad.nn.Transformer.generate_square_subsequent_mask(size)
        assert ours.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(ours), expected)


@pytest.mark.long  # ~20 s each (CI runs them); one module_db sample in eight runs by default
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_causal_masks_and_padding_match_torch(x64, batch_first):
    torch.manual_seed(0)
    module = (
        torch.nn.Transformer(4, 2, 2, 2, 8, dropout=0.0, activation="gelu", batch_first=batch_first)
        .double()
        .eval()
    )
    model, params = jaxgrad.nn.from_torch(module)
    assert list(params) == list(module.state_dict())
    src, tgt = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 4, 4, dtype=torch.float64)
    if not batch_first:
        src, tgt = src.transpose(0, 1).contiguous(), tgt.transpose(0, 1).contiguous()
    padding = torch.tensor([[False] * 5, [False, False, False, True, True], [False] * 5])
    torch_kwargs = dict(
        tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64),
        src_key_padding_mask=padding,
        memory_key_padding_mask=padding,
        tgt_is_causal=True,
    )
    jax_kwargs = dict(
        tgt_mask=jaxgrad.nn.Transformer.generate_square_subsequent_mask(4, dtype=jnp.float64),
        src_key_padding_mask=jnp.asarray(padding.numpy()),
        memory_key_padding_mask=jnp.asarray(padding.numpy()),
        tgt_is_causal=True,
    )
    reference = _grads_torch(module, [src, tgt], **torch_kwargs)
    parity.assert_parity(reference, _grads_jax(model, params, [src, tgt], **jax_kwargs))


def test_transformer_rejects_what_torch_rejects(x64):
    module = torch.nn.Transformer(4, 2, 1, 1, 8).double()
    model, params = jaxgrad.nn.from_torch(module)
    for src, tgt in [((5, 2, 4), (3, 3, 4)), ((5, 2, 4), (3, 2, 6))]:
        a, b = torch.zeros(src, dtype=torch.float64), torch.zeros(tgt, dtype=torch.float64)
        with pytest.raises(RuntimeError):
            module(a, b)
        with pytest.raises(ValueError, match="`"):
            model(params, jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    with pytest.raises(AssertionError):
        torch.nn.Transformer(6, 4)
    with pytest.raises(ValueError, match="`nhead`"):
        jaxgrad.nn.Transformer(6, 4)


# ------------------------------------------------------------- lazy convolutions


@pytest.mark.parametrize(
    "lazy, materialised, shape",
    [
        (torch.nn.LazyConv1d(4, 3), "Conv1d", (2, 3, 9)),
        (torch.nn.LazyConv2d(4, 3, padding=1), "Conv2d", (2, 3, 6, 6)),
        (torch.nn.LazyConvTranspose1d(4, 3, stride=2), "ConvTranspose1d", (2, 3, 5)),
        (torch.nn.LazyConvTranspose2d(4, 2), "ConvTranspose2d", (1, 3, 4, 4)),
        (torch.nn.LazyConv3d(2, 2), "Conv3d", (1, 3, 3, 3, 3)),
        (torch.nn.LazyConvTranspose3d(2, 2), "ConvTranspose3d", (1, 3, 2, 2, 2)),
    ],
)
def test_lazy_convolutions_are_refused_until_torch_materialises_them(
    x64, lazy, materialised, shape
):
    name = type(lazy).__name__
    with pytest.raises(ValueError, match=f"{name} .*forward"):
        jaxgrad.nn.from_torch(lazy)
    nested = torch.nn.Sequential(
        OrderedDict(features=torch.nn.Sequential(torch.nn.Identity(), lazy))
    )
    with pytest.raises(ValueError, match=f"{name} at 'features.1'"):
        jaxgrad.nn.from_torch(nested)
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64)
    module = lazy.double()
    with torch.no_grad():
        module(x)
    assert type(module).__name__ == materialised  # torch changed the class
    model, params = jaxgrad.nn.from_torch(module)
    assert type(model).__name__ == materialised
    parity.assert_parity(_grads_torch(module, [x]), _grads_jax(model, params, [x]))
