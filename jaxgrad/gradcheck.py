"""Gradient checking: the analytic gradient against central differences, in float64.

``gradcheck(fn, *args)`` checks the gradient JAX computes for a scalar function of
any pytrees against the central difference ``(f(θ + h·d) − f(θ − h·d)) / 2h``:

- ``mode="full"`` perturbs every element (``d`` runs over the unit vectors), so it
  costs two evaluations of ``fn`` per scalar parameter;
- ``mode="directions"`` compares directional derivatives ``∇f·d`` along
  ``n_directions`` random unit vectors, for models too large for ``"full"``. A
  wrong gradient is caught unless the error happens to be orthogonal to every
  direction drawn.

The check always runs in float64, turning ``jax_enable_x64`` on for its duration
(the report's ``notes`` say so), because the difference quotient subtracts two
nearly equal numbers: in float32 its rounding error is ~1e-7·|f| / h ≈ 0.1·|f|
for h = 1e-6, which would hide any bug worth finding. float32 inputs are refused
unless ``allow_float32=True``, which checks float64 copies of them.

An element passes when ``|analytic − numeric| ≤ atol + rounding + rtol·|numeric|``
with the finite-difference tier (eps 1e-6, atol 1e-8, rtol 1e-6) — the criterion of
``torch.autograd.gradcheck`` but strict: torch's defaults (atol 1e-5, rtol 1e-3) pass
a backward that is 0.1 % wrong — plus the rounding error of the difference quotient
itself. Each value ``f(θ ± h·d)`` is computed in float64 with an error of a few units
of machine epsilon ε = 2⁻⁵² relative to ``|f|``; if each is off by at most
``rounding_ulps``·ε·|f| the quotient is off by at most

    rounding = rounding_ulps · ε · |f(θ)| / h        (rounding_ulps = 4 by default)

which is ~1e-7 for ``|f|`` ≈ 1e3 at h = 1e-6, ten times the fixed atol: without it a
correct gradient of a large-valued function (``mse_loss(reduction="sum")`` near 1e3)
fails. Measured over every layer and loss at values from 1 to 1e13, the error never
exceeded 1.2·ε·|f|/h, so 4 leaves a margin of three; for ``|f|`` ≈ 1 it adds 9e-10, a
tenth of atol, so a 0.1 % error is still caught. ``rounding_ulps=0`` turns it off.
The verdict comes from ``jaxgrad.parity.compare`` with numeric as the reference.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._labels import leaf_labels
from jaxgrad.parity import ParityReport, compare

MODES = ("full", "directions")
"""``gradcheck``'s modes: every element, or random unit directions."""
# Rows of the (directions × parameters) perturbation matrix evaluated in one vmap
# call: bounds the memory of "full" mode to _CHUNK × n_parameters floats.
_CHUNK = 128
# Machine epsilon of float64, 2**-52: the unit of the rounding allowance.
_EPSILON = float(np.finfo(np.float64).eps)


@dataclasses.dataclass(frozen=True)
class GradcheckRow:
    """One checked element (``"full"``) or direction (``"directions"``)."""

    where: str  # leaf path and element index, or "direction k"
    analytic: float
    numeric: float
    abs_diff: float
    allowed: float  # atol + rounding + rtol·|numeric|; fails when abs_diff > allowed

    @property
    def passed(self) -> bool:
        return self.abs_diff <= self.allowed


@dataclasses.dataclass
class GradcheckReport:
    """What ``gradcheck`` found. ``passed`` is the verdict of ``parity``."""

    mode: str
    eps: float
    rtol: float
    atol: float  # the caller's atol; the check allows atol + rounding
    rounding: float  # rounding_ulps · ε · |f(θ)| / eps: the quotient's rounding error
    value: float  # f(θ), whose magnitude sets ``rounding``
    n_parameters: int  # scalar parameters differentiated
    n_checked: int  # elements ("full") or directions ("directions") compared
    parity: ParityReport  # numeric (reference) vs analytic (candidate), per leaf
    worst: list  # GradcheckRow, the worst first (largest abs_diff / allowed)
    notes: list  # what the check did on the caller's behalf (x64, upcasts)
    numeric: dict  # {leaf path: central differences}, or {"directional derivatives": (k,)}
    analytic: dict  # the same structure from jax.grad

    @property
    def passed(self) -> bool:
        return self.parity.passed

    @property
    def max_abs_err(self) -> float:
        return self.parity.max_abs_err

    def table(self) -> str:
        lines = [
            f"gradcheck ({self.mode}): {self.n_checked} "
            f"{'elements' if self.mode == 'full' else 'directions'} of "
            f"{self.n_parameters} parameters, eps={self.eps:g}, atol={self.atol:g}, "
            f"rtol={self.rtol:g}",
            f"rounding allowance {self.rounding:.2g} (|f| = {abs(self.value):.6g})",
        ]
        lines.extend(f"note: {note}" for note in self.notes)
        rows = [("where", "analytic", "numeric", "|diff|", "allowed", "")]
        for row in self.worst:
            rows.append(
                (
                    row.where,
                    f"{row.analytic:.12g}",
                    f"{row.numeric:.12g}",
                    f"{row.abs_diff:.2e}",
                    f"{row.allowed:.2e}",
                    "ok" if row.passed else "FAIL",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines.append("worst:")
        lines.extend("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _is_float(leaf) -> bool:
    if isinstance(leaf, float):
        return True
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jnp.floating)


def _flatten_args(fn, args, argnums, allow_float32):
    """Split ``args`` into one float64 vector θ (the differentiated leaves) and the rest."""
    labels = leaf_labels(fn, args)
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(tuple(args))
    leaves, paths, diff_index, notes = [], [], [], []
    upcast = []
    for position, ((path, leaf), where) in enumerate(zip(leaves_with_path, labels)):
        arg = path[0].idx
        if arg in argnums and _is_float(leaf):
            dtype = np.dtype(getattr(leaf, "dtype", np.float64))
            if dtype != np.float64 and not isinstance(leaf, float):
                if not allow_float32:
                    raise ValueError(
                        f"gradcheck: `{where}` is {dtype.name}. Central differences "
                        "subtract two nearly equal values of fn (cancellation): in float32 "
                        "the rounding error of (f(x+h) − f(x−h))/2h is about 1e-7·|f|/h, ~0.1·|f| for "
                        "h=1e-6, far above the errors a gradient check must catch. Pass "
                        "float64 inputs, or allow_float32=True to check float64 copies."
                    )
                upcast.append(where)
            leaf = jnp.asarray(leaf, jnp.float64)
            diff_index.append(position)
        elif not hasattr(leaf, "dtype") and not isinstance(leaf, (int, bool)):
            leaf = jnp.asarray(leaf)
        leaves.append(leaf)
        paths.append(where)
    if upcast:
        notes.append(f"float32 inputs checked as float64 copies: {', '.join(upcast)}")
    return leaves, paths, treedef, diff_index, notes


def gradcheck(
    fn: Callable,
    *args,
    eps: float = 1e-6,
    atol: float = 1e-8,
    rtol: float = 1e-6,
    rounding_ulps: float = 4.0,
    mode: str = "full",
    n_directions: int = 16,
    seed: int = 0,
    argnums: Sequence[int] | int | None = None,
    allow_float32: bool = False,
    jit: bool = True,
    num_worst: int = 5,
    name: str = "",
) -> GradcheckReport:
    """Check ``jax.grad(fn)`` against central differences, in float64.

    Args:
      fn: ``fn(*args) -> scalar``; any pytrees as arguments.
      *args: the point to check at. Floating leaves of the ``argnums`` arguments are
        differentiated; integer leaves (class targets) are held fixed.
      eps: the step ``h`` of the central difference.
      atol: the absolute part of the tolerance: an element passes when
        ``|analytic − numeric| ≤ atol + rounding + rtol·|numeric|``.
      rtol: the relative part of the same tolerance.
      rounding_ulps: ``rounding = rounding_ulps · ε · |f(θ)| / eps`` (ε = 2⁻⁵²), the
        rounding error of the difference quotient (module docstring); 0 turns it off.
      mode: ``"full"`` (every element) or ``"directions"`` (random unit directions).
      n_directions: how many directions ``"directions"`` draws.
      seed: seeds the directions.
      argnums: which positional arguments to differentiate; default all.
      allow_float32: check float32 (or float16) inputs on float64 copies instead of
        refusing them.
      jit: evaluate ``fn`` and its gradient under ``jax.jit``.
      num_worst: how many of the worst elements or directions the report lists.
      name: a label carried into the parity report.

    Returns:
      A ``GradcheckReport``; nothing is raised for a wrong gradient.

    Raises:
      ValueError: bad ``mode``/``eps``/``n_directions``, float32 inputs (see above),
        no floating input, or ``fn`` returning a non-scalar, non-float64 or
        non-finite value.
    """
    if mode not in MODES:
        raise ValueError(f"`mode` (={mode!r}) must be one of {', '.join(map(repr, MODES))}.")
    if not eps > 0:
        raise ValueError(f"`eps` (={eps}) must be positive.")
    if not rounding_ulps >= 0:
        raise ValueError(f"`rounding_ulps` (={rounding_ulps}) must be >= 0.")
    if mode == "directions" and (not isinstance(n_directions, int) or n_directions < 1):
        raise ValueError(f"`n_directions` (={n_directions!r}) must be a positive int.")
    if argnums is None:
        argnums = tuple(range(len(args)))
    elif isinstance(argnums, int):
        argnums = (argnums,)
    bad = [a for a in argnums if not 0 <= a < len(args)]
    if bad:
        raise ValueError(f"`argnums` (={tuple(argnums)}) must index the {len(args)} arguments.")

    notes = []
    if not jax.config.jax_enable_x64:
        notes.append("jax_enable_x64 was off: gradcheck turned it on for the check")
    with jax.enable_x64(True):
        leaves, paths, treedef, diff_index, upcast_notes = _flatten_args(
            fn, args, set(argnums), allow_float32
        )
        notes.extend(upcast_notes)
        if not diff_index:
            raise ValueError("gradcheck: no floating-point input to differentiate in `args`.")
        shapes = [jnp.shape(leaves[i]) for i in diff_index]
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        # θ, its perturbations and the differences live on the host (numpy's float64 is
        # the same IEEE arithmetic; on-device it would compile one program per shape)
        theta = np.concatenate([np.ravel(np.asarray(leaves[i])) for i in diff_index])

        def objective(vector):
            vector = jnp.asarray(vector)
            rebuilt = list(leaves)
            offset = 0
            for i, shape, size in zip(diff_index, shapes, sizes):
                rebuilt[i] = vector[offset : offset + size].reshape(shape)
                offset += size
            out = fn(*jax.tree_util.tree_unflatten(treedef, rebuilt))
            return jnp.reshape(out, ())

        # jitted: the output is checked from its shape and dtype (nothing compiled), and
        # f(θ) comes with the gradient from one program; eager: f may need concrete values
        _check_output(fn, jax.eval_shape if jit else (lambda f, t: f(t)), objective, theta)
        value_and_grad = jax.value_and_grad(objective)
        batched = jax.vmap(objective)
        if jit:
            value_and_grad, batched = jax.jit(value_and_grad), jax.jit(batched)
        value, analytic = value_and_grad(theta)
        value, analytic = _finite_value(fn, value), np.asarray(analytic)
        rounding = rounding_ulps * _EPSILON * abs(value) / eps
        n = theta.size
        if mode == "full":
            numeric = _central_differences(
                batched,
                theta,
                eps,
                lambda start, stop: np.eye(stop - start, n, k=start, dtype=np.float64),
                n,
            )
            analytic_checked = analytic
            reference = _split(numeric, paths, diff_index, shapes, sizes)
            candidate = _split(analytic, paths, diff_index, shapes, sizes)
            where = [
                f"{paths[i]}{_index(shape, k)}"
                for i, shape, size in zip(diff_index, shapes, sizes)
                for k in range(size)
            ]
        else:
            draws = np.asarray(
                jax.random.normal(jax.random.key(seed), (n_directions, n), jnp.float64)
            )
            directions = draws / np.linalg.norm(draws, axis=1, keepdims=True)
            numeric = _central_differences(
                batched, theta, eps, lambda start, stop: directions[start:stop], n_directions
            )
            analytic_checked = directions @ analytic
            reference = {"directional derivatives": numeric}
            candidate = {"directional derivatives": analytic_checked}
            where = [f"direction {k}" for k in range(n_directions)]
    parity = compare(
        reference, candidate, rtol=rtol, atol=atol + rounding, name=name or "gradcheck"
    )
    return GradcheckReport(
        mode=mode,
        eps=eps,
        rtol=rtol,
        atol=atol,
        rounding=rounding,
        value=value,
        n_parameters=int(n),
        n_checked=int(numeric.size),
        parity=parity,
        worst=_worst(where, analytic_checked, numeric, atol + rounding, rtol, num_worst),
        notes=notes,
        numeric=reference,
        analytic=candidate,
    )


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _check_output(fn, evaluate, objective, theta) -> None:
    """Raise unless ``f(θ)`` is a float64 scalar; ``evaluate(objective, θ)`` gives its
    value or (``jax.eval_shape``) only its shape and dtype."""
    try:
        out = evaluate(objective, theta)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError) as exc:
        # TypeErrors too, but not about the output: fn needs concrete values
        raise ValueError(
            f"gradcheck: `fn` ({_name(fn)}) cannot be traced: it needs concrete values "
            f"(Python control flow on an array, or a numpy conversion), and gradcheck "
            f"traces it with jax.grad and jax.vmap even with `jit=False`. Write the branch "
            f"with jnp.where or jax.lax.cond. {type(exc).__name__}: "
            f"{str(exc).splitlines()[0]}"
        ) from exc
    except TypeError as exc:
        raise ValueError(f"gradcheck: `fn` ({_name(fn)}) must return a scalar: {exc}") from exc
    if out.dtype != jnp.float64:
        raise ValueError(
            f"gradcheck: `fn` ({_name(fn)}) returned {out.dtype} for float64 inputs; it "
            "casts to a lower precision inside, so its finite differences would be "
            "dominated by rounding. Make it keep its inputs' dtype."
        )


def _finite_value(fn, out) -> float:
    """``f(θ)`` as a float; raise where it is not finite."""
    if not math.isfinite(float(out)):
        raise ValueError(f"gradcheck: `fn` ({_name(fn)}) is not finite at `args` (={float(out)}).")
    return float(out)


def _central_differences(batched, theta, eps, rows, total: int) -> np.ndarray:
    """``(f(θ + eps·d) − f(θ − eps·d)) / 2eps`` for each of the ``total`` directions ``d``.

    ``rows(start, stop)`` returns directions ``start..stop`` as a `(stop − start, n)`
    array; they are evaluated at most ``_CHUNK`` at a time under one ``vmap``, in blocks
    of one size (the last padded with zero directions), so ``batched`` compiles once.
    """
    size = -(-total // -(-total // _CHUNK))  # ceil(total / number of blocks)
    results = []
    for start in range(0, total, size):
        block = rows(start, min(start + size, total))
        used = block.shape[0]
        block = np.concatenate([block, np.zeros((size - used, block.shape[1]))])
        plus = np.asarray(batched(theta[None, :] + eps * block))[:used]
        minus = np.asarray(batched(theta[None, :] - eps * block))[:used]
        results.append((plus - minus) / (2.0 * eps))
    return np.concatenate(results)


def _split(vector, paths, diff_index, shapes, sizes) -> dict:
    tree, offset = {}, 0
    for i, shape, size in zip(diff_index, shapes, sizes):
        tree[paths[i]] = np.asarray(vector[offset : offset + size]).reshape(shape)
        offset += size
    return tree


def _index(shape, flat: int) -> str:
    return "" if not shape else str([int(i) for i in np.unravel_index(flat, shape)])


def _worst(where, analytic, numeric, atol, rtol, count) -> list:
    analytic, numeric = np.asarray(analytic), np.asarray(numeric)
    diff = np.abs(analytic - numeric)
    allowed = atol + rtol * np.abs(numeric)
    order = np.argsort(-(diff / allowed), kind="stable")[:count]
    return [
        GradcheckRow(
            where=where[k],
            analytic=float(analytic[k]),
            numeric=float(numeric[k]),
            abs_diff=float(diff[k]),
            allowed=float(allowed[k]),
        )
        for k in order
    ]


__all__ = ["MODES", "GradcheckReport", "GradcheckRow", "gradcheck"]
