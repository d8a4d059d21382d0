"""Training drift: the first step where two runs' parameters leave the tier, and why.

``training_drift(reference, port)`` takes two recorded runs, each a list of steps
``{"params": {...}, "output": ..., "grads": {...}}`` (params *before* the step, the
forward's output or loss, the gradients), plus the params after the last step as a
final ``{"params": ...}`` entry. At the first step ``k`` whose params after the step
(``params`` of entry ``k+1``) leave the tier while the params before it were within,
the cause is the first of: the forward (``output`` differs), the gradient (``grads``
differ), else the update (same gradients, different new params: the optimizer).
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
            what = {"forward": "the forward pass (the outputs differ from identical params)",
                    "gradient": "the gradient (same outputs, different gradients)",
                    "update": "the optimizer update (same gradients, different new params: "
                              "run diagnose_optimizer)"}[self.cause]
            lines.append(f"verdict: the params leave the tier after step {self.step}; "
                         f"caused by {what}.")
        return "\n".join(lines)


def _items(tree):
    return [tree[k] for k in sorted(tree)] if isinstance(tree, dict) else tree


def training_drift(reference: list, port: list) -> DriftReport:
    """The first step where two recorded runs' parameters leave the tier, and why.

    Args:
      reference: the trusted run (usually torch's): a list of steps
        ``{"params": {...}, "output": ..., "grads": {...}}`` (params *before* the
        step, the forward's output or loss, the gradients), then the params after the
        last step as a final ``{"params": ...}`` entry.
      port: the run under test, recorded the same way.

    Returns:
      A ``DriftReport``: the step, and whether the forward, the gradient or the
      optimizer update made the params leave the tier (module docstring).

    Raises:
      ValueError: runs of different lengths, or params whose names differ.
    """
    if len(reference) != len(port):
        raise ValueError(f"training_drift: runs of different lengths: reference "
                         f"{len(reference)} entries, port {len(port)}.")
    for i, (r, p) in enumerate(zip(reference, port)):
        if set(r["params"]) != set(p["params"]):
            raise ValueError(f"training_drift: entry {i}: param names differ: reference only "
                             f"{sorted(set(r['params']) - set(p['params']))}, port only "
                             f"{sorted(set(p['params']) - set(r['params']))}.")
    errors = [error(_items(r["params"]), _items(p["params"])) for r, p in zip(reference, port)]
    for k in range(len(reference) - 1):
        r, p = reference[k], port[k]
        if not within_tier(_items(r["params"]), _items(p["params"])):
            return DriftReport(k, _cause(r, p), errors)  # differ before any step
        nxt_r, nxt_p = reference[k + 1], port[k + 1]
        if not within_tier(_items(nxt_r["params"]), _items(nxt_p["params"])):
            return DriftReport(k, _cause(r, p), errors)
    return DriftReport(None, None, errors)


def _cause(r, p) -> str:
    if "output" in r and not within_tier(r["output"], p["output"]):
        return "forward"
    if "grads" in r and not within_tier(_items(r["grads"]), _items(p["grads"])):
        return "gradient"
    return "update"
