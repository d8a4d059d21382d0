"""Per-layer errors in two modes, and the checks that the port lines up with torch.

Errors are measured against torch's values at the tier of torch's dtype
(``jaxgrad.parity``): a layer *exceeds the tier* when ``jaxgrad.parity.compare``
fails on its output (and, in training mode, on its updated buffers). For a float32
torch module the comparison takes torch's float64 run as ``reference64``
(``jaxgrad.doctor.calibrate``): a layer torch's own float32 rounding puts outside the
tier passes when the port is as close to the float64 answer (``LeafResult.rule``).
Integer leaves (pooling indices) compare by value across int32/int64 (``compare``).
The number shown is the largest absolute difference (``inf`` for a shape, dtype-kind
or NaN mask mismatch).

- *end to end*: the port run on the example input, each layer on its own
  predecessor's output, so errors made earlier are carried in;
- *injected*: each port layer fed the torch layer's own input, so the error is the
  layer's own.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxgrad.parity import compare


def _flat(value, prefix="out"):
    if isinstance(value, (tuple, list)):
        out = {}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}.{i}"))
        return out
    if value is None:
        return {}
    return {prefix: np.asarray(value)}


def error(reference, candidate) -> float:
    """Largest absolute difference of two output trees (``inf`` if they don't line up)."""
    ref, cand = _flat(reference), _flat(candidate)
    if ref.keys() != cand.keys():
        return math.inf
    worst = 0.0
    for k, r in ref.items():
        c = cand[k]
        if r.shape != c.shape:
            return math.inf
        if r.dtype == np.bool_ or c.dtype == np.bool_:
            worst = max(worst, float(np.any(r != c)))
            continue
        r64, c64 = r.astype(np.float64), c.astype(np.float64)
        if not np.array_equal(np.isnan(r64), np.isnan(c64)):
            return math.inf
        finite = np.isfinite(r64) & np.isfinite(c64)
        if not np.array_equal(r64[~finite], c64[~finite], equal_nan=True):
            return math.inf
        if finite.any():
            worst = max(worst, float(np.max(np.abs(r64[finite] - c64[finite]))))
    return worst


def _float64_leaves(reference, flat64: dict) -> dict:
    """The float64 answer's leaves that line up with the float32 reference's (same
    name and shape, floating on both sides): ``compare``'s ``reference64``."""
    return {
        k: v
        for k, v in flat64.items()
        if k in reference
        and v.dtype == np.float64
        and np.asarray(reference[k]).dtype == np.float32
        and v.shape == reference[k].shape
    }


def comparison(
    reference,
    candidate,
    ref_buffers=None,
    cand_buffers=None,
    *,
    prefix: str = "out",
    reference64=None,
    buffers64=None,
):
    """``jaxgrad.parity.compare`` of two output trees (and buffers, as ``buffer.NAME``
    leaves) at the tier of the reference's dtype; the leaves are named ``out``,
    ``out.0``, … after ``prefix``. ``reference64`` (and ``buffers64``): torch's float64
    run of the same call, the same structure: the float32 leaves are then judged with
    the calibrated float32 rule (``compare``'s ``reference64``)."""
    ref, cand = _flat(reference, prefix), _flat(candidate, prefix)
    if ref_buffers:
        ref.update({f"buffer.{k}": np.asarray(v) for k, v in ref_buffers.items()})
        cand.update({f"buffer.{k}": np.asarray(v) for k, v in (cand_buffers or {}).items()})
    exact = None
    if reference64 is not None:
        flat64 = _flat(reference64, prefix)
        flat64.update({f"buffer.{k}": np.asarray(v) for k, v in (buffers64 or {}).items()})
        exact = _float64_leaves(ref, flat64) or None
    return compare(ref, cand, reference64=exact)


def within_tier(
    reference, candidate, ref_buffers=None, cand_buffers=None, *, reference64=None
) -> bool:
    """Whether ``comparison`` passes (calibrated by ``reference64`` where given)."""
    return comparison(
        reference, candidate, ref_buffers, cand_buffers, reference64=reference64
    ).passed


def layer_comparison(ref_call, output, new_buffers, train: bool, answer64=None):
    """``(error, exceeds, report)`` of one port call against torch's call: the largest
    absolute difference (``inf`` when the trees or buffers do not line up), whether
    it leaves the tier, and the per-leaf ``ParityReport`` that decides it.
    ``answer64``: ``(output, buffers)`` of torch's float64 run of the call
    (``jaxgrad.doctor.calibrate``), calibrating the float32 verdict."""
    err = error(ref_call.output, output)
    ref_bufs = {}
    if train:
        ref_bufs = dict(ref_call.buffers)  # num_batches_tracked: int32 vs int64 by value
        for k, v in ref_bufs.items():
            err = max(err, error(v, new_buffers.get(k)) if k in new_buffers else math.inf)
    cand_bufs = {k: new_buffers[k] for k in ref_bufs if k in new_buffers}
    out64, bufs64 = answer64 if answer64 is not None else (None, None)
    report = comparison(
        ref_call.output,
        output,
        ref_bufs,
        cand_bufs,
        reference64=out64,
        buffers64={k: v for k, v in (bufs64 or {}).items() if k in ref_bufs},
    )
    if len(cand_bufs) != len(ref_bufs):  # a missing buffer: the report lists it too
        return math.inf, True, report
    return err, not report.passed, report


def layer_error(ref_call, output, new_buffers, train: bool, answer64=None) -> tuple[float, bool]:
    """``(error, exceeds)`` of one port call against torch's call (``answer64``: as
    ``layer_comparison``)."""
    err, exceeds, _ = layer_comparison(ref_call, output, new_buffers, train, answer64)
    return err, exceeds


def rules(report) -> str:
    """The rules other than the tier that passed leaves of a ``ParityReport`` (or its
    ``to_dict()``), in words with their headrooms (``""`` when every leaf passed at the
    tier): ``"out: reference rounding (3.1x the float32 tier from float64, torch 1.2x)"``."""
    leaves = (
        report["leaves"]
        if isinstance(report, dict)
        else [dataclasses.asdict(leaf) for leaf in report.leaves]
    )
    parts = []
    for leaf in leaves:
        rule = leaf.get("rule") or ""
        if not leaf.get("passed", leaf.get("problem") is None) or rule in ("", "tier"):
            continue
        text = f"{leaf['path']}: {rule}"
        own, torch_own = leaf.get("headroom"), leaf.get("reference_headroom")
        if (
            own is not None
            and torch_own is not None
            and not (math.isnan(own) or math.isnan(torch_own))
        ):
            text += f" ({own:.2g}x the float32 tier from float64, torch {torch_own:.2g}x)"
        parts.append(text)
    return "; ".join(parts)


def check_params(torch_shapes: dict, port_params: dict) -> None:
    """Raise a ValueError listing unmatched parameter names on both sides, with a
    suggestion by shape for each."""
    port_shapes = {k: tuple(np.shape(v)) for k, v in port_params.items()}
    only_torch = [k for k in torch_shapes if k not in port_shapes]
    only_port = [k for k in port_shapes if k not in torch_shapes]
    if not only_torch and not only_port:
        return

    def suggest(name, shape, pool):
        same = [k for k in pool if pool[k] == shape or pool[k] == shape[::-1]]
        return f"{name} {shape}" + (f" (same shape: {', '.join(same[:3])}?)" if same else "")

    lines = []
    if only_port:
        lines.append(
            "port params torch does not have: "
            + "; ".join(
                suggest(k, port_shapes[k], {t: torch_shapes[t] for t in only_torch})
                for k in only_port
            )
        )
    if only_torch:
        lines.append(
            "torch params the port does not have: "
            + "; ".join(
                suggest(k, torch_shapes[k], {p: port_shapes[p] for p in only_port})
                for k in only_torch
            )
        )
    raise ValueError(
        "diagnose: the port's parameter names do not match torch's. " + ". ".join(lines) + "."
    )


def check_layers(torch_calls, port_keys) -> None:
    """Raise a ValueError when a port layer has no torch twin, or when the shared
    layers run in a different order. ``port_keys``: ``[(path, call index), ...]``."""
    torch_keys = [(c.path, c.index) for c in torch_calls]
    known = set(torch_keys)
    missing = [f"{p}" + (f" (call {i})" if i else "") for p, i in port_keys if (p, i) not in known]
    if missing:
        torch_paths = sorted({c.path for c in torch_calls})
        raise ValueError(
            "diagnose: port layers with no torch module of the same path: "
            f"{', '.join(missing)}; torch's modules are {', '.join(torch_paths)}."
        )
    # torch records calls as they finish (children before parents); leaves only
    leaves = [k for k in torch_keys if k in set(port_keys)]
    rank = {k: i for i, k in enumerate(leaves)}
    order = [rank[k] for k in port_keys]
    for a, b, (pa, _), (pb, _) in zip(order, order[1:], port_keys, port_keys[1:]):
        if b < a:
            raise ValueError(
                f"diagnose: layers run in a different order: the port runs {pa!r} before "
                f"{pb!r}, torch runs {pb!r} first. Match layers by the torch module path and "
                "the order of the forward."
            )
