"""``twin_parity``: one torch module vs its ``from_torch`` twin, forward and gradients.

Used by the sequence rows of the report and by their tests. Any call signature: the
positional ``args`` and keyword ``kwargs`` (numpy arrays, ``None`` or plain values)
are handed to both frameworks; the outputs (a tensor or nested tuples, ``None``
entries kept) are compared leaf by leaf, then the gradients of ``Σ c·output`` (one
fixed random cotangent ``c`` per floating output) with respect to every parameter
and to the floating positional inputs. NaN outputs (fully masked attention rows)
are compared by their NaN masks and their NaN gradients likewise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
from parity_checks.harness import jax_precision


def _to_torch(value):
    if isinstance(value, tuple):
        return tuple(_to_torch(v) for v in value)
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


def _to_jax(value):
    if isinstance(value, tuple):
        return tuple(_to_jax(v) for v in value)
    return jnp.asarray(value) if isinstance(value, np.ndarray) else value


def _tree_of(value):
    """A torch output as nested lists of numpy arrays (None kept)."""
    if isinstance(value, (tuple, list)):
        return [_tree_of(v) for v in value]
    return None if value is None else value


def _floating_leaves(tree):
    return [leaf for leaf in jax.tree_util.tree_leaves(tree)
            if (leaf.is_floating_point() if isinstance(leaf, torch.Tensor)
                else hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating))]


def twin_parity(module: torch.nn.Module, args: tuple, kwargs: dict | None = None, *,
                train: bool = False, name: str = "",
                grad_inputs: bool = True, convert=None, jit: bool = True):
    """Compare ``module(*args, **kwargs)`` with its jaxgrad twin; returns a ParityReport.

    Args:
      module: a torch module in the dtype to check (float64 or float32).
      args, kwargs: numpy arrays (or None, bools, ints) given to both forwards.
      train: ``module.train()`` vs ``train=True`` (use dropout 0: masks differ).
      jit: run the jaxgrad side under ``jax.jit``.
      grad_inputs: also compare gradients with respect to floating positional inputs.
      convert: ``module -> (model, params)``; default ``jaxgrad.nn.from_torch``.
    """
    kwargs = dict(kwargs or {})
    floats = [a for a in args if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    dtype = str(next(module.parameters()).dtype).replace("torch.", "") if any(
        True for _ in module.parameters()) else floats[0].dtype.name
    with jax_precision(dtype):
        # converted before torch's forward: Embedding(max_norm) mutates its weight
        model, params = (convert or jaxgrad.nn.from_torch)(module)
    module.train(train)
    float_positions = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)
                       and a.dtype.kind == "f"] if grad_inputs else []
    torch_args = [_to_torch(a) for a in args]
    for i in float_positions:
        torch_args[i] = torch_args[i].clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    out = module(*torch_args, **{k: _to_torch(v) for k, v in kwargs.items()})
    outputs = [o for o in _floating_leaves(_tree_of(out))]
    rng = np.random.default_rng(0)
    cotangents = [rng.standard_normal(tuple(o.shape)).astype(dtype) for o in outputs]
    total = sum((torch.from_numpy(c) * o).sum() for c, o in zip(cotangents, outputs))
    total.backward()
    reference = {
        "output": _tree_of(jax.tree_util.tree_map(lambda t: t.detach(), out)),
        "grads": {n: p.grad for n, p in module.named_parameters()},
        "input_grads": [torch_args[i].grad for i in float_positions],
    }
    with jax_precision(dtype):
        jax_args = [_to_jax(a) for a in args]
        jax_kwargs = {k: _to_jax(v) for k, v in kwargs.items()}

        def objective(params, inputs):
            call_args = list(jax_args)
            for i, value in zip(float_positions, inputs):
                call_args[i] = value
            output = model.apply(params, *call_args, train=train, **jax_kwargs)
            leaves = _floating_leaves(_tree_of(output))
            value = sum(jnp.sum(jnp.asarray(c) * o) for c, o in zip(cotangents, leaves))
            return value, output

        fn = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)
        if jit:
            fn = jax.jit(fn)
        (_, output), (grads, input_grads) = fn(params, [jax_args[i] for i in float_positions])
        candidate = {"output": _tree_of(output), "grads": grads,
                     "input_grads": list(input_grads)}
        return jaxgrad.parity.compare(reference, candidate, name=name)
