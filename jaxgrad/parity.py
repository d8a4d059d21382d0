"""Comparing two pytrees leaf by leaf: the parity policy (README, "Tolerances") in code.

``compare(reference, candidate)`` checks, in this order, the tree structure (the
set of leaf paths; a comparison of no leaves at all fails), then per leaf the shape,
the dtype, the NaN mask, and only then the values, and returns a ``ParityReport``.
Leaves may be jax arrays, numpy arrays, torch tensors (read by duck typing) or
Python scalars.

A candidate element passes when ``|c − r| ≤ atol + rtol·|r|``, with the tolerance of
the tier of the *arithmetic that produced the leaf* (``TOLERANCES``):

========  ===========  ===============================
tier      rtol         atol
========  ===========  ===============================
float64   1e-10        1e-12
float32   1e-5         1e-6 × max|reference leaf|
integer   0            0 (exact)
========  ===========  ===============================

The tier is the leaf's dtype, except where the leaf's values were computed in
float32 and merely *held* in float64 (``loss.item()``, ``float(loss)``,
``np.float64(x32)``, a float64 running total of float32 losses). float32 bits may
differ between frameworks and between CPUs (AVX2 vs AVX-512 kernels), so such a
leaf compared at the float64 tier passes or fails by luck. Two rules pick the
float32 tier for it (``LeafResult.tier`` and ``tier_reason`` record which applied):

- **declared**: ``compare(..., computed_in="float32")`` for every floating leaf, or
  ``computed_in={"running": "float32"}`` per leaf path (as the report prints it, or
  the bare key of a top-level dict). A key that names no leaf is an error.
  ``computed_in="float64"`` pins the float64 tier and turns detection off.
- **detected**: a float64 leaf whose finite values are, on *both* sides, exactly
  representable in float32, with at least one element on each side carrying more
  than ``ROUND_BITS`` (12) significant bits. A float64 computation almost never
  lands on a float32 value (odds 2⁻²⁹ per element) unless its result is a round
  number (6.0, 0.75, 3 ** 5: few significant bits), so genuine float64 results —
  including the lessons' exact values — keep the float64 tier; and because *both*
  sides must look float32, a candidate that silently computed in float32 against a
  float64 reference is still judged (and failed) at the float64 tier, with a hint.
  Detection skips a leaf zero in exact arithmetic: one at most ``ZERO_IN_EXACT``
  (1e-11) of the largest value among the reference's neighbouring leaves (a key
  projection's bias gradient: softmax ignores a shift shared by every key). Its
  float64 rounding noise (~1e-17) has few significant bits and can look float32; it
  keeps the float64 tier (``tier_reason`` ``"zero in exact arithmetic"``), where
  float32 noise (~1e-7 of the neighbours) would still be detected.

**float32 calibrated by the reference's own rounding.** ``compare(reference, candidate,
reference64=...)`` takes the reference computed again in float64 on the same values
(the float32 weights and inputs cast up: the exact answer the float32 run
approximates). A float32-tier leaf outside the tier against the float32 reference then
passes when the candidate is within the float32 tier of the float64 answer, or within
``CALIBRATION_MULTIPLE`` (5) times the float32 reference's own distance from it, both
measured in units of the tier (``headroom``). Two correct float32 computations sum in
different orders and either may round further; where the reference itself misses the
tier against float64 (a convolution's weight gradient that nearly cancels) the tier
cannot tell them apart, and the reference's own rounding is the measure. A leaf zero
in exact arithmetic (its float64 reference at most ``ZERO_IN_EXACT`` (1e-11) of its
neighbours' largest value: the bias of a convolution feeding BatchNorm) is float32
noise on both sides: its tolerance is scaled by its neighbours' magnitude, the scale of
that noise, instead of its own. ``LeafResult.rule`` says which rule passed a leaf.
Integer leaves of int32 against int64 compare by value when ``jax_enable_x64`` is off
(JAX then has no int64: ``num_batches_tracked``), and say so.

``rtol=0, atol=0`` asks for bit-identical leaves: the "within one framework" tier,
never valid between two frameworks for float32 results. float16/bfloat16 have no
policy tier: pass ``rtol`` and ``atol`` explicitly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
from typing import Any

import jax
import numpy as np

from jaxgrad._arrays import to_numpy
from jaxgrad._tiers import (  # noqa: F401  (re-exported: the policy's public names)
    BIT_IDENTICAL,
    CALIBRATION_MULTIPLE,
    ROUND_BITS,
    TOLERANCES,
    ZERO_IN_EXACT,
    Tolerance,
    all_finite,
    ambiguous_argmax,
    chunks,
    declared_tiers,
    float32_tolerance,
    headroom,
    leaf_tier,
    looks_float32,
    max_abs_finite,
    neighbour_scales,
    significant_bits,
    tolerance_for,
    zero_beside,
)

# ``LeafResult.rule``: which rule passed a leaf
RULE_TIER = "tier"
RULE_FLOAT64 = "float64 answer"
RULE_ROUNDING = "reference rounding"
RULE_ZERO = "zero in exact arithmetic"
RULE_INTEGER = "integer value"


@dataclasses.dataclass
class LeafResult:
    """One leaf's comparison: what ``compare`` checked and measured for one leaf path.

    The errors are in the leaf's own units (the values' units, not ulps or percent),
    computed in float64 over the elements whose reference value is finite (NaN and
    ±inf elements are compared by their masks, which must match exactly). A field
    that the comparison never reached (a shape or dtype mismatch stops it before the
    values) stays NaN or ``""``.

    Attributes:
      path: the leaf's path: a flat dict's own key (``"0.weight"``), else jax's
        ``keystr`` (``"['grads']['0.weight']"``), ``"<root>"`` for a bare array.
      shape: the reference's shape (``()`` for a ``None`` leaf).
      dtype: the reference's numpy dtype name (``"None"`` for a ``None`` leaf).
      max_abs_err: ``max |candidate − reference|``; 0.0 for an empty leaf or two
        ``None`` leaves; NaN when the values were not compared.
      max_rel_err: ``max |candidate − reference| / |reference|``; an element whose
        reference is exactly 0 counts ``inf`` if the candidate differs there (the
        ``atol`` term may still pass it) and 0 if not; NaN when not compared.
      rtol, atol: the tolerance applied, ``|c − r| ≤ atol + rtol·|r|`` per element;
        ``atol`` is absolute (the float32 tier's 1e-6 already multiplied by
        ``max|reference leaf|``); NaN when not reached.
      problem: None when the leaf passed, else why not: a shape, dtype, NaN-mask or
        infinity mismatch, a ``None`` on one side, or how many elements fell outside
        the tolerance with the worst one's two values.
      tier: the tolerance tier applied: a dtype name (``"float64"``, ``"float32"``,
        ``"int64"``…: integers and booleans compare exactly), or ``"explicit"`` when
        ``rtol`` and ``atol`` were passed; ``""`` when not reached.
      tier_reason: why that tier: ``"dtype"`` (the leaf's dtype), ``"declared"``
        (``computed_in``), ``"float32-exact values"`` (detected; module docstring) or
        ``"zero in exact arithmetic"`` (float64 noise around zero that looks float32,
        kept at the float64 tier); ``""`` for an explicit tolerance or when not reached.
      rule: which rule passed the leaf: ``"tier"`` (within its tolerance of the
        reference), and with ``reference64`` for a float32 leaf outside it:
        ``"float64 answer"`` (within the float32 tier of the float64 answer),
        ``"reference rounding"`` (within ``CALIBRATION_MULTIPLE`` times the float32
        reference's own distance from it) or ``"zero in exact arithmetic"`` (either,
        at its neighbours' scale); ``"integer value"`` for int32 against int64 with
        x64 off; ``""`` for a failed leaf.
      headroom: with ``reference64``, the candidate's ``max |c − r64| / tolerance`` in
        units of the float32 tier around the float64 answer (≤ 1: within it); NaN
        when not measured (no ``reference64``, or the leaf passed at the tier).
      reference_headroom: the same for the float32 reference: its own rounding.
      passed: (property) ``problem is None``.
    """

    path: str
    shape: tuple
    dtype: str
    max_abs_err: float = math.nan
    max_rel_err: float = math.nan
    rtol: float = math.nan
    atol: float = math.nan
    problem: str | None = None
    tier: str = ""  # the tolerance tier applied: a dtype name, or "explicit"
    tier_reason: str = ""  # "dtype", "declared", "float32-exact values", …; "" if none
    rule: str = ""  # which rule passed it ("tier", "float64 answer", …); "" if failed
    headroom: float = math.nan  # candidate vs the float64 answer, in float32 tiers
    reference_headroom: float = math.nan  # the float32 reference vs the float64 answer

    @property
    def passed(self) -> bool:
        return self.problem is None


@dataclasses.dataclass
class ParityReport:
    """Everything ``compare`` found; ``passed`` is True only if nothing differs.

    Attributes:
      leaves: one ``LeafResult`` per leaf path present on both sides, in the order
        the reference flattens (a dict's keys sorted, as ``jax.tree_util`` flattens).
      structure_problems: what differs in the trees themselves, as sentences: paths
        missing from the candidate, paths not in the reference, or nothing to compare.
        A path missing on one side has no ``LeafResult``.
      name: the label given to ``compare`` (a check's name in the parity report).
      passed: (property) no structure problem and every leaf passed.
      max_abs_err, max_rel_err: (properties) the largest of the leaves' errors,
        ignoring NaN (leaves not compared); NaN when no leaf has one. Units as in
        ``LeafResult``: a maximum over leaves of different magnitudes, so read
        ``max_rel_err`` for a scale-free summary (``inf`` when some reference
        element is exactly 0 and its candidate is not).
      dtypes: (property) the reference leaves' dtype names, sorted, comma-joined.
      failures(): the leaves that did not pass.
      table(): a per-leaf text table (path, shape, dtype with its tier when it differs,
        both errors, verdict; a leaf passed by another rule than the tier says which,
        with both headrooms), then the structure problems, then PASS or FAIL.
      to_dict(), to_json(): the same as plain data (NaN written as ``null``); each
        leaf with every field above, ``rtol``, ``atol`` and ``passed``.
    """

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
            rows.append(
                (
                    leaf.path,
                    "x".join(map(str, leaf.shape)) or "scalar",
                    _dtype_label(leaf),
                    _fmt(leaf.max_abs_err),
                    _fmt(leaf.max_rel_err),
                    _verdict(leaf),
                )
            )
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
                    "tier": leaf.tier,
                    "tier_reason": leaf.tier_reason,
                    "rule": leaf.rule,
                    "headroom": _json_float(leaf.headroom),
                    "reference_headroom": _json_float(leaf.reference_headroom),
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


def _verdict(leaf) -> str:
    if not leaf.passed:
        return f"FAIL: {leaf.problem}"
    if leaf.rule in ("", RULE_TIER):
        return "PASS"
    if leaf.rule == RULE_INTEGER:
        return "PASS (integer value: int32 against int64, x64 off)"
    return (
        f"PASS ({leaf.rule}: {_in_tiers(leaf.headroom)}x the float32 tier from float64, "
        f"reference {_in_tiers(leaf.reference_headroom)}x)"
    )


def _in_tiers(value: float) -> str:
    """A distance in units of the tier: two decimals, or two digits when below 0.01."""
    return f"{value:.2f}" if value >= 0.01 or value == 0 else f"{value:.1e}"


def _dtype_label(leaf) -> str:
    if leaf.tier and leaf.tier not in (leaf.dtype, "explicit") and leaf.dtype != "None":
        return f"{leaf.dtype} ({leaf.tier} tier)"
    return leaf.dtype


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
    """``{"path": leaf}`` for any pytree; a flat dict keeps its own keys as paths.

    Args:
      tree: any pytree; ``None`` is a leaf (torch's ``.grad`` of a frozen parameter).

    Returns:
      A flat dict: a flat ``{str: leaf}`` dict as it is, else jax's ``keystr`` of each
      leaf's path (``"['grads']['0.weight']"``; ``"<root>"`` for a bare array).
    """
    if (
        isinstance(tree, dict)
        and all(isinstance(k, str) for k in tree)
        and all(not isinstance(v, (dict, list, tuple)) for v in tree.values())
    ):
        return dict(tree)
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_none)
    return {jax.tree_util.keystr(path) or "<root>": leaf for path, leaf in leaves}


def _compare_leaf(
    path,
    reference,
    candidate,
    rtol,
    atol,
    declared=None,
    exact=None,
    neighbours: float = 0.0,
    own_neighbours=0.0,
) -> LeafResult:
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
        if _integers_without_x64(ref.dtype, cand.dtype):
            result.tier, result.tier_reason, result.rtol, result.atol = (
                ref.dtype.name,
                "dtype",
                0.0,
                0.0,
            )
            wide_ref, wide_cand = ref.astype(np.int64), cand.astype(np.int64)
            diff = np.abs(wide_ref - wide_cand).ravel()
            result.max_abs_err = float(diff.max()) if diff.size else 0.0
            result.max_rel_err = _max_finite(
                [0.0]
                + [
                    float(d / abs(r)) if r else (math.inf if d else 0.0)
                    for d, r in zip(diff, wide_ref.ravel())
                    if d
                ]
            )
            if diff.any():
                worst = int(np.argmax(diff))
                result.problem = (
                    f"{int((diff > 0).sum())}/{diff.size} integer values differ (compared by "
                    f"value: {cand.dtype.name} against {ref.dtype.name}, x64 off; worst: "
                    f"reference {wide_ref.ravel()[worst]}, candidate {wide_cand.ravel()[worst]})"
                )
            else:
                result.rule = RULE_INTEGER
            return result
        result.problem = f"dtype {cand.dtype.name} != reference {ref.dtype.name}"
        return result
    if rtol is None or atol is None:
        result.tier, result.tier_reason = leaf_tier(ref, cand, declared, own_neighbours)
        policy_rtol, policy_atol = tolerance_for(result.tier, ref)
        rtol = policy_rtol if rtol is None else rtol
        atol = policy_atol if atol is None else atol
    else:
        result.tier = "explicit"
    result.rtol, result.atol = rtol, atol
    if ref.dtype.kind == "b":
        ref, cand = ref.astype(np.int8), cand.astype(np.int8)
    errors = _Errors(ref, cand, rtol, atol)
    if errors.nan_counts is not None:
        result.problem = (
            f"NaN masks differ ({errors.nan_counts[0]} NaN in reference, "
            f"{errors.nan_counts[1]} in candidate)"
        )
        return result
    if errors.infinities_differ:
        result.problem = "infinities differ"
        return result
    if errors.size == 0:
        result.max_abs_err = result.max_rel_err = 0.0
        return result
    result.max_abs_err, result.max_rel_err = errors.max_abs, errors.max_rel
    zero = False
    if not errors.bad:
        result.rule = RULE_TIER
    elif exact is not None and result.tier == "float32":
        # the reference's finite elements, views where every element is (a large leaf)
        finite = None if all_finite(ref) else np.isfinite(ref).ravel()
        ref_kept, cand_kept, exact_kept = (
            a.reshape(-1) if finite is None else a.reshape(-1)[finite] for a in (ref, cand, exact)
        )
        zero = _calibrate(result, ref_kept, cand_kept, exact_kept, neighbours)
        if result.rule:
            return result
    if errors.bad:
        result.problem = (
            f"{errors.bad}/{errors.size} elements outside rtol={rtol:g}, atol={atol:.3g} "
            f"(worst: reference {errors.worst[0]:.17g}, candidate {errors.worst[1]:.17g})"
        )
        if result.tier == "float64" and declared is None:
            sides = [
                side
                for side, values in (("reference", ref), ("candidate", cand))
                if looks_float32(values)
            ]
            if len(sides) == 1:
                result.problem += (
                    f"; the {sides[0]}'s values are all float32 values: computed in float32 "
                    "while the other side computed in float64?"
                )
        if not math.isnan(result.headroom):
            where = " at its neighbours' scale (zero in exact arithmetic)" if zero else ""
            result.problem += (
                f"; against the float64 answer{where}: candidate {result.headroom:.3g}x the "
                f"float32 tier, reference {result.reference_headroom:.3g}x (passes within "
                f"max(1, {CALIBRATION_MULTIPLE:g} x reference))"
            )
    return result


class _Errors:
    """One leaf pair's elementwise comparison, read a chunk at a time (``chunks``): the
    NaN and infinity masks (NaN and ±inf must sit at the same elements), then over the
    reference's finite elements ``max |candidate − reference|``, the largest relative
    error, the count outside ``atol + rtol·|reference|`` and the worst of those.

    Attributes:
      nan_counts: ``(reference's NaN, candidate's NaN)`` where the masks differ, else None.
      infinities_differ: whether the ±inf masks differ.
      size: how many reference elements are finite.
      max_abs, max_rel: the largest absolute and relative error (relative: inf where
        the reference is 0 and the candidate is not).
      bad: how many elements lie outside the tolerance.
      worst: ``(reference, candidate)`` of the element furthest outside it (the first
        of equals), or NaNs when none is.
    """

    def __init__(self, ref: np.ndarray, cand: np.ndarray, rtol: float, atol: float):
        floating = ref.dtype.kind in "fc"
        nans = [0, 0]
        masks_differ = False
        self.infinities_differ = False
        self.size, self.bad, self.max_abs, self.max_rel = 0, 0, 0.0, 0.0
        self.worst: tuple[float, float] = (math.nan, math.nan)
        worst_excess = -math.inf
        for ref_part, cand_part in chunks(ref, cand):
            ref64 = ref_part.astype(np.float64)
            cand64 = cand_part.astype(np.float64)
            if floating:
                ref_nan, cand_nan = np.isnan(ref64), np.isnan(cand64)
                nans[0] += int(ref_nan.sum())
                nans[1] += int(cand_nan.sum())
                masks_differ = masks_differ or not np.array_equal(ref_nan, cand_nan)
                ref_inf, cand_inf = np.isinf(ref64), np.isinf(cand64)
                self.infinities_differ = self.infinities_differ or not (
                    np.array_equal(ref_inf & (ref64 > 0), cand_inf & (cand64 > 0))
                    and np.array_equal(ref_inf & (ref64 < 0), cand_inf & (cand64 < 0))
                )
                finite = np.isfinite(ref64)
                if not finite.all():
                    ref64, cand64 = ref64[finite], cand64[finite]
            if masks_differ or self.infinities_differ or not ref64.size:
                continue
            self.size += ref64.size
            abs_err = np.abs(cand64 - ref64)
            magnitude = np.abs(ref64)
            with np.errstate(divide="ignore", invalid="ignore"):
                rel_err = np.where(
                    magnitude > 0, abs_err / magnitude, np.where(abs_err > 0, np.inf, 0.0)
                )
            self.max_abs = max(self.max_abs, float(abs_err.max()))
            self.max_rel = max(self.max_rel, float(rel_err.max()))
            allowed = atol + rtol * magnitude
            bad = abs_err > allowed
            count = int(bad.sum())
            if count:
                self.bad += count
                excess = abs_err - allowed
                worst = int(np.argmax(excess))
                if excess[worst] > worst_excess:
                    worst_excess = float(excess[worst])
                    self.worst = (float(ref64[worst]), float(cand64[worst]))
        self.nan_counts = tuple(nans) if masks_differ else None


def _integers_without_x64(a: np.dtype, b: np.dtype) -> bool:
    """int32 against int64 (either side) while JAX has no 64-bit integers."""
    return (
        a.kind == b.kind == "i"
        and {a.itemsize, b.itemsize} == {4, 8}
        and jax.dtypes.canonicalize_dtype(np.int64) != np.int64
    )


def _calibrate(result: LeafResult, ref32, cand32, exact, neighbours: float) -> bool:
    """The float32 rule with the float64 answer ``exact`` (flat, the reference's finite
    elements): sets ``headroom``, ``reference_headroom`` and, when one of the rules
    passes the leaf, ``rule``. Returns whether the leaf is zero in exact arithmetic."""
    if not all_finite(exact) or not all_finite(cand32):
        return False
    scale = _zero_scale(exact, neighbours)
    zero = scale is not None
    result.headroom = headroom(cand32, exact, scale)
    result.reference_headroom = headroom(ref32, exact, scale)
    if result.headroom <= 1.0:
        result.rule = RULE_ZERO if zero else RULE_FLOAT64
    elif result.headroom <= CALIBRATION_MULTIPLE * result.reference_headroom:
        result.rule = RULE_ZERO if zero else RULE_ROUNDING
    return zero


def _copy(leaf):
    return None if leaf is None else np.array(to_numpy(leaf), copy=True)


_RECORDINGS: list = []  # the lists of open ``recording()`` blocks


@contextlib.contextmanager
def recording():
    """Record the leaves of every ``compare`` call made inside the block.

    A context manager: ``with recording() as calls: ...``. Used to check that each
    framework reproduces its own bits run after run (``leaf_digests``), which a
    comparison's verdict alone cannot show.

    Yields:
      A list that fills with one ``{"name", "reference", "candidate"}`` dict per
      ``compare`` call, each side ``{leaf path: numpy array}`` (copies).
    """
    calls: list = []
    _RECORDINGS.append(calls)
    try:
        yield calls
    finally:
        _RECORDINGS.remove(calls)


def leaf_digests(leaves: dict) -> dict:
    """``{path: sha256 of the leaf's dtype, shape and bytes}``; None leaves stay None.

    Args:
      leaves: ``{path: array}`` (numpy, jax or torch arrays, or None), as ``flatten``
        or ``recording`` give them.

    Returns:
      ``{path: hex digest}``: equal digests mean bit-identical leaves.
    """
    digests: dict[str, str | None] = {}
    for path, leaf in leaves.items():
        if leaf is None:
            digests[path] = None
            continue
        array = np.ascontiguousarray(to_numpy(leaf))
        header = f"{array.dtype.str}{array.shape}".encode()
        digests[path] = hashlib.sha256(header + array.tobytes()).hexdigest()
    return digests


def _key_paths(structure, flat: dict) -> dict:
    """``{path: tuple of keys}`` of ``flat = flatten(structure)``: where each leaf sits."""
    if isinstance(structure, dict) and list(flat) == list(structure):
        return {path: (path,) for path in flat}
    leaves, _ = jax.tree_util.tree_flatten_with_path(structure, is_leaf=_is_none)
    return {jax.tree_util.keystr(path) or "<root>": tuple(path) for path, _ in leaves}


def _own_scales(reference, flat: dict) -> dict:
    """``{path: neighbours' scale}`` of the reference's own float64 leaves (for
    ``leaf_tier``: a leaf zero in exact arithmetic keeps the float64 tier)."""
    magnitudes = {}
    for path, leaf in flat.items():
        if leaf is None:
            continue
        value = to_numpy(leaf)
        if value.dtype == np.float64:
            magnitudes[path] = max_abs_finite(value)
    if len(magnitudes) < 2:
        return {}
    return neighbour_scales(_key_paths(reference, flat), magnitudes)


def _float64_answer(reference64, paths) -> tuple[dict, dict]:
    """``({path: float64 leaf}, {path: neighbours' scale})`` of ``compare``'s
    ``reference64``, keyed as ``flatten`` keys the reference."""
    flat = flatten(reference64)
    keys = _key_paths(reference64, flat)
    exact, magnitudes = {}, {}
    for path, leaf in flat.items():
        if leaf is None:
            continue
        value = to_numpy(leaf)
        if value.dtype.kind != "f":
            continue
        if value.dtype != np.float64:
            raise ValueError(
                f"`reference64` leaf {path} is {value.dtype.name}; it must hold the float64 "
                "answer (the reference computed in float64 on the same values)."
            )
        exact[path] = value
        magnitudes[path] = max_abs_finite(value)
    unknown = [p for p in exact if p not in paths]
    if exact and len(unknown) == len(exact):
        raise ValueError(
            f"`reference64` shares no leaf path with the reference (its paths: "
            f"{', '.join(list(exact)[:4])}…; the reference's: {', '.join(list(paths)[:4])}…)."
        )
    return exact, neighbour_scales(keys, magnitudes)


def _zero_scale(exact: np.ndarray, neighbours: float) -> float | None:
    """``neighbours`` when ``exact`` (a float64 answer) is zero in exact arithmetic
    beside them (``ZERO_IN_EXACT``), else None (the leaf's own scale)."""
    return neighbours if zero_beside(exact, neighbours) else None


def rounding(values, reference64) -> dict:
    """How far each float32 leaf lies from the float64 answer, in units of the float32
    tier: ``{path: headroom}`` (``headroom``: ≤ 1 within the tier), a leaf zero in
    exact arithmetic measured at its neighbours' scale, as ``compare`` does with
    ``reference64``. Applied to the float32 reference itself, it measures the reference's
    own rounding: how much of the tier is already used before any port.

    Args:
      values: a pytree of float32 results (torch tensors, numpy or jax arrays).
      reference64: the same computation in float64 on the same values, the same
        structure (or any part of it).

    Returns:
      ``{leaf path: float}`` over the floating leaves on both sides, keyed as
      ``flatten`` keys ``values``; ``inf`` where a value is not finite and its
      answer is, or the shapes differ.

    Raises:
      ValueError: a ``reference64`` as ``compare`` refuses it.
    """
    flat = flatten(values)
    exact, scales = _float64_answer(reference64, flat)
    found = {}
    for path, answer in exact.items():
        if flat.get(path) is None:
            continue
        value = to_numpy(flat[path]).astype(np.float64)
        finite = np.isfinite(answer)
        if value.shape != answer.shape:
            found[path] = math.inf
            continue
        kept = answer[finite]
        found[path] = headroom(value[finite], kept, _zero_scale(kept, scales.get(path, 0.0)))
    return found


def compare(
    reference,
    candidate,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    computed_in=None,
    reference64=None,
    name: str = "",
) -> ParityReport:
    """Compare ``candidate`` against ``reference``, structure first, then each leaf.

    Args:
      reference: the trusted pytree (usually torch's values).
      candidate: the pytree under test (usually jaxgrad's).
      rtol: override the policy's relative tolerance for every leaf (with ``atol``;
        both 0 asks for bit-identical values). None takes each leaf's tier from the
        policy.
      atol: override the policy's absolute tolerance for every leaf, as ``rtol``.
      computed_in: the precision the leaves were *computed* in, where it differs from
        the dtype holding them: ``"float32"`` for every floating leaf, or
        ``{leaf path: "float32"}``; ``"float64"`` pins the float64 tier (no
        detection). See the module docstring.
      reference64: the reference computed in float64 on the same values (a pytree of
        ``reference``'s structure, or any part of it; its floating leaves float64).
        A float32-tier leaf outside the tier against ``reference`` then passes when
        the candidate lies within the float32 tier of this float64 answer, or within
        ``CALIBRATION_MULTIPLE`` times ``reference``'s own distance from it (module
        docstring); ``LeafResult.rule`` says which. None: the tier alone.
      name: a label carried into the report.

    Returns:
      A ``ParityReport``. Nothing is raised for a mismatch; see ``assert_parity``.

    Raises:
      ValueError: a ``computed_in`` that names no leaf or no tier, or declares float64
        for a float32 leaf; a ``reference64`` whose floating leaves are not float64,
        that shares no leaf path with ``reference``, or whose leaf has another shape.
    """
    ref_leaves = flatten(reference)
    cand_leaves = flatten(candidate)
    for calls in _RECORDINGS:
        calls.append(
            {
                "name": name,
                "reference": {p: _copy(v) for p, v in ref_leaves.items()},
                "candidate": {p: _copy(v) for p, v in cand_leaves.items()},
            }
        )
    declared = declared_tiers(computed_in, list(ref_leaves))
    structure = []
    missing = [p for p in ref_leaves if p not in cand_leaves]
    extra = [p for p in cand_leaves if p not in ref_leaves]
    if missing:
        structure.append(f"missing from candidate: {', '.join(missing)}")
    if extra:
        structure.append(f"not in reference: {', '.join(extra)}")
    if not ref_leaves and not cand_leaves:
        # an empty comparison proves nothing; it is usually a check that lost its data
        structure.append("nothing to compare: reference and candidate have no leaves")
    exact, scales = ({}, {}) if reference64 is None else _float64_answer(reference64, ref_leaves)
    own = functools.cache(lambda: _own_scales(reference, ref_leaves))  # only where needed
    for path, value in exact.items():
        ref = ref_leaves.get(path)
        if ref is not None and tuple(np.shape(to_numpy(ref))) != value.shape:
            raise ValueError(
                f"`reference64` leaf {path} has shape {value.shape}, the reference's "
                f"{tuple(np.shape(to_numpy(ref)))}: it must be the same computation in float64."
            )
    leaves = [
        _compare_leaf(
            path,
            ref_leaves[path],
            cand_leaves[path],
            rtol,
            atol,
            declared.get(path),
            exact.get(path),
            scales.get(path, 0.0),
            lambda path=path: own().get(path, 0.0),
        )
        for path in ref_leaves
        if path in cand_leaves
    ]
    for leaf in leaves:
        if leaf.passed and not leaf.rule:
            leaf.rule = RULE_TIER  # two None leaves, or an empty one
    return ParityReport(leaves=leaves, structure_problems=structure, name=name)


def assert_parity(
    reference,
    candidate,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    computed_in=None,
    reference64=None,
    name: str = "",
) -> ParityReport:
    """``compare`` and raise ``AssertionError`` with the per-leaf table on any failure.

    Args:
      reference: the trusted pytree (usually torch's values).
      candidate: the pytree under test (usually jaxgrad's).
      rtol: as ``compare``: None takes each leaf's tier from the policy.
      atol: as ``compare``.
      computed_in: as ``compare``: the precision the leaves were computed in.
      reference64: as ``compare``: the reference computed in float64, which
        calibrates the float32 verdicts.
      name: a label carried into the report and the error.

    Returns:
      The ``ParityReport``, when everything passed.

    Raises:
      AssertionError: any structure problem or failing leaf; the message is the
        report's per-leaf table.
      ValueError: a bad ``computed_in`` or ``reference64``, as ``compare``.
    """
    report = compare(
        reference,
        candidate,
        rtol=rtol,
        atol=atol,
        computed_in=computed_in,
        reference64=reference64,
        name=name,
    )
    if not report.passed:
        raise AssertionError("parity check failed\n" + report.table())
    return report


__all__ = [
    "ambiguous_argmax",
    "BIT_IDENTICAL",
    "CALIBRATION_MULTIPLE",
    "LeafResult",
    "ParityReport",
    "ROUND_BITS",
    "TOLERANCES",
    "Tolerance",
    "ZERO_IN_EXACT",
    "assert_parity",
    "compare",
    "flatten",
    "float32_tolerance",
    "headroom",
    "leaf_digests",
    "leaf_tier",
    "looks_float32",
    "recording",
    "rounding",
    "significant_bits",
    "tolerance_for",
]
