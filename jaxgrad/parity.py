"""Comparing two pytrees leaf by leaf: the parity policy (README, "Tolerances") in code.

``compare(reference, candidate)`` checks, in this order, the tree structure (the
set of leaf paths), then per leaf the shape, the dtype, the NaN mask, and only then
the values, and returns a ``ParityReport``. Leaves may be jax arrays, numpy arrays,
torch tensors (read by duck typing) or Python scalars.

Tolerances default from the reference leaf's dtype (``TOLERANCES``): a candidate
element passes when ``|c − r| ≤ atol + rtol·|r|`` with

========  ===========  ===============================
dtype     rtol         atol
========  ===========  ===============================
float64   1e-10        1e-12
float32   1e-5         1e-6 × max|reference leaf|
integer   0            0 (exact)
========  ===========  ===============================

``rtol=0, atol=0`` asks for bit-identical leaves (the "within one framework" tier).
float16/bfloat16 have no policy tier: pass ``rtol`` and ``atol`` explicitly.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxgrad._arrays import to_numpy


class Tolerance(NamedTuple):
    rtol: float  # relative to |reference| elementwise
    atol: float  # absolute; for float32 a multiple of max|reference|
    atol_scaled: bool  # True when atol is multiplied by max|reference leaf|


TOLERANCES = {
    "float64": Tolerance(rtol=1e-10, atol=1e-12, atol_scaled=False),
    "float32": Tolerance(rtol=1e-5, atol=1e-6, atol_scaled=True),
}
BIT_IDENTICAL = dict(rtol=0.0, atol=0.0)


def tolerance_for(dtype, reference: np.ndarray | None = None) -> tuple[float, float]:
    """``(rtol, atol)`` the parity policy gives a leaf of ``dtype``.

    Raises:
      ValueError: for a floating dtype without a policy tier (float16, bfloat16).
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return 0.0, 0.0
    tier = TOLERANCES.get(dtype.name)
    if tier is None:
        raise ValueError(
            f"no parity tier for dtype {dtype.name}; pass `rtol` and `atol` explicitly "
            f"(tiers exist for {', '.join(TOLERANCES)})."
        )
    atol = tier.atol
    if tier.atol_scaled:
        scale = 0.0
        if reference is not None and reference.size:
            finite = reference[np.isfinite(reference)]
            scale = float(np.max(np.abs(finite))) if finite.size else 0.0
        atol = tier.atol * scale
    return tier.rtol, atol


@dataclasses.dataclass
class LeafResult:
    """One leaf's comparison. ``problem`` is None when the leaf passed."""

    path: str
    shape: tuple
    dtype: str
    max_abs_err: float = math.nan
    max_rel_err: float = math.nan
    rtol: float = math.nan
    atol: float = math.nan
    problem: str | None = None

    @property
    def passed(self) -> bool:
        return self.problem is None


@dataclasses.dataclass
class ParityReport:
    """Everything ``compare`` found; ``passed`` is True only if nothing differs."""

    leaves: list
    structure_problems: list
    name: str = ""

    @property
    def passed(self) -> bool:
        return not self.structure_problems and all(leaf.passed for leaf in self.leaves)

    @property
    def max_abs_err(self) -> float:
        return _max_finite(leaf.max_abs_err for leaf in self.leaves)

    @property
    def max_rel_err(self) -> float:
        return _max_finite(leaf.max_rel_err for leaf in self.leaves)

    @property
    def dtypes(self) -> str:
        return ",".join(sorted({leaf.dtype for leaf in self.leaves}))

    def failures(self) -> list:
        return [leaf for leaf in self.leaves if not leaf.passed]

    def table(self) -> str:
        """A per-leaf table, then the structure problems, then the verdict."""
        rows = [("leaf", "shape", "dtype", "max abs err", "max rel err", "verdict")]
        for leaf in self.leaves:
            rows.append((
                leaf.path,
                "x".join(map(str, leaf.shape)) or "scalar",
                leaf.dtype,
                _fmt(leaf.max_abs_err),
                _fmt(leaf.max_rel_err),
                "PASS" if leaf.passed else f"FAIL: {leaf.problem}",
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = []
        if self.name:
            lines.append(self.name)
        for row in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        lines.extend(f"structure: {p}" for p in self.structure_problems)
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "passed": self.passed,
            "max_abs_err": _json_float(self.max_abs_err),
            "max_rel_err": _json_float(self.max_rel_err),
            "structure_problems": list(self.structure_problems),
            "leaves": [
                {
                    "path": leaf.path,
                    "shape": list(leaf.shape),
                    "dtype": leaf.dtype,
                    "max_abs_err": _json_float(leaf.max_abs_err),
                    "max_rel_err": _json_float(leaf.max_rel_err),
                    "rtol": _json_float(leaf.rtol),
                    "atol": _json_float(leaf.atol),
                    "passed": leaf.passed,
                    "problem": leaf.problem,
                }
                for leaf in self.leaves
            ],
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        return self.table()


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2e}"


def _json_float(value: float):
    return None if math.isnan(value) else value


def _max_finite(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return max(values) if values else math.nan


def _is_none(x) -> bool:
    # torch leaves a frozen parameter's .grad as None; keep None a leaf so that
    # "no gradient" is compared, not silently dropped from the structure.
    return x is None


def flatten(tree) -> dict[str, Any]:
    """``{"path": leaf}`` for any pytree; a flat dict keeps its own keys as paths."""
    if isinstance(tree, dict) and all(isinstance(k, str) for k in tree) and all(
        not isinstance(v, (dict, list, tuple)) for v in tree.values()
    ):
        return dict(tree)
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_none)
    return {jax.tree_util.keystr(path) or "<root>": leaf for path, leaf in leaves}


def _compare_leaf(path, reference, candidate, rtol, atol) -> LeafResult:
    if reference is None or candidate is None:
        result = LeafResult(path=path, shape=(), dtype="None")
        if reference is None and candidate is None:
            result.max_abs_err = result.max_rel_err = 0.0
        else:
            which = "reference" if reference is None else "candidate"
            result.problem = f"{which} is None, the other is an array"
        return result
    ref = to_numpy(reference)
    cand = to_numpy(candidate)
    result = LeafResult(path=path, shape=tuple(ref.shape), dtype=ref.dtype.name)
    if ref.shape != cand.shape:
        result.problem = f"shape {tuple(cand.shape)} != reference {tuple(ref.shape)}"
        return result
    if ref.dtype != cand.dtype:
        result.problem = f"dtype {cand.dtype.name} != reference {ref.dtype.name}"
        return result
    if rtol is None or atol is None:
        policy_rtol, policy_atol = tolerance_for(ref.dtype, ref)
        rtol = policy_rtol if rtol is None else rtol
        atol = policy_atol if atol is None else atol
    result.rtol, result.atol = rtol, atol
    if ref.dtype.kind == "b":
        ref, cand = ref.astype(np.int8), cand.astype(np.int8)
    ref64 = ref.astype(np.float64).ravel()
    cand64 = cand.astype(np.float64).ravel()
    if ref.dtype.kind in "fc":
        ref_nan, cand_nan = np.isnan(ref64), np.isnan(cand64)
        if not np.array_equal(ref_nan, cand_nan):
            result.problem = (
                f"NaN masks differ ({int(ref_nan.sum())} NaN in reference, "
                f"{int(cand_nan.sum())} in candidate)"
            )
            return result
        ref_inf, cand_inf = np.isinf(ref64), np.isinf(cand64)
        if not np.array_equal(ref_inf & (ref64 > 0), cand_inf & (cand64 > 0)) or not (
            np.array_equal(ref_inf & (ref64 < 0), cand_inf & (cand64 < 0))
        ):
            result.problem = "infinities differ"
            return result
        finite = np.isfinite(ref64)
        ref64, cand64 = ref64[finite], cand64[finite]
    if ref64.size == 0:
        result.max_abs_err = result.max_rel_err = 0.0
        return result
    abs_err = np.abs(cand64 - ref64)
    magnitude = np.abs(ref64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = np.where(magnitude > 0, abs_err / magnitude, np.where(abs_err > 0, np.inf, 0.0))
    result.max_abs_err = float(abs_err.max())
    result.max_rel_err = float(rel_err.max())
    bad = abs_err > atol + rtol * magnitude
    if bad.any():
        worst = int(np.argmax(abs_err - (atol + rtol * magnitude)))
        result.problem = (
            f"{int(bad.sum())}/{bad.size} elements outside rtol={rtol:g}, atol={atol:.3g} "
            f"(worst: reference {ref64[worst]:.17g}, candidate {cand64[worst]:.17g})"
        )
    return result


def compare(reference, candidate, *, rtol: float | None = None, atol: float | None = None,
            name: str = "") -> ParityReport:
    """Compare ``candidate`` against ``reference``, structure first, then each leaf.

    Args:
      reference: the trusted pytree (usually torch's values).
      candidate: the pytree under test (usually jaxgrad's).
      rtol, atol: override the policy tolerances for every leaf (both 0 asks for
        bit-identical values). None takes each leaf's tier from its dtype.
      name: a label carried into the report.

    Returns:
      A ``ParityReport``. Nothing is raised for a mismatch; see ``assert_parity``.
    """
    ref_leaves = flatten(reference)
    cand_leaves = flatten(candidate)
    structure = []
    missing = [p for p in ref_leaves if p not in cand_leaves]
    extra = [p for p in cand_leaves if p not in ref_leaves]
    if missing:
        structure.append(f"missing from candidate: {', '.join(missing)}")
    if extra:
        structure.append(f"not in reference: {', '.join(extra)}")
    leaves = [
        _compare_leaf(path, ref_leaves[path], cand_leaves[path], rtol, atol)
        for path in ref_leaves
        if path in cand_leaves
    ]
    return ParityReport(leaves=leaves, structure_problems=structure, name=name)


def assert_parity(reference, candidate, *, rtol: float | None = None,
                  atol: float | None = None, name: str = "") -> ParityReport:
    """``compare`` and raise ``AssertionError`` with the per-leaf table on any failure."""
    report = compare(reference, candidate, rtol=rtol, atol=atol, name=name)
    if not report.passed:
        raise AssertionError("parity check failed\n" + report.table())
    return report


__all__ = [
    "BIT_IDENTICAL",
    "LeafResult",
    "ParityReport",
    "TOLERANCES",
    "Tolerance",
    "assert_parity",
    "compare",
    "flatten",
    "tolerance_for",
]
