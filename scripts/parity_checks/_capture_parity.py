"""Comparing a captured model with torch on the same random draws.

``torch_run`` runs a torch module in one mode with the random draws recorded
(``torchref.random_draws``); ``draws_for`` hands those draws to the matching random
ops of the jaxgrad model (``ExportedModule``: in program order, shapes checked), so
a training-mode forward with dropout or stochastic depth active is compared exactly,
not statistically.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from jaxgrad.nn.capture.program import ExportedModule
from torchref.random_draws import recording


def torch_run(module, args, kwargs=None, *, train: bool):
    """``(output, draws)`` of ``module(*args, **kwargs)`` in torch's ``train`` mode."""
    module.train(train)
    with recording() as draws:
        output = module(*args, **(kwargs or {}))
    return output, draws


def draws_for(model: ExportedModule, draws, *, train: bool = True) -> dict:
    """``{node name: draw}`` giving ``model``'s random ops torch's ``draws`` in order.

    Raises:
      ValueError: the counts or shapes differ (the two programs drew differently).
    """
    program = model.train_program if train else model.eval_program
    nodes = program.random_nodes()
    if len(nodes) != len(draws):
        raise ValueError(
            f"{model.class_name}: torch drew {len(draws)} random tensors "
            f"({', '.join(d.op for d in draws) or 'none'}), the captured program has "
            f"{len(nodes)} random ops ({', '.join(n.target for n in nodes) or 'none'})."
        )
    matched = {}
    for node, draw in zip(nodes, draws):
        values = draw.values.detach().cpu().numpy()
        expected = _draw_shape(node)
        if expected is not None and tuple(values.shape) != expected:
            raise ValueError(
                f"{model.class_name}: random op {node.name} ({node.target}) at "
                f"{node.path!r} draws {list(expected)}, torch's {draw.op} drew "
                f"{list(values.shape)}."
            )
        matched[node.name] = np.array(values, copy=True)
    return matched


def _draw_shape(node):
    meta = node.meta[0] if isinstance(node.meta, tuple) else node.meta
    if meta is None or not all(isinstance(size, int) for size in meta.shape):
        return None  # a size torch kept symbolic: the draw's shape is the call's
    return tuple(meta.shape)


def grads_both(module, model, params, args, *, train=False, key=None, draws=None, buffers=None):
    """``(torch, jaxgrad)``: the output and every parameter gradient of
    ``sum(output * c)`` (``c`` a fixed ramp) in torch's ``train`` mode and in
    ``model.apply(train=...)``; ``draws=True`` records torch's random draws and hands
    them to the captured program's random ops; ``buffers`` are passed and the new ones
    dropped from the comparison."""
    module.train(train)
    module.zero_grad(set_to_none=True)
    torch_args = [torch.from_numpy(a) for a in args]
    if draws is None:
        out = module(*torch_args)
    else:
        out, recorded = torch_run(module, torch_args, train=train)
        draws = draws_for(model, recorded, train=train)
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()
    reference = {
        "output": out.detach().numpy(),
        "grads": {
            n: p.grad.numpy() if p.grad is not None else np.zeros(p.shape)
            for n, p in module.named_parameters()
        },
    }

    def objective(params):
        options = {} if draws is None else {"random_draws": draws}
        if buffers is not None:
            options["buffers"] = buffers
        result = model.apply(
            params, *[jnp.asarray(a) for a in args], train=train, key=key, **options
        )
        out = result[0] if buffers is not None else result
        return jnp.sum(out * cotangent), out

    grads, out = jax.grad(objective, has_aux=True)(params)
    return reference, {"output": out, "grads": grads}
