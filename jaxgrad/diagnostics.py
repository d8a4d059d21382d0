"""Per-layer gradient norms, vanishing / exploding verdicts, dead ReLU units.

Contract: gradients are the flat dict of jaxgrad's parameter contract — torch
``state_dict()`` keys such as ``"0.weight"``, ``"4.bias"``, ``"1.0.weight"`` —
holding jax arrays, numpy arrays or (duck-typed) torch tensors. A *layer* is the
module prefix of a key (everything before the last dot); layers come out in the
model's order, numeric components compared as numbers (``"2"`` before ``"10"``).
Norms are Frobenius norms accumulated in float64 and returned as Python floats, so
the same gradient gives the same norm whichever framework produced it. The twin
over a torch module's ``named_parameters()`` is ``torchref.diagnostics``.

The verdict follows the lessons (000: "the last layer's gradient is 4 times the
first layer's with ReLU; 33,585 times with sigmoid"): the ratio last/first of the
weight-gradient norms is ≥ ``threshold`` → ``"vanishing"`` (the signal fades on its
way back to the first layer), ≤ 1/``threshold`` → ``"exploding"`` (it grows on the
way back), otherwise ``"healthy"``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxgrad._arrays import to_numpy

DEFAULT_THRESHOLD = 100.0


def layer_order_key(name: str) -> tuple:
    """Sort key putting ``"2"`` before ``"10"`` and ``"1.0"`` before ``"1.1"``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split("."))


def split_key(key: str) -> tuple[str, str]:
    """``"4.0.weight"`` → ``("4.0", "weight")``; a key without a dot is layer ``""``."""
    layer, _, param = key.rpartition(".")
    return layer, param


def norm64(value: Any) -> float:
    """The Frobenius norm of any array, accumulated in float64."""
    array = to_numpy(value)
    return float(np.linalg.norm(np.asarray(array, dtype=np.float64).ravel()))


def layer_grad_norms(grads: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Gradient norms grouped by layer, in layer order.

    Args:
      grads: flat ``{"0.weight": array, "0.bias": array, ...}``; a ``None`` leaf (a
        frozen parameter, torch's ``.grad is None``) is skipped.

    Returns:
      ``{"0": {"weight": 0.12, "bias": 0.03}, "2": {...}, ...}``.
    """
    if not isinstance(grads, Mapping):
        raise TypeError(
            f"`grads` is a {type(grads).__name__}; expected a flat mapping from parameter "
            "names such as '0.weight' to arrays."
        )
    grouped: dict[str, dict[str, float]] = {}
    for key in sorted(grads, key=lambda k: layer_order_key(split_key(k)[0])):
        if grads[key] is None:
            continue
        layer, param = split_key(key)
        grouped.setdefault(layer, {})[param] = norm64(grads[key])
    return grouped


@dataclasses.dataclass(frozen=True)
class GradientReport:
    """What ``gradient_report`` found.

    Attributes:
      norms: ``{layer: norm}`` of the ``param`` gradient, in layer order.
      param: which parameter was compared (``"weight"``).
      first, last: the first and last layer's norms.
      ratio: ``last / first``; ``inf`` when only the first is zero, ``0.0`` when only
        the last is, ``None`` when both are (never NaN).
      verdict: ``"vanishing"``, ``"exploding"``, ``"healthy"``, ``"no gradient"``
        (all zero) or ``"non-finite"`` (a NaN or inf norm).
      zero_layers: layers whose gradient is exactly zero.
      nonfinite_layers: layers with a NaN or infinite norm.
      threshold: the ratio beyond which the verdict is vanishing / exploding.
    """

    norms: dict
    param: str
    first: float
    last: float
    ratio: float | None
    verdict: str
    zero_layers: tuple
    nonfinite_layers: tuple
    threshold: float

    def table(self) -> str:
        lines = [f"{'layer':>8}  {self.param} grad norm"]
        lines += [f"{layer:>8}  {norm:.3e}" for layer, norm in self.norms.items()]
        ratio = "undefined (both zero)" if self.ratio is None else f"{self.ratio:,.4g}"
        lines.append(f"last/first = {ratio} -> {self.verdict}")
        if self.zero_layers:
            lines.append(f"zero gradient in layers: {', '.join(self.zero_layers)}")
        return "\n".join(lines)


def report_from_norms(
    norms: Mapping[str, float], *, param: str = "weight", threshold: float = DEFAULT_THRESHOLD
) -> GradientReport:
    """The verdict for per-layer norms ``{layer: norm}`` given in layer order."""
    if not norms:
        raise ValueError(f"no layer has a `{param}` gradient; nothing to report.")
    if not threshold > 1.0:
        raise ValueError(f"`threshold` (={threshold}) must be greater than 1.")
    norms = dict(norms)
    values = list(norms.values())
    first, last = values[0], values[-1]
    zero = tuple(layer for layer, norm in norms.items() if norm == 0.0)
    nonfinite = tuple(layer for layer, norm in norms.items() if not math.isfinite(norm))
    if nonfinite:
        ratio = last / first if first and math.isfinite(first) and math.isfinite(last) else None
        verdict = "non-finite"
    elif first == 0.0 and last == 0.0:
        ratio, verdict = None, "no gradient"
    elif first == 0.0:
        ratio, verdict = math.inf, "vanishing"
    else:
        ratio = last / first
        if ratio >= threshold:
            verdict = "vanishing"
        elif ratio <= 1.0 / threshold:
            verdict = "exploding"
        else:
            verdict = "healthy"
    return GradientReport(norms, param, first, last, ratio, verdict, zero, nonfinite, threshold)


def gradient_report(
    grads: Mapping[str, Any], *, param: str = "weight", threshold: float = DEFAULT_THRESHOLD
) -> GradientReport:
    """Compare the first and last layer's ``param`` gradient norms.

    Args:
      grads: flat gradient dict (see ``layer_grad_norms``).
      param: the parameter compared in each layer that has one (``"weight"``).
      threshold: ratio ≥ threshold is vanishing, ≤ 1/threshold exploding.
    """
    per_layer = layer_grad_norms(grads)
    norms = {layer: p[param] for layer, p in per_layer.items() if param in p}
    return report_from_norms(norms, param=param, threshold=threshold)


def dead_fraction(activation: Any) -> float:
    """Fraction of units of `(batch, units...)` never positive on any example."""
    array = np.asarray(to_numpy(activation), dtype=np.float64)
    if array.ndim < 2:
        raise ValueError(
            f"`activations` has shape {array.shape}; expected `(batch, units...)`, batch first."
        )
    alive = (array > 0).any(axis=0)
    return float(1.0 - alive.mean())


def dead_units(activations: Any):
    """Fraction of ReLU units never active (output > 0) on a batch.

    Args:
      activations: one `(batch, units)` array, or a mapping / sequence of them (one per
        layer, e.g. from ``relu_activations``).

    Returns:
      a float, or a dict / list of floats matching the input's structure.
    """
    if isinstance(activations, Mapping):
        return {name: dead_fraction(value) for name, value in activations.items()}
    if isinstance(activations, (list, tuple)):
        return [dead_fraction(value) for value in activations]
    return dead_fraction(activations)


def relu_activations(model, params, x) -> dict:
    """``{child_name: output}`` of every ``ReLU`` child of a ``Sequential``.

    Args:
      model: a ``jaxgrad.nn.Sequential``.
      x: `(batch, in_features)` input.
    """
    outputs = model.intermediates(params, x)
    return {
        name: out
        for name, layer, out in zip(model.names, model.layers, outputs)
        if type(layer).__name__ == "ReLU"
    }
