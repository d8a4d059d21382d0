"""The doctor's report: per-layer errors, ranked causes, a verdict in words.

``Report.first_layer`` is the torch module path of the first layer whose own
(input-injected) error exceeds the tier (``""`` for the module itself, a one-layer
model), None for a clean port; ``layers`` holds one dict per layer call: ``path``,
``index`` (the call number), ``class_name``, ``end_to_end`` and ``injected`` (the
largest absolute errors in both modes), ``exceeds`` (the injected error leaves the
tier), ``rule`` (for a float32 module judged against torch's float64 run: the rules
other than the tier that passed the layer's leaves, with their headrooms; ``""`` when
the tier alone passed it), and ``end_to_end_comparison`` / ``injected_comparison``, the per-leaf
``jaxgrad.parity.ParityReport.to_dict()`` behind each (outputs ``out``, ``out.0``…,
updated buffers ``buffer.NAME`` in training mode); ``causes`` the catalogue entries that bring that
layer's error down, best first. ``str(report)`` is what ``scripts/doctor.py`` prints.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxgrad.parity import CALIBRATION_MULTIPLE, RULE_FLOAT64, RULE_ROUNDING, RULE_ZERO, TOLERANCES


@dataclasses.dataclass
class Cause:
    """One catalogue convention that changes the first diverging layer's error.

    Attributes:
      name: the ``Convention``'s name.
      description: what the convention is.
      detail: what the port does and what torch does, for this layer.
      error_before: the layer's own max error as ported.
      error_after: its max error with the convention undone (torch's way).
      explains: the transformed layer is within the tier.
      signature: the measured size and pattern of the error the convention leaves.
    """

    name: str
    description: str
    detail: str  # what the port does and what torch does, for this layer
    error_before: float
    error_after: float
    explains: bool  # the transformed layer is within the tier
    signature: str


def _calibrated(rules: str) -> bool:
    """Whether a row's ``rule`` text names a rule of the float64 calibration (not only
    integers compared by value)."""
    return any(rule in rules for rule in (RULE_FLOAT64, RULE_ROUNDING, RULE_ZERO))


def _e(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return "inf" if math.isinf(value) else f"{value:.2g}"


@dataclasses.dataclass
class Report:
    """What ``diagnose`` found; ``str(report)`` is what ``scripts/doctor.py`` prints
    (module docstring: the fields of each ``layers`` entry).

    Attributes:
      model: the torch module's class name.
      first_layer: the torch module path of the first layer whose own
        (input-injected) error exceeds the tier (``""`` for a one-layer model); None
        for a clean port.
      layers: one dict per layer call: ``path``, ``index``, ``class_name``,
        ``end_to_end``, ``injected``, ``exceeds`` and the per-leaf comparisons behind
        them.
      causes: the ``Cause``s that bring that layer's error down, best first.
      output_error: the largest absolute error of the model's output.
      output_within_tier: whether the output is within the tier.
      dtype: the dtype whose tier judges the port (``"float32"``, ``"float64"``).
      train: compared in training mode.
      pattern: where in the layer's output the error sits, in words (or None).
      glue: when no layer is over the tier but the output is, the layer before which
        the forward code makes the error (``"<output>"``: after the last layer).
      note: a remark replacing the layer analysis (a captured program's region, a
        port that cannot be traced).
      params: for a traced port (any port that is not a jaxgrad or stock nnx model):
        where each torch parameter was found among the port's leaves, one line each
        (``"0.weight -> fc1.kernel (transposed)"``); None otherwise.
      unused: the port's leaves in which no torch parameter was found.
      unmatched: ``[(torch module path, why), ...]``: the modules the doctor could not
        pair with the port (parameters not found or ambiguous, no value of the size).
      port_kind: ``"nnx module"``, ``"pytree module"``, ``"function"``, ``"closure"``
        for a traced port; None for a jaxgrad or stock nnx model.
      values: how many of the port's values were recorded (a traced port).
      calibrated: the torch module is float32 and its float64 run calibrated the
        verdicts (``jaxgrad.doctor.calibrate``; ``jaxgrad.parity.compare``'s
        ``reference64``).
      output_rule: the rules other than the tier that passed the output's leaves, in
        words (``""``: the tier, or the output failed).
    """

    model: str
    first_layer: str | None
    layers: list
    causes: list
    output_error: float
    output_within_tier: bool
    dtype: str
    train: bool
    pattern: str | None = None
    glue: str | None = None
    note: str | None = None
    params: list | None = None
    unused: list = dataclasses.field(default_factory=list)
    unmatched: list = dataclasses.field(default_factory=list)
    port_kind: str | None = None
    values: int = 0
    calibrated: bool = False
    output_rule: str = ""

    @property
    def clean(self) -> bool:
        return self.first_layer is None and self.output_within_tier

    @property
    def verdict(self) -> str:
        if self.clean:
            calibrated = [
                r["path"] or "(the module)" for r in self.layers if _calibrated(r.get("rule", ""))
            ] + (["the output"] if _calibrated(self.output_rule) else [])
            if calibrated:  # torch's own float32 rounding put these outside the tier
                return (
                    f"clean bill: every layer and the output are within the {self.dtype} "
                    f"tier, or as close to torch's float64 run as torch's own float32 "
                    f"({', '.join(calibrated)}: calibrated; output max error "
                    f"{_e(self.output_error)})" + (f"; {self.note}." if self.note else ".")
                )
            return (
                f"clean bill: every layer and the output are within the {self.dtype} tier "
                f"(output max error {_e(self.output_error)})"
                + (f"; {self.note}." if self.note else ".")
            )
        if self.first_layer is None:
            if self.note:
                return f"the output differs (max error {_e(self.output_error)}); {self.note}."
            where = (
                "after the last layer"
                if self.glue == "<output>"
                else f"in the forward code before layer `{self.glue}`"
            )
            text = (
                f"no layer's own error exceeds the tier, but the output differs (max "
                f"error {_e(self.output_error)}): the error is made between layers, {where}"
            )
            if self.causes and self.causes[0].explains:
                c = self.causes[0]
                return (
                    f"{text}: {c.detail}; reordered, the input's max error falls from "
                    f"{_e(c.error_before)} to {_e(c.error_after)} [{c.name}]."
                )
            return text + " (a flatten order, a residual add, a reshape)."
        row = next(r for r in self.layers if r["path"] == self.first_layer)
        head = (
            f"layer `{self.first_layer}` ({row['class_name']})"
            if self.first_layer
            else f"the module itself ({row['class_name']}, path '')"
        )
        if self.causes and self.causes[0].explains:
            c = self.causes[0]
            return (
                f"{head}: {c.detail}; undoing it, the layer's max error falls from "
                f"{_e(c.error_before)} to {_e(c.error_after)} [{c.name}]."
            )
        if self.note:  # e.g. a captured program's region: ATen ops, no layer to vary
            text = f"{head}: own max error {_e(row['injected'])}; {self.note}"
            return text + (f". Where the error sits: {self.pattern}." if self.pattern else ".")
        text = f"{head}: own max error {_e(row['injected'])}; nothing in the catalogue explains it"
        if self.causes:
            c = self.causes[0]
            text += f" (best: {c.name}, {_e(c.error_before)} -> {_e(c.error_after)})"
        return text + (f". Where the error sits: {self.pattern}." if self.pattern else ".")

    @property
    def heading(self) -> str:
        """The model, the tier it is judged at and the mode, in one line."""
        tier = TOLERANCES.get(self.dtype)
        rtol, atol = (tier.rtol, tier.atol) if tier is not None else (0, 0)  # atol unscaled
        calibrated = (
            f", or within {CALIBRATION_MULTIPLE:g}x torch float32's own distance "
            "from torch's float64 run (calibrated)"
            if self.calibrated
            else ""
        )
        return (
            f"{self.model}: {self.dtype} tier (rtol {rtol:g}, atol {atol:g}"
            f"{' x max|ref|' if self.dtype == 'float32' else ''}{calibrated}), "
            f"{'train' if self.train else 'eval'} mode"
        )

    def __str__(self) -> str:
        lines = [self.heading]
        traced = self.port_kind is not None
        if traced:
            found = sum(1 for p in self.params or () if "not found" not in p)
            lines.append(
                f"port: a {self.port_kind}, traced ({self.values} values recorded); "
                f"{found} of {len(self.params or ())} torch parameters and buffers "
                "found in it by value:"
            )
            lines += [f"  {p}" for p in self.params or ()]
            if self.unused:
                lines.append(f"  port leaves holding no torch parameter: {', '.join(self.unused)}")
        if self.layers:
            width = max(len(r["path"]) + (4 if r["index"] else 0) for r in self.layers)
            width = max(width, 5)
            lines.append(
                f"  {'layer':<{width}}  {'class':<20} {'end-to-end':>10} {'own':>10}"
                + ("  port value" if traced else "")
            )
            for r in self.layers:
                name = r["path"] + (f" #{r['index']}" if r["index"] else "")
                mark = (
                    "  <- first over the tier"
                    if r["path"] == self.first_layer
                    and r["exceeds"]
                    and not any(x["exceeds"] for x in self.layers[: self.layers.index(r)])
                    else ("  (over)" if r["exceeds"] else "")
                )
                port = f"  {r['port']}" if traced else ""
                rule = f"  [passed by {r['rule']}]" if r.get("rule") and not r["exceeds"] else ""
                lines.append(
                    f"  {name:<{width}}  {r['class_name']:<20} "
                    f"{_e(r['end_to_end']):>10} {_e(r['injected']):>10}{port}{mark}"
                    f"{rule}"
                )
        for path, why in self.unmatched:
            lines.append(f"could not match `{path or '(the module)'}`: {why}")
        lines.append(
            f"output max error: {_e(self.output_error)}"
            + (f" [passed by {self.output_rule}]" if self.output_rule else "")
        )
        if self.causes:
            lines.append("ranked causes (the layer's max error with the convention undone):")
            for i, c in enumerate(self.causes, 1):
                lines.append(
                    f"  {i}. {c.name}: {_e(c.error_before)} -> {_e(c.error_after)}"
                    f"{'  (within the tier)' if c.explains else ''} - {c.detail}"
                )
            lines.append(f"  signature of {self.causes[0].name}: {self.causes[0].signature}")
        lines.append("verdict: " + self.verdict)
        return "\n".join(lines)


def pattern_of(reference, candidate) -> str:
    """Where an output's error sits, in words: borders, one channel, some rows."""
    ref = reference[0] if isinstance(reference, (tuple, list)) else reference
    cand = candidate[0] if isinstance(candidate, (tuple, list)) else candidate
    ref, cand = np.asarray(ref, np.float64), np.asarray(cand, np.float64)
    if ref.shape != cand.shape:
        return f"the shapes differ: torch {ref.shape}, port {cand.shape}"
    diff = np.abs(np.nan_to_num(ref - cand, nan=np.inf))
    total = float(diff.max()) if diff.size else 0.0
    if total == 0:
        return "nowhere in the output (the buffers differ)"
    big = diff > 1e-3 * total
    parts = []
    if ref.ndim >= 3:
        per_channel = big.any(axis=tuple(i for i in range(ref.ndim) if i != 1))
        if per_channel.sum() < per_channel.size:
            parts.append(f"channels {np.flatnonzero(per_channel).tolist()} of {per_channel.size}")
    if ref.ndim == 4 and min(ref.shape[2:]) > 2:
        interior = big[:, :, 1:-1, 1:-1]
        if not interior.any():
            parts.append("only on the border rows and columns")
    if ref.ndim >= 2 and not parts:
        rows = big.reshape(-1, ref.shape[-1]).any(axis=1)
        if rows.sum() < rows.size:
            parts.append(
                f"rows {np.flatnonzero(rows).tolist()[:12]} of {rows.size} "
                "(flattened over the leading axes)"
            )
        cols = big.reshape(-1, ref.shape[-1]).any(axis=0)
        if cols.sum() < cols.size:
            parts.append(f"last-axis positions {np.flatnonzero(cols).tolist()[:12]} of {cols.size}")
    return "; ".join(parts) if parts else f"everywhere (max {total:.2g})"
