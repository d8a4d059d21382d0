"""Training drift: the first step where two runs' parameters leave the tier, and why.

``training_drift(reference, port)`` takes two recorded runs, each a list of steps
``{"params": {...}, "output": ..., "grads": {...}}`` (params *before* the step, the
forward's output or loss, the gradients), plus the params after the last step as a
final ``{"params": ...}`` entry. At the first step ``k`` whose params after the step
(``params`` of entry ``k+1``) leave the tier while the params before it were within,
the cause is the first of: the forward (``output`` differs), the gradient (``grads``
differ), else the update (same gradients, different new params: the optimizer).

A float32 reference run may come with the same run recorded in float64
(``reference64``: the reference's model and optimizer made float64, started from the
same float32 values cast up, on the same batches). Each float32 step is then judged
with ``jaxgrad.parity.compare(..., reference64=...)``: a step the port takes within
the tier of the float64 run, or within ``CALIBRATION_MULTIPLE`` times the float32
reference's own distance from it, is not drift (AdamW's float32 trajectories leave the
tier of each other from step 1 while both follow the float64 one).
"""

from __future__ import annotations

import dataclasses

from jaxgrad.doctor.localise import error, within_tier


@dataclasses.dataclass
class DriftReport:
    """What ``training_drift`` found; ``str(report)`` prints the per-step errors and
    the verdict.

    Attributes:
      step: 0-based index of the step whose update left the tier; None when the runs
        stay within it.
      cause: ``"forward"``, ``"gradient"`` or ``"update"`` (None with ``step``).
      errors: per recorded entry, the largest absolute error of the params.
    """

    step: int | None  # 0-based index of the step whose update left the tier
    cause: str | None  # "forward", "gradient" or "update"
    errors: list  # per recorded entry, max abs error of the params

    def __str__(self):
        lines = ["  step  params max abs error"]
        lines += [f"  {i:>4}  {e:.2g}" for i, e in enumerate(self.errors)]
        if self.step is None:
            lines.append("verdict: the runs stay within the tier.")
        else:
            what = {
                "forward": "the forward pass (the outputs differ from identical params)",
                "gradient": "the gradient (same outputs, different gradients)",
                "update": "the optimizer update (same gradients, different new params: "
                "run diagnose_optimizer)",
            }[self.cause]
            lines.append(
                f"verdict: the params leave the tier after step {self.step}; caused by {what}."
            )
        return "\n".join(lines)


def _items(tree):
    return [tree[k] for k in sorted(tree)] if isinstance(tree, dict) else tree


def training_drift(reference: list, port: list, *, reference64: list | None = None) -> DriftReport:
    """The first step where two recorded runs' parameters leave the tier, and why.

    Args:
      reference: the trusted run (usually torch's): a list of steps
        ``{"params": {...}, "output": ..., "grads": {...}}`` (params *before* the
        step, the forward's output or loss, the gradients), then the params after the
        last step as a final ``{"params": ...}`` entry.
      port: the run under test, recorded the same way.
      reference64: the reference run recorded in float64 the same way (module
        docstring), calibrating the float32 verdicts; None: the tier alone.

    Returns:
      A ``DriftReport``: the step, and whether the forward, the gradient or the
      optimizer update made the params leave the tier (module docstring).

    Raises:
      ValueError: runs of different lengths, or params whose names differ.
    """
    if len(reference) != len(port) or (
        reference64 is not None and len(reference64) != len(reference)
    ):
        raise ValueError(
            f"training_drift: runs of different lengths: reference "
            f"{len(reference)} entries, port {len(port)}"
            + ("" if reference64 is None else f", reference64 {len(reference64)}")
            + "."
        )
    for i, (r, p) in enumerate(zip(reference, port)):
        if set(r["params"]) != set(p["params"]):
            raise ValueError(
                f"training_drift: entry {i}: param names differ: reference only "
                f"{sorted(set(r['params']) - set(p['params']))}, port only "
                f"{sorted(set(p['params']) - set(r['params']))}."
            )
    errors = [error(_items(r["params"]), _items(p["params"])) for r, p in zip(reference, port)]
    exact = reference64 or [None] * len(reference)

    def same(r, p, r64, field, items=_items):
        answer = None if r64 is None or field not in r64 else items(r64[field])
        return within_tier(items(r[field]), items(p[field]), reference64=answer)

    for k in range(len(reference) - 1):
        r, p = reference[k], port[k]
        if not same(r, p, exact[k], "params"):
            return DriftReport(k, _cause(r, p, exact[k]), errors)  # differ before any step
        if not same(reference[k + 1], port[k + 1], exact[k + 1], "params"):
            return DriftReport(k, _cause(r, p, exact[k]), errors)
    return DriftReport(None, None, errors)


def _cause(r, p, r64=None) -> str:
    def answer(field, items=_items):
        return None if r64 is None or field not in r64 else items(r64[field])

    if "output" in r and not within_tier(
        r["output"], p["output"], reference64=answer("output", lambda v: v)
    ):
        return "forward"
    if "grads" in r and not within_tier(
        _items(r["grads"]), _items(p["grads"]), reference64=answer("grads")
    ):
        return "gradient"
    return "update"
