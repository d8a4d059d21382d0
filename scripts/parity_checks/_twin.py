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
    return jax.device_put(value) if isinstance(value, np.ndarray) else value  # no compile


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
                grad_inputs: bool = True, convert=None, jit: bool = True,
                jax_only: dict | None = None):
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
    """
    kwargs = dict(kwargs or {})
    floats = [a for a in args if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    dtype = str(next(module.parameters()).dtype).replace("torch.", "") if any(
        True for _ in module.parameters()) else floats[0].dtype.name
    with jax_precision(dtype):
        # converted before torch's forward: Embedding(max_norm) mutates its weight
        model, params = (convert or jaxgrad.nn.from_torch)(module)
    float_positions, cotangents, reference = _torch_side(module, args, kwargs, dtype,
                                                        train=train, grad_inputs=grad_inputs)
    with jax_precision(dtype):
        jax_args = [_to_jax(a) for a in args]
        jax_kwargs = {k: _to_jax(v) for k, v in kwargs.items()}
        jax_kwargs.update({k: {p: jnp.asarray(m) for p, m in v.items()} if isinstance(v, dict)
                           else _to_jax(v) for k, v in (jax_only or {}).items()})

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


def _torch_side(module, args, kwargs, dtype: str, *, train: bool, grad_inputs: bool,
                cast_to=None):
    """torch's forward and the gradients of ``Σ c·output``.

    Returns ``(float_positions, cotangents, reference)``: the positions of the floating
    positional inputs differentiated, the cotangents ``c`` (float32 or float64 draws of
    one fixed stream) and the reference tree
    ``{"output", "grads", "input_grads"}``. The cotangents are drawn in ``dtype``
    (the module's), then cast to ``cast_to`` when given.
    """
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
    return (value.astype(np.float64) if isinstance(value, np.ndarray) and value.dtype == np.float32
            else value)


def reference_rounding(module: torch.nn.Module, args: tuple, kwargs: dict | None = None, *,
                       train: bool = False, grad_inputs: bool = True) -> dict:
    """How much of the float32 tier torch's own float32 rounding uses, per leaf.

    Runs the float32 ``module`` (the reference of a float32 twin row) and a float64 copy
    on the same values (inputs, weights and cotangents cast up), and returns
    ``{leaf path: max_i |t32_i - t64_i| / (atol + rtol·|t64_i|)}`` with the float32
    tier's rtol and atol (``jaxgrad.parity.tolerance_for``: 1e-5 and 1e-6·max|t64|). A
    row can give a verdict that does not depend on which CPU or compiler made the
    float32 bits only where this is well below 1 (the twin rows hold it under 0.5):
    two float32 results, each that close to the exact answer, stay within the tier of
    each other. Near 1 or above, the leaf is ill-conditioned in float32 (a
    cancellation, such as LayerNorm's input gradient where ``g - mean(g) - x̂·mean(g·x̂)``
    nearly vanishes) and passes or fails by luck.
    """
    import copy

    kwargs = dict(kwargs or {})
    _, _, low = _torch_side(module, args, kwargs, "float32", train=train,
                            grad_inputs=grad_inputs)
    wide = copy.deepcopy(module).double()
    for layer in wide.modules():
        # RMSNorm's eps=None means finfo(dtype).eps: keep float32's, the same function
        if isinstance(layer, torch.nn.RMSNorm) and layer.eps is None:
            layer.eps = torch.finfo(torch.float32).eps
    _, _, high = _torch_side(wide, _upcast(tuple(args)),
                             {k: _upcast(v) for k, v in kwargs.items()}, "float32",
                             train=train, grad_inputs=grad_inputs, cast_to=np.float64)
    ratios = {}
    flat_low = jax.tree_util.tree_flatten_with_path(low, is_leaf=lambda v: v is None)[0]
    flat_high = jax.tree_util.tree_leaves(high, is_leaf=lambda v: v is None)
    for (path, t32), t64 in zip(flat_low, flat_high):
        if t32 is None:
            continue
        t32 = t32.detach().numpy().astype(np.float64)
        t64 = t64.detach().numpy()
        finite = np.isfinite(t64)
        if not finite.any():
            continue
        exact = t64[finite]
        rtol, atol = jaxgrad.parity.tolerance_for("float32", exact)  # the one tier table
        tolerance = atol + rtol * np.abs(exact)
        ratios[jax.tree_util.keystr(path)] = float(
            np.max(np.abs(t32[finite] - exact) / np.maximum(tolerance, np.finfo(np.float64).tiny)))
    return ratios


# A float32 leaf can be ill-conditioned: torch's own float32 rounding already uses much of
# the float32 tier against the exact (float64) answer on it, so two float32 results each
# close to that answer can still fall outside the tier of each other, by luck (see
# ``reference_rounding`` above, whose rows hold this under one half). port.py and the zoo
# both judge float32 by this rule. A gradient that is
# zero in exact arithmetic (BERT's attention key bias: softmax ignores a shift of a whole
# row of scores) is float32 noise on both sides; BatchNorm over two values (ResNet-18's
# last stage on a 32x32 image) cancels. There the twin is judged by accuracy instead.
ILL_CONDITIONED = 0.5  # torch's float32 error, in units of the tier, from which a leaf is
ACCURACY_FACTOR = 10.0  # where torch misses the tier: the twin may be this much farther off


def headroom(values, reference64) -> float:
    """``max |values − reference64| / tolerance`` in units of the float32 tier's
    tolerance for ``reference64`` (inf where either is not finite)."""
    from jaxgrad.parity import tolerance_for

    values, exact = np.asarray(values, np.float64), np.asarray(reference64, np.float64)
    if values.shape != exact.shape or not (np.isfinite(values).all() and np.isfinite(exact).all()):
        return float("inf")
    rtol, atol = tolerance_for("float32", exact)
    tolerance = np.maximum(atol + rtol * np.abs(exact), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(values - exact) / tolerance)) if values.size else 0.0


def torch_float32_accuracy(reference64: dict, torch_runs: list) -> tuple[float, str | None]:
    """How close torch's own float32 gets to the float64 answer on one model, over
    several float32 runs of it (``torch_runs``: flat ``{path: array}`` dicts, the same
    values summed in different orders: the default kernels, channels-last, the batch
    reversed): the largest headroom (``headroom``) over every leaf and run, and the
    leaf where it is. Leaves beyond ``ACCURACY_FACTOR`` (a value zero in exact
    arithmetic: float32 noise, judged leaf by leaf by ``float32_ill_conditioned``) do
    not set it."""
    worst, where = 0.0, None
    for path, exact in reference64.items():
        for run in torch_runs:
            if path not in run:
                continue
            value = headroom(run[path], exact)
            if value <= ACCURACY_FACTOR and value > worst:
                worst, where = value, path
    return worst, where


def float32_ill_conditioned(report32, reference32: dict, candidate32: dict,
                            reference64: dict) -> dict:
    """Leaves that fail the float32 tier against torch's float32 only because they are
    ill-conditioned in float32, with the twin as accurate as torch:
    ``{path: (torch's headroom, the twin's headroom)}``, a headroom being
    ``max |value − t64| / tolerance`` in units of the float32 tier's tolerance for the
    float64 values ``t64``. A failing leaf is listed when torch's headroom or the twin's
    is at least ``ILL_CONDITIONED`` (either float32 computation shows the leaf
    ill-conditioned: a failing leaf on which torch is accurate has the twin's at least
    about one half) and the twin's is at most 1 (within the tier of the float64 answer) — or, where torch's own float32 value misses the tier too (headroom above
    1: a gradient that is zero in exact arithmetic is float32 noise), at most
    ``ACCURACY_FACTOR`` times torch's. Every other failing leaf is a real disagreement. ``reference64`` must come from the
    same float32 values cast up (``port_parity``'s float64 run of a float32 model and
    input; the zoo's float64 copy of its float32 model)."""
    from jaxgrad.parity import flatten, tolerance_for

    low, high, ours = flatten(reference32), flatten(reference64), flatten(candidate32)
    found = {}
    for leaf in report32.failures():
        t32, t64, c32 = low.get(leaf.path), high.get(leaf.path), ours.get(leaf.path)
        if t32 is None or t64 is None or c32 is None:
            continue
        t32, t64, c32 = (np.asarray(a, np.float64) for a in (t32, t64, c32))
        if not (t32.shape == t64.shape == c32.shape) or not (
                np.isfinite(t64).all() and np.isfinite(t32).all() and np.isfinite(c32).all()):
            continue
        rtol, atol = tolerance_for("float32", t64)
        tolerance = np.maximum(atol + rtol * np.abs(t64), np.finfo(np.float64).tiny)
        torch_headroom = float(np.max(np.abs(t32 - t64) / tolerance))
        twin_headroom = float(np.max(np.abs(c32 - t64) / tolerance))
        allowed = max(1.0, ACCURACY_FACTOR * torch_headroom) if torch_headroom > 1.0 else 1.0
        # ill-conditioned when either float32 computation (torch's kernels, XLA's: two
        # summation orders) uses half the tier or more against the exact answer
        if max(torch_headroom, twin_headroom) >= ILL_CONDITIONED and twin_headroom <= allowed:
            found[leaf.path] = (torch_headroom, twin_headroom)
    return found
