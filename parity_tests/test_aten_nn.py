"""Neural-network ATen overloads that ``op_db``'s samples do not hold, held to torch here.

``op_db``'s samples are traced with ``make_fx``, which neither functionalises nor keeps
the ``.vec`` upsampling overloads; ``torch.export`` does both, so these ops appear
only in captured models:

- ``_native_batch_norm_legit_functional`` (training: the batch statistics normalise,
  the running ones are returned updated with momentum = weight of the new batch and
  the unbiased variance) and ``_native_batch_norm_legit_no_training`` (evaluation:
  the running statistics normalise);
- ``upsample_nearest2d.vec`` and ``upsample_bilinear2d.vec``, from an output size or
  from scale factors (which set the sampling step even when ``L · s`` is not whole);
- ``_upsample_bicubic2d_aa`` (no OpInfo samples it), shrinking and enlarging;
- ``_embedding_bag`` (``make_fx`` on detached samples records the forward-only
  kernel instead): sum with per-sample weights, mean without the padding id, max
  with ties, an empty bag;

Each case is a module captured by ``from_torch`` (export front end), run in float64
and compared with torch at the float64 tier: outputs, updated buffers, and the
gradients of ``sum(output · c)`` with respect to the input and every parameter.
"""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch import nn as tnn

from jaxgrad import nn
from jaxgrad.parity import assert_parity
from parity_tests._sampling import one_in


def _targets(program) -> set:
    return {node.target for node in program.nodes}


def _floating(inputs) -> list:
    return [i for i, a in enumerate(inputs) if np.issubdtype(a.dtype, np.floating)]


def _torch_side(module, inputs, train: bool):
    """Output, buffers after the forward, and gradients in torch."""
    module = copy.deepcopy(module).train(train)
    args = [torch.from_numpy(a) for a in inputs]
    for i in _floating(inputs):
        args[i].requires_grad_(True)
    out = module(*args)
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(
        out,
        [args[i] for i in _floating(inputs)] + list(params.values()),
        torch.from_numpy(cotangent),
    )
    return cotangent, {
        "output": out.detach().numpy(),
        "buffers": {k: v.numpy() for k, v in module.named_buffers()},
        "grads": {
            "inputs": [g.numpy() for g in grads[: len(_floating(inputs))]],
            "params": {k: g.numpy() for k, g in zip(params, grads[len(_floating(inputs)) :])},
        },
    }


def _jax_side(model, params, buffers, inputs, cotangent, train: bool):
    floating = _floating(inputs)

    def objective(params, differentiable):
        args = [jnp.asarray(a) for a in inputs]
        for i, value in zip(floating, differentiable):
            args[i] = value
        out, new_buffers = model.apply(params, *args, buffers=buffers, train=train)
        return jnp.sum(out * cotangent), (out, new_buffers)

    (param_grads, input_grads), (out, new_buffers) = jax.grad(
        objective, argnums=(0, 1), has_aux=True
    )(params, [jnp.asarray(inputs[i]) for i in floating])
    return {
        "output": out,
        "buffers": dict(new_buffers),
        "grads": {"inputs": input_grads, "params": param_grads},
    }


def _check_both_modes(module, inputs, overloads):
    """Capture ``module`` on ``inputs`` (numpy); each mode's program holds its overload
    and matches torch (``overloads``: ``{train: "aten.X.overload"}``)."""
    example = tuple(torch.from_numpy(a) for a in inputs)
    model, params, buffers = nn.from_torch(
        module, example=example, with_buffers=True, capture="export"
    )
    for train, overload in overloads.items():
        program = model.train_program if train else model.eval_program
        assert overload in _targets(program), sorted(_targets(program))
        cotangent, reference = _torch_side(module, inputs, train)
        assert_parity(
            reference,
            _jax_side(model, params, buffers, inputs, cotangent, train),
            name=f"{overload} ({'train' if train else 'eval'})",
        )


def test_batch_norm_overloads_of_both_modes_match_torch(x64, rng):
    norm = tnn.BatchNorm2d(3, eps=1e-3, momentum=0.3).double()
    with torch.no_grad():
        for tensor in (norm.weight, norm.bias, norm.running_mean):
            tensor.copy_(torch.from_numpy(rng.standard_normal(3)))
        norm.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, 3)))
    x = rng.standard_normal((4, 3, 2, 5)) * 3 + 1
    _check_both_modes(
        norm,
        (x,),
        {
            True: "aten._native_batch_norm_legit_functional.default",
            False: "aten._native_batch_norm_legit_no_training.default",
        },
    )


class Resize(tnn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return TF.interpolate(x, **self.options)


# one in two in the default run (both modes, scale_factor and size), all five in the
# exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "options",
    one_in(
        2,
        [
            dict(scale_factor=2, mode="nearest"),
            dict(scale_factor=(1.7, 0.7), mode="nearest"),
            dict(size=(7, 3), mode="nearest"),
            dict(scale_factor=(1.7, 0.7), mode="bilinear"),
            dict(size=(7, 3), mode="bilinear", align_corners=True),
        ],
    ),
    ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()),
)
def test_upsample_vec_overloads_match_torch(x64, rng, options):
    x = rng.standard_normal((2, 3, 4, 5))
    overload = f"aten.upsample_{options['mode']}2d.vec"
    _check_both_modes(Resize(**options), (x,), {True: overload})


# downsampling (the stretched kernel) in the default run, upsampling in the exhaustive run
@pytest.mark.parametrize(
    "size", one_in(2, [pytest.param((3, 2), id="down"), pytest.param((9, 7), id="up")])
)
def test_antialiased_bicubic_matches_torch(x64, rng, size):
    """No OpInfo samples ``_upsample_bicubic2d_aa`` (Keys' cubic, A = -0.5, stretched
    by the scale when downsampling)."""
    x = rng.standard_normal((2, 3, 6, 5))
    _check_both_modes(
        Resize(size=size, mode="bicubic", antialias=True),
        (x,),
        {True: "aten._upsample_bicubic2d_aa.default"},
    )


# one in two in the default run (sum, max), all three modes in the exhaustive run
@pytest.mark.parametrize(
    "options",
    one_in(
        2,
        [
            dict(mode="sum", per_sample_weights=True),
            dict(mode="max", include_last_offset=True),
            dict(mode="mean", padding_idx=2),
        ],
    ),
    ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()),
)
def test_embedding_bag_matches_torch(x64, rng, options):
    options = dict(options)
    weighted = options.pop("per_sample_weights", False)
    bags = tnn.EmbeddingBag(7, 3, **options).double()
    with torch.no_grad():
        weight = rng.standard_normal((7, 3))
        weight[6] = weight[0]  # ties in max: torch gives the first of them the gradient
        bags.weight.copy_(torch.from_numpy(weight))
    # repeated ids, a padding id (2), an empty bag (offsets 4, 4), rows 0 and 6 tied
    indices = np.array([1, 2, 5, 2, 5, 5, 0, 6, 2])
    offsets = np.array([0, 4, 4, 6] + ([9] if options.get("include_last_offset") else []))
    inputs = (indices, offsets) + ((rng.standard_normal(9),) if weighted else ())
    _check_both_modes(bags, inputs, {True: "aten._embedding_bag.default"})


def test_in_place_batch_norm_in_training_is_refused_not_dropped():
    """``native_batch_norm`` in training writes the running statistics in place; a
    functional program would lose the update, so the entry refuses, saying what to do."""
    from jaxgrad.nn import aten

    x, stats = jnp.ones((2, 3, 4)), jnp.zeros(3)
    op = aten.lookup("aten.native_batch_norm.default").fn
    with pytest.raises(
        ValueError,
        match=r"writes its inputs running_mean and running_var in place.*capture='export'",
    ):
        op(x, None, None, stats, stats + 1, True, 0.1, 1e-5)
    output, _, _ = op(x, None, None, stats, stats + 1, False, 0.1, 1e-5)  # evaluation: fine
    assert output.shape == x.shape
