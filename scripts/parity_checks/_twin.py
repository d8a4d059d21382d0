"""``twin_parity``: one torch module vs its ``from_torch`` twin, forward and gradients.

Used by the sequence rows of the report and by their tests. Any call signature: the
positional ``args`` and keyword ``kwargs`` (numpy arrays, ``None`` or plain values)
are handed to both frameworks; the outputs (a tensor or nested tuples, ``None``
entries kept) are compared leaf by leaf, then the gradients of ``Σ c·output`` (one
fixed random cotangent ``c`` per floating output) with respect to every parameter
and to the floating positional inputs. NaN outputs (fully masked attention rows)
are compared by their NaN masks and their NaN gradients likewise. A float32 module is
also run as a float64 copy on the same values (``float64_reference``): its float32
leaves are judged by ``compare``'s calibrated rule (``reference64``), and
``reference_rounding`` measures torch's own float32 rounding against it.
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
    return jax.device_put(value) if isinstance(value, np.ndarray) else value  # no compile


def _tree_of(value):
    """A torch output as nested lists of numpy arrays (None kept)."""
    if isinstance(value, (tuple, list)):
        return [_tree_of(v) for v in value]
    return None if value is None else value


def _floating_leaves(tree):
    return [
        leaf
        for leaf in jax.tree_util.tree_leaves(tree)
        if (
            leaf.is_floating_point()
            if isinstance(leaf, torch.Tensor)
            else hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)
        )
    ]


def twin_parity(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    *,
    train: bool = False,
    name: str = "",
    grad_inputs: bool = True,
    convert=None,
    jit: bool = True,
    jax_only: dict | None = None,
):
    """Compare ``module(*args, **kwargs)`` with its jaxgrad twin; returns a ParityReport.

    Args:
      module: a torch module in the dtype to check (float64 or float32).
      args, kwargs: numpy arrays (or None, bools, ints) given to both forwards.
      train: ``module.train()`` vs ``train=True`` (use dropout 0: masks differ).
      jit: run the jaxgrad side under ``jax.jit``.
      grad_inputs: also compare gradients with respect to floating positional inputs.
      convert: ``module -> (model, params)``; default ``jaxgrad.nn.from_torch``.
      jax_only: keyword arguments for the jaxgrad side only, read after torch's
        forward (e.g. ``dropout_masks`` filled by forward hooks on torch's dropouts).

    A float32 row is compared with ``reference64``, torch's float64 answer on the same
    values (``float64_reference``), unless ``jax_only`` hands over torch's draws.
    """
    kwargs = dict(kwargs or {})
    floats = [a for a in args if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    dtype = (
        str(next(module.parameters()).dtype).replace("torch.", "")
        if any(True for _ in module.parameters())
        else floats[0].dtype.name
    )
    # a float32 row is judged against torch's float64 answer too (``compare``'s
    # ``reference64``: the float32 tier calibrated by torch's own rounding), except where
    # the jaxgrad side is handed torch's random draws, which a float64 copy redraws
    wide = float64_copy(module) if dtype == "float32" and not jax_only else None
    with jax_precision(dtype):
        # converted before torch's forward: Embedding(max_norm) mutates its weight
        model, params = (convert or jaxgrad.nn.from_torch)(module)
    float_positions, cotangents, reference = _torch_side(
        module, args, kwargs, dtype, train=train, grad_inputs=grad_inputs
    )
    with jax_precision(dtype):
        jax_args = [_to_jax(a) for a in args]
        jax_kwargs = {k: _to_jax(v) for k, v in kwargs.items()}
        jax_kwargs.update(
            {
                k: {p: jnp.asarray(m) for p, m in v.items()} if isinstance(v, dict) else _to_jax(v)
                for k, v in (jax_only or {}).items()
            }
        )

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
        candidate = {"output": _tree_of(output), "grads": grads, "input_grads": list(input_grads)}
    exact = (
        None
        if wide is None
        else float64_reference(wide, args, kwargs, train=train, grad_inputs=grad_inputs)
    )
    return jaxgrad.parity.compare(reference, candidate, reference64=exact, name=name)


def _torch_side(module, args, kwargs, dtype: str, *, train: bool, grad_inputs: bool, cast_to=None):
    """torch's forward and the gradients of ``Σ c·output``.

    Returns ``(float_positions, cotangents, reference)``: the positions of the floating
    positional inputs differentiated, the cotangents ``c`` (float32 or float64 draws of
    one fixed stream) and the reference tree
    ``{"output", "grads", "input_grads"}``. The cotangents are drawn in ``dtype``
    (the module's), then cast to ``cast_to`` when given.
    """
    module.train(train)
    float_positions = (
        [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        if grad_inputs
        else []
    )
    torch_args = [_to_torch(a) for a in args]
    for i in float_positions:
        torch_args[i] = torch_args[i].clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    out = module(*torch_args, **{k: _to_torch(v) for k, v in kwargs.items()})
    outputs = [o for o in _floating_leaves(_tree_of(out))]
    rng = np.random.default_rng(0)
    cotangents = [rng.standard_normal(tuple(o.shape)).astype(dtype) for o in outputs]
    if cast_to is not None:
        cotangents = [c.astype(cast_to) for c in cotangents]
    total = sum((torch.from_numpy(c) * o).sum() for c, o in zip(cotangents, outputs))
    total.backward()
    reference = {
        "output": _tree_of(jax.tree_util.tree_map(lambda t: t.detach(), out)),
        "grads": {n: p.grad for n, p in module.named_parameters()},
        "input_grads": [torch_args[i].grad for i in float_positions],
    }
    return float_positions, cotangents, reference


def _upcast(value):
    if isinstance(value, tuple):
        return tuple(_upcast(v) for v in value)
    return (
        value.astype(np.float64)
        if isinstance(value, np.ndarray) and value.dtype == np.float32
        else value
    )


def float64_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of a float32 ``module``: the same function on the same values
    (RMSNorm's ``eps=None``, which means ``finfo(dtype).eps``, keeps float32's)."""
    import copy

    wide = copy.deepcopy(module).double()
    for layer in wide.modules():
        if isinstance(layer, torch.nn.RMSNorm) and layer.eps is None:
            layer.eps = torch.finfo(torch.float32).eps
    return wide


def float64_reference(
    wide: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    *,
    train: bool = False,
    grad_inputs: bool = True,
) -> dict:
    """The reference tree of a float32 row (``{"output", "grads", "input_grads"}``)
    computed by ``wide`` (``float64_copy`` of its module) on the same values: inputs and
    cotangents cast up. ``jaxgrad.parity.compare``'s ``reference64``."""
    kwargs = dict(kwargs or {})
    _, _, high = _torch_side(
        wide,
        _upcast(tuple(args)),
        {k: _upcast(v) for k, v in kwargs.items()},
        "float32",
        train=train,
        grad_inputs=grad_inputs,
        cast_to=np.float64,
    )
    return high


def reference_rounding(
    module: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    *,
    train: bool = False,
    grad_inputs: bool = True,
) -> dict:
    """How much of the float32 tier torch's own float32 rounding uses, per leaf.

    Runs the float32 ``module`` (the reference of a float32 twin row) and a float64 copy
    on the same values (inputs, weights and cotangents cast up), and returns
    ``jaxgrad.parity.rounding``: ``{leaf path: max_i |t32_i - t64_i| / (atol +
    rtol·|t64_i|)}`` at the float32 tier (rtol 1e-5, atol 1e-6·max|t64|; a leaf zero in
    exact arithmetic at its neighbours' scale). Well below 1, a float32 row's verdict
    does not depend on which CPU or compiler made the float32 bits (the twin rows hold
    it under 0.5). Near 1 or above, the leaf is ill-conditioned in float32 (a
    cancellation, such as LayerNorm's input gradient where ``g - mean(g) - x̂·mean(g·x̂)``
    nearly vanishes); ``twin_parity`` then judges it by ``compare``'s calibrated rule.
    """
    wide = float64_copy(module)  # before torch's forward: Embedding(max_norm) mutates
    _, _, low = _torch_side(
        module, args, dict(kwargs or {}), "float32", train=train, grad_inputs=grad_inputs
    )
    high = float64_reference(wide, args, kwargs, train=train, grad_inputs=grad_inputs)
    return jaxgrad.parity.rounding(low, high)
