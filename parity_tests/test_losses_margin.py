"""The margin losses, ``ctc_loss`` and ``linear_cross_entropy`` against torch at their
edges: kinks, NaN, out-of-range targets, infinite CTC losses, torch's CTC gradient
convention, both CTC target formats, and torch's argument errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jaxgrad import losses, parity

NAN = float("nan")


def value_and_grad_torch(fn, input, *args, **kwargs):
    x = torch.tensor(input, requires_grad=True)
    out = fn(x, *args, **kwargs)
    cotangent = torch.linspace(1.0, 2.0, out.numel(), dtype=out.dtype).reshape(out.shape)
    (grad,) = torch.autograd.grad(out, x, cotangent)
    return out.detach().numpy(), grad.numpy(), cotangent.numpy()


def value_and_grad_jax(fn, input, cotangent, *args, **kwargs):
    out, vjp = jax.vjp(lambda x: fn(x, *args, **kwargs), jnp.asarray(input))
    (grad,) = vjp(jnp.asarray(cotangent, out.dtype))
    return out, grad


def check(torch_fn, jax_fn, input, *args, jax_args=None, **kwargs):
    """Value and VJP of ``jax_fn`` equal torch's at the float64 tier, NaN masks included."""
    out, grad, cotangent = value_and_grad_torch(
        torch_fn,
        input,
        *[torch.as_tensor(a) if isinstance(a, np.ndarray) else a for a in args],
        **kwargs,
    )
    jax_args = args if jax_args is None else jax_args
    candidate = value_and_grad_jax(
        jax_fn,
        input,
        cotangent,
        *[jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in jax_args],
        **kwargs,
    )
    assert candidate[0].dtype == jnp.float64
    parity.assert_parity((out, grad), candidate)


# ------------------------------------------------------------------ margin losses


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_hinge_embedding_kink_nan_and_other_targets(x64, reduction):
    # x == margin is the kink (clamp_min passes the gradient there), NaN has gradient 0,
    # a target of 0 adds both terms
    x = np.array([1.0, 2.0, NAN, 0.5, -0.3, 1.5])
    y = np.array([-1.0, -1.0, -1.0, 0.0, 1.0, -1.0])
    check(
        F.hinge_embedding_loss, losses.hinge_embedding_loss, x, y, margin=1.0, reduction=reduction
    )


def test_soft_margin_overflow_is_torch_inf_and_nan(x64):
    x = np.array([-1000.0, 1.0, 3.0, 800.0])
    y = np.array([1.0, 1.0, -1.0, -1.0])
    check(F.soft_margin_loss, losses.soft_margin_loss, x, y, reduction="none")


@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_tie_nan_weight(x64, p):
    # row 0: class 3 sits exactly at the margin (z == 0: no loss, no gradient);
    # row 1: a NaN score adds nothing (torch's kernel tests z > 0)
    x = np.array([[0.0, 1.0, -2.0, 0.5], [0.3, NAN, 2.0, -1.0], [1.0, 2.0, 3.0, 4.0]])
    target = np.array([1, 2, 0])
    weight = np.array([0.5, 2.0, 1.5, 3.0])
    for reduction in ("mean", "none"):
        check(
            F.multi_margin_loss,
            losses.multi_margin_loss,
            x,
            target,
            p=p,
            margin=0.5,
            reduction=reduction,
        )
        check(
            lambda i, t, **k: F.multi_margin_loss(i, t, weight=torch.tensor(weight), **k),
            lambda i, t, **k: losses.multi_margin_loss(i, t, weight=jnp.asarray(weight), **k),
            x,
            target,
            p=p,
            margin=0.5,
            reduction=reduction,
        )


def test_multilabel_margin_terminator_duplicates_nan(x64):
    # row 0: targets 1, 1 (a duplicate counts twice, as torch), then -1 ends the list
    # (the 2 after it is ignored); row 1: a NaN non-target score adds nothing
    x = np.array([[0.1, 0.4, -0.2, 0.9], [0.0, 1.0, NAN, 0.5], [0.2, 0.2, 0.2, 0.2]])
    target = np.array([[1, 1, -1, 2], [1, -1, 0, 0], [0, 1, 2, 3]])
    for reduction in ("mean", "sum", "none"):
        check(
            F.multilabel_margin_loss, losses.multilabel_margin_loss, x, target, reduction=reduction
        )
    check(
        F.multilabel_margin_loss, losses.multilabel_margin_loss, x[0], target[0], reduction="none"
    )


def test_multilabel_soft_margin_integer_target_and_class_weight(x64, rng):
    x = rng.standard_normal((4, 5)) * 4
    target = rng.integers(0, 2, (4, 5))
    weight = rng.uniform(0.5, 2.0, 5)
    check(
        lambda i, t, **k: F.multilabel_soft_margin_loss(i, t, weight=torch.tensor(weight), **k),
        lambda i, t, **k: losses.multilabel_soft_margin_loss(i, t, weight=jnp.asarray(weight), **k),
        x,
        target,
        reduction="none",
    )


@pytest.mark.parametrize(
    "fn, target",
    [
        ("multi_margin_loss", np.array([0, 4])),
        ("multilabel_margin_loss", np.array([[0, 4, -1, 0], [-2, 0, 0, 0]])),
    ],
)
def test_out_of_range_targets_raise_and_are_nan_under_jit(x64, fn, target):
    x = np.zeros((2, 4))
    with pytest.raises(RuntimeError, match="out of range"):
        getattr(F, fn)(torch.tensor(x), torch.tensor(target))
    loss = getattr(losses, fn)
    with pytest.raises(ValueError, match="`target`"):
        loss(jnp.asarray(x), jnp.asarray(target))
    values = jax.jit(lambda a, b: loss(a, b, reduction="none"))(jnp.asarray(x), jnp.asarray(target))
    assert np.isnan(np.asarray(values)).any()
    error, _ = jax.jit(losses.checked(loss))(jnp.asarray(x), jnp.asarray(target))
    with pytest.raises(Exception, match="outside"):
        error.throw()


@pytest.mark.parametrize(
    "call",
    [
        lambda L, x: L.multi_margin_loss(x, np.array([0, 1]), p=3),
        lambda L, x: L.multi_margin_loss(x, np.array([0, 1]), weight=np.ones((2, 3))),
        lambda L, x: L.multi_margin_loss(x, np.array([0, 1]), weight=np.ones(4)),
        lambda L, x: L.multi_margin_loss(x, np.array([0, 1, 1])),
        lambda L, x: L.multi_margin_loss(x, np.array([0.0, 1.0])),
        lambda L, x: L.multilabel_margin_loss(x, np.array([0, 1, 2])),
        lambda L, x: L.multilabel_margin_loss(x[:, :0], np.zeros((2, 0), np.int64)),
        lambda L, x: L.soft_margin_loss(x, np.ones(2)),
        lambda L, x: L.hinge_embedding_loss(x, np.ones((2, 3)), reduction="avg"),
    ],
)
def test_argument_errors_torch_rejects(x64, call):
    x = np.zeros((2, 3))

    class Torch:
        def __getattr__(self, name):
            fn = getattr(F, name)
            return lambda *a, **k: fn(
                *[torch.as_tensor(v) for v in a],
                **{n: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for n, v in k.items()},
            )

    class Jax:
        def __getattr__(self, name):
            fn = getattr(losses, name)
            return lambda *a, **k: fn(
                *[jnp.asarray(v) for v in a],
                **{n: jnp.asarray(v) if isinstance(v, np.ndarray) else v for n, v in k.items()},
            )

    with pytest.raises((RuntimeError, ValueError)):
        call(Torch(), x)
    with pytest.raises((ValueError, TypeError), match="`"):
        call(Jax(), x)


# ------------------------------------------------------------------------- CTC


def _ctc_case(rng, steps=12, batch=3, classes=5):
    logits = rng.standard_normal((steps, batch, classes))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = np.array([[1, 2, 2, 3], [4, 1, 0, 0], [2, 2, 2, 2]])
    return log_probs, targets, np.array([12, 9, 7]), np.array([4, 2, 4])


def _check_ctc(log_probs, targets, input_lengths, target_lengths, **kwargs):
    def torch_fn(x, t, il, tl, **k):
        return F.ctc_loss(x, t, il, tl, **k)

    check(
        torch_fn,
        losses.ctc_loss,
        log_probs,
        torch.tensor(targets),
        torch.tensor(input_lengths),
        torch.tensor(target_lengths),
        jax_args=(jnp.asarray(targets), jnp.asarray(input_lengths), jnp.asarray(target_lengths)),
        **kwargs,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_matches_torch_including_infinite_losses(x64, rng, reduction, zero_infinity):
    # sample 2 needs 2·4 − 1 = 7 steps for "2 2 2 2" and has exactly 7; with 6 it is
    # infinite: NaN gradient on its first 6 steps (torch), or 0 with zero_infinity
    log_probs, targets, input_lengths, target_lengths = _ctc_case(rng)
    _check_ctc(
        log_probs,
        targets,
        input_lengths,
        target_lengths,
        reduction=reduction,
        zero_infinity=zero_infinity,
    )
    _check_ctc(
        log_probs,
        targets,
        np.array([12, 9, 6]),
        target_lengths,
        reduction=reduction,
        zero_infinity=zero_infinity,
    )


def test_ctc_blank_empty_target_and_blank_as_last_label(x64, rng):
    log_probs, targets, input_lengths, _ = _ctc_case(rng)
    _check_ctc(log_probs, targets, input_lengths, np.array([0, 2, 1]), reduction="none")
    # the last label equal to the blank: torch's last step overwrites the blank's term
    _check_ctc(log_probs, targets, input_lengths, np.array([3, 2, 4]), blank=2, reduction="none")


def test_ctc_concatenated_targets_and_unbatched(x64, rng):
    log_probs, targets, input_lengths, target_lengths = _ctc_case(rng)
    concatenated = np.concatenate([row[:n] for row, n in zip(targets, target_lengths)])
    padded = losses.ctc_loss(
        jnp.asarray(log_probs),
        jnp.asarray(targets),
        input_lengths,
        target_lengths,
        reduction="none",
    )
    flat = losses.ctc_loss(
        jnp.asarray(log_probs),
        jnp.asarray(concatenated),
        tuple(input_lengths.tolist()),
        tuple(target_lengths.tolist()),
        reduction="none",
    )
    np.testing.assert_array_equal(np.asarray(padded), np.asarray(flat))
    _check_ctc(log_probs, concatenated, input_lengths, target_lengths)
    _check_ctc(log_probs[:, 0], targets[0], np.array(12), np.array(4), reduction="none")
    # under jit with traced lengths the concatenated format still works
    jitted = jax.jit(lambda *a: losses.ctc_loss(*a, reduction="none"))(
        jnp.asarray(log_probs),
        jnp.asarray(concatenated),
        jnp.asarray(input_lengths),
        jnp.asarray(target_lengths),
    )
    parity.assert_parity(np.asarray(padded), jitted)


def test_ctc_gradient_is_torchs_not_autodiffs(x64, rng):
    # torch returns exp(log_probs) − posterior: autodiff's −posterior plus exp(log_probs);
    # the two agree after a log_softmax, which absorbs the extra term
    log_probs, targets, input_lengths, target_lengths = _ctc_case(rng)
    x = torch.tensor(log_probs, requires_grad=True)
    loss = F.ctc_loss(
        x,
        torch.tensor(targets),
        torch.tensor(input_lengths),
        torch.tensor(target_lengths),
        reduction="sum",
    )
    (torch_grad,) = torch.autograd.grad(loss, x)
    ours = jax.grad(
        lambda v: losses.ctc_loss(
            v, jnp.asarray(targets), input_lengths, target_lengths, reduction="sum"
        )
    )(jnp.asarray(log_probs))
    parity.assert_parity(torch_grad.numpy(), ours)
    running = np.arange(12)[:, None, None] < input_lengths[None, :, None]
    np.testing.assert_allclose(torch_grad.numpy().sum(-1), 0, atol=1e-12)  # rows sum to 0
    posterior = np.where(running, np.exp(log_probs), 0) - torch_grad.numpy()
    np.testing.assert_allclose(posterior.sum(-1), running[..., 0].astype(float), atol=1e-12)

    logits = rng.standard_normal(log_probs.shape)
    through = torch.tensor(logits, requires_grad=True)
    loss = F.ctc_loss(
        through.log_softmax(2),
        torch.tensor(targets),
        torch.tensor(input_lengths),
        torch.tensor(target_lengths),
    )
    (torch_grad,) = torch.autograd.grad(loss, through)
    ours = jax.grad(
        lambda v: losses.ctc_loss(
            jax.nn.log_softmax(v, axis=2), jnp.asarray(targets), input_lengths, target_lengths
        )
    )(jnp.asarray(logits))
    parity.assert_parity(torch_grad.numpy(), ours)


@pytest.mark.parametrize(
    "change",
    [
        {"input_lengths": np.array([13, 9, 7])},
        {"target_lengths": np.array([5, 2, 4])},
        {"target_lengths": np.array([-1, 2, 4])},
        {"input_lengths": np.array([12, 9])},
    ],
)
def test_ctc_argument_errors_torch_rejects(x64, rng, change):
    log_probs, targets, input_lengths, target_lengths = _ctc_case(rng)
    args = {"input_lengths": input_lengths, "target_lengths": target_lengths, **change}
    with pytest.raises(RuntimeError):
        F.ctc_loss(
            torch.tensor(log_probs),
            torch.tensor(targets),
            *[torch.tensor(args[k]) for k in ("input_lengths", "target_lengths")],
        )
    with pytest.raises(ValueError, match="_lengths`"):
        losses.ctc_loss(
            jnp.asarray(log_probs),
            jnp.asarray(targets),
            args["input_lengths"],
            args["target_lengths"],
        )


# ------------------------------------------------------------ linear cross entropy


@pytest.mark.parametrize(
    "kwargs",
    [
        {"out_features": (), "bias": True, "ignore_index": 1, "label_smoothing": 0.1},
        {"out_features": (2, 3), "bias": True, "reduction": "none"},
    ],
)
def test_linear_cross_entropy_module_from_torch(x64, kwargs):
    torch.manual_seed(0)
    module = torch.nn.LinearCrossEntropyLoss(4, 5, dtype=torch.float64, **kwargs)
    model, params = __import__("jaxgrad").nn.from_torch(module)
    assert set(params) == {"linear.weight", "linear.bias"}
    assert {k: v.shape for k, v in model.init(jax.random.key(0)).items()} == {
        k: tuple(v.shape) for k, v in module.state_dict().items()
    }
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 5, (6, *kwargs["out_features"]))
    out = module(x, target)
    grads = torch.autograd.grad(out.sum(), [x, module.linear.weight, module.linear.bias])

    def ours(p, v):
        return jnp.sum(model(p, v, jnp.asarray(target.numpy())))

    value = model(params, jnp.asarray(x.detach().numpy()), jnp.asarray(target.numpy()))
    param_grads, input_grad = jax.grad(ours, argnums=(0, 1))(
        params, jnp.asarray(x.detach().numpy())
    )
    parity.assert_parity(
        (out.detach().numpy(), [g.numpy() for g in grads]),
        (value, [input_grad, param_grads["linear.weight"], param_grads["linear.bias"]]),
    )


def test_linear_cross_entropy_loss_refuses_what_torch_refuses(x64):
    for kwargs in ({"weight": torch.ones(3)}, {"label_smoothing": 2.0}):
        with pytest.raises(RuntimeError):
            torch.nn.LinearCrossEntropyLoss(3, 2, **kwargs)
        jax_kwargs = {
            k: jnp.asarray(v.numpy()) if isinstance(v, torch.Tensor) else v
            for k, v in kwargs.items()
        }
        with pytest.raises(ValueError, match="`"):
            losses.LinearCrossEntropyLoss(3, 2, **jax_kwargs)
