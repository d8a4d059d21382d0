"""The tolerance tiers of the parity policy and how a leaf's tier is chosen.

``TOLERANCES`` is the one tolerance table; ``tolerance_for`` turns a tier into
``(rtol, atol)``; ``leaf_tier`` picks the tier of the arithmetic that produced a leaf
(declared with ``computed_in``, or detected from float32 values held in float64 —
the rule is stated in ``jaxgrad.parity``'s docstring); ``ambiguous_argmax`` marks the
rows whose argmax a tier cannot decide. Re-exported by ``jaxgrad.parity``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxgrad._arrays import to_numpy


class Tolerance(NamedTuple):
    """One tier of the parity policy: an element passes when
    ``|candidate − reference| ≤ atol + rtol·|reference|``.

    Attributes:
      rtol: relative to ``|reference|``, elementwise.
      atol: absolute; for float32 a multiple of ``max|reference leaf|``.
      atol_scaled: True when ``atol`` is multiplied by ``max|reference leaf|``.
    """

    rtol: float  # relative to |reference| elementwise
    atol: float  # absolute; for float32 a multiple of max|reference|
    atol_scaled: bool  # True when atol is multiplied by max|reference leaf|


TOLERANCES = {
    "float64": Tolerance(rtol=1e-10, atol=1e-12, atol_scaled=False),
    "float32": Tolerance(rtol=1e-5, atol=1e-6, atol_scaled=True),
}
"""The tiers by dtype name: float64 rtol 1e-10, atol 1e-12; float32 rtol 1e-5, atol
1e-6 × max|reference leaf|. Integer and bool leaves are compared exactly."""
BIT_IDENTICAL = dict(rtol=0.0, atol=0.0)
"""``compare(..., **BIT_IDENTICAL)``: bit-identical values, for two runs within one
framework only (checkpointed vs plain gradients, frozen parameters)."""
# A float64 leaf is "round" (a value any precision can produce exactly, such as 6.0
# or 0.375) when no element has more than this many significant bits; see the module
# docstring. A float32 result has up to 24; a float64 one, 53.
ROUND_BITS = 12
"""Significant bits above which a float64 leaf holding only float32 values is judged
at the float32 tier (``looks_float32``); rounder values keep the float64 tier."""


def tolerance_for(dtype, reference: np.ndarray | None = None) -> tuple[float, float]:
    """``(rtol, atol)`` the parity policy gives a leaf of ``dtype``.

    Args:
      dtype: the leaf's dtype (anything ``np.dtype`` takes).
      reference: the reference leaf, whose ``max|reference|`` (finite elements) scales
        the float32 tier's ``atol``; None or empty scales it by 0.

    Returns:
      ``(rtol, atol)``, ``atol`` already scaled; ``(0, 0)`` for integer and bool dtypes.

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
        atol = tier.atol * (0.0 if reference is None else max_abs_finite(reference))
    return tier.rtol, atol


CHUNK = 1 << 20
"""Elements a comparison reads at a time (``chunks``): its temporaries (float64 copies,
errors, masks: about ten) are chunks of 8 MB, not copies of the leaf. Measured on
torchvision's vgg11 (one 102M-element float64 weight): comparing its gradients whole
took 7 GB beside the two 1 GB trees compared."""


def chunks(*arrays: np.ndarray):
    """``(part, part, …)`` of ``arrays`` (one shape) flattened, ``CHUNK`` elements at a
    time: views where an array is contiguous."""
    flat = [np.asarray(a).reshape(-1) for a in arrays]
    size = flat[0].size if flat else 0
    for start in range(0, size, CHUNK):
        yield tuple(a[start : start + CHUNK] for a in flat)


def all_finite(values) -> bool:
    """Whether every element of ``values`` is finite, read a chunk at a time."""
    return all(bool(np.isfinite(part).all()) for (part,) in chunks(values))


def max_abs_finite(values) -> float:
    """``max |values|`` over the finite elements (0.0 when there are none), read a chunk
    at a time (``chunks``)."""
    largest = 0.0
    for (part,) in chunks(values):
        magnitude = np.abs(part)
        finite = np.isfinite(magnitude)
        if not finite.all():
            magnitude = magnitude[finite]
        if magnitude.size:
            largest = max(largest, float(magnitude.max()))
    return largest


def significant_bits(values: np.ndarray) -> np.ndarray:
    """Significant bits of each finite float64 element (0 for zero): 6.0 → 2, 0.1 → 53.

    Args:
      values: an array of any shape, read as float64.

    Returns:
      An int64 array of ``values``' shape.
    """
    values = np.asarray(values, dtype=np.float64)
    mantissa, _ = np.frexp(np.abs(values))  # in [0.5, 1): 53 bits scaled below 1
    integer = (mantissa * 2.0**53).astype(np.int64)
    lowest = integer & -integer  # the lowest set bit
    with np.errstate(divide="ignore"):
        bits = 53 - np.log2(np.where(lowest > 0, lowest, 1)).astype(np.int64)
    return np.where(integer > 0, bits, 0)


def looks_float32(values: np.ndarray) -> bool:
    """True when every finite element is a float32 value and one has > ``ROUND_BITS`` bits.

    That is what a float32 result up-cast to float64 looks like, and almost never
    what a float64 computation produces (see the module docstring).

    Args:
      values: an array of any shape; anything but float64 gives False.

    Returns:
      A Python bool (False when no element is finite).
    """
    values = np.asarray(values)
    if values.dtype != np.float64:
        return False
    bits = -1  # no finite element yet
    for (part,) in chunks(values):  # a chunk at a time: no copy of a large leaf
        finite = np.isfinite(part)
        if not finite.all():
            part = part[finite]
        if not part.size:
            continue
        with np.errstate(over="ignore"):
            if not np.array_equal(part.astype(np.float32).astype(np.float64), part):
                return False
        bits = max(bits, int(np.max(significant_bits(part))))
    return bits > ROUND_BITS


def leaf_tier(
    reference: np.ndarray,
    candidate: np.ndarray,
    declared: str | None = None,
    neighbours=0.0,
) -> tuple[str, str]:
    """``(tier, reason)``: the policy tier of one leaf pair (module docstring).

    Args:
      reference: the reference leaf.
      candidate: the candidate leaf, of the reference's dtype.
      declared: ``"float32"``/``"float64"`` from ``computed_in``, or None.
      neighbours: the largest magnitude among the reference's neighbouring leaves
        (``neighbour_scales``; 0.0: none), or a function of no arguments returning
        it (called only where detection would pick float32). A float64 leaf at most
        ``ZERO_IN_EXACT`` of it is zero in exact arithmetic: its values are float64
        rounding noise (~1e-17 of its neighbours), whose few significant bits can
        make it look float32, so detection is skipped and the leaf keeps the float64
        tier (reason ``ZERO_REASON``). float32 noise is ~1e-7 of the neighbours, far
        above the bound: a float32 result held in float64 is still detected.
    """
    dtype = np.dtype(reference.dtype)
    if dtype.kind not in "fc" or declared is None and dtype.name != "float64":
        return dtype.name, "dtype"
    if declared is not None:
        if np.dtype(declared).itemsize > dtype.itemsize:
            raise ValueError(
                f"`computed_in` declares a {declared} computation for a leaf held in "
                f"{dtype.name}, which cannot hold its bits; declare {dtype.name} or less."
            )
        return np.dtype(declared).name, "declared"
    if looks_float32(reference) and looks_float32(candidate):
        if zero_beside(reference, neighbours() if callable(neighbours) else neighbours):
            return "float64", ZERO_REASON
        return "float32", "float32-exact values"
    return "float64", "dtype"


ZERO_REASON = "zero in exact arithmetic"
"""``leaf_tier``'s reason for a float64 leaf that looks float32 but is rounding noise
around zero beside its neighbours: it keeps the float64 tier."""


def zero_beside(reference: np.ndarray, neighbours: float) -> bool:
    """True when ``reference``'s largest finite magnitude is at most ``ZERO_IN_EXACT``
    of ``neighbours`` (> 0): a leaf zero in exact arithmetic beside them."""
    own = max_abs_finite(reference)
    return 0.0 < neighbours and own <= ZERO_IN_EXACT * neighbours


def declared_tiers(computed_in, paths) -> dict:
    """``{leaf path: declared dtype name}`` from ``compare``'s ``computed_in``."""
    if computed_in is None:
        return {}
    if not isinstance(computed_in, dict):
        return {path: _tier_name(computed_in, "computed_in") for path in paths}
    declared = {}
    for key, dtype in computed_in.items():
        matches = [p for p in paths if p == key or p == f"[{key!r}]"]
        if not matches:
            raise ValueError(
                f"`computed_in` names {key!r}, which is not a leaf path of the reference "
                f"(leaf paths: {', '.join(paths) or 'none'})."
            )
        for path in matches:
            declared[path] = _tier_name(dtype, f"computed_in[{key!r}]")
    return declared


def _tier_name(dtype, what: str) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in TOLERANCES:
        raise ValueError(f"`{what}` (={dtype!r}) must be one of {', '.join(TOLERANCES)}.")
    return name


def ambiguous_argmax(logits, dtype=None) -> np.ndarray:
    """Rows of `(n, classes)` reference logits whose argmax the tier cannot decide.

    Two results that agree at the tier of ``dtype`` (default: the logits' own) may
    still pick different classes where the top two logits are closer than the
    tolerance lets each move: ``top − second ≤ 2·(atol + rtol·|top|)``. An accuracy
    computed from another framework's (or another CPU's) logits may differ from the
    reference's by at most these rows, so compare accuracies as counts that differ by
    no more than ``ambiguous_argmax(logits).sum()``, never by ``==`` luck.

    Args:
      logits: the reference logits, `(n, classes)`.
      dtype: the tier to judge at (default: the logits' dtype).

    Returns:
      A boolean mask `(n,)`.

    Raises:
      ValueError: ``logits`` that are not `(n, classes)`.
    """
    logits = to_numpy(logits)
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"`logits` must have shape (n, classes); got {tuple(logits.shape)}.")
    rtol, atol = tolerance_for(logits.dtype if dtype is None else dtype, logits)
    if logits.shape[1] == 1:
        return np.zeros(len(logits), bool)
    top_two = -np.sort(-logits.astype(np.float64), axis=1)[:, :2]
    gap = top_two[:, 0] - top_two[:, 1]
    return gap <= 2 * (atol + rtol * np.abs(top_two[:, 0]))


# ---- float32 verdicts calibrated by the reference's own rounding (``compare(...,
# reference64=...)``; the rule is stated in ``jaxgrad.parity``'s docstring and measured
# in docs/parity.md, "float32 calibrated by the reference's own rounding").
CALIBRATION_MULTIPLE = 5.0
"""How much farther from the float64 answer than the float32 reference's own rounding
a float32 candidate leaf may lie (both in units of the float32 tier) and still pass,
where it misses the tier. Measured (docs/parity.md, ``scripts/float32_calibration.py``):
where a correct float32 computation of a leaf misses the tier of the float64 answer
(torch itself in another summation order, or jaxgrad), it lies up to 3.88x farther
from it than torch's default kernels on the same leaf (resnet18, swin_t, an AdamW
trajectory): the reference's own distance is one sample, small by luck on some leaves.
5 leaves a margin."""
ZERO_IN_EXACT = 1e-11
"""A float32 leaf whose float64 reference is at most this fraction of its neighbours'
largest value (``neighbour_scales``) is zero in exact arithmetic (a conv bias feeding
BatchNorm: float64 gives ~1e-16 of the weights' scale, float32 ~1e-7): its tolerance
is scaled by its neighbours' magnitude, the scale of its float32 noise, not its own.
A float64 leaf at most this fraction of its neighbours keeps the float64 tier even where
its values look float32 (``leaf_tier``): that is float64 noise around zero."""


def float32_tolerance(reference64: np.ndarray, scale: float | None = None) -> np.ndarray:
    """The float32 tier's allowed error per element around the float64 answer:
    ``1e-6·scale + 1e-5·|reference64|``.

    Args:
      reference64: the float64 answer, any shape (finite values).
      scale: the magnitude scaling ``atol``; default ``max|reference64|``.

    Returns:
      A float64 array of ``reference64``'s shape, strictly positive.
    """
    exact = np.asarray(reference64, np.float64)
    tier = TOLERANCES["float32"]
    if scale is None:
        scale = max_abs_finite(exact)
    return np.maximum(tier.atol * scale + tier.rtol * np.abs(exact), np.finfo(np.float64).tiny)


def headroom(values, reference64, scale: float | None = None) -> float:
    """``max |values − reference64| / float32_tolerance(reference64, scale)``: how far
    a float32 result lies from the float64 answer, in units of the float32 tier
    (≤ 1: within it). ``inf`` when the shapes differ or either side is not finite.

    Args:
      values: the float32 result, any shape.
      reference64: the float64 answer on the same values, ``values``' shape.
      scale: as ``float32_tolerance``.

    Returns:
      A Python float; 0.0 for empty arrays.
    """
    values, exact = np.asarray(values), np.asarray(reference64)
    if values.shape != exact.shape or not (all_finite(values) and all_finite(exact)):
        return float("inf")
    if scale is None:
        scale = max_abs_finite(exact)
    worst = 0.0
    for part, answer in chunks(values, exact):  # a chunk at a time: no copy of the leaf
        answer = answer.astype(np.float64)
        error = np.abs(part.astype(np.float64) - answer) / float32_tolerance(answer, scale)
        worst = max(worst, float(np.max(error)))
    return worst


def neighbour_scales(paths, magnitudes: dict) -> dict:
    """``{path: neighbours' scale}``: for each floating leaf, the largest magnitude among
    the other leaves under its nearest ancestor that has any (its siblings first: the
    other gradients of one model, the other fields of one optimizer state), counting
    only leaves that are not themselves zero in exact arithmetic (more than
    ``ZERO_IN_EXACT`` of the largest magnitude of all); 0.0 when there are none.

    Args:
      paths: ``{path: tuple of keys}`` (jax key paths of the leaves).
      magnitudes: ``{path: max|value|}`` of the floating leaves (a subset of ``paths``).
    """
    top = max(magnitudes.values(), default=0.0)
    live = [p for p, m in magnitudes.items() if m > ZERO_IN_EXACT * top]
    scales = {}
    for path in magnitudes:
        keys = paths[path]
        scale = 0.0
        for depth in range(len(keys) - 1, -1, -1):
            others = [
                magnitudes[p]
                for p in live
                if p != path and tuple(paths[p][:depth]) == tuple(keys[:depth])
            ]
            if others:
                scale = max(others)
                break
        scales[path] = scale
    return scales
