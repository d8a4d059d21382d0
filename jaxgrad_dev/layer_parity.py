"""One layer in both frameworks: outputs, input and parameter gradients, new buffers.

``layer_parity(module, *inputs)`` is the comparison behind the layer rows of the parity
report and the ``module_db`` conformance tests: torch's forward and
``torch.autograd.grad`` of the floating outputs against a fixed standard-normal
cotangent (so the whole vector-Jacobian product is checked, not only a sum), with
respect to every floating input that requires grad and every parameter, and the
buffers after the forward; then the same with ``jaxgrad.nn.from_torch``'s twin,
``apply`` and ``jax.vjp``; compared leaf by leaf at the tier of the dtype.
Inputs and outputs may be nested tuples, lists and dicts (torch's pytrees).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import torch
import torch.utils._pytree as torch_pytree

import jaxgrad
from jaxgrad.parity import ParityReport
from jaxgrad_dev.precision import jax_precision

# XLA options that cut CPU compile time ~40 % for the hundreds of one-off programs of
# the conformance tests; no fast-math, so IEEE semantics are unchanged. The report's
# rows keep XLA's defaults, as a user's program runs.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def layer_parity(
    module, *args, training: bool = False, name: str = "", fast_compile: bool = False, **kwargs
) -> ParityReport:
    """Compare ``module(*args, **kwargs)`` with its ``from_torch`` twin.

    Args:
      module: a torch module of a supported class, in the dtype to check; converted
        before torch runs it (a train-mode forward updates buffers).
      *args, **kwargs: the forward's inputs, torch tensors (those with
        ``requires_grad`` get gradients).
      training: ``module.train()`` and ``apply(..., train=True)`` when True.
      fast_compile: compile the JAX side with ``FAST_COMPILE`` (tests).
    """
    module.train(training)
    dtype = str(next(iter(torch_pytree.tree_leaves((args, kwargs)))).dtype).replace("torch.", "")
    with jax_precision(dtype):
        model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        reference, torch_spec, cotangents = torch_side(module, args, kwargs)
        candidate, spec = jax_side(
            model, params, buffers, args, kwargs, training, cotangents, fast_compile=fast_compile
        )
        if spec != torch_spec:
            raise ValueError(f"{name}: output structure {spec} differs from torch's {torch_spec}")
        return jaxgrad.parity.compare(reference, candidate, name=name)


def _needs_grad(leaf) -> bool:
    return isinstance(leaf, torch.Tensor) and leaf.requires_grad and leaf.is_floating_point()


def torch_side(module, args, kwargs, cotangents: list | None = None) -> tuple[dict, Any, list]:
    """Outputs, gradients of ``<cotangents, outputs>`` with respect to the inputs that
    require grad and every parameter, and the buffers after the forward; with the
    output structure and the cotangents (standard normal, fixed seed; ``None`` for an
    output without gradient, such as max-pooling indices), or the ``cotangents`` given
    (one per output leaf: another dtype's run differentiating the same product)."""
    output = module(*args, **kwargs)
    outputs, spec = torch_pytree.tree_flatten(output)
    if cotangents is None:
        generator = torch.Generator().manual_seed(1)
        cotangents = [
            torch.randn(leaf.shape, generator=generator, dtype=leaf.dtype)
            if _needs_grad(leaf)
            else None
            for leaf in outputs
        ]
    inputs = [leaf for leaf in torch_pytree.tree_leaves((args, kwargs)) if _needs_grad(leaf)]
    params = dict(module.named_parameters())
    differentiable = [(o, c) for o, c in zip(outputs, cotangents) if c is not None]
    grads = [torch.zeros_like(t) for t in [*inputs, *params.values()]]
    if differentiable and grads:
        grads = torch.autograd.grad(
            [o for o, _ in differentiable],
            [*inputs, *params.values()],
            grad_outputs=[c for _, c in differentiable],
            allow_unused=True,
            materialize_grads=True,
        )
    state = module.state_dict()
    return (
        {
            "outputs": [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs],
            "input_grads": list(grads[: len(inputs)]),
            "param_grads": dict(zip(params, grads[len(inputs) :])),
            "buffers": {k: v for k, v in state.items() if k not in params},
        },
        spec,
        cotangents,
    )


class _JaxCall:
    """The torch call ``module(*args, **kwargs)`` as a JAX function of arrays:
    ``call(params, diff_inputs, arrays, buffers) -> (output, new_buffers)``, with the
    floating inputs that require grad (``diff_inputs``) and every other array
    (``arrays``) as arguments — none a constant baked into the program, so samples that
    differ only in values lower to the same program (one compilation, reused through
    the compilation cache), and large constants do not slow the compiler."""

    def __init__(self, model, args, kwargs, training):
        leaves, self.in_spec = torch_pytree.tree_flatten((args, kwargs))
        self.diff_positions = [i for i, leaf in enumerate(leaves) if _needs_grad(leaf)]
        # device_put, not jnp.asarray: jax 0.10 compiles a program per shape for the latter
        self.leaves = [
            jax.device_put(leaf.detach().numpy()) if isinstance(leaf, torch.Tensor) else leaf
            for leaf in leaves
        ]
        self.array_positions = [
            i
            for i, leaf in enumerate(self.leaves)
            if isinstance(leaf, jax.Array) and i not in self.diff_positions
        ]
        self.diff_inputs = [self.leaves[i] for i in self.diff_positions]
        self.arrays = [self.leaves[i] for i in self.array_positions]
        self.model, self.training, self.key = model, training, jax.random.key(0)

    def __call__(self, params, diff_inputs, arrays, buffers):
        filled = list(self.leaves)
        for position, value in zip(
            [*self.diff_positions, *self.array_positions], [*diff_inputs, *arrays]
        ):
            filled[position] = value
        call_args, call_kwargs = torch_pytree.tree_unflatten(filled, self.in_spec)
        return self.model.apply(
            params, *call_args, buffers=buffers, train=self.training, key=self.key, **call_kwargs
        )


def forward_program(model, params, buffers, args, kwargs, training) -> tuple:
    """A key equal for two calls exactly when the twin runs the same program on them:
    the forward's jaxpr (shapes, dtypes, every operation and literal) and the bytes of
    its constants. Tracing only: nothing is compiled or run."""
    call = _JaxCall(model, args, kwargs, training)
    closed = jax.make_jaxpr(call)(params, call.diff_inputs, call.arrays, buffers)
    return str(closed.jaxpr), tuple(_const_bytes(c) for c in closed.consts)


def _const_bytes(const) -> tuple | str:
    """A jaxpr constant by dtype, shape and bytes (a PRNG key by its key data: the
    dropout key a training-mode forward closes over)."""
    if not hasattr(const, "shape"):
        return repr(const)
    if jax.dtypes.issubdtype(const.dtype, jax.dtypes.prng_key):
        return str(const.dtype), const.shape, np.asarray(jax.random.key_data(const)).tobytes()
    return str(const.dtype), const.shape, np.asarray(const).tobytes()


def jax_side(
    model,
    params,
    buffers,
    args,
    kwargs,
    training,
    cotangents,
    *,
    fast_compile: bool = False,
    eager: bool = False,
) -> tuple[dict, Any]:
    """The same as ``torch_side`` with ``model.apply`` and ``jax.vjp``.

    ``eager`` dispatches op by op instead of compiling one program: each primitive is
    compiled once per shape and reused across calls, which is faster for many samples
    of a layer made of many ops of few shapes (attention, transformer layers); one
    program is faster for the rest (see ``jaxgrad_dev/module_db.py``, ``Entry.jit``)."""
    call = _JaxCall(model, args, kwargs, training)
    grad_positions = [i for i, c in enumerate(cotangents) if c is not None]
    cot_arrays = [jax.device_put(cotangents[i].numpy()) for i in grad_positions]

    def forward(params, diff_inputs, arrays, buffers):
        output, new_buffers = call(params, diff_inputs, arrays, buffers)
        outputs = torch_pytree.tree_leaves(output)
        differentiable = [outputs[i] for i in grad_positions if i < len(outputs)]
        return differentiable, (output, new_buffers)

    def forward_backward(params, diff_inputs, arrays, buffers, cot_arrays):
        differentiable, vjp, (output, new_buffers) = jax.vjp(
            lambda p, d: forward(p, d, arrays, buffers), params, diff_inputs, has_aux=True
        )
        if [d.shape for d in differentiable] != [c.shape for c in cot_arrays]:
            return output, new_buffers, None  # a structure mismatch: reported by the caller
        return output, new_buffers, vjp(cot_arrays)

    options = FAST_COMPILE if fast_compile else None
    run = forward_backward if eager else jax.jit(forward_backward, compiler_options=options)
    output, new_buffers, grads = run(params, call.diff_inputs, call.arrays, buffers, cot_arrays)
    outputs, spec = torch_pytree.tree_flatten(output)
    if grads is None or len(outputs) != len(cotangents):
        return {"outputs": outputs}, spec
    param_grads, input_grads = grads
    return {
        "outputs": outputs,
        "input_grads": list(input_grads),
        "param_grads": dict(param_grads),
        "buffers": dict(new_buffers),
    }, spec
