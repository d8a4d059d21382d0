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
- ``_embedding_bag`` (``make_fx`` on detached samples records the forward-only
  kernel instead): sum with per-sample weights, mean without the padding id, max
  with ties, an empty bag;
- ``max_pool2d_with_indices`` and ``max_pool3d_with_indices``, whose OpInfos
  (``max_pool2d``: 1,440 samples, ``max_pool3d``: 576) cost minutes: every distinct
  ATen configuration of their samples on one batched and one unbatched input, through
  the ``op_db`` harness, and all their error inputs.

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
from parity_checks import _conformance_aten as conformance


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
    grads = torch.autograd.grad(out, [args[i] for i in _floating(inputs)] + list(params.values()),
                                torch.from_numpy(cotangent))
    return cotangent, {
        "output": out.detach().numpy(),
        "buffers": {k: v.numpy() for k, v in module.named_buffers()},
        "grads": {"inputs": [g.numpy() for g in grads[:len(_floating(inputs))]],
                  "params": {k: g.numpy() for k, g in zip(params, grads[len(_floating(inputs)):])}},
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
        objective, argnums=(0, 1), has_aux=True)(params, [jnp.asarray(inputs[i]) for i in floating])
    return {"output": out, "buffers": dict(new_buffers),
            "grads": {"inputs": input_grads, "params": param_grads}}


def _check_both_modes(module, inputs, overloads):
    """Capture ``module`` on ``inputs`` (numpy); each mode's program holds its overload
    and matches torch (``overloads``: ``{train: "aten.X.overload"}``)."""
    example = tuple(torch.from_numpy(a) for a in inputs)
    model, params, buffers = nn.from_torch(module, example=example, with_buffers=True,
                                           capture="export")
    for train, overload in overloads.items():
        program = model.train_program if train else model.eval_program
        assert overload in _targets(program), sorted(_targets(program))
        cotangent, reference = _torch_side(module, inputs, train)
        assert_parity(reference, _jax_side(model, params, buffers, inputs, cotangent, train),
                      name=f"{overload} ({'train' if train else 'eval'})")


def test_batch_norm_overloads_of_both_modes_match_torch(x64, rng):
    norm = tnn.BatchNorm2d(3, eps=1e-3, momentum=0.3).double()
    with torch.no_grad():
        for tensor in (norm.weight, norm.bias, norm.running_mean):
            tensor.copy_(torch.from_numpy(rng.standard_normal(3)))
        norm.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, 3)))
    x = rng.standard_normal((4, 3, 2, 5)) * 3 + 1
    _check_both_modes(norm, (x,), {True: "aten._native_batch_norm_legit_functional.default",
                                False: "aten._native_batch_norm_legit_no_training.default"})


class Resize(tnn.Module):
    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x):
        return TF.interpolate(x, **self.options)


@pytest.mark.parametrize("options", [
    dict(scale_factor=2, mode="nearest"),
    dict(scale_factor=(1.7, 0.7), mode="nearest"),
    dict(size=(7, 3), mode="nearest"),
    dict(scale_factor=(1.7, 0.7), mode="bilinear"),
    dict(size=(7, 3), mode="bilinear", align_corners=True),
], ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()))
def test_upsample_vec_overloads_match_torch(x64, rng, options):
    x = rng.standard_normal((2, 3, 4, 5))
    overload = f"aten.upsample_{options['mode']}2d.vec"
    _check_both_modes(Resize(**options), (x,), {True: overload})


@pytest.mark.parametrize("options", [
    dict(mode="sum", per_sample_weights=True),
    dict(mode="mean", padding_idx=2),
    dict(mode="max", include_last_offset=True),
], ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()))
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


# max_poolNd's samples: keyword sets × inputs, where `return_indices` only picks outputs
# and `padding=1` is `(1, 1)`; every ATen configuration once per kind of input
_MAX_POOL_SUBSETS = {  # OpInfo: (overload, input shapes, samples kept)
    "nn.functional.max_pool2d": ("aten.max_pool2d_with_indices.default",
                                 {(2, 2, 3, 6), (2, 6, 6)}, 144),
    "nn.functional.max_pool3d": ("aten.max_pool3d_with_indices.default",
                                 {(2, 2, 3, 6, 5), (2, 6, 6, 5)}, 96),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_MAX_POOL_SUBSETS))
def test_max_pool_matches_every_configuration_of_op_db(x64, name):
    """48 configurations (kernel, stride, padding, dilation, ceil_mode), each on a
    batched input of odd height (contiguous and, in 2-d, channels-last) and on an
    unbatched one, through the ``op_db`` harness, with every error input: 144 samples
    of 1,440 (2-d) and 96 of 576 (3-d), which all pass, in a fraction of the time
    (every sample compiles its own programs)."""
    from torch.testing._internal.common_methods_invocations import op_db

    overload, inputs, kept = _MAX_POOL_SUBSETS[name]
    (info,) = [info for info in op_db if info.name == name]
    outcomes, reached = [], set()
    with conformance._no_test_function_lookup():
        samples = [s for s in info.sample_inputs("cpu", torch.float64, requires_grad=True)
                   if s.kwargs["return_indices"] and not isinstance(s.kwargs["padding"], tuple)
                   and tuple(s.input.shape) in inputs]
        assert len(samples) == kept
        for i, sample in enumerate(samples):
            outcome, ran = conformance._outcome(name, i, lambda sample=sample:
                                                conformance.compare_sample(info, sample))
            outcomes.append(outcome)
            reached |= ran
        outcomes += [conformance.error_outcome(info, i, error)
                     for i, error in enumerate(info.error_inputs("cpu"))]
    bad = [o for o in outcomes if o.status not in ("pass", "rejected")]
    assert not bad, "\n".join(f"{o.name}[{o.index}] {o.status}: {o.detail[:400]}" for o in bad)
    assert overload in reached
