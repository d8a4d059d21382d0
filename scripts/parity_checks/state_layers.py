"""Layers with state or randomness: BatchNorm, InstanceNorm, GroupNorm, Dropout.

Each row runs the torch layer and its ``from_torch`` twin for two training steps and
one evaluation step on the same inputs and compares, at the tier of the dtype: every
step's output, the gradients of ``sum(c · output)`` with respect to the input and to
every parameter, and the buffers (running statistics, ``num_batches_tracked``) after
every step. Dropout masks cannot be reproduced across frameworks, so torch's own mask
is read back (the same seed replayed on a tensor of ones) and injected with
``mask=``. Gradcheck rows check the twins' training-mode gradients against central
differences in float64.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
from jaxgrad.gradcheck import gradcheck
from jaxgrad.manual import scaled_backward
from parity_checks.harness import TORCH_DTYPES, Check, jax_precision

nn = torch.nn

CASES = {
    "BatchNorm1d (N,C)": (lambda: nn.BatchNorm1d(3), (6, 3)),
    "BatchNorm1d (N,C,L) momentum=None": (lambda: nn.BatchNorm1d(3, momentum=None), (4, 3, 5)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), (4, 3, 3, 3)),
    "BatchNorm2d affine=False momentum=0.3": (
        lambda: nn.BatchNorm2d(2, momentum=0.3, affine=False, eps=1e-3),
        (3, 2, 2, 3),
    ),
    "BatchNorm2d track_running_stats=False": (
        lambda: nn.BatchNorm2d(2, track_running_stats=False),
        (3, 2, 2, 2),
    ),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(2), (3, 2, 2, 2, 3)),
    "InstanceNorm1d affine track": (
        lambda: nn.InstanceNorm1d(2, affine=True, track_running_stats=True),
        (3, 2, 5),
    ),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3), (2, 3, 3, 4)),
    "InstanceNorm2d affine track unbatched": (
        lambda: nn.InstanceNorm2d(2, affine=True, track_running_stats=True),
        (2, 3, 3),
    ),
    "InstanceNorm3d affine": (lambda: nn.InstanceNorm3d(2, affine=True), (2, 2, 2, 3, 2)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), (3, 4, 5)),
    "Dropout injected masks": (lambda: nn.Dropout(0.3), (4, 5)),
    "Dropout1d injected masks": (lambda: nn.Dropout1d(0.5), (3, 4, 5)),
    "Dropout2d injected masks": (lambda: nn.Dropout2d(0.5), (2, 4, 3, 3)),
}
FLOAT32_CASES = (
    "BatchNorm1d (N,C)",
    "BatchNorm2d",
    "InstanceNorm1d affine track",
    "GroupNorm",
    "Dropout2d injected masks",
)
STEPS = ("train", "train", "eval")
# gradcheck inputs: small enough that each check's elements fit one vmapped chunk
GRADCHECK_SHAPES = {
    "BatchNorm1d (N,C,L) momentum=None": (3, 3, 3),
    "BatchNorm2d": (2, 3, 2, 2),
    "BatchNorm3d": (2, 2, 2, 1, 2),
    "InstanceNorm1d affine track": (2, 2, 4),
    "InstanceNorm2d": (1, 3, 2, 3),
    "InstanceNorm3d affine": (1, 2, 2, 2, 2),
    "GroupNorm": (2, 4, 3),
    "Dropout injected masks": (3, 4),
    "Dropout1d injected masks": (2, 3, 2),
    "Dropout2d injected masks": (2, 2, 2, 2),
}


def make_torch_layer(name: str, dtype: str, seed: int = 0) -> tuple[nn.Module, tuple]:
    """The torch layer of ``CASES[name]`` with random affine params (so gradients with
    respect to them are not trivially those of ones and zeros), and its input shape."""
    torch.manual_seed(seed)
    factory, shape = CASES[name]
    module = factory().to(TORCH_DTYPES[dtype])
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn_like(param))
    return module, shape


def _is_dropout(module) -> bool:
    return type(module).__name__.startswith("Dropout")


def torch_steps(module: nn.Module, xs, cotangents, seed: int = 0) -> dict:
    """Run ``STEPS`` in torch; every step's output, gradients, buffers and (dropout)
    the mask torch drew, read back by replaying the seed on ones."""
    record = {"outputs": [], "input_grads": [], "grads": [], "buffers": [], "masks": []}
    for step, (mode, x, cotangent) in enumerate(zip(STEPS, xs, cotangents)):
        module.train(mode == "train")
        module.zero_grad(set_to_none=True)
        x = torch.from_numpy(x).requires_grad_(True)
        torch.manual_seed(1000 + step)
        out = module(x)
        (out * torch.from_numpy(cotangent)).sum().backward()
        if _is_dropout(module) and mode == "train":
            torch.manual_seed(1000 + step)
            with torch.no_grad():
                record["masks"].append(module(torch.ones_like(x)).numpy() != 0)
        else:
            record["masks"].append(None)
        record["outputs"].append(out.detach().numpy())
        record["input_grads"].append(x.grad.numpy())
        record["grads"].append({n: p.grad.numpy().copy() for n, p in module.named_parameters()})
        record["buffers"].append({n: b.numpy().copy() for n, b in module.named_buffers()})
    return record


def jax_steps(model, params, buffers, xs, cotangents, masks, *, jit: bool = True) -> dict:
    """The same steps with the twin: ``jax.grad`` of ``sum(c · output)``, buffers
    threaded from step to step."""

    def objective(params, x, buffers, cotangent, mask, train):
        options = {} if mask is None else {"mask": mask}
        out, new_buffers = model.apply(params, x, buffers=buffers, train=train, **options)
        return jnp.sum(out * cotangent), (out, new_buffers)

    grad_fn = jax.grad(objective, argnums=(0, 1), has_aux=True)
    if jit:
        grad_fn = jax.jit(grad_fn, static_argnums=(5,))
    record = {"outputs": [], "input_grads": [], "grads": [], "buffers": []}
    for mode, x, cotangent, mask in zip(STEPS, xs, cotangents, masks):
        (grads, input_grad), (out, buffers) = grad_fn(
            params, jnp.asarray(x), buffers, jnp.asarray(cotangent), mask, mode == "train"
        )
        record["outputs"].append(out)
        record["input_grads"].append(input_grad)
        record["grads"].append(grads)
        # torch's counter is int64; without x64 JAX's is int32 (same value)
        record["buffers"].append(
            {
                k: np.asarray(v).astype(np.int64)
                if np.issubdtype(np.asarray(v).dtype, np.integer)
                else v
                for k, v in buffers.items()
            }
        )
    return record


def state_layer_parity(name: str, dtype: str, *, jit: bool = True, seed: int = 0):
    """The parity report of ``CASES[name]`` over ``STEPS``."""
    module, shape = make_torch_layer(name, dtype, seed)
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(shape) * 2 + 0.5).astype(dtype) for _ in STEPS]
    cotangents = [rng.standard_normal(shape).astype(dtype) for _ in STEPS]
    with jax_precision(dtype):
        model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        reference = torch_steps(module, xs, cotangents)
        masks = reference.pop("masks")
        candidate = jax_steps(model, params, buffers, xs, cotangents, masks, jit=jit)
        return jaxgrad.parity.compare(reference, candidate, name=f"{name} train, train, eval")


def state_layer_gradcheck(names: tuple, wrong: str | None = None):
    """Central differences of the twins' training-mode ``sum(c · output)`` with respect
    to params and inputs (dropout with a fixed mask), float64; several layers in one
    check (one compilation). ``wrong``: the layer (a ``names`` entry) whose backward is
    scaled by 1.001, a planted bug the check must catch."""
    if wrong is not None and wrong not in names:
        raise ValueError(f"`wrong` (={wrong!r}) must be one of `names` (={names!r}).")
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        layers, params, inputs = {}, {}, {}
        for name in names:
            module, _ = make_torch_layer(name, "float64")
            shape = GRADCHECK_SHAPES[name]
            model, params[name], buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
            options = {"mask": rng.uniform(size=shape) > 0.3} if _is_dropout(module) else {}
            cotangent = rng.standard_normal(shape)
            layers[name] = (model, buffers, options, cotangent)
            inputs[name] = rng.standard_normal(shape)

        def term(name, params, x):
            model, buffers, options, cotangent = layers[name]
            out, _ = model.apply(params, x, buffers=buffers, train=True, **options)
            return jnp.sum(cotangent * out)

        def objective(params, inputs):
            total = 0.0
            for name in layers:
                fn = functools.partial(term, name)
                if name == wrong:
                    fn = scaled_backward(fn, 1.001)
                total = total + fn(params[name], inputs[name])
            return total

        # jitted here too: gradcheck's first, un-jitted call would compile op by op
        return gradcheck(
            jax.jit(objective), params, inputs, name=f"gradcheck {', '.join(names)}"
        ).parity


GRADCHECKS = {
    "BatchNorm1d, BatchNorm2d, BatchNorm3d": (
        "BatchNorm1d (N,C,L) momentum=None",
        "BatchNorm2d",
        "BatchNorm3d",
    ),
    "InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, GroupNorm": (
        "InstanceNorm1d affine track",
        "InstanceNorm2d",
        "InstanceNorm3d affine",
        "GroupNorm",
    ),
    "Dropout, Dropout1d, Dropout2d": (
        "Dropout injected masks",
        "Dropout1d injected masks",
        "Dropout2d injected masks",
    ),
}

CHECKS = [
    *[
        Check(
            name=f"nn.{name}",
            dtype="float64",
            area="nn",
            run=functools.partial(state_layer_parity, name, "float64"),
        )
        for name in CASES
    ],
    *[
        Check(
            name=f"nn.{name}",
            dtype="float32",
            area="nn",
            run=functools.partial(state_layer_parity, name, "float32"),
        )
        for name in FLOAT32_CASES
    ],
    *[
        Check(
            name=f"gradcheck nn.{label}",
            dtype="float64",
            area="gradcheck",
            run=functools.partial(state_layer_gradcheck, names),
        )
        for label, names in GRADCHECKS.items()
    ],
]
