"""Five silent answers, each now torch's error or torch's value: jaxgrad returned a number
where torch raises (or a different gradient), measured by a user and checked here
against torch run in the same test.

1-2. ``binary_cross_entropy`` with a target outside [0, 1] or NaN;
3.   the gradient of ``l1_loss`` at a NaN target (and at a tie);
4.   ``Embedding`` on a negative id under ``jit`` (was the last row);
5.   ``RNN`` / ``GRU`` / ``LSTM`` (and their cells) on an input of another dtype than
     their weights.

Under ``jit`` a value check cannot raise; there each case keeps the documented promise
(NaN, and a ``checkify`` error through ``losses.checked`` / ``check_ids=True``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax.experimental import checkify

from jaxgrad import losses, nn
from jaxgrad.parity import assert_parity

torch.set_num_threads(1)

NAN = float("nan")


# ------------------------------------------------- 1-2. BCE target outside [0, 1]


@pytest.mark.parametrize("bad", [1.5, -0.25, NAN, float("inf")])
def test_bce_target_outside_unit_interval_raises_like_torch(x64, bad):
    probs = np.array([0.3, 0.6, 0.9])
    target = np.array([bad, 0.0, 1.0])
    with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
        F.binary_cross_entropy(torch.tensor(probs), torch.tensor(target))
    message = r"`target` must be a probability in \[0, 1\]; found one outside it or NaN"
    for reduction in ("mean", "sum", "none"):
        with pytest.raises(ValueError, match=message):
            losses.binary_cross_entropy(
                jnp.asarray(probs), jnp.asarray(target), reduction=reduction
            )
    # a concrete target under grad (no jit) is still checked, and so is the module
    with pytest.raises(ValueError, match=message):
        jax.grad(lambda p: losses.binary_cross_entropy(p, jnp.asarray(target)))(jnp.asarray(probs))
    with pytest.raises(ValueError, match=message):
        losses.BCELoss()(jnp.asarray(probs), jnp.asarray(target))


@pytest.mark.parametrize("bad", [1.5, NAN])
def test_bce_target_outside_unit_interval_under_jit_is_nan_and_checked_raises(x64, bad):
    probs = jnp.array([0.3, 0.6, 0.9])
    target = jnp.array([bad, 0.0, 1.0])
    assert np.isnan(float(jax.jit(losses.binary_cross_entropy)(probs, target)))
    per_element = jax.jit(lambda p, t: losses.binary_cross_entropy(p, t, reduction="none"))(
        probs, target
    )
    expected = F.binary_cross_entropy(
        torch.tensor([0.6, 0.9], dtype=torch.float64),
        torch.tensor([0.0, 1.0], dtype=torch.float64),
        reduction="none",
    )
    assert np.isnan(float(per_element[0]))
    assert_parity(expected, per_element[1:])
    error, _ = jax.jit(losses.checked(losses.binary_cross_entropy))(probs, target)
    with pytest.raises(Exception, match=r"`target` must be a probability in \[0, 1\]"):
        error.throw()


def test_bce_targets_inside_unit_interval_still_match_torch(x64, rng):
    # the ends 0 and 1 are valid targets; the gradient w.r.t. both arguments is torch's
    probs = rng.uniform(0.05, 0.95, 6)
    target = np.array([0.0, 1.0, 0.25, 0.5, 1.0, 0.0])
    p, t = (torch.tensor(a, requires_grad=True) for a in (probs, target))
    value = F.binary_cross_entropy(p, t)
    value.backward()
    expected = (value.detach(), p.grad, t.grad)
    for fn in (
        jax.value_and_grad(losses.binary_cross_entropy, argnums=(0, 1)),
        jax.jit(jax.value_and_grad(losses.binary_cross_entropy, argnums=(0, 1))),
    ):
        got_value, (grad_p, grad_t) = fn(jnp.asarray(probs), jnp.asarray(target))
        assert got_value.dtype == jnp.float64
        assert_parity(expected, (got_value, grad_p, grad_t))


# ------------------------------------------------- 3. l1_loss gradient at NaN


def _torch_l1_grads(input, target, **kwargs):
    x, t = (torch.tensor(a, requires_grad=True) for a in (input, target))
    value = F.l1_loss(x, t, **kwargs)
    value.sum().backward()
    return value.detach(), x.grad, t.grad


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_loss_gradient_at_nan_target_and_ties_is_torchs(x64, reduction, weighted):
    # NaN target, NaN input, a tie, and ordinary elements: torch's gradient is
    # sign(input − target), 0 at NaN and at a tie, where JAX's abs gives −1 and +1
    input = np.array([0.3, NAN, 0.2, -0.6, 1.5])
    target = np.array([NAN, 0.0, 0.2, 0.0, -0.5])
    kwargs = {"reduction": reduction}
    jax_kwargs = dict(kwargs)
    if weighted:
        weight = np.array([1.0, 2.0, 0.5, 3.0, 1.5])
        kwargs["weight"] = torch.tensor(weight)
        jax_kwargs["weight"] = jnp.asarray(weight)
    expected = _torch_l1_grads(input, target, **kwargs)
    np.testing.assert_array_equal(expected[1].numpy()[[0, 1, 2]], 0.0)  # torch's convention

    def total(x, t):
        return jnp.sum(losses.l1_loss(x, t, **jax_kwargs))

    for value_and_grad in (
        jax.value_and_grad(total, argnums=(0, 1)),
        jax.jit(jax.value_and_grad(total, argnums=(0, 1))),
    ):
        value, (grad_input, grad_target) = value_and_grad(jnp.asarray(input), jnp.asarray(target))
        assert grad_input.dtype == jnp.float64
        assert_parity(expected[1:], (grad_input, grad_target))
    assert_parity(
        expected[0], losses.l1_loss(jnp.asarray(input), jnp.asarray(target), **jax_kwargs)
    )


def test_smooth_l1_loss_with_beta_zero_has_l1s_gradient_at_nan(x64):
    # torch's smooth_l1_loss calls l1_loss when beta == 0
    input = np.array([0.3, 0.2, -0.6])
    target = np.array([NAN, 0.2, 0.0])
    x = torch.tensor(input, requires_grad=True)
    F.smooth_l1_loss(x, torch.tensor(target), reduction="sum", beta=0.0).backward()
    got = jax.grad(
        lambda a: losses.smooth_l1_loss(a, jnp.asarray(target), reduction="sum", beta=0.0)
    )(jnp.asarray(input))
    assert_parity(x.grad, got)


# ------------------------------------------------- 4. Embedding, negative id under jit


@pytest.mark.parametrize("bad", [-1, -5, 5])
def test_embedding_out_of_range_id_under_jit_is_a_nan_row_never_a_valid_row(x64, bad):
    torch.manual_seed(0)
    module = torch.nn.Embedding(5, 2).double()
    with pytest.raises(IndexError, match="index out of range"):
        module(torch.tensor([0, bad]))
    layer, params = nn.from_torch(module)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\)"):
        layer.apply(params, jnp.array([0, bad]))
    out = jax.jit(layer.apply)(params, jnp.array([0, bad]))
    assert_parity(module(torch.tensor([0])).detach(), out[:1])
    assert np.all(np.isnan(np.asarray(out[1]))), out  # main returned row bad % 5
    checked = checkify.checkify(jax.jit(lambda p, i: layer.apply(p, i, check_ids=True)))
    error, _ = checked(params, jnp.array([0, bad]))
    with pytest.raises(checkify.JaxRuntimeError, match=r"token ids must lie in \[0, 5\)"):
        error.throw()


def test_embedding_negative_id_under_jit_leaves_valid_rows_gradient_and_renorm_alone(x64):
    # scale_grad_by_freq counted id −1 as a 0 (jnp.bincount clips), halving row 0's
    # gradient; max_norm renormalised row 4, which only id −1 "referenced"
    torch.manual_seed(0)
    module = torch.nn.Embedding(5, 2, scale_grad_by_freq=True, max_norm=0.5).double()
    layer, params = nn.from_torch(module)
    module(torch.tensor([0]))[0].sum().backward()  # the valid part of [0, -1]
    ids = jnp.array([0, -1])
    grads = jax.jit(jax.grad(lambda p, i: jnp.sum(layer.apply(p, i)[0])))(params, ids)
    assert_parity(module.weight.grad, grads["weight"])
    renormed = jax.jit(layer.renorm)(params, ids)
    assert_parity(module.weight.detach(), renormed["weight"])


# ------------------------------------------------- 5. recurrent layers, input dtype

RECURRENT = ["RNN", "GRU", "LSTM"]


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_input_of_another_dtype_raises_like_torch(x64, name):
    torch.manual_seed(0)
    module = getattr(torch.nn, name)(3, 4)
    x = np.random.default_rng(0).standard_normal((2, 1, 3))
    with pytest.raises(
        ValueError,
        match=r"input dtype \(torch.float64\) does not match "
        r"weight dtype \(torch.float32\)",
    ):
        module(torch.tensor(x))
    layer, params = nn.from_torch(module)
    message = rf"{name}: `input` dtype \(float64\) must match the weight dtype \(float32\)"
    with pytest.raises(ValueError, match=message):
        layer.apply(params, jnp.asarray(x))
    with pytest.raises(ValueError, match=message):
        layer.apply(params, jnp.asarray(x[:, 0]))  # unbatched
    # and the reverse: float64 weights, float32 input
    with pytest.raises(ValueError, match=r"input dtype \(torch.float32\) does not match"):
        module.double()(torch.tensor(x, dtype=torch.float32))
    layer64, params64 = nn.from_torch(module)
    with pytest.raises(
        ValueError,
        match=r"`input` dtype \(float32\) must match the weight "
        r"dtype \(float64\)",
    ):
        layer64.apply(params64, jnp.asarray(x, jnp.float32))


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_initial_state_of_another_dtype_raises_like_torch(x64, name):
    torch.manual_seed(0)
    module = getattr(torch.nn, name)(3, 4)
    x = torch.randn(2, 1, 3)
    h0 = torch.zeros(1, 1, 4, dtype=torch.float64)
    state = (h0, h0) if name == "LSTM" else h0
    with pytest.raises(RuntimeError):
        module(x, state)
    layer, params = nn.from_torch(module)
    jax_state = (jnp.asarray(h0.numpy()),) * 2 if name == "LSTM" else jnp.asarray(h0.numpy())
    label = "h_0" if name == "LSTM" else "hx"
    with pytest.raises(
        ValueError,
        match=rf"`{label}` dtype \(float64\) must match the weight "
        r"dtype \(float32\)",
    ):
        layer.apply(params, jnp.asarray(x.numpy()), jax_state)


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_float64_numpy_input_without_x64_is_float32_and_runs(name):
    # with jax_enable_x64 off JAX itself reads float64 as float32: no genuine mismatch
    assert not jax.config.jax_enable_x64
    torch.manual_seed(0)
    module = getattr(torch.nn, name)(3, 4)
    x = np.random.default_rng(0).standard_normal((2, 1, 3))
    expected = module(torch.tensor(x, dtype=torch.float32))
    layer, params = nn.from_torch(module)
    got = layer.apply(params, x)
    assert got[0].dtype == jnp.float32
    assert_parity(jax.tree.map(lambda t: t.detach(), expected), got)


@pytest.mark.parametrize("name", ["RNNCell", "GRUCell", "LSTMCell"])
def test_recurrent_cell_input_of_another_dtype_raises_like_torch(x64, name):
    torch.manual_seed(0)
    module = getattr(torch.nn, name)(3, 4)
    x = np.random.default_rng(0).standard_normal((2, 3))
    with pytest.raises(RuntimeError, match="mat1 and mat2 must have the same dtype"):
        module(torch.tensor(x))
    layer, params = nn.from_torch(module)
    with pytest.raises(
        TypeError,
        match=rf"{name}: `input` dtype float64 does not match the "
        r"layer's float32 parameters",
    ):
        layer.apply(params, jnp.asarray(x))
    h0 = jnp.zeros((2, 4), jnp.float64)
    with pytest.raises(TypeError, match="dtype float64 does not match"):
        layer.apply(params, jnp.asarray(x, jnp.float32), (h0, h0) if name == "LSTMCell" else h0)
